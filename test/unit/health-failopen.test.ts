/**
 * The served-set decision (src/health/failopen.ts) and flap damping (src/health/damping.ts):
 * pure, so examples with exact results and fast-check properties over random histories.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decidePool, failOpenWindowMs, initialPool, type PoolMember, type PoolOptions, type PoolState } from '../../src/health/failopen.js';
import {
  checkDampingOptions,
  expireHold,
  holdFor,
  initialDamp,
  isDamped,
  noteTransition,
  type DampingOptions,
  type DampState,
} from '../../src/health/damping.js';
import { FUZZ_TIMEOUT_MS, fuzzParameters } from '../support/fuzz.js';

const W = 500;
const ON: PoolOptions = { failOpen: true, windowMs: W, mayStart: true };
type S = PoolMember['state'];
const A = '10.0.0.1:6443';
const B = '10.0.0.2:6443';
const C = '10.0.0.3:6443';

/** Members A, B, C (in that order) with these states; `damped` lists the damped ones. */
const members = (states: [S, S, S], damped: string[] = []): PoolMember[] =>
  [A, B, C].map((key, i) => ({ key, state: states[i]!, damped: damped.includes(key) }));

/** Runs decisions in order from the initial state: [time, states, damped?, options?]. @returns every decision. */
function run(steps: [number, [S, S, S], string[]?, Partial<PoolOptions>?][]) {
  let st: PoolState = initialPool();
  return steps.map(([at, states, damped, o]) => {
    const d = decidePool(st, members(states, damped ?? []), at, { ...ON, ...o });
    st = d.state;
    return d;
  });
}

