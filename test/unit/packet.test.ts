import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { internetChecksum } from '../../src/net/checksum.js';
import {
  decodeAdvertisement,
  encodeAdvertisement,
  MAX_ADVER_INT_CS,
  VRRP_MULTICAST_V4,
  VRRP_MULTICAST_V6,
  VRRP_PROTOCOL,
  vrrpChecksum,
  type Advertisement,
  type ChecksumMode,
  type DecodeResult,
  type DropReason,
  type ReceiveContext,
} from '../../src/vrrp/packet.js';
import { fixturePath, ipOfFrame, readPcap, type IpPacket } from '../support/pcap.js';
import { prng } from '../support/prng.js';

// ---------------------------------------------------------------------------------------------
// an independent checksum, to check the codec's against: it sums the words with BigInt and reduces
// with the identity "one's complement sum == ordinary sum mod 0xffff (with 0 written 0xffff)",
// instead of folding carries like the code under test does
function refChecksum(...parts: (Uint8Array | number[])[]): number {
  const bytes = parts.flatMap((p) => Array.from(p));
  if (bytes.length % 2 === 1) bytes.push(0);
  let total = 0n;
  for (let i = 0; i < bytes.length; i += 2) total += BigInt(bytes[i]! * 256 + bytes[i + 1]!);
  const ones = total === 0n ? 0 : Number(((total - 1n) % 0xffffn) + 1n);
  return 0xffff - ones;
}

function v4(text: string): number[] {
  return text.split('.').map(Number);
}

function v6(text: string): number[] {
  // full form only (eight groups) or with one '::'; enough for the literals in this file
  const [head = '', tail] = text.split('::');
  const h = head === '' ? [] : head.split(':');
  const t = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return groups.flatMap((g) => [parseInt(g, 16) >> 8, parseInt(g, 16) & 0xff]);
}

/** The IPv4 pseudo-header (RFC 5798 reading), built by hand. */
function pseudo4(src: string, dst: string, length: number): number[] {
  return [...v4(src), ...v4(dst), 0, 112, length >> 8, length & 0xff];
}

/** The RFC 8200 §8.1 pseudo-header, built by hand. */
function pseudo6(src: string, dst: string, length: number): number[] {
  return [...v6(src), ...v6(dst), 0, 0, length >> 8, length & 0xff, 0, 0, 0, 112];
}

/** Copy of `msg` with its checksum recomputed by the reference function. */
function resum(msg: Buffer, family: 4 | 6, mode: ChecksumMode, src: string, dst: string): Buffer {
  const out = Buffer.from(msg);
  out.writeUInt16BE(0, 6);
  const ph = family === 6 ? pseudo6(src, dst, out.length) : mode === 'rfc5798' ? pseudo4(src, dst, out.length) : [];
  out.writeUInt16BE(refChecksum(ph, out), 6);
  return out;
}

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

function expectDrop(result: DecodeResult, reason: DropReason): void {
  if (result.ok) throw new Error(`expected a drop for '${reason}', got ok: ${JSON.stringify(result)}`);
  expect(result.reason).toBe(reason);
  expect(result.detail.length).toBeGreaterThan(0);
}

function expectOk(result: DecodeResult): Extract<DecodeResult, { ok: true }> {
  if (!result.ok) throw new Error(`expected ok, got ${result.reason}: ${result.detail}`);
  return result;
}

// ---------------------------------------------------------------------------------------------
// the keepalived captures

interface Captured {
  frame: number;
  ip: IpPacket;
  /** What tshark said about this frame's VRRP part (the .txt beside the capture). */
  tshark: { version: number; vrid: number; priority: number; count: number; interval: number; checksum: number; addresses: string[] };
}

/** Parses the `tshark -V` text beside a capture: the VRRP fields of each frame. */
function tsharkVrrp(txtName: string): Map<number, Captured['tshark']> {
  const out = new Map<number, Captured['tshark']>();
  for (const block of readFileSync(fixturePath(txtName), 'utf8').split(/^(?=Frame \d+:)/m)) {
    const frame = /^Frame (\d+):/.exec(block);
    const vrrp = block.split('Virtual Router Redundancy Protocol')[1];
    if (!frame || vrrp === undefined) continue;
    const field = (re: RegExp): number => {
      const m = re.exec(vrrp);
      if (!m) throw new Error(`${txtName} frame ${frame[1]}: no ${re.source}`);
      return Number(m[1]);
    };
    out.set(Number(frame[1]), {
      version: field(/VRRP protocol version: (\d+)/),
      vrid: field(/Virtual Rtr ID: (\d+)/),
      priority: field(/Priority: (\d+)/),
      count: field(/Addr Count: (\d+)/),
      interval: field(/Adver Int: (\d+)/),
      checksum: parseInt(/Checksum: 0x([0-9a-f]{4})/.exec(vrrp)?.[1] ?? 'x', 16),
      addresses: [...vrrp.matchAll(/^\s+IP(?:v6)? Address: (\S+)$/gm)].map((m) => m[1]!),
    });
  }
  return out;
}

