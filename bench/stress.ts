/**
 * `npm run bench:failover -- --stress [--minutes M --rounds N --outage-runs K --append FILE --json]`:
 * 10 ms and 20 ms adverts under CPU stress, ballast and keepalived side by side in one run.
 *
 * Four labs (lab/lab.ts, 3 nodes each, priorities 150/100/50, VRID 51, VRRPv3), one per
 * configuration, run AT THE SAME TIME under the same load, so that all four see the same stress:
 *
 *   ballast 10 ms    keepalived 10 ms    ballast 20 ms    keepalived 20 ms
 *
 * Labs bstrs, bstr2, bstr3, bstr4 (10.78.112/122/123/124.0/24); the configurations rotate over
 * the labs from round to round. The load: `stress-ng --cpu C` (default 2, both cores of this
 * machine) for the whole round, started by the benchmark with `--timeout` and stopped by its
 * PID. The lab nodes are network namespaces on this one machine, so one machine-wide stress-ng
 * loads every node at once.
 *
 * A round: fresh daemons in every lab; n1 must hold the VIP alone; the witnesses start (a tcpdump
 * of VRRP in each client namespace, `ip -o monitor address` in each node); stress-ng starts; for
 * M minutes no fault is injected; then the false failovers of each configuration are counted
 * three ways (bench/stress-count.ts: the daemons' state logs, takeover episodes on the wire, VIP
 * additions on the other nodes) and the largest count is the round's figure. Per-hour rates are
 * extrapolated from the observed minutes: the median over the rounds of each round's rate, and
 * the pooled rate (all false failovers / all minutes × 60). The wire also gives the holder's
 * advert gaps (how late its adverts came): p50/p99/p99.9/max and the number of gaps longer than
 * 1.5, 2 and 3 intervals and than the backup's Master_Down_Interval.
 *
 * Then, still under the same stress, the node-death outage at 10 ms adverts in lab bstrs,
 * ballast and keepalived alternately (bench/failover-run.ts runOnce: the holder's bridge port goes
 * down; the client opens a new TLS connection to https://VIP:6443 every 10 ms; outage = the
 * prober's maxOutageMs), `--outage-runs` of each per round (default 1, so 5 rounds give 5 each).
 *
 * `--append FILE` adds this run's rounds to the ones already in FILE (JSON, written back) and
 * reports over all of them: several short runs (each under the machine's 10-minute lab lock)
 * make one report. Needs root, keepalived, stress-ng and tcpdump. Tears everything down at the
 * end, also on failure; stops only what it started.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Lab, type LabProcess } from '../lab/lab.js';
import { sleep } from '../lab/wait.js';
import { KEEPALIVED_PATH, keepalivedVersion } from '../lab/peers/keepalived.js';
import { masterDownIntervalMs } from '../src/vrrp/state.js';
import type { EngineTiming } from '../src/vrrp/engine.js';
import { cliPath } from '../lab/cluster.js';
import { fmt, intArg, preflight, round1, say, waitForStableHolder, errText, progress } from './common.js';
import { foreignKeepalived, parseCapture, resetLab, runOnce, SCENARIOS, startCluster, type Cluster, type Daemon, type RunResult } from './failover-run.js';
import { stats, type Stats } from './stats.js';
import {
  ballastMasterEntries,
  falseFailovers,
  holderGaps,
  keepalivedMasterEntries,
  rateRatio,
  summarizeRates,
  takeoverEpisodes,
  vipAddressEvents,
  type GapStats,
  type RateSummary,
  type WindowCounts,
} from './stress-count.js';

const LABS = [
  { prefix: 'bstrs', subnet: 112 },
  { prefix: 'bstr2', subnet: 122 },
  { prefix: 'bstr3', subnet: 123 },
  { prefix: 'bstr4', subnet: 124 },
] as const;
/** the configurations, in the order of the table */
const CONFIGS: readonly { daemon: Daemon; advertMs: number; label: string }[] = [
  { daemon: 'ballast', advertMs: 10, label: 'ballast    10 ms' },
  { daemon: 'keepalived', advertMs: 10, label: 'keepalived 10 ms' },
  { daemon: 'ballast', advertMs: 20, label: 'ballast    20 ms' },
  { daemon: 'keepalived', advertMs: 20, label: 'keepalived 20 ms' },
];
/** n2's priority: the first backup, whose Master_Down_Interval is the shortest */
const BACKUP_PRIORITY = 100;
const OUTAGE_ADVERT_MS = 10;
const STRESS_NG = '/usr/bin/stress-ng';
const TCPDUMP = '/usr/bin/tcpdump';
/** stress-ng's --timeout beyond the round's planned length (s): it ends by itself if we die */
const STRESS_SLACK_S = 30;
/** planned time of one outage run (s), for stress-ng's timeout */
const OUTAGE_RUN_S = 15;
/** holders are also sampled this often during the window (ms): a sanity check of the other witnesses */
const SAMPLE_MS = 2000;

