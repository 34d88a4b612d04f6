/**
 * The addon's shape and its loader: what build/Release/ballast.node exports ({@link Addon}, with
 * every value that crosses the boundary), declared once here and loaded by {@link native} alone.
 * The wrappers of each addon family (vrrp-socket.ts, packet-socket.ts, sock-lb.ts, nft-watch.ts,
 * sock-diag.ts, lock.ts, notify.ts, memory.ts, conntrack.ts, tcp-probe.ts) take the addon from here; callers
 * import them all through src/native.ts.
 *
 * Every failure of a system call arrives as a {@link NativeError}: `code` is the errno name
 * ("ENODEV"), `errno` the positive errno(3) value, `syscall` the call that failed
 * ("setsockopt(IP_ADD_MEMBERSHIP)"), and the message reads
 * "setsockopt(IP_ADD_MEMBERSHIP) failed on eth0: EADDRINUSE (Address already in use)".
 *
 * The addon is context-aware: it may be loaded in the main thread and in any number of
 * worker_threads Workers; sockets belong to the thread that opened them and are closed when that
 * thread's environment is torn down (worker.terminate(), process.exit() in a worker).
 *
 * The addon is loaded on first use, not on import, so modules that import this one can be
 * unit-tested on a machine where it is not built.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createError } from '../errors.js';

// ---------------------------------------------------------------------------------------------
// Values that cross the boundary

/** An error from a failed system call in the addon. Branch on `code`, never on `message`. */
export interface NativeError extends Error {
  /** errno name, e.g. "EPERM", "ENODEV", "EADDRINUSE" ("E<n>" if the C library has no name). */
  code: string;
  /** errno(3) value, positive (unlike node's libuv errors, which are negative). */
  errno: number;
  /** The call that failed, e.g. "socket(AF_INET, SOCK_RAW, 112)", "setsockopt(SO_BINDTODEVICE)", "sendmsg". */
  syscall: string;
}

/** True when `e` is an Error carrying the `code`, `errno` and `syscall` of a {@link NativeError}. */
export function isNativeError(e: unknown): e is NativeError {
  if (!(e instanceof Error)) return false;
  const fields = e as Error & { code?: unknown; errno?: unknown; syscall?: unknown };
  return typeof fields.code === 'string' && typeof fields.errno === 'number' && typeof fields.syscall === 'string';
}

/** One VRRP datagram as received (the IP header is not included). */
export interface ReceivedPacket {
  /** The VRRP packet: header and addresses, exactly the IP payload (no link-layer padding). */
  payload: Buffer;
  /** IP source address, e.g. "10.0.0.2" or "fe80::1" (no zone: the zone is `ifindex`). */
  source: string;
  /** IP destination address: "224.0.0.18", "ff02::12", or a unicast address of this host. */
  destination: string;
  /** IPv4 TTL or IPv6 hop limit as received, 0..255 (RFC 9568 §5.1.1.3, §5.1.2.3: must be 255). */
  ttl: number;
  /** Index of the interface the datagram arrived on. */
  ifindex: number;
}

/** Counters of a {@link VrrpSocket} since it was opened. */
export interface VrrpSocketStats {
  /** Datagrams delivered to `onPacket`. */
  received: number;
  /** Datagrams dropped because their IPv4 header could not be parsed (IHL < 5, wrong version, total length beyond what was received). */
  malformedIpHeader: number;
  /** Datagrams handed to the kernel by {@link VrrpSocket.send}. */
  sent: number;
  /** The advert pacer's counters ({@link VrrpSocket.pace}). */
  pacer: AdvertPacerStats;
}

/** What the advert pacer did since the socket opened ({@link VrrpSocket.pace}). */
export interface AdvertPacerStats {
  /** Adverts it sent for a silent engine. */
  sent: number;
  /** Its sends that failed; `lastErrno` is the errno number of the last one (0: none). */
  sendErrors: number;
  lastErrno: number;
  /** Times it began sending because the engine had not sent for Advertisement_Interval plus the slack (native/advert_pacer.h CoverSlackNs). */
  covers: number;
  /** Times it stopped because the engine stayed silent for the hold time. */
  holds: number;
  /** The engine's longest silence while adverts were paced, ms (between two of its sends). */
  longestSilenceMs: number;
}

