/**
 * Authenticated adverts between ballast nodes (optional, `vrrp.auth.keyFile`): an HMAC-SHA256
 * trailer after the VRRPv3 message, with a sequence number for replay protection. The format is
 * described for operators and other implementers in docs/auth.md.
 *
 * RFC 9568 has no authentication (§9: VRRPv3 dropped VRRPv2's, relying on TTL 255 on the link).
 * With unicast peers the TTL check cannot apply, so anyone who can route a packet to a node can
 * inject adverts; the trailer closes that. The idea of an HMAC over the advert follows
 * keepalived's auth_hmac work; the layout and rules here are ballast's own, so a keepalived peer
 * cannot take part while auth is on (which is why it is off by default).
 *
 * Trailer (44 bytes, after the VRRP message the IP payload carries):
 *
 *    0      1      2      3      4 .............. 11   12 ........................ 43
 *   +------+------+------+------+-------------------+------------------------------+
 *   | 0xBA | 0x01 |  reserved 0 |  sequence (u64)   |  HMAC-SHA256 (32 bytes)      |
 *   +------+------+------+------+-------------------+------------------------------+
 *
 * HMAC input, in order: the family (1 byte: 4 or 6), the IP source address (4 or 16 bytes), the
 * IP destination address (4 or 16 bytes), the VRRP message (header and addresses, checksum
 * included), then trailer bytes 0..11. Binding source and destination means a captured advert
 * cannot be re-sent under another node's address or to another peer.
 *
 * Sequence: the high 32 bits are the sender's wall-clock second when its agent started, the low
 * 32 bits count the adverts it sent since (a wrap moves to the next second). A receiver accepts a
 * source's advert only if its sequence is greater than the last one it accepted from that source;
 * anything else is `replayed`. The receiver's memory is per process: a restarted receiver accepts
 * the next advert of each source as its new baseline.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { AUTH_KEY_MIN_LENGTH } from '../config/limits.js';
import { addressToBytes } from '../net/address.js';

/** Trailer length in bytes. */
export const AUTH_TRAILER_LENGTH = 44;
// the shortest key accepted is a limit of the configuration (config/limits.ts), which checks key files
export { AUTH_KEY_MIN_LENGTH };
const MAGIC = 0xba;
const VERSION = 1;
const MAC_OFFSET = 12;

/** Why an advert failed authentication (also the drop counter's name). */
export type AuthDropReason = 'authMissing' | 'authFailed' | 'replayed';

export type AuthResult = { ok: true; message: Buffer; sequence: bigint } | { ok: false; reason: AuthDropReason };

function mac(key: Buffer, family: 4 | 6, source: string, destination: string, message: Uint8Array, head: Uint8Array): Buffer {
  return createHmac('sha256', key)
    .update(Uint8Array.of(family))
    .update(addressToBytes(source))
    .update(addressToBytes(destination))
    .update(message)
    .update(head)
    .digest();
}

/** The VRRP message length the header promises: 8 + 4n (IPv4) or 8 + 16n (IPv6); -1 if too short to say. */
function messageLength(payload: Uint8Array, family: 4 | 6): number {
  if (payload.length < 8) return -1;
  return 8 + payload[3]! * (family === 4 ? 4 : 16);
}

/**
 * Whether an IP payload is an advert followed by this trailer (magic and version), for a node
 * without auth to say why it drops such adverts instead of calling them malformed.
 */
export function hasAuthTrailer(payload: Uint8Array, family: 4 | 6): boolean {
  const n = messageLength(payload, family);
  return n >= 0 && payload.length === n + AUTH_TRAILER_LENGTH && payload[n] === MAGIC && payload[n + 1] === VERSION;
}

/**
 * Signs and verifies adverts with the shared keys, and remembers each source's last sequence.
 */
export class AdvertAuth {
  private readonly keys: Buffer[];
  /** The next sequence number of this sender's own counter (high half epoch, low half count). */
  private sequence: bigint;
  /** Where sequence numbers come from when another counter is shared ({@link AdvertAuth.shareSequence}). */
  private take: (() => bigint) | null = null;
  private readonly last = new Map<string, bigint>();

