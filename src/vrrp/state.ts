/**
 * The VRRPv3 state machine of RFC 9568 §6.4, pure and deterministic.
 *
 * It never touches a clock, a socket or a timer. Inputs are events that carry the monotonic
 * time (`now`, ms); outputs are actions the engine carries out in order. Timers are deadlines
 * the machine keeps (`nextDeadline()`); the engine sleeps until the earliest one and then feeds
 * a `tick` event.
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
 * Units: intervals on the wire are centiseconds (Max Adver Int, RFC 9568 §5.2.7); deadlines and
 * durations here are milliseconds.
 */
import { compareAddresses } from '../net/address.js';

/** RFC 9568 §6.4 states, plus `fault` (link down). `active` is the RFC's name for "master". */
export type VrrpState = 'initialize' | 'backup' | 'active' | 'fault';

/** The machine's parameters (RFC 9568 §6.1). */
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
}

/** Inputs. `now` is a monotonic time in ms; it must never decrease. */
export type MachineEvent =
  | { type: 'startup'; now: number }
  | { type: 'shutdown'; now: number }
  /** A valid ADVERTISEMENT for our VRID (the codec has done the §7.1 checks). */
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
  | { type: 'preemptHold'; now: number; hold: boolean };

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
  | 'linkDown'
  | 'linkUp';

/** Outputs, to be carried out in order. */
export type MachineAction =
  /** Send an ADVERTISEMENT with this priority (0 = resign) and our Advertisement_Interval. */
  | { type: 'send'; priority: number }
  /**
   * A state change. Entering `active` means: add the VIPs and announce them (gratuitous ARP /
   * unsolicited NA, RFC 9568 §6.4.1); leaving it means: remove them.
   */
  | {
      type: 'transition';
      from: VrrpState;
      to: VrrpState;
      reason: TransitionReason;
      detail?: string;
      /** On Backup → Active: the Active router we last heard, now silent or resigned (its node is likely gone). */
      previousMaster?: string;
    };

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
}

/** Skew_Time in ms: ((256 - Priority) * Master_Adver_Interval) / 256 (RFC 9568 §6.1), interval in cs. */
export function skewTimeMs(priority: number, masterAdverIntervalCs: number): number {
  return ((256 - priority) * masterAdverIntervalCs * 10) / 256;
}

/** Master_Down_Interval in ms: 3 * Master_Adver_Interval + Skew_Time (RFC 9568 §6.1), interval in cs. */
export function masterDownIntervalMs(priority: number, masterAdverIntervalCs: number): number {
  return 3 * masterAdverIntervalCs * 10 + skewTimeMs(priority, masterAdverIntervalCs);
}

/**
 * One virtual router's state machine (RFC 9568 §6.4). Not thread-safe, not re-entrant; feed it
 * events in time order.
 */
export class VrrpMachine {
  private readonly cfg: MachineConfig;
  private current: VrrpState = 'initialize';
  private effective: number;
  private masterAdverIntervalCs: number;
  private masterAddress: string | null = null;
  private masterPriority: number | null = null;
  private enteredAt = 0;
  private startedAt = 0;
  /** Adver_Timer deadline, ms, or null when not running. */
  private adverTimer: number | null = null;
  /** Master_Down_Timer deadline, ms, or null when not running. */
  private masterDownTimer: number | null = null;
  /** Set by the `preemptHold` event. */
  private preemptHeld = false;
  /** What set the running Master_Down_Timer: silence, or a priority-0 advert. */
  private downReason: 'masterDown' | 'resigned' | 'preempt' = 'masterDown';

  /** @throws RangeError when a parameter is outside its RFC 9568 §6.1 range. */
  constructor(cfg: MachineConfig) {
    if (!Number.isInteger(cfg.vrid) || cfg.vrid < 1 || cfg.vrid > 255) throw new RangeError(`vrid must be 1..255, got ${cfg.vrid}`);
    if (!Number.isInteger(cfg.priority) || cfg.priority < 1 || cfg.priority > 255) throw new RangeError(`priority must be 1..255, got ${cfg.priority}`);
    const i = cfg.advertisementIntervalCs;
    if (!Number.isInteger(i) || i < 1 || i > 4095) throw new RangeError(`advertisementIntervalCs must be 1..4095, got ${i}`);
    if (!(cfg.preemptDelayMs >= 0)) throw new RangeError(`preemptDelayMs must be >= 0, got ${cfg.preemptDelayMs}`);
    this.cfg = { ...cfg };
    this.effective = cfg.priority;
    this.masterAdverIntervalCs = i;
  }

  /** The current state. */
  get state(): VrrpState {
    return this.current;
  }

