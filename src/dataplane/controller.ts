/**
 * The VIP's data plane as a reconcile {@link Plane} (reconcile.ts): apply = one nftables
 * transaction of the ready set, reset = delete the conntrack entries of a dead backend's flows
 * (per VIP) and probe their clients.
 *
 *   ready set ──► desired ruleset (ready: DNAT targets; unready: draining) ──► nft -f (atomic)
 *   dead backend (after that apply) ──► conntrack -D per VIP ──► its clients get a RST on their
 *     next segment, and the probes (probe.ts) make each client send one at once ──► reconnect
 *
 * *Unready but alive* (its /readyz answered, with an error status: an apiserver in its graceful
 * shutdown delay) leaves the set, and its established connections drain. *Dead* (refused, reset,
 * silent, its node gone) leaves the set and its flows' conntrack entries are deleted. Which is
 * which is the verdict's (health/verdict.ts), never decided here.
 */
import type { HostPort } from '../net/hostport.js';
import { formatHostPort } from '../net/hostport.js';
import type { Verdict } from '../health/verdict.js';
import type { FlushedFlows, FlowClient } from './conntrack.js';
import type { Backend, DesiredDataplane } from './nftables.js';
import type { ProbeReport } from './probe.js';
import type { Plane, ReadySet } from './reconcile.js';
import type { TrafficStatus } from './rebalance.js';
import type { Log } from '../log/log.js';

/** What the VIP data plane serves: one address family, its VIPs and port, this node's addresses. */
export interface VipPlaneOptions {
  family: 4 | 6;
  vips: readonly string[];
  port: number;
  /** Addresses of this node (canonical), to mark its own apiserver. */
  local: ReadonlySet<string>;
  /** The source address of flows we DNAT (nftables.ts DesiredDataplane.sourceNat); absent: 'node'. */
  sourceNat?: 'node' | 'vip';
}

/**
 * The desired data plane for a ready set (pure). Backends of the other family serve only a local
 * endpoint of that family (DNAT cannot reach them) and are left out; unknown ones are in neither list.
 */
export function desiredDataplane(set: Pick<ReadySet, 'ready' | 'draining'>, o: VipPlaneOptions): DesiredDataplane {
  const ours = (list: readonly HostPort[]): Backend[] =>
    list.filter((b) => b.family === o.family).map((b) => ({ address: b.host, port: b.port, local: o.local.has(b.host) }));
  return {
    family: o.family,
    vips: [...o.vips],
    port: o.port,
    backends: ours(set.ready),
    draining: ours(set.draining),
    masqueradeRemote: true,
    ...(o.sourceNat === 'vip' ? { sourceNat: 'vip' as const } : {}),
  };
}

/** What the nftables plane needs from the outside world (injected, so tests can fake it). */
export interface LoadBalancerDeps {
  apply(d: DesiredDataplane): Promise<{ changed: boolean; durationMs: number }>;
  /** Deletes conntrack entries of flows to `vip`:`port` DNATed to `backend`; resolves with how many, and their clients. */
  flush(vip: string, port: number, backend: { address: string; port: number }): Promise<FlushedFlows>;
  /**
   * Probes `clients` from `vip`:`port` so that each sends a segment the node answers with a RST
   * (probe.ts probeClients); absent: no probes (a client that only receives then waits for its own timeout).
   */
  probe?(vip: string, port: number, clients: readonly FlowClient[]): Promise<ProbeReport>;
  log: Pick<Log, 'info' | 'warn'>;
  /** Connection counts and the rebalancer (rebalance.ts ConnectionTracker), for /status; absent: none. */
  traffic?: () => TrafficStatus;
}

