/**
 * BGP mode for real (prefix `bbgp`, subnets 130..134, needs root and BIRD 2): lab/bgp-lab.ts's
 * routed lab — a router namespace running BIRD with BFD and ECMP into its kernel table, three
 * nodes each on a routed link of its own (no shared L2), each with its own BIRD, a ballast agent
 * and a TLS stand-in apiserver, and a client behind the router.
 *
 * Bounds: withdrawal on unready ≤ fall × interval + one interval + 400 ms (the nft apply, BIRD's
 * UPDATE and the router's kernel sync, and this test's 10-20 ms polling of `ip route`); a dead
 * node's path is gone within the BFD detection time (interval × multiplier) + 250 ms.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BgpLab, ecmpSpread, spreadBound, type BgpLabNode } from '../../lab/bgp-lab.js';
import { bgpAgentConfig, startBgpAgent } from '../../lab/bgp-agents.js';
import { cliPath, type LabAgent } from '../../lab/cluster.js';
import { probeOnce, runProber } from '../../lab/lab.js';
import { needs, sleep, waitFor } from '../support/index.js';
import type { StatusDocument } from '../../src/observe/status.js';

const INTERVAL_MS = 200;
const FALL = 2;
const BFD_MS = 100;
const BFD_MULT = 3;

/**
 * When the router's route changed, on the shared clock (epoch ms, performance.timeOrigin +
 * performance.now(), as the prober's `startedAt`): after `lo` (the start of the last poll that
 * still saw the old next hops, or `t0` when the first poll saw `n`), by `hi` (the end of the first
 * poll that saw `n`); `ms` is `hi` after `t0` (performance.now()).
 */
interface RouteChange {
  ms: number;
  lo: number;
  hi: number;
}

/** Polls the router's route for `vip` until it has `n` next hops. @throws Error after timeoutMs (ms), with the router's report. */
async function untilNexthops(b: BgpLab, vip: string, n: number, t0: number, timeoutMs: number): Promise<RouteChange> {
  let lo = performance.timeOrigin + t0;
  for (;;) {
    const began = performance.timeOrigin + performance.now();
    const hops = await b.nexthops(vip);
    const t = performance.now() - t0;
    if (hops.length === n) return { ms: t, lo, hi: performance.timeOrigin + performance.now() };
    lo = began;
    if (t > timeoutMs)
      throw new Error(
        `the router's route for ${vip} still has ${hops.length} next hops (${hops.join(', ')}) after ${Math.round(t)} ms, expected ${n}\n${await b.routerReport()}`,
      );
  }
}

/** The two processes' clocks line up to well under 1 ms; results' `t` and `ms` are rounded to 0.1 ms. */
const CLOCK_SLACK_MS = 5;

const bgpOf = async (a: LabAgent): Promise<NonNullable<StatusDocument['bgp']>> => {
  const d = await a.anyStatus();
  if (!d.bgp) throw new Error(`no bgp in /status of ${a.node.name}`);
  return d.bgp;
};

