/**
 * `npm run bench:local [-- --runs N --seconds S --workers W --json]`: the node-local API endpoint
 * (`localEndpoint`, what a kubelet or kube-proxy on a node talks to) in its two modes, against
 * kubespray's node-local nginx and against the client talking to the apiservers itself, in one
 * run on one lab:
 *
 *   direct → n2          the client → n2's IP:6443 (one remote apiserver, nothing in between)
 *   direct, spread       the client round-robins over n1..n3's IP:6443 itself: the baseline of the
 *                        ratios, because every other row spreads the servers' TLS work over the
 *                        three stand-ins too
 *   ballast ebpf         `ballast run` on n1, worker mode (no vrrp, no VIPs), `localEndpoint:
 *                        127.0.0.1:7443` in n1's lab cgroup, `dataplane.local: ebpf`: the cgroup
 *                        connect4 program rewrites the client's connect() to a ready apiserver
 *                        (random per connection); nothing is on the data path
 *   ballast proxy        the same agent config with `dataplane.local: proxy`: the agent's TCP proxy
 *                        listens on 127.0.0.1:7443
 *   nginx                kubespray's "nginx-proxy" (lab/peers/nginx.ts: stream, least_conn,
 *                        worker_processes 2) listening on 127.0.0.1:8443 in n1
 *
 * The lab (lab/lab.ts, prefix bblc, 10.78.97.0/24, IPv4 only): three nodes, a TLS stand-in
 * apiserver on :6443 of each. Every client runs in n1's network namespace and inside n1's lab
 * cgroup (the one the ebpf agent attaches to; never the machine's root cgroup), as W worker
 * processes of bench/workers.ts (`--role rate-worker`): a loop of HTTPS GET /version, every
 * request on a NEW TLS connection verified against the lab CA (no keep-alive, no session reuse),
 * for S seconds (default 5). requests/s: the median of the rounds; p50/p99 latency over every request of
 * every round.
 *
 * The daemons run one at a time: each round starts, for its turn, the agent (ebpf), the agent
 * (proxy) or nginx, waits until it serves (the agent: its /status shows the mode asked for and
 * all three backends healthy; nginx: listening), makes 3 verified TLS connections, measures,
 * reads the daemon's RSS (VmRSS of its process and its children, /proc/<pid>/status) and the CPU
 * it used during the measurement (utime + stime), and stops it. Only one local-endpoint agent
 * can run per network namespace (its instance lock), and the rows then never share the machine
 * with an idle daemon of another row. `--runs` rounds (default 5), the setups' order rotating
 * from round to round, so that drift on the machine spreads over all of them (with 5 rounds
 * every setup takes every position once). An unrecorded 3 s round of "direct, spread" comes
 * first: the first measurement of a run is otherwise slower than the rest (the stand-ins warm up). The agents check
 * the apiservers with the config's defaults (GET /readyz every 1 s, rise 2, fall 2); nginx has
 * no active checks (kubespray's config).
 *
 * The machine's CPUs are shared by the client, the three stand-ins, the daemon under test and
 * whatever else runs; the load average is printed at the start and the end.
 *
 * Needs root, nginx with its stream module, the native addon and the compiled scripts
 * (`npm run setup`). Tears the lab down at the end, also on failure and on SIGINT, and removes
 * the agent's BPF pins (/sys/fs/bpf/ballast/local-bblc-n1) should an agent have left them; it
 * stops only what it (or the lab) started. BALLAST_LAB_KEEP=1 keeps the lab's files (configs,
 * logs).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Lab, type LabNode } from '../lab/lab.js';
import { connectFrom, startAgent, type LabAgent } from '../lab/cluster.js';
import { sleep, waitFor } from '../lab/wait.js';
import { NGINX_PATH, NGINX_STREAM_MODULE, startNginx, type NginxPeer } from '../lab/peers/nginx.js';
import { counts, emptyRate, errText, finishRates, fmt, fmtRatio, load, preflight, progress, rateRound, rotate, say, type RateResult } from './common.js';
import { stats } from './stats.js';
import { pinDirFor } from '../src/dataplane/ebpf.js';
import { SockLb } from '../src/native.js';
import { runIfMain } from '../lab/entry.js';
import { detachPinsOnExit } from '../lab/pins.js';

const PREFIX = 'bblc';
const SUBNET = 97;
const APISERVER_PORT = 6443;
const LOCAL_PORT = 7443;
const NGINX_PORT = 8443;
/** the config's defaults (docs/config.md), written out so that the report can name them */
const HEALTH = { interval: '1s', rise: 2, fall: 2 } as const;
const DEFAULT_RUNS = 5;
const MAX_RUNS = 20;
const DEFAULT_SECONDS = 5;
const DEFAULT_WORKERS = 4;
/** connections that must succeed through a setup before it is measured */
const WARM_UP_CONNECTIONS = 3;
/** an unrecorded round of load on the stand-ins before the first one (their JIT and TLS warm up) */
const WARM_UP_ROUND_MS = 3000;

