/**
 * Lab nodes with their own root file system booting a real systemd: what operators run, the
 * Debian package under its unit, tested as it is installed.
 *
 *   /var/cache/ballast-lab/rootfs-bookworm-<key>/   Debian 12 made once by debootstrap (cached)
 *        │ lower
 *   overlay per node (upper/work in the lab's temp dir)  ──►  systemd-nspawn -b
 *        inside the node's network namespace (no --private-network: the container's eth0 is the
 *        lab node's eth0), started from the cgroup-v2 child `<cgroup2 root>/${prefix}-sysd-<node>`
 *        (nspawn puts the container in its `payload/` and itself in `supervisor/`); the cgroup
 *        BPF programs the agent attaches to its own root cgroup land on that child, never on the
 *        machine's root.
 *
 * How a node is made (bootSystemdNodes):
 * - the root file system: {@link ensureRootfs}, built under a file lock into a temp dir and renamed
 *   into place with a stamp, so two clones or test files never build it at once and a killed
 *   build leaves no half cache; its key is a digest of the suite, the mirror and the package list;
 * - one shell per node joins the node's cgroup, makes a private mount namespace (`unshare -m`),
 *   mounts the overlay and a fresh bpffs there, and execs `systemd-nspawn` in the node's network
 *   namespace: the mounts exist only in that mount namespace, so they vanish with the container
 *   even when the test is SIGKILLed (nothing to unmount on the machine);
 * - nspawn's options, each needed on this kind of machine: `--keep-unit --register=no` (PID 1 of
 *   the machine is not systemd: no machined, no scope), `--system-call-filter=bpf` (nspawn's
 *   seccomp filter refuses bpf(2) otherwise), `--capability=CAP_NET_ADMIN,CAP_NET_RAW,CAP_BPF,
 *   CAP_SYS_NICE` (VRRP raw sockets, nftables, BPF, the real-time pacer), `--bind=<bpffs>:/sys/fs/bpf`
 *   (systemd in a container does not mount bpffs), `--link-journal=no --resolv-conf=off
 *   --timezone=off` (nothing of the machine is touched);
 * - systemd-sysctl is skipped in a container: the lab sets forwarding in the namespace (lab.ts).
 *
 * Commands in a node: {@link SystemdNode.exec} enters all the namespaces of the container's PID 1
 * (`nsenter -t <leader> -a`) from a leaf cgroup `<node cgroup>/exec` (beside the container, not in
 * it: fine for systemctl, apt, journalctl); `{ service: true }` runs the command as a transient
 * service of the node's own systemd (`systemd-run --wait --pipe`), i.e. inside the container's
 * cgroup tree, where the agent's eBPF local endpoint applies. Stop: SIGRTMIN+4 to the container's
 * PID 1 (systemd's poweroff), bounded, then SIGKILL of the PIDs this module started, then the
 * cgroup tree is killed (cgroup.kill) and removed.
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, statSync, writeFileSync, createWriteStream } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { findCgroup2Root } from '../src/dataplane/ebpf.js';
import type { ExecResult, Lab, LabNode } from './lab.js';
import { sleep, waitFor } from './wait.js';

// ---------------------------------------------------------------------------------------------
// the root file system

/** Debian release of the nodes. */
export const ROOTFS_SUITE = 'bookworm';
/**
 * What every node has besides debootstrap's minbase: systemd as PID 1 (systemd, systemd-sysv,
 * dbus for systemctl and systemd-run), iproute2 and procps to look around, and what the package
 * depends on today (scripts/package.sh: nftables, conntrack and dpkg-shlibdeps' libraries), so
 * that `apt install ./ballast_*.deb` inside needs no network.
 */
export const ROOTFS_BASE_PACKAGES: readonly string[] = Object.freeze([
  'systemd',
  'systemd-sysv',
  'dbus',
  'iproute2',
  'procps',
  'nftables',
  'conntrack',
  'libbpf1',
  'libmnl0',
  'libelf1',
  'libstdc++6',
  'libgcc-s1',
  'libc6',
]);
/** Bumped when the recipe below changes in a way the package list does not show. */
const RECIPE = 1;