/** One configuration in one round. */
export interface ConfigRound {
  daemon: Daemon;
  advertMs: number;
  lab: string;
  /** the window, minutes */
  minutes: number;
  counts: WindowCounts;
  falseFailovers: number;
  /** samples of the holders (every SAMPLE_MS) in which n1 was not the only holder */
  samplesOff: number;
  samples: number;
  gaps: GapStats;
  /** ballast only: the election threads' own timing (engine.ts EngineTiming) at the end of the window, per node */
  timing?: Record<string, EngineTiming | null>;
  /** why the configuration failed this round (left out of the rates) */
  error?: string;
}

/** One round: the four configurations at the same time, then the outage runs. */
export interface Round {
  startedAt: string;
  cpuWorkers: number;
  /** the daemons' real-time priority (ballast vrrp.realtimePriority, keepalived vrrp_rt_priority); 0 = normal scheduling */
  realtime: number;
  /** load averages (1, 5, 15 min) at the end of the window */
  load: number[];
  configs: ConfigRound[];
  outage: { daemon: Daemon; result: RunResult }[];
}

/** What `--json` prints and `--append` keeps. */
export interface StressReport {
  keepalivedVersion: string;
  /** RFC 9568 §6.1 Master_Down_Interval of the first backup (priority 100), ms, per advert interval */
  masterDownMs: Record<string, number>;
  rounds: Round[];
  /** one per real-time setting found in the rounds (0 = normal scheduling) */
  sets: SetReport[];
}

/** The figures of the rounds with one real-time setting. */
export interface SetReport {
  realtime: number;
  summary: {
    label: string;
    daemon: Daemon;
    advertMs: number;
    rates: RateSummary;
    /** counts summed over the rounds, per witness */
    witnesses: WindowCounts;
    /** the worst gap figures over the rounds */
    gaps: {
      p99Ms: number | null;
      p999Ms: number | null;
      maxMs: number | null;
      over1_5: number;
      over2: number;
      over3: number;
      overMasterDown: number;
      adverts: number;
    };
    /** ballast: the holder's (n1) late Adver_Timer ticks per bucket, summed over the rounds, its worst, and the Backups' rescued expiries */
    thread?: {
      boundsMs: number[];
      sendLate: number[];
      sendLateMaxMs: number;
      receiveGapMaxMs: number;
      rescued: number;
      gcMaxMs: number | null;
      gcCount: number;
    };
  }[];
  /** ballast / keepalived of the pooled per-hour rates, per advert interval */
  ratios: Record<string, number | '0/0' | null>;
  outage: { daemon: Daemon; runs: (number | null)[]; stats: Stats }[];
  outageRatio: number | null;
}

// ---------------------------------------------------------------------------------------------
// one round

interface Witnesses {
  capture: LabProcess;
  captureFile: string;
  monitors: { node: string; proc: LabProcess }[];
  logBefore: Map<string, number>;
}

const masterEntries = (daemon: Daemon, text: string): number => (daemon === 'ballast' ? ballastMasterEntries(text) : keepalivedMasterEntries(text, 'VI_51'));

