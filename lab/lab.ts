/**
 * The test lab: control-plane "nodes" as network namespaces on one machine.
 *
 *   ${prefix}-lan                       ${prefix}-n1 … ${prefix}-nN        ${prefix}-c
 *   ┌──────────────────────────────┐    ┌───────────────────────────┐      ┌──────────────────┐
 *   │ br0 (mcast_snooping 0, STP   │    │ eth0 02:78:SS:00:00:11    │      │ eth0 …:00:00:50  │
 *   │      off, IPv6 off, no       │    │ 10.78.S.11/24             │      │ 10.78.S.50/24    │
 *   │      br_netfilter hooks)     │    │ fd78:S::11/64 (no DAD)    │      │ fd78:S::50/64    │
 *   │  ├─ ${prefix}n1 ◄──veth──────┼────┤                           │      │                  │
 *   │  ├─ ${prefix}nN ◄──veth──────┼────┤  (VIP 10.78.S.100 and     │      │  runs the prober │
 *   │  └─ ${prefix}c  ◄──veth──────┼────┼──  fd78:S::100 are added ─┼──────┤                  │
 *   └──────────────────────────────┘    │   by the agent under test)│      └──────────────────┘
 *                                       └───────────────────────────┘
 *
 * Rules the lab keeps (and why):
 * - every object it makes is named with the prefix and lives inside a lab namespace: the veth
 *   pairs are created in ${prefix}-lan with their peer born directly in the node namespace, so
 *   nothing ever appears in the machine's own namespace and deleting the lab's namespaces
 *   removes everything;
 * - exec/spawn only run inside the lab's own namespaces, so lab traffic stays there;
 * - teardown() is idempotent and also runs (synchronously) from process 'exit' and on
 *   SIGINT/SIGTERM; Lab.cleanupStale(prefix) removes what a run killed with SIGKILL left;
 * - processes are stopped by PID (each spawn is its own process group, killed as a group);
 *   before a namespace is deleted the processes still inside it (`ip netns pids`) are killed,
 *   because a namespace with a live process survives `ip netns del`, invisible but holding
 *   its addresses (a VIP) and its sockets.
 *
 * Cgroups (for the cgroup BPF programs, which attach to cgroups, not namespaces): each node can
 * get its own cgroup-v2 child `<cgroup2 root>/${prefix}-${node}` (Lab.cgroup, made on first
 * use); exec/spawn with `{ cgroup }` run the command inside it (and inside the node's
 * namespace). The wrapper joins the cgroup first, in the machine's mount namespace, and then
 * execs `ip netns exec`, because `ip netns exec` remounts /sys (the cgroup2 mount disappears
 * inside). Teardown kills what is left in those cgroups and removes them. The lab never hands
 * out, and exec/spawn refuse, any cgroup but its own children: nothing attaches to the root.
 *
 * Child processes run the compiled scripts under dist/lab (see compiledScript): `npm run build:ts` first.
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, readdirSync, readFileSync, rmdirSync, rmSync, statSync, type WriteStream } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, isAbsolute, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findCgroup2Root } from '../src/dataplane/ebpf.js';
import { sleep, waitFor } from './wait.js';
import { appendChange, compactStore, initStore, type SliceChange } from './endpointslice-store.js';
import type { ProbeResult, ReachResult, Summary } from './clients/prober.js';

export type { Outage, ProbeResult, ReachResult, Summary } from './clients/prober.js';

// ---------------------------------------------------------------------------------------------
// public shapes

/** Options of Lab.create. */
export interface LabOptions {
  /** 1..5 chars, [a-z][a-z0-9]*: names every lab object (interface names are ≤ 15 chars) */
  prefix: string;
  /** 1..250: IPv4 10.78.<subnet>.0/24, IPv6 fd78:<subnet>::/64 (decimal digits used as-is) */
  subnet: number;
  /** control-plane nodes, 1..30; default 3 */
  nodes?: number;
  /** give every eth0 an IPv6 address; default true (when false IPv6 is disabled in the lab) */
  ipv6?: boolean;
  /**
   * Tear the lab down synchronously on SIGINT / SIGTERM (default true). false: the caller handles
   * those signals and calls {@link Lab.teardown} itself (the soak heals its faults and writes its
   * report first); the lab is still torn down on process exit.
   */
  signals?: boolean;
}

/** One lab node (a network namespace with one interface, eth0, on the lab bridge). */
export interface LabNode {
  /** "n1", "n2", … */
  name: string;
  /** `${prefix}-n1` */
  netns: string;
  ifname: 'eth0';
  /** 10.78.S.11, .12, … */
  ipv4: string;
  /** fd78:S::11, … (assigned only when the lab has IPv6) */
  ipv6: string;
  /** 02:78:SS:00:00:11 (SS = subnet in hex) */
  mac: string;
  /** the fe80:: address of eth0 (rejects when the lab has no IPv6) */
  linkLocal(): Promise<string>;
}

/** An address on an interface, parsed from `ip -j addr`. */
export interface LabAddress {
  address: string;
  prefixLen: number;
  family: 'inet' | 'inet6';
  scope: string;
  secondary: boolean;
  tentative: boolean;
  dadfailed: boolean;
}

/** Result of Lab.exec. `code` is the exit status (124 when it timed out with allowFail). */
export interface ExecResult {
  stdout: string;
  stderr: string;
  code: number;
}

/** How exec / spawn enter a lab namespace (both optional; the default is plain `ip netns exec`). */
export interface LabRunOptions {
  /** run inside this cgroup too: a directory returned by Lab.cgroup (any other is refused) */
  cgroup?: string;
  /**
   * enter only the network namespace (`nsenter --net`), keeping the machine's mount namespace
   * (its /sys/fs/bpf and cgroup2 mount), instead of `ip netns exec`, which remounts /sys
   */
  hostMounts?: boolean;
  /** spawn only: give the process a stdin pipe (`child.stdin`) instead of /dev/null */
  stdin?: boolean;
}

/** A process the lab started (inside a lab namespace, in its own process group). */
export interface LabProcess {
  pid: number;
  child: ChildProcess;
  /**
   * Sends `signal` (default SIGTERM) to the process group, waits up to `timeoutMs` (default
   * 5000 ms), then SIGKILLs the group; resolves with the exit code, or null when the process
   * ended by a signal. Harmless when it already exited.
   */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<number | null>;
  /** Sends `signal` to the process group (no-op once it exited). */
  kill(signal: NodeJS.Signals): void;
  /** Resolves with the exit code (null: ended by a signal, or failed to start). */
  exited: Promise<number | null>;
  /** stdout and stderr interleaved as captured so far; only the last 1 MiB is kept. */
  output(): string;
  /**
   * Resolves with the first match of `re` in output arriving after this call (or, with
   * `includeExisting`, in output already captured). Rejects after `timeoutMs` (default
   * 5000 ms) or when the process exits first.
   */
  waitForOutput(re: RegExp, opts?: { timeoutMs?: number; includeExisting?: boolean }): Promise<RegExpMatchArray>;
}

/** Options of runProber (times in ms). */
export interface RunProberOptions {
  /** e.g. `https://10.78.S.100:6443/version` (IPv6: `https://[fd78:S::100]:6443/version`) */
  url: string;
  /** default 10 ms */
  intervalMs?: number;
  /** default 10000 ms */
  durationMs?: number;
  /** per-request timeout, default 250 ms */
  timeoutMs?: number;
  /** also write the prober's output to this file (relative paths are under lab.dir) */
  logFile?: string;
  /** the prober stops scheduling once this file exists (prober `--until-file`) */
  untilFile?: string;
  /** run in this namespace (default: the client's), and in this lab cgroup (see Lab.cgroup) */
  netns?: string;
  cgroup?: string;
}

