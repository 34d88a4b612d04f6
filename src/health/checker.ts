/**
 * HealthChecker: checks every backend on its own schedule, feeds the results through rise/fall
 * hysteresis and reports changes. The clock, the timers, the randomness and the probe are
 * injected, so unit tests drive it with fakes and no network.
 *
 * Scheduling, per backend:
 *
 *   start ── random offset in [0, interval) ── check ── interval ±10% ── check ── …
 *
 * The next check is timed from the start of the previous one. If it falls due while the
 * previous check still runs (a slow backend, timeout close to the interval), it starts as soon
 * as that one ends: never two checks of one backend at once, and no burst of catch-up checks.
 * The random offset and jitter keep the nodes of a cluster (which all check all backends) from
 * checking in lockstep.
 *
 * What the data planes get is not each backend's own verdict alone: per address family, the
 * served set is decided from all of them (failopen.ts: fail open when every backend turned unready
 * together) and from flap damping (damping.ts: a backend that keeps changing is held out for a
 * while). A kept backend's verdict is then `up`, a held-out one's `unready` (cause `damped`);
 * `snapshot()` shows each backend's own state beside it (`healthy`: served, `dampedUntil`).
 */
import { EventEmitter } from 'node:events';
import { addressFamily, canonicalAddress } from '../net/address.js';
import { formatHostPort, type HostPort } from '../net/hostport.js';
import { checkHysteresisOptions, initialHealth, stepHealth, type BackendState, type HealthInput, type HealthState, type Transition } from './hysteresis.js';
import { createProbe, type Probe, type ProbeResult, type ProbeSettings, type ProbeTarget } from './probe.js';
import { checkDampingOptions, expireHold, initialDamp, isDamped, noteTransition, type DampEvent, type DampingOptions, type DampState } from './damping.js';
import { decidePool, failOpenWindowMs, initialPool, type FailOpenEnd, type PoolState } from './failopen.js';
import { failureState, type BackendVerdict, type Cause, type DeadCause, type Failure, type Verdict, type VerdictState } from './verdict.js';
import type { Log } from '../log/log.js';

