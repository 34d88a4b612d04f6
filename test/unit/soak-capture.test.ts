/**
 * lab/soak/capture.ts on hand-built pcap files: the file format (both byte orders, µs and ns
 * timestamps, a truncated last record, foreign records skipped) and the fate of each stalled
 * handshake (sent again, or unanswered for 500 ms: lost at the holder, at the backend, a challenge
 * ACK, a reply not forwarded), and the report's summary of them.
 */
import { describe, expect, it } from 'vitest';
import { pcapSegments, readPcap, stalledHandshakes, type TcpSegment } from '../../lab/soak/capture.js';
import { captureSummary } from '../../lab/soak/report.js';
import type { Violation } from '../../lab/soak/invariants.js';

const MAC = { client: '02:78:78:00:00:50', n1: '02:78:78:00:00:11', n2: '02:78:78:00:00:12', n3: '02:78:78:00:00:13' } as const;
const IP = { client: '10.78.120.50', vip: '10.78.120.100', n1: '10.78.120.11', n2: '10.78.120.12', n3: '10.78.120.13' } as const;
const names = {
  byMac: { [MAC.n1]: 'n1', [MAC.n2]: 'n2', [MAC.n3]: 'n3' },
  byAddress: { [IP.n1]: 'n1', [IP.n2]: 'n2', [IP.n3]: 'n3', [IP.vip]: 'VIP', [IP.client]: 'client' },
};
const S = 0x02;
const A = 0x10;
const R = 0x04;
const SA = S | A;

interface Seg {
  t: number;
  srcMac: string;
  dstMac: string;
  src: string;
  sport: number;
  dst: string;
  dport: number;
  flags: number;
  seq?: number;
  ack?: number;
}

const macBytes = (m: string): number[] => m.split(':').map((x) => parseInt(x, 16));
const ipBytes = (a: string): number[] => a.split('.').map(Number);

/** One Ethernet + IPv4 + TCP frame (20-byte headers, no payload). */
function frame(s: Seg): Buffer {
  const b = Buffer.alloc(54);
  Buffer.from([...macBytes(s.dstMac), ...macBytes(s.srcMac)]).copy(b, 0);
  b.writeUInt16BE(0x0800, 12);
  b[14] = 0x45;
  b.writeUInt16BE(40, 16);
  b[22] = 64;
  b[23] = 6;
  Buffer.from(ipBytes(s.src)).copy(b, 26);
  Buffer.from(ipBytes(s.dst)).copy(b, 30);
  b.writeUInt16BE(s.sport, 34);
  b.writeUInt16BE(s.dport, 36);
  b.writeUInt32BE(s.seq ?? 1000, 38);
  b.writeUInt32BE(s.ack ?? 0, 42);
  b[46] = 0x50;
  b[47] = s.flags;
  return b;
}

/** A classic pcap file of `segs` (t in ms since the epoch). */
function pcap(segs: Seg[], o: { bigEndian?: boolean; nano?: boolean; link?: number } = {}): Buffer {
  const w32 = (b: Buffer, v: number, at: number): number => (o.bigEndian ? b.writeUInt32BE(v, at) : b.writeUInt32LE(v, at));
  const w16 = (b: Buffer, v: number, at: number): number => (o.bigEndian ? b.writeUInt16BE(v, at) : b.writeUInt16LE(v, at));
  const gh = Buffer.alloc(24);
  w32(gh, o.nano ? 0xa1b23c4d : 0xa1b2c3d4, 0);
  w16(gh, 2, 4);
  w16(gh, 4, 6);
  w32(gh, 96, 16);
  w32(gh, o.link ?? 1, 20);
  const recs = segs.map((s) => {
    const f = frame(s);
    const h = Buffer.alloc(16);
    const sec = Math.floor(s.t / 1000);
    w32(h, sec, 0);
    w32(h, Math.round((s.t - sec * 1000) * (o.nano ? 1e6 : 1e3)), 4);
    w32(h, f.length, 8);
    w32(h, f.length, 12);
    return Buffer.concat([h, f]);
  });
  return Buffer.concat([gh, ...recs]);
}

