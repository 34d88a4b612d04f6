/**
 * `npm run bench:hitless [-- --runs N --quick --json --events E,… --systems S,…]`: how many
 * long-lived watches through the VIP survive a move of the VIP, ballast and keepalived + haproxy
 * side by side in one run, on one lab.
 *
 * The lab (lab/lab.ts, prefix bhb, 10.78.164.0/24): three nodes with priorities 150/100/50,
 * VRRPv3 adverts every 100 ms, VIP 10.78.164.100/32, a TLS stand-in apiserver on every node
 * whose ticking watch sends an event every 200 ms (apiserver-standin.ts). The client is the watch
 * fleet (lab/clients/watch-fleet.ts): 2,000 TLS connections from 20 source addresses, each
 * holding that watch, opened at 250 per second.
 *
 *   ballast              `ballast run` on every node (with the shipped launchers' MALLOC_ARENA_MAX=1,
 *                        as bench/resources.ts), the three apiservers as backends (GET
 *                        /readyz every 200 ms, rise 2, fall 2): the fleet connects to VIP:6443,
 *                        the holder's nftables DNAT each connection to an apiserver
 *   keepalived+haproxy   keepalived (VRRPv3, advert_int 0.1) and haproxy (the kubeadm guide's
 *                        TCP-mode config, `bind *:8443`, roundrobin, the same checks) on every
 *                        node: the fleet connects to VIP:8443, the holder's haproxy relays
 *
 * Events, each injected on the holder at a mark of the fleet (the window that follows is
 * WINDOW_MS long; a connection silent for HANG_MS at its end is `hung`):
 *
 *   event      ballast                              keepalived+haproxy
 *   sigkill    SIGKILL of n1's agent                SIGKILL of n1's keepalived (haproxy stays)
 *   linkdown   n1's link down (its apiserver is gone for the clients: its connections are not
 *              counted among those whose backend survived)
 *   sigterm    SIGTERM of n1's agent (priority 0)   SIGTERM of n1's keepalived (priority 0)
 *   preempt    n1's agent stopped (SIGTERM) before the fleet opens, so n2 holds the VIP and
 *              serves every connection; at the mark n1's agent / keepalived starts again and
 *              preempts back (priority 150 > 100)
 *   reload     n1's file rewritten with priority 60 and reloaded (SIGHUP): n2 (100) preempts;
 *              ballast applies a priority change from its next advert, keepalived re-reads its
 *              whole configuration
 *
 * For each event and system: the share kept of the connections whose backend survived (open at
 * the mark, still open at the window's end, events flowing), the stall (the longest gap between
 * two events of a connection, the one across the event included) p50/p99/max over the kept
 * ones, how the others ended (reset / FIN / hung / error) and when (mark → the reset or FIN; a
 * hung one at the window's end), when the VIP moved (first seen on
 * another node, polled every 100 ms), and the new holder's CPU over the window (its daemons:
 * every process in its namespace named node, ballast, conntrackd, keepalived or haproxy, the
 * stand-in apiserver left out; % of one core). Each run also measures the holder's daemons at
 * idle (before the fleet opens; ballast after its start-up memory release) and under the
 * connections (all open): RSS (MiB) and CPU (% of one core) over SAMPLE_MS. Kernel forwarding (softirq) is not attributed to any process and is
 * not in these figures.
 *
 * Every run starts fresh daemons and a fresh fleet and ends with both stopped, links up, stand-ins
 * running, VIPs removed, conntrack tables flushed. The runs are interleaved: per round, per event,
 * the systems' order rotates, so that drift on the machine spreads over them alike. Figures are
 * medians over the runs (`--runs`, default 3; `--quick`: 1).
 *
 * Needs root, keepalived, haproxy and the compiled scripts (`npm run build:ts`). Tears the lab
 * down at the end, also on failure and on SIGINT; it stops only what it (or the lab) started.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Lab, type LabNode } from '../lab/lab.js';
import { agentConfig, cliPath, restoreNodes, startAgent, type AgentSettings, type LabAgent } from '../lab/cluster.js';
import { startWatchFleet, type FleetWindowResult, type WatchFleet } from '../lab/fleet.js';
import { summarizeFleet, type FleetEnd, type FleetSummary, FLEET_ENDS } from '../lab/fleet-summary.js';
import { sleep, waitFor } from '../lab/wait.js';
import { KEEPALIVED_PATH, keepalivedConfig, keepalivedVersion, startKeepalived, type KeepalivedOptions, type KeepalivedPeer } from '../lab/peers/keepalived.js';
import { HAPROXY_PATH, haproxyVersion, startHaproxy, type HaproxyOptions, type HaproxyPeer } from '../lab/peers/haproxy.js';
import { masterDownIntervalMs, skewTimeMs } from '../src/vrrp/state.js';
import { RELEASE_DELAY_MS } from '../src/agent/memory.js';
import { errText, forgetVip, intArg, load, progress, ratioOf, rotate, round1, say, waitForStableHolder } from './common.js';
import { cpuPercent, sampleTree } from './procfs.js';
import { stats } from './stats.js';
import { SHIPPED_ENV } from './resources.js';
import { runIfMain } from '../lab/entry.js';

const PREFIX = 'bhb';
const SUBNET = 164;
const PRIORITIES = [150, 100, 50] as const;
/** n1's priority after the reload event: below n2's */
const RELOAD_PRIORITY = 60;
const ADVERT_MS = 100;
const APISERVER_PORT = 6443;
/** the kubeadm guide's example haproxy port (the local apiserver owns 6443) */
const HAPROXY_PORT = 8443;
/** both balancers' checks: GET /readyz every 200 ms, rise 2, fall 2 (the lab's ballast default) */
const CHECK = { interMs: 200, fall: 2, rise: 2 } as const;
const CONNECTIONS = 2000;
const SOURCES = 20;
const OPEN_RATE = 250;
/** after the event: long enough for a SIGKILLed holder's VIP lifetime (~4 s) and the backoffs after it */
const WINDOW_MS = 10_000;
const HANG_MS = 3000;
/** the share of the fleet that must be open at the mark */
const MIN_OPEN_SHARE = 0.99;
/** RSS / CPU sampling at idle and under the connections */
const SAMPLE_MS = 3000;
const QUICK_SAMPLE_MS = 1500;
const STABLE_MS = 300;
const DEFAULT_RUNS = 3;
const MAX_RUNS = 10;