function captured(pcapName: string): Captured[] {
  const tshark = tsharkVrrp(pcapName.replace(/\.pcap$/, '.txt'));
  return readPcap(fixturePath(pcapName)).map((rec, i) => {
    const ip = ipOfFrame(rec.data);
    if (ip.protocol !== VRRP_PROTOCOL) throw new Error(`${pcapName}: frame ${i + 1} is protocol ${ip.protocol}`);
    const t = tshark.get(i + 1);
    if (!t) throw new Error(`${pcapName}: frame ${i + 1} missing from the .txt`);
    return { frame: i + 1, ip, tshark: t };
  });
}

function ctxOf(ip: IpPacket): ReceiveContext {
  return { family: ip.family, source: ip.source, destination: ip.destination, ttl: ip.ttl, checkTtl: true };
}

const V3_CAPTURES = [
  { file: 'keepalived-vrrp3-ipv4.pcap', family: 4, interval: 100, vip: '10.77.0.100', frames: 15 },
  { file: 'keepalived-vrrp3-ipv4-adv10cs.pcap', family: 4, interval: 10, vip: '10.77.0.100', frames: 33 },
  { file: 'keepalived-vrrp3-ipv6.pcap', family: 6, interval: 100, vip: 'fd77::100', frames: 15 },
] as const;

describe('keepalived 2.2.7 captures', () => {
  describe.each(V3_CAPTURES)('$file', ({ file, family, interval, vip, frames }) => {
    const packets = captured(file);

    it(`holds ${frames} VRRPv3 adverts, as the .txt says`, () => {
      expect(packets).toHaveLength(frames);
      for (const p of packets) expect(p.tshark.version).toBe(3);
    });

    it('every advert decodes with the values tshark shows', () => {
      for (const p of packets) {
        const r = expectOk(decodeAdvertisement(p.ip.payload, ctxOf(p.ip), 51));
        expect(p.ip.ttl).toBe(255);
        expect(r.advert).toEqual({
          vrid: p.tshark.vrid,
          priority: p.tshark.priority,
          maxAdvertIntervalCs: p.tshark.interval,
          addresses: p.tshark.addresses,
        });
        expect(r.advert.vrid).toBe(51);
        expect(r.advert.maxAdvertIntervalCs).toBe(interval);
        expect(r.advert.addresses).toEqual([vip]);
        expect(p.ip.payload.readUInt16BE(6)).toBe(p.tshark.checksum);
      }
    });

    it('priorities: 150 / 100 / 50 per node, each node ending with a priority-0 resign', () => {
      const bySource = new Map<string, number[]>();
      for (const p of packets) {
        const r = expectOk(decodeAdvertisement(p.ip.payload, ctxOf(p.ip)));
        bySource.set(p.ip.source, [...(bySource.get(p.ip.source) ?? []), r.advert.priority]);
      }
      const bases = [...bySource.values()].map((prios) => {
        expect(prios.at(-1)).toBe(0);
        const base = prios[0]!;
        expect(prios.slice(0, -1).every((x) => x === base)).toBe(true);
        return base;
      });
      expect(bases).toEqual([150, 100, 50]);
    });

    it(`the checksum convention detected is ${family === 4 ? "'rfc5798' (IPv4 pseudo-header, keepalived's default)" : 'the IPv6 pseudo-header'}`, () => {
      for (const p of packets) {
        const r = expectOk(decodeAdvertisement(p.ip.payload, ctxOf(p.ip)));
        expect(r.checksum).toBe(family === 4 ? 'rfc5798' : 'rfc9568');
        // and independently: the captured checksum is the pseudo-header sum, not the message-only one
        const zeroed = Buffer.from(p.ip.payload);
        zeroed.writeUInt16BE(0, 6);
        const ph = family === 4 ? pseudo4(p.ip.source, p.ip.destination, zeroed.length) : pseudo6(p.ip.source, p.ip.destination, zeroed.length);
        expect(refChecksum(ph, zeroed)).toBe(p.tshark.checksum);
        if (family === 4) expect(refChecksum(zeroed)).not.toBe(p.tshark.checksum);
      }
    });

    it('re-encoding the decoded advert with the same source / destination gives the captured bytes', () => {
      for (const p of packets) {
        const r = expectOk(decodeAdvertisement(p.ip.payload, ctxOf(p.ip)));
        const again = encodeAdvertisement(r.advert, {
          family,
          checksum: r.checksum,
          source: p.ip.source,
          destination: p.ip.destination,
        });
        expect(again.toString('hex')).toBe(p.ip.payload.toString('hex'));
      }
    });
  });

  it('the VRRPv2 capture decodes as reason vrrpv2, every frame', () => {
    const packets = captured('keepalived-vrrp2-ipv4.pcap');
    expect(packets).toHaveLength(11);
    for (const p of packets) {
      expect(p.tshark.version).toBe(2);
      const r = decodeAdvertisement(p.ip.payload, ctxOf(p.ip), 51);
      expectDrop(r, 'vrrpv2');
      if (!r.ok) expect(r.detail).toContain(`VRID 51, priority ${p.tshark.priority}`);
    }
  });

  it('the first IPv4 advert, literally', () => {
    const [first] = captured('keepalived-vrrp3-ipv4.pcap');
    expect(first!.ip.payload.toString('hex')).toBe('31339601006442cf0a4d0064');
    expect(first!.ip.source).toBe('10.77.0.11');
    expect(first!.ip.destination).toBe(VRRP_MULTICAST_V4);
  });
});

