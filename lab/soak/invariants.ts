/**
 * The soak's invariants, checked over a recorded timeline (pure: the runner records, this judges;
 * the unit tests feed it synthetic timelines).
 *
 * (a) at most one node holds the VIP, except while a fault is active or within its convergence
 *     window after the heal (its recovery bound: {@link boundOf}.recoverMs);
 * (b) every failed client request (VIP prober, watch-like connections, the worker's local
 *     endpoint prober) starts inside a window a fault excuses ({@link faultWindows});
 * (c) when no fault is active or recovering, everything is back: the expected node alone holds
 *     the VIP, every agent runs, every control-plane agent has every backend up and its table
 *     present, the worker's local endpoint balances over every backend; a fault whose injection
 *     did not have its effect (a bad reload that was accepted) is recorded here too;
 * (d) no leaks: the periodic leak checks found nothing (addresses, tables, pins, processes), and
 *     each agent's fd count and RSS stay within {@link RESOURCE_BAND} of its baseline (the first
 *     sample at least {@link BASELINE_AFTER_MS} after the agent's (re)start).
 *
 * Consecutive violations of the same kind and subject (samples or failures less than
 * {@link MERGE_GAP_MS} apart) are one violation with a `t` and an `untilMs`.
 */
import { boundOf, derived, faultWindows, type FaultKind, type PlannedFault, type SoakTiming, type Window } from './schedule.js';

/** A fault as injected: the plan plus what really happened (times: ms on the schedule clock). */
export interface InjectedFault extends PlannedFault {
  startMs: number;
  healMs: number;
  /** what the injection did, e.g. "holder", "reload exit 2" */
  note?: string;
  /** set when the fault did not have the effect it must have (a bad reload accepted) */
  failed?: string;
}

/** One failed request of a client. `t` = its start (schedule clock), `ms` = time to the failure. */
export interface ClientFailure {
  t: number;
  ms: number;
  error: string;
}

/** A watch-like connection's event: dropped (closed, or a request on it failed: t = when it was sent) or a failed (re)connect (t = its start). */
export interface WatchEvent {
  t: number;
  kind: 'drop' | 'connect-failed';
  error: string;
  conn: number;
}

/** What one agent reported at a sample. */
export interface AgentView {
  /** the process runs and answered /status */
  up: boolean;
  state?: string;
  /** control plane: backends up / in the config */
  backendsUp?: number;
  backendsTotal?: number;
  /** worker: backends in the local endpoint's map */
  local?: number;
  /** worker: backends held out by flap damping (by design, for a bounded time: not missing) */
  damped?: number;
  /** control plane: `table ip ballast` is in the kernel */
  table?: boolean;
  /** control plane: each backend's state by host:port */
  states?: Record<string, string>;
}

/** The cluster at one moment. */
export interface ClusterSample {
  t: number;
  holders: string[];
  agents: Record<string, AgentView>;
}

/** One agent's resources at one moment. */
export interface ResourceSample {
  t: number;
  node: string;
  pid: number;
  fds: number;
  rssKiB: number;
  /** ms since this agent process started */
  ageMs: number;
}

/** A leak check's finding (an address, table, pin or process that should not be there). */
export interface LeakFinding {
  t: number;
  node: string;
  what: string;
}

/** Everything the invariants look at. */
export interface Timeline {
  timing: SoakTiming;
  controlPlane: string[];
  worker: string;
  /** the node that holds the VIP when all is well (the highest priority) */
  expectedHolder: string;
  /** backends each control-plane agent balances to (and the local endpoint) */
  backends: number;
  /** the end of the recorded run (schedule clock, ms) */
  endMs: number;
  faults: InjectedFault[];
  samples: ClusterSample[];
  vipFailures: ClientFailure[];
  localFailures: ClientFailure[];
  watchEvents: WatchEvent[];
  resources: ResourceSample[];
  leaks: LeakFinding[];
}

/** One violation: which invariant, when (and until when), what, and the faults active then. */
export interface Violation {
  invariant: 'a' | 'b' | 'c' | 'd';
  t: number;
  untilMs: number;
  what: string;
  /** ids of the faults active or recovering at `t` */
  active: number[];
  /** how many samples or failures were merged into this one */
  count: number;
}

/** The band of (d): fds at most baseline + `fds`, RSS at most baseline + `rssMiB`. */
export const RESOURCE_BAND = { fds: 25, rssMiB: 40 } as const;
/** The baseline of (d) is the first sample of an agent process this old (ms). */
export const BASELINE_AFTER_MS = 10_000;
/** Violations of one kind and subject closer than this (ms) are merged. */
export const MERGE_GAP_MS = 1500;

const inAny = (t: number, ws: readonly Window[]): boolean => ws.some(([a, b]) => t >= a && t <= b);

