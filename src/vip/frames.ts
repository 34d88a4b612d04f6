/**
 * Frames that tell a LAN a VIP has moved (RFC 9568 §6.4.1 / §6.4.2 on becoming Active): a
 * gratuitous ARP request for IPv4 and an unsolicited Neighbor Advertisement for IPv6. Pure: they
 * return whole Ethernet frames, header included, for an AF_PACKET socket to send. No padding to
 * the 60-byte Ethernet minimum: the kernel / NIC pads, exactly as for keepalived's frames.
 *
 * Gratuitous ARP (42 bytes), byte for byte what keepalived 2.2.7 sends:
 *
 *    0      6      12   14                                                   42
 *    | dst  | src  |0806| htype 1 | ptype 0800 | hlen 6 | plen 4 | op 1 (request) |
 *    | sha = sender MAC | spa = VIP | tha = ff:ff:ff:ff:ff:ff | tpa = VIP |
 *    dst = ff:ff:ff:ff:ff:ff, src = sender MAC
 *
 *  - A request, not a reply: RFC 9568 §6.4.2 says "gratuitous ARP request" in the original text,
 *    and RFC 5227 §3 explains why requests are the better announcement (some stacks ignore
 *    unsolicited replies). Sender and target protocol address are both the VIP.
 *  - Target hardware address: keepalived writes ff:ff:ff:ff:ff:ff. Receivers ignore that field
 *    in a request (RFC 826; RFC 5944 §4.6: "not used in an ARP Request packet"), so any value
 *    works; RFC 5227 §2.3 would rather have zeros (what the Linux kernel's own announcements
 *    carry) and RFC 9568 erratum 7949 words it as the Virtual Router MAC. We keep keepalived's
 *    broadcast value: it is what the deployed base of switches and hosts has been taking from
 *    keepalived for two decades, and a mixed fleet then sends indistinguishable frames.
 *
 * Unsolicited Neighbor Advertisement (86 bytes; RFC 4861 §4.4, §7.2.6):
 *
 *    Ethernet  dst 33:33:00:00:00:01 (ff02::1, RFC 2464 §7), src = sender MAC, type 86dd
 *    IPv6      version 6, traffic class 0, flow label 0, payload length 32, next header 58,
 *              hop limit 255 (§7.1.2 requires it), source = the VIP, destination ff02::1
 *    ICMPv6    type 136, code 0, checksum (RFC 4443 §2.3, RFC 8200 §8.1 pseudo-header),
 *              flags R=0 S=0 O=1, reserved, target = the VIP,
 *              option 2 (Target Link-Layer Address), length 1 (8 bytes), the sender MAC
 *
 *  - Solicited is 0 and must be for a multicast destination (§7.1.2); Override is 1 so caches
 *    replace the old MAC (§7.2.6).
 *  - Source address = the VIP itself, as keepalived does: §4.4 asks for "an address assigned to
 *    the interface", which the VIP is by the time we announce it (add it with IFA_F_NODAD, so it
 *    is not tentative). A link-local source would be just as valid.
 *  - Router flag: RFC 9568 §6.4.2 asks for R=1, because a VRRP virtual router is a default
 *    gateway. ballast's VIP is an API endpoint on hosts, not a router, and R=1 would tell every
 *    neighbour it is one (RFC 4861 §7.2.5: IsRouter). keepalived sets R only when the interface
 *    forwards IPv6 (it was 0 in the capture). We default to 0 and take `{ router: true }` for a
 *    deployment that really is a first-hop router.
 */
import { addressFamily, addressToBytes } from '../net/address.js';
import { internetChecksum } from '../net/checksum.js';

const BROADCAST_MAC = Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
/** ff02::1 and its Ethernet multicast MAC 33:33 + the low 32 bits (RFC 2464 §7). */
const ALL_NODES = addressToBytes('ff02::1');
const ALL_NODES_MAC = Buffer.from([0x33, 0x33, 0x00, 0x00, 0x00, 0x01]);