// ---------------------------------------------------------------------------------------------
// hand-built vectors

describe('literal vectors', () => {
  const SRC4 = '10.77.0.11';
  const ADV: Advertisement = { vrid: 51, priority: 150, maxAdvertIntervalCs: 100, addresses: ['10.77.0.100'] };

  it('IPv4, rfc9568 convention: checksum over the message only', () => {
    // 0x3133 + 0x9601 + 0x0064 + 0x0a4d + 0x0064 = 0xd249, complement 0x2db6
    const want = hex('31 33 96 01 00 64 2d b6 0a 4d 00 64');
    expect(refChecksum([0x31, 0x33, 0x96, 0x01, 0x00, 0x64, 0, 0, 0x0a, 0x4d, 0x00, 0x64])).toBe(0x2db6);
    const got = encodeAdvertisement(ADV, { family: 4, checksum: 'rfc9568', source: SRC4, destination: VRRP_MULTICAST_V4 });
    expect(got.toString('hex')).toBe(want.toString('hex'));
    const r = expectOk(decodeAdvertisement(want, { family: 4, source: SRC4, destination: VRRP_MULTICAST_V4, ttl: 255, checkTtl: true }));
    expect(r.checksum).toBe('rfc9568');
    expect(r.advert).toEqual(ADV);
  });

  it('IPv4 rfc9568 does not depend on the addresses around it; rfc5798 does', () => {
    const a = encodeAdvertisement(ADV, { family: 4, checksum: 'rfc9568', source: '10.0.0.1', destination: '10.0.0.2' });
    const b = encodeAdvertisement(ADV, { family: 4, checksum: 'rfc9568', source: '10.9.9.9', destination: VRRP_MULTICAST_V4 });
    expect(a.equals(b)).toBe(true);
    const c = encodeAdvertisement(ADV, { family: 4, checksum: 'rfc5798', source: '10.0.0.1', destination: '10.0.0.2' });
    const d = encodeAdvertisement(ADV, { family: 4, checksum: 'rfc5798', source: '10.0.0.1', destination: VRRP_MULTICAST_V4 });
    expect(c.readUInt16BE(6)).not.toBe(d.readUInt16BE(6));
    expect(c.readUInt16BE(6)).toBe(refChecksum(pseudo4('10.0.0.1', '10.0.0.2', 12), Buffer.from(c).fill(0, 6, 8)));
  });

  it('IPv4, three addresses, both conventions', () => {
    const adv: Advertisement = { vrid: 1, priority: 100, maxAdvertIntervalCs: 100, addresses: ['192.0.2.1', '192.0.2.2', '198.51.100.7'] };
    const body = '31 01 64 03 00 64 ____ c0 00 02 01 c0 00 02 02 c6 33 64 07';
    const plain = hex(body.replace('____', 'bc57'));
    const withPseudo = hex(body.replace('____', '37bd'));
    // the literals' checksums, recomputed independently
    expect(resum(plain, 4, 'rfc9568', '', '').equals(plain)).toBe(true);
    expect(resum(withPseudo, 4, 'rfc5798', '192.0.2.10', '192.0.2.11').equals(withPseudo)).toBe(true);

    const opts = { family: 4, source: '192.0.2.10', destination: '192.0.2.11' } as const;
    expect(encodeAdvertisement(adv, { ...opts, checksum: 'rfc9568' }).equals(plain)).toBe(true);
    expect(encodeAdvertisement(adv, { ...opts, checksum: 'rfc5798' }).equals(withPseudo)).toBe(true);
    const ctx: ReceiveContext = { ...opts, ttl: 7, checkTtl: false }; // unicast: TTL not checked
    expect(decodeAdvertisement(plain, ctx)).toEqual({ ok: true, advert: adv, checksum: 'rfc9568' });
    expect(decodeAdvertisement(withPseudo, ctx)).toEqual({ ok: true, advert: adv, checksum: 'rfc5798' });
  });

  it('IPv6, one address: the keepalived advert rebuilt from scratch', () => {
    const want = hex('31 33 96 01 00 64 3c 49  fd 77 00 00 00 00 00 00 00 00 00 00 00 00 01 00');
    expect(resum(want, 6, 'rfc9568', 'fe80::77:ff:fe00:11', 'ff02::12').equals(want)).toBe(true);
    const adv: Advertisement = { vrid: 51, priority: 150, maxAdvertIntervalCs: 100, addresses: ['fd77::100'] };
    for (const checksum of ['rfc9568', 'rfc5798'] as const) {
      // the mode means nothing for IPv6
      const got = encodeAdvertisement(adv, { family: 6, checksum, source: 'fe80::77:ff:fe00:11', destination: VRRP_MULTICAST_V6 });
      expect(got.equals(want)).toBe(true);
    }
  });

  it('IPv6, three addresses (link-local first, as RFC 9568 §5.2.9 wants)', () => {
    const want = hex(
      '31 07 c8 03 00 32 ae 7a' +
        'fe80 0000 0000 0000 0000 0000 0000 0007' +
        '2001 0db8 0000 0000 0000 0000 0000 0007' +
        '2001 0db8 0000 0001 0000 0000 0000 0007',
    );
    expect(resum(want, 6, 'rfc9568', 'fe80::1', 'ff02::12').equals(want)).toBe(true);
    const adv: Advertisement = { vrid: 7, priority: 200, maxAdvertIntervalCs: 50, addresses: ['fe80::7', '2001:db8::7', '2001:db8:0:1::7'] };
    expect(encodeAdvertisement(adv, { family: 6, checksum: 'rfc9568', source: 'fe80::1', destination: 'ff02::12' }).equals(want)).toBe(true);
    const ctx: ReceiveContext = { family: 6, source: 'fe80::1%eth0', destination: 'ff02::12', ttl: 255, checkTtl: true };
    expect(decodeAdvertisement(want, ctx, 7)).toEqual({ ok: true, advert: adv, checksum: 'rfc9568' });
  });

  it('decoded IPv6 addresses are RFC 5952 text, whatever the input spelling', () => {
    const msg = encodeAdvertisement(
      { vrid: 9, priority: 100, maxAdvertIntervalCs: 100, addresses: ['FE80:0:0:0:0:0:0:0009', '2001:DB8:0:0:1:0:0:1'] },
      { family: 6, checksum: 'rfc9568', source: 'fe80::1', destination: 'ff02::12' },
    );
    const r = expectOk(decodeAdvertisement(msg, { family: 6, source: 'fe80::1', destination: 'ff02::12', ttl: 255, checkTtl: true }));
    expect(r.advert.addresses).toEqual(['fe80::9', '2001:db8::1:0:0:1']);
  });

  it('the largest interval, the extremes of priority and VRID', () => {
    for (const [vrid, priority, interval] of [
      [1, 0, 1],
      [255, 255, MAX_ADVER_INT_CS],
      [128, 1, 2048],
    ] as const) {
      const adv = { vrid, priority, maxAdvertIntervalCs: interval, addresses: ['10.0.0.1'] };
      const msg = encodeAdvertisement(adv, { family: 4, checksum: 'rfc9568', source: '10.0.0.2', destination: VRRP_MULTICAST_V4 });
      expect(msg[4]! >> 4).toBe(0); // rsvd
      expect(expectOk(decodeAdvertisement(msg, { family: 4, source: '10.0.0.2', destination: VRRP_MULTICAST_V4, ttl: 255, checkTtl: true })).advert).toEqual(
        adv,
      );
    }
  });

  it('internetChecksum agrees with the reference across odd part boundaries', () => {
    const parts = [[0x12], [0x34, 0x56], [], [0x78, 0x9a, 0xbc], [0xde]].map((p) => Uint8Array.from(p));
    expect(internetChecksum(...parts)).toBe(refChecksum(...parts));
    expect(internetChecksum(Uint8Array.from([0xff, 0xff]))).toBe(0);
    expect(internetChecksum()).toBe(0xffff);
    const big = Buffer.alloc(70_000, 0xff); // longer than any IP packet: the sum must stay exact
    expect(internetChecksum(big)).toBe(refChecksum(big));
  });

  it('vrrpChecksum ignores what is in the checksum field', () => {
    const msg = hex('31339601006442cf0a4d0064');
    expect(vrrpChecksum(msg, 4, 'rfc5798', '10.77.0.11', '224.0.0.18')).toBe(0x42cf);
    expect(vrrpChecksum(msg, 4, 'rfc9568', '10.77.0.11', '224.0.0.18')).toBe(0x2db6);
    expect(msg.toString('hex')).toBe('31339601006442cf0a4d0064'); // not modified
    expect(() => vrrpChecksum(msg.subarray(0, 7), 4, 'rfc9568', '', '')).toThrow(RangeError);
  });
});

