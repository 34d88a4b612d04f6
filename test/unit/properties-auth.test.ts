/**
 * Property-based tests of the advert auth trailer (src/vrrp/auth.ts, docs/auth.md): verify never throws on any bytes; sign then verify accepts; a single flipped bit of the
 * signed payload (message or trailer), another source or destination, or a wrong key is rejected.
 * `npm run fuzz` runs each property 1,000,000 times (test/support/fuzz.ts).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bytesToAddress } from '../../src/net/address.js';
import { AdvertAuth, AUTH_KEY_MIN_LENGTH, AUTH_TRAILER_LENGTH } from '../../src/vrrp/auth.js';
import { encodeAdvertisement } from '../../src/vrrp/packet.js';
import { FUZZ_TIMEOUT_MS, fuzzParameters } from '../support/fuzz.js';

const addressOf = (family: 4 | 6): fc.Arbitrary<string> =>
  fc.uint8Array({ minLength: family === 4 ? 4 : 16, maxLength: family === 4 ? 4 : 16 }).map((b) => bytesToAddress(b));
const key = fc.uint8Array({ minLength: AUTH_KEY_MIN_LENGTH, maxLength: 64 });
const start = fc.integer({ min: 0, max: 0xffffffff });

/** A signed advert: family, key, addresses, the VRRP message and the payload signed for it. */
const signedCase = fc.constantFrom<4 | 6>(4, 6).chain((family) =>
  fc
    .record({
      family: fc.constant(family),
      key,
      start,
      source: addressOf(family),
      destination: addressOf(family),
      vrid: fc.integer({ min: 1, max: 255 }),
      priority: fc.integer({ min: 0, max: 255 }),
      interval: fc.integer({ min: 1, max: 4095 }),
      addresses: fc.array(addressOf(family), { minLength: 1, maxLength: family === 4 ? 20 : 8 }),
    })
    .map((c) => {
      const message = encodeAdvertisement(
        { vrid: c.vrid, priority: c.priority, maxAdvertIntervalCs: c.interval, addresses: c.addresses },
        { family, checksum: 'rfc9568', source: c.source, destination: c.destination },
      );
      const payload = new AdvertAuth(c.key, family, c.start).sign(message, c.source, c.destination);
      return { ...c, message, payload };
    }),
);

describe('auth trailer properties', () => {
  it(
    'verify never throws on any bytes, and accepts none without the key',
    () => {
      fc.assert(
        fc.property(
          fc.constantFrom<4 | 6>(4, 6).chain((family) => fc.record({ family: fc.constant(family), source: addressOf(family), destination: addressOf(family) })),
          key,
          fc.oneof(
            fc.uint8Array({ maxLength: 100 }),
            // the right length for the count it declares, and the trailer's magic and version
            fc.tuple(fc.integer({ min: 0, max: 6 }), fc.uint8Array({ minLength: 200, maxLength: 200 })).map(([n, r]) => {
              const b = Buffer.from(r);
              b[3] = n;
              return b;
            }),
          ),
          (ctx, k, raw) => {
            const bytes = Buffer.from(raw);
            // shape a prefix of the random bytes into the length the count promises, with the magic
            const n = bytes.length >= 8 ? 8 + bytes[3]! * (ctx.family === 4 ? 4 : 16) : -1;
            if (n >= 0 && bytes.length >= n + AUTH_TRAILER_LENGTH) {
              bytes[n] = 0xba;
              bytes[n + 1] = 0x01;
            }
            const shaped = n >= 0 && bytes.length >= n + AUTH_TRAILER_LENGTH ? bytes.subarray(0, n + AUTH_TRAILER_LENGTH) : bytes;
            for (const payload of [Buffer.from(raw), shaped]) {
              const result = new AdvertAuth(k, ctx.family).verify(payload, ctx.source, ctx.destination);
              // a random 32-byte HMAC matching is a 2^-256 event
              expect(result.ok).toBe(false);
              if (!result.ok) expect(['authMissing', 'authFailed']).toContain(result.reason);
            }
          },
        ),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    'sign then verify accepts, returning the message and the sequence',
    () => {
      fc.assert(
        fc.property(signedCase, (c) => {
          expect(c.payload.length).toBe(c.message.length + AUTH_TRAILER_LENGTH);
          const result = new AdvertAuth(c.key, c.family).verify(c.payload, c.source, c.destination);
          expect(result).toEqual({ ok: true, message: c.message, sequence: BigInt(c.start) << 32n });
        }),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    'any single flipped bit of the message or the trailer is rejected',
    () => {
      fc.assert(
        fc.property(signedCase, fc.nat(), fc.integer({ min: 0, max: 7 }), (c, at, bit) => {
          const bytes = Buffer.from(c.payload);
          bytes[at % bytes.length]! ^= 1 << bit;
          const result = new AdvertAuth(c.key, c.family).verify(bytes, c.source, c.destination);
          expect(result.ok).toBe(false);
        }),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    'a wrong key, another source or another destination is rejected as authFailed',
    () => {
      fc.assert(
        fc.property(signedCase, key, fc.integer({ min: 0, max: 2 }), (c, other, what) => {
          let verifier = new AdvertAuth(c.key, c.family);
          let { source, destination } = c;
          const flip = (a: string): string => {
            const b = Buffer.from(a.includes(':') ? new Uint8Array(16) : new Uint8Array(4));
            return a === bytesToAddress(b) ? bytesToAddress(b.fill(1)) : bytesToAddress(b);
          };
          if (what === 0) {
            fc.pre(!Buffer.from(other).equals(Buffer.from(c.key)));
            verifier = new AdvertAuth(other, c.family);
          } else if (what === 1) source = flip(source);
          else destination = flip(destination);
          expect(verifier.verify(c.payload, source, destination)).toEqual({ ok: false, reason: 'authFailed' });
        }),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );
});
