/**
 * `npm run bench:failover [-- --runs N --json]`: the client-visible outage of a VIP
 * failover, ballast and keepalived side by side, in one run, on one lab.
 *
 * The lab (lab/lab.ts, prefix bbnch, 10.78.95.0/24): three nodes with priorities
 * 150/100/50, adverts every 100 ms, VRID 51, VIP 10.78.95.100/32 on eth0, a TLS stand-in
 * apiserver on every node. The client opens a NEW TLS connection to https://VIP:6443/version
 * every 10 ms (250 ms timeout); a run's figure is the prober's maxOutageMs: from the start of
 * the last request that succeeded before the failure to the start of the first that succeeded
 * after it.
 *
 *   scenario                      failure injected on the holder (n1)    protocol wait of n2
 *   ballast    link down          bridge port down: n1 falls silent      Master_Down_Interval
 *   keepalived link down          (same)                                 Master_Down_Interval
 *   ballast    SIGTERM            SIGTERM to the agent: priority 0       Skew_Time
 *   keepalived SIGTERM            SIGTERM to keepalived: priority 0      Skew_Time
 *
 * Each run starts fresh daemons on all three nodes, waits until n1 holds the VIP (and keeps it),
 * starts the prober, fails n1, waits for n2 to hold the VIP plus one second, and then stops
 * everything, plugs n1 back in, removes any VIP left behind and forgets the client's neighbour
 * entry for the VIP. Scenarios are interleaved run by run (1,2,3,4, 1,2,3,4, …) so that drift on
 * the machine spreads over all of them alike.
 *
 * When tcpdump is installed, the client namespace also captures VRRP and ARP. That times the
 * failure (it is injected half an advert interval after one of n1's adverts, see alignToAdvert)
 * and gives the protocol timings on the wire: "silence" = the old holder's last advert (for
 * SIGTERM: its priority-0 advert) to the new holder's first advert, and "GARP lag" = the new
 * holder's first advert to its first gratuitous ARP for the VIP.
 *
 * keepalived runs with its defaults except what the comparison needs (lab/peers/keepalived.ts):
 * `vrrp_version 3`, `advert_int 0.1`, state BACKUP, preempt on, garp_master_repeat 5 and a
 * second burst after 5 s — the same announcement defaults as ballast.
 *
 * With `--stress` it runs the CPU-stress benchmark instead (bench/stress.ts: false failovers per
 * hour at 10 and 20 ms adverts, node-death outage at 10 ms).
 *
 * Needs root, keepalived and the compiled scripts (`npm run build:ts`); tcpdump is optional.
 * The lab's files (configs, daemon logs, prober logs, captures) stay with BALLAST_LAB_KEEP=1. Tears the lab down at the end, also
 * on failure and on SIGINT; it stops only what it (or the lab) started.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Lab, runProber, type LabNode, type LabProcess, type ProberReport } from '../lab/lab.js';
import { startAgent, type LabAgent } from '../lab/cluster.js';
import { sleep, waitFor } from '../lab/wait.js';
import { KEEPALIVED_PATH, keepalivedVersion, startKeepalived, type KeepalivedPeer } from '../lab/peers/keepalived.js';
import { masterDownIntervalMs, skewTimeMs } from '../src/vrrp/state.js';
import { stats, type Stats } from './stats.js';
import { fmt, forgetVip, preflight, round1, say, waitForStableHolder } from './common.js';
import { runIfMain } from '../lab/entry.js';

// "bbench" would be one character over the lab's prefix limit (≤ 5: interface names are ≤ 15)
const PREFIX = 'bbnch';
const SUBNET = 95;
const PRIORITIES = [150, 100, 50] as const;
const ADVERT_MS = 100;
const ADVERT_CS = ADVERT_MS / 10;
const PROBE_INTERVAL_MS = 10;
const PROBE_TIMEOUT_MS = 250;
/** prober time before the failure: enough successes to know the path works */
const BEFORE_MS = 700;
/** prober time after the new holder appears: the client must see it answer */
const AFTER_MS = 1000;
/** n1 must hold the VIP alone for this long before a run counts as started (startup preemption) */
const STABLE_MS = 300;
const DEFAULT_RUNS = 5;
const MAX_RUNS = 20;

