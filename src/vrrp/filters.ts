/**
 * The receive filters of one virtual router, in one place: what a received IP payload must pass
 * before the state machine hears of it. Pure except for the authenticator's replay memory, which
 * the caller owns and passes in.
 *
 *   own source ─► peer allowlist ─► members ─► codec (§7.1) ─► auth trailer (present? valid? newer?) ─► address list
 *     'own'        'notPeer'     'notMember'   DropReason     'authUnexpected' 'authMissing'          accepted, `foreign`
 *                                                             'authFailed' 'replayed'                 when it differs
 *
 * The codec's checks come before the trailer's: an advert for another VRID, or from a VRRPv2
 * router, is counted as that (`vrid`, `vrrpv2`), not as `authMissing` with a hint about a
 * keepalived or a ballast without auth on this group. With auth on, the codec reads the message
 * without its trailer (when one is there); only a message that passes it is worth an HMAC.
 *
 * The members filter (vrrp.acceptFrom, docs/auth.md) compares the source address only: anyone on
 * the segment can forge it. It keeps a stranger's adverts (another cluster on the same VRID, a
 * test box) out of the election; it is not authentication.
 *
 * RFC 9568 §7.1 (receiving): TTL 255 for multicast, version, checksum, VRID, address count and
 * interval are the codec's (packet.ts); "MAY check that the addresses match, and SHOULD log"
 * is the `foreign` flag here: such an advert still counts (a peer mid-migration), but is logged.
 */
import { decodeAdvertisement, VRRP_MULTICAST_V4, VRRP_MULTICAST_V6, type Advertisement, type DropReason } from './packet.js';
import { AUTH_TRAILER_LENGTH, hasAuthTrailer, type AdvertAuth, type AuthDropReason } from './auth.js';
import { canonicalAddress, type AddressFamily } from '../net/address.js';

/** Why the filters dropped a packet (also the drop counter's label). */
export type FilterDropReason = DropReason | AuthDropReason | 'own' | 'notPeer' | 'notMember' | 'authUnexpected';

/** A received packet, as the raw socket reports it (native.ts `ReceivedPacket`, without the ifindex). */
export interface ReceivedAdvert {
  /** The IP payload. */
  payload: Buffer;
  source: string;
  destination: string;
  /** IPv4 TTL / IPv6 hop limit. */
  ttl: number;
}

/** What the filters compare a packet with. */
export interface FilterContext {
  family: AddressFamily;
  vrid: number;
  /** Our own advert source: our packets, looped back, are dropped as `own`. */
  primaryAddress: string;
  /** Unicast: only `peers` may speak. */
  unicast: boolean;
  peers: readonly string[];
  /** acceptFrom members: only these sources (canonical text) may speak; null or absent = any. */
  members?: ReadonlySet<string> | null;
  vips: readonly string[];
  /** The verifier of authenticated adverts, or null when auth is off. Its replay memory moves forward on an accepted packet. */
  auth: AdvertAuth | null;
}

/** The outcome: the advert for the machine, or the one reason it was dropped (never an exception). */
export type FilterResult =
  | {
      ok: true;
      advert: Advertisement;
      /** The advert's address list differs from our VIPs (RFC 9568 §7.1: log it). */
      foreign: boolean;
    }
  | {
      ok: false;
      reason: FilterDropReason;
      /** The codec's detail, for a `DropReason`. */
      detail?: string;
    };

/**
 * Runs every receive filter on one packet, in the order of the diagram above.
 * @returns the decoded advert, or the drop reason; throws nothing.
 */
export function filterAdvert(p: ReceivedAdvert, ctx: FilterContext): FilterResult {
  if (p.source === ctx.primaryAddress) return { ok: false, reason: 'own' };
  if (ctx.unicast && !ctx.peers.includes(p.source)) return { ok: false, reason: 'notPeer' };
  if (ctx.members && !ctx.members.has(p.source)) return { ok: false, reason: 'notMember' };
  const payload = p.payload;
  const trailer = hasAuthTrailer(payload, ctx.family);
  const message = trailer ? payload.subarray(0, payload.length - AUTH_TRAILER_LENGTH) : payload;
  const multicast = p.destination === VRRP_MULTICAST_V4 || p.destination === VRRP_MULTICAST_V6;
  const r = decodeAdvertisement(message, { family: ctx.family, source: p.source, destination: p.destination, ttl: p.ttl, checkTtl: multicast }, ctx.vrid);
  if (!r.ok) return { ok: false, reason: r.reason, detail: r.detail };
  if (!ctx.auth && trailer) return { ok: false, reason: 'authUnexpected' };
  if (ctx.auth) {
    const a = ctx.auth.verify(payload, p.source, p.destination);
    if (!a.ok) return { ok: false, reason: a.reason };
  }
  return { ok: true, advert: r.advert, foreign: !sameAddresses(r.advert.addresses, ctx.vips) };
}

/**
 * What an operator is told, once per source, when a drop reason means a misconfiguration rather
 * than noise (the rest only count). Keys are drop reasons; `foreign` is the accepted-but-logged case.
 */
export const FILTER_WARNINGS: Partial<Record<FilterDropReason | 'foreign', string>> = {
  notPeer:
    'an advert from an address that is not in vrrp.peers was dropped (a node missing from this list, or a stranger on the VRID: this node cannot hear it, and it may hold the VIP too)',
  notMember:
    'an advert from an address that is not a member (not a backend node, not in vrrp.peers) was dropped: a stranger on this VRID, or a new node this one does not know yet (vrrp.acceptFrom: any accepts every source)',
  authUnexpected: 'an authenticated advert was dropped: that node uses vrrp.auth and this one does not (configure the same vrrp.auth.keyFile here)',
  authMissing: 'an advert without an authentication trailer was dropped (auth is on here: is the sender a keepalived, or a ballast without vrrp.auth?)',
  authFailed: 'an advert with a wrong HMAC was dropped (a different vrrp.auth key, or a forged packet)',
  replayed: 'an advert with an old sequence number was dropped as a replay (if that node restarted with its clock set back, restart this agent too)',
  vrrpv2: 'a VRRPv2 router is advertising; ballast speaks VRRPv3 only',
  foreign: 'an advert for our VRID lists other addresses than our VIPs: another group or a misconfigured peer shares this VRID',
};

/** Same set of addresses (order and text form aside). */
function sameAddresses(a: readonly string[], b: readonly string[]): boolean {
  const x = new Set(a.map(canonicalAddress));
  const y = new Set(b.map(canonicalAddress));
  return x.size === y.size && [...x].every((v) => y.has(v));
}
