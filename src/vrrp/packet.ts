/**
 * VRRPv3 ADVERTISEMENT codec (RFC 9568 §5), pure: bytes in, values out, no I/O.
 *
 * The payload here is the VRRP message only (what a raw IP socket for protocol 112 sends and,
 * after the IP header is stripped, receives). The IP header's TTL / hop limit, source and
 * destination come in beside it, because the receive checks (§7.1) and the checksum need them.
 *
 *     0                   1                   2                   3
 *     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *    |Version| Type  | Virtual Rtr ID|   Priority    |Count IPvX Addr|   byte 0..3
 *    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *    |(rsvd) |     Max Adver Int     |          Checksum             |   byte 4..7
 *    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *    |                                                               |
 *    +                                                               +
 *    |                       IPvX Address(es)                        |   4 bytes each (IPv4)
 *    +                                                               +   16 bytes each (IPv6)
 *    |                                                               |
 *    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *
 *    Version 3, Type 1 (ADVERTISEMENT). rsvd: 0 on send, ignored on receive (§5.2.6).
 *    Max Adver Int: 12 bits, centiseconds (§5.2.7). Count: at least 1 (§5.2.5, erratum 8299).
 *
 * The checksum (§5.2.8) is the RFC 1071 Internet checksum of the message, and the two address
 * families differ in what else it covers:
 *  - IPv6: the RFC 8200 §8.1 pseudo-header (source, destination, upper-layer length, next
 *    header 112) is prepended. Every implementation agrees on this.
 *  - IPv4: RFC 5798 said "the entire VRRP message ... and a pseudo-header as defined in
 *    Section 8.1 of [RFC2460]", which only defines an IPv6 pseudo-header. Implementations split:
 *    keepalived and Wireshark prepend the IPv4 pseudo-header (source, destination, zero,
 *    protocol 112, VRRP length); Cisco and others sum the message alone, as VRRPv2 did.
 *    RFC 9568 §5.2.8 settled it: for IPv4 the checksum covers only the VRRP message, from the
 *    Version field to the end of the last address. keepalived (2.2.7, and later versions by
 *    default) still sends the pseudo-header form; its `v3_checksum_as_v2` option switches it
 *    to the RFC 9568 form.
 * So on receive an IPv4 advert is accepted under either convention and the result says which one
 * verified ('rfc9568' = message only, 'rfc5798' = with pseudo-header); on send the caller
 * chooses. For IPv6 the mode is meaningless and ignored: both RFCs use the pseudo-header.
 *
 * Unicast note: keepalived before 1.3.6 put the multicast group, not the unicast peer, into the
 * pseudo-header of unicast adverts (its `old_unicast_checksum` option still does). This codec
 * always uses the destination it is given; a caller talking to such a peer passes 224.0.0.18.
 */
import { addressFamily, addressToBytes, bytesToAddress, type AddressFamily } from '../net/address.js';
import { internetChecksum } from '../net/checksum.js';

export type { AddressFamily } from '../net/address.js';

/** Which IPv4 checksum convention (see the file comment). Irrelevant for IPv6. */
export type ChecksumMode = 'rfc5798' | 'rfc9568';

/** The fields of a VRRPv3 ADVERTISEMENT (RFC 9568 §5.2). */
export interface Advertisement {
  /** Virtual Rtr ID, 1..255 (§5.2.3). */
  vrid: number;
  /** Priority, 0..255: 0 = the sender resigns (§5.2.4), 255 = address owner. */
  priority: number;
  /** Max Adver Int, in CENTISECONDS, 12 bits: 1..4095 (100 = 1 s) (§5.2.7). */
  maxAdvertIntervalCs: number;
  /** IPvX addresses, text form (IPv6 in RFC 5952 canonical form on decode), in packet order (§5.2.9). */
  addresses: string[];
}

/** How to build the IP-level context of an advert being sent. */
export interface EncodeOptions {
  /** 4 or 6: the family of the IP packet that carries the advert, and of every address in it. */
  family: AddressFamily;
  /** IPv4 checksum convention; ignored for IPv6. */
  checksum: ChecksumMode;
  /** IP source address (the interface's primary IPv4 address or its IPv6 link-local, §7.2). */
  source: string;
  /** IP destination: VRRP_MULTICAST_V4 / VRRP_MULTICAST_V6, or a unicast peer. */
  destination: string;
}

