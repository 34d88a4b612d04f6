/**
 * The election engine: one VRRP virtual router with its effects. It runs inside a
 * `worker_threads` worker (see worker.ts) so that a stalled main thread (TLS handshakes, GC, a
 * Kubernetes list) never delays an advert or fires a Master_Down_Timer late.
 *
 *   raw socket ──► codec (§7.1 checks) ──► VrrpMachine ──► actions
 *                                             ▲   │  send ──► codec ──► raw socket
 *   timers (monotonic) ───── tick ────────────┘   │  transition ──► VIPs (rtnetlink), announce (packet socket)
 *   rtnetlink link events ── linkUp/linkDown ─────┘
 *
 * Time is `performance.now()` (monotonic ms); the wall clock is used only to print `since`.
 */
import { performance } from 'node:perf_hooks';
import { encodeAdvertisement, decodeAdvertisement, VRRP_MULTICAST_V4, VRRP_MULTICAST_V6, type DropReason } from './packet.js';
import { VrrpMachine, type MachineAction, type MachineEvent, type VrrpState } from './state.js';
import { PacketSocket, VrrpSocket, destroySockets, type ReceivedPacket } from '../native.js';
import { addVip, delVip, netlinkErrno, openRtnl, type RtnlSocket } from '../vip/netlink.js';
import { gratuitousArpFrame, parseMac, unsolicitedNeighborAdvertFrame } from '../vip/frames.js';
import { bytesToAddress, canonicalAddress, compareAddresses, type AddressFamily } from '../net/address.js';
import { AdvertAuth, hasAuthTrailer, type AuthDropReason } from './auth.js';

const AUTH_DROP_TEXT: Record<AuthDropReason, string> = {
  authMissing: 'an advert without an authentication trailer was dropped (auth is on here: is the sender a keepalived, or a ballast without vrrp.auth?)',
  authFailed: 'an advert with a wrong HMAC was dropped (a different vrrp.auth key, or a forged packet)',
  replayed: 'an advert with an old sequence number was dropped as a replay (if that node restarted with its clock set back, restart this agent too)',
};

/** Everything the engine needs, already resolved and validated by the main thread (structured-clone safe). */
export interface EngineOptions {
  vrid: number;
  /** 1..255. */
  priority: number;
  /** Advertisement_Interval, centiseconds. */
  advertisementIntervalCs: number;
  preempt: boolean;
  /** ms. */
  preemptDelayMs: number;
  checksum: 'rfc5798' | 'rfc9568';
  /**
   * Unicast: adverts go to `peers` only, and adverts from any other source are dropped
   * (`notPeer`); an empty list is a single node that sends to nobody. Otherwise multicast to
   * 224.0.0.18 / ff02::12 and `peers` is empty.
   */
  unicast: boolean;
  peers: string[];
  /**
   * Shared keys of authenticated adverts (docs/auth.md; the first signs, all verify), or null for plain RFC 9568 adverts.
   * With a key, adverts without a valid trailer are dropped (`authMissing`, `authFailed`, `replayed`).
   */
  authKeys: Uint8Array[] | null;
  vips: string[];
  family: AddressFamily;
  ifname: string;
  ifindex: number;
  /** "aa:bb:cc:dd:ee:ff" */
  mac: string;
  /** The source of our adverts: IPv4 primary address or IPv6 link-local address. */
  primaryAddress: string;
  /**
   * Gratuitous ARP / unsolicited NA on becoming Active: frames per VIP, ms between them, ms to a
   * second burst (0 = none), and ms between refresh bursts while Active (0 = none).
   */
  announce: { count: number; spacingMs: number; repeatAfterMs: number; refreshMs: number };
  /** Valid lifetime of the VIPs, ms (0 = permanent); renewed every third of it while Active. */
  vipLifetimeMs: number;
  /** Start with preemption held (see MachineEvent `preemptHold`) until the policy releases it. */
  preemptHoldAtStart: boolean;
  /** Whether the link was up (IFF_UP and IFF_RUNNING) when the main thread looked. */
  linkRunning: boolean;
  /** Priority 255: the VIPs are this node's own addresses; the engine never adds or removes them. */
  owner: boolean;
}