describe('decidePool: fail open', () => {
  it('serves exactly the backends that are up', () => {
    const [d] = run([[0, ['up', 'unready', 'up']]]);
    expect(d!.state).toMatchObject({ active: false, served: [A, C], kept: [] });
    expect([d!.started, d!.ended]).toStrictEqual([false, null]);
  });

  it('every backend turning unready within the window: all kept, and it starts once', () => {
    const ds = run([
      [0, ['up', 'up', 'up']],
      [100, ['unready', 'up', 'up']],
      [300, ['unready', 'unready', 'up']],
      [550, ['unready', 'unready', 'unready']],
      [600, ['unready', 'unready', 'unready']],
    ]);
    expect(ds.map((d) => d.state.served)).toStrictEqual([[A, B, C], [B, C], [C], [A, B, C], [A, B, C]]);
    expect(ds.map((d) => d.started)).toStrictEqual([false, false, false, true, false]);
    expect(ds[3]!.state).toMatchObject({ active: true, since: 550, kept: [A, B, C] });
    expect(ds[4]!.state.since).toBe(550);
  });

  it('a backend that left more than the window before the set emptied is not kept', () => {
    const ds = run([
      [0, ['up', 'up', 'up']],
      [100, ['unready', 'up', 'up']],
      [601, ['unready', 'unready', 'unready']],
    ]);
    expect(ds[2]!.state).toMatchObject({ active: true, kept: [B, C], served: [B, C] });
  });

  it('one backend alone fails open too (a pool shrunk to one, or a single backend)', () => {
    const ds = run([
      [0, ['up', 'dead', 'unready']],
      [5_000, ['unready', 'dead', 'unready']],
    ]);
    expect(ds[1]!.state).toMatchObject({ active: true, kept: [A], served: [A] });
  });

  it('dead backends are never kept; when every one died there is nothing to keep', () => {
    const ds = run([
      [0, ['up', 'up', 'up']],
      [100, ['dead', 'unready', 'dead']],
    ]);
    expect(ds[1]!.state).toMatchObject({ active: true, kept: [B], served: [B] });
    const dead = run([
      [0, ['up', 'up', 'up']],
      [100, ['dead', 'dead', 'dead']],
    ]);
    expect(dead[1]!.state).toMatchObject({ active: false, served: [] });
    expect(dead[1]!.started).toBe(false);
  });

  it('a kept backend that dies leaves; when the last kept one dies, it ends (gone)', () => {
    const ds = run([
      [0, ['up', 'up', 'up']],
      [100, ['unready', 'unready', 'unready']],
      [2_000, ['unready', 'unready', 'dead']],
      [3_000, ['dead', 'dead', 'dead']],
    ]);
    expect(ds.map((d) => d.state.served)).toStrictEqual([[A, B, C], [A, B, C], [A, B], []]);
    expect(ds[3]!.ended).toBe('gone');
    expect(ds[3]!.state.active).toBe(false);
  });

  it('one passing again ends it: only that one is served, the unready ones leave', () => {
    const ds = run([
      [0, ['up', 'up', 'up']],
      [100, ['unready', 'unready', 'unready']],
      [8_000, ['unready', 'up', 'unready']],
    ]);
    expect(ds[2]!).toMatchObject({ ended: 'passed', state: { active: false, since: null, kept: [], served: [B] } });
  });

  it('a backend that was never served is never kept: one that joined unready, or a start with all unready', () => {
    const ds = run([
      [0, ['up', 'up', 'unknown']],
      [100, ['unready', 'unready', 'unknown']],
      [200, ['unready', 'unready', 'unready']],
    ]);
    expect(ds[2]!.state).toMatchObject({ active: true, kept: [A, B], served: [A, B] });
    const start = run([
      [0, ['unknown', 'unknown', 'unknown']],
      [100, ['unready', 'unready', 'unready']],
    ]);
    expect(start[1]!.state).toMatchObject({ active: false, served: [] });
  });

  it('a backend that joins and comes up ends it', () => {
    const ds = run([
      [0, ['up', 'up', 'unknown']],
      [100, ['unready', 'unready', 'unknown']],
      [900, ['unready', 'unready', 'up']],
    ]);
    expect(ds[2]).toMatchObject({ ended: 'passed', state: { served: [C] } });
  });

  it('only a verdict change starts it (mayStart); a running one goes on without', () => {
    const ds = run([
      [0, ['up', 'up', 'up']],
      [100, ['unready', 'unready', 'unready'], [], { mayStart: false }],
      [200, ['unready', 'unready', 'unready'], [], { mayStart: true }],
      [300, ['unready', 'unready', 'unready'], [], { mayStart: false }],
    ]);
    expect(ds.map((d) => d.state.active)).toStrictEqual([false, false, true, true]);
  });

  it('off: never starts; turned off while on: it ends (disabled)', () => {
    const off = run([
      [0, ['up', 'up', 'up']],
      [100, ['unready', 'unready', 'unready'], [], { failOpen: false }],
    ]);
    expect(off[1]!.state).toMatchObject({ active: false, served: [] });
    const ds = run([
      [0, ['up', 'up', 'up']],
      [100, ['unready', 'unready', 'unready']],
      [200, ['unready', 'unready', 'unready'], [], { failOpen: false, mayStart: false }],
    ]);
    expect(ds[2]).toMatchObject({ ended: 'disabled', state: { active: false, served: [] } });
  });

  it('the window is (fall + 1) × interval + timeout', () => {
    expect(failOpenWindowMs({ intervalMs: 1000, timeoutMs: 1000, fall: 2 })).toBe(4000);
    expect(failOpenWindowMs({ intervalMs: 200, timeoutMs: 200, fall: 2 })).toBe(800);
  });
});

describe('decidePool: damping and fail open together', () => {
  it('a damped backend that is up is held out while another up backend serves', () => {
    const [d] = run([[0, ['up', 'up', 'unready'], [A]]]);
    expect(d!.state.served).toStrictEqual([B]);
  });

  it('damping never empties the pool: the damped up ones serve when no other up one does', () => {
    const [d] = run([[0, ['up', 'unready', 'unready'], [A]]]);
    expect(d!.state).toMatchObject({ active: false, served: [A] });
  });

  it('during fail open a damped backend coming up serves beside the kept ones, and does not end it', () => {
    const ds = run([
      [0, ['up', 'up', 'up']],
      [100, ['unready', 'unready', 'unready']],
      [1_000, ['up', 'unready', 'unready'], [A]],
      [2_000, ['up', 'unready', 'unready']],
    ]);
    expect(ds[2]!.state).toMatchObject({ active: true, kept: [B, C], served: [A, B, C] });
    expect(ds[2]!.ended).toBeNull();
    // its hold is over: a backend up and not damped ends fail open
    expect(ds[3]).toMatchObject({ ended: 'passed', state: { served: [A] } });
  });
});

const MEMBER_KEYS = [A, B, C, '10.0.0.4:6443'];

