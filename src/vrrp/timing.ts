/**
 * The election thread's time: its one deadline timer ({@link DeadlineTimer}: libuv's millisecond
 * timer, and for a Backup's Master_Down_Timer the last stretch slept precisely), how punctual it
 * was ({@link EngineTiming}, reported in /status), and the hand-off's interval arithmetic
 * (RFC 9568 §6.1, §6.4.2).
 */
import type { AdvertPacerStats } from '../native.js';
import { masterDownIntervalMs } from './state.js';

/** Upper bounds of the {@link EngineTiming} histograms' buckets, ms; one more, open bucket holds the rest. */
export const TIMING_BOUNDS_MS: readonly number[] = [1, 2, 5, 10, 15, 20, 30, 40, 50, 100];

/**
 * How punctual the election thread is, since the engine started (bench/stress.ts reads it from
 * /status). Histograms: counts per bucket of `boundsMs` (value ≤ bound), the last count for
 * values above the last bound.
 */
export interface EngineTiming {
  boundsMs: number[];
  /** Active: how late each Adver_Timer tick that sent an advert ran past its deadline, ms */
  sendLate: number[];
  sendLateMaxMs: number;
  /** Backup: time between two adverts of the same master as this thread handled them, ms */
  receiveGap: number[];
  receiveGapMaxMs: number;
  /**
   * Backup: Master_Down_Timer expiries that did not become a takeover because an advert that
   * was already waiting in the socket was handled first (the thread ran late past the deadline).
   */
  rescued: number;
  /** This thread's garbage collections (PerformanceObserver 'gc' in host.ts): count, the longest and the total, ms; absent without an observer */
  gc?: EngineGcStats;
  /** What the advert pacer sent while this thread was silent (native/advert_pacer.h); absent without one */
  pacer?: AdvertPacerStats;
}

/** This thread's garbage collections (host.ts): count, longest and total pause, ms; the longest per kind (perf_hooks gc `detail.kind`: minor, major, incremental, weakcb). */
export interface EngineGcStats {
  count: number;
  maxMs: number;
  totalMs: number;
  maxMsByKind?: Record<string, number>;
}

/** A fixed-size histogram over TIMING_BOUNDS_MS: adding allocates nothing. */
export class TimingHistogram {
  readonly counts = new Uint32Array(TIMING_BOUNDS_MS.length + 1);
  max = 0;
  add(ms: number): void {
    let i = 0;
    while (i < TIMING_BOUNDS_MS.length && ms > TIMING_BOUNDS_MS[i]!) i++;
    this.counts[i]!++;
    if (ms > this.max) this.max = ms;
  }
}

/**
 * The timer wakes the thread this much (ms) before a deadline and the rest is slept with a
 * sub-millisecond wait. libuv's timers count whole milliseconds of a loop time cached at the
 * start of each loop turn, so a setTimeout alone fires 0–2 ms after the deadline (a Backup's
 * Master_Down_Timer at 10 ms adverts, measured on an idle engine with a fake edge: 1.1–1.6 ms
 * late, with the wait ~0.5 ms). Under stress-ng a Backup still took over
 * ~2.4 ms after its Master_Down_Interval (bench/stress.ts wire silence 38.5 ms against 36.1 ms):
 * that part is not the timer, and is still open.
 */
export const PRECISE_WAIT_MS = 2;

/** Blocks this thread for `ms` (fractional) on a futex no one wakes (Atomics.wait). */
export function atomicsWait(): (ms: number) => void {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  return (ms) => void Atomics.wait(cell, 0, 0, ms);
}

/**
 * The Max Adver Int a hand-off announces for a hold of `holdMs`: the longest interval whose
 * Master_Down_Interval (3 × interval + Skew_Time, RFC 9568 §6.1) stays within the hold for a
 * Backup of any priority (Skew_Time < interval), in centiseconds 1..4095, and never shorter
 * than our own Advertisement_Interval.
 */
export function handOffIntervalCs(holdMs: number, advertisementIntervalCs: number): number {
  return Math.min(4095, Math.max(advertisementIntervalCs, Math.floor(holdMs / 40)));
}

/** How long a hand-off's VIPs outlive the Backups' longest wait, ms: their takeover is not instant either. */
export const HANDOFF_VIP_MARGIN_MS = 250;

/**
 * The engine's one timer, set for the machine's next deadline (monotonic ms). A precise deadline
 * wakes the thread {@link PRECISE_WAIT_MS} early and {@link DeadlineTimer.waitRest} sleeps the
 * rest; any other wakes at the deadline rounded up to libuv's whole milliseconds.
 */