/** A TCP address: IPv4 or IPv6 text without zone, and a port 1..65535 (host order). */
export interface SockAddress {
  address: string;
  port: number;
}

/** One entry of the socket load balancer's endpoints map. */
export interface SockLbEntry {
  /** what clients connect() to */
  endpoint: SockAddress;
  /** the ready backends, in map order (empty: connect() left untouched) */
  backends: SockAddress[];
}

/** What the getpeername() map remembers of one balanced socket. */
export interface SockLbReverse {
  /** the address:port the client connect()ed to */
  endpoint: SockAddress;
  /** the backend it was given instead */
  backend: SockAddress;
}

/** Programs attached directly (not inherited) to one cgroup hook, by kernel program id. */
export interface CgroupHookPrograms {
  attachType: 'connect4' | 'connect6' | 'getpeername4' | 'getpeername6';
  ids: number[];
}

/** Which TCP sockets {@link listTcpSockets} / {@link destroySockets} act on (all given parts must match). */
export interface TcpSocketFilter {
  /** 4: AF_INET sockets, 6: AF_INET6 sockets (IPv4-mapped peers included) */
  family: 4 | 6;
  /** the remote end: address, and port (any when omitted) */
  dst?: { address: string; port?: number };
  /** the local end: address, and port (any when omitted) */
  src?: { address: string; port?: number };
  /** only sockets whose cookie (SO_COOKIE, bpf_get_socket_cookie) is listed */
  cookies?: readonly bigint[];
}

/** One TCP socket as sock_diag reports it. */
export interface TcpSocketInfo {
  /** the socket cookie, as bpf_get_socket_cookie() returns it */
  cookie: bigint;
  /** TCP state number (include/net/tcp_states.h): 1 ESTABLISHED, 2 SYN_SENT, 8 CLOSE_WAIT, … */
  state: number;
  src: SockAddress;
  dst: SockAddress;
  /** the interface the socket is bound to, 0 when none */
  ifindex: number;
  inode: number;
}

/** One frame read by {@link PacketSocket.receive}. */
export interface ReceivedFrame {
  /** The whole frame from the destination MAC on (no FCS); at most 2048 bytes, longer ones cut. */
  frame: Buffer;
  /** True for a frame this host sent itself (PACKET_OUTGOING, man 7 packet). */
  outgoing: boolean;
}

/**
 * What one wake-up of an {@link NftWatch} saw: the changes the kernel committed since the last
 * call, as far as they could be read.
 */
export interface NftChangeBatch {
  /** The tables those changes named, `<family> <name>` (`ip ballast`, `inet filter`), each once, in arrival order. */
  tables: string[];
  /** The ruleset generation of the last committed transaction seen (NFTA_GEN_ID), -1 before any. */
  generation: number;
  /** The kernel dropped events for this socket (ENOBUFS: its queue overflowed): `tables` may miss some. */
  lost: boolean;
}

/** Counters of an {@link NftWatch} since it was opened. */
export interface NftWatchStats {
  /** nftables notifications read. */
  messages: number;
  /** Times the socket became readable (each is at most one onChange call). */
  wakeups: number;
  /** recv calls that failed with ENOBUFS (events lost). */
  overruns: number;
}

/** Which flows {@link conntrackVipFlows} reads: TCP to one of `vips` on `port`, DNATed, ESTABLISHED. */
export interface ConntrackVipQuery {
  family: 4 | 6;
  /** the VIPs (original destination addresses), at least one, of `family` */
  vips: readonly string[];
  /** the VIP port (original destination port), 1..65535 */
  port: number;
  /**
   * also delete the `count` oldest of these flows DNATed to address:port (the reply source);
   * `dryRun`: choose them the same way but delete nothing (`reset.flows` names them); `only`:
   * choose among these flows only (client address, client port, VIP: the original source,
   * source port and destination), e.g. the ones a dry run chose
   */
  reset?: { address: string; port: number; count: number; dryRun?: boolean; only?: readonly { source: string; sourcePort: number; vip: string }[] };
}