/** Throws (a property failure fast-check shrinks) with the state when `ok` is false. */
function check(ok: boolean, what: string, st: PoolState): void {
  if (!ok) throw new Error(`${what}: ${JSON.stringify({ ...st, left: [...st.left] })}`);
}
const arbStep = fc.record({
  dt: fc.integer({ min: 0, max: 2 * W }),
  states: fc.array(fc.constantFrom<S>('up', 'unready', 'dead', 'unknown'), { minLength: 4, maxLength: 4 }),
  damped: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
  present: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
  failOpen: fc.boolean(),
  mayStart: fc.boolean(),
});

describe('decidePool: properties over random histories', () => {
  it(
    'never serves a dead or unknown backend, never keeps one that was not served within the window, never empties the pool while one is up',
    () => {
      fc.assert(
        fc.property(fc.array(arbStep, { minLength: 1, maxLength: 20 }), (steps) => {
          let st = initialPool();
          let at = 0;
          /** the last decision at which each backend was in the served set or left it */
          const lastServed = new Map<string, number>();
          for (const step of steps) {
            at += step.dt;
            const ms: PoolMember[] = MEMBER_KEYS.flatMap((key, i) => (step.present[i] ? [{ key, state: step.states[i]!, damped: step.damped[i]! }] : []));
            const o = { failOpen: step.failOpen, windowMs: W, mayStart: step.mayStart };
            const prev = st;
            const d = decidePool(prev, ms, at, o);
            st = d.state;
            const stateOf = (k: string): S | undefined => ms.find((m) => m.key === k)?.state;
            const clean = ms.filter((m) => m.state === 'up' && !m.damped).map((m) => m.key);
            // (plain checks, not expect: a thousand histories must stay well under a second)
            // only backends present, each served at most once, in member order, never dead or unknown
            check(
              st.served.join() ===
                ms
                  .filter((m) => st.served.includes(m.key))
                  .map((m) => m.key)
                  .join(),
              'served in member order',
              st,
            );
            check(
              st.served.every((k) => stateOf(k) === 'up' || stateOf(k) === 'unready'),
              'served only up or unready',
              st,
            );
            if (clean.length > 0) check(st.served.join() === clean.join() && !st.active, 'exactly the clean ones, no fail open', st);
            if (ms.some((m) => m.state === 'up')) check(st.served.length > 0, 'a backend up: never an empty pool', st);
            if (!o.failOpen) check(!st.active && st.served.every((k) => stateOf(k) === 'up'), 'off: nothing unready served', st);
            if (st.active) {
              check(st.kept.length > 0, 'active with something kept', st);
              for (const k of st.kept) {
                check(stateOf(k) === 'unready' && st.served.includes(k), 'kept: unready and served', st);
                // kept: served until now, or left within the window before it started (never a newcomer); then only fewer
                if (d.started) check(prev.served.includes(k) || (lastServed.get(k) ?? -Infinity) >= at - W, 'kept only recently served ones', st);
                else check(prev.kept.includes(k), 'kept only shrinks', st);
              }
            } else check(st.kept.length === 0 && st.served.every((k) => stateOf(k) === 'up'), 'not active: only up ones served', st);
            if (d.started) check(o.mayStart && !prev.active, 'starts only on a verdict change, once', st);
            if (d.ended !== null) check(prev.active, 'ends only what ran', st);
            // in the set now, or leaving it now (what `left` records: the decision that took it out)
            for (const k of [...st.served, ...prev.served]) lastServed.set(k, at);
            for (const k of MEMBER_KEYS) if (stateOf(k) === undefined) lastServed.delete(k);
          }
        }),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );
});

const DO: DampingOptions = { transitions: 3, windowMs: 10_000, holdMs: 2_000, maxHoldMs: 8_000 };

/** Transitions at these times, from a fresh state; hold expiries in between as their timers would. */
function flaps(times: number[], o = DO): { state: DampState; events: string[] } {
  let s = initialDamp();
  const events: string[] = [];
  for (const t of times) {
    while (s.until !== null && s.until <= t) {
      const r = expireHold(s, s.until);
      s = r.state;
      events.push(`end@${r.state.releasedAt}`);
    }
    const r = noteTransition(s, t, o);
    s = r.state;
    if (r.event?.kind === 'start' || r.event?.kind === 'extend') events.push(`${r.event.kind}@${t} until ${r.event.until} level ${r.event.level}`);
  }
  return { state: s, events };
}

describe('damping', () => {
  it('more than `transitions` within the window damps; as many does not', () => {
    expect(flaps([0, 1000, 2000]).events).toStrictEqual([]);
    expect(flaps([0, 1000, 2000, 3000]).events).toStrictEqual(['start@3000 until 5000 level 1']);
    expect(isDamped(flaps([0, 1000, 2000, 3000]).state, 4999)).toBe(true);
    expect(isDamped(flaps([0, 1000, 2000, 3000]).state, 5000)).toBe(false);
  });

  it('transitions older than the window do not count', () => {
    expect(flaps([0, 1000, 2000, 10_000]).events).toStrictEqual([]);
    expect(flaps([0, 1000, 2000, 10_000, 10_500]).events).toStrictEqual(['start@10500 until 12500 level 1']);
  });

  it('a transition while held restarts the hold of its level', () => {
    expect(flaps([0, 1, 2, 3, 1_000]).events).toStrictEqual(['start@3 until 2003 level 1', 'extend@1000 until 3000 level 1']);
  });

  it('damped again soon after a release: twice as long, up to maxHold; after maxHold of calm: level 1 again', () => {
    const burst = (t: number): number[] => [t, t + 1, t + 2, t + 3];
    const r = flaps([...burst(0), ...burst(3_000), ...burst(8_000), ...burst(20_000), ...burst(40_000), ...burst(100_000)]);
    expect(r.events.filter((e) => e.startsWith('start'))).toStrictEqual([
      'start@3 until 2003 level 1',
      'start@3003 until 7003 level 2',
      'start@8003 until 16003 level 3',
      // level 4 would be 16 s: capped at 8 s
      'start@20003 until 28003 level 4',
      // released at 28003, damped again 12 s later (>= maxHold): level 1
      'start@40003 until 42003 level 1',
      'start@100003 until 102003 level 1',
    ]);
    expect(holdFor(40, DO)).toBe(DO.maxHoldMs);
  });

  it('refuses bad options', () => {
    expect(() => checkDampingOptions({ ...DO, transitions: 0 })).toThrow(/transitions must be an integer >= 1/);
    expect(() => checkDampingOptions({ ...DO, holdMs: 0 })).toThrow(/holdMs must be a positive number/);
    expect(() => checkDampingOptions({ ...DO, maxHoldMs: 1000 })).toThrow(/maxHoldMs \(1000\) must be at least holdMs \(2000\)/);
  });

  it(
    'property: never held more than maxHold after the last transition; every hold is hold × 2^k or maxHold',
    () => {
      const arbOpts = fc.record({
        transitions: fc.integer({ min: 1, max: 6 }),
        windowMs: fc.integer({ min: 1, max: 20_000 }),
        holdMs: fc.integer({ min: 1, max: 5_000 }),
        extra: fc.integer({ min: 0, max: 20_000 }),
      });
      fc.assert(
        fc.property(arbOpts, fc.array(fc.integer({ min: 0, max: 3_000 }), { maxLength: 60 }), (ao, gaps) => {
          const o: DampingOptions = { transitions: ao.transitions, windowMs: ao.windowMs, holdMs: ao.holdMs, maxHoldMs: ao.holdMs + ao.extra };
          let s = initialDamp();
          let t = 0;
          for (const g of gaps) {
            t += g;
            while (s.until !== null && s.until <= t) s = expireHold(s, s.until).state;
            const r = noteTransition(s, t, o);
            s = r.state;
            const fail = (what: string): never => {
              throw new Error(`${what}: ${JSON.stringify({ t, s, event: r.event })}`);
            };
            if (s.until !== null && (s.until - t > o.maxHoldMs || s.until <= t)) fail('held more than maxHold after the last transition');
            if (r.event?.kind === 'start') {
              const h = r.event.holdMs;
              if (h !== o.maxHoldMs && !Number.isInteger(Math.log2(h / o.holdMs))) fail('a hold that is neither hold × 2^k nor maxHold');
              if (r.event.transitions !== o.transitions + 1) fail('damped at another count than transitions + 1');
            }
            if (!s.flaps.every((f) => f > t - o.windowMs && f <= t)) fail('a counted transition outside the window');
          }
        }),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );
});
