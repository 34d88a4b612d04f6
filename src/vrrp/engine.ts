/**
 * The election engine: one VRRP virtual router with its effects. It runs on the agent's main
 * thread (host.ts); a stall of that thread (TLS handshakes, GC, a Kubernetes list) delays no
 * advert of an Active router — the VRRP socket's native pacer sends them meanwhile (edge.ts
 * startPacer, native/advert_pacer.h) — and makes no Backup take over — a late
 * Master_Down_Timer reads the adverts waiting in the socket first (onTimer).
 *
 *              ┌──────────────── OS edge (edge.ts) ────────────────┐
 *   raw socket ─► filters.ts (allowlist, auth, §7.1 codec) ─► advert ─┐
 *   rtnetlink link / address events ─► linkUp/linkDown, vipsObserved ─┤
 *   timers (monotonic, the machine's deadlines) ──────────► tick ─────┤
 *                                                                     ▼
 *                                                               VrrpMachine
 *                                                                     │ actions
 *   send ─► codec (+ auth trailer) ─► edge.sendAdvert                 │
 *   addVips / renewVips / removeVips ─► edge (rtnetlink), in order ◄──┤
 *   announce ─► GARP / NA frames ─► edge.sendFrame                 ◄──┤
 *   destroyVipSockets ─► edge.destroySockets (sock_diag)           ◄──┘
 *
 * The engine decides nothing about the protocol: it turns inputs into events and carries out
 * the machine's actions. Time is `performance.now()` (monotonic ms) unless injected; the wall
 * clock is used only to print `since`.
 */
import { performance } from 'node:perf_hooks';
import { getSystemErrorName } from 'node:util';
import { encodeAdvertisement, VRRP_MULTICAST_V4, VRRP_MULTICAST_V6 } from './packet.js';
import { checkReconfigure, masterDownIntervalMs, VrrpMachine, type AnnounceReason, type MachineAction, type MachineEvent, type VrrpState } from './state.js';
import { netlinkErrno } from '../vip/netlink.js';
import { gratuitousArpFrame, parseMac, unsolicitedNeighborAdvertFrame } from '../vip/frames.js';
import { addressFamily, canonicalAddress, type AddressFamily } from '../net/address.js';
import { AdvertAuth } from './auth.js';
import { FILTER_WARNINGS, filterAdvert, type ReceivedAdvert } from './filters.js';
import { openNativeEdge, type OpenEdge, type VrrpEdge } from './edge.js';
import type { AdvertPacerStats, PacedAdvert } from '../native.js';
import { RateLimitedLog } from '../log/ratelimit.js';

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
   * vrrp.acceptFrom `members`: only adverts from these sources (same family; for IPv6 multicast
   * the link-local addresses the adverts come from) are heard, the rest are dropped as
   * `notMember` and logged once per source. Null or absent: any source (vrrp.acceptFrom `any`).
   */
  members?: string[] | null;
  /**
   * Not a member of the group yet (vrrp.acceptFrom `members`, none of this node's addresses is a
   * member): the others drop our adverts, so the machine stays Backup and listens (state.ts
   * MachineEvent `standby`). Absent: false.
   */
  standby?: boolean;
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
  /**
   * Runs on becoming Active, before the VIPs are added and announced (the address queue waits for
   * it; adverts do not): connection sync commits the replicated conntrack entries here, so that
   * no packet of a moved connection reaches this node before its state is in the kernel. It must
   * bound its own time; a rejection is logged and the VIPs are added anyway. Absent: nothing.
   */
  beforeTakeover?: () => Promise<void>;
  /** Whether the link was up (IFF_UP and IFF_RUNNING) when the main thread looked. */
  linkRunning: boolean;
  /** Priority 255: the VIPs are this node's own addresses; the engine never adds or removes them. */
  owner: boolean;
  /** The advert pacer thread's SCHED_FIFO priority (vrrp.realtimePriority); 0 or absent: normal scheduling. */
  realtimePriority?: number;
  /**
   * The previous process of this router handed off in place while Active (see
   * {@link VrrpEngine.handOff}) and the Backups still wait for it: start Active at once, keep the
   * VIPs on the interface (state.ts MachineEvent `startup` with `resume`). Absent: false.
   */
  resume?: boolean;
}

/** What {@link VrrpEngine.handOff} did. */
export interface HandOffResult {
  /** Whether the router was Active (then the VIPs stay and the Backups wait); false: a plain stop. */
  active: boolean;
  /** The Max Adver Int the last adverts announced, centiseconds (0 when not Active). */
  intervalCs: number;
  /**
   * Master_Down_Interval of a Backup that heard them, at the lowest possible priority (1): the
   * longest any Backup waits before it takes over, ms (RFC 9568 §6.1). 0 when not Active.
   */
  masterDownBoundMs: number;
  /** The lifetime the VIPs were renewed with, ms (0 when not Active): they expire when the Backups take over. */
  vipLifetimeMs: number;
}

/**
 * The Max Adver Int a hand-off announces for a hold of `holdMs`: the longest interval whose
 * Master_Down_Interval (3 × interval + Skew_Time, RFC 9568 §6.1) stays within the hold for a
 * Backup of any priority (Skew_Time < interval), in centiseconds 1..4095, and never shorter
 * than our own Advertisement_Interval.
 */
export function handOffIntervalCs(holdMs: number, advertisementIntervalCs: number): number {
  return Math.min(4095, Math.max(advertisementIntervalCs, Math.floor(holdMs / 40)));
}

/**
 * A change of a running engine's parameters (a reload), each optional; absent = unchanged.
 * A change of vrid, interface or family is not a reconfigure (the agent hands over and rejoins).
 */
export interface EngineReconfigure {
  /**
   * The whole new VIP set, same family. VIPs that stay are never removed; see state.ts
   * `MachineReconfigure`. A router that is not Active then lists the added VIPs on the interface
   * and removes those it finds (whatever their prefix), as a start does.
   */
  vips?: string[];
  /** The configured base priority, 1..254 (setPriority still sets the effective one). Not for the owner (255). */
  priority?: number;
  /** Advertisement_Interval, centiseconds 1..4095, from the next advert. */
  advertisementIntervalCs?: number;
  preempt?: boolean;
  /** ms. */
  preemptDelayMs?: number;
  /** Unicast: the whole send list (and the allowlist of sources). Our own address is ignored. */
  peers?: string[];
  /** acceptFrom members: the sources whose adverts are heard; null = any. */
  members?: string[] | null;
  /** Not a member (see {@link EngineOptions.standby}); set while Active, the router resigns (priority 0) into Backup. */
  standby?: boolean;
  /** As in {@link EngineOptions}: frames per VIP, ms between them, ms to the repeat burst, ms between refresh bursts. */
  announce?: { count: number; spacingMs: number; repeatAfterMs: number; refreshMs: number };
  /** ms (0 = permanent). Ignored by the owner. */
  vipLifetimeMs?: number;
}

/** Logged when the VIPs were added on becoming Active (or by a reconfigure). */
export const VIPS_ADDED = 'VIPs added';

/** Logged once when this node is found to be in no member source (EngineOptions `standby` set; docs/auth.md). */
export const STANDBY_ON = 'not a member of the group yet: listening as Backup until discovery lists this node';
/** Logged once when standby is cleared: from then on RFC 9568 §6.4 rules apply (a silent group: Active within one Master_Down_Interval). */
export const STANDBY_OFF = 'a member of the group now: normal VRRP rules apply';

