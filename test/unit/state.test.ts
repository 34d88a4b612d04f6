import { describe, expect, it } from 'vitest';
import {
  HEAL_ANNOUNCE_MIN_INTERVAL_MS,
  masterDownIntervalMs,
  skewTimeMs,
  VrrpMachine,
  type MachineConfig,
  type MachineEvent,
  type VrrpState,
} from '../../src/vrrp/state.js';

const base: MachineConfig = {
  vrid: 51,
  priority: 100,
  advertisementIntervalCs: 10, // 100 ms
  preempt: true,
  preemptDelayMs: 0,
  primaryAddress: '10.0.0.12',
};

function machine(over: Partial<MachineConfig> = {}): VrrpMachine {
  return new VrrpMachine({ ...base, ...over });
}

/** Brings a machine to `state` at t=1000 and returns it. */
function inState(state: VrrpState, over: Partial<MachineConfig> = {}): VrrpMachine {
  const m = machine(over);
  if (state === 'initialize') return m;
  m.handle({ type: 'startup', now: 0 });
  if (state === 'backup') {
    m.handle({ type: 'advert', now: 1000, priority: 200, maxAdvertIntervalCs: 10, source: '10.0.0.11' });
    return m;
  }
  if (state === 'active') {
    m.handle({ type: 'tick', now: 1000 });
    expect(m.state).toBe('active');
    return m;
  }
  m.handle({ type: 'linkDown', now: 1000 });
  return m;
}

describe('timer arithmetic (RFC 9568 §6.1)', () => {
  it('Skew_Time = ((256 - Priority) * Master_Adver_Interval) / 256', () => {
    expect(skewTimeMs(100, 10)).toBeCloseTo((156 * 100) / 256, 9); // 60.9375 ms
    expect(skewTimeMs(255, 100)).toBeCloseTo(1000 / 256, 9);
    expect(skewTimeMs(1, 100)).toBeCloseTo((255 * 1000) / 256, 9);
  });
  it('Master_Down_Interval = 3 * Master_Adver_Interval + Skew_Time', () => {
    expect(masterDownIntervalMs(100, 10)).toBeCloseTo(300 + 60.9375, 9);
    expect(masterDownIntervalMs(150, 100)).toBeCloseTo(3000 + (106 * 1000) / 256, 9);
  });
  it('a higher priority has a shorter Master_Down_Interval', () => {
    expect(masterDownIntervalMs(150, 10)).toBeLessThan(masterDownIntervalMs(100, 10));
    expect(masterDownIntervalMs(100, 10)).toBeLessThan(masterDownIntervalMs(50, 10));
  });
});

describe('construction', () => {
  it.each([
    [{ vrid: 0 }, /vrid/],
    [{ vrid: 256 }, /vrid/],
    [{ priority: 0 }, /priority/],
    [{ priority: 256 }, /priority/],
    [{ advertisementIntervalCs: 0 }, /advertisementIntervalCs/],
    [{ advertisementIntervalCs: 4096 }, /advertisementIntervalCs/],
    [{ preemptDelayMs: -1 }, /preemptDelayMs/],
  ])('rejects %j', (over, msg) => {
    expect(() => machine(over)).toThrow(msg);
  });
  it('starts in Initialize with no timers', () => {
    const m = machine();
    expect(m.state).toBe('initialize');
    expect(m.nextDeadline()).toBeNull();
  });
  it('refuses time going backwards', () => {
    const m = machine();
    m.handle({ type: 'startup', now: 100 });
    expect(() => m.handle({ type: 'tick', now: 99 })).toThrow(RangeError);
  });
});

