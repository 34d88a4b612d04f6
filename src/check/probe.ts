/**
 * What `ballast check` listens for on the VRRP interface: whether another host already uses the
 * VIP (an ARP probe, RFC 5227 §2.1; a Neighbor Solicitation from the unspecified address, the
 * duplicate address detection of RFC 4862 §5.4), and which VRRP routers advertise on the LAN
 * (RFC 9568 §5.1 adverts, VRRPv2 of RFC 3768 too: keepalived speaks both).
 *
 * Frames are read from an AF_PACKET socket (src/native.ts PacketSocket with a protocol and a
 * classic BPF filter, so the kernel queues only the frames asked for), polled without blocking
 * every {@link POLL_MS}. The frame builders and parsers are pure and unit-tested.
 *
 * Probe timing, shorter than RFC 5227's on purpose: §1.1 waits PROBE_WAIT (0–1 s), sends
 * PROBE_NUM = 3 probes PROBE_MIN..PROBE_MAX (1–2 s) apart and listens ANNOUNCE_WAIT (2 s) more,
 * about 5 s in all; those figures protect a host configuring an address on a link that may just
 * have come up (switch ports in STP listening, a peer's DAD still running). The preflight runs on
 * a link that is up and asks a host that HOLDS the address, whose kernel answers an ARP request
 * or a DAD solicitation at once. So: {@link PROBE_COUNT} probes {@link PROBE_SPACING_MS} apart
 * (against a lost frame), then {@link PROBE_WAIT_MS} of listening, 1.2 s in all. The listening
 * is a second, not less, because some answers are delayed on purpose: an anycast address (the
 * IPv6 Subnet-Router anycast every forwarding node holds) answers after a random delay of up to
 * MAX_ANYCAST_DELAY_TIME = 1 s (RFC 4861 §7.2.7), and Linux delays proxy ARP / proxy NDP and
 * anycast answers by up to proxy_delay (0.8 s by default, ip-sysctl.rst).
 */
import { addressToBytes, bytesToAddress } from '../net/address.js';
import { PacketSocket, VrrpSocket, type ReceivedFrame } from '../native.js';
import { internetChecksum } from '../net/checksum.js';
import { VRRP_PROTOCOL } from '../vrrp/packet.js';
import { ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, macToString } from '../vip/frames.js';

/** Probes sent per address. */
export const PROBE_COUNT = 3;
/** Gap between two probes, ms. */
export const PROBE_SPACING_MS = 100;
/** Listening after the last probe, ms: covers the 1 s anycast / 0.8 s proxy delay (file comment). */
export const PROBE_WAIT_MS = 1000;
/** How often the packet sockets are drained, ms. */
export const POLL_MS = 5;

const ICMPV6 = 58;
const ND_NEIGHBOR_SOLICIT = 135;
const ND_NEIGHBOR_ADVERT = 136;

// ---------------------------------------------------------------------------------------------
// classic BPF (Documentation/networking/filter.rst): struct sock_filter { u16 code; u8 jt, jf; u32 k }

const BPF_LD_B_ABS = 0x30;
const BPF_JEQ_K = 0x15;
const BPF_RET_K = 0x06;
const ACCEPT = 0x40000;

type Insn = [code: number, jt: number, jf: number, k: number];

function program(insns: readonly Insn[]): Buffer {
  const b = Buffer.alloc(insns.length * 8);
  insns.forEach(([code, jt, jf, k], i) => {
    b.writeUInt16LE(code, i * 8);
    b[i * 8 + 2] = jt;
    b[i * 8 + 3] = jf;
    b.writeUInt32LE(k, i * 8 + 4);
  });
  return b;
}

/**
 * Accepts IPv4 frames carrying VRRP (IP protocol byte at Ethernet 14 + 9 = 23), or IPv6 frames
 * whose next header (14 + 6 = 20) is VRRP (no extension headers: RFC 9568 adverts have none).
 * Little-endian host order (x86-64, arm64).
 */
export function vrrpFilter(family: 4 | 6): Buffer {
  return program([
    [BPF_LD_B_ABS, 0, 0, family === 4 ? 23 : 20],
    [BPF_JEQ_K, 0, 1, VRRP_PROTOCOL],
    [BPF_RET_K, 0, 0, ACCEPT],
    [BPF_RET_K, 0, 0, 0],
  ]);
}