/** Logged when a reload added a VIP that was already on the interface of a node that is not master (it is removed, as at start). */
export const STRAY_ON_RELOAD = 'a VIP the reload added was already on the interface while this node is not master; removed it';

/** Most sources logged once each per kind of drop; the rest only count (a flood of forged sources cannot grow memory). */
export const LOGGED_SOURCES_MAX = 256;

/** Upper bounds of the {@link EngineTiming} histograms' buckets, ms; one more, open bucket holds the rest. */
export const TIMING_BOUNDS_MS: readonly number[] = [1, 2, 5, 10, 15, 20, 30, 40, 50, 100];

/**
 * How punctual the election thread is, since the engine started (bench/stress.ts reads it from
 * /status). Histograms: counts per bucket of `boundsMs` (value ≤ bound), the last count for
 * values above the last bound.
 */
export interface EngineTiming {
  boundsMs: number[];
  /** Active: how late each Adver_Timer tick that sent an advert ran past its deadline, ms */
  sendLate: number[];
  sendLateMaxMs: number;
  /** Backup: time between two adverts of the same master as this thread handled them, ms */
  receiveGap: number[];
  receiveGapMaxMs: number;
  /**
   * Backup: Master_Down_Timer expiries that did not become a takeover because an advert that
   * was already waiting in the socket was handled first (the thread ran late past the deadline).
   */
  rescued: number;
  /** This thread's garbage collections (PerformanceObserver 'gc' in host.ts): count, the longest and the total, ms; absent without an observer */
  gc?: EngineGcStats;
  /** What the advert pacer sent while this thread was silent (native/advert_pacer.h); absent without one */
  pacer?: AdvertPacerStats;
}

/**
 * The advert pacer's hold time, ms, at most: when the engine's thread has sent nothing for this
 * long the pacer stops sending for it, so that a wedged agent loses the VIP a
 * Master_Down_Interval later instead of holding it forever. Shorter stalls (GC pauses, a long
 * synchronous task, a starved CPU) cost no failover. See {@link pacerHoldMs}.
 */
export const PACER_HOLD_MS = 2000;

/**
 * The hold for these settings, ms: {@link PACER_HOLD_MS}, shortened where the VIPs' valid
 * lifetime (vipLifetimeMs, renewed every third of it by this same thread) would run out first:
 * from a stall's start a VIP lives at least two thirds of its lifetime, which must cover the hold
 * (less {@link PACER_HOLD_MARGIN_MS}), or the VIP would vanish from this node while the pacer's
 * adverts still keep the Backups away. 0 (or less than 1.5 × Advertisement_Interval) means the
 * pacer never sends: vipLifetime 2s at 1 s adverts, for one.
 * @param o vipLifetimeMs (0 = permanent); owner: its VIPs are its own addresses.
 */
export function pacerHoldMs(o: { vipLifetimeMs: number; owner: boolean }): number {
  if (o.owner || o.vipLifetimeMs <= 0) return PACER_HOLD_MS;
  return Math.max(0, Math.min(PACER_HOLD_MS, (2 * o.vipLifetimeMs) / 3 - PACER_HOLD_MARGIN_MS));
}

/** How long a hand-off's VIPs outlive the Backups' longest wait, ms: their takeover is not instant either. */
export const HANDOFF_VIP_MARGIN_MS = 250;

/** What the VIPs' remaining lifetime keeps beyond the hold, ms: a renewal timer that ran late. */
export const PACER_HOLD_MARGIN_MS = 250;

/** A fixed-size histogram over TIMING_BOUNDS_MS: adding allocates nothing. */
class TimingHistogram {
  readonly counts = new Uint32Array(TIMING_BOUNDS_MS.length + 1);
  max = 0;
  add(ms: number): void {
    let i = 0;
    while (i < TIMING_BOUNDS_MS.length && ms > TIMING_BOUNDS_MS[i]!) i++;
    this.counts[i]!++;
    if (ms > this.max) this.max = ms;
  }
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
  /** The VIPs as they are now (a reconfigure changes them). */
  vips?: string[];
  /** Advertisement_Interval now, ms. */
  advertisementIntervalMs?: number;
  /** Unicast peers now ([] in multicast mode). */
  peers?: string[];
  /** acceptFrom members now, or null for any source. */
  members?: string[] | null;
  /** Not a member of the group: held in Backup until discovery lists this node (EngineOptions `standby`). */
  standby?: boolean;
  /** The election thread's punctuality (see {@link EngineTiming}). */
  timing?: EngineTiming;
  /** Other Active routers heard while this one was Active (see {@link EngineOtherMasters}). */
  otherMasters?: EngineOtherMasters;
  /** Age of the last valid advert heard from any other router (the master's, on a Backup), ms; null before any. */
  lastAdvertAgeMs?: number | null;
}

/**
 * How long a second master, once heard, counts as heard now ({@link EngineOtherMasters} `heard`),
 * ms: longer than a usual Prometheus scrape interval, so that a short episode (a healed
 * partition ends in one advert) is seen by a scrape, and a lasting one (a peer that cannot hear
 * us keeps advertising) keeps it set.
 */
export const OTHER_MASTER_WINDOW_MS = 60_000;

/**
 * state.ts OtherMastersHeard for /status: ages instead of monotonic times. Nobody hears a second
 * master while the two cannot hear each other (a partition): this reports what was heard, from
 * the moment it is heard (the partition heals, or one direction works).
 */
export interface EngineOtherMasters {
  /** Distinct other routers heard advertising as Active, while this one was Active, within the last `windowMs`. */
  heard: number;
  /** {@link OTHER_MASTER_WINDOW_MS}, ms. */
  windowMs: number;
  /** Such adverts since start, per outcome (state.ts OtherMastersHeard): `kept` means two masters held the VIPs. */
  adverts: { kept: number; yielded: number; handover: number };
  /** The latest: sender, its priority, what this router did, how long ago (ms); null before any. */
  last: { source: string; priority: number; outcome: 'kept' | 'yielded' | 'handover'; ageMs: number } | null;
}