/** EtherTypes (IEEE 802 numbers; linux/if_ether.h ETH_P_IP, ETH_P_ARP, ETH_P_IPV6). */
export const ETHERTYPE_IPV4 = 0x0800;
/** ARP (RFC 826). */
export const ETHERTYPE_ARP = 0x0806;
/** IPv6 (RFC 2464 §3). */
export const ETHERTYPE_IPV6 = 0x86dd;
const ARP_HTYPE_ETHERNET = 1;
const ARP_OP_REQUEST = 1;
const IPPROTO_ICMPV6 = 58;
const ND_NEIGHBOR_ADVERT = 136;
const ND_OPT_TARGET_LINKADDR = 2;
const NA_FLAG_ROUTER = 0x80;
const NA_FLAG_OVERRIDE = 0x20;
const ND_HOP_LIMIT = 255;

/** Options for unsolicitedNeighborAdvertFrame. */
export interface NeighborAdvertOptions {
  /** Set the Router flag (RFC 4861 §4.4). Default false: see the file comment. */
  router?: boolean;
}

/**
 * A gratuitous ARP request announcing that `address` is at `senderMac` (RFC 9568 §6.4.2, RFC 5227
 * §3): a 42-byte Ethernet frame to ff:ff:ff:ff:ff:ff, unpadded, identical to keepalived's.
 * @param senderMac 6 bytes, unicast: the MAC of the interface that now holds the VIP.
 * @param address the VIP, IPv4 text.
 * @returns the whole frame, Ethernet header included.
 * @throws TypeError when senderMac is not a 6-byte unicast, non-zero MAC, or address is not a
 *   unicast IPv4 address (0.0.0.0, 255.255.255.255 and 224.0.0.0/4 are refused).
 */
export function gratuitousArpFrame(senderMac: Buffer, address: string): Buffer {
  checkSenderMac(senderMac);
  if (typeof address !== 'string' || addressFamily(address) !== 4) {
    throw new TypeError(`address must be an IPv4 address, got ${show(address)}`);
  }
  const ip = addressToBytes(address);
  if (ip.readUInt32BE(0) === 0 || ip.readUInt32BE(0) === 0xffffffff || ip[0]! >> 4 === 0xe) {
    throw new TypeError(`address must be a unicast IPv4 address, got ${address}`);
  }
  const frame = Buffer.alloc(42);
  BROADCAST_MAC.copy(frame, 0);
  frame.set(senderMac, 6);
  frame.writeUInt16BE(ETHERTYPE_ARP, 12);
  frame.writeUInt16BE(ARP_HTYPE_ETHERNET, 14);
  frame.writeUInt16BE(ETHERTYPE_IPV4, 16);
  frame[18] = 6; // hardware address length
  frame[19] = 4; // protocol address length
  frame.writeUInt16BE(ARP_OP_REQUEST, 20);
  frame.set(senderMac, 22); // sender hardware address
  ip.copy(frame, 28); // sender protocol address
  BROADCAST_MAC.copy(frame, 32); // target hardware address: ignored in a request; keepalived's value
  ip.copy(frame, 38); // target protocol address = sender's: that is what makes it gratuitous
  return frame;
}

/**
 * An unsolicited Neighbor Advertisement announcing that `address` is at `senderMac`
 * (RFC 4861 §7.2.6, RFC 9568 §6.4.2): an 86-byte Ethernet frame to 33:33:00:00:00:01 carrying
 * IPv6 from the VIP to ff02::1, hop limit 255, Override set, Solicited clear, Router clear unless
 * asked, with a Target Link-Layer Address option; ICMPv6 checksum filled in. Unpadded.
 * @param senderMac 6 bytes, unicast: the MAC of the interface that now holds the VIP.
 * @param address the VIP, IPv6 text (no zone suffix).
 * @param opts router: set the R flag (default false).
 * @returns the whole frame, Ethernet header included.
 * @throws TypeError when senderMac is not a 6-byte unicast, non-zero MAC, or address is not a
 *   unicast IPv6 address (:: and ff00::/8 are refused; RFC 4861 §7.1.2 forbids a multicast target).
 */
