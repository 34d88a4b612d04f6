/**
 * `npm run bench [-- --runs N --seconds S --workers W --json]`: the API endpoint's data path and
 * its behaviour under failures, side by side in one run on one lab, with ratios to a client that
 * talks to one apiserver directly:
 *
 *   direct               the client → one node's IP:6443 (no VIP, nothing in between)
 *   ballast              the client → VIP:6443; the holder's nftables DNAT it to a ready apiserver
 *                        (random pick per connection, masquerade for remote ones), passive
 *                        detection (conntrack events, VRRP Master_Down)
 *   keepalived+haproxy   the kubeadm HA guide's pair: keepalived moves the VIP, haproxy runs on
 *                        every node (`bind *:8443`, TCP mode, roundrobin, retries 1, option
 *                        redispatch; see lab/peers/haproxy.ts)
 *
 * Both balancers check the apiservers the same way, so that what differs is the data path and
 * what each does between two checks: GET /readyz over TLS every 2 s, down after 3 failures, up
 * after 2 passes (haproxy's defaults, which the guide keeps; ballast's `apiserver.health` set to
 * match). haproxy checks /readyz instead of the guide's /healthz: the stand-in has no /healthz.
 *
 * The lab (lab/lab.ts, prefix bbn2, 10.78.96.0/24, IPv4 only): three nodes with priorities
 * 150/100/50, VRRPv3 adverts every 100 ms for ballast and keepalived alike (the guide leaves
 * keepalived at 1 s; the same interval keeps the election out of the comparison, which
 * bench/failover.ts makes), VIP 10.78.96.100/32, a TLS stand-in apiserver on every node.
 *
 * 1. New-connection request rate: W worker processes in the client namespace, each a loop of
 *    HTTPS GET /version, every request on a NEW TLS connection verified against the lab CA (no
 *    keep-alive, no session reuse), for S seconds; 3 rounds, the setups' order rotating, so that
 *    drift on the machine spreads over all of them. requests/s (median of the rounds), p50/p99
 *    latency (all rounds). A second direct row spreads the requests over the three nodes itself:
 *    the balanced setups share the servers' TLS work among three stand-ins, "direct" gives it
 *    all to one.
 * 2. Bulk throughput. The stand-in has no big-body endpoint, so for this part n2's stand-in is
 *    replaced by a bulk server on :6443 (bench/workers.ts `--role bulk-server`, in n2's namespace):
 *    a connection that opens with a TLS handshake gets /readyz /livez /version over HTTPS (both
 *    balancers' health checks pass unchanged), one that opens with the plain-text line `BULK`
 *    gets the node's name and then zeros until it closes. The client opens W such connections
 *    in parallel for S seconds, 3 rounds: plain TCP, so no TLS cost at either end hides the path.
 *    Both balancers have n2 as their ONLY backend and the direct row talks to n2: every path ends
 *    at the same server socket, and only the middle differs (nothing / nftables DNAT and IP
 *    forwarding in n1's kernel / haproxy's two sockets in n1).
 *    In parts 1 and 2 ballast and haproxy run at the same time: ballast holds the VIP on n1, and
 *    haproxy on every node listens on *:8443, so it serves VIP:8443 on n1 exactly as it would
 *    behind keepalived (keepalived only puts the address there; it is not on the data path).
 *    Every row is then measured with the same daemons running and checking.
 * 3. The holder's apiserver stops (its node, its agent / keepalived + haproxy stay up): the
 *    client requests https://VIP/version every 10 ms on a new connection, 250 ms timeout
 *    (lab/clients/prober.ts), and n1's stand-in gets SIGTERM 600 ms in. Figures: the prober's
 *    maxOutageMs (last success before the failures → first success after) and the failed
 *    count, over the 2 s after the fault; the VIP must stay on n1.
 * 4. The holder node dies (its link goes down): from the fault to the start of the last failed
 *    request, watched until 1.5 s pass without a failure (at least 2 s, at most 20 s after the
 *    fault).
 * Parts 3 and 4 start fresh daemons for every run (ballast alone, or keepalived + haproxy), run
 * `--runs` times per setup interleaved (ballast, haproxy, ballast, …), and report median/min/max.
 * Both also time, from the balancer's log, when the dead backend left the rotation of the node
 * that holds the VIP after the fault (ballast: its "backend health … down" line; haproxy: its
 * "Server … is DOWN" line).
 * Every measurement waits until n1 alone holds the VIP and n1's balancer(s) saw every backend
 * pass its checks.
 *
 * The machine's CPUs are shared by the client, the servers, the daemons and whatever else runs on
 * the machine; the load average is printed at the start and the end.
 *
 * Needs root, keepalived, haproxy, conntrack and the compiled scripts (`npm run build:ts`). The
 * lab's files (configs, logs) stay with BALLAST_LAB_KEEP=1. Tears the lab down at the end, also
 * on failure and on SIGINT; it stops only what it (or the lab) started. The client workers and
 * the bulk server are bench/workers.ts, run inside the lab's namespaces.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { parseArgs } from 'node:util';
import { Lab, probeOnce, runProber, type LabNode, type ProberReport } from '../lab/lab.js';
import { LabAgent, cliPath, startAgent } from '../lab/cluster.js';
import { sleep, waitFor } from '../lab/wait.js';
import { KEEPALIVED_PATH, keepalivedVersion, startKeepalived, type KeepalivedPeer } from '../lab/peers/keepalived.js';
import { HAPROXY_PATH, haproxyVersion, startHaproxy, type HaproxyOptions, type HaproxyPeer } from '../lab/peers/haproxy.js';
import { summarize } from '../lab/clients/prober.js';
import { stats, type Stats } from './stats.js';
import {
  counts,
  emptyRate,
  errText,
  finishRates,
  fmt,
  fmtRatio,
  forgetVip,
  load,
  preflight,
  progress,
  rateRound,
  ratioOf,
  rotate,
  round1,
  round2,
  runWorkers,
  say,
  waitForStableHolder,
  workerScript,
  type BulkWorkerResult,
  type RateResult,
} from './common.js';
import { runIfMain } from '../lab/entry.js';

/** Rates and throughputs print with two decimals. */
const stats2 = (xs: readonly number[]): Stats => stats(xs, 2);

