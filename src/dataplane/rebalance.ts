/**
 * Per-backend connection counts of the VIP data plane, and the opt-in rebalancer
 * (`dataplane.rebalance`, docs/config.md).
 *
 *   every 5 s (1 s while a backend is over) ─► one ctnetlink dump (native conntrackVipFlows):
 *     established flows to VIP:port DNATed to each backend ─► /status dataplane.connections,
 *     ballast_backend_connections
 *   rebalance on: decide() ─► choose the oldest N flows of the most loaded backend (a dry run
 *     of the reset, their tuples returned) ─► the tuples into the table's `evict` set (one nft
 *     run) ─► their conntrack entries deleted (those flows only) ─► their clients' next segment
 *     gets a RST (the `strays` chain, nftables.ts) ─► they reconnect from a new source port, and
 *     the spread's hash of the new tuple spreads them anew (uniformly: the port is in the hash)
 *
 * Why watches need this: a long-lived connection stays on the apiserver that was up when it
 * connected, so after a rolling restart the last apiserver restarted holds almost none
 * (kubernetes #76145, #126378). Deleting the entry alone is not enough: conntrack's loose pickup
 * NATs the next mid-stream segment anew, and the spread hashes the same tuple to the same backend
 * (on purpose: a flow whose state was flushed must continue), so nothing would change; the
 * `evict` set marks the flows whose pickup must get a RST instead. Marked before the delete: a
 * client segment in between still has its entry and passes; one after it finds the mark. (Marked
 * after the delete, the lab's 300 watches lost the race for 2–3 % of the resets: those flows
 * stayed where they were while counted as reset.) A flow whose backend speaks first after the
 * delete is reset anyway: the backend's segment finds no entry and this node answers with a RST.
 * The client of such a flow, a watch that only receives, would then wait for its own timeout:
 * after the delete the node probes every reset flow's client (probe.ts), whose answer meets the
 * mark and its RST at once.
 *
 * Oldest first, by conntrack's start timestamp (CTA_TIMESTAMP_START, needs
 * net.netfilter.nf_conntrack_timestamp=1 in the namespace; the agent turns it on while
 * rebalancing is enabled). Not by entry id: since Linux 5.0 the id is a keyed hash of the entry's
 * address (nf_ct_get_id, siphash), so its order says nothing about age. Entries made before the
 * timestamps were on have none and count as the oldest.
 *
 * {@link decide} is pure (counts and times in, which backend and how many out); the
 * {@link ConnectionTracker} runs it on a timer against the kernel.
 */
import { hostPort } from '../net/address.js';
import type { ConntrackVipFlows, ConntrackVipQuery } from '../native.js';
import type { EvictedFlow } from './nftables.js';
import type { Log } from '../log/log.js';

/** The rebalancer's settings (config `dataplane.rebalance`, normalized: types.ts RebalanceConfig). */
export interface RebalanceSettings {
  readonly enabled: boolean;
  /** A backend is over when it holds more than factor × its fair share; > 1. */
  readonly factor: number;
  /** How long a backend must stay over before its flows are reset, ms. */
  readonly afterMs: number;
  /** Resets per second at most (any 1000 ms window). */
  readonly resetsPerSecond: number;
  /** Fraction (0, 1] of the established flows that may be reset in any 60 s window (at least 1 flow). */
  readonly maxFractionPerMinute: number;
}

/** What {@link decide} remembers between rounds. */
export interface RebalanceMemory {
  /** backend (host:port) → since when (ms, the caller's clock) it has been over */
  readonly overSince: ReadonlyMap<string, number>;
  /** the resets done (at: ms, count, the total counted before them), only those of the last 60 s matter */
  readonly resets: readonly { at: number; count: number; total?: number }[];
}

/** One round's input. */
export interface RebalanceInput {
  /** ms, monotonic or wall: only differences are used */
  now: number;
  /** the ready backends (in the ruleset), host:port; only these share the load */
  ready: readonly string[];
  /** established flows per backend (host:port); a ready backend missing here has 0 */
  counts: ReadonlyMap<string, number>;
  memory: RebalanceMemory;
  settings: Pick<RebalanceSettings, 'factor' | 'afterMs' | 'resetsPerSecond' | 'maxFractionPerMinute'>;
  /** ms a reset flow is expected to take to reconnect (default {@link SETTLE_MS}); 0: none */
  settleMs?: number;
}

