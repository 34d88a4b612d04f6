/**
 * Fakes for the health checker's unit tests: a clock whose time moves only when the test says,
 * and a probe whose answers the test sets (test/unit/health-checker.test.ts, health-failopen-checker.test.ts).
 */
import type { Clock } from '../../src/health/checker.js';
import type { ProbeResult, ProbeTarget } from '../../src/health/probe.js';
import { formatHostPort as formatAddress } from '../../src/net/hostport.js';

export const T0 = Date.UTC(2025, 0, 1);

/** A clock whose time moves only when the test says; timers run in time order, ties in creation order. */
export class FakeClock implements Clock {
  t = T0;
  #seq = 0;
  #timers = new Map<number, { at: number; seq: number; fn: () => void }>();
  /**
   * @param earlyMs every timer fires this many ms before its time (at least 1 ms after it was
   *   armed), as Node's may by Date.now (they run on the monotonic clock); 0: on time
   */
  constructor(readonly earlyMs = 0) {}
  now(): number {
    return this.t;
  }
  setTimeout(fn: () => void, ms: number): unknown {
    const id = ++this.#seq;
    // early by earlyMs, but never sooner than 1 ms after it was armed (Node's least delay)
    const wait = Math.max(0, ms);
    this.#timers.set(id, { at: this.t + Math.max(Math.min(wait, 1), wait - this.earlyMs), seq: id, fn });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.#timers.delete(handle as number);
  }
  get pending(): number {
    return this.#timers.size;
  }
  /** Moves time forward by `ms`, running every timer that falls due, and the promise callbacks they cause. */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    await flush();
    for (;;) {
      let next: [number, { at: number; seq: number; fn: () => void }] | undefined;
      for (const entry of this.#timers) {
        if (entry[1].at > end) continue;
        if (next === undefined || entry[1].at < next[1].at || (entry[1].at === next[1].at && entry[1].seq < next[1].seq)) next = entry;
      }
      if (next === undefined) break;
      this.#timers.delete(next[0]);
      this.t = next[1].at;
      next[1].fn();
      await flush();
    }
    this.t = end;
  }
}

/** Lets every pending promise callback run. */
export const flush = (): Promise<void> => new Promise((r) => setImmediate(r));

interface Call {
  address: string;
  start: number;
  end?: number;
  signal: AbortSignal | undefined;
}

/**
 * A fake probe: each backend answers what `behavior` says (changeable during the test), after
 * `latencyMs` of fake time. Records every call and the highest concurrency per backend.
 */
export class FakeProbe {
  behavior = new Map<string, ProbeResult>();
  latencyMs = 5;
  calls: Call[] = [];
  running = new Map<string, number>();
  maxRunning = new Map<string, number>();
  constructor(private readonly clock: FakeClock) {}
  set(address: string, r: 'pass' | 'fail' | ProbeResult): void {
    this.behavior.set(
      address,
      r === 'pass'
        ? { ok: true, status: 200, cause: { kind: 'http', status: 200 }, latencyMs: this.latencyMs }
        : r === 'fail'
          ? { ok: false, status: 500, cause: { kind: 'http', status: 500 }, error: 'http 500', latencyMs: this.latencyMs }
          : r,
    );
  }
  probe = (target: ProbeTarget, signal?: AbortSignal): Promise<ProbeResult> => {
    const address = formatAddress(target);
    const call: Call = { address, start: this.clock.now(), signal };
    this.calls.push(call);
    const n = (this.running.get(address) ?? 0) + 1;
    this.running.set(address, n);
    this.maxRunning.set(address, Math.max(n, this.maxRunning.get(address) ?? 0));
    return new Promise((resolve) => {
      const done = (r: ProbeResult): void => {
        this.running.set(address, (this.running.get(address) ?? 1) - 1);
        call.end = this.clock.now();
        resolve(r);
      };
      const timer = this.clock.setTimeout(
        () => done(this.behavior.get(address) ?? { ok: true, status: 200, cause: { kind: 'http', status: 200 }, latencyMs: this.latencyMs }),
        this.latencyMs,
      );
      signal?.addEventListener('abort', () => {
        this.clock.clearTimeout(timer);
        done({ ok: false, cause: { kind: 'aborted' }, error: 'aborted', latencyMs: 0 });
      });
    });
  };
  startsOf(address: string): number[] {
    return this.calls.filter((c) => c.address === address).map((c) => c.start - T0);
  }
}
