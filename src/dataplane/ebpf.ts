/**
 * The node-local endpoint in eBPF mode: cgroup connect4/connect6 programs rewrite a connect() to
 * an endpoint (127.0.0.1:7443, [::1]:7443, VIP:6443) into one ready backend before a packet
 * exists, and getpeername4/6 translate back (bpf/sock_lb.bpf.c). No process on the data path;
 * this module only keeps the maps equal to the desired state.
 *
 *   agent (this module)                       kernel
 *   ───────────────────                       ──────
 *   open()        SockLb.attach ───────────►  maps + links pinned in pinDir, programs on cgroup
 *                 setNetnsCookie(this netns)  only this netns's sockets are rewritten
 *   setBackends() setEndpoint (whole value) ► ballast_lb_ep
 *   resetBackend() sock_diag dump ∩ reverse map cookies ─► SOCK_DESTROY
 *   close({keep: true})   handle closed; programs and maps stay (an agent restart: no gap)
 *   close({keep: false})  links detached, pins removed
 *
 * The OS edge (addon calls) is injected ({@link EbpfSys}) so the bookkeeping is unit-tested
 * against a fake; test/integration/ebpf.test.ts runs the same class against the kernel.
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, rmdirSync, statSync } from 'node:fs';
import { mkdir, readFile, rmdir } from 'node:fs/promises';
import net from 'node:net';
import { release } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { createError } from '../errors.js';
import { addressFamily, canonicalAddress, hostPort } from '../net/address.js';
import {
  SockLb,
  lockFile,
  type FileLock,
  destroySockets,
  isNativeError,
  listTcpSockets,
  netnsCookie,
  sockLbObjectPath,
  type SockAddress,
  type SockLbEntry,
  type SockLbOptions,
  type SockLbReverse,
  type TcpSocketFilter,
  type TcpSocketInfo,
} from '../native.js';
import type { LocalBackend, LocalDataplane, LocalDataplaneStatus, LocalEndpoint } from './local.js';
import type { Log } from '../log/log.js';

/** ::ffff:a.b.c.d in canonical form (RFC 4291 §2.5.5.2; canonicalAddress writes the last 32 bits as two groups). */
const V4_MAPPED = /^::ffff:[0-9a-f]{1,4}:[0-9a-f]{1,4}$/;

/** Where the agent pins its maps and links unless told otherwise. */
export const DEFAULT_PIN_DIR = '/sys/fs/bpf/ballast/local';

// ---------------------------------------------------------------------------------------------
// pure helpers (unit-tested)

