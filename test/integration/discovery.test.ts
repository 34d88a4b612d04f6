/**
 * Backend discovery end to end on the lab: three nodes, agents whose seed is node 1's apiserver
 * only and whose kubeconfig (server = the VIP, as kubeadm's admin.conf) reaches the stand-in
 * apiservers, which share one EndpointSlice store and join / leave the `kubernetes` slice as
 * they start / stop. Checks every 200 ms, rise / fall 2, adverts every 100 ms.
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compiledScript, Lab, onJsonLines, runProber, type LabNode, type LabProcess } from '../../lab/lab.js';
import { startAgent, startAgents, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { setDenial } from '../../lab/endpointslice-store.js';
import { DENIED_RETRY_MS } from '../../src/discovery/index.js';
import type { LongconnEvent, LongconnResult } from '../../lab/clients/longconn.js';
import type { ElectionStatusDocument } from '../../src/observe/status.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bdisc';
const SUBNET = 242;
const TOKEN = 'lab-discovery-token-0123456789';
const INTERVAL_MS = 200;
const RISE = 2;
/** the stand-ins keep serving this long after they left the slice (kube-apiserver's shutdown delay) */
const SHUTDOWN_DELAY_MS = 1500;

describe.skipIf(needs('root'))('discovery on the lab (root; skipped otherwise)', () => {
  let lab: Lab;
  const agents: LabAgent[] = [];
  const clients: LabProcess[] = [];
  /** slice change → backend set change on n1, ms */
  const lags: number[] = [];

  const addr = (n: LabNode): string => `${n.ipv4}:6443`;
  const settings = async (i: number) => {
    const node = lab.nodes[i]!;
    return {
      priority: [150, 100, 50][i]!,
      extra: {
        apiserver: {
          port: 6443,
          backends: [addr(lab.nodes[0]!)],
          health: { caFile: lab.ca.certFile, interval: `${INTERVAL_MS}ms`, timeout: `${INTERVAL_MS}ms`, rise: RISE, fall: 2 },
        },
        discovery: { kubeconfig: await lab.writeKubeconfig(node, { token: TOKEN }), lastKnownFile: join(lab.dir, `${node.name}-backends.json`) },
      },
    };
  };
  const statusOf = async (a: LabAgent): Promise<ElectionStatusDocument> => {
    for (let i = 1; ; i++) {
      try {
        return await a.status();
      } catch (err) {
        if (i >= 3) throw err;
      }
    }
  };
  const pool = (s: ElectionStatusDocument): string[] => s.backends.map((b) => `${b.address} ${b.source}${b.healthy ? ' up' : ''}`);
  /** Date.parse(time) of the first "backend set changed" line at or after `since` whose set satisfies `pred` */
  const setChangedAt = (a: LabAgent, since: number, pred: (backends: string[]) => boolean): number | null => {
    const l = a.logLines().find((x) => x.msg === 'discovery: backend set changed' && Date.parse(String(x.time)) >= since && pred(x.backends as string[]));
    return l === undefined ? null : Date.parse(String(l.time));
  };
  const waitSetChange = async (a: LabAgent, since: number, pred: (backends: string[]) => boolean): Promise<number> => {
    const at = await waitFor(
      async () => setChangedAt(a, since, pred),
      (t) => t !== null,
      { timeoutMs: 10_000, intervalMs: 20, what: 'the backend set change' },
    );
    return at! - since;
  };

  function longconn(node: string, durationMs: number): { results: LongconnResult[]; events: LongconnEvent[]; proc: LabProcess } {
    const proc = lab.spawn(
      lab.client.netns,
      [
        process.execPath,
        compiledScript('longconn'),
        '--url',
        `https://${lab.vip4}:6443/version`,
        '--ca',
        lab.ca.certFile,
        '--interval',
        '100',
        '--duration',
        String(durationMs),
        '--timeout',
        '2000',
        '--node',
        node,
        '--attempts',
        '60',
      ],
      { logFile: `longconn-${node}.log` },
    );
    clients.push(proc);
    const results: LongconnResult[] = [];
    const events: LongconnEvent[] = [];
    onJsonLines<LongconnResult | LongconnEvent | { summary: true }>(proc, (x) => {
      if ('summary' in x) return;
      if ('event' in x) events.push(x);
      else results.push(x);
    });
    return { results, events, proc };
  }

  beforeAll(async () => {
    for (const s of ['longconn', 'prober', 'apiserver-standin'] as const) compiledScript(s);
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false });
    // node 1's apiserver only, as after `kubeadm init`
    await lab.startApiservers({ store: true, token: TOKEN, shutdownDelayMs: SHUTDOWN_DELAY_MS, nodes: [lab.nodes[0]!] });
    // the three at once (each start loads the Kubernetes client: ~1.5 s of CPU), n1 preempts if another times out first
    await startAgents(lab, await Promise.all([0, 1, 2].map(settings)), agents);
    await waitForHolder(lab, lab.vip4, 'n1');
  }, 120_000);
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.stop('SIGKILL', 2000)));
    await Promise.all(agents.map((a) => a.stop('SIGTERM').catch(() => undefined)));
    if (lags.length > 0) {
      const sorted = [...lags].sort((a, b) => a - b);
      console.log(`slice change → backend set change on n1: median ${sorted[Math.floor(sorted.length / 2)]} ms over ${sorted.length} (${sorted.join(', ')})`);
    }
    await lab?.teardown();
  });

  it('the discovered set replaces the seed; nodes 2 and 3 join the slice and enter the pool after their own checks', async () => {
    const [a1] = agents;
    const [n1, n2, n3] = lab.nodes as [LabNode, LabNode, LabNode];
    await waitFor(
      () => statusOf(a1!),
      (s) => pool(s).join() === `${addr(n1)} endpointslice up`,
      { timeoutMs: 10_000, what: 'n1 discovered and up' },
    );
    for (const n of [n2, n3]) {
      const t0 = Date.now();
      await lab.startApiserver(n);
      // the spawn takes a while: time the lag from the store line's write (the log file's mtime right after it)
      const joined = await waitSetChange(a1!, t0, (b) => b.includes(`${addr(n)} (endpointslice)`));
      const written = statSync(join(lab.sliceStore(), 'events.log')).mtimeMs;
      lags.push(Math.max(0, Math.round(t0 + joined - written)));
    }
    const s = await waitFor(
      () => statusOf(a1!),
      (x) => x.backends.length === 3 && x.backends.every((b) => b.healthy),
      { timeoutMs: 10_000, what: 'three backends up on n1' },
    );
    expect(pool(s).sort()).toStrictEqual([n1, n2, n3].map((n) => `${addr(n)} endpointslice up`));
    // a discovered backend starts unknown and gets traffic only after rise passes of its own
    const lines = a1!.logLines();
    const joinedAt = setChangedAt(a1!, 0, (b) => b.includes(`${addr(n3)} (endpointslice)`))!;
    const up = lines.find((l) => l.msg === 'backend health' && l.backend === addr(n3) && l.to === 'up');
    expect(up).toMatchObject({ from: 'unknown', to: 'up' });
    const upAt = Date.parse(String(up!.time));
    expect(upAt - joinedAt).toBeGreaterThanOrEqual((RISE - 1) * INTERVAL_MS * 0.9);
    // /status says healthy as soon as the checker does; the nftables apply (and its line) follows
    const applied = await waitFor(() => a1!.logLines().find((l) => l.msg === 'data plane applied' && (l.backends as string[]).includes(addr(n3))), {
      timeoutMs: 2000,
      intervalMs: 20,
      what: "n3 in the data plane's apply",
    });
    expect(Date.parse(String(applied.time))).toBeGreaterThanOrEqual(upAt);
    console.log(
      `n3 joined the set → up ${upAt - joinedAt} ms → in the nftables ruleset ${Date.parse(String(applied.time)) - joinedAt} ms (rise ${RISE} × interval ${INTERVAL_MS} ms, first check at a random offset within one interval)`,
    );
    // the peers' agents discovered the same set
    for (const a of agents.slice(1))
      await waitFor(
        () => statusOf(a),
        (x) => x.backends.length === 3 && x.backends.every((b) => b.source === 'endpointslice'),
        { timeoutMs: 10_000, what: `${a.node.name} discovered all` },
      );
    // traffic via the VIP reaches all three
    const sum = await runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 20, durationMs: 1500, timeoutMs: 500 }).done;
    expect(sum.failed).toBe(0);
    expect(Object.keys(sum.nodes).sort()).toStrictEqual(['n1', 'n2', 'n3']);
    // sources in /metrics and `ballast status`
    const metrics = (await a1!.admin('/metrics')).split('\n');
    for (const n of [n1, n2, n3]) expect(metrics).toContain(`ballast_backend_info{backend="${addr(n)}",source="endpointslice"} 1`);
    expect(metrics).toContain('ballast_discovery_empty_kept_total 0');
    expect(s.discovery).toMatchObject({ state: 'watching', errors: 0 });
    expect(s.discovery!.server).toMatch(/^https:\/\/10\.78\.242\.1[123]:6443$/);
  });

  it('a backend that leaves the slice but still listens drains: its established connection keeps working, new ones go elsewhere', async () => {
    const [a1] = agents;
    const n3 = lab.nodes[2]!;
    const lc = longconn('n3', 6000);
    await lc.proc.waitForOutput(/"event":"pinned"/, { timeoutMs: 10_000, includeExisting: true });
    await sleep(300);
    const t0 = Date.now();
    lab.sliceChange({ op: 'remove', address: n3.ipv4 });
    lags.push(await waitSetChange(a1!, t0, (b) => !b.some((x) => x.startsWith(addr(n3)))));
    await sleep(300);
    const sum = await runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 20, durationMs: 1500, timeoutMs: 500 }).done;
    expect(sum.failed).toBe(0);
    expect(Object.keys(sum.nodes).sort()).toStrictEqual(['n1', 'n2']);
    await sleep(500);
    const after = lc.results.filter((r) => r.at >= t0);
    expect(after.length).toBeGreaterThan(15);
    expect(after.filter((r) => !r.ok)).toStrictEqual([]);
    expect(new Set(after.map((r) => (r.ok ? r.node : '?')))).toStrictEqual(new Set(['n3']));
    expect(lc.events.filter((e) => e.event === 'closed')).toStrictEqual([]);
    const st = await statusOf(a1!);
    expect(st.dataplane.mode === 'nftables' && st.dataplane.flushedEntries).toBe(0);
    await lc.proc.stop('SIGTERM', 5000);
    // back in, and a few more leave / join cycles for the timing figure
    for (let i = 0; i < 3; i++) {
      let t = Date.now();
      lab.sliceChange({ op: 'add', address: n3.ipv4 });
      lags.push(await waitSetChange(a1!, t, (b) => b.includes(`${addr(n3)} (endpointslice)`)));
      await sleep(200);
      t = Date.now();
      lab.sliceChange({ op: 'remove', address: n3.ipv4 });
      lags.push(await waitSetChange(a1!, t, (b) => !b.some((x) => x.startsWith(addr(n3)))));
      await sleep(200);
    }
    const t = Date.now();
    lab.sliceChange({ op: 'add', address: n3.ipv4 });
    lags.push(await waitSetChange(a1!, t, (b) => b.includes(`${addr(n3)} (endpointslice)`)));
  });

  it('a stand-in stops gracefully: it leaves the slice and drains; its connection works until the stand-in closes it', async () => {
    const [a1] = agents;
    const n2 = lab.nodes[1]!;
    await waitFor(
      () => statusOf(a1!),
      (x) => x.backends.length === 3 && x.backends.every((b) => b.healthy),
      { timeoutMs: 10_000, what: 'three backends up' },
    );
    const lc = longconn('n2', 6000);
    await lc.proc.waitForOutput(/"event":"pinned"/, { timeoutMs: 10_000, includeExisting: true });
    await sleep(300);
    const t0 = Date.now();
    const stopping = lab.stopApiserver(n2);
    lags.push(await waitSetChange(a1!, t0, (b) => !b.some((x) => x.startsWith(addr(n2)))));
    await stopping;
    const closedAt = t0 + SHUTDOWN_DELAY_MS;
    await sleep(300);
    // until the stand-in closed it (shutdown delay), every request on the connection was served by n2
    const during = lc.results.filter((r) => r.at >= t0 && r.at < closedAt - 200);
    expect(during.length).toBeGreaterThan(8);
    expect(during.filter((r) => !r.ok || r.node !== 'n2')).toStrictEqual([]);
    expect(lc.events.some((e) => e.event === 'closed')).toBe(true);
    const st = await statusOf(a1!);
    expect(pool(st).sort()).toStrictEqual([lab.nodes[0]!, lab.nodes[2]!].map((n) => `${addr(n)} endpointslice up`));
  });

  it('an agent restarted while the API is unreachable knows the members from the last-known file', async () => {
    const [n1, , n3] = lab.nodes as [LabNode, LabNode, LabNode];
    await agents[0]!.stop('SIGTERM');
    // every apiserver gone: nothing answers the list
    await lab.stopApiserver(n1);
    await lab.stopApiserver(n3);
    agents[0] = await startAgent(lab, n1, await settings(0));
    const s = await statusOf(agents[0]!);
    expect(s.backends.map((b) => `${b.address} ${b.source}`)).toStrictEqual([`${addr(n1)} seed`, `${addr(n3)} lastKnown`]);
    const metrics = (await agents[0]!.admin('/metrics')).split('\n');
    expect(metrics).toContain(`ballast_backend_info{backend="${addr(n3)}",source="lastKnown"} 1`);
    // the apiservers return: the slice answers again and replaces seed and last-known
    await lab.startApiserver(n3);
    await lab.startApiserver(n1);
    await waitFor(
      () => statusOf(agents[0]!),
      (x) => x.backends.every((b) => b.source === 'endpointslice' && b.healthy) && x.backends.length === 2,
      { timeoutMs: 15_000, what: 'the discovered set again' },
    );
  });

  // a 403 has its own condition in /status and its own counter; with the general backoff
  // (500 ms doubling to 10 s: retries 0.5, 1.5, 3.5, 7.5 s after the first refusal) the set would
  // come 6 to 8.4 s after the permission; refused for 4 s here, that backoff's next retry is 3.5 s late
  it('the API refusing the permission (403): its own condition, metric and one log line with the fix; the set follows the permission within the denied retry', async () => {
    const n1 = lab.nodes[0]!;
    setDenial(lab.sliceStore(), 403);
    try {
      await agents[0]!.stop('SIGTERM');
      agents[0] = await startAgent(lab, n1, await settings(0));
      const a = agents[0];
      const st = await waitFor(
        () => statusOf(a),
        (x) => x.discovery?.denied === 'forbidden',
        { timeoutMs: 10_000, intervalMs: 50, what: 'discovery refused (403)' },
      );
      const firstRefusal = Date.parse(st.discovery!.deniedSince!);
      expect((await a.admin('/metrics')).split('\n')).toEqual(
        expect.arrayContaining(['ballast_discovery_denied{reason="forbidden"} 1', 'ballast_discovery_denied{reason="unauthorized"} 0']),
      );
      await sleep(Math.max(0, firstRefusal + 4000 - Date.now()));
      const lines = a.logLines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('discovery: 403 Forbidden'));
      expect(lines.map((l) => [l.denied, String(l.fix).includes('ballast manifest rbac')])).toStrictEqual([['forbidden', true]]);
      expect((await statusOf(a)).discovery!.refusals.forbidden).toBeGreaterThanOrEqual(3);
      const since = Date.now();
      setDenial(lab.sliceStore(), null);
      const lag = await waitSetChange(a, since, (bs) => bs.length > 0 && bs.every((b) => b.endsWith('(endpointslice)')));
      // one retry period, then a TLS handshake and a list (the lab's 2 shared cores: 1 s of slack)
      expect(lag, `the set came ${lag} ms after the permission`).toBeLessThanOrEqual(DENIED_RETRY_MS + 1000);
      // the condition ends with the first list that is answered (within one more retry period: a
      // request already under way when the permission came back may still be refused)
      const after = await waitFor(
        () => statusOf(a),
        (x) => x.discovery?.denied === null,
        { timeoutMs: DENIED_RETRY_MS + 2000, intervalMs: 50, what: 'the denied condition to end' },
      );
      expect([after.discovery!.denied, after.discovery!.deniedSince]).toStrictEqual([null, null]);
      console.log(
        `[discovery] 403 for ${since - firstRefusal} ms: ${after.discovery!.refusals.forbidden} refusals, one log line; the set came ${lag} ms after the permission (bound ${DENIED_RETRY_MS + 1000})`,
      );
    } finally {
      setDenial(lab.sliceStore(), null);
    }
  });
});
