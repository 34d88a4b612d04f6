/**
 * Many watch-like clients in one process: N long-lived TLS connections to one URL, each idle
 * but for one small HTTP/1.1 request every `interval` ms (jittered), the way kubelets and
 * controllers hold watches on the apiservers. Each connection knows which node serves it (the
 * stand-in's `x-ballast-lab-node` header). A connection that ends (reset, FIN, timeout) is
 * replaced at once: a reconnect; an attempt that fails (refused, reset, TLS error, no answer)
 * is retried after `retry` ms, and a watcher that has not reconnected after `attempts` tries
 * counts as a failed reconnect (and gives up).
 *
 *   node dist/lab/clients/watchers.js --url https://10.78.S.100:6443/version --ca CA
 *        [--count 300] [--interval 2000] [--duration 60000] [--timeout 3000] [--retry 200]
 *        [--attempts 10] [--report 250] [--open-rate 100] [--events]
 *
 * stdout, one JSON object per line (t = ms since start):
 *   {"t":…,"open":300,"opening":0,"nodes":{"n1":101,…},"connects":300,"reconnects":12,
 *    "failedAttempts":0,"failedReconnects":0,"requests":N,"failedRequests":N,"oldest":{"n1":…}}
 *   every --report ms; the last one also has "summary":true. `oldest` is, per node, the start
 *   time (t) of its oldest open connection. `switched`: answers on an open connection that named
 *   another node than the connection's earlier answers (one TLS connection cannot move: always 0
 *   unless something is badly wrong).
 * With --events, also one line per request on an open connection and per connection end, times
 * wall-clock (Date.now(), ms, comparable with another process's on the same machine):
 *   {"event":"request","w":7,"conn":3,"start":…,"end":…,"ok":true,"node":"n2"}
 *   {"event":"closed","w":7,"conn":3,"at":…,"node":"n2"}
 * `w` numbers the watcher (0..count-1), `conn` its connections (1, 2, … per watcher).
 * Bounded: --duration ms in all, at most count × (1 + duration / retry) connection attempts.
 * SIGTERM / SIGINT: a final summary, exit 0.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import tls from 'node:tls';
import { parseArgs } from 'node:util';
import { runIfMain } from '../entry.js';

/** One report line. */
export interface WatchersReport {
  t: number;
  open: number;
  opening: number;
  /** open connections per serving node (as its last answer named it) */
  nodes: Record<string, number>;
  /** per node, the start time (t) of its oldest open connection */
  oldest: Record<string, number>;
  connects: number;
  reconnects: number;
  failedAttempts: number;
  failedReconnects: number;
  requests: number;
  failedRequests: number;
  switched: number;
  summary?: true;
}

/** A --events line. */
export type WatcherEvent =
  | { event: 'request'; w: number; conn: number; start: number; end: number; ok: boolean; node?: string }
  | { event: 'closed'; w: number; conn: number; at: number; node: string | null };

interface Options {
  url: URL;
  ca: Buffer;
  count: number;
  intervalMs: number;
  durationMs: number;
  timeoutMs: number;
  retryMs: number;
  attempts: number;
  reportMs: number;
  openRate: number;
  events: boolean;
}

const start = performance.now();
const now = (): number => Math.round((performance.now() - start) * 10) / 10;
const emit = (o: WatcherEvent): void => void process.stdout.write(`${JSON.stringify(o)}\n`);

class Watcher {
  node: string | null = null;
  since = 0;
  socket: tls.TLSSocket | null = null;
  opening = false;
  #buf = '';
  #waiting: ((r: { ok: boolean; node?: string }) => void) | null = null;
  #tries = 0;
  #everConnected = false;
  #gaveUp = false;
  #timer: NodeJS.Timeout | null = null;
  /** connections this watcher opened (its current one's number) */
  #conns = 0;