/** What the receiving socket saw in the IP header around the payload. */
export interface ReceiveContext {
  /** 4 or 6: the family of the IP packet the payload arrived in. */
  family: AddressFamily;
  /** IP source address, text (an IPv6 zone suffix such as `%eth0` is allowed and ignored). */
  source: string;
  /** IP destination address, text (zone suffix allowed and ignored). */
  destination: string;
  /** IPv4 TTL or IPv6 hop limit of the received packet. */
  ttl: number;
  /** true for multicast: the TTL / hop limit must then be 255 (RFC 9568 §7.1). */
  checkTtl: boolean;
}

/** Why a received payload was discarded; one stable word, for logs and a metrics label. */
export type DropReason = 'ttl' | 'length' | 'version' | 'vrrpv2' | 'type' | 'checksum' | 'addressCount' | 'interval' | 'vrid';

/** The outcome of decodeAdvertisement: never an exception. */
export type DecodeResult = { ok: true; advert: Advertisement; checksum: ChecksumMode } | { ok: false; reason: DropReason; detail: string };

/** IP protocol number of VRRP (IANA), also the pseudo-header's next-header value. */
export const VRRP_PROTOCOL = 112;
/** IPv4 multicast group for VRRP (RFC 9568 §5.1.1.2). */
export const VRRP_MULTICAST_V4 = '224.0.0.18';
/** IPv6 multicast group for VRRP (RFC 9568 §5.1.2.2). */
export const VRRP_MULTICAST_V6 = 'ff02::12';
/** The VRRP version this codec speaks. */
export const VRRP_VERSION = 3;
/** The only VRRPv3 message type: ADVERTISEMENT (§5.2.2). */
export const VRRP_TYPE_ADVERTISEMENT = 1;
/** TTL / hop limit on send, and required on multicast receive (§5.1.1.3, §5.1.2.3, §7.1). */
export const VRRP_TTL = 255;
/** Fixed part of the message, bytes. */
export const VRRP_HEADER_LENGTH = 8;
/** Largest Max Adver Int, centiseconds (12 bits). */
export const MAX_ADVER_INT_CS = 0x0fff;
/**
 * Largest IP packet (header included) encode will build: one untagged Ethernet MTU, so an advert
 * is never fragmented. IPv4 is held to 255 addresses by the count field long before that
 * (20 + 8 + 4 * 255 = 1048); IPv6 fits 90 addresses (40 + 8 + 16 * 90 = 1488).
 */
export const MAX_IP_PACKET = 1500;

const IP_HEADER_LENGTH: Record<AddressFamily, number> = { 4: 20, 6: 40 };
const ADDRESS_LENGTH: Record<AddressFamily, number> = { 4: 4, 6: 16 };

/**
 * The pseudo-header a VRRP checksum covers, or an empty buffer when it covers none.
 * IPv4 'rfc5798' (RFC 768 / 793 layout): source(4) destination(4) zero(1) protocol(1) length(2).
 * IPv6 (RFC 8200 §8.1): source(16) destination(16) length(4) zero(3) next header(1).
 * IPv4 'rfc9568': none (RFC 9568 §5.2.8).
 * @throws TypeError when a needed address is not of `family`.
 */
export function pseudoHeader(family: AddressFamily, mode: ChecksumMode, source: string, destination: string, vrrpLength: number): Buffer {
  if (family === 4 && mode === 'rfc9568') return Buffer.alloc(0);
  const src = familyBytes(source, family, 'source');
  const dst = familyBytes(destination, family, 'destination');
  if (family === 4) {
    const tail = Buffer.alloc(4);
    tail[1] = VRRP_PROTOCOL;
    tail.writeUInt16BE(vrrpLength, 2);
    return Buffer.concat([src, dst, tail]);
  }
  const tail = Buffer.alloc(8);
  tail.writeUInt32BE(vrrpLength, 0);
  tail[7] = VRRP_PROTOCOL;
  return Buffer.concat([src, dst, tail]);
}

/**
 * The checksum a VRRP message should carry (RFC 9568 §5.2.8), computed as if its checksum field
 * (bytes 6..7) were zero; the message itself is not modified.
 * @param message the VRRP message, at least 8 bytes.
 * @param mode IPv4 convention ('rfc9568' = message only, 'rfc5798' = with the IPv4 pseudo-header);
 *   ignored for IPv6, which always has the RFC 8200 pseudo-header.
 * @returns 0..0xffff.
 * @throws TypeError when `source` / `destination` are needed and are not `family` addresses;
 *   RangeError when the message is shorter than 8 bytes.
 */
