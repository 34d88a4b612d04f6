import { describe, expect, it } from 'vitest';
import {
  answeredMeanwhile,
  HealthChecker,
  REMEMBER_DEPARTED_MS,
  type CheckerBackend,
  type CheckerSettings,
  type HealthChange,
  type HealthCheckerOptions,
} from '../../src/health/checker.js';
import type { ProbeResult, ProbeTarget } from '../../src/health/probe.js';
import type { DeadCause, Verdict } from '../../src/health/verdict.js';
import { formatHostPort as formatAddress, parseHostPort } from '../../src/net/hostport.js';
import { prng } from '../support/prng.js';
import { FakeClock, FakeProbe, T0 } from '../support/fake-health.js';

const HEALTH: CheckerSettings = { path: '/readyz', timeoutMs: 1000, insecureSkipVerify: false, intervalMs: 1000, rise: 2, fall: 2 };
const B1: CheckerBackend = { host: '10.0.0.11', port: 6443 };
const B2: CheckerBackend = { host: '10.0.0.12', port: 6443 };
const B3: CheckerBackend = { host: 'fd00::13', port: 6443 };

/** A change as text: the backend as host:port, without the typed cause (asserted on its own). */
type Change = Omit<HealthChange, 'backend' | 'cause'> & { backend: string };
function plain(c: HealthChange): Change {
  const { cause: _cause, ...rest } = c;
  return { ...rest, backend: formatAddress(c.backend) };
}

const PASSIVE: DeadCause = { kind: 'passive', signal: 'refused' };
/** markDead by host:port text, as passive detection would (its cause: a refused SYN). */
const markDead = (checker: HealthChecker, address: string, message: string): boolean => checker.markDead(parseHostPort(address), PASSIVE, message);

function setup(over: Partial<Omit<HealthCheckerOptions, 'health'>> & { health?: Partial<CheckerSettings> } = {}) {
  const clock = new FakeClock();
  const fake = new FakeProbe(clock);
  const warnings: [object, string][] = [];
  const checker = new HealthChecker({
    backends: [B1, B2, B3],
    probe: fake.probe,
    clock,
    random: prng(42),
    logger: { warn: (obj, msg) => warnings.push([obj, msg]) },
    ...over,
    health: { ...HEALTH, ...over.health },
  });
  const changes: Change[] = [];
  checker.on('change', (c) => changes.push(plain(c)));
  const verdicts: Verdict[] = [];
  checker.on('verdict', (v) => verdicts.push(v));
  return { clock, fake, checker, changes, verdicts, warnings };
}