const T0 = 1_796_237_300_000;
/** client → VIP (at n1's MAC) */
const c2v = (t: number, sport: number, flags: number, seq = 7): Seg => ({
  t: T0 + t,
  srcMac: MAC.client,
  dstMac: MAC.n1,
  src: IP.client,
  sport,
  dst: IP.vip,
  dport: 6443,
  flags,
  seq,
});
/** VIP → client; a SYN-ACK acknowledges c2v's default sequence number */
const v2c = (t: number, dport: number, flags: number, seq = 7): Seg => ({
  t: T0 + t,
  srcMac: MAC.n1,
  dstMac: MAC.client,
  src: IP.vip,
  sport: 6443,
  dst: IP.client,
  dport,
  flags,
  ack: seq + 1,
});
const leg = (t: number, to: 'n2' | 'n3', sport: number, flags: number): Seg => ({
  t: T0 + t,
  srcMac: MAC.n1,
  dstMac: MAC[to],
  src: IP.n1,
  sport,
  dst: IP[to],
  dport: 6443,
  flags,
});
const back = (t: number, from: 'n2' | 'n3', dport: number, flags: number): Seg => ({
  t: T0 + t,
  srcMac: MAC[from],
  dstMac: MAC.n1,
  src: IP[from],
  sport: 6443,
  dst: IP.n1,
  dport,
  flags,
  ack: 8,
});

describe('pcapSegments', () => {
  const segs = [c2v(0.25, 40000, S), v2c(0.5, 40000, SA)];

  it('reads both byte orders and both timestamp resolutions to the same segments', () => {
    const le = readPcap(pcap(segs));
    expect(le).toHaveLength(2);
    expect(le[0]).toStrictEqual<TcpSegment>({
      t: T0 + 0.25,
      srcMac: MAC.client,
      dstMac: MAC.n1,
      src: IP.client,
      sport: 40000,
      dst: IP.vip,
      dport: 6443,
      flags: S,
      seq: 7,
      ack: 0,
    });
    expect(le[1]).toMatchObject({ src: IP.vip, sport: 6443, dst: IP.client, dport: 40000, flags: SA, ack: 8 });
    for (const o of [{ bigEndian: true }, { nano: true }, { bigEndian: true, nano: true }]) {
      const other = readPcap(pcap(segs, o));
      expect(other.map((s) => ({ ...s, t: Math.round(s.t * 1000) }))).toStrictEqual(le.map((s) => ({ ...s, t: Math.round(s.t * 1000) })));
    }
  });

  it('skips a truncated last record and non-TCP frames; refuses what is not an Ethernet pcap', () => {
    const full = pcap(segs);
    expect(readPcap(full.subarray(0, full.length - 10))).toHaveLength(1);
    const udp = pcap(segs);
    udp[24 + 16 + 23] = 17; // the first frame's IP protocol: UDP
    expect(readPcap(udp)).toHaveLength(1);
    expect(() => readPcap(Buffer.from('not a capture, just text here'))).toThrow(/not a pcap file: magic/);
    expect(() => readPcap(Buffer.alloc(10))).toThrow('not a pcap file: 10 bytes');
    expect(() => [...pcapSegments(pcap(segs, { link: 113 }))]).toThrow('pcap link type 113, expected 1 (Ethernet)');
  });
});