/** One round's outcome. */
export interface RebalanceDecision {
  /** the memory for the next round (over-since times updated, resets older than 60 s dropped) */
  memory: RebalanceMemory;
  /** established flows over the ready backends (counted, without the pending reconnects) */
  total: number;
  /** (total + pending reconnects) / ready backends; null with fewer than 2 ready backends */
  fair: number | null;
  /** factor × fair: a backend holding more is over; null with fewer than 2 ready backends */
  bound: number | null;
  /** the ready backends over the bound now, most loaded first */
  over: string[];
  /** whom to reset and how many (each ≥ 1), most loaded first; empty with the reason in `why` */
  targets: { backend: string; count: number }[];
  why: 'alone' | 'no connections' | 'balanced' | 'waiting' | 'minute budget spent' | 'second budget spent' | 'reset';
}

/**
 * How long a reset connection is taken to be on its way back, ms: its client learns of the reset
 * at its next segment (a request, an HTTP/2 PING, a keepalive probe) and reconnects. Until then
 * the flows reset in this window count as reconnected, spread evenly over the ready backends;
 * otherwise the next round would see the total short by them and reset the survivors again.
 */
export const SETTLE_MS = 10_000;

/** The window of `maxFractionPerMinute`, ms. */
export const MINUTE_MS = 60_000;
const SECOND_MS = 1000;

/**
 * The rebalance decision for one round (pure). Rules, in order:
 * - fewer than 2 ready backends: nothing (a backend that is alone is never touched), memory cleared;
 * - no established flow: nothing;
 * - flows reset in the last `settleMs` and not back yet (at most what the total is short of the
 *   total counted before those resets) are added back, evenly, as expected reconnects: each ready
 *   backend's count + pending / ready, the total + pending;
 * - a ready backend is over when its count > factor × total / ready; its over-since time is kept
 *   while it stays over and dropped when it is not;
 * - every backend over for at least `afterMs` is a target, most loaded first (ties: `ready`
 *   order), with count = what brings it down to its fair share (count − ⌈fair⌉: hysteresis, it
 *   triggers above factor × fair but aims at fair, so that the flows that reconnect to it again
 *   do not push it straight back over), the targets taken in order from one budget:
 *   min(resetsPerSecond − resets in the last 1000 ms, max(1, ⌊maxFractionPerMinute × total⌋) −
 *   resets in the last 60 s); a spent budget means no target.
 * The caller performs the resets and records them with {@link recordResets}.
 */
export function decide(input: RebalanceInput): RebalanceDecision {
  const { now, ready, counts, settings } = input;
  const resets = input.memory.resets.filter((r) => now - r.at < MINUTE_MS);
  const settle = input.settleMs ?? SETTLE_MS;
  const real = (b: string): number => counts.get(b) ?? 0;
  const total = ready.reduce((sum, b) => sum + real(b), 0);
  // on their way back: the resets of the window, but no more than the total is short of what it was before them
  const recent = resets.filter((r) => now - r.at < settle);
  const before = Math.max(0, ...recent.map((r) => r.total ?? Infinity));
  const pending = Math.min(
    recent.reduce((sum, r) => sum + r.count, 0),
    Math.max(0, before - total),
  );
  const share = ready.length > 0 ? pending / ready.length : 0;
  const countOf = (b: string): number => real(b) + share;
  const none = (why: RebalanceDecision['why'], fair: number | null = null, bound: number | null = null): RebalanceDecision => ({
    memory: { overSince: new Map(), resets },
    total,
    fair,
    bound,
    over: [],
    targets: [],
    why,
  });
  if (ready.length < 2) return none('alone');
  if (total === 0) return none('no connections', 0, 0);
  const fair = (total + pending) / ready.length;
  const bound = settings.factor * fair;
  const over = ready
    .map((b, i) => ({ b, i, n: countOf(b) }))
    .filter((x) => x.n > bound)
    .sort((x, y) => y.n - x.n || x.i - y.i)
    .map((x) => x.b);
  const overSince = new Map<string, number>();
  for (const b of over) overSince.set(b, input.memory.overSince.get(b) ?? now);
  const memory = { overSince, resets };
  const base = { memory, total, fair, bound, over };
  if (over.length === 0) return { ...base, targets: [], why: 'balanced' };
  const due = over.filter((b) => now - overSince.get(b)! >= settings.afterMs);
  if (due.length === 0) return { ...base, targets: [], why: 'waiting' };
  const inWindow = (ms: number): number => resets.filter((r) => now - r.at < ms).reduce((s, r) => s + r.count, 0);
  const perMinute = Math.max(1, Math.floor(settings.maxFractionPerMinute * total)) - inWindow(MINUTE_MS);
  if (perMinute <= 0) return { ...base, targets: [], why: 'minute budget spent' };
  const perSecond = settings.resetsPerSecond - inWindow(SECOND_MS);
  if (perSecond <= 0) return { ...base, targets: [], why: 'second budget spent' };
  let budget = Math.min(perSecond, perMinute);
  const targets: { backend: string; count: number }[] = [];
  for (const b of due) {
    const count = Math.min(Math.floor(countOf(b) - Math.ceil(fair)), real(b), budget);
    if (count <= 0) break;
    targets.push({ backend: b, count });
    budget -= count;
  }
  return { ...base, targets, why: 'reset' };
}

