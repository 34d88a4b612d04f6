/**
 * `npm run bench:bgp [-- --runs N --json]`: node death in BGP mode against VRRP mode, in one run,
 * interleaved round by round, medians of N (default 5); plus BGP mode's withdrawal time when an
 * apiserver turns unready and the ECMP spread of 1,000 new connections over the three nodes.
 *
 * Two labs live side by side, each in its own namespaces (their addresses do not meet):
 *   - BGP (lab/bgp-lab.ts, prefix bbgp, 10.78.130-134): a router namespace with BIRD (BFD
 *     100 ms × 3, ECMP, L4 hash), three nodes on routed links, each with BIRD + ballast
 *     (mode: bgp, balance: local) + a stand-in apiserver, the client behind the router;
 *   - VRRP (lab/lab.ts, prefix bbgpv, its own namespaces): three nodes on one bridge, ballast with
 *     VRRPv3 adverts every 100 ms (priorities 150/100/50), load balancing to every node's apiserver.
 *
 * A round kills one node of each lab — BGP: the node goes silent (nftables drops everything in
 * and out, the link stays up, so only BFD can tell); VRRP: its bridge port goes down — and its
 * agent (and BIRD) get SIGKILL, while the client sends a request on a NEW TLS connection every
 * 10 ms (250 ms timeout)
 * to https://VIP:6443/version. VRRP kills the VIP holder (n1); BGP kills n2 (any node: they all
 * serve). Per round: `outage` = the prober's longest run of failures (maxOutageMs), `errors` =
 * failed requests, `tail` = the kill to the end of the last failed request (how long any client
 * still saw errors). BGP also gives `removed` = the kill to the router's route losing the path.
 *
 * Needs root, bird2, the compiled scripts. Tears both labs down at the end, also on failure.
 */
import { parseArgs } from 'node:util';
import { Lab, runProber, type ProberReport } from '../lab/lab.js';
import { startAgent, type LabAgent } from '../lab/cluster.js';
import { BgpLab, ecmpSpread, spreadBound, type EcmpSpread } from '../lab/bgp-lab.js';
import { startBgpAgent } from '../lab/bgp-agents.js';
import { sleep, waitFor } from '../lab/wait.js';
import { runIfMain } from '../lab/entry.js';
import { stats, type Stats } from './stats.js';
import { fmt, forgetVip, preflight, ratioOf, round1, say, waitForStableHolder } from './common.js';

const PROBE_INTERVAL_MS = 10;
const PROBE_TIMEOUT_MS = 250;
const BEFORE_MS = 700;
const AFTER_MS = 1200;
const HEALTH_MS = 200;
const FALL = 2;
const BFD_MS = 100;
const BFD_MULT = 3;
const ADVERT_MS = 100;
const SPREAD_CONNECTIONS = 1000;

/** One node-death round of one mode (ms). */
export interface DeathRound {
  run: number;
  outageMs: number | null;
  errors: number;
  requests: number;
  tailMs: number | null;
  /** BGP: the kill to the route losing the path. */
  removedMs?: number;
  error?: string;
}

/** `--json`'s document. */
export interface BgpBenchReport {
  runs: number;
  probe: { intervalMs: number; timeoutMs: number };
  bgp: { bfd: { intervalMs: number; multiplier: number }; rounds: DeathRound[]; outage: Stats; errors: Stats; tail: Stats; removed: Stats };
  vrrp: { advertisementIntervalMs: number; rounds: DeathRound[]; outage: Stats; errors: Stats; tail: Stats };
  ratios: { outage: number | null; tail: number | null; errors: number | null };
  unready: { health: { intervalMs: number; fall: number }; boundMs: number; withdrawMs: number[]; median: Stats };
  /** `bound`: the binomial lower bound of each node's share (lab/bgp-lab.ts spreadBound). */
  spread: EcmpSpread & { bound: number };
}

/** Kill to the end of the last failed request that started after `tKill` (prober clock), ms. */
function tailOf(report: ProberReport, tKill: number): number {
  const failed = report.results.filter((r) => !r.ok && r.t + r.ms >= tKill);
  if (failed.length === 0) return 0;
  return round1(Math.max(...failed.map((r) => r.t + r.ms)) - tKill);
}

async function bgpAgents(b: BgpLab): Promise<LabAgent[]> {
  // damping off: every round makes n3 unready and ready again on the same agents, so from the third
  // round flap damping (4 transitions in 2 min) would rightly hold its path out for 30 s
  return Promise.all(
    b.nodes.map((n) =>
      startBgpAgent(b, n, { intervalMs: HEALTH_MS, fall: FALL, balance: 'local', damping: false, bfdIntervalMs: BFD_MS, bfdMultiplier: BFD_MULT }),
    ),
  );
}

