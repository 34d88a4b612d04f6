/**
 * A TLS stand-in for kube-apiserver (a real one cannot run in the lab): enough surface for
 * ballast's health checks and for clients that measure which node served them.
 *
 *   node dist/lab/apiserver-standin.js --name n1 --cert C --key K [--port 6443] [--host ::]
 *        [--unready] [--store DIR --address A] [--token T] [--shutdown-delay MS] [--bookmark-ms MS]
 *        [--tick MS]
 *
 *   GET /readyz   200 "ok", or 500 "[-]lab-readiness failed …" while unready
 *   GET /livez    200 "ok"
 *   GET /version  200 kube-apiserver-like JSON whose extra `node` field names the node
 *   GET /apis/discovery.k8s.io/v1/namespaces/default/endpointslices[?labelSelector=…]
 *                 the `kubernetes` Service's EndpointSliceList (with --store; see below)
 *       …?watch=true&resourceVersion=N[&allowWatchBookmarks=true][&timeoutSeconds=S]
 *                 newline-delimited watch events {type, object} from N on; N below the store's
 *                 compaction floor: one ERROR event (Status 410 Expired), then the stream ends
 *   GET …/endpointslices/kubernetes   the slice itself (404 Status while it does not exist)
 *   GET /api/v1/namespaces/default/configmaps?watch=true[&timeoutSeconds=S]
 *                 a watch whose events come on a clock: one ADDED of the ConfigMap
 *                 `ballast-lab-tick` at once, then one MODIFIED every --tick ms (default 200;
 *                 the object's resourceVersion counts the ticks, data.node names this node),
 *                 the same event to every such stream; the load of a watched resource that
 *                 changes five times a second, for clients that measure gaps between events
 *   GET /metrics  Prometheus text, kube-apiserver's names, WATCH requests only:
 *                 apiserver_longrunning_requests{verb="WATCH",resource="endpointslices",…} (open
 *                 watch streams now; like the real gauge it still counts a stream whose client
 *                 vanished until its socket dies) and apiserver_request_total{verb="WATCH",
 *                 code="200",…} (watch streams started since this process began); behind the
 *                 token like /apis (the real /metrics needs RBAC too)
 *   anything else 404
 *
 * With --store DIR (lab/endpointslice-store.ts) the stand-ins of a lab share one store, as
 * apiservers share etcd: this one adds --address to the `kubernetes` slice when it starts ready
 * and removes it on SIGTERM / SIGINT (as the apiserver's endpoint reconciler does), then keeps
 * serving for --shutdown-delay ms (kube-apiserver's --shutdown-delay-duration) before it closes. With --token,
 * the /apis paths and the ticking watch need `Authorization: Bearer T` (else 401 Status JSON); /readyz, /livez and
 * /version stay open, as kube-apiserver's default RBAC allows them to anyone. The store's `denial`
 * file (endpointslice-store.ts setDenial) makes every stand-in answer /apis with 401 or 403.
 *   every response carries `x-ballast-lab-node: <name>`
 *
 * Signals: SIGUSR1 → unready, SIGUSR2 → ready (one line printed per signal, also when the
 * state does not change, so a caller can wait for the acknowledgement); SIGHUP → re-read --cert
 * and --key for new connections (`certificate reloaded` printed); SIGTERM / SIGINT →
 * stop listening, close every connection (keep-alive ones too), exit 0.
 * With --host :: the socket is dual-stack (ipv6Only false), so IPv4 clients reach it too,
 * including on addresses (the VIP) added after it started listening.
 */
import { readFileSync } from 'node:fs';
import https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { addressTypeOf, appendChange, readDenial, StoreTail, type SliceObject, type StoreEvent } from './endpointslice-store.js';

/**
 * How long an idle keep-alive connection stays open, ms: kube-apiserver's http.Server IdleTimeout
 * (90 s, k8s.io/apiserver secure serving: "matches http.DefaultTransport keep-alive timeout").
 */
export const KUBE_APISERVER_IDLE_TIMEOUT_MS = 90_000;