/** Timers and time, injectable. `now` stamps results and transitions; delays are relative. */
export interface Clock {
  /** Wall-clock time in ms since the epoch (Date.now). */
  now(): number;
  /** Runs `fn` once after `ms` milliseconds; returns a handle for clearTimeout. */
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The real clock: Date.now and the event loop's (monotonic) timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** A backend to check: an IP literal (IPv6 without brackets) and a port; `family` is derived from `host`. */
export type CheckerBackend = ProbeTarget & { readonly family?: 4 | 6 };

/** What the checker needs from the config's `apiserver.health` (HealthConfig satisfies it). */
export interface CheckerSettings extends ProbeSettings {
  /** Time between two checks of one backend, in ms (> 0); jittered by ±10%. */
  readonly intervalMs: number;
  /** Consecutive passes to become up (integer >= 1). */
  readonly rise: number;
  /** Consecutive failures to become down (integer >= 1). */
  readonly fall: number;
  /**
   * Keep the last ready set when every backend of a family turned unready together (failopen.ts);
   * absent: off (the config's default is on).
   */
  readonly failOpen?: boolean | undefined;
  /** Flap damping (damping.ts); absent or null: off (the config's default is on). */
  readonly damping?: DampingOptions | null | undefined;
  /**
   * How long a backend that left the set is remembered, ms (>= 0; absent: {@link REMEMBER_DEPARTED_MS};
   * 0: forgotten at once): coming back within it, it resumes its counts and damping, and its
   * state when that was down (see {@link HealthChecker.setBackends}).
   */
  readonly rememberDepartedMs?: number | undefined;
}

/** Options of {@link HealthChecker}. */
export interface HealthCheckerOptions {
  readonly health: CheckerSettings;
  /** Initial backends (default none); see {@link HealthChecker.setBackends}. */
  readonly backends?: readonly CheckerBackend[];
  /** One check of one backend (default: {@link createProbe} over `health`). Must not reject; a rejection counts as a failed check. */
  readonly probe?: Probe;
  /** Default {@link systemClock}. */
  readonly clock?: Clock;
  /** Uniform in [0, 1); default Math.random. Drives the first offset and the jitter. */
  readonly random?: () => number;
  /** Receives the insecureSkipVerify warning. */
  readonly logger?: Pick<Log, 'warn'>;
}

/**
 * Default of {@link CheckerSettings.rememberDepartedMs} (the config's
 * `apiserver.health.rememberDeparted`): 5 min. An address the EndpointSlices
 * list for 15 s of every 20 s keeps its history across the gaps, and its metric series stay, so
 * an alert with `for: 1m` on it can fire; one that left for good is forgotten after it.
 */
export const REMEMBER_DEPARTED_MS = 5 * 60_000;

/** One backend in {@link HealthChecker.snapshot}. */
export interface BackendHealth {
  /** `host:port`, IPv6 in brackets: `10.0.0.11:6443`, `[fd00::11]:6443`. */
  address: string;
  state: BackendState;
  /**
   * The data planes send new connections to it now: its state is up and it is not held out by
   * damping (or no other backend is up), or fail open keeps it (its state is then down: see
   * `health.failOpen` in /status).
   */
  healthy: boolean;
  /** Held out by flap damping until then (ISO 8601), else null; the checker always sets it (absent from documents built without one). */
  dampedUntil?: string | null;
  /** When the last check ended (ISO 8601), null before the first. */
  lastCheck: string | null;
  /** Latency of the last check in ms, null before the first. */
  lastLatencyMs: number | null;
  /** The latest failure's reason while it matters (see HealthState.reason), else null. */
  reason: string | null;
  /** Consecutive results of the latest kind: passes when the last check passed, else failures. */
  consecutive: number;
  /**
   * Present while the latest failure is a file the checks need that does not exist yet (cause
   * `waitingForFile`): the setting (`apiserver.health.caFile`) and the file. Such a backend is
   * not ready (no traffic) until the file appears and `rise` checks pass.
   */
  waitingFor?: { setting: string; path: string };
  /** Times it left the set since the checker first saw it (absent from documents built without a checker). */
  left?: number;
  /** Times it came back within the retention after leaving ({@link CheckerSettings.rememberDepartedMs}). */
  returned?: number;
}

/**
 * A backend that left the set and is remembered for a while ({@link HealthChecker.departed}):
 * its state when it left (no check runs meanwhile) and when it is forgotten.
 */
export interface DepartedBackend extends Omit<BackendHealth, 'healthy' | 'waitingFor'> {
  /** When it left the set (ISO 8601). */
  leftAt: string;
  /** When it is forgotten unless it comes back first (ISO 8601). */
  keptUntil: string;
}

/**
 * A `change` event: a {@link Transition} of the hysteresis state (unknown / up / down; at = ms
 * since the epoch), with the reason's message, its typed cause, and `healthy`.
 */
export interface HealthChange extends Omit<Transition<HostPort, Failure>, 'reason'> {
  /** The message of what caused it (`http 500`, `ECONNREFUSED`, `refused`, …; see Transition.reason). */
  readonly reason: string;
  /** The typed cause; null for an up without one (never from the checker, whose passes have a cause). */
  readonly cause: Cause | null;
  /** to === 'up'. */
  readonly healthy: boolean;
}

/** A `check` event: one finished check (not emitted for checks made stale by markDead or removal). */
export interface HealthCheck {
  readonly backend: HostPort;
  readonly result: ProbeResult;
  /** When it ended, ms since the epoch. */
  readonly at: number;
}

/** A `failOpen` event: fail open started or ended for one address family. */
export interface FailOpenChange {
  readonly family: 4 | 6;
  readonly active: boolean;
  /** When this fail open started, ms since the epoch. */
  readonly since: number;
  /** The backends kept (at the start), or those still kept when it ended. */
  readonly kept: readonly HostPort[];
  /** Why it ended (null when it started). */
  readonly reason: FailOpenEnd | null;
  /** When it started or ended, ms since the epoch. */
  readonly at: number;
}

/** A `damping` event: a backend's hold started, got longer, or ended (see damping.ts). */
export interface DampingChange {
  readonly backend: HostPort;
  readonly event: DampEvent;
  /** ms since the epoch. */
  readonly at: number;
}

/** Fail open in /status (`health.failOpen`): over both address families. */
export interface FailOpenStatus {
  active: boolean;
  /** When the oldest running fail open started (ISO 8601), null while none runs. */
  since: string | null;
  /** The backends kept (host:port), in order. */
  kept: string[];
}

/** The checker's events. */
export interface HealthCheckerEvents {
  change: [HealthChange];
  check: [HealthCheck];
  /**
   * What the data planes follow changed state (up, unready, dead) for a backend: its own verdict,
   * or `up` while fail open keeps it, or `unready` (cause `damped`) while damping holds it out.
   */
  verdict: [Verdict];
  failOpen: [FailOpenChange];
  damping: [DampingChange];
}

interface Entry {
  /** `host:port`: the map key and what snapshot() shows */
  readonly address: string;
  readonly backend: HostPort;
  health: HealthState<Failure>;
  /** the cause of the latest pass, for an `up` verdict */
  passCause: Cause;
  /** state of the verdict last emitted (what the planes follow), null before the first */
  verdict: Verdict['state'] | null;
  /** state of its own verdict (hysteresis and cause) last seen, null before the first */
  raw: VerdictState | null;
  damp: DampState;
  dampTimer: unknown;
  timer: unknown;
  /** the running check, if any */
  inFlight: { abort: AbortController; done: Promise<void> } | undefined;
  /** the next check fell due while one was running: start it when that one ends */
  due: boolean;
  /** bumped by markDead and removal: results of checks started before are stale */
  epoch: number;
  removed: boolean;
  lastCheck: number | null;
  lastLatencyMs: number | null;
  /** kind of the latest input, for `consecutive` */
  last: 'pass' | 'fail' | null;
  /** when passive detection last saw its kernel answer a SYN (noteAnswered), ms; null before */
  answeredAt: number | null;
  /** times it left the set, and came back within the retention */
  left: number;
  returned: number;
}

/** A backend that left the set, remembered from `at` until `until` (ms since the epoch), when `timer` forgets it. */
interface Departed {
  readonly e: Entry;
  readonly at: number;
  until: number;
  timer: unknown;
}

/**
 * Checks {@link CheckerSettings.rememberDepartedMs}.
 * @throws RangeError when it is set and not a finite number >= 0.
 */
function checkRememberDeparted(s: CheckerSettings): void {
  const ms = s.rememberDepartedMs;
  if (ms !== undefined && !(ms >= 0 && Number.isFinite(ms))) throw new RangeError(`rememberDepartedMs must be a number of milliseconds >= 0, got ${ms}`);
}

/** Part of the interval by which each gap is jittered, either way. */
const JITTER = 0.1;

/**
 * Checks a set of backends and keeps each one's health (see hysteresis.ts).
 *
 * Events: `check` ({@link HealthCheck}) after every check; `change` ({@link HealthChange}) when a
 * backend's hysteresis state changes; `verdict` ({@link Verdict}) when what it is for the data
 * planes changes (up, unready, dead: also a down backend whose failure turned from "answers 500"
 * to "refused"), after the `change` it may come with. Listeners run synchronously; one that
 * throws is a bug and surfaces as an unhandled rejection.
 *
 * @example
 *   const checker = new HealthChecker({ health: config.apiserver.health, backends: config.apiserver.backends, logger });
 *   checker.on('change', (c) => log.info(c, 'backend health'));
 *   checker.start();
 */
export class HealthChecker extends EventEmitter<HealthCheckerEvents> {
  #settings: CheckerSettings;
  #probe: Probe;
  /** the probe was injected (tests): a reconfigure keeps it */
  readonly #ownProbe: boolean;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #logger: Pick<Log, 'warn'> | undefined;
  #entries = new Map<string, Entry>();
  /** backends that left the set, remembered until `until` (ms): host:port -> entry */
  readonly #departed = new Map<string, Departed>();
  /** the served-set decision of each family (failopen.ts) */
  #pools = new Map<4 | 6, PoolState>();
  /** host:port of every backend served after the last decision */
  #served = new Set<string>();
  #started = false;
  #stopped = false;

