/**
 * The BPF socket load balancer (bpf/sock_lb.bpf.c, native/bpf_loader.cc): attach, its maps,
 * detach, and the cgroup and network-namespace facts it depends on.
 */
import { isIPv4 } from 'node:net';
import { join } from 'node:path';
import { native, packageRoot, type CgroupHookPrograms, type RawSockLb, type SockAddress, type SockLbEntry, type SockLbReverse } from './addon.js';
import { checkCookie, checkPath, checkSockAddress } from './checks.js';

const MAX_BACKENDS = 64; // BALLAST_LB_MAX_BACKENDS in bpf/sock_lb.h

/** Options of {@link SockLb.attach}. */
export interface SockLbOptions {
  /** absolute path of the BPF object; default {@link sockLbObjectPath} */
  object?: string;
  /** absolute path of a cgroup v2 directory; the programs run for every process in its subtree */
  cgroup: string;
  /** absolute directory on a bpf filesystem, e.g. /sys/fs/bpf/ballast/local; created (0700) */
  pinDir: string;
}

/** Absolute path of the socket load balancer's BPF object: <package root>/build/Release/ballast_sock_lb.bpf.o. */
export function sockLbObjectPath(): string {
  return join(packageRoot(), 'build', 'Release', 'ballast_sock_lb.bpf.o');
}

/**
 * The cgroup socket load balancer: bpf/sock_lb.bpf.c loaded, its maps pinned and its four
 * programs (connect4, connect6, getpeername4, getpeername6) attached to a cgroup v2 through
 * bpf_links pinned in `pinDir`. A handle holds only the three map descriptors; the programs stay
 * attached through their pinned links whether or not any handle is open, until
 * {@link SockLb.detach}. Every call is synchronous (a few bpf(2) syscalls, microseconds).
 *
 * Sources: libbpf API (bpf_object__load, bpf_program__attach_cgroup, bpf_link__pin,
 * bpf_link__update_program), bpf(2), Documentation/bpf/prog_cgroup_sockaddr.rst (the hooks).
 */
export class SockLb {
  /** The pin directory, as attached. */
  readonly pinDir: string;
  /** The cgroup, as attached. */
  readonly cgroup: string;
  /**
   * What this attach found already pinned: `maps` reused with their contents (names, e.g.
   * "ballast_lb_ep"), `links` whose program was replaced in place (program names, e.g.
   * "ballast_conn4"). Both empty on a first attach.
   */
  readonly reused: { readonly maps: readonly string[]; readonly links: readonly string[] };
  readonly #raw: RawSockLb;

  private constructor(raw: RawSockLb, cgroup: string, pinDir: string) {
    this.#raw = raw;
    this.cgroup = cgroup;
    this.pinDir = pinDir;
    const r = raw.reused;
    this.reused = { maps: [...r.maps], links: [...r.links] };
  }

  /**
   * Loads the object and attaches it, without a gap when it was attached before:
   * 1. mounts bpffs on /sys/fs/bpf when `pinDir` is below it and nothing is mounted there;
   *    creates `pinDir` (mode 0700);
   * 2. maps pinned in `pinDir` (ballast_lb_ep, ballast_lb_rev, ballast_lb_cfg) are reused with
   *    their contents; missing ones are created and pinned;
   * 3. for each program, a link pinned as `pinDir`/link_<program> that is attached to `cgroup`
   *    gets the new program atomically (BPF_LINK_UPDATE); otherwise the program is attached
   *    (BPF_LINK_CREATE) and its link pinned. Links pinned by this call are unpinned again when
   *    a later step fails.
   * The netns cookie is not touched: a first attach leaves it 0 (nothing is rewritten) until
   * {@link SockLb.setNetnsCookie}.
   * @throws TypeError when a path is not absolute.
   * @throws NativeError with `syscall` naming the step: ENOENT "bpf_object__open_file" (object
   *   not built), EINVAL "fstatfs" (not a cgroup v2 directory), EINVAL "statfs" (pinDir not on
   *   bpffs), EPERM "bpf_object__load" (no CAP_BPF / CAP_NET_ADMIN / CAP_SYS_ADMIN: the message
   *   says which), EINVAL "bpf_object__load" (the verifier refused, or a pinned map has an
   *   incompatible layout; the message carries libbpf's log), EEXIST "bpf_link__open" (pinDir
   *   holds links attached to another cgroup).
   * @throws BallastError BALLAST_E_ADDON_MISSING when the addon is not built.
   */
  static attach(opts: SockLbOptions): SockLb {
    if (typeof opts !== 'object' || opts === null) throw new TypeError('opts must be an object');
    const object = opts.object ?? sockLbObjectPath();
    checkPath('object', object);
    checkPath('cgroup', opts.cgroup);
    checkPath('pinDir', opts.pinDir);
    const { SockLb: Raw } = native();
    return new SockLb(new Raw(object, opts.cgroup, opts.pinDir), opts.cgroup, opts.pinDir);
  }

