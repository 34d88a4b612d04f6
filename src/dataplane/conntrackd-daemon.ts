/**
 * One conntrackd (conntrack-tools) as a child process of the agent: started, watched, started
 * again after a back-off when it exits (1 s, doubling, at most 30 s), paused on purpose (its exit
 * then is no failure) and stopped (SIGTERM, SIGKILL after 2 s). What connection sync does with
 * it — the commit, the purge, the preempt hold — is agent/phases/connection-sync.ts's.
 *
 * It runs through setpriv(1) `--pdeathsig TERM` where there is one: the kernel sends the daemon
 * SIGTERM when the agent dies, however it dies (prctl(2) PR_SET_PDEATHSIG, kept across the
 * exec), so a SIGKILLed agent leaves no orphaned daemon holding the socket.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, rmSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import type { Log } from '../log/log.js';
import type { ConnectionSyncStatus } from './conntrackd.js';

/** Back-off of a daemon that exited, ms: the first wait, doubled at each exit up to the last. */
const RESTART_MIN_MS = 1000;
const RESTART_MAX_MS = 30_000;
/** How long a stop waits after SIGTERM before SIGKILL, ms. */
const KILL_AFTER_MS = 2000;

/** The daemon's side of /status `connectionSync`. */
export type DaemonState = Exclude<ConnectionSyncStatus['state'], 'off'>;

/** Options of {@link ConntrackdDaemon}. */
export interface ConntrackdDaemonOptions {
  /** conntrackd's path or name on PATH. */
  binary: string;
  /** Its configuration file (`-C`). */
  config: string;
  /** Its lock file: removed before each start (conntrackd refuses to start while it exists). */
  lock: string;
  log: Log;
  /** Called each time a daemon has started (its process exists), with that process. */
  onStarted?: (child: ChildProcess) => void;
}

/** A supervised conntrackd; {@link state}, {@link error} and {@link restarts} are what /status shows of it. */
export class ConntrackdDaemon {
  state: DaemonState = 'starting';
  /** Why it is not running (absent while it is). */
  error: string | undefined;
  /** Times it exited and was started again. */
  restarts = 0;
  #child: ChildProcess | null = null;
  #restartTimer: NodeJS.Timeout | null = null;
  #backoff = RESTART_MIN_MS;
  #stopping = false;
  #pausing = false;

  constructor(private readonly o: ConntrackdDaemonOptions) {}

  /** Leaves the daemon unstarted for good: `error` says why (e.g. its configuration could not be written). */
  unavailable(error: string): void {
    this.state = 'unavailable';
    this.error = error;
  }

  /** Starts the daemon (nothing once stopping or unavailable). Errors are reported through `state` and the log, never thrown. */
  start(): void {
    if (this.#stopping || this.state === 'unavailable') return;
    const { binary, config, lock, log } = this.o;
    rmSync(lock, { force: true });
    const setpriv = findProgram('setpriv');
    const program = findProgram(binary);
    const c =
      setpriv !== null && program !== null
        ? spawn(setpriv, ['--pdeathsig', 'TERM', '--', program, '-C', config], { stdio: ['ignore', 'pipe', 'pipe'] })
        : spawn(binary, ['-C', config], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#child = c;
    let tail = '';
    const keep = (s: Buffer): void => void (tail = (tail + s.toString('utf8')).slice(-400));
    c.stdout?.on('data', keep);
    c.stderr?.on('data', keep);
    c.once('error', (err: NodeJS.ErrnoException) => {
      // ENOENT: not installed. Left at that: the VIP moves without the connections
      this.unavailable(`cannot run ${binary}: ${err.code ?? err.message} (Debian package "conntrackd")`);
      log.error({ err: err.message, code: err.code }, 'connection sync: conntrackd cannot run; connections through the VIP will not survive a move');
    });
    c.once('spawn', () => {
      this.state = 'running';
      this.error = undefined;
      log.info({ pid: c.pid, config }, 'connection sync: conntrackd started');
      this.o.onStarted?.(c);
    });
    c.once('exit', (code, signal) => {
      if (this.#child === c) this.#child = null;
      if (this.#stopping || this.#pausing || this.state === 'unavailable') return;
      this.state = 'restarting';
      this.restarts++;
      const lastLine = tail.trim().split('\n').at(-1) ?? '';
      this.error = `conntrackd exited (${signal ?? `status ${String(code)}`}): ${lastLine}`;
      log.error({ code, signal, lastLine, restartInMs: this.#backoff }, 'connection sync: conntrackd exited; starting it again');
      this.#restartTimer = setTimeout(() => this.start(), this.#backoff);
      this.#restartTimer.unref();
      this.#backoff = Math.min(this.#backoff * 2, RESTART_MAX_MS);
    });
  }

  /** The running daemon's process; null while none runs (a timer set for an earlier one then acts on nothing). */
  current(): ChildProcess | null {
    return this.state === 'running' ? this.#child : null;
  }

  /** Stops the daemon on purpose, to be started again by {@link resume}; resolves once it exited. */
  async pause(): Promise<void> {
    this.state = 'restarting';
    this.#pausing = true;
    await this.#kill();
  }

  /** Starts it again after {@link pause}. */
  resume(): void {
    this.#pausing = false;
    this.start();
  }

  /** Stops it for good (SIGTERM, SIGKILL after 2 s); resolves once it exited. */
  async stop(): Promise<void> {
    this.#stopping = true;
    await this.#kill();
  }

  async #kill(): Promise<void> {
    if (this.#restartTimer) clearTimeout(this.#restartTimer);
    const c = this.#child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    c.kill('SIGTERM');
    const timer = setTimeout(() => c.kill('SIGKILL'), KILL_AFTER_MS);
    await exited;
    clearTimeout(timer);
  }
}

/**
 * The absolute path of the executable `name` on PATH (`name` itself when it holds a slash and is
 * executable), or null when there is none: spawn through a wrapper cannot report ENOENT itself.
 */
function findProgram(name: string): string | null {
  const candidates = name.includes('/') ? [name] : (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(delimiter).map((d) => join(d, name));
  for (const c of candidates) {
    try {
      accessSync(c, fsConstants.X_OK);
      return c;
    } catch {
      // not here
    }
  }
  return null;
}