/** What the engine reports about itself. */
export interface EngineStatus {
  state: VrrpState;
  vrid: number;
  priority: number;
  effectivePriority: number;
  masterAddress: string | null;
  masterPriority: number | null;
  /** ISO 8601 wall-clock time when the current state was entered. */
  since: string;
  /** Master_Adver_Interval in ms (what the Active router advertises). */
  masterAdverIntervalMs: number;
  masterDownIntervalMs: number;
  skewTimeMs: number;
  vipsHeld: boolean;
  counters: EngineCounters;
}

export interface EngineCounters {
  advertsSent: number;
  advertsReceived: number;
  sendErrors: number;
  /** Received packets dropped, by reason (the codec's §7.1 checks, plus `notPeer`, `own`, `malformedIpHeader`). */
  dropped: Record<string, number>;
  transitions: number;
  announcementsSent: number;
  /** Valid adverts for our VRID whose address list differs from our VIPs (RFC 9568 §7.1: log it). */
  foreign: number;
}

/** Events the engine emits (to the main thread, for logs, /status and metrics). */
export type EngineEvent =
  | { type: 'transition'; from: VrrpState; to: VrrpState; reason: string; detail?: string; previousMaster?: string; at: string }
  | { type: 'log'; level: 'debug' | 'info' | 'warn' | 'error'; msg: string; fields?: Record<string, unknown> }
  /** The interface was deleted: the engine cannot go on (the agent exits so its supervisor restarts it). */
  | { type: 'interfaceGone'; ifname: string };

/**
 * One VRRP virtual router bound to one interface. Create with {@link VrrpEngine.start}, stop
 * with {@link VrrpEngine.stop}.
 */
export class VrrpEngine {
  private readonly machine: VrrpMachine;
  private socket: VrrpSocket | null = null;
  private packets: PacketSocket | null = null;
  private rtnl: RtnlSocket | null = null;
  private timer: NodeJS.Timeout | null = null;
  private repeatTimer: NodeJS.Timeout | null = null;
  /** While Active: lifetime renewals and refresh bursts. */
  private renewTimer: NodeJS.Timeout | null = null;
  private refreshTimer: NodeJS.Timeout | null = null;
  private lastHealAnnounce = -Infinity;
  private readonly healLogged = new Set<string>();
  /** Address changes run one after another, in the order the machine asked for them. */
  private vipQueue: Promise<void> = Promise.resolve();
  private vipsHeld = false;
  private stopped = false;
  private readonly auth: AdvertAuth | null;
  private readonly counters: EngineCounters = {
    advertsSent: 0,
    advertsReceived: 0,
    sendErrors: 0,
    dropped: {},
    transitions: 0,
    announcementsSent: 0,
    foreign: 0,
  };

  private constructor(
    private readonly opts: EngineOptions,
    private readonly emit: (ev: EngineEvent) => void,
  ) {
    this.machine = new VrrpMachine({
      vrid: opts.vrid,
      priority: opts.priority,
      advertisementIntervalCs: opts.advertisementIntervalCs,
      preempt: opts.preempt,
      preemptDelayMs: opts.preemptDelayMs,
      primaryAddress: opts.primaryAddress,
    });
    this.auth = opts.authKeys ? new AdvertAuth(opts.authKeys, opts.family) : null;
  }

  /**
   * Removes VIPs left on the interface by an earlier run, opens the sockets, joins the group
   * and starts the machine (RFC 9568 §6.4.1 Startup).
   * @throws Error with `code` (errno name) and `syscall` when a socket cannot be opened.
   */
  static async start(opts: EngineOptions, emit: (ev: EngineEvent) => void): Promise<VrrpEngine> {
    const e = new VrrpEngine(opts, emit);
    try {
      await e.open();
    } catch (err) {
      e.closeSockets();
      throw err;
    }
    return e;
  }

