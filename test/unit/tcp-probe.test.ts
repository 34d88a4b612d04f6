/**
 * The TCP probe (native/tcp_probe.cc, src/native/tcp-probe.ts) against literal bytes: the
 * builder's packets, their checksum recomputed here from RFC 9293 §3.1 / RFC 8200 §8.1 (the
 * pseudo-header) and RFC 1071 (the one's-complement sum), and two real exchanges captured by
 * tcpdump in the client's namespace of the reset-probe lab (test/fixtures/tcp-probe-ipv4.pcap,
 * -ipv6.pcap; the lab's agent sent the probes): the probe as the kernel put it on the wire, the
 * client's ACK revealing its numbers, the RST that ended the connection, the second probe and
 * the client's RST for it (its socket was gone by then).
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sendTcpProbes, tcpProbePacket, TCP_PROBE_MAX_CLIENTS, type TcpProbeBatch, type TcpProbeResult } from '../../src/native.js';
import { PROBE_MARK } from '../../src/dataplane/nftables.js';
import { PROBE_PACKETS_PER_SECOND, probeClients } from '../../src/dataplane/probe.js';
import { fixturePath, parseEthernet, parseIPv4, parseIPv6, readPcap, type IpPacket } from '../support/pcap.js';

/** RFC 1071: the 16-bit one's-complement sum of `parts`, folded. */
function onesSum(...parts: Buffer[]): number {
  let sum = 0;
  for (const p of parts) {
    for (let i = 0; i < p.length; i += 2) sum += (p[i]! << 8) | (p[i + 1] ?? 0);
  }
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum;
}

/** The TCP checksum of `segment` (its checksum field taken as zero) between `source` and `destination`. */
function tcpChecksum(family: 4 | 6, source: Buffer, destination: Buffer, segment: Buffer): number {
  const zeroed = Buffer.from(segment);
  zeroed.writeUInt16BE(0, 16);
  const pseudo =
    family === 4
      ? Buffer.concat([source, destination, Buffer.from([0, 6]), u16(segment.length)])
      : Buffer.concat([source, destination, u32(segment.length), Buffer.from([0, 0, 0, 6])]);
  return ~onesSum(pseudo, zeroed) & 0xffff;
}

const u16 = (n: number): Buffer => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
};
const u32 = (n: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};

/** The IP packet's addresses as bytes, and its TCP segment. */
function split(family: 4 | 6, packet: Buffer): { source: Buffer; destination: Buffer; tcp: Buffer } {
  return family === 4
    ? { source: packet.subarray(12, 16), destination: packet.subarray(16, 20), tcp: packet.subarray(20) }
    : { source: packet.subarray(8, 24), destination: packet.subarray(24, 40), tcp: packet.subarray(40) };
}

/** The TCP fields the tests read. */
function tcp(ip: IpPacket): { sport: number; dport: number; seq: number; ack: number; flags: number; window: number } {
  const t = ip.payload;
  return { sport: t.readUInt16BE(0), dport: t.readUInt16BE(2), seq: t.readUInt32BE(4), ack: t.readUInt32BE(8), flags: t[13]!, window: t.readUInt16BE(14) };
}

const ACK = 0x10;
const RST = 0x04;

