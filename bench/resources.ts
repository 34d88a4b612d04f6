/**
 * `npm run bench:resources [-- --rounds N --warmup S --seconds S --json]`: what the endpoint costs a
 * node in memory and CPU, ballast beside keepalived + haproxy doing the same job, in one run:
 *
 *   ballast              `ballast run` on every node: VRRPv3 adverts every 100 ms, the three
 *                        apiservers as backends (GET /readyz over TLS every 2 s, rise 2, fall 3),
 *                        the VIP data plane (nftables) and, on n1, the node-local endpoint
 *                        127.0.0.1:7443 (`dataplane.local: ebpf`, in n1's lab cgroup)
 *   keepalived+haproxy   keepalived (VRRPv3, advert_int 0.1) on every node and haproxy (the
 *                        kubeadm guide's TCP-mode config, the same three servers, the same
 *                        checks) on every node: haproxy serves the VIP and the node's local
 *                        clients alike (lab/peers/)
 *
 * The lab (prefix bres, 10.78.115.0/24, IPv4): three nodes with priorities 150/100/50 and a TLS
 * stand-in apiserver on each. What is measured is n1, the VIP holder: its daemons' process trees
 * (ballast: one process with its threads; keepalived: parent + VRRP child; haproxy: one process),
 * after `--warmup` seconds (default 5) once n1 holds the VIP and every backend passed its checks:
 *   RSS and PSS   /proc/PID/smaps_rollup summed over the tree's processes, at the end of the window
 *                 (PSS splits pages shared with other processes, e.g. other nodes' daemons of the
 *                 same binary, among them)
 *   CPU           Δ(utime + stime) of the tree over a `--seconds` window (default 10), % of one core
 * Rounds (default 5) are interleaved, the setups' order rotating; medians over the rounds and the
 * ratios ballast / keepalived+haproxy. ballast's rounds also give its start-up: `elapsedMs` of
 * its first log line and of its first advert (the first "state change" to master, n1), both ms
 * since the agent's process started (docs/performance.md).
 *
 * Needs root, keepalived, haproxy, a built addon and BPF object, and the compiled scripts
 * (`npm run build:ts`). Tears the lab down at the end, also on failure and on SIGINT.
 */
import { parseArgs } from 'node:util';
import { Lab, type LabNode, type LabProcess } from '../lab/lab.js';
import { LabAgent, startAgent } from '../lab/cluster.js';
import { sleep, waitFor } from '../lab/wait.js';
import { KEEPALIVED_PATH, keepalivedVersion, startKeepalived } from '../lab/peers/keepalived.js';
import { HAPROXY_PATH, haproxyVersion, startHaproxy, type HaproxyPeer } from '../lab/peers/haproxy.js';
import { pinDirFor } from '../src/dataplane/ebpf.js';
import { detachPinsOnExit, removeEndpointPins } from '../lab/pins.js';
import { errText, fmt, fmtRatio, intArg, load, preflight, progress, ratioOf, rotate, round1, say, waitForStableHolder } from './common.js';
import { stats } from './stats.js';
import { cpuPercent, sampleTree } from './procfs.js';
import { runIfMain } from '../lab/entry.js';

const PREFIX = 'bres';
const SUBNET = 115;
const PRIORITIES = [150, 100, 50] as const;
const ADVERT_MS = 100;
const APISERVER_PORT = 6443;
const LOCAL_PORT = 7443;
const HAPROXY_PORT = 8443;
/** both balancers' active checks: haproxy's defaults (as bench/balancing.ts) */
const CHECK = { interMs: 2000, fall: 3, rise: 2 } as const;
const DEFAULT_ROUNDS = 5;
const MAX_ROUNDS = 20;
const DEFAULT_WARMUP_S = 5;
const DEFAULT_SECONDS = 10;
/** the environment the shipped launchers give the agent (scripts/package.sh's /usr/bin/ballast, scripts/image.sh) */
export const SHIPPED_ENV = { MALLOC_ARENA_MAX: '1' } as const;

export type ResourceSetup = 'ballast' | 'keepalivedHaproxy';
const SETUPS: readonly ResourceSetup[] = ['ballast', 'keepalivedHaproxy'];
const LABELS: Record<ResourceSetup, string> = { ballast: 'ballast', keepalivedHaproxy: 'keepalived+haproxy' };