export function vrrpChecksum(message: Uint8Array, family: AddressFamily, mode: ChecksumMode, source: string, destination: string): number {
  if (message.length < VRRP_HEADER_LENGTH) {
    throw new RangeError(`a VRRP message is at least ${VRRP_HEADER_LENGTH} bytes, got ${message.length}`);
  }
  const zeroed = Buffer.from(message);
  zeroed.writeUInt16BE(0, 6);
  return internetChecksum(pseudoHeader(family, mode, source, destination, message.length), zeroed);
}

/**
 * Builds a VRRPv3 ADVERTISEMENT (RFC 9568 §5.1, §7.2): the VRRP message only, checksum filled in,
 * ready for a raw IP socket (protocol 112, TTL / hop limit 255) to send.
 *
 * RFC 9568 §5.2.9 wants an IPv6 link-local address first in an IPv6 advert; that is the caller's
 * policy, not checked here, because keepalived does not do it (it sends only the configured VIPs)
 * and ballast must be able to speak exactly as keepalived does.
 *
 * @param adv vrid 1..255, priority 0..255, maxAdvertIntervalCs 1..4095 (CENTISECONDS),
 *   addresses: 1..255 addresses of `opts.family`, text.
 * @param opts family, IPv4 checksum convention, and the IP source / destination the packet will
 *   carry (they enter the checksum: a different destination means a different checksum).
 * @returns the message: 8 + 4n bytes (IPv4) or 8 + 16n bytes (IPv6).
 * @throws TypeError naming the field for a value of the wrong type, an address that is not of
 *   `opts.family` (zone suffixes are refused), a bad family or checksum mode;
 *   RangeError naming the field for vrid / priority / maxAdvertIntervalCs out of range, no
 *   addresses, more than 255, or an IP packet over MAX_IP_PACKET (1500) bytes.
 */
export function encodeAdvertisement(adv: Advertisement, opts: EncodeOptions): Buffer {
  if (opts === null || typeof opts !== 'object') throw new TypeError('opts must be an object');
  const family = opts.family;
  if (family !== 4 && family !== 6) throw new TypeError(`opts.family must be 4 or 6, got ${show(family)}`);
  const mode = opts.checksum;
  if (mode !== 'rfc5798' && mode !== 'rfc9568') {
    throw new TypeError(`opts.checksum must be 'rfc5798' or 'rfc9568', got ${show(mode)}`);
  }
  if (adv === null || typeof adv !== 'object') throw new TypeError('adv must be an object');
  checkInteger(adv.vrid, 'vrid', 1, 255);
  checkInteger(adv.priority, 'priority', 0, 255);
  checkInteger(adv.maxAdvertIntervalCs, 'maxAdvertIntervalCs', 1, MAX_ADVER_INT_CS);
  if (!Array.isArray(adv.addresses)) throw new TypeError('addresses must be an array of address strings');
  const count = adv.addresses.length;
  if (count === 0) throw new RangeError('addresses must hold at least one address (RFC 9568 §5.2.5)');
  if (count > 255) throw new RangeError(`addresses: at most 255 fit in Count IPvX Addr, got ${count}`);
  const length = VRRP_HEADER_LENGTH + ADDRESS_LENGTH[family] * count;
  if (IP_HEADER_LENGTH[family] + length > MAX_IP_PACKET) {
    throw new RangeError(`addresses: ${count} IPv${family} addresses make a ${IP_HEADER_LENGTH[family] + length}-byte IP packet, ` + `over ${MAX_IP_PACKET}`);
  }
  // check the pseudo-header addresses before building anything
  const pseudo = pseudoHeader(family, mode, opts.source, opts.destination, length);
  if (family === 4 && mode === 'rfc9568') {
    // not in the checksum, but a caller passing garbage here has a bug worth hearing about
    familyBytes(opts.source, family, 'source');
    familyBytes(opts.destination, family, 'destination');
  }

  const out = Buffer.alloc(length);
  out[0] = (VRRP_VERSION << 4) | VRRP_TYPE_ADVERTISEMENT;
  out[1] = adv.vrid;
  out[2] = adv.priority;
  out[3] = count;
  out.writeUInt16BE(adv.maxAdvertIntervalCs, 4); // rsvd (top 4 bits) stays 0: §5.2.6
  adv.addresses.forEach((address, i) => {
    familyBytes(address, family, `addresses[${i}]`).copy(out, VRRP_HEADER_LENGTH + i * ADDRESS_LENGTH[family]);
  });
  out.writeUInt16BE(internetChecksum(pseudo, out), 6);
  return out;
}