export interface EngineCounters {
  advertsSent: number;
  advertsReceived: number;
  sendErrors: number;
  /** Received packets dropped, by reason (the codec's §7.1 checks, plus `notPeer`, `notMember`, `own`, `malformedIpHeader`). */
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
  | { type: 'interfaceGone'; ifname: string }
  /**
   * A Backup heard a new Active router (another source than the last one; not a resign): the
   * agent tells whether it is one of the known members (agent/election.ts). `preempting`: its
   * priority is lower and this Backup will take over (MachineSnapshot.preempting).
   */
  | { type: 'master'; address: string; priority: number; previous: string | null; preempting: boolean }
  /**
   * An exception escaped the engine's own processing (a timer, a packet, a netlink
   * notification): its state can no longer be trusted; the agent unwinds and exits.
   */
  | { type: 'failed'; error: Error };

/** What the engine is given besides its options: the OS edge and the clock (tests pass fakes). */
export interface EngineDeps {
  /** Opens the OS edge; default {@link openNativeEdge}. */
  openEdge?: OpenEdge;
  /** Monotonic ms; default `performance.now`. */
  now?: () => number;
  /** This thread's garbage collections so far, for `timing.gc` (host.ts observes them). */
  gcStats?: () => EngineGcStats;
  /**
   * Blocks the thread for `ms` (fractional ms), for the last stretch before a deadline (see
   * {@link PRECISE_WAIT_MS}). Default: Atomics.wait on a private cell when `now` is the real
   * clock; none (libuv's millisecond timers alone) when a `now` is injected (tests).
   */
  preciseWait?: ((ms: number) => void) | null;
}

/** This thread's garbage collections (host.ts): count, longest and total pause, ms; the longest per kind (perf_hooks gc `detail.kind`: minor, major, incremental, weakcb). */
export interface EngineGcStats {
  count: number;
  maxMs: number;
  totalMs: number;
  maxMsByKind?: Record<string, number>;
}

/**
 * The timer wakes the thread this much (ms) before a deadline and the rest is slept with a
 * sub-millisecond wait. libuv's timers count whole milliseconds of a loop time cached at the
 * start of each loop turn, so a setTimeout alone fires 0–2 ms after the deadline (a Backup's
 * Master_Down_Timer at 10 ms adverts, measured on an idle engine with a fake edge: 1.1–1.6 ms
 * late, with the wait ~0.5 ms). Under stress-ng a Backup still took over
 * ~2.4 ms after its Master_Down_Interval (bench/stress.ts wire silence 38.5 ms against 36.1 ms):
 * that part is not the timer, and is still open.
 */
export const PRECISE_WAIT_MS = 2;

/** Blocks this thread for `ms` (fractional) on a futex no one wakes (Atomics.wait). */
function atomicsWait(): (ms: number) => void {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  return (ms) => void Atomics.wait(cell, 0, 0, ms);
}

/** How long address notifications must be quiet before the engine looks at the interface, ms (they come in bursts, ours too). */
const ADDRESS_SETTLE_MS = 20;

/**
 * One VRRP virtual router bound to one interface. Create with {@link VrrpEngine.start}, stop
 * with {@link VrrpEngine.stop}. The machine (state.ts) decides every output; the engine carries
 * the actions out through the edge, in order, and turns what the edge reports into events.
 */
export class VrrpEngine {
  private readonly machine: VrrpMachine;
  private edge: VrrpEdge | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** The deadline the timer was set for (monotonic ms), null when none. */
  private due: number | null = null;
  private readonly sendLate = new TimingHistogram();
  private readonly receiveGap = new TimingHistogram();
  private rescued = 0;
  /** An exception escaped once (guard): reported, not again. */
  private failed = false;
  /** The adverts handed to the pacer (null: it sends nothing) and the engine's last send, monotonic ms. */
  private paced: PacedAdvert[] | null = null;
  private pacedTimes = { intervalMs: 0, holdMs: 0 };
  private lastSendAt = 0;
  /** The pacer's counters at the last look (covers and holds are logged as they grow). */
  private pacerSeen = { covers: 0, holds: 0, sent: 0, sendErrors: 0 };
  /** The source and time (monotonic ms) of the last advert handled, for receiveGap. */
  private lastAdvertSource: string | null = null;
  private lastAdvertAt = 0;
  /** When the last valid advert of another router was handled (monotonic ms), null before any. */
  private lastHeardAt: number | null = null;
  private settleTimer: NodeJS.Timeout | null = null;
  private readonly healLogged = new Set<string>();
  /** Address changes and announce bursts run one after another, in the order the machine asked for them. */
  private vipQueue: Promise<void> = Promise.resolve();
  private vipsHeld = false;
  /** Bumped when the machine leaves Active: a running announce burst of the earlier period stops. */
  private activeEpoch = 0;
  private started = false;
  private stopped = false;
  /** The interface was found deleted (reported once). */
  private interfaceGone = false;
  private linkRunning: boolean;
  /** The options as they are now: a reconfigure changes vips, peers, announce, the timers' values. */
  private readonly opts: EngineOptions;
  /** The announce frame of each VIP, in VIP order. */
  private frames = new Map<string, Buffer>();
  /** acceptFrom members (canonical text), or null for any source. */
  private members: ReadonlySet<string> | null;
  private readonly auth: AdvertAuth | null;
  private readonly now: () => number;
  private readonly gcStats: (() => EngineGcStats) | null;
  private readonly preciseWait: ((ms: number) => void) | null;
  /** The last encoded advert (no auth) and what it was encoded from: an Active sends the same bytes every interval. */
  private advertCache: { priority: number; intervalCs: number; vips: readonly string[]; destination: string; pkt: Buffer }[] = [];
  /** Lines that can repeat per advert, per peer or per frame: the first, then one per window with the count (log/ratelimit.ts). */
  private readonly limited: RateLimitedLog;
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
    options: EngineOptions,
    private readonly emit: (ev: EngineEvent) => void,
    deps: EngineDeps,
  ) {
    const opts: EngineOptions = {
      ...options,
      vips: options.vips.map(canonicalAddress),
      peers: options.peers.map(canonicalAddress),
      announce: { ...options.announce },
    };
    this.opts = opts;
    this.members = memberSet(options.members);
    this.machine = new VrrpMachine({
      vrid: opts.vrid,
      priority: opts.priority,
      advertisementIntervalCs: opts.advertisementIntervalCs,
      preempt: opts.preempt,
      preemptDelayMs: opts.preemptDelayMs,
      primaryAddress: opts.primaryAddress,
      vips: opts.vips,
      manageVips: !opts.owner,
      announce: { repeatAfterMs: opts.announce.repeatAfterMs, refreshMs: opts.announce.refreshMs },
      vipLifetimeMs: opts.owner ? 0 : opts.vipLifetimeMs,
    });
    this.auth = opts.authKeys ? new AdvertAuth(opts.authKeys, opts.family) : null;
    this.now = deps.now ?? (() => performance.now());
    this.gcStats = deps.gcStats ?? null;
    this.preciseWait = deps.preciseWait !== undefined ? deps.preciseWait : deps.now ? null : atomicsWait();
    this.limited = new RateLimitedLog((level, fields, msg) => this.log(level, msg, fields), { now: this.now });
    this.linkRunning = opts.linkRunning;
    this.makeFrames();
  }

  /** Re-makes the announce frames for today's VIPs (kept ones reuse theirs). */
  private makeFrames(): void {
    const o = this.opts;
    const mac = parseMac(o.mac);
    const next = new Map<string, Buffer>();
    for (const v of o.vips) next.set(v, this.frames.get(v) ?? (o.family === 4 ? gratuitousArpFrame(mac, v) : unsolicitedNeighborAdvertFrame(mac, v)));
    this.frames = next;
  }

  /**
   * Opens the OS edge (sockets, group membership), removes our VIPs left on the interface by an
   * earlier run or by hand (whatever their prefix) and starts the machine (RFC 9568 §6.4.1 Startup).
   * @throws Error with `code` (errno name) and `syscall` when a socket cannot be opened or a
   *   left-over VIP cannot be removed.
   */
  static async start(opts: EngineOptions, emit: (ev: EngineEvent) => void, deps: EngineDeps = {}): Promise<VrrpEngine> {
    const e = new VrrpEngine(opts, emit, deps);
    try {
      await e.open(deps.openEdge ?? openNativeEdge);
    } catch (err) {
      e.edge?.close();
      e.edge = null;
      throw err;
    }
    return e;
  }