const PREFIX = 'bbn2';
const SUBNET = 96;
const PRIORITIES = [150, 100, 50] as const;
const ADVERT_MS = 100;
const APISERVER_PORT = 6443;
/** the guide's example APISERVER_DEST_PORT: the local apiserver owns 6443 */
const HAPROXY_PORT = 8443;
/** the stand-in serves no /healthz (the guide's path); /readyz is what ballast checks too */
const HAPROXY_CHECK_PATH = '/readyz';
/** active checks of both balancers: haproxy's defaults (inter 2s, fall 3, rise 2), which the guide keeps */
const CHECK = { interMs: 2000, fall: 3, rise: 2 } as const;
const PROBE_INTERVAL_MS = 10;
const PROBE_TIMEOUT_MS = 250;
/** prober time before a fault, at least … */
const BEFORE_MS = 600;
/** … and successful requests before a fault, at least (within 5 s) */
const BEFORE_OK = 20;
/** apiserver stop: the window after the fault that is measured */
const STOP_WINDOW_MS = 2000;
/** node death: watch at least this long after the fault … */
const DEATH_MIN_MS = 2000;
/** … and until this long passed without a failure … */
const DEATH_QUIET_MS = 1500;
/** … but never longer than this */
const DEATH_CAP_MS = 20_000;
/** n1 must hold the VIP alone this long before a measurement starts */
const STABLE_MS = 300;
/** rounds of parts 1 and 2 */
const ROUNDS = 3;
const DEFAULT_RUNS = 5;
const MAX_RUNS = 20;
const DEFAULT_SECONDS = 2;
const DEFAULT_WORKERS = 4;

// ---------------------------------------------------------------------------------------------
// public shapes (what --json prints)

/** The setups. `direct` has no VIP; `directAll` is the client spreading its requests itself. */
export type Setup = 'direct' | 'directAll' | 'ballast' | 'haproxy';

/** One setup's bulk figures over the rounds (Gbit/s = 10^9 bit/s). */
export interface BulkResult {
  setup: Setup;
  label: string;
  /** per round: the sum over the connections of bytes × 8 / ms / 10^6 */
  rounds: number[];
  /** the median of `rounds` */
  gbitPerS: number | null;
  /** per round, every connection */
  connections: BulkWorkerResult[][];
  /** this setup / direct; null when either is missing */
  ratio: number | null;
  error?: string;
}

/** One run of part 3 (the holder's apiserver stops). Times in ms. */
export interface StopRun {
  run: number;
  /** the prober's maxOutageMs from the last success before the fault on; null when the run failed */
  outageMs: number | null;
  /** failed requests, from the last success before the fault on */
  failed: number;
  /** requests, from the last success before the fault on */
  requests: number;
  /** the VIP's holders after the window (["n1"] expected) */
  holdersAfter: string[];
  /** successful requests per serving node, after the fault */
  servedAfter: Record<string, number>;
  /** fault → n1's balancer logs n1's apiserver out of its rotation; null: not within the window */
  backendOutMs: number | null;
  error?: string;
}

/** One run of part 4 (the holder's link goes down). Times in ms. */
export interface DeathRun {
  run: number;
  /** fault → start of the last failed request; 0 when nothing failed; null when the run failed */
  lastFailureMs: number | null;
  /** failed requests that started after the fault */
  failed: number;
  /** requests that started after the fault */
  requests: number;
  /** false when failures went on until DEATH_CAP_MS (lastFailureMs is then a lower bound) */
  recovered: boolean;
  newHolder: string | null;
  /** fault → the new holder's balancer logs n1's apiserver out of its rotation; null: not seen */
  backendOutMs: number | null;
  error?: string;
}

/** The whole result, as `--json` prints it. */
export interface BenchReport {
  lab: { prefix: string; subnet: number; nodes: number; priorities: number[]; vip: string; advertisementIntervalMs: number };
  versions: { keepalived: string; haproxy: string; node: string };
  machine: { cpus: number; loadAtStart: number[]; loadAtEnd: number[] };
  settings: {
    workers: number;
    seconds: number;
    rounds: number;
    runs: number;
    probe: { intervalMs: number; timeoutMs: number };
    /** both balancers' active checks */
    check: { path: string; intervalMs: number; fall: number; rise: number };
    haproxy: Required<Omit<HaproxyOptions, 'servers' | 'statsSocket'>>;
  };
  rate: RateResult<Setup>[];
  bulk: BulkResult[];
  apiserverStop: { setup: Setup; label: string; runs: StopRun[]; outage: Stats; failed: Stats }[];
  nodeDeath: { setup: Setup; label: string; runs: DeathRun[]; lastFailure: Stats; failed: Stats }[];
  /** ballast median / keepalived+haproxy median; null when either is missing or the latter is 0 */
  ratios: { apiserverStopOutage: number | null; nodeDeathLastFailure: number | null };
  seconds: number;
}

// ---------------------------------------------------------------------------------------------
// the daemons under test

const LABELS: Record<Setup, string> = {
  direct: 'direct',
  directAll: 'direct, client spreads',
  ballast: 'ballast',
  haproxy: 'keepalived+haproxy',
};

/** haproxy as the comparison runs it: the guide's settings, /readyz, the common checks. */
function haproxySettings(servers: LabNode[]): HaproxyOptions {
  return {
    port: HAPROXY_PORT,
    checkPath: HAPROXY_CHECK_PATH,
    ...CHECK,
    servers: servers.map((n) => ({ name: n.name, address: n.ipv4, port: APISERVER_PORT })),
  };
}