async function bgpDeath(b: BgpLab, agents: LabAgent[], run: number): Promise<DeathRound> {
  const out: DeathRound = { run, outageMs: null, errors: 0, requests: 0, tailMs: null };
  const n2 = b.nodes[1]!;
  await waitFor(
    () => b.nexthops(b.vip4),
    (h) => h.length === 3,
    { timeoutMs: 15_000, intervalMs: 50, what: 'three ECMP paths' },
  );
  const prober = runProber(b.lab, {
    url: `https://${b.vip4}:6443/version`,
    intervalMs: PROBE_INTERVAL_MS,
    timeoutMs: PROBE_TIMEOUT_MS,
    durationMs: 20_000,
    logFile: `prober-bgp-${run}.log`,
  });
  try {
    await sleep(BEFORE_MS);
    const tKill = prober.now();
    const t0 = performance.now();
    // silent (nftables drop, link up): only BFD can tell; a veth link down is seen by the router's kernel at once
    await b.killNode(n2, agents[1]!.proc, 'silent');
    await waitFor(
      () => b.nexthops(b.vip4),
      (h) => h.length === 2,
      { timeoutMs: 5000, intervalMs: 5, what: "the dead node's path to go" },
    );
    out.removedMs = round1(performance.now() - t0);
    await sleep(AFTER_MS);
    const rep = await prober.stop();
    Object.assign(out, { outageMs: rep.maxOutageMs, errors: rep.failed, requests: rep.requests, tailMs: tailOf(rep, tKill) });
  } catch (e) {
    await prober.stop().catch(() => undefined);
    out.error = e instanceof Error ? e.message : String(e);
  }
  // back to three: link, BIRD, agent
  await b.reviveLink(n2);
  await b.startNodeBird(n2);
  agents[1] = await startBgpAgent(b, n2, { intervalMs: HEALTH_MS, fall: FALL, balance: 'local', bfdIntervalMs: BFD_MS, bfdMultiplier: BFD_MULT });
  return out;
}

async function vrrpDeath(lab: Lab, run: number): Promise<DeathRound> {
  const out: DeathRound = { run, outageMs: null, errors: 0, requests: 0, tailMs: null };
  const [n1, n2] = [lab.nodes[0]!, lab.nodes[1]!];
  const agents = await Promise.all(
    lab.nodes.map((node, i) =>
      startAgent(lab, node, { priority: [150, 100, 50][i]!, advertisementInterval: `${ADVERT_MS}ms`, balance: true, healthInterval: `${HEALTH_MS}ms` }),
    ),
  );
  try {
    await waitForStableHolder(lab, n1, 10_000, 300);
    // every backend up in the holder's data plane before the round starts
    await waitFor(
      () => agents[0]!.anyStatus(),
      (d) => d.dataplane.mode === 'nftables' && d.dataplane.backends.length === 3,
      { timeoutMs: 10_000, what: 'n1 balancing to three backends' },
    );
    await forgetVip(lab);
    const prober = runProber(lab, {
      url: `https://${lab.vip4}:6443/version`,
      intervalMs: PROBE_INTERVAL_MS,
      timeoutMs: PROBE_TIMEOUT_MS,
      durationMs: 20_000,
      logFile: `prober-vrrp-${run}.log`,
    });
    await sleep(BEFORE_MS);
    const tKill = prober.now();
    await lab.linkDown(n1);
    agents[0]!.proc.kill('SIGKILL');
    await waitFor(
      () => lab.holders(lab.vip4),
      (h) => h.length === 1 && h[0]!.name === n2.name,
      { timeoutMs: 15_000, intervalMs: 10, what: 'n2 to hold the VIP' },
    );
    await sleep(AFTER_MS);
    const rep = await prober.stop();
    Object.assign(out, { outageMs: rep.maxOutageMs, errors: rep.failed, requests: rep.requests, tailMs: tailOf(rep, tKill) });
  } catch (e) {
    out.error = e instanceof Error ? e.message : String(e);
  } finally {
    await Promise.all(agents.map((a) => a.stop('SIGTERM').catch(() => undefined)));
    await lab.linkUp(n1);
    for (const n of lab.nodes) await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
    await forgetVip(lab);
  }
  return out;
}

