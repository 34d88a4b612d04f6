/**
 * The one typed door to the native addon (build/Release/ballast.node, sources in native/) and to
 * the BPF object it loads (build/Release/ballast_sock_lb.bpf.o, sources in bpf/).
 *
 * The addon's shape is declared once here ({@link Addon}); nothing else loads it. Wrappers
 * check their arguments before crossing (TypeError naming the argument), and the C++ side checks
 * again. Every failure of a system call arrives as a {@link NativeError}: `code` is the errno name
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
import { isIPv4, isIPv6 } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getSystemErrorName } from 'node:util';
import { createError } from './errors.js';

// ---------------------------------------------------------------------------------------------
// Public shapes

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

/** Options of {@link VrrpSocket.open}. */
export interface VrrpSocketOptions {
  /** 4: IPv4 raw socket (man 7 raw, man 7 ip); 6: IPv6 raw socket (man 7 ipv6). */
  family: 4 | 6;
  /** Interface name, 1..15 bytes (IFNAMSIZ - 1), e.g. "eth0". */
  ifname: string;
  /**
   * Source address of every datagram sent. IPv4: normally the interface's primary address;
   * IPv6: a link-local address of the interface (RFC 9568 §5.1.2.1), without a zone.
   * Must be assigned to the host (IPv6: and not tentative). Omitted: the kernel chooses.
   */
  sourceAddress?: string;
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

/** One advert the pacer repeats: the VRRP message (without an auth trailer) and where it goes. */
export interface PacedAdvert {
  message: Buffer;
  destination: string;
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

/** Options of {@link SockLb.attach}. */
export interface SockLbOptions {
  /** absolute path of the BPF object; default {@link sockLbObjectPath} */
  object?: string;
  /** absolute path of a cgroup v2 directory; the programs run for every process in its subtree */
  cgroup: string;
  /** absolute directory on a bpf filesystem, e.g. /sys/fs/bpf/ballast/local; created (0700) */
  pinDir: string;
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

// ---------------------------------------------------------------------------------------------
// The addon's shape (native/addon.cc, native/vrrp_socket.cc, native/packet_socket.cc,
// native/bpf_loader.cc, native/sock_diag.cc)

/** The raw VrrpSocket object of the addon. Methods throw as documented on {@link VrrpSocket}. */
interface RawVrrpSocket {
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
interface RawNftWatch {
  stats(): NftWatchStats;
  close(): void;
}

/** The raw PacketSocket object of the addon. */
interface RawPacketSocket {
  readonly ifindex: number;
  /** A fresh 6-byte copy on each read. */
  readonly hardwareAddress: Buffer;
  send(frame: Buffer): void;
  receive(): ReceivedFrame | null;
  close(): void;
}

/** One frame read by {@link PacketSocket.receive}. */
export interface ReceivedFrame {
  /** The whole frame from the destination MAC on (no FCS); at most 2048 bytes, longer ones cut. */
  frame: Buffer;
  /** True for a frame this host sent itself (PACKET_OUTGOING, man 7 packet). */
  outgoing: boolean;
}

/** Options of {@link PacketSocket.open}: what the socket receives. */
export interface PacketSocketOptions {
  /**
   * EtherType to receive, host order: 0x0806 ARP, 0x0800 IPv4, 0x86dd IPv6; 0 or absent: the
   * socket receives nothing (send only).
   */
  protocol?: number;
  /**
   * A classic BPF program (struct sock_filter[]: u16 code, u8 jt, u8 jf, u32 k, host order, 8
   * bytes each; 1..256 instructions) attached with SO_ATTACH_FILTER before the socket is bound,
   * so only frames it accepts are ever queued (Documentation/networking/filter.rst).
   */
  filter?: Buffer;
}

/** The raw SockLb object of the addon (native/bpf_loader.cc). */
interface RawSockLb {
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
interface Addon {
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
}

function isAddon(value: unknown): value is Addon {
  if (typeof value !== 'object' || value === null) return false;
  const exports = value as Record<string, unknown>;
  return ['VrrpSocket', 'PacketSocket', 'SockLb', 'NftWatch', 'bpfDetach', 'netnsCookie', 'cgroupPrograms', 'listSockets', 'destroySockets', 'lockFile', 'unlockFile', 'notify'].every(
    (name) => typeof exports[name] === 'function',
  );
}

// ---------------------------------------------------------------------------------------------
// Loading

/**
 * The package root: the nearest directory above this file whose package.json is ballast's.
 * This file runs as src/native.ts (vitest) and as dist/src/native.js (after tsc).
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
function native(): Addon {
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
    throw createError('BALLAST_E_ADDON_MISSING', `${path} is not ballast's addon (no VrrpSocket / PacketSocket / SockLb): rebuild it with \`npm run build:native\``);
  }
  addon = loaded;
  return addon;
}

// ---------------------------------------------------------------------------------------------
// Argument checks (the C++ side checks again)

const MAX_PAYLOAD = 1500;
const MIN_FRAME = 14; // destination, source, EtherType
const MAX_FRAME = 1518; // 1500-byte MTU + Ethernet header + one 802.1Q tag, no FCS

function checkIfname(ifname: unknown): asserts ifname is string {
  // man 7 netdevice: IFNAMSIZ - 1 bytes; the kernel also refuses "/", ":" and whitespace
  if (typeof ifname !== 'string' || ifname.length === 0 || Buffer.byteLength(ifname) > 15 || /[\s/:\0]/.test(ifname)) {
    throw new TypeError(`ifname must be an interface name of 1 to 15 bytes, got ${JSON.stringify(ifname)}`);
  }
}

/** fe80::/10, for an address that passed isIPv6: the first group is exactly fe80..febf. */
function isLinkLocal6(address: string): boolean {
  return /^fe[89ab][0-9a-f]:/i.test(address);
}

function checkAddress(name: string, value: unknown, family: 4 | 6): asserts value is string {
  // zones ("%eth0") are refused: the socket's interface is the zone
  const ok = typeof value === 'string' && !value.includes('%') && (family === 4 ? isIPv4(value) : isIPv6(value));
  if (!ok) throw new TypeError(`${name} must be an IPv${family} address, got ${JSON.stringify(value)}`);
}

function checkBuffer(name: string, value: unknown, min: number, max: number): asserts value is Buffer {
  if (!Buffer.isBuffer(value)) throw new TypeError(`${name} must be a Buffer`);
  if (value.length < min || value.length > max) {
    throw new TypeError(`${name} must be ${min} to ${max} bytes long, got ${value.length}`);
  }
}

// ---------------------------------------------------------------------------------------------
// VRRP raw socket

/**
 * A raw IP socket for VRRP (IP protocol 112) on one interface, IPv4 or IPv6.
 *
 * Sends with TTL / hop limit 255 (RFC 9568 §5.1.1.3, §5.1.2.3), DSCP CS6 (IP_TOS /
 * IPV6_TCLASS 0xc0), multicast loopback off, multicast out of this interface; the kernel writes
 * the IP header (man 7 raw), and for IPv6 does not touch the VRRP checksum (no IPV6_CHECKSUM:
 * the codec computes it over the pseudo-header). Receives through libuv on the event loop of the
 * thread that opened it; it never blocks. An open socket keeps that event loop alive unless
 * {@link VrrpSocket.unref} is called.
 */
export class VrrpSocket {
  /** 4 or 6, as opened. */
  readonly family: 4 | 6;
  /** The interface name, as opened. */
  readonly ifname: string;
  /** The interface's index (SIOCGIFINDEX, man 7 netdevice), as of opening. */
  readonly ifindex: number;
  readonly #raw: RawVrrpSocket;