/** Options of {@link ensureRootfs}. */
export interface RootfsOptions {
  /** more packages beyond ROOTFS_BASE_PACKAGES (e.g. {@link debDependencies} of a .deb) */
  packages?: readonly string[];
  /** where caches live (default $BALLAST_LAB_CACHE or /var/cache/ballast-lab) */
  cacheDir?: string;
  /** the Debian mirror (default: the one this machine's apt uses, see {@link aptMirror}) */
  mirror?: string;
  /** limit of the build, ms (default 600 000); the lock wait counts too */
  timeoutMs?: number;
}

/** A cached root file system. */
export interface Rootfs {
  /** absolute path, e.g. /var/cache/ballast-lab/rootfs-bookworm-3f2a…  (read-only use: an overlay's lower) */
  dir: string;
  /** the first 16 hex digits of the digest over suite, mirror, packages and recipe */
  key: string;
  /** the packages asked for (sorted, deduplicated) */
  packages: string[];
  /** whether this call built it (false: the cache was there) */
  built: boolean;
  /** the build's wall time, ms (0 when reused; includes waiting for another builder's lock) */
  buildMs: number;
}

/**
 * The Debian mirror this machine's apt uses for the main archive, from /etc/apt/sources.list and
 * /etc/apt/sources.list.d/ (one-line and deb822 formats): the first http(s) URI of a `deb` entry
 * whose suite is `suite` (not -security / -updates). Falls back to http://deb.debian.org/debian.
 */
export function aptMirror(suite = ROOTFS_SUITE): string {
  const files = ['/etc/apt/sources.list'];
  try {
    for (const f of readdirSync('/etc/apt/sources.list.d').sort()) files.push(join('/etc/apt/sources.list.d', f));
  } catch {
    // no directory
  }
  for (const f of files) {
    let text: string;
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    if (f.endsWith('.sources')) {
      for (const stanza of text.split(/\n\s*\n/)) {
        const field = (k: string): string[] => (new RegExp(`^${k}:\\s*(.*)$`, 'mi').exec(stanza)?.[1] ?? '').trim().split(/\s+/).filter(Boolean);
        if (!field('Types').includes('deb') || !field('Suites').includes(suite)) continue;
        const uri = field('URIs').find((u) => /^https?:\/\//.test(u));
        if (uri !== undefined) return uri.replace(/\/+$/, '');
      }
    } else {
      for (const line of text.split('\n')) {
        const m = /^\s*deb\s+(?:\[[^\]]*\]\s+)?(https?:\/\/\S+)\s+(\S+)/.exec(line);
        if (m && m[2] === suite) return m[1]!.replace(/\/+$/, '');
      }
    }
  }
  return 'http://deb.debian.org/debian';
}

/**
 * The package names of a .deb's Depends (alternatives: the first; versions dropped), read with
 * `dpkg-deb -f`. E.g. ["nftables", "conntrack", "libbpf1", "libc6", …].
 * @throws Error when dpkg-deb cannot read the file.
 */
