/**
 * Issue 27 item 1: a cold start of a control plane with discovery. Three agents (priorities
 * 150 / 100 / 50, adverts every 100 ms) with a `discovery` section whose kubeconfig reaches the
 * stand-in apiservers (all three up and in the `kubernetes` EndpointSlice), spawned at once, as
 * after a power cut. Each run asserts, from the agents' own logs and the kernel's address events:
 *
 * - the VIP is on n1 (the highest priority) within Master_Down_Interval(150) + 250 ms of the
 *   FIRST 'state change' from init among the three agents: once any election runs, nothing may
 *   keep n1's from deciding within the protocol's time;
 * - no other node ever became master or had the VIP (no extra move: each one is an outage).
 *
 * The old code loaded the Kubernetes client on the election's thread after entering Backup
 * (0.6-1.4 s of silence): the VIP came 520-1,316 ms after the first election start and in 13 of
 * 16 cold starts went to a lower priority first. Commit 353f5ea (the client loaded before the
 * election) is not enough: on the 2-core lab 12 of 20 runs still had an extra move. The three
 * processes start within 10 ms, but each one's import of the client (0.4-0.6 s of CPU, three at
 * once on 2 cores) now comes before its election, so the elections start 90-1,236 ms apart
 * (median 395): a lower priority that starts first times out first, and n1 then preempts only
 * once its own checks pass (the policy's preempt hold). Until the fix lands the file runs
 * only when asked: BALLAST_COLDSTART_RUNS=N runs the cold start N times (20 for the acceptance)
 * on one lab, ~4 s each; then it belongs in the suite at 5 runs.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Lab, type LabNode, type LabProcess } from '../../lab/lab.js';
import { agentConfig, cliPath, type AgentSettings } from '../../lab/cluster.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'b27g';
const SUBNET = 196;
const TOKEN = 'lab-coldstart-token-0123456789';
const PRIORITIES = [150, 100, 50] as const;
const ADVERT_MS = 100;
/** the acceptance's allowance over Master_Down_Interval (process scheduling, the netlink round trip) */
const MARGIN_MS = 250;
/** 0 (unset): skipped, see the file comment */
const RUNS = Math.max(0, Math.floor(Number(process.env.BALLAST_COLDSTART_RUNS ?? 0)) || 0);
// a skip is never silent (test/support/needs.ts does the same for what the machine lacks)
if (RUNS === 0) console.error('coldstart.test.ts skipped: issue 27 item 1 is open; BALLAST_COLDSTART_RUNS=N runs the cold start N times');

type Line = Record<string, unknown>;
const timeOf = (l: Line): number => (typeof l.time === 'number' ? l.time : Date.parse(String(l.time)));
const linesOf = (p: LabProcess): Line[] =>
  p.output().split('\n').flatMap((l) => {
    try {
      return [JSON.parse(l) as Line];
    } catch {
      return [];
    }
  });
const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** One cold start's figures. */
interface Run {
  run: number;
  /** the first 'state change' from init among the three (epoch ms) */
  firstStart: number;
  /** each node's first 'state change' from init, ms after firstStart */
  starts: Record<string, number>;
  /** the VIP's first appearance on n1, ms after firstStart (null: never) */
  upMs: number | null;
  /** nodes other than n1 that became master or had the VIP, with when (ms after firstStart) */
  extra: string[];
}