export type System = 'ballast' | 'keepalivedHaproxy';
export type EventKind = 'sigkill' | 'linkdown' | 'sigterm' | 'preempt' | 'reload';
export const SYSTEMS: readonly System[] = ['ballast', 'keepalivedHaproxy'];
export const EVENTS: readonly EventKind[] = ['sigkill', 'linkdown', 'sigterm', 'preempt', 'reload'];
const SYSTEM_LABEL: Record<System, string> = { ballast: 'ballast', keepalivedHaproxy: 'keepalived+haproxy' };
const EVENT_LABEL: Record<EventKind, string> = {
  sigkill: "holder's agent SIGKILL",
  linkdown: "holder's link down",
  sigterm: "holder's agent SIGTERM",
  preempt: 'preemption back',
  reload: 'reload hand-over',
};

/** RSS and CPU of a node's daemons over a sample. */
export interface Usage {
  /** the daemons' processes sampled */
  processes: number;
  rssMiB: number;
  /** % of one core */
  cpuPercent: number;
}

/** One event on one system, one run. Times in ms. */
export interface EventRun {
  run: number;
  system: System;
  event: EventKind;
  /** connections open at the mark */
  open: number;
  /** over the connections whose backend survived */
  survived: FleetSummary;
  /** over the connections of a backend that did not survive (linkdown: n1's) */
  dead: FleetSummary;
  byNode: Record<string, FleetSummary>;
  /** mark → the VIP first seen on another node than the old holder (100 ms polls); null: not seen */
  vipMovedMs: number | null;
  newHolder: string | null;
  /** the new holder's daemons over the window, % of one core */
  newHolderCpuPercent: number | null;
  /** the old holder's daemons, before the fleet opened and with every connection open */
  idle: Usage | null;
  loaded: Usage | null;
  /** the fleet's own CPU over the window, % of one core */
  fleetCpuPercent: number | null;
  error?: string;
}

/** Medians over the runs of one event on one system. */
export interface EventFigures {
  event: EventKind;
  system: System;
  runs: EventRun[];
  /** median of the runs' kept shares (0..1) and the lowest */
  keptShare: number | null;
  keptShareMin: number | null;
  /** kept / connections whose backend survived, summed over the runs */
  kept: number;
  connections: number;
  stall: { p50: number | null; p99: number | null; max: number | null };
  /** summed over the runs: how the survivors' connections that were not kept ended */
  ended: Record<FleetEnd, number>;
  /** summed: how the dead backend's connections ended */
  deadEnded: Record<FleetEnd, number>;
  vipMovedMs: number | null;
  newHolderCpuPercent: number | null;
  /** medians over the runs of the mark → end of the survivors' connections not kept (p50, max) */
  lostAt: { p50: number | null; max: number | null };
}