async function startWitnesses(lab: Lab, cluster: Cluster, daemon: Daemon, tag: string): Promise<Witnesses> {
  const captureFile = join(lab.dir, `capture-${tag}.txt`);
  const capture = lab.spawn(lab.client.netns, [TCPDUMP, '-i', 'eth0', '-n', '-l', '--immediate-mode', '-tt', '-e', 'ip proto 112'], { logFile: captureFile });
  await capture.waitForOutput(/listening on/, { timeoutMs: 10_000, includeExisting: true });
  const monitors = lab.nodes.map((n) => ({ node: n.name, proc: lab.spawn(n.netns, ['ip', '-o', '-4', 'monitor', 'address']) }));
  const logBefore = new Map([...cluster.procs].map(([node, p]) => [node, masterEntries(daemon, p.output())]));
  return { capture, captureFile, monitors, logBefore };
}

/** Stops the witnesses and counts what they saw (n1 is the expected holder). */
async function countWindow(
  lab: Lab,
  cluster: Cluster,
  daemon: Daemon,
  advertMs: number,
  w: Witnesses,
): Promise<{ counts: WindowCounts; gaps: GapStats; timing?: Record<string, EngineTiming | null> }> {
  await Promise.all([w.capture.stop('SIGTERM', 3000), ...w.monitors.map((m) => m.proc.stop('SIGTERM', 3000))]);
  const holder = lab.nodes[0]!;
  let log = 0;
  for (const [node, p] of cluster.procs) {
    if (node === holder.name) continue;
    log += masterEntries(daemon, p.output()) - (w.logBefore.get(node) ?? 0);
  }
  let address = 0;
  for (const m of w.monitors) if (m.node !== holder.name) address += vipAddressEvents(m.proc.output(), lab.vip4).added;
  const pkts = parseCapture(readFileSync(w.captureFile, 'utf8'));
  const wire = takeoverEpisodes(pkts, holder.ipv4);
  const gaps = holderGaps(pkts, holder.ipv4, advertMs, masterDownIntervalMs(BACKUP_PRIORITY, advertMs / 10));
  if (daemon !== 'ballast') return { counts: { log, wire, address }, gaps };
  const timing: Record<string, EngineTiming | null> = {};
  for (const n of lab.nodes) {
    const r = await lab.exec(n.netns, [process.execPath, cliPath(), 'status', '--json', '--admin', '127.0.0.1:9641'], { timeoutMs: 10_000, allowFail: true });
    try {
      timing[n.name] = r.code === 0 ? ((JSON.parse(r.stdout) as { timing?: EngineTiming }).timing ?? null) : null;
    } catch {
      timing[n.name] = null;
    }
  }
  return { counts: { log, wire, address }, gaps, timing };
}

const emptyGaps = (): GapStats => ({ adverts: 0, p50Ms: null, p99Ms: null, p999Ms: null, maxMs: null, over1_5: 0, over2: 0, over3: 0, overMasterDown: 0 });

