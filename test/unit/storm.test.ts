/**
 * The reconnect storm's pure figures (bench/storm-stats.ts): quantiles with "never", the
 * per-connection storm figures, the spread, client-go's backoff, the /proc parsers; the
 * summary's medians and ratios (bench/storm.ts); the guide's keepalived check script rendering.
 */
import { describe, expect, it } from 'vitest';
import {
  backoffMs,
  counterDelta,
  parseConntrackStats,
  parseNetstat,
  parseProcStat,
  parseSoftirq,
  spread,
  stormFigures,
  timeToFraction,
  upAt,
  type StormEvent,
} from '../../bench/storm-stats.js';
import { summarize, type RoundResult } from '../../bench/storm.js';
import { keepalivedConfig } from '../../lab/peers/keepalived.js';

describe('timeToFraction', () => {
  it('is the nearest-rank quantile; null (never) sorts last and is returned as null', () => {
    const xs = Array.from({ length: 100 }, (_, i) => 100 - i); // 1..100, shuffled order
    expect(timeToFraction(xs, 0.99)).toBe(99);
    expect(timeToFraction(xs, 1)).toBe(100);
    expect(timeToFraction(xs, 0.5)).toBe(50);
    // one of 100 never came back: 99 % is still reached, 100 % is not
    const withNever = [...xs.slice(1), null];
    expect(timeToFraction(withNever, 0.99)).toBe(99);
    expect(timeToFraction(withNever, 1)).toBeNull();
    // two never: 99 % is not reached either
    expect(timeToFraction([...xs.slice(2), null, null], 0.99)).toBeNull();
    expect(timeToFraction([], 0.5)).toBeNull();
    // ⌈0.99 · 1000⌉ = 990th smallest
    expect(
      timeToFraction(
        Array.from({ length: 1000 }, (_, i) => i + 1),
        0.99,
      ),
    ).toBe(990);
  });
});

describe('stormFigures', () => {
  const D = 10_000;
  const ev = (e: StormEvent['e'], c: number, t: number, extra: Partial<StormEvent> = {}): StormEvent => ({ e, c, t, ...extra });
  const events: StormEvent[] = [
    // before the death: 4 connections up; c3 dropped and came back before it
    ev('up', 1, 100, { node: 'n1' }),
    ev('up', 2, 110, { node: 'n2' }),
    ev('up', 3, 120, { node: 'n3' }),
    ev('up', 4, 130, { node: 'n1' }),
    ev('down', 3, 5000),
    ev('up', 3, 5100, { node: 'n2' }),
    // after the death
    ev('down', 1, D + 1000),
    ev('up', 1, D + 1500, { node: 'n2', ms: [100, 200, 10] }),
    ev('down', 2, D + 1200),
    ev('fail', 2, D + 1300, { why: 'ECONNREFUSED' }),
    ev('fail', 2, D + 2500, { why: 'ECONNREFUSED' }),
    ev('up', 2, D + 4000, { node: 'n3', ms: [300, 400, 20] }),
    ev('down', 3, D + 900),
    ev('fail', 3, D + 9000, { why: 'tls timeout' }),
    ev('down', 4, D + 1100),
    ev('up', 4, D + 1600, { node: 'n2', ms: [50, 60, 5] }),
    // c4 again, after it was back: the first up counts
    ev('down', 4, D + 2000),
    ev('up', 4, D + 2100, { node: 'n3' }),
    // a connection that was not up at the death is ignored
    ev('up', 9, D + 3000, { node: 'n3' }),
    { e: 'end', t: D + 20_000 },
  ];

  it('upAt: the connections whose last event by then is "up"', () => {
    expect(upAt(events, D)).toStrictEqual([1, 2, 3, 4]);
    expect(upAt(events, 5050)).toStrictEqual([1, 2, 4]);
    expect(upAt(events, D + 1150)).toStrictEqual([2]);
  });

  it('times from the death, detection, per-connection reconnect, failures and the client-side spread', () => {
    const f = stormFigures(events, D, upAt(events, D));
    expect(f).toStrictEqual({
      connections: 4,
      reestablished: 3,
      // back at 1500, 1600, 4000 and never: 50 % = 2nd = 1600; 99 % = 4th = never
      t50Ms: 1600,
      t99Ms: null,
      t100Ms: null,
      // noticed at 900, 1000, 1100, 1200
      detectP50Ms: 1000,
      detectP99Ms: 1200,
      // 500 (c1), 2800 (c2), 500 (c4)
      reconnectP50Ms: 500,
      reconnectP99Ms: 2800,
      failed: 3,
      failReasons: { ECONNREFUSED: 2, 'tls timeout': 1 },
      retried: 2,
      perNode: { n2: 2, n3: 1 },
      steps: { tcp: [100, 300], tls: [200, 400], headers: [10, 20] },
    });
    // once c3 is back too, 100 % is its time
    const all = stormFigures([...events, ev('up', 3, D + 12_000, { node: 'n2' })], D, [1, 2, 3, 4]);
    expect([all.t99Ms, all.t100Ms, all.reestablished]).toStrictEqual([12_000, 12_000, 4]);
  });
});

