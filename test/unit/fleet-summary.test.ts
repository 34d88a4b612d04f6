/**
 * The watch fleet's window figures (lab/fleet-summary.ts): kept share, how the others ended and
 * the stall quantiles, over all connections, per node and over the nodes whose backend survived.
 */
import { describe, expect, it } from 'vitest';
import { summarizeByNode, summarizeFleet, type FleetConn, type FleetEnd } from '../../lab/fleet-summary.js';

let n = 0;
const conn = (node: string, ended: FleetEnd, stallMs: number, code?: string): FleetConn => ({
  kind: 'conn',
  window: 1,
  conn: n++,
  src: '10.78.164.150',
  node,
  ended,
  stallMs,
  events: ended === 'kept' ? 10 : 0,
  firstEventMs: ended === 'kept' ? 100 : null,
  endedMs: ended === 'kept' ? null : 50,
  ...(code === undefined ? {} : { code }),
});

describe('summarizeFleet', () => {
  it('no connections: zero counts, null share and stalls', () => {
    expect(summarizeFleet([])).toStrictEqual({
      connections: 0,
      kept: 0,
      keptShare: null,
      ended: { kept: 0, reset: 0, fin: 0, hung: 0, error: 0 },
      errors: {},
      stall: { p50: null, p99: null, max: null },
      stallAll: { p50: null, p99: null, max: null },
      lostAt: { p50: null, p99: null, max: null },
    });
  });

  it('counts each ending, the share kept, error codes, and stalls over the kept (nearest rank)', () => {
    // 100 kept with stalls 201..300 ms, 3 resets, 1 FIN, 2 hung, 2 errors
    const cs = [
      ...Array.from({ length: 100 }, (_, i) => conn('n2', 'kept', 201 + i)),
      conn('n1', 'reset', 4000),
      conn('n1', 'reset', 4100),
      conn('n3', 'reset', 900),
      conn('n1', 'fin', 300),
      conn('n2', 'hung', 9000),
      conn('n3', 'hung', 8000),
      conn('n2', 'error', 500, 'EPIPE'),
      conn('n2', 'error', 600),
    ];
    const s = summarizeFleet(cs);
    expect(s.connections).toBe(108);
    expect(s.kept).toBe(100);
    expect(s.keptShare).toBeCloseTo(100 / 108, 12);
    expect(s.ended).toStrictEqual({ kept: 100, reset: 3, fin: 1, hung: 2, error: 2 });
    expect(s.errors).toStrictEqual({ EPIPE: 1, unknown: 1 });
    // nearest rank: p50 = the 50th of 100 (250), p99 = the 99th (299), max 300
    expect(s.stall).toStrictEqual({ p50: 250, p99: 299, max: 300 });
    // over all 108: the lost ones' stalls (up to 9000) count too
    expect(s.stallAll.max).toBe(9000);
    expect(s.stallAll.p50).toBe(254);
    // the 8 lost ones all ended 50 ms after the mark
    expect(s.lostAt).toStrictEqual({ p50: 50, p99: 50, max: 50 });
  });

  it("restricted to the nodes whose backend survived: the dead node's connections are left out", () => {
    const cs = [conn('n1', 'reset', 400), conn('n1', 'reset', 400), conn('n2', 'kept', 700.04), conn('n3', 'kept', 650), conn('n3', 'fin', 100)];
    const s = summarizeFleet(cs, ['n2', 'n3']);
    expect(s.connections).toBe(3);
    expect(s.kept).toBe(2);
    expect(s.keptShare).toBeCloseTo(2 / 3, 12);
    expect(s.ended).toStrictEqual({ kept: 2, reset: 0, fin: 1, hung: 0, error: 0 });
    // stalls rounded to 0.1 ms
    expect(s.stall).toStrictEqual({ p50: 650, p99: 700, max: 700 });
    // a set that matches nothing
    expect(summarizeFleet(cs, new Set(['n9'])).keptShare).toBeNull();
  });

  it('per node, in name order, each the same as summarizeFleet over that node', () => {
    const cs = [conn('n3', 'kept', 210), conn('n1', 'hung', 5000), conn('n2', 'kept', 220), conn('n1', 'kept', 230)];
    const by = summarizeByNode(cs);
    expect(Object.keys(by)).toStrictEqual(['n1', 'n2', 'n3']);
    for (const node of ['n1', 'n2', 'n3']) expect(by[node]).toStrictEqual(summarizeFleet(cs, [node]));
    expect(by.n1!.ended).toStrictEqual({ kept: 1, reset: 0, fin: 0, hung: 1, error: 0 });
    expect(by.n1!.keptShare).toBe(0.5);
  });
});