  constructor(
    readonly id: number,
    readonly o: Options,
    readonly stats: {
      connects: number;
      reconnects: number;
      failedAttempts: number;
      failedReconnects: number;
      requests: number;
      failedRequests: number;
      switched: number;
    },
    readonly stopped: () => boolean,
  ) {}

  /** One attempt: connect, first request; then the loop of requests. */
  connect(): void {
    if (this.stopped() || this.#gaveUp) return;
    this.opening = true;
    this.#tries++;
    // URL.hostname keeps an IPv6 literal's brackets; tls.connect wants the bare address
    const s = tls.connect({
      host: this.o.url.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: Number(this.o.url.port || 443),
      ca: this.o.ca,
      servername: undefined,
      session: undefined,
    });
    s.setNoDelay(true);
    s.setEncoding('utf8');
    let settled = false;
    const fail = (): void => {
      if (settled) return;
      settled = true;
      s.destroy();
      this.opening = false;
      this.stats.failedAttempts++;
      if (this.#tries >= this.o.attempts) {
        this.#gaveUp = true;
        if (this.#everConnected) this.stats.failedReconnects++;
        return;
      }
      this.#later(this.o.retryMs, () => this.connect());
    };
    s.once('error', fail);
    s.setTimeout(this.o.timeoutMs, fail);
    s.on('data', (chunk: string) => this.#data(chunk));
    s.once('secureConnect', () => {
      this.socket = s;
      void this.#request().then((r) => {
        if (!r.ok) return fail();
        settled = true;
        s.setTimeout(0);
        s.off('error', fail);
        s.on('error', () => undefined);
        this.opening = false;
        this.node = r.node ?? '?';
        this.#conns++;
        this.since = now();
        this.stats.connects++;
        if (this.#everConnected) this.stats.reconnects++;
        this.#everConnected = true;
        this.#tries = 0;
        s.once('close', () => this.#closed(s));
        this.#schedule();
      });
    });
  }

  #closed(s: tls.TLSSocket): void {
    if (this.socket !== s) return;
    if (this.o.events && this.node !== null) emit({ event: 'closed', w: this.id, conn: this.#conns, at: Date.now(), node: this.node });
    this.socket = null;
    this.node = null;
    this.#waiting?.({ ok: false });
    this.#waiting = null;
    if (this.#timer) clearTimeout(this.#timer);
    this.connect();
  }

  #later(ms: number, f: () => void): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(f, ms);
  }

  #schedule(): void {
    // jitter: ±25 % so that the requests of many watchers do not line up
    const ms = this.o.intervalMs * (0.75 + Math.random() * 0.5);
    this.#later(ms, () => {
      const s = this.socket;
      if (!s || this.stopped()) return;
      const begun = Date.now();
      void this.#request().then((r) => {
        if (this.o.events)
          emit({ event: 'request', w: this.id, conn: this.#conns, start: begun, end: Date.now(), ok: r.ok, ...(r.node === undefined ? {} : { node: r.node }) });
        if (r.ok && r.node !== undefined && this.node !== null && r.node !== this.node) this.stats.switched++;
        if (this.socket !== s) return;
        if (!r.ok) {
          // no answer in time: HTTP/1.1 cannot recover; the close handler reconnects
          s.destroy();
          return;
        }
        this.node = r.node ?? this.node;
        this.#schedule();
      });
    });
  }

  #request(): Promise<{ ok: boolean; node?: string }> {
    const s = this.socket!;
    this.stats.requests++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => done({ ok: false }), this.o.timeoutMs);
      const done = (r: { ok: boolean; node?: string }): void => {
        clearTimeout(timer);
        if (this.#waiting === done) this.#waiting = null;
        if (!r.ok) this.stats.failedRequests++;
        resolve(r);
      };
      this.#waiting = done;
      this.#buf = '';
      s.write(`GET ${this.o.url.pathname} HTTP/1.1\r\nHost: ${this.o.url.host}\r\nConnection: keep-alive\r\n\r\n`);
    });
  }

  #data(chunk: string): void {
    this.#buf += chunk;
    const end = this.#buf.indexOf('\r\n\r\n');
    if (end < 0) return;
    const head = this.#buf.slice(0, end);
    const len = Number(/^content-length:\s*(\d+)/im.exec(head)?.[1] ?? 0);
    if (this.#buf.length < end + 4 + len) return;
    const node = /^x-ballast-lab-node:\s*(\S+)/im.exec(head)?.[1];
    const ok = /^HTTP\/1\.1 200 /.test(head);
    this.#buf = this.#buf.slice(end + 4 + len);
    this.#waiting?.(node === undefined ? { ok } : { ok, node });
  }

  close(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.socket?.destroy();
  }
}

