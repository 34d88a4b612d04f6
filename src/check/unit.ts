/**
 * What the agent meets under its systemd unit, for `ballast check` run from a shell: the probes
 * (the eBPF attach, SCHED_FIFO) answer for the process that runs them, and an operator's root
 * shell is allowed what ballast.service's sandbox forbids. So the check reads the unit as
 * systemd would assemble it and judges the options that decide those two things:
 *
 *   bpffs writes (the eBPF pins)      ProtectKernelTunables= (a read-only /sys), ReadWritePaths=,
 *                                     ReadOnlyPaths=, InaccessiblePaths=; CapabilityBoundingSet=
 *                                     (CAP_BPF or CAP_SYS_ADMIN, and CAP_NET_ADMIN)
 *   vrrp.realtimePriority (SCHED_FIFO) RestrictRealtime= (a seccomp filter on it),
 *                                     CapabilityBoundingSet= (CAP_SYS_NICE), LimitRTPRIO=
 *
 * The unit: the first `ballast.service` of the search path (systemd.unit(5): /etc/systemd/system,
 * /run/systemd/system, /usr/local/lib/systemd/system, /usr/lib/systemd/system,
 * /lib/systemd/system; $SYSTEMD_UNIT_PATH replaces it, as it does for systemd, an empty last
 * component appending the defaults), then its drop-ins `ballast.service.d/*.conf` of every
 * directory, by file name (a name in an earlier directory hides the same name later), in order.
 * Only the [Service] section's assignments count; an empty assignment resets a list.
 *
 * Where it cannot tell, it says so: ProtectKernelTunables=yes with ReadWritePaths=/sys/fs/bpf has
 * been seen to leave bpffs read-only (systemd 252 and 257), so that is "cannot tell", not ok —
 * unless the unit runs: then its process's mountinfo says what it met ({@link runningUnitBpffs}).
 * When the check itself runs under the unit (its cgroup is ballast.service's) the probes are the
 * truth and the unit is not read.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The unit ballast is installed as. */
export const UNIT_NAME = 'ballast.service';

/** systemd's unit search path for the system manager (systemd.unit(5)), highest precedence first. */
export const DEFAULT_UNIT_DIRS: readonly string[] = [
  '/etc/systemd/system',
  '/run/systemd/system',
  '/usr/local/lib/systemd/system',
  '/usr/lib/systemd/system',
  '/lib/systemd/system',
];

/** The directories searched: `$SYSTEMD_UNIT_PATH` (colon-separated; an empty last entry appends the defaults) or the defaults. */
export function unitDirs(env: NodeJS.ProcessEnv = process.env): string[] {
  const p = env.SYSTEMD_UNIT_PATH;
  if (p === undefined || p === '') return [...DEFAULT_UNIT_DIRS];
  const parts = p.split(':');
  const appendDefaults = parts.at(-1) === '';
  return [...parts.filter((d) => d !== ''), ...(appendDefaults ? DEFAULT_UNIT_DIRS : [])];
}

/** The files systemd would read for `name`: the unit and its drop-ins, in the order they apply. */
export interface UnitFiles {
  /** The unit file, or null when no directory has one (not installed). */
  main: string | null;
  /** Drop-ins (`<name>.d/*.conf`), sorted by file name. */
  dropIns: string[];
}

/** Finds the unit and its drop-ins in `dirs` (see the file comment). Never throws: an unreadable directory holds nothing. */
export function findUnit(dirs: readonly string[], name = UNIT_NAME): UnitFiles {
  const main = dirs.map((d) => join(d, name)).find((f) => existsSync(f)) ?? null;
  const byName = new Map<string, string>();
  for (const d of dirs) {
    let entries: string[];
    try {
      entries = readdirSync(join(d, `${name}.d`));
    } catch {
      continue;
    }
    for (const e of entries) if (e.endsWith('.conf') && !byName.has(e)) byName.set(e, join(d, `${name}.d`, e));
  }
  const dropIns = [...byName.keys()].sort().map((k) => byName.get(k)!);
  return { main, dropIns };
}

/** One `Key=value` of a [Service] section, with the file it came from. */
export interface Assignment {
  key: string;
  value: string;
  file: string;
}

/**
 * The [Service] assignments of one unit file's text, in order (systemd.syntax(7): `#` and `;`
 * comment lines, a trailing backslash continues the line, whitespace around `=` and the value
 * trimmed).
 */