/** The nftables plane's part of /status (the reconcile adds failures and lastError). */
export interface VipPlaneStatus {
  mode: 'nftables';
  /** The backends in the ruleset now (host:port). */
  backends: string[];
  /** nft transactions run since start (a re-sync whose ruleset was unchanged runs none and is not counted). */
  applies: number;
  /** Duration of the last of them (ms); null before the first. */
  lastApplyMs: number | null;
  /** Conntrack entries deleted for dead backends since start. */
  flushedEntries: number;
  /** TCP probes sent since start to the clients of flows reset here (a dead backend's, the rebalancer's; two per client; probe.ts). */
  probesSent: number;
  /** Probes the kernel refused since start (e.g. an output rule dropped them). */
  probesFailed: number;
  /** Times the table was found removed or changed by someone else and applied again (nftwatch.ts). */
  restores: number;
  /** When the last of those restores ended (ISO 8601); null before the first. */
  lastRestore: string | null;
  /** Established flows per backend (host:port) at the last count (rebalance.ts); absent without a tracker. */
  connections?: Record<string, number>;
  /** The rebalancer (`dataplane.rebalance`); absent without a tracker. */
  rebalance?: TrafficStatus['rebalance'];
}

/** The VIP data plane in /status. */
export interface DataplaneStatus extends VipPlaneStatus {
  failures: number;
  lastError: string | null;
}

/** The log messages of this plane's reconcile (see ReconcileOptions). */
export const VIP_PLANE_MESSAGES = {
  applyFailed: 'data plane apply failed; the previous rules stay',
  resetFailed: 'cannot reset connections to a dead backend',
  probed: 'the clients of reset flows were probed: each answers and gets a RST',
  probeFailed: 'cannot probe the clients of reset flows: those that only receive wait for their own timeout',
} as const;