  private async open(): Promise<void> {
    const o = this.opts;
    this.rtnl = openRtnl();
    if (!o.owner) {
      // a VIP still on the interface from an earlier run (killed agent) would make two holders
      const present = new Set((await this.vipsOnInterface()).filter((v) => o.vips.includes(v)));
      for (const vip of present) {
        await delVip(this.rtnl, o.ifindex, vip);
        this.log('warn', 'removed a VIP left on the interface by an earlier run', { vip, interface: o.ifname });
      }
    }
    this.packets = PacketSocket.open(o.ifname);
    this.socket = VrrpSocket.open(
      { family: o.family, ifname: o.ifname, sourceAddress: o.primaryAddress },
      (p) => this.onPacket(p),
      (err) => this.log('error', 'VRRP socket error', { code: err.code, syscall: err.syscall, error: err.message }),
    );
    if (!o.unicast) this.socket.joinGroup();
    this.watchNetlink();
    if (o.preemptHoldAtStart) this.feed({ type: 'preemptHold', now: performance.now(), hold: true });
    if (!o.linkRunning) this.feed({ type: 'linkDown', now: performance.now() });
    this.feed({ type: 'startup', now: performance.now() });
  }

  /** Lowers or restores the priority we advertise (policy). 1..254; a no-op for the owner (255). */
  setPriority(priority: number): void {
    if (this.opts.owner) return;
    this.feed({ type: 'priority', now: performance.now(), priority });
  }

  /** Holds (true) or releases preemption of a lower-priority Active router; see MachineEvent `preemptHold`. */
  setPreemptHold(hold: boolean): void {
    this.feed({ type: 'preemptHold', now: performance.now(), hold });
  }

  /** A snapshot for `/status`. */
  status(): EngineStatus {
    const s = this.machine.snapshot();
    const stats = this.socket?.stats();
    const dropped = { ...this.counters.dropped };
    if (stats && stats.malformedIpHeader > 0) dropped.malformedIpHeader = stats.malformedIpHeader;
    return {
      state: s.state,
      vrid: this.opts.vrid,
      priority: s.priority,
      effectivePriority: s.effectivePriority,
      masterAddress: s.masterAddress,
      masterPriority: s.masterPriority,
      since: new Date(performance.timeOrigin + s.since).toISOString(),
      masterAdverIntervalMs: s.masterAdverIntervalCs * 10,
      masterDownIntervalMs: s.masterDownIntervalMs,
      skewTimeMs: s.skewTimeMs,
      vipsHeld: this.vipsHeld,
      counters: { ...this.counters, dropped },
    };
  }

  /**
   * RFC 9568 §6.4.3 Shutdown: an Active router sends priority 0 (so a Backup takes over after
   * Skew_Time), then the VIPs are removed and every socket closed. Idempotent.
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.feed({ type: 'shutdown', now: performance.now() });
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.clearActiveTimers();
    await this.vipQueue;
    this.closeSockets();
  }

  private closeSockets(): void {
    this.socket?.close();
    this.packets?.close();
    this.rtnl?.close();
    this.socket = null;
    this.packets = null;
    this.rtnl = null;
  }

  private feed(ev: MachineEvent): void {
    if (this.stopped) return;
    this.apply(this.machine.handle(ev));
    this.schedule();
  }

  /** Sleeps until the machine's next deadline, then ticks. */
  private schedule(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const due = this.machine.nextDeadline();
    if (due === null || this.stopped) return;
    this.timer = setTimeout(() => this.feed({ type: 'tick', now: performance.now() }), Math.max(0, Math.ceil(due - performance.now())));
  }

  private apply(actions: MachineAction[]): void {
    for (const a of actions) {
      if (a.type === 'send') this.sendAdvert(a.priority);
      else this.onTransition(a);
    }
  }

  private sendAdvert(priority: number): void {
    const o = this.opts;
    const dests = o.unicast ? o.peers : [o.family === 4 ? VRRP_MULTICAST_V4 : VRRP_MULTICAST_V6];
    for (const destination of dests) {
      try {
        const pkt = encodeAdvertisement(
          { vrid: o.vrid, priority, maxAdvertIntervalCs: o.advertisementIntervalCs, addresses: o.vips },
          { family: o.family, checksum: o.checksum, source: o.primaryAddress, destination },
        );
        this.socket?.send(this.auth ? this.auth.sign(pkt, o.primaryAddress, destination) : pkt, destination);
        this.counters.advertsSent++;
      } catch (err) {
        this.counters.sendErrors++;
        // one line per error kind would be better under a storm; the counter carries the rate
        if (this.counters.sendErrors <= 10 || this.counters.sendErrors % 100 === 0) {
          this.log('warn', 'cannot send advertisement', { destination, error: (err as Error).message, sendErrors: this.counters.sendErrors });
        }
      }
    }
  }