describe('HealthChecker: scheduling', () => {
  it('starts each backend at its own random offset within the first interval, in parallel', async () => {
    const r = [0.1, 0.5, 0.9];
    const { clock, fake, checker } = setup({ random: () => r.shift() ?? 0.5 });
    await clock.advance(5_000);
    expect(fake.calls).toHaveLength(0); // nothing before start()
    checker.start();
    await clock.advance(999);
    expect(fake.calls.map((c) => [c.address, c.start - clock.t + 999])).toStrictEqual([
      ['10.0.0.11:6443', 100],
      ['10.0.0.12:6443', 500],
      ['[fd00::13]:6443', 900],
    ]);
  });

  it('checks every interval ±10%, timed from the start of the previous check', async () => {
    const { clock, fake, checker } = setup({ random: prng(7) });
    fake.latencyMs = 300;
    checker.start();
    await clock.advance(200_000);
    for (const b of [B1, B2, B3]) {
      const starts = fake.startsOf(formatAddress(b));
      const first = starts[0] ?? -1;
      expect(first).toBeGreaterThanOrEqual(0);
      expect(first).toBeLessThan(1000);
      const gaps = starts.slice(1).map((s, i) => s - (starts[i] ?? 0));
      expect(Math.min(...gaps)).toBeGreaterThanOrEqual(900);
      expect(Math.max(...gaps)).toBeLessThanOrEqual(1100);
      // the jitter is spread, not constant
      expect(Math.max(...gaps) - Math.min(...gaps)).toBeGreaterThan(100);
      expect(starts.length).toBeGreaterThan(180);
    }
  });

  it('spreads the first checks of many checkers (nodes) over the interval', async () => {
    const firsts: number[] = [];
    for (let seed = 1; seed <= 50; seed++) {
      const { clock, fake, checker } = setup({ random: prng(seed), backends: [B1] });
      checker.start();
      await clock.advance(1000);
      firsts.push(fake.startsOf('10.0.0.11:6443')[0] ?? -1);
    }
    expect(Math.min(...firsts)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...firsts)).toBeLessThan(1000);
    expect(new Set(firsts.map((f) => Math.floor(f / 100))).size).toBeGreaterThanOrEqual(8);
  });

  it('never runs two checks of one backend at once, and starts a late one as soon as the previous ends', async () => {
    const { clock, fake, checker } = setup({ random: () => 0 });
    fake.latencyMs = 2_500; // longer than the interval (the probe's own timeout would prevent it; the fake does not)
    checker.start();
    await clock.advance(20_000);
    for (const address of ['10.0.0.11:6443', '10.0.0.12:6443', '[fd00::13]:6443']) {
      expect(fake.maxRunning.get(address)).toBe(1);
      const calls = fake.calls.filter((c) => c.address === address);
      // each check starts exactly when the previous one ended: no overlap, no idle gap, no burst
      for (let i = 1; i < calls.length; i++) expect(calls[i]?.start).toBe(calls[i - 1]?.end);
      expect(calls.map((c) => c.start - T0)).toStrictEqual([0, 2_500, 5_000, 7_500, 10_000, 12_500, 15_000, 17_500, 20_000]);
    }
  });

  it('checks backends in parallel: one that never answers does not delay the others', async () => {
    const clock = new FakeClock();
    const fake = new FakeProbe(clock);
    // B1 hangs until aborted
    const probe = (t: ProbeTarget, signal?: AbortSignal): Promise<ProbeResult> =>
      formatAddress(t) === '10.0.0.11:6443'
        ? new Promise((resolve) => signal?.addEventListener('abort', () => resolve({ ok: false, cause: { kind: 'aborted' }, error: 'aborted', latencyMs: 0 })))
        : fake.probe(t, signal);
    const checker = new HealthChecker({ health: HEALTH, backends: [B1, B2], probe, clock, random: () => 0.5 });
    checker.start();
    await clock.advance(10_000);
    expect(fake.startsOf('10.0.0.12:6443')).toStrictEqual([500, 1_500, 2_500, 3_500, 4_500, 5_500, 6_500, 7_500, 8_500, 9_500]);
    expect(checker.snapshot().map((b) => b.state)).toStrictEqual(['unknown', 'up']);
    await checker.stop();
  });
});