export function unsolicitedNeighborAdvertFrame(senderMac: Buffer, address: string, opts: NeighborAdvertOptions = {}): Buffer {
  checkSenderMac(senderMac);
  if (typeof address !== 'string' || addressFamily(address) !== 6) {
    throw new TypeError(`address must be an IPv6 address, got ${show(address)}`);
  }
  const ip = addressToBytes(address);
  if (ip[0] === 0xff || ip.every((b) => b === 0)) {
    throw new TypeError(`address must be a unicast IPv6 address, got ${address}`);
  }
  const icmpLength = 24 + 8; // NA body + one 8-byte option
  const frame = Buffer.alloc(14 + 40 + icmpLength);

  ALL_NODES_MAC.copy(frame, 0);
  frame.set(senderMac, 6);
  frame.writeUInt16BE(ETHERTYPE_IPV6, 12);

  const ip6 = frame.subarray(14, 54);
  ip6.writeUInt32BE(0x60000000, 0); // version 6, traffic class 0, flow label 0
  ip6.writeUInt16BE(icmpLength, 4);
  ip6[6] = IPPROTO_ICMPV6;
  ip6[7] = ND_HOP_LIMIT;
  ip.copy(ip6, 8);
  ALL_NODES.copy(ip6, 24);

  const icmp = frame.subarray(54);
  icmp[0] = ND_NEIGHBOR_ADVERT;
  icmp[1] = 0; // code
  icmp[4] = NA_FLAG_OVERRIDE | (opts.router === true ? NA_FLAG_ROUTER : 0); // Solicited (0x40) stays clear: §7.2.6
  ip.copy(icmp, 8); // target address
  icmp[24] = ND_OPT_TARGET_LINKADDR;
  icmp[25] = 1; // option length in units of 8 bytes
  icmp.set(senderMac, 26);

  const pseudo = Buffer.alloc(40);
  ip.copy(pseudo, 0);
  ALL_NODES.copy(pseudo, 16);
  pseudo.writeUInt32BE(icmpLength, 32);
  pseudo[39] = IPPROTO_ICMPV6;
  icmp.writeUInt16BE(internetChecksum(pseudo, icmp), 2);
  return frame;
}

/**
 * A MAC address as text: six lowercase two-digit hex bytes joined by colons ("02:77:00:00:00:11").
 * @throws TypeError when mac is not 6 bytes.
 */
export function macToString(mac: Buffer): string {
  if (!(mac instanceof Uint8Array) || mac.length !== 6) {
    throw new TypeError(`mac must be 6 bytes, got ${mac instanceof Uint8Array ? `${mac.length} bytes` : typeof mac}`);
  }
  return Array.from(mac, (b) => b.toString(16).padStart(2, '0')).join(':');
}

/**
 * Parses a MAC address: six one- or two-digit hex bytes separated by ':' or '-', any case
 * ("02:77:00:00:00:11", "02-77-00-00-00-11", "2:77:0:0:0:11").
 * @returns 6 bytes.
 * @throws TypeError when s is not such a string.
 */
export function parseMac(s: string): Buffer {
  const parts = typeof s === 'string' ? s.split(/[:-]/) : [];
  const separators = typeof s === 'string' ? new Set(s.replace(/[0-9a-f]/gi, '')) : new Set<string>();
  if (parts.length !== 6 || separators.size !== 1 || !parts.every((p) => /^[0-9a-f]{1,2}$/i.test(p))) {
    throw new TypeError(`not a MAC address: ${show(s)}`);
  }
  return Buffer.from(parts.map((p) => parseInt(p, 16)));
}

function checkSenderMac(mac: unknown): asserts mac is Buffer {
  if (!(mac instanceof Uint8Array) || mac.length !== 6) {
    throw new TypeError(`senderMac must be 6 bytes, got ${mac instanceof Uint8Array ? `${mac.length} bytes` : typeof mac}`);
  }
  if ((mac[0]! & 0x01) !== 0) throw new TypeError(`senderMac must be a unicast MAC, got ${macToString(Buffer.from(mac))}`);
  if (mac.every((b) => b === 0)) throw new TypeError('senderMac must not be 00:00:00:00:00:00');
}

function show(value: unknown): string {
  try {
    return typeof value === 'string' ? JSON.stringify(value) : String(value);
  } catch {
    return `<${typeof value}>`;
  }
}
