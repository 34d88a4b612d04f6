/**
 * The adverts this router sends (RFC 9568 §5.1, §7.1): encoded once per change of what they
 * carry, signed with vrrp.auth, sent through the edge to the group or the unicast peers; a
 * failure is counted and logged, never thrown.
 */
import type { RateLimitedLog } from '../log/ratelimit.js';
import type { PacedAdvert } from '../native.js';
import type { AdvertAuth } from './auth.js';
import type { VrrpEdge } from './edge.js';
import type { EngineCounters, EngineOptions } from './engine-api.js';
import { encodeAdvertisement, VRRP_MULTICAST_V4, VRRP_MULTICAST_V6 } from './packet.js';

/** Encodes, signs and sends this router's adverts. */
export class AdvertSender {
  /** The last encoded advert (no auth) and what it was encoded from: an Active sends the same bytes every interval. */
  private advertCache: { priority: number; intervalCs: number; vips: readonly string[]; destination: string; pkt: Buffer }[] = [];

  /**
   * @param opts the engine's options as they are now (a reconfigure changes the VIPs, peers, interval).
   * @param edge the engine's open edge, null once closed.
   * @param counters the engine's counters: advertsSent, sendErrors.
   */
  constructor(
    private readonly opts: EngineOptions,
    private readonly edge: () => VrrpEdge | null,
    private readonly auth: AdvertAuth | null,
    private readonly counters: EngineCounters,
    private readonly limited: RateLimitedLog,
  ) {}

  /**
   * One advert, made by `encode` (signed here with vrrp.auth), to one destination. A failure
   * (encoding or sending) is counted and logged, never thrown.
   * @returns the unsigned packet (also when the send failed: the pacer repeats it), or null when
   *   it could not be made.
   */
  sendOne(destination: string, encode: () => Buffer): Buffer | null {
    const o = this.opts;
    let pkt: Buffer | null = null;
    try {
      pkt = encode();
      const edge = this.edge();
      if (!edge) throw new Error('the engine is closed');
      edge.sendAdvert(this.auth ? this.auth.sign(pkt, o.primaryAddress, destination) : pkt, destination);
      this.counters.advertsSent++;
      return pkt;
    } catch (err) {
      this.counters.sendErrors++;
      // one key per kind of error, not per peer: 252 unreachable peers are one line per window
      const e = err as Error & { code?: string };
      this.limited.log(
        'warn',
        `send:${e.code ?? e.message}`,
        { destination, error: e.message, ...(e.code ? { code: e.code } : {}), sendErrors: this.counters.sendErrors },
        'cannot send advertisement',
      );
      return pkt;
    }
  }

  /** Where adverts go: the unicast peers, or the group (224.0.0.18 / ff02::12, RFC 9568 §5.1.1.2, §5.1.2.2). */
  destinations(): readonly string[] {
    const o = this.opts;
    return o.unicast ? o.peers : [o.family === 4 ? VRRP_MULTICAST_V4 : VRRP_MULTICAST_V6];
  }

  /**
   * The advert for `destination` (the i-th of the send list) at `priority`: the same bytes as
   * last time when nothing it is made of changed (the send copies them into the kernel), so an
   * Active allocates nothing per advert but the send's own bookkeeping. @throws what
   * encodeAdvertisement throws.
   */
  encoded(i: number, priority: number, destination: string): Buffer {
    const o = this.opts;
    const c = this.advertCache[i];
    if (c && c.priority === priority && c.intervalCs === o.advertisementIntervalCs && c.vips === o.vips && c.destination === destination) return c.pkt;
    const pkt = encodeAdvertisement(
      { vrid: o.vrid, priority, maxAdvertIntervalCs: o.advertisementIntervalCs, addresses: o.vips },
      { family: o.family, checksum: o.checksum, source: o.primaryAddress, destination },
    );
    this.advertCache[i] = { priority, intervalCs: o.advertisementIntervalCs, vips: o.vips, destination, pkt };
    return pkt;
  }

  /**
   * Sends this round of adverts at `priority`, one to each destination.
   * @returns the unsigned adverts, with where they went, for the pacer.
   */
  sendRound(priority: number): PacedAdvert[] {
    const round: PacedAdvert[] = [];
    for (const [i, destination] of this.destinations().entries()) {
      const pkt = this.sendOne(destination, () => this.encoded(i, priority, destination));
      if (pkt) round.push({ message: pkt, destination });
    }
    return round;
  }

  /** The round {@link AdvertSender.sendRound} would send at `priority`, unsent. @throws what encodeAdvertisement throws. */
  round(priority: number): PacedAdvert[] {
    return this.destinations().map((destination, i) => ({ message: this.encoded(i, priority, destination), destination }));
  }

  /**
   * A hand-off's last adverts (MachineEvent `handOff`): our priority, Max Adver Int `intervalCs`,
   * sent twice to every destination (a single lost frame would cost a failover).
   */
  sendHandOff(priority: number, intervalCs: number): void {
    const o = this.opts;
    for (const destination of this.destinations()) {
      const encode = (): Buffer =>
        encodeAdvertisement(
          { vrid: o.vrid, priority, maxAdvertIntervalCs: intervalCs, addresses: o.vips },
          { family: o.family, checksum: o.checksum, source: o.primaryAddress, destination },
        );
      for (let i = 0; i < 2; i++) this.sendOne(destination, encode);
    }
  }
}
