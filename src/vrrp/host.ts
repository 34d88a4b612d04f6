/**
 * The agent's handle on the election engine (engine.ts), which runs on the main thread: starts
 * it, asks it for status, passes priority changes and reconfigurations, and stops it.
 *
 * What keeps the election punctual while this thread is busy (a GC pause, a long synchronous
 * task, a starved CPU) is not a thread of JavaScript but the VRRP socket's advert pacer
 * (native/advert_pacer.h): a native thread that sends an Active router's adverts whenever the
 * engine has not for Advertisement_Interval plus 5 % (at least 3 ms), up to the hold time (pacing.ts
 * PACER_HOLD_MS). A Backup's Master_Down_Timer that fires late reads the adverts already
 * waiting in the socket before it acts (engine.ts tick), so a stall only delays a takeover.
 * An election worker thread did this before at the cost of a second V8 isolate (10–15 MiB of
 * RSS, docs/performance.md).
 */
import { constants as perfConstants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import {
  VrrpEngine,
  type EngineEvent,
  type EngineGcStats,
  type EngineOptions,
  type EngineReconfigure,
  type EngineStatus,
  type HandOffResult,
} from './engine.js';

/** The engine could not start; `code`/`syscall` come from the failing call (errno name). */
export class EngineStartError extends Error {
  constructor(
    message: string,
    readonly code?: string,
    readonly syscall?: string,
  ) {
    super(message);
    this.name = 'EngineStartError';
  }
}

/** The longest GC pause per kind (perf_hooks constants NODE_PERFORMANCE_GC_*). */
const GC_KINDS: Record<number, string> = {
  [perfConstants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [perfConstants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [perfConstants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [perfConstants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};
const ms3 = (ms: number): number => Math.round(ms * 1000) / 1000;

/**
 * This thread's GC pauses while an election runs, for /status `timing.gc` (a pause delays the
 * engine like a lost CPU; the pacer covers an Active's adverts meanwhile).
 */
class GcPauses {
  private count = 0;
  private maxMs = 0;
  private totalMs = 0;
  private readonly maxByKind: Record<string, number> = {};
  private readonly observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      this.count++;
      this.totalMs += e.duration;
      if (e.duration > this.maxMs) this.maxMs = e.duration;
      const kind = GC_KINDS[(e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind ?? -1] ?? 'other';
      if (e.duration > (this.maxByKind[kind] ?? -1)) this.maxByKind[kind] = e.duration;
    }
  });

  constructor() {
    this.observer.observe({ entryTypes: ['gc'] });
  }

  stats(): EngineGcStats {
    return {
      count: this.count,
      maxMs: ms3(this.maxMs),
      totalMs: ms3(this.totalMs),
      maxMsByKind: Object.fromEntries(Object.entries(this.maxByKind).map(([k, v]) => [k, ms3(v)])),
    };
  }

  close(): void {
    this.observer.disconnect();
  }
}

/**
 * How far past its deadline the engine's timer may be before the watchdog's gate fails, ms. On a
 * thread that runs, the timer fires within milliseconds of it (the gate looks after the loop ran
 * its expired timers: see {@link VrrpHost.alive}).
 */
export const OVERDUE_LIMIT_MS = 1000;

/** A running election. */
export class VrrpHost {
  private stopping: Promise<void> | null = null;

  /**
   * A process that exits without stop() (process.exit at a stop's deadline, a fatal error):
   * the sockets close first, so that the pacer's thread has ended before the runtime's own
   * exit handlers (OpenSSL's among them) run.
   */
  private readonly onExit = (): void => this.engine.closeSockets();

  private constructor(
    private readonly engine: VrrpEngine,
    private readonly gc: GcPauses,
    /** Called for transitions and log events, and with `crash` if a call into the engine threw. */
    private readonly onEvent: (ev: EngineEvent | { type: 'crash'; error: Error }) => void,
  ) {}

  /**
   * Starts the engine and waits until it has joined the group. Its events reach `onEvent` each
   * in a microtask of its own, in order, never from inside the engine's own processing (a
   * handler may call back into the host).
   * @throws EngineStartError when the engine cannot open its sockets or start its pacer.
   */
  static async start(opts: EngineOptions, onEvent: (ev: EngineEvent | { type: 'crash'; error: Error }) => void): Promise<VrrpHost> {
    const gc = new GcPauses();
    // an exception the engine caught in its own processing is the election's crash
    const deliver = (ev: EngineEvent): void => queueMicrotask(() => onEvent(ev.type === 'failed' ? { type: 'crash', error: ev.error } : ev));
    try {
      const engine = await VrrpEngine.start(opts, deliver, { gcStats: () => gc.stats() });
      const host = new VrrpHost(engine, gc, onEvent);
      process.once('exit', host.onExit);
      return host;
    } catch (err) {
      gc.close();
      const e = err as Error & { code?: string; syscall?: string };
      throw new EngineStartError(e.message, e.code, e.syscall);
    }
  }

  /** The engine's status, at once (a Promise, as the agent's other status sources are). */
  status(): Promise<EngineStatus> {
    return Promise.resolve(this.engine.status());
  }

  /**
   * The watchdog's gate (observe/notify.ts): resolves while the engine's timers run, its next
   * deadline at most {@link OVERDUE_LIMIT_MS} past; rejects with an Error saying how late it is
   * otherwise (a broken timer chain: the agent should be restarted). It looks in the loop's check
   * phase (setImmediate), after the timers phase has run every expired timer: when a stall ends,
   * the watchdog's timer may come before the engine's, both late, and the engine's must have run.
   */
  alive(): Promise<void> {
    return new Promise((resolve, reject) => {
      setImmediate(() => {
        const late = this.engine.overdueMs();
        if (late <= OVERDUE_LIMIT_MS) resolve();
        else reject(new Error(`the election's timer is ${Math.round(late)} ms past its deadline`));
      });
    });
  }

  /** Sets the advertised priority (1..254). */
  setPriority(priority: number): void {
    this.call(() => this.engine.setPriority(priority));
  }

  /**
   * Changes the running election (see engine-api.ts `EngineReconfigure`: VIPs added or removed
   * individually, priority, interval and preempt settings from the next advert, unicast peers,
   * acceptFrom members, announce and lifetime settings). Resolves once the engine applied it
   * (the address changes done); rejects with an Error saying why when the patch cannot apply
   * (then nothing changed), when the election is stopped, or when it does not finish within
   * `timeoutMs` (ms).
   */
  reconfigure(patch: EngineReconfigure, timeoutMs = 5000): Promise<void> {
    if (this.stopping) return Promise.reject(new Error('the election is stopped'));
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('the election did not finish the reconfigure in time')), timeoutMs);
      this.engine.reconfigure(patch).then(
        () => {
          clearTimeout(t);
          resolve();
        },
        (err: unknown) => {
          clearTimeout(t);
          reject(new Error(`cannot reconfigure the election: ${(err as Error).message}`));
        },
      );
    });
  }

  /** Holds or releases preemption (policy: not before this node can serve). */
  setPreemptHold(hold: boolean): void {
    this.call(() => this.engine.setPreemptHold(hold));
  }

  /**
   * Shuts the engine down (priority 0 if Active, VIPs removed, sockets and the pacer closed);
   * resolves when done or after `timeoutMs` (ms), whichever comes first. Idempotent.
   */
  stop(timeoutMs = 3000): Promise<void> {
    this.stopping ??= new Promise<void>((resolve) => {
      const t = setTimeout(resolve, timeoutMs);
      void this.engine.stop().finally(() => {
        clearTimeout(t);
        this.gc.close();
        process.removeListener('exit', this.onExit);
        resolve();
      });
    });
    return this.stopping;
  }

  /**
   * Stops for a restart in place (engine.ts {@link VrrpEngine.handOff}): an Active router keeps
   * its VIPs and tells the Backups to wait up to `holdMs` (ms) for the next process. Resolves
   * with what was done, or a plain stop's result (`active: false`) when the engine was already
   * stopping or did not finish within `timeoutMs` (ms). Idempotent with {@link stop}.
   */
  handOff(holdMs: number, timeoutMs = 3000): Promise<HandOffResult> {
    const none: HandOffResult = { active: false, intervalCs: 0, masterDownBoundMs: 0, vipLifetimeMs: 0 };
    if (this.stopping) return this.stopping.then(() => none);
    let result = none;
    this.stopping = new Promise<void>((resolve) => {
      const t = setTimeout(resolve, timeoutMs);
      void this.engine
        .handOff(holdMs)
        .then(
          (r) => (result = r),
          () => undefined,
        )
        .finally(() => {
          clearTimeout(t);
          this.gc.close();
          process.removeListener('exit', this.onExit);
          resolve();
        });
    });
    return this.stopping.then(() => result);
  }

  /** One call into the engine; a throw is the election's crash (the agent unwinds and exits). */
  private call(f: () => void): void {
    if (this.stopping) return;
    try {
      f();
    } catch (err) {
      this.onEvent({ type: 'crash', error: err as Error });
    }
  }
}