/** Accepts IPv6 frames carrying ICMPv6 (next header 58) of type 135 or 136 (byte 14 + 40 = 54). */
export function neighborDiscoveryFilter(): Buffer {
  return program([
    [BPF_LD_B_ABS, 0, 0, 20],
    [BPF_JEQ_K, 0, 4, ICMPV6],
    [BPF_LD_B_ABS, 0, 0, 54],
    [BPF_JEQ_K, 1, 0, ND_NEIGHBOR_SOLICIT],
    [BPF_JEQ_K, 0, 1, ND_NEIGHBOR_ADVERT],
    [BPF_RET_K, 0, 0, ACCEPT],
    [BPF_RET_K, 0, 0, 0],
  ]);
}

// ---------------------------------------------------------------------------------------------
// frames

/**
 * An ARP probe (RFC 5227 §2.1.1): a broadcast request with sender IP 0.0.0.0 (so no neighbour
 * cache learns anything from it), target hardware address zero, target IP the address. 42 bytes.
 */
export function arpProbeFrame(senderMac: Buffer, address: string): Buffer {
  const f = Buffer.alloc(42);
  f.fill(0xff, 0, 6);
  senderMac.copy(f, 6);
  f.writeUInt16BE(ETHERTYPE_ARP, 12);
  f.writeUInt16BE(1, 14); // htype Ethernet
  f.writeUInt16BE(ETHERTYPE_IPV4, 16);
  f[18] = 6;
  f[19] = 4;
  f.writeUInt16BE(1, 20); // request
  senderMac.copy(f, 22);
  // spa 0.0.0.0 (28..31), tha zero (32..37)
  addressToBytes(address).copy(f, 38);
  return f;
}

/** ff02::1:ffXX:XXXX of an address (RFC 4291 §2.7.1) and its MAC 33:33:ff:XX:XX:XX (RFC 2464 §7). */
function solicitedNode(target: Buffer): { ip: Buffer; mac: Buffer } {
  const ip = addressToBytes('ff02::1:ff00:0');
  target.copy(ip, 13, 13, 16);
  return { ip, mac: Buffer.from([0x33, 0x33, 0xff, target[13]!, target[14]!, target[15]!]) };
}

/**
 * A duplicate-address-detection Neighbor Solicitation (RFC 4862 §5.4.2, RFC 4861 §4.3): from the
 * unspecified address to the target's solicited-node group, hop limit 255, no Source Link-Layer
 * Address option (forbidden with an unspecified source). 78 bytes.
 */
export function dadSolicitationFrame(senderMac: Buffer, address: string): Buffer {
  const target = addressToBytes(address);
  const { ip, mac } = solicitedNode(target);
  const f = Buffer.alloc(14 + 40 + 24);
  mac.copy(f, 0);
  senderMac.copy(f, 6);
  f.writeUInt16BE(ETHERTYPE_IPV6, 12);
  const ip6 = f.subarray(14, 54);
  ip6.writeUInt32BE(0x60000000, 0);
  ip6.writeUInt16BE(24, 4);
  ip6[6] = ICMPV6;
  ip6[7] = 255;
  // source :: (8..23)
  ip.copy(ip6, 24);
  const icmp = f.subarray(54);
  icmp[0] = ND_NEIGHBOR_SOLICIT;
  target.copy(icmp, 8);
  const pseudo = Buffer.alloc(40);
  ip.copy(pseudo, 16);
  pseudo.writeUInt32BE(24, 32);
  pseudo[39] = ICMPV6;
  icmp.writeUInt16BE(internetChecksum(pseudo, icmp), 2);
  return f;
}

/** Someone else claiming the address. */
export interface AddressClaim {
  /** its hardware address, "aa:bb:cc:dd:ee:ff" (the ARP sender / NA target link-layer address, else the frame's source) */
  mac: string;
  /** how: an ARP reply, an ARP request from the address (an announcement), another host's ARP probe, a Neighbor Advertisement, another host's DAD solicitation */
  how: 'arp-reply' | 'arp-announcement' | 'arp-probe' | 'neighbor-advertisement' | 'dad-probe';
}

/**
 * Whether a received ARP frame claims `address` (RFC 5227 §2.1.1: a packet whose sender IP is the
 * address, or a probe from another host for it). `ownMac` is this interface's: our own probes,
 * looped back, are not a claim.
 * @returns the claim, or null.
 */