/** `memory` with `count` resets done at `now` (nothing recorded for 0); `total`: the flows counted before them (unknown: no cap on the pending reconnects). */
export function recordResets(memory: RebalanceMemory, now: number, count: number, total?: number): RebalanceMemory {
  if (count <= 0) return memory;
  return { overSince: memory.overSince, resets: [...memory.resets, total === undefined ? { at: now, count } : { at: now, count, total }] };
}

// ---------------------------------------------------------------------------------------------

/** The rebalancer in /status (`dataplane.rebalance`). */
export interface RebalanceStatus {
  enabled: boolean;
  factor: number;
  afterMs: number;
  resetsPerSecond: number;
  maxFractionPerMinute: number;
  /** the last round's verdict (see {@link RebalanceDecision.why}; `off`: a backend is over but the rebalancer is disabled); null before the first count */
  state: RebalanceDecision['why'] | 'off' | null;
  /** fair share and bound of the last count (null with fewer than 2 ready backends) */
  fair: number | null;
  bound: number | null;
  /** backends over the bound at the last count, and since when (ISO) */
  over: { backend: string; since: string }[];
  /** connections reset by the rebalancer since start, per backend */
  resets: Record<string, number>;
  /** the last round that reset something */
  lastRound: { at: string; backend: string; before: number; reset: number } | null;
  /** of the flows counted last, how many had a conntrack start time (oldest-first is exact only for those) */
  timestamped: number;
}

/** Connections and the rebalancer, as the VIP plane's status carries them. */
export interface TrafficStatus {
  /** established flows per backend (host:port), from the last count; {} before it or with no backend */
  connections: Record<string, number>;
  /** ms since the epoch of the last count, null before */
  countedAt: string | null;
  rebalance: RebalanceStatus;
  /** the last count's error, null after a good one */
  lastError: string | null;
}

/** What the tracker reads and where it logs (injected, so tests can fake the kernel). */
export interface ConnectionTrackerDeps {
  /** one dump (native conntrackVipFlows); may throw */
  read(q: ConntrackVipQuery): ConntrackVipFlows;
  /** what the plane serves now: family, VIPs, port and the ready backends (host:port) */
  target(): { family: 4 | 6; vips: readonly string[]; port: number; ready: readonly string[] };
  settings(): RebalanceSettings;
  /**
   * Puts flows about to be reset into the table's evict set (NftablesApplier.evict), before their
   * entries are deleted: without the mark the spread's hash would send a client that speaks first
   * straight back to the same backend. A rejection is logged once per message, and those flows
   * are not reset.
   */
  evict(family: 4 | 6, flows: readonly EvictedFlow[]): Promise<unknown>;
  /**
   * Probes the clients of the flows of `vip` just reset (LoadBalancer.probe, probe.ts), so that a
   * client that only receives (a watch) answers and meets the evict mark's RST at once instead
   * of waiting for its own timeout; runs on by itself, never throws. Absent: no probes.
   */
  probe?(vip: string, clients: readonly { address: string; port: number }[], backend: string): void;
  log: Pick<Log, 'info' | 'warn'>;
  /** ms since the epoch; default Date.now */
  now?: () => number;
}

/** Options of {@link ConnectionTracker}. */
export interface ConnectionTrackerOptions {
  /** ms between counts while nothing is over (default 5000) */
  periodMs?: number;
  /** ms between rounds while a backend is over (default 1000) */
  busyPeriodMs?: number;
}

