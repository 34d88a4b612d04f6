/**
 * `node dist/bench/nftwatch.js [--rounds N] [--idle-rounds N] [--idle-seconds S] [--json]`
 * (root): how fast the table watch (src/dataplane/nftwatch.ts) puts ballast's table back after
 * someone else deletes it, and what watching costs while nothing happens, for its two ways of
 * noticing, side by side in one run with interleaved rounds:
 *
 *   event   kernel nftables events (NftWatch, netlink) → verify → restore (the agent's default)
 *   verify  no events: the fallback verify every FALLBACK_VERIFY_EVERY_MS (500 ms) → restore
 *
 * Per round: a fresh watch, a settle time spread over the verify period, `nft delete table ip
 * ballast`, then the time from that command's return to the end of the restore (the outage),
 * and the watch's own detection-to-restore time (from the first event, or the verify's start).
 * Idle: CPU time (utime + stime of the process and its reaped nft children, /proc/self/stat)
 * over --idle-seconds with no change, per setup. Real nft, real kernel, inside one lab
 * namespace (prefix bnfw); the same ruleset (3 backends) as the agent renders.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { Lab } from '../lab/lab.js';
import { runIfMain } from '../lab/entry.js';
import { sleep } from '../lab/wait.js';
import { NftablesApplier } from '../src/dataplane/apply.js';
import { FALLBACK_VERIFY_EVERY_MS, TableWatch, type RestoreRecord } from '../src/dataplane/nftwatch.js';
import type { DesiredDataplane } from '../src/dataplane/nftables.js';
import { NftWatch } from '../src/native.js';
import { intArg, load, round1, round2, say } from './common.js';
import { stats, type Stats } from './stats.js';

const PREFIX = 'bnfw';
const SUBNET = 110;
const SETUPS = ['event', 'verify'] as const;
type Setup = (typeof SETUPS)[number];
const USAGE = 'usage: node dist/bench/nftwatch.js [--rounds 10] [--idle-rounds 5] [--idle-seconds 10] [--json]';
/** clock ticks per second of /proc/self/stat (USER_HZ: 100 on Linux everywhere) */
const USER_HZ = 100;

/** What the inner run (inside the namespace) prints, one JSON line. */
interface InnerResult {
  outageMs: Record<Setup, number[]>;
  detectToRestoreMs: Record<Setup, number[]>;
  detectedBy: Record<Setup, string[]>;
  /** CPU ms per idle round */
  idleCpuMs: Record<Setup, number[]>;
  idleSeconds: number;
}