// ---------------------------------------------------------------------------------------------
// every drop reason from a minimal change to a valid packet

describe('receive checks (RFC 9568 §7.1)', () => {
  const VALID = hex('31339601006442cf0a4d0064'); // keepalived's first advert, rfc5798 checksum
  const SRC = '10.77.0.11';
  const DST = VRRP_MULTICAST_V4;
  const CTX: ReceiveContext = { family: 4, source: SRC, destination: DST, ttl: 255, checkTtl: true };
  const edit = (f: (b: Buffer) => void, fix = true): Buffer => {
    const b = Buffer.from(VALID);
    f(b);
    return fix ? resum(b, 4, 'rfc5798', SRC, DST) : b;
  };

  it('the unmodified packet is accepted', () => {
    expectOk(decodeAdvertisement(VALID, CTX, 51));
  });

  it('ttl: 254 with checkTtl is dropped; without checkTtl (unicast) it is accepted', () => {
    expectDrop(decodeAdvertisement(VALID, { ...CTX, ttl: 254 }), 'ttl');
    expectDrop(decodeAdvertisement(VALID, { ...CTX, ttl: 0 }), 'ttl');
    expectOk(decodeAdvertisement(VALID, { ...CTX, ttl: 254, checkTtl: false }));
    const six = hex('3133960100643c49fd770000000000000000000000000100');
    const ctx6: ReceiveContext = { family: 6, source: 'fe80::77:ff:fe00:11', destination: 'ff02::12', ttl: 64, checkTtl: true };
    const r = decodeAdvertisement(six, ctx6);
    expectDrop(r, 'ttl');
    if (!r.ok) expect(r.detail).toContain('hop limit 64');
    expectOk(decodeAdvertisement(six, { ...ctx6, checkTtl: false }));
  });

  it('ttl is checked first, before anything in the payload', () => {
    expectDrop(decodeAdvertisement(Buffer.alloc(0), { ...CTX, ttl: 1 }), 'ttl');
  });

  it('length: truncated, padded, empty, and every length under the header', () => {
    expectDrop(decodeAdvertisement(VALID.subarray(0, 11), CTX), 'length');
    expectDrop(decodeAdvertisement(VALID.subarray(0, 8), CTX), 'length');
    expectDrop(decodeAdvertisement(Buffer.concat([VALID, Buffer.alloc(1)]), CTX), 'length');
    expectDrop(decodeAdvertisement(Buffer.concat([VALID, Buffer.alloc(4)]), CTX), 'length');
    expectDrop(decodeAdvertisement(Buffer.alloc(0), CTX), 'length');
    for (let n = 1; n < 8; n++) expectDrop(decodeAdvertisement(VALID.subarray(0, n), CTX), 'length');
    // a count that claims more addresses than are there
    expectDrop(
      decodeAdvertisement(
        edit((b) => (b[3] = 2)),
        CTX,
      ),
      'length',
    );
    // an IPv4-sized packet read as IPv6 is too short for its one address
    expectDrop(decodeAdvertisement(VALID, { ...CTX, family: 6, source: 'fe80::1', destination: 'ff02::12' }), 'length');
  });

  it('version: 2 is vrrpv2, anything else but 3 is version', () => {
    expectDrop(
      decodeAdvertisement(
        edit((b) => (b[0] = 0x21)),
        CTX,
      ),
      'vrrpv2',
    );
    for (const v of [0, 1, 4, 15])
      expectDrop(
        decodeAdvertisement(
          edit((b) => (b[0] = (v << 4) | 1)),
          CTX,
        ),
        'version',
      );
  });

  it('type: anything but 1', () => {
    for (const t of [0, 2, 15])
      expectDrop(
        decodeAdvertisement(
          edit((b) => (b[0] = 0x30 | t)),
          CTX,
        ),
        'type',
      );
  });

  it('checksum: one flipped byte anywhere fails under both conventions', () => {
    for (let i = 0; i < VALID.length; i++) {
      const b = edit((x) => (x[i] = x[i]! ^ 0x01), false);
      if (i === 0) continue; // flips the type to 0: reported as 'type', before the checksum
      if (i === 3) continue; // changes the count: reported as 'length'
      const r = decodeAdvertisement(b, CTX);
      expectDrop(r, 'checksum');
      if (!r.ok) expect(r.detail).toMatch(/rfc9568.*rfc5798/);
      // and neither convention would have accepted it
      expect(refChecksum(b)).not.toBe(0);
      expect(refChecksum(pseudo4(SRC, DST, b.length), b)).not.toBe(0);
    }
  });

  it('checksum: an rfc5798 packet checked against another destination fails', () => {
    expectDrop(decodeAdvertisement(VALID, { ...CTX, destination: '10.77.0.12' }), 'checksum');
    expectDrop(decodeAdvertisement(VALID, { ...CTX, source: '10.77.0.12' }), 'checksum');
  });

  it('checksum: an IPv6 advert must carry the pseudo-header sum; the message-only sum is refused', () => {
    const six = hex('3133960100643c49fd770000000000000000000000000100');
    const ctx6: ReceiveContext = { family: 6, source: 'fe80::77:ff:fe00:11', destination: 'ff02::12', ttl: 255, checkTtl: true };
    expectOk(decodeAdvertisement(six, ctx6));
    const messageOnly = Buffer.from(six);
    messageOnly.writeUInt16BE(0, 6);
    messageOnly.writeUInt16BE(refChecksum(messageOnly), 6);
    expectDrop(decodeAdvertisement(messageOnly, ctx6), 'checksum');
  });

  it('checksum: a receive context with an unusable address fails the pseudo-header check, without throwing', () => {
    const r = decodeAdvertisement(VALID, { ...CTX, source: 'not an address' });
    expectDrop(r, 'checksum');
    if (!r.ok) expect(r.detail).toContain('not an address');
    // the message-only convention needs no address at all
    const plain = resum(VALID, 4, 'rfc9568', '', '');
    expectOk(decodeAdvertisement(plain, { ...CTX, source: 'garbage', destination: '' }));
  });

  it('addressCount: a count of 0 (with a length and checksum to match)', () => {
    const zero = resum(Buffer.from(VALID.subarray(0, 8)).fill(0, 3, 4), 4, 'rfc5798', SRC, DST);
    expectDrop(decodeAdvertisement(zero, CTX), 'addressCount');
  });

  it('interval: Max Adver Int 0', () => {
    expectDrop(
      decodeAdvertisement(
        edit((b) => b.writeUInt16BE(0, 4)),
        CTX,
      ),
      'interval',
    );
    // rsvd bits do not make a non-zero interval
    expectDrop(
      decodeAdvertisement(
        edit((b) => b.writeUInt16BE(0xf000, 4)),
        CTX,
      ),
      'interval',
    );
  });

  it('vrid: another VRID than expected, and VRID 0 always', () => {
    const r = decodeAdvertisement(VALID, CTX, 52);
    expectDrop(r, 'vrid');
    if (!r.ok) expect(r.detail).toBe('VRID 51, expected 52');
    expectOk(decodeAdvertisement(VALID, CTX)); // no expectation: any VRID goes
    expectDrop(
      decodeAdvertisement(
        edit((b) => (b[1] = 0)),
        CTX,
      ),
      'vrid',
    );
  });

  it('rsvd bits are ignored on receive and cleared on send (§5.2.6)', () => {
    const dirty = edit((b) => (b[4] = b[4]! | 0xf0));
    const r = expectOk(decodeAdvertisement(dirty, CTX));
    expect(r.advert.maxAdvertIntervalCs).toBe(100);
    expect(encodeAdvertisement(r.advert, { family: 4, checksum: 'rfc5798', source: SRC, destination: DST }).equals(VALID)).toBe(true);
  });

  it('checks run in order: the first failing check is the one reported', () => {
    // bad version and bad checksum: version
    expectDrop(
      decodeAdvertisement(
        edit((b) => (b[0] = 0x41), false),
        CTX,
      ),
      'version',
    );
    // bad length and bad checksum: length
    expectDrop(decodeAdvertisement(Buffer.concat([VALID, Buffer.from([1, 2])]), CTX), 'length');
    // zero count with a bad checksum: checksum
    expectDrop(decodeAdvertisement(Buffer.from(VALID.subarray(0, 8)).fill(0, 3, 4), CTX), 'checksum');
    // wrong VRID and zero interval: vrid
    expectDrop(
      decodeAdvertisement(
        edit((b) => b.writeUInt16BE(0, 4)),
        CTX,
        52,
      ),
      'vrid',
    );
  });
});

