/**
 * `npm run bench:storm [-- --rounds N --connections C --clients K --json --save FILE]`, or
 * `node dist/bench/storm.js --merge FILE[,FILE…] [--json]`: the reconnect storm. C long-lived
 * watch connections through https://VIP:6443, then the VIP holder dies; how fast and how evenly
 * do they come back? ballast and keepalived + haproxy (the kubeadm HA guide's pair) side by
 * side, in one run, rounds interleaved (ballast, keepalived+haproxy, ballast, …).
 *
 * The lab (lab/lab.ts, prefix bstrm, 10.78.111.0/24): three control-plane nodes with
 * priorities 150/100/50, VRRPv3 adverts every 100 ms for both agents (the guide leaves
 * keepalived at 1 s; the same interval keeps the election out of the comparison), VIP
 * 10.78.111.100. A TLS stand-in apiserver (lab/apiserver-standin.ts) on every node listens on
 * :6444 — the guide's "APISERVER_SRC_PORT differs from APISERVER_DEST_PORT" layout: with haproxy
 * on every node binding *:6443, the apiserver cannot have 6443 too. ballast runs the same layout
 * (VIP:6443 DNATed to node:6444), so clients always dial VIP:6443, in both setups.
 *
 *   ballast              apiserver.port 6443, backends n1..n3:6444, health GET /readyz over TLS
 *                        every 2 s, timeout 2 s, fall 3, rise 2 (haproxy's defaults, which the
 *                        guide keeps)
 *   keepalived+haproxy   haproxy on every node as lab/peers/haproxy.ts renders the guide's
 *                        haproxy.cfg: bind *:6443, mode tcp, balance roundrobin, option httpchk
 *                        GET /readyz (the stand-in has no /healthz), check check-ssl verify none,
 *                        inter 2s fall 3 rise 2, retries 1, option redispatch, timeouts connect
 *                        5s / client 20s / server 20s / check 10s / queue 20s, no maxconn (haproxy
 *                        derives it from the fd limit; printed). keepalived for the VIP with the
 *                        guide's check_apiserver vrrp_script tracked (interval 3, weight -2,
 *                        fall 10, rise 2) running `curl -sfk --max-time 2
 *                        https://localhost:6443/readyz` through the local haproxy.
 *
 * The client (bench/storm-client.ts, K processes in the client namespace, C/K connections
 * each): every connection is a watch, `GET /apis/discovery.k8s.io/v1/namespaces/default/
 * endpointslices?watch=true&allowWatchBookmarks=true&…` on its own TLS connection, streaming a
 * BOOKMARK event every 5 s. A watch that ends is re-established at once, a failed attempt backs
 * off as client-go's reflector does (800 ms doubling to 30 s, jitter 100 %); dial timeout 30 s,
 * TLS handshake 10 s (Go's defaults as client-go sets them); dead peers are found by TCP
 * keepalive probes after 1 s idle (see storm-client.ts).
 *
 * A round: fresh stand-ins and daemons on every node, n1 holds the VIP, n1's and n2's
 * balancers see all three backends healthy; the clients open the C watches (over C × 2 ms) and
 * hold them 3 s (drops then are counted as "steady drops"); the stand-ins' watch counters of
 * n2 and n3 are read (their /metrics: apiserver_request_total{verb="WATCH"}). Then n1 dies:
 * its bridge port goes down (nothing in or out) and its agent (or keepalived and haproxy) and
 * its stand-in are SIGKILLed. The round watches until every connection is back (or 60 s), then
 * reads the counters again. Figures:
 *   t99 / t100       death → 99 % / 100 % of the connections re-established (a new 200 watch)
 *   detect p99       death → the client noticed (its connection reset or timed out), 99 %
 *   reconnect p99    noticed → re-established, per connection, 99 % (the load balancer's part)
 *   failed           failed attempts after the death (each one costs the client a backoff)
 *   spread           new watches per surviving stand-in (n2, n3) from their own counters, and
 *                    the busiest one over the fair share (1.00 = even)
 *   CPU              the new holder's daemons, /proc/PID/stat utime+stime (+ cutime+cstime: a
 *                    check script's runs) over death → 100 % (or the cap), ms and % of one core:
 *                    ballast's agent; haproxy and keepalived. ballast's DNAT runs in the kernel,
 *                    in softirq context, which no process is charged for; haproxy's socket work
 *                    is partly in its syscalls (its stime) and partly in softirq too. The
 *                    machine's softirq over the same window is printed, but it is machine-wide
 *                    (client, stand-ins, the bridge): not separable per node.
 * Medians over the rounds, ratios ballast / keepalived+haproxy.
 *
 * `--save FILE` writes the rounds as JSON; `--merge A,B` prints the table of the rounds of
 * several saved runs (no lab): a long series can be run as separate invocations, each holding
 * the lab lock for a short time.
 *
 * Needs root, keepalived, haproxy, curl, conntrack and the compiled scripts (`npm run build:ts`).
 * Raises its own fd limit (prlimit) so that the clients, the stand-ins and haproxy can hold the
 * connections. The lab's files stay with BALLAST_LAB_KEEP=1. Tears the lab down at the end, also
 * on failure and on SIGINT; it stops only what it (or the lab) started.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Lab, onJsonLines, type LabNode, type LabProcess } from '../lab/lab.js';
import { cliPath, LabAgent, startAgent } from '../lab/cluster.js';
import { sleep, waitFor } from '../lab/wait.js';
import { KEEPALIVED_PATH, keepalivedVersion, startKeepalived, type KeepalivedPeer } from '../lab/peers/keepalived.js';
import { HAPROXY_PATH, haproxyVersion, startHaproxy, statsCommand, type HaproxyPeer } from '../lab/peers/haproxy.js';
import { parseWatchMetrics } from '../lab/apiserver-standin.js';
import { runIfMain } from '../lab/entry.js';
import { stats, type Stats } from './stats.js';
import { errText, fmt, fmtRatio, forgetVip, intArg, load, progress, ratioOf, round1, say, waitForStableHolder } from './common.js';
import {
  counterDelta,
  parseConntrackStats,
  parseNetstat,
  parseProcStat,
  parseSoftirq,
  spread,
  stormFigures,
  upAt,
  type Spread,
  type StormEvent,
  type StormFigures,
} from './storm-stats.js';

const PREFIX = 'bstrm';
const SUBNET = 111;
const PRIORITIES = [150, 100, 50] as const;
const ADVERT_MS = 100;
/** what the clients dial on the VIP, in both setups */
const VIP_PORT = 6443;
/** the stand-in apiservers' port (the guide's APISERVER_SRC_PORT) */
const APISERVER_PORT = 6444;
/** both balancers' active checks: haproxy's defaults, kept by the guide */
const CHECK = { interMs: 2000, fall: 3, rise: 2 } as const;
const CHECK_PATH = '/readyz';
/** the guide's keepalived check_apiserver script, through the local haproxy */
const TRACK = {
  name: 'check_apiserver',
  script: `/usr/bin/curl -sfk --max-time 2 https://localhost:${VIP_PORT}${CHECK_PATH} -o /dev/null`,
  intervalS: 3,
  weight: -2,
  fall: 10,
  rise: 2,
} as const;
const WATCH_PATH =
  '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes&watch=true&allowWatchBookmarks=true&timeoutSeconds=600';