  private onTransition(t: Extract<MachineAction, { type: 'transition' }>): void {
    this.counters.transitions++;
    this.emit({ ...t, at: new Date().toISOString() });
    if (t.to === 'active') {
      this.enqueue(() => this.acquire());
    } else if (t.from === 'active') {
      this.clearActiveTimers();
      this.enqueue(() => this.release());
    }
  }

  private clearActiveTimers(): void {
    for (const t of [this.repeatTimer, this.renewTimer, this.refreshTimer]) if (t) clearInterval(t);
    this.repeatTimer = this.renewTimer = this.refreshTimer = null;
  }

  private enqueue(job: () => Promise<void>): void {
    this.vipQueue = this.vipQueue.then(job).catch((err: unknown) => {
      this.log('error', 'address change failed', { error: (err as Error).message, code: netlinkErrno(err) });
    });
  }

  /** Adds the VIPs, then announces them (RFC 9568 §6.4.1: gratuitous ARP / unsolicited NA). */
  private async acquire(): Promise<void> {
    if (!this.rtnl || this.machine.state !== 'active') return;
    if (!this.opts.owner) {
      await this.addVips();
      this.log('info', 'VIPs added', { vips: this.opts.vips, interface: this.opts.ifname, lifetimeMs: this.opts.vipLifetimeMs });
    }
    this.vipsHeld = true;
    await this.announce();
    const { repeatAfterMs, refreshMs } = this.opts.announce;
    const whileActive = (job: () => Promise<void>) => () => {
      if (this.machine.state === 'active') this.enqueue(job);
    };
    if (repeatAfterMs > 0) this.repeatTimer = setTimeout(whileActive(() => this.announce()), repeatAfterMs);
    if (refreshMs > 0) this.refreshTimer = setInterval(whileActive(() => this.announce()), refreshMs);
    if (this.opts.vipLifetimeMs > 0 && !this.opts.owner) {
      // renewing every third of the lifetime survives two lost renewals
      this.renewTimer = setInterval(whileActive(() => this.addVips()), this.opts.vipLifetimeMs / 3);
    }
  }

  /** Adds (or renews) every VIP with the configured lifetime. */
  private async addVips(): Promise<void> {
    if (!this.rtnl) return;
    for (const vip of this.opts.vips) await addVip(this.rtnl, this.opts.ifindex, vip, this.opts.vipLifetimeMs / 1000);
  }

  private async release(): Promise<void> {
    if (!this.rtnl) return;
    // false even if removal fails below: a vanished interface took the addresses with it
    this.vipsHeld = false;
    if (this.opts.owner) return;
    for (const vip of this.opts.vips) await delVip(this.rtnl, this.opts.ifindex, vip);
    this.log('info', 'VIPs removed', { vips: this.opts.vips, interface: this.opts.ifname });
    this.destroyVipSockets();
  }

  /**
   * Connections whose local address is a VIP we no longer hold (a local client of VIP:6443, an
   * apiserver's accepted connection with `dataplane.vip: none`) can never get another packet
   * through: destroy them (sock_diag SOCK_DESTROY, the peer gets a RST) so that their clients
   * reconnect, to the new holder, at once instead of waiting out TCP retransmissions.
   */
  private destroyVipSockets(): void {
    for (const vip of this.opts.vips) {
      try {
        const n = destroySockets({ family: this.opts.family, src: { address: vip } });
        if (n > 0) this.log('info', 'connections on a released VIP destroyed (their clients reconnect to the new holder)', { vip, sockets: n });
      } catch (err) {
        this.log('warn', 'cannot destroy the connections on a released VIP', { vip, error: (err as Error).message });
      }
    }
  }

  /** The addresses on our interface now (RTM_GETADDR). */
  private async vipsOnInterface(): Promise<string[]> {
    if (!this.rtnl) return [];
    const all = await this.rtnl.getAddresses();
    const out: string[] = [];
    for (const a of all) {
      const bytes = a.attrs.local ?? a.attrs.address;
      if (a.data.index === this.opts.ifindex && bytes) out.push(bytesToAddress(bytes));
    }
    return out;
  }