/** What runs on the nodes. */
export type Daemon = 'ballast' | 'keepalived';
/** What happens to the holder. */
export type Failure = 'linkDown' | 'sigterm';

/** One of the four measured combinations. */
export interface Scenario {
  daemon: Daemon;
  failure: Failure;
  /** e.g. "ballast    link down" */
  label: string;
}

/** Protocol timings seen on the wire by the client's tcpdump (ms); null when not seen. */
export interface WireTimes {
  /** old holder's last advert (any priority) → new holder's first advert */
  silenceMs: number | null;
  /** new holder's first advert → its first gratuitous ARP for the VIP (negative: GARP first) */
  garpLagMs: number | null;
  /** gratuitous ARPs for the VIP from the new holder within 1 s of its first one */
  garpBurst: number;
  /** ARP requests for the VIP from the client after the failure (it had to ask) */
  clientArps: number;
  /** the failure command's start minus the old holder's last advert before it (see alignToAdvert) */
  phaseMs: number | null;
  /** new holder's first advert → the first SYN-ACK from the VIP that came from its MAC (the server side of the outage); null when not captured */
  synAckLagMs?: number | null;
  /** adverts (priority > 0) from a third node after the old holder's last one: a Backup that raced the new holder to take over */
  rivalAdverts?: number;
  /** gratuitous ARPs for the VIP from another MAC than the new holder's after the old holder's last advert */
  rivalGarps?: number;
}

/** One run of one scenario. Times in ms. */
export interface RunResult {
  run: number;
  /** the prober's maxOutageMs; null when the run failed */
  outageMs: number | null;
  /** how many separate outages the prober saw (1 expected) */
  outages: number;
  requests: number;
  failedRequests: number;
  /** the node holding the VIP after the failure */
  newHolder: string | null;
  /** absent when tcpdump is not installed */
  wire?: WireTimes;
  /** why the run failed (it is left out of the statistics) */
  error?: string;
}

/** Median, minimum and maximum of the runs that succeeded (ms); null when none did. */
/** The whole result, as `--json` prints it. Times in ms. */
export interface BenchReport {
  lab: { prefix: string; subnet: number; nodes: number; priorities: number[]; vip: string; advertisementIntervalMs: number };
  probe: { url: string; intervalMs: number; timeoutMs: number };
  keepalivedVersion: string;
  /** RFC 9568 §6.1 for the backup that takes over (priority 100, 10 cs) */
  bounds: { priority: number; masterDownIntervalMs: number; skewTimeMs: number };
  runs: number;
  scenarios: (Scenario & { runs: RunResult[]; outage: Stats; silence: Stats; garpLag: Stats; phase: Stats })[];
  /** ballast median / keepalived median per failure kind; null when either has no data */
  ratios: Record<Failure, number | null>;
}

export const SCENARIOS: Scenario[] = [
  { daemon: 'ballast', failure: 'linkDown', label: 'ballast    link down' },
  { daemon: 'keepalived', failure: 'linkDown', label: 'keepalived link down' },
  { daemon: 'ballast', failure: 'sigterm', label: 'ballast    SIGTERM' },
  { daemon: 'keepalived', failure: 'sigterm', label: 'keepalived SIGTERM' },
];


// ---------------------------------------------------------------------------------------------
// the wire: tcpdump -e -tt in the client namespace

export interface WirePacket {
  /** capture time, ms since the epoch */
  t: number;
  srcMac: string;
  kind: 'advert' | 'arp' | 'synack';
  /** advert: source IP; arp: the "tell" address; synack: the answering (VIP) address */
  src: string;
  /** advert priority */
  priority?: number;
  /** arp: the "who-has" address */
  target?: string;
}

const ADVERT_RE = /^(\d+\.\d+) ([0-9a-f:]{17}) > \S+, ethertype IPv4 \(0x0800\), length \d+: (\S+) > \S+: VRRPv\d, Advertisement, vrid \d+, prio (\d+)/;
/** a SYN-ACK from port 6443: the moment a server (through the VIP) first answered a new connection */
const SYNACK_RE = /^(\d+\.\d+) ([0-9a-f:]{17}) > \S+, ethertype IPv4 \(0x0800\), length \d+: (\S+)\.6443 > \S+: Flags \[S\.\]/;
const ARP_RE = /^(\d+\.\d+) ([0-9a-f:]{17}) > \S+, ethertype ARP \(0x0806\), length \d+: Request who-has (\S+)(?: \([0-9a-f:]+\))? tell (\S+),/;

