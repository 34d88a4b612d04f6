/**
 * The addon's AF_PACKET socket (native/packet_socket.cc): gratuitous ARP and unsolicited
 * neighbour advertisements out, filtered frames in.
 */
import { native, type RawPacketSocket, type ReceivedFrame } from './addon.js';
import { checkBuffer, checkIfname } from './checks.js';

const MIN_FRAME = 14; // destination, source, EtherType
const MAX_FRAME = 1518; // 1500-byte MTU + Ethernet header + one 802.1Q tag, no FCS

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
    if (!Number.isInteger(protocol) || protocol < 0 || protocol > 0xffff)
      throw new TypeError(`protocol must be an EtherType 0..65535, got ${String(protocol)}`);
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
