import { describe, expect, it } from 'vitest';
import { AdvertAuth } from '../../src/vrrp/auth.js';
import { filterAdvert, FILTER_WARNINGS, type FilterContext, type ReceivedAdvert } from '../../src/vrrp/filters.js';
import { encodeAdvertisement } from '../../src/vrrp/packet.js';
import { fixturePath, ipOfFrame, readPcap } from '../support/pcap.js';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const ctx: FilterContext = { family: 4, vrid: 51, primaryAddress: '10.0.0.12', unicast: false, peers: [], vips: ['10.0.0.100'], auth: null };

function packet(over: { source?: string; destination?: string; ttl?: number; vrid?: number; addresses?: string[]; priority?: number } = {}): ReceivedAdvert {
  const source = over.source ?? '10.0.0.11';
  const destination = over.destination ?? '224.0.0.18';
  const payload = encodeAdvertisement(
    { vrid: over.vrid ?? 51, priority: over.priority ?? 150, maxAdvertIntervalCs: 100, addresses: over.addresses ?? ['10.0.0.100'] },
    { family: 4, checksum: 'rfc5798', source, destination },
  );
  return { payload, source, destination, ttl: over.ttl ?? 255 };
}

describe('receive filters (one module, in order)', () => {
  it('accepts a valid advert and returns its fields', () => {
    expect(filterAdvert(packet(), ctx)).toStrictEqual({
      ok: true,
      advert: { vrid: 51, priority: 150, maxAdvertIntervalCs: 100, addresses: ['10.0.0.100'] },
      foreign: false,
    });
  });
  it('drops our own adverts (looped back) as own', () => {
    expect(filterAdvert(packet({ source: '10.0.0.12' }), ctx)).toStrictEqual({ ok: false, reason: 'own' });
  });
  it('unicast: drops a source that is not a peer as notPeer, before looking at the payload', () => {
    const u = { ...ctx, unicast: true, peers: ['10.0.0.13'] };
    expect(filterAdvert({ ...packet(), payload: Buffer.alloc(3) }, u)).toStrictEqual({ ok: false, reason: 'notPeer' });
    expect(filterAdvert(packet({ source: '10.0.0.13', destination: '10.0.0.12' }), u)).toMatchObject({ ok: true });
  });
  it('members: drops a source outside the set as notMember, before auth and the payload; null is any source', () => {
    const m = { ...ctx, members: new Set(['10.0.0.13']) };
    expect(filterAdvert({ ...packet(), payload: Buffer.alloc(3) }, m)).toStrictEqual({ ok: false, reason: 'notMember' });
    expect(filterAdvert(packet({ source: '10.0.0.13' }), m)).toMatchObject({ ok: true });
    expect(filterAdvert(packet({ source: '10.0.0.12' }), m)).toStrictEqual({ ok: false, reason: 'own' });
    expect(filterAdvert(packet(), { ...ctx, members: null })).toMatchObject({ ok: true });
    // an empty set (this node is the only member known) hears nobody, not anybody
    expect(filterAdvert(packet(), { ...ctx, members: new Set<string>() })).toStrictEqual({ ok: false, reason: 'notMember' });
    // unicast: a member that is not a peer is still notPeer (the peer list comes first)
    expect(filterAdvert(packet({ source: '10.0.0.13', destination: '10.0.0.12' }), { ...m, unicast: true, peers: ['10.0.0.14'] })).toStrictEqual({
      ok: false,
      reason: 'notPeer',
    });
  });
  it('auth off: an advert with a trailer is authUnexpected', () => {
    const p = packet();
    const signed = new AdvertAuth(KEY, 4, 1).sign(p.payload, p.source, p.destination);
    expect(filterAdvert({ ...p, payload: signed }, ctx)).toStrictEqual({ ok: false, reason: 'authUnexpected' });
  });
  it('auth on: missing trailer, wrong key, replay; a valid one passes once', () => {
    const auth = new AdvertAuth(KEY, 4, 1);
    const on = { ...ctx, auth };
    const p = packet();
    expect(filterAdvert(p, on)).toStrictEqual({ ok: false, reason: 'authMissing' });
    const wrong = new AdvertAuth(Buffer.from('ffffffffffffffffffffffffffffffff'), 4, 1).sign(p.payload, p.source, p.destination);
    expect(filterAdvert({ ...p, payload: wrong }, on)).toStrictEqual({ ok: false, reason: 'authFailed' });
    const signed = new AdvertAuth(KEY, 4, 1).sign(p.payload, p.source, p.destination);
    expect(filterAdvert({ ...p, payload: signed }, on)).toMatchObject({ ok: true, advert: { priority: 150 } });
    expect(filterAdvert({ ...p, payload: signed }, on)).toStrictEqual({ ok: false, reason: 'replayed' });
  });
  it('the codec checks (RFC 9568 §7.1): TTL on multicast, VRID', () => {
    expect(filterAdvert(packet({ ttl: 254 }), ctx)).toMatchObject({ ok: false, reason: 'ttl' });
    expect(filterAdvert(packet({ vrid: 52 }), ctx)).toMatchObject({ ok: false, reason: 'vrid' });
    // unicast destination: no TTL check (the packet may be routed)
    expect(filterAdvert(packet({ ttl: 64, destination: '10.0.0.12' }), { ...ctx, unicast: true, peers: ['10.0.0.11'] })).toMatchObject({ ok: true });
  });
  it('an address list other than our VIPs is accepted but flagged foreign (§7.1: log it); order and text form do not matter', () => {
    expect(filterAdvert(packet({ addresses: ['10.0.0.101'] }), ctx)).toMatchObject({ ok: true, foreign: true });
    const two = { ...ctx, vips: ['10.0.0.100', '10.0.0.101'] };
    expect(filterAdvert(packet({ addresses: ['10.0.0.101', '10.0.0.100'] }), two)).toMatchObject({ ok: true, foreign: false });
  });
  describe('auth on, real keepalived 2.2.7 captures (test/fixtures, VRID 51): the VRID and the version come before the trailer', () => {
    /** The first advert of a capture, as the raw socket reports it. */
    const captured = (file: string): ReceivedAdvert => {
      const ip = ipOfFrame(readPcap(fixturePath(file))[0]!.data);
      return { payload: ip.payload, source: ip.source, destination: ip.destination, ttl: ip.ttl };
    };
    const on = (vrid: number, family: 4 | 6 = 4): FilterContext => ({
      family,
      vrid,
      primaryAddress: family === 4 ? '10.77.0.99' : 'fe80::99',
      unicast: false,
      peers: [],
      vips: [family === 4 ? '10.77.0.100' : 'fd77::100'],
      auth: new AdvertAuth(KEY, family, 1),
    });
    it('a VRRPv3 advert of another VRID is vrid (not authMissing)', () => {
      const p = captured('keepalived-vrrp3-ipv4.pcap');
      expect(filterAdvert(p, on(52))).toStrictEqual({ ok: false, reason: 'vrid', detail: 'VRID 51, expected 52' });
      expect(filterAdvert(captured('keepalived-vrrp3-ipv6.pcap'), on(52, 6))).toStrictEqual({ ok: false, reason: 'vrid', detail: 'VRID 51, expected 52' });
      // our VRID: a keepalived without the trailer is what authMissing's hint is about
      expect(filterAdvert(p, on(51))).toStrictEqual({ ok: false, reason: 'authMissing' });
      // the same with auth off: the same reasons as before (another VRID; ours accepted)
      expect(filterAdvert(p, { ...on(52), auth: null })).toMatchObject({ ok: false, reason: 'vrid' });
      expect(filterAdvert(p, { ...on(51), auth: null })).toMatchObject({ ok: true, advert: { vrid: 51, priority: 150 } });
    });
    it('a VRRPv2 advert is vrrpv2, whatever its VRID', () => {
      const p = captured('keepalived-vrrp2-ipv4.pcap');
      expect(filterAdvert(p, on(51))).toMatchObject({ ok: false, reason: 'vrrpv2' });
      expect(filterAdvert(p, on(52))).toMatchObject({ ok: false, reason: 'vrrpv2' });
    });
    it('a signed advert of another VRID is vrid before its HMAC is looked at', () => {
      const p = packet({ vrid: 52 });
      const wrong = new AdvertAuth(Buffer.from('ffffffffffffffffffffffffffffffff'), 4, 1).sign(p.payload, p.source, p.destination);
      expect(filterAdvert({ ...p, payload: wrong }, { ...ctx, auth: new AdvertAuth(KEY, 4, 1) })).toMatchObject({ ok: false, reason: 'vrid' });
    });
  });
  it('has an operator text for each misconfiguration reason', () => {
    expect(Object.keys(FILTER_WARNINGS).sort()).toStrictEqual([
      'authFailed',
      'authMissing',
      'authUnexpected',
      'foreign',
      'notMember',
      'notPeer',
      'replayed',
      'vrrpv2',
    ]);
  });
});