  private async open(openEdge: OpenEdge): Promise<void> {
    const o = this.opts;
    this.edge = await openEdge(
      { family: o.family, ifname: o.ifname, ifindex: o.ifindex, primaryAddress: o.primaryAddress, joinGroup: !o.unicast },
      {
        packet: (p) => this.guard(() => this.onPacket(p)),
        socketError: (err) => this.guard(() => this.limited.log('error', `socket:${err.code ?? err.message}`, { code: err.code, syscall: err.syscall, error: err.message }, 'VRRP socket error')),
        link: (running) => this.guard(() => this.onLink(running)),
        addressesChanged: () => this.guard(() => this.onAddressesChanged()),
      },
    );
    this.startPacer();
    if (!o.owner && !o.resume) {
      // a VIP still on the interface (a killed agent, keepalived, a hand) would make two holders;
      // the machine, still in Initialize, answers with removeVips (a resumed router keeps them:
      // its previous process left them for it, and the Backups wait)
      const present = await this.edge.vipsPresent(this.machine.vips);
      // the time is read after the dump: adverts may have been fed while it ran
      this.feed({ type: 'vipsObserved', now: this.now(), present });
      await this.settled();
    }
    this.started = true;
    if (o.preemptHoldAtStart) this.feed({ type: 'preemptHold', now: this.now(), hold: true });
    if (o.standby === true) {
      this.log('info', STANDBY_ON, {});
      this.feed({ type: 'standby', now: this.now(), standby: true });
    }
    if (!o.linkRunning) this.feed({ type: 'linkDown', now: this.now() });
    this.feed({ type: 'startup', now: this.now(), ...(o.resume ? { resume: true } : {}) });
  }

  /**
   * Starts the edge's advert pacer (signing with the first key when auth is on: its counter
   * then gives every sequence number, ours too) and logs the real-time policy it got.
   * @throws what the edge's startPacer throws (no thread).
   */
  private startPacer(): void {
    const edge = this.edge;
    if (!edge?.startPacer) return;
    const rt = this.opts.realtimePriority ?? 0;
    const refused = edge.startPacer(rt, this.auth ? { key: this.auth.signingKey(), firstSequence: this.auth.nextSequence() } : null);
    if (this.auth && edge.takeSequence) this.auth.shareSequence(() => edge.takeSequence!());
    const intervalMs = this.opts.advertisementIntervalCs * 10;
    const holdMs = pacerHoldMs(this.opts);
    if (holdMs <= 1.5 * intervalMs) this.log('info', 'the advert pacer cannot cover a stalled election thread with these settings: its hold ends before its first advert would be due (a longer vipLifetime or shorter adverts give it room)', { holdMs: Math.round(holdMs), advertisementIntervalMs: intervalMs, vipLifetimeMs: this.opts.vipLifetimeMs });
    if (rt <= 0) return;
    if (refused === null) this.log('info', 'the advert pacer thread runs SCHED_FIFO (vrrp.realtimePriority)', { realtimePriority: rt });
    else this.log('warn', 'cannot give the advert pacer thread SCHED_FIFO (vrrp.realtimePriority); it runs with normal scheduling', { realtimePriority: rt, code: refused });
  }

  /** Lowers or restores the priority we advertise (policy). 1..254; a no-op for the owner (255). */
  setPriority(priority: number): void {
    if (this.opts.owner) return;
    this.feed({ type: 'priority', now: this.now(), priority });
    this.repace();
  }

  /** Holds (true) or releases preemption of a lower-priority Active router; see MachineEvent `preemptHold`. */
  setPreemptHold(hold: boolean): void {
    this.feed({ type: 'preemptHold', now: this.now(), hold });
  }

  /**
   * Changes the running election's parameters (see {@link EngineReconfigure}; the machine's
   * rules are state.ts `MachineReconfigure`). Everything is checked first: a patch that cannot
   * apply changes nothing. Resolves once the address changes it asked for are done (with added
   * VIPs on a router that is not Active: once those found on the interface are removed; an
   * announce burst for added VIPs may still be running); a failing address change is logged,
   * as for any other address change.
   * @throws Error saying why (an address of the other family, a number out of range, a priority
   *   change of the owner), before anything changed.
   */
  async reconfigure(patch: EngineReconfigure): Promise<void> {
    if (this.stopped) throw new Error('the election engine is stopped');
    const o = this.opts;
    const fam = (list: unknown, what: string, allowEmpty = true): string[] => {
      if (!Array.isArray(list)) throw new Error(`${what} must be a list of addresses`);
      const out: string[] = [];
      for (const a of list as unknown[]) {
        if (typeof a !== 'string' || addressFamily(a) === null) throw new Error(`${what}: ${JSON.stringify(a)} is not an IP address`);
        if (addressFamily(a) !== o.family) throw new Error(`${what}: ${a} is IPv${addressFamily(a)}, but this election is IPv${o.family}`);
        const c = canonicalAddress(a);
        if (!out.includes(c)) out.push(c);
      }
      if (!allowEmpty && out.length === 0) throw new Error(`${what} must not be empty`);
      return out;
    };
    const vips = patch.vips !== undefined ? fam(patch.vips, 'vips', false) : undefined;
    const peers = patch.peers !== undefined ? fam(patch.peers, 'peers').filter((p) => p !== o.primaryAddress) : undefined;
    if (peers !== undefined && !o.unicast && peers.length > 0) throw new Error('peers: this election is multicast (peers are for unicast mode)');
    const members = patch.members === undefined ? undefined : patch.members === null ? null : fam(patch.members, 'members');
    if (patch.standby !== undefined && typeof patch.standby !== 'boolean') throw new Error(`standby must be a boolean, got ${String(patch.standby)}`);
    const a = patch.announce;
    if (a !== undefined) {
      if (!Number.isInteger(a.count) || a.count < 0) throw new Error(`announce.count must be an integer >= 0, got ${a.count}`);
      if (!(Number.isFinite(a.spacingMs) && a.spacingMs >= 0)) throw new Error(`announce.spacingMs must be >= 0, got ${a.spacingMs}`);
    }
    const machinePatch = {
      ...(vips !== undefined ? { vips } : {}),
      ...(patch.priority !== undefined ? { priority: patch.priority } : {}),
      ...(patch.advertisementIntervalCs !== undefined ? { advertisementIntervalCs: patch.advertisementIntervalCs } : {}),
      ...(patch.preempt !== undefined ? { preempt: patch.preempt } : {}),
      ...(patch.preemptDelayMs !== undefined ? { preemptDelayMs: patch.preemptDelayMs } : {}),
      ...(a !== undefined ? { announce: { repeatAfterMs: a.repeatAfterMs, refreshMs: a.refreshMs } } : {}),
      ...(patch.vipLifetimeMs !== undefined && !o.owner ? { vipLifetimeMs: patch.vipLifetimeMs } : {}),
    };
    try {
      checkReconfigure(machinePatch, o.owner);
    } catch (err) {
      throw new Error((err as Error).message, { cause: err });
    }
    // checked: from here on nothing throws
    const added = vips !== undefined && !o.owner ? vips.filter((v) => !o.vips.includes(v)) : [];
    if (vips !== undefined) o.vips = vips;
    if (peers !== undefined) o.peers = peers;
    if (members !== undefined) this.members = memberSet(members);
    if (patch.priority !== undefined) o.priority = patch.priority;
    if (patch.advertisementIntervalCs !== undefined) o.advertisementIntervalCs = patch.advertisementIntervalCs;
    if (patch.preempt !== undefined) o.preempt = patch.preempt;
    if (patch.preemptDelayMs !== undefined) o.preemptDelayMs = patch.preemptDelayMs;
    if (a !== undefined) o.announce = { count: a.count, spacingMs: a.spacingMs, repeatAfterMs: a.repeatAfterMs, refreshMs: a.refreshMs };
    if (patch.vipLifetimeMs !== undefined && !o.owner) o.vipLifetimeMs = patch.vipLifetimeMs;
    this.makeFrames();
    let addressesDone: Promise<void> | null = null;
    for (const action of this.machine.handle({ type: 'reconfigure', now: this.now(), ...machinePatch })) {
      // the caller waits for the address changes, not for a whole announce burst
      if (action.type === 'announce') addressesDone ??= this.vipQueue;
      this.carryOut(action);
    }
    const looking = added.length > 0 && this.machine.state !== 'active';
    if (looking) {
      // a reload does what a start does: an added VIP may already be on the interface (put there
      // by hand, left by a crashed agent or an old config); no address notification will come
      // for it, so look now: the machine answers removeVips 'stray' (two nodes answering ARP / NS
      // for it is worse than none). An Active router has just added them (no look needed).
      this.enqueue(() => this.observeVips('reload'));
    }
    const standby = patch.standby;
    if (standby !== undefined && standby !== (o.standby === true)) {
      o.standby = standby;
      this.log('info', standby ? STANDBY_ON : STANDBY_OFF, {});
      for (const action of this.machine.handle({ type: 'standby', now: this.now(), standby })) this.carryOut(action);
    }
    this.schedule();
    this.repace();
    this.log('info', 'election reconfigured', { changed: Object.keys(patch).filter((k) => patch[k as keyof EngineReconfigure] !== undefined) });
    await (addressesDone ?? this.vipQueue);
    // the look at the interface queued the removal of what it found: wait for that too
    if (looking) await this.vipQueue;
  }