/** The log message of a rebalance round that reset connections. */
export const REBALANCE_MESSAGE = 'rebalance: reset the oldest connections of an overloaded backend';

/**
 * Counts the VIP data plane's established flows per backend on a timer and, when
 * `settings().enabled`, rebalances (see the file comment). One dump per round, synchronous
 * (about 10 ms of CPU per 2,000 conntrack entries, most of it the kernel building the dump); a failing dump is logged once per distinct message.
 */
export class ConnectionTracker {
  readonly #deps: ConnectionTrackerDeps;
  readonly #periodMs: number;
  readonly #busyMs: number;
  #memory: RebalanceMemory = { overSince: new Map(), resets: [] };
  #connections: Record<string, number> = {};
  #countedAt: number | null = null;
  #last: RebalanceDecision | null = null;
  #timestamped = 0;
  readonly #resets: Record<string, number> = {};
  #lastRound: RebalanceStatus['lastRound'] = null;
  #lastError: string | null = null;
  #evictError: string | null = null;
  /** the marked resets of a round, while under way (see #resetMarked) */
  #pending: Promise<void> | null = null;
  #timer: NodeJS.Timeout | null = null;
  #running = false;

  /**
   * @param deps the conntrack dump, the settings, the clock and the log (injected; tests fake the kernel).
   * @param o count periods, ms: `periodMs` (default 5000) while nothing is over its bound,
   *   `busyPeriodMs` (default 1000) while a backend is. Nothing runs until {@link start}.
   */
  constructor(deps: ConnectionTrackerDeps, o: ConnectionTrackerOptions = {}) {
    this.#deps = deps;
    this.#periodMs = o.periodMs ?? 5000;
    this.#busyMs = o.busyPeriodMs ?? 1000;
  }

