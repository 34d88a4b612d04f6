/**
 * The VRRPv3 state machine of RFC 9568 §6.4, pure and deterministic, and every protocol output
 * ballast adds to it (VIP addresses, announcements, their repeats and renewals).
 *
 * It never touches a clock, a socket or a timer. Inputs are events that carry the monotonic
 * time (`now`, ms); outputs are actions the engine carries out in order. Timers are deadlines
 * the machine keeps (`nextDeadline()`); the engine sleeps until the earliest one and then feeds
 * a `tick` event. The machine decides *what* happens; the engine only decides *how* (which
 * syscall, which frame bytes).
 *
 *                 startup (priority 255)
 *    Initialize ─────────────────────────────► Active
 *        │  startup                             ▲  │
 *        ▼                                      │  │ higher priority, or equal priority
 *      Backup ──────── Master_Down_Timer ───────┘  │ and a greater primary address
 *        ▲                                         │
 *        └─────────────────────────────────────────┘
 *    Fault: the link is down (not in the RFC; what operators call FAULT in keepalived);
 *    link up goes back through Initialize.
 *
 * Deadlines (each one null while it does not run):
 *
 *    timer            runs in   fires                                      source
 *    Adver_Timer      Active    send, restart at Advertisement_Interval     RFC 9568 §6.4.3
 *    Master_Down      Backup    send, go Active                             RFC 9568 §6.4.2
 *    announce repeat  Active    one second announce burst, once             keepalived garp_master_delay
 *    announce refresh Active    an announce burst every refreshMs           keepalived garp_master_refresh
 *    lifetime renew   Active    renewVips every third of the lifetime       ballast (vipLifetimeMs)
 *    heal announce    Active    the burst a lower-priority advert deferred  keepalived garp_lower_prio_repeat
 *
 * Preempt delay and preempt hold are conditions, not timers: they only decide whether a
 * lower-priority advert is discarded (RFC 9568 §6.4.2, Preempt_Mode); nothing happens when the
 * delay runs out, the Master_Down_Timer still decides the moment of the takeover.
 *
 * Units: intervals on the wire are centiseconds (Max Adver Int, RFC 9568 §5.2.7); deadlines and
 * durations here are milliseconds.
 */
import { compareAddresses } from '../net/address.js';

/** RFC 9568 §6.4 states, plus `fault` (link down). `active` is the RFC's name for "master". */
export type VrrpState = 'initialize' | 'backup' | 'active' | 'fault';

/** The machine's parameters (RFC 9568 §6.1, plus ballast's outputs). */
export interface MachineConfig {
  /** VRID, 1..255. */
  vrid: number;
  /** Priority, 1..255; 255 = this router owns the addresses (RFC 9568 §6.1). */
  priority: number;
  /** Advertisement_Interval in centiseconds, 1..4095. */
  advertisementIntervalCs: number;
  /** Preempt_Mode. */
  preempt: boolean;
  /**
   * Not in the RFC (keepalived's preempt_delay): for this long after startup, a Backup behaves
   * as if Preempt_Mode were false, ms. 0 = off.
   */
  preemptDelayMs: number;
  /** This router's primary address on the interface (IPv4 primary, IPv6 link-local), for the tie-break. */
  primaryAddress: string;
  /**
   * The virtual addresses (canonical text form), in the order they are added and announced.
   * Default none: a machine without VIPs emits only adverts and transitions.
   */
  vips?: readonly string[];
  /**
   * Whether the machine adds and removes the VIPs. False for the address owner (priority 255:
   * the VIPs are its own addresses, RFC 9568 §6.1), which still announces them. Default true.
   */
  manageVips?: boolean;
  /** ms after becoming Active to a second announce burst (0 = none), ms between refresh bursts while Active (0 = none). Default 0, 0. */
  announce?: { repeatAfterMs: number; refreshMs: number };
  /** Valid lifetime of the VIPs, ms (0 = permanent, default); renewed every third of it while Active. */
  vipLifetimeMs?: number;
}

