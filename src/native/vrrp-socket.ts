/**
 * The raw VRRP socket of the addon (native/vrrp_socket.cc) and its advert pacer
 * (native/advert_pacer.h).
 */
import { getSystemErrorName } from 'node:util';
import { native, type NativeError, type RawVrrpSocket, type ReceivedPacket, type VrrpSocketStats } from './addon.js';
import { checkAddress, checkBuffer, checkIfname, isLinkLocal6 } from './checks.js';

const MAX_PAYLOAD = 1500;

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

/** One advert the pacer repeats: the VRRP message (without an auth trailer) and where it goes. */
export interface PacedAdvert {
  message: Buffer;
  destination: string;
}

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
    if (!Number.isInteger(realtimePriority) || realtimePriority < 0 || realtimePriority > 99)
      throw new TypeError(`realtimePriority must be an integer 0..99, got ${String(realtimePriority)}`);
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