// ---------------------------------------------------------------------------------------------
// encode refuses bad input, naming the field

describe('encodeAdvertisement input checks', () => {
  const ADV: Advertisement = { vrid: 51, priority: 150, maxAdvertIntervalCs: 100, addresses: ['10.77.0.100'] };
  const OPTS = { family: 4, checksum: 'rfc5798', source: '10.77.0.11', destination: VRRP_MULTICAST_V4 } as const;

  it.each([
    ['vrid', 0, RangeError],
    ['vrid', 256, RangeError],
    ['vrid', 1.5, RangeError],
    ['vrid', Number.NaN, RangeError],
    ['vrid', '51', TypeError],
    ['priority', -1, RangeError],
    ['priority', 256, RangeError],
    ['maxAdvertIntervalCs', 0, RangeError],
    ['maxAdvertIntervalCs', 4096, RangeError],
    ['maxAdvertIntervalCs', undefined, TypeError],
  ] as const)('%s = %s', (field, value, error) => {
    const adv = { ...ADV, [field]: value } as unknown as Advertisement;
    expect(() => encodeAdvertisement(adv, OPTS)).toThrow(error);
    expect(() => encodeAdvertisement(adv, OPTS)).toThrow(new RegExp(`^${field} `));
  });

  it('addresses: none, too many, wrong family, not addresses, zones', () => {
    expect(() => encodeAdvertisement({ ...ADV, addresses: [] }, OPTS)).toThrow(RangeError);
    expect(() => encodeAdvertisement({ ...ADV, addresses: [] }, OPTS)).toThrow(/addresses/);
    const many = Array.from({ length: 256 }, (_, i) => `10.0.${i >> 8}.${i & 0xff}`);
    expect(() => encodeAdvertisement({ ...ADV, addresses: many }, OPTS)).toThrow(/addresses: at most 255/);
    expect(encodeAdvertisement({ ...ADV, addresses: many.slice(0, 255) }, OPTS)).toHaveLength(8 + 4 * 255);
    expect(() => encodeAdvertisement({ ...ADV, addresses: ['10.0.0.1', 'fd77::100'] }, OPTS)).toThrow(TypeError);
    expect(() => encodeAdvertisement({ ...ADV, addresses: ['10.0.0.1', 'fd77::100'] }, OPTS)).toThrow(/addresses\[1\]/);
    expect(() => encodeAdvertisement({ ...ADV, addresses: ['10.0.0.256'] }, OPTS)).toThrow(/addresses\[0\]/);
    expect(() => encodeAdvertisement({ ...ADV, addresses: 'x' as unknown as string[] }, OPTS)).toThrow(TypeError);
    const six = { family: 6, checksum: 'rfc9568', source: 'fe80::1', destination: VRRP_MULTICAST_V6 } as const;
    expect(() => encodeAdvertisement({ ...ADV, addresses: ['10.77.0.100'] }, six)).toThrow(/addresses\[0\] must be an IPv6/);
    expect(() => encodeAdvertisement({ ...ADV, addresses: ['fe80::1%eth0'] }, six)).toThrow(TypeError);
  });

  it('IPv6: 90 addresses fit in a 1500-byte packet, 91 do not', () => {
    const six = { family: 6, checksum: 'rfc9568', source: 'fe80::1', destination: VRRP_MULTICAST_V6 } as const;
    const addrs = Array.from({ length: 91 }, (_, i) => `2001:db8::${(i + 1).toString(16)}`);
    expect(encodeAdvertisement({ ...ADV, addresses: addrs.slice(0, 90) }, six)).toHaveLength(8 + 16 * 90);
    expect(() => encodeAdvertisement({ ...ADV, addresses: addrs }, six)).toThrow(RangeError);
    expect(() => encodeAdvertisement({ ...ADV, addresses: addrs }, six)).toThrow(/1504-byte IP packet, over 1500/);
  });

  it('options: family, checksum mode, source, destination', () => {
    expect(() => encodeAdvertisement(ADV, { ...OPTS, family: 5 as 4 })).toThrow(/opts.family/);
    expect(() => encodeAdvertisement(ADV, { ...OPTS, checksum: 'md5' as ChecksumMode })).toThrow(/opts.checksum/);
    expect(() => encodeAdvertisement(ADV, { ...OPTS, source: 'fe80::1' })).toThrow(/source/);
    expect(() => encodeAdvertisement(ADV, { ...OPTS, destination: '' })).toThrow(/destination/);
    expect(() => encodeAdvertisement(ADV, { ...OPTS, checksum: 'rfc9568', source: 'x' })).toThrow(/source/);
  });
});