/** time per initial connection of the ramp, ms */
const RAMP_PER_CONN_MS = 2;
/** all connections up and held this long before the death, ms */
const HOLD_MS = 3000;
/** the storm is watched at most this long after the death, ms */
const STORM_CAP_MS = 60_000;
const STABLE_MS = 300;
const DEFAULT_ROUNDS = 5;
const MAX_ROUNDS = 20;
const DEFAULT_CONNECTIONS = 2000;
const CONNS_PER_CLIENT = 500;
const FD_LIMIT = 65_536;
/** fds per storm connection in the process that holds the most: haproxy (client side + server side), plus slack */
const FD_NEEDED_PER_CONN = 3;

/** The two setups under test. */
export type Setup = 'ballast' | 'haproxy';
const SETUPS: readonly Setup[] = ['ballast', 'haproxy'];
const LABELS: Record<Setup, string> = { ballast: 'ballast', haproxy: 'keepalived+haproxy' };

/** CPU of the new holder's daemons over the storm window. */
export interface StormCpu {
  /** per daemon ("ballast", "haproxy", "keepalived"): utime+stime+cutime+cstime, ms */
  daemonMs: Record<string, number>;
  /** their sum, ms */
  totalMs: number;
  /** death → 100 % (or the cap), ms */
  windowMs: number;
  /** totalMs / windowMs × 100: percent of one core */
  pctOfCore: number | null;
  /** the machine's softirq time over the window, ms (all cores, every namespace) */
  machineSoftirqMs: number;
}

/** One round of one setup. */
export interface RoundResult {
  round: number;
  setup: Setup;
  /** null when the round failed before the death */
  figures: StormFigures | null;
  /** new watches per surviving stand-in, from their own counters */
  standinSpread: Spread | null;
  cpu: StormCpu | null;
  /** connections that dropped while held before the death (0 expected) */
  steadyDrops: number;
  /** the node holding the VIP after the storm */
  newHolder: string | null;
  /**
   * the kernel's view over the storm (death → end): per namespace ("client", "n2", "n3") the
   * TCP counters that show a SYN backlog or a lossy path (NET_KEYS), and the new holder's
   * conntrack drops (CT_KEYS, `conntrack -S` in n2)
   */
  kernel?: Record<string, Record<string, number>>;
  /** haproxy's derived maxconn on the new holder (`show info`), haproxy rounds only */
  haproxyMaxconn?: number;
  error?: string;
}

