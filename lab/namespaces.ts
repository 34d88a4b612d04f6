/**
 * The lab's namespaces and cgroups on the machine: deleting a namespace (after killing what still
 * runs in it), the lab cgroups, the names a prefix owns, the removal of what a killed run left
 * ({@link cleanupStale}), and the crash safety that tears live labs down on exit and on
 * SIGINT/SIGTERM.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmdirSync, rmSync, statSync } from 'node:fs';
import { rmdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findCgroup2Root } from '../src/dataplane/ebpf.js';
import { ip, isErrno } from './processes.js';
import { sleep } from './wait.js';

export function killNetnsPidsSync(netns: string): number[] {
  const r = spawnSync('ip', ['netns', 'pids', netns], { encoding: 'utf8', timeout: 5000 });
  const pids = (r.stdout ?? '')
    .split(/\s+/)
    .filter(Boolean)
    .map(Number)
    .filter((p) => Number.isInteger(p) && p > 1 && p !== process.pid);
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch (e) {
      if (!isErrno(e, 'ESRCH')) throw e;
    }
  }
  return pids;
}

/** Kills what is left in a namespace, waits (bounded) until it is empty, deletes it. */
export async function removeNetns(netns: string): Promise<void> {
  for (let i = 0; i < 20; i++) {
    if (killNetnsPidsSync(netns).length === 0) break;
    await sleep(25);
  }
  const ino = netnsInode(netns);
  const r = await ip(['netns', 'del', netns], { allowFail: true });
  if (r.code !== 0 && !/No such file|not found/i.test(r.stderr)) {
    throw new Error(`ballast lab: ip netns del ${netns} failed: ${r.stderr.trim()}`);
  }
  if (ino !== null) removeAgentState(ino);
}

/** The inode of a named network namespace (/run/netns/NAME), which agents in it key their state by; null when it is gone. */
function netnsInode(netns: string): number | null {
  try {
    return statSync(join('/run/netns', netns)).ino;
  } catch {
    return null;
  }
}

/**
 * What agents of a removed namespace left in /run/ballast (a killed agent does not clean up): its
 * conntrackd directories and hand-off notes, named after the namespace's inode (src/agent/
 * connection-sync.ts, handoff.ts). The inode is free again once the namespace is gone, and a
 * later namespace with it must not find them.
 */
function removeAgentState(ino: number): void {
  let names: string[];
  try {
    names = readdirSync('/run/ballast');
  } catch {
    return;
  }
  for (const n of names)
    if (n.startsWith(`conntrackd-${ino}-`) || n.startsWith(`handoff-${ino}-`)) rmSync(join('/run/ballast', n), { recursive: true, force: true });
}

export async function listNetns(): Promise<string[]> {
  const r = await ip(['netns', 'list']);
  // lines look like "blab-n1 (id: 3)" or "blab-n1"
  return r.stdout
    .split('\n')
    .map((l) => l.trim().split(/\s+/)[0] ?? '')
    .filter(Boolean);
}

// ---------------------------------------------------------------------------------------------
// cgroups

/** The cgroup-v2 mount point of this machine (/sys/fs/cgroup or, hybrid, /sys/fs/cgroup/unified). */
export function cgroupRoot(): string {
  const root = findCgroup2Root(readFileSync('/proc/self/mountinfo', 'utf8'));
  if (root === undefined) throw new Error('ballast lab: no cgroup v2 hierarchy is mounted');
  return root;
}