/** Which daemons run on every node. */
interface Daemons {
  ballast?: boolean;
  keepalived?: boolean;
  haproxy?: boolean;
}

/** Daemons running on every node. */
interface Stack {
  /**
   * Resolves with the time (ms since the epoch) at which the balancer on `on` logs, after this
   * call, that `backend`'s apiserver is out of its rotation; null after `timeoutMs` or when
   * there is no balancer on `on`.
   */
  backendDown(on: LabNode, backend: LabNode, timeoutMs: number): Promise<number | null>;
  /** Stops every daemon (SIGTERM, SIGKILL after 3 s). */
  stop(): Promise<void>;
}

const escapeRe = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Starts `which` on every node with `backends` as the apiservers, and resolves once n1 holds the
 * VIP alone (for STABLE_MS) and n1's balancer(s) saw every backend pass its checks. On failure
 * it stops what it started and rethrows.
 */
async function startStack(lab: Lab, which: Daemons, backends: LabNode[]): Promise<Stack> {
  const n1 = lab.nodes[0]!;
  const started: (LabAgent | KeepalivedPeer | HaproxyPeer)[] = [];
  const stack: Stack = {
    backendDown: async (on, backend, timeoutMs) => {
      const d = started.find((x) => x.node === on && (x instanceof LabAgent || 'socketPath' in x));
      if (d === undefined) return null;
      const re =
        d instanceof LabAgent
          ? new RegExp(`"backend":"${escapeRe(`${backend.ipv4}:${APISERVER_PORT}`)}","from":"[a-z]+","to":"down"`)
          : new RegExp(`Server apiserverbackend/${escapeRe(backend.name)} is DOWN`);
      return d.proc.waitForOutput(re, { timeoutMs }).then(
        () => Date.now(),
        () => null,
      );
    },
    stop: async () => {
      await Promise.all(
        started.map((d) =>
          ('instance' in d ? d.stop('SIGTERM', 3000) : 'socketPath' in d ? d.stop(3000) : d.proc.stop('SIGTERM', 3000)).catch(() => undefined),
        ),
      );
    },
  };
  try {
    // the apiserver section of cluster.ts's `balance: true`, with the common checks
    const apiserver = {
      port: APISERVER_PORT,
      backends: backends.map((n) => `${n.ipv4}:${APISERVER_PORT}`),
      health: { caFile: lab.ca.certFile, interval: `${CHECK.interMs}ms`, timeout: `${CHECK.interMs}ms`, rise: CHECK.rise, fall: CHECK.fall },
    };
    const settled = await Promise.allSettled(
      lab.nodes.flatMap((node, i) => {
        const priority = PRIORITIES[i]!;
        const ds: Promise<LabAgent | KeepalivedPeer | HaproxyPeer>[] = [];
        if (which.ballast) {
          ds.push(
            startAgent(lab, node, {
              priority,
              advertisementInterval: `${ADVERT_MS}ms`,
              balance: true,
              healthInterval: `${CHECK.interMs}ms`,
              extra: { apiserver },
            }),
          );
        }
        if (which.haproxy) ds.push(startHaproxy(lab, node, haproxySettings(backends)));
        if (which.keepalived) {
          ds.push(startKeepalived(lab, node, { priority, advertIntervalS: ADVERT_MS / 1000, vrrpVersion: 3, vips: [`${lab.vip4}/32`], interface: 'eth0' }));
        }
        return ds;
      }),
    );
    for (const s of settled) if (s.status === 'fulfilled') started.push(s.value);
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    await waitForStableHolder(lab, n1, 10_000, STABLE_MS);
    const want = new Set(backends.map((n) => `${n.ipv4}:${APISERVER_PORT}`));
    const waits: Promise<unknown>[] = [];
    const a1 = started.find((d): d is LabAgent => d.node === n1 && d instanceof LabAgent);
    if (a1) {
      waits.push(
        waitFor(
          () => a1.status(),
          (s) => s.backends.length === want.size && s.backends.every((b) => b.healthy && want.has(b.address)),
          { timeoutMs: 10_000, intervalMs: 100, what: `n1's agent to see ${[...want].join(', ')} healthy` },
        ),
      );
    }
    const h1 = started.find((d): d is HaproxyPeer => d.node === n1 && 'socketPath' in d);
    if (h1) {
      waits.push(
        h1.waitForServers((s) => s.length === want.size && s.every((x) => x.status === 'UP' && x.checkStatus === 'L7OK'), {
          timeoutMs: 10_000,
          what: 'every server UP with a passed check (L7OK)',
        }),
      );
    }
    await Promise.all(waits);
    return stack;
  } catch (e) {
    await stack.stop();
    await clearDaemons(lab);
    throw e;
  }
}

/** startStack, and once more after a failure (a loaded machine can make a start time out). */
async function startStackRetry(lab: Lab, which: Daemons, backends: LabNode[]): Promise<Stack> {
  try {
    return await startStack(lab, which, backends);
  } catch (e) {
    progress(`start failed, trying once more: ${errText(e)}`);
    return startStack(lab, which, backends);
  }
}

/**
 * Stops daemons this script started whose start failed half-way (a start that timed out leaves
 * its process running; it holds no handle to stop it by): in every node namespace, the processes
 * whose command line runs the ballast CLI, keepalived or haproxy with a file of this lab's
 * directory. By PID: SIGTERM, then SIGKILL after 3 s. Resolves with how many it stopped.
 */