export function arpClaim(frame: Buffer, address: string, ownMac: Buffer): AddressClaim | null {
  if (frame.length < 42 || frame.readUInt16BE(12) !== ETHERTYPE_ARP || frame.readUInt16BE(16) !== ETHERTYPE_IPV4 || frame[18] !== 6 || frame[19] !== 4)
    return null;
  const op = frame.readUInt16BE(20);
  const sha = frame.subarray(22, 28);
  if (sha.equals(ownMac)) return null;
  const spa = bytesToAddress(frame.subarray(28, 32));
  const tpa = bytesToAddress(frame.subarray(38, 42));
  const mac = macToString(Buffer.from(sha));
  if (spa === address) return { mac, how: op === 2 ? 'arp-reply' : 'arp-announcement' };
  if (op === 1 && spa === '0.0.0.0' && tpa === address) return { mac, how: 'arp-probe' };
  return null;
}

/**
 * Whether a received Neighbor Discovery frame claims `address`: an advertisement for it, or
 * another host's DAD solicitation for it (RFC 4862 §5.4.3, §5.4.4).
 * @returns the claim, or null.
 */
export function ndClaim(frame: Buffer, address: string, ownMac: Buffer): AddressClaim | null {
  if (frame.length < 14 + 40 + 24 || frame.readUInt16BE(12) !== ETHERTYPE_IPV6 || frame[20] !== ICMPV6) return null;
  const src = frame.subarray(6, 12);
  if (src.equals(ownMac)) return null;
  const icmp = frame.subarray(54);
  const target = bytesToAddress(icmp.subarray(8, 24));
  if (target !== address) return null;
  if (icmp[0] === ND_NEIGHBOR_ADVERT) {
    // the Target Link-Layer Address option (type 2, RFC 4861 §4.6.1) names the holder
    let mac = macToString(Buffer.from(src));
    for (let o = 24; o + 8 <= icmp.length && icmp[o + 1]! > 0; o += icmp[o + 1]! * 8) {
      if (icmp[o] === 2) mac = macToString(Buffer.from(icmp.subarray(o + 2, o + 8)));
    }
    return { mac, how: 'neighbor-advertisement' };
  }
  const unspecified = frame.subarray(22, 38).every((b) => b === 0);
  if (icmp[0] === ND_NEIGHBOR_SOLICIT && unspecified) return { mac: macToString(Buffer.from(src)), how: 'dad-probe' };
  return null;
}

/** One VRRP advertisement heard on the LAN. */
export interface HeardAdvert {
  /** IP source address */
  source: string;
  /** Ethernet source address */
  mac: string;
  /** 2 (RFC 3768: keepalived `version 2`, and its default for IPv4) or 3 (RFC 9568) */
  version: number;
  vrid: number;
  priority: number;
  /** the advertised interval, ms (v2: whole seconds; v3: centiseconds) */
  intervalMs: number;
  addresses: string[];
  /** IPv4 TTL / IPv6 hop limit */
  ttl: number;
}

/**
 * Parses an Ethernet frame carrying a VRRP advertisement, v2 or v3, IPv4 or IPv6. Lenient on
 * purpose (no checksum or TTL check): the preflight reports what is on the wire.
 * @returns the advert, or null when the frame is not one.
 */
export function parseVrrpFrame(frame: Buffer): HeardAdvert | null {
  if (frame.length < 14) return null;
  const type = frame.readUInt16BE(12);
  let source: string;
  let ttl: number;
  let payload: Buffer;
  let width: number;
  if (type === ETHERTYPE_IPV4) {
    const ip = frame.subarray(14);
    if (ip.length < 20 || ip[0]! >> 4 !== 4 || ip[9] !== VRRP_PROTOCOL) return null;
    const ihl = (ip[0]! & 0x0f) * 4;
    const total = Math.min(ip.readUInt16BE(2), ip.length);
    if (ihl < 20 || total < ihl) return null;
    source = bytesToAddress(ip.subarray(12, 16));
    ttl = ip[8]!;
    payload = ip.subarray(ihl, total);
    width = 4;
  } else if (type === ETHERTYPE_IPV6) {
    const ip = frame.subarray(14);
    if (ip.length < 40 || ip[0]! >> 4 !== 6 || ip[6] !== VRRP_PROTOCOL) return null;
    source = bytesToAddress(ip.subarray(8, 24));
    ttl = ip[7]!;
    payload = ip.subarray(40, 40 + Math.min(ip.readUInt16BE(4), ip.length - 40));
    width = 16;
  } else {
    return null;
  }
  if (payload.length < 8) return null;
  const version = payload[0]! >> 4;
  if ((payload[0]! & 0x0f) !== 1 || (version !== 2 && version !== 3)) return null;
  const count = payload[3]!;
  const addresses: string[] = [];
  for (let i = 0; i < count && 8 + (i + 1) * width <= payload.length; i++) addresses.push(bytesToAddress(payload.subarray(8 + i * width, 8 + (i + 1) * width)));
  const intervalMs = version === 2 ? payload[5]! * 1000 : (((payload[4]! & 0x0f) << 8) | payload[5]!) * 10;
  return { source, mac: macToString(Buffer.from(frame.subarray(6, 12))), version, vrid: payload[1]!, priority: payload[2]!, intervalMs, addresses, ttl };
}