/** One setup's medians over its rounds. */
export interface SetupSummary {
  setup: Setup;
  label: string;
  rounds: number;
  t50: Stats;
  t99: Stats;
  t100: Stats;
  detectP99: Stats;
  reconnectP99: Stats;
  /** the re-establishing attempts' TCP connect / TLS handshake, 99 % */
  tcpP99: Stats;
  tlsP99: Stats;
  failed: Stats;
  retried: Stats;
  /** busiest surviving stand-in over the fair share */
  maxOverFair: Stats;
  cpuMs: Stats;
  cpuPct: Stats;
  softirqMs: Stats;
  /** rounds in which some connection never came back within the cap */
  incomplete: number;
  /** failed attempts summed over the rounds, and the rounds with any (a median of 0 hides a bad round) */
  failedTotal: number;
  roundsWithFailures: number;
}

/** `--json`: everything. Times in ms. */
export interface StormReport {
  lab: {
    prefix: string;
    subnet: number;
    nodes: number;
    priorities: number[];
    vip: string;
    vipPort: number;
    apiserverPort: number;
    advertisementIntervalMs: number;
  };
  versions: { keepalived: string; haproxy: string; node: string };
  connections: number;
  clients: number;
  roundsPerSetup: number;
  /** the machine's load averages (1, 5, 15 min) at the start and the end: the lab shares the machine */
  load?: { start: number[]; end: number[] };
  rounds: RoundResult[];
  summary: SetupSummary[];
  /** ballast median / keepalived+haproxy median */
  ratios: { t99: number | null; t100: number | null; reconnectP99: number | null; failed: number | null; maxOverFair: number | null; cpuMs: number | null };
}

// ---------------------------------------------------------------------------------------------
// the daemons

/** The daemons of one setup on every node. */
interface Stack {
  /** PIDs of the daemons on `node` that count as its balancer's CPU, by daemon name */
  pids(node: LabNode): Record<string, number[]>;
  /** SIGKILLs every daemon on `node` (its death) */
  kill(node: LabNode): void;
  /** haproxy's `show info` Maxconn on `node` (haproxy only) */
  maxconn(node: LabNode): Promise<number | undefined>;
  stop(): Promise<void>;
}

/** PIDs in `netns` whose argv[0] is `exe` (keepalived forks its VRRP child). */
function pidsOf(netns: string, exe: string): number[] {
  const listed = spawnSync('ip', ['netns', 'pids', netns], { encoding: 'utf8', timeout: 5000 });
  return (listed.stdout ?? '')
    .split(/\s+/)
    .filter(Boolean)
    .map(Number)
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0] === exe;
      } catch {
        return false;
      }
    });
}

