/**
 * Failures contained in the paths that only observe: the certificate report, /status and its
 * history, the metrics, the admin endpoint's answers, the health events' log lines, the memory
 * release. None of them may take the election down: an exception there used to reach a
 * microtask or an EventEmitter and end the process, VIPs and all (Node 20 lacked
 * X509Certificate.validToDate, and the certificate report killed the agent).
 *
 *   a throw in path P ──► counted (ballast_internal_errors_total{path="P"})
 *                    ──► logged at error, rate-limited per path (ratelimit.ts: the first, then one
 *                        line per window with the count)
 *                    ──► swallowed: the caller gets undefined and goes on
 *
 * It is a bug whenever it counts: the line carries the stack so that it can be reported.
 */
import { RateLimitedLog, type RateLimitOptions } from '../log/ratelimit.js';
import type { Log } from '../log/log.js';

/** The observer paths, one label value each of `ballast_internal_errors_total{path}`. */
export const INTERNAL_ERROR_PATHS = ['certificates', 'status', 'history', 'metrics', 'admin', 'health-events', 'election-events', 'memory-release'] as const;
export type InternalErrorPath = (typeof INTERNAL_ERROR_PATHS)[number];

/** The log message of a contained failure (stable: operators and tests grep for it). */
export const INTERNAL_ERROR_MSG = 'internal error in an observer, contained: the election goes on (a bug: please report it with the stack)';

/** Counts, logs and swallows the failures of observer paths (see the file comment). */
export class InternalErrors {
  readonly #counts = new Map<InternalErrorPath, number>();
  readonly #limited: RateLimitedLog;

  /** @param limit the rate limit's options (window, clock; tests). */
  constructor(log: Pick<Log, 'error'>, limit: RateLimitOptions = {}) {
    this.#limited = new RateLimitedLog((_level, fields, msg) => log.error(fields, msg), limit);
  }

  /**
   * Runs `fn` contained.
   * @returns what `fn` returns; undefined when it threw (the failure is counted and logged).
   */
  run<T>(path: InternalErrorPath, fn: () => T): T | undefined {
    try {
      return fn();
    } catch (err) {
      this.note(path, err);
      return undefined;
    }
  }

  /** `fn` as a listener that runs contained (for EventEmitter.on, timers, then-callbacks). */
  wrap<A extends unknown[]>(path: InternalErrorPath, fn: (...args: A) => void): (...args: A) => void {
    return (...args) => void this.run(path, () => fn(...args));
  }

  /** Counts and logs a failure caught elsewhere (a rejection). Never throws. */
  note(path: InternalErrorPath, err: unknown): void {
    this.#counts.set(path, (this.#counts.get(path) ?? 0) + 1);
    try {
      const e = err instanceof Error ? { err: err.message, stack: err.stack } : { err: String(err) };
      this.#limited.log('error', path, { path, ...e }, INTERNAL_ERROR_MSG);
    } catch {
      // the logger itself failed: the count is what is left
    }
  }

  /** Contained failures since the start, by path (only the paths that failed). */
  counts(): Partial<Record<InternalErrorPath, number>> {
    return Object.fromEntries(this.#counts);
  }

  /** Writes the pending repeat counts (at a stop). */
  close(): void {
    this.#limited.close();
  }
}
