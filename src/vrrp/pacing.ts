/**
 * The engine's side of the advert pacer (native/advert_pacer.h, edge.ts startPacer): a native
 * thread that repeats the Active router's last adverts while the election thread is late, up to
 * a hold after which a wedged agent lets the VIP go. This module starts it, hands it each round
 * of adverts, and says what it did.
 */
import { getSystemErrorName } from 'node:util';
import type { RateLimitedLog } from '../log/ratelimit.js';
import type { PacedAdvert } from '../native.js';
import type { AdvertAuth } from './auth.js';
import type { VrrpEdge } from './edge.js';
import type { EngineOptions } from './engine-api.js';

/**
 * The advert pacer's hold time, ms, at most: when the engine's thread has sent nothing for this
 * long the pacer stops sending for it, so that a wedged agent loses the VIP a
 * Master_Down_Interval later instead of holding it forever. Shorter stalls (GC pauses, a long
 * synchronous task, a starved CPU) cost no failover. See {@link pacerHoldMs}.
 */
export const PACER_HOLD_MS = 2000;

/**
 * The hold for these settings, ms: {@link PACER_HOLD_MS}, shortened where the VIPs' valid
 * lifetime (vipLifetimeMs, renewed every third of it by this same thread) would run out first:
 * from a stall's start a VIP lives at least two thirds of its lifetime, which must cover the hold
 * (less {@link PACER_HOLD_MARGIN_MS}), or the VIP would vanish from this node while the pacer's
 * adverts still keep the Backups away. 0 (or less than 1.5 × Advertisement_Interval) means the
 * pacer never sends: vipLifetime 2s at 1 s adverts, for one.
 * @param o vipLifetimeMs (0 = permanent); owner: its VIPs are its own addresses.
 */
export function pacerHoldMs(o: { vipLifetimeMs: number; owner: boolean }): number {
  if (o.owner || o.vipLifetimeMs <= 0) return PACER_HOLD_MS;
  return Math.max(0, Math.min(PACER_HOLD_MS, (2 * o.vipLifetimeMs) / 3 - PACER_HOLD_MARGIN_MS));
}

/** What the VIPs' remaining lifetime keeps beyond the hold, ms: a renewal timer that ran late. */
export const PACER_HOLD_MARGIN_MS = 250;

/** The engine's log: a line at a level, with fields. */
export type EngineLogLine = (level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => void;

/** What the engine hands the pacer, and what it saw of the pacer's counters. */
export class AdvertPacing {
  /** The adverts handed to the pacer (null: it sends nothing), with the interval and hold they were handed with. */
  private paced: PacedAdvert[] | null = null;
  private pacedTimes = { intervalMs: 0, holdMs: 0 };
  /** The pacer's counters at the last look (covers and holds are logged as they grow). */
  private pacerSeen = { covers: 0, holds: 0, sent: 0, sendErrors: 0 };

  /**
   * @param opts the engine's options as they are now (a reconfigure changes the interval and lifetime).
   * @param edge the engine's open edge, null once closed.
   */
  constructor(
    private readonly opts: EngineOptions,
    private readonly edge: () => VrrpEdge | null,
    private readonly log: EngineLogLine,
    private readonly limited: RateLimitedLog,
  ) {}

  /** Whether the pacer has adverts to repeat (this router is Active and has sent). */
  get pacing(): boolean {
    return this.paced !== null;
  }

  /**
   * Starts the edge's advert pacer (signing with the first key when auth is on: its counter
   * then gives every sequence number, ours too) and logs the real-time policy it got.
   * @throws what the edge's startPacer throws (no thread).
   */
  start(auth: AdvertAuth | null): void {
    const edge = this.edge();
    if (!edge?.startPacer) return;
    const rt = this.opts.realtimePriority ?? 0;
    const refused = edge.startPacer(rt, auth ? { key: auth.signingKey(), firstSequence: auth.nextSequence() } : null);
    if (auth && edge.takeSequence) auth.shareSequence(() => edge.takeSequence!());
    const intervalMs = this.opts.advertisementIntervalCs * 10;
    const holdMs = pacerHoldMs(this.opts);
    if (holdMs <= 1.5 * intervalMs)
      this.log(
        'info',
        'the advert pacer cannot cover a stalled election thread with these settings: its hold ends before its first advert would be due (a longer vipLifetime or shorter adverts give it room)',
        { holdMs: Math.round(holdMs), advertisementIntervalMs: intervalMs, vipLifetimeMs: this.opts.vipLifetimeMs },
      );
    if (rt <= 0) return;
    if (refused === null) this.log('info', 'the advert pacer thread runs SCHED_FIFO (vrrp.realtimePriority)', { realtimePriority: rt });
    else
      this.log('warn', 'cannot give the advert pacer thread SCHED_FIFO (vrrp.realtimePriority); it runs with normal scheduling', {
        realtimePriority: rt,
        code: refused,
      });
  }

  /**
   * Hands the pacer this round of adverts (null: none) when it differs from what it has: the
   * encoded adverts are cached, so an unchanged round is the same Buffers.
   */
  pace(round: PacedAdvert[] | null): void {
    const edge = this.edge();
    if (!edge?.pace) return;
    const had = this.paced;
    const intervalMs = this.opts.advertisementIntervalCs * 10;
    // a reload can change the hold (vipLifetime) or the interval with the same adverts
    const holdMs = Math.max(1, pacerHoldMs(this.opts));
    const same =
      round === null
        ? had === null
        : had !== null && had.length === round.length && had.every((a, i) => a.message === round[i]!.message && a.destination === round[i]!.destination);
    if (same && (round === null || (this.pacedTimes.intervalMs === intervalMs && this.pacedTimes.holdMs === holdMs))) return;
    this.paced = round;
    this.pacedTimes = { intervalMs, holdMs };
    edge.pace(round, intervalMs, holdMs);
  }

  /**
   * At each send while Active, with the time since this thread's previous send in the same
   * Active period (ms; 0 for its first): after a silence longer than 1.5 intervals, says what the
   * pacer did meanwhile; a send error of the pacer is said at once. The counters are read at
   * every send, so what the pacer did before (a cover of a thread a few ms late, the last one of
   * an earlier Active period) is never put on a later silence.
   */
  note(silentMs: number): void {
    const st = this.edge()?.pacerStats?.();
    if (!st) return;
    const seen = this.pacerSeen;
    const intervalMs = this.opts.advertisementIntervalCs * 10;
    const silence = silentMs > 1.5 * intervalMs;
    const fields = (): Record<string, number> => ({ silentMs: Math.round(silentMs), advertisementIntervalMs: intervalMs, pacerSent: st.sent - seen.sent });
    if (silence && st.holds > seen.holds)
      this.limited.log(
        'warn',
        'pacer:hold',
        { ...fields(), holdMs: pacerHoldMs(this.opts) },
        "the election thread was silent longer than the advert pacer's hold: the pacer stopped sending, and a Backup may have taken over",
      );
    else if (silence && st.covers > seen.covers)
      this.limited.log('info', 'pacer:cover', fields(), 'the election thread was silent; the advert pacer sent its adverts meanwhile');
    if (st.sendErrors > seen.sendErrors)
      this.limited.log(
        'warn',
        'pacer:send',
        { sendErrors: st.sendErrors - seen.sendErrors, code: st.lastErrno > 0 ? getSystemErrorName(-st.lastErrno) : 'HMAC' },
        'the advert pacer could not send some adverts',
      );
    this.pacerSeen = { covers: st.covers, holds: st.holds, sent: st.sent, sendErrors: st.sendErrors };
  }
}