export function debDependencies(deb: string): string[] {
  const r = spawnSync('dpkg-deb', ['-f', deb, 'Depends'], { encoding: 'utf8', timeout: 10_000 });
  if (r.status !== 0) throw new Error(`dpkg-deb -f ${deb} Depends failed: ${r.stderr || r.error?.message}`);
  return r.stdout
    .trim()
    .split(',')
    .map(
      (d) =>
        d
          .split('|')[0]!
          .trim()
          .split(/[\s(:]/)[0]!,
    )
    .filter(Boolean);
}

/** The cache directory (absolute). */
export function rootfsCacheDir(): string {
  return process.env.BALLAST_LAB_CACHE ?? '/var/cache/ballast-lab';
}

/**
 * The Debian 12 root file system of the lab nodes, built once per machine and package list with
 * `debootstrap --variant=minbase` and cached (see the file comment). Needs root and debootstrap;
 * the first build downloads about 100 MB from the mirror (about 40 s here).
 * @throws Error with debootstrap's output when the build fails or exceeds `timeoutMs`.
 */
export function ensureRootfs(opts: RootfsOptions = {}): Rootfs {
  const cache = opts.cacheDir ?? rootfsCacheDir();
  const mirror = opts.mirror ?? aptMirror();
  const packages = [...new Set([...ROOTFS_BASE_PACKAGES, ...(opts.packages ?? [])])].sort();
  for (const p of packages) if (!/^[a-z0-9][a-z0-9+.-]+$/.test(p)) throw new TypeError(`ensureRootfs: not a Debian package name: ${JSON.stringify(p)}`);
  const key = createHash('sha256')
    .update(JSON.stringify({ suite: ROOTFS_SUITE, mirror, packages, recipe: RECIPE }))
    .digest('hex')
    .slice(0, 16);
  const dir = join(cache, `rootfs-${ROOTFS_SUITE}-${key}`);
  const stamp = join(dir, '.ballast-rootfs');
  if (existsSync(stamp)) return { dir, key, packages, built: false, buildMs: 0 };
  mkdirSync(cache, { recursive: true, mode: 0o755 });
  const t0 = performance.now();
  // under the lock: the cache may have appeared meanwhile; remove what a killed build left (only
  // the lock holder builds, so every .build-* dir is an orphan), build, stamp, rename into place
  const script = `set -eu
final=$1; mirror=$2; pkgs=$3; suite=$4
[ -f "$final/.ballast-rootfs" ] && exit 0
rm -rf "$final" "$final".build-*
tmp="$final.build-$$"
mkdir "$tmp"
debootstrap --variant=minbase --include="$pkgs" "$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1 || { cat "$tmp.log" >&2; rm -rf "$tmp" "$tmp.log"; exit 1; }
rm -f "$tmp.log"
# the hostname and machine-id come from nspawn per node; apt's downloaded archives are not needed
rm -f "$tmp/etc/hostname"
: > "$tmp/etc/machine-id"
rm -f "$tmp"/var/cache/apt/archives/*.deb
# no login prompt on the console (nobody reads it); no mirror in the nodes: they install offline
ln -sf /dev/null "$tmp/etc/systemd/system/console-getty.service"
: > "$tmp/etc/apt/sources.list"
printf '%s\\n' "$pkgs" > "$tmp/.ballast-rootfs"
mv -T "$tmp" "$final"
echo built`;
  let said: string;
  try {
    const r = spawnSync(
      'flock',
      [
        '-w',
        String(Math.ceil((opts.timeoutMs ?? 600_000) / 1000)),
        join(cache, 'rootfs.lock'),
        'sh',
        '-c',
        script,
        'sh',
        dir,
        mirror,
        packages.join(','),
        ROOTFS_SUITE,
      ],
      {
        encoding: 'utf8',
        timeout: opts.timeoutMs ?? 600_000,
        killSignal: 'SIGKILL',
        maxBuffer: 16 << 20,
      },
    );
    if (r.status !== 0) throw new Error(`exit ${r.status ?? r.signal}: ${r.stderr}${r.error?.message ?? ''}`);
    said = r.stdout;
  } catch (err) {
    throw new Error(`ensureRootfs: debootstrap of ${ROOTFS_SUITE} into ${dir} failed: ${(err as Error).message}`, { cause: err });
  }
  if (!existsSync(stamp)) throw new Error(`ensureRootfs: the build ran but ${stamp} is missing`);
  const built = said.includes('built');
  return { dir, key, packages, built, buildMs: built ? performance.now() - t0 : 0 };
}

// ---------------------------------------------------------------------------------------------
// running commands

const NODE_ENV = [
  'env',
  '-i',
  'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
  'LANG=C.UTF-8',
  'DEBIAN_FRONTEND=noninteractive',
  'SYSTEMD_PAGER=',
  'SYSTEMD_COLORS=0',
  'TERM=dumb',
];

function runCmd(file: string, args: string[], opts: { timeoutMs?: number; allowFail?: boolean } = {}): Promise<ExecResult> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 32 << 20, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (!err) return resolve({ stdout, stderr, code: 0 });
      const code: unknown = (err as { code?: unknown }).code;
      const timedOut = (err as { killed?: boolean }).killed === true;
      if (typeof code !== 'number' && !timedOut) return reject(new Error(`${file} ${args.join(' ')}: ${err.message}`));
      const status = timedOut ? 124 : (code as number);
      if (opts.allowFail) return resolve({ stdout, stderr: timedOut ? `${stderr}(timed out after ${timeoutMs} ms)\n` : stderr, code: status });
      reject(
        new Error(
          `${args.slice(-12).join(' ')} ${timedOut ? `timed out after ${timeoutMs} ms` : `exited with ${status}`}: ${stderr.trim()}${stdout.trim() ? `\n${stdout.trim()}` : ''}`,
        ),
      );
    });
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function killPid(pid: number, signal: NodeJS.Signals | number): void {
  try {
    process.kill(pid, signal);
  } catch {
    // gone already
  }
}

