/**
 * A backend that comes and goes: an address the `kubernetes` EndpointSlice
 * lists for a while, then not, then again, again and again, while nothing answers at it (node 2's
 * kernel refuses its port 6443). A real agent on node 1 follows the slice from the lab's stand-in
 * apiserver (real list and watch); a real Prometheus in node 1's namespace scrapes the agent's
 * /metrics (its own exposition parser) and evaluates the shipped BallastBackendDown rule with only
 * `for:` shortened. The agent remembers a backend that left for `apiserver.health.rememberDeparted`.
 *
 * What must hold, from the real /status and through Prometheus:
 * - each return resumes the state it left with (`down`), never `unknown` again, and the agent logs
 *   one health transition for it (unknown → down) in the whole churn;
 * - `left` / `returned` in /status grow by one per leave / return;
 * - while unlisted its series stay: `ballast_backend_listed` 0, `ballast_backend_up` 0,
 *   `ballast_backend_state{state="down"}` 1 (departedBackends in /status holds it);
 * - so the alert's `for:` runs across the gaps: BallastBackendDown is active since the first
 *   listing and fires, though no single listing lasts `for:`;
 * - forgotten `rememberDeparted` after it left for good: gone from /status and its series gone
 *   from Prometheus; listed again after that it starts anew (left 0, returned 0, unknown first).
 *
 * Scaled from the issue's "listed 15 s of every 20 s" and `for: 1m`: listed LISTED_MS, unlisted
 * UNLISTED_MS, `for:` FOR_MS (longer than any one listing, shorter than the churn), remembered
 * REMEMBER_MS (longer than any one gap).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { Lab, LabNode, LabProcess } from '../../lab/lab.js';
import { hasCurl, startAgent, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import type { ElectionStatusDocument } from '../../src/observe/status.js';
import { alertRules, type RulesFile } from '../support/monitoring.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bcg';
const SUBNET = 203;
const TOKEN = 'lab-backend-churn-token-0123456789';
/** health checks: every 200 ms, rise 2, fall 3 (an `unknown` return would last at least 2 intervals) */
const INTERVAL_MS = 200;
const FALL = 3;
/** apiserver.health.rememberDeparted */
const REMEMBER_MS = 4000;
/** each listing and each gap, from the set change the agent logs */
const LISTED_MS = 1500;
const UNLISTED_MS = 1000;
/** times the address comes back */
const RETURNS = 3;
/** Prometheus's scrape and evaluation interval */
const STEP_MS = 500;
/** BallastBackendDown's `for:` here (1m in the shipped file): above LISTED_MS and the scrapes' lag, below the churn */
const FOR_MS = 3000;
/** Scheduling on 2 shared cores, a scrape in flight, curl's start. */
const MARGIN_MS = 1000;
const WEB = '127.0.0.1:9090';

interface PromAlert {
  labels: Record<string, string>;
  state: 'pending' | 'firing';
  activeAt: string;
}