describe('HealthChecker: health', () => {
  it('brings every backend up after rise passing checks and reports the snapshot', async () => {
    const { clock, fake, checker, changes } = setup({ random: () => 0.5 });
    expect(checker.snapshot()).toStrictEqual(
      ['10.0.0.11:6443', '10.0.0.12:6443', '[fd00::13]:6443'].map((address) => ({
        address,
        state: 'unknown',
        healthy: false,
        lastCheck: null,
        lastLatencyMs: null,
        reason: null,
        consecutive: 0,
        dampedUntil: null,
        left: 0,
        returned: 0,
      })),
    );
    checker.start();
    // first check at 500 ms, the second 1000 ms later (random 0.5 = no jitter), each taking 5 ms
    await clock.advance(1_504);
    expect(changes).toStrictEqual([]);
    await clock.advance(1);
    expect(changes).toStrictEqual(
      ['10.0.0.11:6443', '10.0.0.12:6443', '[fd00::13]:6443'].map((backend) => ({
        backend,
        from: 'unknown',
        to: 'up',
        reason: 'http 200',
        at: T0 + 1_505,
        healthy: true,
      })),
    );
    expect(checker.snapshot()[0]).toStrictEqual({
      address: '10.0.0.11:6443',
      state: 'up',
      healthy: true,
      lastCheck: new Date(T0 + 1_505).toISOString(),
      lastLatencyMs: fake.latencyMs,
      reason: null,
      consecutive: 2,
      dampedUntil: null,
      left: 0,
      returned: 0,
    });
  });

  it('takes a backend down after fall failures, with the failure as the reason, and back up after rise passes', async () => {
    const { clock, fake, checker, changes } = setup({ random: () => 0.5 });
    checker.start();
    await clock.advance(2_000); // all up
    changes.length = 0;
    fake.set('10.0.0.12:6443', 'fail');
    await clock.advance(1_000);
    expect(changes).toStrictEqual([]);
    expect(checker.snapshot()[1]).toMatchObject({ state: 'up', healthy: true, reason: 'http 500', consecutive: 1 });
    await clock.advance(1_000);
    expect(changes).toStrictEqual([{ backend: '10.0.0.12:6443', from: 'up', to: 'down', reason: 'http 500', at: T0 + 3_505, healthy: false }]);
    fake.set('10.0.0.12:6443', { ok: false, cause: { kind: 'refused' }, error: 'ECONNREFUSED', latencyMs: 1 });
    await clock.advance(1_000);
    expect(checker.snapshot()[1]).toMatchObject({ state: 'down', reason: 'ECONNREFUSED', consecutive: 3, lastLatencyMs: 1 });
    fake.set('10.0.0.12:6443', 'pass');
    await clock.advance(1_000);
    expect(checker.snapshot()[1]).toMatchObject({ state: 'down', reason: 'ECONNREFUSED', consecutive: 1 });
    await clock.advance(1_000);
    expect(changes.slice(1)).toStrictEqual([{ backend: '10.0.0.12:6443', from: 'down', to: 'up', reason: 'http 200', at: T0 + 6_505, healthy: true }]);
    expect(checker.snapshot()[1]).toMatchObject({ state: 'up', reason: null, consecutive: 2 });
  });

  it('does not change state while a backend flaps (pass/fail alternating, rise = fall = 2)', async () => {
    const { clock, fake, checker, changes } = setup({ random: () => 0.5, backends: [B1] });
    checker.start();
    await clock.advance(2_000);
    expect(changes.map((c) => c.to)).toStrictEqual(['up']);
    for (let i = 0; i < 20; i++) {
      fake.set('10.0.0.11:6443', i % 2 === 0 ? 'fail' : 'pass');
      await clock.advance(1_000);
    }
    expect(changes.map((c) => c.to)).toStrictEqual(['up']);
  });

  it('counts a probe that rejects as a failed check', async () => {
    const clock = new FakeClock();
    const checker = new HealthChecker({
      health: { ...HEALTH, fall: 1 },
      backends: [B1],
      probe: () => Promise.reject(new Error('boom')),
      clock,
      random: () => 0,
    });
    const changes: Change[] = [];
    checker.on('change', (c) => changes.push(plain(c)));
    checker.start();
    await clock.advance(10);
    expect(changes.map((c) => [c.to, c.reason])).toStrictEqual([['down', 'probe failed: boom']]);
    await checker.stop();
  });

  it('emits a check event for every check, before the change it causes', async () => {
    const { clock, checker } = setup({ random: () => 0, backends: [B1], health: { rise: 1 } });
    const events: string[] = [];
    checker.on('check', (c) => events.push(`check ${formatAddress(c.backend)} ${c.result.ok} ${c.at - T0}`));
    checker.on('change', (c) => events.push(`change ${formatAddress(c.backend)} ${c.to}`));
    checker.on('verdict', (v) => events.push(`verdict ${formatAddress(v.backend)} ${v.state}`));
    checker.start();
    // random 0: the first check at 0, the next 900 ms later (the -10% end of the jitter)
    await clock.advance(1_000);
    expect(events).toStrictEqual(['check 10.0.0.11:6443 true 5', 'change 10.0.0.11:6443 up', 'verdict 10.0.0.11:6443 up', 'check 10.0.0.11:6443 true 905']);
  });
});