/** Parses `tcpdump -n -tt -e` lines into adverts, ARP requests and SYN-ACKs from port 6443 (pure; other lines skipped). */
export function parseCapture(text: string): WirePacket[] {
  const out: WirePacket[] = [];
  for (const line of text.split('\n')) {
    let m = ADVERT_RE.exec(line);
    if (m) {
      out.push({ t: Number(m[1]) * 1000, srcMac: m[2]!, kind: 'advert', src: m[3]!, priority: Number(m[4]) });
      continue;
    }
    m = SYNACK_RE.exec(line);
    if (m) {
      out.push({ t: Number(m[1]) * 1000, srcMac: m[2]!, kind: 'synack', src: m[3]! });
      continue;
    }
    m = ARP_RE.exec(line);
    if (m) out.push({ t: Number(m[1]) * 1000, srcMac: m[2]!, kind: 'arp', target: m[3]!, src: m[4]! });
  }
  return out;
}

/**
 * The protocol timings of one failover from the captured packets (pure): `oldHolder` failed,
 * `newHolder` took over `vip`; `client` is the prober's address. See WireTimes.
 */
export function wireTimes(pkts: readonly WirePacket[], oldHolder: LabNode, newHolder: LabNode, vip: string, client: string, injectedAt: number): WireTimes {
  const before = pkts.filter((p) => p.kind === 'advert' && p.src === oldHolder.ipv4 && p.t <= injectedAt).at(-1);
  const phaseMs = before ? round1(injectedAt - before.t) : null;
  const none: WireTimes = { silenceMs: null, garpLagMs: null, garpBurst: 0, clientArps: 0, phaseMs };
  const firstNew = pkts.find((p) => p.kind === 'advert' && p.src === newHolder.ipv4 && (p.priority ?? 0) > 0);
  if (!firstNew) return none;
  const oldLast = pkts.filter((p) => p.kind === 'advert' && p.src === oldHolder.ipv4 && p.t <= firstNew.t).at(-1);
  if (!oldLast) return none;
  const isGarp = (p: WirePacket): boolean => p.kind === 'arp' && p.srcMac === newHolder.mac && p.src === vip && p.target === vip;
  const garps = pkts.filter((p) => isGarp(p) && p.t >= oldLast.t);
  const firstGarp = garps[0];
  const synAck = pkts.find((p) => p.kind === 'synack' && p.src === vip && p.srcMac === newHolder.mac && p.t >= firstNew.t);
  return {
    silenceMs: round1(firstNew.t - oldLast.t),
    garpLagMs: firstGarp ? round1(firstGarp.t - firstNew.t) : null,
    garpBurst: firstGarp ? garps.filter((p) => p.t - firstGarp.t < 1000).length : 0,
    clientArps: pkts.filter((p) => p.kind === 'arp' && p.src === client && p.target === vip && p.t >= oldLast.t).length,
    phaseMs,
    synAckLagMs: synAck ? round1(synAck.t - firstNew.t) : null,
    rivalAdverts: pkts.filter((p) => p.kind === 'advert' && p.t > oldLast.t && (p.priority ?? 0) > 0 && p.src !== oldHolder.ipv4 && p.src !== newHolder.ipv4).length,
    rivalGarps: pkts.filter((p) => p.kind === 'arp' && p.t > oldLast.t && p.src === vip && p.target === vip && p.srcMac !== newHolder.mac).length,
  };
}

export function hasTcpdump(): boolean {
  return spawnSync('sh', ['-c', 'command -v tcpdump'], { stdio: 'ignore' }).status === 0;
}

/** Starts tcpdump (VRRP, ARP, SYN-ACKs from port 6443) in the client namespace; resolves once it listens. */
async function startCapture(lab: Lab, run: string): Promise<LabProcess> {
  const p = lab.spawn(lab.client.netns, ['tcpdump', '-i', 'eth0', '-n', '-l', '--immediate-mode', '-tt', '-e', 'ip proto 112 or arp or (tcp src port 6443 and tcp[tcpflags] & (tcp-syn|tcp-ack) == (tcp-syn|tcp-ack))'], { logFile: `capture-${run}.txt` });
  await p.waitForOutput(/listening on/, { timeoutMs: 5000, includeExisting: true });
  return p;
}