/** Options of `startStandin`. */
export interface StandinOptions {
  name: string;
  cert: Buffer;
  key: Buffer;
  port: number;
  host: string;
  ready: boolean;
  log?: (line: string) => void;
  /** the shared EndpointSlice store's directory: serve the `kubernetes` slice from it */
  store?: string;
  /** this apiserver's address in the slice (with `store`) */
  address?: string;
  /** required as `Authorization: Bearer <token>` on /apis paths; absent: no authentication */
  token?: string;
  /** ms between BOOKMARK events on a watch that allows them (default 5000) */
  bookmarkMs?: number;
  /** a file holding a delay in ms for each /readyz answer (read per request; absent or empty: none) */
  readyzDelayFile?: string;
  /** ms between the MODIFIED events of the ticking ConfigMap watch (default {@link TICK_MS}) */
  tickMs?: number;
}

/** Default ms between the ticking watch's events: a watched resource changing five times a second. */
export const TICK_MS = 200;
/** The ticking watch's path (a ConfigMap list watch: core API group, namespace default). */
export const TICK_PATH = '/api/v1/namespaces/default/configmaps';

/**
 * The ConfigMap the ticking watch reports (pure): `ballast-lab-tick` in `default`, its
 * resourceVersion `rv` (the tick count), `data.node` the serving node.
 */
export function tickObject(node: string, rv: number): object {
  return {
    kind: 'ConfigMap',
    apiVersion: 'v1',
    metadata: {
      name: 'ballast-lab-tick',
      namespace: 'default',
      uid: '00000000-0000-4000-8000-00000000f1c0',
      resourceVersion: String(rv),
      creationTimestamp: '2024-08-13T00:00:00Z',
    },
    data: { node, tick: String(rv) },
  };
}

/** The /readyz delay in `file` (ms, 0..60000), 0 when it is absent, empty or not a number. */
export function readyzDelayMs(file: string | undefined): number {
  if (file === undefined) return 0;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return 0;
  }
  const ms = Number(text.trim());
  return Number.isFinite(ms) && ms > 0 ? Math.min(ms, 60_000) : 0;
}

/** A running stand-in: flip readiness, or close (resolves once the server is closed). */
export interface Standin {
  server: https.Server;
  setReady(ready: boolean): void;
  isReady(): boolean;
  /** Removes this stand-in's address from the slice (with a store); the graceful-shutdown step. */
  leave(): void;
  /** Ends every open watch stream (the server stays up): clients resume from their resourceVersion. */
  endWatches(): void;
  close(): Promise<void>;
}

const SLICES = '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices';
const SERVICE_LABEL = 'kubernetes.io/service-name';