describe('tcpProbePacket: the bytes', () => {
  it('IPv4: header fields, ACK only, window 1024, no options, and the checksum of RFC 9293 §3.1', () => {
    const p = tcpProbePacket({ family: 4, source: '10.78.201.100', sourcePort: 6443, destination: '10.78.201.9', destinationPort: 40000, seq: 1, ack: 2 });
    expect(p.toString('hex')).toBe(
      // version/IHL, TOS, total 40, id 0, DF, TTL 64, TCP, checksum 0 (the kernel's), addresses
      '45000028' +
        '00004000' +
        '40060000' +
        '0a4ec964' +
        '0a4ec909' +
        // ports 6443 → 40000, seq 1, ack 2, offset 5, ACK, window 1024, checksum, urgent 0
        '192b9c40' +
        '00000001' +
        '00000002' +
        '5010' +
        '0400' +
        '4f5c' +
        '0000',
    );
    const s = split(4, p);
    expect(tcpChecksum(4, s.source, s.destination, s.tcp)).toBe(0x4f5c);
  });

  it('IPv6: header fields, and the checksum over the RFC 8200 §8.1 pseudo-header', () => {
    const p = tcpProbePacket({
      family: 6,
      source: 'fd78:201::100',
      sourcePort: 6443,
      destination: 'fd78:201::9',
      destinationPort: 40000,
      seq: 0x80000001,
      ack: 2,
    });
    expect(p).toHaveLength(60);
    // version 6, no traffic class or flow label, payload 20, next header TCP, hop limit 64
    expect(p.subarray(0, 8).toString('hex')).toBe('6000000000140640');
    const s = split(6, p);
    expect(s.source.toString('hex')).toBe('fd780201000000000000000000000100');
    expect(s.destination.toString('hex')).toBe('fd780201000000000000000000000009');
    expect(s.tcp.subarray(0, 16).toString('hex')).toBe('192b9c40' + '80000001' + '00000002' + '5010' + '0400');
    expect(s.tcp.readUInt16BE(16)).toBe(tcpChecksum(6, s.source, s.destination, s.tcp));
  });

  it('the checksum agrees with the independent one for random addresses, ports and numbers (both families)', () => {
    for (let i = 0; i < 200; i++) {
      const family = i % 2 === 0 ? 4 : 6;
      const r = randomBytes(48);
      const addr = (at: number): string =>
        family === 4 ? Array.from(r.subarray(at, at + 4)).join('.') : Array.from({ length: 8 }, (_, k) => r.readUInt16BE(at + 2 * k).toString(16)).join(':');
      const p = tcpProbePacket({
        family,
        source: addr(0),
        destination: addr(16),
        sourcePort: 1 + (r.readUInt16BE(32) % 65535),
        destinationPort: 1 + (r.readUInt16BE(34) % 65535),
        seq: r.readUInt32BE(36),
        ack: r.readUInt32BE(40),
      });
      const s = split(family, p);
      expect(s.tcp.readUInt16BE(16)).toBe(tcpChecksum(family, s.source, s.destination, s.tcp));
      // the receiver's check: the sum over the pseudo-header and the segment, checksum included, is all ones
      const pseudo =
        family === 4
          ? Buffer.concat([s.source, s.destination, Buffer.from([0, 6]), u16(20)])
          : Buffer.concat([s.source, s.destination, u32(20), Buffer.from([0, 0, 0, 6])]);
      expect(onesSum(pseudo, s.tcp)).toBe(0xffff);
    }
  });

  it('checks its arguments before crossing, naming them', () => {
    const ok = { family: 4, source: '10.0.0.1', sourcePort: 6443, destination: '10.0.0.2', destinationPort: 40000, seq: 0, ack: 0 } as const;
    expect(() => tcpProbePacket({ ...ok, family: 5 as 4 })).toThrow(/^segment\.family must be 4 or 6/);
    expect(() => tcpProbePacket({ ...ok, source: 'fd00::1' })).toThrow(/^segment\.source must be an IPv4 address/);
    expect(() => tcpProbePacket({ ...ok, destinationPort: 0 })).toThrow(/^segment\.destinationPort must be an integer 1\.\.65535/);
    expect(() => tcpProbePacket({ ...ok, seq: 2 ** 32 })).toThrow(/^segment\.seq must be an integer 0\.\.4294967295/);
  });
});

describe('sendTcpProbes: its bounds', () => {
  const batch = { family: 4 as const, source: '10.0.0.100', sourcePort: 6443, mark: 0xba, packetsPerSecond: 50_000, clients: [] };
  it(`takes at most ${TCP_PROBE_MAX_CLIENTS} clients and a pace of 1,000 to 1,000,000 packets per second (TypeError, nothing sent)`, async () => {
    const many = Array.from({ length: TCP_PROBE_MAX_CLIENTS + 1 }, (_, i) => ({ address: '10.0.0.9', port: 1 + (i % 65535) }));
    await expect(sendTcpProbes({ ...batch, clients: many })).rejects.toThrow(/^batch\.clients must hold at most 20000 clients, got 20001/);
    await expect(sendTcpProbes({ ...batch, packetsPerSecond: 999 })).rejects.toThrow(/^batch\.packetsPerSecond must be from 1000 to 1000000/);
    await expect(sendTcpProbes({ ...batch, clients: [{ address: 'fd00::9', port: 40000 }] })).rejects.toThrow(
      /^batch\.clients\[0\]\.address must be an IPv4 address/,
    );
    await expect(sendTcpProbes({ ...batch, mark: -1 })).rejects.toThrow(/^batch\.mark must be an integer 0\.\.4294967295/);
  });
});