// ---------------------------------------------------------------------------------------------
// public shapes (what --json prints)

export type LocalSetup = 'directN2' | 'directSpread' | 'ebpf' | 'proxy' | 'nginx';

/** One setup's figures: the request rate (ratios to "direct, spread") and its daemon's footprint. */
export interface LocalRateResult extends RateResult<LocalSetup> {
  /** the daemon's RSS (its process and children, VmRSS) at the end of each round, MiB; empty without a daemon */
  rssMiB: number[];
  /** the median of `rssMiB` */
  rssMedianMiB: number | null;
  /** the daemon's CPU time during each round's measurement, % of one core; empty without a daemon */
  cpuPct: number[];
  cpuMedianPct: number | null;
}

export interface LocalBenchReport {
  lab: { prefix: string; subnet: number; nodes: number; clientNode: string; cgroup: string };
  versions: { nginx: string; node: string };
  machine: { cpus: number; loadAtStart: number[]; loadAtEnd: number[] };
  settings: { workers: number; seconds: number; rounds: number; health: typeof HEALTH; localEndpoint: string; nginxListen: string };
  rate: LocalRateResult[];
  /** problems that did not fail a row (an agent's exit status, pins left behind) */
  notes: string[];
  seconds: number;
}

// ---------------------------------------------------------------------------------------------
// /proc: a daemon's footprint

/** The PIDs of `pid` and all its descendants (from every process's parent in /proc/<p>/stat). */
function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const st = readFileSync(`/proc/${e}/stat`, 'utf8');
      const ppid = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(e));
      children.set(ppid, list);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const todo = [pid];
  while (todo.length > 0) {
    const p = todo.pop()!;
    out.push(p);
    todo.push(...(children.get(p) ?? []));
  }
  return out;
}

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** Sum over `pid`'s process tree of VmRSS (KiB) and utime + stime (ms); processes that vanished count 0. */
function footprint(pid: number): { rssKiB: number; cpuMs: number } {
  let rssKiB = 0;
  let cpuMs = 0;
  for (const p of processTree(pid)) {
    try {
      const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${p}/status`, 'utf8'));
      rssKiB += m ? Number(m[1]) : 0;
      const st = readFileSync(`/proc/${p}/stat`, 'utf8');
      const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
      // after the comm: state(0) ppid(1) … utime(11) stime(12)
      cpuMs += ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
    } catch {
      // gone meanwhile
    }
  }
  return { rssKiB, cpuMs };
}

// ---------------------------------------------------------------------------------------------
// the setups

/** A daemon under test, as long as it runs. */
interface Daemon {
  pid: number;
  /** stops it; resolves with a note when something was off (exit status, pins left) */
  stop(): Promise<string | undefined>;
}

interface Target {
  setup: LocalSetup;
  label: string;
  urls: string[];
  /** where warm-up connections go (the first URL's host and port) */
  address: string;
  port: number;
  start?: () => Promise<Daemon>;
}

const LABELS: Record<LocalSetup, string> = {
  directN2: 'direct → n2',
  directSpread: 'direct, client spreads',
  ebpf: 'ballast ebpf',
  proxy: 'ballast proxy',
  nginx: 'nginx (kubespray)',
};

/** `ballast run` on n1 as a worker with the local endpoint in `mode`; resolves once it serves in that mode with every backend healthy. */
async function startLocalAgent(lab: Lab, n1: LabNode, cgroup: string, mode: 'ebpf' | 'proxy'): Promise<LabAgent> {
  const agent = await startAgent(lab, n1, {
    priority: 150,
    balance: true,
    healthInterval: HEALTH.interval,
    hostMounts: true,
    noElection: true,
    extra: {
      localEndpoint: { address: `127.0.0.1:${LOCAL_PORT}`, cgroup },
      dataplane: { vip: 'nftables', local: mode, keepOnStop: false },
    },
  });
  try {
    await waitFor(
      async () => (await agent.anyStatus()).local,
      (l) => l.mode === mode && l.backends.length === lab.nodes.length,
      { timeoutMs: 15_000, intervalMs: 100, what: `n1's agent to serve the local endpoint in ${mode} mode with ${lab.nodes.length} backends` },
    );
  } catch (e) {
    await agent.stop('SIGKILL').catch(() => undefined);
    throw e;
  }
  return agent;
}