/** Inputs. `now` is a monotonic time in ms; it must never decrease. */
export type MachineEvent =
  /**
   * RFC 9568 §6.4.1 Startup. `resume` (not in the RFC): this router's previous process was Active
   * and handed off in place (the `handOff` event) within the hold it announced, so the Backups
   * still wait for it: go Active at once (as the owner does), keeping the VIPs where they are.
   * Ignored by a router standing by (not a member), which starts as a Backup.
   */
  | { type: 'startup'; now: number; resume?: boolean }
  | { type: 'shutdown'; now: number }
  /**
   * Not in the RFC: the process is restarting in place (an upgrade, `systemctl restart`), and the
   * next one resumes. Active: one last advert at our priority announcing Max Adver Int =
   * `intervalCs` (longer than ours), so that every Backup, which takes Master_Adver_Interval from
   * the advert it accepts (RFC 9568 §6.4.2), waits Master_Down_Interval = 3 × intervalCs +
   * Skew_Time for the next process; the VIPs are renewed with `lifetimeMs` (so that they expire
   * by themselves when the Backups take over, if no process comes back) and stay on the
   * interface; their connections are kept. Then Initialize, every timer stopped. Any other state:
   * as Shutdown (nothing is sent).
   */
  | { type: 'handOff'; now: number; intervalCs: number; lifetimeMs: number }
  /** A valid ADVERTISEMENT for our VRID (the codec and filters.ts have done the §7.1 checks). */
  | { type: 'advert'; now: number; priority: number; maxAdvertIntervalCs: number; source: string }
  /** Time passed; fires every timer whose deadline is <= now. */
  | { type: 'tick'; now: number }
  /** The effective priority changed (1..254; policy, e.g. no healthy backend). */
  | { type: 'priority'; now: number; priority: number }
  | { type: 'linkDown'; now: number }
  | { type: 'linkUp'; now: number }
  /**
   * Not in the RFC: while held, a Backup does not preempt a lower-priority Active router (it
   * behaves as if Preempt_Mode were false). Policy holds it until this node is ready to serve
   * (health checks done, data plane programmed). Taking over a silent group is not affected.
   */
  | { type: 'preemptHold'; now: number; hold: boolean }
  /**
   * Not in the RFC: while set, this router is not (yet) a member of the group (vrrp.acceptFrom
   * `members` and none of its addresses is among them): the others drop its adverts, so it must
   * never become Active. A Backup stays Backup: when its Master_Down_Timer fires it is re-armed
   * for a fresh Master_Down_Interval (never a deadline in the past) and nothing is sent; it never
   * preempts (as if Preempt_Mode were false); the owner (255) starts as a Backup too. Setting it
   * while Active resigns as a shutdown does (a priority-0 advert, the VIPs released), into Backup.
   * Clearing it changes nothing at once: the running Master_Down_Timer (at most one
   * Master_Down_Interval away) then decides as usual.
   */
  | { type: 'standby'; now: number; standby: boolean }
  /**
   * Which of our VIPs are on the interface now (any prefix length), as rtnetlink reports them:
   * at start-up, after someone else changed the interface's addresses, and after a reconfigure
   * added VIPs while not Active (a reload does what a start does).
   */
  | { type: 'vipsObserved'; now: number; present: readonly string[] }
  /**
   * Not in the RFC (RFC 9568 §6.1 parameters are set at start): the operator changed some of the
   * parameters at run time (a reload). Only the fields given change; see {@link MachineReconfigure}.
   */
  | ({ type: 'reconfigure'; now: number } & MachineReconfigure);

/**
 * The parameters a running machine may change (each optional; absent = unchanged). VRID, primary
 * address, family and ownership are not among them: those need a new group membership.
 *
 * - `vips`: the whole new set. While Active (and managing the VIPs) the added ones are added and
 *   announced, the removed ones removed and their connections reset; the kept ones are never
 *   touched and the Adver_Timer does not move. In any other state only the list changes (the
 *   engine then reports the added VIPs it finds on the interface, `vipsObserved`, which the
 *   machine answers with removeVips 'stray' as at start).
 * - `priority`: the configured (base) priority, 1..254. The effective priority follows it unless
 *   the policy has lowered it (effective ≠ old base), in which case the policy's next
 *   `priority` event decides. Takes effect from the next advert / decision.
 * - `advertisementIntervalCs`: from the next advert. Active: the next advert is due at
 *   min(the running deadline, last advert + new interval), never before now, and carries the new
 *   Max Adver Int, so Backups learn it (§6.4.2) before any gap longer than the old interval;
 *   after it the adverts follow the new interval. Backup that has not heard an Active router yet
 *   (Master_Adver_Interval is still its own, §6.4.1): Master_Adver_Interval becomes the new one
 *   and the Master_Down_Timer is recomputed from when it was last started, never in the past.
 * - `preempt`, `preemptDelayMs`: from the next lower-priority advert (the delay still counts
 *   from startup).
 * - `announce.refreshMs` restarts the refresh timer while Active; `announce.repeatAfterMs`
 *   applies from the next time the router becomes Active.
 * - `vipLifetimeMs`: while Active, the held VIPs are renewed at once with the new lifetime.
 */
export interface MachineReconfigure {
  vips?: readonly string[];
  priority?: number;
  advertisementIntervalCs?: number;
  preempt?: boolean;
  preemptDelayMs?: number;
  announce?: { repeatAfterMs: number; refreshMs: number };
  vipLifetimeMs?: number;
}

/** Why the machine left a state: one short machine-readable word, logged as `reason`. */
export type TransitionReason =
  | 'startup'
  | 'owner'
  | 'masterDown'
  | 'resigned'
  | 'preempt'
  | 'higherPriority'
  | 'addressTieBreak'
  | 'shutdown'
  /** Stopped for a restart in place, the VIPs kept (MachineEvent `handOff`). */
  | 'handOff'
  /** Started Active: the previous process handed off in place (MachineEvent `startup` with `resume`). */
  | 'resumed'
  | 'linkDown'
  | 'linkUp'
  /** Resigned: this router stopped being a member of the group (MachineEvent `standby`). */
  | 'notMember';

/** Why an announce burst (gratuitous ARP / unsolicited NA) is sent. */
export type AnnounceReason =
  /** RFC 9568 §6.4.1 / §6.4.2: on becoming Active. */
  | 'becameActive'
  /** The one repeat burst, `announce.repeatAfterMs` after becoming Active. */
  | 'repeat'
  /** Every `announce.refreshMs` while Active. */
  | 'refresh'
  /** An Active router heard one it beats: the other side of a healed partition may have announced itself. */
  | 'healedPartition'
  /** Something else removed a VIP and the machine put it back. */
  | 'restored'
  /** A reconfigure added VIPs while Active (the burst covers the added ones only). */
  | 'added';

