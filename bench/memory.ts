/**
 * `node dist/bench/memory.js [--variants FILE] [--starts N] [--warmup S] [--cpu S] [--discovery] [--json]`: where
 * the agent's memory goes, and what launch settings change it. One lab (prefix brss,
 * 10.78.142.0/24, three nodes with TLS stand-in apiservers); one agent on n1 with the
 * configuration bench:resources and resources.test measure — three backends (TLS /readyz every
 * 2 s), the VIP data plane (nftables), the eBPF local endpoint, VRRPv3 adverts every 100 ms —
 * alone on its VRID, so it becomes master. With `--discovery`, also a `discovery` section (the
 * stand-ins serve the `kubernetes` EndpointSlices to a token kubeconfig).
 *
 * Every variant (a name, environment variables over the shipped environment (bench/resources.ts
 * SHIPPED_ENV, as the launchers set it) and node arguments placed before the CLI script)
 * is started `--starts` times (default 5), the variants interleaved; each start is measured after
 * `--warmup` seconds (default 5) once it is master with 3 healthy backends:
 *   rss, pss, anon, file   /proc/PID/smaps_rollup (KiB → MiB)
 *   parts                  /proc/PID/smaps, each mapping's Rss by class (classifyMapping)
 *   threads                /proc/PID/task/* /comm
 *   cpu                    Δ(utime + stime) over `--cpu` seconds (default 0: not measured), % of a core
 *   firstLogMs, firstAdvertMs   the agent's start-up log fields (docs/performance.md)
 * Medians per variant are printed, and the deltas against the first variant.
 *
 * Needs root, a built addon and BPF object and the compiled scripts.
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Lab } from '../lab/lab.js';
import { LabAgent, agentConfig, cliPath } from '../lab/cluster.js';
import { sleep, waitFor } from '../lab/wait.js';
import { pinDirFor } from '../src/dataplane/ebpf.js';
import { detachPinsOnExit, removeEndpointPins } from '../lab/pins.js';
import { errText, intArg, progress, round1, say } from './common.js';
import { stats } from './stats.js';
import { cpuPercent, parseSmapsRollup, sampleTree } from './procfs.js';
import { runIfMain } from '../lab/entry.js';
import { SHIPPED_ENV } from './resources.js';

const PREFIX = 'brss';
const SUBNET = 142;

/** One launch setting to measure. */
export interface Variant {
  name: string;
  env?: Record<string, string>;
  nodeArgs?: string[];
  /** another build's dist/src/cli.js (default: this one's) */
  cli?: string;
}

/** The class of one /proc/PID/smaps mapping (pure). */
export function classifyMapping(m: { start: bigint; end: bigint; perms: string; path: string }, nodeBinary: string): string {
  const size = m.end - m.start;
  if (m.path === '[heap]') return 'malloc main arena ([heap])';
  if (m.path === '[stack]') return 'main thread stack';
  if (m.path.startsWith('[')) return m.path;
  if (m.path === nodeBinary) return m.perms.includes('x') ? 'node binary: code' : 'node binary: data';
  if (m.path.endsWith('.node')) return 'addon (.node)';
  if (/\.so(\.|$)/.test(m.path))
    return `lib: ${m.path
      .split('/')
      .pop()!
      .replace(/\.so.*$/, '')}`;
  if (m.path !== '') return m.path.startsWith('/memfd:') ? 'memfd' : 'other files';
  const MiB64 = 64n << 20n;
  if (m.start % MiB64 === 0n && size <= MiB64) return 'anon: malloc thread arenas (64 MiB-aligned)';
  return 'anon: other (V8 heaps, stacks, mmap)';
}

interface Mapping {
  start: bigint;
  end: bigint;
  perms: string;
  path: string;
  rssKiB: number;
}

function readSmaps(pid: number): Mapping[] {
  const out: Mapping[] = [];
  let cur: Mapping | null = null;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const h = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (h) {
      cur = { start: BigInt(`0x${h[1]}`), end: BigInt(`0x${h[2]}`), perms: h[3]!, path: h[4]!.trim(), rssKiB: 0 };
      out.push(cur);
      continue;
    }
    const r = /^Rss:\s+(\d+) kB/.exec(line);
    if (r && cur) cur.rssKiB = Number(r[1]);
  }
  return out;
}

function threads(pid: number): string[] {
  return readdirSync(`/proc/${pid}/task`).map((t) => {
    try {
      return readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').trim();
    } catch {
      return '?';
    }
  });
}

