import { describe, expect, it } from 'vitest';
import {
  checkHysteresisOptions,
  Hysteresis,
  initialHealth,
  stepHealth,
  type BackendState,
  type HealthInput,
  type HealthState,
  type Transition,
} from '../../src/health/hysteresis.js';

type R = 'P' | 'F';
const input = (r: R, at: number): HealthInput => (r === 'P' ? { kind: 'pass', at, reason: 'http 200' } : { kind: 'fail', at, reason: 'http 500' });

/** Runs a sequence through stepHealth; returns the final health and every transition. */
function run(seq: readonly R[], rise: number, fall: number, start: HealthState = initialHealth()) {
  let h = start;
  const transitions: Transition[] = [];
  seq.forEach((r, i) => {
    const out = stepHealth('b', h, input(r, i), { rise, fall });
    h = out.state;
    if (out.transition) transitions.push(out.transition);
  });
  return { health: h, transitions };
}

/**
 * The oracle, stated differently from the implementation: the state after a sequence is the kind
 * of the last result at which a run of passes had reached `rise` or a run of failures had reached
 * `fall`; unknown if no run ever did.
 */
function oracle(seq: readonly R[], rise: number, fall: number): BackendState {
  let state: BackendState = 'unknown';
  for (let i = 0; i < seq.length; i++) {
    let run = 0;
    for (let j = i; j >= 0 && seq[j] === seq[i]; j--) run++;
    if (seq[i] === 'P' && run >= rise) state = 'up';
    if (seq[i] === 'F' && run >= fall) state = 'down';
  }
  return state;
}

/** Every sequence of passes and failures of length n. */
function* sequences(n: number): Generator<R[]> {
  for (let bits = 0; bits < 1 << n; bits++) yield Array.from({ length: n }, (_, i) => ((bits >> i) & 1 ? 'F' : 'P'));
}

describe('hysteresis: exhaustive sequences', () => {
  it('matches the oracle for every sequence up to 10 results, rise and fall 1..4', () => {
    let checked = 0;
    const mismatches: string[] = [];
    for (let rise = 1; rise <= 4; rise++) {
      for (let fall = 1; fall <= 4; fall++) {
        for (let n = 0; n <= 10; n++) {
          for (const seq of sequences(n)) {
            const { health, transitions } = run(seq, rise, fall);
            const label = `rise=${rise} fall=${fall} ${seq.join('')}`;
            // a transition exactly where the oracle's state changes, with that result's index as `at`
            const expected: string[] = [];
            let before: BackendState = 'unknown';
            for (let i = 0; i < seq.length; i++) {
              const after = oracle(seq.slice(0, i + 1), rise, fall);
              if (before !== after) expected.push(`${i}:${before}>${after}`);
              before = after;
            }
            const got = transitions.map((t) => `${t.at}:${t.from}>${t.to}`);
            if (health.state !== before || got.join() !== expected.join()) {
              mismatches.push(`${label}: state ${health.state}, transitions ${got.join()}; expected ${before}, ${expected.join()}`);
            }
            // the streak counters are the run length of the last result
            let tail = 0;
            for (let j = seq.length - 1; j >= 0 && seq[j] === seq.at(-1); j--) tail++;
            const streak = seq.at(-1) === 'P' ? [tail, 0] : [0, tail];
            if (health.passes !== streak[0] || health.failures !== streak[1]) {
              mismatches.push(`${label}: passes ${health.passes}, failures ${health.failures}; expected ${streak.join(', ')}`);
            }
            checked++;
          }
        }
      }
    }
    expect(mismatches).toStrictEqual([]);
    expect(checked).toBe(16 * 2047);
  });

  it('goes unknown → up after exactly rise passes, and up → down after exactly fall failures', () => {
    for (let rise = 1; rise <= 10; rise++) {
      expect(run(Array<R>(rise - 1).fill('P'), rise, 2).health.state).toBe('unknown');
      expect(run(Array<R>(rise).fill('P'), rise, 2).health.state).toBe('up');
    }
    for (let fall = 1; fall <= 10; fall++) {
      const up = run(['P', 'P'], 2, fall).health;
      expect(run(Array<R>(fall - 1).fill('F'), 2, fall, up).health.state).toBe('up');
      expect(run(Array<R>(fall).fill('F'), 2, fall, up).transitions).toStrictEqual([
        { backend: 'b', from: 'up', to: 'down', reason: 'http 500', at: fall - 1 },
      ]);
    }
  });

  it('goes unknown → down after fall failures (a backend that never answers is reported)', () => {
    expect(run(['F', 'F'], 2, 2).transitions).toStrictEqual([{ backend: 'b', from: 'unknown', to: 'down', reason: 'http 500', at: 1 }]);
  });
});

describe('hysteresis: flapping', () => {
  const starts: [string, HealthState][] = [
    ['unknown', initialHealth()],
    ['up', run(['P', 'P'], 2, 2).health],
    ['down', run(['F', 'F'], 2, 2).health],
  ];

  it.each(starts)('alternating pass/fail never changes state from %s (rise = fall = 2)', (name, start) => {
    for (const first of ['P', 'F'] as const) {
      const seq = Array.from({ length: 200 }, (_, i): R => ((i % 2 === 0) === (first === 'P') ? 'P' : 'F'));
      const { health, transitions } = run(seq, 2, 2, start);
      expect(transitions, `${name} starting with ${first}`).toStrictEqual([]);
      expect(health.state).toBe(name);
    }
  });

  it('a single pass or failure between runs resets the other streak', () => {
    // up, then F P F P F F: only the final two failures take it down
    const up = run(['P', 'P'], 2, 2).health;
    const { transitions } = run(['F', 'P', 'F', 'P', 'F', 'F'], 2, 2, up);
    expect(transitions.map((t) => [t.at, t.to])).toStrictEqual([[5, 'down']]);
  });
});

