import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { AdvertAuth, AUTH_TRAILER_LENGTH, hasAuthTrailer } from '../../src/vrrp/auth.js';
import { decodeAdvertisement, encodeAdvertisement } from '../../src/vrrp/packet.js';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const START = 1_800_000_000; // wall-clock seconds, the sequence's high half

const advert4 = (priority = 100): Buffer =>
  encodeAdvertisement(
    { vrid: 51, priority, maxAdvertIntervalCs: 100, addresses: ['10.0.0.100'] },
    { family: 4, checksum: 'rfc5798', source: '10.0.0.11', destination: '224.0.0.18' },
  );

describe('AdvertAuth: the trailer format (docs/auth.md)', () => {
  it('appends 44 bytes: 0xBA 0x01, two zero bytes, the u64 sequence, HMAC-SHA256 over family|src|dst|message|bytes 0..11', () => {
    const msg = advert4();
    const out = new AdvertAuth(KEY, 4, START).sign(msg, '10.0.0.11', '224.0.0.18');
    expect(out.length).toBe(msg.length + 44);
    expect(AUTH_TRAILER_LENGTH).toBe(44);
    expect(out.subarray(0, msg.length)).toStrictEqual(msg);
    const t = out.subarray(msg.length);
    expect([...t.subarray(0, 4)]).toStrictEqual([0xba, 0x01, 0, 0]);
    expect(t.readBigUInt64BE(4)).toBe(BigInt(START) << 32n);
    // the HMAC input written out by hand from the documented layout
    const input = Buffer.concat([Buffer.of(4), Buffer.of(10, 0, 0, 11), Buffer.of(224, 0, 0, 18), msg, t.subarray(0, 12)]);
    expect(t.subarray(12)).toStrictEqual(createHmac('sha256', KEY).update(input).digest());
  });

  it('counts the sequence up by one per advert, and wraps the counter into the next second', () => {
    const a = new AdvertAuth(KEY, 4, START);
    const seqs = [0, 1, 2].map(() => a.sign(advert4(), '10.0.0.11', '224.0.0.18').readBigUInt64BE(advert4().length + 4));
    expect(seqs).toStrictEqual([0n, 1n, 2n].map((n) => (BigInt(START) << 32n) + n));
    const w = new AdvertAuth(KEY, 4, START);
    (w as unknown as { sequence: bigint }).sequence = (BigInt(START) << 32n) | 0xffffffffn;
    expect(w.nextSequence()).toBe((BigInt(START) << 32n) | 0xffffffffn);
    w.sign(advert4(), '10.0.0.11', '224.0.0.18');
    expect(w.nextSequence()).toBe(BigInt(START + 1) << 32n);
  });

  it('refuses a key shorter than 16 bytes', () => {
    expect(() => new AdvertAuth(Buffer.alloc(15, 1), 4)).toThrow(/at least 16 bytes, got 15/);
  });
});

