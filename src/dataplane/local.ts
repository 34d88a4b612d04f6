/**
 * The node-local endpoint's data plane: what the agent needs from either implementation.
 *
 * - `ebpf` (src/dataplane/ebpf.ts): cgroup connect4/connect6 programs rewrite a connect() to an
 *   endpoint (127.0.0.1:7443, [::1]:7443, VIP:6443) into a ready backend before the first packet
 *   exists; getpeername4/6 translate back. No process on the data path.
 * - `proxy` (src/dataplane/proxy.ts): a TCP proxy in the agent bound to the endpoints, for hosts
 *   where BPF cannot be used. The slower path: every byte is copied through user space.
 *
 * Both take the same inputs from the health checker: the ready set (whole replacement) and
 * "this backend is dead, reset what was sent to it".
 */
import type { BackendHealth } from '../health/checker.js';
import { parseAddress } from '../health/checker.js';
import { isDeadReason } from './controller.js';
import { Coalescer } from './coalesce.js';

/** One apiserver the endpoint balances to. */
export interface LocalBackend {
  /** IPv4 or IPv6 address, canonical text ("10.0.0.11", "fd00::11"). */
  address: string;
  /** TCP port, 1..65535. */
  port: number;
}

/** One address:port the data plane serves (a connect() to it is balanced). */
export interface LocalEndpoint {
  /** "127.0.0.1", "::1", or a VIP. */
  address: string;
  /** TCP port, 1..65535 (7443 for the local endpoint, 6443 for VIP:port). */
  port: number;
}

/** What /status shows of the local data plane. */
export interface LocalDataplaneStatus {
  mode: 'ebpf' | 'proxy';
  /** The endpoints served, as host:port ("127.0.0.1:7443", "[::1]:7443"). */
  endpoints: string[];
  /** The backends new connections go to now, as host:port, in order. */
  backends: string[];
  /** Updates applied since start. */
  updates: number;
  /** Sockets destroyed because their backend died, since start. */
  socketsReset: number;
  /** ebpf only: what the kernel's endpoints map holds now, read back (host:port → backends). */
  map?: Record<string, string[]>;
}

/** The node-local endpoint's data plane (either mode). */
export interface LocalDataplane {
  readonly mode: 'ebpf' | 'proxy';
  /**
   * Replaces the ready set (new connections go only to these; an endpoint's backends are the
   * ones of its own address family). An empty set for a family means connect()s to that
   * family's endpoints are left untouched (ebpf) or refused (proxy).
   */
  setBackends(ready: readonly LocalBackend[]): Promise<void>;
  /**
   * The backend is dead (refused, reset, silent): destroys the established connections that
   * were sent to it through the endpoint, so their clients reconnect at once.
   * @returns how many sockets were destroyed.
   */
  resetBackend(backend: LocalBackend): Promise<number>;
  status(): LocalDataplaneStatus;
  /**
   * Stops serving. `keep: true` (an agent restart, ebpf mode) leaves the pinned programs and
   * maps in place so clients are not interrupted; `keep: false` removes everything it created.
   */
  close(opts: { keep: boolean }): Promise<void>;
}

/**
 * Feeds backend health to a {@link LocalDataplane}: the healthy set on every change (coalesced;
 * backends not yet checked keep whatever the data plane already had for them), and a reset of the connections of a backend that died (once per death, after the set without
 * it is in place, so a reconnect cannot land on it again).
 */
export class LocalBalancer {
  private readonly applies = new Coalescer(() => this.applyNow());
  private readonly toReset = new Map<string, string>();
  private readonly reset = new Set<string>();
  private failures = 0;
  private lastError: string | null = null;
  /** The set last written (a key), null before the first write. */
  private applied: string | null = null;

  constructor(
    private readonly dp: LocalDataplane,
    private readonly deps: {
      snapshot(): readonly BackendHealth[];
      log: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void };
    },
  ) {}

  /** The data plane's status, with this controller's failures. */
  status(): LocalDataplaneStatus & { failures: number; lastError: string | null } {
    return { ...this.dp.status(), failures: this.failures, lastError: this.lastError };
  }

  /** A backend changed state (or only its reason did: a draining backend that then died). */
  noteHealth(): Promise<void> {
    for (const b of this.deps.snapshot()) {
      if (b.healthy) this.reset.delete(b.address);
      else if (b.state === 'down' && isDeadReason(b.reason) && !this.reset.has(b.address)) this.toReset.set(b.address, b.reason ?? 'down');
    }
    return this.sync();
  }

  /** Applies the current healthy set (coalesced); resolves when done (errors are logged). */
  sync(): Promise<void> {
    return this.applies.schedule();
  }

  private async applyNow(): Promise<void> {
    const snapshot = this.deps.snapshot();
    // a restarted agent took over a map that still balances clients: a backend in it keeps its
    // place until its first verdict, so the restart costs no connection
    const inherited = new Set(this.dp.status().backends);
    const ready = snapshot.filter((b) => b.healthy || (b.state === 'unknown' && inherited.has(b.address))).map((b) => toLocalBackend(b.address));
    // every check calls in here: rewrite the map only when the set changed
    const key = ready.map((b) => `${b.address}|${b.port}`).join(',');
    if (key === this.applied && this.toReset.size === 0) return;
    try {
      await this.dp.setBackends(ready);
      this.applied = key;
      this.lastError = null;
    } catch (err) {
      this.failures++;
      this.lastError = (err as Error).message;
      this.deps.log.error({ err: this.lastError }, 'local endpoint update failed; the previous backends stay');
      return;
    }
    for (const [address, reason] of this.toReset) {
      this.toReset.delete(address);
      if (snapshot.some((b) => b.healthy && b.address === address)) continue;
      this.reset.add(address);
      try {
        const n = await this.dp.resetBackend(toLocalBackend(address));
        if (n > 0) this.deps.log.info({ backend: address, reason, sockets: n, mode: this.dp.mode }, 'dead backend: local endpoint connections reset');
      } catch (err) {
        this.deps.log.warn({ backend: address, err: (err as Error).message }, 'cannot reset local endpoint connections to a dead backend');
      }
    }
  }
}

function toLocalBackend(address: string): LocalBackend {
  const t = parseAddress(address);
  return { address: t.host, port: t.port };
}
