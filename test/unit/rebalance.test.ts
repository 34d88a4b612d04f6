/**
 * The rebalancer (src/dataplane/rebalance.ts): the pure decision (fixed cases, then properties
 * with fast-check: every limit holds for random counts, times and histories), the tracker's
 * rounds against a fake kernel (counts, resets, budgets over simulated time), and how the
 * counts reach /metrics and the status page.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { enableConntrackTimestamps } from '../../src/dataplane/conntrack.js';
import {
  ConnectionTracker,
  decide,
  MINUTE_MS,
  recordResets,
  REBALANCE_MESSAGE,
  type RebalanceMemory,
  type RebalanceSettings,
} from '../../src/dataplane/rebalance.js';
import type { ConntrackVipFlows, ConntrackVipQuery } from '../../src/native.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { renderStatusPage } from '../../src/observe/page.js';
import type { StatusDocument } from '../../src/observe/status.js';
import { STATUS_DOC } from '../support/status-doc.js';
import { FUZZ_TIMEOUT_MS, fuzzParameters } from '../support/fuzz.js';

const A = '10.0.0.11:6443';
const B = '10.0.0.12:6443';
const C = '10.0.0.13:6443';
const S = { factor: 1.2, afterMs: 10_000, resetsPerSecond: 20, maxFractionPerMinute: 0.5 };
const EMPTY: RebalanceMemory = { overSince: new Map(), resets: [] };
const counts = (o: Record<string, number>): Map<string, number> => new Map(Object.entries(o));

describe('decide', () => {
  it('after a restart (150/151/0): both loaded backends are over; once `after` has passed both are reset toward their fair share, most loaded first, within the second budget', () => {
    const c = counts({ [A]: 150, [B]: 151, [C]: 0 });
    const first = decide({ now: 1000, ready: [A, B, C], counts: c, memory: EMPTY, settings: S });
    expect(first).toMatchObject({ total: 301, over: [B, A], targets: [], why: 'waiting' });
    expect(first.fair).toBeCloseTo(301 / 3);
    expect(first.bound).toBeCloseTo(1.2 * (301 / 3));
    expect([...first.memory.overSince]).toStrictEqual([
      [B, 1000],
      [A, 1000],
    ]);
    // not yet: 9.999 s over
    expect(decide({ now: 10_999, ready: [A, B, C], counts: c, memory: first.memory, settings: S }).why).toBe('waiting');
    // 10 s over: B (151) first, down to ⌈100.33⌉ = 101 would be 50, capped at 20 per second
    const due = decide({ now: 11_000, ready: [A, B, C], counts: c, memory: first.memory, settings: S });
    expect(due.targets).toStrictEqual([{ backend: B, count: 20 }]);
    expect(due.why).toBe('reset');
    // with room for more: B 50, then A 49 (150 − 101), from one budget
    expect(decide({ now: 11_000, ready: [A, B, C], counts: c, memory: first.memory, settings: { ...S, resetsPerSecond: 120 } }).targets).toStrictEqual([
      { backend: B, count: 50 },
      { backend: A, count: 49 },
    ]);
    expect(decide({ now: 11_000, ready: [A, B, C], counts: c, memory: first.memory, settings: { ...S, resetsPerSecond: 70 } }).targets).toStrictEqual([
      { backend: B, count: 50 },
      { backend: A, count: 20 },
    ]);
  });

  it('never touches a backend that is alone, and clears what it remembered', () => {
    const memory: RebalanceMemory = { overSince: new Map([[A, 0]]), resets: [] };
    const d = decide({ now: 100_000, ready: [A], counts: counts({ [A]: 500, [B]: 3 }), memory, settings: S });
    expect(d).toMatchObject({ targets: [], why: 'alone', fair: null, bound: null, over: [] });
    expect(d.memory.overSince.size).toBe(0);
  });

  it('counts only ready backends: a draining one shares nothing and is never a target', () => {
    // B is draining (not ready) with 200: A and C share 20 evenly
    const d = decide({ now: 0, ready: [A, C], counts: counts({ [A]: 10, [B]: 200, [C]: 10 }), memory: EMPTY, settings: { ...S, afterMs: 0 } });
    expect(d).toMatchObject({ total: 20, over: [], why: 'balanced' });
  });

  it('balanced within the factor: nothing; an over-since time is dropped once the backend is back within bounds', () => {
    const memory: RebalanceMemory = { overSince: new Map([[A, 0]]), resets: [] };
    const d = decide({ now: 50_000, ready: [A, B, C], counts: counts({ [A]: 110, [B]: 100, [C]: 90 }), memory, settings: S });
    expect(d.why).toBe('balanced');
    expect(d.memory.overSince.size).toBe(0);
  });

  it('triggers above the bound, aims at the fair share and never below it', () => {
    // fair 10, bound 12: 13 is over; reset 3 to reach 10
    expect(decide({ now: 0, ready: [A, B], counts: counts({ [A]: 13, [B]: 7 }), memory: EMPTY, settings: { ...S, afterMs: 0 } }).targets).toStrictEqual([
      { backend: A, count: 3 },
    ]);
    // 12 is not over
    expect(decide({ now: 0, ready: [A, B], counts: counts({ [A]: 12, [B]: 8 }), memory: EMPTY, settings: { ...S, afterMs: 0 } }).why).toBe('balanced');
  });

  it('the per-minute budget: ⌊fraction × total⌋ (at least 1) in any 60 s, then nothing until old resets age out', () => {
    const settings = { ...S, afterMs: 0, maxFractionPerMinute: 0.1 };
    const c = counts({ [A]: 150, [B]: 150, [C]: 0 });
    let memory: RebalanceMemory = recordResets(EMPTY, 0, 20);
    let d = decide({ now: 5000, ready: [A, B, C], counts: c, memory, settings, settleMs: 0 });
    // 30 per minute, 20 used
    expect(d.targets).toStrictEqual([{ backend: A, count: 10 }]);
    memory = recordResets(d.memory, 5000, 10);
    d = decide({ now: 6000, ready: [A, B, C], counts: c, memory, settings, settleMs: 0 });
    expect(d).toMatchObject({ targets: [], why: 'minute budget spent' });
    // the first 20 age out at 60 s
    d = decide({ now: MINUTE_MS, ready: [A, B, C], counts: c, memory: d.memory, settings, settleMs: 0 });
    expect(d.targets).toStrictEqual([{ backend: A, count: 20 }]);
    expect(d.memory.resets).toStrictEqual([{ at: 5000, count: 10 }]);
    // a tiny fraction still allows one reset per minute
    const tiny = decide({ now: 0, ready: [A, B], counts: counts({ [A]: 3, [B]: 0 }), memory: EMPTY, settings: { ...settings, maxFractionPerMinute: 0.001 } });
    expect(tiny.targets).toStrictEqual([{ backend: A, count: 1 }]);
  });

  it('the per-second budget: resets in the last 1000 ms count against resetsPerSecond', () => {
    const memory = recordResets(EMPTY, 500, 15);
    const d = decide({ now: 1200, ready: [A, B], counts: counts({ [A]: 100, [B]: 0 }), memory, settings: { ...S, afterMs: 0 }, settleMs: 0 });
    expect(d.targets).toStrictEqual([{ backend: A, count: 5 }]);
    const spent = decide({
      now: 1200,
      ready: [A, B],
      counts: counts({ [A]: 100, [B]: 0 }),
      memory: recordResets(memory, 1100, 5),
      settings: { ...S, afterMs: 0 },
      settleMs: 0,
    });
    expect(spent.why).toBe('second budget spent');
  });

  it('flows reset in the last settleMs count as reconnected, evenly: the fair share is that of all flows, not of the survivors', () => {
    const settings = { ...S, afterMs: 0, resetsPerSecond: 1000, maxFractionPerMinute: 1 };
    // 150/150/0: both reset to the fair share, 100 resets
    const first = decide({ now: 0, ready: [A, B, C], counts: counts({ [A]: 150, [B]: 150, [C]: 0 }), memory: EMPTY, settings });
    expect(first.targets).toStrictEqual([
      { backend: A, count: 50 },
      { backend: B, count: 50 },
    ]);
    const memory = recordResets(first.memory, 0, 100, 300);
    // a second later no client has reconnected yet (100/100/0): expected 133/133/33, fair 100, bound 120
    const next = decide({ now: 1000, ready: [A, B, C], counts: counts({ [A]: 100, [B]: 100, [C]: 0 }), memory, settings });
    expect(next.fair).toBeCloseTo(100);
    expect(next.bound).toBeCloseTo(120);
    expect(next.total).toBe(200);
    expect(next.targets).toStrictEqual([
      { backend: A, count: 33 },
      { backend: B, count: 33 },
    ]);
    // without the pending reconnects: the survivors' fair share (66.7), a bound of 80
    expect(decide({ now: 1000, ready: [A, B, C], counts: counts({ [A]: 100, [B]: 100, [C]: 0 }), memory, settings, settleMs: 0 }).fair).toBeCloseTo(200 / 3);
    // expected 110/110/80 (fair 100, bound 120): within bounds, nothing more
    expect(decide({ now: 1000, ready: [A, B, C], counts: counts({ [A]: 77, [B]: 77, [C]: 46 }), memory, settings }).why).toBe('balanced');
    // once they are back (total 300 again) nothing is pending: 133/134/33 is over
    const back = decide({ now: 2000, ready: [A, B, C], counts: counts({ [A]: 133, [B]: 134, [C]: 33 }), memory, settings });
    expect(back.fair).toBeCloseTo(100);
    expect(back.targets).toStrictEqual([
      { backend: B, count: 34 },
      { backend: A, count: 33 },
    ]);
    // after the settle window they are no longer counted: 77/77/46 is fair 66.7, bound 80: balanced too
    expect(decide({ now: 10_000, ready: [A, B, C], counts: counts({ [A]: 77, [B]: 77, [C]: 46 }), memory, settings }).fair).toBeCloseTo(200 / 3);
  });

  it('no connections: nothing', () => {
    expect(decide({ now: 0, ready: [A, B], counts: new Map(), memory: EMPTY, settings: S })).toMatchObject({ total: 0, targets: [], why: 'no connections' });
  });
});

describe('decide: properties', () => {
  const backends = ['10.0.0.1:6443', '10.0.0.2:6443', '10.0.0.3:6443', '10.0.0.4:6443', '10.0.0.5:6443'];
  const arbInput = fc.record({
    n: fc.integer({ min: 0, max: 5 }),
    counts: fc.array(fc.integer({ min: 0, max: 5000 }), { minLength: 5, maxLength: 5 }),
    factor: fc.double({ min: 1.05, max: 10, noNaN: true }),
    afterMs: fc.integer({ min: 1000, max: 120_000 }),
    resetsPerSecond: fc.integer({ min: 1, max: 1000 }),
    maxFractionPerMinute: fc.double({ min: 0.001, max: 1, noNaN: true }),
    now: fc.integer({ min: 0, max: 10_000_000 }),
    overAgo: fc.array(fc.option(fc.integer({ min: 0, max: 200_000 })), { minLength: 5, maxLength: 5 }),
    resets: fc.array(fc.record({ ago: fc.integer({ min: 0, max: 120_000 }), count: fc.integer({ min: 1, max: 200 }) }), { maxLength: 10 }),
  });

  it(
    'every limit holds: never alone, only a ready backend over the bound for ≥ after, count ≥ 1 within excess, per-second and per-minute budgets',
    () => {
      fc.assert(
        fc.property(arbInput, (x) => {
          const ready = backends.slice(0, x.n);
          const c = new Map(backends.map((b, i) => [b, x.counts[i]!]));
          const overSince = new Map<string, number>();
          backends.forEach((b, i) => {
            const ago = x.overAgo[i];
            if (ago !== null && ago !== undefined) overSince.set(b, x.now - ago);
          });
          const memory: RebalanceMemory = { overSince, resets: x.resets.map((r) => ({ at: x.now - r.ago, count: r.count })) };
          const settings = { factor: x.factor, afterMs: x.afterMs, resetsPerSecond: x.resetsPerSecond, maxFractionPerMinute: x.maxFractionPerMinute };
          const d = decide({ now: x.now, ready, counts: c, memory, settings, settleMs: 0 });
          const total = ready.reduce((s, b) => s + c.get(b)!, 0);
          expect(d.total).toBe(total);
          // the memory keeps exactly the backends over now, and only resets of the last minute
          expect([...d.memory.overSince.keys()].sort()).toStrictEqual([...d.over].sort());
          expect(d.memory.resets.every((r) => x.now - r.at < MINUTE_MS)).toBe(true);
          if (d.targets.length === 0) return;
          expect(ready.length).toBeGreaterThanOrEqual(2);
          const fair = total / ready.length;
          const bound = x.factor * fair;
          let sum = 0;
          let prev = Infinity;
          for (const t of d.targets) {
            expect(ready).toContain(t.backend);
            const n = c.get(t.backend)!;
            expect(n).toBeGreaterThan(bound);
            expect(n).toBeLessThanOrEqual(prev);
            prev = n;
            expect(x.now - d.memory.overSince.get(t.backend)!).toBeGreaterThanOrEqual(x.afterMs);
            expect(t.count).toBeGreaterThanOrEqual(1);
            // never drained below its fair share
            expect(n - t.count).toBeGreaterThanOrEqual(Math.ceil(fair));
            sum += t.count;
          }
          expect(new Set(d.targets.map((t) => t.backend)).size).toBe(d.targets.length);
          const used = (ms: number): number => memory.resets.filter((r) => x.now - r.at < ms).reduce((s, r) => s + r.count, 0);
          expect(used(1000) + sum).toBeLessThanOrEqual(x.resetsPerSecond);
          expect(used(MINUTE_MS) + sum).toBeLessThanOrEqual(Math.max(1, Math.floor(x.maxFractionPerMinute * total)));
        }),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    'over simulated minutes with the decisions applied, no 60 s window holds more than the budget of its largest total',
    () => {
      fc.assert(
        fc.property(
          fc.array(fc.integer({ min: 0, max: 400 }), { minLength: 3, maxLength: 3 }),
          fc.double({ min: 0.001, max: 1, noNaN: true }),
          fc.integer({ min: 1, max: 50 }),
          (start, fraction, perSecond) => {
            const ready = [A, B, C];
            const c = new Map(ready.map((b, i) => [b, start[i]!]));
            let memory = EMPTY;
            const done: { at: number; count: number; total: number }[] = [];
            let next = 0;
            const settings = { factor: 1.2, afterMs: 1000, resetsPerSecond: perSecond, maxFractionPerMinute: fraction };
            for (let now = 0; now <= 180_000; now += 1000) {
              const d = decide({ now, ready, counts: c, memory, settings, settleMs: 0 });
              memory = d.memory;
              for (const t of d.targets) {
                // each reset flow reconnects to the next backend in turn (deterministic spread)
                c.set(t.backend, c.get(t.backend)! - t.count);
                for (let k = 0; k < t.count; k++, next++) c.set(ready[next % 3]!, c.get(ready[next % 3]!)! + 1);
                memory = recordResets(memory, now, t.count);
                done.push({ at: now, count: t.count, total: d.total });
              }
            }
            const total = start.reduce((a, b) => a + b, 0);
            for (const r of done) {
              const inWindow = done.filter((o) => o.at <= r.at && r.at - o.at < MINUTE_MS).reduce((s, o) => s + o.count, 0);
              expect(inWindow).toBeLessThanOrEqual(Math.max(1, Math.floor(fraction * total)));
              const inSecond = done.filter((o) => o.at <= r.at && r.at - o.at < 1000).reduce((s, o) => s + o.count, 0);
              expect(inSecond).toBeLessThanOrEqual(perSecond);
            }
          },
        ),
        fuzzParameters({ numRuns: Math.max(1, Math.floor(fuzzParameters().numRuns! / 25)) }),
      );
    },
    FUZZ_TIMEOUT_MS,
  );
});

/** A fake conntrack: flows per backend; a reset removes the oldest `count` and reconnects them round-robin. */
function fakeKernel(start: Record<string, number>) {
  const flows = new Map(Object.entries(start));
  const queries: ConntrackVipQuery[] = [];
  let failing: string | null = null;
  let resetFlows = 0;
  const read = (q: ConntrackVipQuery): ConntrackVipFlows => {
    queries.push(q);
    if (failing) throw new Error(failing);
    const out: ConntrackVipFlows = {
      backends: [...flows].filter(([, n]) => n > 0).map(([k, n]) => ({ address: k.split(':')[0]!, port: Number(k.split(':')[1]), established: n })),
      scanned: [...flows.values()].reduce((a, b) => a + b, 0) + 5,
      matched: [...flows.values()].reduce((a, b) => a + b, 0),
      timestamped: [...flows.values()].reduce((a, b) => a + b, 0),
    };
    if (q.reset) {
      // the flows of a backend are numbered; the oldest are the lowest numbers still there
      const key = `${q.reset.address}:${q.reset.port}`;
      const n = Math.min(q.reset.count, flows.get(key) ?? 0, q.reset.only?.length ?? Infinity);
      const chosen = Array.from({ length: n }, (_, i) => ({ source: '10.0.0.200', sourcePort: 40000 + resetFlows + i, vip: q.vips[0]! }));
      if (q.reset.dryRun) {
        out.reset = { deleted: 0, youngestStartNs: 0, flows: chosen };
      } else {
        flows.set(key, (flows.get(key) ?? 0) - n);
        resetFlows += n;
        out.reset = { deleted: n, youngestStartNs: 0, flows: chosen };
      }
    }
    return out;
  };
  return { flows, queries, read, fail: (m: string | null) => void (failing = m) };
}