async function startStack(lab: Lab, setup: Setup): Promise<Stack> {
  const [n1, n2] = [lab.nodes[0]!, lab.nodes[1]!];
  const agents: LabAgent[] = [];
  const haproxies: HaproxyPeer[] = [];
  const keepaliveds: KeepalivedPeer[] = [];
  const backends = lab.nodes.map((n) => `${n.ipv4}:${APISERVER_PORT}`);
  const stack: Stack = {
    pids: (node): Record<string, number[]> =>
      setup === 'ballast'
        ? { ballast: agents.filter((a) => a.node === node).map((a) => a.proc.pid) }
        : { haproxy: haproxies.filter((h) => h.node === node).map((h) => h.proc.pid), keepalived: pidsOf(node.netns, KEEPALIVED_PATH) },
    kill: (node) => {
      for (const d of [...agents, ...haproxies, ...keepaliveds]) if (d.node === node) d.proc.kill('SIGKILL');
    },
    maxconn: async (node) => {
      const h = haproxies.find((x) => x.node === node);
      if (!h) return undefined;
      const m = /^Maxconn: (\d+)/m.exec(await statsCommand(h.socketPath, 'show info'));
      return m ? Number(m[1]) : undefined;
    },
    stop: async () => {
      await Promise.all(
        [...agents.map((a) => a.proc.stop('SIGTERM', 3000)), ...haproxies.map((h) => h.stop(3000)), ...keepaliveds.map((k) => k.stop('SIGTERM', 3000))].map(
          (p) => p.catch(() => undefined),
        ),
      );
    },
  };
  try {
    const settled = await Promise.allSettled(
      lab.nodes.flatMap((node, i): Promise<unknown>[] => {
        const priority = PRIORITIES[i]!;
        if (setup === 'ballast') {
          const apiserver = {
            port: VIP_PORT,
            backends,
            health: {
              caFile: lab.ca.certFile,
              path: CHECK_PATH,
              interval: `${CHECK.interMs}ms`,
              timeout: `${CHECK.interMs}ms`,
              rise: CHECK.rise,
              fall: CHECK.fall,
            },
          };
          return [
            startAgent(lab, node, { priority, advertisementInterval: `${ADVERT_MS}ms`, balance: true, extra: { apiserver } }).then((a) => void agents.push(a)),
          ];
        }
        return [
          startHaproxy(lab, node, {
            port: VIP_PORT,
            checkPath: CHECK_PATH,
            ...CHECK,
            servers: lab.nodes.map((n) => ({ name: n.name, address: n.ipv4, port: APISERVER_PORT })),
          }).then((h) => void haproxies.push(h)),
          startKeepalived(lab, node, {
            priority,
            advertIntervalS: ADVERT_MS / 1000,
            vrrpVersion: 3,
            vips: [`${lab.vip4}/32`],
            interface: 'eth0',
            trackScripts: [{ ...TRACK }],
          }).then((k) => void keepaliveds.push(k)),
        ];
      }),
    );
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    await waitForStableHolder(lab, n1, 10_000, STABLE_MS);
    // the holder and the next holder both see every backend pass
    for (const node of [n1, n2]) {
      const a = agents.find((x) => x.node === node);
      if (a) {
        await waitFor(
          () => a.status(),
          (s) => s.backends.length === backends.length && s.backends.every((b) => b.healthy),
          {
            timeoutMs: 15_000,
            intervalMs: 200,
            what: `${node.name}'s agent to see ${backends.join(', ')} healthy`,
          },
        );
      }
      const h = haproxies.find((x) => x.node === node);
      if (h) {
        await h.waitForServers((s) => s.length === backends.length && s.every((x) => x.status === 'UP' && x.checkStatus === 'L7OK'), {
          timeoutMs: 15_000,
          what: `${node.name}'s haproxy: every server UP (L7OK)`,
        });
      }
    }
    return stack;
  } catch (e) {
    await stack.stop();
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------
// measurement helpers

const CLK_TCK = ((): number => {
  const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const n = Number((r.stdout ?? '').trim());
  return Number.isInteger(n) && n > 0 ? n : 100;
})();
const ticksToMs = (t: number): number => (t * 1000) / CLK_TCK;

/** utime+stime+cutime+cstime per daemon, ticks (a vanished PID counts 0). */
function cpuTicks(pids: Record<string, number[]>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, ps] of Object.entries(pids)) {
    out[name] = 0;
    for (const pid of ps) {
      try {
        const c = parseProcStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
        out[name] += c.utime + c.stime + c.cutime + c.cstime;
      } catch {
        // gone
      }
    }
  }
  return out;
}

const nproc = (): number => availableParallelism();

const softirqTicks = (): number => parseSoftirq(readFileSync('/proc/stat', 'utf8'));

/** A stand-in's watch counters, read from the client namespace. */
async function watchCounters(lab: Lab, node: LabNode): Promise<{ open: number; started: number }> {
  const r = await lab.exec(
    lab.client.netns,
    ['curl', '-sS', '--max-time', '5', '--cacert', lab.ca.certFile, `https://${node.ipv4}:${APISERVER_PORT}/metrics`],
    { timeoutMs: 10_000 },
  );
  return parseWatchMetrics(r.stdout);
}

/** TCP counters (per namespace) that tell a SYN backlog overflow or a lossy path. */
const NET_KEYS = [
  'TcpExt:ListenOverflows',
  'TcpExt:ListenDrops',
  'TcpExt:TCPReqQFullDrop',
  'TcpExt:SyncookiesSent',
  'TcpExt:TCPSynRetrans',
  'Tcp:RetransSegs',
  'Tcp:OutRsts',
  'Tcp:AttemptFails',
] as const;
/** conntrack counters of the new holder that tell lost or refused flows. */
const CT_KEYS = ['insert_failed', 'drop', 'early_drop', 'invalid'] as const;

/** The kernel counters of the client, n2 and n3 (NET_KEYS) and n2's conntrack (CT_KEYS). */
async function kernelCounters(lab: Lab): Promise<Record<string, Record<string, number>>> {
  const places = [
    ['client', lab.client.netns],
    ['n2', lab.nodes[1]!.netns],
    ['n3', lab.nodes[2]!.netns],
  ] as const;
  const out: Record<string, Record<string, number>> = {};
  for (const [name, ns] of places) {
    const r = await lab.exec(ns, ['cat', '/proc/net/netstat', '/proc/net/snmp'], { timeoutMs: 5000 });
    out[name] = parseNetstat(r.stdout);
  }
  const ct = await lab.exec(lab.nodes[1]!.netns, ['conntrack', '-S'], { timeoutMs: 5000, allowFail: true });
  out.n2conntrack = parseConntrackStats(ct.stdout);
  return out;
}

/** The storm clients: K processes, every event collected. */
interface Clients {
  events: StormEvent[];
  procs: LabProcess[];
  stop(): Promise<void>;
}

