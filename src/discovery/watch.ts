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
 *                 401 / 403: the `denied` condition, one log line with the fix, and a retry every
 *                 deniedRetryMs (not the growing backoff): permission comes back by an operator's
 *                 hand (RBAC applied, a certificate renewed), and the set should follow within seconds
 *
 * It never talks through the VIP or the local endpoint: the server of the credentials (normally
 * the VIP) is replaced by a ready backend's address. The backend in use turning un-ready moves
 * the watch to another one.
 */
import { X509Certificate } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { existsSync, readFileSync, statSync, watch as fsWatch, type FSWatcher } from 'node:fs';
import { dirname } from 'node:path';
import type { Informer, KubeConfig, ObjectCache, V1EndpointSlice } from '@kubernetes/client-node';
import { addressFamily, canonicalAddress } from '../net/address.js';
import { formatHostPort, sameHostPort, type HostPort } from '../net/hostport.js';
import { forServer, loadClient, loadCredentials, type ClientModule, type CredentialSource } from './credentials.js';
import { readLastKnown, writeLastKnown } from './lastknown.js';
import { BackendSet, type SourcedBackend } from './merge.js';
import type { Log } from '../log/log.js';

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
  log: Pick<Log, 'info' | 'warn' | 'error'>;
  /** First retry delay after an error, ms (default 500); doubles up to maxBackoffMs (default 10000). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** How often a missing credentials file is looked for besides fs.watch, ms (default 1000). */
  pollMs?: number;
  /** Retry delay after a 401 or 403, ms (default {@link DENIED_RETRY_MS}); constant, no backoff. */
  deniedRetryMs?: number;
}

/**
 * The retry after the API refused the credentials (401) or the permission (403), ms. Such an answer
 * is cheap for the apiserver (authentication and authorization run before any storage read) and
 * ends only by an operator's hand, so discovery asks again at this fixed pace instead of backing
 * off to 10 s: the set follows within about this long of the fix (with the backoff it would be up
 * to 10 s after).
 */
export const DENIED_RETRY_MS = 1000;

/**
 * Why the API refused discovery (HTTP status of the list or the watch): `unauthorized` (401: the
 * credentials were not accepted: an expired client certificate, a revoked token) or `forbidden`
 * (403: the user may not list or watch endpointslices in namespace default).
 */
export type DiscoveryDenial = 'unauthorized' | 'forbidden';

/**
 * The denial an error of @kubernetes/client-node stands for, or null: a list's ApiException carries
 * the status in `code`, a watch's Error in `statusCode`; the message `HTTP-Code: N` as a fallback.
 */
export function denialOf(err: unknown): DiscoveryDenial | null {
  const e = err as { code?: unknown; statusCode?: unknown; message?: unknown } | null;
  const status =
    typeof e?.code === 'number'
      ? e.code
      : typeof e?.statusCode === 'number'
        ? e.statusCode
        : Number(/HTTP-Code: (\d{3})/.exec(String(e?.message ?? ''))?.[1] ?? NaN);
  return status === 401 ? 'unauthorized' : status === 403 ? 'forbidden' : null;
}

/**
 * notAfter of the client certificate the credentials present (kubeconfig `client-certificate-data`
 * or `client-certificate`), or null when they use none (a token) or it cannot be read.
 * @param user the current user of a KubeConfig (`kc.getCurrentUser()`).
 * @returns notAfter as ISO 8601 and whether it is past at `now` (ms since the epoch).
 */
export function clientCertificateExpiry(
  user: { certData?: string; certFile?: string } | null | undefined,
  now = Date.now(),
): { notAfter: string; expired: boolean } | null {
  try {
    const pem = user?.certData ? Buffer.from(user.certData, 'base64') : user?.certFile ? readFileSync(user.certFile) : null;
    if (pem === null) return null;
    const notAfter = new Date(new X509Certificate(pem).validTo);
    return { notAfter: notAfter.toISOString(), expired: notAfter.getTime() <= now };
  } catch {
    return null;
  }
}

