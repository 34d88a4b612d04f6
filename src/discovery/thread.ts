/**
 * Discovery on a thread of its own (a worker_threads Worker running discovery-worker.ts), so that
 * nothing of it holds the election's thread: importing the Kubernetes client (0.1 s idle, up to
 * ~0.75 s on a loaded node), the TLS handshakes with the apiservers and the JSON of every list
 * and watch event all run there. The agent's thread keeps a copy of what the thread reports
 * (the set, the counters) and forwards its log lines to the agent's logger.
 *
 *   agent's thread                              discovery thread (Discovery, watch.ts)
 *   DiscoveryThread.open ── workerData ──────►  credentials checked, last-known read
 *                        ◄── init | invalid ──
 *   start / readinessChanged / setSeed ──────►  start() / readinessChanged() / setSeed()
 *                        ◄── change, stats, log
 *   stop ── stop ────────────────────────────►  stop()
 *                        ◄── stopped ─────────  (then the Worker is terminated)
 *
 * A thread that fails (it cannot start, an uncaught error, its heap limit reached, an exit nobody
 * asked for) is logged and started again after 1 s, doubling up to 30 s. The set it last reported
 * serves meanwhile, and after: a new thread's seed and last-known set does not replace a set the
 * API gave; its own first answer does. The counters add up across threads.
 */
import { EventEmitter } from 'node:events';
import { Worker } from 'node:worker_threads';
import type { HostPort } from '../net/hostport.js';
import type { CredentialSource } from './credentials.js';
import { readLastKnown } from './lastknown.js';
import { BackendSet, type SourcedBackend } from './merge.js';
import type { DiscoveryOptions, DiscoveryStats } from './watch.js';

/** Discovery's retry delays, ms, as {@link DiscoveryOptions} takes them (tests shorten them). */
export type DiscoveryTiming = Pick<DiscoveryOptions, 'backoffMs' | 'maxBackoffMs' | 'pollMs' | 'deniedRetryMs'>;

/** What the thread is started with (its workerData). */
export interface ThreadInit {
  credentials: CredentialSource;
  lastKnownFile: string;
  seed: HostPort[];
  defaultPort: number;
  /** the backends ballast's checks find ready at the start */
  ready: HostPort[];
  timing: DiscoveryTiming;
  /**
   * check the kubeconfig before the first report (`invalid`): the first thread only; a restarted
   * one waits for usable credentials like a running discovery
   */
  validate: boolean;
}

/** What the agent's thread sends the discovery thread. */
export type ToThread = { type: 'start' } | { type: 'ready'; backends: HostPort[] } | { type: 'seed'; seed: HostPort[] } | { type: 'stop' };

/** What the discovery thread sends back. */
export type FromThread =
  | { type: 'init'; set: SourcedBackend[]; stats: DiscoveryStats }
  | { type: 'invalid'; reason: string }
  /** `answered`: this thread's discovery has had the API's answer (its set is the API's, not seed and last-known) */
  | { type: 'change'; set: SourcedBackend[]; answered: boolean }
  | { type: 'stats'; stats: DiscoveryStats }
  | { type: 'log'; level: 'info' | 'warn' | 'error'; fields: object; msg: string }
  | { type: 'stopped' };

/**
 * Options of {@link DiscoveryThread.open}: {@link DiscoveryOptions}'s (`readyBackends` is called on
 * the agent's thread, its answer sent to the thread), the retry delays apart, and the thread's own.
 */
export interface DiscoveryThreadOptions extends Pick<DiscoveryOptions, 'credentials' | 'lastKnownFile' | 'seed' | 'readyBackends' | 'defaultPort' | 'log'> {
  timing?: DiscoveryTiming;
  /** The thread's entry (default: discovery-worker.js beside this module, in dist/bundle/ or dist/src/discovery/). */
  workerUrl?: URL;
  /** First restart delay after the thread failed, ms (default 1000); doubles up to 30000. */
  restartMs?: number;
}

/** The kubeconfig exists and cannot be used (what loadCredentials found on the thread). */
export class InvalidCredentials extends Error {
  constructor(readonly reason: string) {
    super(reason);
    this.name = 'InvalidCredentials';
  }
}

/**
 * How long stop() waits for the thread's own stop before it terminates it, ms (nothing there
 * needs more: the last-known file is written at each change).
 */
const STOP_WAIT_MS = 1000;
const MAX_RESTART_MS = 30_000;
/**
 * The thread's V8 old generation, MiB: its heap holds the client (12 MiB used after the import and
 * a full GC, Node 24) and the `kubernetes` Service's slices (a few endpoints): only a leak
 * reaches it.
 */