describe('HealthChecker: markDead', () => {
  it('takes an up backend down at once; rise passes bring it back', async () => {
    const { clock, checker, changes } = setup({ random: () => 0.5 });
    checker.start();
    await clock.advance(2_000);
    changes.length = 0;
    await clock.advance(100);
    expect(markDead(checker, '10.0.0.11:6443', 'connection refused (conntrack)')).toBe(true);
    expect(changes).toStrictEqual([
      { backend: '10.0.0.11:6443', from: 'up', to: 'down', reason: 'connection refused (conntrack)', at: T0 + 2_100, healthy: false },
    ]);
    expect(checker.snapshot()[0]).toMatchObject({ state: 'down', healthy: false, reason: 'connection refused (conntrack)' });
    await clock.advance(1_000); // one pass (at 2505)
    expect(checker.snapshot()[0]?.state).toBe('down');
    await clock.advance(1_000); // the second
    expect(changes.slice(1).map((c) => [c.backend, c.to, c.at - T0])).toStrictEqual([['10.0.0.11:6443', 'up', 3_505]]);
  });

  it('from unknown and from down', async () => {
    const { clock, fake, checker, changes } = setup({ random: () => 0.5 });
    fake.set('10.0.0.12:6443', 'fail');
    checker.start();
    expect(markDead(checker, '10.0.0.11:6443', 'node n1 fell silent')).toBe(true);
    await clock.advance(2_000);
    expect(changes.map((c) => [c.backend, c.from, c.to, c.reason])).toStrictEqual([
      ['10.0.0.11:6443', 'unknown', 'down', 'node n1 fell silent'],
      ['10.0.0.11:6443', 'down', 'up', 'http 200'],
      ['10.0.0.12:6443', 'unknown', 'down', 'http 500'],
      ['[fd00::13]:6443', 'unknown', 'up', 'http 200'],
    ]);
    changes.length = 0;
    expect(markDead(checker, '10.0.0.12:6443', 'again')).toBe(true);
    expect(changes).toStrictEqual([]); // already down: no event, but the reason is updated
    expect(checker.snapshot()[1]?.reason).toBe('again');
  });

  it('drops the result of a check that was running when the backend was marked dead', async () => {
    const { clock, fake, checker, changes } = setup({ random: () => 0.5, backends: [B1], health: { rise: 1 } });
    fake.latencyMs = 200;
    checker.start();
    await clock.advance(700); // checks start at 500, 1500, 2500 and take 200 ms: up at 700
    await clock.advance(900); // the check started at 1500 runs until 1700
    expect(fake.running.get('10.0.0.11:6443')).toBe(1);
    markDead(checker, '10.0.0.11:6443', 'reset');
    await clock.advance(100); // the stale pass arrives at 1700 and must not bring it back
    expect(checker.snapshot()[0]).toMatchObject({ state: 'down', reason: 'reset' });
    await clock.advance(1_000); // the next check (2500..2700) does
    expect(changes.map((c) => [c.to, c.at - T0])).toStrictEqual([
      ['up', 700],
      ['down', 1_600],
      ['up', 2_700],
    ]);
  });

  it('accepts other spellings of an address and refuses unknown ones', () => {
    const { checker, changes } = setup();
    expect(markDead(checker, '[FD00:0::13]:6443', 'x')).toBe(true);
    expect(changes.map((c) => c.backend)).toStrictEqual(['[fd00::13]:6443']);
    expect(markDead(checker, '10.0.0.99:6443', 'x')).toBe(false);
    expect(checker.markDead({ host: 'garbage', port: 6443 }, PASSIVE, 'x')).toBe(false);
  });
});