  /** Starts the rounds (the first one now). @returns the undo: stops them. */
  start(): () => void {
    this.#running = true;
    this.kick();
    return () => {
      this.#running = false;
      if (this.#timer) clearTimeout(this.#timer);
      this.#timer = null;
    };
  }

  /** A round now (settings changed), then the next one after the period it calls for; nothing once stopped. */
  kick(): void {
    if (!this.#running) return;
    if (this.#timer) clearTimeout(this.#timer);
    const busy = this.round();
    this.#timer = setTimeout(() => this.kick(), busy ? this.#busyMs : this.#periodMs);
    this.#timer.unref();
  }

  /**
   * One round: count, decide, reset (when enabled). Never throws.
   * @returns true while a backend is over (the next round comes sooner).
   */
  round(): boolean {
    const now = (this.#deps.now ?? Date.now)();
    const t = this.#deps.target();
    const s = this.#deps.settings();
    if (t.ready.length === 0 || t.vips.length === 0) {
      this.#connections = {};
      this.#memory = { overSince: new Map(), resets: this.#memory.resets };
      this.#last = null;
      return false;
    }
    let flows: ConntrackVipFlows;
    try {
      flows = this.#deps.read({ family: t.family, vips: t.vips, port: t.port });
    } catch (err) {
      this.#fail(err);
      return false;
    }
    this.#lastError = null;
    this.#countedAt = now;
    this.#timestamped = flows.timestamped;
    const counts = new Map<string, number>();
    for (const b of t.ready) counts.set(b, 0);
    for (const b of flows.backends) counts.set(hostPort(b.address, b.port), b.established);
    this.#connections = Object.fromEntries(counts);
    const d = decide({ now, ready: t.ready, counts, memory: this.#memory, settings: s });
    this.#memory = d.memory;
    this.#last = d;
    if (!s.enabled) return false;
    // a reset under way (its nft run) finishes first; the next round decides again
    if (this.#pending === null && d.targets.length > 0) this.#pending = this.#resetMarked(t, d, counts).finally(() => void (this.#pending = null));
    return d.over.length > 0;
  }

  /**
   * The resets of one round, each target in turn: choose its oldest flows (a dry run), put them
   * into the evict set, and only then delete their entries (those flows only): a client segment
   * arriving after the delete then always finds its mark. A failed mark deletes nothing (the
   * reset would not move a client that speaks first), logged once per message.
   */
  async #resetMarked(t: ReturnType<ConnectionTrackerDeps['target']>, d: RebalanceDecision, counts: Map<string, number>): Promise<void> {
    for (const { backend, count } of d.targets) {
      const { address, port } = splitBackend(backend);
      let chosen: readonly EvictedFlow[];
      try {
        chosen = this.#deps.read({ family: t.family, vips: t.vips, port: t.port, reset: { address, port, count, dryRun: true } }).reset?.flows ?? [];
      } catch (err) {
        this.#fail(err);
        return;
      }
      if (chosen.length === 0) continue;
      try {
        await this.#deps.evict(t.family, chosen);
        this.#evictError = null;
      } catch (err) {
        const msg = err instanceof Error ? err.message : String(err);
        if (msg !== this.#evictError)
          this.#deps.log.warn({ err: msg, backend, flows: chosen.length }, 'rebalance: cannot mark the flows to reset for a RST; not resetting them');
        this.#evictError = msg;
        return;
      }
      if (!this.#running) return;
      this.#delete((this.#deps.now ?? Date.now)(), t, d, backend, chosen.length, counts, chosen);
    }
  }

  /** Deletes the `count` oldest flows of `backend` among `only` (the marked ones), records and logs them. */
  #delete(
    now: number,
    t: ReturnType<ConnectionTrackerDeps['target']>,
    d: RebalanceDecision,
    backend: string,
    count: number,
    counts: Map<string, number>,
    only: readonly EvictedFlow[],
  ): void {
    const { address, port } = splitBackend(backend);
    let deleted: number;
    let flows: readonly EvictedFlow[];
    try {
      const r = this.#deps.read({ family: t.family, vips: t.vips, port: t.port, reset: { address, port, count, only } });
      deleted = r.reset?.deleted ?? 0;
      flows = r.reset?.flows ?? [];
    } catch (err) {
      this.#fail(err);
      return;
    }
    // their clients, per VIP: a watch speaks only when asked
    const byVip = new Map<string, { address: string; port: number }[]>();
    for (const f of flows) {
      const list = byVip.get(f.vip) ?? [];
      list.push({ address: f.source, port: f.sourcePort });
      byVip.set(f.vip, list);
    }
    for (const [vip, clients] of byVip) this.#deps.probe?.(vip, clients, backend);
    this.#memory = recordResets(this.#memory, now, deleted, d.total);
    if (deleted === 0) return;
    this.#resets[backend] = (this.#resets[backend] ?? 0) + deleted;
    const before = counts.get(backend) ?? 0;
    this.#connections[backend] = Math.max(0, before - deleted);
    this.#lastRound = { at: new Date(now).toISOString(), backend, before, reset: deleted };
    this.#deps.log.info(
      { backend, before, reset: deleted, total: d.total, fair: round1(d.fair!), bound: round1(d.bound!), over: d.over, connections: this.#connections },
      REBALANCE_MESSAGE,
    );
  }

  #fail(err: unknown): void {
    const msg = err instanceof Error ? err.message : String(err);
    if (msg !== this.#lastError) this.#deps.log.warn({ err: msg }, 'cannot count the VIP connections in conntrack (rebalancing waits)');
    this.#lastError = msg;
  }

  /** Connections and the rebalancer for /status (copies). */
  status(): TrafficStatus {
    const s = this.#deps.settings();
    const d = this.#last;
    return {
      connections: { ...this.#connections },
      countedAt: this.#countedAt === null ? null : new Date(this.#countedAt).toISOString(),
      rebalance: {
        enabled: s.enabled,
        factor: s.factor,
        afterMs: s.afterMs,
        resetsPerSecond: s.resetsPerSecond,
        maxFractionPerMinute: s.maxFractionPerMinute,
        state: d === null ? null : !s.enabled && d.over.length > 0 ? 'off' : d.why,
        fair: d?.fair ?? null,
        bound: d?.bound ?? null,
        over: (d?.over ?? []).map((b) => ({ backend: b, since: new Date(d!.memory.overSince.get(b)!).toISOString() })),
        resets: { ...this.#resets },
        lastRound: this.#lastRound,
        timestamped: this.#timestamped,
      },
      lastError: this.#lastError,
    };
  }
}

const round1 = (n: number): number => Math.round(n * 10) / 10;

/** `10.0.0.11:6443` / `[fd00::11]:6443` → address and port. */
function splitBackend(backend: string): { address: string; port: number } {
  const i = backend.lastIndexOf(':');
  return { address: backend.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(backend.slice(i + 1)) };
}
