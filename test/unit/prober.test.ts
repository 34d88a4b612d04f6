import { describe, expect, it } from 'vitest';
import { summarize, type ProbeResult } from '../../lab/clients/prober.js';

const ok = (t: number, node = 'n1'): ProbeResult => ({ t, ok: true, node, status: 200, ms: 3 });
const fail = (t: number, error = 'timeout'): ProbeResult => ({ t, ok: false, error, ms: 250 });

describe('prober summarize', () => {
  it('summarizes nothing', () => {
    expect(summarize([])).toEqual({ summary: true, requests: 0, ok: 0, failed: 0, outages: [], maxOutageMs: 0, nodes: {} });
  });

  it('counts successes per node and reports no outage when nothing failed', () => {
    const s = summarize([ok(0), ok(10, 'n2'), ok(20), ok(30, 'n2'), ok(40, 'n3')]);
    expect(s).toMatchObject({ requests: 5, ok: 5, failed: 0, outages: [], maxOutageMs: 0, nodes: { n1: 2, n2: 2, n3: 1 } });
  });

  it('measures an outage from the last success before it to the first success after it', () => {
    const s = summarize([ok(0), ok(10), fail(20), fail(30, 'ECONNREFUSED'), fail(40), ok(50, 'n2'), ok(60, 'n2')]);
    expect(s.outages).toEqual([{ from: 10, to: 50, ms: 40, failed: 3 }]);
    expect(s.maxOutageMs).toBe(40);
    expect(s).toMatchObject({ requests: 7, ok: 4, failed: 3, nodes: { n1: 2, n2: 2 } });
  });

  it('starts a leading outage at the first failure', () => {
    expect(summarize([fail(0), fail(10), ok(20)]).outages).toEqual([{ from: 0, to: 20, ms: 20, failed: 2 }]);
  });

  it('marks an outage that lasts to the end as ongoing, ending at its last failure', () => {
    expect(summarize([ok(0), fail(10), fail(20)]).outages).toEqual([{ from: 0, to: 20, ms: 20, failed: 2, ongoing: true }]);
    expect(summarize([fail(5)]).outages).toEqual([{ from: 5, to: 5, ms: 0, failed: 1, ongoing: true }]);
  });

  it('orders by start time, not completion order (overlapping requests finish out of order)', () => {
    // a request started at 20 timed out and was reported last
    const s = summarize([ok(0), ok(30), fail(20), ok(10), ok(40)]);
    expect(s.outages).toEqual([{ from: 10, to: 30, ms: 20, failed: 1 }]);
  });

  it('keeps several outages and reports the longest', () => {
    const s = summarize([ok(0), fail(10), ok(20), ok(30), fail(40), fail(50), fail(60), ok(70), fail(80), ok(85)]);
    expect(s.outages.map((o) => [o.from, o.to, o.failed])).toEqual([
      [0, 20, 1],
      [30, 70, 3],
      [70, 85, 1],
    ]);
    expect(s.maxOutageMs).toBe(40);
  });

  it('counts HTTP failures as failures and does not credit their node', () => {
    const s = summarize([ok(0), { t: 10, ok: false, error: 'HTTP 500', node: 'n1', status: 500, ms: 2 }, ok(20)]);
    expect(s).toMatchObject({ ok: 2, failed: 1, nodes: { n1: 2 } });
  });
});