/** The `kubernetes` EndpointSlice as kube-apiserver serves it. */
export function sliceObject(s: SliceObject, port = 6443): object {
  const type = addressTypeOf(s.addresses[0] ?? '0.0.0.0');
  return {
    kind: 'EndpointSlice',
    apiVersion: 'discovery.k8s.io/v1',
    metadata: {
      name: 'kubernetes',
      namespace: 'default',
      uid: `00000000-0000-4000-8000-${String(s.createdAt).padStart(12, '0')}`,
      resourceVersion: String(s.resourceVersion),
      generation: 1,
      creationTimestamp: '2024-08-13T00:00:00Z',
      labels: { [SERVICE_LABEL]: 'kubernetes', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
    },
    addressType: type,
    endpoints: s.addresses
      .filter((a) => addressTypeOf(a) === type)
      .map((a) => ({ addresses: [a], conditions: { ready: true, serving: true, terminating: false } })),
    ports: [{ name: 'https', port, protocol: 'TCP' }],
  };
}

/** A Status object (the API's error body). */
function statusObject(code: number, reason: string, message: string): object {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
}

/** Whether a labelSelector (equality terms, comma-separated) matches the slice's labels. */
function selects(selector: string | null): boolean {
  if (selector === null || selector === '') return true;
  const labels: Record<string, string> = { [SERVICE_LABEL]: 'kubernetes', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' };
  return selector.split(',').every((term) => {
    const m = /^\s*([^=!\s]+)\s*(==|=|!=)\s*([^\s]*)\s*$/.exec(term);
    if (m === null) return /^\s*([^=!\s]+)\s*$/.test(term) ? labels[term.trim()] !== undefined : false;
    const v = labels[m[1]!];
    return m[2] === '!=' ? v !== m[3] : v === m[3];
  });
}

const WATCH_LABELS = 'component="apiserver",group="discovery.k8s.io",resource="endpointslices",scope="namespace",subresource="",verb="WATCH",version="v1"';

/**
 * The stand-in's /metrics text (pure): kube-apiserver's metric names and labels for the WATCH
 * requests of the endpointslices resource, the only long-running requests it serves. `open`:
 * streams open now; `started`: streams started (200 sent) since the process began.
 */
export function watchMetrics(open: number, started: number): string {
  return [
    '# HELP apiserver_longrunning_requests [STABLE] Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.',
    '# TYPE apiserver_longrunning_requests gauge',
    `apiserver_longrunning_requests{${WATCH_LABELS}} ${open}`,
    '# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.',
    '# TYPE apiserver_request_total counter',
    `apiserver_request_total{code="200",${WATCH_LABELS.replace('scope="namespace"', 'scope="namespace",dry_run=""')}} ${started}`,
    '',
  ].join('\n');
}

/**
 * The two watch figures of a stand-in's (or kube-apiserver's) /metrics text (pure): the sums of
 * apiserver_longrunning_requests and of apiserver_request_total with code 200 over the series
 * whose verb is WATCH. Absent series count 0.
 */
export function parseWatchMetrics(text: string): { open: number; started: number } {
  let open = 0;
  let started = 0;
  for (const line of text.split('\n')) {
    const m = /^(apiserver_longrunning_requests|apiserver_request_total)\{([^}]*)\}\s+(\S+)/.exec(line);
    if (m === null || !/(^|,)verb="WATCH"/.test(m[2]!)) continue;
    const v = Number(m[3]);
    if (!Number.isFinite(v)) continue;
    if (m[1] === 'apiserver_longrunning_requests') open += v;
    else if (/(^|,)code="200"/.test(m[2]!)) started += v;
  }
  return { open, started };
}

/** Starts the HTTPS stand-in and resolves once it listens. */
export function startStandin(opts: StandinOptions): Promise<Standin> {
  const log = opts.log ?? ((line: string) => process.stdout.write(`${line}\n`));
  let ready = opts.ready;
  const tag = `apiserver-standin ${opts.name}:`;
  const version = JSON.stringify({
    major: '1',
    minor: '31',
    gitVersion: 'v1.31.0-ballast-lab',
    gitCommit: '0000000000000000000000000000000000000000',
    gitTreeState: 'clean',
    buildDate: '2024-08-13T00:00:00Z',
    goVersion: 'go1.22.5',
    compiler: 'gc',
    platform: 'linux/amd64',
    node: opts.name,
  });

  const tail = opts.store === undefined ? null : new StoreTail(opts.store);
  const watches = new Set<ServerResponse>();
  /** watch streams started (200 sent) since start: apiserver_request_total{verb="WATCH",code="200"} */
  let watchesStarted = 0;
  let joined = false;

  // the ticking watch (TICK_PATH): every stream gets the same event from one shared timer, which
  // runs only while a stream is open
  const tickers = new Set<ServerResponse>();
  let tickRv = 1;
  let tickTimer: NodeJS.Timeout | undefined;
  const tickMs = opts.tickMs ?? TICK_MS;
  const tick = (): void => {
    tickRv++;
    const line = `${JSON.stringify({ type: 'MODIFIED', object: tickObject(opts.name, tickRv) })}\n`;
    for (const r of tickers) if (!r.writableEnded && !r.destroyed) r.write(line);
  };
  const tickWatch = (req: IncomingMessage, res: ServerResponse, url: URL, json: (status: number, body: object) => void): void => {
    const q = url.searchParams;
    if (q.get('watch') !== 'true' && q.get('watch') !== '1') {
      json(200, { kind: 'ConfigMapList', apiVersion: 'v1', metadata: { resourceVersion: String(tickRv) }, items: [tickObject(opts.name, tickRv)] });
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked', 'x-ballast-lab-node': opts.name });
    res.write(`${JSON.stringify({ type: 'ADDED', object: tickObject(opts.name, tickRv) })}\n`);
    tickers.add(res);
    tickTimer ??= setInterval(tick, tickMs);
    const seconds = Number(q.get('timeoutSeconds') ?? '');
    const timeout = setTimeout(() => end(), Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 1800_000);
    const end = (): void => {
      clearTimeout(timeout);
      tickers.delete(res);
      if (tickers.size === 0 && tickTimer !== undefined) {
        clearInterval(tickTimer);
        tickTimer = undefined;
      }
      if (!res.writableEnded) res.end();
    };
    req.once('close', end);
    res.once('close', end);
  };

  /** The API paths (the EndpointSlices only with a store). @returns false when `path` is not one of them. */
  const api = (req: IncomingMessage, res: ServerResponse, url: URL, json: (status: number, body: object) => void): boolean => {
    if (!url.pathname.startsWith('/apis/') && url.pathname !== TICK_PATH) return false;
    if (opts.token !== undefined && req.headers.authorization !== `Bearer ${opts.token}`) {
      json(401, statusObject(401, 'Unauthorized', 'Unauthorized'));
      return true;
    }
    // the store's denial (endpointslice-store.ts setDenial): kube-apiserver's answers for a
    // rejected credential and for a user RBAC does not allow
    const denial = opts.store === undefined ? null : readDenial(opts.store);
    if (denial === 401) {
      json(401, statusObject(401, 'Unauthorized', 'Unauthorized'));
      return true;
    }
    if (denial === 403) {
      json(
        403,
        statusObject(
          403,
          'Forbidden',
          'endpointslices.discovery.k8s.io is forbidden: User "ballast-lab" cannot list resource "endpointslices" in API group "discovery.k8s.io" in the namespace "default"',
        ),
      );
      return true;
    }
    if (url.pathname === TICK_PATH) {
      tickWatch(req, res, url, json);
      return true;
    }
    if (tail === null || (url.pathname !== SLICES && url.pathname !== `${SLICES}/kubernetes`)) {
      json(404, statusObject(404, 'NotFound', 'the server could not find the requested resource'));
      return true;
    }
    tail.read();
    const q = url.searchParams;
    const floor = tail.floor();
    const rvParam = q.get('resourceVersion');
    const rv = rvParam === null || rvParam === '' ? null : Number(rvParam);
    if (rv !== null && !Number.isInteger(rv)) {
      json(400, statusObject(400, 'BadRequest', `invalid resourceVersion ${JSON.stringify(rvParam)}`));
      return true;
    }
    if (url.pathname !== SLICES) {
      const sl = tail.state.slice;
      if (sl === null) json(404, statusObject(404, 'NotFound', 'endpointslices.discovery.k8s.io "kubernetes" not found'));
      else json(200, sliceObject(sl, opts.port));
      return true;
    }
    const matched = selects(q.get('labelSelector'));
    if (q.get('watch') !== 'true' && q.get('watch') !== '1') {
      // a list at an exact old version the store no longer has is 410 (rv 0 / absent: the latest)
      if (rv !== null && rv !== 0 && rv < floor) {
        json(410, statusObject(410, 'Expired', `too old resource version: ${rv} (${floor})`));
        return true;
      }
      const sl = tail.state.slice;
      json(200, {
        kind: 'EndpointSliceList',
        apiVersion: 'discovery.k8s.io/v1',
        metadata: { resourceVersion: String(tail.state.version) },
        items: sl !== null && matched ? [sliceObject(sl, opts.port)] : [],
      });
      return true;
    }
    // watch
    watchesStarted++;
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked', 'x-ballast-lab-node': opts.name });
    // the client waits for the headers before it reads events: send them now, not with the first event
    res.flushHeaders();
    const emit = (type: string, object: object): void =>
      void (res.writableEnded || res.destroyed ? undefined : res.write(`${JSON.stringify({ type, object })}\n`));
    if (rv !== null && rv !== 0 && rv < floor) {
      emit('ERROR', statusObject(410, 'Expired', `too old resource version: ${rv} (${floor})`));
      res.end();
      return true;
    }
    const render = (e: StoreEvent): object => sliceObject(e.slice, opts.port);
    let unsubscribe = (): void => undefined;
    const end = (): void => {
      unsubscribe();
      clearInterval(bookmarks);
      clearTimeout(timeout);
      watches.delete(res);
      if (!res.writableEnded) res.end();
    };
    watches.add(res);
    if (matched) {
      if (rv === null || rv === 0) {
        // no version: the current state first, as synthetic ADDED
        if (tail.state.slice !== null) emit('ADDED', sliceObject(tail.state.slice, opts.port));
      } else {
        for (const h of tail.history) if (h.rv > rv) emit(h.event.type, render(h.event));
      }
      unsubscribe = tail.subscribe((_rv, e) => {
        if (e !== null) emit(e.type, render(e));
      });
    }
    const bookmarks = setInterval(() => {
      if (q.get('allowWatchBookmarks') === 'true')
        emit('BOOKMARK', { kind: 'EndpointSlice', apiVersion: 'discovery.k8s.io/v1', metadata: { resourceVersion: String(tail.state.version) } });
    }, opts.bookmarkMs ?? 5000);
    const seconds = Number(q.get('timeoutSeconds') ?? '');
    const timeout = setTimeout(end, Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 1800_000);
    req.once('close', end);
    res.once('close', end);
    return true;
  };

  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const json = (status: number, body: object): void => send(status, JSON.stringify(body), 'application/json');
    const send = (status: number, body: string, type = 'text/plain; charset=utf-8'): void => {
      res.writeHead(status, {
        'content-type': type,
        'content-length': Buffer.byteLength(body),
        'x-content-type-options': 'nosniff',
        'x-ballast-lab-node': opts.name,
      });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(405, 'method not allowed\n');
    const url = new URL(req.url ?? '/', 'https://standin.invalid');
    if (api(req, res, url, json)) return;
    if (url.pathname === '/metrics') {
      if (opts.token !== undefined && req.headers.authorization !== `Bearer ${opts.token}`) return json(401, statusObject(401, 'Unauthorized', 'Unauthorized'));
      return send(200, watchMetrics(watches.size, watchesStarted), 'text/plain; version=0.0.4; charset=utf-8');
    }
    switch (url.pathname) {
      case '/readyz': {
        // the body mimics kube-apiserver's failed-check listing
        const answer = (): void => (ready ? send(200, 'ok') : send(500, '[-]lab-readiness failed: reason withheld\nreadyz check failed\n'));
        // a slow /readyz (an apiserver under load): the delay file holds ms, absent = none
        const delay = readyzDelayMs(opts.readyzDelayFile);
        if (delay > 0) return void setTimeout(answer, delay);
        return answer();
      }
      case '/livez':
        return send(200, 'ok');
      case '/version':
        return send(200, version, 'application/json');
      default:
        return send(404, '404 page not found\n');
    }
  };

  const server = https.createServer({ cert: opts.cert, key: opts.key, handshakeTimeout: 10_000 }, handler);
  // an idle keep-alive connection lives as long as on kube-apiserver (Node's default is 5 s: a
  // watch-like client whose loop stalled 2 s past its 3 s interval got a FIN, no fault active, in
  // the 30-minute seed-7 soak)
  server.keepAliveTimeout = KUBE_APISERVER_IDLE_TIMEOUT_MS;
  // a stalled client must not pin the process at shutdown
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  // every TCP socket, including those still in the TLS handshake: closeAllConnections() only
  // knows HTTP connections, and a handshake whose client vanished (the VIP moved away
  // mid-handshake, so even its RST never arrives) would hold server.close() open
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });

  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port: opts.port, host: opts.host, ipv6Only: false }, () => {
      server.off('error', reject);
      server.on('error', (e) => log(`${tag} server error: ${e.message}`));
      const where = opts.host.includes(':') ? `[${opts.host}]:${opts.port}` : `${opts.host}:${opts.port}`;
      if (opts.store !== undefined && opts.address !== undefined && ready) {
        appendChange(opts.store, { op: 'add', address: opts.address, by: opts.name });
        joined = true;
      }
      log(`${tag} listening on ${where} ready=${ready}${joined ? ` joined the kubernetes EndpointSlice as ${opts.address}` : ''}`);
      const leave = (): void => {
        if (!joined || opts.store === undefined || opts.address === undefined) return;
        joined = false;
        appendChange(opts.store, { op: 'remove', address: opts.address, by: opts.name });
        log(`${tag} left the kubernetes EndpointSlice`);
      };
      resolve({
        server,
        leave,
        endWatches: () => {
          for (const w of watches) w.end();
        },
        isReady: () => ready,
        setReady(next: boolean) {
          const changed = next !== ready;
          ready = next;
          log(`${tag} ready=${ready}${changed ? '' : ' (unchanged)'}`);
        },
        close() {
          leave();
          for (const w of watches) w.end();
          for (const w of tickers) w.end();
          tail?.close();
          return new Promise<void>((done) => {
            server.close(() => done());
            // keep-alive, in-flight and half-handshaken connections would hold close() open
            server.closeAllConnections();
            for (const s of sockets) s.destroy();
          });
        },
      });
    });
  });
}