/** One setup's figures over the rounds (MiB, % of one core, ms). */
export interface ResourceResult {
  setup: ResourceSetup;
  label: string;
  rounds: { rssMiB: number; pssMiB: number; cpuPercent: number; processes: number; firstLogMs?: number; firstAdvertMs?: number }[];
  rssMiB: number | null;
  pssMiB: number | null;
  cpuPercent: number | null;
  /** ballast only: medians of the start-up times, ms since the process started */
  firstLogMs?: number | null;
  firstAdvertMs?: number | null;
  error?: string;
}

export interface ResourcesReport {
  bench: 'resources';
  lab: { prefix: string; subnet: number; nodes: number; measured: string };
  versions: { node: string; keepalived: string | null; haproxy: string | null };
  settings: { rounds: number; warmupS: number; seconds: number; advertisementIntervalMs: number; check: typeof CHECK };
  results: ResourceResult[];
  /** ballast / keepalived+haproxy */
  ratios: { rss: number | null; pss: number | null; cpu: number | null };
  load: { start: number[]; end: number[] };
  notes: string[];
  seconds: number;
}

/** What runs on the lab for one round: the measured roots on n1, and how to stop everything. */
interface Running {
  roots: number[];
  agentN1?: LabAgent;
  stop(): Promise<void>;
}

const apiserverOf = (lab: Lab) => ({
  port: APISERVER_PORT,
  backends: lab.nodes.map((n) => `${n.ipv4}:${APISERVER_PORT}`),
  health: { caFile: lab.ca.certFile, interval: `${CHECK.interMs}ms`, timeout: `${CHECK.interMs}ms`, rise: CHECK.rise, fall: CHECK.fall },
});