/** Outputs, to be carried out in order. */
export type MachineAction =
  /**
   * Send an ADVERTISEMENT with this priority (0 = resign) and our Advertisement_Interval, or
   * `intervalCs` as its Max Adver Int when given (a hand-off announces a longer one).
   */
  | { type: 'send'; priority: number; intervalCs?: number }
  /** A state change (for logs, metrics and `/status`; the effects follow as their own actions). */
  | {
      type: 'transition';
      from: VrrpState;
      to: VrrpState;
      reason: TransitionReason;
      detail?: string;
      /** On Backup → Active: the Active router we last heard, now silent or resigned (its node is likely gone). */
      previousMaster?: string;
    }
  /** Add these VIPs (as /32 or /128, with the configured lifetime). */
  | { type: 'addVips'; vips: readonly string[]; reason: 'becameActive' | 'restored' | 'added' }
  /**
   * Add these held VIPs again, which renews their valid lifetime (the configured one, or
   * `lifetimeMs` when given: a hand-off's).
   */
  | { type: 'renewVips'; vips: readonly string[]; lifetimeMs?: number }
  /**
   * Remove these VIPs whatever their prefix length: `released` on leaving Active, `stray` when
   * they were found on the interface while this router is not Active (two holders are worse than
   * none), `removed` when a reconfigure dropped them from the set while Active.
   */
  | { type: 'removeVips'; vips: readonly string[]; reason: 'released' | 'stray' | 'removed' }
  /**
   * Reset the connections whose local address is one of these just-released VIPs: they can never
   * get another packet, and a reset makes their clients reconnect (to the new holder) at once.
   */
  | { type: 'destroyVipSockets'; vips: readonly string[] }
  /**
   * Send an announce burst for every VIP, or only for `vips` when given (`added`); `source` is
   * the beaten router for `healedPartition`.
   */
  | { type: 'announce'; reason: AnnounceReason; source?: string; vips?: readonly string[] };

/** What `/status` reports. Times are the machine's monotonic ms. */
export interface MachineSnapshot {
  state: VrrpState;
  /** Configured priority. */
  priority: number;
  /** Priority advertised now (policy may lower it). */
  effectivePriority: number;
  /** The Active router's primary address, as far as we know (ours when Active). */
  masterAddress: string | null;
  masterPriority: number | null;
  /** Master_Adver_Interval, centiseconds. */
  masterAdverIntervalCs: number;
  /** Skew_Time, ms. */
  skewTimeMs: number;
  /** Master_Down_Interval, ms. */
  masterDownIntervalMs: number;
  /** When the current state was entered, monotonic ms. */
  since: number;
  /** Not a member of the group: held in Backup (MachineEvent `standby`). */
  standby: boolean;
  /**
   * A Backup (a member) with Preempt_Mode on whose Active router has a lower priority than its
   * own: it takes over when its Master_Down_Timer fires (RFC 9568 §6.4.2), at once or after its
   * preempt hold or delay ends (until then it accepts that router's adverts).
   */
  preempting: boolean;
  /** Adverts of other Active routers heard while this router was Active (see {@link OtherMastersHeard}). */
  otherMasters: OtherMastersHeard;
}

/**
 * What an Active router heard of other Active routers: every advert with a priority above 0 from
 * another source that reached it while it was Active (Backups send no adverts, RFC 9568 §6.4.2,
 * so each is a second master's claim). Nobody can know of a second master while they cannot hear
 * each other (a partition): this says only what was heard, once it is heard.
 *
 * Outcomes: `kept` — this router won (a lower priority, or an equal one and a smaller primary
 * address, §6.4.3) and kept the VIPs: two masters held them until then (a healed partition, a
 * stalled holder, a peer that cannot hear us); `yielded` — the sender won and this router went
 * Backup (a preemption, or the other side of a healed partition); `handover` — the last advert of
 * the router this one has just preempted (§6.4.2), heard within one Master_Down_Interval of the
 * preemption: the normal end of a preemption, not two masters.
 */
export interface OtherMastersHeard {
  /** Such adverts since start, per outcome. */
  adverts: { kept: number; yielded: number; handover: number };
  /** The latest such advert: sender, its priority, what this router did, when (monotonic ms); null before any. */
  last: { source: string; priority: number; outcome: OtherMasterOutcome; at: number } | null;
  /**
   * When each sender was last heard so (monotonic ms), the latest {@link OTHER_MASTER_SOURCES_MAX}
   * senders, most recent last.
   */
  sources: { source: string; at: number }[];
}

/** What an Active router did on hearing another Active router's advert (see {@link OtherMastersHeard}). */
export type OtherMasterOutcome = 'kept' | 'yielded' | 'handover';

/** Senders remembered in {@link OtherMastersHeard} `sources` (a flood of sources cannot grow memory). */
export const OTHER_MASTER_SOURCES_MAX = 16;

/**
 * At most one healed-partition announce burst per this many ms (a peer that cannot hear us would
 * otherwise cause one per advert). A lower-priority advert heard sooner is not dropped: it defers
 * one burst to the end of the interval, so that the winner's claim is the last one clients hear
 * (see {@link VrrpMachine} `onAdvert`). Clients are back on the winner within one
 * Advertisement_Interval (its first lower-priority advert) + this, after a partition heals.
 */
export const HEAL_ANNOUNCE_MIN_INTERVAL_MS = 1000;

/** Skew_Time in ms: ((256 - Priority) * Master_Adver_Interval) / 256 (RFC 9568 §6.1), interval in cs. */
export function skewTimeMs(priority: number, masterAdverIntervalCs: number): number {
  return ((256 - priority) * masterAdverIntervalCs * 10) / 256;
}

/** Master_Down_Interval in ms: 3 * Master_Adver_Interval + Skew_Time (RFC 9568 §6.1), interval in cs. */
export function masterDownIntervalMs(priority: number, masterAdverIntervalCs: number): number {
  return 3 * masterAdverIntervalCs * 10 + skewTimeMs(priority, masterAdverIntervalCs);
}