  /**
   * Makes the interface match the state after someone else changed its addresses: an Active
   * router whose VIP was removed puts it back (and announces it); a non-Active one removes a
   * VIP it finds (two holders are worse than none).
   */
  private async reconcile(): Promise<void> {
    if (!this.rtnl || this.opts.owner || this.stopped) return;
    const present = new Set(await this.vipsOnInterface());
    if (this.machine.state === 'active' && this.vipsHeld) {
      const missing = this.opts.vips.filter((v) => !present.has(v));
      if (missing.length === 0) return;
      this.log('warn', 'a VIP was removed from the interface by something else; restoring it', { vips: missing, interface: this.opts.ifname });
      await this.addVips();
      await this.announce();
    } else if (this.machine.state !== 'active') {
      const extra = this.opts.vips.filter((v) => present.has(v));
      if (extra.length === 0) return;
      this.log('warn', 'a VIP was added to the interface while this node is not master; removing it', { vips: extra, interface: this.opts.ifname });
      for (const vip of extra) await delVip(this.rtnl, this.opts.ifindex, vip);
    }
  }

  private async announce(): Promise<void> {
    const { count, spacingMs } = this.opts.announce;
    const mac = parseMac(this.opts.mac);
    const frames = this.opts.vips.map((v) => (this.opts.family === 4 ? gratuitousArpFrame(mac, v) : unsolicitedNeighborAdvertFrame(mac, v)));
    let sent = 0;
    for (let i = 0; i < count; i++) {
      if (i > 0 && spacingMs > 0) await new Promise((r) => setTimeout(r, spacingMs));
      if (this.machine.state !== 'active' || !this.packets) break;
      for (const f of frames) {
        try {
          this.packets.send(f);
          this.counters.announcementsSent++;
          sent++;
        } catch (err) {
          this.log('warn', 'cannot send announcement', { error: (err as Error).message });
        }
      }
    }
    const kind = this.opts.family === 4 ? 'gratuitous ARP' : 'unsolicited neighbour advertisement';
    this.log('debug', `sent ${kind}`, { frames: sent, vips: this.opts.vips });
  }

  private onPacket(p: ReceivedPacket): void {
    const o = this.opts;
    if (p.source === o.primaryAddress) return this.drop('own');
    if (o.unicast && !o.peers.includes(p.source)) {
      this.drop('notPeer');
      this.warnOnce(`notPeer:${p.source}`, 'an advert from an address that is not in vrrp.peers was dropped (a node missing from this list, or a stranger on the VRID: this node cannot hear it, and it may hold the VIP too)', { source: p.source, peers: o.peers });
      return;
    }
    let payload = p.payload;
    if (!this.auth && hasAuthTrailer(payload, o.family)) {
      this.drop('authUnexpected');
      this.warnOnce(`authUnexpected:${p.source}`, 'an authenticated advert was dropped: that node uses vrrp.auth and this one does not (configure the same vrrp.auth.keyFile here)', { source: p.source });
      return;
    }
    if (this.auth) {
      const a = this.auth.verify(payload, p.source, p.destination);
      if (!a.ok) {
        this.drop(a.reason);
        this.warnOnce(`${a.reason}:${p.source}`, AUTH_DROP_TEXT[a.reason], { source: p.source });
        return;
      }
      payload = a.message;
    }
    const multicast = p.destination === VRRP_MULTICAST_V4 || p.destination === VRRP_MULTICAST_V6;
    const r = decodeAdvertisement(
      payload,
      { family: o.family, source: p.source, destination: p.destination, ttl: p.ttl, checkTtl: multicast },
      o.vrid,
    );
    if (!r.ok) {
      this.drop(r.reason);
      if (r.reason === 'vrrpv2') this.warnOnce('vrrpv2', 'a VRRPv2 router is advertising; ballast speaks VRRPv3 only', { source: p.source, detail: r.detail });
      return;
    }
    this.counters.advertsReceived++;
    if (!sameAddresses(r.advert.addresses, o.vips)) {
      // RFC 9568 §7.1: the addresses may be checked against ours, and a mismatch logged; the
      // advert still counts (the peer may be mid-migration), but an operator must see it
      this.counters.foreign++;
      this.warnOnce(`foreign:${p.source}`, 'an advert for our VRID lists other addresses than our VIPs: another group or a misconfigured peer shares this VRID', {
        source: p.source,
        theirs: r.advert.addresses,
        ours: o.vips,
      });
    }
    const now = performance.now();
    this.feed({ type: 'advert', now, priority: r.advert.priority, maxAdvertIntervalCs: r.advert.maxAdvertIntervalCs, source: p.source });
    // a master hearing a router it beats (lower priority, or equal with a lower address): a
    // partition healed and the other side may have announced itself; claim the VIP's MAC again
    // (at most once a second). The loser's last advert as Active makes sure we hear it.
    const s = this.machine.snapshot();
    const beaten = r.advert.priority < s.effectivePriority || (r.advert.priority === s.effectivePriority && compareAddresses(p.source, o.primaryAddress) < 0);
    if (s.state === 'active' && this.vipsHeld && r.advert.priority > 0 && beaten && now - this.lastHealAnnounce >= 1000) {
      this.lastHealAnnounce = now;
      // once per source at info: a peer that cannot hear us (another auth key, a stale peer
      // list) stays master and would repeat this every second
      const first = !this.healLogged.has(p.source);
      this.healLogged.add(p.source);
      this.log(first ? 'info' : 'debug', 'heard a lower-priority master: announcing the VIPs again', { source: p.source, priority: r.advert.priority });
      this.enqueue(() => this.announce());
    }
  }

