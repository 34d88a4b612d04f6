/**
 * The election, end to end, on a lab of network namespaces: real raw sockets, real rtnetlink,
 * real gratuitous ARP, a real TLS client measuring the outage. Adverts every 100 ms.
 * Bounds come from RFC 9568 §6.1: Master_Down_Interval = 3 * interval + Skew_Time.
 */
import { describe, expect, it } from 'vitest';
import { Lab, compiledScript, runProber } from '../../lab/lab.js';
import { blockVrrp, cliPath, startAgent, waitForHolder, waitForSingleHolder } from '../../lab/cluster.js';
import { masterDownIntervalMs, skewTimeMs } from '../../src/vrrp/state.js';
import { needs, sleep, useElectionLab, waitFor } from '../support/index.js';

const PREFIX = 'belec';
const SUBNET = 211;
const INTERVAL_CS = 10;
/** Slack for the client side: one probe period (10 ms), the probe's own latency, scheduling on 2 cores. */
const MARGIN_MS = 250;

describe.skipIf(needs('root'))('election on the lab (root; skipped otherwise)', () => {
  let lab!: Lab;
  const { agents, start } = useElectionLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, apiservers: true }, (l) => (lab = l));

  it('the highest priority wins, and exactly one node holds the VIP', async () => {
    const [a1, a2, a3] = await start([{ priority: 150 }, { priority: 100 }, { priority: 50 }]);
    // started together, a lower priority may time out first on a loaded machine; n1 preempts it
    await waitForHolder(lab, lab.vip4, 'n1');
    // stays that way for several intervals
    await sleep(500);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
    const [s1, s2, s3] = await Promise.all([a1!.status(), a2!.status(), a3!.status()]);
    expect(s1).toMatchObject({
      state: 'master',
      vrid: 51,
      priority: 150,
      effectivePriority: 150,
      masterAddress: lab.nodes[0]!.ipv4,
      vips: [lab.vip4],
      vipsHeld: true,
    });
    expect(s2).toMatchObject({ state: 'backup', masterAddress: lab.nodes[0]!.ipv4, masterPriority: 150, vipsHeld: false });
    expect(s3).toMatchObject({ state: 'backup', masterAddress: lab.nodes[0]!.ipv4 });
    expect(Number.isNaN(Date.parse(s1.since))).toBe(false);
    const metrics = (await a1!.admin('/metrics')).split('\n');
    expect(metrics).toContain('ballast_vrrp_state{vrid="51",state="master"} 1');
    expect(metrics).toContain('ballast_vip_held{vrid="51"} 1');
    expect((await a2!.admin('/metrics')).split('\n')).toContain('ballast_vrrp_state{vrid="51",state="backup"} 1');
    expect(await a1!.admin('/healthz')).toBe('ok\n');
    // the client reaches n1's apiserver through the VIP
    const p = runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 20, durationMs: 600, timeoutMs: 250 });
    const sum = await p.done;
    expect(sum.failed, `prober: ${JSON.stringify(sum)}`).toBe(0);
    expect(Object.keys(sum.nodes), `prober: ${JSON.stringify(sum)}`).toEqual(['n1']);
  });

  it('equal priorities: after a partition heals, the greatest primary address keeps the VIP', async () => {
    await blockVrrp(lab, true);
    await start([{ priority: 100 }, { priority: 100 }, { priority: 100 }]);
    // cut off from each other, every node becomes master
    await waitFor(
      () => lab.holders(lab.vip4),
      (h) => h.length === 3,
      { timeoutMs: 5000, what: 'three holders while partitioned' },
    );
    await blockVrrp(lab, false);
    const holder = await waitForSingleHolder(lab, lab.vip4, 2000);
    expect(holder.name).toBe('n3'); // 10.78.211.13 is the greatest
  });

  it("the holder's link goes down: the client's outage is at most Master_Down_Interval + 250 ms", async () => {
    await start([{ priority: 150 }, { priority: 100 }, { priority: 50 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    const prober = runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 10, durationMs: 8000, timeoutMs: 250 });
    await sleep(700);
    await lab.linkDown(lab.nodes[0]!);
    await waitFor(
      () => lab.holders(lab.vip4),
      (h) => h.length === 1 && h[0]!.name === 'n2',
      { timeoutMs: 3000, what: 'n2 to hold the VIP' },
    );
    await sleep(1000);
    const sum = await prober.stop();
    const bound = masterDownIntervalMs(100, INTERVAL_CS) + MARGIN_MS;
    expect(sum.outages.length).toBe(1);
    expect(sum.maxOutageMs).toBeGreaterThan(0);
    expect(sum.maxOutageMs).toBeLessThanOrEqual(bound);
    expect(sum.nodes.n2).toBeGreaterThan(0);
    // the node whose link went down reports fault and dropped the VIP
    expect((await agents[0]!.status()).state).toBe('fault');
    console.log(`link-down outage: ${sum.maxOutageMs} ms (bound ${bound.toFixed(1)} ms)`);
  });

  it("SIGTERM of the holder's agent: priority 0, outage at most Skew_Time + 250 ms, exit 0, VIP removed", async () => {
    const [a1] = await start([{ priority: 150 }, { priority: 100 }, { priority: 50 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    const prober = runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 10, durationMs: 8000, timeoutMs: 250 });
    await sleep(700);
    const code = await a1!.stop('SIGTERM');
    expect(code).toBe(0);
    await waitFor(
      () => lab.holders(lab.vip4),
      (h) => h.length === 1 && h[0]!.name === 'n2',
      { timeoutMs: 2000, what: 'n2 to hold the VIP' },
    );
    await sleep(700);
    const sum = await prober.stop();
    const bound = skewTimeMs(100, INTERVAL_CS) + MARGIN_MS;
    expect(sum.maxOutageMs).toBeLessThanOrEqual(bound);
    expect((await lab.addresses(lab.nodes[0]!)).map((a) => a.address)).not.toContain(lab.vip4);
    // one log line per state change, with from/to/reason
    const changes = a1!.logLines().filter((l) => l.msg === 'state change');
    // started together, n1 either found the group silent or preempted a lower priority
    expect(changes.map((l) => [l.from, l.to])).toEqual([
      ['init', 'backup'],
      ['backup', 'master'],
      ['master', 'init'],
    ]);
    expect(changes.map((l) => l.reason)).toEqual(['startup', changes[1]!.reason === 'preempt' ? 'preempt' : 'masterDown', 'shutdown']);
    const taker = agents[1]!
      .logLines()
      .filter((l) => l.msg === 'state change')
      .pop();
    expect(taker).toMatchObject({ from: 'backup', to: 'master', reason: 'resigned' });
    console.log(`SIGTERM outage: ${sum.maxOutageMs} ms (bound ${bound.toFixed(1)} ms)`);
  });

  it('a returning higher-priority node preempts', async () => {
    const [a1] = await start([{ priority: 150 }, { priority: 100 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    await a1!.stop('SIGTERM');
    agents.shift();
    await waitForHolder(lab, lab.vip4, 'n2');
    const back = await startAgent(lab, lab.nodes[0]!, { priority: 150 });
    agents.push(back);
    const t0 = Date.now();
    await waitFor(
      () => lab.holders(lab.vip4),
      (h) => h.length === 1 && h[0]!.name === 'n1',
      { timeoutMs: 3000, what: 'n1 to take the VIP back' },
    );
    // it waits one Master_Down_Interval of its own (discarding n2's lower adverts), not more than a few
    expect(Date.now() - t0).toBeLessThan(masterDownIntervalMs(150, INTERVAL_CS) + 1000);
  });

  it('preemptDelay: the returning node waits that long before preempting', async () => {
    await start([{ priority: 150, preemptDelay: '2s' }, { priority: 100 }]);
    // started together, n2 may hold it first; n1 takes it once its own delay has passed
    await waitForHolder(lab, lab.vip4, 'n1', 5000);
    await agents[0]!.stop('SIGTERM');
    agents.shift();
    await waitForHolder(lab, lab.vip4, 'n2');
    const t0 = Date.now();
    agents.push(await startAgent(lab, lab.nodes[0]!, { priority: 150, preemptDelay: '2s' }));
    await sleep(1500);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n2']);
    await waitFor(
      () => lab.holders(lab.vip4),
      (h) => h.length === 1 && h[0]!.name === 'n1',
      { timeoutMs: 4000, what: 'n1 to preempt after the delay' },
    );
    expect(Date.now() - t0).toBeGreaterThanOrEqual(2000);
  });

  it('preempt: false: a returning higher-priority node stays backup', async () => {
    // n1 first: with preempt off, whoever is master first keeps it
    await start([{ priority: 150, preempt: false }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    agents.push(await startAgent(lab, lab.nodes[1]!, { priority: 100 }));
    await agents[0]!.stop('SIGTERM');
    agents.shift();
    await waitForHolder(lab, lab.vip4, 'n2');
    const back = await startAgent(lab, lab.nodes[0]!, { priority: 150, preempt: false });
    agents.push(back);
    // ten Master_Down_Intervals later, n2 still holds it
    await sleep(10 * masterDownIntervalMs(150, INTERVAL_CS));
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n2']);
    expect((await back.status()).state).toBe('backup');
  });

  it('a VIP left on the interface by an earlier run is removed at start', async () => {
    await start([{ priority: 150 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    const n3 = lab.nodes[2]!;
    await lab.exec(n3.netns, ['ip', 'addr', 'add', `${lab.vip4}/32`, 'dev', 'eth0']);
    expect((await lab.holders(lab.vip4)).map((n) => n.name).sort()).toEqual(['n1', 'n3']);
    const a3 = await startAgent(lab, n3, { priority: 50 });
    agents.push(a3);
    // startAgent returns once the admin endpoint answers, which is after the purge
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
    expect((await a3.status()).state).toBe('backup');
  });

  it('random and malformed packets are dropped and counted; nothing crashes and the election holds', async () => {
    const [a1, a2] = await start([{ priority: 150 }, { priority: 100 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    // 600 packets from the client namespace: random bytes, truncated and corrupted adverts,
    // wrong versions, a VRRPv2 advert; bounded in count and time
    const r = await lab.exec(lab.client.netns, [process.execPath, compiledScript('fuzz-vrrp'), 'eth0', '600'], { timeoutMs: 20_000, allowFail: true });
    expect(r.code, r.stderr).toBe(0);
    await new Promise((r2) => setTimeout(r2, 300));
    const [s1, s2] = await Promise.all([a1!.status(), a2!.status()]);
    expect(s1.state).toBe('master');
    expect(s2.state).toBe('backup');
    for (const s of [s1, s2]) {
      const dropped = s.counters.dropped;
      const total = Object.values(dropped).reduce((x, y) => x + y, 0);
      expect(total).toBeGreaterThanOrEqual(500);
      expect(dropped.checksum).toBeGreaterThan(0);
      expect(dropped.length).toBeGreaterThan(0);
      expect(dropped.version).toBeGreaterThan(0);
      expect(dropped.vrrpv2).toBeGreaterThan(0);
    }
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
  });

  it('IPv6: adverts from link-local to ff02::12, the VIP is a /128 that is not tentative, SIGTERM hands over', async () => {
    const [a1, a2] = await start([
      { priority: 150, family: 6 },
      { priority: 100, family: 6 },
    ]);
    await waitForHolder(lab, lab.vip6, 'n1');
    const s1 = await a1!.status();
    expect(s1).toMatchObject({ state: 'master', family: 6, primaryAddress: await lab.nodes[0]!.linkLocal(), vips: [lab.vip6] });
    expect((await a2!.status()).masterAddress).toBe(await lab.nodes[0]!.linkLocal());
    const vip = (await lab.addresses(lab.nodes[0]!)).find((a) => a.address === lab.vip6);
    expect(vip).toMatchObject({ prefixLen: 128, tentative: false, dadfailed: false });
    const p = runProber(lab, { url: `https://[${lab.vip6}]:6443/version`, intervalMs: 10, durationMs: 8000, timeoutMs: 250 });
    await sleep(500);
    expect(await a1!.stop('SIGTERM')).toBe(0);
    await waitForHolder(lab, lab.vip6, 'n2', 2000);
    await sleep(500);
    const sum = await p.stop();
    expect(sum.nodes.n2).toBeGreaterThan(0);
    expect(sum.maxOutageMs).toBeLessThanOrEqual(skewTimeMs(100, INTERVAL_CS) + MARGIN_MS);
  });

  it('an advert for our VRID with other addresses is counted as foreign and logged once; the election still works', async () => {
    const other = lab.vip4.replace(/\.100$/, '.101');
    await start([{ priority: 150 }, { priority: 100, extra: { vips: [other] } }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    await sleep(500);
    const s2 = await agents[1]!.status();
    expect(s2.state).toBe('backup');
    expect(s2.counters.foreign).toBeGreaterThanOrEqual(3);
    const lines = agents[1]!.logLines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('an advert for our VRID lists other addresses'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ source: lab.nodes[0]!.ipv4, theirs: [lab.vip4], ours: [other] });
    expect((await agents[1]!.admin('/metrics')).split('\n').some((l) => /^ballast_vrrp_foreign_adverts_total\{vrid="51"\} [1-9]/.test(l))).toBe(true);
  });

  it('an invalid config exits 2, names the field, and changes nothing on the node', async () => {
    const n = lab.nodes[1]!;
    const before = await lab.addresses(n);
    const bad = `${lab.dir}/bad.yaml`;
    await lab.exec(n.netns, ['sh', '-c', `printf 'vrrp:\\n  vrid: 300\\n  priority: 100\\nvips: [${lab.vip4}]\\n' > ${bad}`]);
    const r = await lab.exec(n.netns, [process.execPath, cliPath(), 'run', '--config', bad], { allowFail: true });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('vrrp.vrid');
    expect(await lab.addresses(n)).toEqual(before);
  });
});
