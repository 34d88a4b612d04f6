/**
 * The native addon (src/native.ts + native/) against the real kernel, no mocks.
 *
 * Two network namespaces, bnat-a and bnat-b, joined by a veth pair (bnat-va ⇄ bnat-vb), with
 * addresses in 10.251.0.0/24 and fd51::/64 and fixed link-local addresses (fe80::a, fe80::b,
 * no DAD) and MACs; every packet stays between them. The test process cannot enter a namespace,
 * so the sockets live in child node processes (test/support/native-peer.mjs, test/support/native-worker.mjs)
 * that import src/native.ts transpiled to build/integration-native/ (test/support/native-peer.ts).
 * Runs take turns through a lock (the namespace names are fixed).
 * Only argument checks and ENODEV run in this process, and they send nothing.
 *
 * Needs root (namespaces, raw sockets) and a built addon (npm run build:native); tcpdump for
 * the on-the-wire checks.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PacketSocket, VrrpSocket, isNativeError, type NativeError } from '../../src/native.js';
import { parsePcap } from '../support/pcap.js';
import { NativePeer, ROOT, TRANSPILED_DIR, WORKER_SCRIPT, runInNamespace, takeLabLock, transpileNative, type PeerPacket } from '../support/native-peer.js';
import { needs, sleep } from '../support/index.js';

const addonFile = join(ROOT, 'build', 'Release', 'ballast.node');
const skipReason = needs('root', 'ip');
const noTcpdump = skipReason ?? needs('tcpdump');

const NS_A = 'bnat-a';
const NS_B = 'bnat-b';
const IF_A = 'bnat-va';
const IF_B = 'bnat-vb';
const MAC_A = '02:00:00:51:00:0a';
const MAC_B = '02:00:00:51:00:0b';
const V4_A = '10.251.0.1';
const V4_A2 = '10.251.0.11'; // secondary address of A
const V4_B = '10.251.0.2';
const V6_A = 'fd51::1';
const V6_B = 'fd51::2';
const LL_A = 'fe80::a';
const LL_B = 'fe80::b';
const GROUP4 = '224.0.0.18';
const GROUP6 = 'ff02::12';

function sh(args: string[]): void {
  const r = spawnSync('ip', args, { encoding: 'utf8', timeout: 10_000 });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
}

function deleteNamespaces(): void {
  for (const ns of [NS_A, NS_B]) spawnSync('ip', ['netns', 'del', ns], { timeout: 10_000 });
}

function createNamespaces(): void {
  deleteNamespaces(); // leftovers of an interrupted run
  sh(['netns', 'add', NS_A]);
  sh(['netns', 'add', NS_B]);
  sh(['-n', NS_A, 'link', 'add', IF_A, 'address', MAC_A, 'type', 'veth', 'peer', 'name', IF_B, 'address', MAC_B, 'netns', NS_B]);
  for (const [ns, dev, v4, v6, ll] of [
    [NS_A, IF_A, V4_A, V6_A, LL_A],
    [NS_B, IF_B, V4_B, V6_B, LL_B],
  ] as const) {
    sh(['-n', ns, 'link', 'set', 'lo', 'up']);
    // fixed link-local addresses without DAD: usable (not tentative) the moment the link is up
    sh(['-n', ns, 'link', 'set', dev, 'addrgenmode', 'none']);
    sh(['-n', ns, 'addr', 'add', `${v4}/24`, 'dev', dev]);
    sh(['-n', ns, 'addr', 'add', `${v6}/64`, 'dev', dev, 'nodad']);
    sh(['-n', ns, 'addr', 'add', `${ll}/64`, 'dev', dev, 'nodad']);
    sh(['-n', ns, 'link', 'set', dev, 'up']);
  }
  sh(['-n', NS_A, 'addr', 'add', `${V4_A2}/24`, 'dev', IF_A]);
}

/** A recognisable VRRP-shaped payload of `length` bytes (content does not matter to the socket). */
function payloadOf(length: number, seed: number): Buffer {
  const b = Buffer.alloc(length);
  for (let i = 0; i < length; i++) b[i] = (seed * 31 + i * 7 + 0x31) & 0xff;
  b[0] = 0x31; // version 3, type 1 (advertisement)
  return b;
}