  private constructor(raw: RawVrrpSocket, family: 4 | 6, ifname: string) {
    this.#raw = raw;
    this.family = family;
    this.ifname = ifname;
    this.ifindex = raw.ifindex;
  }

  /**
   * Opens the socket, bound to `opts.ifname` (SO_BINDTODEVICE), and starts receiving at once.
   * It does not join the multicast group: call {@link VrrpSocket.joinGroup} (unicast mode does not).
   *
   * @param opts family, interface and optional source address ({@link VrrpSocketOptions}).
   * @param onPacket called for every datagram of protocol 112 arriving on the interface and
   *   addressed to this host (a joined group, or one of its unicast addresses), with the IP
   *   header stripped; `this` is not meaningful. An exception it throws is an uncaught exception.
   * @param onError called when receiving fails (recvmsg or the poll reports an error); the
   *   socket stays open.
   * @returns the open socket; close it with {@link VrrpSocket.close}.
   * @throws TypeError when an argument is invalid (family not 4 or 6, bad ifname, sourceAddress
   *   not an address of the family (IPv6: not link-local), a callback not a function).
   * @throws NativeError e.g. EPERM from socket() without CAP_NET_RAW, ENODEV from
   *   setsockopt(SO_BINDTODEVICE) for a missing interface, EADDRNOTAVAIL from bind when
   *   sourceAddress is not assigned (or, IPv6, still tentative).
   * @throws BallastError BALLAST_E_ADDON_MISSING when the addon is not built.
   */
  static open(opts: VrrpSocketOptions, onPacket: (p: ReceivedPacket) => void, onError: (e: NativeError) => void): VrrpSocket {
    if (typeof opts !== 'object' || opts === null) throw new TypeError('opts must be an object');
    const { family, ifname, sourceAddress } = opts;
    if (family !== 4 && family !== 6) throw new TypeError(`family must be 4 or 6, got ${JSON.stringify(family)}`);
    checkIfname(ifname);
    if (sourceAddress !== undefined) {
      checkAddress('sourceAddress', sourceAddress, family);
      if (family === 6 && !isLinkLocal6(sourceAddress)) {
        throw new TypeError(`sourceAddress must be an IPv6 link-local address (RFC 9568 §5.1.2.1), got ${JSON.stringify(sourceAddress)}`);
      }
    }
    if (typeof onPacket !== 'function') throw new TypeError('onPacket must be a function');
    if (typeof onError !== 'function') throw new TypeError('onError must be a function');
    const { VrrpSocket: Raw } = native();
    return new VrrpSocket(new Raw(family, ifname, sourceAddress, onPacket, onError), family, ifname);
  }

