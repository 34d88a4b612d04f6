/**
 * The chaos soak's schedule generator (lab/soak/schedule.ts): deterministic per seed, and every
 * schedule keeps its guarantees (distinct targets per group, recovery before the next group and
 * before the end, durations and targets by kind); the bounds are the protocol's numbers.
 */
import { describe, expect, it } from 'vitest';
import {
  boundOf,
  clockOffset,
  CLOCK_BASE_MIN,
  DEFAULT_TIMING,
  derived,
  FAULT_KINDS,
  faultWindows,
  GROUP_SPREAD_MS,
  KIND_SPECS,
  makeSchedule,
  recoverMs,
  WARMUP_MS,
  type PlannedFault,
} from '../../lab/soak/schedule.js';
import { HEAL_ANNOUNCE_MIN_INTERVAL_MS, masterDownIntervalMs, skewTimeMs } from '../../src/vrrp/state.js';

const cp = ['n1', 'n2', 'n3'];
const opts = (seed: number, minutes = 10) => ({ seed, durationMs: minutes * 60_000, controlPlane: cp, worker: 'n4', timing: DEFAULT_TIMING });

function groups(s: PlannedFault[]): PlannedFault[][] {
  const m = new Map<number, PlannedFault[]>();
  for (const f of s) m.set(f.group, [...(m.get(f.group) ?? []), f]);
  return [...m.values()];
}