/** The prober's own summary line plus every per-request result (ordered by start time). */
export interface ProberReport extends Summary {
  results: ProbeResult[];
}

/** A prober running in the client namespace. */
export interface ProberRun {
  process: LabProcess;
  /** results received so far, in completion order */
  results(): ProbeResult[];
  /**
   * The prober's clock now (ms since its start): the start time `t` of its latest finished
   * request, 0 before the first one. A fault injected now happened after every request up to it.
   */
  now(): number;
  /** SIGTERM: stop scheduling, let requests in flight finish, resolve with the report */
  stop(): Promise<ProberReport>;
  /** resolves when the prober ends on its own bounds (or after stop()) */
  done: Promise<ProberReport>;
}

// ---------------------------------------------------------------------------------------------
// the package root and the compiled scripts

/**
 * The directory of package.json, found by walking up from this module: the same answer
 * whether this runs as lab/lab.ts (vitest) or as dist/lab/lab.js.
 */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error(`ballast lab: no package.json above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
}

/** The scripts the lab runs as child processes: name → source path without `.ts`, from the package root. */
const SCRIPTS = {
  'apiserver-standin': 'lab/apiserver-standin',
  'ebpf-endpoint': 'lab/ebpf-endpoint',
  'proxy-endpoint': 'lab/proxy-endpoint',
  'inject-vrrp': 'lab/inject-vrrp',
  'vrrp-host': 'lab/vrrp-host',
  'fuzz-vrrp': 'lab/fuzz-vrrp',
  'block-main-thread': 'lab/block-main-thread',
  'node20-x509': 'lab/node20-x509',
  prober: 'lab/clients/prober',
  longconn: 'lab/clients/longconn',
  watchers: 'lab/clients/watchers',
  'watch-fleet': 'lab/clients/watch-fleet',
  'watch-streams': 'lab/clients/watch-streams',
  'health-probe': 'lab/clients/health-probe',
  scraper: 'lab/clients/scraper',
} as const;

/** A script the lab runs as a child process (see SCRIPTS). */
export type LabScript = keyof typeof SCRIPTS;

/**
 * Absolute path of a compiled script (dist/<path>.js, e.g. dist/lab/clients/prober.js).
 * `also`: more sources (paths from the package root, e.g. `src/health/probe.ts`) the compiled
 * script must not be older than.
 * @throws Error when it is missing or older than its source or one of `also`, telling to run
 *   `npm run build:ts` (child processes run compiled JS, not the sources).
 */
export function compiledScript(name: LabScript, also: readonly string[] = []): string {
  const root = packageRoot();
  const rel = SCRIPTS[name];
  const js = join(root, 'dist', `${rel}.js`);
  if (!existsSync(js)) {
    throw new Error(`ballast lab: ${js} is missing; run \`npm run build:ts\` first (child processes run compiled JS)`);
  }
  for (const src of [`${rel}.ts`, ...also]) {
    const file = join(root, src);
    if (existsSync(file) && statSync(file).mtimeMs > statSync(js).mtimeMs) {
      throw new Error(`ballast lab: ${js} is older than ${src}; run \`npm run build:ts\``);
    }
  }
  return js;
}

// ---------------------------------------------------------------------------------------------
// running commands

const DEFAULT_EXEC_TIMEOUT_MS = 10_000;

function run(file: string, args: string[], opts: { timeoutMs?: number; allowFail?: boolean } = {}): Promise<ExecResult> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 32 << 20, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (!err) return resolve({ stdout, stderr, code: 0 });
      const code: unknown = (err as { code?: unknown }).code;
      const timedOut = (err as { killed?: boolean }).killed === true;
      if (typeof code !== 'number' && !timedOut) {
        // could not start at all (ENOENT, …): never "allowed"
        return reject(new Error(`${file} ${args.join(' ')}: ${err.message}`));
      }
      const status = timedOut ? 124 : (code as number);
      if (opts.allowFail) return resolve({ stdout, stderr: timedOut ? `${stderr}(timed out after ${timeoutMs} ms)\n` : stderr, code: status });
      const why = timedOut ? `timed out after ${timeoutMs} ms` : `exited with ${status}`;
      reject(new Error(`${file} ${args.join(' ')} ${why}: ${stderr.trim()}`));
    });
  });
}

const ip = (args: string[], opts?: { timeoutMs?: number; allowFail?: boolean }): Promise<ExecResult> => run('ip', args, opts);

function isErrno(e: unknown, code: string): boolean {
  return e instanceof Error && (e as NodeJS.ErrnoException).code === code;
}