// ---------------------------------------------------------------------------------------------
// fuzz

const REASONS: readonly DropReason[] = ['ttl', 'length', 'version', 'vrrpv2', 'type', 'checksum', 'addressCount', 'interval', 'vrid'];

describe('fuzz', () => {
  it('10,000 random buffers never throw and always give a well-formed result', () => {
    const rand = prng(0x5eed_1234);
    const int = (n: number): number => Math.floor(rand() * n);
    const seen = new Map<string, number>();
    for (let i = 0; i < 10_000; i++) {
      // lengths 0..7 often, then up to a few addresses, sometimes long
      const length = i % 4 === 0 ? int(8) : i % 4 === 3 ? int(2000) : int(80);
      const buf = Buffer.alloc(length);
      for (let j = 0; j < length; j++) buf[j] = int(256);
      const family = rand() < 0.5 ? 4 : 6;
      // steer half of them past the version / type / length checks, to reach the deeper ones
      if (length > 0 && rand() < 0.5) buf[0] = 0x31;
      if (length >= 8 && rand() < 0.5) buf[3] = Math.min(255, Math.floor((length - 8) / (family === 4 ? 4 : 16)));
      const ctx: ReceiveContext = {
        family,
        source: family === 4 ? '10.0.0.1' : 'fe80::1',
        destination: family === 4 ? VRRP_MULTICAST_V4 : VRRP_MULTICAST_V6,
        ttl: rand() < 0.9 ? 255 : int(256),
        checkTtl: rand() < 0.8,
      };
      const expected = rand() < 0.5 ? int(256) : undefined;
      const r = decodeAdvertisement(buf, ctx, expected); // a throw fails the test, with the seed fixed
      if (r.ok) {
        expect(r.advert.addresses.length).toBeGreaterThan(0);
        key(seen, 'ok');
      } else {
        expect(REASONS).toContain(r.reason);
        expect(typeof r.detail).toBe('string');
        key(seen, r.reason);
      }
    }
    // the steering reaches every check that random bytes can reach
    for (const reason of ['ttl', 'length', 'version', 'vrrpv2', 'type', 'checksum'] as const) expect(seen.get(reason)).toBeGreaterThan(0);
  });

  it('the random checksums that do verify then reach the later checks', () => {
    // same generator, but with the checksum fixed up, so the checks after it get random input
    const rand = prng(42);
    const int = (n: number): number => Math.floor(rand() * n);
    const seen = new Set<string>();
    for (let i = 0; i < 2_000; i++) {
      const family = rand() < 0.5 ? 4 : 6;
      const count = int(4);
      const buf = Buffer.alloc(8 + count * (family === 4 ? 4 : 16));
      for (let j = 0; j < buf.length; j++) buf[j] = int(256);
      buf[0] = 0x31;
      buf[3] = count;
      if (rand() < 0.3) buf.writeUInt16BE(int(2) * 0xf000, 4); // interval 0, with or without rsvd bits
      if (rand() < 0.1) buf[1] = 0;
      const src = family === 4 ? '10.0.0.1' : 'fe80::1';
      const dst = family === 4 ? VRRP_MULTICAST_V4 : VRRP_MULTICAST_V6;
      const mode = rand() < 0.5 ? 'rfc9568' : 'rfc5798';
      const msg = resum(buf, family, mode, src, dst);
      const r = decodeAdvertisement(msg, { family, source: src, destination: dst, ttl: 255, checkTtl: true }, rand() < 0.2 ? 1 : undefined);
      seen.add(r.ok ? 'ok' : r.reason);
      if (r.ok) {
        // whatever decodes re-encodes to the same bytes, rsvd aside
        const again = encodeAdvertisement(r.advert, { family, checksum: r.checksum, source: src, destination: dst });
        const clean = resum(Buffer.from(msg).fill(msg[4]! & 0x0f, 4, 5), family, r.checksum, src, dst);
        expect(again.toString('hex')).toBe(clean.toString('hex'));
      }
    }
    expect([...seen].sort()).toEqual(['addressCount', 'interval', 'ok', 'vrid']);
  });

  it('odd receive contexts do not throw either', () => {
    const odd = [
      { family: 4, source: 1n, destination: Object.create(null), ttl: {}, checkTtl: true },
      { family: 4, source: 1n, destination: Object.create(null), ttl: 255, checkTtl: false },
      { family: 4, source: '10.77.0.11', destination: Object.create(null), ttl: 255, checkTtl: false },
      { family: 5, source: '', destination: '', ttl: 255, checkTtl: false },
      { family: 6, source: undefined, destination: null, ttl: Number.NaN, checkTtl: false },
      null,
    ] as unknown as ReceiveContext[];
    for (const ctx of odd) {
      for (const payload of [Buffer.alloc(0), hex('31339601006442cf0a4d0064'), 'x' as unknown as Buffer]) {
        expect(() => decodeAdvertisement(payload, ctx)).not.toThrow();
        expect(decodeAdvertisement(payload, ctx).ok).toBe(false);
      }
    }
  });

  it('random valid adverts round-trip through encode and decode', () => {
    const rand = prng(7);
    const int = (n: number): number => Math.floor(rand() * n);
    for (let i = 0; i < 1_000; i++) {
      const family = rand() < 0.5 ? 4 : 6;
      const n = 1 + int(family === 4 ? 255 : 90);
      const addresses = Array.from({ length: n }, () =>
        family === 4
          ? [int(256), int(256), int(256), int(256)].join('.')
          : Array.from({ length: 8 }, () => (rand() < 0.3 ? 0 : int(0x10000)).toString(16)).join(':'),
      );
      const adv: Advertisement = { vrid: 1 + int(255), priority: int(256), maxAdvertIntervalCs: 1 + int(MAX_ADVER_INT_CS), addresses };
      const checksum: ChecksumMode = rand() < 0.5 ? 'rfc9568' : 'rfc5798';
      const source = family === 4 ? '192.0.2.1' : 'fe80::1';
      const destination = family === 4 ? VRRP_MULTICAST_V4 : VRRP_MULTICAST_V6;
      const msg = encodeAdvertisement(adv, { family, checksum, source, destination });
      const r = expectOk(decodeAdvertisement(msg, { family, source, destination, ttl: 255, checkTtl: true }, adv.vrid));
      expect(r.advert.vrid).toBe(adv.vrid);
      expect(r.advert.priority).toBe(adv.priority);
      expect(r.advert.maxAdvertIntervalCs).toBe(adv.maxAdvertIntervalCs);
      expect(r.advert.addresses.map((a) => v6or4(a))).toEqual(addresses.map((a) => v6or4(a)));
      if (family === 6) expect(r.checksum).toBe('rfc9568');
    }
  });
});

function key(map: Map<string, number>, k: string): void {
  map.set(k, (map.get(k) ?? 0) + 1);
}

/** Bytes of an address as hex, for comparing different spellings of one address. */
function v6or4(a: string): string {
  return Buffer.from(a.includes(':') ? v6(a) : v4(a)).toString('hex');
}