describe('a real exchange, captured in the lab (tcpdump in the client namespace)', () => {
  for (const family of [4, 6] as const) {
    it(`IPv${family}: the probe on the wire is the builder's packet; the client's ACK names the sequence number the RST then carries`, () => {
      const packets = readPcap(fixturePath(`tcp-probe-ipv${family}.pcap`)).map((r) => {
        const ip = parseEthernet(r.data).payload;
        return { raw: ip, ip: family === 4 ? parseIPv4(ip) : parseIPv6(ip) };
      });
      expect(packets).toHaveLength(5);
      const [probe, answer, reset, second, clientReset] = packets.map((p) => ({ ...p, tcp: tcp(p.ip) })) as [
        { raw: Buffer; ip: IpPacket; tcp: ReturnType<typeof tcp> },
        ...{ raw: Buffer; ip: IpPacket; tcp: ReturnType<typeof tcp> }[],
      ];
      // 1. the probe: exactly what the builder makes (IPv4: but for the header checksum, which the kernel fills)
      const built = tcpProbePacket({
        family,
        source: probe.ip.source,
        sourcePort: probe.tcp.sport,
        destination: probe.ip.destination,
        destinationPort: probe.tcp.dport,
        seq: probe.tcp.seq,
        ack: probe.tcp.ack,
      });
      const wire = Buffer.from(probe.raw.subarray(0, built.length));
      if (family === 4) wire.writeUInt16BE(0, 10);
      expect(wire.toString('hex')).toBe(built.toString('hex'));
      expect(probe.tcp).toMatchObject({ sport: 6443, flags: ACK, window: 1024 });
      // 2. the client's answer: a bare ACK from the same flow (RFC 9293 §3.10.7.4)
      expect(answer!.ip.source).toBe(probe.ip.destination);
      expect(answer!.tcp).toMatchObject({ sport: probe.tcp.dport, dport: 6443, flags: ACK });
      // 3. the RST from VIP:6443 (forwarded: one hop less), its seq = the ACK's acknowledgment number
      expect(reset!.ip.source).toBe(probe.ip.source);
      expect(reset!.tcp.flags & RST).toBe(RST);
      expect(reset!.tcp.seq).toBe(answer!.tcp.ack);
      expect(reset!.ip.ttl).toBe(63);
      // 4. the second probe, 2^31 further in both numbers; the client, its socket gone, resets it
      expect((second!.tcp.seq - probe.tcp.seq) >>> 0).toBe(0x80000000);
      expect((second!.tcp.ack - probe.tcp.ack) >>> 0).toBe(0x80000000);
      expect(clientReset!.tcp.flags & RST).toBe(RST);
      expect(clientReset!.tcp.seq).toBe(second!.tcp.ack);
    });
  }
});

describe('probeClients (src/dataplane/probe.ts), with a fake sender', () => {
  it('sends each client once, from the VIP and port, marked for the untracked rule, at the pace, in batches of at most 20,000', async () => {
    const batches: TcpProbeBatch[] = [];
    const send = (b: TcpProbeBatch): Promise<TcpProbeResult> => {
      batches.push(b);
      return Promise.resolve({ sent: 2 * b.clients.length, failed: 0 });
    };
    const clients = Array.from({ length: 25_000 }, (_, i) => ({ address: `10.0.${i >> 8}.${i & 255}`, port: 40000 + (i % 20) }));
    const r = await probeClients('10.0.0.100', 6443, [...clients, clients[0]!, clients[1]!], { send });
    expect(r).toMatchObject({ clients: 25_000, sent: 50_000, failed: 0, error: null });
    expect(batches.map((b) => b.clients.length)).toStrictEqual([20_000, 5_000]);
    expect(batches[0]).toMatchObject({ family: 4, source: '10.0.0.100', sourcePort: 6443, mark: PROBE_MARK, packetsPerSecond: PROBE_PACKETS_PER_SECOND });
    // IPv6: canonical text (RFC 5952), one client per address and port
    batches.length = 0;
    await probeClients(
      'FD00:0::100',
      6443,
      [
        { address: 'fd00:0:0::9', port: 40000 },
        { address: 'fd00::9', port: 40000 },
      ],
      { send },
    );
    expect(batches[0]).toMatchObject({ family: 6, source: 'fd00::100', clients: [{ address: 'fd00::9', port: 40000 }] });
  });

  it('reports the refusals and the first error; a bad VIP, port or client is a TypeError and nothing is sent', async () => {
    let calls = 0;
    const refused = (b: TcpProbeBatch): Promise<TcpProbeResult> => {
      calls++;
      const error = Object.assign(
        new Error('sendmmsg failed on a raw IPv4 socket: EPERM (Operation not permitted); an output rule (nftables, iptables) dropped the probe'),
        {
          code: 'EPERM',
          errno: 1,
          syscall: 'sendmmsg',
        },
      );
      return Promise.resolve({ sent: 0, failed: 2 * b.clients.length, error });
    };
    const r = await probeClients('10.0.0.100', 6443, [{ address: '10.0.0.9', port: 40000 }], { send: refused });
    expect(r).toMatchObject({ clients: 1, sent: 0, failed: 2, error: expect.stringMatching(/^sendmmsg failed on a raw IPv4 socket: EPERM/) });
    await expect(probeClients('10.0.0.100', 6443, [{ address: 'fd00::9', port: 40000 }], { send: refused })).rejects.toThrow(
      /^clients\[0\]\.address: "fd00::9" is not an IPv4 address like the VIP/,
    );
    await expect(probeClients('not-a-vip', 6443, [], { send: refused })).rejects.toThrow(/^vip: not an IP address/);
    await expect(probeClients('10.0.0.100', 0, [], { send: refused })).rejects.toThrow(/^port must be an integer from 1 to 65535/);
    expect(calls).toBe(1);
  });
});
