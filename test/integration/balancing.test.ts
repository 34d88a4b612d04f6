/**
 * Health-checked, in-kernel load balancing from the VIP to every ready apiserver, end to end on
 * the lab: real nftables in each node's namespace, real TLS checks against the stand-ins, real
 * conntrack events, a TLS client counting errors. Adverts every 100 ms, checks every 200 ms.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab, runProber } from '../../lab/lab.js';
import { restoreNodes, startAgent, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bbal';
const SUBNET = 213;
const INTERVAL_MS = 200;
const FALL = 2;
const RISE = 2;

describe.skipIf(needs('root'))('load balancing on the lab (root; skipped otherwise)', () => {
  let lab: Lab;
  let agents: LabAgent[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false , apiservers: true });
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
    await waitFor(() => started[0]!.status(), (s) => s.backends.length === 3 && s.backends.every((b) => b.healthy), { timeoutMs: 5000, what: 'all backends up on n1' });
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

  it("the holder's apiserver stops: errors for at most 150 ms, the VIP stays, the others serve", async () => {
    await cluster();
    const prober = runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 10, durationMs: 6000, timeoutMs: 500 });
    await sleep(800);
    const faultT = prober.now();
    await lab.stopApiserver(lab.nodes[0]!);
    await sleep(2000);
    const sum = await prober.stop();
    const after = sum.results.filter((x) => x.t > faultT + 150);
    console.log(`holder apiserver stop: maxOutage ${sum.maxOutageMs} ms, failed ${sum.failed}`);
    expect(sum.maxOutageMs).toBeLessThanOrEqual(150);
    expect(after.filter((x) => x.ok && x.node === 'n1')).toHaveLength(0);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
  });

  it("a non-holder's apiserver stops: errors for at most 150 ms, the others serve", async () => {
    const [a1] = await cluster();
    const prober = runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 10, durationMs: 6000, timeoutMs: 500 });
    await sleep(800);
    const faultT = prober.now();
    await lab.stopApiserver(lab.nodes[1]!);
    await sleep(2000);
    const sum = await prober.stop();
    console.log(`non-holder apiserver stop: maxOutage ${sum.maxOutageMs} ms, failed ${sum.failed}`);
    expect(sum.maxOutageMs).toBeLessThanOrEqual(150);
    expect(sum.results.filter((x) => x.t > faultT + 150 && x.ok && x.node === 'n2')).toHaveLength(0);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
    // out of the ruleset, and its counter stopped growing while the others' grew
    expect(await ruleset(0)).not.toContain(`dnat to ${lab.nodes[1]!.ipv4}:6443`);
    expect((await a1!.status()).backends.find((b) => b.address === `${lab.nodes[1]!.ipv4}:6443`)?.healthy).toBe(false);
  });

  it('an unready apiserver (/readyz 500) leaves the ruleset within fall x interval and returns within rise x interval', async () => {
    const [a1] = await cluster();
    const t0 = Date.now();
    await lab.setReady(lab.nodes[2]!, false);
    await waitFor(() => ruleset(0), (r) => !r.includes(`dnat to ${lab.nodes[2]!.ipv4}:6443`), { timeoutMs: (FALL + 2) * INTERVAL_MS * 1.1 + 500, what: 'n3 out of the ruleset' });
    const out = Date.now() - t0;
    const st = await a1!.status();
    expect(st.backends.find((b) => b.address === `${lab.nodes[2]!.ipv4}:6443`)).toMatchObject({ state: 'down', healthy: false, reason: 'http 500' });
    const t1 = Date.now();
    await lab.setReady(lab.nodes[2]!, true);
    await waitFor(() => ruleset(0), (r) => r.includes(`dnat to ${lab.nodes[2]!.ipv4}:6443`), { timeoutMs: (RISE + 2) * INTERVAL_MS * 1.1 + 500, what: 'n3 back in the ruleset' });
    console.log(`unready: out after ${out} ms, back after ${Date.now() - t1} ms`);
  });

  it('all apiservers down: a connection to the VIP is refused at once, never hangs', async () => {
    await cluster();
    for (const n of lab.nodes) await lab.stopApiserver(n);
    await waitFor(() => ruleset(0), (r) => !r.includes('dnat to'), { timeoutMs: 3000, what: 'no DNAT rule left' });
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
    console.log(`non-holder death: ${failures.length} failed, last failure ${lastFailure === null ? 'none' : `${Math.round(lastFailure - faultT)} ms`} after the fault`);
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
    console.log(`holder death: ${failures.length} failed, last failure ${lastFailure === null ? 'none' : `${Math.round(lastFailure - faultT)} ms`} after the fault`);
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
    await waitFor(() => ruleset(0), (r) => !r.includes(`dnat to ${lab.nodes[1]!.ipv4}:6443`), { timeoutMs: 3000, what: 'n2 out' });
    expect(await a1!.stop('SIGTERM')).toBe(0);
    agents.shift();
    expect(await ruleset(0)).toBe('');
    expect((await lab.exec(n1.netns, ['nft', 'list', 'table', 'inet', 'other'])).stdout).toBe(before);
    await lab.exec(n1.netns, ['nft', 'delete', 'table', 'inet', 'other']);
  });
});