/**
 * Checks a reconfigure before anything changes.
 * @throws RangeError naming the first parameter outside its range (RFC 9568 §6.1), or when the
 *   address owner's priority (255) would change (that needs a new group membership).
 */
export function checkReconfigure(r: MachineReconfigure, owner: boolean): void {
  if (r.priority !== undefined) {
    if (owner) throw new RangeError('the address owner (priority 255) cannot change its priority at run time: that is a new group membership');
    if (!Number.isInteger(r.priority) || r.priority < 1 || r.priority > 254) throw new RangeError(`priority must be 1..254, got ${r.priority}`);
  }
  const i = r.advertisementIntervalCs;
  if (i !== undefined && (!Number.isInteger(i) || i < 1 || i > 4095)) throw new RangeError(`advertisementIntervalCs must be 1..4095, got ${i}`);
  if (r.preempt !== undefined && typeof r.preempt !== 'boolean') throw new RangeError(`preempt must be a boolean, got ${String(r.preempt)}`);
  if (r.preemptDelayMs !== undefined && !(Number.isFinite(r.preemptDelayMs) && r.preemptDelayMs >= 0))
    throw new RangeError(`preemptDelayMs must be >= 0, got ${r.preemptDelayMs}`);
  if (r.announce !== undefined) {
    const { repeatAfterMs, refreshMs } = r.announce;
    if (!(Number.isFinite(repeatAfterMs) && repeatAfterMs >= 0) || !(Number.isFinite(refreshMs) && refreshMs >= 0))
      throw new RangeError('announce.repeatAfterMs and announce.refreshMs must be >= 0');
  }
  if (r.vipLifetimeMs !== undefined && !(Number.isFinite(r.vipLifetimeMs) && r.vipLifetimeMs >= 0))
    throw new RangeError(`vipLifetimeMs must be >= 0, got ${r.vipLifetimeMs}`);
  if (r.vips !== undefined && (!Array.isArray(r.vips) || r.vips.some((v) => typeof v !== 'string'))) throw new RangeError('vips must be a list of addresses');
}

/** The deadlines of ballast's own outputs while Active, ms, each null when not running. */
interface ActiveTimers {
  repeat: number | null;
  refresh: number | null;
  renew: number | null;
  /** the deferred healed-partition burst (a lower-priority advert within HEAL_ANNOUNCE_MIN_INTERVAL_MS of the last one) */
  heal: number | null;
}

/**
 * One virtual router's state machine (RFC 9568 §6.4). Not thread-safe, not re-entrant; feed it
 * events in time order.
 */
export class VrrpMachine {
  private cfg: Required<MachineConfig>;
  private current: VrrpState = 'initialize';
  private effective: number;
  private masterAdverIntervalCs: number;
  private masterAddress: string | null = null;
  private masterPriority: number | null = null;
  private enteredAt = 0;
  private startedAt = 0;
  /** Adver_Timer deadline, ms, or null when not running. */
  private adverTimer: number | null = null;
  /** When the last advert was sent while Active, ms (an interval change paces the next one from it). */
  private lastAdvertAt = 0;
  /** Master_Down_Timer deadline, ms, or null when not running. */
  private masterDownTimer: number | null = null;
  /** When the Master_Down_Timer was last (re)started, ms. */
  private masterDownStartedAt = 0;
  private readonly active: ActiveTimers = { repeat: null, refresh: null, renew: null, heal: null };
  private lastHealAnnounce = -Infinity;
  /** the source of the latest lower-priority advert that deferred a healed-partition burst */
  private healSource = '';
  /** Set by the `preemptHold` event. */
  private preemptHeld = false;
  /** Set by the `standby` event. */
  private standingBy = false;
  /** What set the running Master_Down_Timer: silence, or a priority-0 advert. */
  private downReason: 'masterDown' | 'resigned' | 'preempt' = 'masterDown';
  private lastNow = -Infinity;
  /** See {@link OtherMastersHeard}; `heardAt` is its `sources`, in insertion order (most recent last). */
  private readonly otherAdverts = { kept: 0, yielded: 0, handover: 0 };
  private otherLast: OtherMastersHeard['last'] = null;
  private readonly heardAt = new Map<string, number>();
  /** The router this one preempted on becoming Active (reason `preempt`), else null: its last advert is a handover. */
  private preempted: string | null = null;

  /** @throws RangeError when a parameter is outside its RFC 9568 §6.1 range (or a duration is negative). */
  constructor(cfg: MachineConfig) {
    if (!Number.isInteger(cfg.vrid) || cfg.vrid < 1 || cfg.vrid > 255) throw new RangeError(`vrid must be 1..255, got ${cfg.vrid}`);
    if (!Number.isInteger(cfg.priority) || cfg.priority < 1 || cfg.priority > 255) throw new RangeError(`priority must be 1..255, got ${cfg.priority}`);
    const i = cfg.advertisementIntervalCs;
    if (!Number.isInteger(i) || i < 1 || i > 4095) throw new RangeError(`advertisementIntervalCs must be 1..4095, got ${i}`);
    if (!(cfg.preemptDelayMs >= 0)) throw new RangeError(`preemptDelayMs must be >= 0, got ${cfg.preemptDelayMs}`);
    const announce = cfg.announce ?? { repeatAfterMs: 0, refreshMs: 0 };
    if (!(announce.repeatAfterMs >= 0) || !(announce.refreshMs >= 0)) throw new RangeError('announce.repeatAfterMs and announce.refreshMs must be >= 0');
    const lifetime = cfg.vipLifetimeMs ?? 0;
    if (!(lifetime >= 0)) throw new RangeError(`vipLifetimeMs must be >= 0, got ${lifetime}`);
    this.cfg = { ...cfg, vips: [...(cfg.vips ?? [])], manageVips: cfg.manageVips ?? true, announce: { ...announce }, vipLifetimeMs: lifetime };
    this.effective = cfg.priority;
    this.masterAdverIntervalCs = i;
  }

