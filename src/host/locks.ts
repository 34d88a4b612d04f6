/**
 * The locks that keep two agents from fighting over one thing in a network namespace: an
 * instance (VRID, interface, family), a VIP, an nftables table, the local endpoint. Each is an
 * abstract UNIX socket (unix(7)): it belongs to the network namespace and vanishes with the
 * process, so a crash never leaves a stale lock. Taken by the agent's preflight and by
 * `ballast cleanup` and `ballast check`, which must leave a running agent's things alone.
 */
import { createServer, type Server as NetServer } from 'node:net';
import { createError } from '../errors.js';
import { canonicalAddress } from '../net/address.js';

/**
 * A lock taken in place of the one held (a reload's hand-over): both are held until one of the
 * two calls. Each call does something once; later calls do nothing.
 */
export interface LockSwap {
  /** The change went through: releases the previous lock. */
  commit(): void;
  /** The change was given up: releases the new lock; the previous one is the held one again. */
  abort(): void;
}

/** A held lock, named by what it locks. */
type Held = { key: string; lock: NetServer } | null;

/**
 * The election's locks, held for the agent's life and changed by a reload: the instance lock
 * (VRID, interface, family: {@link acquireInstanceLock}), one per VIP ({@link acquireVipLock})
 * and, with the nftables VIP data plane, its family's table lock ({@link acquireTableLock}).
 */
export class ElectionLocks {
  #instance: Held = null;
  #table: Held = null;
  readonly #vips = new Map<string, NetServer>();

  /** The VIPs whose locks are held now (canonical text, in the order they were taken). */
  vips(): string[] {
    return [...this.#vips.keys()];
  }

  /**
   * Takes the instance lock of `ifname`, `family`, `vrid` (nothing when it is the one held).
   * @returns commit once the old election has stopped; abort when the hand-over is given up.
   * @throws BallastError BALLAST_E_ALREADY_RUNNING, BALLAST_E_SOCKET (the previous lock is still held then).
   */
  instance(ifname: string, family: 4 | 6, vrid: number): Promise<LockSwap> {
    return this.#swap('instance', `${ifname}:${family}:${vrid}`, () => acquireInstanceLock(ifname, family, vrid));
  }

  /**
   * Takes the nftables table lock of `family` (nothing when it is the one held): a reload that
   * moves the VIP data plane to the other family.
   * @returns commit once the old family's table is gone; abort when the hand-over is given up.
   * @throws BallastError BALLAST_E_ALREADY_RUNNING (another agent programs that table), BALLAST_E_SOCKET.
   */
  table(family: 4 | 6): Promise<LockSwap> {
    return this.#swap('table', `ip${family === 4 ? '' : '6'}`, () => acquireTableLock(family));
  }

  async #swap(which: 'instance' | 'table', key: string, acquire: () => Promise<NetServer>): Promise<LockSwap> {
    const get = (): Held => (which === 'instance' ? this.#instance : this.#table);
    const set = (h: Held): void => void (which === 'instance' ? (this.#instance = h) : (this.#table = h));
    const old = get();
    if (old?.key === key) return { commit: () => undefined, abort: () => undefined };
    const next = { key, lock: await acquire() };
    set(next);
    let settled = false;
    return {
      commit: () => {
        if (settled) return;
        settled = true;
        old?.lock.close();
      },
      abort: () => {
        if (settled) return;
        settled = true;
        next.lock.close();
        if (get() === next) set(old);
      },
    };
  }

  /**
   * Takes the lock of each VIP not held yet; all or nothing: when one fails, those taken by this
   * call are released before the error is thrown.
   * @throws BallastError BALLAST_E_ALREADY_RUNNING naming the VIP another agent holds.
   */
  async addVips(vips: readonly string[]): Promise<void> {
    const taken: string[] = [];
    try {
      for (const vip of vips) {
        const c = canonicalAddress(vip);
        if (this.#vips.has(c)) continue;
        this.#vips.set(c, await acquireVipLock(c));
        taken.push(c);
      }
    } catch (err) {
      this.releaseVips(taken);
      throw err;
    }
  }

  /** Releases the locks of `vips` (those held). */
  releaseVips(vips: readonly string[]): void {
    for (const vip of vips) {
      const c = canonicalAddress(vip);
      this.#vips.get(c)?.close();
      this.#vips.delete(c);
    }
  }

  /** Releases every lock. */
  close(): void {
    this.releaseVips([...this.#vips.keys()]);
    this.#table?.lock.close();
    this.#table = null;
    this.#instance?.lock.close();
    this.#instance = null;
  }
}

/**
 * One agent per VRID, interface and family in a network namespace: two would delete each
 * other's VIP. The lock is an abstract UNIX socket (unix(7)), which belongs to the network
 * namespace and vanishes with the process, so a crash never leaves a stale lock.
 * @throws BallastError BALLAST_E_ALREADY_RUNNING when another agent holds it.
 */
export function acquireInstanceLock(ifname: string, family: 4 | 6, vrid: number): Promise<NetServer> {
  return abstractLock(`ballast:${ifname}:ipv${family}:vrid${vrid}`, `runs VRID ${vrid} (IPv${family}) on ${ifname}`);
}

/**
 * One agent per VIP in a network namespace, whatever its VRID or interface: two agents with the
 * same VIP would each remove it while the other holds it. Named by the canonical address
 * (RFC 5952 for IPv6), so two spellings of one address collide.
 * @throws BallastError BALLAST_E_ALREADY_RUNNING naming the VIP when another agent holds it.
 */
export function acquireVipLock(vip: string): Promise<NetServer> {
  const c = canonicalAddress(vip);
  return abstractLock(`ballast:vip:${c}`, `manages the VIP ${c} (vips)`);
}

/**
 * One agent per nftables table in a network namespace: `table ip ballast` (`ip6` for IPv6 VIPs)
 * is replaced whole by each apply, so two agents with the VIP data plane, whatever their VRIDs
 * and VIPs, would each delete the other's rules (and the one that stops, the table).
 * @throws BallastError BALLAST_E_ALREADY_RUNNING when another agent holds it.
 */
export function acquireTableLock(family: 4 | 6): Promise<NetServer> {
  const table = family === 4 ? 'ip ballast' : 'ip6 ballast';
  return abstractLock(
    `ballast:nftables:${table.replace(' ', ':')}`,
    `programs the nftables table ${table} (dataplane.vip: nftables); one agent per network namespace and family can, give the other dataplane.vip: none`,
  );
}

/**
 * One agent without an election per network namespace (two would fight over the local endpoint).
 * @throws BallastError BALLAST_E_ALREADY_RUNNING when another agent holds it.
 */
export function acquireEndpointLock(): Promise<NetServer> {
  return abstractLock('ballast:local-endpoint', 'serves a local endpoint without an election');
}

async function abstractLock(name: string, what: string): Promise<NetServer> {
  const server = createServer((c) => c.destroy());
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ path: `\0${name}` }, () => resolve());
    });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE') {
      throw createError('BALLAST_E_ALREADY_RUNNING', `another ballast agent already ${what} in this network namespace (lock @${name})`);
    }
    throw createError('BALLAST_E_SOCKET', `cannot take the instance lock @${name}: ${(err as Error).message}`, { cause: err });
  }
  server.unref();
  return server;
}