// ---------------------------------------------------------------------------------------------
// listening

/** Drains `socket` every POLL_MS until `ms` passed; each incoming frame goes to `onFrame`. */
function listen(socket: PacketSocket, ms: number, onFrame: (f: ReceivedFrame) => void, during?: (elapsedMs: number) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    const tick = (): void => {
      try {
        for (let f = socket.receive(); f !== null; f = socket.receive()) if (!f.outgoing) onFrame(f);
        const elapsed = performance.now() - start;
        during?.(elapsed);
        if (elapsed >= ms) {
          clearInterval(timer);
          resolve();
        }
      } catch (err) {
        clearInterval(timer);
        reject(err as Error);
      }
    };
    const timer = setInterval(tick, POLL_MS);
    tick();
  });
}

/**
 * Probes `address` on `ifname` ({@link PROBE_COUNT} probes, {@link PROBE_SPACING_MS} apart,
 * then {@link PROBE_WAIT_MS}) and collects every claim heard meanwhile, one per MAC.
 * @param address IPv4 (ARP) or IPv6 (DAD NS), canonical text.
 * @throws NativeError EPERM without CAP_NET_RAW, ENODEV for a missing interface, ENETDOWN.
 */
export async function probeAddress(ifname: string, address: string, family: 4 | 6): Promise<AddressClaim[]> {
  const socket =
    family === 4
      ? PacketSocket.open(ifname, { protocol: ETHERTYPE_ARP })
      : PacketSocket.open(ifname, { protocol: ETHERTYPE_IPV6, filter: neighborDiscoveryFilter() });
  try {
    const mac = socket.hardwareAddress;
    const probe = family === 4 ? arpProbeFrame(mac, address) : dadSolicitationFrame(mac, address);
    const claims = new Map<string, AddressClaim>();
    let sent = 0;
    const total = (PROBE_COUNT - 1) * PROBE_SPACING_MS + PROBE_WAIT_MS;
    await listen(
      socket,
      total,
      (f) => {
        const c = family === 4 ? arpClaim(f.frame, address, mac) : ndClaim(f.frame, address, mac);
        if (c && !claims.has(c.mac)) claims.set(c.mac, c);
      },
      (elapsed) => {
        while (sent < PROBE_COUNT && elapsed >= sent * PROBE_SPACING_MS) {
          socket.send(probe);
          sent++;
        }
      },
    );
    return [...claims.values()];
  } finally {
    socket.close();
  }
}

/**
 * Listens for VRRP adverts (v2 and v3) on `ifname` for `ms`, as a member of the group
 * (224.0.0.18 / ff02::12 joined, so a switch with IGMP/MLD snooping forwards them), and
 * returns each one heard, in order. This host's own adverts are not included.
 * @throws NativeError EPERM without CAP_NET_RAW, ENODEV for a missing interface.
 */
export async function listenForAdverts(ifname: string, family: 4 | 6, ms: number): Promise<HeardAdvert[]> {
  // the raw VRRP socket only holds the group membership; frames are read with their MAC below
  const member = VrrpSocket.open(
    { family, ifname },
    () => undefined,
    () => undefined,
  );
  const socket = PacketSocket.open(ifname, { protocol: family === 4 ? ETHERTYPE_IPV4 : ETHERTYPE_IPV6, filter: vrrpFilter(family) });
  try {
    member.joinGroup();
    const heard: HeardAdvert[] = [];
    await listen(socket, ms, (f) => {
      const a = parseVrrpFrame(f.frame);
      if (a) heard.push(a);
    });
    return heard;
  } finally {
    socket.close();
    member.close();
  }
}