export interface HitlessReport {
  bench: 'hitless';
  lab: { prefix: string; subnet: number; nodes: number; priorities: number[]; vip: string; advertisementIntervalMs: number };
  fleet: { connections: number; sources: number; eventEveryMs: number; windowMs: number; hangMs: number };
  versions: { node: string; keepalived: string; haproxy: string; ballast: string };
  /** RFC 9568 §6.1 for n2 (priority 100, 10 cs), and issue 29's stall goals */
  bounds: { masterDownIntervalMs: number; skewTimeMs: number; goalStallAfterDeathMs: number; goalStallAfterHandoverMs: number };
  runs: number;
  figures: EventFigures[];
  resources: Record<System, { idle: Usage | null; loaded: Usage | null }>;
  /** ballast / keepalived+haproxy per event: kept share and stall p99 (null when either is missing or 0) */
  ratios: Record<EventKind, { keptShare: number | null; stallP99: number | null }>;
  loadavg: { start: number[]; end: number[] };
}

// ---------------------------------------------------------------------------------------------
// the daemons under test

/** One system's daemons on every node, with the moves the events need. */
interface Stack {
  /** the node's daemons are healthy: every backend up in its balancer */
  healthy(node: LabNode): Promise<boolean>;
  /** resolves once the node's daemons are past their start-up (ballast: its memory release) */
  settled(node: LabNode): Promise<void>;
  /** signals the node's election daemon (ballast's agent; keepalived); resolves once it exited */
  signal(node: LabNode, sig: 'SIGKILL' | 'SIGTERM'): Promise<unknown>;
  /** starts the node's election daemon again (resolves once it runs) */
  start(node: LabNode): Promise<void>;
  /** rewrites the node's file with `priority` and reloads it (SIGHUP) */
  reload(node: LabNode, priority: number): void;
  stop(): Promise<void>;
}

function haproxySettings(lab: Lab): HaproxyOptions {
  return { port: HAPROXY_PORT, checkPath: '/readyz', ...CHECK, servers: lab.nodes.map((n) => ({ name: n.name, address: n.ipv4, port: APISERVER_PORT })) };
}

const agentSettings = (i: number, extra: Record<string, unknown>): AgentSettings => ({
  priority: PRIORITIES[i]!,
  env: { ...SHIPPED_ENV },
  advertisementInterval: `${ADVERT_MS}ms`,
  balance: true,
  healthInterval: `${CHECK.interMs}ms`,
  ...(Object.keys(extra).length > 0 ? { extra } : {}),
});

async function startBallast(lab: Lab, extra: Record<string, unknown>): Promise<Stack> {
  const agents = new Map<string, LabAgent>();
  const stack: Stack = {
    healthy: async (node) => {
      const a = agents.get(node.name);
      if (a === undefined) return false;
      const s = await a.status().catch(() => undefined);
      return s !== undefined && s.backends.length === lab.nodes.length && s.backends.every((b) => b.healthy);
    },
    settled: async (node) => {
      // the agent gives back what start-up used RELEASE_DELAY_MS after it (src/agent/memory.ts)
      await agents.get(node.name)?.proc.waitForOutput(/"msg":"memory released"/, { timeoutMs: RELEASE_DELAY_MS + 10_000, includeExisting: true });
    },
    signal: (node, sig) => agents.get(node.name)?.stop(sig) ?? Promise.resolve(),
    start: async (node) => {
      const i = lab.nodes.indexOf(node);
      agents.set(node.name, await startAgent(lab, node, agentSettings(i, extra)));
    },
    reload: (node, priority) => {
      const a = agents.get(node.name)!;
      writeFileSync(a.configPath, agentConfig(lab, node, { ...agentSettings(lab.nodes.indexOf(node), extra), priority }));
      a.proc.kill('SIGHUP');
    },
    stop: async () => {
      await Promise.all([...agents.values()].map((a) => a.stop('SIGTERM').catch(() => undefined)));
    },
  };
  const settled = await Promise.allSettled(lab.nodes.map((n, i) => startAgent(lab, n, agentSettings(i, extra))));
  settled.forEach((s, i) => s.status === 'fulfilled' && agents.set(lab.nodes[i]!.name, s.value));
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    await stack.stop();
    throw failed.reason;
  }
  return stack;
}