describe('Initialize (§6.4.1)', () => {
  it('startup goes Backup and starts Master_Down_Timer = Master_Down_Interval', () => {
    const m = machine();
    const out = m.handle({ type: 'startup', now: 5 });
    expect(out).toEqual([{ type: 'transition', from: 'initialize', to: 'backup', reason: 'startup' }]);
    expect(m.nextDeadline()).toBeCloseTo(5 + masterDownIntervalMs(100, 10), 9);
  });
  it('the address owner (priority 255) advertises and goes Active at once', () => {
    const m = machine({ priority: 255 });
    const out = m.handle({ type: 'startup', now: 5 });
    expect(out).toEqual([
      { type: 'send', priority: 255 },
      { type: 'transition', from: 'initialize', to: 'active', reason: 'owner' },
    ]);
    expect(m.nextDeadline()).toBe(105);
  });
  it.each<MachineEvent>([
    { type: 'advert', now: 1, priority: 200, maxAdvertIntervalCs: 10, source: '10.0.0.11' },
    { type: 'tick', now: 1 },
    { type: 'shutdown', now: 1 },
    { type: 'linkUp', now: 1 },
  ])('ignores $type', (ev) => {
    const m = machine();
    expect(m.handle(ev)).toEqual([]);
    expect(m.state).toBe('initialize');
  });
  it('link down goes to Fault', () => {
    const m = machine();
    expect(m.handle({ type: 'linkDown', now: 1 })).toEqual([{ type: 'transition', from: 'initialize', to: 'fault', reason: 'linkDown' }]);
  });
});