describe('ConnectionTracker', () => {
  const target = { family: 4 as const, vips: ['10.0.0.100'], port: 6443, ready: [A, B, C] };
  const logs = (): { lines: { level: string; o: object; m: string }[]; info(o: object, m: string): void; warn(o: object, m: string): void } => {
    const lines: { level: string; o: object; m: string }[] = [];
    return { lines, info: (o, m) => void lines.push({ level: 'info', o, m }), warn: (o, m) => void lines.push({ level: 'warn', o, m }) };
  };

  /** Marks nothing, at once (the table's evict set is the applier's: nftables tests). */
  const markAll = (_family: 4 | 6, flows: readonly unknown[]): Promise<number> => Promise.resolve(flows.length);
  const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

  it('off: counts every round (ready backends without flows at 0), never resets', () => {
    const k = fakeKernel({ [A]: 150, [B]: 150 });
    let now = 0;
    const settings: RebalanceSettings = { enabled: false, ...S };
    const t = new ConnectionTracker({ read: k.read, target: () => target, settings: () => settings, evict: markAll, log: logs(), now: () => now });
    for (; now < 60_000; now += 1000) t.round();
    expect(k.queries.every((q) => q.reset === undefined)).toBe(true);
    expect(k.queries[0]).toStrictEqual({ family: 4, vips: ['10.0.0.100'], port: 6443 });
    const st = t.status();
    expect(st.connections).toStrictEqual({ [A]: 150, [B]: 150, [C]: 0 });
    expect(st.rebalance).toMatchObject({ enabled: false, state: 'off', resets: {}, lastRound: null, timestamped: 300 });
    expect(st.rebalance.over.map((o) => o.backend)).toStrictEqual([A, B]);
  });

  it('on: after `after`, resets the most loaded backend each second within the budgets until the spread is within the factor; logs each round', async () => {
    const k = fakeKernel({ [A]: 150, [B]: 150 });
    const log = logs();
    let now = 0;
    const settings: RebalanceSettings = { enabled: true, factor: 1.2, afterMs: 5000, resetsPerSecond: 10, maxFractionPerMinute: 1 };
    // the fake's reconnects: every deleted flow comes back, round-robin over the ready backends
    let next = 0;
    const read = (q: ConntrackVipQuery): ConntrackVipFlows => {
      const r = k.read(q);
      for (let i = 0; i < (r.reset?.deleted ?? 0); i++, next++) k.flows.set(target.ready[next % 3]!, (k.flows.get(target.ready[next % 3]!) ?? 0) + 1);
      return r;
    };
    const t = new ConnectionTracker({ read, target: () => target, settings: () => settings, evict: markAll, log, now: () => now });
    const stop = t.start();
    await tick();
    const busy: boolean[] = [];
    for (; now <= 60_000; now += 1000) {
      busy.push(t.round());
      // the round's reset: marked (the evict promise), then deleted
      await tick();
    }
    stop();
    // each reset is a choice (dry run) and then the delete of exactly the chosen flows
    const resets = k.queries.filter((q) => q.reset && !q.reset.dryRun);
    // the first reset at 5 s (over since 0)
    expect(log.lines.filter((l) => l.m === REBALANCE_MESSAGE).length).toBe(resets.length);
    expect((log.lines.find((l) => l.m === REBALANCE_MESSAGE)!.o as { before: number }).before).toBe(150);
    expect(resets.every((q) => q.reset!.count <= 10)).toBe(true);
    t.round();
    const final = t.status();
    const n = Object.values(final.connections);
    const fair = n.reduce((a, b) => a + b, 0) / 3;
    expect(Math.max(...n)).toBeLessThanOrEqual(1.2 * fair);
    expect(final.rebalance.state).toBe('balanced');
    expect(busy.at(-1)).toBe(false);
    expect(Object.values(final.rebalance.resets).reduce((a, b) => a + b, 0)).toBe(resets.reduce((s, q) => s + q.reset!.count, 0));
  });

  it('on, with evict: each reset chooses its flows (dry run), marks them, only then deletes those flows and probes their clients; a failing mark deletes nothing, logged once', async () => {
    const k = fakeKernel({ [A]: 150, [B]: 150 });
    const log = logs();
    let now = 0;
    const settings: RebalanceSettings = { enabled: true, factor: 1.2, afterMs: 0, resetsPerSecond: 10, maxFractionPerMinute: 1 };
    const steps: string[] = [];
    let failing: string | null = null;
    let release: () => void = () => undefined;
    const evict = (family: 4 | 6, flows: readonly { source: string; sourcePort: number; vip: string }[]): Promise<number> => {
      steps.push(`evict ${family} ${flows.map((f) => `${f.source}.${f.sourcePort}.${f.vip}`).join(',')}`);
      if (failing) return Promise.reject(new Error(failing));
      return new Promise((r) => (release = () => r(flows.length)));
    };
    const read = (q: ConntrackVipQuery): ConntrackVipFlows => {
      if (q.reset) steps.push(`${q.reset.dryRun ? 'choose' : 'delete'} ${q.reset.count}${q.reset.only ? ` only ${q.reset.only.length}` : ''}`);
      return k.read(q);
    };
    const probe = (vip: string, clients: readonly { address: string; port: number }[], backend: string): void =>
      void steps.push(`probe ${vip} ${clients.map((c) => `${c.address}.${c.port}`).join(',')} of ${backend}`);
    const t = new ConnectionTracker({ read, target: () => target, settings: () => settings, evict, probe, log, now: () => now });
    const stop = t.start();
    const tick = (): Promise<void> => new Promise((r) => setImmediate(r));
    await tick();
    const marked = Array.from({ length: 10 }, (_, i) => `10.0.0.200.${40000 + i}.10.0.0.100`).join(',');
    const probed = `probe 10.0.0.100 ${Array.from({ length: 10 }, (_, i) => `10.0.0.200.${40000 + i}`).join(',')} of ${A}`;
    // chosen and marked, not deleted while the mark is under way; a round meanwhile starts no second reset
    expect(steps).toStrictEqual(['choose 10', `evict 4 ${marked}`]);
    now = 1000;
    t.round();
    await tick();
    expect(steps).toHaveLength(2);
    release();
    await tick();
    // and then their clients are probed (a watch answers and meets the mark's RST)
    expect(steps).toStrictEqual(['choose 10', `evict 4 ${marked}`, 'delete 10 only 10', probed]);
    expect(t.status().rebalance.resets).toStrictEqual({ [A]: 10 });
    expect(log.lines.filter((l) => l.m === REBALANCE_MESSAGE)).toHaveLength(1);
    // a failing mark: nothing deleted, one warning however often
    failing = 'nft: No such file or directory';
    steps.length = 0;
    for (now = 2000; now <= 4000; now += 1000) {
      t.round();
      await tick();
    }
    expect(steps.filter((x) => x.startsWith('delete') || x.startsWith('probe'))).toStrictEqual([]);
    expect(steps.filter((x) => x.startsWith('evict'))).toHaveLength(3);
    expect(log.lines.filter((l) => l.level === 'warn' && /cannot mark the flows to reset/.test(l.m))).toHaveLength(1);
    expect(t.status().rebalance.resets).toStrictEqual({ [A]: 10 });
    stop();
  });

  it('a failing dump is logged once per message and leaves the last counts; no backend: no dump', () => {
    const k = fakeKernel({ [A]: 3 });
    const log = logs();
    let ready: string[] = [A, B];
    const t = new ConnectionTracker({ read: k.read, target: () => ({ ...target, ready }), settings: () => ({ enabled: true, ...S }), evict: markAll, log });
    t.round();
    k.fail('recv: ETIMEDOUT');
    t.round();
    t.round();
    expect(log.lines.filter((l) => l.level === 'warn').length).toBe(1);
    expect(t.status()).toMatchObject({ connections: { [A]: 3, [B]: 0 }, lastError: 'recv: ETIMEDOUT' });
    ready = [];
    const before = k.queries.length;
    expect(t.round()).toBe(false);
    expect(k.queries.length).toBe(before);
    expect(t.status().connections).toStrictEqual({});
  });
});