describe('soak schedule', () => {
  it('is deterministic: the same seed gives the same schedule, another seed another one', () => {
    expect(makeSchedule(opts(42))).toStrictEqual(makeSchedule(opts(42)));
    expect(makeSchedule(opts(43))).not.toStrictEqual(makeSchedule(opts(42)));
  });

  it('keeps its guarantees over many seeds', () => {
    const problems: string[] = [];
    const check = (ok: boolean, what: string): void => void (ok || problems.push(what));
    for (let seed = 0; seed < 40; seed++) {
      const s = makeSchedule({ ...opts(seed), maxConcurrent: 3 });
      check(s.length > 20, `seed ${seed}: only ${s.length} faults`);
      check(
        s.every((f, i) => f.id === i + 1),
        `seed ${seed}: ids`,
      );
      check(s[0]!.atMs === WARMUP_MS, `seed ${seed}: first at ${s[0]!.atMs}`);
      const gs = groups(s);
      for (const [i, g] of gs.entries()) {
        const at = `seed ${seed} group ${g[0]!.group}`;
        check(g.length >= 1 && g.length <= 3, `${at}: ${g.length} faults`);
        check(new Set(g.map((f) => f.target)).size === g.length, `${at}: a target twice`);
        const start = Math.min(...g.map((f) => f.atMs));
        for (const f of g) {
          const spec = KIND_SPECS[f.kind];
          check(f.atMs - start <= GROUP_SPREAD_MS, `${at}: #${f.id} starts ${f.atMs - start} ms late`);
          if (f.kind === 'main-stall') check(f.durationMs === DEFAULT_TIMING.stallMs, `${at}: stall ${f.durationMs}`);
          else check(f.durationMs >= spec.durationMs[0] && f.durationMs <= spec.durationMs[1], `${at}: #${f.id} ${f.kind} lasts ${f.durationMs}`);
          const targets = spec.targets === 'cp' ? cp : spec.targets === 'lan' ? ['lan'] : [...cp, 'n4'];
          check(targets.includes(f.target), `${at}: #${f.id} ${f.kind} on ${f.target}`);
        }
        const recovered = Math.max(...g.map((f) => f.atMs + f.durationMs + recoverMs(f.kind, DEFAULT_TIMING)));
        check(recovered + 2000 <= 10 * 60_000, `${at}: recovers at ${recovered}`);
        const next = gs[i + 1];
        if (next) check(Math.min(...next.map((f) => f.atMs)) >= recovered + 2000, `${at}: the next group starts before recovery + 2 s`);
      }
    }
    expect(problems).toStrictEqual([]);
  });

  it('draws every kind within the first |kinds| faults (a bag), so a 10-minute run has each', () => {
    const s = makeSchedule({ ...opts(7), maxConcurrent: 1 });
    expect(new Set(s.slice(0, FAULT_KINDS.length).map((f) => f.kind)).size).toBe(FAULT_KINDS.length);
  });

  it('a schedule too short for one group is empty; bad options are refused', () => {
    expect(makeSchedule({ ...opts(1), durationMs: 5000 })).toStrictEqual([]);
    expect(() => makeSchedule({ ...opts(1), maxConcurrent: 0 })).toThrow(RangeError);
    expect(() => makeSchedule({ ...opts(1), kinds: [] })).toThrow(RangeError);
    expect(makeSchedule({ ...opts(1, 2), kinds: ['nft-flush'] }).every((f) => f.kind === 'nft-flush' && cp.includes(f.target))).toBe(true);
  });

  it('bounds are the protocol numbers: MDI of the lowest priority, Skew_Time of the best Backup, fall × interval + interval + timeout', () => {
    const d = derived(DEFAULT_TIMING);
    expect(d.mdi).toBe(Math.ceil(masterDownIntervalMs(50, 10)));
    expect(d.mdi).toBe(381);
    expect(d.skew).toBe(Math.ceil(skewTimeMs(100, 10)));
    expect(d.detect).toBe(2 * 500 + 500 + 500);
    expect(d.back).toBe(3 * 500 + 500);
    const M = DEFAULT_TIMING.marginMs;
    expect(boundOf('agent-sigkill', false, DEFAULT_TIMING).vip).toStrictEqual({ start: d.mdi + M, heal: DEFAULT_TIMING.startupMs + d.mdi + M });
    expect(boundOf('agent-sigterm', false, DEFAULT_TIMING).vip.start).toBe(d.skew + M);
    expect(boundOf('apiserver-stop', false, DEFAULT_TIMING).name).toBe(`D + M = ${d.detect + M} ms`);
    expect(boundOf('clock-step', false, DEFAULT_TIMING)).toMatchObject({ ms: 0, vip: {}, local: {} });
    // after a healed partition the winner's last claim comes at most A + H after the heal
    expect(boundOf('vrrp-blocked', false, DEFAULT_TIMING).vip).toStrictEqual({
      start: d.mdi + M,
      heal: Math.max(d.mdi, DEFAULT_TIMING.advertIntervalMs + HEAL_ANNOUNCE_MIN_INTERVAL_MS) + M,
    });
    expect(boundOf('vrrp-blocked', false, DEFAULT_TIMING).vip.heal).toBe(1600);
    // a worker's faults never excuse VIP failures; a control-plane agent's never excuse local ones
    expect(boundOf('agent-sigkill', true, DEFAULT_TIMING).vip).toStrictEqual({});
    expect(boundOf('agent-sigkill', false, DEFAULT_TIMING).local).toStrictEqual({});
  });

  it("clock steps are offsets from a base ahead of the machine, so a step back stays inside the certificates' validity", () => {
    expect([clockOffset('+0m'), clockOffset('-1h'), clockOffset('+10m'), clockOffset('-10m')]).toStrictEqual([
      `+${CLOCK_BASE_MIN}m`,
      `+${CLOCK_BASE_MIN - 60}m`,
      `+${CLOCK_BASE_MIN + 10}m`,
      `+${CLOCK_BASE_MIN - 10}m`,
    ]);
    expect(() => clockOffset('+1d')).toThrow(RangeError);
    for (const f of makeSchedule({ ...opts(3), kinds: ['clock-step'] })) expect(() => clockOffset(f.param)).not.toThrow();
  });

  it('windows start a request timeout before the edge and end at the bound after it', () => {
    const T = DEFAULT_TIMING.requestTimeoutMs;
    const { mdi } = derived(DEFAULT_TIMING);
    const M = DEFAULT_TIMING.marginMs;
    const S = DEFAULT_TIMING.startupMs;
    expect(faultWindows({ kind: 'agent-sigkill', target: 'n1', startMs: 10_000, healMs: 13_000 }, false, DEFAULT_TIMING)).toStrictEqual({
      vip: [
        [10_000 - T, 10_000 + mdi + M],
        [13_000 - T, 13_000 + S + mdi + M],
      ],
      local: [],
    });
    const loss = faultWindows({ kind: 'packet-loss', target: 'n4', startMs: 1000, healMs: 4000 }, true, DEFAULT_TIMING);
    expect(loss.vip).toStrictEqual([]);
    expect(loss.local).toHaveLength(1);
    expect(loss.local[0]![0]).toBe(1000 - T);
  });
});