const silent = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** utime + stime + cutime + cstime of this process, ms. */
function cpuMs(): number {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields 14..17 of proc(5) are f[11..14] after "pid (comm) "
  return ((Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 1000) / USER_HZ;
}

async function inner(rounds: number, idleRounds: number, idleSeconds: number): Promise<InnerResult> {
  const desired: DesiredDataplane = {
    family: 4,
    vips: [`10.78.${SUBNET}.100`],
    port: 6443,
    backends: [11, 12, 13].map((h) => ({ address: `10.78.${SUBNET}.${h}`, port: 6443, local: h === 11 })),
    masqueradeRemote: true,
  };
  const applier = new NftablesApplier({ track: true });
  await applier.apply(desired);
  const watch = (setup: Setup, onRestore: (r: RestoreRecord) => void): TableWatch =>
    new TableWatch({
      family: 4,
      log: silent,
      ...(setup === 'event' ? { subscribe: (cb) => NftWatch.open(cb) } : {}),
      verify: () => applier.verify(4),
      restore: async () => {
        applier.forget(4);
        await applier.apply(desired);
      },
      onRestore,
    });
  const out: InnerResult = {
    outageMs: { event: [], verify: [] },
    detectToRestoreMs: { event: [], verify: [] },
    detectedBy: { event: [], verify: [] },
    idleCpuMs: { event: [], verify: [] },
    idleSeconds,
  };
  for (let i = 0; i < rounds * SETUPS.length; i++) {
    const setup = SETUPS[i % SETUPS.length]!;
    let restored: (r: RestoreRecord) => void = () => undefined;
    const done = new Promise<RestoreRecord>((resolve) => (restored = resolve));
    const w = watch(setup, (r) => restored(r));
    w.start();
    // the fault lands at a different phase of the verify period each round
    await sleep(100 + ((Math.floor(i / SETUPS.length) * 137) % FALLBACK_VERIFY_EVERY_MS));
    execFileSync('nft', ['delete', 'table', 'ip', 'ballast']);
    const t0 = performance.now();
    const r = await Promise.race([done, sleep(3000).then(() => null)]);
    const outage = performance.now() - t0;
    await w.stop();
    if (r === null) throw new Error(`round ${i} (${setup}): not restored within 3 s`);
    out.outageMs[setup].push(round1(outage));
    out.detectToRestoreMs[setup].push(r.durationMs);
    out.detectedBy[setup].push(r.detectedBy);
  }
  for (let i = 0; i < idleRounds * SETUPS.length; i++) {
    const setup = SETUPS[i % SETUPS.length]!;
    const w = watch(setup, () => undefined);
    w.start();
    const c0 = cpuMs();
    await sleep(idleSeconds * 1000);
    out.idleCpuMs[setup].push(round1(cpuMs() - c0));
    await w.stop();
  }
  await applier.remove([4]);
  return out;
}

const ratio = (a: number | null, b: number | null): number | null => (a === null || b === null || b === 0 ? null : round2(a / b));

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      rounds: { type: 'string' },
      'idle-rounds': { type: 'string' },
      'idle-seconds': { type: 'string' },
      json: { type: 'boolean' },
      inner: { type: 'boolean' },
    },
  });
  let rounds: number, idleRounds: number, idleSeconds: number;
  try {
    rounds = intArg('rounds', values.rounds, 10, 5, 100);
    idleRounds = intArg('idle-rounds', values['idle-rounds'], 5, 5, 20);
    idleSeconds = intArg('idle-seconds', values['idle-seconds'], 10, 1, 60);
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (values.inner) {
    say(JSON.stringify(await inner(rounds, idleRounds, idleSeconds)));
    return 0;
  }
  if (process.getuid?.() !== 0) {
    process.stderr.write('nftwatch bench: needs root (network namespaces, nft)\n');
    return 1;
  }
  const lab = await Lab.create({ prefix: PREFIX, subnet: SUBNET, nodes: 1, ipv6: false });
  let res: InnerResult;
  try {
    const seconds = (rounds * 2 * 1.2 + idleRounds * 2 * idleSeconds + 30) * 1000;
    const r = await lab.exec(
      lab.nodes[0]!.netns,
      [
        process.execPath,
        fileURLToPath(import.meta.url),
        '--inner',
        '--rounds',
        String(rounds),
        '--idle-rounds',
        String(idleRounds),
        '--idle-seconds',
        String(idleSeconds),
      ],
      { timeoutMs: seconds },
    );
    res = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as InnerResult;
  } finally {
    await lab.teardown();
  }
  const row = (s: Setup): { setup: Setup; outage: Stats; detectToRestore: Stats; idleCpuMsPerMin: Stats; detectedBy: string[] } => ({
    setup: s,
    outage: stats(res.outageMs[s]),
    detectToRestore: stats(res.detectToRestoreMs[s]),
    idleCpuMsPerMin: stats(res.idleCpuMs[s].map((ms) => (ms * 60) / res.idleSeconds)),
    detectedBy: [...new Set(res.detectedBy[s])],
  });
  const rows = SETUPS.map(row);
  const [ev, ve] = rows as [ReturnType<typeof row>, ReturnType<typeof row>];
  const ratios = {
    outage: ratio(ev.outage.median, ve.outage.median),
    detectToRestore: ratio(ev.detectToRestore.median, ve.detectToRestore.median),
    idleCpu: ratio(ev.idleCpuMsPerMin.median, ve.idleCpuMsPerMin.median),
  };
  if (values.json) {
    say(JSON.stringify({ rounds, idleRounds, idleSeconds, load: load(), rows, ratios, raw: res }));
    return 0;
  }
  say(
    `nftables table watch: \`nft delete table ip ballast\`, ${rounds} rounds per setup (interleaved); idle ${idleRounds} × ${idleSeconds} s per setup; load ${load().join(' ')}`,
  );
  say('');
  say('| setup | outage median (min–max), ms | detection→restore median (min–max), ms | idle CPU, ms per minute (median) | detected by |');
  say('|---|---|---|---|---|');
  for (const r of rows) {
    say(
      `| ${r.setup} | ${r.outage.median} (${r.outage.min}–${r.outage.max}) | ${r.detectToRestore.median} (${r.detectToRestore.min}–${r.detectToRestore.max}) | ${r.idleCpuMsPerMin.median} | ${r.detectedBy.join(', ')} |`,
    );
  }
  say(`| event / verify | ${ratios.outage} | ${ratios.detectToRestore} | ${ratios.idleCpu} | |`);
  return 0;
}

runIfMain(import.meta.url, 'nftwatch bench', main);
