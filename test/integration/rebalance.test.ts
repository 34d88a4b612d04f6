/**
 * Watch rebalancing, end to end on the lab: 300 long-lived TLS connections
 * (watch-like: idle but for one small request every ~2 s, lab/clients/watchers.ts) from the
 * client through the VIP held by n1 to the stand-ins on n1, n2, n3. n3's apiserver is restarted
 * the way kube-apiserver restarts (unready first, so it leaves the ruleset; then stopped, which
 * closes its connections; then started): its clients reconnect to n1 and n2, and n3 comes back
 * with ~0 connections.
 *   - rebalancer off: the spread stays skewed (n3 ~0) for the whole observation window, the
 *     agent counts the same spread in conntrack (ballast_backend_connections and /status
 *     dataplane.connections, against the clients' own count of who serves them) and says the
 *     backends are over (state `off`);
 *   - rebalancer on (a reload with dataplane.rebalance.enabled): within a derived time every
 *     backend holds at most factor × its fair share, by the agent's count AND the clients';
 *     the clients that were reset reconnect and are served (0 failed reconnects, 0 failed
 *     attempts), every round is logged and counted in ballast_rebalance_resets_total.
 * Conntrack timestamps are on in n1's namespace from the start (as an operator who plans to turn
 * the rebalancer on sets them; the agent turns them on itself when it starts with it enabled).
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compiledScript, Lab, onJsonLines, type LabProcess } from '../../lab/lab.js';
import { agentConfig, startAgent, waitForHolder, type AgentSettings, type LabAgent } from '../../lab/cluster.js';
import type { WatchersReport } from '../../lab/clients/watchers.js';
import { REBALANCE_MESSAGE } from '../../src/dataplane/rebalance.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'breb';
const SUBNET = 113;
const WATCHERS = 300;
/** ms between a watcher's requests (±25 %): a reset reaches the client with its next one */
const WATCH_INTERVAL_MS = 1000;
const FACTOR = 1.2;
const AFTER_MS = 1000;
const RESETS_PER_SECOND = 100;
/** the tracker's round while a backend is over (rebalance.ts busyPeriodMs) */
const BUSY_PERIOD_MS = 1000;
const OFF_WINDOW_MS = 2000;
/** TLS handshakes of the reconnects on 2 shared cores, the agent's status calls */
const MARGIN_MS = 2000;