/** SIGKILL every process inside a namespace (synchronously); returns the PIDs signalled. */
function killNetnsPidsSync(netns: string): number[] {
  const r = spawnSync('ip', ['netns', 'pids', netns], { encoding: 'utf8', timeout: 5000 });
  const pids = (r.stdout ?? '').split(/\s+/).filter(Boolean).map(Number).filter((p) => Number.isInteger(p) && p > 1 && p !== process.pid);
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
async function removeNetns(netns: string): Promise<void> {
  for (let i = 0; i < 20; i++) {
    if (killNetnsPidsSync(netns).length === 0) break;
    await sleep(25);
  }
  const r = await ip(['netns', 'del', netns], { allowFail: true });
  if (r.code !== 0 && !/No such file|not found/i.test(r.stderr)) {
    throw new Error(`ballast lab: ip netns del ${netns} failed: ${r.stderr.trim()}`);
  }
}

async function listNetns(): Promise<string[]> {
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
function cgroupRoot(): string {
  const root = findCgroup2Root(readFileSync('/proc/self/mountinfo', 'utf8'));
  if (root === undefined) throw new Error('ballast lab: no cgroup v2 hierarchy is mounted');
  return root;
}

function cgroupPids(dir: string): number[] {
  try {
    return readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number).filter((p) => Number.isInteger(p) && p > 1 && p !== process.pid);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return [];
    throw e;
  }
}

/** SIGKILLs every process in a lab cgroup, waits (bounded) until it is empty, removes it. */
async function removeCgroup(dir: string): Promise<void> {
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

function removeCgroupSync(dir: string): void {
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

/**
 * argv prefix that runs a command in `netns` (and, with `cgroup`, in that cgroup): the cgroup is
 * joined by a shell that then execs the rest, so the PID is the command's own. `hostMounts`
 * enters only the network namespace (nsenter --net) instead of `ip netns exec`, which also
 * makes a mount namespace with a fresh /sys: a process that needs the machine's /sys/fs/bpf and
 * cgroup2 mount (a BPF loader) must keep the machine's mounts.
 */
function netnsArgv(netns: string, argv: string[], opts: { cgroup?: string; hostMounts?: boolean }): [string, string[]] {
  const enter = opts.hostMounts ? ['nsenter', `--net=/run/netns/${netns}`, '--'] : ['ip', 'netns', 'exec', netns];
  if (opts.cgroup === undefined) return [enter[0]!, [...enter.slice(1), ...argv]];
  return ['sh', ['-c', 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', 'lab-cgroup', opts.cgroup, ...enter, ...argv]];
}

const PREFIX_RE = /^[a-z][a-z0-9]{0,4}$/;

function checkPrefix(prefix: string): void {
  if (!PREFIX_RE.test(prefix)) {
    throw new TypeError(`prefix must match ${PREFIX_RE} (≤ 5 chars: interface names are ≤ 15), got ${JSON.stringify(prefix)}`);
  }
}

const esc = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** namespaces a lab with this prefix makes: `${prefix}-lan`, `${prefix}-c`, `${prefix}-n<k>` */
const netnsPattern = (prefix: string): RegExp => new RegExp(`^${esc(prefix)}-(lan|c|n\\d+)$`);
/** links a lab with this prefix names: `${prefix}c`, `${prefix}n<k>` */
const linkPattern = (prefix: string): RegExp => new RegExp(`^${esc(prefix)}(c|n\\d+)$`);
const dirPrefix = (prefix: string): string => `ballast-lab-${prefix}-`;

// ---------------------------------------------------------------------------------------------
// processes

const OUTPUT_LIMIT = 1 << 20;

class LabProcessImpl implements LabProcess {
  readonly pid: number;
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  #out = '';
  #running = true;
  readonly #listeners = new Set<(chunk: string) => void>();
  readonly #exitListeners = new Set<() => void>();

  constructor(child: ChildProcess, log?: WriteStream) {
    this.child = child;
    this.pid = child.pid ?? -1;
    const onData = (buf: Buffer): void => {
      const s = buf.toString('utf8');
      this.#out += s;
      if (this.#out.length > OUTPUT_LIMIT) this.#out = this.#out.slice(this.#out.length - OUTPUT_LIMIT);
      log?.write(buf);
      for (const l of this.#listeners) l(s);
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    const streamsEnded = Promise.all(
      [child.stdout, child.stderr].map((s) => (s ? new Promise<void>((r) => (s.readableEnded ? r() : s.once('close', () => r()))) : Promise.resolve())),
    );
    this.exited = new Promise((resolve) => {
      const finish = (code: number | null): void => {
        if (!this.#running) return;
        this.#running = false;
        // give the pipes a moment to drain (a grandchild holding them must not block us)
        void Promise.race([streamsEnded, sleep(500)]).then(() => {
          log?.end();
          for (const l of this.#exitListeners) l();
          resolve(code);
        });
      };
      child.once('exit', (code) => finish(code));
      child.once('error', (e) => {
        this.#out += `\n[lab] failed to start: ${e.message}\n`;
        finish(null);
      });
    });
  }

  output(): string {
    return this.#out;
  }

  kill(signal: NodeJS.Signals): void {
    if (!this.#running || this.pid <= 0) return;
    try {
      // negative PID: the whole process group (spawned detached, so PGID = PID)
      process.kill(-this.pid, signal);
    } catch (e) {
      if (!isErrno(e, 'ESRCH')) throw e;
    }
  }

  /** Synchronous SIGKILL for the exit handler. */
  killSync(): void {
    this.kill('SIGKILL');
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 5000): Promise<number | null> {
    if (this.#running) {
      this.kill(signal);
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        this.exited.then(() => false),
        new Promise<boolean>((r) => {
          timer = setTimeout(() => r(true), timeoutMs);
        }),
      ]);
      clearTimeout(timer);
      if (timedOut) this.kill('SIGKILL');
    }
    return this.exited;
  }

  waitForOutput(re: RegExp, opts: { timeoutMs?: number; includeExisting?: boolean } = {}): Promise<RegExpMatchArray> {
    const timeoutMs = opts.timeoutMs ?? 5000;
    const existing = opts.includeExisting ? this.#out.match(re) : null;
    if (existing) return Promise.resolve(existing);
    return new Promise((resolve, reject) => {
      let seen = '';
      const cleanup = (): void => {
        clearTimeout(timer);
        this.#listeners.delete(onChunk);
        this.#exitListeners.delete(onExit);
      };
      const onChunk = (chunk: string): void => {
        seen = (seen + chunk).slice(-64 * 1024);
        const m = seen.match(re);
        if (m) {
          cleanup();
          resolve(m);
        }
      };
      const onExit = (): void => {
        cleanup();
        reject(new Error(`ballast lab: process ${this.pid} exited before printing ${re}; output:\n${this.#out.slice(-2000)}`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`ballast lab: no ${re} from process ${this.pid} within ${timeoutMs} ms; output:\n${this.#out.slice(-2000)}`));
      }, timeoutMs);
      if (!this.#running) return onExit();
      this.#listeners.add(onChunk);
      this.#exitListeners.add(onExit);
    });
  }

  get running(): boolean {
    return this.#running;
  }
}

// ---------------------------------------------------------------------------------------------
// crash safety: live labs are torn down synchronously on exit and on SIGINT/SIGTERM

const live = new Map<Lab, { teardownSync: () => void; signals: boolean }>();
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

function hook(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', onProcessExit);
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
}

function unhook(force = false): void {
  if (!hooked || (!force && live.size > 0)) return;
  hooked = false;
  process.off('exit', onProcessExit);
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
}

// ---------------------------------------------------------------------------------------------
// the lab

interface Endpoint {
  netns: string;
  ipv4: string;
  ipv6: string;
  mac: string;
  /** the veth end on the bridge, in the lan namespace */
  bridgePort: string;
  bridgeMac: string;
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

const keep = (): boolean => process.env.BALLAST_LAB_KEEP === '1';

/** The lab: see the file comment for the topology and the rules it keeps. */
export class Lab {
  readonly prefix: string;
  readonly subnet: number;
  readonly ipv6: boolean;
  readonly nodes: LabNode[];
  readonly client: { netns: string; ipv4: string; ipv6: string; mac: string };
  /** `${prefix}-lan`: holds br0 */
  readonly lan: string;
  /** 10.78.S.100 */
  readonly vip4: string;
  /** fd78:S::100 */
  readonly vip6: string;
  /** temp dir for certs, configs and logs; removed on teardown unless BALLAST_LAB_KEEP=1 */
  readonly dir: string;
  /** the lab CA (EC P-256, valid 1 day); PEM files in `dir` */
  readonly ca: { certFile: string; keyFile: string };

  readonly #endpoints: Endpoint[];
  readonly #namespaces: string[];
  readonly #procs = new Set<LabProcessImpl>();
  readonly #apiservers = new Map<string, LabProcessImpl>();
  /** node name → cgroup dir, for the cgroups made so far */
  readonly #cgroups = new Map<string, string>();
  #apiserverPort = 6443;
  #apiserverOpts: { store: boolean; storeFamily: 4 | 6; token?: string; shutdownDelayMs: number; bookmarkMs?: number; tickMs?: number } = { store: false, storeFamily: 4, shutdownDelayMs: 0 };
  #down: Promise<void> | undefined;
  #gone = false;

  private constructor(opts: Required<Omit<LabOptions, 'signals'>>, dir: string) {
    const { prefix, subnet } = opts;
    this.prefix = prefix;
    this.subnet = subnet;
    this.ipv6 = opts.ipv6;
    this.dir = dir;
    this.lan = `${prefix}-lan`;
    this.vip4 = `10.78.${subnet}.100`;
    this.vip6 = `fd78:${subnet}::100`;
    this.ca = { certFile: join(dir, 'pki', 'ca.crt'), keyFile: join(dir, 'pki', 'ca.key') };
    const ss = subnet.toString(16).padStart(2, '0');
    const endpoint = (ns: string, host: number, port: string): Endpoint => ({
      netns: ns,
      ipv4: `10.78.${subnet}.${host}`,
      ipv6: `fd78:${subnet}::${host}`,
      // the decimal host number's digits double as the last MAC byte: …:11 for .11
      mac: `02:78:${ss}:00:00:${host}`,
      bridgePort: port,
      bridgeMac: `02:78:${ss}:01:00:${host}`,
    });
    this.#endpoints = [];
    this.nodes = [];
    for (let i = 1; i <= opts.nodes; i++) {
      const name = `n${i}`;
      const ep = endpoint(`${prefix}-${name}`, 10 + i, `${prefix}${name}`);
      this.#endpoints.push(ep);
      const ns = ep.netns;
      this.nodes.push({
        name,
        netns: ns,
        ifname: 'eth0',
        ipv4: ep.ipv4,
        ipv6: ep.ipv6,
        mac: ep.mac,
        linkLocal: async () => {
          const ll = (await this.#addressesIn(ns)).find((a) => a.family === 'inet6' && a.scope === 'link');
          if (!ll) throw new Error(`ballast lab: ${ns} eth0 has no link-local address${this.ipv6 ? '' : ' (the lab has no IPv6)'}`);
          return ll.address;
        },
      });
    }
    const c = endpoint(`${prefix}-c`, 50, `${prefix}c`);
    this.#endpoints.push(c);
    this.client = { netns: c.netns, ipv4: c.ipv4, ipv6: c.ipv6, mac: c.mac };
    this.#namespaces = [...this.#endpoints.map((e) => e.netns), this.lan];
  }

  /**
   * Builds a lab (needs root): removes leftovers of an earlier run with the same prefix
   * (Lab.cleanupStale), creates the namespaces, bridge and veths, addresses every eth0 and
   * waits until every link is up and every bridge port forwards. Makes the lab CA. On failure
   * it tears down what it built and rethrows.
   */
  static async create(opts: LabOptions): Promise<Lab> {
    checkPrefix(opts.prefix);
    if (!Number.isInteger(opts.subnet) || opts.subnet < 1 || opts.subnet > 250) {
      throw new TypeError(`subnet must be an integer 1..250, got ${opts.subnet}`);
    }
    const nodes = opts.nodes ?? 3;
    if (!Number.isInteger(nodes) || nodes < 1 || nodes > 30) throw new TypeError(`nodes must be an integer 1..30, got ${nodes}`);
    if (process.getuid?.() !== 0) throw new Error('ballast lab: needs root (network namespaces, veth, bridge)');
    for (const lab of live.keys()) {
      if (lab.prefix === opts.prefix) throw new Error(`ballast lab: prefix ${opts.prefix} is in use by a live lab in this process`);
    }
    await Lab.cleanupStale(opts.prefix);
    const dir = await mkdtemp(join(tmpdir(), dirPrefix(opts.prefix)));
    const lab = new Lab({ prefix: opts.prefix, subnet: opts.subnet, nodes, ipv6: opts.ipv6 ?? true }, dir);
    live.set(lab, { teardownSync: () => lab.#teardownSync(), signals: opts.signals ?? true });
    hook();
    try {
      await lab.#build();
      await lab.#makeCa();
    } catch (e) {
      await lab.teardown().catch(() => undefined);
      throw e;
    }
    return lab;
  }

  async #build(): Promise<void> {
    const sysctl = (ns: string, ...kv: string[]): Promise<ExecResult> =>
      // -e: the bridge-nf keys exist only while br_netfilter is loaded
      run('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-e', '-w', ...kv]);
    for (const ns of this.#namespaces) await ip(['netns', 'add', ns]);
    for (const ns of this.#namespaces) await ip(['-n', ns, 'link', 'set', 'lo', 'up']);

    // the switch: no IPv6 of its own (no RS/MLD chatter from the bridge), and when
    // br_netfilter is loaded on the machine, bridged frames must not go through
    // iptables/conntrack of this namespace: the bridge is a plain L2 switch
    await sysctl(
      this.lan,
      'net.ipv6.conf.all.disable_ipv6=1',
      'net.ipv6.conf.default.disable_ipv6=1',
      'net.bridge.bridge-nf-call-iptables=0',
      'net.bridge.bridge-nf-call-ip6tables=0',
      'net.bridge.bridge-nf-call-arptables=0',
    );
    const ss = this.subnet.toString(16).padStart(2, '0');
    // multicast snooping off: VRRP adverts (224.0.0.18, ff02::12) must flood to every port
    // whether or not anyone sent an IGMP/MLD report; STP off: ports forward at once
    await ip(['-n', this.lan, 'link', 'add', 'br0', 'address', `02:78:${ss}:01:00:01`, 'type', 'bridge', 'mcast_snooping', '0', 'stp_state', '0']);
    await ip(['-n', this.lan, 'link', 'set', 'br0', 'up']);

    for (const ep of this.#endpoints) {
      // DAD off before eth0 exists: a device registered in a namespace takes its IPv6 settings
      // from that namespace's `default`, so the link-local and global addresses are usable at
      // once (no "tentative" window in which bind() fails and adverts go unsent)
      await sysctl(
        ep.netns,
        ...(this.ipv6
          ? ['net.ipv6.conf.default.accept_dad=0', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_ra=0']
          : ['net.ipv6.conf.all.disable_ipv6=1', 'net.ipv6.conf.default.disable_ipv6=1']),
      );
      // the peer is born inside the node namespace as eth0: nothing touches the root namespace
      await ip([
        '-n', this.lan, 'link', 'add', ep.bridgePort, 'address', ep.bridgeMac,
        'type', 'veth', 'peer', 'name', 'eth0', 'address', ep.mac, 'netns', ep.netns,
      ]);
      await ip(['-n', this.lan, 'link', 'set', ep.bridgePort, 'master', 'br0']);
      await ip(['-n', this.lan, 'link', 'set', ep.bridgePort, 'up']);
      if (this.ipv6) await sysctl(ep.netns, 'net.ipv6.conf.eth0.accept_dad=0');
      await ip(['-n', ep.netns, 'link', 'set', 'eth0', 'up']);
      await ip(['-n', ep.netns, 'addr', 'add', `${ep.ipv4}/24`, 'dev', 'eth0']);
      if (this.ipv6) await ip(['-n', ep.netns, 'addr', 'add', `${ep.ipv6}/64`, 'dev', 'eth0', 'nodad']);
      // control-plane nodes forward, as kubeadm's preflight requires: a VIP DNATed to another
      // node's apiserver is forwarded traffic
      if (ep.netns !== this.client.netns) {
        await sysctl(ep.netns, 'net.ipv4.ip_forward=1', ...(this.ipv6 ? ['net.ipv6.conf.all.forwarding=1'] : []));
      }
    }

    for (const ep of this.#endpoints) await this.#waitCarrier(ep, true);
    await waitFor(async () => {
      const ports = JSON.parse((await run('bridge', ['-n', this.lan, '-j', 'link'])).stdout) as { ifname?: string; state?: string }[];
      const fwd = new Set(ports.filter((p) => p.state === 'forwarding').map((p) => p.ifname));
      return this.#endpoints.every((e) => fwd.has(e.bridgePort));
    }, { timeoutMs: 5000, intervalMs: 25, what: 'bridge ports forwarding' });
    if (this.ipv6) {
      await waitFor(async () => {
        for (const ep of this.#endpoints) {
          const a = await this.#addressesIn(ep.netns);
          if (!a.some((x) => x.family === 'inet6' && x.scope === 'link') || a.some((x) => x.tentative)) return false;
        }
        return true;
      }, { timeoutMs: 5000, intervalMs: 25, what: 'IPv6 addresses usable (not tentative)' });
    }
  }

  async #makeCa(ca: { certFile: string; keyFile: string } = this.ca, cn = `ballast lab CA ${this.prefix}`): Promise<void> {
    const pki = join(this.dir, 'pki');
    await run('mkdir', ['-p', '-m', '0700', pki]);
    const cnf = join(pki, `${basename(ca.certFile, '.crt')}.cnf`);
    await writeFile(
      cnf,
      [
        '[req]',
        'distinguished_name = dn',
        'prompt = no',
        '[dn]',
        `CN = ${cn}`,
        '[ca_ext]',
        'basicConstraints = critical,CA:TRUE,pathlen:0',
        'keyUsage = critical,keyCertSign,cRLSign',
        'subjectKeyIdentifier = hash',
        '',
      ].join('\n'),
    );
    await run('openssl', [
      'req', '-x509', '-config', cnf, '-extensions', 'ca_ext',
      '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
      '-keyout', ca.keyFile, '-out', ca.certFile, '-days', '1',
    ]);
  }

  /**
   * The serving certificate of `node` (made on first use, signed by the lab CA): SANs are the
   * node's IPv4 and IPv6, both VIPs, 127.0.0.1, ::1, kubernetes, kubernetes.default.svc and
   * localhost. PEM file paths in `dir`.
   */
  async serverCert(node: LabNode): Promise<{ certFile: string; keyFile: string }> {
    const certFile = join(this.dir, 'pki', `${node.name}.crt`);
    if (existsSync(certFile)) return { certFile, keyFile: join(this.dir, 'pki', `${node.name}.key`) };
    return this.issueServerCert(node);
  }

  /**
   * The SANs {@link serverCert} gives `node`: `DNS:name` and `IP:address` entries.
   */
  defaultSans(node: LabNode): string[] {
    return ['DNS:kubernetes', 'DNS:kubernetes.default.svc', 'DNS:localhost', `IP:${node.ipv4}`, `IP:${node.ipv6}`, `IP:${this.vip4}`, `IP:${this.vip6}`, 'IP:127.0.0.1', 'IP:::1'];
  }

  /**
   * (Re)issues `node`'s serving certificate and key (new key, new serial) where
   * {@link serverCert} keeps them, replacing what is there: a running stand-in serves it after
   * {@link reloadApiserverCert}, a started one at once.
   * @param opts.sans the SubjectAltNames (`DNS:x`, `IP:a`; default {@link defaultSans}); `[]` = none (a CN-only certificate)
   * @param opts.omit entries of the default SANs to leave out (e.g. `IP:${lab.vip4}`)
   * @param opts.days validity from now in days (default 1)
   * @param opts.otherCa sign with a second CA (made on first use) that nothing trusts
   */
  async issueServerCert(node: LabNode, opts: { sans?: readonly string[]; omit?: readonly string[]; days?: number; otherCa?: boolean } = {}): Promise<{ certFile: string; keyFile: string }> {
    this.#endpointOf(node);
    const pki = join(this.dir, 'pki');
    const certFile = join(pki, `${node.name}.crt`);
    const keyFile = join(pki, `${node.name}.key`);
    const cnf = join(pki, `${node.name}.cnf`);
    const csr = join(pki, `${node.name}.csr`);
    const omit = new Set(opts.omit ?? []);
    const sans = (opts.sans ?? this.defaultSans(node)).filter((e) => !omit.has(e));
    let ca = this.ca;
    if (opts.otherCa) {
      ca = { certFile: join(pki, 'other-ca.crt'), keyFile: join(pki, 'other-ca.key') };
      if (!existsSync(ca.certFile)) await this.#makeCa(ca, 'ballast lab other CA');
    }
    await writeFile(
      cnf,
      [
        '[req]',
        'distinguished_name = dn',
        'prompt = no',
        '[dn]',
        'CN = kube-apiserver',
        `O = ballast lab ${node.name}`,
        '[server_ext]',
        'basicConstraints = critical,CA:FALSE',
        'keyUsage = critical,digitalSignature',
        'extendedKeyUsage = serverAuth',
        'subjectKeyIdentifier = hash',
        'authorityKeyIdentifier = keyid',
        ...(sans.length === 0 ? [] : [`subjectAltName = ${sans.join(',')}`]),
        '',
      ].join('\n'),
    );
    // written next to the old pair and renamed over it: a stand-in re-reading them never sees half a pair
    await run('openssl', ['req', '-new', '-config', cnf, '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', `${keyFile}.new`, '-out', csr]);
    await run('openssl', [
      'x509', '-req', '-in', csr, '-CA', ca.certFile, '-CAkey', ca.keyFile,
      '-set_serial', `0x01${randomBytes(15).toString('hex')}`, '-days', String(opts.days ?? 1),
      '-extfile', cnf, '-extensions', 'server_ext', '-out', `${certFile}.new`,
    ]);
    await rename(`${keyFile}.new`, keyFile);
    await rename(`${certFile}.new`, certFile);
    return { certFile, keyFile };
  }

  /**
   * Makes `node`'s running stand-in re-read its certificate and key (SIGHUP; new connections get
   * the new pair); resolves once it acknowledged.
   * @throws when no stand-in runs on `node`, or it could not load the files.
   */
  async reloadApiserverCert(node: LabNode): Promise<void> {
    this.#endpointOf(node);
    const p = this.#apiservers.get(node.name);
    if (!p?.running) throw new Error(`ballast lab: no stand-in apiserver runs on ${node.name}`);
    const ack = p.waitForOutput(/certificate (reloaded|reload failed.*)/, { timeoutMs: 5000 });
    p.kill('SIGHUP');
    const m = await ack;
    if (m[1] !== 'reloaded') throw new Error(`ballast lab: the stand-in on ${node.name}: ${m[0]}`);
  }

  #checkNetns(netns: string): void {
    if (this.#gone || this.#down) throw new Error('ballast lab: the lab was torn down');
    if (!this.#namespaces.includes(netns)) {
      throw new Error(`ballast lab: ${netns} is not one of this lab's namespaces (${this.#namespaces.join(', ')})`);
    }
  }

  /**
   * Runs `argv` inside a lab namespace (`ip netns exec`) and resolves with its output.
   * Rejects on a non-zero exit or after `timeoutMs` (default 10000 ms; the command is
   * SIGKILLed) unless `allowFail`, which resolves with the code instead (124: timed out).
   */
  exec(netns: string, argv: string[], opts: { timeoutMs?: number; allowFail?: boolean } & LabRunOptions = {}): Promise<ExecResult> {
    this.#checkNetns(netns);
    this.#checkCgroup(opts.cgroup);
    const [file, args] = netnsArgv(netns, argv, opts);
    return run(file, args, opts);
  }

  /**
   * Starts `argv` inside a lab namespace in its own process group, tracked for teardown.
   * stdout+stderr are captured (see LabProcess.output) and, with `logFile`, appended to that
   * file (relative paths are under `dir`). `env` is merged over this process's environment.
   */
  spawn(netns: string, argv: string[], opts: { logFile?: string; env?: Record<string, string> } & LabRunOptions = {}): LabProcess {
    return this.#spawn(netns, argv, opts);
  }

  #spawn(netns: string, argv: string[], opts: { logFile?: string; env?: Record<string, string> } & LabRunOptions = {}): LabProcessImpl {
    this.#checkNetns(netns);
    this.#checkCgroup(opts.cgroup);
    // `ip netns exec` (and nsenter, and the cgroup wrapper) exec the command in place, so the
    // PID we get is the command's own
    const [file, args] = netnsArgv(netns, argv, opts);
    const child = spawn(file, args, {
      detached: true,
      stdio: [opts.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...opts.env },
    });
    const log = opts.logFile === undefined ? undefined : createWriteStream(isAbsolute(opts.logFile) ? opts.logFile : join(this.dir, opts.logFile), { flags: 'a' });
    const p = new LabProcessImpl(child, log);
    this.#procs.add(p);
    void p.exited.then(() => this.#procs.delete(p));
    return p;
  }

  /**
   * The cgroup-v2 child of `node`: `<cgroup2 root>/${prefix}-${node.name}` (e.g.
   * /sys/fs/cgroup/unified/bebp-n1 on a hybrid host), created on first use and removed by
   * teardown (its processes are killed first). Pass it as `{ cgroup }` to exec / spawn.
   */
  async cgroup(node: LabNode): Promise<string> {
    this.#endpointOf(node);
    if (this.#gone || this.#down) throw new Error('ballast lab: the lab was torn down');
    const known = this.#cgroups.get(node.name);
    if (known !== undefined) return known;
    const dir = join(cgroupRoot(), `${this.prefix}-${node.name}`);
    await mkdir(dir, { recursive: true });
    this.#cgroups.set(node.name, dir);
    return dir;
  }

  /** The PIDs in `node`'s cgroup now (empty when it was never made). */
  async cgroupPids(node: LabNode): Promise<number[]> {
    this.#endpointOf(node);
    const dir = this.#cgroups.get(node.name);
    if (dir === undefined) return [];
    return (await readFile(join(dir, 'cgroup.procs'), 'utf8')).split('\n').filter(Boolean).map(Number);
  }

  #checkCgroup(cgroup: string | undefined): void {
    if (cgroup === undefined) return;
    if (![...this.#cgroups.values()].includes(cgroup)) {
      throw new Error(`ballast lab: ${cgroup} is not a cgroup of this lab (make one with lab.cgroup(node))`);
    }
  }

  async #waitCarrier(ep: Endpoint, up: boolean): Promise<void> {
    await waitFor(async () => {
      const [l] = JSON.parse((await ip(['-n', ep.netns, '-j', 'link', 'show', 'dev', 'eth0'])).stdout) as { flags?: string[] }[];
      const hasCarrier = l?.flags?.includes('LOWER_UP') ?? false;
      return hasCarrier === up;
    }, { timeoutMs: 5000, intervalMs: 25, what: `${ep.netns} eth0 carrier ${up ? 'up' : 'down'}` });
  }

  #endpointOf(node: LabNode): Endpoint {
    const ep = this.#endpoints.find((e) => e.netns === node.netns);
    if (!ep || !this.nodes.some((n) => n.netns === node.netns)) throw new Error(`ballast lab: ${node.name} is not a node of this lab`);
    return ep;
  }

  /**
   * Unplugs `node`: the veth end on the bridge side goes down. To the other nodes and the
   * client the node falls silent at once (no frame in or out), which is what a dead node looks
   * like to them. The node itself sees its eth0 lose carrier (LOWER_UP cleared, addresses
   * kept), like a pulled cable. Resolves once eth0 reports no carrier.
   */
  async linkDown(node: LabNode): Promise<void> {
    const ep = this.#endpointOf(node);
    await ip(['-n', this.lan, 'link', 'set', ep.bridgePort, 'down']);
    await this.#waitCarrier(ep, false);
  }

  /** Plugs `node` back in; resolves once its eth0 has carrier and its bridge port forwards. */
  async linkUp(node: LabNode): Promise<void> {
    const ep = this.#endpointOf(node);
    await ip(['-n', this.lan, 'link', 'set', ep.bridgePort, 'up']);
    await this.#waitCarrier(ep, true);
    await waitFor(async () => {
      const [p] = JSON.parse((await run('bridge', ['-n', this.lan, '-j', 'link', 'show', 'dev', ep.bridgePort])).stdout) as { state?: string }[];
      return p?.state === 'forwarding';
    }, { timeoutMs: 5000, intervalMs: 25, what: `${ep.bridgePort} forwarding` });
  }

  async #addressesIn(netns: string): Promise<LabAddress[]> {
    const [link] = JSON.parse((await ip(['-n', netns, '-j', 'addr', 'show', 'dev', 'eth0'])).stdout) as {
      addr_info?: { family?: string; local?: string; prefixlen?: number; scope?: string; secondary?: boolean; tentative?: boolean; dadfailed?: boolean }[];
    }[];
    return (link?.addr_info ?? [])
      .filter((a) => (a.family === 'inet' || a.family === 'inet6') && typeof a.local === 'string')
      .map((a) => ({
        address: a.local as string,
        prefixLen: a.prefixlen ?? 0,
        family: a.family as 'inet' | 'inet6',
        scope: a.scope ?? 'global',
        secondary: a.secondary === true,
        tentative: a.tentative === true,
        dadfailed: a.dadfailed === true,
      }));
  }

  /** The addresses on `node`'s eth0 (`ip -j addr show dev eth0`), IPv4 and IPv6. */
  addresses(node: LabNode): Promise<LabAddress[]> {
    this.#endpointOf(node);
    return this.#addressesIn(node.netns);
  }

  /** The nodes that have `vip` on eth0 right now (0, 1, or more during a split brain). */
  async holders(vip: string): Promise<LabNode[]> {
    const want = vip.toLowerCase();
    const has = await Promise.all(this.nodes.map(async (n) => (await this.#addressesIn(n.netns)).some((a) => a.address.toLowerCase() === want)));
    return this.nodes.filter((_, i) => has[i]);
  }

  /**
   * The MAC that `netns`'s neighbour table holds for `address` on eth0 (lowercase), or null
   * when there is no entry or it is unresolved (INCOMPLETE / FAILED).
   */
  async neighbor(netns: string, address: string): Promise<string | null> {
    this.#checkNetns(netns);
    const entries = JSON.parse((await ip(['-n', netns, '-j', 'neigh', 'show', 'to', address, 'dev', 'eth0'])).stdout) as { lladdr?: string; state?: string[] }[];
    const e = entries.find((x) => typeof x.lladdr === 'string' && !(x.state ?? []).some((s) => s === 'FAILED' || s === 'INCOMPLETE'));
    return e?.lladdr?.toLowerCase() ?? null;
  }

  /**
   * One bounded reachability check from `netns` to `address` (timeoutMs default 1000 ms).
   * Uses `ping -c 1 -W 1` when iputils ping is installed; otherwise a TCP SYN to port 9 whose
   * RST proves the round trip (see prober.ts `--reach`). Never rejects for unreachable.
   */
  async ping(netns: string, address: string, opts: { timeoutMs?: number } = {}): Promise<{ ok: boolean; via: 'icmp' | 'tcp'; detail: string }> {
    const timeoutMs = opts.timeoutMs ?? 1000;
    if (hasPing()) {
      const r = await this.exec(netns, ['ping', '-n', '-c', '1', '-W', String(Math.max(1, Math.ceil(timeoutMs / 1000))), address], {
        allowFail: true,
        timeoutMs: timeoutMs + 3000,
      });
      return { ok: r.code === 0, via: 'icmp', detail: (r.stdout + r.stderr).trim().split('\n').slice(-2).join(' ') };
    }
    const r = await this.exec(netns, [process.execPath, compiledScript('prober'), '--reach', address, '--timeout', String(timeoutMs)], {
      allowFail: true,
      timeoutMs: timeoutMs + 5000,
    });
    const line = r.stdout.trim().split('\n').pop() ?? '';
    try {
      const rr = JSON.parse(line) as ReachResult;
      return { ok: rr.ok, via: 'tcp', detail: `${rr.how} in ${rr.ms} ms` };
    } catch {
      return { ok: false, via: 'tcp', detail: `prober failed (${r.code}): ${r.stderr.trim()}` };
    }
  }

  /**
   * Gives the client namespace's eth0 `count` (1..100) more addresses, for a client that spreads
   * its connections over source addresses (each connection binds one): 10.78.S.150, .151, …
   * /24 and, in an IPv6 lab, fd78:S::150, … /64 (nodad: usable at once). Idempotent (`ip addr
   * replace`); they go with the namespace at teardown.
   * @returns the addresses, in order.
   */
  async addClientSources(count: number): Promise<{ ipv4: string[]; ipv6: string[] }> {
    if (!Number.isInteger(count) || count < 1 || count > 100) throw new RangeError(`count must be an integer 1..100, got ${count}`);
    const hosts = Array.from({ length: count }, (_, i) => 150 + i);
    const ipv4 = hosts.map((h) => `10.78.${this.subnet}.${h}`);
    const ipv6 = this.ipv6 ? hosts.map((h) => `fd78:${this.subnet}::${h}`) : [];
    const batch = join(this.dir, 'client-sources.batch');
    await writeFile(batch, [...ipv4.map((a) => `addr replace ${a}/24 dev eth0`), ...ipv6.map((a) => `addr replace ${a}/64 dev eth0 nodad`), ''].join('\n'));
    await ip(['-n', this.client.netns, '-batch', batch]);
    return { ipv4, ipv6 };
  }

  // -------------------------------------------------------------------------------------------
  // stand-in apiservers

  /**
   * Starts one TLS stand-in apiserver per node (port default 6443, dual-stack) and resolves
   * once each one answers /readyz 200 from the client namespace over IPv4 with the lab CA.
   * @param opts.store the stand-ins share one EndpointSlice store ({@link sliceStore}), each adds
   *   its node's IPv4 address (IPv6 in an IPv6 lab with `storeFamily: 6`) to the `kubernetes`
   *   slice when it starts and removes it on SIGTERM, as kube-apiservers do;
   * @param opts.token the bearer token the /apis paths require (see {@link writeKubeconfig});
   * @param opts.shutdownDelayMs how long a stopped stand-in keeps serving after it left the slice.
   * @param opts.tickMs ms between the events of the stand-ins' ticking watch (default 200, see apiserver-standin.ts).
   */
  async startApiservers(opts: { port?: number; store?: boolean; storeFamily?: 4 | 6; token?: string; shutdownDelayMs?: number; bookmarkMs?: number; tickMs?: number; nodes?: LabNode[] } = {}): Promise<void> {
    this.#apiserverPort = opts.port ?? 6443;
    this.#apiserverOpts = {
      store: opts.store ?? false,
      storeFamily: opts.storeFamily ?? 4,
      ...(opts.token === undefined ? {} : { token: opts.token }),
      shutdownDelayMs: opts.shutdownDelayMs ?? 0,
      ...(opts.bookmarkMs === undefined ? {} : { bookmarkMs: opts.bookmarkMs }),
      ...(opts.tickMs === undefined ? {} : { tickMs: opts.tickMs }),
    };
    compiledScript('apiserver-standin');
    compiledScript('prober');
    await Promise.all((opts.nodes ?? this.nodes).map((n) => this.startApiserver(n)));
  }

  /** The shared EndpointSlice store's directory (lab/endpointslice-store.ts), created on first use. */
  sliceStore(): string {
    const dir = join(this.dir, 'endpointslices');
    initStore(dir);
    return dir;
  }

  /** Writes one change to the shared store, as if an apiserver had (e.g. removes an address whose stand-in still runs). */
  sliceChange(change: SliceChange): void {
    appendChange(this.sliceStore(), change);
  }

  /** Compacts the shared store: watches and lists from an older resourceVersion get 410. @returns the floor. */
  compactSlices(): number {
    return compactStore(this.sliceStore());
  }

  /**
   * Writes a kubeconfig for `node` like kubeadm's admin.conf: server = https://VIP:port (the
   * lab's vip4, or vip6 with family 6), the lab CA inline, a bearer token user.
   * @returns its path (in the lab directory).
   */
  async writeKubeconfig(node: LabNode, opts: { token: string; family?: 4 | 6; port?: number; path?: string }): Promise<string> {
    const vip = opts.family === 6 ? `[${this.vip6}]` : this.vip4;
    const path = opts.path ?? join(this.dir, `kubeconfig-${node.name}.yaml`);
    const text = kubeconfigYaml(`https://${vip}:${opts.port ?? this.#apiserverPort}`, await readFile(this.ca.certFile), opts.token);
    await writeFile(path, text, { mode: 0o600 });
    return path;
  }

  /**
   * (Re)starts `node`'s stand-in (ready), on the port of the last startApiservers (6443 by
   * default); resolves once it serves /readyz 200 to the client. No-op while it runs.
   */
  async startApiserver(node: LabNode): Promise<void> {
    this.#endpointOf(node);
    const running = this.#apiservers.get(node.name);
    if (running?.running) return;
    const script = compiledScript('apiserver-standin');
    const { certFile, keyFile } = await this.serverCert(node);
    const o = this.#apiserverOpts;
    const p = this.#spawn(
      node.netns,
      [
        process.execPath, script,
        '--name', node.name, '--cert', certFile, '--key', keyFile,
        '--port', String(this.#apiserverPort), '--host', this.ipv6 ? '::' : '0.0.0.0',
        ...(o.store ? ['--store', this.sliceStore(), '--address', o.storeFamily === 6 ? node.ipv6 : node.ipv4] : []),
        ...(o.token === undefined ? [] : ['--token', o.token]),
        ...(o.shutdownDelayMs > 0 ? ['--shutdown-delay', String(o.shutdownDelayMs)] : []),
        ...(o.tickMs === undefined ? [] : ['--tick', String(o.tickMs)]),
        ...(o.bookmarkMs === undefined ? [] : ['--bookmark-ms', String(o.bookmarkMs)]),
        '--readyz-delay-file', this.#readyzDelayFile(node),
      ],
      { logFile: `apiserver-${node.name}.log` },
    );
    this.#apiservers.set(node.name, p);
    await p.waitForOutput(/listening on/, { timeoutMs: 10_000, includeExisting: true });
    const url = `https://${node.ipv4}:${this.#apiserverPort}/readyz`;
    await waitFor(async () => (await probeOnce(this, url, { timeoutMs: 2000 })).ok, { timeoutMs: 10_000, intervalMs: 100, what: `${url} to answer 200` });
  }

  /** Stops `node`'s stand-in (SIGTERM, SIGKILL after 3000 ms); no-op when it is not running. */
  async stopApiserver(node: LabNode): Promise<void> {
    this.#endpointOf(node);
    const p = this.#apiservers.get(node.name);
    this.#apiservers.delete(node.name);
    if (p) await p.stop('SIGTERM', 3000);
  }

  /**
   * Makes `node`'s stand-in answer /readyz 200 (ready) or 500 (not ready); resolves once the
   * stand-in acknowledged the signal (SIGUSR2 / SIGUSR1).
   */
  async setReady(node: LabNode, ready: boolean): Promise<void> {
    this.#endpointOf(node);
    const p = this.#apiservers.get(node.name);
    if (!p?.running) throw new Error(`ballast lab: no stand-in apiserver runs on ${node.name}`);
    const ack = p.waitForOutput(new RegExp(`ready=${ready}`), { timeoutMs: 5000 });
    p.kill(ready ? 'SIGUSR2' : 'SIGUSR1');
    await ack;
  }

  #readyzDelayFile(node: LabNode): string {
    return join(this.dir, `readyz-delay-${node.name}`);
  }

  /**
   * Makes `node`'s stand-in answer each /readyz `ms` milliseconds late (0: at once again), as an
   * apiserver under load does; takes effect from the next request (the stand-in reads the file
   * per /readyz).
   */
  async setReadyzDelay(node: LabNode, ms: number): Promise<void> {
    this.#endpointOf(node);
    if (!Number.isInteger(ms) || ms < 0 || ms > 60_000) throw new RangeError(`ms must be an integer 0..60000, got ${ms}`);
    await writeFile(this.#readyzDelayFile(node), ms === 0 ? '' : String(ms));
  }

  /** The stand-in apiserver process of `node`, if one runs. */
  apiserver(node: LabNode): LabProcess | undefined {
    const p = this.#apiservers.get(node.name);
    return p?.running ? p : undefined;
  }

  // -------------------------------------------------------------------------------------------
  // teardown

  /**
   * Stops every process the lab started (SIGTERM, SIGKILL after 2000 ms), kills whatever else
   * still runs inside the lab's namespaces, deletes the namespaces (which removes the veths and
   * the bridge with them) and the temp dir (kept with BALLAST_LAB_KEEP=1). Idempotent: later
   * calls return the first call's promise (a failed teardown may be retried).
   */
  teardown(): Promise<void> {
    if (!this.#down) {
      this.#down = this.#teardown().catch((e: unknown) => {
        this.#down = undefined;
        throw e;
      });
    }
    return this.#down;
  }

  async #teardown(): Promise<void> {
    if (!this.#gone) {
      await Promise.all([...this.#procs].map((p) => p.stop('SIGTERM', 2000)));
      this.#apiservers.clear();
      for (const dir of this.#cgroups.values()) await removeCgroup(dir);
      this.#cgroups.clear();
      for (const ns of this.#namespaces) await removeNetns(ns);
      const left = (await listNetns()).filter((n) => this.#namespaces.includes(n));
      if (left.length > 0) throw new Error(`ballast lab: namespaces left after teardown: ${left.join(', ')}`);
      if (!keep()) await rm(this.dir, { recursive: true, force: true });
      this.#gone = true;
    }
    live.delete(this);
    unhook();
  }

  /** Synchronous teardown for process 'exit' and signals: SIGKILL, delete, remove. */
  #teardownSync(): void {
    if (this.#gone) return;
    for (const p of this.#procs) p.killSync();
    for (const dir of this.#cgroups.values()) removeCgroupSync(dir);
    for (const ns of this.#namespaces) {
      killNetnsPidsSync(ns);
      spawnSync('ip', ['netns', 'del', ns], { timeout: 5000, stdio: 'ignore' });
    }
    if (!keep()) rmSync(this.dir, { recursive: true, force: true });
    this.#gone = true;
    live.delete(this);
  }

  /**
   * Removes what a crashed earlier run with `prefix` left behind: kills the processes inside
   * its namespaces and deletes them (`${prefix}-lan`, `${prefix}-c`, `${prefix}-n<k>`), deletes
   * links named `${prefix}c` / `${prefix}n<k>` in this namespace, and removes its temp dirs
   * (unless BALLAST_LAB_KEEP=1). Names of other prefixes never match. Refuses a prefix that a
   * live lab in this process uses. Resolves with what it removed.
   */
  static async cleanupStale(prefix: string): Promise<StaleReport> {
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
}

let pingPresent: boolean | undefined;
function hasPing(): boolean {
  pingPresent ??= spawnSync('sh', ['-c', 'command -v ping'], { stdio: 'ignore' }).status === 0;
  return pingPresent;
}

// ---------------------------------------------------------------------------------------------
/**
 * A kubeconfig (YAML text) like kubeadm's admin.conf: one cluster at `server` with the CA (PEM)
 * inline, one user with a bearer token, one current context.
 */
export function kubeconfigYaml(server: string, caPem: Buffer, token: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: lab',
    '  cluster:',
    `    server: ${server}`,
    `    certificate-authority-data: ${caPem.toString('base64')}`,
    'users:',
    '- name: admin',
    '  user:',
    `    token: ${token}`,
    'contexts:',
    '- name: admin@lab',
    '  context:',
    '    cluster: lab',
    '    user: admin',
    'current-context: admin@lab',
    '',
  ].join('\n');
}

// the prober, from the client namespace

/**
 * One HTTPS GET from the client namespace on a new connection, verified against the lab CA;
 * resolves with its ProbeResult (never rejects for an HTTP or network failure).
 * timeoutMs default 2000 ms.
 */
export async function probeOnce(lab: Lab, url: string, opts: { timeoutMs?: number } = {}): Promise<ProbeResult> {
  const timeoutMs = opts.timeoutMs ?? 2000;
  const r = await lab.exec(
    lab.client.netns,
    // duration 0 → exactly one request
    [process.execPath, compiledScript('prober'), '--url', url, '--ca', lab.ca.certFile, '--interval', '1000', '--duration', '0', '--timeout', String(timeoutMs)],
    { timeoutMs: timeoutMs + 10_000 },
  );
  const first = r.stdout.split('\n').find((l) => l.startsWith('{') && !l.includes('"summary"'));
  if (first === undefined) throw new Error(`ballast lab: prober printed no result: ${r.stdout}${r.stderr}`);
  return JSON.parse(first) as ProbeResult;
}

/**
 * Calls `onObject` for every line of a lab process's stdout that is a JSON object (the
 * prober's and the test clients' protocol); other lines and unparsable ones are skipped.
 */
export function onJsonLines<T>(proc: LabProcess, onObject: (o: T) => void): void {
  let partial = '';
  proc.child.stdout?.on('data', (buf: Buffer) => {
    partial += buf.toString('utf8');
    const lines = partial.split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('{')) continue;
      let o: T;
      try {
        o = JSON.parse(line) as T;
      } catch {
        continue; // not ours
      }
      onObject(o);
    }
  });
}

/**
 * Starts the prober (lab/clients/prober.ts) in the client namespace against `opts.url` with the
 * lab CA. `done` resolves with the prober's summary plus every result when it ends on its own
 * bounds; `stop()` ends it early (SIGTERM) and resolves the same way. A prober that ends
 * without a summary rejects `done`. A watchdog SIGKILLs it 15 s past its duration.
 */
export function runProber(lab: Lab, opts: RunProberOptions): ProberRun {
  const intervalMs = opts.intervalMs ?? 10;
  const durationMs = opts.durationMs ?? 10_000;
  const timeoutMs = opts.timeoutMs ?? 250;
  const proc = lab.spawn(
    opts.netns ?? lab.client.netns,
    [
      process.execPath, compiledScript('prober'),
      '--url', opts.url, '--ca', lab.ca.certFile,
      '--interval', String(intervalMs), '--duration', String(durationMs), '--timeout', String(timeoutMs),
      ...(opts.untilFile === undefined ? [] : ['--until-file', opts.untilFile]),
    ],
    { ...(opts.logFile === undefined ? {} : { logFile: opts.logFile }), ...(opts.cgroup === undefined ? {} : { cgroup: opts.cgroup }) },
  );
  const results: ProbeResult[] = [];
  let summary: Summary | undefined;
  onJsonLines<ProbeResult | Summary>(proc, (o) => {
    if ('summary' in o) summary = o;
    else results.push(o);
  });
  const watchdog = setTimeout(() => proc.kill('SIGKILL'), durationMs + timeoutMs + 15_000);
  const done = proc.exited.then((code) => {
    clearTimeout(watchdog);
    if (!summary) throw new Error(`ballast lab: prober ended (code ${code}) without a summary; output:\n${proc.output().slice(-2000)}`);
    return { ...summary, results: [...results].sort((a, b) => a.t - b.t) };
  });
  // a caller that only uses stop() must not see an unhandled rejection
  done.catch(() => undefined);
  return {
    process: proc,
    results: () => [...results],
    now: () => results.reduce((t, r) => Math.max(t, r.t), 0),
    stop: () => {
      proc.kill('SIGTERM');
      return done;
    },
    done,
  };
}
