/**
 * The chaos soak's invariant checker (lab/soak/invariants.ts) on synthetic timelines: a healthy
 * run gives nothing; each planted violation gives exactly that violation, with its time and the
 * faults active then.
 */
import { describe, expect, it } from 'vitest';
import { checkInvariants, outages, summarizeKinds, RESOURCE_BAND, type ClusterSample, type InjectedFault, type Timeline } from '../../lab/soak/invariants.js';
import { boundOf, DEFAULT_TIMING, derived } from '../../lab/soak/schedule.js';
import { digest } from '../../lab/soak/sampler.js';

const healthyAgents = (): ClusterSample['agents'] => ({
  n1: { up: true, state: 'master', backendsUp: 3, backendsTotal: 3, table: true },
  n2: { up: true, state: 'backup', backendsUp: 3, backendsTotal: 3, table: true },
  n3: { up: true, state: 'backup', backendsUp: 3, backendsTotal: 3, table: true },
  n4: { up: true, state: 'none', local: 3 },
});

/** 60 s of healthy samples every 100 ms, one SIGKILL of the holder n1 at 10 s healed at 13 s. */
function timeline(): Timeline {
  const samples: ClusterSample[] = [];
  for (let t = 0; t <= 60_000; t += 100) samples.push({ t, holders: ['n1'], agents: healthyAgents() });
  const kill: InjectedFault = {
    id: 1,
    group: 1,
    kind: 'agent-sigkill',
    target: 'n1',
    atMs: 10_000,
    durationMs: 3000,
    startMs: 10_000,
    healMs: 13_000,
    note: 'holder',
  };
  // during the fault: n2 takes over, n1 keeps the stale VIP, n1's agent does not answer
  for (const s of samples) {
    if (s.t >= 10_000 && s.t < 13_500) {
      s.holders = s.t < 10_400 ? ['n1'] : ['n1', 'n2'];
      s.agents.n1 = { up: false };
    }
  }
  return {
    timing: DEFAULT_TIMING,
    controlPlane: ['n1', 'n2', 'n3'],
    worker: 'n4',
    expectedHolder: 'n1',
    backends: 3,
    endMs: 60_000,
    faults: [kill],
    samples,
    // the takeover: failures for 350 ms after the kill
    vipFailures: Array.from({ length: 35 }, (_, i) => ({ t: 10_000 + i * 10, ms: 500, error: 'timeout' })),
    localFailures: [],
    watchEvents: [{ t: 10_600, kind: 'drop', error: 'ECONNRESET', conn: 7 }],
    resources: [10_000, 20_000, 30_000, 40_000].map((t) => ({ t, node: 'n2', pid: 100, fds: 30, rssKiB: 60_000, ageMs: t + 5000 })),
    leaks: [],
  };
}