/** What {@link conntrackVipFlows} found. */
export interface ConntrackVipFlows {
  /** per DNAT target (reply source): established flows, counted before any reset; sorted by address, port */
  backends: { address: string; port: number; established: number }[];
  /** conntrack entries of the family walked */
  scanned: number;
  /** entries that matched the query (the sum of `established`) */
  matched: number;
  /** matched entries with a start time (net.netfilter.nf_conntrack_timestamp=1 when they were created) */
  timestamped: number;
  /**
   * when `query.reset` was given: entries deleted, the start time of the youngest one deleted (ns
   * since the epoch, 0 = unknown), and each deleted flow's client address and port and VIP (its
   * original source, source port, destination), `flows.length === deleted`; with `dryRun`:
   * deleted 0, and `flows` the ones a reset would delete, oldest first
   */
  reset?: { deleted: number; youngestStartNs: number; flows: { source: string; sourcePort: number; vip: string }[] };
}

/** The TCP probes {@link sendTcpProbes} sends: from `source`:`sourcePort` (a VIP and its port) to each client. */
export interface TcpProbeBatch {
  family: 4 | 6;
  /** the probes' source address (a VIP), of `family` */
  source: string;
  /** their source port (the VIP's port), 1..65535 */
  sourcePort: number;
  /** the SO_MARK of every probe (0: none), 0..2^32-1 */
  mark: number;
  /** the pace, packets per second, 1,000..1,000,000 */
  packetsPerSecond: number;
  /** the clients (a flow's original source address and port), at most 20,000 */
  clients: readonly { address: string; port: number }[];
}

/** What {@link sendTcpProbes} did. */
export interface TcpProbeResult {
  /** packets the kernel took (two per client) */
  sent: number;
  /** packets it refused */
  failed: number;
  /** the first refusal (errno name, errno, syscall "sendmmsg"); absent when none failed */
  error?: NativeError;
}

/** One probe segment as {@link tcpProbePacket} builds it (ports, seq, ack in host order). */
export interface TcpProbeSegment {
  family: 4 | 6;
  source: string;
  sourcePort: number;
  destination: string;
  destinationPort: number;
  /** sequence number, 0..2^32-1 */
  seq: number;
  /** acknowledgment number, 0..2^32-1 */
  ack: number;
}

// ---------------------------------------------------------------------------------------------
// The addon's shape (native/addon.cc, native/vrrp_socket.cc, native/packet_socket.cc,
// native/bpf_loader.cc, native/sock_diag.cc)

/** The raw VrrpSocket object of the addon. Methods throw as documented on {@link VrrpSocket}. */
export interface RawVrrpSocket {
  readonly ifindex: number;
  joinGroup(): void;
  leaveGroup(): void;
  send(payload: Buffer, destination: string): void;
  stats(): VrrpSocketStats;
  ref(): void;
  unref(): void;
  close(): void;
  receivePending(): void;
  startPacer(realtimePriority: number): number;
  pace(adverts: [Buffer, string][] | null, intervalMs: number, holdMs: number): void;
  setAuth(key: Buffer, firstSequence: bigint): void;
  takeSequence(): bigint;
}

/** The raw NftWatch object of the addon ({@link NftWatch}). */
export interface RawNftWatch {
  stats(): NftWatchStats;
  close(): void;
}

/** The raw PacketSocket object of the addon. */
export interface RawPacketSocket {
  readonly ifindex: number;
  /** A fresh 6-byte copy on each read. */
  readonly hardwareAddress: Buffer;
  send(frame: Buffer): void;
  receive(): ReceivedFrame | null;
  close(): void;
}

/** The raw SockLb object of the addon (native/bpf_loader.cc). */
export interface RawSockLb {
  readonly reused: { maps: string[]; links: string[] };
  setEndpoint(endpoint: SockAddress, backends: readonly SockAddress[]): void;
  deleteEndpoint(endpoint: SockAddress): boolean;
  readEndpoints(): SockLbEntry[];
  setNetnsCookie(cookie: bigint): void;
  getNetnsCookie(): bigint;
  reverse(cookie: bigint): SockLbReverse | null;
  close(): void;
}