  /** The earliest running timer's deadline (monotonic ms), or null when none runs. */
  nextDeadline(): number | null {
    if (this.adverTimer === null) return this.masterDownTimer;
    if (this.masterDownTimer === null) return this.adverTimer;
    return Math.min(this.adverTimer, this.masterDownTimer);
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
    };
  }

  /**
   * Feeds one event and returns the actions to carry out, in order.
   * @throws RangeError when `now` goes backwards (the clock must be monotonic).
   */
  handle(event: MachineEvent): MachineAction[] {
    if (event.now < this.lastNow) throw new RangeError(`time went backwards: ${event.now} < ${this.lastNow}`);
    this.lastNow = event.now;
    const out: MachineAction[] = [];
    switch (event.type) {
      case 'startup':
        if (this.current === 'initialize') this.startup(event.now, out, 'startup');
        break;
      case 'shutdown':
        this.shutdown(event.now, out);
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
      case 'linkDown':
        if (this.current !== 'fault') {
          // the link is gone: nothing can be sent, so no priority-0 advert; the peers' Master_Down_Timer covers us
          this.stopTimers();
          this.enter('fault', event.now, 'linkDown', out);
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

  private lastNow = -Infinity;

  /** RFC 9568 §6.4.1: Initialize, on Startup. */
  private startup(now: number, out: MachineAction[], reason: TransitionReason): void {
    this.startedAt = now;
    if (this.effective === 255) {
      this.becomeActive(now, out, 'owner');
      return;
    }
    this.masterAdverIntervalCs = this.cfg.advertisementIntervalCs;
    this.masterDownTimer = now + this.masterDownMs();
    this.downReason = 'masterDown';
    this.enter('backup', now, reason, out);
  }

  /** RFC 9568 §6.4.2 / §6.4.3: Shutdown. */
  private shutdown(now: number, out: MachineAction[]): void {
    if (this.current === 'active') out.push({ type: 'send', priority: 0 });
    this.stopTimers();
    if (this.current !== 'initialize') this.enter('initialize', now, 'shutdown', out);
  }

  private onTick(now: number, out: MachineAction[]): void {
    if (this.current === 'active' && this.adverTimer !== null && this.adverTimer <= now) {
      // §6.4.3: Adver_Timer fired: send, and reset it to Advertisement_Interval
      out.push({ type: 'send', priority: this.effective });
      this.adverTimer = now + this.cfg.advertisementIntervalCs * 10;
    }
    if (this.current === 'backup' && this.masterDownTimer !== null && this.masterDownTimer <= now) {
      // §6.4.2: Master_Down_Timer fired
      this.becomeActive(now, out, this.downReason);
    }
  }

  private onAdvert(ev: Extract<MachineEvent, { type: 'advert' }>, out: MachineAction[]): void {
    if (this.current === 'backup') {
      if (ev.priority === 0) {
        // §6.4.2: the Active router resigned: take over after Skew_Time only
        this.masterDownTimer = ev.now + this.skewMs();
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
        this.masterDownTimer = ev.now + this.masterDownMs();
        this.downReason = 'masterDown';
      }
      else {
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
        this.adverTimer = ev.now + this.cfg.advertisementIntervalCs * 10;
        return;
      }
      const higher = ev.priority > this.effective;
      const tie = ev.priority === this.effective && compareAddresses(ev.source, this.cfg.primaryAddress) > 0;
      if (higher || tie) {
        // §6.4.3: yield to the sender. Not in the RFC: our last act as Active is one advert at our
        // own priority. Two Active routers after a healed partition: if the winner's advert
        // reached us first, the winner has never heard us and does not know that clients may
        // still hold our MAC for the VIP; this advert tells it (it answers a lower priority with
        // an advert and, in the engine, a fresh gratuitous ARP / NA burst — keepalived's
        // garp_lower_prio_repeat does the same). Backups treat it as any advert from an Active.
        out.push({ type: 'send', priority: this.effective });
        this.adverTimer = null;
        this.masterAdverIntervalCs = ev.maxAdvertIntervalCs;
        this.masterAddress = ev.source;
        this.masterPriority = ev.priority;
        this.masterDownTimer = ev.now + this.masterDownMs();
        this.downReason = 'masterDown';
        this.enter('backup', ev.now, higher ? 'higherPriority' : 'addressTieBreak', out, `${ev.source} priority ${ev.priority}`);
        return;
      }
      // §6.4.3 says discard. We also advertise at once (as keepalived does): a lower-priority router
      // that thinks it is Active (a healed partition) then yields within one round trip instead
      // of up to one Advertisement_Interval.
      if (compareAddresses(ev.source, this.cfg.primaryAddress) !== 0) {
        out.push({ type: 'send', priority: this.effective });
        this.adverTimer = ev.now + this.cfg.advertisementIntervalCs * 10;
      }
    }
    // initialize / fault: not participating, drop
  }

  private onPriority(priority: number): void {
    if (!Number.isInteger(priority) || priority < 1 || priority > 255) throw new RangeError(`priority must be 1..255, got ${priority}`);
    this.effective = priority;
    // the next advert carries it; a Backup's running Master_Down_Timer keeps its deadline (the
    // RFC recomputes Skew_Time only when an advert arrives)
  }

  /** §6.4.2 Preempt_Mode, with the optional delay after startup. */
  private preempting(now: number): boolean {
    return this.cfg.preempt && !this.preemptHeld && now - this.startedAt >= this.cfg.preemptDelayMs;
  }

  /** §6.4.1 / §6.4.2: send an ADVERTISEMENT, announce, start the Adver_Timer, go Active. */
  private becomeActive(now: number, out: MachineAction[], reason: TransitionReason): void {
    out.push({ type: 'send', priority: this.effective });
    const previous = this.current === 'backup' ? this.masterAddress : null;
    this.masterDownTimer = null;
    this.adverTimer = now + this.cfg.advertisementIntervalCs * 10;
    this.masterAdverIntervalCs = this.cfg.advertisementIntervalCs;
    this.enter('active', now, reason, out);
    const t = out[out.length - 1];
    if (previous !== null && t?.type === 'transition') t.previousMaster = previous;
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

  private stopTimers(): void {
    this.adverTimer = null;
    this.masterDownTimer = null;
  }

  private skewMs(): number {
    return skewTimeMs(this.effective, this.masterAdverIntervalCs);
  }

  private masterDownMs(): number {
    return masterDownIntervalMs(this.effective, this.masterAdverIntervalCs);
  }
}