  /**
   * Joins the VRRP group on this interface: 224.0.0.18 (IP_ADD_MEMBERSHIP with ip_mreqn, man 7 ip)
   * or ff02::12 (IPV6_JOIN_GROUP, man 7 ipv6); RFC 9568 §5.1.1.2, §5.1.2.2.
   * @throws NativeError EADDRINUSE when already joined; EBADF when closed.
   */
  joinGroup(): void {
    this.#raw.joinGroup();
  }

  /**
   * Leaves the VRRP group (IP_DROP_MEMBERSHIP / IPV6_LEAVE_GROUP).
   * @throws NativeError EADDRNOTAVAIL when not joined; EBADF when closed.
   */
  leaveGroup(): void {
    this.#raw.leaveGroup();
  }

  /**
   * Sends one VRRP packet (sendmsg(2); the kernel adds the IP header, TTL / hop limit 255).
   * Source address and interface travel with it as IP_PKTINFO / IPV6_PKTINFO.
   * @param payload the whole VRRP packet (header, addresses; IPv6: checksum already filled in),
   *   1..1500 bytes.
   * @param destination an address of the socket's family, without zone: "224.0.0.18" /
   *   "ff02::12" for multicast, a peer's address for unicast (link-local IPv6 peers are reached
   *   through this interface).
   * @throws TypeError when payload or destination is invalid.
   * @throws NativeError e.g. EAGAIN / ENOBUFS (socket or queue full), ENETDOWN, ENETUNREACH,
   *   EINVAL (sourceAddress no longer assigned), EBADF when closed.
   */
  send(payload: Buffer, destination: string): void {
    checkBuffer('payload', payload, 1, MAX_PAYLOAD);
    checkAddress('destination', destination, this.family);
    this.#raw.send(payload, destination);
  }