export class DeadlineTimer {
  private timer: NodeJS.Timeout | null = null;
  /** The deadline the timer was set for (monotonic ms), null when none. */
  due: number | null = null;

  /**
   * @param now the monotonic clock, ms.
   * @param preciseWait blocks the thread for a fractional number of ms; null: no precise wait.
   * @param fire called when the timer fires.
   */
  constructor(
    private readonly now: () => number,
    readonly preciseWait: ((ms: number) => void) | null,
    private readonly fire: () => void,
  ) {}

  /**
   * Replaces the timer: remembers `due` and, when `arm` and `due` is not null, sets the timer for
   * it (`precise`: PRECISE_WAIT_MS early).
   */
  set(due: number | null, precise: boolean, arm: boolean): void {
    this.clear();
    this.due = due;
    if (due === null || !arm) return;
    const wait = due - this.now();
    this.timer = setTimeout(this.fire, precise ? Math.max(0, Math.floor(wait - PRECISE_WAIT_MS)) : Math.max(0, Math.ceil(wait)));
  }

  /** Cancels the timer (the deadline stays known). */
  clear(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** The timer fired: it is no longer set. */
  fired(): void {
    this.timer = null;
  }

  /**
   * Woken PRECISE_WAIT_MS early (set), up to 1 ms more (libuv's loop time is whole ms behind the
   * real one): sleeps the rest, bounded. Nothing without a precise wait or a deadline.
   */
  waitRest(): void {
    if (!this.preciseWait || this.due === null) return;
    const rest = this.due - this.now();
    if (rest > 0) this.preciseWait(Math.min(rest, PRECISE_WAIT_MS + 2));
  }
}

/** `ms` rounded to three decimals (µs), for reports. */
export function round3(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

/** How punctual the election thread has been since the engine started ({@link EngineTiming}). */
export class Punctuality {
  /** Active: how late each Adver_Timer tick that sent an advert ran past its deadline, ms. */
  readonly sendLate = new TimingHistogram();
  /** Backup: time between two adverts of the same master as this thread handled them, ms. */
  readonly receiveGap = new TimingHistogram();
  /** Master_Down_Timer expiries an advert already waiting in the socket turned back (see EngineTiming `rescued`). */
  rescued = 0;
  /** The source and time (monotonic ms) of the last advert handled, for receiveGap. */
  private lastAdvertSource: string | null = null;
  private lastAdvertAt = 0;

  /** A valid advert from `source` handled at `at` (monotonic ms); `backup`: this router is Backup, whose gaps count. */
  advert(source: string, at: number, backup: boolean): void {
    if (source === this.lastAdvertSource && backup) this.receiveGap.add(at - this.lastAdvertAt);
    this.lastAdvertSource = source;
    this.lastAdvertAt = at;
  }

  /** The report, with the thread's garbage collections and the pacer's counters when there are any. */
  report(gc: EngineGcStats | undefined, pacer: AdvertPacerStats | undefined): EngineTiming {
    return {
      boundsMs: [...TIMING_BOUNDS_MS],
      sendLate: [...this.sendLate.counts],
      sendLateMaxMs: round3(this.sendLate.max),
      receiveGap: [...this.receiveGap.counts],
      receiveGapMaxMs: round3(this.receiveGap.max),
      rescued: this.rescued,
      ...(gc ? { gc } : {}),
      ...(pacer ? { pacer } : {}),
    };
  }
}

/**
 * The times of a hand-off with a hold of `holdMs` (ms): the Max Adver Int the last adverts
 * announce ({@link handOffIntervalCs}, cs), the longest a Backup then waits (its
 * Master_Down_Interval at the lowest priority, 1: 3 × interval + (255/256) × interval, ms,
 * RFC 9568 §6.1), and the lifetime the VIPs are renewed with (ms): they outlive that wait by
 * {@link HANDOFF_VIP_MARGIN_MS}, never the takeover by much, since two holders answer ARP meanwhile.
 */
export function handOffTimes(holdMs: number, advertisementIntervalCs: number): { intervalCs: number; masterDownBoundMs: number; vipLifetimeMs: number } {
  const intervalCs = handOffIntervalCs(holdMs, advertisementIntervalCs);
  const masterDownBoundMs = masterDownIntervalMs(1, intervalCs);
  return { intervalCs, masterDownBoundMs, vipLifetimeMs: Math.ceil(masterDownBoundMs) + HANDOFF_VIP_MARGIN_MS };
}