export function cgroupPids(dir: string): number[] {
  try {
    return readFileSync(join(dir, 'cgroup.procs'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map(Number)
      .filter((p) => Number.isInteger(p) && p > 1 && p !== process.pid);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return [];
    throw e;
  }
}

/** SIGKILLs every process in a lab cgroup, waits (bounded) until it is empty, removes it. */
export async function removeCgroup(dir: string): Promise<void> {
  for (let i = 0; i < 40; i++) {
    const pids = cgroupPids(dir);
    if (pids.length === 0) break;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch (e) {
        if (!isErrno(e, 'ESRCH')) throw e;
      }
    }
    await sleep(25);
  }
  for (let i = 0; i < 40; i++) {
    try {
      await rmdir(dir);
      return;
    } catch (e) {
      if (isErrno(e, 'ENOENT')) return;
      // EBUSY while the last killed process is still being reaped
      if (!isErrno(e, 'EBUSY')) throw e;
    }
    await sleep(25);
  }
  throw new Error(`ballast lab: cgroup ${dir} could not be removed (still busy)`);
}

export function removeCgroupSync(dir: string): void {
  for (const pid of cgroupPids(dir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
  // the killed processes may still be exiting: a few bounded tries
  for (let i = 0; i < 20; i++) {
    try {
      rmdirSync(dir);
      return;
    } catch (e) {
      if (isErrno(e, 'ENOENT')) return;
      spawnSync('sleep', ['0.05']);
    }
  }
}

const PREFIX_RE = /^[a-z][a-z0-9]{0,4}$/;

export function checkPrefix(prefix: string): void {
  if (!PREFIX_RE.test(prefix)) {
    throw new TypeError(`prefix must match ${PREFIX_RE} (≤ 5 chars: interface names are ≤ 15), got ${JSON.stringify(prefix)}`);
  }
}

const esc = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** namespaces a lab with this prefix makes: `${prefix}-lan`, `${prefix}-c`, `${prefix}-n<k>` */
export const netnsPattern = (prefix: string): RegExp => new RegExp(`^${esc(prefix)}-(lan|c|n\\d+)$`);
/** links a lab with this prefix names: `${prefix}c`, `${prefix}n<k>` */
export const linkPattern = (prefix: string): RegExp => new RegExp(`^${esc(prefix)}(c|n\\d+)$`);
export const dirPrefix = (prefix: string): string => `ballast-lab-${prefix}-`;

/** Whether the lab's files stay after teardown (BALLAST_LAB_KEEP=1). */
export const keep = (): boolean => process.env.BALLAST_LAB_KEEP === '1';

// ---------------------------------------------------------------------------------------------
// crash safety: live labs are torn down synchronously on exit and on SIGINT/SIGTERM

/** The labs of this process not yet torn down (by prefix), with their synchronous teardown. */
export const live = new Map<{ readonly prefix: string }, { teardownSync: () => void; signals: boolean }>();
let hooked = false;

function onProcessExit(): void {
  teardownLive(() => true);
}

function teardownLive(which: (signals: boolean) => boolean): void {
  for (const [lab, l] of [...live]) {
    if (!which(l.signals)) continue;
    try {
      l.teardownSync();
    } catch {
      // best effort while the process dies; cleanupStale covers the rest
    }
    live.delete(lab);
  }
}

function onSignal(signal: NodeJS.Signals): void {
  teardownLive((signals) => signals);
  // a lab whose owner handles the signal (LabOptions.signals: false) is that owner's to tear
  // down; the process then lives on until the owner is done (the exit hook stays)
  if ([...live.values()].some((l) => !l.signals)) return;
  unhook(true);
  // re-raise so the default action (or other listeners) decide what happens next
  process.kill(process.pid, signal);
}

/** Installs the exit and signal handlers once. */
export function hook(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', onProcessExit);
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
}

/** Removes them once no lab is live (`force`: at once). */
export function unhook(force = false): void {
  if (!hooked || (!force && live.size > 0)) return;
  hooked = false;
  process.off('exit', onProcessExit);
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
}

/** What Lab.cleanupStale removed. */
export interface StaleReport {
  netns: string[];
  /** lab cgroups removed (`<cgroup2 root>/${prefix}-n<k>`) */
  cgroups: string[];
  links: string[];
  dirs: string[];
  pids: number[];
}

/**
 * Removes what a crashed earlier run with `prefix` left behind: kills the processes inside
 * its namespaces and deletes them (`${prefix}-lan`, `${prefix}-c`, `${prefix}-n<k>`), deletes
 * links named `${prefix}c` / `${prefix}n<k>` in this namespace, and removes its temp dirs
 * (unless BALLAST_LAB_KEEP=1). Names of other prefixes never match. Refuses a prefix that a
 * live lab in this process uses. Resolves with what it removed.
 */
export async function cleanupStale(prefix: string): Promise<StaleReport> {
  checkPrefix(prefix);
  for (const lab of live.keys()) {
    if (lab.prefix === prefix) throw new Error(`ballast lab: prefix ${prefix} belongs to a live lab in this process`);
  }
  const report: StaleReport = { netns: [], cgroups: [], links: [], dirs: [], pids: [] };
  const nsRe = netnsPattern(prefix);
  for (const ns of (await listNetns()).filter((n) => nsRe.test(n))) {
    report.pids.push(...killNetnsPidsSync(ns));
    await removeNetns(ns);
    report.netns.push(ns);
  }
  const root = findCgroup2Root(readFileSync('/proc/self/mountinfo', 'utf8'));
  if (root !== undefined) {
    const cgRe = new RegExp(`^${esc(prefix)}-n\\d+$`);
    for (const d of readdirSync(root)) {
      if (!cgRe.test(d)) continue;
      const dir = join(root, d);
      report.pids.push(...cgroupPids(dir));
      await removeCgroup(dir);
      report.cgroups.push(dir);
    }
  }
  const linkRe = linkPattern(prefix);
  const links = JSON.parse((await ip(['-j', 'link', 'show'])).stdout) as { ifname?: string }[];
  for (const l of links) {
    if (l.ifname && linkRe.test(l.ifname)) {
      // deleting one veth end removes its peer; the peer may already be gone
      await ip(['link', 'del', 'dev', l.ifname], { allowFail: true });
      report.links.push(l.ifname);
    }
  }
  if (!keep()) {
    const base = tmpdir();
    for (const d of readdirSync(base)) {
      if (d.startsWith(dirPrefix(prefix)) && /^[A-Za-z0-9]{6}$/.test(d.slice(dirPrefix(prefix).length))) {
        rmSync(join(base, d), { recursive: true, force: true });
        report.dirs.push(join(base, d));
      }
    }
  }
  return report;
}