function report(ws: readonly Watcher[], stats: Watcher['stats'], summary: boolean): WatchersReport {
  const nodes: Record<string, number> = {};
  const oldest: Record<string, number> = {};
  let open = 0;
  let opening = 0;
  for (const w of ws) {
    if (w.opening) opening++;
    if (w.socket && w.node !== null) {
      open++;
      nodes[w.node] = (nodes[w.node] ?? 0) + 1;
      oldest[w.node] = Math.min(oldest[w.node] ?? Infinity, w.since);
    }
  }
  return { t: now(), open, opening, nodes, oldest, ...stats, ...(summary ? { summary: true as const } : {}) };
}

function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string' },
      ca: { type: 'string' },
      count: { type: 'string', default: '300' },
      interval: { type: 'string', default: '2000' },
      duration: { type: 'string', default: '60000' },
      timeout: { type: 'string', default: '3000' },
      retry: { type: 'string', default: '200' },
      attempts: { type: 'string', default: '10' },
      report: { type: 'string', default: '250' },
      'open-rate': { type: 'string', default: '100' },
      events: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (!values.url || !values.ca) return Promise.reject(new TypeError('--url and --ca are required'));
  const num = (name: string, v: string, lo: number, hi: number): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < lo || n > hi) throw new TypeError(`--${name} must be an integer from ${lo} to ${hi}, got ${v}`);
    return n;
  };
  const o: Options = {
    url: new URL(values.url),
    ca: readFileSync(values.ca),
    count: num('count', values.count, 1, 20_000),
    intervalMs: num('interval', values.interval, 10, 600_000),
    durationMs: num('duration', values.duration, 100, 3_600_000),
    timeoutMs: num('timeout', values.timeout, 10, 60_000),
    retryMs: num('retry', values.retry, 10, 60_000),
    attempts: num('attempts', values.attempts, 1, 1000),
    reportMs: num('report', values.report, 10, 60_000),
    openRate: num('open-rate', values['open-rate'], 1, 100_000),
    events: values.events === true,
  };
  const stats = { connects: 0, reconnects: 0, failedAttempts: 0, failedReconnects: 0, requests: 0, failedRequests: 0, switched: 0 };
  let stopped = false;
  const ws = Array.from({ length: o.count }, (_, i) => new Watcher(i, o, stats, () => stopped));
  const out = (summary: boolean): void => void process.stdout.write(`${JSON.stringify(report(ws, stats, summary))}\n`);
  // open at --open-rate per second: 300 TLS handshakes at once would starve the lab's 2 cores
  let next = 0;
  const opener = setInterval(() => {
    const batch = Math.max(1, Math.round(o.openRate / 20));
    for (let i = 0; i < batch && next < ws.length; i++) ws[next++]!.connect();
    if (next >= ws.length) clearInterval(opener);
  }, 50);
  const reporter = setInterval(() => out(false), o.reportMs);
  return new Promise((resolve) => {
    const stop = (): void => {
      if (stopped) return;
      stopped = true;
      clearInterval(opener);
      clearInterval(reporter);
      out(true);
      for (const w of ws) w.close();
      resolve(0);
    };
    setTimeout(stop, o.durationMs);
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
}

runIfMain(import.meta.url, 'watchers', main);
