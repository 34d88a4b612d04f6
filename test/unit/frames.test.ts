import { describe, expect, it } from 'vitest';
import { gratuitousArpFrame, macToString, parseMac, unsolicitedNeighborAdvertFrame } from '../../src/vip/frames.js';
import { ETHERTYPE_ARP, ETHERTYPE_IPV6, fixturePath, parseEthernet, parseIPv6, readPcap } from '../support/pcap.js';

const MAC_11 = Buffer.from([0x02, 0x77, 0x00, 0x00, 0x00, 0x11]);

/** Independent RFC 1071 sum (BigInt, reduced mod 0xffff), as in packet.test.ts. */
function refChecksum(bytes: Uint8Array): number {
  const b = Array.from(bytes);
  if (b.length % 2 === 1) b.push(0);
  let total = 0n;
  for (let i = 0; i < b.length; i += 2) total += BigInt(b[i]! * 256 + b[i + 1]!);
  return 0xffff - (total === 0n ? 0 : Number(((total - 1n) % 0xffffn) + 1n));
}

/** The ICMPv6 message of an IPv6 frame summed with its pseudo-header: 0 when the checksum is right. */
function icmpv6Residue(frame: Buffer): number {
  const ip = parseIPv6(parseEthernet(frame).payload);
  const header = ip.header;
  const pseudo = Buffer.concat([
    header.subarray(8, 40), // source, destination
    Buffer.from([0, 0, ip.payload.length >> 8, ip.payload.length & 0xff, 0, 0, 0, ip.protocol]),
  ]);
  return refChecksum(Buffer.concat([pseudo, ip.payload]));
}

describe('gratuitous ARP', () => {
  const captured = readPcap(fixturePath('keepalived-garp.pcap'));

  it('equals the first frame keepalived sent, byte for byte', () => {
    const first = captured[0]!.data;
    expect(first).toHaveLength(42);
    expect(gratuitousArpFrame(MAC_11, '10.77.0.100').toString('hex')).toBe(first.subarray(0, 42).toString('hex'));
  });

  it('equals every frame of the capture, from each of the three nodes', () => {
    expect(captured).toHaveLength(20);
    for (const { data } of captured) {
      const sender = parseEthernet(data).source;
      expect(gratuitousArpFrame(Buffer.from(sender), '10.77.0.100').equals(data.subarray(0, 42))).toBe(true);
    }
    expect(new Set(captured.map((r) => macToString(parseEthernet(r.data).source)))).toEqual(
      new Set(['02:77:00:00:00:11', '02:77:00:00:00:12', '02:77:00:00:00:13']),
    );
  });

  it('field by field: a request, sender = target = the VIP, target MAC broadcast (keepalived), no padding', () => {
    const f = gratuitousArpFrame(MAC_11, '10.77.0.100');
    const eth = parseEthernet(f);
    expect(macToString(eth.destination)).toBe('ff:ff:ff:ff:ff:ff');
    expect(macToString(eth.source)).toBe('02:77:00:00:00:11');
    expect(eth.etherType).toBe(ETHERTYPE_ARP);
    const arp = eth.payload;
    expect(arp).toHaveLength(28);
    expect(arp.readUInt16BE(0)).toBe(1); // Ethernet
    expect(arp.readUInt16BE(2)).toBe(0x0800);
    expect([arp[4], arp[5]]).toEqual([6, 4]);
    expect(arp.readUInt16BE(6)).toBe(1); // request, not reply (RFC 5227 §3)
    expect(macToString(arp.subarray(8, 14))).toBe('02:77:00:00:00:11');
    expect(Array.from(arp.subarray(14, 18)).join('.')).toBe('10.77.0.100');
    // target hardware address: ignored by receivers in a request; RFC 5227 would write zeros, the
    // kernel writes zeros; keepalived writes broadcast, and so do we (see frames.ts)
    expect(macToString(arp.subarray(18, 24))).toBe('ff:ff:ff:ff:ff:ff');
    expect(Array.from(arp.subarray(24, 28)).join('.')).toBe('10.77.0.100');
  });

  it('refuses a bad MAC or a non-unicast IPv4 address', () => {
    expect(() => gratuitousArpFrame(Buffer.alloc(5, 2), '10.0.0.1')).toThrow(/senderMac must be 6 bytes/);
    expect(() => gratuitousArpFrame(parseMac('01:00:5e:00:00:12'), '10.0.0.1')).toThrow(/unicast MAC/);
    expect(() => gratuitousArpFrame(Buffer.alloc(6), '10.0.0.1')).toThrow(TypeError);
    expect(() => gratuitousArpFrame('02:77:00:00:00:11' as unknown as Buffer, '10.0.0.1')).toThrow(TypeError);
    for (const bad of ['fd77::100', '10.0.0', '', '0.0.0.0', '255.255.255.255', '224.0.0.18', '239.1.1.1']) {
      expect(() => gratuitousArpFrame(MAC_11, bad)).toThrow(TypeError);
    }
  });
});