  /**
   * @param options see {@link HealthCheckerOptions}. Nothing runs until {@link start}.
   * @throws RangeError when intervalMs is not a positive number, rise / fall not integers >= 1, or
   *   rememberDepartedMs not a number >= 0.
   * @throws TypeError when a backend's host is not an IP address.
   */
  constructor(options: HealthCheckerOptions) {
    super();
    const h = options.health;
    if (!(h.intervalMs > 0) || !Number.isFinite(h.intervalMs)) {
      throw new RangeError(`intervalMs must be a positive number of milliseconds, got ${h.intervalMs}`);
    }
    checkHysteresisOptions(h);
    if (h.damping) checkDampingOptions(h.damping);
    checkRememberDeparted(h);
    this.#settings = h;
    this.#probe = options.probe ?? createProbe(h);
    this.#ownProbe = options.probe === undefined;
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? Math.random;
    this.#logger = options.logger;
    this.setBackends(options.backends ?? []);
  }

  /**
   * Starts checking: each backend's first check at a random offset within the first interval.
   * Logs a warning (once) when insecureSkipVerify is on. Idempotent; no-op after stop().
   */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    if (this.#settings.insecureSkipVerify) {
      this.#logger?.warn(
        { setting: 'apiserver.health.insecureSkipVerify', backends: this.#entries.size },
        'apiserver health checks do not verify certificates (insecureSkipVerify): any TLS server on a backend address passes; for tests only',
      );
    }
    for (const e of this.#entries.values()) this.#schedule(e, this.#random() * this.#settings.intervalMs);
  }