describe.skipIf(needs('root'))('watch rebalancing (root; skipped otherwise)', () => {
  let lab: Lab;
  let agent: LabAgent | undefined;
  let watchers: LabProcess | undefined;

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false, apiservers: true });
  });
  afterAll(async () => {
    await watchers?.stop('SIGTERM').catch(() => undefined);
    await agent?.stop('SIGTERM').catch(() => undefined);
    await lab?.teardown();
  });

  it('300 watches, one apiserver restarted: skewed with the rebalancer off, within factor × fair share with it on, every reset client served again', async () => {
    const t0 = Date.now();
    const n1 = lab.nodes[0]!;
    const n3 = lab.nodes[2]!;
    await lab.exec(n1.netns, ['sysctl', '-qw', 'net.netfilter.nf_conntrack_timestamp=1']);
    const settings = (enabled: boolean): AgentSettings => ({
      priority: 100,
      balance: true,
      healthInterval: '200ms',
      extra: { dataplane: { rebalance: { enabled, factor: FACTOR, after: `${AFTER_MS}ms`, resetsPerSecond: RESETS_PER_SECOND, maxFractionPerMinute: 1 } } },
    });
    agent = await startAgent(lab, n1, settings(false));
    const a = agent;
    await waitForHolder(lab, lab.vip4, 'n1');
    const inRuleset = (n: number) => (s: Awaited<ReturnType<LabAgent['status']>>) => s.dataplane.mode === 'nftables' && s.dataplane.backends.length === n;
    await waitFor(() => a.status(), inRuleset(3), { timeoutMs: 5000, intervalMs: 50, what: '3 backends in the ruleset' });

    // the clients
    let last: WatchersReport | undefined;
    watchers = lab.spawn(
      lab.client.netns,
      [
        process.execPath,
        compiledScript('watchers'),
        '--url',
        `https://${lab.vip4}:6443/version`,
        '--ca',
        lab.ca.certFile,
        '--count',
        String(WATCHERS),
        '--interval',
        String(WATCH_INTERVAL_MS),
        '--duration',
        '40000',
        '--open-rate',
        '300',
        '--report',
        '100',
      ],
      { logFile: 'watchers.log' },
    );
    onJsonLines<WatchersReport>(watchers, (r) => void (last = r));
    const report = (): WatchersReport =>
      last ?? {
        t: 0,
        open: 0,
        opening: 0,
        nodes: {},
        oldest: {},
        connects: 0,
        reconnects: 0,
        failedAttempts: 0,
        failedReconnects: 0,
        requests: 0,
        failedRequests: 0,
        switched: 0,
      };
    await waitFor(
      async () => report(),
      (r) => r.open === WATCHERS,
      { timeoutMs: 8000, intervalMs: 100, what: `${WATCHERS} watchers connected` },
    );
    const initial = { ...report().nodes };

    // n3 restarts: unready (leaves the ruleset: no new connection goes there), stopped, started
    await lab.setReady(n3, false);
    await waitFor(() => a.status(), inRuleset(2), { timeoutMs: 3000, intervalMs: 50, what: 'n3 out of the ruleset' });
    await lab.stopApiserver(n3);
    await waitFor(
      async () => report(),
      (r) => r.open === WATCHERS && (r.nodes.n3 ?? 0) === 0,
      { timeoutMs: 5000, intervalMs: 50, what: "n3's watchers reconnected elsewhere" },
    );
    await lab.startApiserver(n3);
    await waitFor(() => a.status(), inRuleset(3), { timeoutMs: 3000, intervalMs: 50, what: 'n3 back in the ruleset' });
    const afterRestart = { ...report().nodes };

    /** The agent's count from /metrics: backend name (n1…) → established connections. */
    const metricCounts = async (): Promise<Record<string, number>> => {
      const text = await a.admin('/metrics');
      const out: Record<string, number> = {};
      for (const n of lab.nodes)
        out[n.name] = Number(
          new RegExp(`^ballast_backend_connections\\{backend="${n.ipv4.replace(/\./g, '\\.')}:6443"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN,
        );
      return out;
    };
    const spread = (c: Record<string, number>): { max: number; fair: number; bound: number; within: boolean } => {
      const v = lab.nodes.map((n) => c[n.name] ?? 0);
      const fair = v.reduce((x, y) => x + y, 0) / v.length;
      const max = Math.max(...v);
      return { max, fair, bound: FACTOR * fair, within: max <= FACTOR * fair };
    };
    const show = (c: Record<string, number>): string => lab.nodes.map((n) => `${n.name} ${c[n.name] ?? 0}`).join(' / ');

    // rebalancer off: stays skewed for the whole window (the ruleset change made the tracker count at once)
    await waitFor(metricCounts, (m) => m.n3 === 0 && m.n1! + m.n2! >= WATCHERS - 2, {
      timeoutMs: 6000,
      intervalMs: 100,
      what: "the agent's count to show n3 empty",
    });
    const marks: Record<string, number> = { restarted: Date.now() - t0 };
    const offStart = Date.now();
    const offSamples: { clients: Record<string, number>; metric: Record<string, number> }[] = [];
    while (Date.now() - offStart < OFF_WINDOW_MS) {
      offSamples.push({ clients: { ...report().nodes }, metric: await metricCounts() });
      await sleep(500);
    }
    const offStatus = await a.status();
    const off = offSamples.at(-1)!;
    const failedAttemptsBefore = report().failedAttempts;
    const reconnectsBefore = report().reconnects;
    marks.offDone = Date.now() - t0;

    // rebalancer on: a reload; the tracker acts at once
    writeFileSync(a.configPath, agentConfig(lab, n1, settings(true)));
    const reloadLogged = a.logLines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('configuration reload')).length;
    const onAt = Date.now();
    a.proc.kill('SIGHUP');
    await waitFor(
      async () => a.logLines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('configuration reload')).length,
      (n) => n > reloadLogged,
      { timeoutMs: 5000, intervalMs: 20, what: 'the reload logged' },
    );
    // the derived bound: after; the rounds (one per busy period): each reset flow reconnects
    // uniformly, landing on one of the k overloaded backends again with probability k/n, so a
    // round that resets them to their fair share leaves (k/n) of their excess E0, and the spread is
    // within bounds once that is at most k × (factor − 1) × fair: ⌈log(k (f − 1) fair / E0) /
    // log(k / n)⌉ rounds, one more for the binomial scatter; the resets needed, E0 × n / (n − k),
    // at resetsPerSecond; each client learns of its reset with its next request (≤ 1.25 × interval); a margin
    const s0 = spread(off.metric);
    const n = lab.nodes.length;
    const overNow = lab.nodes.filter((x) => (off.metric[x.name] ?? 0) > s0.bound);
    const k = overNow.length;
    const excess = overNow.reduce((x, b) => x + ((off.metric[b.name] ?? 0) - Math.ceil(s0.fair)), 0);
    const rounds0 = Math.max(1, Math.ceil(Math.log((k * (FACTOR - 1) * s0.fair) / excess) / Math.log(k / n))) + 1;
    const resetsNeeded = (excess * n) / (n - k);
    const boundMs = AFTER_MS + rounds0 * BUSY_PERIOD_MS + Math.ceil(resetsNeeded / RESETS_PER_SECOND) * 1000 + 1.25 * WATCH_INTERVAL_MS + MARGIN_MS;
    let settled: { at: number; clients: Record<string, number>; metric: Record<string, number> } | undefined;
    while (Date.now() - onAt < boundMs + 3000) {
      const clients = { ...report().nodes };
      const metric = await metricCounts();
      if (spread(clients).within && spread(metric).within) {
        settled = { at: Date.now() - onAt, clients, metric };
        break;
      }
      await sleep(100);
    }
    // and it stays there, with every client back (one more busy round and a request interval)
    await sleep(BUSY_PERIOD_MS + 1.25 * WATCH_INTERVAL_MS);
    marks.end = Date.now() - t0;
    const finalAt = Date.now();
    const final = { clients: { ...report().nodes }, metric: await metricCounts(), r: report() };
    const onStatus = await a.status();
    const rounds = a.logLines().filter((l) => l.msg === REBALANCE_MESSAGE);
    const resetLogged = rounds.reduce((x, l) => x + Number(l.reset), 0);
    const metricsText = await a.admin('/metrics');
    const resetMetric = [...metricsText.matchAll(/^ballast_rebalance_resets_total\{backend="[^"]+"\} (\d+)$/gm)].reduce((x, m) => x + Number(m[1]), 0);

    console.log(
      `rebalance: initial ${show(initial)}; after n3's restart ${show(afterRestart)}; ` +
        `off (${OFF_WINDOW_MS} ms window, last sample) clients ${show(off.clients)}, agent ${show(off.metric)}, state ${offStatus.dataplane.mode === 'nftables' ? offStatus.dataplane.rebalance?.state : '-'}; ` +
        `on: within ${FACTOR} x fair after ${settled?.at ?? 'never'} ms (bound ${Math.round(boundMs)} ms = after ${AFTER_MS} + ${rounds0} rounds x ${BUSY_PERIOD_MS} + ceil(${resetsNeeded.toFixed(0)} resets / ${RESETS_PER_SECOND}/s) s + ${1.25 * WATCH_INTERVAL_MS} + ${MARGIN_MS}), ` +
        `settled clients ${settled ? show(settled.clients) : '-'}, agent ${settled ? show(settled.metric) : '-'}; final clients ${show(final.clients)}, agent ${show(final.metric)}; ` +
        `${rounds.length} rounds, ${resetLogged} resets (metric ${resetMetric}, probes ${onStatus.dataplane.mode === 'nftables' ? onStatus.dataplane.probesSent : '-'}), reconnects ${final.r.reconnects - reconnectsBefore}, failed attempts ${final.r.failedAttempts - failedAttemptsBefore}, failed reconnects ${final.r.failedReconnects}; test ms: ${JSON.stringify(marks)}`,
    );

    // after the restart n3 had (almost) nothing; with the rebalancer off it stays that way
    expect(afterRestart.n3 ?? 0).toBe(0);
    for (const s of offSamples) {
      expect(spread(s.clients).within).toBe(false);
      expect(spread(s.metric).within).toBe(false);
      expect(s.clients.n3 ?? 0).toBe(0);
      expect(s.metric.n3).toBe(0);
    }
    // the agent's count is the clients' own (conntrack ESTABLISHED entries = open watch connections)
    for (const n of ['n1', 'n2', 'n3']) expect(Math.abs((off.metric[n] ?? 0) - (off.clients[n] ?? 0))).toBeLessThanOrEqual(2);
    expect(offStatus.dataplane).toMatchObject({ mode: 'nftables', rebalance: { enabled: false, state: 'off' } });
    expect(rounds.filter((l) => Date.parse(String(l.time)) < onAt)).toStrictEqual([]);

    // on: within bounds in time, by both counts, and still within them a round later
    expect(settled).toBeDefined();
    expect(settled!.at).toBeLessThanOrEqual(boundMs);
    expect(spread(final.clients).within).toBe(true);
    expect(spread(final.metric).within).toBe(true);
    expect(final.r.open).toBe(WATCHERS);
    // every reset client got served again: no failed reconnect, not even a failed attempt
    expect(final.r.failedReconnects).toBe(0);
    expect(final.r.failedAttempts - failedAttemptsBefore).toBe(0);
    // (the resets of a round logged too late for their clients' next request, ≤ 1.25 × the
    // interval, to have come before `final` was read cannot show in it yet)
    const resetSeeable = rounds.filter((l) => Date.parse(String(l.time)) <= finalAt - 1.25 * WATCH_INTERVAL_MS).reduce((x, l) => x + Number(l.reset), 0);
    expect(final.r.reconnects - reconnectsBefore).toBeGreaterThanOrEqual(resetSeeable - 2);
    // each round logged and counted
    expect(rounds.length).toBeGreaterThan(0);
    expect(resetMetric).toBe(resetLogged);
    expect(onStatus.dataplane).toMatchObject({ mode: 'nftables', rebalance: { enabled: true, resets: expect.any(Object) } });
    // the client of every reset flow was probed too (two each), so that one that only receives is reset at once
    expect(onStatus.dataplane.mode === 'nftables' && onStatus.dataplane.probesSent).toBeGreaterThanOrEqual(2 * resetLogged);
    // never n3 (it was under its share), never more than resetsPerSecond in one round
    for (const l of rounds) {
      expect(l.backend).not.toBe(`${n3.ipv4}:6443`);
      expect(Number(l.reset)).toBeLessThanOrEqual(RESETS_PER_SECOND);
    }
  }, 40_000);
});