  /** The current state. */
  get state(): VrrpState {
    return this.current;
  }

  /** The VIPs this machine adds, removes and announces (canonical text), as configured. */
  get vips(): readonly string[] {
    return this.cfg.vips;
  }

  /** The earliest running timer's deadline (monotonic ms), or null when none runs. */
  nextDeadline(): number | null {
    let due: number | null = null;
    for (const t of [this.adverTimer, this.masterDownTimer, this.active.repeat, this.active.refresh, this.active.renew, this.active.heal]) {
      if (t !== null && (due === null || t < due)) due = t;
    }
    return due;
  }

  /** A copy of what an operator wants to see. */
  snapshot(): MachineSnapshot {
    return {
      state: this.current,
      priority: this.cfg.priority,
      effectivePriority: this.effective,
      masterAddress: this.current === 'active' ? this.cfg.primaryAddress : this.masterAddress,
      masterPriority: this.current === 'active' ? this.effective : this.masterPriority,
      masterAdverIntervalCs: this.masterAdverIntervalCs,
      skewTimeMs: skewTimeMs(this.effective, this.masterAdverIntervalCs),
      masterDownIntervalMs: masterDownIntervalMs(this.effective, this.masterAdverIntervalCs),
      since: this.enteredAt,
      standby: this.standingBy,
      preempting:
        this.current === 'backup' &&
        this.cfg.preempt &&
        !this.standingBy &&
        this.masterPriority !== null &&
        this.masterPriority > 0 &&
        this.masterPriority < this.effective,
      otherMasters: {
        adverts: { ...this.otherAdverts },
        last: this.otherLast === null ? null : { ...this.otherLast },
        sources: [...this.heardAt].map(([source, at]) => ({ source, at })),
      },
    };
  }

  /**
   * Feeds one event and returns the actions to carry out, in order.
   * @throws RangeError when `now` goes backwards (the clock must be monotonic), or a `priority`
   *   event is outside 1..255.
   */
  handle(event: MachineEvent): MachineAction[] {
    if (event.now < this.lastNow) throw new RangeError(`time went backwards: ${event.now} < ${this.lastNow}`);
    this.lastNow = event.now;
    const out: MachineAction[] = [];
    switch (event.type) {
      case 'startup':
        if (this.current === 'initialize') {
          if (event.resume === true && !this.standingBy && this.effective !== 255) {
            this.startedAt = event.now;
            this.becomeActive(event.now, out, 'resumed');
          } else this.startup(event.now, out, 'startup');
        }
        break;
      case 'shutdown':
        this.shutdown(event.now, out);
        break;
      case 'handOff':
        this.handOff(event, out);
        break;
      case 'advert':
        this.onAdvert(event, out);
        break;
      case 'tick':
        this.onTick(event.now, out);
        break;
      case 'priority':
        this.onPriority(event.priority);
        break;
      case 'preemptHold':
        this.preemptHeld = event.hold;
        break;
      case 'standby':
        this.onStandby(event.now, event.standby, out);
        break;
      case 'vipsObserved':
        this.onVipsObserved(event.present, out);
        break;
      case 'reconfigure':
        this.onReconfigure(event, out);
        break;
      case 'linkDown':
        if (this.current !== 'fault') {
          // the link is gone: nothing can be sent, so no priority-0 advert; the peers' Master_Down_Timer covers us
          const wasActive = this.current === 'active';
          this.stopTimers();
          this.enter('fault', event.now, 'linkDown', out);
          if (wasActive) this.release(out);
        }
        break;
      case 'linkUp':
        if (this.current === 'fault') {
          this.enter('initialize', event.now, 'linkUp', out);
          this.startup(event.now, out, 'linkUp');
        }
        break;
    }
    return out;
  }

  /** RFC 9568 §6.4.1: Initialize, on Startup. */
  private startup(now: number, out: MachineAction[], reason: TransitionReason): void {
    this.startedAt = now;
    if (this.effective === 255 && !this.standingBy) {
      // §6.4.1: the owner advertises and goes Active at once
      this.becomeActive(now, out, 'owner');
      return;
    }
    // §6.4.1: Master_Adver_Interval = Advertisement_Interval, Master_Down_Timer = Master_Down_Interval
    this.masterAdverIntervalCs = this.cfg.advertisementIntervalCs;
    this.restartMasterDown(now, this.masterDownMs());
    this.downReason = 'masterDown';
    this.enter('backup', now, reason, out);
  }

  /** RFC 9568 §6.4.2 / §6.4.3: Shutdown. */
  private shutdown(now: number, out: MachineAction[]): void {
    const wasActive = this.current === 'active';
    // §6.4.3: an Active router sends priority 0 so that a Backup takes over after Skew_Time
    if (wasActive) out.push({ type: 'send', priority: 0 });
    this.stopTimers();
    if (this.current !== 'initialize') this.enter('initialize', now, 'shutdown', out);
    if (wasActive) this.release(out);
  }