/** Kills every process in a cgroup-v2 subtree (cgroup.kill, Linux ≥ 5.14) and removes its directories, deepest first; bounded. */
function removeCgroupTreeSync(dir: string): boolean {
  if (!existsSync(dir)) return true;
  try {
    writeFileSync(join(dir, 'cgroup.kill'), '1');
  } catch {
    // an older kernel: the processes were killed by PID before
  }
  const dirs: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(join(d, e.name));
    dirs.push(d);
  };
  for (let i = 0; i < 60; i++) {
    dirs.length = 0;
    try {
      walk(dir);
    } catch {
      return !existsSync(dir);
    }
    let busy = false;
    for (const d of dirs) {
      try {
        rmdirSync(d);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') busy = true;
      }
    }
    if (!busy) return true;
    spawnSync('sleep', ['0.05']);
  }
  return !existsSync(dir);
}

// ---------------------------------------------------------------------------------------------
// nodes

/** Options of {@link bootSystemdNodes}. */
export interface BootOptions {
  /** the root file system (ensureRootfs) */
  rootfs: Rootfs;
  /** the lab nodes to boot (default: all of lab.nodes) */
  nodes?: readonly LabNode[];
  /** capabilities the container keeps beyond nspawn's default set (default CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, CAP_SYS_NICE) */
  capabilities?: readonly string[];
  /** limit of one node's boot until `systemctl is-system-running` answers, ms (default 60 000) */
  bootTimeoutMs?: number;
}

/** Options of {@link SystemdNode.exec}. */
export interface NodeExecOptions {
  /** limit, ms (default 30 000); the command is SIGKILLed after it (code 124 with allowFail) */
  timeoutMs?: number;
  /** resolve with a non-zero code instead of rejecting */
  allowFail?: boolean;
  /** run as a transient service of the node's systemd (`systemd-run --wait --pipe`), inside the container's cgroup tree */
  service?: boolean;
}

/** One journal entry (journalctl -o json): fields as strings (numbers too, as journalctl gives them). */
export interface JournalEntry {
  MESSAGE: string;
  /** "0" (emerg) … "7" (debug) */
  PRIORITY: string;
  /** µs since the epoch */
  __REALTIME_TIMESTAMP: string;
  /** the logging process, in the node's PID namespace */
  _PID?: string;
  SYSLOG_IDENTIFIER?: string;
  [field: string]: string | undefined;
}

