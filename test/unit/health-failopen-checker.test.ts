/**
 * Fail open and flap damping as the HealthChecker applies them (fake clock and probe): the
 * verdicts the data planes follow, the events, snapshot() and failOpen(), a reload; and both
 * planes (two Reconcilers on one checker) applying the same kept set.
 */
import { describe, expect, it } from 'vitest';
import { HealthChecker, type CheckerSettings, type DampingChange, type FailOpenChange } from '../../src/health/checker.js';
import type { Verdict } from '../../src/health/verdict.js';
import { Reconciler, type Plane, type ReadySet } from '../../src/dataplane/reconcile.js';
import { formatHostPort, parseHostPort, type HostPort } from '../../src/net/hostport.js';
import { FakeClock, FakeProbe, T0 } from '../support/fake-health.js';
import { recordingLog } from './verdict-fakes.js';

const B1 = '10.0.0.11:6443';
const B2 = '10.0.0.12:6443';
const B3 = '10.0.0.13:6443';
const DAMPING = { transitions: 3, windowMs: 60_000, holdMs: 10_000, maxHoldMs: 40_000 };
const HEALTH: CheckerSettings = {
  path: '/readyz',
  timeoutMs: 1000,
  insecureSkipVerify: false,
  intervalMs: 1000,
  rise: 2,
  fall: 2,
  failOpen: true,
  damping: DAMPING,
};

function setup(health: Partial<CheckerSettings> = {}, addresses = [B1, B2, B3], clock = new FakeClock()) {
  const fake = new FakeProbe(clock);
  // no jitter, every first check at half an interval: the backends are checked in step
  const checker = new HealthChecker({ health: { ...HEALTH, ...health }, backends: addresses.map(parseHostPort), probe: fake.probe, clock, random: () => 0.5 });
  const verdicts: string[] = [];
  checker.on('verdict', (v) => verdicts.push(`${formatHostPort(v.backend)} ${v.state}${v.cause.kind === 'damped' ? ' damped' : ''}`));
  const failOpen: FailOpenChange[] = [];
  checker.on('failOpen', (f) => failOpen.push(f));
  const damping: DampingChange[] = [];
  checker.on('damping', (d) => damping.push(d));
  const states = (): string[] => checker.verdicts().map((v) => `${formatHostPort(v.backend)} ${v.state}`);
  return { clock, fake, checker, verdicts, failOpen, damping, states };
}