describe.skipIf(needs('root', 'prometheus'))('a backend that comes and goes (root, prometheus; skipped otherwise)', () => {
  let lab: Lab;
  let n1: LabNode;
  let agent: LabAgent | undefined;
  let prom: LabProcess | undefined;
  /** the address that comes and goes, and the one that stays */
  let churner: string;
  let served: string;

  /** GET `url` inside node 1's namespace; the body. @throws unless it answers 2xx. */
  const get = async (url: string): Promise<string> => {
    const argv = hasCurl()
      ? ['curl', '-sSf', '--max-time', '2', url]
      : [
          process.execPath,
          '-e',
          `fetch(process.argv[1]).then(async (r) => { process.stdout.write(await r.text()); process.exit(r.ok ? 0 : 1); }, () => process.exit(2))`,
          url,
        ];
    return (await lab.exec(n1.netns, argv, { timeoutMs: 5000 })).stdout;
  };
  /** Prometheus's HTTP API at `path` (with `query`, URL-encoded): its `data`. */
  async function api<T>(path: string, query?: string): Promise<T> {
    const text = await get(`http://${WEB}${path}${query === undefined ? '' : `?query=${encodeURIComponent(query)}`}`);
    const body = JSON.parse(text) as { status: string; data: T };
    if (body.status !== 'success') throw new Error(`${path}: ${text}`);
    return body.data;
  }
  /** The value of each series `expr` selects now, by its `__name__` and `state` labels: `ballast_backend_state/down` → '1'. */
  const series = async (expr: string): Promise<Record<string, string>> =>
    Object.fromEntries(
      (await api<{ result: { metric: Record<string, string>; value: [number, string] }[] }>('/api/v1/query', expr)).result.map((r) => [
        `${r.metric.__name__}${r.metric.state === undefined ? '' : `/${r.metric.state}`}`,
        r.value[1],
      ]),
    );
  /** The churner's series Prometheus has now: listed, up and its state (a 1 or a 0 for each state). */
  const churnerSeries = (): Promise<Record<string, string>> => series(`{__name__=~"ballast_backend_(listed|up|state)", backend="${churner}"}`);
  const alerts = async (): Promise<PromAlert[]> =>
    (await api<{ alerts: PromAlert[] }>('/api/v1/alerts')).alerts.filter((a) => a.labels.alertname === 'BallastBackendDown' && a.labels.backend === churner);

  const status = async (): Promise<ElectionStatusDocument> => {
    for (let i = 1; ; i++) {
      try {
        return await agent!.status();
      } catch (err) {
        if (i >= 3) throw err;
      }
    }
  };
  /** the churner's entry in /status `backends`, or in `departedBackends` */
  const listed = (s: ElectionStatusDocument) => s.backends.find((b) => b.address === churner);
  const departed = (s: ElectionStatusDocument) => s.departedBackends?.find((b) => b.address === churner);
  /** Changes the slice and waits for the agent's "backend set changed" line that follows; its time (ms since the epoch). */
  const change = async (op: 'add' | 'remove'): Promise<number> => {
    const lines = (): Record<string, unknown>[] => agent!.logLines().filter((l) => l.msg === 'discovery: backend set changed');
    const seen = lines().length;
    lab.sliceChange({ op, address: lab.nodes[1]!.ipv4 });
    const l = await waitFor(
      () => lines().slice(seen),
      (ls) => ls.some((x) => (x.backends as string[]).some((b) => b.startsWith(`${churner} `)) === (op === 'add')),
      { timeoutMs: 5000, intervalMs: 20, what: `the agent to see the slice ${op} ${churner}` },
    );
    return Date.parse(String(l.at(-1)!.time));
  };
  /** the agent's health transitions of the churner so far: `unknown→down` */
  const transitions = (): string[] =>
    agent!
      .logLines()
      .filter((l) => l.msg === 'backend health' && l.backend === churner)
      .map((l) => `${String(l.from)}→${String(l.to)}`);

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: false });
    n1 = lab.nodes[0]!;
    // node 2 runs nothing: its kernel refuses port 6443 (a backend that is down, not ready, and listed)
    churner = `${lab.nodes[1]!.ipv4}:6443`;
    served = `${n1.ipv4}:6443`;
    await lab.startApiservers({ store: true, token: TOKEN, nodes: [n1] });
    agent = await startAgent(lab, n1, {
      priority: 150,
      extra: {
        apiserver: {
          port: 6443,
          backends: [served],
          health: {
            caFile: lab.ca.certFile,
            interval: `${INTERVAL_MS}ms`,
            timeout: `${INTERVAL_MS}ms`,
            rise: 2,
            fall: FALL,
            rememberDeparted: `${REMEMBER_MS}ms`,
          },
        },
        discovery: { kubeconfig: await lab.writeKubeconfig(n1, { token: TOKEN }), lastKnownFile: join(lab.dir, 'n1-backends.json') },
      },
    });
    // the shipped BallastBackendDown, only its `for:` shortened
    const rule = alertRules().find((r) => r.alert === 'BallastBackendDown')!;
    expect(rule.for).toBe('1m');
    const dir = join(lab.dir, 'prometheus');
    mkdirSync(dir);
    const rules: RulesFile = { groups: [{ name: 'ballast', rules: [{ ...rule, for: `${FOR_MS}ms` }] }] };
    writeFileSync(join(dir, 'rules.yaml'), stringify(rules));
    writeFileSync(
      join(dir, 'prometheus.yml'),
      stringify({
        global: { scrape_interval: `${STEP_MS}ms`, evaluation_interval: `${STEP_MS}ms`, scrape_timeout: `${STEP_MS - 100}ms` },
        rule_files: [join(dir, 'rules.yaml')],
        scrape_configs: [{ job_name: 'ballast', static_configs: [{ targets: ['127.0.0.1:9641'], labels: { cluster: 'lab' } }] }],
      }),
    );
    prom = lab.spawn(
      n1.netns,
      [
        'prometheus',
        `--config.file=${join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(dir, 'data')}`,
        `--web.listen-address=${WEB}`,
        '--log.level=warn',
      ],
      { logFile: join(dir, 'prometheus.log') },
    );
    await waitForHolder(lab, lab.vip4, 'n1');
    await waitFor(
      () => api<{ activeTargets: { health: string }[] }>('/api/v1/targets').catch(() => ({ activeTargets: [] })),
      (d) => d.activeTargets.length === 1 && d.activeTargets[0]!.health === 'up',
      { timeoutMs: 15_000, intervalMs: 200, what: 'Prometheus to scrape the agent' },
    );
    await waitFor(status, (s) => s.backends.map((b) => `${b.address} ${b.source} ${b.state}`).join() === `${served} endpointslice up`, {
      timeoutMs: 10_000,
      what: "n1's apiserver discovered and up",
    });
  }, 60_000);
  afterAll(async () => {
    await prom?.stop('SIGTERM', 5000);
    await agent?.stop('SIGTERM');
    await lab?.teardown();
  });

  it(`listed ${LISTED_MS} ms, unlisted ${UNLISTED_MS} ms, back ${RETURNS} times: state, counts and series kept; BallastBackendDown (for ${FOR_MS} ms) fires; forgotten ${REMEMBER_MS} ms after it left`, async () => {
    // listed: down after `fall` refused checks
    const firstListed = await change('add');
    const down = await waitFor(status, (s) => listed(s)?.state === 'down', {
      timeoutMs: (FALL + 2) * INTERVAL_MS + MARGIN_MS,
      intervalMs: 50,
      what: `${churner} down`,
    });
    expect(listed(down)).toMatchObject({ state: 'down', healthy: false, reason: expect.stringMatching(/ECONNREFUSED|refused/), left: 0, returned: 0 });
    await sleep(Math.max(0, firstListed + LISTED_MS - Date.now()));

    const gaps: number[] = [];
    for (let i = 1; i <= RETURNS; i++) {
      const leftAt = await change('remove');
      // out of the set, remembered as it left; no check runs
      const out = await waitFor(status, (s) => listed(s) === undefined && departed(s) !== undefined, {
        timeoutMs: MARGIN_MS,
        intervalMs: 50,
        what: `${churner} departed`,
      });
      const d = departed(out)!;
      expect(d).toMatchObject({ state: 'down', left: i, returned: i - 1 });
      expect(Date.parse(d.keptUntil) - Date.parse(d.leftAt)).toBe(REMEMBER_MS);
      expect(Math.abs(Date.parse(d.leftAt) - leftAt)).toBeLessThan(MARGIN_MS);
      // its series stay in Prometheus: not listed, down
      const s = await waitFor(churnerSeries, (x) => x.ballast_backend_listed === '0', {
        timeoutMs: 2 * STEP_MS + MARGIN_MS,
        intervalMs: 100,
        what: `listed 0 for ${churner} in Prometheus`,
      });
      expect(s).toStrictEqual({
        ballast_backend_listed: '0',
        ballast_backend_up: '0',
        'ballast_backend_state/unknown': '0',
        'ballast_backend_state/up': '0',
        'ballast_backend_state/down': '1',
      });
      await sleep(Math.max(0, leftAt + UNLISTED_MS - Date.now()));

      // back: as it left (down, not unknown), one more return counted
      const backAt = await change('add');
      gaps.push(backAt - leftAt);
      expect(backAt - leftAt, 'a gap shorter than rememberDeparted').toBeLessThan(REMEMBER_MS);
      const back = await waitFor(status, (x) => listed(x) !== undefined, { timeoutMs: MARGIN_MS, intervalMs: 20, what: `${churner} listed again` });
      expect(listed(back)).toMatchObject({ state: 'down', healthy: false, left: i, returned: i });
      expect(departed(back)).toBeUndefined();
      await sleep(Math.max(0, backAt + LISTED_MS - Date.now()));
    }

    // one health transition in the whole churn: it never restarted at unknown
    expect(transitions()).toStrictEqual(['unknown→down']);
    // and the churner never left the data plane's ready set it was never in
    expect((await status()).dataplane).toMatchObject({ mode: 'nftables', backends: [served] });
    // one series all along: the alert has been active since the first listing, and fires
    const active = await waitFor(alerts, (a) => a.length === 1 && a[0]!.state === 'firing', {
      timeoutMs: MARGIN_MS,
      intervalMs: 100,
      what: `BallastBackendDown firing for ${churner}`,
    });
    const since = Date.parse(active[0]!.activeAt);
    expect(since - firstListed).toBeLessThanOrEqual(2 * STEP_MS + MARGIN_MS);
    expect(Date.now() - firstListed).toBeGreaterThan(FOR_MS);
    expect(LISTED_MS + 2 * STEP_MS).toBeLessThan(FOR_MS);
    console.log(
      `[backend-churn] ${RETURNS} returns, gaps ${gaps.join(', ')} ms; BallastBackendDown active from +${since - firstListed} ms after the first listing, firing at +${Date.now() - firstListed} ms`,
    );

    // gone for good: remembered REMEMBER_MS, then forgotten with its series
    const goneAt = await change('remove');
    const last = departed(await waitFor(status, (s) => departed(s) !== undefined, { timeoutMs: MARGIN_MS, intervalMs: 50, what: `${churner} departed` }))!;
    expect(last).toMatchObject({ state: 'down', left: RETURNS + 1, returned: RETURNS });
    const keptUntil = Date.parse(last.keptUntil);
    expect(keptUntil - Date.parse(last.leftAt)).toBe(REMEMBER_MS);
    await sleep(Math.max(0, keptUntil - 600 - Date.now()));
    expect(departed(await status()), 'still remembered just before keptUntil').toMatchObject({ left: RETURNS + 1 });
    expect(await churnerSeries()).toMatchObject({ ballast_backend_listed: '0', ballast_backend_up: '0' });
    const forgotten = await waitFor(status, (s) => departed(s) === undefined, { timeoutMs: 600 + MARGIN_MS, intervalMs: 50, what: `${churner} forgotten` });
    expect(listed(forgotten)).toBeUndefined();
    const forgottenAt = Date.now();
    expect(forgottenAt).toBeGreaterThanOrEqual(keptUntil);
    // Prometheus: the series end (stale at the first scrape without them), and the alert with them
    await waitFor(churnerSeries, (x) => Object.keys(x).length === 0, {
      timeoutMs: 2 * STEP_MS + MARGIN_MS,
      intervalMs: 100,
      what: `${churner}'s series gone from Prometheus`,
    });
    await waitFor(alerts, (a) => a.length === 0, { timeoutMs: 2 * STEP_MS + MARGIN_MS, intervalMs: 100, what: 'BallastBackendDown resolved' });
    console.log(`[backend-churn] left for good at +0 ms; /status forgot it at +${forgottenAt - goneAt} ms (rememberDeparted ${REMEMBER_MS} ms)`);

    // listed again after that: a new backend (no counts), unknown until its own checks say down
    await change('add');
    const anew = await waitFor(status, (s) => listed(s) !== undefined, { timeoutMs: MARGIN_MS, intervalMs: 20, what: `${churner} listed anew` });
    expect(listed(anew)).toMatchObject({ left: 0, returned: 0 });
    await waitFor(transitions, (t) => t.length === 2, { timeoutMs: (FALL + 2) * INTERVAL_MS + MARGIN_MS, intervalMs: 50, what: 'its second transition' });
    expect(transitions()).toStrictEqual(['unknown→down', 'unknown→down']);
    expect(readFileSync(join(lab.dir, 'prometheus', 'prometheus.log'), 'utf8')).not.toMatch(/level=error/);
  });
});