/** Unescapes a mountinfo path field: the kernel writes space, tab, newline and backslash as \ooo (proc(5)). */
function unescapeMountPath(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/**
 * The mount point of the host's cgroup v2 hierarchy, from /proc/self/mountinfo text (proc(5)):
 * the `cgroup2` mount whose root is "/" (a container's namespaced view has another root),
 * preferring /sys/fs/cgroup (unified hosts), then /sys/fs/cgroup/unified (hybrid hosts, e.g.
 * systemd's "hybrid" mode), then any other.
 * @returns the mount point, or undefined when no cgroup2 hierarchy is mounted.
 */
export function findCgroup2Root(mountinfo: string): string | undefined {
  const candidates: string[] = [];
  for (const line of mountinfo.split('\n')) {
    // id parent major:minor root mountpoint options [optional…] - fstype source superoptions
    const fields = line.trim().split(' ');
    const dash = fields.indexOf('-');
    if (dash < 6 || fields[dash + 1] !== 'cgroup2') continue;
    if (unescapeMountPath(fields[3] ?? '') !== '/') continue;
    candidates.push(unescapeMountPath(fields[4] ?? ''));
  }
  for (const preferred of ['/sys/fs/cgroup', '/sys/fs/cgroup/unified']) {
    if (candidates.includes(preferred)) return preferred;
  }
  return candidates[0];
}

/** True when /proc/self/mountinfo text shows a bpf filesystem mounted at `path`. */
export function isBpffsMounted(mountinfo: string, path = '/sys/fs/bpf'): boolean {
  return mountinfo.split('\n').some((line) => {
    const fields = line.trim().split(' ');
    const dash = fields.indexOf('-');
    return dash >= 6 && fields[dash + 1] === 'bpf' && unescapeMountPath(fields[4] ?? '') === path;
  });
}

/** True when `kernelRelease` (uname -r, e.g. "6.1.0-18-amd64") is at least major.minor. */
export function kernelAtLeast(kernelRelease: string, major: number, minor: number): boolean {
  const m = /^(\d+)\.(\d+)/.exec(kernelRelease);
  if (!m) return false;
  const [maj, min] = [Number(m[1]), Number(m[2])];
  return maj > major || (maj === major && min >= minor);
}

const CAP_NET_ADMIN = 12n;
const CAP_SYS_ADMIN = 21n;
const CAP_BPF = 39n;

/**
 * Which capabilities the socket load balancer lacks, from the `CapEff:` hex of
 * /proc/self/status (capabilities(7)): it needs CAP_BPF and CAP_NET_ADMIN (Linux ≥ 5.8), or
 * CAP_SYS_ADMIN (which covers both for BPF) plus CAP_NET_ADMIN for SOCK_DESTROY.
 * @returns the names missing; empty when enough is held.
 */
export function missingCapabilities(capEffHex: string): string[] {
  const caps = BigInt(`0x${capEffHex.trim() || '0'}`);
  const has = (bit: bigint): boolean => ((caps >> bit) & 1n) === 1n;
  const missing: string[] = [];
  if (!has(CAP_BPF) && !has(CAP_SYS_ADMIN)) missing.push('CAP_BPF (or CAP_SYS_ADMIN)');
  if (!has(CAP_NET_ADMIN)) missing.push('CAP_NET_ADMIN');
  return missing;
}

/**
 * The backends of `ready` that an endpoint of `family` balances to, in order, without duplicates,
 * at most 64 (the map's limit, BALLAST_LB_MAX_BACKENDS).
 */
export function backendsFor(ready: readonly LocalBackend[], family: 4 | 6): SockAddress[] {
  const seen = new Set<string>();
  const out: SockAddress[] = [];
  for (const b of ready) {
    if (addressFamily(b.address) !== family) continue;
    const key = hostPort(b.address, b.port);
    if (seen.has(key) || out.length >= 64) continue;
    seen.add(key);
    out.push({ address: canonicalAddress(b.address), port: b.port });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// the OS edge

/** The part of a {@link SockLb} handle the data plane uses. */
export interface EbpfMaps {
  readonly reused: { readonly maps: readonly string[]; readonly links: readonly string[] };
  setEndpoint(endpoint: SockAddress, backends: readonly SockAddress[]): void;
  deleteEndpoint(endpoint: SockAddress): boolean;
  readEndpoints(): SockLbEntry[];
  setNetnsCookie(cookie: bigint): void;
  reverse(cookie: bigint): SockLbReverse | null;
  close(): void;
}

/** The system calls the data plane makes (src/native.ts), injectable for tests. */
export interface EbpfSys {
  attach(opts: SockLbOptions): EbpfMaps;
  detach(pinDir: string): number;
  netnsCookie(): bigint;
  listTcpSockets(filter: TcpSocketFilter): TcpSocketInfo[];
  destroySockets(filter: TcpSocketFilter): number;
}

/** The real kernel, through the addon. */
export const nativeEbpfSys: EbpfSys = {
  attach: (opts) => SockLb.attach(opts),
  detach: (pinDir) => SockLb.detach(pinDir),
  netnsCookie: () => netnsCookie(),
  listTcpSockets: (filter) => listTcpSockets(filter),
  destroySockets: (filter) => destroySockets(filter),
};

/**
 * The mount point of the cgroup v2 hierarchy of this machine, from /proc/self/mountinfo
 * ({@link findCgroup2Root}).
 * @throws BallastError BALLAST_E_DATAPLANE when no cgroup2 hierarchy is mounted.
 */
export async function cgroup2Root(): Promise<string> {
  const root = findCgroup2Root(await readFile('/proc/self/mountinfo', 'utf8'));
  if (root === undefined) {
    throw createError('BALLAST_E_DATAPLANE', 'no cgroup v2 hierarchy is mounted (eBPF mode needs one: mount -t cgroup2 none /sys/fs/cgroup/unified)');
  }
  return root;
}

function wrapNative(what: string, err: unknown): Error {
  if (isNativeError(err) && (err.code === 'EPERM' || err.code === 'EACCES')) {
    return createError('BALLAST_E_PERMISSION', `${what}: ${err.message}`, { cause: err });
  }
  return createError('BALLAST_E_DATAPLANE', `${what}: ${(err as Error).message}`, { cause: err });
}

// ---------------------------------------------------------------------------------------------
// the data plane

/** Options of {@link EbpfLocalDataplane.open}. */
export interface EbpfOpenOptions {
  /** the endpoints to balance (127.0.0.1:7443, [::1]:7443, VIP:6443); at most 64 */
  endpoints: readonly LocalEndpoint[];
  /** cgroup v2 directory whose processes are balanced; default the hierarchy's root ({@link cgroup2Root}) */
  cgroup?: string;
  /** bpffs directory of the pins; default {@link DEFAULT_PIN_DIR} */
  pinDir?: string;
  /** BPF object; default build/Release/ballast_sock_lb.bpf.o */
  object?: string;
  log: Pick<Log, 'info' | 'warn'>;
  /** the OS edge; default the addon ({@link nativeEbpfSys}) */
  sys?: EbpfSys;
}

/**
 * The eBPF node-local data plane (see the file comment). Only sockets of the network namespace
 * that called {@link EbpfLocalDataplane.open} are rewritten, and only for processes in `cgroup`.
 */
export class EbpfLocalDataplane implements LocalDataplane {
  readonly mode = 'ebpf' as const;
  /** cgroup and pin directory in use. */
  readonly cgroup: string;
  readonly pinDir: string;
  /** What open() found pinned and took over (empty on a first start): see {@link SockLb.reused}. */
  readonly reused: { readonly maps: readonly string[]; readonly links: readonly string[] };
  readonly #endpoints: readonly LocalEndpoint[];
  readonly #maps: EbpfMaps;
  readonly #sys: EbpfSys;
  readonly #log: Pick<Log, 'info' | 'warn'>;
  #backends: SockAddress[] = [];
  #updates = 0;
  #socketsReset = 0;
  #closed = false;

  private constructor(maps: EbpfMaps, sys: EbpfSys, log: Pick<Log, 'info' | 'warn'>, endpoints: readonly LocalEndpoint[], cgroup: string, pinDir: string) {
    this.#maps = maps;
    this.#sys = sys;
    this.#log = log;
    this.#endpoints = endpoints;
    this.cgroup = cgroup;
    this.pinDir = pinDir;
    this.reused = maps.reused;
  }

  /**
   * Attaches (or takes over a previous run's attachment without a gap: pinned maps keep their
   * contents, pinned links get the new programs atomically), names this network namespace as
   * the one to rewrite, and removes from the map any endpoint not in `opts.endpoints` (a
   * configuration change across the restart). Endpoints already in the map keep their backends
   * until the first {@link setBackends}; new ones start with none (untouched connect()s).
   * @throws TypeError when an endpoint is not an IP address with a port 1..65535, is IPv4-mapped
   *   (::ffff:a.b.c.d: give a.b.c.d), or > 64 of them.
   * @throws BallastError BALLAST_E_PERMISSION (EPERM/EACCES from the kernel: missing CAP_BPF,
   *   CAP_NET_ADMIN or CAP_SYS_ADMIN), BALLAST_E_DATAPLANE for any other failure (no cgroup2,
   *   not a cgroup v2 directory, no bpffs, BPF object missing, verifier refusal); the addon's
   *   NativeError is the `cause`. BALLAST_E_ADDON_MISSING when the addon is not built.
   */
  static async open(opts: EbpfOpenOptions): Promise<EbpfLocalDataplane> {
    const endpoints = opts.endpoints.map((e, i) => {
      if (addressFamily(e.address) === null || !Number.isInteger(e.port) || e.port < 1 || e.port > 65535) {
        throw new TypeError(`endpoints[${i}] must be { address: IP, port: 1..65535 }, got ${JSON.stringify(e)}`);
      }
      // connect6 serves ::ffff:a.b.c.d from the IPv4 endpoint a.b.c.d: a mapped key is never looked up
      if (V4_MAPPED.test(canonicalAddress(e.address))) {
        throw new TypeError(`endpoints[${i}]: ${e.address} is IPv4-mapped; give the IPv4 endpoint (its mapped form is served with it)`);
      }
      return { address: canonicalAddress(e.address), port: e.port };
    });
    if (endpoints.length > 64) throw new TypeError(`at most 64 endpoints, got ${endpoints.length}`);
    const sys = opts.sys ?? nativeEbpfSys;
    const cgroup = opts.cgroup ?? (await cgroup2Root());
    const pinDir = opts.pinDir ?? DEFAULT_PIN_DIR;
    let maps: EbpfMaps;
    try {
      maps = sys.attach({ cgroup, pinDir, ...(opts.object === undefined ? {} : { object: opts.object }) });
    } catch (err) {
      if (err instanceof TypeError) throw err;
      if ((err as { code?: unknown }).code === 'BALLAST_E_ADDON_MISSING') throw err;
      throw wrapNative(`cannot attach the eBPF load balancer to ${cgroup} (pins in ${pinDir})`, err);
    }
    try {
      maps.setNetnsCookie(sys.netnsCookie());
      const wanted = new Set(endpoints.map((e) => hostPort(e.address, e.port)));
      const previous = maps.readEndpoints();
      for (const entry of previous) {
        if (!wanted.has(hostPort(entry.endpoint.address, entry.endpoint.port))) maps.deleteEndpoint(entry.endpoint);
      }
      const dp = new EbpfLocalDataplane(maps, sys, opts.log, endpoints, cgroup, pinDir);
      dp.#backends = previous.filter((e) => wanted.has(hostPort(e.endpoint.address, e.endpoint.port))).flatMap((e) => e.backends);
      opts.log.info(
        { cgroup, pinDir, endpoints: [...wanted], reusedMaps: maps.reused.maps.length, updatedLinks: maps.reused.links.length },
        maps.reused.links.length > 0 ? 'ebpf data plane taken over (programs replaced in place)' : 'ebpf data plane attached',
      );
      return dp;
    } catch (err) {
      maps.close();
      throw wrapNative(`cannot set up the eBPF load balancer maps in ${pinDir}`, err);
    }
  }

  /**
   * Writes each endpoint's backends: the ready ones of its own family, in order, deduplicated,
   * at most 64 (a larger set is cut, with a warning). An endpoint whose family has none gets an
   * empty set: connect()s to it are left untouched.
   * @throws BallastError BALLAST_E_DATAPLANE when a map update fails, or after close().
   */
  async setBackends(ready: readonly LocalBackend[]): Promise<void> {
    if (this.#closed) throw createError('BALLAST_E_DATAPLANE', 'the eBPF data plane is closed');
    const v4 = backendsFor(ready, 4);
    const v6 = backendsFor(ready, 6);
    if (ready.filter((b) => addressFamily(b.address) === 4).length > 64 || ready.filter((b) => addressFamily(b.address) === 6).length > 64) {
      this.#log.warn({ ready: ready.length }, 'more than 64 ready backends of one family: only the first 64 are used');
    }
    try {
      for (const e of this.#endpoints) this.#maps.setEndpoint(e, addressFamily(e.address) === 4 ? v4 : v6);
    } catch (err) {
      throw wrapNative('cannot update the eBPF endpoints map', err);
    }
    this.#backends = [...v4, ...v6];
    this.#updates++;
  }

  /**
   * Destroys (SOCK_DESTROY) the host sockets connected to `backend` THROUGH an endpoint: those
   * sock_diag lists with remote backend:port (for an IPv4 backend also the AF_INET6 sockets with
   * remote ::ffff:backend, balanced from a v4-mapped endpoint) whose cookie the getpeername map
   * records as balanced to this backend. A socket that connected to the backend directly is not touched;
   * one whose reverse entry was evicted from the LRU (more than 65536 balanced sockets since) is
   * missed and ends by its own timeouts. Acts in the network namespace of the calling thread
   * (the one open() ran in).
   * @returns how many sockets were destroyed.
   * @throws BallastError BALLAST_E_PERMISSION without CAP_NET_ADMIN, BALLAST_E_DATAPLANE otherwise.
   */
  async resetBackend(backend: LocalBackend): Promise<number> {
    if (this.#closed) return 0;
    const family = addressFamily(backend.address);
    if (family === null) throw new TypeError(`backend.address must be an IP address, got ${JSON.stringify(backend.address)}`);
    const address = canonicalAddress(backend.address);
    // an IPv4 backend is also reached by AF_INET6 sockets that dialled a v4-mapped endpoint:
    // sock_diag lists those under AF_INET6, with the peer as ::ffff:a.b.c.d
    const views: { family: 4 | 6; address: string }[] = [{ family, address }, ...(family === 4 ? [{ family: 6 as const, address: `::ffff:${address}` }] : [])];
    try {
      let n = 0;
      for (const view of views) {
        const dst = { address: view.address, port: backend.port };
        const cookies = this.#sys
          .listTcpSockets({ family: view.family, dst })
          .filter((s) => {
            const r = this.#maps.reverse(s.cookie);
            return r !== null && canonicalAddress(r.backend.address) === address && r.backend.port === backend.port;
          })
          .map((s) => s.cookie);
        if (cookies.length > 0) n += this.#sys.destroySockets({ family: view.family, dst, cookies });
      }
      if (n === 0) return 0;
      this.#socketsReset += n;
      this.#log.info({ backend: hostPort(address, backend.port), sockets: n }, 'dead backend: balanced sockets destroyed');
      return n;
    } catch (err) {
      throw wrapNative(`cannot reset the sockets to ${hostPort(address, backend.port)}`, err);
    }
  }

  status(): LocalDataplaneStatus {
    return {
      mode: 'ebpf',
      endpoints: this.#endpoints.map((e) => hostPort(e.address, e.port)),
      backends: this.#backends.map((b) => hostPort(b.address, b.port)),
      updates: this.#updates,
      socketsReset: this.#socketsReset,
      map: Object.fromEntries(
        this.readEndpoints().map((e) => [hostPort(e.endpoint.address, e.endpoint.port), e.backends.map((b) => hostPort(b.address, b.port))]),
      ),
    };
  }

  /** What the kernel's endpoints map holds now (for /status and tests). */
  readEndpoints(): SockLbEntry[] {
    if (this.#closed) return [];
    return this.#maps.readEndpoints();
  }

  /**
   * `keep: true`: closes the map handles only; programs, maps and their contents stay pinned and
   * attached (an agent restart: clients keep being balanced to the last ready set).
   * `keep: false`: detaches the programs and removes every pin and the pin directory.
   * Idempotent.
   * @throws BallastError BALLAST_E_DATAPLANE when removing the pins fails.
   */
  async close(opts: { keep: boolean }): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#maps.close();
    if (opts.keep) {
      this.#log.info({ pinDir: this.pinDir }, 'ebpf data plane left attached (keep)');
      return;
    }
    try {
      this.#sys.detach(this.pinDir);
    } catch (err) {
      throw wrapNative(`cannot detach the eBPF load balancer (pins in ${this.pinDir})`, err);
    }
    // the parent (/sys/fs/bpf/ballast) was made for the pins; gone with the last of them
    // (rmdir(2) fails with ENOTEMPTY while another agent's pins are there)
    await rmdir(dirname(this.pinDir)).catch(() => undefined);
    this.#log.info({ pinDir: this.pinDir }, 'ebpf data plane detached');
  }
}

// ---------------------------------------------------------------------------------------------
// where the pins live, who owns them, which cgroup

/** Where {@link lockPinDir} keeps its lock files (tmpfs: gone at boot). */
export const LOCK_DIR = '/run/ballast';

/**
 * A pin directory has one owner on the host: a second agent taking it over would replace the
 * first one's programs and remove them when it stops. The lock is flock(2) on
 * `<lockDir>/<pin directory name>.lock` (bpffs holds no regular files), released by the kernel
 * when the agent dies ({@link lockFile}). release() removes the lock file (unlinked while still
 * locked; a starter racing with it re-checks the inode it locked and starts over), and `lockDir`
 * too when this call created it and it is empty. A SIGKILLed agent leaves the empty file, which
 * is harmless: flock locks live on open descriptors, the next agent locks the same file.
 * @param lockDir default {@link LOCK_DIR}; tests pass a directory of their own.
 * @throws BallastError BALLAST_E_LOCAL_ENDPOINT_IN_USE when another agent holds it,
 *   BALLAST_E_DATAPLANE when the directory or the file cannot be made.
 */
export function lockPinDir(pinDir: string, cgroup: string, lockDir = LOCK_DIR): FileLock {
  const path = join(lockDir, `${basename(pinDir)}.lock`);
  let created = false;
  // bounded: a concurrent release may remove an empty lockDir between our mkdir and open (ENOENT)
  for (let attempt = 1; ; attempt++) {
    try {
      created = mkdirSync(lockDir, { recursive: true, mode: 0o755 }) !== undefined || created;
      const lock = lockFile(path);
      return {
        path,
        release() {
          lock.release();
          if (!created) return;
          created = false;
          try {
            rmdirSync(lockDir); // ENOTEMPTY while another agent's lock is there
          } catch {
            /* not empty, or gone already */
          }
        },
      };
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === 'ENOENT' && attempt < 3) continue;
      if (code === 'EWOULDBLOCK' || code === 'EAGAIN') {
        throw createError(
          'BALLAST_E_LOCAL_ENDPOINT_IN_USE',
          `another ballast agent on this host already serves the local endpoint for cgroup ${cgroup} (pins in ${pinDir}, lock ${path}); run one agent per cgroup and list every address (both families) in its localEndpoint.address`,
        );
      }
      throw createError('BALLAST_E_DATAPLANE', `cannot take the lock ${path} of the eBPF pins: ${(err as Error).message}`, { cause: err });
    }
  }
}

/**
 * localEndpoint.cgroup must be an existing directory of a mounted cgroup-v2 hierarchy.
 * @returns the path without a trailing slash.
 * @throws BallastError BALLAST_E_CGROUP naming the setting and the reason.
 */
export async function checkCgroupDir(path: string): Promise<string> {
  const p = path.replace(/\/+$/, '') || '/';
  let root: string;
  try {
    root = await cgroup2Root();
  } catch {
    throw createError('BALLAST_E_CGROUP', `localEndpoint.cgroup: ${p}: no cgroup v2 hierarchy is mounted on this host`);
  }
  if (p !== root && !p.startsWith(`${root}/`)) {
    throw createError(
      'BALLAST_E_CGROUP',
      `localEndpoint.cgroup: ${p} is not in the cgroup v2 hierarchy (mounted at ${root}); write ${root} or a directory below it`,
    );
  }
  let dir: boolean;
  try {
    dir = statSync(p).isDirectory();
  } catch {
    dir = false;
  }
  if (!dir) throw createError('BALLAST_E_CGROUP', `localEndpoint.cgroup: ${p} does not exist (create the cgroup, or leave the setting out for the whole host)`);
  return p;
}

/**
 * Pins per cgroup, so that agents balancing different cgroups (test labs, nested setups) never
 * share maps, and a restarted agent finds its own: /sys/fs/bpf/ballast/local for the root of the
 * hierarchy, /sys/fs/bpf/ballast/local-<path, / as _>-<8 hex of its SHA-256> below it (the hash
 * keeps "a/b" and "a_b" apart).
 */
export function pinDirFor(cgroup: string): string {
  const rel = cgroup.replace(/\/+$/, '').replace(/^\/sys\/fs\/cgroup(\/unified)?/, '');
  if (rel === '') return DEFAULT_PIN_DIR;
  const name = rel
    .replace(/^\//, '')
    .replace(/[^A-Za-z0-9_.-]/g, '_')
    .slice(0, 64);
  return `${DEFAULT_PIN_DIR}-${name}-${createHash('sha256').update(rel).digest('hex').slice(0, 8)}`;
}

// ---------------------------------------------------------------------------------------------
// `ballast check`

/**
 * Can eBPF mode run here? Checks, each adding a reason when it fails: kernel ≥ 5.14
 * (SO_NETNS_COOKIE; the getpeername hooks need 5.8), a cgroup v2 hierarchy, CAP_BPF +
 * CAP_NET_ADMIN (or CAP_SYS_ADMIN), the BPF object built; then for real: loads and attaches the
 * programs to a temporary child cgroup `<cgroup2 root>/ballast-check-<random>` with pins in
 * `/sys/fs/bpf/ballast-check-<random>` (mounting bpffs when absent), detaches, removes both,
 * and destroys one loopback TCP connection it opened itself through sock_diag (SOCK_DESTROY).
 * Never touches the root cgroup or existing sockets. Resolves, never rejects.
 */
export async function checkEbpf(opts: { object?: string; sys?: EbpfSys } = {}): Promise<{ ok: boolean; reasons: string[] }> {
  const reasons: string[] = [];
  const sys = opts.sys ?? nativeEbpfSys;
  const kernel = release();
  if (!kernelAtLeast(kernel, 5, 14)) reasons.push(`kernel ${kernel} is older than 5.14 (SO_NETNS_COOKIE, cgroup getpeername hooks)`);
  let mountinfo = '';
  try {
    mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  } catch (err) {
    reasons.push(`cannot read /proc/self/mountinfo: ${(err as Error).message}`);
  }
  const root = findCgroup2Root(mountinfo);
  if (root === undefined) reasons.push('no cgroup v2 hierarchy is mounted (needed to attach the programs)');
  try {
    const status = await readFile('/proc/self/status', 'utf8');
    const capEff = /^CapEff:\s*([0-9a-f]+)/m.exec(status)?.[1] ?? '0';
    const missing = missingCapabilities(capEff);
    if (missing.length > 0) reasons.push(`missing capabilities: ${missing.join(', ')}`);
  } catch (err) {
    reasons.push(`cannot read /proc/self/status: ${(err as Error).message}`);
  }
  let object: string | undefined;
  try {
    object = opts.object ?? sockLbObjectPath();
    if (!existsSync(object)) reasons.push(`the BPF object ${object} is not built (npm run build:native)`);
  } catch (err) {
    reasons.push((err as Error).message);
  }
  if (reasons.length > 0 || root === undefined || object === undefined) return { ok: false, reasons };

  const tag = `ballast-check-${randomBytes(4).toString('hex')}`;
  const cgroup = join(root, tag);
  const pinDir = `/sys/fs/bpf/${tag}`;
  try {
    await mkdir(cgroup);
    try {
      const maps = sys.attach({ object, cgroup, pinDir });
      maps.close();
    } finally {
      sys.detach(pinDir);
    }
  } catch (err) {
    reasons.push(`load and attach to a temporary cgroup failed: ${(err as Error).message}`);
  } finally {
    await rmdir(cgroup).catch(() => undefined);
  }
  if (!isBpffsMounted(await readFile('/proc/self/mountinfo', 'utf8').catch(() => ''))) {
    reasons.push('no bpf filesystem at /sys/fs/bpf (pins would not survive a restart)');
  }
  try {
    const destroyed = await destroyOwnLoopbackConnection(sys);
    if (destroyed !== 1) reasons.push(`sock_diag SOCK_DESTROY destroyed ${destroyed} of 1 test connections`);
  } catch (err) {
    reasons.push(`sock_diag SOCK_DESTROY failed: ${(err as Error).message}`);
  }
  return { ok: reasons.length === 0, reasons };
}

/** Opens one loopback TCP connection to a listener of its own and destroys it through sock_diag. */
async function destroyOwnLoopbackConnection(sys: EbpfSys): Promise<number> {
  const server = net.createServer((s) => s.on('error', () => undefined));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  const client = net.connect(port, '127.0.0.1');
  client.on('error', () => undefined);
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('loopback connect timed out')), 2000);
      client.once('connect', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    const src = client.localPort === undefined ? { address: '127.0.0.1' } : { address: '127.0.0.1', port: client.localPort };
    return sys.destroySockets({ family: 4, dst: { address: '127.0.0.1', port }, src });
  } finally {
    client.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  }
}