describe('unsolicited Neighbor Advertisement', () => {
  const captured = readPcap(fixturePath('keepalived-ipv6-na.pcap'));

  it('equals the first frame keepalived sent, byte for byte, ICMPv6 checksum included', () => {
    const first = captured[0]!.data;
    expect(first).toHaveLength(86);
    const ours = unsolicitedNeighborAdvertFrame(MAC_11, 'fd77::100');
    expect(ours.toString('hex')).toBe(first.toString('hex'));
    expect(ours.readUInt16BE(14 + 40 + 2)).toBe(0x5728); // what tshark reports as [correct]
  });

  it('equals every frame of the capture, from each of the three nodes', () => {
    expect(captured).toHaveLength(20);
    for (const { data } of captured) {
      const sender = parseEthernet(data).source;
      expect(unsolicitedNeighborAdvertFrame(Buffer.from(sender), 'fd77::100').equals(data)).toBe(true);
    }
  });

  it('field by field (RFC 4861 §4.4, §7.2.6)', () => {
    const f = unsolicitedNeighborAdvertFrame(MAC_11, 'fd77::100');
    const eth = parseEthernet(f);
    expect(macToString(eth.destination)).toBe('33:33:00:00:00:01');
    expect(macToString(eth.source)).toBe('02:77:00:00:00:11');
    expect(eth.etherType).toBe(ETHERTYPE_IPV6);
    const ip = parseIPv6(eth.payload);
    expect(ip.header.readUInt32BE(0)).toBe(0x60000000); // traffic class 0, flow label 0
    expect(ip.ttl).toBe(255); // hop limit: receivers drop anything else (§7.1.2)
    expect(ip.protocol).toBe(58);
    expect(ip.source).toBe('fd77:0:0:0:0:0:0:100'); // the VIP itself, like keepalived
    expect(ip.destination).toBe('ff02:0:0:0:0:0:0:1');
    const icmp = ip.payload;
    expect(icmp).toHaveLength(32);
    expect([icmp[0], icmp[1]]).toEqual([136, 0]);
    expect(icmp[4]).toBe(0x20); // R=0 S=0 O=1
    expect(icmp.readUInt32BE(4) & 0x1fffffff).toBe(0); // reserved
    expect(icmp.subarray(8, 24).toString('hex')).toBe('fd770000000000000000000000000100');
    expect([icmp[24], icmp[25]]).toEqual([2, 1]); // Target Link-Layer Address, 8 bytes
    expect(macToString(icmp.subarray(26, 32))).toBe('02:77:00:00:00:11');
    expect(icmpv6Residue(f)).toBe(0);
  });

  it('Router flag: off by default (keepalived, and right for an API endpoint); on when asked (RFC 9568 §6.4.2 literally)', () => {
    const plain = unsolicitedNeighborAdvertFrame(MAC_11, 'fd77::100');
    const router = unsolicitedNeighborAdvertFrame(MAC_11, 'fd77::100', { router: true });
    expect(plain[54 + 4]).toBe(0x20);
    expect(router[54 + 4]).toBe(0xa0); // R=1 S=0 O=1
    expect(icmpv6Residue(router)).toBe(0);
    // nothing else differs but the flag byte and the checksum
    const diff = [...router.keys()].filter((i) => router[i] !== plain[i]);
    expect(diff.every((i) => i === 54 + 2 || i === 54 + 3 || i === 54 + 4)).toBe(true);
    expect(unsolicitedNeighborAdvertFrame(MAC_11, 'fd77::100', { router: false }).equals(plain)).toBe(true);
  });

  it('checksums right for other addresses and MACs (independent sum)', () => {
    for (const [mac, addr] of [
      ['00:11:22:33:44:55', '2001:db8::1'],
      ['fe:ff:ff:ff:ff:ff', 'fe80::1'],
      ['02:00:00:00:00:01', '2001:db8:ffff:ffff:ffff:ffff:ffff:ffff'],
    ] as const) {
      const f = unsolicitedNeighborAdvertFrame(parseMac(mac), addr);
      expect(icmpv6Residue(f)).toBe(0);
      expect(macToString(parseEthernet(f).source)).toBe(mac);
    }
  });

  it('refuses a bad MAC or a non-unicast IPv6 target', () => {
    expect(() => unsolicitedNeighborAdvertFrame(Buffer.alloc(7, 2), 'fd77::100')).toThrow(/senderMac/);
    expect(() => unsolicitedNeighborAdvertFrame(parseMac('33:33:00:00:00:01'), 'fd77::100')).toThrow(/unicast MAC/);
    for (const bad of ['10.77.0.100', '::', 'ff02::1', 'ff05::2', 'fd77::100%eth0', 'nope']) {
      expect(() => unsolicitedNeighborAdvertFrame(MAC_11, bad)).toThrow(TypeError);
    }
  });
});

describe('MAC text', () => {
  it('round-trips', () => {
    expect(macToString(MAC_11)).toBe('02:77:00:00:00:11');
    expect(parseMac('02:77:00:00:00:11').equals(MAC_11)).toBe(true);
    expect(parseMac('02-77-00-00-00-11').equals(MAC_11)).toBe(true);
    expect(parseMac('2:77:0:0:0:11').equals(MAC_11)).toBe(true);
    expect(macToString(parseMac('AA:BB:CC:DD:EE:FF'))).toBe('aa:bb:cc:dd:ee:ff');
  });

  it.each(['', '02:77:00:00:00', '02:77:00:00:00:11:22', '02:77:00:00:00:1g', '02:77-00:00:00:11', '027700000011', '02:77:00:00:00:111', ' 02:77:00:00:00:11'])(
    'parseMac refuses %j',
    (bad) => {
      expect(() => parseMac(bad)).toThrow(TypeError);
    },
  );

  it('macToString refuses anything but 6 bytes', () => {
    expect(() => macToString(Buffer.alloc(5))).toThrow(TypeError);
    expect(() => macToString('02:77:00:00:00:11' as unknown as Buffer)).toThrow(TypeError);
  });
});