/** A booted systemd node (a container in a lab node's network namespace). */
export interface SystemdNode {
  /** the lab node whose network namespace the container shares */
  readonly node: LabNode;
  /** the machine name and hostname, `${prefix}-${node}` (e.g. bsysd-n1) */
  readonly machine: string;
  /** the container's PID 1 (systemd) as this machine sees it */
  readonly leader: number;
  /** the systemd-nspawn process */
  readonly nspawnPid: number;
  /** the node's cgroup-v2 directory (the container is in its payload/) */
  readonly cgroup: string;
  /** the time from spawning nspawn until `systemctl is-system-running --wait` answered, ms */
  readonly bootMs: number;
  /** the answer of is-system-running at boot ("running", or "degraded" with failed units) */
  readonly bootState: string;
  /**
   * Runs `argv` in the node (all the container's namespaces, a clean environment with
   * DEBIAN_FRONTEND=noninteractive). Rejects on a non-zero exit unless `allowFail`.
   */
  exec(argv: readonly string[], opts?: NodeExecOptions): Promise<ExecResult>;
  /** Copies a file of this machine into the node (`dest` absolute in the node); mode default 0644. */
  copyIn(src: string, dest: string, mode?: number): void;
  /** Writes `text` to a file in the node (`dest` absolute); mode default 0644. */
  writeFile(dest: string, text: string, mode?: number): void;
  /** Reads a file of the node (`path` absolute) as UTF-8. @throws ENOENT as readFileSync does. */
  readFile(path: string): string;
  /**
   * The node's journal of `unit` (journalctl -u UNIT -o json), oldest first, as objects with
   * MESSAGE (string), PRIORITY (string "0".."7"), _PID, __REALTIME_TIMESTAMP (µs, string), …
   * @param opts.priority journalctl -p (e.g. "warning": that priority and more urgent)
   */
  journal(unit: string, opts?: { priority?: string }): Promise<JournalEntry[]>;
  /**
   * `apt-get install -y --no-install-recommends <deb>` of a .deb of this machine (copied into the
   * node's /root first). Rejects with apt's output when it fails.
   */
  install(deb: string, opts?: { timeoutMs?: number; reinstall?: boolean }): Promise<ExecResult>;
  /** MainPID of a unit in the node's PID namespace (0: not running). */
  mainPid(unit: string): Promise<number>;
  /**
   * Powers the node off (SIGRTMIN+4 to PID 1: systemd's poweroff), waits up to 20 s for nspawn to
   * exit, then SIGKILLs nspawn and PID 1 and kills and removes the node's cgroup tree; idempotent.
   * Resolves with how long it took (ms) and whether the node powered off by itself.
   * @throws Error when the cgroup cannot be removed (a process of it would not die).
   */
  stop(): Promise<{ ms: number; poweredOff: boolean }>;
}

interface Started {
  machine: string;
  child: ChildProcess;
  cgroup: string;
  dir: string;
  t0: number;
}

const registry = new Set<NodeImpl>();
let exitHooked = false;
function hookExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  process.on('exit', () => {
    for (const n of registry) n.killSync();
  });
}

class NodeImpl implements SystemdNode {
  readonly node: LabNode;
  readonly machine: string;
  readonly leader: number;
  readonly nspawnPid: number;
  readonly cgroup: string;
  bootMs = 0;
  bootState = '';
  readonly #child: ChildProcess;
  readonly #dir: string;
  #stopped: Promise<{ ms: number; poweredOff: boolean }> | undefined;

  constructor(node: LabNode, s: Started, leader: number) {
    this.node = node;
    this.machine = s.machine;
    this.leader = leader;
    this.nspawnPid = s.child.pid!;
    this.cgroup = s.cgroup;
    this.#child = s.child;
    this.#dir = s.dir;
  }