async function runRound(labs: readonly Lab[], k: number, o: { minutes: number; cpu: number; outageRuns: number; realtime: number }): Promise<Round> {
  // configuration i runs in lab (i + k) mod 4: no configuration keeps one lab
  const placed = CONFIGS.map((c, i) => ({ ...c, lab: labs[(i + k) % labs.length]! }));
  const round: Round = { startedAt: new Date().toISOString(), cpuWorkers: o.cpu, realtime: o.realtime, load: [], configs: [], outage: [] };
  const clusters: (Cluster | null)[] = placed.map(() => null);
  const witnesses: (Witnesses | null)[] = placed.map(() => null);
  const errors: (string | null)[] = placed.map(() => null);
  const samples = placed.map(() => ({ n: 0, off: 0 }));
  let stress: LabProcess | undefined;
  try {
    // one lab after the other (six agents starting at once on a loaded machine miss the lab's
    // 10 s start-up bound), and a second try for a start that failed
    for (const [i, p] of placed.entries()) {
      for (let attempt = 1; attempt <= 2 && !witnesses[i]; attempt++) {
        try {
          clusters[i] = await startCluster(p.lab, p.daemon, p.advertMs, o.realtime);
          await waitForStableHolder(p.lab, p.lab.nodes[0]!, 20_000, 500);
          witnesses[i] = await startWitnesses(p.lab, clusters[i]!, p.daemon, `r${k}-${p.daemon}-${p.advertMs}`);
          errors[i] = null;
        } catch (e) {
          errors[i] = `start (attempt ${attempt}): ${errText(e)}`;
          await clusters[i]?.stopAll();
          clusters[i] = null;
          await resetLab(p.lab).catch(() => undefined);
        }
      }
    }
    const planned = o.minutes * 60 + o.outageRuns * 2 * OUTAGE_RUN_S + STRESS_SLACK_S;
    stress = labs[0]!.spawn(labs[0]!.client.netns, [STRESS_NG, '--cpu', String(o.cpu), '--timeout', `${planned}s`, '--quiet']);
    const t0 = Date.now();
    const end = t0 + o.minutes * 60_000;
    while (Date.now() < end) {
      await sleep(Math.min(SAMPLE_MS, Math.max(0, end - Date.now())));
      await Promise.all(
        placed.map(async (p, i) => {
          if (!witnesses[i]) return;
          const h = await p.lab.holders(p.lab.vip4);
          samples[i]!.n++;
          if (h.length !== 1 || h[0] !== p.lab.nodes[0]) samples[i]!.off++;
        }),
      );
    }
    const minutes = (Date.now() - t0) / 60_000;
    round.load = loadavg().map((x) => Math.round(x * 100) / 100);
    for (const [i, p] of placed.entries()) {
      const base = {
        daemon: p.daemon,
        advertMs: p.advertMs,
        lab: p.lab.prefix,
        minutes: Math.round(minutes * 1000) / 1000,
        samples: samples[i]!.n,
        samplesOff: samples[i]!.off,
      };
      if (!witnesses[i] || errors[i]) {
        round.configs.push({ ...base, counts: { log: 0, wire: 0, address: 0 }, falseFailovers: 0, gaps: emptyGaps(), error: errors[i] ?? 'no witnesses' });
        continue;
      }
      const { counts, gaps, timing } = await countWindow(p.lab, clusters[i]!, p.daemon, p.advertMs, witnesses[i]!);
      witnesses[i] = null;
      round.configs.push({ ...base, counts, falseFailovers: falseFailovers(counts), gaps, ...(timing ? { timing } : {}) });
    }
    await Promise.all(clusters.map((c) => c?.stopAll()));
    clusters.fill(null);
    await Promise.all(labs.map((l) => resetLab(l)));

    // node death at 10 ms under the same stress, in the first lab (it has the apiservers)
    const order: Daemon[] = k % 2 === 0 ? ['ballast', 'keepalived'] : ['keepalived', 'ballast'];
    for (let r = 0; r < o.outageRuns; r++) {
      for (const daemon of order) {
        const sc = SCENARIOS.find((s) => s.daemon === daemon && s.failure === 'linkDown')!;
        let result = await runOnce(labs[0]!, sc, k * 100 + r, true, OUTAGE_ADVERT_MS, o.realtime);
        // under this load the client's first requests sometimes all time out: once more
        if (result.error?.startsWith('the client got no answer') || result.error?.includes('to answer'))
          result = await runOnce(labs[0]!, sc, k * 100 + r + 50, true, OUTAGE_ADVERT_MS, o.realtime);
        round.outage.push({ daemon, result });
        const w = result.wire;
        const wire = w
          ? ` (wire: silence ${w.silenceMs ?? '—'} ms, GARP +${w.garpLagMs ?? '—'} ms, first SYN-ACK +${w.synAckLagMs ?? '—'} ms, rival adverts ${w.rivalAdverts ?? 0}, rival GARPs ${w.rivalGarps ?? 0})`
          : '';
        progress(`round ${k + 1} node death ${daemon} 10 ms: ${result.outageMs === null ? `FAILED (${result.error})` : `${result.outageMs} ms`}${wire}`);
      }
    }
  } finally {
    for (const w of witnesses) if (w) await Promise.all([w.capture.stop('SIGKILL', 1000), ...w.monitors.map((m) => m.proc.stop('SIGKILL', 1000))]);
    await Promise.all(clusters.map((c) => c?.stopAll()));
    if (stress) await stress.stop('SIGTERM', 3000);
  }
  return round;
}

