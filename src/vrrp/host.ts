/**
 * The main thread's handle on the election worker (worker.ts): starts it, asks it for status,
 * passes priority changes and reconfigurations, and stops it.
 */
import { setFlagsFromString } from 'node:v8';
import { Worker } from 'node:worker_threads';
import type { EngineEvent, EngineOptions, EngineReconfigure, EngineStatus } from './engine.js';
import type { FromWorker, ToWorker } from './worker.js';

/** The engine could not start; `code`/`syscall` come from the failing call (errno name). */
export class EngineStartError extends Error {
  constructor(message: string, readonly code?: string, readonly syscall?: string) {
    super(message);
    this.name = 'EngineStartError';
  }
}

/**
 * The election worker's heap limits, MiB (Worker resourceLimits): the old generation at several
 * times what the engine uses (~7 MiB, most of it Node's own worker bootstrap), the young
 * generation at 4 MiB (with cli.ts's --semi-space-growth-factor=1 it stays at its initial 2 MiB
 * anyway; the cap keeps a burst from growing it).
 */
export const WORKER_LIMITS = { maxOldGenerationSizeMb: 48, maxYoungGenerationSizeMb: 4 } as const;

const WORKER_URL = new URL('./worker.js', import.meta.url);

/** The worker prewarmWorker started, until VrrpHost.start takes it; `dead` once it errored or exited. */
let prewarmed: { worker: Worker; dead: boolean } | null = null;

/**
 * Starts the election worker's thread ahead of VrrpHost.start (its isolate's boot and its
 * modules, ~100-250 ms, then overlap the agent's other start-up phases; measured in
 * docs/performance.md): the next VrrpHost.start uses it. Until then it does not keep the process
 * alive. Idempotent.
 */
export function prewarmWorker(): void {
  if (prewarmed) return;
  const p = { worker: new Worker(WORKER_URL, { workerData: null, resourceLimits: WORKER_LIMITS }), dead: false };
  // never an unhandled 'error': a broken prewarmed worker is replaced by a fresh one at the start
  p.worker.once('error', () => (p.dead = true)).once('exit', () => (p.dead = true));
  p.worker.unref();
  prewarmed = p;
}

/** Ends a prewarmed worker no VrrpHost.start took (a start-up that failed before its election). */
export async function discardPrewarmed(): Promise<void> {
  const p = prewarmed;
  prewarmed = null;
  if (p && !p.dead) await p.worker.terminate();
}

/** The prewarmed worker, if one is alive (ref'd again); null otherwise. */
function takePrewarmed(): Worker | null {
  const p = prewarmed;
  prewarmed = null;
  if (!p) return null;
  if (p.dead) return null;
  p.worker.ref();
  return p.worker;
}

/**
 * V8 flags for a SCHED_FIFO election thread (vrrp.realtimePriority > 0), process-wide: no GC
 * work on V8's helper threads, so that no collection of the worker's heap waits for one.
 * The helpers run with normal scheduling; on a CPU-starved node (stress-ng on every core) the
 * real-time thread waited for a preempted one: collections of a heap of a few MiB that take
 * about a millisecond paused the worker up to ~50 ms (/status timing.gc.maxMsByKind, minor
 * and incremental; bench/stress.ts), longer than a Backup's Master_Down_Interval at 10 ms
 * adverts (36 ms), and a Backup took over. Without them the worker scavenges, marks and sweeps
 * its heap itself, at its own priority.
 *   --no-parallel-scavenge, --no-parallel-compaction, --no-parallel-pointer-update,
 *   --no-parallel-weak-ref-clearing: the pauses are done by the collecting thread alone.
 *   --no-concurrent-marking, --no-concurrent-sweeping, --no-concurrent-array-buffer-sweeping:
 *   marking runs as incremental steps on the collecting thread, sweeping lazily on it.
 * They are the parts of --single-threaded-gc that may change in a running process: at run
 * time V8 does not apply that flag's implications, and --no-parallel-marking set at run time
 * makes the next major GC fail V8's own check (a fatal error, Node 24 / V8 13.6). The main
 * thread's collections lose their helpers too: its (rare) major GCs do all their marking and
 * sweeping on the main thread, which only delays health checks and the admin API a little
 * (docs/config.md vrrp.realtimePriority). Normal scheduling (the default) sets nothing.
 */
export const REALTIME_GC_FLAGS: readonly string[] = [
  '--no-parallel-scavenge',
  '--no-parallel-compaction',
  '--no-parallel-pointer-update',
  '--no-parallel-weak-ref-clearing',
  '--no-concurrent-marking',
  '--no-concurrent-sweeping',
  '--no-concurrent-array-buffer-sweeping',
];

let realtimeGcSet = false;
function realtimeGcFlags(): void {
  if (realtimeGcSet) return;
  realtimeGcSet = true;
  for (const f of REALTIME_GC_FLAGS) setFlagsFromString(f);
}