export function serviceAssignments(text: string, file: string): Assignment[] {
  const out: Assignment[] = [];
  let section = '';
  const lines = text.replace(/\\\r?\n/g, ' ').split(/\r?\n/);
  for (const raw of lines) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const s = /^\[(.+)\]$/.exec(line);
    if (s) {
      section = s[1]!;
      continue;
    }
    const eq = line.indexOf('=');
    if (section !== 'Service' || eq < 0) continue;
    out.push({ key: line.slice(0, eq).trim(), value: line.slice(eq + 1).trim(), file });
  }
  return out;
}

/** What the sandbox options decide, merged over every file (last assignment wins; lists append, `` resets). */
export interface Sandbox {
  /** The files read, in order. */
  files: string[];
  protectKernelTunables: boolean;
  readWritePaths: string[];
  readOnlyPaths: string[];
  inaccessiblePaths: string[];
  /** Whether a capability stays in the bounding set (CapabilityBoundingSet=; not set: every one). */
  hasCapability(cap: string): boolean;
  restrictRealtime: boolean;
  /** LimitRTPRIO= (soft limit), or null when not set. */
  limitRtprio: number | null;
}

const YES = /^(1|yes|true|on)$/i;

/** The sandbox of `assignments` (see {@link Sandbox}). Pure. */
export function sandboxOf(assignments: readonly Assignment[]): Sandbox {
  const files = [...new Set(assignments.map((a) => a.file))];
  let pkt = false;
  let rr = false;
  let rtprio: number | null = null;
  const lists: Record<'ReadWritePaths' | 'ReadOnlyPaths' | 'InaccessiblePaths', string[]> = { ReadWritePaths: [], ReadOnlyPaths: [], InaccessiblePaths: [] };
  // CapabilityBoundingSet=: lines OR'd; `~` lines remove (AND of the inverse); `` resets to none
  let allowed: Set<string> | null = null;
  const removed = new Set<string>();
  for (const { key, value } of assignments) {
    if (key === 'ProtectKernelTunables') pkt = YES.test(value);
    else if (key === 'RestrictRealtime') rr = YES.test(value);
    else if (key === 'LimitRTPRIO') rtprio = value === '' || /^infinity$/i.test(value) ? (value === '' ? null : 99) : Number(value.split(':')[0]);
    else if (key === 'ReadWritePaths' || key === 'ReadOnlyPaths' || key === 'InaccessiblePaths') {
      // a leading `-` (ignore a missing path) or `+` (relative to the root directory) is not part of the path
      if (value === '') lists[key] = [];
      else lists[key].push(...value.split(/\s+/).map((p) => p.replace(/^[-+]+/, '')));
    } else if (key === 'CapabilityBoundingSet') {
      if (value === '') {
        allowed = new Set();
        removed.clear();
      } else if (value.startsWith('~')) {
        for (const c of value.slice(1).trim().split(/\s+/)) removed.add(c.toUpperCase());
      } else {
        allowed ??= new Set();
        for (const c of value.split(/\s+/)) {
          allowed.add(c.toUpperCase());
          removed.delete(c.toUpperCase());
        }
      }
    }
  }
  const caps = allowed;
  return {
    files,
    protectKernelTunables: pkt,
    readWritePaths: lists.ReadWritePaths,
    readOnlyPaths: lists.ReadOnlyPaths,
    inaccessiblePaths: lists.InaccessiblePaths,
    hasCapability: (cap) => (caps === null || caps.has(cap)) && !removed.has(cap),
    restrictRealtime: rr,
    limitRtprio: rtprio !== null && Number.isFinite(rtprio) ? rtprio : null,
  };
}

/** Reads and merges the unit `files` ({@link findUnit}). @returns null when it is not installed (or unreadable). */
export function readSandbox(files: UnitFiles): Sandbox | null {
  if (files.main === null) return null;
  const all: Assignment[] = [];
  for (const f of [files.main, ...files.dropIns]) {
    try {
      all.push(...serviceAssignments(readFileSync(f, 'utf8'), f));
    } catch {
      if (f === files.main) return null;
    }
  }
  return sandboxOf(all);
}

/** Whether `path` is `dir` or below it. */
function under(path: string, dir: string): boolean {
  const d = dir.replace(/\/+$/, '') || '/';
  return path === d || path.startsWith(d === '/' ? '/' : `${d}/`);
}