describe.skipIf(needs('root', 'nft', 'bird', 'birdc', 'arping'))('BGP mode in a routed lab (root, BIRD 2; skipped otherwise)', () => {
  let b: BgpLab;
  const v4: LabAgent[] = [];
  const v6: LabAgent[] = [];

  beforeAll(async () => {
    b = await BgpLab.create({ prefix: 'bbgp', subnet: 130, bfdIntervalMs: BFD_MS, bfdMultiplier: BFD_MULT });
    await b.lab.startApiservers();
    v4.push(...(await Promise.all(b.nodes.map((n) => startBgpAgent(b, n, { intervalMs: INTERVAL_MS, fall: FALL, balance: 'local' })))));
  });

  afterAll(async () => {
    await Promise.all([...v4, ...v6].map((a) => a.stop().catch(() => undefined)));
    await b?.teardown();
  });

  it('all three nodes announce: the router installs three ECMP paths, and a client is served', async () => {
    await untilNexthops(b, b.vip4, 3, performance.now(), 15_000);
    expect(await b.nexthops(b.vip4)).toStrictEqual(b.nodes.map((n) => n.link4.node).sort());
    for (const a of v4) {
      // the agent reads BIRD's sessions once a second (speaker pollMs): the router may see the route first
      const s = await waitFor(
        () => bgpOf(a),
        (x) => x.peers[0]?.session === 'Established',
        { timeoutMs: 3000, what: `${a.node.name} to see its session Established` },
      );
      expect([s.daemonUp, s.announced, s.wanted, s.peers.map((p) => p.session)], a.node.name).toStrictEqual([true, true, true, ['Established']]);
    }
    const metrics = await v4[0]!.admin('/metrics');
    expect(metrics).toMatch(/^ballast_bgp_announced 1$/m);
    expect(metrics).toMatch(/^ballast_bgp_daemon_up 1$/m);
    expect(metrics).toMatch(new RegExp(`^ballast_bgp_peer_established\\{peer="${b.nodes[0]!.link4.router}"\\} 1$`, 'm'));
    const r = await probeOnce(b.lab, `https://${b.vip4}:6443/version`);
    expect(r.ok, JSON.stringify(r)).toBe(true);
  });

  // the VIP is on lo; with Linux's defaults (arp_ignore 0) every node would answer ARP for it on
  // its link, so on a shared segment hosts would reach the VIP on-link
  it('no node answers ARP for the VIP it announces (arp_ignore 1, arp_announce 2 while the agent runs); each answers for its own link address', async () => {
    const sysctl = async (n: BgpLabNode): Promise<string> =>
      (await b.lab.exec(n.node.netns, ['sysctl', '-n', 'net.ipv4.conf.all.arp_ignore', 'net.ipv4.conf.all.arp_announce'])).stdout.trim().replace(/\s+/g, ' ');
    const replies = await Promise.all(b.nodes.map(async (n) => [await b.arpReplies(n, b.vip4), await b.arpReplies(n, n.link4.node, 1)] as const));
    expect(replies, 'per node: [replies for the VIP, replies for its link address]').toStrictEqual(b.nodes.map(() => [0, 1]));
    for (const n of b.nodes) expect(await sysctl(n), n.node.name).toBe('1 2');
    const check = await b.lab.exec(b.nodes[0]!.node.netns, [process.execPath, cliPath(), 'check', '--json', '--config', v4[0]!.configPath], {
      allowFail: true,
      timeoutMs: 30_000,
    });
    const arp = (JSON.parse(check.stdout) as { checks: { id: string; status: string; detail: string }[] }).checks.find((c) => c.id === 'bgp-arp');
    expect([arp?.status, arp?.detail], check.stderr).toStrictEqual([
      'ok',
      expect.stringContaining('net.ipv4.conf.all.arp_ignore = 1, net.ipv4.conf.all.arp_announce = 2'),
    ]);
  });

  it('ECMP: 1,000 new connections from the client spread over all three nodes, each within the binomial bound n/3 − 5σ', async () => {
    const sp = await ecmpSpread(b, 1000);
    const bound = spreadBound(1000, 3);
    expect(sp.failed).toBe(0);
    expect(Object.keys(sp.nodes).sort()).toStrictEqual(['n1', 'n2', 'n3']);
    for (const [node, k] of Object.entries(sp.nodes)) expect(k, `${node} served ${k} of 1000`).toBeGreaterThanOrEqual(bound);
    console.log(`[bgp] ECMP spread of 1000 new connections: ${JSON.stringify(sp.nodes)} (bound ${bound.toFixed(1)} each)`);
  }, 70_000); // ecmpSpread stops once 1,000 have finished (~5 s here); its 60 s cap is for a loaded machine

  // Linux routes ECMP by hash-threshold (RFC 2992, as most fabrics without resilient hashing):
  // removing or adding a path remaps some flows of the surviving paths too, and a flow moved
  // mid-connection is reset by the node it lands on (docs/bgp.md, failure modes). So a request in
  // flight across the router's route change may fail; one that started after it, or ended before
  // it, may not: that is what a too-early table removal or a late withdrawal would break.
  it("ballast stopping (SIGTERM) withdraws its path and drains; only requests in flight across the router's route change may fail (ECMP rehash), and it announces again when started", async () => {
    const n3 = b.nodes[2]!;
    const prober = runProber(b.lab, { url: `https://${b.vip4}:6443/version`, intervalMs: 10, durationMs: 20_000, timeoutMs: 250 });
    await waitFor(
      () => prober.results().length,
      (k) => k >= 30,
      { timeoutMs: 5000, what: 'the prober to run' },
    );
    const t0 = performance.now();
    const stopped = v4[2]!;
    // poll while it stops: the change window must be the router's, not the stop's
    const withdrawing = untilNexthops(b, b.vip4, 2, t0, 3000);
    await stopped.stop();
    const withdrawn = await withdrawing;
    // the ARP sysctls it raised at start are back to Linux's defaults the lab set
    expect(
      (await b.lab.exec(n3.node.netns, ['sysctl', '-n', 'net.ipv4.conf.all.arp_ignore', 'net.ipv4.conf.all.arp_announce'])).stdout.trim().split(/\s+/),
    ).toStrictEqual(['0', '0']);
    expect(await b.nexthops(b.vip4)).not.toContain(n3.link4.node);
    // the data plane went only once no new connection arrived for the quiet time (the router acted on the UPDATE)
    const drain = stopped.logLines().find((l) => typeof l.msg === 'string' && l.msg.startsWith('BGP: withdrawn'));
    expect(drain?.msg, JSON.stringify(drain)).toBe('BGP: withdrawn; no new connection for the quiet time, the data plane goes');
    const announcing = untilNexthops(b, b.vip4, 3, performance.now(), 10_000);
    v4[2] = await startBgpAgent(b, n3, { intervalMs: INTERVAL_MS, fall: FALL, balance: 'local' });
    const back = await announcing;
    const report = await prober.stop();
    const at = report.startedAt!;
    expect(at, 'the prober reports its start on the shared clock').toBeGreaterThan(0);
    const across = (r: { t: number; ms: number }, c: RouteChange): boolean => at + r.t <= c.hi + CLOCK_SLACK_MS && at + r.t + r.ms >= c.lo - CLOCK_SLACK_MS;
    const failed = report.results.filter((r) => !r.ok);
    const unexplained = failed.filter((r) => !across(r, withdrawn) && !across(r, back));
    const window = (c: RouteChange): string => `${(c.lo - at).toFixed(1)}..${(c.hi - at).toFixed(1)} ms`;
    expect(unexplained, `route changes at ${window(withdrawn)} and ${window(back)} of the prober's clock`).toStrictEqual([]);
    console.log(
      `[bgp] SIGTERM: path withdrawn after ${Math.round(withdrawn.ms)} ms; drain ${String(drain?.waitedMs)} ms, ${String(drain?.newConnections)} new connections after the withdrawal; ${report.requests} requests, ${failed.length} failed, each in flight across a route change (ECMP rehash): ${JSON.stringify(failed.map((r) => [r.t, r.ok ? '' : r.error]))}`,
    );
  });

  it("an apiserver going unready withdraws its node's route within fall × interval + one interval", async () => {
    const n3 = b.nodes[2]!;
    const bound = FALL * INTERVAL_MS + INTERVAL_MS + 400;
    const t0 = performance.now();
    await b.lab.setReady(n3.node, false);
    const { ms: took } = await untilNexthops(b, b.vip4, 2, t0, 5000);
    expect(await b.nexthops(b.vip4)).not.toContain(n3.link4.node);
    expect(took, `withdrawn after ${Math.round(took)} ms`).toBeLessThanOrEqual(bound);
    const s = await bgpOf(v4[2]!);
    expect([s.announced, s.reason]).toStrictEqual([false, 'no ready backend in the data plane']);
    await b.lab.setReady(n3.node, true);
    await untilNexthops(b, b.vip4, 3, performance.now(), 5000);
    console.log(`[bgp] withdrawal on unready: ${Math.round(took)} ms (bound ${bound} ms)`);
  });

  it('a config error in the bgp section names the field, exits 2 and changes nothing', async () => {
    const n1 = b.nodes[0]!;
    const before = readFileSync(n1.snippet4, 'utf8');
    const bad = join(b.lab.dir, 'n1-bad.yaml');
    writeFileSync(bad, bgpAgentConfig(b, n1, { adminPort: 9650, bgp: { peers: [{ address: n1.link4.router, asn: 0 }] } }));
    const r = await b.lab.exec(n1.node.netns, [process.execPath, cliPath(), 'run', '--config', bad], { allowFail: true, timeoutMs: 10_000 });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('bgp.peers[0].asn');
    expect(readFileSync(n1.snippet4, 'utf8')).toBe(before);
    expect(await b.nexthops(b.vip4)).toHaveLength(3);
    expect((await bgpOf(v4[0]!)).announced).toBe(true);
  });

  it("bgp.interface missing, or bgp.configFile the operator's bird.conf: exit 2 before anything changes", async () => {
    const n1 = b.nodes[0]!;
    const birdConf = join(n1.birdDir, 'bird.conf');
    const conf = readFileSync(birdConf, 'utf8');
    const run = async (name: string, bgp: Record<string, unknown>): Promise<{ code: number; stderr: string }> => {
      const path = join(b.lab.dir, `n1-${name}.yaml`);
      // the running agent holds the table lock: a check made after taking it would end in BALLAST_E_ALREADY_RUNNING instead
      writeFileSync(path, bgpAgentConfig(b, n1, { adminPort: 9651, bgp }));
      return b.lab.exec(n1.node.netns, [process.execPath, cliPath(), 'run', '--config', path], { allowFail: true, timeoutMs: 10_000 });
    };
    const noIface = await run('noiface', { interface: 'bbgpnone0' });
    expect([noIface.code, noIface.stderr], noIface.stderr).toStrictEqual([2, expect.stringContaining('BALLAST_E_INTERFACE_NOT_FOUND')]);
    expect(noIface.stderr).toContain('bgp.interface: there is no interface bbgpnone0');
    const foreign = await run('birdconf', { configFile: birdConf });
    expect([foreign.code, foreign.stderr], foreign.stderr).toStrictEqual([2, expect.stringContaining('BALLAST_E_BGP_CONFIG_FILE')]);
    expect(foreign.stderr).toContain(`bgp.configFile: ${birdConf} exists and is not a snippet ballast wrote`);
    expect(readFileSync(birdConf, 'utf8')).toBe(conf);
    expect(await b.birdc(n1.node.netns, n1.socket, 'show protocols')).toContain('device1');
    expect(await b.nexthops(b.vip4)).toHaveLength(3);
    expect((await bgpOf(v4[0]!)).announced).toBe(true);
  });

  it('`ballast cleanup --config` after a SIGKILLed agent withdraws through BIRD, removes the VIP from lo and the table; the agent then starts again', async () => {
    const n1 = b.nodes[0]!;
    const killed = v4[0]!;
    killed.proc.kill('SIGKILL');
    await killed.proc.exited;
    // BIRD keeps announcing what the snippet says: the dead agent's path stays
    expect(await b.nexthops(b.vip4)).toContain(n1.link4.node);
    const t0 = performance.now();
    // a /run of its own: /run/ballast's lock files are the host's, other labs' agents hold theirs
    const r = await b.lab.exec(
      n1.node.netns,
      ['unshare', '-m', 'sh', '-c', 'mount -t tmpfs tmpfs /run && exec "$@"', 'sh', process.execPath, cliPath(), 'cleanup', '--config', killed.configPath],
      { allowFail: true, timeoutMs: 30_000 },
    );
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(r.stdout).toContain(`removed the BGP announcement of ${b.vip4} from ${n1.snippet4} (ballast_vip4 disabled)`);
    expect(r.stdout).toContain(`removed VIP ${b.vip4}/32 on lo`);
    expect(r.stdout).toContain('removed table ip ballast');
    // BIRD sent the withdrawal at once: the router drops the path without waiting for a timer
    const gone = await untilNexthops(b, b.vip4, 2, t0, 3000);
    expect(await b.nexthops(b.vip4)).not.toContain(n1.link4.node);
    expect(readFileSync(n1.snippet4, 'utf8')).toContain('  disabled yes;');
    expect((await b.lab.exec(n1.node.netns, ['ip', '-4', '-o', 'addr', 'show', 'dev', 'lo'])).stdout).not.toContain(b.vip4);
    expect((await b.lab.exec(n1.node.netns, ['nft', 'list', 'table', 'ip', 'ballast'], { allowFail: true })).code).not.toBe(0);
    console.log(`[bgp] cleanup after SIGKILL: path withdrawn ${Math.round(gone.ms)} ms after the cleanup started`);
    const announcing = untilNexthops(b, b.vip4, 3, performance.now(), 10_000);
    v4[0] = await startBgpAgent(b, n1, { intervalMs: INTERVAL_MS, fall: FALL, balance: 'local' });
    await announcing;
  });

  it('the routing daemon dying is reported, and recovered from when it is back', async () => {
    const n1 = b.nodes[0]!;
    n1.bird!.kill('SIGKILL');
    await n1.bird!.exited;
    await waitFor(
      () => bgpOf(v4[0]!),
      (s) => !s.daemonUp,
      { timeoutMs: 3000, what: 'n1 to report its BIRD down' },
    );
    expect(await v4[0]!.admin('/metrics')).toMatch(/^ballast_bgp_daemon_up 0$/m);
    const during = await b.nexthops(b.vip4);
    console.log(`[bgp] while n1's BIRD is down the router has ${during.length} next hops: ${during.join(', ')}`);
    await b.startNodeBird(n1);
    const s = await waitFor(
      () => bgpOf(v4[0]!),
      (x) => x.daemonUp && x.announced && x.peers[0]!.session === 'Established',
      { timeoutMs: 10_000, what: 'n1 to push its configuration again' },
    );
    // n1's agent started afresh in the cleanup case (one push, no loss): one kill is one loss and one push
    expect([s.daemonLosses, s.pushes]).toStrictEqual([1, 2]);
    await untilNexthops(b, b.vip4, 3, performance.now(), 10_000);
    // the freshly started BIRD's first polls (speaker pollMs 1000) are no restart: its "Last reboot on" may move by a ms then
    await sleep(3 * 1000 + 200);
    const later = await bgpOf(v4[0]!);
    expect([later.daemonUp, later.daemonLosses, later.pushes]).toStrictEqual([true, 1, 2]);
  });

  it('IPv6: every node announces the /128 (balance all, announce local) and a client is served over IPv6', async () => {
    v6.push(
      ...(await Promise.all(b.nodes.map((n) => startBgpAgent(b, n, { family: 6, intervalMs: INTERVAL_MS, fall: FALL, balance: 'all', announce: 'local' })))),
    );
    await untilNexthops(b, b.vip6, 3, performance.now(), 15_000);
    expect(await b.nexthops(b.vip6)).toStrictEqual(b.nodes.map((n) => n.link6.node).sort());
    const r = await probeOnce(b.lab, `https://[${b.vip6}]:6443/version`);
    expect(r.ok, JSON.stringify(r)).toBe(true);
    // NDP answers only for an address on the receiving interface: no node answers for the VIP on lo
    if (needs('ndisc6') === null) {
      const na = await Promise.all(b.nodes.map(async (n) => [await b.ndpReplies(n, b.vip6), await b.ndpReplies(n, n.link6.node, 1)] as const));
      expect(na, 'per node: [Neighbor Advertisements for the VIP, for its link address]').toStrictEqual(b.nodes.map(() => [0, 1]));
    }
    // a clean stop withdraws (docs/bgp.md: keepOnStop is not all)
    const t0 = performance.now();
    await v6[1]!.stop();
    await untilNexthops(b, b.vip6, 2, t0, 3000);
    expect(await b.nexthops(b.vip6)).not.toContain(b.nodes[1]!.link6.node);
  });

  it('a dead node (hung: nothing in or out, link up; agent and BIRD SIGKILLed) is removed within the BFD detection time + 250 ms; clients keep being served', async () => {
    const n2: BgpLabNode = b.nodes[1]!;
    const prober = runProber(b.lab, { url: `https://${b.vip4}:6443/version`, intervalMs: 10, durationMs: 4000, timeoutMs: 250 });
    await waitFor(
      () => prober.results().length,
      (k) => k >= 50,
      { timeoutMs: 5000, what: 'the prober to run' },
    );
    const bound = BFD_MS * BFD_MULT + 250;
    const t0 = performance.now();
    const tKill = prober.now();
    // silent, not link down: the router's port loses carrier with a veth link down, which its kernel and BIRD act on at once (27 ms seen), so only this case measures BFD
    await b.killNode(n2, v4[1]!.proc, 'silent');
    const { ms: took } = await untilNexthops(b, b.vip4, 2, t0, 5000);
    expect(await b.nexthops(b.vip4)).toStrictEqual([b.nodes[0]!.link4.node, b.nodes[2]!.link4.node].sort());
    expect(took, `removed after ${Math.round(took)} ms`).toBeLessThanOrEqual(bound);
    const report = await prober.done;
    // every request that started once the path was gone (+ one request timeout) was answered
    const after = report.results.filter((r) => r.t > tKill + took + 250);
    expect(after.length).toBeGreaterThan(50);
    expect(
      after.filter((r) => !r.ok),
      JSON.stringify(after.filter((r) => !r.ok).slice(0, 3)),
    ).toStrictEqual([]);
    expect(report.maxOutageMs).toBeLessThanOrEqual(bound + 250);
    expect(Object.keys(report.nodes).sort()).toContain('n1');
    console.log(
      `[bgp] dead node removed after ${Math.round(took)} ms (bound ${bound}); client: ${report.failed} failed of ${report.requests}, longest outage ${report.maxOutageMs} ms`,
    );
  });
});