/**
 * Parses and validates a received VRRP message (RFC 9568 §7.1). Never throws, whatever the bytes
 * or the context: every failure is a value.
 *
 * Checks, in this order (the first failure is the one reported):
 *  1. 'ttl'          ctx.checkTtl and TTL / hop limit != 255 (§7.1)
 *  2. 'length'       empty payload
 *  3. 'vrrpv2' / 'version'   version != 3 (§7.1); version 2 is told apart because keepalived
 *                    speaks it by default and an operator should hear "peer is VRRPv2"
 *  4. 'type'         type != 1 (§5.2.2)
 *  5. 'length'       shorter than 8, or not exactly 8 + 4n (IPv4) / 8 + 16n (IPv6) bytes for the
 *                    count n it declares: the complete packet, and nothing after it (§7.1)
 *  6. 'checksum'     neither convention verifies (IPv4), the pseudo-header sum fails (IPv6) (§5.2.8)
 *  7. 'addressCount' count is 0 (§5.2.5, erratum 8299)
 *  8. 'vrid'         VRID 0, or != expectedVrid when given (§7.1)
 *  9. 'interval'     Max Adver Int is 0 (§7.1, erratum 8301)
 * A payload that is not a Uint8Array, or a missing context, is 'length'; a context family other
 * than 4 / 6 is 'version'; a context address that is not of the family fails the checks that
 * need it ('checksum'). The rsvd bits are ignored (§5.2.6). The owner check (priority 255 received by the owner) and the
 * address-list check (§7.1 MAY) belong to the caller, which knows its configuration.
 *
 * @param payload the VRRP message (the IP payload; no IP header).
 * @param ctx what the IP header said: family, source, destination, TTL / hop limit, and whether
 *   the TTL must be 255 (multicast).
 * @param expectedVrid the VRID configured on the receiving interface, 1..255, if the caller wants
 *   other VRIDs reported as 'vrid'.
 * @returns `{ ok: true, advert, checksum }` with the convention that verified (IPv6: always
 *   'rfc9568'; IPv4 if both happen to verify: 'rfc9568'), or `{ ok: false, reason, detail }`.
 */
export function decodeAdvertisement(payload: Buffer, ctx: ReceiveContext, expectedVrid?: number): DecodeResult {
  if (!(payload instanceof Uint8Array)) return drop('length', 'payload is not a byte buffer');
  if (ctx === null || typeof ctx !== 'object') return drop('length', 'no receive context');
  if (ctx.family !== 4 && ctx.family !== 6) {
    return drop('version', `receive context family must be 4 or 6, got ${show(ctx.family)}`);
  }
  const family: AddressFamily = ctx.family;
  const hop = family === 4 ? 'TTL' : 'hop limit';
  if (ctx.checkTtl && ctx.ttl !== VRRP_TTL) return drop('ttl', `${hop} ${show(ctx.ttl)}, must be ${VRRP_TTL}`);

  const length = payload.length;
  if (length === 0) return drop('length', 'empty payload');
  const version = payload[0]! >> 4;
  const type = payload[0]! & 0x0f;
  if (version === 2) {
    const vrid = length > 1 ? ` for VRID ${payload[1]!}` : '';
    const priority = length > 2 ? `, priority ${payload[2]!}` : '';
    return drop('vrrpv2', `VRRPv2 advertisement${vrid}${priority}; ballast speaks VRRPv3 only`);
  }
  if (version !== VRRP_VERSION) return drop('version', `version ${version}, must be ${VRRP_VERSION}`);
  if (type !== VRRP_TYPE_ADVERTISEMENT) return drop('type', `type ${type}, must be ${VRRP_TYPE_ADVERTISEMENT} (ADVERTISEMENT)`);
  if (length < VRRP_HEADER_LENGTH) return drop('length', `${length} bytes, shorter than the ${VRRP_HEADER_LENGTH}-byte header`);

  const count = payload[3]!;
  const size = ADDRESS_LENGTH[family];
  const expected = VRRP_HEADER_LENGTH + size * count;
  if (length !== expected) {
    return drop(
      'length',
      `${length} bytes, but ${count} IPv${family} address${count === 1 ? '' : 'es'} make ${expected}` +
        (length > expected ? ' (trailing bytes)' : ' (truncated)'),
    );
  }

  const verified = verifyChecksum(payload, family, ctx.source, ctx.destination);
  if (!verified.ok) return drop('checksum', verified.detail);

  if (count === 0) return drop('addressCount', 'Count IPvX Addr is 0');
  const vrid = payload[1]!;
  if (vrid === 0) return drop('vrid', 'VRID 0 is not a valid VRID');
  if (expectedVrid !== undefined && vrid !== expectedVrid) {
    return drop('vrid', `VRID ${vrid}, expected ${show(expectedVrid)}`);
  }
  const interval = ((payload[4]! << 8) | payload[5]!) & MAX_ADVER_INT_CS;
  if (interval === 0) return drop('interval', 'Max Adver Int is 0');

  const addresses: string[] = [];
  for (let i = 0; i < count; i++) {
    const at = VRRP_HEADER_LENGTH + i * size;
    addresses.push(bytesToAddress(payload.subarray(at, at + size)));
  }
  return {
    ok: true,
    advert: { vrid, priority: payload[2]!, maxAdvertIntervalCs: interval, addresses },
    checksum: verified.mode,
  };
}