/** A verdict on one thing under the unit: what it will meet, or that it cannot tell, and the drop-in that fixes it. */
export interface UnitVerdict {
  status: 'ok' | 'warn' | 'fail';
  detail: string;
  /** The fix (warn, fail). */
  fix?: string;
  /** False when the options alone cannot tell (what the running unit shows may: {@link runningUnitBpffs}). */
  known: boolean;
}

const BPFFS = '/sys/fs/bpf';

/** The drop-in line for a fix. */
const EDIT = '`systemctl edit ballast` and add under [Service]:';

/**
 * Can the eBPF local endpoint write its pins (bpffs) and load programs under the unit? `warn`
 * (the agent falls back to the proxy, as the `ebpf` check's own warn) both when it certainly
 * cannot ("under ballast.service it cannot: …") and when it cannot tell ("cannot tell from here"). Pure.
 */
export function ebpfUnderUnit(s: Sandbox): UnitVerdict {
  const problems: string[] = [];
  const fixes: string[] = [];
  const missing = ['CAP_NET_ADMIN', ...(s.hasCapability('CAP_BPF') || s.hasCapability('CAP_SYS_ADMIN') ? [] : ['CAP_BPF'])].filter((c) => !s.hasCapability(c));
  if (missing.length > 0) {
    problems.push(`CapabilityBoundingSet= leaves out ${missing.join(' and ')}: the kernel refuses the BPF programs (EPERM)`);
    fixes.push(`CapabilityBoundingSet=${missing.join(' ')}`);
  }
  const hidden = s.inaccessiblePaths.find((p) => under(BPFFS, p));
  if (hidden) {
    problems.push(`InaccessiblePaths=${hidden} hides bpffs`);
    fixes.push('InaccessiblePaths= without /sys/fs/bpf');
  }
  const writable = s.readWritePaths.some((p) => under(BPFFS, p));
  const ro = s.readOnlyPaths.find((p) => under(BPFFS, p) && !s.readWritePaths.some((w) => under(w, p) && under(BPFFS, w) && w.length > p.length));
  if (ro) {
    problems.push(`ReadOnlyPaths=${ro} makes bpffs read-only (mkdir of the pin directory: EROFS)`);
    fixes.push('ReadOnlyPaths= without it');
  }
  if (s.protectKernelTunables && !writable) {
    problems.push(
      'ProtectKernelTunables=yes makes /sys, bpffs included, read-only and no ReadWritePaths= lists /sys/fs/bpf (mkdir of the pin directory: EROFS)',
    );
    fixes.push('ProtectKernelTunables=no', 'ReadWritePaths=/sys/fs/bpf');
  }
  if (problems.length > 0) {
    return {
      status: 'warn',
      known: true,
      detail: `under ${UNIT_NAME} it cannot: ${problems.join('; ')}; the agent falls back to the user-space proxy`,
      fix: `${EDIT} ${fixes.join(' and ')}, then \`systemctl restart ballast\``,
    };
  }
  if (s.protectKernelTunables) {
    return {
      status: 'warn',
      known: false,
      detail: `cannot tell from here whether bpffs is writable under ${UNIT_NAME}: it has ProtectKernelTunables=yes and ReadWritePaths=/sys/fs/bpf, which was seen to leave bpffs read-only (EROFS; systemd 252 and 257); the agent then falls back to the user-space proxy`,
      fix: `${EDIT} ProtectKernelTunables=no (ReadWritePaths=/sys/fs/bpf stays), then \`systemctl restart ballast\`; \`journalctl -u ballast -p warning\` shows the fallback if it happens`,
    };
  }
  return {
    status: 'ok',
    known: true,
    detail: `${UNIT_NAME} allows it: ProtectKernelTunables= off, bpffs not read-only, CAP_BPF and CAP_NET_ADMIN in the bounding set`,
  };
}

