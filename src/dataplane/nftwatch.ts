/**
 * Keeps ballast's nftables table in place when someone else removes or changes it (`nft flush
 * ruleset`, `nft delete table ip ballast`, a chain or rule deleted, a rule added): the table is
 * checked and, when it is not what ballast applied, the current desired ruleset is applied again.
 *
 *   kernel nftables events (NftWatch: netlink, NFNLGRP_NFTABLES, this network namespace only)
 *     │ a batch naming `ip ballast` / `ip6 ballast`, or events lost (ENOBUFS)
 *     ▼ quiet for QUIET_MS (a transaction's burst, ours too, ends first)
 *   verify: one `nft -j list table …` against the listing taken right after our last apply
 *     │ missing / altered                         intact: nothing (our own applies end here)
 *     ▼
 *   restore: the reconcile applies the desired ruleset again (one transaction) → counted, logged
 *
 * Events only say *that* something touched our table; the verify decides, so our own applies
 * (which produce the same events) cost one listing and are never "restored". Changes to other
 * tables are ignored without running anything. A slow periodic verify ({@link VERIFY_EVERY_MS})
 * is the backstop for lost events; when the event socket cannot be opened (no CAP_NET_ADMIN, no
 * nfnetlink) the verify runs every {@link FALLBACK_VERIFY_EVERY_MS} instead, which keeps the
 * bound.
 *
 * Bound: with events, restored within QUIET_MS + one listing + one apply of the change (a few
 * tens of ms; docs/dataplane.md gives the measured figures); without, within
 * FALLBACK_VERIFY_EVERY_MS + the same. Both are under the 1 s the data plane promises.
 */
import { performance } from 'node:perf_hooks';
import type { NftChangeBatch } from '../native.js';
import type { TableCheck } from './apply.js';
import { nftFamily, TABLE_NAME } from './nftables.js';
import type { Log } from '../log/log.js';

/** Quiet time after the last event naming our table before it is verified, ms. */
export const QUIET_MS = 50;
/** The longest a stream of events can put the verify off, ms (from the first event). */
export const MAX_DEFER_MS = 200;
/** Periodic verify while events are watched (the backstop for lost events), ms. */
export const VERIFY_EVERY_MS = 10_000;
/** Periodic verify when events cannot be watched, ms. */
export const FALLBACK_VERIFY_EVERY_MS = 500;

/** The log message of a restore (level warn). */
export const RESTORED_MESSAGE = 'nftables table ballast was removed or changed by someone else; restored';

/** How a restore was triggered: a kernel event naming the table, or a verify (periodic, or after lost events). */
export type DetectedBy = 'event' | 'verify';

/** What the watch needs from the outside (injected: unit tests fake it). */
export interface TableWatchDeps {
  /** The family of the table watched: `table ip ballast` (4) or `table ip6 ballast` (6). */
  family: 4 | 6;
  /**
   * Opens the kernel event subscription (NftWatch.open); absent: verify only. May throw (then
   * the watch verifies every {@link FALLBACK_VERIFY_EVERY_MS} and says so in the log).
   */
  subscribe?: (onChange: (batch: NftChangeBatch) => void) => { close(): void };
  /** The table as the applier sees it (NftablesApplier.verify). May throw (logged; checked again later). */
  verify: () => Promise<TableCheck>;
  /** Applies the desired ruleset again, whatever the applier last applied. Throws when nft refused it. */
  restore: () => Promise<void>;
  log: Pick<Log, 'info' | 'warn' | 'error'>;
  /** Called after each restore (the caller counts it for /status and the metric). */
  onRestore?: (r: RestoreRecord) => void;
  quietMs?: number;
  maxDeferMs?: number;
  verifyEveryMs?: number;
  fallbackVerifyEveryMs?: number;
  /** Monotonic clock, ms (default performance.now). */
  now?: () => number;
}

/** One restore. */
export interface RestoreRecord {
  family: 4 | 6;
  detectedBy: DetectedBy;
  /** What the verify found. */
  found: 'missing' | 'altered';
  /** From the detection (the first event, or the verify's start) to the restore's end, ms. */
  durationMs: number;
  /** Wall-clock time of the restore's end. */
  at: Date;
}

/** The watch's counters. */
export interface TableWatchStatus {
  /** `events`: kernel events plus the slow verify; `verify`: the fast verify only (events unavailable). */
  mode: 'events' | 'verify';
  restores: number;
  /** ISO 8601, null before the first. */
  lastRestore: string | null;
  /** Verifies run (each is one nft listing). */
  verifies: number;
}

/** Whether a batch of kernel events concerns the table of `family` (or may: events were lost). */
export function touchesTable(batch: NftChangeBatch, family: 4 | 6): boolean {
  return batch.lost || batch.tables.includes(`${nftFamily(family)} ${TABLE_NAME}`);
}