async function startKeepalivedHaproxy(lab: Lab): Promise<Stack> {
  const kas = new Map<string, KeepalivedPeer>();
  const has = new Map<string, HaproxyPeer>();
  const kopts = (i: number): KeepalivedOptions => ({
    priority: PRIORITIES[i]!,
    advertIntervalS: ADVERT_MS / 1000,
    vrrpVersion: 3,
    vips: [`${lab.vip4}/32`],
    interface: 'eth0',
  });
  const stack: Stack = {
    healthy: async (node) => {
      const h = has.get(node.name);
      const s = await h?.servers().catch(() => undefined);
      return s !== undefined && s.length === lab.nodes.length && s.every((x) => x.status === 'UP' && x.checkStatus === 'L7OK');
    },
    settled: () => Promise.resolve(),
    signal: (node, sig) => kas.get(node.name)?.stop(sig) ?? Promise.resolve(),
    start: async (node) => {
      kas.set(node.name, await startKeepalived(lab, node, kopts(lab.nodes.indexOf(node))));
    },
    reload: (node, priority) => {
      const k = kas.get(node.name)!;
      writeFileSync(k.configPath, keepalivedConfig({ ...kopts(lab.nodes.indexOf(node)), priority }));
      // the parent re-reads the file and restarts its VRRP child's configuration
      k.proc.child.kill('SIGHUP');
    },
    stop: async () => {
      await Promise.all([...kas.values()].map((k) => k.stop('SIGTERM', 3000).catch(() => undefined)));
      await Promise.all([...has.values()].map((h) => h.stop(3000).catch(() => undefined)));
    },
  };
  const settled = await Promise.allSettled(
    lab.nodes.flatMap((n, i) => [
      startHaproxy(lab, n, haproxySettings(lab)).then((h) => void has.set(n.name, h)),
      startKeepalived(lab, n, kopts(i)).then((k) => void kas.set(n.name, k)),
    ]),
  );
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    await stack.stop();
    throw failed.reason;
  }
  return stack;
}

// ---------------------------------------------------------------------------------------------
// measuring a node's daemons

const DAEMON_COMMS = new Set(['node', 'ballast', 'conntrackd', 'keepalived', 'haproxy']);

/** The daemons' PIDs in `node`'s namespace: the processes named in DAEMON_COMMS but its stand-in apiserver. */
async function daemonPids(lab: Lab, node: LabNode): Promise<number[]> {
  const r = await lab.exec(lab.lan, ['ip', 'netns', 'pids', node.netns], { allowFail: true });
  const standin = lab.apiserver(node)?.pid;
  return r.stdout
    .split(/\s+/)
    .filter(Boolean)
    .map(Number)
    .filter((pid) => {
      if (pid === standin) return false;
      try {
        return DAEMON_COMMS.has(readFileSync(`/proc/${pid}/comm`, 'utf8').trim());
      } catch {
        return false;
      }
    });
}

/** A sample of `pids` that tolerates one of them exiting meanwhile. */
function sampleSome(pids: readonly number[]): ReturnType<typeof sampleTree> {
  const alive = pids.filter((p) => existsSync(`/proc/${p}`));
  try {
    return sampleTree(alive);
  } catch {
    return sampleTree(alive.filter((p) => existsSync(`/proc/${p}`)));
  }
}

/** RSS (at the end) and CPU of `node`'s daemons over `ms`. */
async function usageOver(lab: Lab, node: LabNode, ms: number): Promise<Usage> {
  const pids = await daemonPids(lab, node);
  const s0 = sampleSome(pids);
  await sleep(ms);
  const s1 = sampleSome(pids);
  return { processes: s1.pids.length, rssMiB: round1(s1.rssKiB / 1024), cpuPercent: round1(cpuPercent(s0.ticks, s1.ticks, s1.at - s0.at)) };
}

// ---------------------------------------------------------------------------------------------
// one run

/** Puts the lab back: links up, stand-ins ready, no VIP, no conntrack entries, no neighbour entry. */
async function resetLab(lab: Lab): Promise<void> {
  await restoreNodes(lab);
  for (const n of lab.nodes) {
    await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
    await lab.exec(n.netns, ['conntrack', '-F'], { allowFail: true });
  }
  await lab.exec(lab.client.netns, ['conntrack', '-F'], { allowFail: true });
  await forgetVip(lab);
}

/** Polls the VIP's holders every 100 ms until a node other than `old` holds it or `untilMs` passed; ms since `t0`, or null. */
async function vipMoved(lab: Lab, old: LabNode, t0: number, untilMs: number): Promise<number | null> {
  while (Date.now() - t0 < untilMs) {
    const h = await lab.holders(lab.vip4);
    if (h.some((n) => n !== old)) return Date.now() - t0;
    await sleep(100);
  }
  return null;
}