describe('soak invariants', () => {
  it("a run whose failures all fall inside the fault's bound has no violation", () => {
    expect(checkInvariants(timeline())).toStrictEqual([]);
  });

  it('(b) one VIP failure outside every bound is exactly one violation, at its time, with no fault active', () => {
    const tl = timeline();
    tl.vipFailures.push({ t: 40_000, ms: 12, error: 'ECONNREFUSED' }, { t: 40_010, ms: 11, error: 'ECONNREFUSED' });
    expect(checkInvariants(tl)).toStrictEqual([
      { invariant: 'b', t: 40_000, untilMs: 40_021, what: "VIP request failed (ECONNREFUSED) outside every fault's bound", active: [], count: 2 },
    ]);
  });

  it('(b) a failure after the bound of the kill (MDI + M) but before the heal is a violation with the kill active', () => {
    const tl = timeline();
    const late = 10_000 + derived(DEFAULT_TIMING).mdi + DEFAULT_TIMING.marginMs + 100;
    tl.vipFailures.push({ t: late, ms: 500, error: 'timeout' });
    const v = checkInvariants(tl);
    expect(v).toHaveLength(1);
    expect(v[0]).toMatchObject({ invariant: 'b', t: late, active: [1] });
  });

  it("(b) a control-plane fault while the worker's agent is down excuses local failures until that agent is back (heal + S) and has judged the backend dead (D + M)", () => {
    const tl = timeline();
    const { detect } = derived(DEFAULT_TIMING);
    const linkDown: InjectedFault = {
      id: 2,
      group: 2,
      kind: 'link-down',
      target: 'n2',
      atMs: 40_000,
      durationMs: 4000,
      startMs: 40_000,
      healMs: 44_000,
      note: '',
    };
    const workerStop: InjectedFault = {
      id: 3,
      group: 2,
      kind: 'agent-sigterm',
      target: 'n4',
      atMs: 41_000,
      durationMs: 3000,
      startMs: 41_000,
      healMs: 44_000,
      note: '',
    };
    const late = 44_000 + DEFAULT_TIMING.startupMs + detect; // past link-down's own local bound (start + D + M)
    expect(late).toBeGreaterThan(40_000 + detect + DEFAULT_TIMING.marginMs);
    tl.localFailures.push({ t: late, ms: 1000, error: 'timeout' });
    tl.faults.push(linkDown);
    const alone = checkInvariants(tl).filter((v) => v.invariant === 'b');
    expect(alone).toHaveLength(1);
    tl.faults.push(workerStop);
    expect(checkInvariants(tl).filter((v) => v.invariant === 'b')).toStrictEqual([]);
    // past heal + S + D + M it is a violation again
    tl.localFailures.push({ t: 44_000 + DEFAULT_TIMING.startupMs + detect + DEFAULT_TIMING.marginMs + 100, ms: 1000, error: 'timeout' });
    expect(checkInvariants(tl).filter((v) => v.invariant === 'b')).toHaveLength(1);
  });

  it('(a) two holders after the convergence window is one violation; during the fault it is excused', () => {
    const tl = timeline();
    const end = 13_000 + boundOf('agent-sigkill', false, DEFAULT_TIMING).recoverMs;
    expect(end).toBeLessThan(30_000);
    for (const s of tl.samples) if (s.t >= 30_000 && s.t <= 30_400) s.holders = ['n1', 'n3'];
    // inside the convergence window two holders are excused
    for (const s of tl.samples) if (s.t > 13_000 && s.t < end) s.holders = ['n1', 'n2'];
    const v = checkInvariants(tl);
    expect(v.map((x) => x.invariant)).toStrictEqual(['a', 'c']);
    expect(v[0]).toMatchObject({ invariant: 'a', t: 30_000, untilMs: 30_400, count: 5, active: [] });
    expect(v[1]!.what).toMatch(/VIP held by \[n1, n3\]/);
  });

  it('(c) a backend still down after the recovery bound, a missing table, a bad reload accepted', () => {
    const tl = timeline();
    for (const s of tl.samples) if (s.t >= 30_000 && s.t < 31_000) s.agents.n2 = { ...s.agents.n2!, backendsUp: 2 };
    for (const s of tl.samples) if (s.t === 45_000) s.agents.n3 = { ...s.agents.n3!, table: false };
    tl.faults.push({
      id: 2,
      group: 2,
      kind: 'reload-bad',
      target: 'n3',
      atMs: 50_000,
      durationMs: 500,
      startMs: 50_000,
      healMs: 50_500,
      failed: 'an invalid config: ballast reload exited 0, not 2',
    });
    const v = checkInvariants(tl);
    expect(v.map((x) => [x.invariant, x.t, x.count])).toStrictEqual([
      ['c', 30_000, 10],
      ['c', 45_000, 1],
      ['c', 50_000, 1],
    ]);
    expect(v[0]!.what).toBe('not back after the faults healed: n2: 2/3 backends up');
    expect(v[1]!.what).toBe('not back after the faults healed: n3: table ip ballast missing');
    expect(v[2]!.active).toStrictEqual([2]);
  });

  it("(c) the worker's local endpoint: a backend held out by flap damping is not missing; one simply absent is", () => {
    const tl = timeline();
    for (const s of tl.samples) if (s.t >= 30_000 && s.t < 31_000) s.agents.n4 = { up: true, state: 'none', local: 2, damped: 1 };
    for (const s of tl.samples) if (s.t >= 40_000 && s.t < 40_500) s.agents.n4 = { up: true, state: 'none', local: 2, damped: 0 };
    const v = checkInvariants(tl);
    expect(v.map((x) => [x.invariant, x.t, x.count, x.what])).toStrictEqual([
      ['c', 40_000, 5, 'not back after the faults healed: n4: local endpoint has 2/3 backends'],
    ]);
  });

  it('(d) fds above the band and a leak finding; the baseline is the first sample old enough', () => {
    const tl = timeline();
    tl.resources.push({ t: 50_000, node: 'n2', pid: 100, fds: 30 + RESOURCE_BAND.fds + 1, rssKiB: 60_000, ageMs: 55_000 });
    // a young process's samples are no baseline: a restarted agent starts its own
    tl.resources.push(
      { t: 14_000, node: 'n1', pid: 200, fds: 10, rssKiB: 10_000, ageMs: 1000 },
      { t: 30_000, node: 'n1', pid: 200, fds: 40, rssKiB: 70_000, ageMs: 17_000 },
    );
    tl.leaks.push({ t: 55_000, node: 'n3', what: 'table inet bsoak_loss' });
    const v = checkInvariants(tl);
    expect(v.map((x) => [x.invariant, x.t, x.what])).toStrictEqual([
      ['d', 50_000, `n2 agent (pid 100): ${30 + RESOURCE_BAND.fds + 1} fds, baseline 30 + ${RESOURCE_BAND.fds}`],
      ['d', 55_000, 'leak on n3: table inet bsoak_loss'],
    ]);
  });

  it('a watch drop long after every window is a violation; one within the watch interval of the window is not', () => {
    const tl = timeline();
    const kill = tl.faults[0]!;
    const w = boundOf('agent-sigkill', false, DEFAULT_TIMING);
    const edge = kill.healMs + w.vip.heal!;
    tl.watchEvents.push({ t: edge + DEFAULT_TIMING.watchIntervalMs, kind: 'drop', error: 'ECONNRESET', conn: 1 });
    expect(checkInvariants(tl)).toStrictEqual([]);
    tl.watchEvents.push({ t: 45_000, kind: 'connect-failed', error: 'ECONNREFUSED', conn: 2 });
    expect(checkInvariants(tl).map((x) => [x.invariant, x.t])).toStrictEqual([['b', 45_000]]);
  });

  it('outages group failures and the kind summary names the bound', () => {
    const tl = timeline();
    expect(outages(tl.vipFailures)).toStrictEqual([{ from: 10_000, to: 10_840, ms: 840, failed: 35 }]);
    expect(summarizeKinds(tl)).toStrictEqual([
      {
        kind: 'agent-sigkill',
        injected: 1,
        longestVipOutageMs: 840,
        longestLocalOutageMs: 0,
        boundMs: boundOf('agent-sigkill', false, DEFAULT_TIMING).ms,
        bound: boundOf('agent-sigkill', false, DEFAULT_TIMING).name,
      },
    ]);
  });
});

describe('soak sampler digest', () => {
  it("a damped backend still in the local endpoint's map is not counted as held out; one missing from it is", () => {
    const backends = [
      { address: '10.0.0.1:6443', state: 'up', dampedUntil: '2026-12-01T00:00:30.000Z' },
      { address: '10.0.0.2:6443', state: 'up', dampedUntil: null },
      { address: '10.0.0.3:6443', state: 'down', dampedUntil: '2026-12-01T00:00:30.000Z' },
    ];
    const d = digest({ state: 'none', backends, local: { mode: 'ebpf', backends: ['10.0.0.1:6443', '10.0.0.2:6443'] } });
    expect(d).toMatchObject({ local: 2, damped: 1 });
  });
});