// ---------------------------------------------------------------------------------------------
// the report

/** The report over `rounds` (pure apart from the version string it is given). */
export function buildReport(rounds: readonly Round[], kv: string): StressReport {
  const settings = [...new Set(rounds.map((r) => r.realtime ?? 0))].sort((a, b) => a - b);
  return {
    keepalivedVersion: kv,
    masterDownMs: { '10ms': round1(masterDownIntervalMs(BACKUP_PRIORITY, 1)), '20ms': round1(masterDownIntervalMs(BACKUP_PRIORITY, 2)) },
    rounds: [...rounds],
    sets: settings.map((rt) =>
      buildSet(
        rounds.filter((r) => (r.realtime ?? 0) === rt),
        rt,
      ),
    ),
  };
}

/** The ballast election threads' timing over `mine`: n1's send lateness, every node's worst receive gap, the rescues. */
function threadTiming(mine: readonly ConfigRound[]): SetReport['summary'][number]['thread'] {
  const all = mine.flatMap((x) => Object.entries(x.timing ?? {}));
  if (all.length === 0) return undefined;
  const holder = all.filter(([n, t]) => n === 'n1' && t).map(([, t]) => t!);
  const bounds = holder[0]?.boundsMs ?? [];
  const sendLate = bounds.length === 0 ? [] : [...bounds, Infinity].map((_, i) => holder.reduce((s, t) => s + (t.sendLate[i] ?? 0), 0));
  const ts = all.flatMap(([, t]) => (t ? [t] : []));
  return {
    boundsMs: bounds,
    sendLate,
    sendLateMaxMs: Math.max(0, ...holder.map((t) => t.sendLateMaxMs)),
    receiveGapMaxMs: Math.max(0, ...ts.filter((t) => t.receiveGapMaxMs > 0).map((t) => t.receiveGapMaxMs)),
    rescued: ts.reduce((s, t) => s + t.rescued, 0),
    gcMaxMs: holder.some((t) => t.gc) ? Math.max(...holder.map((t) => t.gc?.maxMs ?? 0)) : null,
    gcCount: holder.reduce((s, t) => s + (t.gc?.count ?? 0), 0),
  };
}

function buildSet(rounds: readonly Round[], realtime: number): SetReport {
  const summary = CONFIGS.map((c) => {
    const mine = rounds.flatMap((r) => r.configs.filter((x) => x.daemon === c.daemon && x.advertMs === c.advertMs && !x.error));
    const witnesses = mine.reduce((s, x) => ({ log: s.log + x.counts.log, wire: s.wire + x.counts.wire, address: s.address + x.counts.address }), {
      log: 0,
      wire: 0,
      address: 0,
    });
    const worst = (f: (g: GapStats) => number | null): number | null =>
      mine.reduce<number | null>((m, x) => {
        const v = f(x.gaps);
        return v === null ? m : m === null ? v : Math.max(m, v);
      }, null);
    const sum = (f: (g: GapStats) => number): number => mine.reduce((s, x) => s + f(x.gaps), 0);
    return {
      label: c.label,
      daemon: c.daemon,
      advertMs: c.advertMs,
      rates: summarizeRates(mine),
      witnesses,
      gaps: {
        p99Ms: worst((g) => g.p99Ms),
        p999Ms: worst((g) => g.p999Ms),
        maxMs: worst((g) => g.maxMs),
        over1_5: sum((g) => g.over1_5),
        over2: sum((g) => g.over2),
        over3: sum((g) => g.over3),
        overMasterDown: sum((g) => g.overMasterDown),
        adverts: sum((g) => g.adverts),
      },
      ...(c.daemon === 'ballast' ? { thread: threadTiming(mine) } : {}),
    };
  });
  const ratios: Record<string, number | '0/0' | null> = {};
  for (const ms of [10, 20]) {
    const b = summary.find((s) => s.daemon === 'ballast' && s.advertMs === ms)!.rates.pooledPerHour;
    const k = summary.find((s) => s.daemon === 'keepalived' && s.advertMs === ms)!.rates.pooledPerHour;
    ratios[`${ms}ms`] = rateRatio(b, k);
  }
  const outage = (['ballast', 'keepalived'] as const).map((daemon) => {
    const runs = rounds.flatMap((r) => r.outage.filter((x) => x.daemon === daemon).map((x) => x.result.outageMs));
    return { daemon, runs, stats: stats(runs.flatMap((x) => (x === null ? [] : [x]))) };
  });
  const [ob, ok] = [outage[0]!.stats.median, outage[1]!.stats.median];
  return {
    realtime,
    summary,
    ratios,
    outage,
    outageRatio: ob === null || ok === null || ok === 0 ? null : Math.round((ob / ok) * 100) / 100,
  };
}