// ---------------------------------------------------------------------------------------------
// the daemons under test

/** The daemons of one scenario on the lab's nodes. */
export interface Cluster {
  /** each node's daemon process (ballast, or keepalived's parent), by node name */
  procs: Map<string, LabProcess>;
  /** fails `node` by SIGTERM; resolves when it exited */
  terminate(node: LabNode): Promise<unknown>;
  /** stops every daemon of this cluster (SIGTERM, SIGKILL after 3 s) */
  stopAll(): Promise<void>;
}

/**
 * Starts `daemon` on every node of `lab` (PRIORITIES, adverts every `advertMs` ms); all or none.
 * `realtime` 1..99: the election thread at that SCHED_FIFO priority (ballast vrrp.realtimePriority;
 * keepalived vrrp_rt_priority, SCHED_RR for its VRRP process); 0: normal scheduling.
 */
export async function startCluster(lab: Lab, daemon: Daemon, advertMs: number, realtime = 0): Promise<Cluster> {
  const settled = await Promise.allSettled(
    lab.nodes.map((node, i): Promise<LabAgent | KeepalivedPeer> => {
      const priority = PRIORITIES[i]!;
      return daemon === 'ballast'
        ? startAgent(lab, node, { priority, advertisementInterval: `${advertMs}ms`, ...(realtime > 0 ? { realtimePriority: realtime } : {}) })
        : startKeepalived(lab, node, { priority, advertIntervalS: advertMs / 1000, vrrpVersion: 3, vips: [`${lab.vip4}/32`], interface: 'eth0', ...(realtime > 0 ? { extraGlobal: [`vrrp_rt_priority ${realtime}`] } : {}) });
    }),
  );
  const started = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const byNode = new Map(started.map((d) => [d.node.name, d]));
  const cluster: Cluster = {
    procs: new Map(started.map((d) => [d.node.name, d.proc])),
    terminate: (node) => byNode.get(node.name)?.stop('SIGTERM') ?? Promise.resolve(),
    stopAll: async () => {
      await Promise.all(started.map((d) => ('instance' in d ? d.stop('SIGTERM', 3000) : d.proc.stop('SIGTERM', 3000)).catch(() => undefined)));
    },
  };
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    await cluster.stopAll();
    throw failed.reason;
  }
  return cluster;
}

/**
 * Times the failure: waits for the holder's next advert on the wire, then half an interval, so
 * the failure lands mid-interval for both daemons alike. A link-down outage depends on where in
 * the advert interval the failure falls (n2's Master_Down timer runs from n1's LAST advert, up
 * to one interval before the failure); left to chance, that phase spreads each run over
 * 0..100 ms and, with 5 runs, swamps the difference between the daemons. Without tcpdump: a
 * uniformly random delay within one interval (the spread is then back).
 */
async function alignToAdvert(cap: LabProcess | undefined, holder: LabNode, advertMs: number): Promise<void> {
  if (!cap) return sleep(Math.random() * advertMs);
  const ip = holder.ipv4.replace(/\./g, '\\.');
  await cap.waitForOutput(new RegExp(`${ip} > 224\\.0\\.0\\.18: VRRPv3, Advertisement, vrid \\d+, prio [1-9]`), { timeoutMs: Math.max(1000, 10 * advertMs) });
  await sleep(advertMs / 2);
}

/** Puts the lab back to its starting point: links up, no VIP anywhere, client neighbour entry gone. */
export async function resetLab(lab: Lab): Promise<void> {
  for (const n of lab.nodes) {
    await lab.linkUp(n);
    await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
  }
  await forgetVip(lab);
  const left = await lab.holders(lab.vip4);
  if (left.length > 0) throw new Error(`${lab.vip4} still held by ${left.map((n) => n.name).join(',')} after the reset`);
}

// ---------------------------------------------------------------------------------------------
// one run