async function stopStrays(lab: Lab): Promise<number> {
  const pids: number[] = [];
  for (const n of lab.nodes) {
    const listed = spawnSync('ip', ['netns', 'pids', n.netns], { encoding: 'utf8', timeout: 5000 });
    for (const pid of (listed.stdout ?? '').split(/\s+/).filter(Boolean).map(Number)) {
      let argv: string[];
      try {
        argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      } catch {
        continue; // gone meanwhile
      }
      const ours = argv.some((a) => a.startsWith(lab.dir));
      const daemon = argv.includes(cliPath()) || argv[0] === KEEPALIVED_PATH || argv[0] === HAPROXY_PATH;
      if (ours && daemon) pids.push(pid);
    }
  }
  const signal = (pid: number, sig: NodeJS.Signals | 0): boolean => {
    try {
      process.kill(pid, sig);
      return true;
    } catch {
      return false;
    }
  };
  const signalled = pids.filter((p) => signal(p, 'SIGTERM'));
  for (let i = 0; i < 30 && signalled.some((p) => signal(p, 0)); i++) await sleep(100);
  for (const p of signalled) signal(p, 'SIGKILL');
  return signalled.length;
}

/** No daemon of ours left running, no VIP anywhere, the client's neighbour entry for it gone. */
async function clearDaemons(lab: Lab): Promise<void> {
  const strays = await stopStrays(lab);
  if (strays > 0) progress(`stopped ${strays} daemon(s) left by a failed start`);
  for (const n of lab.nodes) await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
  await forgetVip(lab);
  const left = await lab.holders(lab.vip4);
  if (left.length > 0) throw new Error(`${lab.vip4} still held by ${left.map((n) => n.name).join(',')} after the reset`);
}

/** Back to the starting point: `unplugged` (default: every node) plugged in, every stand-in running, then clearDaemons. */
async function resetLab(lab: Lab, unplugged: readonly LabNode[] = lab.nodes): Promise<void> {
  for (const n of unplugged) await lab.linkUp(n);
  for (const n of lab.nodes) if (!lab.apiserver(n)) await lab.startApiserver(n);
  await clearDaemons(lab);
}

/** One successful request through `url` from the client (bounded: 20 tries, 2 s each). */
async function warmUp(lab: Lab, url: string): Promise<void> {
  let last = '';
  for (let i = 0; i < 20; i++) {
    const r = await probeOnce(lab, url, { timeoutMs: 2000 });
    if (r.ok) return;
    last = r.error;
    await sleep(100);
  }
  throw new Error(`no answer from ${url}: ${last}`);
}

// ---------------------------------------------------------------------------------------------
// parts 1 and 2: throughput

interface RateTarget {
  setup: Setup;
  label: string;
  urls: string[];
}

async function partRate(lab: Lab, workers: number, durationMs: number): Promise<RateResult<Setup>[]> {
  const n2 = lab.nodes[1]!;
  const url = (host: string, port: number): string => `https://${host}:${port}/version`;
  const targets: RateTarget[] = [
    { setup: 'direct', label: `direct → ${n2.name} ${n2.ipv4}:${APISERVER_PORT}`, urls: [url(n2.ipv4, APISERVER_PORT)] },
    { setup: 'directAll', label: 'direct → n1..n3, client round-robin', urls: lab.nodes.map((n) => url(n.ipv4, APISERVER_PORT)) },
    { setup: 'ballast', label: `ballast VIP:${APISERVER_PORT} (nftables DNAT)`, urls: [url(lab.vip4, APISERVER_PORT)] },
    { setup: 'haproxy', label: `haproxy VIP:${HAPROXY_PORT} (TCP mode)`, urls: [url(lab.vip4, HAPROXY_PORT)] },
  ];
  const results = new Map<Setup, RateResult<Setup>>(targets.map((t) => [t.setup, emptyRate(t.setup, t.label)]));
  const latencies = new Map<Setup, number[]>(targets.map((t) => [t.setup, []]));
  let stack: Stack | undefined;
  try {
    stack = await startStackRetry(lab, { ballast: true, haproxy: true }, lab.nodes);
    for (const t of targets) for (const u of t.urls) await warmUp(lab, u);
    for (let round = 0; round < ROUNDS; round++) {
      for (const t of rotate(targets, round)) {
        const res = results.get(t.setup)!;
        try {
          const perS = await rateRound(lab, t.urls, workers, durationMs, res, latencies.get(t.setup)!);
          progress(`rate round ${round + 1}/${ROUNDS} ${t.label}: ${perS} req/s`);
        } catch (e) {
          res.error ??= errText(e);
        }
      }
    }
  } catch (e) {
    progress(`rate: ${errText(e)}`);
    for (const r of results.values()) r.error ??= errText(e);
  } finally {
    await stack?.stop();
    await resetLab(lab, []);
  }
  finishRates(results, latencies, 'direct');
  return [...results.values()];
}