  /** A snapshot for `/status`. */
  status(): EngineStatus {
    const s = this.machine.snapshot();
    const malformed = this.edge?.malformedIpHeader() ?? 0;
    const dropped = { ...this.counters.dropped };
    if (malformed > 0) dropped.malformedIpHeader = malformed;
    // the pacer's adverts are adverts this router sent
    const pacer = this.edge?.pacerStats?.();
    const now = this.now();
    const om = s.otherMasters;
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
      counters: { ...this.counters, advertsSent: this.counters.advertsSent + (pacer?.sent ?? 0), sendErrors: this.counters.sendErrors + (pacer?.sendErrors ?? 0), dropped },
      vips: [...this.opts.vips],
      advertisementIntervalMs: this.opts.advertisementIntervalCs * 10,
      peers: [...this.opts.peers],
      members: this.members ? [...this.members] : null,
      standby: s.standby,
      timing: {
        boundsMs: [...TIMING_BOUNDS_MS],
        sendLate: [...this.sendLate.counts],
        sendLateMaxMs: round3(this.sendLate.max),
        receiveGap: [...this.receiveGap.counts],
        receiveGapMaxMs: round3(this.receiveGap.max),
        rescued: this.rescued,
        ...(this.gcStats ? { gc: this.gcStats() } : {}),
        ...(pacer ? { pacer } : {}),
      },
      otherMasters: {
        heard: om.sources.filter((h) => now - h.at <= OTHER_MASTER_WINDOW_MS).length,
        windowMs: OTHER_MASTER_WINDOW_MS,
        adverts: om.adverts,
        last: om.last === null ? null : { source: om.last.source, priority: om.last.priority, outcome: om.last.outcome, ageMs: Math.max(0, Math.round(now - om.last.at)) },
      },
      lastAdvertAgeMs: this.lastHeardAt === null ? null : Math.max(0, Math.round(now - this.lastHeardAt)),
    };
  }

  /**
   * RFC 9568 §6.4.3 Shutdown: an Active router sends priority 0 (so a Backup takes over after
   * Skew_Time), then the VIPs are removed and every socket closed. Idempotent.
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.feed({ type: 'shutdown', now: this.now() });
    await this.close();
  }

  /** After the last event: no more timers, the queued address work done, every socket closed. */
  private async close(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.settleTimer) clearTimeout(this.settleTimer);
    await this.vipQueue;
    this.edge?.close();
    this.edge = null;
    // the counts of lines left out are not lost with the engine
    this.limited.close();
  }

  /**
   * A stop for a restart in place (state.ts MachineEvent `handOff`): an Active router sends its
   * last adverts announcing a Max Adver Int that makes every Backup wait up to `holdMs` (RFC 9568
   * §6.4.2: a Backup adopts the interval of the advert it accepts), renews the VIPs with a
   * lifetime that ends then, and keeps them; then every socket is closed. Any other state stops
   * as {@link stop} does. Sends the advert twice (a single lost frame would cost a failover).
   * Idempotent with stop(): whichever comes first acts.
   * @param holdMs the longest the next process may take to resume, ms (> 0).
   */
  async handOff(holdMs: number): Promise<HandOffResult> {
    const none: HandOffResult = { active: false, intervalCs: 0, masterDownBoundMs: 0, vipLifetimeMs: 0 };
    if (this.stopped) return none;
    const active = this.machine.state === 'active' && !this.opts.owner;
    const intervalCs = handOffIntervalCs(holdMs, this.opts.advertisementIntervalCs);
    // a Backup at priority 1 waits longest: 3 × interval + (255/256) × interval
    const masterDownBoundMs = masterDownIntervalMs(1, intervalCs);
    // the VIPs outlive the wait by a little, never the takeover by much: two holders answer ARP meanwhile
    const vipLifetimeMs = Math.ceil(masterDownBoundMs) + HANDOFF_VIP_MARGIN_MS;
    // (also with permanent VIPs, vipLifetime 0: an agent that never comes back must not leave them)
    this.feed({ type: 'handOff', now: this.now(), intervalCs, lifetimeMs: vipLifetimeMs });
    await this.close();
    if (!active) return none;
    this.log('info', 'handed off for a restart in place: the VIPs stay, the Backups wait for the next process', { advertisedIntervalCs: intervalCs, masterDownBoundMs: round3(masterDownBoundMs), vipLifetimeMs });
    return { active, intervalCs, masterDownBoundMs, vipLifetimeMs };
  }

  private feed(ev: MachineEvent): void {
    if (this.stopped) return;
    const actions = this.machine.handle(ev);
    if (ev.type === 'tick' && this.due !== null && actions.some((a) => a.type === 'send')) this.sendLate.add(Math.max(0, ev.now - this.due));
    for (const a of actions) this.carryOut(a);
    if (ev.type === 'advert') this.watchMaster(ev);
    this.schedule();
  }

  /** The Master_Adver_Interval and the master a Backup adopted last (logged when they change). */
  private seenIntervalCs: number | null = null;
  private seenMaster: string | null = null;

  /**
   * What an advert made the machine adopt, told once per change: a Backup sets
   * Master_Adver_Interval from the Active router's advert (RFC 9568 §6.4.2), which moves its
   * Master_Down_Interval away from what this node's own setting implies; and a new master.
   */
  private watchMaster(ev: Extract<MachineEvent, { type: 'advert' }>): void {
    const s = this.machine.snapshot();
    if (s.state !== 'backup' || ev.priority === 0 || s.masterAddress !== ev.source) return;
    const ours = this.opts.advertisementIntervalCs;
    const adopted = s.masterAdverIntervalCs;
    if (adopted !== (this.seenIntervalCs ?? ours)) {
      const fields = { master: ev.source, masterAdverIntervalCs: adopted, advertisementIntervalCs: ours, masterDownIntervalMs: round3(s.masterDownIntervalMs) };
      if (adopted === ours) this.log('info', 'the master advertises our advertisement interval again', fields);
      else this.log('warn', `adopted the master's advertisement interval (RFC 9568 §6.4.2): ${adopted} cs, ours is ${ours} cs`, fields);
    }
    this.seenIntervalCs = adopted;
    if (ev.source !== this.seenMaster) {
      this.emit({ type: 'master', address: ev.source, priority: ev.priority, previous: this.seenMaster, preempting: s.preempting });
      this.seenMaster = ev.source;
    }
  }

  /** Sleeps until the machine's next deadline, then ticks (see onTimer). */
  private schedule(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const due = this.machine.nextDeadline();
    this.due = due;
    if (due === null || this.stopped) return;
    const wait = due - this.now();
    // with a precise wait, wake early and sleep the rest in onTimer
    this.timer = setTimeout(this.onTimer, this.precise() ? Math.max(0, Math.floor(wait - PRECISE_WAIT_MS)) : Math.max(0, Math.ceil(wait)));
  }

  /**
   * Whether the next deadline is slept to the sub-millisecond: a Backup's Master_Down_Timer
   * only (its expiry is a takeover, once per failover). An Active's Adver_Timer is not: the
   * pacer covers its lateness, and a wait blocks the thread the health checks share, every
   * interval.
   */
  private precise(): boolean {
    return this.preciseWait !== null && this.machine.state === 'backup';
  }

  /**
   * Runs one of the engine's entry points from the event loop (a timer, an edge input): an
   * exception is reported once as `failed` instead of becoming the process's uncaught exception,
   * so that the agent can unwind (priority 0 where it can, VIPs removed) before it exits.
   */
  private guard(f: () => void): void {
    try {
      f();
    } catch (err) {
      if (this.failed) return;
      this.failed = true;
      this.emit({ type: 'failed', error: err instanceof Error ? err : new Error(String(err)) });
    }
  }

  /**
   * How late the engine's next deadline (Adver_Timer or Master_Down_Timer, RFC 9568 §6.4) is
   * now, ms: 0 while it is ahead, when there is none (Initialize) or once stopped. A thread that
   * runs fires the engine's timer at the deadline and sets the next, so a deadline long past
   * means the engine's timer chain is broken (the watchdog's gate: host.ts alive).
   */
  overdueMs(): number {
    if (this.stopped || this.due === null) return 0;
    return Math.max(0, this.now() - this.due);
  }

  /** Closes every socket now, synchronously (the pacer's thread ends first): for a process that exits without stop(). */
  closeSockets(): void {
    this.edge?.close();
  }

  private readonly onTimer = (): void => this.guard(this.tick);

  /**
   * The timer fired. A Backup's deadline is its Master_Down_Timer: libuv runs expired timers
   * before it polls the sockets, so when this thread got the CPU late (a loaded machine: it was
   * preempted while it ran), the timer fires although the master's adverts already wait in the
   * socket, and the Backup would take over from a live master. So a Backup first reads what
   * waits in the socket (edge.receivePending); the tick then acts only on what is still due.
   */
  private readonly tick = (): void => {
    this.timer = null;
    const preciseWait = this.precise() ? this.preciseWait : null;
    if (preciseWait && this.due !== null) {
      // woken PRECISE_WAIT_MS early (schedule), up to 1 ms more (libuv's loop time is whole ms
      // behind the real one): sleep the rest, bounded
      const rest = this.due - this.now();
      if (rest > 0) preciseWait(Math.min(rest, PRECISE_WAIT_MS + 2));
    }
    if (this.machine.state === 'backup' && this.edge?.receivePending) {
      const firedFor = this.due;
      this.edge.receivePending();
      if (this.stopped) return;
      const now = this.now();
      const due = this.machine.nextDeadline();
      // it was due when the timer fired, and an advert read just now moved it
      if (firedFor !== null && firedFor <= now && (due === null || due > now) && this.machine.state === 'backup') this.rescued++;
    }
    this.feed({ type: 'tick', now: this.now() });
  };

  /** One action of the machine, through the edge. Address work and bursts are queued; sends are immediate. */
  private carryOut(a: MachineAction): void {
    const o = this.opts;
    switch (a.type) {
      case 'send':
        if (a.intervalCs !== undefined) return this.sendHandOffAdvert(a.priority, a.intervalCs);
        return this.sendAdvert(a.priority);
      case 'transition':
        this.counters.transitions++;
        if (a.from === 'active') {
          this.activeEpoch++;
          this.pace(null);
        }
        // the owner adds nothing: its VIPs are its own addresses, held while Active
        if (o.owner) this.vipsHeld = a.to === 'active';
        // Active: the interval is ours and the master is us; the next master heard is new again
        if (a.to === 'active') {
          this.seenIntervalCs = null;
          this.seenMaster = o.primaryAddress;
        }
        this.emit({ ...a, at: new Date().toISOString() });
        return;
      case 'addVips':
        if (a.reason === 'restored') this.log('warn', 'a VIP was removed from the interface by something else; restoring it', { vips: a.vips, interface: o.ifname });
        return this.enqueue(async () => {
          if (a.reason === 'becameActive' && o.beforeTakeover) {
            await o.beforeTakeover().catch((err: unknown) => this.log('error', 'the step before adding the VIPs failed; adding them anyway', { error: (err as Error).message }));
          }
          await this.edge?.addVips(a.vips, o.vipLifetimeMs / 1000);
          if (a.reason === 'becameActive' || a.reason === 'added') {
            this.vipsHeld = true;
            this.log('info', VIPS_ADDED, { vips: a.vips, interface: o.ifname, lifetimeMs: o.vipLifetimeMs, ...(a.reason === 'added' ? { reason: 'reconfigured' } : {}) });
          }
        });
      case 'renewVips':
        return this.enqueue(async () => {
          await this.edge?.addVips(a.vips, (a.lifetimeMs ?? o.vipLifetimeMs) / 1000);
        });
      case 'removeVips': {
        if (a.reason === 'released') this.vipsHeld = false;
        const cause = this.strayCause;
        return this.enqueue(async () => {
          const removed = (await this.edge?.removeVips(a.vips)) ?? [];
          if (removed.length === 0) return;
          // only what the kernel did remove: a VIP already gone is not reported
          const fields = { vips: removed.map((r) => r.address), addresses: removed.map((r) => `${r.address}/${r.prefixLen}`), interface: o.ifname };
          if (a.reason === 'released') this.log('info', 'VIPs removed', fields);
          else if (a.reason === 'removed') this.log('info', 'VIPs removed', { ...fields, reason: 'reconfigured' });
          else if (!this.started) this.log('warn', 'removed a VIP left on the interface by an earlier run', fields);
          else if (cause === 'reload') this.log('warn', STRAY_ON_RELOAD, fields);
          else this.log('warn', 'a VIP was added to the interface while this node is not master; removing it', fields);
        });
      }
      case 'destroyVipSockets':
        return this.enqueue(async () => this.destroyVipSockets(a.vips));
      case 'announce': {
        if (a.reason === 'healedPartition' && a.source !== undefined) {
          // once per source at info: a peer that cannot hear us (another auth key, a stale peer
          // list) stays master and would repeat this every second
          const first = !this.healLogged.has(a.source);
          this.healLogged.add(a.source);
          this.log(first ? 'info' : 'debug', 'heard a lower-priority master: announcing the VIPs again', { source: a.source });
        }
        const epoch = this.activeEpoch;
        const vips = a.vips;
        return this.enqueue(() => this.announce(epoch, a.reason, vips));
      }
    }
  }

  private sendAdvert(priority: number): void {
    const o = this.opts;
    const dests = this.destinations();
    // what the pacer repeats: this round, while Active; priority 0 (shutdown, §6.4.3) ends it first
    const pacing = priority > 0 && this.machine.state === 'active';
    if (!pacing) this.pace(null);
    const round: PacedAdvert[] = [];
    const now = this.now();
    const silentMs = now - this.lastSendAt;
    this.lastSendAt = now;
    for (const [i, destination] of dests.entries()) {
      const pkt = this.sendOne(destination, () => this.encoded(i, priority, destination));
      if (pkt) round.push({ message: pkt, destination });
    }
    if (!pacing) return;
    this.pace(round);
    if (silentMs > 1.5 * o.advertisementIntervalCs * 10) this.notePacer(silentMs);
  }

  /**
   * A hand-off's last adverts (MachineEvent `handOff`): our priority, Max Adver Int `intervalCs`,
   * sent twice to every destination; the pacer stops first (it would repeat our usual interval).
   */
  private sendHandOffAdvert(priority: number, intervalCs: number): void {
    const o = this.opts;
    this.pace(null);
    for (const destination of this.destinations()) {
      const encode = (): Buffer => encodeAdvertisement({ vrid: o.vrid, priority, maxAdvertIntervalCs: intervalCs, addresses: o.vips }, { family: o.family, checksum: o.checksum, source: o.primaryAddress, destination });
      for (let i = 0; i < 2; i++) this.sendOne(destination, encode);
    }
    this.lastSendAt = this.now();
  }

  /**
   * One advert, made by `encode` (signed here with vrrp.auth), to one destination. A failure
   * (encoding or sending) is counted and logged, never thrown.
   * @returns the unsigned packet (also when the send failed: the pacer repeats it), or null when
   *   it could not be made.
   */
  private sendOne(destination: string, encode: () => Buffer): Buffer | null {
    const o = this.opts;
    let pkt: Buffer | null = null;
    try {
      pkt = encode();
      if (!this.edge) throw new Error('the engine is closed');
      this.edge.sendAdvert(this.auth ? this.auth.sign(pkt, o.primaryAddress, destination) : pkt, destination);
      this.counters.advertsSent++;
      return pkt;
    } catch (err) {
      this.counters.sendErrors++;
      // one key per kind of error, not per peer: 252 unreachable peers are one line per window
      const e = err as Error & { code?: string };
      this.limited.log('warn', `send:${e.code ?? e.message}`, { destination, error: e.message, ...(e.code ? { code: e.code } : {}), sendErrors: this.counters.sendErrors }, 'cannot send advertisement');
      return pkt;
    }
  }

  /** Where adverts go: the unicast peers, or the group (224.0.0.18 / ff02::12, RFC 9568 §5.1.1.2, §5.1.2.2). */
  private destinations(): readonly string[] {
    const o = this.opts;
    return o.unicast ? o.peers : [o.family === 4 ? VRRP_MULTICAST_V4 : VRRP_MULTICAST_V6];
  }

  /**
   * Hands the pacer this round of adverts (null: none) when it differs from what it has: the
   * encoded adverts are cached, so an unchanged round is the same Buffers.
   */
  private pace(round: PacedAdvert[] | null): void {
    const edge = this.edge;
    if (!edge?.pace) return;
    const had = this.paced;
    const intervalMs = this.opts.advertisementIntervalCs * 10;
    // a reload can change the hold (vipLifetime) or the interval with the same adverts
    const holdMs = Math.max(1, pacerHoldMs(this.opts));
    const same = round === null ? had === null : had !== null && had.length === round.length && had.every((a, i) => a.message === round[i]!.message && a.destination === round[i]!.destination);
    if (same && (round === null || (this.pacedTimes.intervalMs === intervalMs && this.pacedTimes.holdMs === holdMs))) return;
    this.paced = round;
    this.pacedTimes = { intervalMs, holdMs };
    edge.pace(round, intervalMs, holdMs);
  }

  /**
   * After a priority change or a reconfigure while Active: the pacer gets the adverts the next
   * send will carry now, not at that send (a stall in between would advertise the old ones).
   */
  private repace(): void {
    if (this.machine.state !== 'active' || this.paced === null) return;
    const dests = this.destinations();
    const priority = this.machine.snapshot().effectivePriority;
    try {
      this.pace(dests.map((destination, i) => ({ message: this.encoded(i, priority, destination), destination })));
    } catch {
      // the next send reports what cannot be encoded
    }
  }

  /** After a silence of this thread (ms) while Active: says what the pacer did meanwhile. */
  private notePacer(silentMs: number): void {
    const st = this.edge?.pacerStats?.();
    if (!st) return;
    const seen = this.pacerSeen;
    const intervalMs = this.opts.advertisementIntervalCs * 10;
    const fields = { silentMs: Math.round(silentMs), advertisementIntervalMs: intervalMs, pacerSent: st.sent - seen.sent };
    if (st.holds > seen.holds) this.limited.log('warn', 'pacer:hold', { ...fields, holdMs: pacerHoldMs(this.opts) }, 'the election thread was silent longer than the advert pacer\'s hold: the pacer stopped sending, and a Backup may have taken over');
    else if (st.covers > seen.covers) this.limited.log('info', 'pacer:cover', fields, 'the election thread was silent; the advert pacer sent its adverts meanwhile');
    if (st.sendErrors > seen.sendErrors) this.limited.log('warn', 'pacer:send', { sendErrors: st.sendErrors - seen.sendErrors, code: st.lastErrno > 0 ? getSystemErrorName(-st.lastErrno) : 'HMAC' }, 'the advert pacer could not send some adverts');
    this.pacerSeen = { covers: st.covers, holds: st.holds, sent: st.sent, sendErrors: st.sendErrors };
  }

  /**
   * The advert for `destination` (the i-th of the send list) at `priority`: the same bytes as
   * last time when nothing it is made of changed (the send copies them into the kernel), so an
   * Active allocates nothing per advert but the send's own bookkeeping. @throws what
   * encodeAdvertisement throws.
   */
  private encoded(i: number, priority: number, destination: string): Buffer {
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

  /** Queues one job; a failing job is logged (before start-up ends, `settled` reports it instead). */
  private enqueue(job: () => Promise<void>): void {
    this.vipQueue = this.vipQueue.then(job).catch((err: unknown) => {
      if (!this.started) {
        this.startError ??= err;
        return;
      }
      const code = netlinkErrno(err);
      this.limited.log('error', `address:${code ?? (err as Error).message}`, { error: (err as Error).message, code }, 'address change failed');
    });
  }

  private startError: unknown = null;

  /** Waits for the queue; during start-up, throws the first job error. */
  private async settled(): Promise<void> {
    await this.vipQueue;
    if (this.startError !== null) throw this.startError;
  }

  /**
   * One announce burst (RFC 9568 §6.4.1 / §6.4.2: gratuitous ARP for IPv4, unsolicited NA for
   * IPv6): `count` frames per VIP, `spacingMs` apart; stops when the machine has left the
   * Active period the burst was asked in.
   */
  private async announce(epoch: number, reason: AnnounceReason, only?: readonly string[]): Promise<void> {
    const { count, spacingMs } = this.opts.announce;
    let sent = 0;
    for (let i = 0; i < count; i++) {
      if (i > 0 && spacingMs > 0) await new Promise((r) => setTimeout(r, spacingMs));
      if (epoch !== this.activeEpoch || this.stopped || !this.edge) break;
      // today's frames: a VIP removed by a reconfigure during the burst is no longer announced
      const frames = only ? only.map((v) => this.frames.get(v)).filter((f) => f !== undefined) : [...this.frames.values()];
      for (const f of frames) {
        try {
          this.edge.sendFrame(f);
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
  private destroyVipSockets(vips: readonly string[]): void {
    for (const vip of vips) {
      try {
        const n = this.edge?.destroySockets(vip) ?? 0;
        if (n > 0) this.log('info', 'connections on a released VIP destroyed (their clients reconnect to the new holder)', { vip, sockets: n });
      } catch (err) {
        this.limited.log('warn', `destroy:${vip}`, { vip, error: (err as Error).message }, 'cannot destroy the connections on a released VIP');
      }
    }
  }

  /** Someone changed our interface's addresses: once things settle, tell the machine what is there. */
  private onAddressesChanged(): void {
    if (this.opts.owner || this.stopped) return;
    if (this.settleTimer) clearTimeout(this.settleTimer);
    this.settleTimer = setTimeout(() => this.enqueue(() => this.observeVips()), ADDRESS_SETTLE_MS);
  }

  /**
   * Lists our VIPs on the interface and tells the machine (MachineEvent `vipsObserved`).
   * @param cause what made us look, for the log line of a stray VIP removed: an address
   *   notification (`watch`) or a reload that added VIPs (`reload`).
   */
  private async observeVips(cause: 'watch' | 'reload' = 'watch'): Promise<void> {
    if (!this.edge || this.stopped) return;
    const before = this.counters.transitions;
    const present = await this.edge.vipsPresent(this.machine.vips);
    // a transition while we listed makes the list stale (e.g. the VIPs we are about to add): look again
    if (this.counters.transitions !== before) return this.onAddressesChanged();
    this.strayCause = cause;
    try {
      this.feed({ type: 'vipsObserved', now: this.now(), present });
    } finally {
      this.strayCause = 'watch';
    }
  }

  /** Why the next `removeVips` 'stray' is carried out (set only while observeVips feeds the machine). */
  private strayCause: 'watch' | 'reload' = 'watch';

  private onLink(running: boolean): void {
    // serialized with the address changes: the netlink package cannot interleave two dumps
    this.enqueue(() => this.checkInterfaceExists());
    if (running === this.linkRunning) return;
    this.linkRunning = running;
    this.log('info', running ? 'link up' : 'link down', { interface: this.opts.ifname });
    this.feed({ type: running ? 'linkUp' : 'linkDown', now: this.now() });
  }

  /**
   * RTM_DELLINK looks like any link message here: ask whether the ifindex still exists. Reported
   * once (a deletion brings several link messages); the agent logs it, with its error code.
   */
  private async checkInterfaceExists(): Promise<void> {
    if (!this.edge || this.stopped || this.interfaceGone) return;
    if ((await this.edge.interfaceExists()) !== false || this.interfaceGone) return;
    this.interfaceGone = true;
    this.vipsHeld = false;
    this.emit({ type: 'interfaceGone', ifname: this.opts.ifname });
  }

  private onPacket(p: ReceivedAdvert): void {
    const o = this.opts;
    const r = filterAdvert(p, { family: o.family, vrid: o.vrid, primaryAddress: o.primaryAddress, unicast: o.unicast, peers: o.peers, members: this.members, vips: o.vips, auth: this.auth });
    if (!r.ok) {
      this.counters.dropped[r.reason] = (this.counters.dropped[r.reason] ?? 0) + 1;
      const text = FILTER_WARNINGS[r.reason];
      if (text === undefined) return;
      if (r.reason === 'vrrpv2') this.warnOnce('vrrpv2', text, { source: p.source, detail: r.detail });
      else this.warnOnce(`${r.reason}:${p.source}`, text, r.reason === 'notPeer' ? { source: p.source, peers: o.peers } : r.reason === 'notMember' ? { source: p.source, members: [...(this.members ?? [])] } : { source: p.source });
      return;
    }
    this.counters.advertsReceived++;
    const at = this.now();
    if (p.source === this.lastAdvertSource && this.machine.state === 'backup') this.receiveGap.add(at - this.lastAdvertAt);
    this.lastAdvertSource = p.source;
    this.lastAdvertAt = at;
    this.lastHeardAt = at;
    if (r.foreign) {
      this.counters.foreign++;
      this.warnOnce(`foreign:${p.source}`, FILTER_WARNINGS.foreign!, { source: p.source, theirs: r.advert.addresses, ours: o.vips });
    }
    this.feed({ type: 'advert', now: this.now(), priority: r.advert.priority, maxAdvertIntervalCs: r.advert.maxAdvertIntervalCs, source: p.source });
  }

  /** Keys already logged, at most {@link LOGGED_SOURCES_MAX}; `unlogged` counts the warnings left out past the cap. */
  private readonly warned = new Set<string>();
  private unlogged = 0;
  private warnOnce(key: string, msg: string, fields: Record<string, unknown>): void {
    if (this.warned.has(key)) return;
    if (this.warned.size >= LOGGED_SOURCES_MAX) {
      // a flood of forged sources: one line says so, then the drop counters carry the rest
      if (this.unlogged++ === 0) this.log('warn', `more than ${LOGGED_SOURCES_MAX} sources to warn about: further ones are only counted (see the dropped counters)`, { first: fields });
      return;
    }
    this.warned.add(key);
    this.log('warn', msg, fields);
  }

  private log(level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>): void {
    this.emit(fields ? { type: 'log', level, msg, fields } : { type: 'log', level, msg });
  }
}

function round3(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

/** The acceptFrom filter's set: canonical text, or null for any source. */
function memberSet(members: readonly string[] | null | undefined): ReadonlySet<string> | null {
  return members ? new Set(members.map(canonicalAddress)) : null;
}
