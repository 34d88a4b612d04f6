/**
 * Property-based tests of the VRRPv3 codec (src/vrrp/packet.ts), issue 12 item 2: decode never
 * throws on any bytes or context; decode ∘ encode is the identity for every valid advert of either
 * family; both IPv4 checksum conventions (RFC 9568 §5.2.8 without a pseudo-header, RFC 5798 /
 * keepalived with one) verify, and a single flipped bit never does. `npm run fuzz` runs each
 * property 1,000,000 times (test/support/fuzz.ts).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bytesToAddress } from '../../src/net/address.js';
import {
  decodeAdvertisement,
  encodeAdvertisement,
  internetChecksum,
  type Advertisement,
  type ChecksumMode,
  type ReceiveContext,
} from '../../src/vrrp/packet.js';
import { FUZZ_TIMEOUT_MS, fuzzParameters } from '../support/fuzz.js';

const v4 = fc.uint8Array({ minLength: 4, maxLength: 4 }).map((b) => bytesToAddress(b));
const v6 = fc.uint8Array({ minLength: 16, maxLength: 16 }).map((b) => bytesToAddress(b));
const addressOf = (family: 4 | 6): fc.Arbitrary<string> => (family === 4 ? v4 : v6);

/** A valid advert of one family with the IP source / destination it travels between. */
const validCase = fc.constantFrom<4 | 6>(4, 6).chain((family) =>
  fc.record({
    family: fc.constant(family),
    checksum: fc.constantFrom<ChecksumMode>('rfc5798', 'rfc9568'),
    source: addressOf(family),
    destination: addressOf(family),
    advert: fc.record<Advertisement>({
      vrid: fc.integer({ min: 1, max: 255 }),
      priority: fc.integer({ min: 0, max: 255 }),
      maxAdvertIntervalCs: fc.integer({ min: 1, max: 4095 }),
      // IPv4: the count field's 255; IPv6: 90 fit in a 1500-byte packet
      addresses: fc.array(addressOf(family), { minLength: 1, maxLength: family === 4 ? 255 : 90 }),
    }),
  }),
);

function receive(c: { family: 4 | 6; source: string; destination: string }): ReceiveContext {
  return { family: c.family, source: c.source, destination: c.destination, ttl: 255, checkTtl: true };
}

/** Any context, well formed or not: families, addresses of either family or junk, any TTL. */
const anyContext: fc.Arbitrary<ReceiveContext> = fc.record({
  family: fc.oneof(fc.constantFrom(4, 6), fc.integer()) as fc.Arbitrary<4 | 6>,
  source: fc.oneof(v4, v6, fc.string(), v6.map((a) => `${a}%eth0`)),
  destination: fc.oneof(v4, v6, fc.string(), fc.constantFrom('224.0.0.18', 'ff02::12')),
  ttl: fc.integer({ min: 0, max: 255 }),
  checkTtl: fc.boolean(),
});

/** decode's result shape: ok with an advert, or a drop with a reason word and a detail. */
function expectResult(result: ReturnType<typeof decodeAdvertisement>): void {
  if (result.ok) {
    expect(result.advert.addresses.length).toBeGreaterThan(0);
    expect(['rfc5798', 'rfc9568']).toContain(result.checksum);
  } else {
    expect(result.reason).toMatch(/^[a-zA-Z0-9]+$/);
    expect(typeof result.detail).toBe('string');
  }
}