describe('HealthChecker: setBackends and stop', () => {
  it('adds and removes backends without resetting the others', async () => {
    const { clock, fake, checker, changes } = setup({ random: () => 0.5 });
    checker.start();
    await clock.advance(2_000);
    const before = checker.snapshot();
    const B4 = { host: '10.0.0.14', port: 6443 };
    checker.setBackends([B4, B1, B3, B1]); // B2 removed, B4 added, B1 repeated
    expect(checker.snapshot().map((b) => [b.address, b.state])).toStrictEqual([
      ['10.0.0.14:6443', 'unknown'],
      ['10.0.0.11:6443', 'up'],
      ['[fd00::13]:6443', 'up'],
    ]);
    expect(checker.snapshot()[1]).toStrictEqual(before[0]);
    changes.length = 0;
    const callsBefore = fake.calls.length;
    await clock.advance(2_000);
    const after = fake.calls.slice(callsBefore);
    expect(after.filter((c) => c.address === '10.0.0.12:6443')).toStrictEqual([]);
    // the kept ones keep their schedule (500 + k × 1000); the new one starts at its own offset
    expect(after.filter((c) => c.address === '10.0.0.11:6443').map((c) => c.start - T0)).toStrictEqual([2_500, 3_500]);
    expect(after.filter((c) => c.address === '10.0.0.14:6443').map((c) => c.start - T0)).toStrictEqual([2_500, 3_500]);
    expect(changes).toStrictEqual([{ backend: '10.0.0.14:6443', from: 'unknown', to: 'up', reason: 'http 200', at: T0 + 3_505, healthy: true }]);
  });

  it('aborts the running check of a removed backend and reports nothing for it', async () => {
    const { clock, fake, checker, changes } = setup({ random: () => 0, backends: [B1], health: { rise: 1 } });
    fake.latencyMs = 500;
    checker.start();
    await clock.advance(100);
    const call = fake.calls[0];
    expect(call?.signal?.aborted).toBe(false);
    checker.setBackends([]);
    expect(call?.signal?.aborted).toBe(true);
    await clock.advance(5_000);
    expect(changes).toStrictEqual([]);
    expect(fake.calls).toHaveLength(1);
    // only the retention's timer is left (no check): it forgets the backend after REMEMBER_DEPARTED_MS
    expect(clock.pending).toBe(1);
    await clock.advance(REMEMBER_DEPARTED_MS);
    expect(clock.pending).toBe(0);
    expect(checker.departed()).toStrictEqual([]);
  });

  it('a backend listed 15 s of every 20 s keeps its state across the gaps and counts them; one gone past the retention starts over', async () => {
    const { clock, fake, checker } = setup({ random: () => 0.5, backends: [B1, B2] });
    fake.set('10.0.0.12:6443', { ok: false, cause: { kind: 'refused' }, error: 'ECONNREFUSED', latencyMs: 1 });
    checker.start();
    await clock.advance(3_000); // checks at 500, 1500: fall 2, down
    expect(checker.snapshot()[1]).toMatchObject({ address: '10.0.0.12:6443', state: 'down', left: 0, returned: 0 });
    const b2Rows = (l: readonly { address?: string; backend?: { host: string } }[]) =>
      l.filter((b) => b.address === '10.0.0.12:6443' || b.backend?.host === '10.0.0.12');
    for (let i = 1; i <= 3; i++) {
      checker.setBackends([B1]);
      // out: nothing is sent to it and nothing checks it, but it is remembered as it was
      expect(b2Rows(checker.snapshot())).toStrictEqual([]);
      expect(b2Rows(checker.verdicts())).toStrictEqual([]);
      expect(checker.departed()).toStrictEqual([
        expect.objectContaining({
          address: '10.0.0.12:6443',
          state: 'down',
          reason: 'ECONNREFUSED',
          left: i,
          returned: i - 1,
          leftAt: new Date(clock.now()).toISOString(),
          keptUntil: new Date(clock.now() + REMEMBER_DEPARTED_MS).toISOString(),
        }),
      ]);
      const calls = fake.calls.length;
      await clock.advance(5_000);
      expect(fake.calls.filter((c) => c.address === '10.0.0.12:6443').length).toBe(b2Rows(fake.calls.slice(0, calls)).length);
      checker.setBackends([B1, B2]);
      // back: down and dead at once (not unknown), checked again from its next offset
      expect(checker.snapshot()[1]).toMatchObject({ address: '10.0.0.12:6443', state: 'down', left: i, returned: i });
      expect(checker.verdicts()[1]).toMatchObject({ state: 'dead', message: 'ECONNREFUSED' });
      expect(checker.departed()).toStrictEqual([]);
      await clock.advance(15_000);
      expect(checker.snapshot()[1]).toMatchObject({ state: 'down', consecutive: expect.any(Number) });
    }
    checker.setBackends([B1]);
    await clock.advance(REMEMBER_DEPARTED_MS);
    expect(checker.departed()).toStrictEqual([]);
    checker.setBackends([B1, B2]);
    expect(checker.snapshot()[1]).toMatchObject({ address: '10.0.0.12:6443', state: 'unknown', left: 0, returned: 0 });
    // one that left up is remembered up, but comes back unknown: served again only after rise passes
    checker.setBackends([B2]);
    expect(checker.departed()).toStrictEqual([expect.objectContaining({ address: '10.0.0.11:6443', state: 'up', left: 1, returned: 0 })]);
    checker.setBackends([B2, B1]);
    expect(checker.snapshot()[1]).toMatchObject({ address: '10.0.0.11:6443', state: 'unknown', healthy: false, left: 1, returned: 1 });
    expect(checker.verdicts()[1]).toStrictEqual({ backend: expect.objectContaining({ host: '10.0.0.11' }), state: 'unknown' });
    await clock.advance(2_100);
    expect(checker.snapshot()[1]).toMatchObject({ state: 'up', healthy: true, left: 1, returned: 1 });
  });

  it('rememberDepartedMs: how long a backend that left is kept; a reconfigure re-times the kept ones from when each left; 0 forgets at once', async () => {
    const { clock, checker } = setup({ random: () => 0.5, backends: [B1, B2, B3], health: { rememberDepartedMs: 4000 } });
    checker.start();
    await clock.advance(3_000);
    const t0 = clock.now();
    checker.setBackends([B1, B3]);
    expect(checker.departed()).toStrictEqual([
      expect.objectContaining({ address: '10.0.0.12:6443', leftAt: new Date(t0).toISOString(), keptUntil: new Date(t0 + 4000).toISOString() }),
    ]);
    await clock.advance(3_999);
    expect(checker.departed().map((d) => d.address)).toStrictEqual(['10.0.0.12:6443']);
    await clock.advance(1);
    expect(checker.departed()).toStrictEqual([]);
    // two leave 1 s apart; a reload to 2.5 s forgets the first at once (left 3 s ago) and the second 1.5 s later
    checker.setBackends([B3]);
    await clock.advance(1_000);
    checker.setBackends([]);
    await clock.advance(2_000);
    checker.reconfigure({ ...HEALTH, rememberDepartedMs: 2500 });
    expect(checker.departed()).toStrictEqual([expect.objectContaining({ address: '[fd00::13]:6443', keptUntil: new Date(clock.now() + 500).toISOString() })]);
    await clock.advance(499);
    expect(checker.departed().map((d) => d.address)).toStrictEqual(['[fd00::13]:6443']);
    await clock.advance(1);
    expect(checker.departed()).toStrictEqual([]);
    // absent: the default; 0: nothing is kept
    checker.setBackends([B1]);
    checker.reconfigure(HEALTH);
    checker.setBackends([]);
    expect(checker.departed()).toStrictEqual([
      expect.objectContaining({ address: '10.0.0.11:6443', keptUntil: new Date(clock.now() + REMEMBER_DEPARTED_MS).toISOString() }),
    ]);
    checker.reconfigure({ ...HEALTH, rememberDepartedMs: 0 });
    expect(checker.departed()).toStrictEqual([]);
    checker.setBackends([B1]);
    checker.setBackends([]);
    expect(checker.departed()).toStrictEqual([]);
    expect(clock.pending).toBe(0);
    expect(() => checker.reconfigure({ ...HEALTH, rememberDepartedMs: -1 })).toThrow(/rememberDepartedMs must be a number of milliseconds >= 0, got -1/);
    expect(() => setup({ health: { rememberDepartedMs: Number.NaN } })).toThrow(RangeError);
  });

  it('refuses a host that is not an IP address and leaves the set unchanged', () => {
    const { checker } = setup();
    expect(() => checker.setBackends([B1, { host: 'cp1.example', port: 6443 }])).toThrow(
      new TypeError('backend host must be an IP address, got "cp1.example"'),
    );
    expect(checker.snapshot()).toHaveLength(3);
  });

  it('stop() cancels every timer, aborts running checks and emits nothing more', async () => {
    const { clock, fake, checker, changes } = setup({ random: () => 0 });
    fake.latencyMs = 300;
    checker.start();
    await clock.advance(100);
    expect([...fake.running.values()]).toStrictEqual([1, 1, 1]);
    const stopped = checker.stop();
    await clock.advance(0);
    await stopped;
    expect(fake.calls.every((c) => c.signal?.aborted === true)).toBe(true);
    expect(clock.pending).toBe(0);
    await clock.advance(10_000);
    expect(fake.calls).toHaveLength(3);
    expect(changes).toStrictEqual([]);
    expect(markDead(checker, '10.0.0.11:6443', 'x')).toBe(false);
    checker.start(); // no-op after stop
    await clock.advance(10_000);
    expect(fake.calls).toHaveLength(3);
    await checker.stop(); // idempotent
  });
});

