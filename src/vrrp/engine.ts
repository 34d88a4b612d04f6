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
 * the machine's actions, with adverts.ts (encode, sign, send), pacing.ts (the native pacer),
 * vip-effects.ts (the address queue, announce bursts) and timing.ts (the deadline timer); its
 * options, status and events are engine-api.ts's. Time is `performance.now()` (monotonic ms)
 * unless injected; the wall clock is used only to print `since`.
 */
import { performance } from 'node:perf_hooks';
import { VrrpMachine, type MachineAction, type MachineEvent } from './state.js';
import { canonicalAddress } from '../net/address.js';
import { AdvertAuth } from './auth.js';
import { FILTER_WARNINGS, filterAdvert, type ReceivedAdvert } from './filters.js';
import { openNativeEdge, type OpenEdge, type VrrpEdge } from './edge.js';
import { RateLimitedLog } from '../log/ratelimit.js';
import { AdvertSender } from './adverts.js';
import {
  applyReconfigure,
  checkReconfigurePatch,
  emptyCounters,
  memberSet,
  engineStatus,
  STANDBY_OFF,
  STANDBY_ON,
  VIPS_ADDED,
  STRAY_ON_RELOAD,
  type EngineCounters,
  type EngineDeps,
  type EngineEvent,
  type EngineOptions,
  type EngineReconfigure,
  type EngineStatus,
  type HandOffResult,
} from './engine-api.js';
import { OnceWarnings } from './drops.js';
import { AdvertPacing, type EngineLogLine } from './pacing.js';
import { ADDRESS_SETTLE_MS, VipEffects, VipQueue } from './vip-effects.js';
import { atomicsWait, DeadlineTimer, handOffTimes, Punctuality, round3, type EngineGcStats } from './timing.js';

export * from './engine-api.js';
export { PACER_HOLD_MARGIN_MS, PACER_HOLD_MS, pacerHoldMs } from './pacing.js';
export { HANDOFF_VIP_MARGIN_MS, handOffIntervalCs, PRECISE_WAIT_MS, TIMING_BOUNDS_MS, type EngineGcStats, type EngineTiming } from './timing.js';

/**
 * One VRRP virtual router bound to one interface. Create with {@link VrrpEngine.start}, stop
 * with {@link VrrpEngine.stop}. The machine (state.ts) decides every output; the engine carries
 * the actions out through the edge, in order, and turns what the edge reports into events.
 */