describe('stalledHandshakes', () => {
  const fates = (segs: Seg[]): ReturnType<typeof stalledHandshakes> => {
    const buf = pcap(segs);
    return stalledHandshakes(() => pcapSegments(buf), { vip: IP.vip, port: 6443, names });
  };

  it('a handshake answered the first time is not reported; one sent again after 1 s is, with where it was lost', () => {
    const r = fates([
      // answered at once
      c2v(0, 40000, S),
      leg(0.1, 'n2', 40000, S),
      back(0.2, 'n2', 40000, SA),
      v2c(0.3, 40000, SA),
      c2v(0.4, 40000, A),
      // 1: nothing behind the VIP answered (dropped at the holder, or its own apiserver silent)
      c2v(10, 40010, S),
      c2v(1010, 40010, S),
      v2c(1010.2, 40010, SA),
      // 2: the backend leg went out, the backend never answered
      c2v(20, 40020, S),
      leg(20.1, 'n3', 40020, S),
      c2v(1020, 40020, S),
      // 3: the backend holds an old socket on that 4-tuple: a bare ACK, the client resets
      c2v(30, 40030, S),
      leg(30.1, 'n2', 40030, S),
      back(30.2, 'n2', 40030, A),
      v2c(30.3, 40030, A),
      c2v(30.4, 40030, R),
      c2v(1030, 40030, S),
      // 4: the backend's SYN-ACK reached the holder and stopped there
      c2v(40, 40040, S),
      leg(40.1, 'n3', 40040, S),
      back(40.2, 'n3', 40040, SA),
      c2v(1040, 40040, S),
      // 5: the VIP refused it
      c2v(50, 40050, S),
      v2c(50.1, 40050, R | A),
      c2v(1050, 40050, S),
    ]);
    expect(r.map((x) => [x.t - T0, x.client, x.holder, x.backend, x.fate, x.retransmitAfterMs])).toStrictEqual([
      [10, `${IP.client}:40010`, 'n1', null, 'unanswered at the holder', 1000],
      [20, `${IP.client}:40020`, 'n1', 'n3', 'backend silent', 1000],
      [30, `${IP.client}:40030`, 'n1', 'n2', 'challenge ACK', 1000],
      [40, `${IP.client}:40040`, 'n1', 'n3', 'reply not forwarded', 1000],
      [50, `${IP.client}:40050`, 'n1', null, 'refused at the holder', 1000],
    ]);
    expect(r[2]!.trace).toStrictEqual([
      '+0.0 ms client:40030 > VIP:6443 S',
      '+0.1 ms n1:40030 > n2:6443 S',
      '+0.2 ms n2:6443 > n1:40030 A',
      '+0.3 ms VIP:6443 > client:40030 A',
      '+0.4 ms client:40030 > VIP:6443 R',
    ]);
  });

  it("another node's connection on the same port is not the holder's leg; a quick retransmit (< 500 ms) is not counted", () => {
    const r = fates([
      c2v(0, 40100, S),
      // n3's own health check of n1 happens to use port 40100 too
      { t: T0 + 0.1, srcMac: MAC.n3, dstMac: MAC.n1, src: IP.n3, sport: 40100, dst: IP.n1, dport: 6443, flags: S },
      c2v(1000, 40100, S),
      c2v(2000, 40200, S),
      c2v(2200, 40200, S),
      v2c(2201, 40200, SA),
    ]);
    expect(r.map((x) => [x.client, x.backend, x.fate])).toStrictEqual([[`${IP.client}:40100`, null, 'unanswered at the holder']]);
  });

  it('a handshake the client gave up on before a retransmission is reported too; a SYN-ACK for another sequence number is not its answer', () => {
    const r = fates([
      // the backend leg went out, no answer, the client gave up at 1 s: no second SYN
      c2v(0, 40300, S),
      leg(0.1, 'n2', 40300, S),
      leg(999, 'n2', 40300, S),
      // answered, but 700 ms late
      c2v(100, 40310, S),
      leg(100.1, 'n3', 40310, S),
      back(800, 'n3', 40310, SA),
      v2c(800.1, 40310, SA),
      c2v(800.2, 40310, A),
      // answered at once, but the SYN-ACK acknowledges an older SYN (sequence number 3): no answer to this one
      c2v(200, 40320, S),
      v2c(200.2, 40320, SA, 3),
      // answered in 450 ms: in time
      c2v(300, 40330, S),
      v2c(750, 40330, SA),
      c2v(750.2, 40330, A),
      // the last SYN, 400 ms before the capture ends: not judged
      c2v(1200, 40340, S),
      c2v(1600, 40399, A),
    ]);
    expect(r.map((x) => [x.t - T0, x.backend, x.fate, x.retransmitAfterMs])).toStrictEqual([
      [0, 'n2', 'backend silent', null],
      [100, 'n3', 'answered', null],
      [200, null, 'unanswered at the holder', null],
    ]);
    // the window is the request timeout (1000 ms here): n1's own retransmission to n2 is in the trace
    expect(r[0]!.trace).toStrictEqual(['+0.0 ms client:40300 > VIP:6443 S', '+0.1 ms n1:40300 > n2:6443 S', '+999.0 ms n1:40300 > n2:6443 S']);
  });
});

describe('captureSummary', () => {
  it('counts by fate and lists the SYNs first sent from T + 100 ms before a VIP violation to 100 ms after it', () => {
    const syn = (t: number, fate: 'backend silent' | 'challenge ACK') => ({
      t,
      client: 'c',
      holder: 'n1',
      backend: 'n2',
      fate,
      retransmitAfterMs: t > 50_000 ? null : 1000,
      trace: [],
    });
    const syns = [syn(1000, 'backend silent'), syn(49_000, 'challenge ACK'), syn(50_500, 'backend silent'), syn(51_200, 'challenge ACK')];
    const v = (invariant: Violation['invariant'], t: number, what: string): Violation => ({ invariant, t, untilMs: t + 1000, what, active: [], count: 1 });
    const violations = [
      v('b', 50_000, "VIP request failed (timeout) outside every fault's bound"),
      v('b', 1000, "watch 3 dropped outside every fault's bound"),
      v('a', 1000, 'two holders'),
    ];
    const s = captureSummary('soak-capture.pcap', syns, violations, 1000);
    expect(s).toStrictEqual({
      file: 'soak-capture.pcap',
      stalled: 4,
      byFate: { 'backend silent': 2, 'challenge ACK': 2 },
      list: syns.map(({ trace: _, ...rest }) => rest),
      nearViolations: [{ violation: 0, syns: [syns[1], syns[2]] }],
    });
  });
});