describe('connections in /metrics and on the status page', () => {
  const doc: StatusDocument = {
    ...STATUS_DOC,
    dataplane: {
      mode: 'nftables',
      backends: ['10.0.0.11:6443'],
      applies: 3,
      failures: 1,
      lastApplyMs: 4.5,
      lastError: null,
      flushedEntries: 7,
      probesSent: 8,
      probesFailed: 0,
      restores: 0,
      lastRestore: null,
      connections: { '10.0.0.11:6443': 142, '10.0.0.12:6443': 3 },
      rebalance: {
        enabled: true,
        factor: 1.2,
        afterMs: 60_000,
        resetsPerSecond: 5,
        maxFractionPerMinute: 0.1,
        state: 'reset',
        fair: 72.5,
        bound: 87,
        over: [],
        resets: { '10.0.0.11:6443': 9 },
        lastRound: null,
        timestamped: 145,
      },
    },
  };

  it('ballast_backend_connections and ballast_rebalance_resets_total per backend', async () => {
    const m = createMetrics();
    m.update(doc);
    const lines = (await m.registry.metrics()).split('\n');
    expect(lines).toContain('ballast_backend_connections{backend="10.0.0.11:6443"} 142');
    expect(lines).toContain('ballast_backend_connections{backend="10.0.0.12:6443"} 3');
    expect(lines).toContain('ballast_rebalance_resets_total{backend="10.0.0.11:6443"} 9');
    expect(lines).toContain('# TYPE ballast_rebalance_resets_total counter');
  });

  it('the backends table has a connections column from dataplane.connections (— where none was counted)', () => {
    const html = renderStatusPage(doc, { now: Date.parse('2026-11-29T20:01:00.000Z') });
    expect(html).toContain('<th scope="col">connections</th>');
    const row = (addr: string): string => html.split('<tr>').find((r) => r.includes(`<code>${addr}</code>`))!;
    expect(row('10.0.0.11:6443')).toMatch(/<td>142<\/td>/);
    expect(row('10.0.0.12:6443')).toMatch(/<td>3<\/td>/);
    expect(html).toContain('rebalancer on (factor 1.2, reset): 9 connections reset');
    const none = renderStatusPage({ ...doc, dataplane: { mode: 'none' } });
    expect(none.split('<tr>').find((r) => r.includes('<code>10.0.0.11:6443</code>'))).toContain('<span class="dim">—</span>');
  });
});

describe('enableConntrackTimestamps', () => {
  it('turns 0 into 1 and its undo puts 0 back; leaves 1 alone; a missing sysctl is a warning', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ballast-ts-'));
    try {
      const path = join(dir, 'nf_conntrack_timestamp');
      const lines: string[] = [];
      const log = { info: (_o: object, m: string) => void lines.push(`info ${m}`), warn: (_o: object, m: string) => void lines.push(`warn ${m}`) };
      writeFileSync(path, '0\n');
      const undo = enableConntrackTimestamps(log, path);
      expect(readFileSync(path, 'utf8')).toBe('1\n');
      undo();
      expect(readFileSync(path, 'utf8')).toBe('0\n');
      writeFileSync(path, '1\n');
      enableConntrackTimestamps(log, path)();
      expect(readFileSync(path, 'utf8')).toBe('1\n');
      enableConntrackTimestamps(log, join(dir, 'missing'))();
      expect(lines).toStrictEqual([
        'info conntrack timestamps on (the rebalancer resets the oldest connections first)',
        'warn cannot turn on conntrack timestamps: the rebalancer cannot tell the oldest connections',
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