describe('spread', () => {
  it('counts every listed backend (0 when absent), the busiest over the fair share', () => {
    expect(spread({ n2: 1000, n3: 1000 }, ['n2', 'n3'])).toStrictEqual({ counts: { n2: 1000, n3: 1000 }, total: 2000, maxOverFair: 1 });
    expect(spread({ n2: 1500, n3: 500, n1: 7 }, ['n2', 'n3'])).toStrictEqual({ counts: { n2: 1500, n3: 500 }, total: 2000, maxOverFair: 1.5 });
    expect(spread({ n2: 30 }, ['n2', 'n3'])).toStrictEqual({ counts: { n2: 30, n3: 0 }, total: 30, maxOverFair: 2 });
    expect(spread({}, ['n2', 'n3']).maxOverFair).toBeNull();
  });
});

describe('backoffMs (client-go exponential backoff manager: 800 ms, ×2, cap 30 s, jitter 1.0)', () => {
  it('doubles per failure from the base, caps, and adds up to 100 % jitter', () => {
    expect([0, 1, 2, 3, 5].map((k) => backoffMs(k, 800, 30_000, 0))).toStrictEqual([800, 1600, 3200, 6400, 25_600]);
    expect(backoffMs(6, 800, 30_000, 0)).toBe(30_000);
    expect(backoffMs(1000, 800, 30_000, 0)).toBe(30_000);
    expect(backoffMs(0, 800, 30_000, 0.5)).toBe(1200);
    expect(backoffMs(10, 800, 30_000, 1)).toBe(60_000);
  });
});

describe('/proc parsers', () => {
  it('parseProcStat: utime, stime, cutime, cstime after the command name (spaces and parentheses in it)', () => {
    const line = '4242 (node (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 123 45 6 7 20 0 11 0 500 1000000 5000 18446744073709551615';
    expect(parseProcStat(line)).toStrictEqual({ utime: 123, stime: 45, cutime: 6, cstime: 7 });
    expect(() => parseProcStat('garbage')).toThrow(/not a \/proc\/PID\/stat line/);
  });

  it('parseSoftirq: the 7th value of the cpu line', () => {
    expect(parseSoftirq('cpu  100 2 300 4000 5 6 77 0 0 0\ncpu0 1 2 3 4 5 6 7 0 0 0\n')).toBe(77);
    expect(() => parseSoftirq('intr 1 2 3\n')).toThrow(/no cpu line/);
  });

  it('parseNetstat: header/value line pairs as Proto:Name', () => {
    const text = 'TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 12 13\nIpExt: InNoRoutes\nIpExt: 4\nTcp: RtoAlgorithm RetransSegs\nTcp: 1 99\n';
    expect(parseNetstat(text)).toStrictEqual({
      'TcpExt:SyncookiesSent': 0,
      'TcpExt:ListenOverflows': 12,
      'TcpExt:ListenDrops': 13,
      'IpExt:InNoRoutes': 4,
      'Tcp:RtoAlgorithm': 1,
      'Tcp:RetransSegs': 99,
    });
  });

  it('parseConntrackStats sums over CPUs; counterDelta subtracts (absent = 0)', () => {
    const s = parseConntrackStats('cpu=0   \tfound=1 invalid=2 insert=0 insert_failed=3 drop=0\ncpu=1   \tfound=0 invalid=5 insert=0 insert_failed=0 drop=1\n');
    expect(s).toStrictEqual({ found: 1, invalid: 7, insert: 0, insert_failed: 3, drop: 1 });
    expect(counterDelta({ drop: 1 }, s, ['drop', 'invalid', 'early_drop'])).toStrictEqual({ drop: 0, invalid: 7, early_drop: 0 });
  });
});