describe('HealthChecker: options', () => {
  it('warns once when insecureSkipVerify is on, and not otherwise', () => {
    const on = setup({ health: { insecureSkipVerify: true } });
    on.checker.start();
    on.checker.start();
    expect(on.warnings).toHaveLength(1);
    expect(on.warnings[0]?.[0]).toMatchObject({ setting: 'apiserver.health.insecureSkipVerify' });
    expect(on.warnings[0]?.[1]).toMatch(/do not verify certificates/);
    const off = setup();
    off.checker.start();
    expect(off.warnings).toHaveLength(0);
    void on.checker.stop();
    void off.checker.stop();
  });

  it('refuses invalid settings', () => {
    const make = (health: Partial<CheckerSettings>) => () =>
      new HealthChecker({ health: { ...HEALTH, ...health }, probe: async () => ({ ok: true, cause: { kind: 'http', status: 200 }, latencyMs: 0 }) });
    expect(make({ intervalMs: 0 })).toThrow(new RangeError('intervalMs must be a positive number of milliseconds, got 0'));
    expect(make({ rise: 0 })).toThrow(new RangeError('rise must be an integer >= 1, got 0'));
    expect(make({ fall: 2.5 })).toThrow(new RangeError('fall must be an integer >= 1, got 2.5'));
  });
});

