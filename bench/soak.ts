/**
 * The seeded chaos soak: the lab of lab/soak/cluster.ts under the fault
 * schedule of lab/soak/schedule.ts, the invariants of lab/soak/invariants.ts checked over the
 * recorded timeline, a report in DIR (soak-report.md, .json, .svg).
 *
 *   npm run soak -- --minutes N --seed S [--out DIR] [--json] [--watches 300] [--max-concurrent 2] [--capture]
 *
 * --minutes: the whole schedule (0.25 … 120, fractions allowed); --seed: the schedule's seed
 * (default: from the clock, printed); --out: where the report goes (default ./soak-<seed>);
 * --json: the report's JSON on stdout instead of the summary; --capture: tcpdump(8) on the lab's
 * bridge (TCP 6443, headers only: ~350 MB per 30 min) into DIR/soak-capture.pcap, and the report
 * says where each stalled client handshake to the VIP was lost (lab/soak/capture.ts). When the run
 * has a violation, the lab's files (every agent's log, the configurations) are copied to DIR/lab
 * before teardown. Exit 0 with 0 violations, 1
 * otherwise (or when the lab could not be built), 2 for a bad option. Everything is torn down
 * at the end, on failure and on SIGINT / SIGTERM. Needs root; hold the lab lock:
 *   flock /tmp/ballast-lab.lock bash scripts/node-env.sh node dist/bench/soak.js --minutes 10 --seed 7
 */
import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { SoakCluster, LIBFAKETIME } from '../lab/soak/cluster.js';
import { heal, healAll, inject } from '../lab/soak/faults.js';
import type { InjectedFault, Timeline } from '../lab/soak/invariants.js';
import { buildReport, captureSummary, renderMarkdown, renderSvg, type SoakReport } from '../lab/soak/report.js';
import { pcapSegments, startCapture, stalledHandshakes, type Capture } from '../lab/soak/capture.js';
import { DEFAULT_TIMING, makeSchedule, recoverMs, type FaultKind, type PlannedFault } from '../lab/soak/schedule.js';
import { sleep } from '../lab/wait.js';
import { runIfMain } from '../lab/entry.js';
import { errText, preflight, progress, say } from './common.js';

/** An error's first line and the last 1,500 characters of the rest, on one line (for the report's table cells). */
function fullErrText(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const [first = '', ...rest] = e.message.split('\n');
  const tail = rest.join(' ⏎ ').trim().slice(-1500);
  return tail ? `${first} ${tail}` : first;
}

const USAGE = 'usage: soak --minutes N --seed S [--out DIR] [--json] [--watches 300] [--max-concurrent 2] [--capture]';
/** tcpdump, which --capture needs (Debian's package puts it here) */
const TCPDUMP = '/usr/bin/tcpdump';
/** The soak's lab: prefix and subnet (10.78.120.0/24). */
export const SOAK_LAB = { prefix: 'bsoak', subnet: 120 } as const;

/** Options of {@link runSoak}. */
export interface SoakOptions {
  minutes: number;
  seed: number;
  out: string;
  watches: number;
  maxConcurrent: number;
  prefix?: string;
  subnet?: number;
  /** draw only these kinds (default all) */
  kinds?: readonly FaultKind[];
  /** capture TCP 6443 on the lab's bridge and say where stalled handshakes were lost (see the file comment) */
  capture?: boolean;
  /** aborts the run (SIGINT): faults are healed, everything torn down, the report written */
  signal?: AbortSignal;
  log?: (line: string) => void;
}

/**
 * Runs the soak and writes the report files; resolves with the report.
 * @throws when the lab cannot be built or the cluster never becomes healthy (after teardown).
 */