/** The fix of each denial, for the log line and docs/observe. */
export function denialFix(denial: DiscoveryDenial, cert: { notAfter: string; expired: boolean } | null): string {
  if (denial === 'forbidden')
    return 'grant the credentials\' user list and watch on endpointslices (discovery.k8s.io) in namespace default: `ballast manifest rbac | kubectl apply -f -` (docs/kubeadm.md, "Discovery\'s credentials")';
  if (cert?.expired) return `the client certificate expired on ${cert.notAfter}: renew it (kubeadm certs renew, or a new kubeconfig) and the agent picks it up`;
  return `the apiserver did not accept the credentials: ${cert === null ? 'the token is invalid, expired or revoked' : `the client certificate (valid until ${cert.notAfter}) is not signed by the cluster's CA or was revoked`}; give discovery a valid kubeconfig (docs/kubeadm.md, "Discovery's credentials")`;
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
  /** The API refused the credentials (401) or the permission (403) at the last attempt; null once a list succeeds (and before any refusal). */
  denied: DiscoveryDenial | null;
  /** Since when (ISO 8601) `denied` holds; null when it does not. */
  deniedSince: string | null;
  /** Refusals since the start: 401s (`unauthorized`) and 403s (`forbidden`). Each is also one of `errors`. */
  refusals: Record<DiscoveryDenial, number>;
  /**
   * Discovery's own thread (thread.ts; absent where Discovery runs without one): how often it
   * failed and was started again (each also one of `errors`), the last failure and when (ISO 8601).
   */
  thread?: { failures: number; lastFailure: string | null; lastFailureAt: string | null };
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
  readonly #stats = {
    lists: 0,
    errors: 0,
    lastChange: null as string | null,
    lastError: null as string | null,
    denied: null as DiscoveryDenial | null,
    deniedSince: null as string | null,
    refusals: { unauthorized: 0, forbidden: 0 } as Record<DiscoveryDenial, number>,
  };

  /** Reads the last-known file (a corrupt or unusable one is logged and ignored). Nothing else runs until {@link start}. */
  constructor(o: DiscoveryOptions) {
    super();
    this.#o = o;
    const lk = readLastKnown(o.lastKnownFile);
    if (lk.kind === 'corrupt') o.log.warn({ file: o.lastKnownFile, reason: lk.reason }, 'discovery: the last-known backend file is corrupt; ignored');
    if (lk.kind === 'unusable') o.log.warn({ file: o.lastKnownFile, reason: lk.reason }, 'discovery: the last-known backend file cannot be used; ignored');
    if (lk.kind === 'ok')
      o.log.info({ file: o.lastKnownFile, backends: lk.backends.map(formatHostPort), updated: lk.updated }, 'discovery: last-known backends read');
    this.#set = new BackendSet(o.seed, lk.kind === 'ok' ? lk.backends : []);
  }

  /** The merged set now (a copy). */
  current(): SourcedBackend[] {
    return this.#set.current();
  }

  /** Discovery's state and counters (lists, watch errors, empty answers kept), for /status and /metrics. Never throws. */
  stats(): DiscoveryStats {
    return {
      state: this.#state,
      server: this.#server === null ? null : `https://${formatHostPort(this.#server)}`,
      emptyKept: this.#set.emptyKept,
      ...this.#stats,
      refusals: { ...this.#stats.refusals },
    };
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
    if (c.kind === 'missing')
      this.#o.log.info(
        { waitingFor: c.what },
        'discovery: waiting for the credentials (after kubeadm init / join); the seed and last-known backends serve meanwhile',
      );
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
        if (this.#stats.denied !== null) {
          this.#o.log.info(
            { server: url, was: this.#stats.denied, since: this.#stats.deniedSince },
            'discovery: the API answers again after refusing the credentials or the permission',
          );
          this.#stats.denied = null;
          this.#stats.deniedSince = null;
        }
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
      const denial = denialOf(err);
      if (denial !== null) {
        this.#stats.refusals[denial]++;
        const delay = this.#o.deniedRetryMs ?? DENIED_RETRY_MS;
        // one line per refusal that starts (or changes kind), not one per retry
        if (this.#stats.denied !== denial) {
          this.#stats.denied = denial;
          this.#stats.deniedSince = new Date().toISOString();
          const cert = clientCertificateExpiry(this.#kc?.getCurrentUser());
          const what =
            denial === 'forbidden'
              ? '403 Forbidden: the credentials may not list or watch the kubernetes EndpointSlices'
              : '401 Unauthorized: the API did not accept the credentials';
          // a warning, not an error: kubeadm init refuses admin.conf for a few seconds (see docs/kubeadm.md)
          this.#o.log.warn(
            {
              server: url,
              credentials: this.#describe(),
              denied: denial,
              ...(cert === null ? {} : { clientCertificateNotAfter: cert.notAfter }),
              retryEveryMs: delay,
              fix: denialFix(denial, cert),
            },
            `discovery: ${what}; the seed and last-known backends serve meanwhile, retrying every ${delay} ms`,
          );
        }
        // a 401 ends with new credentials (a renewed certificate, a new token): read them again first
        this.#restart(delay, denial === 'unauthorized');
        return;
      }
      const delay = Math.min((this.#o.backoffMs ?? 500) * 2 ** this.#attempt, this.#o.maxBackoffMs ?? 10_000);
      this.#attempt++;
      this.#o.log.warn(
        { server: url, err: this.#stats.lastError, retryInMs: delay },
        'discovery: the EndpointSlice watch failed; retrying on a ready apiserver',
      );
      this.#restart(delay);
    });
    // while the API refuses, a retry every deniedRetryMs says nothing new: the refusal was logged once
    if (this.#stats.denied === null) this.#o.log.info({ server: url }, 'discovery: listing and watching the kubernetes EndpointSlices');
    void inf.start().catch(() => undefined);
  }

  /**
   * Stops the informer and connects again after `delayMs` (to the next ready backend); with
   * `reload`, reads the credentials again first (kept as they were when they cannot be used).
   */
  #restart(delayMs: number, reload = false): void {
    const inf = this.#informer;
    this.#informer = null;
    this.#generation++;
    void inf?.stop();
    this.#state = 'backoff';
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      if (!reload) return this.#connect();
      void loadCredentials(this.#o.credentials)
        .then((c) => {
          if (c.kind === 'ok') this.#kc = c.kc;
        })
        .catch(() => undefined)
        .finally(() => {
          if (this.#timer === null && !this.#stopped) this.#connect();
        });
    }, delayMs);
    this.#timer.unref?.();
  }

  /** The API's answer (the slices now): merge, log, write the last-known file, emit. */
  #answer(slices: readonly V1EndpointSlice[], how: 'list' | 'watch'): void {
    const found = endpointsOf(slices, this.#o.defaultPort);
    const r = this.#set.discovered(found);
    if (r.keptOnEmpty) {
      this.#o.log.warn(
        { via: how, kept: this.#set.backends().map(formatHostPort) },
        'discovery: the kubernetes EndpointSlices list no ready apiserver; the last non-empty set is kept',
      );
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