async function partBulk(lab: Lab, workers: number, durationMs: number): Promise<BulkResult[]> {
  const n2 = lab.nodes[1]!;
  const targets = [
    { setup: 'direct' as const, label: `direct → ${n2.name} ${n2.ipv4}:${APISERVER_PORT}`, host: n2.ipv4, port: APISERVER_PORT },
    { setup: 'ballast' as const, label: `ballast VIP:${APISERVER_PORT} → ${n2.name}`, host: lab.vip4, port: APISERVER_PORT },
    { setup: 'haproxy' as const, label: `haproxy VIP:${HAPROXY_PORT} → ${n2.name}`, host: lab.vip4, port: HAPROXY_PORT },
  ];
  const results = new Map<Setup, BulkResult>(
    targets.map((t) => [t.setup, { setup: t.setup, label: t.label, rounds: [], gbitPerS: null, connections: [], ratio: null }]),
  );
  await lab.stopApiserver(n2);
  const { certFile, keyFile } = await lab.serverCert(n2);
  const server = lab.spawn(
    n2.netns,
    [
      process.execPath,
      workerScript(),
      '--role',
      'bulk-server',
      '--name',
      n2.name,
      '--cert',
      certFile,
      '--key',
      keyFile,
      '--host',
      '0.0.0.0',
      '--port',
      String(APISERVER_PORT),
    ],
    { logFile: `bulk-server-${n2.name}.log` },
  );
  let stack: Stack | undefined;
  try {
    await server.waitForOutput(/listening on/, { timeoutMs: 10_000, includeExisting: true });
    stack = await startStackRetry(lab, { ballast: true, haproxy: true }, [n2]);
    for (let round = 0; round < ROUNDS; round++) {
      for (const t of rotate(targets, round)) {
        const res = results.get(t.setup)!;
        try {
          const rs = await runWorkers<BulkWorkerResult>(lab, workers, durationMs, (_i, startAt) => [
            '--role',
            'bulk-worker',
            '--host',
            t.host,
            '--port',
            String(t.port),
            '--duration-ms',
            String(durationMs),
            '--start-at',
            String(startAt),
          ]);
          res.connections.push(rs);
          const bad = rs.find((r) => r.error !== undefined || r.ms <= 0 || r.node !== n2.name);
          if (bad) throw new Error(`a bulk connection failed: ${bad.error ?? (bad.node !== n2.name ? `served by ${bad.node}` : 'no data')}`);
          const g = round2(rs.reduce((s, r) => s + (r.bytes * 8) / (r.ms * 1e6), 0));
          res.rounds.push(g);
          progress(`bulk round ${round + 1}/${ROUNDS} ${t.label}: ${g} Gbit/s`);
        } catch (e) {
          res.error ??= errText(e);
        }
      }
    }
  } catch (e) {
    progress(`bulk: ${errText(e)}`);
    for (const r of results.values()) r.error ??= errText(e);
  } finally {
    await stack?.stop();
    await server.stop('SIGTERM', 3000);
    await lab.startApiserver(n2);
    await resetLab(lab, []);
  }
  for (const r of results.values()) r.gbitPerS = stats2(r.rounds).median;
  const d = results.get('direct')!;
  for (const r of results.values()) r.ratio = ratioOf(r.gbitPerS, d.gbitPerS);
  return [...results.values()];
}

// ---------------------------------------------------------------------------------------------
// parts 3 and 4: failures

/** What runs for each balanced setup in parts 3 and 4, and the client's port on the VIP. */
const DAEMONS: Record<'ballast' | 'haproxy', Daemons> = { ballast: { ballast: true }, haproxy: { keepalived: true, haproxy: true } };
const PORTS: Record<'ballast' | 'haproxy', number> = { ballast: APISERVER_PORT, haproxy: HAPROXY_PORT };

/**
 * Starts the prober against the VIP and returns once BEFORE_MS passed and it has BEFORE_OK
 * successes (its start-up is slow on a loaded machine); throws when that takes over 5 s.
 */
async function startProbing(lab: Lab, port: number, tag: string): Promise<ReturnType<typeof runProber>> {
  await forgetVip(lab);
  const prober = runProber(lab, {
    url: `https://${lab.vip4}:${port}/version`,
    intervalMs: PROBE_INTERVAL_MS,
    timeoutMs: PROBE_TIMEOUT_MS,
    durationMs: 30_000,
    logFile: `prober-${tag}.log`,
  });
  const t0 = Date.now();
  await sleep(BEFORE_MS);
  for (let i = 0; i < 100 && prober.results().filter((r) => r.ok).length < BEFORE_OK; i++) {
    if (Date.now() - t0 > 5000) break;
    await sleep(50);
  }
  const rs = prober.results();
  if (rs.filter((r) => r.ok).length < BEFORE_OK) {
    await prober.stop().catch(() => undefined);
    throw new Error(
      `the client got ${rs.filter((r) => r.ok).length} answers and ${rs.filter((r) => !r.ok).length} failures through ${lab.vip4}:${port} before the fault`,
    );
  }
  return prober;
}

async function apiserverStopRun(lab: Lab, setup: 'ballast' | 'haproxy', run: number): Promise<StopRun> {
  const n1 = lab.nodes[0]!;
  const r: StopRun = { run, outageMs: null, failed: 0, requests: 0, holdersAfter: [], servedAfter: {}, backendOutMs: null };
  let stack: Stack | undefined;
  let prober: ReturnType<typeof runProber> | undefined;
  try {
    stack = await startStackRetry(lab, DAEMONS[setup], lab.nodes);
    prober = await startProbing(lab, PORTS[setup], `stop-${setup}-${run}`);
    const faultT = prober.now();
    const out = stack.backendDown(n1, n1, STOP_WINDOW_MS);
    const faultAt = Date.now();
    await lab.stopApiserver(n1);
    await sleep(STOP_WINDOW_MS);
    const outAt = await out;
    r.backendOutMs = outAt === null ? null : outAt - faultAt;
    const report: ProberReport = await prober.stop();
    prober = undefined;
    r.holdersAfter = (await lab.holders(lab.vip4)).map((n) => n.name);
    // only the fault's effect counts: from the last success that started before it (a request
    // that timed out earlier on a loaded machine is not the fault's)
    const lastOk = Math.max(0, ...report.results.filter((x) => x.ok && x.t <= faultT).map((x) => x.t));
    const after = summarize(report.results.filter((x) => x.t >= lastOk));
    r.requests = after.requests;
    r.failed = after.failed;
    for (const x of report.results) if (x.ok && x.t > faultT && x.node !== undefined) r.servedAfter[x.node] = (r.servedAfter[x.node] ?? 0) + 1;
    if (after.outages.some((o) => o.ongoing)) throw new Error('the client never got an answer again');
    r.outageMs = after.maxOutageMs;
  } catch (e) {
    r.error = errText(e);
    r.outageMs = null;
  } finally {
    if (prober) await prober.stop().catch(() => undefined);
    await stack?.stop();
    await resetLab(lab, []);
  }
  return r;
}

