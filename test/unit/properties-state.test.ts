/**
 * Property-based test of the VRRP state machine (src/vrrp/state.ts, RFC 9568 §6.4): N (2..5)
 * routers on one simulated segment where every router hears every other, driven by a virtual
 * clock. fast-check generates the group (distinct priorities 1..254, maybe one owner 255, one
 * Advertisement_Interval, Preempt_Mode), the start-up order and a sequence of faults: time
 * passing, a router stopping (Shutdown: a priority-0 advert when Active) and restarting, a
 * router's adverts dropped or lagging for a bounded time. Every advert reaches the others after a
 * random delay below one Advertisement_Interval, in the order it sent them (FIFO per sender).
 *
 * Invariants (I = Advertisement_Interval, MDI(p) = 3 × I + Skew_Time(p), Skew_Time(p) =
 * ((256 − p) × I) / 256, RFC 9568 §6.1):
 * - converged (no fault for longer than MDI(lowest priority) + I + 2 × the delivery bound I): exactly
 *   one router is Active when any runs, none otherwise;
 * - with Preempt_Mode, the converged Active router is the highest-priority running one;
 * - every deadline the machine returns is ≥ the virtual time of the event (a stopped router has none);
 * - an Active router's priority-0 advert, sent from a converged group, is followed by a takeover
 *   within Skew_Time(highest remaining priority) + the delivery bound (§6.4.2), well before MDI.
 *
 * Runs BALLAST_FUZZ_RUNS cases (test/support/fuzz.ts).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { masterDownIntervalMs, skewTimeMs, VrrpMachine, type MachineAction, type MachineEvent } from '../../src/vrrp/state.js';
import { FUZZ_TIMEOUT_MS, fuzzParameters } from '../support/fuzz.js';
import { prng } from '../support/prng.js';

/** One fault or the passing of time; times are multiples of I (Advertisement_Interval), fractional. */
type Op =
  | { kind: 'advance'; intervals: number }
  | { kind: 'stop'; router: number }
  | { kind: 'start'; router: number }
  /** The router's adverts are lost for `intervals` × I. */
  | { kind: 'drop'; router: number; intervals: number }
  /** The router's adverts take `lag` × I longer to arrive, for `intervals` × I. */
  | { kind: 'lag'; router: number; intervals: number; lag: number };

interface Scenario {
  priorities: number[];
  intervalCs: number;
  preempt: boolean;
  /** When each router starts, × I from 0. */
  startAt: number[];
  ops: Op[];
  /** Seed of the delivery delays. */
  delaySeed: number;
}

interface Message {
  at: number;
  from: number;
  priority: number;
}

