/**
 * A cold start of a control plane, as after a power cut: three agents (priorities 150 / 100 / 50,
 * adverts every 100 ms, the stand-in apiservers all up and in the `kubernetes` EndpointSlice)
 * spawned at once, alternately WITH a `discovery` section (its kubeconfig reaches the stand-ins)
 * and WITHOUT one (the control), on one lab. Each run is read from the agents' own logs and the
 * kernel's address events. Asserted:
 *
 * - the VIP is on n1 (the highest priority) within Master_Down_Interval(150) + 250 ms + its
 *   commit of the replicated connections (logged; it runs before the VIP is added,
 *   docs/connection-sync.md) of n1's OWN election start when no other node became master
 *   first; when one did, within that plus apiserver.health.settleMs (a starting node preempts
 *   only once its first verdicts are in and its replicated state has come (or its hold for it
 *   ended: the logged wait counts when longer), and then at its Master_Down_Timer): in every run of
 *   both kinds. Nothing else on n1's election
 *   thread may delay it: the Kubernetes client's import (0.4-0.6 s of CPU) ran there once n1 had
 *   heard the lower-priority master it was about to preempt, and put n1's takeover 0.9-2.0 s
 *   after its start;
 * - n1 holds the VIP at the end of every run, and no other node does;
 * - discovery does not delay the elections: the median time from the spawn to a node's election
 *   start is within 100 ms of the control's (the client's import, once moved before the election,
 *   put the elections 90-1,236 ms apart, median 395);
 * - with every node at the default priority (100) and discovery: the VIP on one node within
 *   Master_Down_Interval(100) + 250 ms + its commit of the FIRST election start, no other node
 *   ever master or holding the VIP, that node the only holder at the end: no extra move;
 * - in every run of every kind, nothing held a Backup's election thread for its
 *   Master_Down_Interval: the longest time between two of the master's adverts as the thread
 *   handled them (/status timing.receiveGapMaxMs) stays below it. With the Kubernetes client
 *   imported on that thread (before discovery had a thread of its own) the Backups' gaps were
 *   120-892 ms with discovery, median 641 (over it: 8 of 10 Backups at distinct priorities, 10 of
 *   10 at equal ones; 5 runs of each kind), and 101-155 ms without; on its own thread, 101-200
 *   ms, median 135.
 *
 * What is reported, not asserted: runs of distinct priorities in which a lower priority became
 * master first (an extra move). On this 2-core lab three processes that start at once reach
 * their elections 40-155 ms apart (CPU contention while each loads its modules), and two
 * priorities 50 apart differ in Skew_Time by only 19.5 ms at 100 ms adverts (RFC 9568 §6.1): a
 * node that starts that much earlier times out first, with discovery or without, and n1 then
 * preempts (Preempt_Mode). The control shows it.
 * BALLAST_COLDSTART_RUNS=N runs N cold starts of each kind (default 3).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Lab, type LabNode, type LabProcess } from '../../lab/lab.js';
import { agentConfig, cliPath, LabAgent, type AgentSettings } from '../../lab/cluster.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'b27g';
const SUBNET = 196;
const TOKEN = 'lab-coldstart-token-0123456789';
const PRIORITIES = [150, 100, 50] as const;
/** every node's priority in the `equal` kind: the default (config/limits.ts) */
const EQUAL_PRIORITY = 100;
const ADVERT_MS = 100;
/** the acceptance's allowance over Master_Down_Interval (process scheduling, the netlink round trip) */
const MARGIN_MS = 250;
/** apiserver.health.settleMs of this config: (max(rise, fall) + 1) × interval + timeout (config/normalize.ts) */
const SETTLE_MS = (2 + 1) * 200 + 200;
/** cold starts of each kind */
const RUNS = Math.max(1, Math.floor(Number(process.env.BALLAST_COLDSTART_RUNS ?? 3)) || 3);
/** the allowance of discovery's median spawn → election start over the control's */
const DISCOVERY_DELAY_MS = 100;

