/**
 * The chaos soak's fault schedule and the bound of every fault kind (pure: no clock, no I/O).
 *
 * A schedule is a list of fault *groups*: one or several faults that start within
 * {@link GROUP_SPREAD_MS} of each other on distinct targets, then a quiet gap long enough for
 * everything to come back (the largest recovery bound of the group plus 2–4 s), then the next
 * group. The same seed gives the same schedule (pure-rand's xoroshiro128+), so a run that found
 * something is replayed with `--seed`.
 *
 * Kinds are drawn from a bag that holds every kind once and is refilled when empty: every kind
 * comes up within the first |kinds| draws, and the mix stays even over a long run.
 *
 * Bounds are derived from the protocol and the lab's settings (see {@link SoakTiming}):
 * - A: Advertisement_Interval; H: HEAL_ANNOUNCE_MIN_INTERVAL_MS (src/vrrp/state.ts), the winner of a
 *   healed partition claims the VIP again at most this long after its first claim;
 * - MDI: Master_Down_Interval = 3 × Advertisement_Interval + Skew_Time of the lowest-priority
 *   Backup (RFC 9568 §6.1): how long a Backup waits for a silent Active;
 * - Skew_Time of the highest-priority Backup: how long after a priority-0 advert it takes over;
 * - detection D = fall × interval + interval + timeout: an unhealthy backend is out of the pool;
 * - return R = (rise + 1) × interval + timeout: a healthy backend is back in the pool;
 * - start-up S: agent exec to first advert / first programmed table (stated, measured on the lab);
 * - margin M: scheduling on 2 shared cores, the sampler's period; T: the prober's request timeout
 *   (a request started up to T before an edge can fail because of it).
 */
import { uniformInt } from 'pure-rand/distribution/uniformInt';
import { xoroshiro128plus } from 'pure-rand/generator/xoroshiro128plus';
import type { RandomGenerator } from 'pure-rand/types/RandomGenerator';
import { HEAL_ANNOUNCE_MIN_INTERVAL_MS, masterDownIntervalMs, skewTimeMs } from '../../src/vrrp/state.js';

