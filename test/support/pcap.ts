/**
 * A minimal reader for classic libpcap files (not pcapng) and just enough Ethernet / IPv4 / IPv6
 * header splitting for tests to pull a VRRP or ICMPv6 payload, its TTL / hop limit, source and
 * destination out of a capture. Test-only: it throws on anything it does not understand.
 *
 * File layout (all fields in the writer's byte order, told by the magic number):
 *   global header, 24 bytes: magic(4) version_major(2) version_minor(2) thiszone(4) sigfigs(4)
 *                            snaplen(4) network(4)
 *   per record, 16 bytes:    ts_sec(4) ts_usec(4; nanoseconds for the 0xa1b23c4d magic)
 *                            incl_len(4) orig_len(4), then incl_len bytes of frame
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** One captured frame. */
export interface PcapRecord {
  /** Seconds since the epoch. */
  tsSec: number;
  /** Microseconds within the second (converted from nanoseconds for nanosecond captures). */
  tsUsec: number;
  /** The captured bytes (incl_len of them), from the Ethernet header on. */
  data: Buffer;
  /** The frame's length on the wire (orig_len); more than data.length when the capture was cut. */
  origLen: number;
}

const MAGIC_USEC = 0xa1b2c3d4;
const MAGIC_NSEC = 0xa1b23c4d;
/** LINKTYPE_ETHERNET. */
export const LINKTYPE_ETHERNET = 1;

/**
 * Reads every record of a classic pcap file, either byte order, microsecond or nanosecond
 * timestamps, link type 1 (Ethernet) only.
 * @throws Error for another format, another link type, or a truncated file.
 */
export function parsePcap(file: Buffer): PcapRecord[] {
  if (file.length < 24) throw new Error(`pcap: ${file.length} bytes, shorter than the global header`);
  let u32: (at: number) => number;
  let nanos: boolean;
  const le = file.readUInt32LE(0);
  if (le === MAGIC_USEC || le === MAGIC_NSEC) {
    u32 = (at) => file.readUInt32LE(at);
    nanos = le === MAGIC_NSEC;
  } else {
    const be = file.readUInt32BE(0);
    if (be !== MAGIC_USEC && be !== MAGIC_NSEC) throw new Error(`pcap: bad magic 0x${le.toString(16)}`);
    u32 = (at) => file.readUInt32BE(at);
    nanos = be === MAGIC_NSEC;
  }
  const linkType = u32(20) & 0x0fffffff; // the top bits may carry FCS information
  if (linkType !== LINKTYPE_ETHERNET) throw new Error(`pcap: link type ${linkType}, only Ethernet (1) is supported`);

  const records: PcapRecord[] = [];
  let at = 24;
  while (at < file.length) {
    if (at + 16 > file.length) throw new Error(`pcap: truncated record header at offset ${at}`);
    const tsSec = u32(at);
    const frac = u32(at + 4);
    const inclLen = u32(at + 8);
    const origLen = u32(at + 12);
    at += 16;
    if (at + inclLen > file.length) throw new Error(`pcap: truncated record at offset ${at}`);
    records.push({
      tsSec,
      tsUsec: nanos ? Math.floor(frac / 1000) : frac,
      data: file.subarray(at, at + inclLen),
      origLen,
    });
    at += inclLen;
  }
  return records;
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