/** Can the advert pacer get SCHED_FIFO `priority` under the unit? Pure. */
export function realtimeUnderUnit(s: Sandbox, priority: number): UnitVerdict {
  const problems: string[] = [];
  const fixes: string[] = [];
  if (s.restrictRealtime) {
    problems.push('RestrictRealtime=yes forbids SCHED_FIFO (sched_setscheduler fails with EPERM)');
    fixes.push('RestrictRealtime=no');
  }
  const byLimit = s.limitRtprio !== null && s.limitRtprio >= priority;
  if (!byLimit && !s.hasCapability('CAP_SYS_NICE')) {
    problems.push(`CapabilityBoundingSet= leaves out CAP_SYS_NICE${s.limitRtprio === null ? '' : ` and LimitRTPRIO=${s.limitRtprio} is below ${priority}`}`);
    fixes.push('CapabilityBoundingSet=CAP_SYS_NICE');
  }
  if (problems.length > 0) {
    return {
      status: 'fail',
      known: true,
      detail: `vrrp.realtimePriority: ${priority} cannot work under ${UNIT_NAME}: ${problems.join('; ')}; the pacer thread runs with normal scheduling (one warning at start)`,
      fix: `${EDIT} ${fixes.join(' and ')}, then \`systemctl restart ballast\`; or set vrrp.realtimePriority: 0`,
    };
  }
  return {
    status: 'ok',
    known: true,
    detail: `${UNIT_NAME} allows SCHED_FIFO ${priority}: RestrictRealtime= off, ${byLimit ? `LimitRTPRIO=${s.limitRtprio}` : 'CAP_SYS_NICE in the bounding set'}`,
  };
}

/**
 * A process of the running unit: the lowest PID whose cgroup is ballast.service's (its main
 * process, or the first child), or null when the unit runs nothing. Never throws.
 * @param proc the proc file system (tests).
 */
export function unitProcess(proc = '/proc'): number | null {
  let pids: number[];
  try {
    pids = readdirSync(proc)
      .filter((d) => /^\d+$/.test(d))
      .map(Number);
  } catch {
    return null;
  }
  for (const pid of pids.sort((a, b) => a - b)) {
    try {
      if (runsUnderUnit(readFileSync(join(proc, String(pid), 'cgroup'), 'utf8'))) return pid;
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return null;
}

/**
 * Whether `path` is read-only in the mount namespace /proc/PID/mountinfo describes (proc(5)): the
 * mount listed last whose mount point holds `path` (a later mount covers an earlier one) is
 * read-only when its mount options or its super block options say `ro`. Pure.
 * @returns null when no mount holds it (an empty text).
 */
export function readOnlyIn(mountinfo: string, path: string): boolean | null {
  let found: boolean | null = null;
  let depth = -1;
  for (const line of mountinfo.split('\n')) {
    const f = line.split(' ');
    const dash = f.indexOf('-');
    if (f.length < 6 || dash < 6) continue;
    const point = f[4]!.replace(/\\040/g, ' ');
    if (!under(path, point)) continue;
    // the deepest mount point wins; among equals, the one listed last (mounted on top)
    const d = point === '/' ? 0 : point.split('/').length;
    if (d < depth) continue;
    depth = d;
    const opts = [...f[5]!.split(','), ...(f[dash + 3] ?? '').split(',')];
    found = opts.includes('ro');
  }
  return found;
}

/**
 * bpffs as the running unit has it: whether /sys/fs/bpf is read-only in the mount namespace of a
 * process of ballast.service ({@link unitProcess}, {@link readOnlyIn}): what the agent met at its
 * last start, whatever the options say. Null when the unit runs nothing or its mountinfo cannot be read.
 */
export function runningUnitBpffs(proc = '/proc'): { pid: number; readOnly: boolean } | null {
  const pid = unitProcess(proc);
  if (pid === null) return null;
  try {
    const ro = readOnlyIn(readFileSync(join(proc, String(pid), 'mountinfo'), 'utf8'), BPFFS);
    return ro === null ? null : { pid, readOnly: ro };
  } catch {
    return null;
  }
}

/**
 * Whether a /proc/PID/cgroup text is ballast.service's cgroup as this host's system manager makes
 * it: cgroup v2 `0::/system.slice/ballast.service` (or below other slices, Slice=). Not a unit of
 * the same name inside a container, whose cgroup the host sees below the container's own
 * (`/machine.slice/….service/…/ballast.service`).
 */
export function runsUnderUnit(cgroupText: string): boolean {
  return cgroupText.split('\n').some((l) => /^0::\/(?:[^/]+\.slice\/)*ballast\.service$/.test(l.trim()));
}

/** The unit as the check sees it: null when it runs under it (the probes say it all) or when none is installed. */
export function unitSandbox(env: NodeJS.ProcessEnv = process.env, selfCgroup = (): string => readFileSync('/proc/self/cgroup', 'utf8')): Sandbox | null {
  let cg = '';
  try {
    cg = selfCgroup();
  } catch {
    /* no /proc: not under the unit as far as we can tell */
  }
  if (runsUnderUnit(cg)) return null;
  return readSandbox(findUnit(unitDirs(env)));
}
