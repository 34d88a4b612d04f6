/**
 * What the benchmarks share (a library: no entry point). Printing and rounding, the request-rate
 * rounds (workers spawned from workers.js in the lab's namespaces), the holder and VIP helpers,
 * and the pre-flight checks of the command line and the machine.
 */
import { existsSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import type { Lab, LabNode, LabProcess, LabRunOptions } from '../lab/lab.js';
import { cliPath } from '../lab/cluster.js';
import { intArg } from '../lab/entry.js';
import { sleep, waitFor } from '../lab/wait.js';
import { quantile, stats } from './stats.js';

export const say = (line = ''): void => void process.stdout.write(`${line}\n`);
export const progress = (line: string): void => void process.stderr.write(`  ${line}\n`);
export const round1 = (x: number): number => Math.round(x * 10) / 10;
export const round2 = (x: number): number => Math.round(x * 100) / 100;
export const errText = (e: unknown): string => (e instanceof Error ? e.message.split('\n')[0]! : String(e));

/** the workers start together this long after they were spawned (Node's start-up is not measured) */
const START_DELAY_MS = 500;

// ---------------------------------------------------------------------------------------------
// shapes

/** One rate worker's outcome, as the worker prints it (times in ms). */
export interface RateWorkerResult {
  role: 'rate-worker';
  requests: number;
  ok: number;
  /** wall time of the loop, ms */
  elapsedMs: number;
  /** latency of every successful request, ms (request start to the end of the body) */
  latencies: number[];
  /** failed requests per error name */
  errors: Record<string, number>;
  /** successful requests per serving node */
  nodes: Record<string, number>;
}

/** One setup's request-rate figures over the rounds (each benchmark has setups of its own). */
export interface RateResult<S extends string = string> {
  setup: S;
  label: string;
  /** successful requests per second summed over the workers, per round */
  rounds: number[];
  /** the median of `rounds` */
  reqPerS: number | null;
  /** latency quantiles over every successful request of every round, ms */
  p50Ms: number | null;
  p99Ms: number | null;
  requests: number;
  failed: number;
  errors: Record<string, number>;
  nodes: Record<string, number>;
  /** this setup / direct (req/s, p50, p99); null when either is missing */
  ratio: { reqPerS: number | null; p50: number | null; p99: number | null };
  /** why a round failed (the first one) */
  error?: string;
}

/** One bulk connection's outcome, as the worker prints it. */
export interface BulkWorkerResult {
  role: 'bulk-worker';
  /** the server's node name (its first line) */
  node: string | null;
  /** payload bytes received after the name line */
  bytes: number;
  /** from the first payload byte to the end of the measurement, ms */
  ms: number;
  error?: string;
}

export const ratioOf = (a: number | null | undefined, b: number | null | undefined): number | null =>
  a === null || a === undefined || b === null || b === undefined || b === 0 ? null : round2(a / b);

// ---------------------------------------------------------------------------------------------
// the lab

/**
 * Waits until `node` alone holds the VIP and keeps it for `stableMs` (ms).
 * @throws Error when that has not happened within `timeoutMs` (ms).
 */
export async function waitForStableHolder(lab: Lab, node: LabNode, timeoutMs: number, stableMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await waitFor(
      () => lab.holders(lab.vip4),
      (h) => h.length === 1 && h[0] === node,
      { timeoutMs: Math.max(0, deadline - Date.now()), intervalMs: 25, what: `${node.name} to hold ${lab.vip4}` },
    );
    await sleep(stableMs);
    const h = await lab.holders(lab.vip4);
    if (h.length === 1 && h[0] === node) return;
    if (Date.now() > deadline) throw new Error(`${node.name} did not keep ${lab.vip4}: holders ${h.map((n) => n.name).join(',') || 'none'}`);
  }
}

/** Deletes the client's neighbour entry for the VIP (it then ARPs on its first request). */
export async function forgetVip(lab: Lab): Promise<void> {
  await lab.exec(lab.client.netns, ['ip', 'neigh', 'flush', 'to', lab.vip4, 'dev', 'eth0'], { allowFail: true });
}

// ---------------------------------------------------------------------------------------------
// request-rate rounds

/** The compiled worker script (bench/workers.ts): the client workers and the bulk server. */
export const workerScript = (): string => fileURLToPath(new URL('./workers.js', import.meta.url));

/** Where workers run: the client namespace unless `netns` says otherwise, in a lab cgroup with `cgroup`. */
export type WorkerPlace = { netns?: string } & Pick<LabRunOptions, 'cgroup'>;

/**
 * Spawns `count` workers (workers.js `--role …`) in the client namespace, or at `where`, with
 * `args(i, startAt)`, waits (bounded) and parses their result lines.
 */
export async function runWorkers<T>(
  lab: Lab,
  count: number,
  durationMs: number,
  args: (i: number, startAt: number) => string[],
  where: WorkerPlace = {},
): Promise<T[]> {
  const startAt = Date.now() + START_DELAY_MS;
  const procs: LabProcess[] = [];
  const opts = { logFile: 'workers.log', ...(where.cgroup === undefined ? {} : { cgroup: where.cgroup }) };
  for (let i = 0; i < count; i++) {
    procs.push(lab.spawn(where.netns ?? lab.client.netns, [process.execPath, workerScript(), ...args(i, startAt)], opts));
  }
  const watchdog = setTimeout(() => procs.forEach((p) => p.kill('SIGKILL')), START_DELAY_MS + durationMs + 20_000);
  try {
    const codes = await Promise.all(procs.map((p) => p.exited));
    return procs.map((p, i) => {
      const line = p
        .output()
        .split('\n')
        .reverse()
        .find((l) => l.startsWith('{"role"'));
      if (codes[i] !== 0 || line === undefined) throw new Error(`worker ${i} exited ${codes[i]}: ${p.output().slice(-500)}`);
      return JSON.parse(line) as T;
    });
  } finally {
    clearTimeout(watchdog);
  }
}