function agentDaemon(agent: LabAgent, mode: 'ebpf' | 'proxy', pinDir: string): Daemon {
  return {
    pid: agent.proc.pid,
    stop: async () => {
      const code = await agent.stop('SIGTERM');
      const notes: string[] = [];
      if (code !== 0) notes.push(`the ${mode} agent exited ${code} on SIGTERM`);
      if (existsSync(pinDir)) {
        SockLb.detach(pinDir);
        notes.push(`the ${mode} agent left ${pinDir} behind (keepOnStop false); removed`);
      }
      return notes.length ? notes.join('; ') : undefined;
    },
  };
}

function nginxDaemon(peer: NginxPeer): Daemon {
  return {
    pid: peer.proc.pid,
    stop: async () => {
      const code = await peer.stop(3000);
      return code === 0 ? undefined : `nginx exited ${code} on SIGTERM`;
    },
  };
}

/** `start`, and once more after a failure (a loaded machine can make a start time out). */
async function startRetry(label: string, start: () => Promise<Daemon>): Promise<Daemon> {
  try {
    return await start();
  } catch (e) {
    progress(`${label}: start failed, trying once more: ${errText(e)}`);
    await sleep(500);
    return start();
  }
}

/** WARM_UP_CONNECTIONS verified TLS connections through the target, from where the workers run (a few tries). */
async function warmUp(lab: Lab, n1: LabNode, cgroup: string, t: Target): Promise<void> {
  let last = '';
  for (let i = 0; i < 10; i++) {
    const s = await connectFrom(lab, n1, { address: t.address, port: t.port, tls: true, count: WARM_UP_CONNECTIONS, cgroup });
    if (s.ok === WARM_UP_CONNECTIONS) return;
    last = counts(s.errors);
    await sleep(200);
  }
  throw new Error(`${t.label}: warm-up connections failed: ${last}`);
}

// ---------------------------------------------------------------------------------------------
// output

function printTable(rs: LocalRateResult[], workers: number, seconds: number, rounds: number): void {
  say(
    `new-connection request rate from n1 (its namespace and lab cgroup): ${workers} workers × ${seconds} s × ${rounds} rounds, each a loop of HTTPS GET /version on a new verified TLS connection; ratios to "${LABELS.directSpread}"`,
  );
  const head =
    `${'setup'.padEnd(50)}${'req/s'.padStart(7)}${''.padStart(7)}${'p50 ms'.padStart(8)}${''.padStart(7)}${'p99 ms'.padStart(8)}${''.padStart(7)}` +
    `${'failed'.padStart(7)}${'RSS MiB'.padStart(9)}${'CPU %'.padStart(7)}  ${'req/s per round'.padEnd(17)}  served by`;
  say(head);
  say('-'.repeat(head.length + 20));
  for (const r of rs) {
    const line =
      `${r.label.padEnd(50)}${fmt(r.reqPerS, 7)}${fmtRatio(r.ratio.reqPerS, 7)}${fmt(r.p50Ms, 8, 1)}${fmtRatio(r.ratio.p50, 7)}${fmt(r.p99Ms, 8, 1)}${fmtRatio(r.ratio.p99, 7)}` +
      `${fmt(r.failed, 7)}${fmt(r.rssMedianMiB, 9, 1)}${fmt(r.cpuMedianPct, 7)}  ${r.rounds
        .map((x) => x.toFixed(0))
        .join(' ')
        .padEnd(17)}  ${counts(r.nodes)}`;
    say(r.error === undefined ? line : `${line}  FAILED: ${r.error}`);
  }
  say(
    `RSS: VmRSS of the daemon's processes summed (nginx: master + 2 workers) at the end of a round; CPU: the daemon's utime + stime during the measurement, % of one core; medians over the rounds`,
  );
}

// ---------------------------------------------------------------------------------------------
// main

function usage(): string {
  return `usage: node dist/bench/local.js [--runs N rounds (1..${MAX_RUNS}, default ${DEFAULT_RUNS})] [--seconds S per measurement (1..30, default ${DEFAULT_SECONDS})] [--workers W (1..16, default ${DEFAULT_WORKERS})] [--json]`;
}