/** Watches and restores one family's table; see the file comment. */
export class TableWatch {
  readonly #d: TableWatchDeps;
  readonly #now: () => number;
  #sub: { close(): void } | null = null;
  #mode: 'events' | 'verify' = 'verify';
  #periodic: NodeJS.Timeout | undefined;
  #quiet: NodeJS.Timeout | undefined;
  /** time of the first relevant event not verified yet (ms, monotonic) */
  #firstEvent: number | null = null;
  #eventCause: DetectedBy = 'event';
  #running: Promise<void> | null = null;
  /** a check was asked for while one ran: run again after it */
  #again: { by: DetectedBy; since: number } | null = null;
  #stopped = false;
  readonly #st = { restores: 0, lastRestore: null as string | null, verifies: 0 };

  /** Nothing runs until {@link start}. */
  constructor(d: TableWatchDeps) {
    this.#d = d;
    this.#now = d.now ?? (() => performance.now());
  }

  /** A copy of the counters. */
  status(): TableWatchStatus {
    return { mode: this.#mode, ...this.#st };
  }

  /**
   * Opens the event subscription (falling back to the fast verify when it cannot be opened,
   * logged as a warn) and starts the periodic verify. Never throws.
   */
  start(): void {
    if (this.#stopped || this.#periodic) return;
    const { subscribe, log, family } = this.#d;
    if (subscribe) {
      try {
        this.#sub = subscribe((b) => this.#onBatch(b));
        this.#mode = 'events';
      } catch (err) {
        log.warn(
          { family, err: (err as Error).message, verifyEveryMs: this.#fallbackMs() },
          'cannot watch nftables events; the ballast table is verified periodically instead',
        );
      }
    }
    const every = this.#mode === 'events' ? (this.#d.verifyEveryMs ?? VERIFY_EVERY_MS) : this.#fallbackMs();
    this.#periodic = setInterval(() => this.#request('verify', this.#now()), every);
    this.#periodic.unref();
  }

  /** Closes the subscription, stops the timers, waits for a check under way. Idempotent. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#sub?.close();
    this.#sub = null;
    clearInterval(this.#periodic);
    clearTimeout(this.#quiet);
    this.#again = null;
    await this.#running;
  }

  /** Verifies now (and restores when needed). @returns when done; never rejects. */
  check(by: DetectedBy = 'verify'): Promise<void> {
    this.#request(by, this.#now());
    return this.#running ?? Promise.resolve();
  }

  #fallbackMs(): number {
    return this.#d.fallbackVerifyEveryMs ?? FALLBACK_VERIFY_EVERY_MS;
  }

  #onBatch(b: NftChangeBatch): void {
    if (this.#stopped || !touchesTable(b, this.#d.family)) return;
    const t = this.#now();
    if (this.#firstEvent === null) {
      this.#firstEvent = t;
      // lost events alone do not say our table was touched: that is a verify's finding
      this.#eventCause = b.tables.length > 0 && !b.lost ? 'event' : 'verify';
    } else if (!b.lost) {
      this.#eventCause = 'event';
    }
    const quiet = this.#d.quietMs ?? QUIET_MS;
    const latest = this.#firstEvent + (this.#d.maxDeferMs ?? MAX_DEFER_MS);
    clearTimeout(this.#quiet);
    this.#quiet = setTimeout(() => this.#fire(), Math.max(0, Math.min(quiet, latest - t)));
    this.#quiet.unref();
  }

  #fire(): void {
    const since = this.#firstEvent ?? this.#now();
    this.#firstEvent = null;
    this.#request(this.#eventCause, since);
  }

  #request(by: DetectedBy, since: number): void {
    if (this.#stopped) return;
    if (this.#running) {
      // an event while a check runs: that check may have listed the table before the change
      if (!this.#again || by === 'event') this.#again = { by, since: Math.min(since, this.#again?.since ?? since) };
      return;
    }
    this.#running = this.#run(by, since).finally(() => {
      this.#running = null;
      const next = this.#again;
      this.#again = null;
      if (next && !this.#stopped) this.#request(next.by, next.since);
    });
  }

  async #run(by: DetectedBy, since: number): Promise<void> {
    const { family, log } = this.#d;
    let found: TableCheck;
    try {
      this.#st.verifies++;
      found = await this.#d.verify();
    } catch (err) {
      // a stop kills the nft under way: that is not worth a line
      if (!this.#stopped) log.warn({ family, err: (err as Error).message }, 'cannot verify the nftables table ballast; checked again later');
      return;
    }
    if (found !== 'missing' && found !== 'altered') return;
    if (this.#stopped) return;
    try {
      await this.#d.restore();
    } catch (err) {
      log.error(
        { family, found, detectedBy: by, err: (err as Error).message },
        'the nftables table ballast was removed or changed by someone else and could not be restored; retried at the next check',
      );
      return;
    }
    const r: RestoreRecord = { family, detectedBy: by, found, durationMs: Math.round((this.#now() - since) * 10) / 10, at: new Date() };
    this.#st.restores++;
    this.#st.lastRestore = r.at.toISOString();
    log.warn({ family, detectedBy: by, found, durationMs: r.durationMs }, RESTORED_MESSAGE);
    this.#d.onRestore?.(r);
  }
}
