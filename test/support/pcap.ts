/**
 * Test helpers for classic libpcap captures: the reader (lab/pcap.ts, shared with the soak's
 * capture), the keepalived fixtures, and just enough Ethernet / IPv4 / IPv6 header splitting for
 * tests to pull a VRRP or ICMPv6 payload, its TTL / hop limit, source and destination out of a
 * capture. Test-only: it throws on anything it does not understand.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pcapRecords, type PcapRecord } from '../../lab/pcap.js';

export { LINKTYPE_ETHERNET, type PcapRecord } from '../../lab/pcap.js';

/**
 * Every record of a classic pcap file (lab/pcap.ts pcapRecords), microseconds as whole numbers.
 * @throws Error for another format, another link type, or a truncated file.
 */
export function parsePcap(file: Buffer): PcapRecord[] {
  return [...pcapRecords(file)].map((r) => ({ ...r, tsUsec: Math.floor(r.tsUsec) }));
}

/** Reads and parses a pcap file from disk. */
export function readPcap(path: string): PcapRecord[] {
  return parsePcap(readFileSync(path));
}

/**
 * Absolute path of a keepalived capture (or its decoded text): in test/fixtures/ of this
 * repository (real packets from keepalived 2.2.7, see test/fixtures/README.md), or in
 * $BALLAST_FIXTURES when that is set (to try other captures of the same names).
 * @throws Error naming the path when the file is not there.
 */
export function fixturePath(name: string): string {
  const dir = process.env.BALLAST_FIXTURES ?? resolve(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures');
  const path = resolve(dir, name);
  if (!existsSync(path)) {
    const from = process.env.BALLAST_FIXTURES === undefined ? 'test/fixtures' : `BALLAST_FIXTURES (${dir})`;
    throw new Error(`the keepalived capture ${name} is not at ${path} (looked in ${from})`);
  }
  return path;
}

export const ETHERTYPE_IPV4 = 0x0800;
export const ETHERTYPE_ARP = 0x0806;
export const ETHERTYPE_IPV6 = 0x86dd;
const ETHERTYPE_VLAN = 0x8100;

/** An Ethernet II header, split. */
export interface EthernetFrame {
  destination: Buffer;
  source: Buffer;
  /** After any one 802.1Q tag. */
  etherType: number;
  /** 802.1Q VLAN ID, when the frame was tagged. */
  vlan?: number;
  payload: Buffer;
}

/** Splits an Ethernet II frame (one optional 802.1Q tag). @throws Error when it is too short. */
export function parseEthernet(frame: Buffer): EthernetFrame {
  if (frame.length < 14) throw new Error(`ethernet: ${frame.length} bytes`);
  let etherType = frame.readUInt16BE(12);
  let at = 14;
  let vlan: number | undefined;
  if (etherType === ETHERTYPE_VLAN) {
    if (frame.length < 18) throw new Error('ethernet: truncated 802.1Q tag');
    vlan = frame.readUInt16BE(14) & 0x0fff;
    etherType = frame.readUInt16BE(16);
    at = 18;
  }
  return {
    destination: frame.subarray(0, 6),
    source: frame.subarray(6, 12),
    etherType,
    ...(vlan === undefined ? {} : { vlan }),
    payload: frame.subarray(at),
  };
}

/** An IP header, split, with the payload cut to the length the header declares (no Ethernet padding). */
export interface IpPacket {
  family: 4 | 6;
  /** IPv4 TTL or IPv6 hop limit. */
  ttl: number;
  /** IPv4 protocol or IPv6 next header (extension headers are not walked). */
  protocol: number;
  /** Text; IPv6 as eight uncompressed hex groups (valid RFC 4291 text, deliberately not RFC 5952). */
  source: string;
  destination: string;
  /** IPv4 header (IHL * 4 bytes) or the 40-byte IPv6 header. */
  header: Buffer;
  payload: Buffer;
}

/** Splits an IPv4 packet by IHL and Total Length. @throws Error when malformed. */
export function parseIPv4(packet: Buffer): IpPacket {
  if (packet.length < 20 || packet[0]! >> 4 !== 4) throw new Error('ipv4: not an IPv4 header');
  const ihl = (packet[0]! & 0x0f) * 4;
  const total = packet.readUInt16BE(2);
  if (ihl < 20 || total < ihl || total > packet.length) throw new Error(`ipv4: IHL ${ihl}, total length ${total}, have ${packet.length}`);
  return {
    family: 4,
    ttl: packet[8]!,
    protocol: packet[9]!,
    source: Array.from(packet.subarray(12, 16)).join('.'),
    destination: Array.from(packet.subarray(16, 20)).join('.'),
    header: packet.subarray(0, ihl),
    payload: packet.subarray(ihl, total),
  };
}

/** Splits an IPv6 packet by Payload Length. @throws Error when malformed. */
export function parseIPv6(packet: Buffer): IpPacket {
  if (packet.length < 40 || packet[0]! >> 4 !== 6) throw new Error('ipv6: not an IPv6 header');
  const payloadLength = packet.readUInt16BE(4);
  if (40 + payloadLength > packet.length) throw new Error(`ipv6: payload length ${payloadLength}, have ${packet.length - 40}`);
  const text = (b: Buffer): string => {
    const groups: string[] = [];
    for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
    return groups.join(':');
  };
  return {
    family: 6,
    ttl: packet[7]!,
    protocol: packet[6]!,
    source: text(packet.subarray(8, 24)),
    destination: text(packet.subarray(24, 40)),
    header: packet.subarray(0, 40),
    payload: packet.subarray(40, 40 + payloadLength),
  };
}

/** Ethernet frame -> its IPv4 or IPv6 packet. @throws Error for any other EtherType. */
export function ipOfFrame(frame: Buffer): IpPacket {
  const eth = parseEthernet(frame);
  if (eth.etherType === ETHERTYPE_IPV4) return parseIPv4(eth.payload);
  if (eth.etherType === ETHERTYPE_IPV6) return parseIPv6(eth.payload);
  throw new Error(`not IP: EtherType 0x${eth.etherType.toString(16)}`);
}