const clientScript = (): string => fileURLToPath(new URL('./storm-client.js', import.meta.url));

function startClients(lab: Lab, connections: number, clients: number, tag: string): Clients {
  const events: StormEvent[] = [];
  const procs: LabProcess[] = [];
  const per = Math.ceil(connections / clients);
  const rampMs = connections * RAMP_PER_CONN_MS;
  for (let k = 0, first = 0; first < connections; k++, first += per) {
    const n = Math.min(per, connections - first);
    const p = lab.spawn(
      lab.client.netns,
      [
        process.execPath,
        clientScript(),
        '--url',
        `https://${lab.vip4}:${VIP_PORT}${WATCH_PATH}`,
        '--ca',
        lab.ca.certFile,
        '--connections',
        String(n),
        '--first',
        String(first),
        '--ramp-ms',
        String(rampMs),
        '--duration-ms',
        String(rampMs + 60_000 + HOLD_MS + STORM_CAP_MS + 30_000),
      ],
      { logFile: `storm-client-${tag}-${k}.log` },
    );
    onJsonLines<StormEvent>(p, (ev) => void events.push(ev));
    procs.push(p);
  }
  return {
    events,
    procs,
    stop: async () => {
      await Promise.all(procs.map((p) => p.stop('SIGTERM', 5000).catch(() => undefined)));
    },
  };
}

/** Back to the start: n1 plugged in, no VIP, no conntrack state, fresh stand-ins on every node. */
async function resetLab(lab: Lab): Promise<void> {
  for (const n of lab.nodes) await lab.linkUp(n);
  for (const n of lab.nodes) await lab.stopApiserver(n);
  for (const n of lab.nodes) {
    await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
    await lab.exec(n.netns, ['conntrack', '-F'], { allowFail: true });
  }
  await forgetVip(lab);
  // fresh stand-ins: the old ones still hold the server side of the dead connections
  await lab.startApiservers({ port: APISERVER_PORT, store: true });
  const left = await lab.holders(lab.vip4);
  if (left.length > 0) throw new Error(`${lab.vip4} still held by ${left.map((n) => n.name).join(',')} after the reset`);
}

// ---------------------------------------------------------------------------------------------
// one round