describe('hysteresis: markDead', () => {
  const dead = (at: number): HealthInput => ({ kind: 'dead', at, reason: 'conntrack: refused' });

  it.each([
    ['unknown', [] as R[], { backend: 'b', from: 'unknown', to: 'down', reason: 'conntrack: refused', at: 100 }],
    ['up', ['P', 'P'] as R[], { backend: 'b', from: 'up', to: 'down', reason: 'conntrack: refused', at: 100 }],
    ['down', ['F', 'F'] as R[], null],
  ])('from %s: down at once', (_name, before, transition) => {
    const start = run(before, 2, 2).health;
    const out = stepHealth('b', start, dead(100), { rise: 2, fall: 2 });
    expect(out.transition).toStrictEqual(transition);
    expect(out.state).toMatchObject({ state: 'down', passes: 0, reason: 'conntrack: refused' });
  });

  it.each([
    ['unknown', [] as R[]],
    ['up', ['P', 'P', 'P'] as R[]],
    ['down, halfway back up', ['F', 'F', 'P'] as R[]],
  ])('from %s: rise passes are needed to come back', (_name, before) => {
    for (const rise of [1, 2, 3, 5]) {
      let h = run(before, rise, 2).health;
      h = stepHealth('b', h, dead(50), { rise, fall: 2 }).state;
      const back = run(Array<R>(rise).fill('P'), rise, 2, h);
      expect(
        back.transitions.map((t) => [t.at, t.from, t.to]),
        `rise=${rise}`,
      ).toStrictEqual([[rise - 1, 'down', 'up']]);
      if (rise > 1) expect(run(Array<R>(rise - 1).fill('P'), rise, 2, h).health.state).toBe('down');
    }
  });

  it('keeps the reason while recovering and clears it once up', () => {
    let h = stepHealth('b', run(['P', 'P'], 2, 2).health, dead(10), { rise: 2, fall: 2 }).state;
    h = stepHealth('b', h, { kind: 'pass', at: 11 }, { rise: 2, fall: 2 }).state;
    expect(h).toMatchObject({ state: 'down', reason: 'conntrack: refused', passes: 1 });
    const out = stepHealth('b', h, { kind: 'pass', at: 12 }, { rise: 2, fall: 2 });
    expect(out.state).toMatchObject({ state: 'up', reason: null, since: 12 });
    expect(out.transition?.reason).toBe('passed 2 consecutive checks');
  });
});

describe('hysteresis: reasons, times and purity', () => {
  it('reports the failure that caused a down and keeps the latest failure while up', () => {
    const opts = { rise: 2, fall: 3 };
    let h = run(['P', 'P'], 2, 3).health;
    h = stepHealth('b', h, { kind: 'fail', at: 1, reason: 'timeout' }, opts).state;
    expect(h).toMatchObject({ state: 'up', reason: 'timeout', failures: 1 });
    h = stepHealth('b', h, { kind: 'pass', at: 2 }, opts).state;
    expect(h.reason).toBeNull();
    h = stepHealth('b', h, { kind: 'fail', at: 3, reason: 'ECONNRESET' }, opts).state;
    h = stepHealth('b', h, { kind: 'fail', at: 4, reason: 'timeout' }, opts).state;
    const out = stepHealth('b', h, { kind: 'fail', at: 5, reason: 'ECONNREFUSED' }, opts);
    expect(out.transition).toStrictEqual({ backend: 'b', from: 'up', to: 'down', reason: 'ECONNREFUSED', at: 5 });
    expect(out.state).toStrictEqual({ state: 'down', passes: 0, failures: 3, reason: 'ECONNREFUSED', since: 5 });
  });

  it('does not modify the state it is given', () => {
    const h = Object.freeze(initialHealth());
    const out = stepHealth('b', h, { kind: 'pass', at: 1 }, { rise: 1, fall: 1 });
    expect(h).toStrictEqual(initialHealth());
    expect(out.state).not.toBe(h);
  });

  it('the Hysteresis class stamps inputs with its clock', () => {
    let now = 1_000;
    const hy = new Hysteresis('10.0.0.11:6443', { rise: 2, fall: 2 }, () => now);
    expect(hy.pass('http 200')).toBeNull();
    now = 2_000;
    expect(hy.pass('http 200')).toStrictEqual({ backend: '10.0.0.11:6443', from: 'unknown', to: 'up', reason: 'http 200', at: 2_000 });
    now = 3_000;
    expect(hy.fail('http 500')).toBeNull();
    now = 3_500;
    expect(hy.markDead('node n1 fell silent')).toStrictEqual({
      backend: '10.0.0.11:6443',
      from: 'up',
      to: 'down',
      reason: 'node n1 fell silent',
      at: 3_500,
    });
    expect(hy.health).toStrictEqual({ state: 'down', passes: 0, failures: 2, reason: 'node n1 fell silent', since: 3_500 });
  });

  it('refuses rise or fall that are not integers >= 1', () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) {
      expect(() => checkHysteresisOptions({ rise: bad, fall: 2 })).toThrow(new RangeError(`rise must be an integer >= 1, got ${bad}`));
      expect(() => new Hysteresis('b', { rise: 2, fall: bad })).toThrow(RangeError);
    }
  });
});