/** The order of `xs` rotated by `k` (pure): round k starts with a different setup. */
export const rotate = <T>(xs: readonly T[], k: number): T[] => xs.map((_, i) => xs[(i + k) % xs.length]!);

/** A setup's RateResult before its first round. */
export const emptyRate = <S extends string>(setup: S, label: string): RateResult<S> => ({
  setup,
  label,
  rounds: [],
  reqPerS: null,
  p50Ms: null,
  p99Ms: null,
  requests: 0,
  failed: 0,
  errors: {},
  nodes: {},
  ratio: { reqPerS: null, p50: null, p99: null },
});

/**
 * One round of the request-rate measurement: `workers` rate workers (at `where`, default the
 * client namespace) against `urls` for `durationMs`; adds the round's req/s (summed over the
 * workers), counts and latencies to `res` and `latencies`, and resolves with that req/s.
 * @throws when a worker fails (its output in the message).
 */
export async function rateRound(
  lab: Lab,
  urls: readonly string[],
  workers: number,
  durationMs: number,
  res: RateResult<string>,
  latencies: number[],
  where: WorkerPlace = {},
): Promise<number> {
  const rs = await runWorkers<RateWorkerResult>(
    lab,
    workers,
    durationMs,
    (i, startAt) => [
      '--role',
      'rate-worker',
      ...urls.flatMap((u) => ['--url', u]),
      '--ca',
      lab.ca.certFile,
      '--duration-ms',
      String(durationMs),
      '--start-at',
      String(startAt),
      '--index',
      String(i),
    ],
    where,
  );
  let perS = 0;
  for (const r of rs) {
    perS += r.elapsedMs > 0 ? (r.ok * 1000) / r.elapsedMs : 0;
    res.requests += r.requests;
    res.failed += r.requests - r.ok;
    for (const [k, v] of Object.entries(r.errors)) res.errors[k] = (res.errors[k] ?? 0) + v;
    for (const [k, v] of Object.entries(r.nodes)) res.nodes[k] = (res.nodes[k] ?? 0) + v;
    latencies.push(...r.latencies);
  }
  res.rounds.push(round1(perS));
  return round1(perS);
}

/** Fills every result's median req/s and p50/p99 (over `latencies` of its setup), and its ratios to `baseline`'s. */
export function finishRates<S extends string>(results: Map<S, RateResult<S>>, latencies: Map<S, number[]>, baseline: S): void {
  for (const [setup, r] of results) {
    const lat = latencies.get(setup) ?? [];
    r.reqPerS = stats(r.rounds, 2).median;
    r.p50Ms = quantile(lat, 0.5);
    r.p99Ms = quantile(lat, 0.99);
  }
  const d = results.get(baseline)!;
  for (const r of results.values()) r.ratio = { reqPerS: ratioOf(r.reqPerS, d.reqPerS), p50: ratioOf(r.p50Ms, d.p50Ms), p99: ratioOf(r.p99Ms, d.p99Ms) };
}

// ---------------------------------------------------------------------------------------------
// output and the command line

export const fmt = (v: number | null | undefined, w: number, digits = 0): string => (v === null || v === undefined ? '—' : v.toFixed(digits)).padStart(w);
export const fmtRatio = (v: number | null, w: number): string => (v === null ? '—' : `×${v.toFixed(2)}`).padStart(w);
export const counts = (o: Record<string, number>): string =>
  Object.entries(o)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`)
    .join(' ') || '—';

export { intArg };

/**
 * What a bench script checks before it builds a lab: `--runs` (1..maxRuns), `--seconds` (1..30)
 * and `--workers` (1..16) with their defaults, root, the `files` it needs (path, Debian package)
 * and the compiled CLI. Resolves with the numbers, or prints why not (prefixed with `name`) and
 * resolves with the exit status (2: a bad option, 1: the machine).
 */
export function preflight(
  values: { runs?: string | undefined; seconds?: string | undefined; workers?: string | undefined },
  o: {
    name: string;
    usage: string;
    defaults: { runs: number; maxRuns: number; seconds: number; workers: number };
    root: string;
    files: readonly (readonly [string, string])[];
  },
): { runs: number; seconds: number; workers: number } | number {
  const d = o.defaults;
  let checked: { runs: number; seconds: number; workers: number };
  try {
    checked = {
      runs: intArg('runs', values.runs, d.runs, 1, d.maxRuns),
      seconds: intArg('seconds', values.seconds, d.seconds, 1, 30),
      workers: intArg('workers', values.workers, d.workers, 1, 16),
    };
  } catch (e) {
    process.stderr.write(`${errText(e)}\n${o.usage}\n`);
    return 2;
  }
  if (process.getuid?.() !== 0) {
    process.stderr.write(`${o.name}: needs root (${o.root})\n`);
    return 1;
  }
  for (const [path, pkg] of o.files) {
    if (!existsSync(path)) {
      process.stderr.write(`${o.name}: ${path} is missing (apt-get install ${pkg}, or npm run setup)\n`);
      return 1;
    }
  }
  if (!existsSync(cliPath())) {
    process.stderr.write(`${o.name}: ${cliPath()} is missing; run \`npm run build:ts\`\n`);
    return 1;
  }
  return checked;
}

/** The load averages (1, 5, 15 min), two decimals. */
export const load = (): number[] => loadavg().map(round2);