  /** See MachineEvent `handOff`. */
  private handOff(ev: Extract<MachineEvent, { type: 'handOff' }>, out: MachineAction[]): void {
    if (!Number.isInteger(ev.intervalCs) || ev.intervalCs < 1 || ev.intervalCs > 4095) throw new RangeError(`intervalCs must be 1..4095, got ${ev.intervalCs}`);
    if (!(ev.lifetimeMs >= 0)) throw new RangeError(`lifetimeMs must be >= 0, got ${ev.lifetimeMs}`);
    if (this.current !== 'active') {
      this.shutdown(ev.now, out);
      return;
    }
    out.push({ type: 'send', priority: this.effective, intervalCs: ev.intervalCs });
    const { vips, manageVips } = this.cfg;
    if (manageVips && vips.length > 0) out.push({ type: 'renewVips', vips, lifetimeMs: ev.lifetimeMs });
    this.stopTimers();
    this.enter('initialize', ev.now, 'handOff', out);
  }

  private onTick(now: number, out: MachineAction[]): void {
    if (this.current === 'active' && this.adverTimer !== null && this.adverTimer <= now) {
      // §6.4.3: Adver_Timer fired: send, and reset it to Advertisement_Interval
      out.push({ type: 'send', priority: this.effective });
      this.restartAdverTimer(now);
    }
    if (this.current === 'active') {
      const t = this.active;
      if (t.renew !== null && t.renew <= now) {
        // renewing every third of the lifetime survives two lost renewals
        out.push({ type: 'renewVips', vips: this.cfg.vips });
        t.renew = now + this.cfg.vipLifetimeMs / 3;
      }
      if (t.repeat !== null && t.repeat <= now) {
        out.push({ type: 'announce', reason: 'repeat' });
        t.repeat = null;
      }
      if (t.refresh !== null && t.refresh <= now) {
        out.push({ type: 'announce', reason: 'refresh' });
        t.refresh = now + this.cfg.announce.refreshMs;
      }
      if (t.heal !== null && t.heal <= now) {
        t.heal = null;
        if (this.cfg.vips.length > 0) {
          this.lastHealAnnounce = now;
          out.push({ type: 'announce', reason: 'healedPartition', source: this.healSource });
        }
      }
    }
    if (this.current === 'backup' && this.masterDownTimer !== null && this.masterDownTimer <= now) {
      if (this.standingBy) {
        // not a member: the others would not hear us; keep listening for a fresh Master_Down_Interval
        this.restartMasterDown(now, this.masterDownMs());
        this.downReason = 'masterDown';
      }
      // §6.4.2: Master_Down_Timer fired
      else this.becomeActive(now, out, this.downReason);
    }
  }

  /** See MachineEvent `standby`. */
  private onStandby(now: number, standby: boolean, out: MachineAction[]): void {
    if (standby === this.standingBy) return;
    this.standingBy = standby;
    if (!standby || this.current !== 'active') return;
    // §6.4.3 Shutdown's priority 0, so that a member takes over after its Skew_Time; then Backup
    out.push({ type: 'send', priority: 0 });
    this.stopTimers();
    this.masterAdverIntervalCs = this.cfg.advertisementIntervalCs;
    this.restartMasterDown(now, this.masterDownMs());
    this.downReason = 'masterDown';
    this.enter('backup', now, 'notMember', out);
    this.release(out);
  }

  private onAdvert(ev: Extract<MachineEvent, { type: 'advert' }>, out: MachineAction[]): void {
    if (this.current === 'backup') {
      if (ev.priority === 0) {
        // §6.4.2: the Active router resigned: take over after Skew_Time only
        this.restartMasterDown(ev.now, this.skewMs());
        this.downReason = 'resigned';
        this.masterPriority = 0;
        this.masterAddress = ev.source;
        return;
      }
      if (!this.preempting(ev.now) || ev.priority >= this.effective) {
        // §6.4.2: accept the sender as Active and adopt its interval
        this.masterAdverIntervalCs = ev.maxAdvertIntervalCs;
        this.masterAddress = ev.source;
        this.masterPriority = ev.priority;
        this.restartMasterDown(ev.now, this.masterDownMs());
        this.downReason = 'masterDown';
      } else {
        // §6.4.2 discard: our Master_Down_Timer will fire and we preempt the lower priority
        this.downReason = 'preempt';
        this.masterAddress = ev.source;
        this.masterPriority = ev.priority;
      }
      return;
    }
    if (this.current === 'active') {
      if (ev.priority === 0) {
        // §6.4.3: another router resigned while we are Active: assert ourselves at once
        out.push({ type: 'send', priority: this.effective });
        this.restartAdverTimer(ev.now);
        return;
      }
      const higher = ev.priority > this.effective;
      const tie = ev.priority === this.effective && compareAddresses(ev.source, this.cfg.primaryAddress) > 0;
      if (compareAddresses(ev.source, this.cfg.primaryAddress) !== 0) this.noteOtherMaster(ev, higher || tie);
      if (higher || tie) {
        // §6.4.3: yield to the sender. Not in the RFC: our last act as Active is one advert at our
        // own priority. Two Active routers after a healed partition: if the winner's advert
        // reached us first, the winner has never heard us and does not know that clients may
        // still hold our MAC for the VIP; this advert tells it (it answers a lower priority with
        // an advert and a fresh announce burst — keepalived's garp_lower_prio_repeat does the
        // same). Backups treat it as any advert from an Active.
        out.push({ type: 'send', priority: this.effective });
        this.stopTimers();
        this.masterAdverIntervalCs = ev.maxAdvertIntervalCs;
        this.masterAddress = ev.source;
        this.masterPriority = ev.priority;
        this.restartMasterDown(ev.now, this.masterDownMs());
        this.downReason = 'masterDown';
        this.enter('backup', ev.now, higher ? 'higherPriority' : 'addressTieBreak', out, `${ev.source} priority ${ev.priority}`);
        this.release(out);
        return;
      }
      // §6.4.3 says discard. We also advertise at once (as keepalived does): a lower-priority router
      // that thinks it is Active (a healed partition) then yields within one round trip instead
      // of up to one Advertisement_Interval.
      if (compareAddresses(ev.source, this.cfg.primaryAddress) !== 0) {
        out.push({ type: 'send', priority: this.effective });
        this.restartAdverTimer(ev.now);
        // not in the RFC: the other side of the partition may have announced itself, and clients
        // may hold its MAC for the VIP: claim it again (rate-limited, keepalived's garp_lower_prio_repeat).
        // Within the rate limit the claim is deferred to its end, not dropped: with three routers, a
        // middle one that was Active too claims the VIP when it hears the lowest one, a moment
        // before it hears us and yields; its last advert (at its own priority) reaches us right
        // after our own claim, and only a later claim of ours takes its clients back (dropped, the
        // claim would leave clients on the yielded router until the 60 s refresh, and then every
        // connection made through it would reset at once)
        if (this.cfg.vips.length > 0) {
          if (ev.now - this.lastHealAnnounce >= HEAL_ANNOUNCE_MIN_INTERVAL_MS) {
            this.lastHealAnnounce = ev.now;
            this.active.heal = null;
            out.push({ type: 'announce', reason: 'healedPartition', source: ev.source });
          } else {
            this.active.heal = this.lastHealAnnounce + HEAL_ANNOUNCE_MIN_INTERVAL_MS;
            this.healSource = ev.source;
          }
        }
      }
    }
    // initialize / fault: not participating, drop
  }