describe.skipIf(needs('root') || RUNS === 0)('cold start of three agents with discovery (root, BALLAST_COLDSTART_RUNS=N; skipped otherwise)', () => {
  let lab: Lab;
  const configs: string[] = [];
  /** per node: the kernel's address events on eth0, each with when the test read it */
  const events = new Map<string, { at: number; line: string }[]>();
  const monitors: LabProcess[] = [];
  const running: LabProcess[] = [];
  const runs: Run[] = [];
  const mdi = masterDownIntervalMs(PRIORITIES[0], ADVERT_MS / 10);
  /** the slowest Backup's own timer: a late start of n1 would let it fire */
  const mdiLowest = masterDownIntervalMs(PRIORITIES[2], ADVERT_MS / 10);

  const settings = async (i: number): Promise<AgentSettings> => {
    const node = lab.nodes[i]!;
    return {
      priority: PRIORITIES[i]!,
      advertisementInterval: `${ADVERT_MS}ms`,
      extra: {
        apiserver: {
          port: 6443,
          backends: lab.nodes.map((n) => `${n.ipv4}:6443`),
          health: { caFile: lab.ca.certFile, interval: '200ms', timeout: '200ms', rise: 2, fall: 2 },
        },
        discovery: { kubeconfig: await lab.writeKubeconfig(node, { token: TOKEN }), lastKnownFile: join(lab.dir, `${node.name}-backends.json`) },
      },
    };
  };

  /** `ip -o monitor address` in `node`, every line timed on arrival (the test's loop is idle meanwhile). */
  async function monitor(node: LabNode): Promise<void> {
    const seen: { at: number; line: string }[] = [];
    events.set(node.name, seen);
    const proc = lab.spawn(node.netns, ['ip', '-o', 'monitor', 'address']);
    monitors.push(proc);
    let rest = '';
    proc.child.stdout!.on('data', (b: Buffer) => {
      const at = Date.now();
      const parts = (rest + b.toString('utf8')).split('\n');
      rest = parts.pop()!;
      for (const line of parts) seen.push({ at, line });
    });
    // proof that it subscribed: an address added and removed on the node's loopback
    for (let i = 0; i < 50 && !seen.some((e) => e.line.includes('127.0.0.196')); i++) {
      await lab.exec(node.netns, ['ip', 'addr', 'add', '127.0.0.196/32', 'dev', 'lo'], { allowFail: true });
      await lab.exec(node.netns, ['ip', 'addr', 'del', '127.0.0.196/32', 'dev', 'lo'], { allowFail: true });
      await sleep(50);
    }
    if (!seen.some((e) => e.line.includes('127.0.0.196'))) throw new Error(`ip monitor in ${node.name} reports nothing`);
  }
  /** The VIP's additions on `node` at or after `since`, ms epoch. */
  const vipAdded = (node: LabNode, since: number): number[] =>
    (events.get(node.name) ?? []).filter((e) => e.at >= since && !e.line.startsWith('Deleted') && e.line.includes(` ${lab.vip4}/`)).map((e) => e.at);

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false });
    // a control plane that was running: every apiserver up and listed in the slice
    await lab.startApiservers({ store: true, token: TOKEN });
    for (let i = 0; i < 3; i++) {
      const path = join(lab.dir, `${lab.nodes[i]!.name}-ballast.yaml`);
      writeFileSync(path, agentConfig(lab, lab.nodes[i]!, await settings(i)));
      configs.push(path);
    }
    for (const n of lab.nodes) await monitor(n);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(running.map((p) => p.stop('SIGTERM', 5000).catch(() => undefined)));
    await Promise.all(monitors.map((p) => p.stop('SIGTERM', 2000).catch(() => undefined)));
    if (runs.length > 0) {
      const ups = runs.map((r) => r.upMs ?? Number.POSITIVE_INFINITY);
      console.log(
        `[coldstart] ${runs.length} cold starts with discovery: VIP on n1 after the first election start min ${Math.min(...ups)} / median ${median(ups)} / max ${Math.max(...ups)} ms ` +
          `(bound Master_Down_Interval(150) ${mdi.toFixed(1)} + ${MARGIN_MS} ms); runs with an extra move: ${runs.filter((r) => r.extra.length > 0).length}`,
      );
    }
    await lab?.teardown();
  });

  /** Spawns the three at once, waits until the elections and discovery have settled, stops them; returns the run's figures. */
  async function coldStart(run: number): Promise<Run> {
    const spawnedAt = Date.now();
    const procs = lab.nodes.map((n, i) => lab.spawn(n.netns, [process.execPath, cliPath(), 'run', '--config', configs[i]!], { logFile: `${n.name}-run${run}.log` }));
    running.push(...procs);
    try {
      const exited = procs.map(() => false);
      procs.forEach((p, i) => void p.exited.then(() => (exited[i] = true)));
      const alive = (): void => {
        const i = exited.indexOf(true);
        if (i >= 0) throw new Error(`the agent on n${i + 1} exited during the cold start:\n${procs[i]!.output().slice(-4000)}`);
      };
      // every election started, n1 holds the VIP, and every agent's discovery lists the slices
      // (its first list, TLS and informer run on the same thread as the election)
      const listing = (p: LabProcess): boolean => linesOf(p).some((l) => l.msg === 'discovery: listing and watching the kubernetes EndpointSlices');
      await waitFor(
        async () => {
          alive();
          return procs.every((p) => linesOf(p).some((l) => l.msg === 'state change' && l.from === 'init')) && vipAdded(lab.nodes[0]!, spawnedAt).length > 0 && procs.every(listing);
        },
        (ok) => ok,
        { timeoutMs: 20_000, intervalMs: 50, what: 'three elections started, the VIP on n1, discovery listing on every node' },
      );
      // long enough for the slowest Backup's timer to fire had n1's adverts not reached it
      await sleep(mdiLowest + MARGIN_MS);
      alive();
      const observedUntil = Date.now();
      const starts = procs.map((p) => timeOf(linesOf(p).find((l) => l.msg === 'state change' && l.from === 'init')!));
      const firstStart = Math.min(...starts);
      const up = vipAdded(lab.nodes[0]!, spawnedAt)[0];
      const extra: string[] = [];
      procs.forEach((p, i) => {
        if (i === 0) return;
        const name = lab.nodes[i]!.name;
        for (const l of linesOf(p)) if (l.msg === 'state change' && l.to === 'master' && timeOf(l) <= observedUntil) extra.push(`${name} master at +${timeOf(l) - firstStart} ms (${String(l.reason)})`);
        for (const at of vipAdded(lab.nodes[i]!, spawnedAt)) if (at <= observedUntil) extra.push(`${name} had the VIP at +${at - firstStart} ms`);
      });
      for (const l of linesOf(procs[0]!)) if (l.msg === 'state change' && l.from === 'master' && timeOf(l) <= observedUntil) extra.push(`n1 left master at +${timeOf(l) - firstStart} ms (${String(l.reason)})`);
      return {
        run,
        firstStart,
        starts: Object.fromEntries(starts.map((s, i) => [lab.nodes[i]!.name, s - firstStart])),
        upMs: up === undefined ? null : up - firstStart,
        extra,
      };
    } finally {
      // the Backups first (no priority-0 advert reaches a Backup that could take over), then n1
      await Promise.all(procs.slice(1).map((p) => p.stop('SIGTERM', 5000)));
      await procs[0]!.stop('SIGTERM', 5000);
      for (const p of procs) running.splice(running.indexOf(p), 1);
    }
  }

  it(`the VIP on the highest priority within Master_Down_Interval + ${MARGIN_MS} ms of the first election start, no extra move (${RUNS} runs)`, async () => {
    const failures: string[] = [];
    for (let run = 1; run <= RUNS; run++) {
      const r = await coldStart(run);
      runs.push(r);
      const ok = r.upMs !== null && r.upMs >= 0 && r.upMs <= mdi + MARGIN_MS && r.extra.length === 0;
      const line = `run ${run}: VIP on n1 at +${r.upMs ?? 'never'} ms; election starts ${Object.entries(r.starts).map(([n, s]) => `${n} +${s}`).join(', ')} ms${r.extra.length ? `; extra: ${r.extra.join('; ')}` : ''}`;
      console.log(`[coldstart] ${line}`);
      if (!ok) failures.push(line);
    }
    expect(failures, `bound: VIP on n1 within ${(mdi + MARGIN_MS).toFixed(1)} ms of the first election start, no other master`).toStrictEqual([]);
  }, RUNS * 30_000 + 30_000);
});