async function nodeDeathRun(lab: Lab, setup: 'ballast' | 'haproxy', run: number): Promise<DeathRun> {
  const n1 = lab.nodes[0]!;
  const r: DeathRun = { run, lastFailureMs: null, failed: 0, requests: 0, recovered: false, newHolder: null, backendOutMs: null };
  let stack: Stack | undefined;
  let prober: ReturnType<typeof runProber> | undefined;
  try {
    stack = await startStackRetry(lab, DAEMONS[setup], lab.nodes);
    prober = await startProbing(lab, PORTS[setup], `death-${setup}-${run}`);
    const faultT = prober.now();
    const out = stack.backendDown(lab.nodes[1]!, n1, DEATH_CAP_MS);
    const faultAt = Date.now();
    await lab.linkDown(n1);
    // watch until DEATH_QUIET_MS without a failure (bounded by DEATH_CAP_MS, in ≤ 250 polls)
    for (let i = 0; i < DEATH_CAP_MS / 80; i++) {
      await sleep(100);
      const rs = prober.results();
      const now = prober.now() - faultT;
      const fails = rs.filter((x) => !x.ok && x.t >= faultT);
      const last = fails.length ? Math.max(...fails.map((x) => x.t)) - faultT : null;
      if (now >= DEATH_CAP_MS) break;
      if (now >= DEATH_MIN_MS && (last === null || now - last >= DEATH_QUIET_MS)) {
        r.recovered = true;
        break;
      }
    }
    const report: ProberReport = await prober.stop();
    prober = undefined;
    const outAt = await Promise.race([out, sleep(100).then(() => null)]);
    r.backendOutMs = outAt === null ? null : outAt - faultAt;
    const fails = report.results.filter((x) => !x.ok && x.t >= faultT);
    r.requests = report.results.filter((x) => x.t >= faultT).length;
    r.failed = fails.length;
    r.lastFailureMs = fails.length ? round1(Math.max(...fails.map((x) => x.t)) - faultT) : 0;
    r.newHolder =
      (await lab.holders(lab.vip4))
        .filter((n) => n !== n1)
        .map((n) => n.name)
        .join(',') || null;
  } catch (e) {
    r.error = errText(e);
    r.lastFailureMs = null;
  } finally {
    if (prober) await prober.stop().catch(() => undefined);
    await stack?.stop();
    await resetLab(lab, [n1]);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// output

function printRate(rs: RateResult<Setup>[], workers: number, seconds: number): void {
  say(
    `1. new-connection request rate: ${workers} workers × ${seconds} s × ${ROUNDS} rounds, each a loop of HTTPS GET /version on a new verified TLS connection`,
  );
  const head = `${'setup'.padEnd(38)}${'req/s'.padStart(7)}${''.padStart(7)}${'p50 ms'.padStart(8)}${''.padStart(7)}${'p99 ms'.padStart(8)}${''.padStart(7)}${'failed'.padStart(7)}  ${'req/s per round'.padEnd(17)}  served by`;
  say(head);
  say('-'.repeat(head.length + 22));
  for (const r of rs) {
    const line = `${r.label.padEnd(38)}${fmt(r.reqPerS, 7)}${fmtRatio(r.ratio.reqPerS, 7)}${fmt(r.p50Ms, 8, 1)}${fmtRatio(r.ratio.p50, 7)}${fmt(r.p99Ms, 8, 1)}${fmtRatio(r.ratio.p99, 7)}${fmt(r.failed, 7)}  ${r.rounds
      .map((x) => x.toFixed(0))
      .join(' ')
      .padEnd(17)}  ${counts(r.nodes)}`;
    say(r.error === undefined ? line : `${line}  FAILED: ${r.error}`);
  }
}

function printBulk(rs: BulkResult[], workers: number, seconds: number): void {
  say(`2. bulk throughput: ${workers} parallel plain TCP connections × ${seconds} s × ${ROUNDS} rounds, server → client, n2 the only backend of every setup`);
  const head = `${'setup'.padEnd(38)}${'Gbit/s'.padStart(7)}${''.padStart(7)}  Gbit/s per round (per connection)`;
  say(head);
  say('-'.repeat(head.length + 30));
  for (const r of rs) {
    const per = r.rounds
      .map((g, i) => `${g.toFixed(2)} (${(r.connections[i] ?? []).map((c) => (c.ms > 0 ? (c.bytes * 8) / (c.ms * 1e6) : 0).toFixed(2)).join('/')})`)
      .join('  ');
    const line = `${r.label.padEnd(38)}${fmt(r.gbitPerS, 7, 2)}${fmtRatio(r.ratio, 7)}  ${per}`;
    say(r.error === undefined ? line : `${line}  FAILED: ${r.error}`);
  }
}

function printRuns<R extends { run: number; error?: string }>(
  title: string,
  rows: { label: string; runs: R[]; st: Stats }[],
  cell: (r: R) => string,
  runs: number,
): void {
  const w = 13;
  say(title);
  const head = `${'setup'.padEnd(20)}${Array.from({ length: runs }, (_, i) => `#${i + 1}`.padStart(w)).join('')}  |${'median'.padStart(9)}${'min'.padStart(9)}${'max'.padStart(9)}`;
  say(head);
  say('-'.repeat(head.length));
  for (const row of rows) {
    const cells = row.runs.map((r) => (r.error !== undefined ? 'FAIL' : cell(r)).padStart(w));
    say(`${row.label.padEnd(20)}${cells.join('')}  |${fmt(row.st.median, 9, 1)}${fmt(row.st.min, 9, 1)}${fmt(row.st.max, 9, 1)}`);
  }
}

/** "median [min..max] ms" of the runs' backendOutMs, with how many runs did not see it (pure). */
function outRange(runs: readonly { backendOutMs: number | null; error?: string }[], within: number): string {
  const ok = runs.filter((r) => r.error === undefined);
  const st = stats2(ok.flatMap((r) => (r.backendOutMs === null ? [] : [r.backendOutMs])));
  const missing = ok.length - st.n;
  if (st.median === null) return `> ${within} ms (not logged within the window)`;
  return `${st.median.toFixed(0)} ms [${st.min!.toFixed(0)}..${st.max!.toFixed(0)}]${missing > 0 ? `; > ${within} ms in ${missing} run(s)` : ''}`;
}

function printReport(rep: BenchReport): void {
  const { workers, seconds, runs } = rep.settings;
  printRate(rep.rate, workers, seconds);
  say();
  printBulk(rep.bulk, workers, seconds);
  say();
  printRuns(
    `3. the holder's apiserver stops (node and daemons alive): error window, ms (prober maxOutageMs) [failed requests], over ${STOP_WINDOW_MS} ms after the fault`,
    rep.apiserverStop.map((s) => ({ label: s.label, runs: s.runs, st: s.outage })),
    (r) => `${r.outageMs!.toFixed(0)} [${r.failed}]`,
    runs,
  );
  for (const s of rep.apiserverStop) {
    const ok = s.runs.filter((r) => r.error === undefined);
    const moved = ok.filter((r) => !(r.holdersAfter.length === 1 && r.holdersAfter[0] === 'n1')).length;
    const served: Record<string, number> = {};
    for (const r of ok) for (const [k, v] of Object.entries(r.servedAfter)) served[k] = (served[k] ?? 0) + v;
    const n1 = served.n1 ? ` (n1: requests that started within the stand-in's shutdown)` : '';
    say(`   ${s.label}: the VIP ${moved === 0 ? 'stayed on n1 in every run' : `left n1 in ${moved} run(s)`}; served after the fault: ${counts(served)}${n1}`);
    say(`   ${''.padEnd(s.label.length)}  n1's apiserver out of n1's rotation after ${outRange(s.runs, STOP_WINDOW_MS)}`);
  }
  say();
  printRuns(
    `4. the holder node dies (link down): fault → start of the last failed request, ms [failed requests]; watched until ${DEATH_QUIET_MS} ms without a failure (≤ ${DEATH_CAP_MS / 1000} s)`,
    rep.nodeDeath.map((s) => ({ label: s.label, runs: s.runs, st: s.lastFailure })),
    (r) => `${r.recovered ? '' : '≥'}${r.lastFailureMs!.toFixed(0)} [${r.failed}]`,
    runs,
  );
  for (const s of rep.nodeDeath) {
    const holders = [...new Set(s.runs.flatMap((r) => (r.newHolder ? [r.newHolder] : [])))].join('/') || '—';
    say(`   ${s.label}: new holder ${holders}; n1's apiserver out of n2's rotation after ${outRange(s.runs, DEATH_CAP_MS)}`);
  }
  say();
  const q = (v: number | null): string => (v === null ? '— (a median is 0 or missing)' : v.toFixed(2));
  say(
    `ratio ballast / keepalived+haproxy of the medians: apiserver stop ${q(rep.ratios.apiserverStopOutage)}; node death ${q(rep.ratios.nodeDeathLastFailure)}`,
  );
  const notes = [
    ...rep.rate.flatMap((r) => (Object.keys(r.errors).length ? [`rate, ${r.label}: errors ${counts(r.errors)}`] : [])),
    ...rep.apiserverStop.flatMap((s) => s.runs.filter((r) => r.error).map((r) => `apiserver stop, ${s.label} #${r.run}: ${r.error}`)),
    ...rep.nodeDeath.flatMap((s) => s.runs.filter((r) => r.error).map((r) => `node death, ${s.label} #${r.run}: ${r.error}`)),
    ...rep.nodeDeath.flatMap((s) =>
      s.runs.filter((r) => !r.error && !r.recovered).map((r) => `node death, ${s.label} #${r.run}: still failing ${DEATH_CAP_MS / 1000} s after the fault`),
    ),
  ];
  if (notes.length > 0) {
    say();
    for (const n of notes) say(`note: ${n}`);
  }
}

// ---------------------------------------------------------------------------------------------
// main

function usage(): string {
  return 'usage: node dist/bench/balancing.js [--runs N (1..20, default 5)] [--seconds S per measurement (1..30, default 2)] [--workers W (1..16, default 4)] [--json]';
}

const OPTIONS = {
  runs: { type: 'string' },
  seconds: { type: 'string' },
  workers: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

const parseCli = (): ReturnType<typeof parseArgs<{ options: typeof OPTIONS; strict: true }>> => parseArgs({ options: OPTIONS, strict: true });

async function main(): Promise<number> {
  const { values } = parseCli();
  if (values.help) {
    say(usage());
    return 0;
  }
  const checked = preflight(values, {
    name: 'bench',
    usage: usage(),
    defaults: { runs: DEFAULT_RUNS, maxRuns: MAX_RUNS, seconds: DEFAULT_SECONDS, workers: DEFAULT_WORKERS },
    root: 'network namespaces, raw sockets, nftables',
    files: [
      [KEEPALIVED_PATH, 'keepalived'],
      [HAPROXY_PATH, 'haproxy'],
    ],
  });
  if (typeof checked === 'number') return checked;
  const { runs, seconds, workers } = checked;
  const kv = keepalivedVersion()?.join('.') ?? 'unknown';
  const hv = haproxyVersion()?.join('.') ?? 'unknown';
  const durationMs = seconds * 1000;
  const t0 = Date.now();
  const loadAtStart = load();
  const lab = await Lab.create({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false });
  try {
    say(`load-balancing benchmark: ballast vs keepalived ${kv} + haproxy ${hv} (the kubeadm HA guide's pair) vs direct, one lab, one run`);
    say(
      `lab ${PREFIX} (10.78.${SUBNET}.0/24, IPv4): 3 nodes, priorities ${PRIORITIES.join('/')}, VRRPv3 adverts every ${ADVERT_MS} ms for ballast and keepalived (the guide leaves keepalived at 1 s), VIP ${lab.vip4}/32, TLS stand-in apiserver on :${APISERVER_PORT} of every node`,
    );
    say(
      `both balancers check GET ${HAPROXY_CHECK_PATH} over TLS every ${CHECK.interMs / 1000} s, fall ${CHECK.fall}, rise ${CHECK.rise} (haproxy's defaults, kept by the guide; ballast set to match; the stand-in has no /healthz)`,
    );
    say(`ballast: nftables DNAT VIP:${APISERVER_PORT} → every ready apiserver, random per connection; passive detection (conntrack events, VRRP Master_Down)`);
    say(
      `keepalived+haproxy: haproxy on every node, bind *:${HAPROXY_PORT}, mode tcp, balance roundrobin, check-ssl verify none, retries 1, option redispatch, timeout connect 5s, check 10s, client/server 20s`,
    );
    say(
      `parts 1-2: ballast holds the VIP on n1 and haproxy listens on *:${HAPROXY_PORT} on every node, both at once (keepalived is not on the data path), so every row runs with the same daemons up; setups interleaved over ${ROUNDS} rounds`,
    );
    say(
      `part 2: the stand-in serves small bodies only, so n2's is swapped for a bulk server on :${APISERVER_PORT} (health checks over TLS as before; a plain-text "BULK" opener gets zeros), and n2 is every setup's only backend: same endpoints, only the middle differs`,
    );
    say(
      `parts 3-4: client GET https://VIP/version every ${PROBE_INTERVAL_MS} ms on a new connection, ${PROBE_TIMEOUT_MS} ms timeout; fresh daemons per run (ballast alone / keepalived + haproxy); ${runs} run(s) per setup, interleaved`,
    );
    say(
      `machine: ${cpus().length} CPUs, load average ${loadAtStart.join(' ')} at the start (the client, the servers, the daemons and anything else share them)`,
    );
    say();
    await lab.startApiservers({ port: APISERVER_PORT });
    await resetLab(lab);

    let tPart = Date.now();
    const rate = await partRate(lab, workers, durationMs);
    progress(`part 1 took ${Math.round((Date.now() - tPart) / 1000)} s`);
    tPart = Date.now();
    const bulk = await partBulk(lab, workers, durationMs);
    progress(`part 2 took ${Math.round((Date.now() - tPart) / 1000)} s`);
    tPart = Date.now();

    const setups = ['ballast', 'haproxy'] as const;
    const stopRuns = new Map<string, StopRun[]>(setups.map((s) => [s, []]));
    const deathRuns = new Map<string, DeathRun[]>(setups.map((s) => [s, []]));
    for (let run = 1; run <= runs; run++) {
      for (const s of setups) {
        const r = await apiserverStopRun(lab, s, run);
        stopRuns.get(s)!.push(r);
        progress(`run ${run}/${runs} apiserver stop, ${LABELS[s]}: ${r.error ?? `${r.outageMs} ms, ${r.failed} failed`}`);
      }
      for (const s of setups) {
        const r = await nodeDeathRun(lab, s, run);
        deathRuns.get(s)!.push(r);
        progress(`run ${run}/${runs} node death, ${LABELS[s]}: ${r.error ?? `last failure ${r.lastFailureMs} ms, ${r.failed} failed`}`);
      }
    }
    progress(`parts 3 and 4 took ${Math.round((Date.now() - tPart) / 1000)} s`);
    const apiserverStop = setups.map((s) => {
      const rs = stopRuns.get(s)!;
      const ok = rs.filter((r) => r.outageMs !== null);
      return { setup: s, label: LABELS[s], runs: rs, outage: stats2(ok.map((r) => r.outageMs!)), failed: stats2(ok.map((r) => r.failed)) };
    });
    const nodeDeath = setups.map((s) => {
      const rs = deathRuns.get(s)!;
      const ok = rs.filter((r) => r.lastFailureMs !== null);
      return { setup: s, label: LABELS[s], runs: rs, lastFailure: stats2(ok.map((r) => r.lastFailureMs!)), failed: stats2(ok.map((r) => r.failed)) };
    });
    const report: BenchReport = {
      lab: { prefix: PREFIX, subnet: SUBNET, nodes: 3, priorities: [...PRIORITIES], vip: `${lab.vip4}/32`, advertisementIntervalMs: ADVERT_MS },
      versions: { keepalived: kv, haproxy: hv, node: process.versions.node },
      machine: { cpus: cpus().length, loadAtStart, loadAtEnd: load() },
      settings: {
        workers,
        seconds,
        rounds: ROUNDS,
        runs,
        probe: { intervalMs: PROBE_INTERVAL_MS, timeoutMs: PROBE_TIMEOUT_MS },
        check: { path: HAPROXY_CHECK_PATH, intervalMs: CHECK.interMs, fall: CHECK.fall, rise: CHECK.rise },
        haproxy: {
          port: HAPROXY_PORT,
          checkPath: HAPROXY_CHECK_PATH,
          ...CHECK,
          retries: 1,
          redispatch: true,
          timeoutConnectMs: 5000,
          timeoutClientMs: 20_000,
          timeoutServerMs: 20_000,
          timeoutCheckMs: 10_000,
          timeoutQueueMs: 20_000,
        },
      },
      rate,
      bulk,
      apiserverStop,
      nodeDeath,
      ratios: {
        apiserverStopOutage: ratioOf(apiserverStop[0]!.outage.median, apiserverStop[1]!.outage.median),
        nodeDeathLastFailure: ratioOf(nodeDeath[0]!.lastFailure.median, nodeDeath[1]!.lastFailure.median),
      },
      seconds: Math.round((Date.now() - t0) / 1000),
    };
    printReport(report);
    say();
    say(`done in ${report.seconds} s; load average ${report.machine.loadAtEnd.join(' ')} at the end`);
    if (values.json) say(JSON.stringify(report, null, 2));
    const failed =
      rate.some((r) => r.error) ||
      bulk.some((r) => r.error) ||
      apiserverStop.some((s) => s.runs.some((r) => r.error)) ||
      nodeDeath.some((s) => s.runs.some((r) => r.error));
    return failed ? 1 : 0;
  } finally {
    await lab.teardown();
  }
}

// run only as a script: tests may import the pure helpers (stats, quantile)
runIfMain(import.meta.url, 'bench failed', main, { stack: true });