interface RunOptions {
  run: number;
  sampleMs: number;
  windowMs: number;
  count: number;
  ballastExtra: Record<string, unknown>;
}

/** One event on one system. Never throws: a failed run has `error`. Leaves the lab as resetLab does. */
async function runOnce(lab: Lab, system: System, event: EventKind, o: RunOptions): Promise<EventRun> {
  const [n1, n2] = [lab.nodes[0]!, lab.nodes[1]!];
  const empty = summarizeFleet([]);
  const r: EventRun = {
    run: o.run,
    system,
    event,
    open: 0,
    survived: empty,
    dead: empty,
    byNode: {},
    vipMovedMs: null,
    newHolder: null,
    newHolderCpuPercent: null,
    idle: null,
    loaded: null,
    fleetCpuPercent: null,
  };
  const tag = `${system}-${event}-${o.run}`;
  let stack: Stack | undefined;
  let fleet: WatchFleet | undefined;
  let signalled: Promise<unknown> | undefined;
  try {
    stack = system === 'ballast' ? await startBallast(lab, o.ballastExtra) : await startKeepalivedHaproxy(lab);
    await waitForStableHolder(lab, n1, 10_000, STABLE_MS);
    let holder = n1;
    if (event === 'preempt') {
      // n2 holds the VIP when the fleet opens; n1 comes back at the mark
      await stack.signal(n1, 'SIGTERM');
      await lab.exec(n1.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
      await waitForStableHolder(lab, n2, 10_000, STABLE_MS);
      holder = n2;
    }
    const s = stack;
    await waitFor(
      () => s.healthy(holder),
      (ok) => ok,
      { timeoutMs: 10_000, intervalMs: 100, what: `${holder.name}'s balancer to see every backend up` },
    );
    await forgetVip(lab);
    await stack.settled(holder);
    r.idle = await usageOver(lab, holder, o.sampleMs);
    const port = system === 'ballast' ? APISERVER_PORT : HAPROXY_PORT;
    fleet = await startWatchFleet(lab, {
      url: `https://${lab.vip4}:${port}`,
      count: o.count,
      sources: SOURCES,
      openRate: OPEN_RATE,
      windowMs: o.windowMs,
      hangMs: HANG_MS,
      reopen: false,
      durationMs: 120_000,
      logFile: `fleet-${tag}.log`,
    });
    // a few connections that failed every attempt (a loaded machine) leave the run valid: the
    // window counts the connections open at the mark
    await fleet.waitOpen({ count: Math.ceil(o.count * MIN_OPEN_SHARE), timeoutMs: 90_000 });
    r.loaded = await usageOver(lab, holder, o.sampleMs);

    // the mark, then the event at once
    const before = new Map<string, ReturnType<typeof sampleTree>>();
    for (const n of lab.nodes) before.set(n.name, sampleSome(await daemonPids(lab, n)));
    const { mark, done } = await fleet.mark(event, o.windowMs);
    const t0 = Date.now();
    switch (event) {
      case 'sigkill':
        signalled = stack.signal(n1, 'SIGKILL');
        break;
      case 'sigterm':
        signalled = stack.signal(n1, 'SIGTERM');
        break;
      case 'linkdown':
        await lab.linkDown(n1);
        break;
      case 'preempt':
        signalled = stack.start(n1);
        break;
      case 'reload':
        stack.reload(n1, RELOAD_PRIORITY);
        break;
    }
    r.vipMovedMs = await vipMoved(lab, holder, t0, o.windowMs);
    const w: FleetWindowResult = await done;
    const t1 = Date.now();
    const holders = await lab.holders(lab.vip4);
    const newHolder = holders.find((n) => n !== holder) ?? holders[0];
    r.newHolder = newHolder?.name ?? null;
    if (newHolder !== undefined) {
      const after = sampleSome(await daemonPids(lab, newHolder));
      const b = before.get(newHolder.name)!;
      r.newHolderCpuPercent = round1(cpuPercent(b.ticks, after.ticks, Math.max(1, after.at - b.at)));
    }
    progress(`    window ${Math.round(t1 - t0)} ms, ${mark.open} open at the mark`);
    r.open = mark.open;
    const survivors = event === 'linkdown' ? lab.nodes.filter((n) => n !== n1).map((n) => n.name) : lab.nodes.map((n) => n.name);
    const deadNodes = lab.nodes.map((n) => n.name).filter((n) => !survivors.includes(n));
    r.survived = summarizeFleet(w.conns, survivors);
    r.dead = summarizeFleet(w.conns, deadNodes);
    r.byNode = w.window.byNode;
    r.fleetCpuPercent = w.window.cpuPercent;
  } catch (e) {
    r.error = errText(e);
  } finally {
    await fleet?.stop().catch(() => undefined);
    await signalled?.catch(() => undefined);
    await stack?.stop();
    await resetLab(lab).catch((e: unknown) => progress(`reset failed: ${errText(e)}`));
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// figures and output

const median = (xs: readonly number[]): number | null => stats(xs, 1).median;
const sumEnds = (xs: readonly Record<FleetEnd, number>[]): Record<FleetEnd, number> =>
  Object.fromEntries(FLEET_ENDS.map((e) => [e, xs.reduce((a, x) => a + x[e], 0)])) as Record<FleetEnd, number>;

/** The medians of one event on one system over its successful runs (pure). */
export function figuresOf(event: EventKind, system: System, runs: EventRun[]): EventFigures {
  const ok = runs.filter((r) => r.error === undefined && r.survived.connections > 0);
  const shares = ok.map((r) => r.survived.keptShare!);
  const nums = (f: (r: EventRun) => number | null): number[] => ok.map(f).filter((x): x is number => x !== null);
  return {
    event,
    system,
    runs,
    keptShare: shares.length === 0 ? null : stats(shares, 4).median,
    keptShareMin: shares.length === 0 ? null : Math.min(...shares),
    kept: ok.reduce((a, r) => a + r.survived.kept, 0),
    connections: ok.reduce((a, r) => a + r.survived.connections, 0),
    stall: { p50: median(nums((r) => r.survived.stall.p50)), p99: median(nums((r) => r.survived.stall.p99)), max: median(nums((r) => r.survived.stall.max)) },
    ended: sumEnds(ok.map((r) => r.survived.ended)),
    deadEnded: sumEnds(ok.map((r) => r.dead.ended)),
    vipMovedMs: median(nums((r) => r.vipMovedMs)),
    newHolderCpuPercent: median(nums((r) => r.newHolderCpuPercent)),
    lostAt: { p50: median(nums((r) => r.survived.lostAt.p50)), max: median(nums((r) => r.survived.lostAt.max)) },
  };
}

const pct = (x: number | null): string => (x === null ? '—' : `${(x * 100).toFixed(1)} %`);
const ends = (e: Record<FleetEnd, number>): string =>
  FLEET_ENDS.filter((k) => k !== 'kept' && e[k] > 0)
    .map((k) => `${k} ${e[k]}`)
    .join(', ') || '—';
const num = (x: number | null, d = 0): string => (x === null ? '—' : x.toFixed(d));

function printTable(rep: HitlessReport): void {
  say(
    `| event | system | kept (backend survived) | stall p50 / p99 / max, ms | the others ended | … after, ms (p50 / max) | dead backend's ended | VIP moved, ms | new holder CPU, % |`,
  );
  say('|---|---|---|---|---|---|---|---|---|');
  for (const f of rep.figures) {
    const keptCell = f.keptShare === null ? '—' : `${pct(f.keptShare)} (${f.kept}/${f.connections}${f.runs.length > 1 ? `, min ${pct(f.keptShareMin)}` : ''})`;
    const dead = f.event === 'linkdown' ? ends(f.deadEnded) : 'n/a';
    say(
      `| ${EVENT_LABEL[f.event]} | ${SYSTEM_LABEL[f.system]} | ${keptCell} | ${num(f.stall.p50)} / ${num(f.stall.p99)} / ${num(f.stall.max)} | ${ends(f.ended)} | ${num(f.lostAt.p50)} / ${num(f.lostAt.max)} | ${dead} | ${num(f.vipMovedMs)} | ${num(f.newHolderCpuPercent, 1)} |`,
    );
  }
  say();
  say('| system | idle RSS, MiB | idle CPU, % | under the connections RSS, MiB | under the connections CPU, % |');
  say('|---|---|---|---|---|');
  for (const s of SYSTEMS) {
    const u = rep.resources[s];
    say(
      `| ${SYSTEM_LABEL[s]} | ${num(u.idle?.rssMiB ?? null, 1)} | ${num(u.idle?.cpuPercent ?? null, 1)} | ${num(u.loaded?.rssMiB ?? null, 1)} | ${num(u.loaded?.cpuPercent ?? null, 1)} |`,
    );
  }
  say();
  const q = (x: number | null): string => (x === null ? '—' : `×${x.toFixed(2)}`);
  for (const e of EVENTS) {
    const ra = rep.ratios[e];
    const [b, k] = [
      rep.figures.find((f) => f.event === e && f.system === 'ballast'),
      rep.figures.find((f) => f.event === e && f.system === 'keepalivedHaproxy'),
    ];
    if (b === undefined || k === undefined) continue;
    // a ratio to nothing kept says nothing: then the two shares are printed instead
    const kept = k.keptShare === 0 ? `ballast keeps ${pct(b.keptShare)}, keepalived+haproxy none` : `kept share ${q(ra.keptShare)}`;
    say(`ratio ballast / keepalived+haproxy, ${EVENT_LABEL[e]}: ${kept}, stall p99 ${q(ra.stallP99)}`);
  }
  const b = rep.bounds;
  say(
    `bounds (RFC 9568 §6.1, n2 at priority 100, ${ADVERT_MS} ms adverts): Master_Down_Interval ${b.masterDownIntervalMs.toFixed(1)} ms, Skew_Time ${b.skewTimeMs.toFixed(1)} ms; issue 29's stall p99 goal: ≤ ${b.goalStallAfterDeathMs.toFixed(0)} ms after a death, ≤ ${b.goalStallAfterHandoverMs.toFixed(0)} ms after a handover (+ 600 ms of the backends' retransmission backoff)`,
  );
  const failed = rep.figures.flatMap((f) =>
    f.runs.filter((r) => r.error).map((r) => `${EVENT_LABEL[f.event]}, ${SYSTEM_LABEL[f.system]} #${r.run}: ${r.error}`),
  );
  for (const l of failed) say(`note: FAILED ${l}`);
}

const USAGE =
  'usage: npm run bench:hitless [-- --runs N (1..10, default 3) --quick --json --count N --events sigkill,linkdown,sigterm,preempt,reload --systems ballast,keepalivedHaproxy --ballast-extra JSON]';

function listArg<T extends string>(name: string, v: string | undefined, all: readonly T[]): T[] {
  if (v === undefined) return [...all];
  const xs = v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const x of xs) if (!all.includes(x as T)) throw new TypeError(`--${name}: unknown ${JSON.stringify(x)} (one of ${all.join(', ')})`);
  if (xs.length === 0) throw new TypeError(`--${name} names none`);
  return xs as T[];
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      runs: { type: 'string' },
      quick: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      count: { type: 'string' },
      events: { type: 'string' },
      systems: { type: 'string' },
      'ballast-extra': { type: 'string' },
    },
    strict: true,
  });
  let runs: number;
  let count: number;
  let events: EventKind[];
  let systems: System[];
  let ballastExtra: Record<string, unknown>;
  try {
    runs = intArg('runs', values.runs, values.quick ? 1 : DEFAULT_RUNS, 1, MAX_RUNS);
    count = intArg('count', values.count, CONNECTIONS, 1, 10_000);
    events = listArg('events', values.events, EVENTS);
    systems = listArg('systems', values.systems, SYSTEMS);
    ballastExtra = values['ballast-extra'] === undefined ? {} : (JSON.parse(values['ballast-extra']) as Record<string, unknown>);
    if (typeof ballastExtra !== 'object' || ballastExtra === null || Array.isArray(ballastExtra))
      throw new TypeError('--ballast-extra must be a JSON object (top-level config keys)');
  } catch (e) {
    process.stderr.write(`${errText(e)}\n${USAGE}\n`);
    return 2;
  }
  if (process.getuid?.() !== 0) {
    process.stderr.write('bench-hitless: needs root (network namespaces)\n');
    return 1;
  }
  for (const [path, pkg] of [
    [KEEPALIVED_PATH, 'keepalived'],
    [HAPROXY_PATH, 'haproxy'],
  ] as const) {
    if (systems.includes('keepalivedHaproxy') && !existsSync(path)) {
      process.stderr.write(`bench-hitless: ${path} is missing (apt-get install ${pkg}, or npm run setup)\n`);
      return 1;
    }
  }
  if (!existsSync(cliPath())) {
    process.stderr.write(`bench-hitless: ${cliPath()} is missing; run \`npm run build:ts\`\n`);
    return 1;
  }
  const sampleMs = values.quick ? QUICK_SAMPLE_MS : SAMPLE_MS;
  const loadStart = load();
  const t0 = Date.now();
  const lab = await Lab.create({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false });
  try {
    const kv = keepalivedVersion()?.join('.') ?? 'unknown';
    const hv = haproxyVersion()?.join('.') ?? 'unknown';
    const version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
    say(
      `hitless-failover benchmark: ${count} TLS watches (an event every 200 ms each) from ${SOURCES} source addresses through the VIP; ballast vs keepalived ${kv} + haproxy ${hv}; ${runs} run(s); load ${loadStart.join(' ')}`,
    );
    await lab.startApiservers({ tickMs: 200 });
    await resetLab(lab);
    const results = new Map<string, EventRun[]>();
    const key = (e: EventKind, s: System): string => `${e}/${s}`;
    for (let run = 1; run <= runs; run++) {
      for (const [ei, event] of events.entries()) {
        for (const system of rotate(systems, run + ei)) {
          progress(`run ${run}/${runs} ${EVENT_LABEL[event]}, ${SYSTEM_LABEL[system]}`);
          const r = await runOnce(lab, system, event, { run, sampleMs, windowMs: WINDOW_MS, count, ballastExtra });
          progress(
            r.error !== undefined
              ? `  FAILED: ${r.error}`
              : `  kept ${r.survived.kept}/${r.survived.connections} (${pct(r.survived.keptShare)}), stall p99 ${num(r.survived.stall.p99)} ms, others ${ends(r.survived.ended)}; VIP moved ${num(r.vipMovedMs)} ms`,
          );
          const k = key(event, system);
          results.set(k, [...(results.get(k) ?? []), r]);
        }
      }
    }
    const figures = events.flatMap((e) => systems.map((s) => figuresOf(e, s, results.get(key(e, s)) ?? [])));
    const all = [...results.values()].flat().filter((r) => r.error === undefined);
    const usage = (s: System, f: (r: EventRun) => Usage | null): Usage | null => {
      const us = all
        .filter((r) => r.system === s)
        .map(f)
        .filter((u): u is Usage => u !== null);
      return us.length === 0
        ? null
        : { processes: median(us.map((u) => u.processes))!, rssMiB: median(us.map((u) => u.rssMiB))!, cpuPercent: median(us.map((u) => u.cpuPercent))! };
    };
    const resources = Object.fromEntries(
      SYSTEMS.map((s) => [s, { idle: usage(s, (r) => r.idle), loaded: usage(s, (r) => r.loaded) }]),
    ) as HitlessReport['resources'];
    const fig = (e: EventKind, s: System): EventFigures | undefined => figures.find((f) => f.event === e && f.system === s);
    const ratios = Object.fromEntries(
      EVENTS.map((e) => [
        e,
        {
          keptShare: ratioOf(fig(e, 'ballast')?.keptShare ?? null, fig(e, 'keepalivedHaproxy')?.keptShare ?? null),
          stallP99: ratioOf(fig(e, 'ballast')?.stall.p99 ?? null, fig(e, 'keepalivedHaproxy')?.stall.p99 ?? null),
        },
      ]),
    ) as HitlessReport['ratios'];
    const mdi = masterDownIntervalMs(PRIORITIES[1], ADVERT_MS / 10);
    const skew = skewTimeMs(PRIORITIES[1], ADVERT_MS / 10);
    const report: HitlessReport = {
      bench: 'hitless',
      lab: { prefix: PREFIX, subnet: SUBNET, nodes: 3, priorities: [...PRIORITIES], vip: `${lab.vip4}/32`, advertisementIntervalMs: ADVERT_MS },
      fleet: { connections: count, sources: SOURCES, eventEveryMs: 200, windowMs: WINDOW_MS, hangMs: HANG_MS },
      versions: { node: process.version, keepalived: kv, haproxy: hv, ballast: version },
      bounds: {
        masterDownIntervalMs: round1(mdi),
        skewTimeMs: round1(skew),
        goalStallAfterDeathMs: round1(mdi + 600),
        goalStallAfterHandoverMs: round1(skew + 600),
      },
      runs,
      figures,
      resources,
      ratios,
      loadavg: { start: loadStart, end: load() },
    };
    say();
    printTable(report);
    say();
    say(`${figures.reduce((a, f) => a + f.runs.length, 0)} runs in ${((Date.now() - t0) / 1000).toFixed(0)} s; load ${report.loadavg.end.join(' ')}`);
    if (values.json) say(JSON.stringify(report, null, 2));
    return figures.some((f) => f.runs.some((r) => r.error !== undefined)) ? 1 : 0;
  } finally {
    await lab.teardown();
  }
}

runIfMain(import.meta.url, 'bench-hitless failed', main, { stack: true });