export class VrrpEngine {
  // the protocol: the machine (state.ts) and the settings it runs with
  private readonly machine: VrrpMachine;
  /** The options as they are now: a reconfigure changes vips, peers, announce, the timers' values. */
  private readonly opts: EngineOptions;
  /** acceptFrom members (canonical text), or null for any source. */
  private members: ReadonlySet<string> | null;
  private readonly auth: AdvertAuth | null;
  // the OS edge, and what carries the machine's actions out through it
  private edge: VrrpEdge | null = null;
  private readonly sender: AdvertSender;
  /** What the native pacer repeats while this thread is late. */
  private readonly pacer: AdvertPacing;
  /** Address changes and announce bursts run one after another, in the order the machine asked for them. */
  private readonly queue: VipQueue;
  /** Announce frames and bursts, sockets of released VIPs. */
  private readonly vipEffects: VipEffects;
  // time: the clock, the machine's next deadline, how punctual this thread has been (status `timing`)
  private readonly now: () => number;
  private readonly deadline: DeadlineTimer;
  private readonly timing = new Punctuality();
  private readonly gcStats: (() => EngineGcStats) | null;
  // what this router sent, heard and holds
  /** The engine's last send in this Active period, monotonic ms; null before its first (a silence is measured within one period). */
  private lastSendAt: number | null = null;
  /** The Master_Adver_Interval and the master a Backup adopted last (logged when they change). */
  private seenIntervalCs: number | null = null;
  private seenMaster: string | null = null;
  private seenPreempting = false;
  /** When the last valid advert of another router was handled (monotonic ms), null before any. */
  private lastHeardAt: number | null = null;
  private vipsHeld = false;
  /** Bumped when the machine leaves Active: a running announce burst of the earlier period stops. */
  private activeEpoch = 0;
  private linkRunning: boolean;
  private settleTimer: NodeJS.Timeout | null = null;
  /** Why the next `removeVips` 'stray' is carried out (set only while observeVips feeds the machine). */
  private strayCause: 'watch' | 'reload' = 'watch';
  // life cycle
  private started = false;
  private stopped = false;
  /** An exception escaped once (guard): reported, not again. */
  private failed = false;
  /** The interface was found deleted (reported once). */
  private interfaceGone = false;
  // reporting
  private readonly counters: EngineCounters = emptyCounters();
  /** Lines that can repeat per advert, per peer or per frame: the first, then one per window with the count (log/ratelimit.ts). */
  private readonly limited: RateLimitedLog;
  /** Warnings about dropped adverts, once per kind and source. */
  private readonly drops: OnceWarnings;

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
    this.deadline = new DeadlineTimer(this.now, deps.preciseWait !== undefined ? deps.preciseWait : deps.now ? null : atomicsWait(), this.onTimer);
    const line: EngineLogLine = (level, msg, fields) => this.log(level, msg, fields);
    this.limited = new RateLimitedLog((level, fields, msg) => this.log(level, msg, fields), { now: this.now });
    this.pacer = new AdvertPacing(opts, () => this.edge, line, this.limited);
    this.sender = new AdvertSender(opts, () => this.edge, this.auth, this.counters, this.limited);
    this.linkRunning = opts.linkRunning;
    this.queue = new VipQueue(() => this.started, this.limited);
    this.vipEffects = new VipEffects(
      opts,
      () => this.edge,
      (epoch) => epoch === this.activeEpoch && !this.stopped && this.edge !== null,
      this.counters,
      line,
      this.limited,
    );
    this.drops = new OnceWarnings(line);
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
        socketError: (err) =>
          this.guard(() =>
            this.limited.log('error', `socket:${err.code ?? err.message}`, { code: err.code, syscall: err.syscall, error: err.message }, 'VRRP socket error'),
          ),
        link: (running) => this.guard(() => this.onLink(running)),
        addressesChanged: () => this.guard(() => this.onAddressesChanged()),
      },
    );
    this.pacer.start(this.auth);
    if (!o.owner && !o.resume) {
      // a VIP still on the interface (a killed agent, keepalived, a hand) would make two holders;
      // the machine, still in Initialize, answers with removeVips (a resumed router keeps them:
      // its previous process left them for it, and the Backups wait)
      const present = await this.edge.vipsPresent(this.machine.vips);
      // the time is read after the dump: adverts may have been fed while it ran
      this.feed({ type: 'vipsObserved', now: this.now(), present });
      await this.queue.settled();
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
    const { vips, peers, members, machinePatch } = checkReconfigurePatch(patch, o);
    // checked: from here on nothing throws
    const added = vips !== undefined && !o.owner ? vips.filter((v) => !o.vips.includes(v)) : [];
    applyReconfigure(o, patch, { vips, peers });
    if (members !== undefined) this.members = memberSet(members);
    this.vipEffects.makeFrames();
    let addressesDone: Promise<void> | null = null;
    for (const action of this.machine.handle({ type: 'reconfigure', now: this.now(), ...machinePatch })) {
      // the caller waits for the address changes, not for a whole announce burst
      if (action.type === 'announce') addressesDone ??= this.queue.idle;
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
    await (addressesDone ?? this.queue.idle);
    // the look at the interface queued the removal of what it found: wait for that too
    if (looking) await this.queue.idle;
  }

  /** A snapshot for `/status`. */
  status(): EngineStatus {
    return engineStatus(this.machine.snapshot(), {
      opts: this.opts,
      counters: this.counters,
      members: this.members,
      vipsHeld: this.vipsHeld,
      malformed: this.edge?.malformedIpHeader() ?? 0,
      timing: this.timing.report(this.gcStats?.(), this.edge?.pacerStats?.()),
      lastHeardAt: this.lastHeardAt,
      now: this.now(),
    });
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
    this.deadline.clear();
    if (this.settleTimer) clearTimeout(this.settleTimer);
    await this.queue.idle;
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
    // (also with permanent VIPs, vipLifetime 0: an agent that never comes back must not leave them)
    const { intervalCs, masterDownBoundMs, vipLifetimeMs } = handOffTimes(holdMs, this.opts.advertisementIntervalCs);
    this.feed({ type: 'handOff', now: this.now(), intervalCs, lifetimeMs: vipLifetimeMs });
    await this.close();
    if (!active) return none;
    this.log('info', 'handed off for a restart in place: the VIPs stay, the Backups wait for the next process', {
      advertisedIntervalCs: intervalCs,
      masterDownBoundMs: round3(masterDownBoundMs),
      vipLifetimeMs,
    });
    return { active, intervalCs, masterDownBoundMs, vipLifetimeMs };
  }

  private feed(ev: MachineEvent): void {
    if (this.stopped) return;
    const actions = this.machine.handle(ev);
    if (ev.type === 'tick' && this.deadline.due !== null && actions.some((a) => a.type === 'send'))
      this.timing.sendLate.add(Math.max(0, ev.now - this.deadline.due));
    for (const a of actions) this.carryOut(a);
    if (ev.type === 'advert') this.watchMaster(ev);
    this.schedule();
  }

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
    if (ev.source !== this.seenMaster || s.preempting !== this.seenPreempting) {
      this.emit({ type: 'master', address: ev.source, priority: ev.priority, previous: this.seenMaster, preempting: (this.seenPreempting = s.preempting) });
      this.seenMaster = ev.source;
    }
  }

  /** Sleeps until the machine's next deadline, then ticks (see onTimer). */
  private schedule(): void {
    // with a precise wait, wake early and sleep the rest in onTimer
    this.deadline.set(this.machine.nextDeadline(), this.precise(), !this.stopped);
  }

  /**
   * Whether the next deadline is slept to the sub-millisecond: a Backup's Master_Down_Timer only
   * (its expiry is a takeover). An Active's Adver_Timer is not: the pacer covers its lateness,
   * and a wait would block the thread the health checks share, every interval.
   */
  private precise(): boolean {
    return this.deadline.preciseWait !== null && this.machine.state === 'backup';
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
    const due = this.deadline.due;
    if (this.stopped || due === null) return 0;
    return Math.max(0, this.now() - due);
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
    this.deadline.fired();
    if (this.precise()) this.deadline.waitRest();
    if (this.machine.state === 'backup' && this.edge?.receivePending) {
      const firedFor = this.deadline.due;
      this.edge.receivePending();
      if (this.stopped) return;
      const now = this.now();
      const due = this.machine.nextDeadline();
      // it was due when the timer fired, and an advert read just now moved it
      if (firedFor !== null && firedFor <= now && (due === null || due > now) && this.machine.state === 'backup') this.timing.rescued++;
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
          this.pacer.pace(null);
          // the time until the next Active period is no silence of this thread
          this.lastSendAt = null;
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
        if (a.reason === 'restored')
          this.log('warn', 'a VIP was removed from the interface by something else; restoring it', { vips: a.vips, interface: o.ifname });
        return this.enqueue(async () => {
          if (a.reason === 'becameActive' && o.beforeTakeover) {
            await o
              .beforeTakeover()
              .catch((err: unknown) => this.log('error', 'the step before adding the VIPs failed; adding them anyway', { error: (err as Error).message }));
          }
          await this.edge?.addVips(a.vips, o.vipLifetimeMs / 1000);
          if (a.reason === 'becameActive' || a.reason === 'added') {
            this.vipsHeld = true;
            this.log('info', VIPS_ADDED, {
              vips: a.vips,
              interface: o.ifname,
              lifetimeMs: o.vipLifetimeMs,
              ...(a.reason === 'added' ? { reason: 'reconfigured' } : {}),
            });
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
        return this.enqueue(async () => this.vipEffects.destroyVipSockets(a.vips));
      case 'announce': {
        if (a.reason === 'healedPartition' && a.source !== undefined) this.vipEffects.noteHealed(a.source);
        const epoch = this.activeEpoch;
        const vips = a.vips;
        return this.enqueue(() => this.vipEffects.announce(epoch, a.reason, vips));
      }
    }
  }

  private sendAdvert(priority: number): void {
    // what the pacer repeats: this round, while Active; priority 0 (shutdown, §6.4.3) ends it first
    const pacing = priority > 0 && this.machine.state === 'active';
    if (!pacing) this.pacer.pace(null);
    const now = this.now();
    const silentMs = this.lastSendAt === null ? 0 : now - this.lastSendAt;
    this.lastSendAt = now;
    const round = this.sender.sendRound(priority);
    if (!pacing) return;
    this.pacer.pace(round);
    this.pacer.note(silentMs);
  }

  /**
   * A hand-off's last adverts (MachineEvent `handOff`): our priority, Max Adver Int `intervalCs`,
   * sent twice to every destination; the pacer stops first (it would repeat our usual interval).
   */
  private sendHandOffAdvert(priority: number, intervalCs: number): void {
    this.pacer.pace(null);
    this.sender.sendHandOff(priority, intervalCs);
    this.lastSendAt = this.now();
  }

  /**
   * After a priority change or a reconfigure while Active: the pacer gets the adverts the next
   * send will carry now, not at that send (a stall in between would advertise the old ones).
   */
  private repace(): void {
    if (this.machine.state !== 'active' || !this.pacer.pacing) return;
    try {
      this.pacer.pace(this.sender.round(this.machine.snapshot().effectivePriority));
    } catch {
      // the next send reports what cannot be encoded
    }
  }

  /** Queues address work or a burst (see {@link VipQueue}). */
  private enqueue(job: () => Promise<void>): void {
    this.queue.enqueue(job);
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
    const r = filterAdvert(p, {
      family: o.family,
      vrid: o.vrid,
      primaryAddress: o.primaryAddress,
      unicast: o.unicast,
      peers: o.peers,
      members: this.members,
      vips: o.vips,
      auth: this.auth,
    });
    if (!r.ok) {
      this.counters.dropped[r.reason] = (this.counters.dropped[r.reason] ?? 0) + 1;
      this.drops.dropped(r.reason, r.detail, p.source, { peers: o.peers, members: this.members });
      return;
    }
    this.counters.advertsReceived++;
    const at = this.now();
    this.timing.advert(p.source, at, this.machine.state === 'backup');
    this.lastHeardAt = at;
    if (r.foreign) {
      this.counters.foreign++;
      this.drops.warnOnce(`foreign:${p.source}`, FILTER_WARNINGS.foreign!, { source: p.source, theirs: r.advert.addresses, ours: o.vips });
    }
    this.feed({ type: 'advert', now: this.now(), priority: r.advert.priority, maxAdvertIntervalCs: r.advert.maxAdvertIntervalCs, source: p.source });
  }

  private log(level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>): void {
    this.emit(fields ? { type: 'log', level, msg, fields } : { type: 'log', level, msg });
  }
}