/**
 * One run of `sc` on `lab` (its nodes at PRIORITIES, adverts every `advertMs` ms, default 100;
 * bench/stress.ts runs it at 10 ms under CPU stress). Never throws: a failed run has `error`.
 * Leaves the lab as resetLab does.
 */
export async function runOnce(lab: Lab, sc: Scenario, run: number, capture: boolean, advertMs = ADVERT_MS, realtime = 0): Promise<RunResult> {
  const [n1, n2] = [lab.nodes[0]!, lab.nodes[1]!];
  const result: RunResult = { run, outageMs: null, outages: 0, requests: 0, failedRequests: 0, newHolder: null };
  const tag = `${sc.daemon}-${sc.failure}-${run}`;
  let cluster: Cluster | undefined;
  let cap: LabProcess | undefined;
  let prober: ReturnType<typeof runProber> | undefined;
  let terminated: Promise<unknown> | undefined;
  try {
    cluster = await startCluster(lab, sc.daemon, advertMs, realtime);
    await waitForStableHolder(lab, n1, 10_000, STABLE_MS);
    // the client starts every run without a neighbour entry for the VIP, whatever the startup
    // left (once, after a startup in which n2 was Active before n1 preempted, the client got no
    // answer at all for 700 ms; the cause was not pinned down)
    await forgetVip(lab);
    if (capture) cap = await startCapture(lab, tag);
    prober = runProber(lab, {
      url: `https://${lab.vip4}:6443/version`,
      intervalMs: PROBE_INTERVAL_MS,
      timeoutMs: PROBE_TIMEOUT_MS,
      durationMs: 30_000,
      logFile: `prober-${tag}.log`,
    });
    await sleep(BEFORE_MS);
    // on a loaded machine (bench/stress.ts) the first requests may all time out: up to 5 s more
    await waitFor(() => Promise.resolve(prober!.results().some((r) => r.ok)), (ok) => ok, { timeoutMs: 5000, intervalMs: 50, what: 'a first answer' }).catch(() => undefined);
    if (!prober.results().some((r) => r.ok)) {
      const neigh = (await lab.exec(lab.client.netns, ['ip', 'neigh', 'show', 'to', lab.vip4], { allowFail: true })).stdout.trim() || 'none';
      const holders = (await lab.holders(lab.vip4)).map((n) => n.name).join(',') || 'none';
      throw new Error(`the client got no answer through ${lab.vip4} before the failure (holders ${holders}; client neighbour entry: ${neigh})`);
    }
    await alignToAdvert(cap, n1, advertMs);

    const injectedAt = Date.now();
    if (sc.failure === 'linkDown') await lab.linkDown(n1);
    else terminated = cluster.terminate(n1);

    const h = await waitFor(() => lab.holders(lab.vip4), (hs) => hs.includes(n2), { timeoutMs: 5000, intervalMs: 50, what: `${n2.name} to take ${lab.vip4}` });
    await sleep(AFTER_MS);
    const report: ProberReport = await prober.stop();
    prober = undefined;
    await terminated;
    result.newHolder = h.filter((n) => n !== n1).map((n) => n.name).join(',') || null;
    result.requests = report.requests;
    result.failedRequests = report.failed;
    result.outages = report.outages.length;
    if (report.outages.some((o) => o.ongoing)) throw new Error('the client never got an answer again');
    result.outageMs = report.maxOutageMs;
    if (cap) {
      await cap.stop('SIGTERM', 2000);
      result.wire = wireTimes(parseCapture(cap.output()), n1, n2, lab.vip4, lab.client.ipv4, injectedAt);
      cap = undefined;
    }
  } catch (e) {
    result.error = e instanceof Error ? e.message.split('\n')[0]! : String(e);
    result.outageMs = null;
  } finally {
    if (prober) await prober.stop().catch(() => undefined);
    if (cap) await cap.stop('SIGTERM', 2000);
    await terminated?.catch(() => undefined);
    await cluster?.stopAll();
    await resetLab(lab);
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// output


function printTable(report: BenchReport): void {
  const runs = report.runs;
  const w = 8;
  const head = `${'scenario'.padEnd(22)}${Array.from({ length: runs }, (_, i) => `#${i + 1}`.padStart(w)).join('')}  |${'median'.padStart(w)}${'min'.padStart(w)}${'max'.padStart(w)}`;
  say('client-visible outage, ms (prober maxOutageMs)');
  say(head);
  say('-'.repeat(head.length));
  for (const s of report.scenarios) {
    const cells = s.runs.map((r) => (r.outageMs === null ? 'FAIL'.padStart(w) : fmt(r.outageMs, w, 1)));
    say(`${s.label.padEnd(22)}${cells.join('')}  |${fmt(s.outage.median, w, 1)}${fmt(s.outage.min, w, 1)}${fmt(s.outage.max, w, 1)}`);
  }
  say();
  const ratio = (f: Failure, name: string): string => `${name} ${report.ratios[f] === null ? '—' : report.ratios[f]!.toFixed(2)}`;
  say(`ratio ballast/keepalived of the medians: ${ratio('linkDown', 'link down')}, ${ratio('sigterm', 'SIGTERM')}`);
  const b = report.bounds;
  say(`protocol bounds (RFC 9568 §6.1, priority ${b.priority}, ${ADVERT_CS} cs): Master_Down_Interval ${b.masterDownIntervalMs.toFixed(1)} ms (link down), Skew_Time ${b.skewTimeMs.toFixed(1)} ms (SIGTERM)`);

  if (report.scenarios.some((s) => s.runs.some((r) => r.wire))) {
    say();
    say('on the wire (tcpdump in the client namespace), median [min..max] ms:');
    say(`${'scenario'.padEnd(22)}${'failure after advert'.padStart(24)}${'old last advert → new first'.padStart(30)}${'new first advert → GARP'.padStart(26)}${'GARPs/burst'.padStart(13)}`);
    for (const s of report.scenarios) {
      const range = (st: Stats, d: number): string => (st.median === null ? '—' : `${st.median.toFixed(d)} [${st.min!.toFixed(d)}..${st.max!.toFixed(d)}]`);
      const bursts = [...new Set(s.runs.flatMap((r) => (r.wire ? [r.wire.garpBurst] : [])))].join('/') || '—';
      say(`${s.label.padEnd(22)}${range(s.phase, 1).padStart(24)}${range(s.silence, 1).padStart(30)}${range(s.garpLag, 2).padStart(26)}${bursts.padStart(13)}`);
    }
  }
  const failed = report.scenarios.flatMap((s) => s.runs.filter((r) => r.error).map((r) => `${s.label.trim()} #${r.run}: ${r.error}`));
  const extra = report.scenarios.flatMap((s) => s.runs.filter((r) => !r.error && r.outages !== 1).map((r) => `${s.label.trim()} #${r.run}: ${r.outages} outages`));
  if (failed.length + extra.length > 0) {
    say();
    for (const l of [...failed, ...extra]) say(`note: ${l}`);
  }
}

// ---------------------------------------------------------------------------------------------
// main

function usage(): string {
  return 'usage: node dist/bench/failover.js [--runs N (1..20, default 5)] [--json]\n       node dist/bench/failover.js --stress [--minutes M] [--rounds N] [--append FILE] [--json] (bench/stress.ts)';
}

/** keepalived processes on this machine that this process did not start (pids). */
export function foreignKeepalived(): number[] {
  const pids: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(join('/proc', d, 'comm'), 'utf8').trim() === 'keepalived') pids.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

async function main(argv: string[]): Promise<number> {
  // `npm run bench:failover -- --stress …`: the CPU-stress benchmark (bench/stress.ts), its own options
  if (argv.includes('--stress')) return (await import('./stress.js')).stressMain(argv.filter((a) => a !== '--stress'));
  const { values } = parseArgs({ args: argv, options: { runs: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } }, strict: true });
  if (values.help) {
    say(usage());
    return 0;
  }
  const checked = preflight(values, {
    name: 'bench-failover',
    usage: usage(),
    // no --seconds or --workers here: their defaults are never used
    defaults: { runs: DEFAULT_RUNS, maxRuns: MAX_RUNS, seconds: 1, workers: 1 },
    root: 'network namespaces, raw sockets',
    files: [[KEEPALIVED_PATH, 'keepalived']],
  });
  if (typeof checked === 'number') return checked;
  const { runs } = checked;
  const foreign = foreignKeepalived();
  if (foreign.length > 0) {
    // outside the lab's namespaces they cannot join its election, but someone should know
    say(`note: keepalived already runs on this machine (pids ${foreign.join(', ')}), outside the lab; the service should be disabled (npm run setup)`);
  }
  const kv = keepalivedVersion()?.join('.') ?? 'unknown';
  const capture = hasTcpdump();

  const t0 = Date.now();
  const lab = await Lab.create({ prefix: PREFIX, subnet: SUBNET, nodes: 3 });
  try {
    const bounds = { priority: PRIORITIES[1], masterDownIntervalMs: masterDownIntervalMs(PRIORITIES[1], ADVERT_CS), skewTimeMs: skewTimeMs(PRIORITIES[1], ADVERT_CS) };
    say(`failover benchmark: ballast vs keepalived ${kv}, ${runs} run(s) per scenario, interleaved`);
    say(`lab ${PREFIX} (10.78.${SUBNET}.0/24): 3 nodes, priorities ${PRIORITIES.join('/')}, VRRPv3 adverts every ${ADVERT_MS} ms, VIP ${lab.vip4}/32 on eth0`);
    say(`client: new TLS connection to https://${lab.vip4}:6443/version every ${PROBE_INTERVAL_MS} ms, ${PROBE_TIMEOUT_MS} ms timeout${capture ? '; tcpdump on the client' : '; tcpdump not found: no wire timings'}`);
    await lab.startApiservers();
    await resetLab(lab);
    const results = SCENARIOS.map(() => [] as RunResult[]);
    for (let run = 1; run <= runs; run++) {
      for (const [i, sc] of SCENARIOS.entries()) {
        const r = await runOnce(lab, sc, run, capture);
        results[i]!.push(r);
        process.stderr.write(`  run ${run}/${runs} ${sc.label}: ${r.outageMs === null ? `FAILED (${r.error})` : `${r.outageMs} ms`}\n`);
      }
    }
    const scenarios = SCENARIOS.map((sc, i) => {
      const rs = results[i]!;
      const ok = rs.filter((r) => r.outageMs !== null);
      return {
        ...sc,
        runs: rs,
        outage: stats(ok.map((r) => r.outageMs!)),
        silence: stats(ok.flatMap((r) => (r.wire?.silenceMs == null ? [] : [r.wire.silenceMs]))),
        garpLag: stats(ok.flatMap((r) => (r.wire?.garpLagMs == null ? [] : [r.wire.garpLagMs]))),
        phase: stats(ok.flatMap((r) => (r.wire?.phaseMs == null ? [] : [r.wire.phaseMs]))),
      };
    });
    const ratio = (f: Failure): number | null => {
      const b = scenarios.find((s) => s.daemon === 'ballast' && s.failure === f)!.outage.median;
      const k = scenarios.find((s) => s.daemon === 'keepalived' && s.failure === f)!.outage.median;
      return b === null || k === null || k === 0 ? null : Math.round((b / k) * 100) / 100;
    };
    const report: BenchReport = {
      lab: { prefix: PREFIX, subnet: SUBNET, nodes: 3, priorities: [...PRIORITIES], vip: `${lab.vip4}/32`, advertisementIntervalMs: ADVERT_MS },
      probe: { url: `https://${lab.vip4}:6443/version`, intervalMs: PROBE_INTERVAL_MS, timeoutMs: PROBE_TIMEOUT_MS },
      keepalivedVersion: kv,
      bounds: { priority: bounds.priority, masterDownIntervalMs: round1(bounds.masterDownIntervalMs), skewTimeMs: round1(bounds.skewTimeMs) },
      runs,
      scenarios,
      ratios: { linkDown: ratio('linkDown'), sigterm: ratio('sigterm') },
    };
    say();
    printTable(report);
    say();
    say(`${SCENARIOS.length * runs} runs in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
    if (values.json) say(JSON.stringify(report, null, 2));
    return scenarios.some((s) => s.runs.some((r) => r.error)) ? 1 : 0;
  } finally {
    await lab.teardown();
  }
}

// run only as a script: tests may import the pure helpers (stats, parseCapture, wireTimes)
runIfMain(import.meta.url, 'bench-failover failed', main, { stack: true });