interface Sample {
  rss: number;
  pss: number;
  anon: number;
  file: number;
  parts: Record<string, number>;
  threads: string[];
  cpu: number | null;
  firstLogMs: number | null;
  firstAdvertMs: number | null;
  probe?: unknown;
}

const field = (text: string, name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB$`, 'm').exec(text)?.[1] ?? NaN);

/** The stand-ins' bearer token with `--discovery`. */
const TOKEN = 'bench-memory-token-0123456789';

async function measureOnce(lab: Lab, cgroup: string, v: Variant, warmupS: number, cpuS: number, i: number, discovery: boolean): Promise<Sample> {
  const n1 = lab.nodes[0]!;
  const configPath = join(lab.dir, `n1-${i}.yaml`);
  const discoverySection = discovery
    ? { discovery: { kubeconfig: await lab.writeKubeconfig(n1, { token: TOKEN }), lastKnownFile: join(lab.dir, `n1-${i}-backends.json`) } }
    : {};
  writeFileSync(
    configPath,
    agentConfig(lab, n1, {
      priority: 150,
      advertisementInterval: '100ms',
      balance: true,
      healthInterval: '2s',
      hostMounts: true,
      extra: {
        localEndpoint: { address: '127.0.0.1:7443', cgroup },
        dataplane: { vip: 'nftables', local: 'ebpf', keepOnStop: false },
        ...discoverySection,
      },
    }),
  );
  const probeOut = join(lab.dir, `probe-${i}.json`);
  // the environment the shipped launchers give the agent, under the variant's own
  const env = { ...SHIPPED_ENV, ...(v.env ?? {}), ...(v.env?.RSS_PROBE ? { RSS_PROBE_OUT: probeOut } : {}) };
  const proc = lab.spawn(n1.netns, [process.execPath, ...(v.nodeArgs ?? []), v.cli ?? cliPath(), 'run', '--config', configPath], {
    logFile: join(lab.dir, `n1-${i}.log`),
    env,
    hostMounts: true,
  });
  const agent = new LabAgent(lab, n1, proc, configPath);
  try {
    await waitFor(
      () => agent.anyStatus().catch(() => null),
      (d) => d !== null && d.state === 'master' && d.local.mode === 'ebpf' && d.backends.length === 3 && d.backends.every((b) => b.healthy),
      {
        timeoutMs: 20_000,
        intervalMs: 200,
        what: `${v.name}: master with the local endpoint and 3 healthy backends`,
      },
    );
    await sleep(warmupS * 1000);
    let cpu: number | null = null;
    if (cpuS > 0) {
      const a = sampleTree([proc.pid]);
      await sleep(cpuS * 1000);
      const b = sampleTree([proc.pid]);
      cpu = Math.round(cpuPercent(a.ticks, b.ticks, b.at - a.at) * 100) / 100;
    }
    const rollup = readFileSync(`/proc/${proc.pid}/smaps_rollup`, 'utf8');
    const m = parseSmapsRollup(rollup);
    const bin = readFileSync(`/proc/${proc.pid}/cmdline`, 'utf8').split('\0')[0]!;
    const parts: Record<string, number> = {};
    for (const mp of readSmaps(proc.pid)) {
      const c = classifyMapping(mp, bin);
      parts[c] = (parts[c] ?? 0) + mp.rssKiB;
    }
    const lines = agent.logLines();
    const first = lines[0]?.elapsedMs;
    const master = lines.find((l) => l.msg === 'state change' && l.to === 'master')?.elapsedMs;
    let probe: unknown = proc
      .output()
      .split('\n')
      .filter((l) => l.includes('"probe"'));
    if (v.env?.RSS_PROBE) {
      await sleep(2500);
      probe = JSON.parse(readFileSync(probeOut, 'utf8'));
    }
    return {
      rss: m.rssKiB / 1024,
      pss: m.pssKiB / 1024,
      anon: field(rollup, 'Anonymous') / 1024,
      file: (field(rollup, 'Rss') - field(rollup, 'Anonymous')) / 1024,
      parts: Object.fromEntries(Object.entries(parts).map(([k, x]) => [k, x / 1024])),
      threads: threads(proc.pid),
      cpu,
      firstLogMs: typeof first === 'number' ? first : null,
      firstAdvertMs: typeof master === 'number' ? master : null,
      probe,
    };
  } finally {
    await proc.stop('SIGTERM', 5000).catch(() => undefined);
  }
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      variants: { type: 'string' },
      starts: { type: 'string' },
      warmup: { type: 'string' },
      cpu: { type: 'string' },
      json: { type: 'boolean' },
      discovery: { type: 'boolean' },
    },
    strict: true,
  });
  const starts = intArg('starts', values.starts, 5, 1, 20);
  const warmupS = intArg('warmup', values.warmup, 5, 0, 120);
  const cpuS = intArg('cpu', values.cpu, 0, 0, 600);
  const variants: Variant[] = values.variants ? (JSON.parse(readFileSync(values.variants, 'utf8')) as Variant[]) : [{ name: 'as shipped' }];
  const lab = await Lab.create({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false });
  let pinDir: string | undefined;
  const pins = detachPinsOnExit(() => pinDir);
  const samples = new Map<string, Sample[]>(variants.map((v) => [v.name, []]));
  try {
    const cgroup = await lab.cgroup(lab.nodes[0]!);
    pinDir = pinDirFor(cgroup);
    pins.detach();
    // with --discovery: the stand-ins list themselves in the `kubernetes` EndpointSlice
    await lab.startApiservers(values.discovery ? { store: true, token: TOKEN } : {});
    let i = 0;
    for (let k = 0; k < starts; k++) {
      for (const v of variants) {
        try {
          const s = await measureOnce(lab, cgroup, v, warmupS, cpuS, i++, values.discovery === true);
          samples.get(v.name)!.push(s);
          progress(
            `${k + 1} ${v.name}: RSS ${round1(s.rss)} PSS ${round1(s.pss)} anon ${round1(s.anon)} file ${round1(s.file)} threads ${s.threads.length}${s.cpu === null ? '' : ` cpu ${s.cpu}`} log ${s.firstLogMs} advert ${s.firstAdvertMs}`,
          );
        } catch (e) {
          progress(`${k + 1} ${v.name} failed: ${errText(e)}`);
        } finally {
          pins.detach();
        }
      }
    }
  } finally {
    await lab.teardown();
    if (pinDir !== undefined) removeEndpointPins(pinDir);
    pins.release();
  }
  const med = (xs: (number | null)[]): number | null =>
    stats(
      xs.filter((x): x is number => x !== null),
      2,
    ).median;
  const summary = variants.map((v) => {
    const ss = samples.get(v.name)!;
    const partNames = [...new Set(ss.flatMap((s) => Object.keys(s.parts)))];
    return {
      name: v.name,
      n: ss.length,
      rss: med(ss.map((s) => s.rss)),
      pss: med(ss.map((s) => s.pss)),
      anon: med(ss.map((s) => s.anon)),
      file: med(ss.map((s) => s.file)),
      cpu: med(ss.map((s) => s.cpu)),
      firstLogMs: med(ss.map((s) => s.firstLogMs)),
      firstAdvertMs: med(ss.map((s) => s.firstAdvertMs)),
      parts: Object.fromEntries(partNames.map((p) => [p, med(ss.map((s) => s.parts[p] ?? 0))])),
      threads: ss[0]?.threads ?? [],
      samples: ss,
    };
  });
  if (values.json) say(JSON.stringify(summary, null, 2));
  const base = summary[0]!;
  say(
    `${'variant'.padEnd(28)} ${'RSS'.padStart(6)} ${'ΔRSS'.padStart(6)} ${'PSS'.padStart(6)} ${'anon'.padStart(6)} ${'file'.padStart(6)} ${'CPU%'.padStart(5)} ${'log'.padStart(5)} ${'adv'.padStart(5)} thr`,
  );
  for (const s of summary) {
    const d = s.rss !== null && base.rss !== null ? s.rss - base.rss : null;
    say(
      `${s.name.padEnd(28)} ${(s.rss?.toFixed(1) ?? '—').padStart(6)} ${(d?.toFixed(1) ?? '—').padStart(6)} ${(s.pss?.toFixed(1) ?? '—').padStart(6)} ${(s.anon?.toFixed(1) ?? '—').padStart(6)} ${(s.file?.toFixed(1) ?? '—').padStart(6)} ${(s.cpu?.toFixed(2) ?? '—').padStart(5)} ${String(s.firstLogMs ?? '—').padStart(5)} ${String(s.firstAdvertMs ?? '—').padStart(5)} ${s.threads.length}`,
    );
  }
  return 0;
}

runIfMain(import.meta.url, 'bench/memory failed', main, { stack: true });