type Line = Record<string, unknown>;
const timeOf = (l: Line): number => (typeof l.time === 'number' ? l.time : Date.parse(String(l.time)));
const linesOf = (p: LabProcess): Line[] =>
  p
    .output()
    .split('\n')
    .flatMap((l) => {
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

/**
 * What is cold-started: priorities 150 / 100 / 50 with a discovery section, the same without one
 * (the control), or every node at the default priority (100) with discovery.
 */
type Kind = 'discovery' | 'control' | 'equal';
const KINDS: readonly Kind[] = ['discovery', 'control', 'equal'];
const withDiscovery = (k: Kind): boolean => k !== 'control';

/** One cold start's figures. */
interface Run {
  run: number;
  kind: Kind;
  /** each node's first 'state change' from init, ms after the spawn */
  fromSpawn: Record<string, number>;
  /** who took the VIP first (null: nobody) */
  first: string | null;
  /** the VIP's first appearance (on `first`), ms after `first`'s own election start (null: never) */
  upOwnMs: number | null;
  /** at the end: who has the VIP */
  holders: string[];
  /** the first 'state change' from init among the three (epoch ms) */
  firstStart: number;
  /** each node's first 'state change' from init, ms after firstStart */
  starts: Record<string, number>;
  /** the VIP's first appearance, ms after firstStart (null: never) */
  upMs: number | null;
  /**
   * the first holder's commit of the replicated connections, ms as it logged it (0: none): it
   * runs after the transition to master and before the VIP is added (docs/connection-sync.md)
   */
  commitMs: number;
  /**
   * how long the first holder held its preemption for the replicated connections, ms as it logged
   * it from its connection sync's start (0: no such line): a starting node preempts only after
   * it (docs/connection-sync.md), as after its first verdicts (SETTLE_MS)
   */
  syncHoldMs: number;
  /** every move after the first holder's: other nodes that became master or had the VIP, the first holder leaving master (ms after firstStart) */
  extra: string[];
  /**
   * per node that is Backup at the end: the longest time between two adverts of the master as its
   * election thread handled them (/status timing.receiveGapMaxMs), ms, and its Master_Down_Interval
   */
  gaps: Record<string, { gapMs: number; mdiMs: number; rescued: number }>;
}

/**
 * No Backup's election thread was held for its Master_Down_Interval: the longest time between
 * two adverts as it handled them stayed below it (RFC 9568 §6.4.2: a thread held that long would
 * have taken over from a live master, but for the read of the socket before a late timer acts).
 */
const heldNever = (r: Run): boolean => Object.values(r.gaps).every((g) => g.gapMs < g.mdiMs);

/** A run's election starts, holders at the end and extra moves, for its report line. */
const startsAndMoves = (r: Run): string =>
  `election starts after the spawn ${Object.entries(r.fromSpawn)
    .map(([n, s]) => `${n} +${s}`)
    .join(', ')} ms; holders at the end: ${r.holders.join(', ') || 'none'}${r.extra.length ? `; extra move: ${r.extra.join('; ')}` : ''}; ` +
  `Backups' longest advert gap ${Object.entries(r.gaps)
    .map(([n, g]) => `${n} ${g.gapMs} ms (Master_Down_Interval ${g.mdiMs.toFixed(0)}, rescued ${g.rescued})`)
    .join(', ')}`;

describe.skipIf(needs('root'))('cold start of three agents, with discovery and without (root; skipped otherwise)', () => {
  let lab: Lab;
  /** per kind, per node */
  const configs = new Map<Kind, string[]>();
  /** per node: the kernel's address events on eth0, each with when the test read it */
  const events = new Map<string, { at: number; line: string }[]>();
  const monitors: LabProcess[] = [];
  const running: LabProcess[] = [];
  const runs: Run[] = [];
  const mdi = masterDownIntervalMs(PRIORITIES[0], ADVERT_MS / 10);
  /** the slowest Backup's own timer: a late start of n1 would let it fire */
  const mdiLowest = masterDownIntervalMs(PRIORITIES[2], ADVERT_MS / 10);

  const settings = async (i: number, kind: Kind): Promise<AgentSettings> => {
    const node = lab.nodes[i]!;
    const apiserver = {
      port: 6443,
      backends: lab.nodes.map((n) => `${n.ipv4}:6443`),
      health: { caFile: lab.ca.certFile, interval: '200ms', timeout: '200ms', rise: 2, fall: 2 },
    };
    return {
      priority: kind === 'equal' ? EQUAL_PRIORITY : PRIORITIES[i]!,
      advertisementInterval: `${ADVERT_MS}ms`,
      extra: withDiscovery(kind)
        ? {
            apiserver,
            discovery: { kubeconfig: await lab.writeKubeconfig(node, { token: TOKEN }), lastKnownFile: join(lab.dir, `${node.name}-backends.json`) },
          }
        : { apiserver },
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
    for (const kind of KINDS) {
      const paths: string[] = [];
      for (let i = 0; i < 3; i++) {
        const path = join(lab.dir, `${lab.nodes[i]!.name}-ballast-${kind}.yaml`);
        writeFileSync(path, agentConfig(lab, lab.nodes[i]!, await settings(i, kind)));
        paths.push(path);
      }
      configs.set(kind, paths);
    }
    for (const n of lab.nodes) await monitor(n);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(running.map((p) => p.stop('SIGTERM', 5000).catch(() => undefined)));
    await Promise.all(monitors.map((p) => p.stop('SIGTERM', 2000).catch(() => undefined)));
    for (const kind of KINDS) {
      const mine = runs.filter((r) => r.kind === kind);
      if (mine.length === 0) continue;
      const ups = mine.map((r) => r.upMs ?? Number.POSITIVE_INFINITY);
      const spreads = mine.map((r) => Math.max(...Object.values(r.starts)));
      console.log(
        `[coldstart] ${mine.length} cold starts ${kind}: VIP up after the first election start min ${Math.min(...ups)} / median ${median(ups)} / max ${Math.max(...ups)} ms; ` +
          `election starts spread median ${median(spreads)} / max ${Math.max(...spreads)} ms; runs with an extra move: ${mine.filter((r) => r.extra.length > 0).length}`,
      );
    }
    await lab?.teardown();
  });

  /**
   * Spawns the three at once, waits until the elections and discovery have settled, stops them;
   * returns the run's figures. `expected`: the node that must take the VIP (the highest
   * priority); without one, whoever takes it first.
   */
  async function coldStart(run: number, kind: Kind): Promise<Run> {
    const discovery = withDiscovery(kind);
    const expected = kind === 'equal' ? null : lab.nodes[0]!;
    const spawnedAt = Date.now();
    const procs = lab.nodes.map((n, i) =>
      lab.spawn(n.netns, [process.execPath, cliPath(), 'run', '--config', configs.get(kind)![i]!], {
        logFile: `${n.name}-run${run}-${kind}.log`,
      }),
    );
    running.push(...procs);
    try {
      const exited = procs.map(() => false);
      procs.forEach((p, i) => void p.exited.then(() => (exited[i] = true)));
      const alive = (): void => {
        const i = exited.indexOf(true);
        if (i >= 0) throw new Error(`the agent on n${i + 1} exited during the cold start:\n${procs[i]!.output().slice(-4000)}`);
      };
      // every election started, the expected node (any, for equal priorities) holds the VIP, and
      // every agent's discovery lists the slices (its first list, TLS and informer run on the
      // same thread as the election)
      const listing = (p: LabProcess): boolean =>
        !discovery || linesOf(p).some((l) => l.msg === 'discovery: listing and watching the kubernetes EndpointSlices');
      await waitFor(
        async () => {
          alive();
          return (
            procs.every((p) => linesOf(p).some((l) => l.msg === 'state change' && l.from === 'init')) &&
            (expected ? [expected] : lab.nodes).some((n) => vipAdded(n, spawnedAt).length > 0) &&
            procs.every(listing)
          );
        },
        (ok) => ok,
        {
          timeoutMs: 20_000,
          intervalMs: 50,
          what: `three elections started, the VIP on ${expected?.name ?? 'a node'}${discovery ? ', discovery listing on every node' : ''}`,
        },
      );
      // long enough for the slowest Backup's timer to fire had n1's adverts not reached it
      await sleep(mdiLowest + MARGIN_MS);
      alive();
      const observedUntil = Date.now();
      const starts = procs.map((p) => timeOf(linesOf(p).find((l) => l.msg === 'state change' && l.from === 'init')!));
      const firstStart = Math.min(...starts);
      // the node that must hold the VIP: the expected one, or the first to have it
      const firstAdd = (i: number): number => vipAdded(lab.nodes[i]!, spawnedAt)[0] ?? Number.POSITIVE_INFINITY;
      const k = expected ? 0 : [0, 1, 2].reduce((a, b) => (firstAdd(b) < firstAdd(a) ? b : a));
      const up = Number.isFinite(firstAdd(k)) ? firstAdd(k) : undefined;
      const extra: string[] = [];
      procs.forEach((p, i) => {
        if (i === k) return;
        const name = lab.nodes[i]!.name;
        for (const l of linesOf(p))
          if (l.msg === 'state change' && l.to === 'master' && timeOf(l) <= observedUntil)
            extra.push(`${name} master at +${timeOf(l) - firstStart} ms (${String(l.reason)})`);
        for (const at of vipAdded(lab.nodes[i]!, spawnedAt)) if (at <= observedUntil) extra.push(`${name} had the VIP at +${at - firstStart} ms`);
      });
      for (const l of linesOf(procs[k]!))
        if (l.msg === 'state change' && l.from === 'master' && timeOf(l) <= observedUntil)
          extra.push(`${lab.nodes[k]!.name} left master at +${timeOf(l) - firstStart} ms (${String(l.reason)})`);
      const holders = (await lab.holders(lab.vip4)).map((n) => n.name);
      const gaps: Run['gaps'] = {};
      for (const [i, p] of procs.entries()) {
        const st = await new LabAgent(lab, lab.nodes[i]!, p, configs.get(kind)![i]!).status();
        if (st.state === 'backup')
          gaps[lab.nodes[i]!.name] = {
            gapMs: Math.round(st.timing?.receiveGapMaxMs ?? Infinity),
            mdiMs: st.masterDownIntervalMs,
            rescued: st.timing?.rescued ?? 0,
          };
      }
      const commit = linesOf(procs[k]!).find((l) => /^connection sync: .*commit/.test(String(l.msg)) && typeof l.durationMs === 'number');
      const held = linesOf(procs[k]!).find(
        (l) => l.msg === 'connection sync: preemption no longer held for the replicated state' && typeof l.waitedMs === 'number',
      );
      return {
        commitMs: Math.ceil(Number(commit?.durationMs ?? 0)),
        syncHoldMs: Math.ceil(Number(held?.waitedMs ?? 0)),
        run,
        kind,
        fromSpawn: Object.fromEntries(starts.map((s, i) => [lab.nodes[i]!.name, s - spawnedAt])),
        first: up === undefined ? null : lab.nodes[k]!.name,
        upOwnMs: up === undefined ? null : up - starts[k]!,
        holders,
        firstStart,
        starts: Object.fromEntries(starts.map((s, i) => [lab.nodes[i]!.name, s - firstStart])),
        upMs: up === undefined ? null : up - firstStart,
        extra,
        gaps,
      };
    } finally {
      // the Backups first (no priority-0 advert reaches a Backup that could take over), then n1
      await Promise.all(procs.slice(1).map((p) => p.stop('SIGTERM', 5000)));
      await procs[0]!.stop('SIGTERM', 5000);
      for (const p of procs) running.splice(running.indexOf(p), 1);
    }
  }

  it(
    `the VIP on the highest priority within Master_Down_Interval + ${MARGIN_MS} ms of its own election start, with discovery as without (${RUNS} + ${RUNS} runs)`,
    async () => {
      const failures: string[] = [];
      for (let run = 1; run <= RUNS; run++) {
        for (const kind of ['discovery', 'control'] as const) {
          const r = await coldStart(run, kind);
          runs.push(r);
          // after a lower priority's takeover n1 preempts once both its holds have ended: its first
          // verdicts (at most SETTLE_MS) and the replicated state (as long as it logged)
          const bound = mdi + MARGIN_MS + r.commitMs + (r.extra.length > 0 ? Math.max(SETTLE_MS, r.syncHoldMs) : 0);
          const ok = r.upOwnMs !== null && r.upOwnMs >= 0 && r.upOwnMs <= bound && r.holders.join() === 'n1' && heldNever(r);
          const line =
            `run ${run} ${kind}: VIP on n1 +${r.upOwnMs ?? 'never'} ms after its election start (bound ${bound.toFixed(1)} with its commit ${r.commitMs} ms and its hold for the replicated state ${r.syncHoldMs} ms; +${r.upMs ?? 'never'} after the first); ` +
            startsAndMoves(r);
          console.log(`[coldstart] ${line}`);
          if (!ok) failures.push(line);
        }
      }
      expect(
        failures,
        `bound: VIP on n1 within ${(mdi + MARGIN_MS).toFixed(1)} ms + its commit of its own election start (+ the longer of ${SETTLE_MS} ms and its hold for the replicated state after a lower priority's), n1 the only holder at the end, every Backup's advert gap below its Master_Down_Interval`,
      ).toStrictEqual([]);
      const fromSpawn = (kind: Kind): number => median(runs.filter((r) => r.kind === kind).flatMap((r) => Object.values(r.fromSpawn)));
      expect(
        fromSpawn('discovery'),
        `median spawn → election start with discovery, vs the control's ${fromSpawn('control')} ms + ${DISCOVERY_DELAY_MS}`,
      ).toBeLessThanOrEqual(fromSpawn('control') + DISCOVERY_DELAY_MS);
    },
    RUNS * 60_000 + 30_000,
  );

  it(
    `equal priorities (the default), with discovery: the VIP on one node within Master_Down_Interval + ${MARGIN_MS} ms + its commit of the first election start, and it never moves (${RUNS} runs)`,
    async () => {
      // RFC 9568 §6.4.2: a Backup accepts an advert of a priority equal to its own, so the first
      // node whose Master_Down_Timer fires keeps the VIP and the later starters stay Backup
      const mdiEqual = masterDownIntervalMs(EQUAL_PRIORITY, ADVERT_MS / 10);
      const failures: string[] = [];
      for (let run = 1; run <= RUNS; run++) {
        const r = await coldStart(run, 'equal');
        runs.push(r);
        const bound = mdiEqual + MARGIN_MS + r.commitMs;
        const ok =
          r.first !== null && r.upMs !== null && r.upMs >= 0 && r.upMs <= bound && r.extra.length === 0 && r.holders.join() === r.first && heldNever(r);
        const line =
          `run ${run} equal: VIP on ${r.first ?? 'nobody'} +${r.upMs ?? 'never'} ms after the first election start (bound ${bound.toFixed(1)} with its commit ${r.commitMs} ms; +${r.upOwnMs ?? 'never'} after its own); ` +
          startsAndMoves(r);
        console.log(`[coldstart] ${line}`);
        if (!ok) failures.push(line);
      }
      expect(
        failures,
        `bound: the VIP on one node within Master_Down_Interval ${mdiEqual.toFixed(1)} + ${MARGIN_MS} ms + its commit of the first election start, no other master, that node the only holder at the end, every Backup's advert gap below its Master_Down_Interval`,
      ).toStrictEqual([]);
    },
    RUNS * 30_000 + 30_000,
  );
});
