/**
 * The load balancer: turns backend health into the nftables data plane, and tells the two kinds
 * of "down" apart.
 *
 *   health change ──► desired set (healthy backends) ──► one nft transaction
 *                                       └─► dead backends: conntrack entries deleted after the apply
 *
 * *Unready but alive* (its /readyz answered, with an error status: an apiserver in its graceful
 * shutdown delay) leaves the set, and its established connections drain. *Dead* (refused, reset,
 * silent, its node gone) leaves the set and its flows' conntrack entries are deleted, so clients
 * get a RST on their next packet and reconnect to a live apiserver.
 */
import type { BackendHealth, HealthChange } from '../health/checker.js';
import { parseAddress } from '../health/checker.js';
import type { Backend, DesiredDataplane } from './nftables.js';
import { addressFamily, hostPort } from '../net/address.js';
import { Coalescer } from './coalesce.js';

/**
 * Whether a failure reason means the backend is gone (as opposed to answering "not ready").
 * HTTP statuses and TLS failures come from a process that is still there, and a local problem
 * (this node cannot read its CA or token file) says nothing about the backend; everything else
 * (refused, reset, timeouts, passive verdicts, the node's VRRP silence) means it is gone.
 */
export function isDeadReason(reason: string | null): boolean {
  if (reason === null) return false;
  return !/^(http \d+|tls|cannot read |tokenFile |aborted)/.test(reason);
}

/**
 * The desired data plane for a health snapshot (pure).
 * @param local addresses of this node (canonical), to mark its own apiserver.
 */
export function desiredDataplane(
  snapshot: readonly BackendHealth[],
  o: { family: 4 | 6; vips: readonly string[]; port: number; local: ReadonlySet<string> },
): DesiredDataplane {
  const toBackend = (b: BackendHealth): Backend => {
    const t = parseAddress(b.address);
    return { address: t.host, port: t.port, local: o.local.has(t.host) };
  };
  // backends of the other family serve only a local endpoint of that family: DNAT cannot reach them
  const ours = snapshot.filter((b) => addressFamily(parseAddress(b.address).host) === o.family);
  return {
    family: o.family,
    vips: [...o.vips],
    port: o.port,
    backends: ours.filter((b) => b.healthy).map(toBackend),
    draining: ours.filter((b) => !b.healthy && b.state === 'down' && !isDeadReason(b.reason)).map(toBackend),
    masqueradeRemote: true,
  };
}

/** What the controller needs from the outside world (injected, so tests can fake it). */
export interface LoadBalancerDeps {
  apply(d: DesiredDataplane): Promise<{ changed: boolean; durationMs: number }>;
  /** Deletes conntrack entries of flows to `vip`:`port` DNATed to `backend`; resolves with how many. */
  flush(vip: string, port: number, backend: { address: string; port: number }): Promise<number>;
  snapshot(): BackendHealth[];
  log: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void };
}

/** The last apply, for /status and metrics. */
export interface DataplaneStatus {
  mode: 'nftables';
  /** The backends in the ruleset now (host:port). */
  backends: string[];
  applies: number;
  failures: number;
  lastApplyMs: number | null;
  lastError: string | null;
  flushedEntries: number;
}

/**
 * Applies health to the data plane, one transaction at a time, coalescing bursts of changes.
 */
export class LoadBalancer {
  private readonly applies = new Coalescer(() => this.applyNow());
  private readonly toFlush = new Map<string, string>();
  /** Backends whose flows were reset since they last left the set (reset once per death). */
  private readonly flushed = new Set<string>();
  private readonly st: DataplaneStatus = { mode: 'nftables', backends: [], applies: 0, failures: 0, lastApplyMs: null, lastError: null, flushedEntries: 0 };

  constructor(
    private readonly deps: LoadBalancerDeps,
    private readonly o: { family: 4 | 6; vips: readonly string[]; port: number; local: ReadonlySet<string> },
  ) {}

  /** Status of the data plane (a copy). */
  status(): DataplaneStatus {
    return { ...this.st, backends: [...this.st.backends] };
  }

  /** A backend changed state: re-apply; a dead one also gets its flows reset. */
  onChange(c: HealthChange): void {
    if (c.to === 'down' && isDeadReason(c.reason)) this.toFlush.set(c.backend, c.reason ?? 'down');
    this.sync();
  }

  /**
   * Looks for backends that are already out of the set but became dead since (a draining
   * backend whose node then died: no state change, only its reason changed). Call it after
   * every check and every passive verdict; it applies only when there is something to reset.
   */
  noteHealth(): void {
    let found = false;
    for (const b of this.deps.snapshot()) {
      if (b.healthy) {
        this.flushed.delete(b.address);
      } else if (b.state === 'down' && isDeadReason(b.reason) && !this.flushed.has(b.address) && !this.toFlush.has(b.address)) {
        this.toFlush.set(b.address, b.reason ?? 'down');
        found = true;
      }
    }
    if (found) void this.sync();
  }

  /**
   * Applies the current snapshot (coalesced: many calls in one tick make one transaction).
   * @returns a promise that settles when that apply is done (errors are logged, not thrown).
   */
  sync(): Promise<void> {
    return this.applies.schedule();
  }

  private async applyNow(): Promise<void> {
    const d = desiredDataplane(this.deps.snapshot(), this.o);
    try {
      const r = await this.deps.apply(d);
      this.st.applies++;
      this.st.lastApplyMs = r.durationMs;
      this.st.lastError = null;
      const now = d.backends.map((b) => hostPort(b.address, b.port));
      if (r.changed) this.deps.log.info({ backends: now, draining: (d.draining ?? []).length, durationMs: Math.round(r.durationMs * 10) / 10 }, 'data plane applied');
      this.st.backends = now;
    } catch (err) {
      this.st.failures++;
      this.st.lastError = (err as Error).message;
      this.deps.log.error({ err: (err as Error).message }, 'data plane apply failed; the previous rules stay');
      return;
    }
    // only after the ruleset without them is in place: a reset client's next packet must not be DNATed back
    for (const [address, reason] of this.toFlush) {
      this.toFlush.delete(address);
      if (d.backends.some((b) => address === hostPort(b.address, b.port))) continue;
      const t = parseAddress(address);
      let n = 0;
      for (const vip of this.o.vips) {
        try {
          n += await this.deps.flush(vip, this.o.port, { address: t.host, port: t.port });
        } catch (err) {
          this.deps.log.warn({ backend: address, err: (err as Error).message }, 'cannot reset connections to a dead backend');
        }
      }
      this.st.flushedEntries += n;
      this.flushed.add(address);
      this.deps.log.info({ backend: address, reason, entries: n }, 'dead backend: its connections were reset');
    }
  }
}