export async function runSoak(o: SoakOptions): Promise<SoakReport> {
  const log = o.log ?? progress;
  const timing = DEFAULT_TIMING;
  const durationMs = Math.round(o.minutes * 60_000);
  const controlPlane = ['n1', 'n2', 'n3'];
  const plan = makeSchedule({
    seed: o.seed,
    durationMs,
    controlPlane,
    worker: 'n4',
    timing,
    maxConcurrent: o.maxConcurrent,
    ...(o.kinds ? { kinds: o.kinds } : {}),
  });
  log(`seed ${o.seed}: ${plan.length} faults in ${new Set(plan.map((f) => f.group)).size} groups over ${o.minutes} min`);
  const startedAt = new Date().toISOString();
  const c = await SoakCluster.start({
    prefix: o.prefix ?? SOAK_LAB.prefix,
    subnet: o.subnet ?? SOAK_LAB.subnet,
    timing,
    watches: o.watches,
    maxLifeMs: durationMs + 120_000,
    progress: log,
    // with a signal the caller owns SIGINT / SIGTERM: the lab must outlive them until the faults
    // are healed and the report is written (the lab's own handler would tear it down at once)
    signals: o.signal === undefined,
  });
  const injected: InjectedFault[] = [];
  let leftovers: string[];
  let capture: Capture | null = null;
  try {
    mkdirSync(o.out, { recursive: true });
    if (o.capture) capture = await startCapture({ netns: c.lab.lan, ifname: 'br0', port: 6443, file: join(o.out, 'soak-capture.pcap'), tcpdump: TCPDUMP });
    c.t0 = Date.now();
    const abort = new Promise<void>((r) => (o.signal?.aborted ? r() : o.signal?.addEventListener('abort', () => r(), { once: true })));
    const until = async (t: number): Promise<boolean> => {
      const wait = t - c.now();
      if (wait > 0) await Promise.race([sleep(wait), abort]);
      return !o.signal?.aborted;
    };
    const runFault = async (f: PlannedFault): Promise<void> => {
      if (!(await until(f.atMs))) return;
      const rec: InjectedFault = { ...f, startMs: c.now(), healMs: c.now() };
      injected.push(rec);
      try {
        const r = await inject(c, f);
        if (r.note) rec.note = r.note;
        if (r.failed) rec.failed = r.failed;
      } catch (e) {
        rec.failed = `injection failed: ${errText(e)}`;
      }
      log(
        `${(rec.startMs / 1000).toFixed(1)} s  #${f.id} ${f.kind} ${f.target}${f.param === undefined ? '' : ` ${f.param}`} (${rec.note ?? ''}) for ${f.durationMs} ms`,
      );
      await until(rec.startMs + f.durationMs);
      rec.healMs = c.now();
      try {
        const r = await heal(c, f);
        if (r.note) rec.note = [rec.note, r.note].filter(Boolean).join('; ');
        if (r.failed) rec.failed = [rec.failed, r.failed].filter(Boolean).join('; ');
      } catch (e) {
        // the whole reason: an agent that cannot start again says why only in its output (the lines after the first)
        rec.failed = [rec.failed, `heal failed: ${fullErrText(e)}`].filter(Boolean).join('; ');
      }
    };
    await Promise.all(plan.map(runFault));
    const lastRecover = Math.max(0, ...injected.map((f) => f.healMs + recoverMs(f.kind, timing)));
    await until(Math.max(durationMs, lastRecover + 2000));
    if (o.signal?.aborted) await healAll(c);
    const endMs = c.now();
    await c.stopClients();
    const tl: Timeline = {
      timing,
      controlPlane,
      worker: 'n4',
      expectedHolder: 'n1',
      backends: 3,
      endMs,
      faults: injected.sort((a, b) => a.id - b.id),
      samples: c.samples,
      vipFailures: c.vipFailures,
      localFailures: c.localFailures,
      watchEvents: c.watchEvents,
      resources: c.resources,
      leaks: c.leaks,
    };
    const counts = { vip: c.vipCounts, local: c.localCounts, watch: c.watchCounts };
    const logsDir = c.lab.dir;
    await capture?.stop();
    const ctx = { seed: o.seed, minutes: o.minutes, startedAt, counts };
    // the lab's files go with a failed run's report (teardown removes them)
    const failed = !buildReport(tl, { ...ctx, leftovers: [] }).ok;
    if (failed && existsSync(logsDir)) cpSync(logsDir, join(o.out, 'lab'), { recursive: true });
    const t0 = c.t0;
    leftovers = await c.teardown();
    const report = buildReport(tl, { ...ctx, leftovers });
    if (failed) report.labFiles = 'lab/';
    if (capture) {
      const buf = readFileSync(capture.file);
      const names = {
        byMac: Object.fromEntries(c.lab.nodes.map((n) => [n.mac, n.name])),
        byAddress: { ...Object.fromEntries(c.lab.nodes.map((n) => [n.ipv4, n.name])), [c.lab.vip4]: 'VIP', [c.lab.client.ipv4]: 'client' },
      };
      const syns = stalledHandshakes(() => pcapSegments(buf), { vip: c.lab.vip4, port: 6443, names, windowMs: timing.requestTimeoutMs }).map((x) => ({
        ...x,
        t: x.t - t0,
      }));
      report.capture = captureSummary('soak-capture.pcap', syns, report.violations, timing.requestTimeoutMs);
    }
    writeFileSync(join(o.out, 'soak-report.json'), `${JSON.stringify(report, null, 2)}\n`);
    writeFileSync(join(o.out, 'soak-report.md'), renderMarkdown(report));
    writeFileSync(join(o.out, 'soak-report.svg'), await renderSvg(report, tl));
    if (process.env.BALLAST_LAB_KEEP === '1') log(`lab files kept in ${logsDir}`);
    return report;
  } catch (e) {
    await capture?.stop().catch(() => undefined);
    await c.teardown().catch(() => undefined);
    throw e;
  }
}