  /** Counters since opening ({@link VrrpSocketStats}); still readable after close. */
  stats(): VrrpSocketStats {
    return this.#raw.stats();
  }

  /** Makes the open socket keep the event loop alive again (the default). No-op when closed. */
  ref(): void {
    this.#raw.ref();
  }

  /** Lets the event loop exit while the socket is open (uv_unref). No-op when closed. */
  unref(): void {
    this.#raw.unref();
  }

  /**
   * Reads the datagrams already waiting in the socket now and calls `onPacket` for each (at
   * most as many as one poll wake-up reads), instead of at the event loop's next poll phase.
   * A no-op once closed; never throws (receive errors go to `onError`).
   */
  receivePending(): void {
    this.#raw.receivePending();
  }

  /**
   * Starts the socket's advert pacer thread (native/advert_pacer.h), idle until
   * {@link VrrpSocket.pace} gives it adverts. `realtimePriority` 1..99 asks for SCHED_FIFO at
   * that priority (sched(7); the rest of the process keeps its scheduling), 0 for normal
   * scheduling. Once per socket.
   * @returns null, or the errno name that refused SCHED_FIFO (EPERM without CAP_SYS_NICE or a
   *   real-time budget): the thread then runs with normal scheduling.
   * @throws TypeError when realtimePriority is not 0..99; NativeError (pthread_create) when no
   *   thread can be created, EALREADY when it was started before, EBADF when closed.
   */
  startPacer(realtimePriority: number): string | null {
    if (!Number.isInteger(realtimePriority) || realtimePriority < 0 || realtimePriority > 99) throw new TypeError(`realtimePriority must be an integer 0..99, got ${String(realtimePriority)}`);
    const refused = this.#raw.startPacer(realtimePriority);
    return refused === 0 ? null : getSystemErrorName(-refused);
  }

  /**
   * What the pacer sends while the engine cannot: `adverts` (each round sends them in order)
   * once the last {@link VrrpSocket.send} is `intervalMs` plus a slack old (5 %, at least 3 ms,
   * at most half of `intervalMs`: native/advert_pacer.h CoverSlackNs), then every `intervalMs`
   * (Advertisement_Interval, ms) until the next send, and nothing once the last send is
   * `holdMs` (ms) old. `null`: not Active, nothing is sent. With {@link VrrpSocket.setAuth}
   * each is signed as it goes (docs/auth.md). The call counts as a send.
   * @throws TypeError when an advert is invalid, intervalMs is not 1..1e7 or holdMs not
   *   1..8.64e7 (nothing changed then).
   */
  pace(adverts: readonly PacedAdvert[] | null, intervalMs: number, holdMs: number): void {
    if (adverts) {
      for (const a of adverts) {
        checkBuffer('message', a.message, 1, MAX_PAYLOAD);
        checkAddress('destination', a.destination, this.family);
      }
    }
    this.#raw.pace(adverts ? adverts.map((a) => [a.message, a.destination]) : null, intervalMs, holdMs);
  }

  /**
   * Makes the pacer sign what it sends with `key` (HMAC-SHA256 trailer, docs/auth.md), taking
   * sequence numbers from the socket's counter, which starts at `firstSequence`; the engine's
   * own signed sends take theirs from {@link VrrpSocket.takeSequence}, so none is used twice.
   * @throws TypeError when the socket has no sourceAddress (the MAC covers it); EBADF when closed.
   */
  setAuth(key: Buffer, firstSequence: bigint): void {
    this.#raw.setAuth(key, firstSequence);
  }

  /** The next sequence number of signed adverts, taken (see {@link VrrpSocket.setAuth}). @throws NativeError EBADF when closed. */
  takeSequence(): bigint {
    return this.#raw.takeSequence();
  }