/** Runs one scenario; throws (an expect failure) on the first broken invariant. */
function simulate(s: Scenario): void {
  const n = s.priorities.length;
  const I = s.intervalCs * 10;
  const addr = (i: number): string => `10.0.0.${i + 1}`;
  const machines = s.priorities.map(
    (priority, i) =>
      new VrrpMachine({ vrid: 51, priority, advertisementIntervalCs: s.intervalCs, preempt: s.preempt, preemptDelayMs: 0, primaryAddress: addr(i) }),
  );
  const running = new Array<boolean>(n).fill(false);
  const dropUntil = new Array<number>(n).fill(-1);
  const lagUntil = new Array<number>(n).fill(-1);
  const lagMs = new Array<number>(n).fill(0);
  const random = prng(s.delaySeed);
  const lowest = Math.min(...s.priorities);
  /**
   * Convergence window after the last fault: MDI(lowest) + I (RFC 9568 §6.1), plus twice the
   * delivery bound D = I: the last advert heard may be up to D old when the timers start, and two
   * routers that took over at once settle in one round trip (the lower one's advert reaches the
   * higher, which advertises at once, §6.4.3 plus ballast's immediate reply).
   */
  const window = masterDownIntervalMs(lowest, s.intervalCs) + 3 * I;
  let queue: Message[] = [];
  /** A segment keeps one sender's frames in order: each router's last delivery time. */
  const lastAt = new Array<number>(n).fill(0);
  let now = 0;
  let lastFault = 0;
  /** A priority-0 takeover being watched: it must happen by `by`. */
  let takeover: { by: number; from: number } | null = null;

  /**
   * When the last fault ended: a stop or start at once, a drop when it stops dropping, a lag when
   * the last lagged advert is out (its extra delay after the lag stops).
   */
  const faultEnd = (): number => Math.max(lastFault, ...dropUntil, ...lagUntil.map((t, i) => t + lagMs[i]!));
  /** No fault for the convergence window. */
  const converged = (): boolean => now - faultEnd() >= window;
  const send = (from: number, priority: number): void => {
    if (now < dropUntil[from]!) return;
    const extra = now < lagUntil[from]! ? lagMs[from]! : 0;
    const at = Math.max(lastAt[from]!, now + random() * I * 0.999 + extra);
    lastAt[from] = at;
    queue.push({ at, from, priority });
  };
  const feed = (i: number, ev: MachineEvent): void => {
    const out: MachineAction[] = machines[i]!.handle(ev);
    const due = machines[i]!.nextDeadline();
    if (due !== null && due < now) expect.fail(`router ${i} returned a deadline in the past: ${due} < ${now} after ${ev.type}`);
    for (const a of out) {
      if (a.type === 'send') send(i, a.priority);
      else if (a.type === 'transition' && a.to === 'active') takeover = null;
    }
  };
  const check = (): void => {
    for (let i = 0; i < n; i++) {
      if (!running[i] && machines[i]!.nextDeadline() !== null) expect.fail(`stopped router ${i} still has a deadline`);
    }
    if (takeover !== null && now > takeover.by) {
      expect.fail(`no takeover within Skew_Time + delivery after router ${takeover.from}'s priority-0 advert (due by ${takeover.by}, now ${now})`);
    }
    if (!converged()) return;
    const active = machines.flatMap((m, i) => (m.state === 'active' ? [i] : []));
    const up = running.flatMap((r, i) => (r ? [i] : []));
    if (active.length !== (up.length > 0 ? 1 : 0))
      expect.fail(`at ${now} (last fault ended ${faultEnd()}): Active routers ${JSON.stringify(active)}, running ${JSON.stringify(up)}`);
    if (s.preempt && up.length > 0) {
      const best = up.reduce((a, b) => (s.priorities[b]! > s.priorities[a]! ? b : a));
      if (active[0] !== best)
        expect.fail(
          `at ${now}: router ${active[0]} (priority ${s.priorities[active[0]!]}) Active, ${best} (priority ${s.priorities[best]}) is the highest running`,
        );
    }
  };
  /** Advances the virtual clock to `until`, delivering adverts and firing timers in time order. */
  const runUntil = (until: number): void => {
    for (let steps = 0; ; steps++) {
      if (steps > 200_000) expect.fail('the simulation does not advance (a timer that never fires?)');
      let next = Infinity;
      for (const m of queue) if (m.at < next) next = m.at;
      for (let i = 0; i < n; i++) {
        const d = running[i] ? machines[i]!.nextDeadline() : null;
        if (d !== null && d < next) next = d;
      }
      if (takeover !== null && next > takeover.by && until > takeover.by) {
        now = Math.max(now, takeover.by + 1e-9);
        check();
      }
      if (next > until) break;
      now = Math.max(now, next);
      const due = queue.filter((m) => m.at <= now).sort((a, b) => a.at - b.at);
      queue = queue.filter((m) => m.at > now);
      for (const m of due) {
        for (let i = 0; i < n; i++) {
          if (i !== m.from && running[i]) feed(i, { type: 'advert', now, priority: m.priority, maxAdvertIntervalCs: s.intervalCs, source: addr(m.from) });
        }
      }
      for (let i = 0; i < n; i++) {
        const d = running[i] ? machines[i]!.nextDeadline() : null;
        if (d !== null && d <= now) feed(i, { type: 'tick', now });
      }
      check();
    }
    now = Math.max(now, until);
    check();
  };

  const start = (i: number): void => {
    if (running[i]) return;
    running[i] = true;
    feed(i, { type: 'startup', now });
  };
  const stop = (i: number, settled: boolean): void => {
    if (!running[i]) return;
    const wasActive = machines[i]!.state === 'active';
    running[i] = false;
    feed(i, { type: 'shutdown', now });
    const rest = running.flatMap((r, j) => (r ? [s.priorities[j]!] : []));
    if (wasActive && settled && rest.length > 0) {
      // §6.4.2: on a priority-0 advert a Backup sets Master_Down_Timer to Skew_Time
      takeover = { by: now + I + skewTimeMs(Math.max(...rest), s.intervalCs), from: i };
    }
  };

  const order = s.startAt.map((t, i) => [t, i] as const).sort((a, b) => a[0] - b[0]);
  for (const [t, i] of order) {
    runUntil(t * I);
    lastFault = now;
    start(i);
  }
  for (const op of s.ops) {
    if (op.kind === 'advance') {
      runUntil(now + op.intervals * I);
      continue;
    }
    const settled = converged();
    takeover = null; // a new fault: the takeover bound no longer applies
    lastFault = now;
    if (op.kind === 'stop') stop(op.router % n, settled);
    else if (op.kind === 'start') start(op.router % n);
    else if (op.kind === 'drop') dropUntil[op.router % n] = now + op.intervals * I;
    else {
      lagUntil[op.router % n] = now + op.intervals * I;
      lagMs[op.router % n] = op.lag * I;
    }
  }
  // let everything settle, then the invariants must hold
  runUntil(Math.max(now, faultEnd()) + window + 2 * I);
  if (!converged()) expect.fail('the final settle did not reach the convergence window');
}