type Verified = { ok: true; mode: ChecksumMode } | { ok: false; detail: string };

/** Tries the conventions that apply to `family`; never throws (a bad context address fails the check). */
function verifyChecksum(message: Uint8Array, family: AddressFamily, source: unknown, destination: unknown): Verified {
  const received = `0x${hex16((message[6]! << 8) | message[7]!)}`;
  const src = contextAddress(source, family);
  const dst = contextAddress(destination, family);
  const missing = src === null ? `source ${show(source)}` : dst === null ? `destination ${show(destination)}` : null;
  const expectedWith = (mode: ChecksumMode): string =>
    missing === null ? `0x${hex16(vrrpChecksum(message, family, mode, src!, dst!))}` : `unknown: ${missing} is not IPv${family}`;

  if (family === 6) {
    if (missing === null && internetChecksum(pseudoHeader(6, 'rfc9568', src!, dst!, message.length), message) === 0) {
      return { ok: true, mode: 'rfc9568' };
    }
    return { ok: false, detail: `checksum ${received}, expected ${expectedWith('rfc9568')} (RFC 8200 pseudo-header)` };
  }
  if (internetChecksum(message) === 0) return { ok: true, mode: 'rfc9568' };
  if (missing === null && internetChecksum(pseudoHeader(4, 'rfc5798', src!, dst!, message.length), message) === 0) {
    return { ok: true, mode: 'rfc5798' };
  }
  return {
    ok: false,
    detail:
      `checksum ${received} matches neither convention: rfc9568 (no pseudo-header) expects ` +
      `${expectedWith('rfc9568')}, rfc5798 (IPv4 pseudo-header) expects ${expectedWith('rfc5798')}`,
  };
}

/** A receive-context address without its zone suffix, or null when it is not of `family`. */
function contextAddress(address: unknown, family: AddressFamily): string | null {
  if (typeof address !== 'string') return null;
  const percent = family === 6 ? address.indexOf('%') : -1;
  const bare = percent >= 0 ? address.slice(0, percent) : address;
  return addressFamily(bare) === family ? bare : null;
}

function familyBytes(address: unknown, family: AddressFamily, field: string): Buffer {
  if (typeof address !== 'string' || addressFamily(address) !== family) {
    throw new TypeError(`${field} must be an IPv${family} address, got ${show(address)}`);
  }
  return addressToBytes(address);
}

function checkInteger(value: unknown, field: string, min: number, max: number): void {
  if (typeof value !== 'number') throw new TypeError(`${field} must be a number, got ${typeof value}`);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`${field} must be an integer in ${min}..${max}, got ${value}`);
  }
}

function drop(reason: DropReason, detail: string): DecodeResult {
  return { ok: false, reason, detail };
}

/** A value for a message; never throws (JSON.stringify does on a BigInt, String on a null-prototype object). */
function show(value: unknown): string {
  try {
    return typeof value === 'string' ? JSON.stringify(value) : String(value);
  } catch {
    return `<${typeof value}>`;
  }
}

function hex16(n: number): string {
  return n.toString(16).padStart(4, '0');
}
