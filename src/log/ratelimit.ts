/**
 * Rate limits for log lines that can repeat per packet, per peer or per check (a send error to
 * 252 unreachable peers at a 10 ms interval is 25 000 lines a second). Per message key:
 *
 *   first occurrence ──► logged as is
 *   more within the window ──► counted, not logged
 *   the window ends ──► one line: the same message and fields (of the last occurrence) with
 *                       " (repeated N times in the last X s)", `repeated: N`, `repeatedOverS: X`
 *   a quiet window (nothing counted) ──► the key is forgotten: the next one is a first again
 *
 * So a key writes at most one line per window plus its first. The summary is written when the
 * window ends, by a timer (unref'd: it never keeps a process alive), or earlier by {@link
 * RateLimitedLog.close}, so a burst that stops is still reported with its count. It is not a
 * logger: lines go to the function given (pino's methods, or the engine's events).
 */
import { performance } from 'node:perf_hooks';
import type { Log } from './log.js';

/** The window of {@link RateLimitedLog} unless told otherwise, ms. */
export const LOG_REPEAT_WINDOW_MS = 10_000;
/** Keys remembered at most: past that a new key is logged without being remembered (a flood of distinct keys cannot grow memory). */
export const LOG_REPEAT_MAX_KEYS = 256;

/** The pino levels a rate-limited line can have. */
export type RateLimitedLevel = 'debug' | 'info' | 'warn' | 'error';

/** Where lines go: `(level, fields, msg)`, pino's argument order. */
export type LogSink = (level: RateLimitedLevel, fields: Record<string, unknown>, msg: string) => void;

/** Options of {@link RateLimitedLog}. */
export interface RateLimitOptions {
  /** The window, ms; default {@link LOG_REPEAT_WINDOW_MS}. */
  windowMs?: number;
  /** Monotonic clock, ms; default `performance.now`. */
  now?: () => number;
  /** Keys remembered at most; default {@link LOG_REPEAT_MAX_KEYS}. */
  maxKeys?: number;
  /** Whether a timer writes the summary when a window ends (default true); false: only {@link RateLimitedLog.flush} does. */
  timer?: boolean;
}

interface Entry {
  /** When the last line for this key was written, monotonic ms. */
  since: number;
  /** Occurrences counted (not logged) since then. */
  repeated: number;
  level: RateLimitedLevel;
  msg: string;
  fields: Record<string, unknown>;
}

/** The summary's text: `msg (repeated N times in the last X s)`, X rounded to 0.1 s. */
export function repeatedMessage(msg: string, repeated: number, overMs: number): string {
  return `${msg} (repeated ${repeated} time${repeated === 1 ? '' : 's'} in the last ${seconds(overMs)} s)`;
}

function seconds(ms: number): number {
  return Math.round(ms / 100) / 10;
}

/** Rate-limited lines per key, written to a {@link LogSink}. */
export class RateLimitedLog {
  readonly windowMs: number;
  readonly #sink: LogSink;
  readonly #now: () => number;
  readonly #maxKeys: number;
  readonly #useTimer: boolean;
  readonly #entries = new Map<string, Entry>();
  #timer: NodeJS.Timeout | null = null;
  #closed = false;

  /**
   * @param sink receives every line written (first occurrences and the window summaries).
   * @param opts window (ms), clock, key cap, timer.
   */
  constructor(sink: LogSink, opts: RateLimitOptions = {}) {
    this.#sink = sink;
    this.windowMs = opts.windowMs ?? LOG_REPEAT_WINDOW_MS;
    this.#now = opts.now ?? (() => performance.now());
    this.#maxKeys = opts.maxKeys ?? LOG_REPEAT_MAX_KEYS;
    this.#useTimer = opts.timer ?? true;
  }

  /**
   * One occurrence of `key`: written now (the first, or the first after a window ended: then
   * with the count of the ones left out), or counted.
   * @returns whether a line was written.
   */
  log(level: RateLimitedLevel, key: string, fields: Record<string, unknown>, msg: string): boolean {
    const now = this.#now();
    const e = this.#entries.get(key);
    if (e && now - e.since < this.windowMs) {
      e.repeated++;
      e.level = level;
      e.msg = msg;
      e.fields = fields;
      return false;
    }
    if (e && e.repeated > 0) {
      // the window ended as this one came (before its timer): the summary counts this one too
      Object.assign(e, { repeated: e.repeated + 1, level, msg, fields });
      this.#summary(e, now);
      Object.assign(e, { since: now, repeated: 0 });
      return true;
    }
    this.#write(level, fields, msg);
    if (e) Object.assign(e, { since: now, level, msg, fields });
    else this.#remember(key, now, level, msg, fields);
    return true;
  }

  /**
   * Writes the summary of every key whose window has ended (its window starts again) and
   * forgets the keys that were quiet for a whole window.
   */
  flush(): void {
    const now = this.#now();
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    for (const [key, e] of this.#entries) {
      if (now - e.since < this.windowMs) continue;
      if (e.repeated === 0) {
        this.#entries.delete(key);
        continue;
      }
      this.#summary(e, now);
      e.since = now;
      e.repeated = 0;
    }
    this.#arm();
  }

  /** Writes every pending summary (also of windows not over yet) and stops the timer; later lines are still limited, summaries then come only with the next occurrence or {@link flush}. */
  close(): void {
    const now = this.#now();
    for (const e of this.#entries.values()) if (e.repeated > 0) this.#summary(e, now);
    this.#entries.clear();
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#closed = true;
  }

  /** Keys remembered now (for tests). */
  get size(): number {
    return this.#entries.size;
  }

  #summary(e: Entry, now: number): void {
    this.#write(e.level, { ...e.fields, repeated: e.repeated, repeatedOverS: seconds(now - e.since) }, repeatedMessage(e.msg, e.repeated, now - e.since));
  }

  #remember(key: string, now: number, level: RateLimitedLevel, msg: string, fields: Record<string, unknown>): void {
    if (this.#entries.size >= this.#maxKeys) return;
    this.#entries.set(key, { since: now, repeated: 0, level, msg, fields });
    this.#arm();
  }

  #write(level: RateLimitedLevel, fields: Record<string, unknown>, msg: string): void {
    this.#sink(level, fields, msg);
  }

  /** A timer for the earliest window end, when one is not set. */
  #arm(): void {
    if (!this.#useTimer || this.#closed || this.#timer || this.#entries.size === 0) return;
    let first = Infinity;
    for (const e of this.#entries.values()) first = Math.min(first, e.since);
    const t = setTimeout(() => this.flush(), Math.max(1, Math.ceil(first + this.windowMs - this.#now())));
    t.unref?.();
    this.#timer = t;
  }
}

/** A sink writing to a pino logger (or anything with pino's level methods). */
export function pinoSink(log: Pick<Log, RateLimitedLevel>): LogSink {
  return (level, fields, msg) => log[level](fields, msg);
}