  /**
   * @param keys the shared secret(s), each at least {@link AUTH_KEY_MIN_LENGTH} bytes: the first
   *   signs, every one verifies (a key rotation: see docs/auth.md).
   * @param family the group's address family.
   * @param startSeconds wall-clock seconds since the Unix epoch at start (the sequence's high half).
   * @throws RangeError if there is no key, or one is shorter than {@link AUTH_KEY_MIN_LENGTH} bytes.
   */
  constructor(
    keys: Uint8Array | readonly Uint8Array[],
    private readonly family: 4 | 6,
    startSeconds = Math.floor(Date.now() / 1000),
  ) {
    const list = keys instanceof Uint8Array ? [keys] : [...keys];
    if (list.length === 0) throw new RangeError('at least one auth key is needed');
    for (const key of list) {
      if (key.length < AUTH_KEY_MIN_LENGTH) throw new RangeError(`the auth key must be at least ${AUTH_KEY_MIN_LENGTH} bytes, got ${key.length}`);
    }
    this.keys = list.map((k) => Buffer.from(k));
    this.sequence = BigInt(startSeconds >>> 0) << 32n;
  }

  /** The next sequence number this sender's own counter will give (before {@link AdvertAuth.shareSequence}). */
  nextSequence(): bigint {
    return this.sequence;
  }

  /** The key that signs (the first). */
  signingKey(): Buffer {
    return this.keys[0]!;
  }

  /**
   * From now on, takes each sequence number from `take` (the advert pacer's counter, which its
   * own signed sends share: native/advert_pacer.h), which must continue from
   * {@link AdvertAuth.nextSequence}.
   */
  shareSequence(take: () => bigint): void {
    this.take = take;
  }

  /** The sequence for the next advert: the low half counts; its wrap carries into the high half. */
  private nextToUse(): bigint {
    if (this.take) return this.take();
    const s = this.sequence;
    this.sequence = (s + 1n) & 0xffff_ffff_ffff_ffffn;
    return s;
  }

  /**
   * The IP payload to send: `message` followed by its trailer. Each call uses a new sequence.
   * @param message an encoded VRRP advert (header and addresses).
   */
  sign(message: Uint8Array, source: string, destination: string): Buffer {
    const head = Buffer.alloc(MAC_OFFSET);
    head[0] = MAGIC;
    head[1] = VERSION;
    head.writeBigUInt64BE(this.nextToUse(), 4);
    return Buffer.concat([message, head, mac(this.keys[0]!, this.family, source, destination, message, head)]);
  }

  /**
   * Checks a received IP payload: trailer present and well formed, HMAC right, sequence newer
   * than the last accepted from `source`. Only a packet that passes all three moves the source's
   * sequence forward.
   * @returns the VRRP message without its trailer, or why the packet is dropped.
   */
  verify(payload: Uint8Array, source: string, destination: string): AuthResult {
    const n = messageLength(payload, this.family);
    if (n < 0 || payload.length !== n + AUTH_TRAILER_LENGTH) return { ok: false, reason: 'authMissing' };
    const head = payload.subarray(n, n + MAC_OFFSET);
    if (head[0] !== MAGIC || head[1] !== VERSION) return { ok: false, reason: 'authMissing' };
    const message = payload.subarray(0, n);
    const got = payload.subarray(n + MAC_OFFSET);
    let matched = false;
    try {
      for (const key of this.keys) if (timingSafeEqual(mac(key, this.family, source, destination, message, head), got)) matched = true;
    } catch {
      return { ok: false, reason: 'authFailed' };
    }
    if (!matched) return { ok: false, reason: 'authFailed' };
    const sequence = Buffer.from(head).readBigUInt64BE(4);
    const prev = this.last.get(source);
    if (prev !== undefined && sequence <= prev) return { ok: false, reason: 'replayed' };
    this.last.set(source, sequence);
    return { ok: true, message: Buffer.from(message), sequence };
  }
}
