/**
 * Health-checked, in-kernel load balancing from the VIP to every ready apiserver, end to end on
 * the lab: real nftables in each node's namespace, real TLS checks against the stand-ins, real
 * conntrack events, a TLS client counting errors. Adverts every 100 ms, checks every 200 ms.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab, runProber, type LabNode, type ProberReport } from '../../lab/lab.js';
import { restoreNodes, startAgent, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bbal';
const SUBNET = 213;
const INTERVAL_MS = 200;
const FALL = 2;
const RISE = 2;
/** The prober's per-request bound (ms): a request in flight on an apiserver that stops is cut within it. */
const TIMEOUT_MS = 500;
/** Slack on a timing bound: the agent's timers and its nft child on 2 shared cores (as reload.test.ts). */
const MARGIN_MS = 60;

describe.skipIf(needs('root'))('load balancing on the lab (root; skipped otherwise)', () => {
  let lab: Lab;
  let agents: LabAgent[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false, apiservers: true });
  });
  afterEach(async () => {
    await Promise.all(agents.map((a) => a.stop('SIGTERM').catch(() => undefined)));
    agents = [];
    await restoreNodes(lab);
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  /** Three agents with load balancing; waits for n1 to hold the VIP and every backend to be up. */
  async function cluster(): Promise<LabAgent[]> {
    const started = await Promise.all(
      [150, 100, 50].map((priority, i) => startAgent(lab, lab.nodes[i]!, { priority, balance: true, healthInterval: `${INTERVAL_MS}ms` })),
    );
    agents.push(...started);
    await waitForHolder(lab, lab.vip4, 'n1');
    await waitFor(
      () => started[0]!.status(),
      (s) => s.backends.length === 3 && s.backends.every((b) => b.healthy),
      { timeoutMs: 5000, what: 'all backends up on n1' },
    );
    return started;
  }

  async function ruleset(node: number): Promise<string> {
    return (await lab.exec(lab.nodes[node]!.netns, ['nft', 'list', 'table', 'ip', 'ballast'], { allowFail: true })).stdout;
  }

  it('connections to the VIP are spread over every ready apiserver, and /status shows them', async () => {
    const [a1] = await cluster();
    const sum = await runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 20, durationMs: 1500, timeoutMs: 500 }).done;
    expect(sum.failed).toBe(0);
    expect(Object.keys(sum.nodes).sort()).toEqual(['n1', 'n2', 'n3']);
    for (const n of ['n1', 'n2', 'n3']) expect(sum.nodes[n]).toBeGreaterThan(5);
    const st = await a1!.status();
    expect(st.dataplane).toMatchObject({ mode: 'nftables', backends: lab.nodes.map((n) => `${n.ipv4}:6443`).sort() });
    const rules = await ruleset(0);
    for (const n of lab.nodes) expect(rules).toContain(`dnat to ${n.ipv4}:6443`);
    const metrics = (await a1!.admin('/metrics')).split('\n');
    expect(metrics).toContain(`ballast_backend_up{backend="${lab.nodes[1]!.ipv4}:6443"} 1`);
  });

  /**
   * Stops `node`'s stand-in apiserver under a prober that sends a request every 10 ms (each on a
   * new connection, spread over the three backends) and reports, in the prober's clock (its `t`,
   * ms since its start; wall-clock instants converted through its summary's startedAt):
   * - `stopFrom` / `stoppedAt`: when lab.stopApiserver was called / returned (the stand-in had
   *   exited: nothing it serves can start later);
   * - `out`: when the holder's table without it was committed (its first 'data plane applied'
   *   line after the stop without that backend; logged after the commit, ms steps: + 1) and how
   *   long that apply took;
   * - `deadBy`: what judged it dead (passive detection from its refused connections, or the checks).
   */
  async function stopUnderProber(
    holder: LabAgent,
    node: LabNode,
  ): Promise<{ sum: ProberReport; stopFrom: number; stoppedAt: number; out: number; applyMs: number; deadBy: string }> {
    const backend = `${node.ipv4}:6443`;
    const prober = runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 10, durationMs: 6000, timeoutMs: TIMEOUT_MS });
    await sleep(800);
    const stopFrom = Date.now();
    await lab.stopApiserver(node);
    const stoppedAt = Date.now();
    await sleep(2000);
    const sum = await prober.stop();
    const at = (l: Record<string, unknown>): number => Date.parse(String(l.time)) - sum.startedAt!;
    const after = holder.logLines().filter((l) => Date.parse(String(l.time)) >= stopFrom);
    const applied = after.find((l) => l.msg === 'data plane applied' && Array.isArray(l.backends) && !l.backends.includes(backend));
    const dead = after.find(
      (l) => ((l.msg === 'backend verdict' && l.verdict === 'dead') || (l.msg === 'backend health' && l.to === 'down')) && l.backend === backend,
    );
    expect({ applied: applied !== undefined, dead: dead !== undefined }).toStrictEqual({ applied: true, dead: true });
    const r = {
      sum,
      stopFrom: stopFrom - sum.startedAt!,
      stoppedAt: stoppedAt - sum.startedAt!,
      out: at(applied!) + 1,
      applyMs: Number(applied!.durationMs),
      deadBy: String(dead!.cause ?? dead!.reason),
    };
    const failures = sum.results.filter((x) => !x.ok);
    console.log(
      `${node.name} apiserver stop: ${failures.length} failed (${failures.map((f) => `t=${f.t} ${f.ok ? '' : f.error}`).join(', ')}), stopped ${r.stoppedAt.toFixed(1)}, out of the holder's table ${r.out.toFixed(1)} (${(r.out - r.stoppedAt).toFixed(1)} ms after, judged dead by ${r.deadBy}, apply ${r.applyMs} ms)`,
    );
    return r;
  }

  /**
   * What a stopped apiserver may cost the prober: a request fails only if it was in flight on it
   * when it stopped (cut: ECONNRESET; started at most TIMEOUT_MS before `stopFrom`) or was sent
   * to it before the holder's table without it was committed (refused at once: ECONNREFUSED,
   * never a hang); none of its successes starts after it stopped; and it leaves the table within
   * the slower of the two detection paths: passive detection (the first refused SYN to it, seen in
   * conntrack) normally, at the latest `fall` checks (each started within interval × 1.1 of the
   * last, jitter) + the apply + MARGIN_MS.
   */
  function expectStopCost(r: Awaited<ReturnType<typeof stopUnderProber>>, node: LabNode): void {
    const failures = r.sum.results.filter((x) => !x.ok);
    expect(failures.filter((x) => !['ECONNREFUSED', 'ECONNRESET'].includes(x.ok ? '' : x.error))).toStrictEqual([]);
    expect(failures.filter((x) => x.t < r.stopFrom - TIMEOUT_MS || x.t > r.out)).toStrictEqual([]);
    expect(r.sum.results.filter((x) => x.ok && x.node === node.name && x.t > r.stoppedAt)).toStrictEqual([]);
    expect(r.out - r.stoppedAt).toBeLessThanOrEqual(FALL * INTERVAL_MS * 1.1 + r.applyMs + MARGIN_MS);
    // the others serve (every request started after it left the table succeeded, above)
    const others = lab.nodes.filter((n) => n !== node).map((n) => n.name);
    expect([...new Set(r.sum.results.filter((x) => x.ok && x.t > r.out).map((x) => x.node))].sort()).toStrictEqual(others);
  }

  it("the holder's apiserver stops: requests fail only until it leaves the holder's table, the VIP stays, the others serve", async () => {
    await cluster();
    const r = await stopUnderProber(agents[0]!, lab.nodes[0]!);
    expectStopCost(r, lab.nodes[0]!);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
  });

  it("a non-holder's apiserver stops: requests fail only until it leaves the holder's table, the others serve", async () => {
    const [a1] = await cluster();
    const r = await stopUnderProber(a1!, lab.nodes[1]!);
    expectStopCost(r, lab.nodes[1]!);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
    // out of the ruleset, and its counter stopped growing while the others' grew
    expect(await ruleset(0)).not.toContain(`dnat to ${lab.nodes[1]!.ipv4}:6443`);
    expect((await a1!.status()).backends.find((b) => b.address === `${lab.nodes[1]!.ipv4}:6443`)?.healthy).toBe(false);
  });

  it('an unready apiserver (/readyz 500) leaves the ruleset within fall x interval and returns within rise x interval', async () => {
    const [a1] = await cluster();
    const t0 = Date.now();
    await lab.setReady(lab.nodes[2]!, false);
    // out of the ruleset because it is down: cluster() waits for /status to call every backend
    // up, which can come before the apply that puts the last one into the ruleset, so "not in
    // the ruleset" alone may hold at once
    const n3 = `${lab.nodes[2]!.ipv4}:6443`;
    const seen = await waitFor(
      async () => ({ r: await ruleset(0), b: (await a1!.status()).backends.find((b) => b.address === n3) }),
      (x) => !x.r.includes(`dnat to ${n3}`) && x.b?.state === 'down',
      { timeoutMs: (FALL + 2) * INTERVAL_MS * 1.1 + 500, what: 'n3 down and out of the ruleset' },
    );
    const out = Date.now() - t0;
    expect(seen.b).toMatchObject({ state: 'down', healthy: false, reason: 'http 500' });
    const t1 = Date.now();
    await lab.setReady(lab.nodes[2]!, true);
    await waitFor(
      () => ruleset(0),
      (r) => r.includes(`dnat to ${lab.nodes[2]!.ipv4}:6443`),
      { timeoutMs: (RISE + 2) * INTERVAL_MS * 1.1 + 500, what: 'n3 back in the ruleset' },
    );
    console.log(`unready: out after ${out} ms, back after ${Date.now() - t1} ms`);
  });

  it('all apiservers down: a connection to the VIP is refused at once, never hangs', async () => {
    await cluster();
    for (const n of lab.nodes) await lab.stopApiserver(n);
    await waitFor(
      () => ruleset(0),
      (r) => !r.includes('dnat to'),
      { timeoutMs: 3000, what: 'no DNAT rule left' },
    );
    const t0 = Date.now();
    const sum = await runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 50, durationMs: 300, timeoutMs: 1000 }).done;
    expect(sum.ok).toBe(0);
    for (const r of sum.results) expect(r.ok ? 'ok' : r.error).toBe('ECONNREFUSED');
    expect(Date.now() - t0).toBeLessThan(3000);
  });

  it('a non-holder node dies: every request succeeds again within 1 s of the fault', async () => {
    await cluster();
    const prober = runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 10, durationMs: 6000, timeoutMs: 250 });
    await sleep(800);
    const faultT = prober.now();
    await lab.linkDown(lab.nodes[2]!);
    await sleep(2500);
    const sum = await prober.stop();
    const failures = sum.results.filter((x) => !x.ok);
    const lastFailure = failures.length ? Math.max(...failures.map((x) => x.t)) : null;
    console.log(
      `non-holder death: ${failures.length} failed, last failure ${lastFailure === null ? 'none' : `${Math.round(lastFailure - faultT)} ms`} after the fault`,
    );
    if (lastFailure !== null) expect(lastFailure - faultT).toBeLessThanOrEqual(1000);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
  });

  it('the holder node dies: every request succeeds again within 1 s of the fault', async () => {
    await cluster();
    const prober = runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 10, durationMs: 6000, timeoutMs: 250 });
    await sleep(800);
    const faultT = prober.now();
    await lab.linkDown(lab.nodes[0]!);
    await sleep(2500);
    const sum = await prober.stop();
    const failures = sum.results.filter((x) => !x.ok);
    const lastFailure = failures.length ? Math.max(...failures.map((x) => x.t)) : null;
    console.log(
      `holder death: ${failures.length} failed, last failure ${lastFailure === null ? 'none' : `${Math.round(lastFailure - faultT)} ms`} after the fault`,
    );
    if (lastFailure !== null) expect(lastFailure - faultT).toBeLessThanOrEqual(1000);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n2']);
  });

  it('a clean stop removes the table and leaves an unrelated table byte-identical', async () => {
    const n1 = lab.nodes[0]!;
    await lab.exec(n1.netns, ['nft', 'add', 'table', 'inet', 'other']);
    await lab.exec(n1.netns, ['nft', 'add', 'chain', 'inet', 'other', 'c', '{ type filter hook input priority 0; policy accept; }']);
    await lab.exec(n1.netns, ['nft', 'add', 'rule', 'inet', 'other', 'c', 'tcp', 'dport', '22', 'counter']);
    const before = (await lab.exec(n1.netns, ['nft', 'list', 'table', 'inet', 'other'])).stdout;
    const [a1] = await cluster();
    await lab.setReady(lab.nodes[1]!, false);
    await waitFor(
      () => ruleset(0),
      (r) => !r.includes(`dnat to ${lab.nodes[1]!.ipv4}:6443`),
      { timeoutMs: 3000, what: 'n2 out' },
    );
    expect(await a1!.stop('SIGTERM')).toBe(0);
    agents.shift();
    expect(await ruleset(0)).toBe('');
    expect((await lab.exec(n1.netns, ['nft', 'list', 'table', 'inet', 'other'])).stdout).toBe(before);
    await lab.exec(n1.netns, ['nft', 'delete', 'table', 'inet', 'other']);
  });
});