/** What build/Release/ballast.node exports. */
export interface Addon {
  VrrpSocket: new (
    family: 4 | 6,
    ifname: string,
    sourceAddress: string | undefined,
    onPacket: (packet: ReceivedPacket) => void,
    onError: (error: NativeError) => void,
  ) => RawVrrpSocket;
  PacketSocket: new (ifname: string, protocol?: number, filter?: Buffer) => RawPacketSocket;
  SockLb: new (object: string, cgroup: string, pinDir: string) => RawSockLb;
  NftWatch: new (onChange: (batch: NftChangeBatch) => void, keepAlive: boolean) => RawNftWatch;
  bpfDetach(pinDir: string): number;
  netnsCookie(): bigint;
  cgroupPrograms(cgroup: string): CgroupHookPrograms[];
  listSockets(filter: TcpSocketFilter): TcpSocketInfo[];
  destroySockets(filter: TcpSocketFilter): number;
  lockFile(path: string): number;
  unlockFile(fd: number, path?: string): void;
  notify(socketPath: string, message: string): void;
  /** native/memory.cc (absent from an addon built before them) */
  trimMalloc?(): boolean;
  releaseFilePages?(): { mappings: number; kib: number };
  conntrackVipFlows?(query: ConntrackVipQuery): ConntrackVipFlows;
  /** native/tcp_probe.cc (absent from an addon built before it) */
  tcpProbePacket?(segment: TcpProbeSegment): Buffer;
  sendTcpProbes?(batch: TcpProbeBatch): Promise<TcpProbeResult>;
}

function isAddon(value: unknown): value is Addon {
  if (typeof value !== 'object' || value === null) return false;
  const exports = value as Record<string, unknown>;
  return [
    'VrrpSocket',
    'PacketSocket',
    'SockLb',
    'NftWatch',
    'bpfDetach',
    'netnsCookie',
    'cgroupPrograms',
    'listSockets',
    'destroySockets',
    'lockFile',
    'unlockFile',
    'notify',
  ].every((name) => typeof exports[name] === 'function');
}

// ---------------------------------------------------------------------------------------------
// Loading

/**
 * The package root: the nearest directory above this file whose package.json is ballast's.
 * This file runs as src/native/addon.ts (vitest), as dist/src/native/addon.js (after tsc) and
 * inside dist/bundle/ (esbuild).
 * @throws Error when no such directory is found.
 */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest)) {
      try {
        const parsed: unknown = JSON.parse(readFileSync(manifest, 'utf8'));
        if (typeof parsed === 'object' && parsed !== null && (parsed as { name?: unknown }).name === 'ballast') return dir;
      } catch {
        // not ours (or unreadable): keep walking up
      }
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`ballast: no package.json of "ballast" above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/** Absolute path of the addon: <package root>/build/Release/ballast.node. */
export function addonPath(): string {
  return join(packageRoot(), 'build', 'Release', 'ballast.node');
}

let addon: Addon | undefined;

/**
 * Loads the addon once per thread (each Worker gets its own instance).
 * @throws BallastError BALLAST_E_ADDON_MISSING when the file is absent, fails to load, or does
 *   not export the expected classes; the loader's error is the `cause`.
 */
export function native(): Addon {
  if (addon !== undefined) return addon;
  const path = addonPath();
  if (!existsSync(path)) {
    throw createError('BALLAST_E_ADDON_MISSING', `the native addon is not built (no ${path}): run \`npm run build:native\``);
  }
  let loaded: unknown;
  try {
    loaded = createRequire(import.meta.url)(path);
  } catch (err) {
    throw createError(
      'BALLAST_E_ADDON_MISSING',
      `the native addon ${path} failed to load (${(err as Error).message}): rebuild it with \`npm run build:native\``,
      { cause: err },
    );
  }
  if (!isAddon(loaded)) {
    throw createError(
      'BALLAST_E_ADDON_MISSING',
      `${path} is not ballast's addon (no VrrpSocket / PacketSocket / SockLb): rebuild it with \`npm run build:native\``,
    );
  }
  addon = loaded;
  return addon;
}