/** The summary the command prints (pure). */
export function summaryLines(r: SoakReport, out: string): string[] {
  const L = [`soak seed ${r.seed}, ${r.minutes} min: ${r.faults.length} faults, ${r.violations.length} violation(s) — ${r.ok ? 'PASS' : 'FAIL'}`, ''];
  L.push(`${'kind'.padEnd(18)} ${'n'.padStart(3)} ${'VIP outage'.padStart(11)} ${'local'.padStart(8)}  bound`);
  for (const k of r.kinds)
    L.push(
      `${k.kind.padEnd(18)} ${String(k.injected).padStart(3)} ${`${k.longestVipOutageMs} ms`.padStart(11)} ${`${k.longestLocalOutageMs} ms`.padStart(8)}  ${k.bound}`,
    );
  const { vip, local, watch } = r.counts;
  L.push(
    '',
    `VIP prober: ${vip.requests} requests, ${vip.requests - vip.ok} failed; local: ${local.requests}, ${local.requests - local.ok} failed; watches: ${watch.drops} drops, ${watch.reconnects} reconnects`,
  );
  for (const v of r.violations.slice(0, 20))
    L.push(
      `  (${v.invariant}) ${(v.t / 1000).toFixed(1)}–${(v.untilMs / 1000).toFixed(1)} s ${v.what}${v.count > 1 ? ` ×${v.count}` : ''} [active: ${v.active.map((id) => `#${id}`).join(' ') || 'none'}]`,
    );
  if (r.violations.length > 20) L.push(`  … ${r.violations.length - 20} more in the report`);
  if (r.capture) {
    L.push(
      '',
      `capture: ${r.capture.stalled} stalled handshakes to the VIP — ${
        Object.entries(r.capture.byFate)
          .map(([k, n]) => `${k} ${n}`)
          .join(', ') || 'none'
      }`,
    );
    for (const nv of r.capture.nearViolations) {
      L.push(
        `  around ${(r.violations[nv.violation]!.t / 1000).toFixed(1)} s: ${nv.syns.map((x) => `${(x.t / 1000).toFixed(1)} s ${x.fate} (holder ${x.holder}${x.backend ? `, backend ${x.backend}` : ''})`).join('; ') || 'no stalled handshake'}`,
      );
    }
  }
  if (r.labFiles) L.push(`lab files: ${join(out, r.labFiles)}`);
  L.push('', `report: ${join(out, 'soak-report.md')} (.json, .svg)`);
  return L;
}

async function main(argv: string[]): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({
      args: argv,
      options: {
        minutes: { type: 'string' },
        seed: { type: 'string' },
        out: { type: 'string' },
        json: { type: 'boolean', default: false },
        watches: { type: 'string' },
        'max-concurrent': { type: 'string' },
        capture: { type: 'boolean', default: false },
      },
      strict: true,
    }).values;
  } catch (e) {
    process.stderr.write(`${errText(e)}\n${USAGE}\n`);
    return 2;
  }
  const minutes = Number(values.minutes ?? '30');
  const seed = values.seed === undefined ? Date.now() % 2 ** 31 : Number(values.seed);
  const watches = Number(values.watches ?? '300');
  const maxConcurrent = Number(values['max-concurrent'] ?? '2');
  const bad = !(minutes >= 0.25 && minutes <= 120)
    ? `--minutes must be 0.25..120, got ${values.minutes}`
    : !Number.isInteger(seed) || seed < 0 || seed >= 2 ** 31
      ? `--seed must be an integer 0..2^31-1, got ${values.seed}`
      : !Number.isInteger(watches) || watches < 0 || watches > 2000
        ? `--watches must be 0..2000, got ${values.watches}`
        : !Number.isInteger(maxConcurrent) || maxConcurrent < 1 || maxConcurrent > 4
          ? `--max-concurrent must be 1..4, got ${values['max-concurrent']}`
          : null;
  if (bad) {
    process.stderr.write(`${bad}\n${USAGE}\n`);
    return 2;
  }
  const pre = preflight(
    {},
    {
      name: 'soak',
      usage: USAGE,
      defaults: { runs: 1, maxRuns: 1, seconds: 1, workers: 1 },
      root: 'network namespaces, nftables, BPF',
      files: [
        ...(values.capture ? [[TCPDUMP, 'tcpdump'] as [string, string]] : []),
        ['/usr/bin/stress-ng', 'stress-ng'],
        ['/usr/sbin/conntrack', 'conntrack'],
        [LIBFAKETIME, 'faketime'],
        ['/usr/sbin/nft', 'nftables'],
      ],
    },
  );
  if (typeof pre === 'number') return pre;
  const out = resolve(typeof values.out === 'string' ? values.out : `soak-${seed}`);
  const ac = new AbortController();
  const stop = (): void => {
    if (!ac.signal.aborted) progress('interrupted: healing, tearing down, writing the report');
    ac.abort();
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  try {
    const r = await runSoak({ minutes, seed, out, watches, maxConcurrent, capture: values.capture === true, signal: ac.signal });
    if (values.json) say(JSON.stringify(r));
    else for (const l of summaryLines(r, out)) say(l);
    return ac.signal.aborted ? 130 : r.ok ? 0 : 1;
  } catch (e) {
    process.stderr.write(`soak: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    return 1;
  }
}

runIfMain(import.meta.url, 'soak', main);
