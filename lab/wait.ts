/**
 * The one sleep and the one polling wait of the lab, the benchmarks and the tests
 * (test/support re-exports them). Every wait is bounded: there is no "wait forever".
 */
import { setTimeout as delay } from 'node:timers/promises';

/** Resolves after `ms` milliseconds (a timer; never rejects). */
export function sleep(ms: number): Promise<void> {
  return delay(ms);
}

/** Bounds of a {@link waitFor}. */
export interface WaitOptions {
  /** give up after this long (ms), counted from the call; the probe runs at least once */
  timeoutMs: number;
  /** pause between two probes (ms), default 50 */
  intervalMs?: number;
  /** what is awaited, for the timeout message (e.g. `n2 to hold 10.78.5.100`) */
  what?: string;
}

/** JSON of a probe value for a message; String() for what JSON cannot show (a bigint, a cycle). */
function show(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

type Truthy<T> = Exclude<T, undefined | null | false | 0 | ''>;

/**
 * Polls until a condition holds and resolves with the value that satisfied it.
 *
 * - `waitFor(predicate, opts)`: until `predicate()` returns a truthy value; resolves with it.
 * - `waitFor(probe, done, opts)`: until `done(probe())` holds; resolves with that probe value.
 *
 * Probes may be async; a probe that throws rejects the wait at once (no retry).
 * @throws Error "timed out after <timeoutMs> ms waiting for <what>; last: <json>" once
 *   `opts.timeoutMs` (ms) have passed without the condition holding.
 */
export function waitFor<T>(predicate: () => T | Promise<T>, opts: WaitOptions): Promise<Truthy<T>>;
export function waitFor<T>(probe: () => T | Promise<T>, done: (v: T) => boolean, opts: WaitOptions): Promise<T>;
export async function waitFor<T>(probe: () => T | Promise<T>, a: ((v: T) => boolean) | WaitOptions, b?: WaitOptions): Promise<T> {
  const done = typeof a === 'function' ? a : (v: T): boolean => Boolean(v);
  const o = typeof a === 'function' ? b : a;
  if (o === undefined) throw new TypeError('waitFor: options { timeoutMs } are required');
  const until = Date.now() + o.timeoutMs;
  for (;;) {
    const last = await probe();
    if (done(last)) return last;
    if (Date.now() > until) {
      throw new Error(`timed out after ${o.timeoutMs} ms waiting for ${o.what ?? 'a condition'}; last: ${show(last)}`);
    }
    await sleep(o.intervalMs ?? 50);
  }
}