describe('summarize', () => {
  const round = (setup: 'ballast' | 'haproxy', n: number, t99: number, failed: number, cpuMs: number, split: [number, number]): RoundResult => ({
    round: n,
    setup,
    figures: {
      connections: 2000,
      reestablished: 2000,
      t50Ms: t99 / 2,
      t99Ms: t99,
      t100Ms: t99 + 100,
      detectP50Ms: 1,
      detectP99Ms: 2,
      reconnectP50Ms: 3,
      reconnectP99Ms: t99 - 1000,
      failed,
      failReasons: {},
      retried: failed,
      perNode: {},
      steps: { tcp: [1, 2], tls: [3, 4], headers: [5, 6] },
    },
    standinSpread: spread({ n2: split[0], n3: split[1] }, ['n2', 'n3']),
    cpu: { daemonMs: { x: cpuMs }, totalMs: cpuMs, windowMs: 10_000, pctOfCore: cpuMs / 100, machineSoftirqMs: 5 },
    steadyDrops: 0,
    newHolder: 'n2',
  });

  it('medians per setup over the rounds that worked, ratios ballast / keepalived+haproxy', () => {
    const rounds: RoundResult[] = [
      round('ballast', 1, 4000, 0, 100, [1000, 1000]),
      round('haproxy', 1, 8000, 10, 400, [1200, 800]),
      round('ballast', 2, 5000, 2, 300, [1000, 1000]),
      round('haproxy', 2, 9000, 20, 600, [1200, 800]),
      round('ballast', 3, 6000, 4, 200, [1100, 900]),
      round('haproxy', 3, 10_000, 30, 500, [1200, 800]),
      { round: 4, setup: 'ballast', figures: null, standinSpread: null, cpu: null, steadyDrops: 0, newHolder: null, error: 'start failed' },
    ];
    const { summary, ratios } = summarize(rounds);
    expect(
      summary.map((s) => [s.setup, s.rounds, s.t99.median, s.t100.median, s.failed.median, s.cpuMs.median, s.maxOverFair.median, s.incomplete]),
    ).toStrictEqual([
      ['ballast', 3, 5000, 5100, 2, 200, 1, 0],
      ['haproxy', 3, 9000, 9100, 20, 500, 1.2, 0],
    ]);
    expect(summary.map((s) => [s.failedTotal, s.roundsWithFailures])).toStrictEqual([
      [6, 2],
      [60, 3],
    ]);
    expect(ratios).toStrictEqual({ t99: 0.56, t100: 0.56, reconnectP99: 0.5, failed: 0.1, maxOverFair: 0.83, cpuMs: 0.4 });
  });
});

describe("keepalived trackScripts (the kubeadm guide's check_apiserver)", () => {
  it("renders the vrrp_script block and the instance's track_script; rejects a relative or quoted script", () => {
    const cfg = keepalivedConfig({
      priority: 100,
      vips: ['10.0.0.100/32'],
      trackScripts: [
        {
          name: 'check_apiserver',
          script: '/usr/bin/curl -sfk --max-time 2 https://localhost:6443/readyz -o /dev/null',
          intervalS: 3,
          weight: -2,
          fall: 10,
          rise: 2,
        },
      ],
    });
    expect(cfg).toContain(
      'vrrp_script check_apiserver {\n  script "/usr/bin/curl -sfk --max-time 2 https://localhost:6443/readyz -o /dev/null"\n  interval 3\n  weight -2\n  fall 10\n  rise 2\n}\n',
    );
    expect(cfg).toMatch(/ {2}track_script \{\n {4}check_apiserver\n {2}\}\n\}/);
    expect(cfg.indexOf('vrrp_script')).toBeLessThan(cfg.indexOf('vrrp_instance'));
    expect(() => keepalivedConfig({ priority: 100, vips: ['10.0.0.100'], trackScripts: [{ name: 'x', script: 'curl x', intervalS: 3 }] })).toThrow(
      /trackScripts\[x\]\.script/,
    );
    expect(() => keepalivedConfig({ priority: 100, vips: ['10.0.0.100'], trackScripts: [{ name: 'x', script: '/bin/sh -c "x"', intervalS: 3 }] })).toThrow(
      /without double quotes/,
    );
    expect(() =>
      keepalivedConfig({ priority: 100, vips: ['10.0.0.100'], trackScripts: [{ name: 'x', script: '/bin/true', intervalS: 3, weight: 300 }] }),
    ).toThrow(/weight/);
  });
});