function macBytes(mac: string): Buffer {
  return Buffer.from(mac.replaceAll(':', ''), 'hex');
}

function ipv4Checksum(header: Buffer): number {
  let sum = 0;
  for (let i = 0; i < header.length; i += 2) sum += header.readUInt16BE(i);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

/**
 * An Ethernet frame carrying IPv4 protocol 112 to 224.0.0.18 from A, padded with 0xee up to the
 * 60-byte Ethernet minimum the way a NIC pads it (veth itself never pads).
 */
function paddedVrrpFrame(payload: Buffer): Buffer {
  const ip = Buffer.alloc(20);
  ip[0] = 0x45;
  ip[1] = 0xc0;
  ip.writeUInt16BE(20 + payload.length, 2);
  ip[8] = 255; // TTL
  ip[9] = 112; // VRRP
  Buffer.from([10, 251, 0, 1]).copy(ip, 12);
  Buffer.from([224, 0, 0, 18]).copy(ip, 16);
  ip.writeUInt16BE(ipv4Checksum(ip), 10);
  const frame = Buffer.concat([macBytes('01:00:5e:00:00:12'), macBytes(MAC_A), Buffer.from([0x08, 0x00]), ip, payload]);
  return Buffer.concat([frame, Buffer.alloc(Math.max(0, 60 - frame.length), 0xee)]);
}

/** Gratuitous ARP request for A's address (RFC 5227 §3 "ARP Announcement"). */
function garpFrame(): Buffer {
  const arp = Buffer.concat([
    Buffer.from([0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01]),
    macBytes(MAC_A),
    Buffer.from([10, 251, 0, 1]),
    Buffer.alloc(6),
    Buffer.from([10, 251, 0, 1]),
  ]);
  return Buffer.concat([macBytes('ff:ff:ff:ff:ff:ff'), macBytes(MAC_A), Buffer.from([0x08, 0x06]), arp]);
}

/**
 * Sends with `send` until `received` says it arrived: at most 5 sends, 200 ms apart
 * (a child's first packet can race its peer's setup; one normally suffices).
 */
async function sendUntil(send: () => Promise<unknown>, received: () => boolean): Promise<void> {
  for (let i = 0; i < 5 && !received(); i++) {
    await send();
    for (let t = 0; t < 20 && !received(); t++) await sleep(10);
  }
}

/** tcpdump in namespace `ns` writing pcap to its stdout; resolves once it is listening. */
async function startCapture(ns: string, dev: string, count: number, filter: string): Promise<{ done: Promise<Buffer>; kill: () => void }> {
  const child = spawn('ip', ['netns', 'exec', ns, 'tcpdump', '-i', dev, '-c', String(count), '-U', '-n', '-w', '-', filter], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const chunks: Buffer[] = [];
  child.stdout.on('data', (d: Buffer) => chunks.push(d));
  let stderr = '';
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  const done = new Promise<Buffer>((resolve) =>
    child.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks));
    }),
  );
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`tcpdump did not start: ${stderr}`)), 5_000);
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
      if (stderr.includes('listening on')) {
        clearTimeout(t);
        resolve();
      }
    });
  });
  return { done, kill: () => child.kill('SIGKILL') };
}