  /**
   * The health of every backend, in the order of the last setBackends (or the constructor's
   * list). A new array of new objects; see {@link BackendHealth} for the fields.
   */
  snapshot(o: { family?: 4 | 6 } = {}): BackendHealth[] {
    return this.#list(o.family).map((e) => {
      const cause = e.health.reason?.cause;
      return {
        address: e.address,
        state: e.health.state,
        healthy: this.#served.has(e.address),
        dampedUntil: e.damp.until === null ? null : new Date(e.damp.until).toISOString(),
        lastCheck: e.lastCheck === null ? null : new Date(e.lastCheck).toISOString(),
        lastLatencyMs: e.lastLatencyMs,
        reason: e.health.reason?.message ?? null,
        consecutive: e.last === 'pass' ? e.health.passes : e.health.failures,
        ...(cause?.kind === 'waitingForFile' && e.last === 'fail' ? { waitingFor: { setting: cause.setting, path: cause.path } } : {}),
        left: e.left,
        returned: e.returned,
      };
    });
  }

  /**
   * The backends that left the set and are still remembered, oldest departure first: each one's
   * state when it left (no check runs while it is out) and its counts. Neither in snapshot() nor
   * in verdicts(): nothing is sent to them. A new array of new objects.
   */
  departed(): DepartedBackend[] {
    return [...this.#departed.values()].map(({ e, at, until }) => ({
      address: e.address,
      state: e.health.state,
      dampedUntil: e.damp.until === null ? null : new Date(e.damp.until).toISOString(),
      lastCheck: e.lastCheck === null ? null : new Date(e.lastCheck).toISOString(),
      lastLatencyMs: e.lastLatencyMs,
      reason: e.health.reason?.message ?? null,
      consecutive: e.last === 'pass' ? e.health.passes : e.health.failures,
      left: e.left,
      returned: e.returned,
      leftAt: new Date(at).toISOString(),
      keptUntil: new Date(until).toISOString(),
    }));
  }

  /**
   * The verdict of every backend (`unknown` before its first), in the order of snapshot(): what
   * the data planes apply. A new array.
   */
  verdicts(): BackendVerdict[] {
    return this.#list(undefined).map((e) => this.#effective(e) ?? { backend: e.backend, state: 'unknown' });
  }

  /** Fail open now, over both families (see {@link FailOpenStatus}). A new object. */
  failOpen(): FailOpenStatus {
    const pools = [...this.#pools.values()].filter((p) => p.active);
    const since = pools.length === 0 ? null : Math.min(...pools.map((p) => p.since ?? Infinity));
    const kept = new Set(pools.flatMap((p) => p.kept));
    return {
      active: pools.length > 0,
      since: since === null || !Number.isFinite(since) ? null : new Date(since).toISOString(),
      kept: [...this.#entries.keys()].filter((k) => kept.has(k)),
    };
  }

  /** The backends checked, in order; `family` keeps only those of one address family. */
  backends(o: { family?: 4 | 6 } = {}): HostPort[] {
    return this.#list(o.family).map((e) => e.backend);
  }

  #list(family: 4 | 6 | undefined): Entry[] {
    const all = [...this.#entries.values()];
    return family === undefined ? all : all.filter((e) => e.backend.family === family);
  }

  /**
   * Takes a backend down at once (passive detection: connections refused or reset; or the
   * election saw its node fall silent). It needs `rise` passing checks to come back; the result
   * of a check already running is dropped, since it may predate the death. Emits `change`
   * unless the backend was already down.
   *
   * The verdict is `dead` whatever it was (also for a draining backend: no state change, but a
   * `verdict` event).
   *
   * @param backend the backend (any spelling of its IP).
   * @param cause why: passive detection or the election (the verdict's cause).
   * @param message the message for the transition and the snapshot, e.g. `refused`.
   * @returns false when no such backend is checked or the checker is stopped (nothing happens), else true.
   */
  markDead(backend: Pick<HostPort, 'host' | 'port'>, cause: DeadCause, message: string): boolean {
    if (this.#stopped) return false;
    const e = this.#entries.get(keyOf(backend));
    if (e === undefined) return false;
    e.epoch++;
    this.#feed(e, { kind: 'dead', at: this.#clock.now(), reason: { cause, message } });
    return true;
  }

  /**
   * Passive detection saw the backend's kernel answer a SYN (a SYN-ACK to a client's
   * connection) now. A check of it started at or before this that then ends in `timeout` (no
   * SYN-ACK within the deadline: cause `timeout`, dead) counts as `slow` (unready) instead: a live
   * listener whose accept queue is full drops SYNs without a word while it accepts others (what
   * the survivors of a node death meet in a reconnect storm), and judging it dead would reset
   * every connection it serves and feed the storm. A silent host answers nobody's SYN, so it is still judged dead.
   * @param backend the backend (any spelling of its IP); unknown backends are ignored.
   */
  noteAnswered(backend: Pick<HostPort, 'host' | 'port'>): void {
    const e = this.#entries.get(keyOf(backend));
    if (e !== undefined) e.answeredAt = this.#clock.now();
  }

  /**
   * Replaces the set of backends. Backends already checked keep their state and schedule; new
   * ones start `unknown` with their first check at a random offset; removed ones stop at once
   * (a running check is aborted, its result dropped; no event) and are remembered for
   * {@link CheckerSettings.rememberDepartedMs} ({@link departed}): one that comes back within it resumes its counts, flap damping
   * and, when it left down, its state and verdict (its next check at a random offset), instead of
   * starting anew; one that left up starts `unknown` (it is served again after `rise` passes).
   * Duplicates are ignored.
   *
   * No `verdict` event is emitted for a removed backend: whoever changes the set re-syncs the
   * data planes (their next apply reads {@link verdicts}).
   *
   * @param list backends as `{ host, port }` (IP literal host, e.g. the config's backends).
   * @throws TypeError when a host is not an IP address (the set is then left unchanged).
   */
  setBackends(list: readonly CheckerBackend[]): void {
    const wanted = new Map<string, HostPort>();
    for (const b of list) {
      const family = addressFamily(b.host);
      if (family === null) throw new TypeError(`backend host must be an IP address, got ${JSON.stringify(b.host)}`);
      const backend: HostPort = Object.freeze({ host: canonicalAddress(b.host), port: b.port, family });
      const address = formatHostPort(backend);
      if (!wanted.has(address)) wanted.set(address, backend);
    }
    const next = new Map<string, Entry>();
    for (const [address, backend] of wanted) {
      const old = this.#entries.get(address);
      if (old !== undefined) {
        next.set(address, old);
        continue;
      }
      const back = this.#departed.get(address);
      if (back !== undefined) {
        this.#departed.delete(address);
        this.#clock.clearTimeout(back.timer);
        const e = back.e;
        e.removed = false;
        e.returned++;
        if (e.health.state === 'up') {
          // served again only after `rise` passes: what answers at the address now may not be
          // what left (one that left down stays down, and out, as it was)
          e.health = initialHealth<Failure>();
          e.raw = null;
          e.verdict = null;
          e.last = null;
        }
        // a hold that outlived the absence ends on its own timer again
        if (e.damp.until !== null) e.dampTimer = this.#clock.setTimeout(() => this.#release(e), Math.max(0, e.damp.until - this.#clock.now()));
        next.set(address, e);
        if (this.#started && !this.#stopped) this.#schedule(e, this.#random() * this.#settings.intervalMs);
        continue;
      }
      const e: Entry = {
        address,
        backend,
        health: initialHealth<Failure>(),
        passCause: { kind: 'http', status: 200 },
        verdict: null,
        raw: null,
        damp: initialDamp(),
        dampTimer: undefined,
        timer: undefined,
        inFlight: undefined,
        due: false,
        epoch: 0,
        removed: false,
        lastCheck: null,
        lastLatencyMs: null,
        last: null,
        answeredAt: null,
        left: 0,
        returned: 0,
      };
      next.set(address, e);
      if (this.#started && !this.#stopped) this.#schedule(e, this.#random() * this.#settings.intervalMs);
    }
    for (const [address, e] of this.#entries) {
      if (next.has(address)) continue;
      void this.#retire(e);
      e.left++;
      this.#remember(e);
    }
    this.#entries = next;
    // a backend that left may have been what was served, or kept
    if (!this.#stopped) this.#settle(false, []);
  }

  /**
   * Takes new settings (a reload): every backend keeps its state, counts and verdict; the next
   * check of each uses the new probe (path, TLS files, timeout) and the new rise / fall. A check
   * running now finishes with the old probe and counts. With a new interval, each waiting backend's
   * next check is rescheduled at a random offset within the new interval (no wait of the old,
   * longer one). The backends remembered after leaving are kept for the new rememberDepartedMs,
   * counted from when each left (forgotten now when that has passed). No event is emitted.
   * @throws RangeError as the constructor (the settings are then left unchanged).
   */
  reconfigure(settings: CheckerSettings): void {
    if (!(settings.intervalMs > 0) || !Number.isFinite(settings.intervalMs)) {
      throw new RangeError(`intervalMs must be a positive number of milliseconds, got ${settings.intervalMs}`);
    }
    checkHysteresisOptions(settings);
    if (settings.damping) checkDampingOptions(settings.damping);
    checkRememberDeparted(settings);
    const interval = settings.intervalMs !== this.#settings.intervalMs;
    this.#settings = settings;
    if (this.#ownProbe) this.#probe = createProbe(settings);
    // the backends remembered now are kept for the new time, counted from when each left
    for (const d of this.#departed.values()) this.#keep(d);
    if (!this.#stopped) {
      // damping off: every hold ends now; fail open off: the next decision ends it
      const released: DampingChange[] = [];
      if (!settings.damping) {
        const at = this.#clock.now();
        for (const e of this.#entries.values()) {
          if (e.dampTimer !== undefined) this.#clock.clearTimeout(e.dampTimer);
          e.dampTimer = undefined;
          if (e.damp.until !== null) released.push({ backend: e.backend, event: { kind: 'end', heldMs: at - (e.damp.heldSince ?? at) }, at });
          e.damp = initialDamp();
        }
      }
      this.#settle(false, released);
    }
    if (!interval || !this.#started || this.#stopped) return;
    for (const e of this.#entries.values()) {
      if (e.timer === undefined) continue;
      this.#clock.clearTimeout(e.timer);
      this.#schedule(e, this.#random() * settings.intervalMs);
    }
  }

  /**
   * Stops every schedule and aborts running checks; no event is emitted afterwards.
   * Idempotent. @returns a promise that resolves once the aborted checks have ended (the
   * default probe ends at once on abort; an injected one must honour the signal too).
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const d of this.#departed.values()) this.#clock.clearTimeout(d.timer);
    this.#departed.clear();
    const running = [...this.#entries.values()].map((e) => this.#retire(e));
    await Promise.all(running);
  }

  /** Keeps a backend that left the set for {@link CheckerSettings.rememberDepartedMs} (none while stopped). */
  #remember(e: Entry): void {
    if (this.#stopped) return;
    const d: Departed = { e, at: this.#clock.now(), until: 0, timer: undefined };
    this.#departed.set(e.address, d);
    this.#keep(d);
  }

  /** (Re)arms the timer that forgets `d` at `d.at` + the setting's time; forgets it now when that has passed. */
  #keep(d: Departed): void {
    if (d.timer !== undefined) this.#clock.clearTimeout(d.timer);
    d.until = d.at + (this.#settings.rememberDepartedMs ?? REMEMBER_DEPARTED_MS);
    const wait = d.until - this.#clock.now();
    if (wait <= 0) {
      this.#departed.delete(d.e.address);
      return;
    }
    d.timer = this.#clock.setTimeout(() => {
      if (this.#departed.get(d.e.address) === d) this.#departed.delete(d.e.address);
    }, wait);
    // memory, not work: it alone keeps no process running (a real timer has unref)
    (d.timer as { unref?: () => void } | null)?.unref?.();
  }

  /** Cancels an entry's timer and running check. @returns when the check has ended. */
  #retire(e: Entry): Promise<void> {
    e.removed = true;
    e.epoch++;
    if (e.timer !== undefined) this.#clock.clearTimeout(e.timer);
    e.timer = undefined;
    if (e.dampTimer !== undefined) this.#clock.clearTimeout(e.dampTimer);
    e.dampTimer = undefined;
    e.due = false;
    const running = e.inFlight;
    running?.abort.abort();
    return running?.done ?? Promise.resolve();
  }

  #schedule(e: Entry, delayMs: number): void {
    e.timer = this.#clock.setTimeout(() => {
      e.timer = undefined;
      if (e.removed || this.#stopped) return;
      if (e.inFlight !== undefined) e.due = true;
      else this.#run(e);
    }, delayMs);
  }

  #run(e: Entry): void {
    const epoch = e.epoch;
    const startedAt = this.#clock.now();
    const abort = new AbortController();
    // timed from the start of this check, so a slow check does not stretch the cadence
    const jitter = 1 + (this.#random() * 2 - 1) * JITTER;
    this.#schedule(e, this.#settings.intervalMs * jitter);
    let probing: Promise<ProbeResult>;
    try {
      probing = this.#probe(e.backend, abort.signal);
    } catch (err) {
      probing = Promise.reject(err as Error);
    }
    const done = probing
      .catch((err: unknown): ProbeResult => ({
        ok: false,
        latencyMs: 0,
        cause: { kind: 'failed' },
        error: `probe failed: ${err instanceof Error ? err.message : String(err)}`,
      }))
      .then((result) => {
        e.inFlight = undefined;
        if (e.removed || this.#stopped) return;
        if (epoch === e.epoch) this.#record(e, answeredMeanwhile(result, e.answeredAt, startedAt));
        if (e.due && !e.removed && !this.#stopped) {
          e.due = false;
          this.#run(e);
        }
      });
    e.inFlight = { abort, done };
  }

  #record(e: Entry, result: ProbeResult): void {
    const at = this.#clock.now();
    e.lastCheck = at;
    e.lastLatencyMs = result.latencyMs;
    const reason: Failure = {
      cause: result.cause,
      message: result.ok
        ? result.status === undefined
          ? 'pass'
          : `http ${result.status}`
        : (result.error ?? (result.status === undefined ? 'failed' : `http ${result.status}`)),
    };
    const input: HealthInput<Failure> = result.ok ? { kind: 'pass', at, reason } : { kind: 'fail', at, reason };
    if (result.ok) e.passCause = result.cause;
    const transition = this.#step(e, input);
    const update = this.#update(e);
    // the check first, then the change it caused; all see the new state in snapshot()
    this.emit('check', { backend: e.backend, result, at });
    this.#announce(e, transition, update);
  }

  #feed(e: Entry, input: HealthInput<Failure>): void {
    const transition = this.#step(e, input);
    this.#announce(e, transition, this.#update(e));
  }

  #step(e: Entry, input: HealthInput<Failure>): Transition<HostPort, Failure> | null {
    const { state, transition } = stepHealth(e.backend, e.health, input, this.#settings);
    e.health = state;
    e.last = input.kind === 'pass' ? 'pass' : 'fail';
    return transition;
  }

  /**
   * After a step of `e`: when its own verdict changed state, counts it for damping and decides
   * the served sets again (no event yet: every state is updated before the first event, so
   * listeners all see the new snapshot() and verdicts()).
   * @returns the events to publish, or null when its verdict's state did not change.
   */
  #update(e: Entry): { damping: DampingChange[]; failOpen: FailOpenChange[] } | null {
    const v = verdictOf(e);
    if (v === null || v.state === e.raw) return null;
    const before = e.raw;
    e.raw = v.state;
    // in or out of `up`: a transition damping counts (not the first verdict, not unready <-> dead)
    const damping = before !== null && (before === 'up') !== (v.state === 'up') ? this.#flap(e) : [];
    return { damping, failOpen: this.#decide(true) };
  }

  /** Emits the change (if any), then what {@link #update} found: damping, fail open, verdicts. */
  #announce(e: Entry, transition: Transition<HostPort, Failure> | null, update: { damping: DampingChange[]; failOpen: FailOpenChange[] } | null): void {
    if (transition !== null) {
      const r = transition.reason;
      const { reason: _r, ...rest } = transition;
      this.emit('change', {
        ...rest,
        reason: typeof r === 'string' ? r : r.message,
        cause: typeof r === 'string' ? null : r.cause,
        healthy: transition.to === 'up',
      });
    }
    if (update !== null) this.#publish(update.damping, update.failOpen);
  }

  /** Decides again (a set change, a reload, a hold's end) and emits what changed. */
  #settle(mayStart: boolean, damping: DampingChange[]): void {
    this.#publish(damping, this.#decide(mayStart));
  }

  /** Emits damping events, then fail-open events, then the verdicts whose state changed, in backend order. */
  #publish(damping: readonly DampingChange[], failOpen: readonly FailOpenChange[]): void {
    for (const d of damping) this.emit('damping', d);
    for (const f of failOpen) this.emit('failOpen', f);
    for (const e of this.#entries.values()) {
      const v = this.#effective(e);
      if (v !== null && v.state !== e.verdict) {
        e.verdict = v.state;
        this.emit('verdict', v);
      }
    }
  }

  /** A transition of `e` for damping: counts it, (re)arms its hold's timer. @returns the event, if any. */
  #flap(e: Entry): DampingChange[] {
    const o = this.#settings.damping;
    if (!o) return [];
    const at = this.#clock.now();
    const { state, event } = noteTransition(e.damp, at, o);
    e.damp = state;
    if (event === null) return [];
    if (e.dampTimer !== undefined) this.#clock.clearTimeout(e.dampTimer);
    e.dampTimer = this.#clock.setTimeout(() => this.#release(e), state.until! - at);
    return [{ backend: e.backend, event, at }];
  }

  /**
   * The hold of `e` is over (its timer): it ends, and the served sets are decided again. A timer
   * may fire before Date.now reaches `until`: timers run on the monotonic clock in whole ms, and
   * Date.now is the wall clock, whose ms begin at other instants and which NTP slews or steps
   * (here 4 of 300 timers fired 1 ms before a Date.now deadline). Then the rest is waited out, or
   * the backend would stay held until its next transition, which a healthy one never has.
   */
  #release(e: Entry): void {
    e.dampTimer = undefined;
    if (e.removed || this.#stopped) return;
    const at = this.#clock.now();
    if (e.damp.until !== null && at < e.damp.until) {
      e.dampTimer = this.#clock.setTimeout(() => this.#release(e), e.damp.until - at);
      return;
    }
    const { state, event } = expireHold(e.damp, at);
    e.damp = state;
    this.#settle(false, event === null ? [] : [{ backend: e.backend, event, at }]);
  }

  /** Decides the served set of each family (failopen.ts). @returns the fail-open starts and ends. */
  #decide(mayStart: boolean): FailOpenChange[] {
    const at = this.#clock.now();
    const s = this.#settings;
    const out: FailOpenChange[] = [];
    const served = new Set<string>();
    for (const family of [4, 6] as const) {
      const list = this.#list(family);
      const prev = this.#pools.get(family) ?? initialPool();
      if (list.length === 0 && !prev.active) {
        this.#pools.delete(family);
        continue;
      }
      const members = list.map((e) => ({ key: e.address, state: e.raw ?? ('unknown' as const), damped: isDamped(e.damp, at) }));
      const d = decidePool(prev, members, at, { failOpen: s.failOpen === true, windowMs: failOpenWindowMs(s), mayStart });
      this.#pools.set(family, d.state);
      for (const k of d.state.served) served.add(k);
      const hosts = (keys: readonly string[]): HostPort[] => list.filter((e) => keys.includes(e.address)).map((e) => e.backend);
      if (d.started) out.push({ family, active: true, since: at, kept: hosts(d.state.kept), reason: null, at });
      if (d.ended !== null)
        out.push({ family, active: false, since: prev.since ?? at, kept: prev.kept.flatMap((k) => this.#entries.get(k)?.backend ?? []), reason: d.ended, at });
    }
    this.#served = served;
    return out;
  }

  /** What the data planes follow for `e` (see the file comment); null while it has no verdict. */
  #effective(e: Entry): Verdict | null {
    const v = verdictOf(e);
    if (v === null) return null;
    const served = this.#served.has(e.address);
    if (v.state === 'up' && !served && e.damp.until !== null) {
      const until = e.damp.until;
      return { backend: e.backend, state: 'unready', cause: { kind: 'damped', until }, message: `damped (flapping) until ${new Date(until).toISOString()}` };
    }
    if (v.state === 'unready' && served) return { ...v, state: 'up', message: `${v.message} (kept: fail open)` };
    return v;
  }
}

/**
 * A check that timed out before any SYN-ACK while passive detection saw the backend's kernel
 * answer other SYNs since the check started (`answeredAt` >= `startedAt`) is `slow`, not
 * `timeout` (see {@link HealthChecker.noteAnswered}); any other result is returned as it is.
 */
export function answeredMeanwhile(result: ProbeResult, answeredAt: number | null, startedAt: number): ProbeResult {
  if (result.ok || result.cause.kind !== 'timeout' || answeredAt === null || answeredAt < startedAt) return result;
  return {
    ...result,
    cause: { kind: 'slow' },
    error: `${result.error ?? 'timeout'} (no SYN-ACK, but it answered other connections meanwhile: a full accept queue)`,
  };
}

/** The map key of a backend: canonical `host:port`; a host that is not an IP gives a key that matches nothing. */
function keyOf(b: Pick<HostPort, 'host' | 'port'>): string {
  return addressFamily(b.host) === null ? `?${b.host}` : formatHostPort(b);
}

/** The verdict of an entry: null while unknown; up; or down as its latest failure's cause says. */
function verdictOf(e: Entry): Verdict | null {
  const h = e.health;
  if (h.state === 'unknown') return null;
  if (h.state === 'up')
    return { backend: e.backend, state: 'up', cause: e.passCause, message: e.passCause.kind === 'http' ? `http ${e.passCause.status}` : 'pass' };
  // down always has a failure on record (the one that took it down, or a later one)
  const f = h.reason ?? { cause: { kind: 'failed' }, message: 'failed' };
  return { backend: e.backend, state: failureState(f.cause), cause: f.cause, message: f.message };
}
