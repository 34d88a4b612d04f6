/**
 * A reload that changes the VIPs' family under the nftables VIP data plane:
 * a hand-over, not a refusal. Two real agents (n1 priority 200, n2 priority 100), adverts every
 * 100 ms, balancing over both nodes' stand-in apiservers (which listen dual-stack); both are
 * reloaded at once from the lab's IPv4 VIP and IPv4 backends to its IPv6 VIP and IPv6 backends.
 *
 * Afterwards: one holder of the IPv6 VIP (n1, the higher priority), `table ip6 ballast` with DNAT
 * to the IPv6 backends, no `table ip ballast` and no IPv4 VIP on any node, the IPv4 table lock
 * given back and the IPv6 one held, a client served through https://[VIP6]:6443. A stop then
 * leaves nothing (test/support/leftovers.ts).
 */
import { writeFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { probeOnce } from '../../lab/lab.js';
import { agentConfig, resetElectionLab, startAgents, waitForHolder, type AgentSettings, type LabAgent } from '../../lab/cluster.js';
import { pinDirFor } from '../../src/dataplane/ebpf.js';
import type { ElectionStatusDocument } from '../../src/observe/status.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import { leftoversOn } from '../support/leftovers.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bhov';
const SUBNET = 248;
/** Slack on a timing bound: the worker's timer, the sampler's exec, 2 shared cores (as reload.test.ts). */
const MARGIN_MS = 60;

const skip = needs('root');

describe.skipIf(skip)(`reload to the other family on the lab${skip ? `: SKIPPED, ${skip}` : ''}`, () => {
  let lab: Lab;
  let agents: LabAgent[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, apiservers: true });
  });
  afterEach(async () => {
    await resetElectionLab(lab, agents);
    agents = [];
    for (const n of lab.nodes) for (const f of ['ip', 'ip6']) await lab.exec(n.netns, ['nft', 'delete', 'table', f, 'ballast'], { allowFail: true });
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  const settings = (family: 4 | 6): AgentSettings[] => [
    { priority: 200, balance: true, family },
    { priority: 100, balance: true, family },
  ];
  const results = (a: LabAgent): Record<string, unknown>[] =>
    a.logLines().filter((l) => typeof l.msg === 'string' && /^configuration reload(ed| failed| refused)/.test(l.msg));
  const nft = (i: number, family: 'ip' | 'ip6') => lab.exec(lab.nodes[i]!.netns, ['nft', 'list', 'table', family, 'ballast'], { allowFail: true });
  /** Whether this process could take ballast's lock `name` (abstract socket) in n1's namespace: 'free' or the error code. */
  const lockState = async (name: string): Promise<string> => {
    const js = `const s=require('net').createServer();s.on('error',e=>{console.log(e.code);process.exit(0)});s.listen({path:'\\0${name}'},()=>{console.log('free');s.close()})`;
    return (await lab.exec(lab.nodes[0]!.netns, [process.execPath, '-e', js], { allowFail: true })).stdout.trim();
  };

  it('IPv4 VIP + backends → IPv6 VIP + backends on both nodes: a logged hand-over, one holder, table ip6 only, served; a stop leaves nothing', async () => {
    const [a1, a2] = await startAgents(lab, settings(4), agents);
    await waitForHolder(lab, lab.vip4, 'n1');
    await waitFor(
      () => a1!.status(),
      (s: ElectionStatusDocument) => s.dataplane.mode === 'nftables' && s.dataplane.backends.length === 2,
      { timeoutMs: 5000, what: "both IPv4 backends in n1's table" },
    );
    expect((await nft(0, 'ip')).code).toBe(0);

    // who holds which VIP, every ~20 ms, through the hand-over; each sample's four reads (two
    // VIPs on two nodes, one `ip` each) happen at some instant between its start and its t
    const samples: { start: number; t: number; v4: string[]; v6: string[] }[] = [];
    let sampling = true;
    const sampler = (async () => {
      for (let i = 0; sampling && i < 1000; i++) {
        const start = Date.now();
        const [v4, v6] = await Promise.all([lab.holders(lab.vip4), lab.holders(lab.vip6)]);
        samples.push({ start, t: Date.now(), v4: v4.map((n) => n.name), v6: v6.map((n) => n.name) });
        await sleep(20);
      }
    })();
    // the first sample is taken before either agent is told: it sees n1 hold the IPv4 VIP, so
    // the window below is measured from a sample with a holder (a reload faster than the
    // sampler's first `ip` children would otherwise leave no sample of the IPv4 holder)
    await waitFor(() => samples.length > 0, { timeoutMs: 5000, intervalMs: 5, what: 'the first holder sample' });
    const list = [a1!, a2!];
    const next = settings(6);
    list.forEach((a, i) => writeFileSync(a.configPath, agentConfig(lab, a.node, next[i]!)));
    for (const a of list) a.proc.kill('SIGHUP');
    const logged = await Promise.all(
      list.map((a) => waitFor(() => results(a)[0], { timeoutMs: 10_000, intervalMs: 20, what: `${a.node.name} to log its reload` })),
    );
    for (const l of logged) expect(l).toMatchObject({ msg: 'configuration reloaded', changed: ['apiserver.backends', 'family', 'vips'], handover: true });
    for (const a of list) {
      expect(
        a.logLines().find((l) => l.msg === 'reload: hand-over: leaving the group (priority 0 if master, VIPs removed) and joining the new one'),
      ).toMatchObject({ from: { family: 4 }, to: { family: 6 }, vipDataplane: { from: 4, to: 6 } });
      expect(a.logLines().find((l) => l.msg === 'reload: hand-over: VIP data plane moved to the new family')).toMatchObject({
        from: 4,
        to: 6,
        removed: 'table ip ballast',
        table: 'ip6 ballast',
      });
      expect(a.logLines().some((l) => l.msg === 'reload: hand-over: joined the group' && l.family === 6)).toBe(true);
    }
    await waitForHolder(lab, lab.vip6, 'n1', 3000);
    // the IPv6 backends pass their checks (rise 2 × 200 ms) and enter n1's table
    const v6Backends = lab.nodes.map((n) => `[${n.ipv6}]:6443`);
    const st = await waitFor(
      () => a1!.status(),
      (s: ElectionStatusDocument) =>
        s.dataplane.mode === 'nftables' && JSON.stringify([...s.dataplane.backends].sort()) === JSON.stringify([...v6Backends].sort()),
      { timeoutMs: 3000, what: "both IPv6 backends in n1's table" },
    );
    await sleep(500);
    sampling = false;
    await sampler;
    expect([st.family, st.vips, st.state, st.backends.map((b) => [b.address, b.state])]).toStrictEqual([
      6,
      [lab.vip6],
      'master',
      v6Backends.map((b) => [b, 'up']),
    ]);
    expect((await a2!.status()).state).toBe('backup');

    expect((await lab.holders(lab.vip6)).map((n) => n.name)).toStrictEqual(['n1']);
    expect(await lab.holders(lab.vip4)).toStrictEqual([]);
    const t6 = await nft(0, 'ip6');
    expect(t6.code).toBe(0);
    for (const n of lab.nodes) expect(t6.stdout).toContain(n.ipv6);
    expect(t6.stdout).toMatch(/dnat/);
    expect(t6.stdout).toContain(lab.vip6);
    expect((await nft(1, 'ip6')).code).toBe(0);
    for (const i of [0, 1]) expect((await nft(i, 'ip')).code).not.toBe(0);
    // the IPv4 table lock was given back, the IPv6 one is held
    expect([await lockState('ballast:nftables:ip:ballast'), await lockState('ballast:nftables:ip6:ballast')]).toStrictEqual(['free', 'EADDRINUSE']);
    const served = await probeOnce(lab, `https://[${lab.vip6}]:6443/version`, { timeoutMs: 2000 });
    expect(served).toMatchObject({ ok: true, status: 200 });

    // no holder of either VIP for at most: n1's hand-over (leave, plane moved, engine restart) +
    // the new group's Master_Down_Interval (n2 is leaving too) + MARGIN_MS, as sampled. A window
    // measured from the first sample that saw no holder (its reads came after the IPv4 VIP left,
    // so its t is too) to the first that saw one, x, overstates the real window by less than
    // x.t - (start of the sample before x): the VIP appeared after that sample's reads began and
    // before x.t. Under load one sample can take several times the mean period, so each window
    // gets the error of its own samples.
    const windows: { ms: number; samplingMs: number }[] = [];
    let from: number | null = null;
    for (const [i, x] of samples.entries()) {
      if (x.v4.length === 0 && x.v6.length === 0) from ??= x.t;
      else if (from !== null) {
        windows.push({ ms: x.t - from, samplingMs: x.t - samples[i - 1]!.start });
        from = null;
      }
    }
    const at = (msg: string): number => Date.parse(String(a1!.logLines().find((x) => x.msg === msg)?.time));
    const handoverMs =
      at('reload: hand-over: joined the group') - at('reload: hand-over: leaving the group (priority 0 if master, VIPs removed) and joining the new one');
    const period = (samples.at(-1)!.t - samples[0]!.t) / (samples.length - 1);
    expect(samples.some((x) => x.v4.length === 1) && samples.some((x) => x.v6.length === 1)).toBe(true);
    const base = handoverMs + masterDownIntervalMs(200, 10) + MARGIN_MS;
    expect(windows.filter((w) => w.ms > base + w.samplingMs)).toStrictEqual([]);
    const none = windows.reduce((m, w) => (w.ms > m.ms ? w : m), { ms: 0, samplingMs: 0 });
    console.log(
      `family hand-over figures: no holder of either VIP for ${none.ms} ms (bound ${(base + none.samplingMs).toFixed(0)} ms: n1's hand-over ${handoverMs} ms + Master_Down_Interval ${masterDownIntervalMs(200, 10).toFixed(0)} ms + ${none.samplingMs} ms sampling (mean period ${period.toFixed(0)} ms) + ${MARGIN_MS}); reload ${String(logged[0]!.durationMs)} ms on n1, ${String(logged[1]!.durationMs)} ms on n2`,
    );

    // a stop unwinds the moved plane too: nothing of either family is left
    const pgids = list.map((a) => a.proc.pid);
    expect(await Promise.all(list.map((a) => a.stop('SIGTERM')))).toStrictEqual([0, 0]);
    for (const [i, n] of lab.nodes.entries()) {
      const cgroup = await lab.cgroup(n);
      expect(await leftoversOn(lab, n, { pinDir: pinDirFor(cgroup), cgroup, pgids: [pgids[i]!] })).toStrictEqual([]);
    }
    expect(await lockState('ballast:nftables:ip6:ballast')).toBe('free');
  });

  it('the IPv6 table lock held by another process in n1: the reload fails naming the table, nothing changed (new locks given back)', async () => {
    const [a1] = await startAgents(lab, settings(4).slice(0, 1), agents);
    await waitForHolder(lab, lab.vip4, 'n1');
    const before = (await a1!.status()).counters.transitions;
    // another ballast with the IPv6 VIP data plane, as far as the lock goes
    const other = lab.spawn(lab.nodes[0]!.netns, [
      process.execPath,
      '-e',
      "require('net').createServer().listen({path:'\\0ballast:nftables:ip6:ballast'},()=>console.log('held'))",
    ]);
    try {
      await other.waitForOutput(/held/, { timeoutMs: 5000, includeExisting: true });
      writeFileSync(a1!.configPath, agentConfig(lab, a1!.node, settings(6)[0]!));
      a1!.proc.kill('SIGHUP');
      const r = await waitFor(() => results(a1!)[0], { timeoutMs: 10_000, intervalMs: 20, what: 'n1 to log its reload' });
      expect(r).toMatchObject({
        msg: 'configuration reload failed; the running state stays (what was applied before the failure is listed in the log above)',
        changed: ['apiserver.backends', 'family', 'vips'],
      });
      expect(r.problems).toStrictEqual([
        expect.stringMatching(/^another ballast agent already programs the nftables table ip6 ballast .*\(BALLAST_E_ALREADY_RUNNING\)$/),
      ]);
      expect(a1!.logLines().some((l) => typeof l.msg === 'string' && l.msg.startsWith('reload: hand-over'))).toBe(false);
      const st = await a1!.status();
      expect([st.family, st.vips, st.state, st.counters.transitions, st.reload?.last?.ok]).toStrictEqual([4, [lab.vip4], 'master', before, false]);
      expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
      expect([(await nft(0, 'ip')).code, (await nft(0, 'ip6')).code === 0]).toStrictEqual([0, false]);
      // the new instance lock (IPv6, VRID 51) and the IPv6 VIP's were given back; the IPv4 table's is still held
      expect([
        await lockState('ballast:eth0:ipv6:vrid51'),
        await lockState(`ballast:vip:${lab.vip6}`),
        await lockState('ballast:nftables:ip:ballast'),
      ]).toStrictEqual(['free', 'free', 'EADDRINUSE']);
    } finally {
      await other.stop('SIGTERM', 2000);
    }
  });
});