/** The span in which a fault is active or recovering: [start, heal + recovery bound]. */
export function recoverySpan(f: InjectedFault, worker: string, timing: SoakTiming): Window {
  return [f.startMs, f.healMs + boundOf(f.kind, f.target === worker, timing).recoverMs];
}

/**
 * Excuse windows of every fault for the VIP clients and the local client.
 *
 * Two faults compound on the local client: a control-plane fault's local window assumes the
 * worker's agent is there to remove the backend it kills. While the worker's agent is down
 * (SIGKILL / SIGTERM, its pinned programs keep the last backends), that backend stays in the
 * local endpoint until the agent is back (heal + S) and has judged it dead (D): so a local window
 * that overlaps the worker agent's absence extends to that agent's heal + S + D + M.
 */
export function excuseWindows(tl: Pick<Timeline, 'faults' | 'worker' | 'timing'>): { vip: Window[]; local: Window[] } {
  const vip: Window[] = [];
  const local: Window[] = [];
  const { detect } = derived(tl.timing);
  const S = tl.timing.startupMs;
  const M = tl.timing.marginMs;
  const workerAway = tl.faults
    .filter((g) => g.target === tl.worker && (g.kind === 'agent-sigkill' || g.kind === 'agent-sigterm'))
    .map((g): Window => [g.startMs, g.healMs + S]);
  for (const f of tl.faults) {
    const w = faultWindows({ kind: f.kind, target: f.target, startMs: f.startMs, healMs: f.healMs }, f.target === tl.worker, tl.timing);
    vip.push(...w.vip);
    local.push(...w.local);
    if (f.target === tl.worker) continue;
    for (const [a, b] of w.local) {
      for (const [ga, gb] of workerAway) if (a <= gb && ga <= b) local.push([a, gb + detect + M]);
    }
  }
  return { vip, local };
}

/** What is wrong with a sample taken while nothing is active or recovering (empty: healthy). */
export function unhealthy(s: ClusterSample, tl: Pick<Timeline, 'controlPlane' | 'worker' | 'expectedHolder' | 'backends'>): string[] {
  const out: string[] = [];
  if (!(s.holders.length === 1 && s.holders[0] === tl.expectedHolder)) out.push(`VIP held by [${s.holders.join(', ')}], not by ${tl.expectedHolder} alone`);
  for (const n of tl.controlPlane) {
    const a = s.agents[n];
    if (!a?.up) {
      out.push(`${n}: agent not answering`);
      continue;
    }
    if (a.backendsUp !== tl.backends) out.push(`${n}: ${a.backendsUp ?? '?'}/${tl.backends} backends up`);
    if (a.table === false) out.push(`${n}: table ip ballast missing`);
  }
  const w = s.agents[tl.worker];
  if (!w?.up) out.push(`${tl.worker}: agent not answering`);
  else if (w.local === undefined || w.local + (w.damped ?? 0) !== tl.backends)
    out.push(`${tl.worker}: local endpoint has ${w.local ?? '?'}/${tl.backends} backends${w.damped ? ` (${w.damped} damped)` : ''}`);
  return out;
}