describe('Backup (§6.4.2)', () => {
  it('Master_Down_Timer firing: advertise, go Active, start Adver_Timer', () => {
    const m = machine();
    m.handle({ type: 'startup', now: 0 });
    const due = m.nextDeadline()!;
    expect(m.handle({ type: 'tick', now: due - 1 })).toEqual([]);
    const out = m.handle({ type: 'tick', now: due });
    expect(out).toEqual([
      { type: 'send', priority: 100 },
      { type: 'transition', from: 'backup', to: 'active', reason: 'masterDown' },
    ]);
    expect(m.nextDeadline()).toBeCloseTo(due + 100, 9);
  });

  it('an advert of higher priority resets Master_Down_Timer and adopts its interval', () => {
    const m = machine();
    m.handle({ type: 'startup', now: 0 });
    const out = m.handle({ type: 'advert', now: 200, priority: 150, maxAdvertIntervalCs: 20, source: '10.0.0.11' });
    expect(out).toEqual([]);
    const snap = m.snapshot();
    expect(snap.masterAdverIntervalCs).toBe(20);
    expect(snap.masterAddress).toBe('10.0.0.11');
    expect(snap.masterPriority).toBe(150);
    expect(m.nextDeadline()).toBeCloseTo(200 + masterDownIntervalMs(100, 20), 9);
  });

  it('an advert of equal priority is accepted as the Active router', () => {
    const m = inState('backup');
    m.handle({ type: 'advert', now: 1100, priority: 100, maxAdvertIntervalCs: 10, source: '10.0.0.11' });
    expect(m.nextDeadline()).toBeCloseTo(1100 + masterDownIntervalMs(100, 10), 9);
  });

  it('with Preempt_Mode, a lower-priority advert is discarded and we take over at Master_Down', () => {
    const m = machine();
    m.handle({ type: 'startup', now: 0 });
    const due = m.nextDeadline()!;
    for (let t = 50; t < due; t += 100) {
      expect(m.handle({ type: 'advert', now: t, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.13' })).toEqual([]);
    }
    expect(m.nextDeadline()).toBe(due);
    expect(m.handle({ type: 'tick', now: due })[1]).toMatchObject({ to: 'active', reason: 'preempt', previousMaster: '10.0.0.13' });
  });

  it('Master_Down after hearing an Active router names it as previousMaster', () => {
    const m = inState('backup');
    const out = m.handle({ type: 'tick', now: m.nextDeadline()! });
    expect(out[1]).toEqual({ type: 'transition', from: 'backup', to: 'active', reason: 'masterDown', previousMaster: '10.0.0.11' });
  });

  it('preemptHold: lower adverts are accepted while held; released, we preempt at Master_Down', () => {
    const m = machine();
    m.handle({ type: 'startup', now: 0 });
    m.handle({ type: 'preemptHold', now: 0, hold: true });
    m.handle({ type: 'advert', now: 100, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.13' });
    expect(m.nextDeadline()).toBeCloseTo(100 + masterDownIntervalMs(100, 10), 9);
    m.handle({ type: 'preemptHold', now: 150, hold: false });
    m.handle({ type: 'advert', now: 200, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.13' });
    const due = m.nextDeadline()!;
    expect(due).toBeCloseTo(100 + masterDownIntervalMs(100, 10), 9);
    expect(m.handle({ type: 'tick', now: due })[1]).toMatchObject({ to: 'active', previousMaster: '10.0.0.13' });
  });

  it('preemptHold does not stop taking over a silent group', () => {
    const m = machine();
    m.handle({ type: 'startup', now: 0 });
    m.handle({ type: 'preemptHold', now: 0, hold: true });
    expect(m.handle({ type: 'tick', now: m.nextDeadline()! })[1]).toMatchObject({ to: 'active', reason: 'masterDown' });
  });

  it('without Preempt_Mode, a lower-priority advert is accepted', () => {
    const m = machine({ preempt: false });
    m.handle({ type: 'startup', now: 0 });
    m.handle({ type: 'advert', now: 300, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.13' });
    expect(m.nextDeadline()).toBeCloseTo(300 + masterDownIntervalMs(100, 10), 9);
    expect(m.snapshot().masterAddress).toBe('10.0.0.13');
  });

  it('preemptDelay: lower adverts are accepted until the delay after startup has passed', () => {
    const m = machine({ preemptDelayMs: 2000 });
    m.handle({ type: 'startup', now: 0 });
    let t = 0;
    for (; t < 2000; t += 100) m.handle({ type: 'advert', now: t, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.13' });
    expect(m.state).toBe('backup');
    // the last accepted advert at t=1900 set the timer; from 2000 on they are discarded
    const due = m.nextDeadline()!;
    expect(due).toBeCloseTo(1900 + masterDownIntervalMs(100, 10), 9);
    m.handle({ type: 'advert', now: 2000, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.13' });
    expect(m.nextDeadline()).toBe(due);
    expect(m.handle({ type: 'tick', now: due })[1]).toMatchObject({ to: 'active' });
  });

  it('a priority-0 advert sets Master_Down_Timer to Skew_Time', () => {
    const m = inState('backup');
    const out = m.handle({ type: 'advert', now: 1050, priority: 0, maxAdvertIntervalCs: 10, source: '10.0.0.11' });
    expect(out).toEqual([]);
    expect(m.nextDeadline()).toBeCloseTo(1050 + skewTimeMs(100, 10), 9);
    const takeover = m.handle({ type: 'tick', now: m.nextDeadline()! });
    expect(takeover).toEqual([
      { type: 'send', priority: 100 },
      { type: 'transition', from: 'backup', to: 'active', reason: 'resigned', previousMaster: '10.0.0.11' },
    ]);
  });

  it('shutdown cancels Master_Down_Timer and goes Initialize, sending nothing', () => {
    const m = inState('backup');
    expect(m.handle({ type: 'shutdown', now: 1100 })).toEqual([{ type: 'transition', from: 'backup', to: 'initialize', reason: 'shutdown' }]);
    expect(m.nextDeadline()).toBeNull();
  });

  it('link down goes Fault and stops the timer; link up rejoins as Backup', () => {
    const m = inState('backup');
    m.handle({ type: 'linkDown', now: 1100 });
    expect(m.state).toBe('fault');
    expect(m.nextDeadline()).toBeNull();
    expect(m.handle({ type: 'linkUp', now: 5000 })).toEqual([
      { type: 'transition', from: 'fault', to: 'initialize', reason: 'linkUp' },
      { type: 'transition', from: 'initialize', to: 'backup', reason: 'linkUp' },
    ]);
    expect(m.nextDeadline()).toBeCloseTo(5000 + masterDownIntervalMs(100, 10), 9);
  });

  it('a priority change applies to the next Master_Down_Interval it computes', () => {
    const m = inState('backup');
    m.handle({ type: 'priority', now: 1050, priority: 10 });
    expect(m.snapshot().effectivePriority).toBe(10);
    m.handle({ type: 'advert', now: 1100, priority: 200, maxAdvertIntervalCs: 10, source: '10.0.0.11' });
    expect(m.nextDeadline()).toBeCloseTo(1100 + masterDownIntervalMs(10, 10), 9);
  });
});

describe('Active (§6.4.3)', () => {
  it('Adver_Timer firing sends an advert and resets the timer to Advertisement_Interval', () => {
    const m = inState('active');
    const due = m.nextDeadline()!;
    expect(m.handle({ type: 'tick', now: due })).toEqual([{ type: 'send', priority: 100 }]);
    expect(m.nextDeadline()).toBe(due + 100);
  });

  it('a higher-priority advert: one last advert at our priority (the winner learns of us), adopt its interval, go Backup', () => {
    const m = inState('active');
    const out = m.handle({ type: 'advert', now: 1050, priority: 150, maxAdvertIntervalCs: 30, source: '10.0.0.11' });
    expect(out).toEqual([
      { type: 'send', priority: 100 },
      { type: 'transition', from: 'active', to: 'backup', reason: 'higherPriority', detail: '10.0.0.11 priority 150' },
    ]);
    expect(m.snapshot().masterAdverIntervalCs).toBe(30);
    expect(m.nextDeadline()).toBeCloseTo(1050 + masterDownIntervalMs(100, 30), 9);
  });

  it('equal priority: the greater primary address wins (tie-break)', () => {
    const loses = inState('active', { primaryAddress: '10.0.0.12' });
    expect(loses.handle({ type: 'advert', now: 1050, priority: 100, maxAdvertIntervalCs: 10, source: '10.0.0.13' })).toEqual([
      { type: 'send', priority: 100 },
      { type: 'transition', from: 'active', to: 'backup', reason: 'addressTieBreak', detail: '10.0.0.13 priority 100' },
    ]);
    const wins = inState('active', { primaryAddress: '10.0.0.12' });
    expect(wins.handle({ type: 'advert', now: 1050, priority: 100, maxAdvertIntervalCs: 10, source: '10.0.0.9' })).toEqual([{ type: 'send', priority: 100 }]);
    expect(wins.state).toBe('active');
  });

  it('compares addresses numerically, not as text (10.0.0.9 < 10.0.0.10)', () => {
    const m = inState('active', { primaryAddress: '10.0.0.9' });
    m.handle({ type: 'advert', now: 1050, priority: 100, maxAdvertIntervalCs: 10, source: '10.0.0.10' });
    expect(m.state).toBe('backup');
  });

  it('IPv6 tie-break by link-local address', () => {
    const m = inState('active', { primaryAddress: 'fe80::77:ff:fe00:12' });
    m.handle({ type: 'advert', now: 1050, priority: 100, maxAdvertIntervalCs: 10, source: 'fe80::77:ff:fe00:13' });
    expect(m.state).toBe('backup');
  });

  it('a lower-priority advert is answered at once with our advert (healed partition)', () => {
    const m = inState('active');
    const out = m.handle({ type: 'advert', now: 1033, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.13' });
    expect(out).toEqual([{ type: 'send', priority: 100 }]);
    expect(m.nextDeadline()).toBe(1133);
    expect(m.state).toBe('active');
  });

  it('a lower-priority advert within the heal rate limit defers one announce burst to its end (the winner claims last)', () => {
    // three routers after a healed partition: we (150) announce on the lowest's advert; the middle
    // one (100), Active too, claimed the VIP on hearing the lowest and then yields with one last
    // advert at its own priority, 30 ms after our claim. Our claim must come after its claim.
    const m = inState('active', { priority: 150, vips: ['10.0.0.100'] });
    const heal = m.handle({ type: 'advert', now: 1050, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.13' });
    expect(heal).toEqual([
      { type: 'send', priority: 150 },
      { type: 'announce', reason: 'healedPartition', source: '10.0.0.13' },
    ]);
    const yielded = m.handle({ type: 'advert', now: 1080, priority: 100, maxAdvertIntervalCs: 10, source: '10.0.0.14' });
    expect(yielded).toEqual([{ type: 'send', priority: 150 }]);
    // the Adver_Timer (1180) comes first; the deferred burst is due at 1050 + HEAL_ANNOUNCE_MIN_INTERVAL_MS
    expect(m.handle({ type: 'tick', now: 1180 })).toEqual([{ type: 'send', priority: 150 }]);
    let t = 1180;
    const announces: unknown[] = [];
    while (t < 2100) {
      t = m.nextDeadline()!;
      for (const a of m.handle({ type: 'tick', now: t })) if (a.type === 'announce') announces.push({ t, ...a });
    }
    expect(announces).toEqual([{ t: HEAL_ANNOUNCE_MIN_INTERVAL_MS + 1050, type: 'announce', reason: 'healedPartition', source: '10.0.0.14' }]);
  });

  it('a stream of lower-priority adverts gives at most one heal burst per HEAL_ANNOUNCE_MIN_INTERVAL_MS', () => {
    const m = inState('active', { priority: 150, vips: ['10.0.0.100'] });
    const at: number[] = [];
    for (let now = 1010; now <= 4010; now += 10) {
      // a peer that cannot hear us: its advert every 100 ms, our ticks in between
      const out =
        now % 100 === 10 ? m.handle({ type: 'advert', now, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.13' }) : m.handle({ type: 'tick', now });
      for (const a of out) if (a.type === 'announce') at.push(now);
    }
    expect(at).toEqual([1010, 2010, 3010, 4010]);
  });

  it('the deferred heal burst is dropped when the machine leaves Active', () => {
    const m = inState('active', { priority: 150, vips: ['10.0.0.100'] });
    m.handle({ type: 'advert', now: 1050, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.13' });
    m.handle({ type: 'advert', now: 1080, priority: 100, maxAdvertIntervalCs: 10, source: '10.0.0.14' });
    const announces: string[] = [];
    // a higher priority takes over and keeps advertising: we stay Backup past the deferred burst's time
    for (let now = 1100; now <= 2200; now += 100) {
      for (const a of m.handle({ type: 'advert', now, priority: 200, maxAdvertIntervalCs: 10, source: '10.0.0.11' }))
        if (a.type === 'announce') announces.push(a.reason);
      for (const a of m.handle({ type: 'tick', now: now + 50 })) if (a.type === 'announce') announces.push(a.reason);
    }
    expect(m.state).toBe('backup');
    expect(announces).toEqual([]);
  });

  it('a priority-0 advert is answered at once and resets Adver_Timer', () => {
    const m = inState('active');
    expect(m.handle({ type: 'advert', now: 1040, priority: 0, maxAdvertIntervalCs: 10, source: '10.0.0.13' })).toEqual([{ type: 'send', priority: 100 }]);
    expect(m.nextDeadline()).toBe(1140);
  });

  it('shutdown sends priority 0, cancels Adver_Timer and goes Initialize', () => {
    const m = inState('active');
    expect(m.handle({ type: 'shutdown', now: 1050 })).toEqual([
      { type: 'send', priority: 0 },
      { type: 'transition', from: 'active', to: 'initialize', reason: 'shutdown' },
    ]);
    expect(m.nextDeadline()).toBeNull();
  });

  it('link down goes Fault without sending', () => {
    const m = inState('active');
    expect(m.handle({ type: 'linkDown', now: 1050 })).toEqual([{ type: 'transition', from: 'active', to: 'fault', reason: 'linkDown' }]);
  });

  it('a lowered effective priority is what the next advert carries', () => {
    const m = inState('active');
    m.handle({ type: 'priority', now: 1010, priority: 20 });
    expect(m.handle({ type: 'tick', now: m.nextDeadline()! })).toEqual([{ type: 'send', priority: 20 }]);
    // and a router of priority 50 now wins
    m.handle({ type: 'advert', now: 1150, priority: 50, maxAdvertIntervalCs: 10, source: '10.0.0.1' });
    expect(m.state).toBe('backup');
  });

  it('snapshot names us as the Active router', () => {
    const m = inState('active');
    expect(m.snapshot()).toMatchObject({ state: 'active', masterAddress: '10.0.0.12', masterPriority: 100, since: 1000 });
  });
});

describe('Fault', () => {
  it.each<MachineEvent>([
    { type: 'advert', now: 2000, priority: 200, maxAdvertIntervalCs: 10, source: '10.0.0.11' },
    { type: 'tick', now: 2000 },
    { type: 'linkDown', now: 2000 },
    { type: 'startup', now: 2000 },
  ])('ignores $type', (ev) => {
    const m = inState('fault');
    expect(m.handle(ev)).toEqual([]);
    expect(m.state).toBe('fault');
  });
  it('shutdown goes Initialize', () => {
    const m = inState('fault');
    expect(m.handle({ type: 'shutdown', now: 2000 })).toEqual([{ type: 'transition', from: 'fault', to: 'initialize', reason: 'shutdown' }]);
  });
});

describe('invalid priority events', () => {
  it.each([0, 256, 1.5])('rejects %d', (p) => {
    expect(() => machine().handle({ type: 'priority', now: 0, priority: p })).toThrow(RangeError);
  });
});

describe('three routers converge (simulated LAN, fake clock)', () => {
  /** Runs routers that hear each other's adverts instantly; returns the Active ones after `until` ms. */
  function simulate(
    cfgs: Partial<MachineConfig>[],
    until: number,
    alive: (i: number, t: number) => boolean = () => true,
    linked: (t: number) => boolean = () => true,
  ) {
    const ms = cfgs.map((c) => machine(c));
    const addr = cfgs.map((c) => c.primaryAddress!);
    let t = 0;
    ms.forEach((m) => m.handle({ type: 'startup', now: 0 }));
    const deliver = (from: number, priority: number) => {
      ms.forEach((m, j) => {
        if (j !== from && alive(j, t) && linked(t)) {
          const sends = m.handle({ type: 'advert', now: t, priority, maxAdvertIntervalCs: 10, source: addr[from]! });
          sends.forEach((a) => a.type === 'send' && deliver(j, a.priority));
        }
      });
    };
    for (let steps = 0; steps < 100_000; steps++) {
      const next = Math.min(...ms.map((m, i) => (alive(i, t) ? (m.nextDeadline() ?? Infinity) : Infinity)));
      if (next > until) break;
      t = next;
      ms.forEach((m, i) => {
        if (!alive(i, t)) return;
        m.handle({ type: 'tick', now: t }).forEach((a) => a.type === 'send' && deliver(i, a.priority));
      });
    }
    return ms.map((m, i) => (alive(i, until) && m.state === 'active' ? i : -1)).filter((i) => i >= 0);
  }
  const three = [
    { priority: 150, primaryAddress: '10.0.0.11' },
    { priority: 100, primaryAddress: '10.0.0.12' },
    { priority: 50, primaryAddress: '10.0.0.13' },
  ];
  it('the highest priority wins', () => {
    expect(simulate(three, 5000)).toEqual([0]);
  });
  it('equal priorities: the first to time out holds it; Backups do not tie-break (§6.4.2)', () => {
    expect(
      simulate(
        three.map((c) => ({ ...c, priority: 100 })),
        5000,
      ),
    ).toEqual([0]);
  });
  it('equal priorities, all Active after a partition heals: the greatest address wins (§6.4.3)', () => {
    const equal = three.map((c) => ({ ...c, priority: 100 }));
    expect(
      simulate(
        equal,
        1999,
        () => true,
        (t) => t >= 2000,
      ),
    ).toEqual([0, 1, 2]);
    expect(
      simulate(
        equal,
        5000,
        () => true,
        (t) => t >= 2000,
      ),
    ).toEqual([2]);
  });
  it('a healed partition: the higher priority keeps it, the other yields', () => {
    expect(
      simulate(
        three,
        5000,
        () => true,
        (t) => t >= 2000,
      ),
    ).toEqual([0]);
  });
  it('the holder dies: the next priority takes over within its Master_Down_Interval', () => {
    expect(simulate(three, 5000, (i, t) => i !== 0 || t < 2000)).toEqual([1]);
  });
});