  /** An Active router heard another Active router's advert (see {@link OtherMastersHeard}). */
  private noteOtherMaster(ev: Extract<MachineEvent, { type: 'advert' }>, yields: boolean): void {
    const handover = !yields && ev.source === this.preempted && ev.now - this.enteredAt <= this.masterDownMs();
    const outcome: OtherMasterOutcome = yields ? 'yielded' : handover ? 'handover' : 'kept';
    this.otherAdverts[outcome]++;
    this.otherLast = { source: ev.source, priority: ev.priority, outcome, at: ev.now };
    this.heardAt.delete(ev.source);
    this.heardAt.set(ev.source, ev.now);
    if (this.heardAt.size > OTHER_MASTER_SOURCES_MAX) this.heardAt.delete(this.heardAt.keys().next().value!);
  }

  /**
   * Not in the RFC (RFC 9568 §6.4 assumes the router alone changes its addresses): make the
   * interface match the state. An Active router puts back a VIP that something else removed and
   * announces it; any other router removes a VIP it finds, since two holders are worse than none.
   */
  private onVipsObserved(present: readonly string[], out: MachineAction[]): void {
    if (!this.cfg.manageVips) return;
    const here = new Set(present);
    if (this.current === 'active') {
      const missing = this.cfg.vips.filter((v) => !here.has(v));
      if (missing.length === 0) return;
      out.push({ type: 'addVips', vips: missing, reason: 'restored' });
      out.push({ type: 'announce', reason: 'restored' });
      return;
    }
    const stray = this.cfg.vips.filter((v) => here.has(v));
    if (stray.length > 0) out.push({ type: 'removeVips', vips: stray, reason: 'stray' });
  }

  /** See {@link MachineReconfigure}: everything is checked before anything changes. */
  private onReconfigure(ev: Extract<MachineEvent, { type: 'reconfigure' }>, out: MachineAction[]): void {
    checkReconfigure(ev, this.cfg.priority === 255);
    const now = ev.now;
    const old = this.cfg;
    const next: Required<MachineConfig> = {
      ...old,
      vips: ev.vips !== undefined ? [...new Set(ev.vips)] : old.vips,
      priority: ev.priority ?? old.priority,
      advertisementIntervalCs: ev.advertisementIntervalCs ?? old.advertisementIntervalCs,
      preempt: ev.preempt ?? old.preempt,
      preemptDelayMs: ev.preemptDelayMs ?? old.preemptDelayMs,
      announce: ev.announce ? { ...ev.announce } : old.announce,
      vipLifetimeMs: old.manageVips ? (ev.vipLifetimeMs ?? old.vipLifetimeMs) : 0,
    };
    this.cfg = next;
    // the policy's lowered priority stays until the policy speaks again
    if (this.effective === old.priority) this.effective = next.priority;
    const active = this.current === 'active';

    if (next.advertisementIntervalCs !== old.advertisementIntervalCs) {
      if (active && this.adverTimer !== null) {
        // the next advert carries the new Max Adver Int; it is never later than the old deadline,
        // so Backups (whose Master_Down_Interval still uses the old interval) hear it in time
        this.masterAdverIntervalCs = next.advertisementIntervalCs;
        this.adverTimer = Math.max(now, Math.min(this.adverTimer, this.lastAdvertAt + this.advertisementMs()));
      } else if (this.current === 'backup' && this.masterAddress === null && this.downReason === 'masterDown') {
        // §6.4.1: with no Active router heard yet, Master_Adver_Interval is our own interval
        this.masterAdverIntervalCs = next.advertisementIntervalCs;
        this.recomputeMasterDown(now);
      }
    }
    if (next.priority !== old.priority && this.current === 'backup' && this.masterAddress === null && this.downReason === 'masterDown') {
      // Skew_Time depends on our priority: nobody heard yet, so the running timer is all ours
      this.recomputeMasterDown(now);
    }

    if (active) {
      const t = this.active;
      if (next.announce.refreshMs !== old.announce.refreshMs) t.refresh = next.announce.refreshMs > 0 ? now + next.announce.refreshMs : null;
      const kept = new Set(next.vips);
      const before = new Set(old.vips);
      const removed = old.vips.filter((v) => !kept.has(v));
      const added = next.vips.filter((v) => !before.has(v));
      if (next.manageVips && removed.length > 0) {
        out.push({ type: 'removeVips', vips: removed, reason: 'removed' });
        out.push({ type: 'destroyVipSockets', vips: removed });
      }
      if (added.length > 0) {
        if (next.manageVips) out.push({ type: 'addVips', vips: added, reason: 'added' });
        out.push({ type: 'announce', reason: 'added', vips: added });
      }
      if (next.manageVips && next.vipLifetimeMs !== old.vipLifetimeMs) {
        // the held VIPs carry the old lifetime: re-add them with the new one now
        const renew = next.vips.filter((v) => before.has(v));
        if (renew.length > 0) out.push({ type: 'renewVips', vips: renew });
      }
      if (next.manageVips && (next.vipLifetimeMs !== old.vipLifetimeMs || (added.length > 0 && t.renew === null))) {
        t.renew = next.vipLifetimeMs > 0 && next.vips.length > 0 ? now + next.vipLifetimeMs / 3 : null;
      }
      if (next.vips.length === 0) t.repeat = t.refresh = t.renew = t.heal = null;
      else if (old.vips.length === 0 && t.refresh === null && next.announce.refreshMs > 0) t.refresh = now + next.announce.refreshMs;
    }
  }