async function main(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      name: { type: 'string' },
      cert: { type: 'string' },
      key: { type: 'string' },
      port: { type: 'string', default: '6443' },
      host: { type: 'string', default: '::' },
      unready: { type: 'boolean', default: false },
      store: { type: 'string' },
      address: { type: 'string' },
      token: { type: 'string' },
      'shutdown-delay': { type: 'string', default: '0' },
      'readyz-delay-file': { type: 'string' },
      tick: { type: 'string', default: String(TICK_MS) },
      'bookmark-ms': { type: 'string' },
    },
    strict: true,
  });
  if (!values.name || !values.cert || !values.key) throw new TypeError('--name, --cert and --key are required');
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new TypeError(`--port must be 1..65535, got ${values.port}`);
  const delay = Number(values['shutdown-delay']);
  if (!Number.isInteger(delay) || delay < 0) throw new TypeError(`--shutdown-delay must be a whole number of ms, got ${values['shutdown-delay']}`);
  const tickMs = Number(values.tick);
  if (!Number.isInteger(tickMs) || tickMs < 10 || tickMs > 60_000) throw new TypeError(`--tick must be a whole number of ms 10..60000, got ${values.tick}`);
  const standin = await startStandin({
    tickMs,
    name: values.name,
    cert: readFileSync(values.cert),
    key: readFileSync(values.key),
    port,
    host: values.host,
    ready: !values.unready,
    ...(values.store === undefined ? {} : { store: values.store }),
    ...(values.address === undefined ? {} : { address: values.address }),
    ...(values.token === undefined ? {} : { token: values.token }),
    ...(values['readyz-delay-file'] === undefined ? {} : { readyzDelayFile: values['readyz-delay-file'] }),
    ...(values['bookmark-ms'] === undefined ? {} : { bookmarkMs: Number(values['bookmark-ms']) }),
  });
  // a rotated certificate: new connections get the files' current pair
  process.on('SIGHUP', () => {
    try {
      standin.server.setSecureContext({ cert: readFileSync(values.cert!), key: readFileSync(values.key!) });
      process.stdout.write(`apiserver-standin ${values.name}: certificate reloaded\n`);
    } catch (err) {
      process.stdout.write(`apiserver-standin ${values.name}: certificate reload failed: ${(err as Error).message}\n`);
    }
  });
  process.on('SIGUSR1', () => standin.setReady(false));
  process.on('SIGUSR2', () => standin.setReady(true));
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`apiserver-standin ${values.name}: ${signal}, shutting down\n`);
    // like kube-apiserver's --shutdown-delay-duration: out of the slice first, still serving for a while
    standin.leave();
    setTimeout(() => {
      // bounded: exit even if a socket refuses to close
      setTimeout(() => process.exit(0), 2000).unref();
      void standin.close().then(() => process.exit(0));
    }, delay);
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`apiserver-standin: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
