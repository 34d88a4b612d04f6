/**
 * One reconcile for both data planes (nftables for the VIP, ebpf / proxy for the node-local
 * endpoint):
 *
 *   verdict ──► schedule (coalesced) ──► apply the ready set ──ok──► reset each newly dead backend once
 *                                                   └─failed──► log, count; the previous state stays,
 *                                                               the resets wait for the next good apply
 *
 * A backend is reset only after an apply without it succeeded (a reset client's reconnect must
 * not land on it again), never while it is in the set that was applied, and once per death: a
 * `dead` verdict queues it, a later `up` or `unready` verdict before the apply cancels it.
 * "Dead" is the verdict's state, decided by the health checker from the cause's kind
 * (health/verdict.ts); nothing here reads a message.
 */
import { formatHostPort, sameHostPort, type HostPort } from '../net/hostport.js';
import type { BackendVerdict, Verdict } from '../health/verdict.js';
import { Coalescer } from './coalesce.js';
import type { Log } from '../log/log.js';

/** The backends as one apply sees them, each list in the checker's order. */
export interface ReadySet {
  /** Every backend, in order (the lists below are parts of it, the same objects). */
  readonly all: readonly HostPort[];
  /** Verdict `up`: new connections go to these. */
  readonly ready: readonly HostPort[];
  /** Verdict `unready`: no new connections; established ones drain. */
  readonly draining: readonly HostPort[];
  /** No verdict yet (not `rise` passes nor `fall` failures since start). */
  readonly unknown: readonly HostPort[];
}

/** A data plane, as the reconcile drives it. */
export interface Plane {
  /**
   * Makes the plane serve `set` (a whole replacement; idempotent).
   * @returns the backends the plane now sends new connections to (a dead backend among them is not reset).
   * @throws when the plane refused it: the previous state stays (the error's message is logged).
   */
  apply(set: ReadySet): Promise<readonly HostPort[]>;
  /**
   * Resets the established connections sent to a dead backend (it is out of the plane already).
   * @returns how many connections (conntrack entries, sockets) were reset.
   */
  reset(verdict: Verdict): Promise<number>;
}

/** Where the verdicts come from (the HealthChecker). */
export interface VerdictSource {
  /** Every backend and its verdict (or unknown), in order. */
  verdicts(): readonly BackendVerdict[];
  on(event: 'verdict', listener: (v: Verdict) => void): unknown;
  off(event: 'verdict', listener: (v: Verdict) => void): unknown;
}

/** Options of {@link Reconciler}. */
export interface ReconcileOptions {
  log: Pick<Log, 'warn' | 'error'>;
  /** Logged (level error) when an apply fails, e.g. `data plane apply failed; the previous rules stay`. */
  applyFailed: string;
  /** Logged (level warn) when a reset fails. */
  resetFailed: string;
}

/** The reconcile's own part of a plane's status. */
export interface ReconcileStatus {
  /** Applies the plane refused, since start. */
  failures: number;
  /** The last refusal's message; null after a good apply. */
  lastError: string | null;
}

/**
 * Keeps one {@link Plane} in step with the verdicts of a {@link VerdictSource}: one apply at a
 * time, bursts coalesced (coalesce.ts), then the resets the apply allows.
 */
export class Reconciler<P extends Plane = Plane> {
  /** The plane driven (for its own status). */
  readonly plane: P;
  readonly #source: VerdictSource;
  readonly #o: ReconcileOptions;
  readonly #applies = new Coalescer(() => this.#run());
  /** dead verdicts not reset yet, by host:port */
  readonly #dead = new Map<string, Verdict>();
  #failures = 0;
  #lastError: string | null = null;

  /**
   * Nothing is applied until {@link follow} or {@link sync}.
   * @param plane what is driven; `source` the verdicts (the HealthChecker); `o` the log and its messages.
   */
  constructor(plane: P, source: VerdictSource, o: ReconcileOptions) {
    this.plane = plane;
    this.#source = source;
    this.#o = o;
  }

  /**
   * Subscribes to the source's `verdict` events (one listener). Backends already dead now are
   * queued for a reset, as if their verdict had just arrived.
   * @returns the undo: unsubscribes, then resolves once the applies already queued are done (and
   *   their resets), so that a caller removing the plane's table next does not race an apply that
   *   would put it back (a reload to the other family left `table ip ballast` behind that way).
   *   Never rejects.
   */
  follow(): () => Promise<void> {
    for (const v of this.#source.verdicts()) if (v.state === 'dead') this.#dead.set(formatHostPort(v.backend), v);
    const listener = (v: Verdict): void => void this.note(v);
    this.#source.on('verdict', listener);
    return () => {
      this.#source.off('verdict', listener);
      return this.#applies.idle();
    };
  }

  /**
   * A verdict changed: queues (dead) or cancels (up, unready) the backend's reset, and schedules an apply.
   * @returns when that apply (and its resets) is done; never rejects.
   */
  note(v: Verdict): Promise<void> {
    const key = formatHostPort(v.backend);
    if (v.state === 'dead') this.#dead.set(key, v);
    else this.#dead.delete(key);
    return this.sync();
  }

  /**
   * Queues every backend that is dead now for a reset again, and schedules an apply (which runs
   * those resets). For connection sync's commit on a takeover: it writes the replicated entries
   * of every flow into the kernel, also those of a backend judged dead before it finished (the
   * silent master's, judged while the commit ran), which a reset then has to delete again and
   * whose clients it has to probe again, now that this node holds the VIP.
   * @returns when that apply (and its resets) is done; never rejects.
   */
  resetDeadAgain(): Promise<void> {
    for (const v of this.#source.verdicts()) if (v.state === 'dead') this.#dead.set(formatHostPort(v.backend), v);
    return this.sync();
  }

  /** Applies the current verdicts (coalesced). @returns when done; never rejects (failures are logged and counted). */
  sync(): Promise<void> {
    return this.#applies.schedule();
  }

  /** Failures and the last error (a copy). */
  status(): ReconcileStatus {
    return { failures: this.#failures, lastError: this.#lastError };
  }

  async #run(): Promise<void> {
    // the deaths this apply answers for: one arriving while it runs waits for the next (queued) apply
    const due = [...this.#dead];
    const all = this.#source.verdicts();
    const of = (state: BackendVerdict['state']): HostPort[] => all.filter((v) => v.state === state).map((v) => v.backend);
    let served: readonly HostPort[];
    try {
      served = await this.plane.apply({ all: all.map((v) => v.backend), ready: of('up'), draining: of('unready'), unknown: of('unknown') });
      this.#lastError = null;
    } catch (err) {
      this.#failures++;
      this.#lastError = err instanceof Error ? err.message : String(err);
      this.#o.log.error({ err: this.#lastError }, this.#o.applyFailed);
      return;
    }
    for (const [key, v] of due) {
      // cancelled (up or unready since) or replaced by a newer death (that one is reset by its own apply)
      if (this.#dead.get(key) !== v) continue;
      this.#dead.delete(key);
      if (served.some((b) => sameHostPort(b, v.backend))) continue;
      try {
        await this.plane.reset(v);
      } catch (err) {
        this.#o.log.warn({ backend: key, err: err instanceof Error ? err.message : String(err) }, this.#o.resetFailed);
      }
    }
  }
}