/** setReady(n3, false) to the route losing n3's path, ms; n3 made ready again (and its path back). */
async function unreadyWithdraw(b: BgpLab): Promise<number> {
  const n3 = b.nodes[2]!;
  await waitFor(
    () => b.nexthops(b.vip4),
    (h) => h.length === 3,
    { timeoutMs: 15_000, intervalMs: 50, what: 'three ECMP paths' },
  );
  const t0 = performance.now();
  await b.lab.setReady(n3.node, false);
  await waitFor(
    () => b.nexthops(b.vip4),
    (h) => h.length === 2,
    { timeoutMs: 5000, intervalMs: 5, what: "the unready node's path to go" },
  );
  const ms = round1(performance.now() - t0);
  await b.lab.setReady(n3.node, true);
  await waitFor(
    () => b.nexthops(b.vip4),
    (h) => h.length === 3,
    { timeoutMs: 5000, intervalMs: 20, what: 'the path to come back' },
  );
  return ms;
}

/** 1,000 new TLS connections from the client: which node served each (lab/bgp-lab.ts). */
async function spread(b: BgpLab): Promise<EcmpSpread> {
  await waitFor(
    () => b.nexthops(b.vip4),
    (h) => h.length === 3,
    { timeoutMs: 15_000, intervalMs: 50, what: 'three ECMP paths' },
  );
  return ecmpSpread(b, SPREAD_CONNECTIONS);
}

function usage(): string {
  return 'usage: node dist/bench/bgp.js [--runs N (1..20, default 5)] [--json]';
}

/** Prints `r` as the table (to `out`: stdout, or stderr when stdout carries --json). */
function printTable(r: BgpBenchReport, out: (line?: string) => void): void {
  const say = out;
  const w = 8;
  const row = (label: string, xs: (number | null | undefined)[], st: Stats): string =>
    `${label.padEnd(26)}${xs.map((x) => fmt(x, w, 1)).join('')}  |${fmt(st.median, w, 1)}${fmt(st.min, w, 1)}${fmt(st.max, w, 1)}`;
  const head = `${'node death'.padEnd(26)}${Array.from({ length: r.runs }, (_, i) => `#${i + 1}`.padStart(w)).join('')}  |${'median'.padStart(w)}${'min'.padStart(w)}${'max'.padStart(w)}`;
  say(head);
  say('-'.repeat(head.length));
  say(
    row(
      'BGP  outage ms',
      r.bgp.rounds.map((x) => x.outageMs),
      r.bgp.outage,
    ),
  );
  say(
    row(
      'VRRP outage ms',
      r.vrrp.rounds.map((x) => x.outageMs),
      r.vrrp.outage,
    ),
  );
  say(
    row(
      'BGP  error tail ms',
      r.bgp.rounds.map((x) => x.tailMs),
      r.bgp.tail,
    ),
  );
  say(
    row(
      'VRRP error tail ms',
      r.vrrp.rounds.map((x) => x.tailMs),
      r.vrrp.tail,
    ),
  );
  say(
    row(
      'BGP  failed requests',
      r.bgp.rounds.map((x) => x.errors),
      r.bgp.errors,
    ),
  );
  say(
    row(
      'VRRP failed requests',
      r.vrrp.rounds.map((x) => x.errors),
      r.vrrp.errors,
    ),
  );
  say(
    row(
      'BGP  path removed ms',
      r.bgp.rounds.map((x) => x.removedMs),
      r.bgp.removed,
    ),
  );
  say();
  const ratio = (v: number | null): string => (v === null ? '—' : v.toFixed(2));
  say(`ratio BGP/VRRP of the medians: outage ${ratio(r.ratios.outage)}, error tail ${ratio(r.ratios.tail)}, failed requests ${ratio(r.ratios.errors)}`);
  say(
    `BFD detection time ${r.bgp.bfd.intervalMs} ms × ${r.bgp.bfd.multiplier} = ${r.bgp.bfd.intervalMs * r.bgp.bfd.multiplier} ms; VRRP adverts every ${r.vrrp.advertisementIntervalMs} ms`,
  );
  say();
  say(
    `withdrawal on unready (health ${r.unready.health.intervalMs} ms, fall ${r.unready.health.fall}; bound fall × interval + interval = ${r.unready.boundMs} ms): ${r.unready.withdrawMs.map((x) => x.toFixed(0)).join(', ')} ms; median ${fmt(r.unready.median.median, 0, 1)} ms`,
  );
  const total = Object.values(r.spread.nodes).reduce((a, b) => a + b, 0);
  say(
    `ECMP spread of ${r.spread.connections} new connections (fib_multipath_hash_policy=1): ${Object.entries(r.spread.nodes)
      .sort()
      .map(([k, v]) => `${k} ${v} (${((100 * v) / Math.max(1, total)).toFixed(1)}%)`)
      .join(', ')}; failed ${r.spread.failed}; binomial bound n/3 − 5σ = ${r.spread.bound.toFixed(1)} each`,
  );
  for (const [m, rounds] of [
    ['BGP', r.bgp.rounds],
    ['VRRP', r.vrrp.rounds],
  ] as const)
    for (const x of rounds) if (x.error) say(`note: ${m} #${x.run}: ${x.error}`);
}

