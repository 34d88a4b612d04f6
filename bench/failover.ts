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
import { parseArgs } from 'node:util';
import { Lab } from '../lab/lab.js';
import { KEEPALIVED_PATH, keepalivedVersion } from '../lab/peers/keepalived.js';
import { masterDownIntervalMs, skewTimeMs } from '../src/vrrp/state.js';
import { stats, type Stats } from './stats.js';
import { fmt, preflight, round1, say } from './common.js';
import { runIfMain } from '../lab/entry.js';
import {
  ADVERT_CS,
  ADVERT_MS,
  foreignKeepalived,
  hasTcpdump,
  PREFIX,
  PRIORITIES,
  PROBE_INTERVAL_MS,
  PROBE_TIMEOUT_MS,
  resetLab,
  runOnce,
  SCENARIOS,
  SUBNET,
  type Failure,
  type RunResult,
  type Scenario,
} from './failover-run.js';

const DEFAULT_RUNS = 5;
const MAX_RUNS = 20;

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
  say(
    `protocol bounds (RFC 9568 §6.1, priority ${b.priority}, ${ADVERT_CS} cs): Master_Down_Interval ${b.masterDownIntervalMs.toFixed(1)} ms (link down), Skew_Time ${b.skewTimeMs.toFixed(1)} ms (SIGTERM)`,
  );

  if (report.scenarios.some((s) => s.runs.some((r) => r.wire))) {
    say();
    say('on the wire (tcpdump in the client namespace), median [min..max] ms:');
    say(
      `${'scenario'.padEnd(22)}${'failure after advert'.padStart(24)}${'old last advert → new first'.padStart(30)}${'new first advert → GARP'.padStart(26)}${'GARPs/burst'.padStart(13)}`,
    );
    for (const s of report.scenarios) {
      const range = (st: Stats, d: number): string => (st.median === null ? '—' : `${st.median.toFixed(d)} [${st.min!.toFixed(d)}..${st.max!.toFixed(d)}]`);
      const bursts = [...new Set(s.runs.flatMap((r) => (r.wire ? [r.wire.garpBurst] : [])))].join('/') || '—';
      say(`${s.label.padEnd(22)}${range(s.phase, 1).padStart(24)}${range(s.silence, 1).padStart(30)}${range(s.garpLag, 2).padStart(26)}${bursts.padStart(13)}`);
    }
  }
  const failed = report.scenarios.flatMap((s) => s.runs.filter((r) => r.error).map((r) => `${s.label.trim()} #${r.run}: ${r.error}`));
  const extra = report.scenarios.flatMap((s) =>
    s.runs.filter((r) => !r.error && r.outages !== 1).map((r) => `${s.label.trim()} #${r.run}: ${r.outages} outages`),
  );
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

async function main(argv: string[]): Promise<number> {
  // `npm run bench:failover -- --stress …`: the CPU-stress benchmark (bench/stress.ts), its own options
  if (argv.includes('--stress')) return (await import('./stress.js')).stressMain(argv.filter((a) => a !== '--stress'));
  const { values } = parseArgs({
    args: argv,
    options: { runs: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
    strict: true,
  });
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
    const bounds = {
      priority: PRIORITIES[1],
      masterDownIntervalMs: masterDownIntervalMs(PRIORITIES[1], ADVERT_CS),
      skewTimeMs: skewTimeMs(PRIORITIES[1], ADVERT_CS),
    };
    say(`failover benchmark: ballast vs keepalived ${kv}, ${runs} run(s) per scenario, interleaved`);
    say(`lab ${PREFIX} (10.78.${SUBNET}.0/24): 3 nodes, priorities ${PRIORITIES.join('/')}, VRRPv3 adverts every ${ADVERT_MS} ms, VIP ${lab.vip4}/32 on eth0`);
    say(
      `client: new TLS connection to https://${lab.vip4}:6443/version every ${PROBE_INTERVAL_MS} ms, ${PROBE_TIMEOUT_MS} ms timeout${capture ? '; tcpdump on the client' : '; tcpdump not found: no wire timings'}`,
    );
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

// run only as a script, not when imported
runIfMain(import.meta.url, 'bench-failover failed', main, { stack: true });