  private drop(reason: DropReason | AuthDropReason | 'own' | 'notPeer' | 'authUnexpected'): void {
    this.counters.dropped[reason] = (this.counters.dropped[reason] ?? 0) + 1;
  }

  private readonly warned = new Set<string>();
  private warnOnce(key: string, msg: string, fields: Record<string, unknown>): void {
    if (this.warned.has(key)) return;
    this.warned.add(key);
    this.log('warn', msg, fields);
  }

  /**
   * Follows our interface and its addresses through rtnetlink notifications (rtnetlink(7):
   * RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR / RTNLGRP_IPV6_IFADDR): link up/down feeds the machine,
   * a deleted interface stops the engine, and address changes by others are reconciled.
   */
  private watchNetlink(): void {
    const raw = this.rtnl?.raw;
    if (!raw) return;
    raw.addMembership('LINK');
    raw.addMembership(this.opts.family === 4 ? 'IPV4_IFADDR' : 'IPV6_IFADDR');
    let running = this.opts.linkRunning;
    let reconcileTimer: NodeJS.Timeout | null = null;
    raw.on('message', (msgs) => {
      for (const m of msgs) {
        if (m.kind === 'address' && m.data.index === this.opts.ifindex) {
          // events come in bursts (our own changes too): look once things settle
          if (reconcileTimer) clearTimeout(reconcileTimer);
          reconcileTimer = setTimeout(() => this.enqueue(() => this.reconcile()), 20);
          continue;
        }
        if (m.kind !== 'link' || m.data.index !== this.opts.ifindex) continue;
        // serialized with the address changes: the netlink package cannot interleave two dumps
        this.enqueue(() => this.checkInterfaceExists());
        const now = Boolean(m.data.flags?.up && m.data.flags?.running);
        if (now === running) continue;
        running = now;
        this.log('info', now ? 'link up' : 'link down', { interface: this.opts.ifname });
        this.feed({ type: now ? 'linkUp' : 'linkDown', now: performance.now() });
      }
    });
  }

  /** RTM_DELLINK looks like any link message here: ask whether the ifindex still exists. */
  private async checkInterfaceExists(): Promise<void> {
    if (!this.rtnl || this.stopped) return;
    const links = await this.rtnl.getLinks().catch(() => null);
    if (!links || links.some((l) => l.data.index === this.opts.ifindex)) return;
    this.log('error', 'the interface was deleted', { interface: this.opts.ifname, ifindex: this.opts.ifindex });
    this.vipsHeld = false;
    this.emit({ type: 'interfaceGone', ifname: this.opts.ifname });
  }

  private log(level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>): void {
    this.emit(fields ? { type: 'log', level, msg, fields } : { type: 'log', level, msg });
  }
}

/** Same set of addresses (order and text form aside). */
function sameAddresses(a: readonly string[], b: readonly string[]): boolean {
  const x = new Set(a.map(canonicalAddress));
  const y = new Set(b.map(canonicalAddress));
  return x.size === y.size && [...x].every((v) => y.has(v));
}