async function main(): Promise<number> {
  const { values } = parseArgs({ options: { runs: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } }, strict: true });
  if (values.help) {
    say(usage());
    return 0;
  }
  const checked = preflight(values, {
    name: 'bench-bgp',
    usage: usage(),
    defaults: { runs: 5, maxRuns: 20, seconds: 1, workers: 1 },
    root: 'network namespaces, nftables',
    files: [['/usr/sbin/bird', 'bird2']],
  });
  if (typeof checked === 'number') return checked;
  const { runs } = checked;
  let b: BgpLab | undefined;
  let vlab: Lab | undefined;
  try {
    b = await BgpLab.create({ prefix: 'bbgp', subnet: 130, bfdIntervalMs: BFD_MS, bfdMultiplier: BFD_MULT });
    await b.lab.startApiservers();
    vlab = await Lab.create({ prefix: 'bbgpv', subnet: 130, nodes: 3 });
    await vlab.startApiservers();
    const agents = await bgpAgents(b);
    const bgpRounds: DeathRound[] = [];
    const vrrpRounds: DeathRound[] = [];
    const withdraw: number[] = [];
    for (let i = 1; i <= runs; i++) {
      // interleaved, alternating which goes first
      const order = i % 2 === 1 ? (['bgp', 'vrrp'] as const) : (['vrrp', 'bgp'] as const);
      for (const m of order) {
        if (m === 'bgp') bgpRounds.push(await bgpDeath(b, agents, i));
        else vrrpRounds.push(await vrrpDeath(vlab, i));
        process.stderr.write(`  round ${i} ${m}: ${JSON.stringify((m === 'bgp' ? bgpRounds : vrrpRounds).at(-1))}\n`);
      }
      withdraw.push(await unreadyWithdraw(b));
    }
    const sp = await spread(b);
    await Promise.all(agents.map((a) => a.stop().catch(() => undefined)));
    const ok = (xs: DeathRound[]) => xs.filter((x) => !x.error);
    const st = (xs: DeathRound[], k: 'outageMs' | 'tailMs' | 'errors' | 'removedMs') => stats(ok(xs).flatMap((x) => (typeof x[k] === 'number' ? [x[k]] : [])));
    const report: BgpBenchReport = {
      runs,
      probe: { intervalMs: PROBE_INTERVAL_MS, timeoutMs: PROBE_TIMEOUT_MS },
      bgp: {
        bfd: { intervalMs: BFD_MS, multiplier: BFD_MULT },
        rounds: bgpRounds,
        outage: st(bgpRounds, 'outageMs'),
        errors: st(bgpRounds, 'errors'),
        tail: st(bgpRounds, 'tailMs'),
        removed: st(bgpRounds, 'removedMs'),
      },
      vrrp: {
        advertisementIntervalMs: ADVERT_MS,
        rounds: vrrpRounds,
        outage: st(vrrpRounds, 'outageMs'),
        errors: st(vrrpRounds, 'errors'),
        tail: st(vrrpRounds, 'tailMs'),
      },
      ratios: { outage: null, tail: null, errors: null },
      unready: { health: { intervalMs: HEALTH_MS, fall: FALL }, boundMs: FALL * HEALTH_MS + HEALTH_MS, withdrawMs: withdraw, median: stats(withdraw) },
      spread: { ...sp, bound: round1(spreadBound(SPREAD_CONNECTIONS, 3)) },
    };
    report.ratios = {
      outage: ratioOf(report.bgp.outage.median, report.vrrp.outage.median),
      tail: ratioOf(report.bgp.tail.median, report.vrrp.tail.median),
      errors: ratioOf(report.bgp.errors.median, report.vrrp.errors.median),
    };
    // one run, both forms: with --json the table goes to stderr
    printTable(report, values.json ? (l = '') => void process.stderr.write(`${l}\n`) : say);
    if (values.json) say(JSON.stringify(report, null, 2));
    return 0;
  } finally {
    await b?.teardown().catch(() => undefined);
    await vlab?.teardown().catch(() => undefined);
  }
}

runIfMain(import.meta.url, 'bench-bgp', main);
