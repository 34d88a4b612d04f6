/**
 * The node-local endpoint's data plane: what the agent needs from either implementation, and the
 * reconcile {@link Plane} over it (apply = setBackends, reset = destroy the dead backend's sockets).
 *
 * - `ebpf` (src/dataplane/ebpf.ts): cgroup connect4/connect6 programs rewrite a connect() to an
 *   endpoint (127.0.0.1:7443, [::1]:7443, VIP:6443) into a ready backend before the first packet
 *   exists; getpeername4/6 translate back. No process on the data path.
 * - `proxy` (src/dataplane/proxy.ts): a TCP proxy in the agent bound to the endpoints, for hosts
 *   where BPF cannot be used. The slower path: every byte is copied through user space.
 *
 * Both take the same inputs: the ready set (whole replacement) and "this backend is dead, reset
 * what was sent to it".
 */
import { formatHostPort, type HostPort } from '../net/hostport.js';
import type { Verdict } from '../health/verdict.js';
import type { Plane, ReadySet } from './reconcile.js';
import type { Log } from '../log/log.js';

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

/** The log messages of this plane's reconcile (see ReconcileOptions). */
export const LOCAL_PLANE_MESSAGES = {
  applyFailed: 'local endpoint update failed; the previous backends stay',
  resetFailed: 'cannot reset local endpoint connections to a dead backend',
} as const;

/**
 * A {@link LocalDataplane} as a reconcile plane: the ready set, plus the backends without a
 * verdict yet that the data plane already had (a restarted agent took over a map that still
 * balances clients: such a backend keeps its place until its first verdict, so the restart
 * costs no connection). The map is rewritten only when that set changed.
 */
export class LocalBalancer implements Plane {
  readonly #dp: LocalDataplane;
  readonly #log: Pick<Log, 'info'>;
  /** the set last written (a key), null before the first write */
  #applied: string | null = null;

  constructor(dp: LocalDataplane, log: Pick<Log, 'info'>) {
    this.#dp = dp;
    this.#log = log;
  }

  /** The data plane's status. */
  status(): LocalDataplaneStatus {
    return this.#dp.status();
  }

  /**
   * Plane.apply: writes the ready backends, plus unjudged ones the data plane already serves (a
   * restarted agent keeps what it inherited until their first verdict); skipped when unchanged.
   * @returns the backends now served, in the checker's order.
   * @throws what setBackends throws (the map or the proxy keeps its previous set).
   */
  async apply(set: ReadySet): Promise<readonly HostPort[]> {
    const inherited = new Set(this.#dp.status().backends);
    const ready = new Set(set.ready);
    const unknown = new Set(set.unknown);
    // in the checker's order: ready ones, and unjudged ones the map already had
    const serve = set.all.filter((b) => ready.has(b) || (unknown.has(b) && inherited.has(formatHostPort(b))));
    const key = serve.map(formatHostPort).join(',');
    if (key !== this.#applied) {
      await this.#dp.setBackends(serve.map((b) => ({ address: b.host, port: b.port })));
      this.#applied = key;
    }
    return serve;
  }

  /** Plane.reset: destroys the sockets sent to the dead backend (sock_diag for ebpf, the sessions for the proxy). @returns how many. */
  async reset(v: Verdict): Promise<number> {
    const n = await this.#dp.resetBackend({ address: v.backend.host, port: v.backend.port });
    if (n > 0)
      this.#log.info(
        { backend: formatHostPort(v.backend), reason: v.message, cause: v.cause.kind, sockets: n, mode: this.#dp.mode },
        'dead backend: local endpoint connections reset',
      );
    return n;
  }
}