/** Every fault the soak injects. */
export const FAULT_KINDS = [
  'agent-sigkill',
  'agent-sigterm',
  'link-down',
  'packet-loss',
  'vrrp-blocked',
  'apiserver-stop',
  'apiserver-unready',
  'apiserver-slow',
  'clock-step',
  'cpu-hog',
  'main-stall',
  'reload-good',
  'reload-bad',
  'conntrack-flush',
  'nft-flush',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** One planned fault. Times in ms from the start of the schedule. */
export interface PlannedFault {
  /** 1, 2, … in start order */
  id: number;
  /** the group (faults injected together), 1, 2, … */
  group: number;
  kind: FaultKind;
  /** a node name ("n1" … the worker), or "lan" for the segment-wide fault */
  target: string;
  atMs: number;
  /** how long the fault lasts before it is healed (0: an instant fault) */
  durationMs: number;
  /** packet-loss: percent dropped; apiserver-slow: /readyz delay ms; clock-step: the step ("+1h"); main-stall: ms */
  param?: number | string;
}

/** The lab's settings the bounds derive from (times in ms). */
export interface SoakTiming {
  advertIntervalMs: number;
  /** VRRP priority per control-plane node (the highest one is the expected holder) */
  priorities: Record<string, number>;
  health: { intervalMs: number; timeoutMs: number; rise: number; fall: number };
  /** S: agent exec → advertising and programmed (stated bound) */
  startupMs: number;
  /** M */
  marginMs: number;
  /** the local endpoint prober's interval (the VIP prober's is 10 ms) */
  localIntervalMs: number;
  /** T: the VIP and local probers' per-request timeout */
  requestTimeoutMs: number;
  /** the watch-like connections send one request this often (a broken one is noticed at the next) */
  watchIntervalMs: number;
  /** how long the table may be missing after `nft flush ruleset` (the nftwatch contract: 1 s) */
  tableRestoreMs: number;
  /** the main-thread stall the agents' hook blocks for */
  stallMs: number;
}

/**
 * The soak's settings: 100 ms adverts; checks every 500 ms with a 500 ms timeout (rise/fall 2:
 * 200 ms checks time out under the load of the soak itself on 2 shared cores and flap every
 * backend); start-up S = 10 s (exec → answering, advertising and preempting, on the shared
 * 2-core machine at load average ~17 under the soak's own clients: measured 5 s to the first log
 * line and 8 s to preempt; ~1 s when the machine is idle).
 */
export const DEFAULT_TIMING: SoakTiming = {
  advertIntervalMs: 100,
  priorities: { n1: 150, n2: 100, n3: 50 },
  health: { intervalMs: 500, timeoutMs: 500, rise: 2, fall: 2 },
  startupMs: 10_000,
  localIntervalMs: 50,
  marginMs: 500,
  requestTimeoutMs: 1000,
  watchIntervalMs: 3000,
  tableRestoreMs: 1000,
  stallMs: 1000,
};

/**
 * The agents' wall clocks run this many minutes ahead of the machine's (libfaketime offset), so
 * that a step back stays inside the lab certificates' validity (issued when the lab starts,
 * valid 1 day): a step back past a certificate's notBefore would rightly fail every TLS check.
 */
export const CLOCK_BASE_MIN = 120;

/** The faketime offset of a clock step `step` ("+1h", "-10m") from the base (pure). */
export function clockOffset(step: string | number | undefined): string {
  const m = /^([+-])(\d+)([mh])$/.exec(String(step ?? '+0m'));
  if (!m) throw new RangeError(`a clock step is [+-]N(m|h), got ${step}`);
  const delta = Number(m[2]) * (m[3] === 'h' ? 60 : 1) * (m[1] === '-' ? -1 : 1);
  return `+${CLOCK_BASE_MIN + delta}m`;
}

/** Faults of one group start within this many ms of the first. */
export const GROUP_SPREAD_MS = 1500;
/** The schedule starts this long after the soak (the cluster settles, baselines are taken). */
export const WARMUP_MS = 4000;

type TargetClass = 'cp' | 'any' | 'lan';
interface KindSpec {
  targets: TargetClass;
  /** duration range, ms (both ends included); [0, 0] = instant */
  durationMs: [number, number];
  param?: (rng: RandomGenerator) => number | string;
}

const pick = <T>(rng: RandomGenerator, xs: readonly T[]): T => xs[uniformInt(rng, 0, xs.length - 1)]!;

/** What each kind hits, how long it lasts, its parameter. */
export const KIND_SPECS: Record<FaultKind, KindSpec> = {
  'agent-sigkill': { targets: 'any', durationMs: [1000, 4000] },
  'agent-sigterm': { targets: 'any', durationMs: [1000, 4000] },
  'link-down': { targets: 'any', durationMs: [1000, 4000] },
  'packet-loss': { targets: 'any', durationMs: [2000, 6000], param: (r) => pick(r, [5, 10, 20, 30]) },
  'vrrp-blocked': { targets: 'lan', durationMs: [1000, 3000] },
  'apiserver-stop': { targets: 'cp', durationMs: [2000, 5000] },
  'apiserver-unready': { targets: 'cp', durationMs: [2000, 5000] },
  'apiserver-slow': { targets: 'cp', durationMs: [2000, 5000], param: (r) => pick(r, [300, 600, 1000]) },
  // steps within the lab certificates' validity (see CLOCK_BASE_MIN): TLS must still verify
  'clock-step': { targets: 'any', durationMs: [2000, 6000], param: (r) => pick(r, ['+1h', '-1h', '+10m', '-10m']) },
  'cpu-hog': { targets: 'any', durationMs: [2000, 6000] },
  // the stall's length is the agents' hook setting (SoakTiming.stallMs); the fault lasts that long
  'main-stall': { targets: 'any', durationMs: [0, 0] },
  'reload-good': { targets: 'any', durationMs: [1000, 4000] },
  'reload-bad': { targets: 'any', durationMs: [500, 2000] },
  'conntrack-flush': { targets: 'any', durationMs: [0, 0] },
  'nft-flush': { targets: 'cp', durationMs: [0, 0] },
};

/** Options of {@link makeSchedule}. */
export interface ScheduleOptions {
  seed: number;
  /** the whole soak, ms: the last group heals and recovers before it ends */
  durationMs: number;
  /** control-plane node names, e.g. ["n1", "n2", "n3"] */
  controlPlane: readonly string[];
  /** the worker node (node-local endpoint only) */
  worker: string;
  timing: SoakTiming;
  /** faults per group at most (default 2) */
  maxConcurrent?: number;
  /** the kinds to draw from (default all) */
  kinds?: readonly FaultKind[];
}

/**
 * The seeded schedule. Deterministic: the same options give the same list.
 * Guarantees (tested): faults of a group have distinct targets; every fault heals, and its
 * recovery bound passes, before `durationMs`; groups do not overlap, and each quiet gap is at
 * least the group's largest recovery bound + 2 s.
 * @throws RangeError when `durationMs` or `maxConcurrent` is out of range, or `kinds` is empty.
 */
export function makeSchedule(o: ScheduleOptions): PlannedFault[] {
  const maxConcurrent = o.maxConcurrent ?? 2;
  if (!Number.isInteger(maxConcurrent) || maxConcurrent < 1 || maxConcurrent > 4) throw new RangeError(`maxConcurrent must be 1..4, got ${maxConcurrent}`);
  if (!(o.durationMs > 0)) throw new RangeError(`durationMs must be > 0, got ${o.durationMs}`);
  const kinds = [...(o.kinds ?? FAULT_KINDS)];
  if (kinds.length === 0) throw new RangeError('kinds must not be empty');
  const rng = xoroshiro128plus(o.seed | 0);
  const targetsOf = (c: TargetClass): string[] => (c === 'lan' ? ['lan'] : c === 'cp' ? [...o.controlPlane] : [...o.controlPlane, o.worker]);
  let bag: FaultKind[] = [];
  const draw = (): FaultKind => {
    if (bag.length === 0) bag = [...kinds];
    return bag.splice(uniformInt(rng, 0, bag.length - 1), 1)[0]!;
  };
  const out: PlannedFault[] = [];
  let t = WARMUP_MS;
  let group = 0;
  for (;;) {
    // 1 fault (60 %), else 2 … maxConcurrent
    const size = maxConcurrent === 1 || uniformInt(rng, 0, 99) < 60 ? 1 : uniformInt(rng, 2, maxConcurrent);
    const used = new Set<string>();
    const members: Omit<PlannedFault, 'id' | 'group'>[] = [];
    for (let i = 0; i < size; i++) {
      // a kind whose targets are all taken in this group goes back to the bag (bounded tries)
      let kind: FaultKind | undefined;
      for (let tries = 0; tries < kinds.length && kind === undefined; tries++) {
        const k = draw();
        if (targetsOf(KIND_SPECS[k].targets).some((x) => !used.has(x))) kind = k;
        else bag.push(k);
      }
      if (kind === undefined) break;
      const spec = KIND_SPECS[kind];
      const free = targetsOf(spec.targets).filter((x) => !used.has(x));
      const target = pick(rng, free);
      used.add(target);
      const [lo, hi] = spec.durationMs;
      const durationMs = kind === 'main-stall' ? o.timing.stallMs : uniformInt(rng, lo, hi);
      const offset = i === 0 ? 0 : uniformInt(rng, 0, GROUP_SPREAD_MS);
      members.push({ kind, target, atMs: t + offset, durationMs, ...(spec.param ? { param: spec.param(rng) } : {}) });
    }
    const end = Math.max(...members.map((m) => m.atMs + m.durationMs + recoverMs(m.kind, o.timing)));
    const quiet = uniformInt(rng, 2000, 4000);
    if (end + 2000 > o.durationMs) break;
    group++;
    members.sort((a, b) => a.atMs - b.atMs);
    for (const m of members) out.push({ id: out.length + 1, group, ...m });
    t = end + quiet;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// bounds

/** A window in which failures are excused: [from, to], ms on the schedule's clock. */
export type Window = [number, number];

/** Which clients a fault may disturb, and for how long (ms) after which edge. */
export interface FaultBound {
  /** the bound's formula with its value, e.g. "MDI + M = 881 ms" */
  name: string;
  /** the headline value (ms): the longest failure window this kind allows */
  ms: number;
  /** VIP clients (prober, watches): ms after the start and after the heal, or 'whole' (the fault's duration + heal) */
  vip: { start?: number; heal?: number; whole?: number };
  /** the worker's local endpoint client */
  local: { start?: number; heal?: number; whole?: number };
  /** after the heal, by when (ms) everything is back: one holder, backends up, tables, local endpoint */
  recoverMs: number;
}

/** The derived quantities (ms), for the report. */
export function derived(t: SoakTiming): { mdi: number; skew: number; detect: number; back: number } {
  const prios = Object.values(t.priorities).sort((a, b) => b - a);
  const cs = t.advertIntervalMs / 10;
  const h = t.health;
  return {
    // the slowest Backup (lowest priority) decides when the group has an Active again
    mdi: Math.ceil(masterDownIntervalMs(prios.at(-1)!, cs)),
    // the takeover after a priority-0 advert: the best Backup's Skew_Time (RFC 9568 §6.4.2 / §6.4.3)
    skew: Math.ceil(skewTimeMs(prios[1] ?? prios[0]!, cs)),
    detect: h.fall * h.intervalMs + h.intervalMs + h.timeoutMs,
    back: (h.rise + 1) * h.intervalMs + h.timeoutMs,
  };
}

/**
 * The named bound of a fault of `kind` on `target` (`worker`: whether it is the worker node).
 * Pure. Every number comes from {@link derived} and the stated start-up bound and margin.
 */
export function boundOf(kind: FaultKind, worker: boolean, t: SoakTiming): FaultBound {
  const { mdi, skew, detect, back } = derived(t);
  const S = t.startupMs;
  const M = t.marginMs;
  const restart = S + mdi + back + M;
  const none = {};
  switch (kind) {
    case 'agent-sigkill':
      // the Active falls silent: a Backup takes over after MDI; at restart the node preempts
      return worker
        ? { name: `local: none while down (pins kept); restart S + M = ${S + M} ms`, ms: S + M, vip: none, local: { heal: S + M }, recoverMs: restart }
        : {
            name: `MDI + M = ${mdi + M} ms; restart S + MDI + M = ${S + mdi + M} ms`,
            ms: S + mdi + M,
            vip: { start: mdi + M, heal: S + mdi + M },
            local: none,
            recoverMs: restart,
          };
    case 'agent-sigterm':
      // priority 0: the best Backup takes over after its Skew_Time (the agent's own stop first)
      return worker
        ? { name: `local: none (keepOnStop: localEndpoint); restart S + M = ${S + M} ms`, ms: S + M, vip: none, local: { heal: S + M }, recoverMs: restart }
        : {
            name: `Skew_Time + M = ${skew + M} ms; restart S + MDI + M = ${S + mdi + M} ms`,
            ms: S + mdi + M,
            vip: { start: skew + M, heal: S + mdi + M },
            local: none,
            recoverMs: restart,
          };
    case 'link-down':
      // a silent node: its Backups take over after MDI, its backend is dead after D; at heal it
      // comes back as Backup, its priority lowered until `rise` checks pass, then preempts
      return worker
        ? { name: `local: whole fault + R + M = +${back + M} ms`, ms: back + M, vip: none, local: { whole: back + M }, recoverMs: back + M }
        : {
            name: `max(MDI, D) + M = ${Math.max(mdi, detect) + M} ms; heal MDI + R + M = ${mdi + back + M} ms`,
            ms: Math.max(mdi, detect, mdi + back) + M,
            vip: { start: Math.max(mdi, detect) + M, heal: mdi + back + M },
            local: { start: detect + M },
            recoverMs: mdi + 2 * back + M,
          };
    case 'packet-loss':
      // lost SYNs and segments fail requests for as long as it lasts (TCP's first RTO is 1 s);
      // adverts lost 3 in a row make a Backup take over: MDI after the heal it has settled
      return {
        name: `whole fault + MDI + D + M = +${mdi + detect + M} ms`,
        ms: mdi + detect + M,
        vip: worker ? none : { whole: mdi + detect + M },
        local: { whole: mdi + detect + M },
        recoverMs: mdi + detect + back + M,
      };
    case 'vrrp-blocked': {
      // every Backup becomes Active after MDI (split brain, excused); at heal the lower ones yield.
      // Clients follow the last gratuitous ARP: the winner claims on the first lower-priority
      // advert it hears (within one Advertisement_Interval A of the heal) and, when another comes
      // within HEAL_ANNOUNCE_MIN_INTERVAL_MS H (a middle router's claim, then its yield), once more
      // at the end of H: clients of a yielded router are back on the winner by heal + A + H
      const A = t.advertIntervalMs;
      const H = HEAL_ANNOUNCE_MIN_INTERVAL_MS;
      const heal = Math.max(mdi, A + H) + M;
      return {
        name: `MDI + M = ${mdi + M} ms after start; max(MDI, A + H) + M = ${heal} ms after heal`,
        ms: heal,
        vip: { start: mdi + M, heal },
        local: none,
        recoverMs: heal,
      };
    }
    case 'apiserver-stop':
      // refused / reset: out of the pool after D at the latest (passive detection is faster)
      return { name: `D + M = ${detect + M} ms`, ms: detect + M, vip: { start: detect + M }, local: { start: detect + M }, recoverMs: back + M };
    case 'apiserver-unready':
      // unready but alive: no new connections after D, established ones drain: nothing fails
      return { name: 'none (drains; /version still served)', ms: 0, vip: none, local: none, recoverMs: back + M };
    case 'apiserver-slow':
      // /readyz slower than the timeout: judged down after D (a timeout counts as silent: its flows may be reset)
      return { name: `D + M = ${detect + M} ms`, ms: detect + M, vip: { start: detect + M }, local: { start: detect + M }, recoverMs: back + M };
    case 'clock-step':
      return { name: 'none (timers are monotonic)', ms: 0, vip: none, local: none, recoverMs: M };
    case 'cpu-hog':
      return {
        name: 'none (the advert pacer sends while the election thread waits; a late Backup reads its socket first)',
        ms: 0,
        vip: none,
        local: none,
        recoverMs: back + M,
      };
    case 'main-stall':
      // the stall (SoakTiming.stallMs, 1 s) is shorter than the pacer's hold (engine.ts PACER_HOLD_MS, 2 s)
      return { name: 'none (the advert pacer covers a stall shorter than its hold; kernel data plane)', ms: 0, vip: none, local: none, recoverMs: back + M };
    case 'reload-good':
      return { name: 'none (a reload applies only its difference)', ms: 0, vip: none, local: none, recoverMs: back + M };
    case 'reload-bad':
      return { name: 'none (refused, nothing changed)', ms: 0, vip: none, local: none, recoverMs: M };
    case 'conntrack-flush':
      // flows of the node lose their NAT binding: those in flight fail, the next ones are new
      return {
        name: `T + M = ${t.requestTimeoutMs + M} ms`,
        ms: t.requestTimeoutMs + M,
        vip: worker ? none : { start: t.requestTimeoutMs + M },
        local: none,
        recoverMs: M,
      };
    case 'nft-flush':
      // the NAT bindings of established flows are applied by the nat hooks, which exist only
      // while a nat chain does: until the table is back (nftwatch: within 1 s) a DNATed flow's
      // next segment reaches the holder unmapped and is reset (checked: a DNATed echo
      // connection is reset right after `nft flush ruleset`; new connections reach the holder's
      // own apiserver). Not "none": the table gone is what fails them.
      return {
        name: `table back within ${t.tableRestoreMs} ms + M = ${t.tableRestoreMs + M} ms`,
        ms: t.tableRestoreMs + M,
        vip: { start: t.tableRestoreMs + M },
        local: none,
        recoverMs: t.tableRestoreMs + M,
      };
  }
}

/** Recovery bound of a kind (the largest over worker / control plane), ms after the heal. */
export function recoverMs(kind: FaultKind, t: SoakTiming): number {
  return Math.max(boundOf(kind, false, t).recoverMs, boundOf(kind, true, t).recoverMs);
}

/**
 * The windows (ms, schedule clock) in which a fault excuses failures of the VIP clients and of
 * the local client. A request started up to T before an edge may fail because of it.
 */
export function faultWindows(
  f: { kind: FaultKind; target: string; startMs: number; healMs: number },
  worker: boolean,
  t: SoakTiming,
): { vip: Window[]; local: Window[] } {
  const b = boundOf(f.kind, worker, t);
  const T = t.requestTimeoutMs;
  const of = (s: { start?: number; heal?: number; whole?: number }): Window[] => {
    const w: Window[] = [];
    if (s.whole !== undefined) w.push([f.startMs - T, f.healMs + s.whole]);
    if (s.start !== undefined) w.push([f.startMs - T, f.startMs + s.start]);
    if (s.heal !== undefined) w.push([f.healMs - T, f.healMs + s.heal]);
    return w;
  };
  return { vip: of(b.vip), local: of(b.local) };
}