describe('HealthChecker: fail open', () => {
  it('every backend 500 at once: the verdicts stay up, one failOpen event; snapshot and failOpen() say so', async () => {
    const { clock, fake, checker, verdicts, failOpen, states } = setup();
    checker.start();
    await clock.advance(2_000);
    expect(states()).toStrictEqual([`${B1} up`, `${B2} up`, `${B3} up`]);
    verdicts.length = 0;
    for (const b of [B1, B2, B3]) fake.set(b, 'fail');
    await clock.advance(2_000);
    expect(states()).toStrictEqual([`${B1} up`, `${B2} up`, `${B3} up`]);
    // the first two left as they went down; the third going down started fail open, which took
    // them back (one tick: the reconcile coalesces it into one apply of all three)
    expect(verdicts).toStrictEqual([`${B1} unready`, `${B2} unready`, `${B1} up`, `${B2} up`]);
    expect(failOpen.map((f) => ({ ...f, kept: f.kept.map(formatHostPort) }))).toStrictEqual([
      { family: 4, active: true, since: T0 + 3_505, kept: [B1, B2, B3], reason: null, at: T0 + 3_505 },
    ]);
    expect(checker.failOpen()).toStrictEqual({ active: true, since: new Date(T0 + 3_505).toISOString(), kept: [B1, B2, B3] });
    expect(checker.snapshot().map((b) => [b.state, b.healthy, b.reason])).toStrictEqual([
      ['down', true, 'http 500'],
      ['down', true, 'http 500'],
      ['down', true, 'http 500'],
    ]);
    const kept = checker.verdicts()[0] as Verdict;
    expect(kept).toMatchObject({ state: 'up', cause: { kind: 'http', status: 500 }, message: 'http 500 (kept: fail open)' });
  });

  it('a kept backend that dies leaves (dead, reset); one passing ends it and the unready ones leave', async () => {
    const { clock, fake, checker, verdicts, failOpen, states } = setup();
    checker.start();
    await clock.advance(2_000);
    for (const b of [B1, B2, B3]) fake.set(b, 'fail');
    await clock.advance(2_000);
    verdicts.length = 0;
    fake.set(B3, { ok: false, cause: { kind: 'refused' }, error: 'ECONNREFUSED', latencyMs: 1 });
    checker.markDead(parseHostPort(B3), { kind: 'passive', signal: 'refused' }, 'refused');
    expect(verdicts).toStrictEqual([`${B3} dead`]);
    expect(checker.failOpen().kept).toStrictEqual([B1, B2]);
    fake.set(B2, 'pass');
    await clock.advance(2_000);
    expect(states()).toStrictEqual([`${B1} unready`, `${B2} up`, `${B3} dead`]);
    expect(verdicts).toStrictEqual([`${B3} dead`, `${B1} unready`]);
    expect(failOpen.map((f) => [f.active, f.reason, f.kept.map(formatHostPort), f.at - T0])).toStrictEqual([
      [true, null, [B1, B2, B3], 3_505],
      [false, 'passed', [B1, B2], 5_505],
    ]);
    expect(checker.failOpen()).toStrictEqual({ active: false, since: null, kept: [] });
  });

  it('backends that left one after another, further apart than the window, are not all kept', async () => {
    const { clock, fake, checker, failOpen } = setup();
    checker.start();
    await clock.advance(2_000);
    fake.set(B1, 'fail');
    await clock.advance(10_000);
    fake.set(B2, 'fail');
    fake.set(B3, 'fail');
    await clock.advance(3_000);
    expect(failOpen.map((f) => f.kept.map(formatHostPort))).toStrictEqual([[B2, B3]]);
    expect(checker.verdicts().map((v) => v.state)).toStrictEqual(['unready', 'up', 'up']);
  });

  it('off (the default without the setting): the pool empties as before', async () => {
    const { clock, fake, checker, failOpen, states } = setup({ failOpen: undefined });
    checker.start();
    await clock.advance(2_000);
    for (const b of [B1, B2, B3]) fake.set(b, 'fail');
    await clock.advance(2_000);
    expect(states()).toStrictEqual([`${B1} unready`, `${B2} unready`, `${B3} unready`]);
    expect(failOpen).toStrictEqual([]);
  });

  it('a reload turning it off ends it at once; a backend leaving the set leaves the kept set', async () => {
    const { clock, fake, checker, failOpen, states } = setup();
    checker.start();
    await clock.advance(2_000);
    for (const b of [B1, B2, B3]) fake.set(b, 'fail');
    await clock.advance(2_000);
    checker.setBackends([B1, B2].map(parseHostPort));
    expect(checker.failOpen().kept).toStrictEqual([B1, B2]);
    checker.reconfigure({ ...HEALTH, failOpen: false });
    expect(states()).toStrictEqual([`${B1} unready`, `${B2} unready`]);
    expect(failOpen.at(-1)).toMatchObject({ active: false, reason: 'disabled' });
  });

  it('both planes (two reconciles on one checker) apply the kept set, and drop a dead backend', async () => {
    const { clock, fake, checker } = setup();
    const names = (l: readonly HostPort[]): string => l.map(formatHostPort).join(',') || '-';
    const planes = [0, 1].map(() => {
      const applied: string[] = [];
      const plane: Plane = {
        apply: async (set: ReadySet) => {
          applied.push(`ready=${names(set.ready)} draining=${names(set.draining)}`);
          return set.ready;
        },
        reset: async () => 1,
      };
      const r = new Reconciler(plane, checker, { log: recordingLog().log, applyFailed: 'apply failed', resetFailed: 'reset failed' });
      r.follow();
      return { applied, r };
    });
    checker.start();
    await clock.advance(2_000);
    for (const b of [B1, B2, B3]) fake.set(b, 'fail');
    await clock.advance(2_000);
    checker.markDead(parseHostPort(B2), { kind: 'passive', signal: 'unanswered' }, 'unanswered SYN');
    await clock.advance(10);
    for (const p of planes) {
      await p.r.sync();
      expect(p.applied.at(-1)).toBe(`ready=${B1},${B3} draining=-`);
      // never an empty ready set on the way
      expect(p.applied.filter((a) => a.startsWith('ready=-'))).toStrictEqual([]);
    }
  });
});

