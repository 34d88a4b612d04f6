/**
 * bench/hitless.ts's figures over runs (pure): medians of the runs' shares and stall quantiles,
 * sums of how connections ended, failed runs left out.
 */
import { describe, expect, it } from 'vitest';
import { figuresOf, type EventRun } from '../../bench/hitless.js';
import { summarizeFleet, type FleetConn, type FleetEnd } from '../../lab/fleet-summary.js';

const conns = (spec: [string, FleetEnd, number][]): FleetConn[] =>
  spec.map(([node, ended, stallMs], i) => ({
    kind: 'conn',
    window: 1,
    conn: i,
    src: '10.78.164.150',
    node,
    ended,
    stallMs,
    events: 1,
    firstEventMs: 1,
    endedMs: ended === 'kept' ? null : stallMs,
  }));

const run = (n: number, survived: FleetConn[], dead: FleetConn[] = [], extra: Partial<EventRun> = {}): EventRun => ({
  run: n,
  system: 'ballast',
  event: 'linkdown',
  open: survived.length + dead.length,
  survived: summarizeFleet(survived),
  dead: summarizeFleet(dead),
  byNode: {},
  vipMovedMs: 300 + n,
  newHolder: 'n2',
  newHolderCpuPercent: 5 * n,
  idle: null,
  loaded: null,
  fleetCpuPercent: 10,
  ...extra,
});

describe('figuresOf', () => {
  it('medians over the runs, sums of the endings, the dead backend apart; a failed run is left out', () => {
    const r1 = run(
      1,
      conns([
        ['n2', 'kept', 400],
        ['n3', 'kept', 500],
        ['n2', 'reset', 900],
        ['n3', 'kept', 600],
      ]),
      conns([['n1', 'hung', 9000]]),
    );
    const r2 = run(
      2,
      conns([
        ['n2', 'kept', 300],
        ['n3', 'kept', 350],
      ]),
      conns([['n1', 'reset', 100]]),
    );
    const r3 = run(
      3,
      conns([
        ['n2', 'hung', 5000],
        ['n3', 'fin', 20],
      ]),
    );
    const failed = run(4, conns([['n2', 'kept', 1]]), [], { error: 'boom' });
    const f = figuresOf('linkdown', 'ballast', [r1, r2, r3, failed]);
    expect(f.runs).toHaveLength(4);
    // shares 0.75, 1, 0 → median 0.75, min 0
    expect(f.keptShare).toBe(0.75);
    expect(f.keptShareMin).toBe(0);
    expect([f.kept, f.connections]).toStrictEqual([5, 8]);
    // r3 kept none: its stall quantiles are null and do not count; r1 p50 500 p99 600, r2 p50 300 p99 350
    expect(f.stall).toStrictEqual({ p50: 400, p99: 475, max: 475 });
    expect(f.ended).toStrictEqual({ kept: 5, reset: 1, fin: 1, hung: 1, error: 0 });
    expect(f.deadEnded).toStrictEqual({ kept: 0, reset: 1, fin: 0, hung: 1, error: 0 });
    expect(f.vipMovedMs).toBe(302);
    expect(f.newHolderCpuPercent).toBe(10);
    // lost ones ended at (here) their stall: r1 900; r2 none (left out); r3 20 and 5000
    expect(f.lostAt).toStrictEqual({ p50: 460, max: 2950 });
  });

  it('no successful run: null figures, zero counts', () => {
    const f = figuresOf('sigkill', 'keepalivedHaproxy', [run(1, [], [], { error: 'no holder' })]);
    expect(f.keptShare).toBeNull();
    expect(f.stall).toStrictEqual({ p50: null, p99: null, max: null });
    expect([f.kept, f.connections]).toStrictEqual([0, 0]);
    expect(f.lostAt).toStrictEqual({ p50: null, max: null });
  });
});