function nginxVersion(): string {
  const r = spawnSync(NGINX_PATH, ['-v'], { encoding: 'utf8', timeout: 5000 });
  return /nginx\/(\S+)/.exec(`${r.stdout}${r.stderr}`)?.[1] ?? 'unknown';
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string' },
      seconds: { type: 'string' },
      workers: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    say(usage());
    return 0;
  }
  const checked = preflight(values, {
    name: 'bench:local',
    usage: usage(),
    defaults: { runs: DEFAULT_RUNS, maxRuns: MAX_RUNS, seconds: DEFAULT_SECONDS, workers: DEFAULT_WORKERS },
    root: 'network namespaces, cgroups, BPF',
    files: [
      [NGINX_PATH, 'nginx'],
      [NGINX_STREAM_MODULE, 'libnginx-mod-stream'],
    ],
  });
  if (typeof checked === 'number') return checked;
  const { runs: rounds, seconds, workers } = checked;
  const durationMs = seconds * 1000;
  const t0 = Date.now();
  const loadAtStart = load();
  const nv = nginxVersion();
  const notes: string[] = [];

  const lab = await Lab.create({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false });
  // the agent removes its pins on SIGTERM; this covers an agent the lab had to SIGKILL
  let pinDir: string | undefined;
  const pins = detachPinsOnExit(() => pinDir);
  try {
    const [n1, n2] = [lab.nodes[0]!, lab.nodes[1]!];
    const cgroup = await lab.cgroup(n1);
    pinDir = pinDirFor(cgroup);
    if (existsSync(pinDir)) {
      SockLb.detach(pinDir);
      notes.push(`removed ${pinDir} left by an earlier run`);
    }
    say(`node-local API endpoint benchmark: ballast (ebpf, proxy) vs nginx ${nv} (kubespray's node-local proxy) vs direct, one lab, one run`);
    say(
      `lab ${PREFIX} (10.78.${SUBNET}.0/24, IPv4): 3 nodes, TLS stand-in apiserver on :${APISERVER_PORT} of each; clients in ${n1.name}'s namespace and lab cgroup ${cgroup}`,
    );
    say(
      `ballast: \`ballast run\` on ${n1.name} as a worker (no vrrp, no VIPs), localEndpoint 127.0.0.1:${LOCAL_PORT} in that cgroup, dataplane.local ebpf or proxy (one agent at a time), health GET /readyz every ${HEALTH.interval}, rise ${HEALTH.rise}, fall ${HEALTH.fall}`,
    );
    say(
      `nginx: kubespray's nginx-proxy config (stream, least_conn, worker_processes 2, proxy_connect_timeout 1s, no active checks) listening on 127.0.0.1:${NGINX_PORT} in ${n1.name}`,
    );
    say(
      `every daemon runs only for its own measurement (started, warmed up, measured, stopped); ${rounds} round(s), the setups' order rotating, after an unrecorded ${WARM_UP_ROUND_MS / 1000} s round of direct, spread`,
    );
    say(
      `machine: ${cpus().length} CPUs, load average ${loadAtStart.join(' ')} at the start (the client, the stand-ins, the daemon and anything else share them)`,
    );
    say();
    await lab.startApiservers({ port: APISERVER_PORT });

    const url = (host: string, port: number): string => `https://${host}:${port}/version`;
    const local = (port: number): Pick<Target, 'urls' | 'address' | 'port'> => ({ urls: [url('127.0.0.1', port)], address: '127.0.0.1', port });
    const targets: Target[] = [
      {
        setup: 'directN2',
        label: `${LABELS.directN2} ${n2.ipv4}:${APISERVER_PORT}`,
        urls: [url(n2.ipv4, APISERVER_PORT)],
        address: n2.ipv4,
        port: APISERVER_PORT,
      },
      {
        setup: 'directSpread',
        label: `${LABELS.directSpread} n1..n3:${APISERVER_PORT}`,
        urls: lab.nodes.map((n) => url(n.ipv4, APISERVER_PORT)),
        address: n1.ipv4,
        port: APISERVER_PORT,
      },
      {
        setup: 'ebpf',
        label: `${LABELS.ebpf} 127.0.0.1:${LOCAL_PORT} (cgroup connect4)`,
        ...local(LOCAL_PORT),
        start: async () => agentDaemon(await startLocalAgent(lab, n1, cgroup, 'ebpf'), 'ebpf', pinDir!),
      },
      {
        setup: 'proxy',
        label: `${LABELS.proxy} 127.0.0.1:${LOCAL_PORT} (agent's TCP proxy)`,
        ...local(LOCAL_PORT),
        start: async () => agentDaemon(await startLocalAgent(lab, n1, cgroup, 'proxy'), 'proxy', pinDir!),
      },
      {
        setup: 'nginx',
        label: `${LABELS.nginx} 127.0.0.1:${NGINX_PORT} (stream)`,
        ...local(NGINX_PORT),
        start: async () =>
          nginxDaemon(
            await startNginx(lab, n1, {
              listen: { address: '127.0.0.1', port: NGINX_PORT },
              backends: lab.nodes.map((n) => ({ address: n.ipv4, port: APISERVER_PORT })),
            }),
          ),
      },
    ];
    const results = new Map<LocalSetup, LocalRateResult>(
      targets.map((t) => [t.setup, { ...emptyRate(t.setup, t.label), rssMiB: [], rssMedianMiB: null, cpuPct: [], cpuMedianPct: null }]),
    );
    const latencies = new Map<LocalSetup, number[]>(targets.map((t) => [t.setup, []]));

    const spread = targets.find((t) => t.setup === 'directSpread')!;
    await rateRound(lab, spread.urls, workers, WARM_UP_ROUND_MS, emptyRate(spread.setup, spread.label), [], { netns: n1.netns, cgroup });
    for (let round = 0; round < rounds; round++) {
      for (const t of rotate(targets, round)) {
        const res = results.get(t.setup)!;
        let daemon: Daemon | undefined;
        try {
          if (t.start) daemon = await startRetry(t.label, t.start);
          await warmUp(lab, n1, cgroup, t);
          const before = daemon ? footprint(daemon.pid) : undefined;
          const tStart = performance.now();
          const perS = await rateRound(lab, t.urls, workers, durationMs, res, latencies.get(t.setup)!, { netns: n1.netns, cgroup });
          let extra = '';
          if (daemon && before) {
            const after = footprint(daemon.pid);
            const rss = Math.round((after.rssKiB / 1024) * 10) / 10;
            const cpu = Math.round(((after.cpuMs - before.cpuMs) / (performance.now() - tStart)) * 100);
            res.rssMiB.push(rss);
            res.cpuPct.push(cpu);
            extra = `; ${rss} MiB RSS, ${cpu}% CPU`;
          }
          progress(`round ${round + 1}/${rounds} ${t.label}: ${perS} req/s${extra}`);
        } catch (e) {
          progress(`round ${round + 1}/${rounds} ${t.label}: ${errText(e)}`);
          res.error ??= errText(e);
        } finally {
          const note = await daemon?.stop().catch((e: unknown) => `stopping ${t.label}: ${errText(e)}`);
          if (note !== undefined) notes.push(`round ${round + 1}, ${t.label}: ${note}`);
        }
      }
    }
    finishRates(results, latencies, 'directSpread');
    for (const r of results.values()) {
      r.rssMedianMiB = stats(r.rssMiB, 1).median;
      r.cpuMedianPct = stats(r.cpuPct, 0).median;
    }
    const report: LocalBenchReport = {
      lab: { prefix: PREFIX, subnet: SUBNET, nodes: 3, clientNode: n1.name, cgroup },
      versions: { nginx: nv, node: process.versions.node },
      machine: { cpus: cpus().length, loadAtStart, loadAtEnd: load() },
      settings: { workers, seconds, rounds, health: HEALTH, localEndpoint: `127.0.0.1:${LOCAL_PORT}`, nginxListen: `127.0.0.1:${NGINX_PORT}` },
      rate: [...results.values()],
      notes,
      seconds: Math.round((Date.now() - t0) / 1000),
    };
    printTable(report.rate, workers, seconds, rounds);
    const errs = report.rate.flatMap((r) => (Object.keys(r.errors).length ? [`${r.label}: errors ${counts(r.errors)}`] : []));
    if (errs.length + notes.length > 0) {
      say();
      for (const n of [...errs, ...notes]) say(`note: ${n}`);
    }
    say();
    say(`done in ${report.seconds} s; load average ${report.machine.loadAtEnd.join(' ')} at the end`);
    if (values.json) say(JSON.stringify(report, null, 2));
    return report.rate.some((r) => r.error !== undefined) ? 1 : 0;
  } finally {
    try {
      pins.detach();
    } finally {
      pins.release();
      await lab.teardown();
    }
  }
}

runIfMain(import.meta.url, 'bench:local failed', main, { stack: true });