  /**
   * Replaces the endpoint's backends as one value (a connect() sees the old set or the new one,
   * never a mix). An empty list leaves connect()s to the endpoint untouched.
   * @param endpoint the address:port clients connect() to.
   * @param backends 0..64 addresses of the endpoint's own family; one is picked per connect()
   *   uniformly at random (bpf_get_prandom_u32() % count). Duplicates weigh more.
   * @throws TypeError on a bad address, a family mismatch, or more than 64 backends.
   * @throws NativeError E2BIG (the endpoints map holds 64 endpoints), EBADF when closed.
   */
  setEndpoint(endpoint: SockAddress, backends: readonly SockAddress[]): void {
    checkSockAddress('endpoint', endpoint);
    const family = isIPv4(endpoint.address) ? 4 : 6;
    if (!Array.isArray(backends)) throw new TypeError('backends must be an array');
    if (backends.length > MAX_BACKENDS) throw new TypeError(`backends must hold at most ${MAX_BACKENDS} entries, got ${backends.length}`);
    backends.forEach((b, i) => checkSockAddress(`backends[${i}]`, b, family));
    this.#raw.setEndpoint(endpoint, backends);
  }

  /**
   * Removes the endpoint (connect()s to it are left untouched from now on).
   * @returns false when it was not in the map.
   * @throws NativeError EBADF when closed.
   */
  deleteEndpoint(endpoint: SockAddress): boolean {
    checkSockAddress('endpoint', endpoint);
    return this.#raw.deleteEndpoint(endpoint);
  }

  /** Every endpoint in the map with its backends (map order). @throws NativeError EBADF when closed. */
  readEndpoints(): SockLbEntry[] {
    return this.#raw.readEndpoints();
  }

  /**
   * Names the network namespace whose sockets are rewritten, by its cookie ({@link netnsCookie}
   * run in that namespace); 0n rewrites nothing. The programs compare it with
   * bpf_get_netns_cookie() of the connecting socket.
   * @throws TypeError when `cookie` is not a bigint in 0..2^64-1. @throws NativeError EBADF when closed.
   */
  setNetnsCookie(cookie: bigint): void {
    checkCookie('cookie', cookie);
    this.#raw.setNetnsCookie(cookie);
  }

  /** The netns cookie in the config map (0n: unset). @throws NativeError EBADF when closed. */
  netnsCookie(): bigint {
    return this.#raw.getNetnsCookie();
  }

  /**
   * What the getpeername() map holds for a socket cookie: the endpoint it connect()ed to and the
   * backend it got, or null when the socket was not balanced (or its entry was evicted: the map
   * is an LRU of 65536 sockets).
   * @throws TypeError when `cookie` is not a bigint. @throws NativeError EBADF when closed.
   */
  reverse(cookie: bigint): SockLbReverse | null {
    checkCookie('cookie', cookie);
    return this.#raw.reverse(cookie);
  }

  /** Closes the map descriptors; the programs stay attached and the pins stay. Idempotent. */
  close(): void {
    this.#raw.close();
  }

  /**
   * Detaches for good: each pinned link in `pinDir` is detached (BPF_LINK_DETACH, so the
   * programs have stopped when this returns) and unpinned, then the maps are unpinned (freed
   * once no handle holds them) and `pinDir` is removed.
   * @returns how many pins were removed (7 for a full attachment; 0 when `pinDir` is absent).
   * @throws TypeError when `pinDir` is not absolute.
   * @throws NativeError EINVAL "statfs" when `pinDir` is not on bpffs (nothing is removed),
   *   ENOTEMPTY "rmdir" when it holds a subdirectory.
   */
  static detach(pinDir: string): number {
    checkPath('pinDir', pinDir);
    return native().bpfDetach(pinDir);
  }
}

/**
 * The cookie of the calling thread's network namespace (getsockopt SO_NETNS_COOKIE on a fresh
 * AF_UNIX socket; socket(7), Linux 5.14): the value bpf_get_netns_cookie() returns for sockets
 * of this namespace.
 * @throws NativeError ENOPROTOOPT before Linux 5.14.
 */
export function netnsCookie(): bigint {
  return native().netnsCookie();
}

/**
 * The programs attached directly to `cgroup` at the four hooks the load balancer uses
 * (BPF_PROG_QUERY, bpf(2)); inherited ones are not listed.
 * @throws NativeError EINVAL "fstatfs" when `cgroup` is not a cgroup v2 directory; EPERM
 *   without CAP_BPF / CAP_NET_ADMIN.
 */
export function cgroupPrograms(cgroup: string): CgroupHookPrograms[] {
  checkPath('cgroup', cgroup);
  return native().cgroupPrograms(cgroup);
}
