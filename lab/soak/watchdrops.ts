/**
 * One drop per lost watch-like connection (pure; lab/soak/cluster.ts feeds it the watch client's
 * lines). The client reports a lost connection twice: `closed` (when it processed the close: its
 * `at` is late by however long the client's event loop was stalled) and `fail` for the request
 * that found it lost (`at` = when that request was sent: before the close for a request in flight,
 * the next scheduled one for an idle connection). Both are the same loss. Counted twice, the late
 * `closed` of a reset that hit a request in flight fell outside the fault window its `fail` was in
 * (the 30-minute seed-7 soak, run9: 11 of them 1.8 s after their request, the client's loop
 * stalled, at 1006.6 s; likewise at 230.8, 492.9 and 1340.7 s).
 *
 * The drop is timed at the earliest of the two, the moment the loss is known to have happened by:
 * the request's send (a reset found by a request in flight came after it was sent, and is excused
 * by windows that start a request timeout T before the edge), or the close (an idle connection).
 */
import type { WatchEvent } from './invariants.js';

/** Merges a connection's `closed` and `fail` into one {@link WatchEvent} of kind `drop`. */
export class WatchDrops {
  /** per connection id: a close seen, its request's failure not yet */
  readonly #closed = new Map<number, { t: number; error: string }>();
  /** per connection id: a failure already reported for the connection now lost */
  readonly #failed = new Set<number>();

  constructor(private readonly emit: (e: WatchEvent) => void) {}

  /** The client's `closed` line: `t` on the schedule clock, `error` its code or null (a FIN). */
  closed(conn: number, t: number, error: string | null): void {
    if (this.#failed.has(conn)) return;
    if (!this.#closed.has(conn)) this.#closed.set(conn, { t, error: error ?? 'FIN' });
  }

  /** The client's `fail` line for a request on `conn` (`t` = when it was sent). */
  failed(conn: number, t: number, error: string): void {
    if (this.#failed.has(conn)) return;
    this.#failed.add(conn);
    const c = this.#closed.get(conn);
    this.#closed.delete(conn);
    // `closed` as the failure's code only says the connection was already gone: the close's own is the cause
    const cause = c !== undefined && error === 'closed' ? c.error : error;
    this.emit({ t: c === undefined ? t : Math.min(t, c.t), kind: 'drop', error: cause, conn });
  }

  /** The client connected `conn` again: what was left of its previous connection is reported. */
  connected(conn: number): void {
    this.#flush(conn);
    this.#failed.delete(conn);
  }

  /** The end of the recording: closes no request noticed are reported. */
  end(): void {
    for (const conn of [...this.#closed.keys()]) this.#flush(conn);
  }

  #flush(conn: number): void {
    const c = this.#closed.get(conn);
    if (c === undefined) return;
    this.#closed.delete(conn);
    this.emit({ t: c.t, kind: 'drop', error: c.error, conn });
  }
}