/** Checks (a)–(d) over `tl` and returns the violations, ordered by time. Pure. */
export function checkInvariants(tl: Timeline): Violation[] {
  const spans = tl.faults.map((f) => ({ id: f.id, span: recoverySpan(f, tl.worker, tl.timing) }));
  const activeAt = (t: number): number[] => spans.filter((s) => t >= s.span[0] && t <= s.span[1]).map((s) => s.id);
  const out: Violation[] = [];
  const last = new Map<string, Violation>();
  const add = (invariant: Violation['invariant'], key: string, t: number, what: string, until = t): void => {
    const k = `${invariant}|${key}`;
    const prev = last.get(k);
    if (prev && t - prev.untilMs <= MERGE_GAP_MS) {
      prev.untilMs = Math.max(prev.untilMs, until);
      prev.count++;
      return;
    }
    const v: Violation = { invariant, t, untilMs: until, what, active: activeAt(t), count: 1 };
    out.push(v);
    last.set(k, v);
  };

  const samples = [...tl.samples].sort((x, y) => x.t - y.t);
  // (a) and (c)
  for (const s of samples) {
    const quiet = activeAt(s.t).length === 0;
    if (s.holders.length > 1 && quiet) add('a', 'holders', s.t, `${s.holders.length} nodes hold the VIP: ${s.holders.join(', ')}`);
    if (quiet) for (const p of unhealthy(s, tl)) add('c', p.replace(/\d+\/|\[.*\]/g, ''), s.t, `not back after the faults healed: ${p}`);
  }
  for (const f of tl.faults) if (f.failed !== undefined) add('c', `fault ${f.id}`, f.startMs, `fault ${f.id} ${f.kind} on ${f.target}: ${f.failed}`);

  // (b)
  const w = excuseWindows(tl);
  // a watch notices a broken connection at its next request, up to 1.1 intervals later
  const watchWindows: Window[] = w.vip.map(([a, b]) => [a, b + 1.1 * tl.timing.watchIntervalMs + tl.timing.marginMs]);
  for (const f of [...tl.vipFailures].sort((x, y) => x.t - y.t)) {
    if (!inAny(f.t, w.vip)) add('b', 'vip', f.t, `VIP request failed (${f.error}) outside every fault's bound`, f.t + f.ms);
  }
  for (const f of [...tl.localFailures].sort((x, y) => x.t - y.t)) {
    if (!inAny(f.t, w.local)) add('b', 'local', f.t, `local endpoint request failed (${f.error}) outside every fault's bound`, f.t + f.ms);
  }
  for (const e of [...tl.watchEvents].sort((x, y) => x.t - y.t)) {
    if (!inAny(e.t, watchWindows))
      add('b', `watch ${e.kind}`, e.t, `watch connection ${e.kind === 'drop' ? 'dropped' : 'could not connect'} (${e.error}) outside every fault's bound`);
  }

  // (d)
  for (const l of [...tl.leaks].sort((x, y) => x.t - y.t)) add('d', `${l.node} ${l.what}`, l.t, `leak on ${l.node}: ${l.what}`);
  const base = new Map<string, ResourceSample>();
  for (const r of [...tl.resources].sort((x, y) => x.t - y.t)) {
    const k = `${r.node}/${r.pid}`;
    const b = base.get(k);
    if (b === undefined) {
      if (r.ageMs >= BASELINE_AFTER_MS) base.set(k, r);
      continue;
    }
    if (r.fds > b.fds + RESOURCE_BAND.fds) add('d', `${k} fds`, r.t, `${r.node} agent (pid ${r.pid}): ${r.fds} fds, baseline ${b.fds} + ${RESOURCE_BAND.fds}`);
    if (r.rssKiB > b.rssKiB + RESOURCE_BAND.rssMiB * 1024)
      add(
        'd',
        `${k} rss`,
        r.t,
        `${r.node} agent (pid ${r.pid}): RSS ${(r.rssKiB / 1024).toFixed(1)} MiB, baseline ${(b.rssKiB / 1024).toFixed(1)} + ${RESOURCE_BAND.rssMiB} MiB`,
      );
  }
  return out.sort((x, y) => x.t - y.t || x.invariant.localeCompare(y.invariant));
}

/** A run of consecutive failures: [from, to] (ms), to = the last failure's end. */
export interface Outage {
  from: number;
  to: number;
  ms: number;
  failed: number;
}

/**
 * Groups failures into outages: failures whose starts are less than `gapMs` apart (default
 * 200 ms, 20 probe intervals) are one outage. Pure.
 */
export function outages(fs: readonly ClientFailure[], gapMs = 200): Outage[] {
  const sorted = [...fs].sort((a, b) => a.t - b.t);
  const out: (Outage & { lastStart: number })[] = [];
  for (const f of sorted) {
    const o = out.at(-1);
    if (o && f.t - o.lastStart < gapMs) {
      o.to = Math.max(o.to, f.t + f.ms);
      o.lastStart = f.t;
      o.failed++;
    } else out.push({ from: f.t, to: f.t + f.ms, ms: 0, failed: 1, lastStart: f.t });
  }
  return out.map(({ from, to, failed }) => ({ from, to, ms: Math.round((to - from) * 10) / 10, failed }));
}

/** Per fault kind: how many were injected, the longest VIP / local outage they overlap, the bound. */
export interface KindSummary {
  kind: FaultKind;
  injected: number;
  longestVipOutageMs: number;
  longestLocalOutageMs: number;
  boundMs: number;
  bound: string;
}

/** Faults by kind with the longest outage each overlaps (control-plane bound shown). Pure. */
export function summarizeKinds(tl: Timeline): KindSummary[] {
  const vip = outages(tl.vipFailures);
  const local = outages(tl.localFailures);
  const by = new Map<FaultKind, KindSummary>();
  for (const f of tl.faults) {
    const isWorker = f.target === tl.worker;
    const b = boundOf(f.kind, isWorker, tl.timing);
    const s = by.get(f.kind) ?? { kind: f.kind, injected: 0, longestVipOutageMs: 0, longestLocalOutageMs: 0, boundMs: 0, bound: '' };
    s.injected++;
    if (b.ms >= s.boundMs) {
      s.boundMs = b.ms;
      s.bound = b.name;
    }
    const span = recoverySpan(f, tl.worker, tl.timing);
    const from = span[0] - tl.timing.requestTimeoutMs;
    for (const o of vip) if (o.to >= from && o.from <= span[1]) s.longestVipOutageMs = Math.max(s.longestVipOutageMs, o.ms);
    for (const o of local) if (o.to >= from && o.from <= span[1]) s.longestLocalOutageMs = Math.max(s.longestLocalOutageMs, o.ms);
    by.set(f.kind, s);
  }
  return [...by.values()].sort((a, b) => a.kind.localeCompare(b.kind));
}