const scenario: fc.Arbitrary<Scenario> = fc.integer({ min: 2, max: 5 }).chain((n) =>
  fc.record({
    priorities: fc
      .tuple(fc.uniqueArray(fc.integer({ min: 1, max: 254 }), { minLength: n, maxLength: n }), fc.boolean())
      .map(([p, owner]) => (owner ? [255, ...p.slice(1)] : p)),
    intervalCs: fc.integer({ min: 1, max: 100 }),
    preempt: fc.boolean(),
    startAt: fc.array(fc.double({ min: 0, max: 8, noNaN: true }), { minLength: n, maxLength: n }),
    ops: fc.array(
      fc.oneof(
        { weight: 3, arbitrary: fc.record({ kind: fc.constant('advance' as const), intervals: fc.double({ min: 0, max: 8, noNaN: true }) }) },
        { weight: 2, arbitrary: fc.record({ kind: fc.constant('stop' as const), router: fc.nat(4) }) },
        { weight: 2, arbitrary: fc.record({ kind: fc.constant('start' as const), router: fc.nat(4) }) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant('drop' as const), router: fc.nat(4), intervals: fc.double({ min: 0, max: 8, noNaN: true }) }) },
        {
          weight: 1,
          arbitrary: fc.record({
            kind: fc.constant('lag' as const),
            router: fc.nat(4),
            intervals: fc.double({ min: 0, max: 8, noNaN: true }),
            lag: fc.double({ min: 0, max: 2, noNaN: true }),
          }),
        },
      ),
      { maxLength: 8 },
    ),
    delaySeed: fc.nat(),
  }),
);

describe('VRRP state machine properties (RFC 9568 §6.1, §6.4) among simulated routers', () => {
  it(
    'one Active after convergence (the highest with preempt), deadlines never in the past, priority 0 taken over within Skew_Time',
    () => {
      fc.assert(
        fc.property(scenario, (s) => simulate(s)),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  // Found by fuzzing (a wrong property, not a machine bug): the owner's adverts lost for 54.6 ms,
  // so router 3 (priority 7) took over at its Master_Down_Interval (39.7 ms); the group was
  // checked 59.9 ms after the drop began, 7.8 ms after it ended, while both were still Active.
  // Convergence is now counted from the END of a drop (and of a lag's last late advert).
  it('a dropped owner: converges one window after the drop ends (fixed counterexample)', () => {
    const s: Scenario = {
      priorities: [255, 6, 2, 7],
      intervalCs: 1,
      preempt: false,
      startAt: [0, 0, 0, 0],
      ops: [{ kind: 'drop', router: 0, intervals: 5.461867784896401 }],
      delaySeed: 0,
    };
    expect(() => simulate(s)).not.toThrow();
  });

  // Found by fuzzing (a wrong simulation and window, not a machine bug): the owner (255) stopped
  // at once after start-up; its first advert and its priority-0 advert were delivered in reverse
  // order (independent delays), so the Backups restarted a full Master_Down_Interval on the stale
  // 255 advert; three took over within 0.1 ms of each other and settled one round trip later,
  // 58.2 ms after the fault, past MDI(103) + 2I = 56 ms. A segment keeps one sender's frames in
  // order (now FIFO per sender) and the window now counts the delivery bound twice (MDI + 3I).
  it('an owner stopping right after start-up, three near-equal Backups (fixed counterexample)', () => {
    const s: Scenario = {
      priorities: [255, 103, 104, 105],
      intervalCs: 1,
      preempt: false,
      startAt: [0, 0, 0, 0],
      ops: [{ kind: 'stop', router: 0 }],
      delaySeed: 1912751048,
    };
    expect(() => simulate(s)).not.toThrow();
  });
});