  /** Master_Down_Timer from when it was last started, with today's Master_Down_Interval; never in the past. */
  private recomputeMasterDown(now: number): void {
    if (this.masterDownTimer === null) return;
    this.masterDownTimer = Math.max(now, this.masterDownStartedAt + this.masterDownMs());
  }

  private onPriority(priority: number): void {
    if (!Number.isInteger(priority) || priority < 1 || priority > 255) throw new RangeError(`priority must be 1..255, got ${priority}`);
    this.effective = priority;
    // the next advert carries it; a Backup's running Master_Down_Timer keeps its deadline (the
    // RFC recomputes Skew_Time only when an advert arrives)
  }

  /** §6.4.2 Preempt_Mode, with the optional delay after startup and the policy's hold. */
  private preempting(now: number): boolean {
    return this.cfg.preempt && !this.preemptHeld && !this.standingBy && now - this.startedAt >= this.cfg.preemptDelayMs;
  }

  /**
   * §6.4.1 / §6.4.2: send an ADVERTISEMENT, start the Adver_Timer, go Active; then (§6.4.1 "for
   * each IPvX address associated with the virtual router", gratuitous ARP / unsolicited NA) add
   * and announce the VIPs and start ballast's timers of the Active state.
   */
  private becomeActive(now: number, out: MachineAction[], reason: TransitionReason): void {
    out.push({ type: 'send', priority: this.effective });
    const previous = this.current === 'backup' ? this.masterAddress : null;
    this.preempted = reason === 'preempt' ? previous : null;
    this.masterDownTimer = null;
    this.restartAdverTimer(now);
    this.masterAdverIntervalCs = this.cfg.advertisementIntervalCs;
    this.enter('active', now, reason, out);
    const t = out[out.length - 1];
    if (previous !== null && t?.type === 'transition') t.previousMaster = previous;
    this.lastHealAnnounce = -Infinity;
    const { vips, manageVips, announce, vipLifetimeMs } = this.cfg;
    if (vips.length === 0) return;
    if (manageVips) out.push({ type: 'addVips', vips, reason: 'becameActive' });
    out.push({ type: 'announce', reason: 'becameActive' });
    this.active.repeat = announce.repeatAfterMs > 0 ? now + announce.repeatAfterMs : null;
    this.active.refresh = announce.refreshMs > 0 ? now + announce.refreshMs : null;
    this.active.renew = manageVips && vipLifetimeMs > 0 ? now + vipLifetimeMs / 3 : null;
  }

  /** Leaving Active (§6.4.3: "stop Adver_Timer"): the VIPs go, and so do the connections on them. */
  private release(out: MachineAction[]): void {
    if (!this.cfg.manageVips || this.cfg.vips.length === 0) return;
    out.push({ type: 'removeVips', vips: this.cfg.vips, reason: 'released' });
    out.push({ type: 'destroyVipSockets', vips: this.cfg.vips });
  }

  private enter(to: VrrpState, now: number, reason: TransitionReason, out: MachineAction[], detail?: string): void {
    const from = this.current;
    this.current = to;
    this.enteredAt = now;
    if (to !== 'backup') {
      this.masterAddress = null;
      this.masterPriority = null;
    }
    out.push(detail === undefined ? { type: 'transition', from, to, reason } : { type: 'transition', from, to, reason, detail });
  }

  /** An advert was just sent: the Adver_Timer restarts at Advertisement_Interval (§6.4.3). */
  private restartAdverTimer(now: number): void {
    this.lastAdvertAt = now;
    this.adverTimer = now + this.advertisementMs();
  }

  private restartMasterDown(now: number, ms: number): void {
    this.masterDownStartedAt = now;
    this.masterDownTimer = now + ms;
  }

  private stopTimers(): void {
    this.adverTimer = null;
    this.masterDownTimer = null;
    this.active.repeat = this.active.refresh = this.active.renew = this.active.heal = null;
  }

  private advertisementMs(): number {
    return this.cfg.advertisementIntervalCs * 10;
  }

  private skewMs(): number {
    return skewTimeMs(this.effective, this.masterAdverIntervalCs);
  }

  private masterDownMs(): number {
    return masterDownIntervalMs(this.effective, this.masterAdverIntervalCs);
  }
}