describe('AdvertAuth: verification', () => {
  const pair = (): { tx: AdvertAuth; rx: AdvertAuth } => ({ tx: new AdvertAuth(KEY, 4, START), rx: new AdvertAuth(KEY, 4, START + 5) });

  it('gives back the message, which then decodes as a valid advert', () => {
    const { tx, rx } = pair();
    const r = rx.verify(tx.sign(advert4(200), '10.0.0.11', '224.0.0.18'), '10.0.0.11', '224.0.0.18');
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.message).toStrictEqual(advert4(200));
    const d = decodeAdvertisement(r.message, { family: 4, source: '10.0.0.11', destination: '224.0.0.18', ttl: 255, checkTtl: true }, 51);
    expect(d.ok && d.advert.priority).toBe(200);
  });

  it('drops a plain RFC 9568 advert (keepalived) as authMissing', () => {
    expect(pair().rx.verify(advert4(), '10.0.0.11', '224.0.0.18')).toStrictEqual({ ok: false, reason: 'authMissing' });
    expect(pair().rx.verify(Buffer.alloc(3), '10.0.0.11', '224.0.0.18')).toStrictEqual({ ok: false, reason: 'authMissing' });
  });

  it('drops a wrong key, a changed bit, another source or another destination as authFailed', () => {
    const { tx } = pair();
    const other = new AdvertAuth(Buffer.from('another key of 16+ bytes'), 4, START);
    const rx = (): AdvertAuth => new AdvertAuth(KEY, 4, START);
    expect(rx().verify(other.sign(advert4(), '10.0.0.11', '224.0.0.18'), '10.0.0.11', '224.0.0.18')).toStrictEqual({ ok: false, reason: 'authFailed' });
    const signed = tx.sign(advert4(), '10.0.0.11', '224.0.0.18');
    const flipped = Buffer.from(signed);
    flipped[2]! ^= 0x01; // the priority
    expect(rx().verify(flipped, '10.0.0.11', '224.0.0.18')).toStrictEqual({ ok: false, reason: 'authFailed' });
    expect(rx().verify(signed, '10.0.0.12', '224.0.0.18')).toStrictEqual({ ok: false, reason: 'authFailed' });
    expect(rx().verify(signed, '10.0.0.11', '10.0.0.13')).toStrictEqual({ ok: false, reason: 'authFailed' });
  });

  it('drops a replay (same or older sequence from that source) and accepts newer ones', () => {
    const { tx, rx } = pair();
    const first = tx.sign(advert4(), '10.0.0.11', '224.0.0.18');
    const second = tx.sign(advert4(), '10.0.0.11', '224.0.0.18');
    expect(rx.verify(second, '10.0.0.11', '224.0.0.18').ok).toBe(true);
    expect(rx.verify(second, '10.0.0.11', '224.0.0.18')).toStrictEqual({ ok: false, reason: 'replayed' });
    expect(rx.verify(first, '10.0.0.11', '224.0.0.18')).toStrictEqual({ ok: false, reason: 'replayed' });
    expect(rx.verify(tx.sign(advert4(), '10.0.0.11', '224.0.0.18'), '10.0.0.11', '224.0.0.18').ok).toBe(true);
    // a sender restarted later starts from a higher second: accepted
    const restarted = new AdvertAuth(KEY, 4, START + 60);
    expect(rx.verify(restarted.sign(advert4(), '10.0.0.11', '224.0.0.18'), '10.0.0.11', '224.0.0.18').ok).toBe(true);
  });

  it('a failed packet does not move the sequence forward', () => {
    const { tx, rx } = pair();
    const a = tx.sign(advert4(), '10.0.0.11', '224.0.0.18');
    const forged = Buffer.from(tx.sign(advert4(), '10.0.0.11', '224.0.0.18'));
    forged[forged.length - 1]! ^= 0xff;
    expect(rx.verify(forged, '10.0.0.11', '224.0.0.18').ok).toBe(false);
    expect(rx.verify(a, '10.0.0.11', '224.0.0.18').ok).toBe(true);
  });

  it('IPv6: 16-byte addresses in the HMAC input and the length check', () => {
    const msg = encodeAdvertisement(
      { vrid: 51, priority: 100, maxAdvertIntervalCs: 100, addresses: ['fd00::100'] },
      { family: 6, checksum: 'rfc5798', source: 'fe80::1', destination: 'ff02::12' },
    );
    const out = new AdvertAuth(KEY, 6, START).sign(msg, 'fe80::1', 'ff02::12');
    expect(out.length).toBe(8 + 16 + 44);
    const r = new AdvertAuth(KEY, 6, START).verify(out, 'fe80::1', 'ff02::12');
    expect(r.ok && r.message).toStrictEqual(msg);
  });
});

describe('AdvertAuth: key rotation (several keys: the first signs, all verify)', () => {
  const OLD = Buffer.from('the old key of the group, 32 bytes');
  const NEW = Buffer.from('the new key of the group, 32 bytes');
  it('a node with [old, new] and one with [new, old] hear each other; [new] alone does not hear [old]', () => {
    const a = new AdvertAuth([OLD, NEW], 4, START);
    const b = new AdvertAuth([NEW, OLD], 4, START);
    expect(b.verify(a.sign(advert4(), '10.0.0.11', '224.0.0.18'), '10.0.0.11', '224.0.0.18').ok).toBe(true);
    expect(a.verify(b.sign(advert4(), '10.0.0.12', '224.0.0.18'), '10.0.0.12', '224.0.0.18').ok).toBe(true);
    const c = new AdvertAuth([NEW], 4, START);
    expect(c.verify(new AdvertAuth([OLD], 4, START).sign(advert4(), '10.0.0.13', '224.0.0.18'), '10.0.0.13', '224.0.0.18')).toStrictEqual({
      ok: false,
      reason: 'authFailed',
    });
  });
  it('refuses an empty key list', () => {
    expect(() => new AdvertAuth([], 4)).toThrow(/at least one auth key/);
  });
});

describe('hasAuthTrailer (a node without auth says why it drops signed adverts)', () => {
  it('true for advert + trailer, false for a plain advert, a truncated one or another tail', () => {
    const signed = new AdvertAuth(KEY, 4, START).sign(advert4(), '10.0.0.11', '224.0.0.18');
    expect(hasAuthTrailer(signed, 4)).toBe(true);
    expect(hasAuthTrailer(advert4(), 4)).toBe(false);
    expect(hasAuthTrailer(signed.subarray(0, signed.length - 1), 4)).toBe(false);
    const other = Buffer.from(signed);
    other[advert4().length] = 0x00;
    expect(hasAuthTrailer(other, 4)).toBe(false);
    expect(hasAuthTrailer(Buffer.alloc(2), 4)).toBe(false);
  });
});