describe('HealthChecker: verdicts', () => {
  const fail = (cause: ProbeResult['cause'], error: string): ProbeResult => ({ ok: false, cause, error, latencyMs: 1 });
  const states = (vs: readonly Verdict[]): string[] => vs.map((v) => `${formatAddress(v.backend)} ${v.state} ${v.cause.kind} ${v.message}`);

  it('one verdict per state change, with the cause the probe gave; none before the first judgement', async () => {
    const { clock, fake, checker, verdicts } = setup({ random: () => 0.5, backends: [B1, B2] });
    fake.set('10.0.0.12:6443', fail({ kind: 'refused' }, 'ECONNREFUSED'));
    checker.start();
    await clock.advance(1_000);
    // one check each: not judged yet
    expect(verdicts).toStrictEqual([]);
    expect(checker.verdicts()).toStrictEqual([
      { backend: { host: '10.0.0.11', port: 6443, family: 4 }, state: 'unknown' },
      { backend: { host: '10.0.0.12', port: 6443, family: 4 }, state: 'unknown' },
    ]);
    await clock.advance(1_000);
    expect(states(verdicts)).toStrictEqual(['10.0.0.11:6443 up http http 200', '10.0.0.12:6443 dead refused ECONNREFUSED']);
    // more of the same: no new verdict
    await clock.advance(3_000);
    expect(verdicts).toHaveLength(2);
    expect(checker.verdicts().map((v) => v.state)).toStrictEqual(['up', 'dead']);
  });

  it('a draining backend whose failure turns from an answer to a refusal becomes dead, without a state change', async () => {
    const { clock, fake, checker, verdicts, changes } = setup({ random: () => 0.5, backends: [B1] });
    fake.set('10.0.0.11:6443', 'fail');
    checker.start();
    await clock.advance(2_000);
    expect(states(verdicts)).toStrictEqual(['10.0.0.11:6443 unready http http 500']);
    fake.set('10.0.0.11:6443', fail({ kind: 'timeout' }, 'timeout'));
    await clock.advance(1_000);
    expect(states(verdicts).slice(1)).toStrictEqual(['10.0.0.11:6443 dead timeout timeout']);
    expect(changes.map((c) => c.to)).toStrictEqual(['down']);
  });

  it('markDead on a draining backend: a dead verdict with the given cause', async () => {
    const { clock, fake, checker, verdicts } = setup({ random: () => 0.5, backends: [B1] });
    fake.set('10.0.0.11:6443', 'fail');
    checker.start();
    await clock.advance(2_000);
    expect(checker.markDead(parseHostPort('10.0.0.11:6443'), { kind: 'nodeDown', node: '10.0.0.11' }, 'node down (VRRP Master_Down)')).toBe(true);
    expect(verdicts.at(-1)).toStrictEqual({
      backend: { host: '10.0.0.11', port: 6443, family: 4 },
      state: 'dead',
      cause: { kind: 'nodeDown', node: '10.0.0.11' },
      message: 'node down (VRRP Master_Down)',
    });
    expect(checker.snapshot()[0]).toMatchObject({ state: 'down', reason: 'node down (VRRP Master_Down)' });
  });

  // the reconnect storm bench: a live backend with a full accept queue drops the check's SYN while
  // the holder's conntrack sees it answer the clients' SYNs; judged dead, its watches were reset
  it('a connect timeout while passive detection saw the backend answer SYNs since the check started is slow (unready), else dead', async () => {
    const { clock, fake, checker, verdicts } = setup({ random: () => 0.5, backends: [B1] });
    checker.start();
    await clock.advance(2_000); // checks at 500 and 1500 pass: up
    expect(states(verdicts)).toStrictEqual(['10.0.0.11:6443 up http http 200']);
    fake.latencyMs = 400;
    fake.set('10.0.0.11:6443', fail({ kind: 'timeout' }, 'timeout'));
    // checks at 2500-2900 and 3500-3900; an answer seen in the middle of each
    await clock.advance(700);
    checker.noteAnswered(parseHostPort('10.0.0.11:6443'));
    await clock.advance(1_000);
    checker.noteAnswered({ host: '10.0.0.11', port: 6443 });
    await clock.advance(300);
    expect(states(verdicts).slice(1)).toStrictEqual([
      '10.0.0.11:6443 unready slow timeout (no SYN-ACK, but it answered other connections meanwhile: a full accept queue)',
    ]);
    // the check at 4500: the last answer (3700) came before it started: silent, dead
    await clock.advance(1_000);
    expect(states(verdicts).slice(2)).toStrictEqual(['10.0.0.11:6443 dead timeout timeout']);
    // other failures and unknown backends are left alone
    expect(answeredMeanwhile(fail({ kind: 'refused' }, 'ECONNREFUSED'), 10, 5).cause).toStrictEqual({ kind: 'refused' });
    expect(answeredMeanwhile(fail({ kind: 'timeout' }, 'timeout'), null, 5).cause).toStrictEqual({ kind: 'timeout' });
    expect(answeredMeanwhile(fail({ kind: 'timeout' }, 'timeout'), 5, 5).cause).toStrictEqual({ kind: 'slow' });
    expect(() => checker.noteAnswered({ host: '10.0.0.99', port: 6443 })).not.toThrow();
  });

  // the text is for people: a probe result whose message looks like the other kind changes nothing
  it('the verdict follows the cause kind, never the message', async () => {
    const { clock, fake, checker } = setup({ random: () => 0.5, backends: [B1, B2] });
    fake.set('10.0.0.11:6443', fail({ kind: 'refused' }, 'http 500'));
    fake.set('10.0.0.12:6443', fail({ kind: 'http', status: 500 }, 'ECONNREFUSED'));
    checker.start();
    await clock.advance(2_000);
    expect(checker.verdicts().map((v) => v.state)).toStrictEqual(['dead', 'unready']);
  });

  it('snapshot and backends by family', () => {
    const { checker } = setup();
    expect(checker.snapshot({ family: 6 }).map((b) => b.address)).toStrictEqual(['[fd00::13]:6443']);
    expect(checker.backends({ family: 4 }).map((b) => formatAddress(b))).toStrictEqual(['10.0.0.11:6443', '10.0.0.12:6443']);
  });
});