/** The nftables data plane of the VIPs of one family. */
export class LoadBalancer implements Plane {
  readonly #deps: LoadBalancerDeps;
  #o: VipPlaneOptions;
  readonly #st: VipPlaneStatus = {
    mode: 'nftables',
    backends: [],
    applies: 0,
    lastApplyMs: null,
    flushedEntries: 0,
    probesSent: 0,
    probesFailed: 0,
    restores: 0,
    lastRestore: null,
  };
  /** Probes under way (they run on after reset() returns). */
  readonly #probing = new Set<Promise<void>>();
  /** Backends (host:port) the table held when this plane started: served while their verdict is unknown. */
  #inherited: ReadonlySet<string> = new Set();

  constructor(deps: LoadBalancerDeps, o: VipPlaneOptions) {
    this.#deps = deps;
    this.#o = o;
  }

  /**
   * New VIPs, port or local addresses (a reload); the family stays. Takes effect at the next
   * apply (Reconciler.sync), which replaces the table in one transaction: established flows keep
   * their conntrack NAT.
   * @throws RangeError when `o.family` differs from the plane's.
   */
  reconfigure(o: VipPlaneOptions): void {
    if (o.family !== this.#o.family) throw new RangeError(`the VIP data plane serves IPv${this.#o.family}, not IPv${o.family}`);
    this.#o = o;
  }

  /**
   * The backends (host:port, as {@link formatHostPort}) that the table a previous process left
   * DNATs to (NftablesApplier.dnatTargets): each stays a DNAT target while its own verdict is
   * unknown, so that a restarted agent neither refuses new connections nor changes the spread
   * before its checks conclude (rise × interval). A verdict, either way, ends it for that backend.
   */
  inherit(backends: readonly string[]): void {
    this.#inherited = new Set(backends);
  }

  /** Counts a restore of the table (nftwatch.ts) that ended at `at`, for /status. */
  noteRestore(at: Date): void {
    this.#st.restores++;
    this.#st.lastRestore = at.toISOString();
  }

  /** Status of the ruleset (a copy). */
  status(): VipPlaneStatus {
    const t = this.#deps.traffic?.();
    return { ...this.#st, backends: [...this.#st.backends], ...(t ? { connections: t.connections, rebalance: t.rebalance } : {}) };
  }

  /** What the plane serves now: family, VIPs, port, and the backends in the ruleset (host:port). */
  target(): { family: 4 | 6; vips: readonly string[]; port: number; ready: readonly string[] } {
    return { family: this.#o.family, vips: this.#o.vips, port: this.#o.port, ready: [...this.#st.backends] };
  }

  /** One transaction replacing the table. @throws what the applier throws (the previous rules stay). */
  async apply(given: ReadySet): Promise<readonly HostPort[]> {
    const set = this.#withInherited(given);
    const d = desiredDataplane(set, this.#o);
    const r = await this.#deps.apply(d);
    const now = set.ready.filter((b) => b.family === this.#o.family);
    this.#st.backends = now.map(formatHostPort);
    // a set change that leaves the ruleset as it is (a backend with no verdict, or a dead one,
    // joining or leaving) ran no nft: it is no transaction, for the counter as for the log
    if (!r.changed) return now;
    this.#st.applies++;
    this.#st.lastApplyMs = r.durationMs;
    this.#deps.log.info(
      { backends: this.#st.backends, draining: (d.draining ?? []).length, durationMs: Math.round(r.durationMs * 10) / 10 },
      'data plane applied',
    );
    return now;
  }

  /** `set` with the inherited backends whose verdict is still unknown among the ready ones, in the order of `set.all`. */
  #withInherited(set: ReadySet): ReadySet {
    if (this.#inherited.size === 0) return set;
    const keep = new Set(set.unknown.filter((b) => this.#inherited.has(formatHostPort(b))));
    if (keep.size === 0) return set;
    const ready = new Set(set.ready);
    return { ...set, ready: set.all.filter((b) => ready.has(b) || keep.has(b)), unknown: set.unknown.filter((b) => !keep.has(b)) };
  }

  /**
   * Deletes the conntrack entries of the backend's flows from every VIP (a failure for one VIP
   * is logged and the others are still flushed), then probes the clients of the deleted flows
   * (deps.probe). The probes run on after this returns, so that the next apply does not wait for
   * their pace; {@link probing} waits for them. A backend of the other family has none.
   * @returns the entries deleted.
   */
  async reset(v: Verdict): Promise<number> {
    if (v.backend.family !== this.#o.family) return 0;
    const name = formatHostPort(v.backend);
    let n = 0;
    let clients = 0;
    for (const vip of this.#o.vips) {
      try {
        const r = await this.#deps.flush(vip, this.#o.port, { address: v.backend.host, port: v.backend.port });
        n += r.deleted;
        clients += r.clients.length;
        if (r.clients.length > 0) this.probe(vip, r.clients, { backend: name, why: 'dead' });
      } catch (err) {
        this.#deps.log.warn({ backend: name, err: (err as Error).message }, VIP_PLANE_MESSAGES.resetFailed);
      }
    }
    this.#st.flushedEntries += n;
    this.#deps.log.info({ backend: name, reason: v.message, cause: v.cause.kind, entries: n, clients }, 'dead backend: its connections were reset');
    return n;
  }

  /** Resolves when the probes started so far are done (never rejects). */
  async probing(): Promise<void> {
    while (this.#probing.size > 0) await Promise.all(this.#probing);
  }

  /**
   * Probes `clients`, whose flows to `vip` were just reset (their conntrack entries deleted), from
   * `vip`:port (deps.probe; probe.ts), so that each answers and gets its RST at once: a dead
   * backend's flows (reset), the rebalancer's (rebalance.ts; their answers meet the evict mark).
   * Runs on after this returns, counted in the status and logged (`backend`, `why`) when done;
   * {@link probing} waits for it. Never throws.
   */
  probe(vip: string, clients: readonly FlowClient[], context: { backend: string; why: 'dead' | 'rebalance' }): void {
    const probe = this.#deps.probe;
    if (!probe || clients.length === 0) return;
    let started: Promise<ProbeReport>;
    try {
      started = probe(vip, this.#o.port, clients);
    } catch (err) {
      // a sender that throws at once is a failure like one that rejects
      started = Promise.reject(err);
    }
    const p = started.then(
      (r) => {
        this.#st.probesSent += r.sent;
        this.#st.probesFailed += r.failed;
        const fields = { ...context, vip, clients: r.clients, probes: r.sent, failed: r.failed, durationMs: Math.round(r.durationMs * 10) / 10 };
        if (r.failed > 0) this.#deps.log.warn({ ...fields, err: r.error }, VIP_PLANE_MESSAGES.probeFailed);
        else this.#deps.log.info(fields, VIP_PLANE_MESSAGES.probed);
      },
      (err: unknown) => this.#deps.log.warn({ ...context, vip, clients: clients.length, err: (err as Error).message }, VIP_PLANE_MESSAGES.probeFailed),
    );
    const tracked = p.finally(() => this.#probing.delete(tracked));
    this.#probing.add(tracked);
  }
}
