// The stop's drain after a BGP withdrawal (src/agent/phases/bgp.ts drainAfterWithdraw): a fake clock, no lab.
import { describe, expect, it } from 'vitest';
import { drainAfterWithdraw } from '../../src/agent/phases/bgp.js';

/** A clock that sleep advances, and a counter that follows a script of values per read. */
function script(values: (number | Error)[]): { read: () => Promise<number>; now: () => number; sleep: (ms: number) => Promise<void>; reads: () => number } {
  let t = 0;
  let i = 0;
  return {
    read: async () => {
      const v = values[Math.min(i++, values.length - 1)]!;
      if (v instanceof Error) throw v;
      return v;
    },
    now: () => t,
    sleep: async (ms) => {
      t += ms;
    },
    reads: () => i,
  };
}

describe('drainAfterWithdraw', () => {
  it('ends quietMs after the last new connection, counting the connections that arrived', async () => {
    // reads every 50 ms: 10 (start), 12, 15, 15, 15, ... → the last change is at 100 ms
    const s = script([10, 12, 15, 15]);
    const d = await drainAfterWithdraw(s.read, { quietMs: 300, maxMs: 3000, pollMs: 50, now: s.now, sleep: s.sleep });
    expect(d).toStrictEqual({ quiet: true, waitedMs: 400, arrived: 5, error: null });
  });

  it('with no traffic at all it waits exactly quietMs', async () => {
    const s = script([7]);
    const d = await drainAfterWithdraw(s.read, { quietMs: 300, maxMs: 3000, pollMs: 50, now: s.now, sleep: s.sleep });
    expect(d).toStrictEqual({ quiet: true, waitedMs: 300, arrived: 0, error: null });
    expect(s.reads()).toBe(7);
  });

  it('traffic that never stops ends at maxMs, not quiet', async () => {
    const s = script(Array.from({ length: 200 }, (_, k) => k));
    const d = await drainAfterWithdraw(s.read, { quietMs: 300, maxMs: 1000, pollMs: 50, now: s.now, sleep: s.sleep });
    expect(d).toStrictEqual({ quiet: false, waitedMs: 1000, arrived: 20, error: null });
  });

  it('a failed counter read ends the count and waits quietMs once from then', async () => {
    const first = script([new Error('nft: no such table')]);
    expect(await drainAfterWithdraw(first.read, { quietMs: 300, now: first.now, sleep: first.sleep })).toStrictEqual({
      quiet: false,
      waitedMs: 300,
      arrived: 0,
      error: 'nft: no such table',
    });
    const later = script([4, 6, new Error('nft timed out')]);
    expect(await drainAfterWithdraw(later.read, { quietMs: 300, pollMs: 50, now: later.now, sleep: later.sleep })).toStrictEqual({
      quiet: false,
      waitedMs: 400,
      arrived: 2,
      error: 'nft timed out',
    });
  });
});
