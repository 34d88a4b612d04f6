/**
 * Discovery: the seed, the `kubernetes` Service's EndpointSlices and the last-known file merged
 * into one backend set (merge.ts), kept current while the agent runs.
 *
 *   start ─► read last-known ─► credentials? ──missing──► wait (fs.watch + 1 s poll) ─┐
 *                                   │ ok  ◄───────────────────────────────────────────┘
 *                                   ▼
 *            a READY backend (per ballast's own checks)? ──none──► wait for a verdict
 *                                   │ yes: https://<that backend>, the credentials' CA
 *                                   ▼
 *            informer (list + watch, @kubernetes/client-node) ──error──► backoff, next ready backend
 *                 410 Gone: the informer relists by itself
 *
 * It never talks through the VIP or the local endpoint: the server of the credentials (normally
 * the VIP) is replaced by a ready backend's address. The backend in use turning un-ready moves
 * the watch to another one.
 */
import { EventEmitter } from 'node:events';
import { existsSync, statSync, watch as fsWatch, type FSWatcher } from 'node:fs';
import { dirname } from 'node:path';
import type { Informer, KubeConfig, ObjectCache, V1EndpointSlice } from '@kubernetes/client-node';
import { addressFamily, canonicalAddress } from '../net/address.js';
import { formatHostPort, sameHostPort, type HostPort } from '../net/hostport.js';
import { forServer, loadClient, loadCredentials, type ClientModule, type CredentialSource } from './credentials.js';
import { readLastKnown, writeLastKnown } from './lastknown.js';
import { BackendSet, type SourcedBackend } from './merge.js';

/** The part of a pino logger discovery uses. */
export interface DiscoveryLog {
  info(o: object, m: string): void;
  warn(o: object, m: string): void;
  error(o: object, m: string): void;
}

/** Where discovery stands. */
export type DiscoveryState = 'waiting-credentials' | 'waiting-ready-backend' | 'listing' | 'watching' | 'backoff' | 'stopped';

/** Options of {@link Discovery}. */
export interface DiscoveryOptions {
  /** Credentials (kubeconfig path or in-cluster). */
  credentials: CredentialSource;
  /** The last-known file's path. */
  lastKnownFile: string;
  /** The configured `apiserver.backends`. */
  seed: readonly HostPort[];
  /** The backends ballast's checks find ready now (verdict up), in preference order. */
  readyBackends: () => HostPort[];
  /** Port of a discovered address when its slice names no port (the apiserver's, 6443). */
  defaultPort: number;
  log: DiscoveryLog;
  /** First retry delay after an error, ms (default 500); doubles up to maxBackoffMs (default 10000). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** How often a missing credentials file is looked for besides fs.watch, ms (default 1000). */
  pollMs?: number;
}

/** Counters and state, for /status and /metrics. */
export interface DiscoveryStats {
  state: DiscoveryState;
  /** `https://host:port` of the apiserver the watch uses now; null when none. */
  server: string | null;
  /** Lists that succeeded (the first, and every relist: after a 410 or a restart). */
  lists: number;
  /** Errors that restarted the watch (connection, HTTP, TLS). */
  errors: number;
  /** Empty discovered sets that were ignored, the last non-empty one kept. */
  emptyKept: number;
  /** When the set last changed (ISO 8601); null before. */
  lastChange: string | null;
  /** Why the last error restarted the watch; null before. */
  lastError: string | null;
}

const SLICES_PATH = '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices';
const SELECTOR = 'kubernetes.io/service-name=kubernetes';

/**
 * The merged backend set, kept current. Events: `change` (the new set, each with its source)
 * after every change of the set.
 */
export class Discovery extends EventEmitter<{ change: [SourcedBackend[]] }> {
  readonly #o: DiscoveryOptions;
  readonly #set: BackendSet;
  #kc: KubeConfig | null = null;
  #k8s: ClientModule | null = null;
  /** a credentials load is under way (the file watch and the poll may both fire) */
  #loading = false;
  #informer: (Informer<V1EndpointSlice> & ObjectCache<V1EndpointSlice>) | null = null;
  #server: HostPort | null = null;
  #state: DiscoveryState = 'waiting-credentials';
  #stopped = false;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #fileWatch: FSWatcher | null = null;
  #poll: ReturnType<typeof setInterval> | null = null;
  /** what the wait last logged (the outcome and the file's identity): a poll that finds the same logs nothing */
  #reported: string | null = null;
  #attempt = 0;
  /** bumped at each (re)start of the informer: events of an older one are ignored */
  #generation = 0;
  readonly #stats = { lists: 0, errors: 0, lastChange: null as string | null, lastError: null as string | null };

  /** Reads the last-known file (a corrupt or unusable one is logged and ignored). Nothing else runs until {@link start}. */
  constructor(o: DiscoveryOptions) {
    super();
    this.#o = o;
    const lk = readLastKnown(o.lastKnownFile);
    if (lk.kind === 'corrupt') o.log.warn({ file: o.lastKnownFile, reason: lk.reason }, 'discovery: the last-known backend file is corrupt; ignored');
    if (lk.kind === 'unusable') o.log.warn({ file: o.lastKnownFile, reason: lk.reason }, 'discovery: the last-known backend file cannot be used; ignored');
    if (lk.kind === 'ok') o.log.info({ file: o.lastKnownFile, backends: lk.backends.map(formatHostPort), updated: lk.updated }, 'discovery: last-known backends read');
    this.#set = new BackendSet(o.seed, lk.kind === 'ok' ? lk.backends : []);
  }