const MAX_OLD_GENERATION_MB = 96;

/** Counters of a thread that reported nothing. */
const NO_STATS: DiscoveryStats = {
  state: 'waiting-credentials',
  server: null,
  emptyKept: 0,
  lists: 0,
  errors: 0,
  lastChange: null,
  lastError: null,
  denied: null,
  deniedSince: null,
  refusals: { unauthorized: 0, forbidden: 0 },
};

/**
 * Discovery run on its own thread, with the surface of {@link Discovery}: `current`, `stats`,
 * `start`, `setSeed`, `readinessChanged`, `stop`, and the `change` event (the new set).
 */
export class DiscoveryThread extends EventEmitter<{ change: [SourcedBackend[]] }> {
  readonly #o: DiscoveryThreadOptions;
  #worker: Worker | null = null;
  #set: SourcedBackend[] = [];
  /** the running thread's last counters */
  #stats: DiscoveryStats | null = null;
  /** the counters of the threads that ended (each one's end also one error), added to the running one's */
  #ended: Pick<DiscoveryStats, 'lists' | 'errors' | 'emptyKept' | 'refusals'> = {
    lists: 0,
    errors: 0,
    emptyKept: 0,
    refusals: { unauthorized: 0, forbidden: 0 },
  };
  /** the threads that failed, and the last failure */
  #failed: NonNullable<DiscoveryStats['thread']> = { failures: 0, lastFailure: null, lastFailureAt: null };
  /** a thread had the API's answer: from then on only an answered set replaces the set (not a restarted thread's seed and last-known) */
  #answered = false;
  #seed: HostPort[];
  #started = false;
  #stopped = false;
  #failures = 0;
  #restartTimer: ReturnType<typeof setTimeout> | null = null;
  #onStopped: (() => void) | null = null;

  private constructor(o: DiscoveryThreadOptions) {
    super();
    this.#o = o;
    this.#seed = [...o.seed];
  }

  /**
   * Starts the thread and waits for its first report (the seed and last-known set). A thread that
   * cannot start or fails before it reports leaves the seed and last-known set (read here) and is
   * started again like any failed thread.
   * @throws InvalidCredentials when the kubeconfig exists and cannot be used.
   */
  static async open(o: DiscoveryThreadOptions): Promise<DiscoveryThread> {
    const t = new DiscoveryThread(o);
    await t.#spawn(true);
    return t;
  }

  /** The merged set the thread last reported (a copy). */
  current(): SourcedBackend[] {
    return [...this.#set];
  }

  /**
   * The counters the thread last reported (at most ~200 ms old), with those of the threads that
   * ended before it (counters never go back) and the threads' failures (`thread`); state
   * `backoff` while a failed thread waits for its restart. Null before any report.
   */
  stats(): DiscoveryStats | null {
    const s = this.#stats;
    if (s === null) return null;
    const e = this.#ended;
    return {
      ...s,
      lists: e.lists + s.lists,
      errors: e.errors + s.errors,
      emptyKept: e.emptyKept + s.emptyKept,
      refusals: { unauthorized: e.refusals.unauthorized + s.refusals.unauthorized, forbidden: e.refusals.forbidden + s.refusals.forbidden },
      thread: { ...this.#failed },
    };
  }

  /** Starts the watch (credentials, then a ready backend). Idempotent. */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    // verdicts that came while the thread was starting reached nobody
    this.readinessChanged();
    this.#post({ type: 'start' });
  }

  /** A reload's new seed. */
  setSeed(seed: readonly HostPort[]): void {
    this.#seed = [...seed];
    this.#post({ type: 'seed', seed: this.#seed });
  }

  /** Ballast's checks changed a verdict: the thread gets the ready backends now. */
  readinessChanged(): void {
    this.#post({ type: 'ready', backends: this.#o.readyBackends() });
  }

  /** Stops the watch and ends the thread; no event afterwards. Never rejects. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    if (this.#restartTimer !== null) clearTimeout(this.#restartTimer);
    const w = this.#worker;
    this.#worker = null;
    if (w === null) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, STOP_WAIT_MS);
      this.#onStopped = () => {
        clearTimeout(timer);
        resolve();
      };
      w.once('exit', () => this.#onStopped?.());
      w.postMessage({ type: 'stop' } satisfies ToThread);
    });
    this.#onStopped = null;
    await w.terminate().catch(() => undefined);
  }

  #post(m: ToThread): void {
    this.#worker?.postMessage(m);
  }

  /**
   * Starts a thread; resolves at its first report, or at its failure (a restart is then due).
   * Rejects only with InvalidCredentials, from the first thread.
   */
  #spawn(first: boolean): Promise<void> {
    const o = this.#o;
    const init: ThreadInit = {
      credentials: o.credentials,
      lastKnownFile: o.lastKnownFile,
      seed: this.#seed,
      defaultPort: o.defaultPort,
      ready: o.readyBackends(),
      timing: o.timing ?? {},
      validate: first,
    };
    return new Promise<void>((resolve, reject) => {
      let reported = false;
      let lastError: Error | null = null;
      const spawnedAt = performance.now();
      /** The thread ended without a stop, or never started: its counters kept, a restart due. */
      const failed = (why: string): void => {
        if (!reported && this.#stats === null) {
          // nothing reported yet: the seed and last-known set, as the thread would have
          const lk = readLastKnown(o.lastKnownFile);
          this.#set = new BackendSet(this.#seed, lk.kind === 'ok' ? lk.backends : []).current();
        }
        const last = this.#stats ?? NO_STATS;
        const e = this.#ended;
        this.#ended = {
          lists: e.lists + last.lists,
          errors: e.errors + last.errors + 1,
          emptyKept: e.emptyKept + last.emptyKept,
          refusals: { unauthorized: e.refusals.unauthorized + last.refusals.unauthorized, forbidden: e.refusals.forbidden + last.refusals.forbidden },
        };
        this.#stats = { ...NO_STATS, state: 'backoff', server: last.server, lastChange: last.lastChange, lastError: `discovery thread: ${why}` };
        this.#failed = { failures: this.#failed.failures + 1, lastFailure: why, lastFailureAt: new Date().toISOString() };
        resolve();
        // a thread that ran a while failed anew: the delays start again from the first
        if (performance.now() - spawnedAt > MAX_RESTART_MS * 2) this.#failures = 0;
        this.#restartLater(why);
      };
      let w: Worker;
      try {
        w = new Worker(o.workerUrl ?? new URL('./discovery-worker.js', import.meta.url), {
          name: 'discovery',
          workerData: init,
          // a runaway thread ends in its own out-of-memory error (then a restart), not in the node's memory
          resourceLimits: { maxOldGenerationSizeMb: MAX_OLD_GENERATION_MB },
        });
      } catch (err) {
        return failed((err as Error).message);
      }
      this.#worker = w;
      w.on('message', (m: FromThread) => {
        if (this.#worker !== w && m.type !== 'stopped' && m.type !== 'log') return;
        switch (m.type) {
          case 'init':
            reported = true;
            this.#stats = m.stats;
            this.#take(m.set, false);
            if (this.#started) {
              w.postMessage({ type: 'ready', backends: o.readyBackends() } satisfies ToThread);
              w.postMessage({ type: 'start' } satisfies ToThread);
            }
            return resolve();
          case 'invalid':
            reported = true;
            this.#worker = null;
            void w.terminate();
            return reject(new InvalidCredentials(m.reason));
          case 'change':
            return this.#take(m.set, m.answered);
          case 'stats':
            this.#stats = m.stats;
            return;
          case 'log':
            return o.log[m.level](m.fields, m.msg);
          case 'stopped':
            return this.#onStopped?.();
        }
      });
      w.on('error', (err) => (lastError = err));
      w.on('exit', (code) => {
        if (this.#worker !== w) return;
        this.#worker = null;
        failed(lastError?.message ?? `it exited (code ${code})`);
      });
    });
  }

  /** The thread failed (`why`): a new one after 1 s, doubling up to 30 s, unless stopped. */
  #restartLater(why: string): void {
    if (this.#stopped) return;
    const delay = Math.min((this.#o.restartMs ?? 1000) * 2 ** this.#failures, MAX_RESTART_MS);
    this.#failures++;
    this.#o.log.error({ err: why, restartInMs: delay }, 'discovery: its thread failed; the last set serves meanwhile');
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = null;
      if (!this.#stopped) this.#spawn(false).catch((err: unknown) => this.#restartLater((err as Error).message));
    }, delay);
    this.#restartTimer.unref();
  }

  /**
   * A set the thread reported: kept, and `change` when it differs from the last. Once a thread had
   * the API's answer, a set that is not one (a restarted thread's seed and last-known) is not taken:
   * the answered set serves until the new thread's own answer.
   */
  #take(set: SourcedBackend[], answered: boolean): void {
    if (answered) this.#answered = true;
    else if (this.#answered) return;
    const same = JSON.stringify(set) === JSON.stringify(this.#set);
    this.#set = set;
    if (!same) this.emit('change', this.current());
  }
}