describe.skipIf(skipReason)(`native addon on the real kernel (netns ${NS_A} ⇄ ${NS_B}${skipReason === null ? '' : `: SKIPPED, ${skipReason}`})`, () => {
  let nativeJs: string;
  let a: NativePeer | undefined;
  let b: NativePeer | undefined;

  let unlock: (() => void) | undefined;

  beforeAll(async () => {
    if (!existsSync(addonFile)) throw new Error(`${addonFile} is missing: run npm run build:native first`);
    unlock = await takeLabLock('ballast-bnat', 50_000);
    nativeJs = transpileNative();
    createNamespaces();
    a = await NativePeer.start(NS_A, nativeJs);
    b = await NativePeer.start(NS_B, nativeJs);
  });

  afterAll(async () => {
    await Promise.allSettled([a?.stop(), b?.stop()]);
    if (unlock !== undefined) {
      deleteNamespaces();
      rmSync(TRANSPILED_DIR, { recursive: true, force: true });
      unlock();
    }
  });

  const A = (): NativePeer => a!;
  const B = (): NativePeer => b!;
  type Opened = { handle: number; ifindex: number };
  const openVrrp = (peer: NativePeer, family: 4 | 6, ifname: string, sourceAddress?: string): Promise<Opened> =>
    peer.call<Opened>('openVrrp', { family, ifname, sourceAddress });
  const send = (peer: NativePeer, s: Opened, payload: Buffer, destination: string): Promise<unknown> =>
    peer.call('send', { handle: s.handle, payload: payload.toString('hex'), destination });
  const stats = (peer: NativePeer, s: Opened): Promise<{ received: number; malformedIpHeader: number; sent: number }> =>
    peer.call('stats', { handle: s.handle });
  const close = (peer: NativePeer, ...sockets: Opened[]): Promise<unknown[]> => Promise.all(sockets.map((s) => peer.call('close', { handle: s.handle })));
  const withPayload = (peer: NativePeer, s: Opened, payload: Buffer) => (): boolean =>
    peer.packets(s.handle).some((p) => p.payload === payload.toString('hex'));
  const packetWith = (peer: NativePeer, s: Opened, payload: Buffer): PeerPacket | undefined =>
    peer.packets(s.handle).find((p) => p.payload === payload.toString('hex'));

  describe('IPv4', () => {
    it('multicast from A reaches B with TTL 255, A’s primary source, 224.0.0.18 and the exact payload; A does not hear itself', async () => {
      const sa = await openVrrp(A(), 4, IF_A);
      await A().call('join', { handle: sa.handle }); // joined, to show loop-off really suppresses our own copy
      const sb = await openVrrp(B(), 4, IF_B);
      await B().call('join', { handle: sb.handle });
      const payload = payloadOf(40, 1);

      await sendUntil(() => send(A(), sa, payload, GROUP4), withPayload(B(), sb, payload));

      expect(packetWith(B(), sb, payload)).toEqual({
        event: 'packet',
        handle: sb.handle,
        payload: payload.toString('hex'),
        source: V4_A,
        destination: GROUP4,
        ttl: 255,
        ifindex: sb.ifindex,
      });
      await sleep(200);
      expect(A().packets(sa.handle)).toEqual([]);
      expect((await stats(A(), sa)).received).toBe(0);
      expect((await stats(A(), sa)).sent).toBeGreaterThanOrEqual(1);
      expect(await stats(B(), sb)).toMatchObject({ malformedIpHeader: 0, sent: 0 });
      expect((await stats(B(), sb)).received).toBeGreaterThanOrEqual(1);
      await close(A(), sa);
      await close(B(), sb);
    });

    it('a sourceAddress goes on the wire, and a socket opened with one still receives 224.0.0.18', async () => {
      // a raw socket bound to an address only receives datagrams addressed to it; the addon
      // therefore sets the source per datagram (IP_PKTINFO) instead of binding
      const sa = await openVrrp(A(), 4, IF_A, V4_A2);
      await A().call('join', { handle: sa.handle });
      const sb = await openVrrp(B(), 4, IF_B, V4_B);
      await B().call('join', { handle: sb.handle });
      const toB = payloadOf(24 + 16, 2);
      const toA = payloadOf(24 + 16, 3);

      await sendUntil(() => send(A(), sa, toB, GROUP4), withPayload(B(), sb, toB));
      await sendUntil(() => send(B(), sb, toA, GROUP4), withPayload(A(), sa, toA));

      expect(packetWith(B(), sb, toB)).toMatchObject({ source: V4_A2, destination: GROUP4, ttl: 255 });
      expect(packetWith(A(), sa, toA)).toMatchObject({ source: V4_B, destination: GROUP4, ttl: 255 });
      await close(A(), sa);
      await close(B(), sb);
    });

    it('unicast to B’s address arrives without joining; a socket that did not join does not get the group’s traffic', async () => {
      const sa = await openVrrp(A(), 4, IF_A, V4_A);
      const unjoined = await openVrrp(B(), 4, IF_B);
      const joined = await openVrrp(B(), 4, IF_B);
      await B().call('join', { handle: joined.handle });
      const unicast = payloadOf(32, 4);
      const multicast = payloadOf(32, 5);

      await sendUntil(() => send(A(), sa, unicast, V4_B), withPayload(B(), unjoined, unicast));
      await sendUntil(() => send(A(), sa, multicast, GROUP4), withPayload(B(), joined, multicast));

      expect(packetWith(B(), unjoined, unicast)).toMatchObject({ source: V4_A, destination: V4_B, ttl: 255, ifindex: unjoined.ifindex });
      // IP_MULTICAST_ALL = 0: the group joined by the other socket is not delivered here
      await sleep(200);
      expect(packetWith(B(), unjoined, multicast)).toBeUndefined();
      await close(A(), sa);
      await close(B(), unjoined, joined);
    });

    it('a datagram shorter than the Ethernet minimum is cut at the IP total length, not at the padded frame', async () => {
      const sb = await openVrrp(B(), 4, IF_B);
      await B().call('join', { handle: sb.handle });
      // (1) through the VRRP socket: 14 + 20 + 8 = 42 bytes, which a NIC pads to 60
      const sa = await openVrrp(A(), 4, IF_A);
      const short = payloadOf(8, 6);
      await sendUntil(() => send(A(), sa, short, GROUP4), withPayload(B(), sb, short));
      expect(packetWith(B(), sb, short)?.payload).toHaveLength(2 * 8);
      // (2) veth does not pad, so put a padded frame on the wire ourselves (packet socket)
      const pa = await A().call<{ handle: number }>('openPacket', { ifname: IF_A });
      const padded = payloadOf(8, 7);
      const frame = paddedVrrpFrame(padded);
      expect(frame).toHaveLength(60);
      await sendUntil(() => A().call('sendFrame', { handle: pa.handle, frame: frame.toString('hex') }), withPayload(B(), sb, padded));
      expect(packetWith(B(), sb, padded)).toMatchObject({ payload: padded.toString('hex'), source: V4_A, destination: GROUP4, ttl: 255 });
      expect((await stats(B(), sb)).malformedIpHeader).toBe(0);
      await A().call('close', { handle: pa.handle });
      await close(A(), sa);
      await close(B(), sb);
    });
  });

  describe('IPv6', () => {
    it('multicast to ff02::12 from a link-local source arrives with hop limit 255 and the exact payload', async () => {
      const sa = await openVrrp(A(), 6, IF_A, LL_A);
      await A().call('join', { handle: sa.handle });
      const sb = await openVrrp(B(), 6, IF_B);
      await B().call('join', { handle: sb.handle });
      // the checksum field (bytes 6-7) is left as the codec wrote it: no IPV6_CHECKSUM
      const payload = payloadOf(40, 8);

      await sendUntil(() => send(A(), sa, payload, GROUP6), withPayload(B(), sb, payload));

      expect(packetWith(B(), sb, payload)).toEqual({
        event: 'packet',
        handle: sb.handle,
        payload: payload.toString('hex'),
        source: LL_A,
        destination: GROUP6,
        ttl: 255,
        ifindex: sb.ifindex,
      });
      await sleep(200);
      expect(A().packets(sa.handle)).toEqual([]);
      await close(A(), sa);
      await close(B(), sb);
    });

    it('unicast reaches a socket opened with a link-local source, at its global and its link-local address', async () => {
      const sa = await openVrrp(A(), 6, IF_A, LL_A);
      const sb = await openVrrp(B(), 6, IF_B, LL_B);
      const toGlobal = payloadOf(40, 9);
      const toLinkLocal = payloadOf(40, 10);

      await sendUntil(() => send(A(), sa, toGlobal, V6_B), withPayload(B(), sb, toGlobal));
      await sendUntil(() => send(A(), sa, toLinkLocal, LL_B), withPayload(B(), sb, toLinkLocal));

      expect(packetWith(B(), sb, toGlobal)).toMatchObject({ source: LL_A, destination: V6_B, ttl: 255, ifindex: sb.ifindex });
      expect(packetWith(B(), sb, toLinkLocal)).toMatchObject({ source: LL_A, destination: LL_B, ttl: 255, ifindex: sb.ifindex });
      await close(A(), sa);
      await close(B(), sb);
    });
  });

  describe.skipIf(noTcpdump)(`on the wire (tcpdump)${noTcpdump ? `: SKIPPED, ${noTcpdump}` : ''}`, () => {
    it('adverts leave with DSCP CS6 and TTL / hop limit 255', async () => {
      const s4 = await openVrrp(A(), 4, IF_A);
      const s6 = await openVrrp(A(), 6, IF_A, LL_A);
      const capture = await startCapture(NS_B, IF_B, 2, `ether src ${MAC_A} and (ip proto 112 or ip6 proto 112)`);
      await send(A(), s4, payloadOf(40, 11), GROUP4);
      await send(A(), s6, payloadOf(40, 12), GROUP6);
      const records = parsePcap(await capture.done);
      expect(records).toHaveLength(2);
      const v4 = records.find((r) => r.data.readUInt16BE(12) === 0x0800)!.data.subarray(14);
      const v6 = records.find((r) => r.data.readUInt16BE(12) === 0x86dd)!.data.subarray(14);
      expect({ tos: v4[1], ttl: v4[8], protocol: v4[9] }).toEqual({ tos: 0xc0, ttl: 255, protocol: 112 });
      expect({ trafficClass: ((v6[0]! & 0x0f) << 4) | (v6[1]! >> 4), nextHeader: v6[6], hopLimit: v6[7] }).toEqual({
        trafficClass: 0xc0,
        nextHeader: 112,
        hopLimit: 255,
      });
      await close(A(), s4, s6);
    });

    it('a packet socket puts the frame on the wire byte for byte, and reports ifindex and MAC', async () => {
      const pa = await A().call<{ handle: number; ifindex: number; hardwareAddress: string }>('openPacket', { ifname: IF_A });
      const va = await openVrrp(A(), 4, IF_A);
      expect(pa.ifindex).toBe(va.ifindex);
      expect(pa.hardwareAddress).toBe(MAC_A.replaceAll(':', ''));
      const frame = garpFrame();
      const capture = await startCapture(NS_B, IF_B, 1, `arp and ether src ${MAC_A}`);
      let captured: Buffer | null = null;
      void capture.done.then((c) => (captured = c));
      for (let i = 0; i < 5 && captured === null; i++) {
        await A().call('sendFrame', { handle: pa.handle, frame: frame.toString('hex') });
        for (let t = 0; t < 20 && captured === null; t++) await sleep(10);
      }
      capture.kill();
      const records = parsePcap(await capture.done);
      expect(records).toHaveLength(1);
      expect(records[0]!.data.toString('hex')).toBe(frame.toString('hex'));
      await A().call('close', { handle: pa.handle });
      await close(A(), va);
    });
  });

  describe('errors', () => {
    it('a missing interface gives ENODEV naming the call (this process, nothing is sent)', () => {
      const errorOf = (f: () => unknown): NativeError => {
        try {
          f();
        } catch (e) {
          if (isNativeError(e)) return e;
          throw e;
        }
        throw new Error('did not throw');
      };
      for (const family of [4, 6] as const) {
        const e = errorOf(() =>
          VrrpSocket.open(
            { family, ifname: 'bnat-nope0' },
            () => undefined,
            () => undefined,
          ),
        );
        expect({ code: e.code, errno: e.errno, syscall: e.syscall }).toEqual({ code: 'ENODEV', errno: 19, syscall: 'setsockopt(SO_BINDTODEVICE)' });
        expect(e.message).toBe('setsockopt(SO_BINDTODEVICE) failed on bnat-nope0: ENODEV (No such device)');
        expect(e).toBeInstanceOf(Error);
      }
      const p = errorOf(() => PacketSocket.open('bnat-nope0'));
      expect({ code: p.code, errno: p.errno, syscall: p.syscall }).toEqual({ code: 'ENODEV', errno: 19, syscall: 'ioctl(SIOCGIFINDEX)' });
    });

    it('bad arguments are TypeErrors, in the wrapper and again in C++ (this process, nothing is sent)', () => {
      const ok = (): void => undefined;
      const bad: [string, () => unknown][] = [
        ['family 5', () => VrrpSocket.open({ family: 5 as 4, ifname: 'lo' }, ok, ok)],
        ['empty ifname', () => VrrpSocket.open({ family: 4, ifname: '' }, ok, ok)],
        ['16-byte ifname', () => VrrpSocket.open({ family: 4, ifname: 'x'.repeat(16) }, ok, ok)],
        ['IPv6 source for family 4', () => VrrpSocket.open({ family: 4, ifname: 'lo', sourceAddress: '::1' }, ok, ok)],
        ['global IPv6 source', () => VrrpSocket.open({ family: 6, ifname: 'lo', sourceAddress: 'fd51::1' }, ok, ok)],
        ['zoned IPv6 source', () => VrrpSocket.open({ family: 6, ifname: 'lo', sourceAddress: 'fe80::1%lo' }, ok, ok)],
        ['onPacket not a function', () => VrrpSocket.open({ family: 4, ifname: 'lo' }, null as unknown as typeof ok, ok)],
        ['packet ifname of 16 bytes', () => PacketSocket.open('y'.repeat(16))],
      ];
      for (const [what, f] of bad) expect(f, what).toThrow(TypeError);

      // send checks run before anything crosses: a socket on this host's lo is opened, never used
      const s = VrrpSocket.open({ family: 4, ifname: 'lo' }, ok, ok);
      try {
        expect(() => s.send('abc' as unknown as Buffer, '127.0.0.1')).toThrow(/payload must be a Buffer/);
        expect(() => s.send(Buffer.alloc(0), '127.0.0.1')).toThrow(TypeError);
        expect(() => s.send(Buffer.alloc(1501), '127.0.0.1')).toThrow(/1 to 1500 bytes/);
        expect(() => s.send(Buffer.alloc(20), 'ff02::12')).toThrow(/destination must be an IPv4 address/);
        expect(() => s.send(Buffer.alloc(20), 'not-an-address')).toThrow(TypeError);
      } finally {
        s.close();
      }

      // the same checks in C++, called past the wrapper
      const raw = createRequire(import.meta.url)(addonFile) as {
        VrrpSocket: new (...args: unknown[]) => { send(...args: unknown[]): void; close(): void };
        PacketSocket: new (...args: unknown[]) => unknown;
      };
      expect(() => new raw.VrrpSocket(5, 'lo', undefined, ok, ok)).toThrow(TypeError);
      expect(() => new raw.VrrpSocket(4, 'x'.repeat(16), undefined, ok, ok)).toThrow(TypeError);
      expect(() => new raw.VrrpSocket(6, 'lo', 'fd51::1', ok, ok)).toThrow(/link-local/);
      expect(() => new raw.VrrpSocket(4, 'lo', undefined, 'nope', ok)).toThrow(TypeError);
      expect(() => new raw.PacketSocket(42)).toThrow(TypeError);
      const r = new raw.VrrpSocket(4, 'lo', undefined, ok, ok);
      try {
        expect(() => r.send(Buffer.alloc(1501), '127.0.0.1')).toThrow(TypeError);
        expect(() => r.send(Buffer.alloc(20), 'fe80::1')).toThrow(TypeError);
        expect(() => r.send('not a buffer', '127.0.0.1')).toThrow(TypeError);
      } finally {
        r.close();
      }
    });

    it('kernel refusals carry code, errno, syscall and the documented message', async () => {
      const s4 = await openVrrp(A(), 4, IF_A);
      await A().call('join', { handle: s4.handle });
      expect(await A().callError('join', { handle: s4.handle })).toMatchObject({
        code: 'EADDRINUSE',
        errno: 98,
        syscall: 'setsockopt(IP_ADD_MEMBERSHIP)',
        message: `setsockopt(IP_ADD_MEMBERSHIP) failed on ${IF_A}: EADDRINUSE (Address already in use)`,
        isNativeError: true,
        isTypeError: false,
      });
      await A().call('leave', { handle: s4.handle });
      expect(await A().callError('leave', { handle: s4.handle })).toMatchObject({ code: 'EADDRNOTAVAIL', syscall: 'setsockopt(IP_DROP_MEMBERSHIP)' });

      const s6 = await openVrrp(A(), 6, IF_A);
      await A().call('join', { handle: s6.handle });
      expect(await A().callError('join', { handle: s6.handle })).toMatchObject({ code: 'EADDRINUSE', syscall: 'setsockopt(IPV6_JOIN_GROUP)' });
      await A().call('leave', { handle: s6.handle });
      expect(await A().callError('leave', { handle: s6.handle })).toMatchObject({ syscall: 'setsockopt(IPV6_LEAVE_GROUP)', isNativeError: true });

      // an address this host does not have
      expect(await A().callError('openVrrp', { family: 4, ifname: IF_A, sourceAddress: '10.251.0.99' })).toMatchObject({
        code: 'EADDRNOTAVAIL',
        syscall: 'bind',
      });
      expect(await A().callError('openVrrp', { family: 6, ifname: IF_A, sourceAddress: 'fe80::99' })).toMatchObject({ code: 'EADDRNOTAVAIL', syscall: 'bind' });
      await close(A(), s4, s6);
    });

    it('close() twice is fine; a closed socket refuses with EBADF and still reports its counters', async () => {
      const s = await openVrrp(A(), 4, IF_A);
      await send(A(), s, payloadOf(20, 13), GROUP4);
      await close(A(), s);
      await close(A(), s);
      expect(await A().callError('send', { handle: s.handle, payload: '3101', destination: GROUP4 })).toMatchObject({ code: 'EBADF', syscall: 'sendmsg' });
      expect(await A().callError('join', { handle: s.handle })).toMatchObject({ code: 'EBADF', syscall: 'setsockopt(IP_ADD_MEMBERSHIP)' });
      expect(await stats(A(), s)).toMatchObject({ received: 0, malformedIpHeader: 0, sent: 1, pacer: { sent: 0, covers: 0, holds: 0 } });
      const p = await A().call<{ handle: number }>('openPacket', { ifname: IF_A });
      await A().call('close', { handle: p.handle });
      await A().call('close', { handle: p.handle });
      expect(await A().callError('sendFrame', { handle: p.handle, frame: garpFrame().toString('hex') })).toMatchObject({ code: 'EBADF', syscall: 'send' });
    });
  });

  describe('environment teardown (workers, exit) never crashes', () => {
    /** B sends IPv4 and IPv6 adverts to the groups while `during` runs: 10 ms apart, at most 400. */
    async function withTraffic<T>(during: () => Promise<T>): Promise<T> {
      const s4 = await openVrrp(B(), 4, IF_B);
      const s6 = await openVrrp(B(), 6, IF_B, LL_B);
      let stop = false;
      const sender = (async () => {
        for (let i = 0; i < 400 && !stop; i++) {
          await send(B(), s4, payloadOf(40, i), GROUP4);
          await send(B(), s6, payloadOf(40, i), GROUP6);
          await sleep(10);
        }
      })();
      try {
        return await during();
      } finally {
        stop = true;
        await sender;
        await close(B(), s4, s6);
      }
    }

    const scenario = (mode: string, killAfterMs = 20_000) => runInNamespace(NS_A, WORKER_SCRIPT, [nativeJs, mode, IF_A], killAfterMs);

    it.each(['terminate', 'exit', 'exit-in-callback', 'throw-in-callback', 'close-in-callback', 'main-exit'])('%s, with packets arriving', async (mode) => {
      const r = await withTraffic(() => scenario(mode));
      expect({ code: r.code, signal: r.signal, killed: r.killed }, r.stdout + r.stderr).toEqual({ code: 0, signal: null, killed: false });
      expect(r.stdout).toContain('ok');
    });

    it('an unref()ed socket lets the process end by itself', async () => {
      const r = await scenario('unref', 10_000);
      expect({ code: r.code, signal: r.signal, killed: r.killed }, r.stderr).toEqual({ code: 0, signal: null, killed: false });
      expect(r.stdout).toBe('opened\nok\n');
    });

    it('a ref()ed socket keeps the process alive (killed by the test after 1 s)', async () => {
      const r = await scenario('ref', 1_000);
      expect(r.killed, r.stdout + r.stderr).toBe(true);
      expect(r.stdout).toBe('opened\n');
    });
  });
});