function printReport(report: StressReport): void {
  for (const set of report.sets) {
    printSet(report, set);
    say();
  }
  say(`load averages at the end of each window: ${report.rounds.map((rd) => rd.load[0]?.toFixed(1) ?? '—').join(', ')}`);
}

function printSet(report: StressReport, r: SetReport): void {
  const rounds = report.rounds.filter((x) => (x.realtime ?? 0) === r.realtime);
  const n = rounds.length;
  const sched =
    r.realtime === 0
      ? 'normal scheduling (both daemons at their defaults)'
      : `real-time priority ${r.realtime} (ballast vrrp.realtimePriority: SCHED_FIFO election thread; keepalived vrrp_rt_priority)`;
  say(`=== ${sched}`);
  say(`false failovers under CPU stress (no fault injected), ${n} round(s), all four configurations at once`);
  say("per hour: extrapolated from the observed minutes; median of the rounds' rates, and pooled (all events / all minutes)");
  const head = `${'configuration'.padEnd(18)}${'rounds'.padStart(7)}${'min'.padStart(6)}${'events'.padStart(8)}${'log/wire/addr'.padStart(15)}${'median/h'.padStart(10)}${'pooled/h'.padStart(10)}  |${'gap p99'.padStart(9)}${'p99.9'.padStart(8)}${'max'.padStart(8)}${'>1.5×'.padStart(7)}${'>2×'.padStart(6)}${'>3×'.padStart(6)}${'>MDI'.padStart(6)}${'adverts'.padStart(9)}`;
  say(head);
  say('-'.repeat(head.length));
  for (const s of r.summary) {
    const w = `${s.witnesses.log}/${s.witnesses.wire}/${s.witnesses.address}`;
    say(
      `${s.label.padEnd(18)}${String(s.rates.rounds).padStart(7)}${s.rates.minutes.toFixed(1).padStart(6)}${String(s.rates.falseFailovers).padStart(8)}${w.padStart(15)}${fmt(s.rates.medianPerHour, 10, 1)}${fmt(s.rates.pooledPerHour, 10, 1)}  |${fmt(s.gaps.p99Ms, 9, 1)}${fmt(s.gaps.p999Ms, 8, 1)}${fmt(s.gaps.maxMs, 8, 1)}${String(s.gaps.over1_5).padStart(7)}${String(s.gaps.over2).padStart(6)}${String(s.gaps.over3).padStart(6)}${String(s.gaps.overMasterDown).padStart(6)}${String(s.gaps.adverts).padStart(9)}`,
    );
  }
  const rt = (x: number | '0/0' | null): string => (x === null ? '— (keepalived 0 or no data)' : x === '0/0' ? 'both 0' : x.toFixed(2));
  say(`ratio ballast/keepalived of the pooled rates: 10 ms ${rt(r.ratios['10ms'] ?? null)}, 20 ms ${rt(r.ratios['20ms'] ?? null)}`);
  say(
    `holder's advert gaps on the wire, ms (worst round); MDI = the first backup's Master_Down_Interval: ${report.masterDownMs['10ms']} ms at 10 ms, ${report.masterDownMs['20ms']} ms at 20 ms`,
  );
  for (const s of r.summary) {
    const t = s.thread;
    if (!t || t.boundsMs.length === 0) continue;
    const buckets = t.sendLate.map((c, i) => `${i < t.boundsMs.length ? `≤${t.boundsMs[i]}` : `>${t.boundsMs.at(-1)}`}:${c}`).join(' ');
    say(
      `${s.label} election thread (its own clock): holder's Adver_Timer ticks late by ms ${buckets}; worst ${t.sendLateMaxMs} ms; worst gap between a master's adverts as a Backup handled them ${t.receiveGapMaxMs} ms; expiries rescued by reading the socket first ${t.rescued}${t.gcMaxMs === null ? '' : `; holder's GCs ${t.gcCount}, longest ${t.gcMaxMs} ms`}`,
    );
  }
  say();
  say("node death (holder's link down) at 10 ms adverts under the same stress: client outage, ms (prober maxOutageMs)");
  for (const o of r.outage) {
    const cells = o.runs.map((x) => (x === null ? 'FAIL' : x.toFixed(0))).join(' ');
    say(`${o.daemon.padEnd(11)} median ${fmt(o.stats.median, 7, 1)}  min ${fmt(o.stats.min, 6, 1)}  max ${fmt(o.stats.max, 6, 1)}   runs: ${cells || '—'}`);
  }
  say(
    `ratio ballast/keepalived of the medians: ${r.outageRatio === null ? '—' : r.outageRatio.toFixed(2)}; Master_Down_Interval ${report.masterDownMs['10ms']} ms`,
  );
  // where the outage went, on the client's wire: the takeover (silence), then the server's first answer
  for (const daemon of ['ballast', 'keepalived'] as const) {
    const ws = rounds.flatMap((rd) =>
      rd.outage.filter((x) => x.daemon === daemon && x.result.outageMs !== null).flatMap((x) => (x.result.wire ? [x.result.wire] : [])),
    );
    if (ws.length === 0) continue;
    const med = (f: (w: (typeof ws)[number]) => number | null | undefined): string =>
      fmt(
        stats(
          ws.flatMap((w) => {
            const v = f(w);
            return v === null || v === undefined ? [] : [v];
          }),
        ).median,
        6,
        1,
      );
    say(
      `${daemon.padEnd(11)} wire medians: silence${med((w) => w.silenceMs)} ms, new holder's first advert → GARP${med((w) => w.garpLagMs)} ms, → first SYN-ACK through the VIP${med((w) => w.synAckLagMs)} ms; runs with a rival Backup's adverts ${ws.filter((w) => (w.rivalAdverts ?? 0) > 0).length}/${ws.length}`,
    );
  }
  const notes = rounds.flatMap((rd, i) => [
    ...rd.configs.filter((c) => c.error).map((c) => `round ${i + 1} ${c.daemon} ${c.advertMs} ms: ${c.error}`),
    ...rd.configs
      .filter((c) => !c.error && c.samplesOff > 0)
      .map((c) => `round ${i + 1} ${c.daemon} ${c.advertMs} ms: n1 not the only holder in ${c.samplesOff}/${c.samples} samples`),
    ...rd.outage.filter((x) => x.result.error).map((x) => `round ${i + 1} node death ${x.daemon}: ${x.result.error}`),
  ]);
  if (notes.length > 0) {
    say();
    for (const l of notes) say(`note: ${l}`);
  }
}