  #root(path: string): string {
    if (!path.startsWith('/')) throw new TypeError(`a node path must be absolute: ${path}`);
    return `/proc/${this.leader}/root${path}`;
  }

  exec(argv: readonly string[], opts: NodeExecOptions = {}): Promise<ExecResult> {
    const timeoutMs = opts.timeoutMs ?? 30_000;
    const inner = opts.service
      ? [
          'systemd-run',
          '--quiet',
          '--wait',
          '--pipe',
          '--collect',
          '--service-type=exec',
          ...NODE_ENV.slice(2).map((e) => `--setenv=${e}`),
          `--property=RuntimeMaxSec=${Math.ceil(timeoutMs / 1000)}`,
          '--',
          ...argv,
        ]
      : [...argv];
    // the exec leaf is beside the container's payload/: never the machine's root cgroup
    return runCmd(
      'sh',
      [
        '-c',
        'echo $$ > "$1/cgroup.procs" && shift && exec "$@"',
        'node-exec',
        join(this.cgroup, 'exec'),
        'nsenter',
        '-t',
        String(this.leader),
        '-a',
        ...NODE_ENV,
        ...inner,
      ],
      { timeoutMs: timeoutMs + 2000, allowFail: opts.allowFail ?? false },
    );
  }

  copyIn(src: string, dest: string, mode = 0o644): void {
    copyFileSync(src, this.#root(dest));
    chmodSync(this.#root(dest), mode);
  }

  writeFile(dest: string, text: string, mode = 0o644): void {
    writeFileSync(this.#root(dest), text, { mode });
    chmodSync(this.#root(dest), mode);
  }

  readFile(path: string): string {
    return readFileSync(this.#root(path), 'utf8');
  }

  async journal(unit: string, opts: { priority?: string } = {}): Promise<JournalEntry[]> {
    const r = await this.exec(['journalctl', '--no-pager', '-o', 'json', '-u', unit, ...(opts.priority === undefined ? [] : ['-p', opts.priority])], {
      allowFail: true,
    });
    if (r.code !== 0 && r.code !== 1) throw new Error(`journalctl -u ${unit} exited ${r.code}: ${r.stderr}`);
    return r.stdout
      .split('\n')
      .filter(Boolean)
      .map((l) => {
        const o = JSON.parse(l) as Record<string, unknown>;
        // journald gives a byte array for a MESSAGE that is not valid UTF-8 text
        if (Array.isArray(o.MESSAGE)) o.MESSAGE = Buffer.from(o.MESSAGE as number[]).toString('utf8');
        o.MESSAGE ??= '';
        return o as JournalEntry;
      });
  }

  async install(deb: string, opts: { timeoutMs?: number; reinstall?: boolean } = {}): Promise<ExecResult> {
    const dest = `/root/${basename(deb)}`;
    this.copyIn(deb, dest);
    return this.exec(['apt-get', 'install', '-y', '-q', '--no-install-recommends', ...(opts.reinstall ? ['--reinstall'] : []), dest], {
      timeoutMs: opts.timeoutMs ?? 120_000,
    });
  }

  async mainPid(unit: string): Promise<number> {
    return Number((await this.exec(['systemctl', 'show', '-p', 'MainPID', '--value', unit])).stdout.trim());
  }

  stop(): Promise<{ ms: number; poweredOff: boolean }> {
    this.#stopped ??= this.#stop();
    return this.#stopped;
  }

  async #stop(): Promise<{ ms: number; poweredOff: boolean }> {
    const t0 = performance.now();
    const exited = new Promise<void>((resolve) => {
      if (this.#child.exitCode !== null || this.#child.signalCode !== null) resolve();
      else this.#child.once('exit', () => resolve());
    });
    // SIGRTMIN+4: systemd's poweroff (systemd(1)); nspawn exits when its PID 1 does
    if (alive(this.leader)) killPid(this.leader, 38);
    await Promise.race([exited, sleep(20_000)]);
    const poweredOff = !alive(this.nspawnPid);
    if (alive(this.nspawnPid)) killPid(this.nspawnPid, 'SIGKILL');
    if (alive(this.leader)) killPid(this.leader, 'SIGKILL');
    await Promise.race([exited, sleep(5000)]);
    if (!removeCgroupTreeSync(this.cgroup)) throw new Error(`systemd node ${this.machine}: cgroup ${this.cgroup} could not be removed`);
    await rm(join('/run/systemd/nspawn/propagate', this.machine), { recursive: true, force: true });
    await rm(this.#dir, { recursive: true, force: true });
    registry.delete(this);
    return { ms: performance.now() - t0, poweredOff };
  }

  killSync(): void {
    killPid(this.leader, 'SIGKILL');
    killPid(this.nspawnPid, 'SIGKILL');
    removeCgroupTreeSync(this.cgroup);
  }
}

/** The cgroup directory of a systemd node: `<cgroup2 root>/${prefix}-sysd-${node}`. */
function nodeCgroup(lab: Lab, node: LabNode): string {
  const root = findCgroup2Root(readFileSync('/proc/self/mountinfo', 'utf8'));
  if (root === undefined) throw new Error('systemd nodes: no cgroup v2 hierarchy is mounted');
  return join(root, `${lab.prefix}-sysd-${node.name}`);
}

/** The container's PID 1 (host PID): the child of nspawn that runs systemd as PID 1 of its PID namespace. */
function findLeader(nspawnPid: number): number | null {
  let kids: string;
  try {
    kids = readFileSync(`/proc/${nspawnPid}/task/${nspawnPid}/children`, 'utf8');
  } catch {
    return null;
  }
  for (const k of kids.trim().split(/\s+/).filter(Boolean).map(Number)) {
    try {
      const st = readFileSync(`/proc/${k}/status`, 'utf8');
      const nspid = /^NSpid:\s+(.*)$/m.exec(st)?.[1]?.trim().split(/\s+/);
      if (nspid?.at(-1) === '1' && readFileSync(`/proc/${k}/comm`, 'utf8').trim() === 'systemd') return k;
    } catch {
      // exited meanwhile
    }
  }
  return null;
}

/**
 * Removes what an interrupted run of a lab with `prefix` left of its systemd nodes: kills and
 * removes the cgroups `<cgroup2 root>/${prefix}-sysd-n<k>` (which holds every process of those
 * containers) and nspawn's propagation directories of those machines. Returns the cgroups removed.
 */
export function cleanupStaleSystemdNodes(prefix: string): string[] {
  const root = findCgroup2Root(readFileSync('/proc/self/mountinfo', 'utf8'));
  if (root === undefined) return [];
  const re = new RegExp(`^${prefix.replace(/[^a-z0-9]/g, '')}-sysd-(n\\d+)$`);
  const removed: string[] = [];
  for (const d of readdirSync(root)) {
    const m = re.exec(d);
    if (!m) continue;
    const dir = join(root, d);
    if (!removeCgroupTreeSync(dir)) throw new Error(`systemd nodes: stale cgroup ${dir} could not be removed`);
    spawnSync('rm', ['-rf', join('/run/systemd/nspawn/propagate', `${prefix}-${m[1]}`)]);
    removed.push(dir);
  }
  return removed;
}

/**
 * Boots a systemd-nspawn container on each of `opts.nodes` (default every node of the lab) from
 * an overlay over `opts.rootfs`, in parallel, and waits until each node's systemd says it is up
 * (`systemctl is-system-running --wait`). The nodes must be stopped (stopSystemdNodes) before the
 * lab is torn down; on process exit they are SIGKILLed. Needs root, systemd-nspawn, overlayfs.
 * Removes first what an interrupted run with the same prefix left (cleanupStaleSystemdNodes).
 * @throws Error (with the console's last lines) when a node does not come up within
 *   bootTimeoutMs; the nodes already started are stopped first.
 */
export async function bootSystemdNodes(lab: Lab, opts: BootOptions): Promise<SystemdNode[]> {
  const nodes = opts.nodes ?? lab.nodes;
  const caps = opts.capabilities ?? ['CAP_NET_ADMIN', 'CAP_NET_RAW', 'CAP_BPF', 'CAP_SYS_NICE'];
  const bootTimeoutMs = opts.bootTimeoutMs ?? 60_000;
  if (!existsSync(join(opts.rootfs.dir, '.ballast-rootfs'))) throw new Error(`bootSystemdNodes: ${opts.rootfs.dir} is not a finished root file system`);
  cleanupStaleSystemdNodes(lab.prefix);
  hookExit();
  const started: Started[] = [];
  const booted: NodeImpl[] = [];
  try {
    for (const node of nodes) {
      const machine = `${lab.prefix}-${node.name}`;
      const dir = join(lab.dir, `sysd-${node.name}`);
      for (const d of ['upper', 'work', 'root', 'bpf']) await mkdir(join(dir, d), { recursive: true });
      const cgroup = nodeCgroup(lab, node);
      await mkdir(join(cgroup, 'exec'), { recursive: true });
      const console = createWriteStream(join(dir, 'console.log'));
      // one shell: join the node's cgroup, then a private mount namespace holding the overlay and
      // a fresh bpffs (gone with the container), then nspawn in the node's network namespace
      const script = `set -e
echo $$ > "$1/cgroup.procs"
exec unshare -m --propagation private sh -c '
set -e
mount -t overlay overlay -o "lowerdir=$2,upperdir=$1/upper,workdir=$1/work" "$1/root"
mount -t bpf bpf "$1/bpf"
exec nsenter --net=/run/netns/$3 -- systemd-nspawn --quiet --directory="$1/root" --boot --keep-unit --register=no \
  --machine="$4" --hostname="$4" --system-call-filter=bpf --capability="$5" --bind="$1/bpf:/sys/fs/bpf" \
  --link-journal=no --resolv-conf=off --timezone=off --settings=no --console=read-only
' sh "$2" "$3" "$4" "$5" "$6"`;
      const child = spawn('sh', ['-c', script, 'sh', cgroup, dir, opts.rootfs.dir, node.netns, machine, caps.join(',')], {
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stdout!.pipe(console);
      child.stderr!.pipe(console);
      started.push({ machine, child, cgroup, dir, t0: performance.now() });
    }
    await Promise.all(
      started.map(async (s, i) => {
        const consoleTail = (): string => {
          try {
            return readFileSync(join(s.dir, 'console.log'), 'utf8').split('\n').slice(-15).join('\n');
          } catch {
            return '';
          }
        };
        const leader = await waitFor(
          () => {
            if (s.child.exitCode !== null) throw new Error(`systemd node ${s.machine}: nspawn exited ${s.child.exitCode}:\n${consoleTail()}`);
            return findLeader(s.child.pid!);
          },
          { timeoutMs: bootTimeoutMs, intervalMs: 20, what: `${s.machine}'s PID 1` },
        ).catch((e: Error) => {
          throw new Error(`${e.message}\n${consoleTail()}`);
        });
        const n = new NodeImpl(nodes[i]!, s, leader);
        registry.add(n);
        // (a D-Bus-less moment early in the boot makes systemctl fail at once: retried, bounded)
        const r = await waitFor(
          () => n.exec(['systemctl', 'is-system-running', '--wait'], { allowFail: true, timeoutMs: bootTimeoutMs }),
          (x) => ['running', 'degraded', 'maintenance', 'stopping'].includes(x.stdout.trim()),
          { timeoutMs: bootTimeoutMs, intervalMs: 50, what: `${s.machine}'s systemd to finish booting` },
        );
        const state = r.stdout.trim();
        if (state !== 'running' && state !== 'degraded')
          throw new Error(`systemd node ${s.machine}: is-system-running said ${JSON.stringify(state)} (${r.code}) ${r.stderr}\n${consoleTail()}`);
        n.bootMs = performance.now() - s.t0;
        n.bootState = state;
        booted.push(n);
      }),
    );
  } catch (e) {
    for (const s of started) {
      const n = [...registry].find((x) => x.machine === s.machine);
      if (n) await n.stop().catch(() => undefined);
      else {
        if (s.child.pid !== undefined) killPid(s.child.pid, 'SIGKILL');
        removeCgroupTreeSync(s.cgroup);
      }
    }
    throw e;
  }
  return nodes.map((nd) => booted.find((b) => b.node === nd)!);
}

/**
 * Stops the nodes (SystemdNode.stop, in parallel) and resolves with each one's result, in order.
 * @throws the first failure, after every node was tried.
 */
export async function stopSystemdNodes(nodes: readonly SystemdNode[]): Promise<{ ms: number; poweredOff: boolean }[]> {
  const rs = await Promise.allSettled(nodes.map((n) => n.stop()));
  const bad = rs.find((r) => r.status === 'rejected');
  if (bad) throw (bad as PromiseRejectedResult).reason;
  return rs.map((r) => (r as PromiseFulfilledResult<{ ms: number; poweredOff: boolean }>).value);
}

/** True when this machine can boot systemd nodes: root, systemd-nspawn, debootstrap (or a cached root file system), overlayfs. Else the reason. */
export function systemdNodesMissing(): string | null {
  if (process.getuid?.() !== 0) return 'not root';
  for (const t of ['systemd-nspawn', 'debootstrap', 'unshare', 'nsenter', 'flock']) {
    if (spawnSync('sh', ['-c', `command -v ${t}`], { stdio: 'ignore' }).status !== 0)
      return `${t} is missing (Debian packages systemd-container, debootstrap, util-linux: bash scripts/setup.sh)`;
  }
  if (!readFileSync('/proc/filesystems', 'utf8').includes('overlay')) {
    spawnSync('modprobe', ['overlay'], { stdio: 'ignore' });
    if (!readFileSync('/proc/filesystems', 'utf8').includes('overlay')) return 'no overlayfs in this kernel';
  }
  return statSync('/proc/self/ns/cgroup', { throwIfNoEntry: false }) === undefined ? 'no cgroup namespaces' : null;
}