async function runRound(lab: Lab, setup: Setup, round: number, connections: number, clientCount: number): Promise<RoundResult> {
  const [n1, n2, n3] = [lab.nodes[0]!, lab.nodes[1]!, lab.nodes[2]!];
  const r: RoundResult = { round, setup, figures: null, standinSpread: null, cpu: null, steadyDrops: 0, newHolder: null };
  let stack: Stack | undefined;
  let clients: Clients | undefined;
  try {
    await resetLab(lab);
    stack = await startStack(lab, setup);
    if (setup === 'haproxy') {
      const m = await stack.maxconn(n2);
      if (m !== undefined) r.haproxyMaxconn = m;
    }
    clients = startClients(lab, connections, clientCount, `${setup}-${round}`);
    const cs = clients;
    await waitFor(
      () => upAt(cs.events, Date.now()).length,
      (n) => n === connections,
      {
        timeoutMs: connections * RAMP_PER_CONN_MS + 60_000,
        intervalMs: 200,
        what: `${connections} watches up`,
      },
    );
    const heldFrom = Date.now();
    await sleep(HOLD_MS);
    r.steadyDrops = cs.events.filter((e) => e.e === 'down' && e.t >= heldFrom).length;
    const before = { n2: await watchCounters(lab, n2), n3: await watchCounters(lab, n3) };
    const kernel0 = await kernelCounters(lab);

    // the death
    const pids = stack.pids(n2);
    const cpu0 = cpuTicks(pids);
    const sirq0 = softirqTicks();
    const deathAt = Date.now();
    await lab.linkDown(n1);
    stack.kill(n1);
    lab.apiserver(n1)?.kill('SIGKILL');
    const upAtDeath = upAt(cs.events, deathAt);

    let fig = stormFigures(cs.events, deathAt, upAtDeath);
    while (fig.reestablished < fig.connections && Date.now() - deathAt < STORM_CAP_MS) {
      await sleep(100);
      fig = stormFigures(cs.events, deathAt, upAtDeath);
    }
    const endAt = Date.now();
    const cpu1 = cpuTicks(pids);
    const sirq1 = softirqTicks();
    r.figures = fig;
    const daemonMs: Record<string, number> = {};
    for (const k of Object.keys(cpu1)) daemonMs[k] = round1(ticksToMs((cpu1[k] ?? 0) - (cpu0[k] ?? 0)));
    const totalMs = round1(Object.values(daemonMs).reduce((a, b) => a + b, 0));
    const windowMs = endAt - deathAt;
    r.cpu = {
      daemonMs,
      totalMs,
      windowMs,
      pctOfCore: windowMs > 0 ? round1((totalMs / windowMs) * 100) : null,
      machineSoftirqMs: round1(ticksToMs(sirq1 - sirq0)),
    };
    const kernel1 = await kernelCounters(lab);
    r.kernel = Object.fromEntries(Object.keys(kernel1).map((k) => [k, counterDelta(kernel0[k] ?? {}, kernel1[k]!, k === 'n2conntrack' ? CT_KEYS : NET_KEYS)]));
    const after = { n2: await watchCounters(lab, n2), n3: await watchCounters(lab, n3) };
    r.standinSpread = spread({ n2: after.n2.started - before.n2.started, n3: after.n3.started - before.n3.started }, ['n2', 'n3']);
    r.newHolder = (await lab.holders(lab.vip4)).map((n) => n.name).join(',') || null;
  } catch (e) {
    r.error = errText(e);
  } finally {
    await clients?.stop();
    await stack?.stop();
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// summary and output

const med = (xs: (number | null | undefined)[], digits = 1): Stats =>
  stats(
    xs.filter((x): x is number => typeof x === 'number'),
    digits,
  );

/** Medians per setup and the ratios (pure). */
export function summarize(rounds: readonly RoundResult[]): { summary: SetupSummary[]; ratios: StormReport['ratios'] } {
  const summary = SETUPS.map((setup): SetupSummary => {
    const rs = rounds.filter((r) => r.setup === setup && r.figures !== null && r.error === undefined);
    const f = rs.map((r) => r.figures!);
    return {
      setup,
      label: LABELS[setup],
      rounds: rs.length,
      t50: med(f.map((x) => x.t50Ms)),
      t99: med(f.map((x) => x.t99Ms)),
      t100: med(f.map((x) => x.t100Ms)),
      detectP99: med(f.map((x) => x.detectP99Ms)),
      reconnectP99: med(f.map((x) => x.reconnectP99Ms)),
      tcpP99: med(f.map((x) => x.steps.tcp[1])),
      tlsP99: med(f.map((x) => x.steps.tls[1])),
      failed: med(f.map((x) => x.failed)),
      retried: med(f.map((x) => x.retried)),
      maxOverFair: med(
        rs.map((r) => r.standinSpread?.maxOverFair),
        3,
      ),
      cpuMs: med(rs.map((r) => r.cpu?.totalMs)),
      cpuPct: med(rs.map((r) => r.cpu?.pctOfCore)),
      softirqMs: med(rs.map((r) => r.cpu?.machineSoftirqMs)),
      incomplete: f.filter((x) => x.t100Ms === null).length,
      failedTotal: f.reduce((a, x) => a + x.failed, 0),
      roundsWithFailures: f.filter((x) => x.failed > 0).length,
    };
  });
  const [b, h] = [summary[0]!, summary[1]!];
  return {
    summary,
    ratios: {
      t99: ratioOf(b.t99.median, h.t99.median),
      t100: ratioOf(b.t100.median, h.t100.median),
      reconnectP99: ratioOf(b.reconnectP99.median, h.reconnectP99.median),
      failed: ratioOf(b.failed.median, h.failed.median),
      maxOverFair: ratioOf(b.maxOverFair.median, h.maxOverFair.median),
      cpuMs: ratioOf(b.cpuMs.median, h.cpuMs.median),
    },
  };
}

function printRounds(rounds: readonly RoundResult[]): void {
  say('round  setup                t99 ms  t100 ms  failed  n2/n3 new watches  holder CPU ms (per daemon)       steady drops');
  for (const r of rounds) {
    const head = `${String(r.round).padStart(5)}  ${LABELS[r.setup].padEnd(19)}`;
    if (r.figures === null) {
      say(`${head}  FAILED: ${r.error}`);
      continue;
    }
    const f = r.figures;
    const sp = r.standinSpread ? `${r.standinSpread.counts.n2}/${r.standinSpread.counts.n3}` : '—';
    const cpu = r.cpu
      ? `${r.cpu.totalMs.toFixed(0)} (${Object.entries(r.cpu.daemonMs)
          .map(([k, v]) => `${k} ${v.toFixed(0)}`)
          .join(', ')})`
      : '—';
    say(
      `${head}  ${fmt(f.t99Ms, 6)}  ${fmt(f.t100Ms, 7)}  ${fmt(f.failed, 6)}  ${sp.padStart(17)}  ${cpu.padEnd(31)}  ${r.steadyDrops}${r.error ? `  (${r.error})` : ''}`,
    );
    if (r.kernel)
      say(
        `       kernel: ${Object.entries(r.kernel)
          .map(
            ([ns, c]) =>
              `${ns} ${
                Object.entries(c)
                  .filter(([, v]) => v !== 0)
                  .map(([k, v]) => `${k.replace(/^\w+:/, '')}=${v}`)
                  .join(' ') || '-'
              }`,
          )
          .join('; ')}`,
      );
  }
}

function printTable(rep: StormReport): void {
  const s = rep.summary;
  const col = (label: string, cell: (x: SetupSummary) => string, ratio?: number | null): void =>
    say(`${label.padEnd(34)}${s.map((x) => cell(x).padStart(20)).join('')}${ratio === undefined ? '' : fmtRatio(ratio, 14)}`);
  say(`${'median over rounds'.padEnd(34)}${s.map((x) => x.label.padStart(20)).join('')}${'ballast/k+h'.padStart(14)}`);
  col('rounds', (x) => String(x.rounds));
  col('death → 50 % back, ms', (x) => fmt(x.t50.median, 0));
  col('death → 99 % back, ms', (x) => fmt(x.t99.median, 0), rep.ratios.t99);
  col('death → 100 % back, ms', (x) => fmt(x.t100.median, 0), rep.ratios.t100);
  col('  death → noticed, p99, ms', (x) => fmt(x.detectP99.median, 0));
  col('  noticed → back, p99, ms', (x) => fmt(x.reconnectP99.median, 0), rep.ratios.reconnectP99);
  col('    of which TCP connect, p99, ms', (x) => fmt(x.tcpP99.median, 0));
  col('    of which TLS handshake, p99, ms', (x) => fmt(x.tlsP99.median, 0));
  col('failed reconnect attempts', (x) => fmt(x.failed.median, 0), rep.ratios.failed);
  col('  sum over rounds (rounds with any)', (x) => `${x.failedTotal} (${x.roundsWithFailures})`);
  col('connections that retried', (x) => fmt(x.retried.median, 0));
  col('spread n2/n3: busiest / fair', (x) => fmt(x.maxOverFair.median, 0, 3), rep.ratios.maxOverFair);
  col('new holder CPU, ms', (x) => fmt(x.cpuMs.median, 0), rep.ratios.cpuMs);
  col('new holder CPU, % of a core', (x) => fmt(x.cpuPct.median, 0, 1));
  col('machine softirq, ms (not separable)', (x) => fmt(x.softirqMs.median, 0));
  col('rounds not complete in 60 s', (x) => String(x.incomplete));
}

function usage(): string {
  return 'usage: storm.js [--rounds N (per setup, 1..20, default 5)] [--connections C (10..10000, default 2000)] [--clients K] [--json] [--save FILE]\n       storm.js --merge FILE[,FILE…] [--json]';
}

const OPTIONS = {
  rounds: { type: 'string' },
  connections: { type: 'string' },
  clients: { type: 'string' },
  json: { type: 'boolean', default: false },
  save: { type: 'string' },
  merge: { type: 'string' },
  help: { type: 'boolean', default: false },
} as const;

function report(rep: StormReport, json: boolean): void {
  say();
  printRounds(rep.rounds);
  say();
  printTable(rep);
  if (json) say(JSON.stringify(rep, null, 2));
}

async function main(): Promise<number> {
  let values: ReturnType<typeof parseArgs<{ options: typeof OPTIONS; strict: true }>>['values'];
  let rounds: number;
  let connections: number;
  let clientCount: number;
  try {
    values = parseArgs({ options: OPTIONS, strict: true }).values;
    if (values.help) {
      say(usage());
      return 0;
    }
    rounds = intArg('rounds', values.rounds, DEFAULT_ROUNDS, 1, MAX_ROUNDS);
    connections = intArg('connections', values.connections, DEFAULT_CONNECTIONS, 10, 10_000);
    clientCount = intArg('clients', values.clients, Math.max(1, Math.ceil(connections / CONNS_PER_CLIENT)), 1, 16);
  } catch (e) {
    process.stderr.write(`${errText(e)}\n${usage()}\n`);
    return 2;
  }
  if (values.merge !== undefined) {
    const reps = values.merge.split(',').map((f) => JSON.parse(readFileSync(f, 'utf8')) as StormReport);
    const all = reps.flatMap((x) => x.rounds);
    const rep: StormReport = { ...reps[0]!, rounds: all, roundsPerSetup: reps.reduce((a, x) => a + x.roundsPerSetup, 0), ...summarize(all) };
    say(`reconnect storm: ${values.merge.split(',').length} saved run(s) merged, ${all.length} rounds`);
    report(rep, values.json);
    return 0;
  }
  if (process.getuid?.() !== 0) {
    process.stderr.write('bench-storm: needs root (network namespaces, nftables, keepalived)\n');
    return 1;
  }
  for (const [path, pkg] of [
    [KEEPALIVED_PATH, 'keepalived'],
    [HAPROXY_PATH, 'haproxy'],
    ['/usr/bin/curl', 'curl'],
    ['/usr/sbin/conntrack', 'conntrack'],
  ] as const) {
    if (!existsSync(path)) {
      process.stderr.write(`bench-storm: ${path} is missing (apt-get install ${pkg}, or npm run setup)\n`);
      return 1;
    }
  }
  if (!existsSync(cliPath())) {
    process.stderr.write(`bench-storm: ${cliPath()} is missing; run \`npm run build:ts\`\n`);
    return 1;
  }
  // the clients, the stand-ins and haproxy inherit it (haproxy derives its maxconn from it):
  // the soft limit up to the hard one (raising the hard one needs CAP_SYS_RESOURCE)
  const hard = Number(
    spawnSync('prlimit', ['--pid', String(process.pid), '--nofile', '--raw', '--noheadings', '-o', 'HARD'], { encoding: 'utf8' }).stdout?.trim(),
  );
  const fdLimit = Number.isInteger(hard) && hard > 0 ? Math.min(hard, FD_LIMIT) : FD_LIMIT;
  const lim = spawnSync('prlimit', ['--pid', String(process.pid), `--nofile=${fdLimit}:${fdLimit}`], { encoding: 'utf8' });
  if (lim.status !== 0 || fdLimit < FD_NEEDED_PER_CONN * connections) {
    process.stderr.write(`bench-storm: the fd limit ${fdLimit} is too low for ${connections} connections or cannot be raised: ${(lim.stderr ?? '').trim()}\n`);
    return 1;
  }
  const kv = keepalivedVersion()?.join('.') ?? 'unknown';
  const hv = haproxyVersion()?.join('.') ?? 'unknown';
  const t0 = Date.now();
  const loadStart = load();
  const lab = await Lab.create({ prefix: PREFIX, subnet: SUBNET, ipv6: false });
  try {
    say(`reconnect storm: ballast vs keepalived ${kv} + haproxy ${hv} (the kubeadm HA guide's pair), one lab, one run`);
    say(
      `lab ${PREFIX} (10.78.${SUBNET}.0/24): 3 nodes, priorities ${PRIORITIES.join('/')}, VRRPv3 adverts every ${ADVERT_MS} ms for both, VIP ${lab.vip4}:${VIP_PORT} → stand-in apiservers on :${APISERVER_PORT}`,
    );
    say(
      `checks: GET ${CHECK_PATH} over TLS every ${CHECK.interMs / 1000} s, fall ${CHECK.fall}, rise ${CHECK.rise} (ballast and haproxy); keepalived tracks the guide's check_apiserver (interval ${TRACK.intervalS}, weight ${TRACK.weight}, fall ${TRACK.fall}, rise ${TRACK.rise})`,
    );
    say(
      `clients: ${connections} watch connections from ${clientCount} process(es), client-go's reflector backoff (800 ms ×2 → 30 s, jitter 100 %), dial 30 s, TLS 10 s, TCP keepalive 1 s`,
    );
    say(`death: n1's bridge port down + SIGKILL of its daemons and stand-in; ${rounds} round(s) per setup, interleaved`);
    const results: RoundResult[] = [];
    for (let round = 1; round <= rounds; round++) {
      for (const setup of SETUPS) {
        const r = await runRound(lab, setup, round, connections, clientCount);
        results.push(r);
        const f = r.figures;
        progress(
          `round ${round}/${rounds} ${LABELS[setup]}: ${f === null ? `FAILED (${r.error})` : `t99 ${f.t99Ms ?? '—'} ms, t100 ${f.t100Ms ?? '—'} ms, ${f.failed} failed, spread ${JSON.stringify(r.standinSpread?.counts ?? {})}, CPU ${r.cpu?.totalMs ?? '—'} ms${r.error ? `, ${r.error}` : ''}`}`,
        );
      }
    }
    const rep: StormReport = {
      lab: {
        prefix: PREFIX,
        subnet: SUBNET,
        nodes: 3,
        priorities: [...PRIORITIES],
        vip: lab.vip4,
        vipPort: VIP_PORT,
        apiserverPort: APISERVER_PORT,
        advertisementIntervalMs: ADVERT_MS,
      },
      versions: { keepalived: kv, haproxy: hv, node: process.versions.node },
      connections,
      clients: clientCount,
      roundsPerSetup: rounds,
      load: { start: loadStart, end: load() },
      rounds: results,
      ...summarize(results),
    };
    if (values.save !== undefined) writeFileSync(values.save, `${JSON.stringify(rep, null, 2)}\n`);
    report(rep, values.json);
    say();
    say(
      `${results.length} rounds in ${((Date.now() - t0) / 1000).toFixed(0)} s; load average ${loadStart.join(' ')} at the start, ${load().join(' ')} at the end (${nproc()} cores)`,
    );
    return results.some((r) => r.error !== undefined) ? 1 : 0;
  } finally {
    await lab.teardown();
  }
}

runIfMain(import.meta.url, 'bench-storm failed', main, { stack: true });