describe('HealthChecker: flap damping', () => {
  it('more than `transitions` within the window: held out (unready, cause damped) until the hold ends, then back', async () => {
    const { clock, fake, checker, verdicts, damping } = setup({ rise: 1, fall: 1 });
    checker.start();
    await clock.advance(1_000);
    verdicts.length = 0;
    // B2 alternates every check: up -> down -> up -> down -> up (4 transitions; 3 allowed)
    for (let i = 0; i < 4; i++) {
      fake.set(B2, i % 2 === 0 ? 'fail' : 'pass');
      await clock.advance(1_000);
    }
    fake.set(B2, 'pass');
    // the fourth transition (to up) damps it: still unready for the planes, so no new verdict event
    expect(verdicts).toStrictEqual([`${B2} unready`, `${B2} up`, `${B2} unready`]);
    expect(damping.map((d) => [formatHostPort(d.backend), d.event])).toStrictEqual([
      [B2, { kind: 'start', until: T0 + 4_505 + 10_000, holdMs: 10_000, level: 1, transitions: 4 }],
    ]);
    const snap = checker.snapshot()[1]!;
    expect(snap).toMatchObject({ state: 'up', healthy: false, dampedUntil: new Date(T0 + 14_505).toISOString() });
    expect(checker.verdicts()[1]).toMatchObject({ state: 'unready', cause: { kind: 'damped', until: T0 + 14_505 } });
    // now T0 + 5_000: held until T0 + 14_505
    await clock.advance(9_504);
    expect(checker.verdicts()[1]!.state).toBe('unready');
    await clock.advance(2);
    expect(checker.verdicts()[1]!.state).toBe('up');
    expect(checker.snapshot()[1]).toMatchObject({ healthy: true, dampedUntil: null });
    expect(damping.at(-1)!.event).toStrictEqual({ kind: 'end', heldMs: 10_000 });
  });

  it('a hold whose timer fires early still ends: the rest is waited out, not left to the next transition', async () => {
    // every timer 5 ms early by the checker's clock, as Node's may be by Date.now (1 ms in 4 of
    // 300 here: timers run on the monotonic clock)
    const { clock, fake, checker, damping } = setup({ rise: 1, fall: 1 }, [B1, B2, B3], new FakeClock(5));
    checker.start();
    await clock.advance(1_000);
    for (let i = 0; i < 4; i++) {
      fake.set(B2, i % 2 === 0 ? 'fail' : 'pass');
      await clock.advance(1_000);
    }
    fake.set(B2, 'pass');
    const start = damping.find((d) => d.event.kind === 'start');
    expect(start).toBeDefined();
    const until = (start!.event as { until: number }).until;
    await clock.advance(until - clock.now() - 1);
    expect(checker.verdicts()[1]!.state).toBe('unready');
    // the first timer fired 5 ms early and found the hold running; the rest, re-armed, ends it
    await clock.advance(10);
    expect(checker.verdicts()[1]!.state).toBe('up');
    expect(damping.at(-1)!.event).toMatchObject({ kind: 'end' });
  });

  it('damping never empties the pool: the only backend up serves though damped', async () => {
    const { clock, fake, checker } = setup({ rise: 1, fall: 1, failOpen: false }, [B1, B2]);
    checker.start();
    await clock.advance(1_000);
    fake.set(B1, 'fail');
    await clock.advance(1_000);
    for (let i = 0; i < 4; i++) {
      fake.set(B2, i % 2 === 0 ? 'fail' : 'pass');
      await clock.advance(1_000);
    }
    expect(checker.snapshot()[1]).toMatchObject({ state: 'up', healthy: true });
    expect(checker.snapshot()[1]!.dampedUntil).not.toBeNull();
    expect(checker.verdicts().map((v) => v.state)).toStrictEqual(['unready', 'up']);
  });

  it('a reload turning damping off releases every held backend', async () => {
    const { clock, fake, checker, damping } = setup({ rise: 1, fall: 1 });
    checker.start();
    await clock.advance(1_000);
    for (let i = 0; i < 4; i++) {
      fake.set(B2, i % 2 === 0 ? 'fail' : 'pass');
      await clock.advance(1_000);
    }
    expect(checker.verdicts()[1]!.state).toBe('unready');
    checker.reconfigure({ ...HEALTH, rise: 1, fall: 1, damping: null });
    expect(checker.verdicts()[1]!.state).toBe('up');
    expect(damping.at(-1)!.event.kind).toBe('end');
    expect(checker.snapshot()[1]!.dampedUntil).toBeNull();
  });
});