  /** The merged set now (a copy). */
  current(): SourcedBackend[] {
    return this.#set.current();
  }

  /** Discovery's state and counters (lists, watch errors, empty answers kept), for /status and /metrics. Never throws. */
  stats(): DiscoveryStats {
    return { state: this.#state, server: this.#server === null ? null : `https://${formatHostPort(this.#server)}`, emptyKept: this.#set.emptyKept, ...this.#stats };
  }

  /**
   * Starts: credentials (or a wait for them), then the watch against a ready backend. Returns at
   * once (the client library loads in the background). Idempotent.
   */
  start(): void {
    if (this.#stopped || this.#kc !== null || this.#fileWatch !== null || this.#poll !== null) return;
    this.#state = 'waiting-credentials';
    this.#tryCredentials();
  }

  /** A reload's new seed (it matters only until the API answered). */
  setSeed(seed: readonly HostPort[]): void {
    if (this.#set.setSeed(seed)) this.#changed();
  }

  /**
   * Ballast's checks changed a verdict: a discovery waiting for a ready backend starts, and one
   * whose backend is no longer ready moves to another.
   */
  readinessChanged(): void {
    if (this.#stopped || this.#kc === null) return;
    const ready = this.#o.readyBackends();
    if (this.#state === 'waiting-ready-backend' && ready.length > 0) return this.#connect();
    if (this.#server !== null && (this.#state === 'watching' || this.#state === 'listing') && !ready.some((b) => sameHostPort(b, this.#server!))) {
      this.#o.log.info({ server: formatHostPort(this.#server) }, 'discovery: the apiserver in use is no longer ready; moving to another');
      this.#restart(0);
    }
  }

  /** Stops the watch and the waits; no event afterwards. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#state = 'stopped';
    this.#clearWait();
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    const inf = this.#informer;
    this.#informer = null;
    this.#generation++;
    await inf?.stop();
  }

  #clearWait(): void {
    this.#fileWatch?.close();
    this.#fileWatch = null;
    if (this.#poll !== null) clearInterval(this.#poll);
    this.#poll = null;
  }

  #tryCredentials(): void {
    if (this.#stopped || this.#loading || this.#kc !== null) return;
    this.#loading = true;
    void Promise.all([loadCredentials(this.#o.credentials), loadClient()])
      .then(([c, k8s]) => {
        this.#loading = false;
        if (this.#stopped || this.#kc !== null) return;
        if (c.kind === 'ok') {
          this.#clearWait();
          this.#kc = c.kc;
          this.#k8s = k8s;
          this.#o.log.info({ credentials: this.#describe() }, 'discovery: credentials loaded');
          this.#connect();
          return;
        }
        this.#report(c);
        if (this.#fileWatch === null && this.#poll === null) this.#wait();
      })
      .catch((err: unknown) => {
        this.#loading = false;
        this.#o.log.error({ err: (err as Error).message }, 'discovery: cannot load the Kubernetes client library');
      });
  }

  /**
   * Logs why the credentials cannot be used, once per change: the first time, and whenever the
   * outcome or the kubeconfig file itself (inode, size, mtime) differs from what was last logged.
   * Missing: info; present but unusable: error naming the file and the problem.
   */
  #report(c: { kind: 'missing'; what: string } | { kind: 'invalid'; reason: string }): void {
    const cred = this.#o.credentials;
    const st = cred.kind === 'kubeconfig' ? statSync(cred.path, { throwIfNoEntry: false }) : undefined;
    const key = `${c.kind}\0${c.kind === 'missing' ? c.what : c.reason}\0${st === undefined ? '' : `${st.ino}:${st.size}:${st.mtimeMs}`}`;
    if (key === this.#reported) return;
    this.#reported = key;
    if (c.kind === 'missing') this.#o.log.info({ waitingFor: c.what }, 'discovery: waiting for the credentials (after kubeadm init / join); the seed and last-known backends serve meanwhile');
    else this.#o.log.error({ credentials: this.#describe(), reason: c.reason }, 'discovery: the credentials cannot be used; waiting for them to change');
  }

  /** Waits for the credentials to appear or change: fs.watch on the kubeconfig's directory and a poll. */
  #wait(): void {
    this.#state = 'waiting-credentials';
    const cred = this.#o.credentials;
    if (cred.kind === 'kubeconfig') {
      const dir = dirname(cred.path);
      try {
        if (existsSync(dir)) this.#fileWatch = fsWatch(dir, () => this.#tryCredentials());
      } catch {
        this.#fileWatch = null;
      }
    }
    this.#poll = setInterval(() => this.#tryCredentials(), this.#o.pollMs ?? 1000);
    this.#poll.unref?.();
  }

  #describe(): string {
    const c = this.#o.credentials;
    return c.kind === 'kubeconfig' ? c.path : 'in-cluster';
  }

  /** Picks a ready backend (the next one after the last used) and starts the informer on it. */
  #connect(): void {
    if (this.#stopped || this.#kc === null || this.#k8s === null) return;
    const k8s = this.#k8s;
    const ready = this.#o.readyBackends();
    if (ready.length === 0) {
      if (this.#state !== 'waiting-ready-backend') this.#o.log.info({}, 'discovery: no apiserver is ready yet per the health checks; waiting');
      this.#state = 'waiting-ready-backend';
      this.#server = null;
      return;
    }
    const last = this.#server;
    const at = last === null ? -1 : ready.findIndex((b) => sameHostPort(b, last));
    const server = ready[(at + 1) % ready.length]!;
    this.#server = server;
    const gen = ++this.#generation;
    const url = `https://${formatHostPort(server)}`;
    const kc = forServer(k8s, this.#kc, url);
    const api = kc.makeApiClient(k8s.DiscoveryV1Api);
    this.#state = 'listing';
    const list = async () => {
      const l = await api.listNamespacedEndpointSlice({ namespace: 'default', labelSelector: SELECTOR });
      if (gen === this.#generation) {
        this.#stats.lists++;
        this.#attempt = 0;
        this.#state = 'watching';
        this.#answer(l.items, 'list');
      }
      return l;
    };
    const inf = k8s.makeInformer<V1EndpointSlice>(kc, SLICES_PATH, list, SELECTOR);
    this.#informer = inf;
    const onEvent = (): void => {
      if (gen === this.#generation) this.#answer(inf.list(), 'watch');
    };
    inf.on('add', onEvent);
    inf.on('update', onEvent);
    inf.on('delete', onEvent);
    inf.on('error', (err?: unknown) => {
      if (gen !== this.#generation || this.#stopped) return;
      this.#stats.errors++;
      this.#stats.lastError = err instanceof Error ? err.message : String(err);
      const delay = Math.min((this.#o.backoffMs ?? 500) * 2 ** this.#attempt, this.#o.maxBackoffMs ?? 10_000);
      this.#attempt++;
      this.#o.log.warn({ server: url, err: this.#stats.lastError, retryInMs: delay }, 'discovery: the EndpointSlice watch failed; retrying on a ready apiserver');
      this.#restart(delay);
    });
    this.#o.log.info({ server: url }, 'discovery: listing and watching the kubernetes EndpointSlices');
    void inf.start().catch(() => undefined);
  }

  /** Stops the informer and connects again after `delayMs` (to the next ready backend). */
  #restart(delayMs: number): void {
    const inf = this.#informer;
    this.#informer = null;
    this.#generation++;
    void inf?.stop();
    this.#state = 'backoff';
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#connect();
    }, delayMs);
    this.#timer.unref?.();
  }

  /** The API's answer (the slices now): merge, log, write the last-known file, emit. */
  #answer(slices: readonly V1EndpointSlice[], how: 'list' | 'watch'): void {
    const found = endpointsOf(slices, this.#o.defaultPort);
    const r = this.#set.discovered(found);
    if (r.keptOnEmpty) {
      this.#o.log.warn({ via: how, kept: this.#set.backends().map(formatHostPort) }, 'discovery: the kubernetes EndpointSlices list no ready apiserver; the last non-empty set is kept');
      return;
    }
    if (r.changed) this.#changed();
  }

  #changed(): void {
    const now = this.#set.current();
    this.#stats.lastChange = new Date().toISOString();
    this.#o.log.info({ backends: now.map((s) => `${formatHostPort(s.backend)} (${s.source})`) }, 'discovery: backend set changed');
    if (this.#set.answered) {
      try {
        writeLastKnown(this.#o.lastKnownFile, this.#set.backends());
      } catch (err) {
        this.#o.log.warn({ file: this.#o.lastKnownFile, err: (err as Error).message }, 'discovery: cannot write the last-known backend file');
      }
    }
    this.emit('change', now);
  }
}

/**
 * The ready endpoints of EndpointSlices as backends: addressType IPv4 / IPv6 only, endpoints
 * whose `conditions.ready` is not false (absent means ready, as in the API), every address, on
 * the slice's `https` port (else its first port, else `defaultPort`). Order: as listed; duplicates dropped.
 */
export function endpointsOf(slices: readonly V1EndpointSlice[], defaultPort: number): HostPort[] {
  const out: HostPort[] = [];
  const seen = new Set<string>();
  for (const s of slices) {
    if (s.addressType !== 'IPv4' && s.addressType !== 'IPv6') continue;
    const port = s.ports?.find((p) => p.name === 'https')?.port ?? s.ports?.[0]?.port ?? defaultPort;
    for (const e of s.endpoints ?? []) {
      if (e.conditions?.ready === false) continue;
      for (const a of e.addresses) {
        const family = addressFamily(a);
        if (family === null) continue;
        const b: HostPort = { host: canonicalAddress(a), port, family };
        const k = formatHostPort(b);
        if (seen.has(k)) continue;
        seen.add(k);
        out.push(b);
      }
    }
  }
  return out;
}