// ---------------------------------------------------------------------------------------------
// main

function usage(): string {
  return 'usage: node dist/bench/failover.js --stress [--minutes M (1..60, default 1)] [--rounds N (1..20, default 5)] [--outage-runs K (0..5, default 1)] [--cpu C (1..8, default 2)] [--realtime P[,P…] (0..99, default 0: both daemons at normal scheduling; a list alternates round by round)] [--append FILE] [--json]';
}

/** The entry point of `bench:failover --stress` (argv without `--stress`); resolves with the exit status. */
export async function stressMain(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      minutes: { type: 'string' },
      rounds: { type: 'string' },
      'outage-runs': { type: 'string' },
      cpu: { type: 'string' },
      realtime: { type: 'string' },
      append: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    say(usage());
    return 0;
  }
  let o: { minutes: number; rounds: number; outageRuns: number; cpu: number; realtime: number[] };
  try {
    o = {
      minutes: intArg('minutes', values.minutes, 1, 1, 60),
      rounds: intArg('rounds', values.rounds, 5, 1, 20),
      outageRuns: intArg('outage-runs', values['outage-runs'], 1, 0, 5),
      cpu: intArg('cpu', values.cpu, 2, 1, 8),
      realtime: (values.realtime ?? '0').split(',').map((v) => intArg('realtime', v, 0, 0, 99)),
    };
  } catch (e) {
    process.stderr.write(`${errText(e)}\n${usage()}\n`);
    return 2;
  }
  const checked = preflight(
    {},
    {
      name: 'bench-failover --stress',
      usage: usage(),
      defaults: { runs: 1, maxRuns: 1, seconds: 1, workers: 1 },
      root: 'network namespaces, raw sockets',
      files: [
        [KEEPALIVED_PATH, 'keepalived'],
        [STRESS_NG, 'stress-ng'],
        [TCPDUMP, 'tcpdump'],
      ],
    },
  );
  if (typeof checked === 'number') return checked;
  const foreign = foreignKeepalived();
  if (foreign.length > 0) say(`note: keepalived already runs on this machine (pids ${foreign.join(', ')}), outside the labs`);
  const earlier: Round[] = values.append && existsSync(values.append) ? (JSON.parse(readFileSync(values.append, 'utf8')) as StressReport).rounds : [];
  const kv = keepalivedVersion()?.join('.') ?? 'unknown';

  const t0 = Date.now();
  const labs: Lab[] = [];
  const rounds: Round[] = [...earlier];
  try {
    for (const l of LABS) labs.push(await Lab.create({ prefix: l.prefix, subnet: l.subnet, nodes: 3, ipv6: false }));
    if (o.outageRuns > 0) await labs[0]!.startApiservers();
    for (const l of labs) await resetLab(l);
    say(
      `stress benchmark: ballast vs keepalived ${kv}, 4 configurations at once under stress-ng --cpu ${o.cpu} (machine-wide: every lab node is a namespace on this machine), ${o.rounds} round(s) of ${o.minutes} min, real-time priority ${o.realtime.join(' / ')}${earlier.length > 0 ? `, after ${earlier.length} earlier round(s) from ${values.append}` : ''}`,
    );
    for (let i = 0; i < o.rounds; i++) {
      const k = rounds.length;
      // a list of settings alternates round by round (interleaved: the machine's drift hits all alike)
      const r = await runRound(labs, k, { ...o, realtime: o.realtime[i % o.realtime.length]! });
      rounds.push(r);
      for (const c of r.configs)
        progress(
          `round ${k + 1} ${c.daemon} ${c.advertMs} ms: ${c.error ? `FAILED (${c.error})` : `${c.falseFailovers} false failover(s) in ${c.minutes} min (log ${c.counts.log}, wire ${c.counts.wire}, address ${c.counts.address}); gap max ${c.gaps.maxMs} ms`}`,
        );
      if (values.append) writeFileSync(values.append, JSON.stringify(buildReport(rounds, kv), null, 2));
    }
  } finally {
    for (const l of labs.reverse()) await l.teardown();
  }
  const report = buildReport(rounds, kv);
  say();
  printReport(report);
  say(`this run: ${o.rounds} round(s) in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  if (values.json) say(JSON.stringify(report, null, 2));
  return rounds.some((r) => r.configs.some((c) => c.error)) ? 1 : 0;
}
