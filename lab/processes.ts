/**
 * The lab's processes: commands run to completion (`run`, `ip`), processes spawned into a lab
 * namespace and tracked by PID ({@link LabProcessImpl}: output captured, stopped by process
 * group), the argv that enters a namespace and a cgroup, and the compiled scripts the children
 * run (dist/lab). lab.ts, the door, re-exports what callers use.
 */
import { execFile, type ChildProcess } from 'node:child_process';
import { existsSync, statSync, type WriteStream } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep } from './wait.js';

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

export function run(file: string, args: string[], opts: { timeoutMs?: number; allowFail?: boolean } = {}): Promise<ExecResult> {
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

export const ip = (args: string[], opts?: { timeoutMs?: number; allowFail?: boolean }): Promise<ExecResult> => run('ip', args, opts);

export function isErrno(e: unknown, code: string): boolean {
  return e instanceof Error && (e as NodeJS.ErrnoException).code === code;
}

/**
 * argv prefix that runs a command in `netns` (and, with `cgroup`, in that cgroup): the cgroup is
 * joined by a shell that then execs the rest, so the PID is the command's own. `hostMounts`
 * enters only the network namespace (nsenter --net) instead of `ip netns exec`, which also
 * makes a mount namespace with a fresh /sys: a process that needs the machine's /sys/fs/bpf and
 * cgroup2 mount (a BPF loader) must keep the machine's mounts.
 */
export function netnsArgv(netns: string, argv: string[], opts: { cgroup?: string; hostMounts?: boolean }): [string, string[]] {
  const enter = opts.hostMounts ? ['nsenter', `--net=/run/netns/${netns}`, '--'] : ['ip', 'netns', 'exec', netns];
  if (opts.cgroup === undefined) return [enter[0]!, [...enter.slice(1), ...argv]];
  return ['sh', ['-c', 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', 'lab-cgroup', opts.cgroup, ...enter, ...argv]];
}

// ---------------------------------------------------------------------------------------------
// processes

const OUTPUT_LIMIT = 1 << 20;

/** A process the lab started: {@link LabProcess} plus what the lab itself needs (killSync, running). */
export class LabProcessImpl implements LabProcess {
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