  /** Stops receiving and closes the socket (the pacer's thread ends first). Idempotent; never throws. */
  close(): void {
    this.#raw.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Packet socket

/**
 * An AF_PACKET SOCK_RAW socket bound to one interface, protocol 0 so that it receives nothing
 * (man 7 packet): sends whole link-layer frames built by the caller (gratuitous ARP, unsolicited
 * neighbour advertisements). Sending never blocks; it is synchronous.
 */
export class PacketSocket {
  /** The interface name, as opened. */
  readonly ifname: string;
  /** The interface's index (SIOCGIFINDEX), as of opening. */
  readonly ifindex: number;
  readonly #raw: RawPacketSocket;
  readonly #hardwareAddress: Buffer;

  private constructor(raw: RawPacketSocket, ifname: string) {
    this.#raw = raw;
    this.ifname = ifname;
    this.ifindex = raw.ifindex;
    this.#hardwareAddress = raw.hardwareAddress;
  }

  /**
   * Opens the socket on `ifname` and reads the interface's index and hardware address.
   * @param ifname interface name, 1..15 bytes.
   * @param opts what to receive (default: nothing); see {@link PacketSocketOptions}.
   * @throws TypeError when ifname, protocol or filter is invalid.
   * @throws NativeError EPERM from socket() without CAP_NET_RAW; ENODEV from ioctl(SIOCGIFINDEX)
   *   for a missing interface; EINVAL "setsockopt(SO_ATTACH_FILTER)" for a filter the kernel refuses.
   * @throws BallastError BALLAST_E_ADDON_MISSING when the addon is not built.
   */
  static open(ifname: string, opts: PacketSocketOptions = {}): PacketSocket {
    checkIfname(ifname);
    const protocol = opts.protocol ?? 0;
    if (!Number.isInteger(protocol) || protocol < 0 || protocol > 0xffff) throw new TypeError(`protocol must be an EtherType 0..65535, got ${String(protocol)}`);
    if (opts.filter !== undefined) checkBuffer('filter', opts.filter, 8, 256 * 8);
    const { PacketSocket: Raw } = native();
    return new PacketSocket(new Raw(ifname, protocol, opts.filter), ifname);
  }

  /**
   * The next queued frame, or null when none is (never blocks: the caller polls, e.g. from a
   * timer). Only a socket opened with a `protocol` receives anything; it also sees this host's
   * own frames of that type (`outgoing: true`).
   * @throws NativeError EBADF when closed, ENETDOWN when the interface went down.
   */
  receive(): ReceivedFrame | null {
    return this.#raw.receive();
  }

  /**
   * The interface's hardware address as of opening (SIOCGIFHWADDR, man 7 netdevice): 6 bytes,
   * a fresh copy on each read. All zeros on interfaces without one (loopback).
   */
  get hardwareAddress(): Buffer {
    return Buffer.from(this.#hardwareAddress);
  }

  /**
   * Sends one frame exactly as given: destination MAC, source MAC, EtherType, payload
   * (no FCS; the kernel pads nothing on virtual links, the NIC pads short frames on real ones).
   * @param frame 14..1518 bytes.
   * @throws TypeError when frame is not a Buffer of that size.
   * @throws NativeError e.g. ENETDOWN (interface down), EMSGSIZE (beyond the MTU), EAGAIN /
   *   ENOBUFS (queue full), EBADF when closed.
   */
  send(frame: Buffer): void {
    checkBuffer('frame', frame, MIN_FRAME, MAX_FRAME);
    this.#raw.send(frame);
  }

  /** Closes the socket. Idempotent; never throws. */
  close(): void {
    this.#raw.close();
  }
}

// ---------------------------------------------------------------------------------------------
// BPF socket load balancer (bpf/sock_lb.bpf.c, native/bpf_loader.cc)

const MAX_BACKENDS = 64; // BALLAST_LB_MAX_BACKENDS in bpf/sock_lb.h

function checkPath(name: string, value: unknown): asserts value is string {
  if (typeof value !== 'string' || !value.startsWith('/') || value.includes('\0')) {
    throw new TypeError(`${name} must be an absolute path, got ${JSON.stringify(value)}`);
  }
}

function checkSockAddress(name: string, value: unknown, family?: 4 | 6): asserts value is SockAddress {
  if (typeof value !== 'object' || value === null) throw new TypeError(`${name} must be an object { address, port }`);
  const { address, port } = value as { address?: unknown; port?: unknown };
  const ok = typeof address === 'string' && !address.includes('%') && (family === 4 ? isIPv4(address) : family === 6 ? isIPv6(address) : isIPv4(address) || isIPv6(address));
  if (!ok) throw new TypeError(`${name}.address must be an IP${family === undefined ? '' : `v${family}`} address, got ${JSON.stringify(address)}`);
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new TypeError(`${name}.port must be an integer 1..65535, got ${JSON.stringify(port)}`);
  }
}

function checkCookie(name: string, value: unknown): asserts value is bigint {
  if (typeof value !== 'bigint' || value < 0n || value >= 1n << 64n) throw new TypeError(`${name} must be a bigint in 0..2^64-1`);
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

// ---------------------------------------------------------------------------------------------
// nftables change events

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

/**
 * The kernel's nftables change events, as `nft monitor` sees them but without a child process:
 * a NETLINK_NETFILTER socket (libmnl) subscribed to the multicast group NFNLGRP_NFTABLES, read
 * through libuv on the event loop of the thread that opened it. Every committed transaction
 * that touches a table, chain, rule, set, element, object or flowtable produces notifications;
 * each wake-up calls `onChange` once with the tables they named. Only the network namespace the
 * thread is in when it opens the watch is seen (netlink sockets belong to their namespace).
 * Nothing runs while nothing changes. An open watch keeps the event loop alive unless opened
 * with `keepAlive: false`.
 */
export class NftWatch {
  readonly #raw: RawNftWatch;

  private constructor(raw: RawNftWatch) {
    this.#raw = raw;
  }

  /**
   * Opens the socket and starts receiving at once.
   * @param onChange called once per wake-up with what arrived ({@link NftChangeBatch}); a call
   *   with `lost: true` may name no table. An exception it throws is an uncaught exception.
   * @param opts.keepAlive whether the open watch keeps the event loop alive (default true; false
   *   is uv_unref: the process may exit while it is open).
   * @throws TypeError when onChange is not a function.
   * @throws NativeError EPERM from setsockopt(NETLINK_ADD_MEMBERSHIP) without CAP_NET_ADMIN;
   *   EPROTONOSUPPORT from socket() when nfnetlink is not available.
   * @throws BallastError BALLAST_E_ADDON_MISSING when the addon is not built.
   */
  static open(onChange: (batch: NftChangeBatch) => void, opts: { keepAlive?: boolean } = {}): NftWatch {
    if (typeof onChange !== 'function') throw new TypeError('onChange must be a function');
    const { NftWatch: Raw } = native();
    return new NftWatch(new Raw(onChange, opts.keepAlive ?? true));
  }

  /** Counters since opening ({@link NftWatchStats}), read from the addon; still readable after close. */
  get stats(): NftWatchStats {
    return this.#raw.stats();
  }

  /** Stops receiving and closes the socket. Idempotent; never throws. */
  close(): void {
    this.#raw.close();
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

function checkFilter(filter: TcpSocketFilter): void {
  if (typeof filter !== 'object' || filter === null) throw new TypeError('filter must be an object');
  const { family, dst, src, cookies } = filter;
  if (family !== 4 && family !== 6) throw new TypeError(`filter.family must be 4 or 6, got ${JSON.stringify(family)}`);
  for (const [name, end] of [['dst', dst], ['src', src]] as const) {
    if (end === undefined) continue;
    checkAddress(`filter.${name}.address`, end.address, family);
    if (end.port !== undefined && (!Number.isInteger(end.port) || end.port < 1 || end.port > 65535)) {
      throw new TypeError(`filter.${name}.port must be an integer 1..65535, got ${JSON.stringify(end.port)}`);
    }
  }
  if (cookies !== undefined) {
    if (!Array.isArray(cookies)) throw new TypeError('filter.cookies must be an array of bigint');
    cookies.forEach((c, i) => checkCookie(`filter.cookies[${i}]`, c));
  }
}

/**
 * The TCP sockets of the caller's network namespace that match `filter`, in every state that
 * has a peer except TIME_WAIT and SYN_RECV (listeners are never listed). One sock_diag dump
 * (sock_diag(7), SOCK_DIAG_BY_FAMILY with inet_diag_req_v2), synchronous, bounded by a 2 s
 * receive timeout.
 * @throws TypeError on a bad filter. @throws NativeError ETIMEDOUT "recv" when the kernel does not answer.
 */
export function listTcpSockets(filter: TcpSocketFilter): TcpSocketInfo[] {
  checkFilter(filter);
  return native().listSockets(filter);
}

/**
 * Destroys the TCP sockets {@link listTcpSockets} would list for `filter` (SOCK_DESTROY, one
 * request per socket, each naming the socket by 4-tuple and cookie): the owner's next read or
 * write fails with ECONNABORTED and the peer gets a RST. Acts in the caller's network namespace.
 * Used for sockets connected to a dead backend, and for sockets whose local address is a VIP
 * this node released.
 * @returns how many sockets were destroyed (a socket that closed meanwhile is not counted).
 * @throws TypeError on a bad filter.
 * @throws NativeError EPERM "SOCK_DESTROY" without CAP_NET_ADMIN, EOPNOTSUPP without
 *   CONFIG_INET_DIAG_DESTROY, ETIMEDOUT "recv" when the kernel does not answer within 2 s.
 */
export function destroySockets(filter: TcpSocketFilter): number {
  checkFilter(filter);
  return native().destroySockets(filter);
}

/** A held {@link lockFile} lock; release() removes the file and closes the descriptor (idempotent). */
export interface FileLock {
  readonly path: string;
  release(): void;
}

/**
 * Takes a host-wide exclusive lock: open(2) (creating the file, mode 0600) and
 * flock(LOCK_EX | LOCK_NB) (flock(2)), then checks that `path` still names the inode it locked
 * (fstat(2) against stat(2)) and starts over when not: the previous holder removed the file while
 * this call was between open and flock. release() unlinks the file while still holding the lock
 * (only when it is still the locked inode), then closes the descriptor. The kernel releases the
 * lock when the process dies, however it dies; a killed holder leaves the (empty) file, which is
 * harmless: the next taker locks it as usual.
 * @throws NativeError EAGAIN (= EWOULDBLOCK) "flock" while another process holds it; the open's errno
 *   (ENOENT when the directory is missing, EACCES) otherwise; ESTALE "stat" when the file was
 *   replaced on each of 64 attempts.
 */
export function lockFile(path: string): FileLock {
  if (typeof path !== 'string' || !path.startsWith('/')) throw new TypeError(`path must be an absolute path, got ${JSON.stringify(path)}`);
  const addon = native();
  let fd: number | null = addon.lockFile(path);
  return {
    path,
    release() {
      if (fd !== null) addon.unlockFile(fd, path);
      fd = null;
    },
  };
}

/**
 * Sends one sd_notify(3) message to the service manager: a single AF_UNIX SOCK_DGRAM datagram
 * (sendto(2), MSG_DONTWAIT: never blocks) to `socketPath`, by default $NOTIFY_SOCKET as systemd
 * sets it for a Type=notify service (systemd.exec(5)). A path starting with '@' is an abstract
 * socket name (unix(7)); any other must be absolute. `message` is newline-separated
 * `KEY=value` assignments, e.g. "READY=1\nSTATUS=MASTER for 10.0.0.100" (sd_notify(3) lists the
 * keys). The credentials systemd checks for NotifyAccess=main are attached by the kernel.
 * @param socketPath the socket; undefined or "" (no service manager listening): nothing is sent.
 * @returns true when the datagram was sent, false when there is no socket to send it to.
 * @throws TypeError when `message` is not a non-empty string without NUL bytes.
 * @throws NativeError EAFNOSUPPORT "sendto" for an address that is neither a path nor '@' (such as
 *   systemd's "vsock:…", not supported), ENAMETOOLONG "sendto" for one longer than sun_path holds,
 *   ENOENT / ECONNREFUSED "sendto" when nothing listens there, EAGAIN "sendto" when the manager's
 *   queue is full, EPERM / EACCES without permission on the socket.
 */
export function notify(message: string, socketPath: string | undefined = process.env.NOTIFY_SOCKET): boolean {
  if (typeof message !== 'string' || message.length === 0 || message.includes('\0')) throw new TypeError(`message must be a non-empty string without NUL bytes, got ${JSON.stringify(message)}`);
  if (socketPath !== undefined && typeof socketPath !== 'string') throw new TypeError('socketPath must be a string');
  if (socketPath === undefined || socketPath === '') return false;
  native().notify(socketPath, message);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Memory upkeep (native/memory.cc)

/** What {@link releaseMemory} did. */
export interface MemoryRelease {
  /** malloc_trim(3) returned memory to the kernel */
  mallocTrimmed: boolean;
  /** read-only file mappings whose pages left the process's page tables */
  fileMappings: number;
  /** their resident size before, KiB */
  fileKiB: number;
}

/**
 * Gives back what start-up used and the steady state does not (docs/performance.md, "Where the
 * memory goes"): malloc_trim(3) of every malloc arena, and the resident pages of the node
 * executable's read-only mappings (its code and read-only data: module compilation, the config
 * schema, preflight and the first nft apply touch tens of MiB of it once) out of the process's
 * page tables — they stay in the page cache, so what runs again is mapped back by a minor fault.
 * Only private read-only mappings of the executable without a copied-on-write page are touched
 * (never data); the kernel refuses writes to a running executable, so what is mapped back is
 * what was there. Synchronous: it reads /proc/self/smaps (~20–40 ms on the main thread).
 * @returns null without the addon or with one built before these functions.
 * @throws NativeError "open" when /proc/self/smaps cannot be read.
 */
export function releaseMemory(): MemoryRelease | null {
  let a: Addon;
  try {
    a = native();
  } catch {
    return null;
  }
  if (!a.trimMalloc || !a.releaseFilePages) return null;
  const mallocTrimmed = a.trimMalloc();
  const r = a.releaseFilePages();
  return { mallocTrimmed, fileMappings: r.mappings, fileKiB: r.kib };
}

// ---------------------------------------------------------------------------------------------
// The VIP data plane's conntrack entries (native/conntrack_dump.cc)

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

/**
 * The VIP data plane's established flows from conntrack, per backend: one ctnetlink dump
 * (IPCTNL_MSG_CT_GET, NLM_F_DUMP, this family only) in the caller's network namespace, matched
 * in the addon (TCP, original destination = a VIP and `port`, status DST_NAT, TCP state
 * ESTABLISHED) and aggregated by reply source. With `query.reset`, the oldest `count` flows of
 * that backend are then deleted (IPCTNL_MSG_CT_DELETE naming tuple, id and zone), oldest by
 * conntrack's start timestamp (entries without one first, ties by id), and their original
 * tuples returned (`reset.flows`); `reset.dryRun` only chooses, `reset.only` narrows the choice
 * to given flows. Synchronous: about
 * 10 ms of CPU per 2,000 entries (measured; most of it the kernel building the dump); every receive is bounded by a 2 s timeout.
 * @throws TypeError on a bad query.
 * @throws NativeError EPERM without CAP_NET_ADMIN, EPROTONOSUPPORT/ENOENT without ctnetlink
 *   (module nf_conntrack_netlink), ETIMEDOUT "recv" when the kernel does not answer within 2 s.
 * @throws BallastError BALLAST_E_ADDON_MISSING when the addon lacks the function (rebuild it).
 */
export function conntrackVipFlows(query: ConntrackVipQuery): ConntrackVipFlows {
  const a = native();
  if (typeof a.conntrackVipFlows !== 'function') {
    throw createError('BALLAST_E_ADDON_MISSING', `${addonPath()} has no conntrackVipFlows: rebuild it with \`npm run build:native\``);
  }
  return a.conntrackVipFlows(query);
}
