/**
 * A process tree's memory and CPU from /proc (Linux): what bench/resources.ts and the resources
 * integration test read. The parsers are pure; `treeOf` and `sampleTree` read /proc.
 *
 * Sources: proc(5) — /proc/PID/stat fields 4 (ppid), 14 (utime) and 15 (stime) in clock ticks
 * (the USER_HZ of sysconf(_SC_CLK_TCK), 100 on Linux x86-64 and arm64); /proc/PID/smaps_rollup
 * (Linux ≥ 4.14) "Rss:" and "Pss:" in kB (KiB), summed over every mapping of the process (its
 * threads share it, so a process is counted once, never per thread).
 */
import { readdirSync, readFileSync } from 'node:fs';

/** USER_HZ: the unit of utime/stime in /proc/PID/stat (100 on every Linux architecture Node runs on). */
export const CLOCK_TICKS_PER_S = 100;

/** The fields of /proc/PID/stat that are used: ppid, and the CPU time of all its threads in ticks. */
export interface ProcStat {
  pid: number;
  ppid: number;
  /** user-mode CPU time, clock ticks (CLOCK_TICKS_PER_S) */
  utime: number;
  /** kernel-mode CPU time, clock ticks */
  stime: number;
}

/**
 * Parses one /proc/PID/stat line (pure). The command name (field 2) is in parentheses and may
 * hold spaces and parentheses itself, so the fields are counted after its LAST ")".
 * @throws Error when the line does not have the shape proc(5) gives.
 */
export function parseStat(line: string): ProcStat {
  const close = line.lastIndexOf(')');
  const pid = Number(line.slice(0, line.indexOf(' ')));
  const rest =
    close < 0
      ? []
      : line
          .slice(close + 2)
          .trim()
          .split(/\s+/);
  // rest[0] is field 3 (state): field n is rest[n - 3]
  const ppid = Number(rest[1]);
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  if (!Number.isInteger(pid) || !Number.isInteger(ppid) || !Number.isInteger(utime) || !Number.isInteger(stime) || rest.length < 13) {
    throw new Error(`not a /proc/PID/stat line: ${JSON.stringify(line.slice(0, 80))}`);
  }
  return { pid, ppid, utime, stime };
}

/** Rss and Pss of one process, KiB. */
export interface ProcMemory {
  rssKiB: number;
  pssKiB: number;
}

/**
 * Parses /proc/PID/smaps_rollup (pure): its "Rss:" and "Pss:" lines (kB).
 * @throws Error when either is missing.
 */
export function parseSmapsRollup(text: string): ProcMemory {
  const field = (name: string): number => {
    const m = new RegExp(`^${name}:\\s+(\\d+) kB$`, 'm').exec(text);
    if (!m) throw new Error(`smaps_rollup has no ${name}: line`);
    return Number(m[1]);
  };
  return { rssKiB: field('Rss'), pssKiB: field('Pss') };
}

/**
 * `root` and every descendant of it among `stats` (pure), root first; a pid whose parent is in
 * the tree is in it. Order: breadth-first.
 */
export function descendants(root: number, stats: readonly ProcStat[]): number[] {
  const children = new Map<number, number[]>();
  for (const s of stats) children.set(s.ppid, [...(children.get(s.ppid) ?? []), s.pid]);
  const out = [root];
  for (let i = 0; i < out.length; i++) for (const c of children.get(out[i]!) ?? []) if (!out.includes(c)) out.push(c);
  return out;
}

/**
 * CPU use between two samples as a percentage of one core (pure): 100 × Δ(utime + stime) /
 * (USER_HZ × Δt). A process that is in only one of the samples counts from 0 (started) or is
 * left out (exited: its last ticks are unknown).
 * @param elapsedMs wall time between the samples, ms (> 0).
 */
export function cpuPercent(before: ReadonlyMap<number, number>, after: ReadonlyMap<number, number>, elapsedMs: number): number {
  if (!(elapsedMs > 0)) throw new RangeError(`elapsedMs must be > 0, got ${elapsedMs}`);
  let ticks = 0;
  for (const [pid, t] of after) ticks += t - (before.get(pid) ?? 0);
  return (100 * ticks) / ((CLOCK_TICKS_PER_S * elapsedMs) / 1000);
}

/** Every process's /proc/PID/stat now (those that exit while being read are skipped). */
export function readAllStats(): ProcStat[] {
  const out: ProcStat[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      out.push(parseStat(readFileSync(`/proc/${name}/stat`, 'utf8')));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** One sample of a process tree: the pids, summed Rss/Pss (KiB) and each process's CPU ticks. */
export interface TreeSample {
  at: number;
  pids: number[];
  rssKiB: number;
  pssKiB: number;
  /** utime + stime per pid, clock ticks */
  ticks: Map<number, number>;
}

/**
 * Samples the trees under `roots` (each root and its descendants, children and grandchildren
 * alike): Rss and Pss summed over the processes, CPU ticks per process.
 * @throws Error when a root is not running.
 */
export function sampleTree(roots: readonly number[]): TreeSample {
  const all = readAllStats();
  const pids: number[] = [];
  for (const r of roots) {
    if (!all.some((s) => s.pid === r)) throw new Error(`process ${r} is not running`);
    for (const p of descendants(r, all)) if (!pids.includes(p)) pids.push(p);
  }
  let rssKiB = 0;
  let pssKiB = 0;
  const ticks = new Map<number, number>();
  for (const pid of pids) {
    try {
      const m = parseSmapsRollup(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
      const s = parseStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
      rssKiB += m.rssKiB;
      pssKiB += m.pssKiB;
      ticks.set(pid, s.utime + s.stime);
    } catch {
      // exited between the listing and the read
    }
  }
  return { at: performance.now(), pids, rssKiB, pssKiB, ticks };
}