describe('HealthChecker: reconfigure (a reload)', () => {
  it('keeps every backend state and emits nothing; the new interval and rise apply to the next checks', async () => {
    const { clock, fake, checker, changes, verdicts } = setup({ random: () => 0.5 });
    fake.set('10.0.0.12:6443', 'fail');
    checker.start();
    await clock.advance(3_000);
    const before = checker.snapshot().map((b) => [b.address, b.state]);
    expect(before).toStrictEqual([
      ['10.0.0.11:6443', 'up'],
      ['10.0.0.12:6443', 'down'],
      ['[fd00::13]:6443', 'up'],
    ]);
    const nChanges = changes.length;
    const nVerdicts = verdicts.length;
    const at = clock.t - T0;
    checker.reconfigure({ ...HEALTH, intervalMs: 200, rise: 3 });
    expect(checker.snapshot().map((b) => [b.address, b.state])).toStrictEqual(before);
    expect(changes).toHaveLength(nChanges);
    expect(verdicts).toHaveLength(nVerdicts);
    // rescheduled within the new interval, then every 200 ms ±10%
    await clock.advance(1_000);
    const starts = fake.startsOf('10.0.0.11:6443').filter((s) => s >= at);
    expect(starts[0]! - at).toBeLessThan(200);
    const gaps = starts.slice(1).map((s, i) => s - starts[i]!);
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(180);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(220);
    // rise 3: the failing backend needs three passes now, not two
    fake.set('10.0.0.12:6443', 'pass');
    const from = fake.startsOf('10.0.0.12:6443').length;
    await clock.advance(1_000);
    const ups = changes.slice(nChanges).filter((c) => c.backend === '10.0.0.12:6443' && c.to === 'up');
    expect(ups).toHaveLength(1);
    const passesBeforeUp = fake.calls
      .filter((c) => c.address === '10.0.0.12:6443')
      .slice(from)
      .filter((c) => c.end !== undefined && c.end <= ups[0]!.at).length;
    expect(passesBeforeUp).toBe(3);
  });

  it('refuses invalid settings and keeps the old ones', () => {
    const { checker } = setup();
    expect(() => checker.reconfigure({ ...HEALTH, intervalMs: 0 })).toThrow(RangeError);
    expect(() => checker.reconfigure({ ...HEALTH, rise: 0 })).toThrow(RangeError);
  });
});