/** A running election worker. */
export class VrrpHost {
  private nextId = 1;
  private readonly pending = new Map<number, (s: EngineStatus) => void>();
  private readonly reconfiguring = new Map<number, (error: string | undefined) => void>();
  private stopping: Promise<void> | null = null;
  private exited = false;

  private constructor(
    private readonly worker: Worker,
    /** Called for transitions and log events, and with `crash` if the worker dies unasked. */
    private readonly onEvent: (ev: EngineEvent | { type: 'crash'; error: Error }) => void,
  ) {}

  /**
   * Starts the worker and waits until the engine has joined the group.
   * @throws EngineStartError when the engine cannot open its sockets or the worker dies first.
   */
  static start(opts: EngineOptions, onEvent: (ev: EngineEvent | { type: 'crash'; error: Error }) => void): Promise<VrrpHost> {
    if ((opts.realtimePriority ?? 0) > 0) realtimeGcFlags();
    const ahead = takePrewarmed();
    // a leak ends in the worker's out-of-memory crash (the agent exits, its supervisor restarts
    // it) before it takes the node's memory
    const worker = ahead ?? new Worker(WORKER_URL, { workerData: opts, resourceLimits: WORKER_LIMITS });
    if (ahead) ahead.postMessage({ type: 'start', opts } satisfies ToWorker);
    const host = new VrrpHost(worker, onEvent);
    return new Promise((resolve, reject) => {
      let started = false;
      worker.on('message', (m: FromWorker) => {
        switch (m.type) {
          case 'started':
            started = true;
            resolve(host);
            break;
          case 'failed':
            reject(new EngineStartError(m.error.message, m.error.code, m.error.syscall));
            break;
          case 'status':
            host.pending.get(m.id)?.(m.status);
            host.pending.delete(m.id);
            break;
          case 'reconfigured':
            host.reconfiguring.get(m.id)?.(m.error);
            host.reconfiguring.delete(m.id);
            break;
          case 'stopped':
            break;
          default:
            onEvent(m);
        }
      });
      worker.on('error', (err) => {
        if (!started) reject(new EngineStartError(`election worker failed: ${err.message}`));
        else onEvent({ type: 'crash', error: err });
      });
      worker.on('exit', (code) => {
        host.exited = true;
        for (const answer of host.reconfiguring.values()) answer('the election worker exited');
        host.reconfiguring.clear();
        if (!started) reject(new EngineStartError(`election worker exited with code ${code} before starting`));
        else if (!host.stopping) onEvent({ type: 'crash', error: new Error(`election worker exited with code ${code}`) });
      });
    });
  }

  /** The engine's status; rejects after `timeoutMs` (ms) if the worker does not answer. */
  status(timeoutMs = 1000): Promise<EngineStatus> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error('the election worker did not answer'));
      }, timeoutMs);
      this.pending.set(id, (s) => {
        clearTimeout(t);
        resolve(s);
      });
      this.send({ type: 'status', id });
    });
  }

  /** Sets the advertised priority (1..254). */
  setPriority(priority: number): void {
    this.send({ type: 'priority', priority });
  }

  /**
   * Changes the running election (see engine.ts `EngineReconfigure`: VIPs added or removed
   * individually, priority, interval and preempt settings from the next advert, unicast peers,
   * acceptFrom members, announce and lifetime settings). Resolves once the worker applied it
   * (the address changes done); rejects with an Error saying why when the patch cannot apply
   * (then nothing changed), when the worker is gone, or when it does not answer within
   * `timeoutMs` (ms).
   */
  reconfigure(patch: EngineReconfigure, timeoutMs = 5000): Promise<void> {
    if (this.exited || this.stopping) return Promise.reject(new Error('the election is stopped'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.reconfiguring.delete(id);
        reject(new Error('the election worker did not answer the reconfigure'));
      }, timeoutMs);
      this.reconfiguring.set(id, (error) => {
        clearTimeout(t);
        if (error === undefined) resolve();
        else reject(new Error(`cannot reconfigure the election: ${error}`));
      });
      this.send({ type: 'reconfigure', id, patch });
    });
  }

  /** Holds or releases preemption (policy: not before this node can serve). */
  setPreemptHold(hold: boolean): void {
    this.send({ type: 'preemptHold', hold });
  }

  /**
   * Asks the engine to shut down (priority 0 if Active, VIPs removed) and waits for the worker
   * to exit; after `timeoutMs` (ms) the worker is terminated.
   */
  stop(timeoutMs = 3000): Promise<void> {
    if (this.stopping) return this.stopping;
    this.stopping = new Promise<void>((resolve) => {
      if (this.exited) return resolve();
      const t = setTimeout(() => void this.worker.terminate(), timeoutMs);
      this.worker.once('exit', () => {
        clearTimeout(t);
        resolve();
      });
      this.send({ type: 'shutdown' });
    });
    return this.stopping;
  }

  private send(m: ToWorker): void {
    if (!this.exited) this.worker.postMessage(m);
  }
}