describe('VRRP codec properties', () => {
  it('decode never throws on any bytes in any context', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 100 }), anyContext, fc.option(fc.integer({ min: 0, max: 300 }), { nil: undefined }), (bytes, ctx, vrid) => {
        expectResult(decodeAdvertisement(Buffer.from(bytes), ctx, vrid));
      }),
      fuzzParameters(),
    );
  }, FUZZ_TIMEOUT_MS);

  it('decode never throws on mutated valid adverts (bit flips, truncation, extension, count changes)', () => {
    const mutation = fc.oneof(
      fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
      fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
      fc.record({ kind: fc.constant('extend' as const), tail: fc.uint8Array({ minLength: 1, maxLength: 40 }) }),
      fc.record({ kind: fc.constant('byte' as const), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
    );
    fc.assert(
      fc.property(validCase, fc.array(mutation, { minLength: 1, maxLength: 4 }), fc.boolean(), (c, mutations, otherFamily) => {
        let bytes = Buffer.from(encodeAdvertisement(c.advert, c));
        for (const m of mutations) {
          if (m.kind === 'flip' && bytes.length > 0) bytes[m.at % bytes.length]! ^= 1 << m.bit;
          else if (m.kind === 'byte' && bytes.length > 0) bytes[m.at % bytes.length] = m.value;
          else if (m.kind === 'truncate') bytes = bytes.subarray(0, m.at % (bytes.length + 1));
          else if (m.kind === 'extend') bytes = Buffer.concat([bytes, m.tail]);
        }
        const ctx = receive(c);
        expectResult(decodeAdvertisement(bytes, otherFamily ? { ...ctx, family: c.family === 4 ? 6 : 4 } : ctx));
      }),
      fuzzParameters(),
    );
  }, FUZZ_TIMEOUT_MS);

  it('decode ∘ encode is the identity for every valid advert, both families and checksum conventions', () => {
    fc.assert(
      fc.property(validCase, (c) => {
        const bytes = encodeAdvertisement(c.advert, c);
        expect(bytes.length).toBe(8 + (c.family === 4 ? 4 : 16) * c.advert.addresses.length);
        const result = decodeAdvertisement(bytes, receive(c), c.advert.vrid);
        expect(result.ok).toBe(true);
        if (!result.ok) return;
        expect(result.advert).toEqual(c.advert);
        if (c.family === 6 || c.checksum === 'rfc9568') {
          // IPv6 always has the pseudo-header, reported as 'rfc9568'
          expect(result.checksum).toBe('rfc9568');
        } else {
          // an RFC 5798 sum that happens to verify without the pseudo-header too is reported as rfc9568
          expect(result.checksum).toBe(internetChecksum(bytes) === 0 ? 'rfc9568' : 'rfc5798');
        }
      }),
      fuzzParameters(),
    );
  }, FUZZ_TIMEOUT_MS);

  it('the checksum covers every bit: one flipped bit is never accepted under the convention it was sent with', () => {
    fc.assert(
      fc.property(validCase, fc.nat(), fc.integer({ min: 0, max: 7 }), (c, at, bit) => {
        const bytes = Buffer.from(encodeAdvertisement(c.advert, c));
        bytes[at % bytes.length]! ^= 1 << bit;
        const result = decodeAdvertisement(bytes, receive(c));
        if (c.family === 6 || c.checksum === 'rfc9568') {
          expect(result.ok).toBe(false);
        } else if (result.ok) {
          // only the other convention can accept it, and only when its plain sum is 0
          expect(result.checksum).toBe('rfc9568');
          expect(internetChecksum(bytes)).toBe(0);
        }
      }),
      fuzzParameters(),
    );
  }, FUZZ_TIMEOUT_MS);

  it('an IPv4 advert sent with the pseudo-header is rejected at another destination', () => {
    fc.assert(
      fc.property(validCase.filter((c) => c.family === 4 && c.checksum === 'rfc5798'), v4, (c, other) => {
        fc.pre(other !== c.destination);
        const bytes = encodeAdvertisement(c.advert, c);
        fc.pre(internetChecksum(bytes) !== 0); // not also a valid rfc9568 sum
        const moved = decodeAdvertisement(bytes, { ...receive(c), destination: other });
        // a different destination changes the sum unless the two differ by a multiple of 0xffff
        // (one's complement: sums equal modulo 0xffff)
        const sum = (a: string): number => internetChecksum(Buffer.from(a.split('.').map(Number))) % 0xffff;
        expect(moved.ok).toBe(sum(c.destination) === sum(other));
      }),
      fuzzParameters(),
    );
  }, FUZZ_TIMEOUT_MS);
});