/** ballast on every node (n1 with the eBPF local endpoint in `cgroup`); resolves once n1 holds the VIP and sees every backend up. */
async function startBallast(lab: Lab, cgroup: string): Promise<Running> {
  const agents: LabAgent[] = [];
  const stop = async (): Promise<void> => void (await Promise.all(agents.map((a) => a.stop('SIGTERM').catch(() => undefined))));
  try {
    const settled = await Promise.allSettled(
      lab.nodes.map((node, i) =>
        startAgent(lab, node, {
          priority: PRIORITIES[i]!,
          advertisementInterval: `${ADVERT_MS}ms`,
          balance: true,
          hostMounts: i === 0,
          // as /usr/bin/ballast and the image start it (docs/performance.md)
          env: SHIPPED_ENV,
          extra: {
            apiserver: apiserverOf(lab),
            ...(i === 0
              ? { localEndpoint: { address: `127.0.0.1:${LOCAL_PORT}`, cgroup }, dataplane: { vip: 'nftables', local: 'ebpf', keepOnStop: false } }
              : { dataplane: { vip: 'nftables' } }),
          },
        }),
      ),
    );
    for (const s of settled) if (s.status === 'fulfilled') agents.push(s.value);
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    const n1 = agents.find((a) => a.node === lab.nodes[0])!;
    await waitForStableHolder(lab, lab.nodes[0]!, 10_000, 300);
    await waitFor(
      () => n1.anyStatus(),
      (d) => d.local.mode === 'ebpf' && d.backends.length === 3 && d.backends.every((b) => b.healthy),
      { timeoutMs: 20_000, intervalMs: 200, what: "n1's agent to serve the local endpoint (ebpf) with 3 backends up" },
    );
    return { roots: [n1.proc.pid], agentN1: n1, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** keepalived + haproxy on every node; resolves once n1 holds the VIP and n1's haproxy sees every server UP. */
async function startKeepalivedHaproxy(lab: Lab): Promise<Running> {
  const procs: { node: LabNode; kind: 'keepalived' | 'haproxy'; proc: LabProcess; stop: () => Promise<unknown>; h: HaproxyPeer | null }[] = [];
  const stop = async (): Promise<void> => void (await Promise.all(procs.map((p) => p.stop().catch(() => undefined))));
  try {
    const servers = lab.nodes.map((n) => ({ name: n.name, address: n.ipv4, port: APISERVER_PORT }));
    const settled = await Promise.allSettled(
      lab.nodes.flatMap((node, i) => [
        startHaproxy(lab, node, { port: HAPROXY_PORT, checkPath: '/readyz', ...CHECK, servers }).then((h) => ({
          node,
          kind: 'haproxy' as const,
          proc: h.proc,
          stop: () => h.stop(3000),
          h,
        })),
        startKeepalived(lab, node, {
          priority: PRIORITIES[i]!,
          advertIntervalS: ADVERT_MS / 1000,
          vrrpVersion: 3,
          vips: [`${lab.vip4}/32`],
          interface: 'eth0',
        }).then((k) => ({ node, kind: 'keepalived' as const, proc: k.proc, stop: () => k.stop('SIGTERM', 3000), h: null })),
      ]),
    );
    for (const s of settled) if (s.status === 'fulfilled') procs.push(s.value);
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    await waitForStableHolder(lab, lab.nodes[0]!, 10_000, 300);
    const h1 = procs.find((p) => p.node === lab.nodes[0] && p.kind === 'haproxy')!.h!;
    await h1.waitForServers((ss) => ss.length === 3 && ss.every((x) => x.status === 'UP'), { timeoutMs: 20_000, what: "n1's haproxy to see 3 servers UP" });
    return { roots: procs.filter((p) => p.node === lab.nodes[0]).map((p) => p.proc.pid), stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** `elapsedMs` of the agent's first log line and of its first "state change" to master (null when absent). */
function startupOf(agent: LabAgent): { firstLogMs: number | null; firstAdvertMs: number | null } {
  const lines = agent.logLines();
  const first = lines[0]?.elapsedMs;
  const master = lines.find((l) => l.msg === 'state change' && l.to === 'master' && typeof l.elapsedMs === 'number')?.elapsedMs;
  return { firstLogMs: typeof first === 'number' ? first : null, firstAdvertMs: typeof master === 'number' ? master : null };
}

function usage(): string {
  return 'usage: node dist/bench/resources.js [--rounds N (1..20, default 5)] [--warmup S (1..60, default 5)] [--seconds S (1..60, default 10)] [--json]';
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      rounds: { type: 'string' },
      warmup: { type: 'string' },
      seconds: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    say(usage());
    return 0;
  }
  let rounds: number;
  let warmupS: number;
  let seconds: number;
  try {
    rounds = intArg('rounds', values.rounds, DEFAULT_ROUNDS, 1, MAX_ROUNDS);
    warmupS = intArg('warmup', values.warmup, DEFAULT_WARMUP_S, 1, 60);
    seconds = intArg('seconds', values.seconds, DEFAULT_SECONDS, 1, 60);
  } catch (e) {
    process.stderr.write(`${errText(e)}\n${usage()}\n`);
    return 2;
  }
  const checked = preflight(
    {},
    {
      name: 'bench:resources',
      usage: usage(),
      defaults: { runs: 1, maxRuns: 1, seconds: 1, workers: 1 },
      root: 'network namespaces, cgroups, BPF',
      files: [
        [KEEPALIVED_PATH, 'keepalived'],
        [HAPROXY_PATH, 'haproxy'],
      ],
    },
  );
  if (typeof checked === 'number') return checked;
  const t0 = Date.now();
  const loadAtStart = load();
  const notes: string[] = [];
  const results = new Map<ResourceSetup, ResourceResult>(
    SETUPS.map((s) => [s, { setup: s, label: LABELS[s], rounds: [], rssMiB: null, pssMiB: null, cpuPercent: null }]),
  );

  const lab = await Lab.create({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false });
  let pinDir: string | undefined;
  const pins = detachPinsOnExit(() => pinDir);
  const detachPins = pins.detach;
  try {
    const n1 = lab.nodes[0]!;
    const cgroup = await lab.cgroup(n1);
    pinDir = pinDirFor(cgroup);
    detachPins();
    await lab.startApiservers();
    if (!values.json) {
      say(`resource benchmark: ballast vs keepalived + haproxy, one lab (${PREFIX}, 10.78.${SUBNET}.0/24), one run; ${rounds} interleaved rounds`);
      say(
        `each round: fresh daemons on 3 nodes (priorities ${PRIORITIES.join('/')}, adverts every ${ADVERT_MS} ms, 3 backends checked every ${CHECK.interMs} ms), ${warmupS} s warm-up once ${n1.name} holds the VIP, then ${seconds} s measured on ${n1.name}`,
      );
    }
    for (let k = 0; k < rounds; k++) {
      for (const setup of rotate(SETUPS, k)) {
        const res = results.get(setup)!;
        let run: Running | null = null;
        try {
          run = setup === 'ballast' ? await startBallast(lab, cgroup) : await startKeepalivedHaproxy(lab);
          await sleep(warmupS * 1000);
          const a = sampleTree(run.roots);
          await sleep(seconds * 1000);
          const b = sampleTree(run.roots);
          const round = {
            rssMiB: round1(b.rssKiB / 1024),
            pssMiB: round1(b.pssKiB / 1024),
            cpuPercent: Math.round(cpuPercent(a.ticks, b.ticks, b.at - a.at) * 100) / 100,
            processes: b.pids.length,
          };
          const startup = run.agentN1 ? startupOf(run.agentN1) : null;
          res.rounds.push({
            ...round,
            ...(startup?.firstLogMs != null ? { firstLogMs: startup.firstLogMs } : {}),
            ...(startup?.firstAdvertMs != null ? { firstAdvertMs: startup.firstAdvertMs } : {}),
          });
          progress(
            `round ${k + 1} ${LABELS[setup]}: RSS ${round.rssMiB} MiB, PSS ${round.pssMiB} MiB, CPU ${round.cpuPercent} % (${round.processes} processes)${startup ? `, first log ${startup.firstLogMs} ms, first advert ${startup.firstAdvertMs} ms` : ''}`,
          );
        } catch (e) {
          res.error ??= errText(e);
          progress(`round ${k + 1} ${LABELS[setup]} failed: ${errText(e)}`);
        } finally {
          await run?.stop();
          detachPins();
        }
      }
    }
  } finally {
    await lab.teardown();
    if (pinDir !== undefined) removeEndpointPins(pinDir);
    pins.release();
  }
  for (const r of results.values()) {
    r.rssMiB = stats(r.rounds.map((x) => x.rssMiB)).median;
    r.pssMiB = stats(r.rounds.map((x) => x.pssMiB)).median;
    r.cpuPercent = stats(
      r.rounds.map((x) => x.cpuPercent),
      2,
    ).median;
    if (r.setup === 'ballast') {
      r.firstLogMs = stats(
        r.rounds.flatMap((x) => (x.firstLogMs === undefined ? [] : [x.firstLogMs])),
        0,
      ).median;
      r.firstAdvertMs = stats(
        r.rounds.flatMap((x) => (x.firstAdvertMs === undefined ? [] : [x.firstAdvertMs])),
        0,
      ).median;
    }
  }
  const b = results.get('ballast')!;
  const k = results.get('keepalivedHaproxy')!;
  const report: ResourcesReport = {
    bench: 'resources',
    lab: { prefix: PREFIX, subnet: SUBNET, nodes: 3, measured: 'n1 (the VIP holder)' },
    versions: { node: process.version, keepalived: keepalivedVersion()?.join('.') ?? null, haproxy: haproxyVersion()?.join('.') ?? null },
    settings: { rounds, warmupS, seconds, advertisementIntervalMs: ADVERT_MS, check: CHECK },
    results: [...results.values()],
    ratios: { rss: ratioOf(b.rssMiB, k.rssMiB), pss: ratioOf(b.pssMiB, k.pssMiB), cpu: ratioOf(b.cpuPercent, k.cpuPercent) },
    load: { start: loadAtStart, end: load() },
    notes,
    seconds: Math.round((Date.now() - t0) / 1000),
  };
  if (values.json) {
    say(JSON.stringify(report, null, 2));
  } else {
    say();
    say(`${'setup'.padEnd(20)} ${'RSS MiB'.padStart(8)} ${'PSS MiB'.padStart(8)} ${'CPU %'.padStart(7)} ${'rounds'.padStart(6)}`);
    for (const r of results.values())
      say(
        `${r.label.padEnd(20)} ${fmt(r.rssMiB, 8, 1)} ${fmt(r.pssMiB, 8, 1)} ${fmt(r.cpuPercent, 7, 2)} ${String(r.rounds.length).padStart(6)}${r.error ? `  (${r.error})` : ''}`,
      );
    say(`${'ratio ballast/k+h'.padEnd(20)} ${fmtRatio(report.ratios.rss, 8)} ${fmtRatio(report.ratios.pss, 8)} ${fmtRatio(report.ratios.cpu, 7)}`);
    say(`ballast start-up (median, ms since its process started): first log line ${b.firstLogMs ?? '—'}, first advert ${b.firstAdvertMs ?? '—'}`);
    say(`load average at start ${report.load.start.join(' ')}, at end ${report.load.end.join(' ')}; ${report.seconds} s`);
    for (const n of notes) say(`note: ${n}`);
  }
  return [...results.values()].every((r) => r.rounds.length > 0) ? 0 : 1;
}

runIfMain(import.meta.url, 'bench:resources failed', main, { stack: true });
