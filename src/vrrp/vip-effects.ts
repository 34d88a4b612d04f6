/**
 * The engine's work on the VIPs beyond the machine's decisions: the address changes and announce
 * bursts queued in the order the machine asked for them ({@link VipQueue}), the announce frames
 * and bursts (gratuitous ARP, unsolicited NA), and the sockets destroyed on a released VIP.
 */
import type { RateLimitedLog } from '../log/ratelimit.js';
import { netlinkErrno } from '../vip/netlink.js';
import { gratuitousArpFrame, parseMac, unsolicitedNeighborAdvertFrame } from '../vip/frames.js';
import type { VrrpEdge } from './edge.js';
import type { EngineCounters, EngineOptions } from './engine-api.js';
import type { EngineLogLine } from './pacing.js';
import type { AnnounceReason } from './state.js';

/** How long address notifications must be quiet before the engine looks at the interface, ms (they come in bursts, ours too). */
export const ADDRESS_SETTLE_MS = 20;

/** Address changes and announce bursts, one after another, in the order they were queued. */
export class VipQueue {
  private vipQueue: Promise<void> = Promise.resolve();
  /** The first error of a job during start-up ({@link VipQueue.settled} throws it). */
  private startError: unknown = null;

  /** @param started whether start-up is over (from then on a failing job is logged, not kept). */
  constructor(
    private readonly started: () => boolean,
    private readonly limited: RateLimitedLog,
  ) {}

  /** Resolves when every job queued so far is done. */
  get idle(): Promise<void> {
    return this.vipQueue;
  }

  /** Queues one job; a failing job is logged (before start-up ends, `settled` reports it instead). */
  enqueue(job: () => Promise<void>): void {
    this.vipQueue = this.vipQueue.then(job).catch((err: unknown) => {
      if (!this.started()) {
        this.startError ??= err;
        return;
      }
      const code = netlinkErrno(err);
      this.limited.log('error', `address:${code ?? (err as Error).message}`, { error: (err as Error).message, code }, 'address change failed');
    });
  }

  /** Waits for the queue; during start-up, throws the first job error. */
  async settled(): Promise<void> {
    await this.vipQueue;
    if (this.startError !== null) throw this.startError;
  }
}

/** The announce frames of today's VIPs, their bursts, and the sockets of released VIPs. */
export class VipEffects {
  /** The announce frame of each VIP, in VIP order. */
  private frames = new Map<string, Buffer>();
  /** Sources of a lower-priority master already logged at info. */
  private readonly healLogged = new Set<string>();

  /**
   * @param opts the engine's options as they are now (a reconfigure changes the VIPs and announce settings).
   * @param edge the engine's open edge, null once closed.
   * @param current whether the Active period a burst was asked in (its epoch) still runs.
   * @param counters the engine's counters: announcementsSent.
   */
  constructor(
    private readonly opts: EngineOptions,
    private readonly edge: () => VrrpEdge | null,
    private readonly current: (epoch: number) => boolean,
    private readonly counters: EngineCounters,
    private readonly log: EngineLogLine,
    private readonly limited: RateLimitedLog,
  ) {
    this.makeFrames();
  }

  /** Re-makes the announce frames for today's VIPs (kept ones reuse theirs). */
  makeFrames(): void {
    const o = this.opts;
    const mac = parseMac(o.mac);
    const next = new Map<string, Buffer>();
    for (const v of o.vips) next.set(v, this.frames.get(v) ?? (o.family === 4 ? gratuitousArpFrame(mac, v) : unsolicitedNeighborAdvertFrame(mac, v)));
    this.frames = next;
  }

  /**
   * One announce burst (RFC 9568 §6.4.1 / §6.4.2: gratuitous ARP for IPv4, unsolicited NA for
   * IPv6): `count` frames per VIP, `spacingMs` apart; stops when the machine has left the
   * Active period the burst was asked in.
   */
  async announce(epoch: number, reason: AnnounceReason, only?: readonly string[]): Promise<void> {
    const { count, spacingMs } = this.opts.announce;
    let sent = 0;
    for (let i = 0; i < count; i++) {
      if (i > 0 && spacingMs > 0) await new Promise((r) => setTimeout(r, spacingMs));
      const edge = this.edge();
      if (!this.current(epoch) || !edge) break;
      // today's frames: a VIP removed by a reconfigure during the burst is no longer announced
      const frames = only ? only.map((v) => this.frames.get(v)).filter((f) => f !== undefined) : [...this.frames.values()];
      for (const f of frames) {
        try {
          edge.sendFrame(f);
          this.counters.announcementsSent++;
          sent++;
        } catch (err) {
          const e = err as Error & { code?: string };
          this.limited.log('warn', `announce:${e.code ?? e.message}`, { error: e.message, ...(e.code ? { code: e.code } : {}) }, 'cannot send announcement');
        }
      }
    }
    const kind = this.opts.family === 4 ? 'gratuitous ARP' : 'unsolicited neighbour advertisement';
    this.log('debug', `sent ${kind}`, { frames: sent, vips: only ?? this.opts.vips, reason });
  }

  /**
   * Connections whose local address is a VIP we no longer hold (a local client of VIP:6443, an
   * apiserver's accepted connection with `dataplane.vip: none`) can never get another packet
   * through: destroy them (sock_diag SOCK_DESTROY, the peer gets a RST) so that their clients
   * reconnect, to the new holder, at once instead of waiting out TCP retransmissions.
   */
  destroyVipSockets(vips: readonly string[]): void {
    for (const vip of vips) {
      try {
        const n = this.edge()?.destroySockets(vip) ?? 0;
        if (n > 0) this.log('info', 'connections on a released VIP destroyed (their clients reconnect to the new holder)', { vip, sockets: n });
      } catch (err) {
        this.limited.log('warn', `destroy:${vip}`, { vip, error: (err as Error).message }, 'cannot destroy the connections on a released VIP');
      }
    }
  }

  /**
   * A lower-priority master was heard while Active (a healed partition): logged once per source
   * at info, then at debug: a peer that cannot hear us (another auth key, a stale peer list)
   * stays master and would repeat this every second.
   */
  noteHealed(source: string): void {
    const first = !this.healLogged.has(source);
    this.healLogged.add(source);
    this.log(first ? 'info' : 'debug', 'heard a lower-priority master: announcing the VIPs again', { source });
  }
}
