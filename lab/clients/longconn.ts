/**
 * The lab's long-lived client: ONE TLS connection, one HTTP/1.1 request every `interval` ms on
 * that same connection, every outcome reported. Where the prober (prober.ts) opens a new
 * connection per request to measure the path, this one measures what happens to a connection
 * that already exists: does it keep working (a backend draining), is it reset (a backend dead),
 * or does it hang.
 *
 *   node dist/lab/clients/longconn.js --url https://10.78.S.100:6443/version --ca CA
 *        [--node n3] [--attempts 50] [--interval 100] [--duration 10000] [--timeout 5000]
 *        [--reconnect] [--max-connections 5]
 *
 * With --node, connections are opened (one at a time, at most --attempts) until one is served
 * by that node (the stand-in's /version names it); the others are closed. That connection is
 * then used for every request. Requests never overlap: a tick that finds the previous request
 * still waiting is skipped (counted in the summary). A request that gets no answer within
 * --timeout fails with `timeout` and the connection is destroyed (HTTP/1.1 cannot recover).
 * When the connection ends, --reconnect opens a new one (any node) on the next tick, at most
 * --max-connections in all; without it the client stops. Bounded by time (--duration) and by
 * count (floor(duration / interval) + 1 requests). SIGTERM / SIGINT stop it early.
 *
 * No Nagle (setNoDelay), no TCP keepalive, no TLS session reuse: what the client sees is what
 * the network did to this one connection.
 *
 * stdout, one JSON object per line (t = ms since start, monotonic; at = Date.now()):
 *   {"event":"connected","conn":1,"t":5.2,"at":…,"localPort":40000}
 *   {"event":"skipped","conn":1,"node":"n2","attempt":1}        (--node: landed elsewhere)
 *   {"event":"pinned","conn":3,"node":"n3","attempts":3}
 *   {"t":…,"at":…,"conn":3,"seq":0,"ok":true,"node":"n3","status":200,"ms":1.4}
 *   {"t":…,"at":…,"conn":3,"seq":7,"ok":false,"error":"ECONNRESET","ms":612.0}
 *   {"event":"closed","conn":3,"t":…,"at":…,"error":"ECONNRESET"}   (error null: a clean FIN)
 *   {"summary":true,"requests":N,"ok":N,"failed":N,"skipped":N,"connections":N,"nodes":{…}}
 * Exit 0 after the summary; 1 on bad arguments or when --node was never reached.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import tls from 'node:tls';
import { parseArgs } from 'node:util';
import { runIfMain } from '../entry.js';

/** One request's outcome on the long-lived connection. */
export type LongconnResult =
  | { t: number; at: number; conn: number; seq: number; ok: true; node?: string; status: number; ms: number }
  | { t: number; at: number; conn: number; seq: number; ok: false; error: string; node?: string; status?: number; ms: number };

/** A connection event. */
export type LongconnEvent =
  | { event: 'connected'; conn: number; t: number; at: number; localPort: number | undefined }
  | { event: 'skipped'; conn: number; node: string | undefined; attempt: number }
  | { event: 'pinned'; conn: number; node: string; attempts: number }
  | { event: 'closed'; conn: number; t: number; at: number; error: string | null };

/** The last line. */
export interface LongconnSummary {
  summary: true;
  requests: number;
  ok: number;
  failed: number;
  skipped: number;
  connections: number;
  nodes: Record<string, number>;
}

export interface LongconnOptions {
  url: URL;
  ca: Buffer;
  node: string | undefined;
  attempts: number;
  intervalMs: number;
  durationMs: number;
  timeoutMs: number;
  reconnect: boolean;
  maxConnections: number;
}

const start = performance.now();
const now = (): number => Math.round((performance.now() - start) * 10) / 10;
const out = (o: object): void => void process.stdout.write(`${JSON.stringify(o)}\n`);

/** A parsed HTTP response (the stand-in always sends content-length). */
interface Response {
  status: number;
  node: string | undefined;
}

/** One TLS connection carrying sequential HTTP/1.1 requests. */
export class Conn {
  readonly id: number;
  readonly socket: tls.TLSSocket;
  #buf = Buffer.alloc(0);
  #waiter: { resolve(r: Response): void; reject(e: Error): void } | null = null;
  #ended: Error | null = null;
  closed = false;

  private constructor(id: number, socket: tls.TLSSocket) {
    this.id = id;
    this.socket = socket;
    socket.on('data', (d: Buffer) => {
      this.#buf = Buffer.concat([this.#buf, d]);
      this.#parse();
    });
    const end = (err: Error | null): void => {
      if (this.closed) return;
      this.closed = true;
      const code = err === null ? null : ((err as NodeJS.ErrnoException).code ?? err.message);
      out({ event: 'closed', conn: id, t: now(), at: Date.now(), error: code });
      this.#ended = err ?? Object.assign(new Error('connection closed by the server (FIN)'), { code: 'closed' });
      this.#waiter?.reject(this.#ended);
      this.#waiter = null;
    };
    socket.on('error', (e) => end(e));
    socket.on('end', () => end(null));
    socket.on('close', () => end(null));
  }

  /** Opens a verified TLS connection; rejects after `timeoutMs`. */
  static open(id: number, o: LongconnOptions): Promise<Conn> {
    return new Promise((resolve, reject) => {
      const socket = tls.connect({
        host: o.url.hostname.replace(/^\[|\]$/g, ''),
        port: Number(o.url.port || 443),
        ca: o.ca,
      });
      socket.setNoDelay(true);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(Object.assign(new Error('connect timeout'), { code: 'timeout' }));
      }, o.timeoutMs);
      socket.once('secureConnect', () => {
        clearTimeout(timer);
        socket.removeListener('error', onError);
        out({ event: 'connected', conn: id, t: now(), at: Date.now(), localPort: socket.localPort });
        resolve(new Conn(id, socket));
      });
      const onError = (e: Error): void => {
        clearTimeout(timer);
        reject(e);
      };
      socket.once('error', onError);
    });
  }

  /** Sends one GET and resolves with the response; rejects on error, close or timeout. */
  request(o: LongconnOptions): Promise<Response> {
    if (this.#ended) return Promise.reject(this.#ended);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiter = null;
        const e = Object.assign(new Error('timeout'), { code: 'timeout' });
        reject(e);
        // the connection cannot carry another request: end it, reported as `closed` with `timeout`
        this.socket.destroy(e);
      }, o.timeoutMs);
      this.#waiter = {
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.socket.write(`GET ${o.url.pathname}${o.url.search} HTTP/1.1\r\nHost: ${o.url.host}\r\nConnection: keep-alive\r\n\r\n`);
    });
  }

  #parse(): void {
    const head = this.#buf.indexOf('\r\n\r\n');
    if (head < 0) return;
    const lines = this.#buf.subarray(0, head).toString('latin1').split('\r\n');
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1]);
    const headers = new Map<string, string>();
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      if (i > 0) headers.set(l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim());
    }
    const len = Number(headers.get('content-length') ?? '0');
    if (this.#buf.length < head + 4 + len) return;
    const body = this.#buf.subarray(head + 4, head + 4 + len).toString('utf8');
    this.#buf = this.#buf.subarray(head + 4 + len);
    let node = headers.get('x-ballast-lab-node');
    try {
      const j = JSON.parse(body) as { node?: unknown };
      if (typeof j.node === 'string') node = j.node;
    } catch {
      // not JSON: the header names the node
    }
    const w = this.#waiter;
    this.#waiter = null;
    w?.resolve({ status, node });
  }

  close(): void {
    this.closed = true;
    this.socket.destroy();
  }
}

const errorCode = (e: unknown): string => (e as NodeJS.ErrnoException).code ?? (e as Error).message;

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string' },
      ca: { type: 'string' },
      node: { type: 'string' },
      attempts: { type: 'string', default: '50' },
      interval: { type: 'string', default: '100' },
      duration: { type: 'string', default: '10000' },
      timeout: { type: 'string', default: '5000' },
      reconnect: { type: 'boolean', default: false },
      'max-connections': { type: 'string', default: '5' },
    },
    strict: true,
  });
  if (!values.url || !values.ca) throw new TypeError('--url and --ca are required');
  const int = (name: string, v: string, min: number, max: number): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) throw new TypeError(`--${name} must be an integer ${min}..${max}, got ${v}`);
    return n;
  };
  const o: LongconnOptions = {
    url: new URL(values.url),
    ca: readFileSync(values.ca),
    node: values.node,
    attempts: int('attempts', values.attempts, 1, 1000),
    intervalMs: int('interval', values.interval, 1, 60_000),
    durationMs: int('duration', values.duration, 0, 3_600_000),
    timeoutMs: int('timeout', values.timeout, 1, 600_000),
    reconnect: values.reconnect,
    maxConnections: int('max-connections', values['max-connections'], 1, 1000),
  };

  let stopping = false;
  let wake: (() => void) | null = null;
  const stop = (): void => {
    stopping = true;
    wake?.();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  // a pause that SIGTERM/SIGINT cuts short (lab/wait.ts's sleep cannot be woken)
  const pause = (ms: number): Promise<void> =>
    new Promise((r) => {
      const timer = setTimeout(
        () => {
          wake = null;
          r();
        },
        Math.max(0, ms),
      );
      wake = () => {
        clearTimeout(timer);
        wake = null;
        r();
      };
    });

  let connections = 0;
  /** connections opened by the loop (after the pinned one), bounded by --max-connections */
  let opened = 0;
  let conn: Conn | null = null;

  // pin: open connections until one is served by the wanted node (bounded by --attempts)
  if (o.node !== undefined) {
    for (let attempt = 1; attempt <= o.attempts && !stopping && conn === null; attempt++) {
      const id = ++connections;
      let c: Conn;
      try {
        c = await Conn.open(id, o);
      } catch (e) {
        out({ event: 'closed', conn: id, t: now(), at: Date.now(), error: errorCode(e) });
        await pause(50);
        continue;
      }
      try {
        const r = await c.request(o);
        if (r.node === o.node) {
          out({ event: 'pinned', conn: id, node: r.node, attempts: attempt });
          conn = c;
          break;
        }
        out({ event: 'skipped', conn: id, node: r.node, attempt });
      } catch (e) {
        out({ event: 'skipped', conn: id, node: undefined, attempt, error: errorCode(e) });
      }
      c.close();
    }
    if (conn === null) {
      process.stderr.write(`longconn: no connection reached ${o.node} in ${o.attempts} attempts\n`);
      return 1;
    }
  }

  const summary: LongconnSummary = { summary: true, requests: 0, ok: 0, failed: 0, skipped: 0, connections: 0, nodes: {} };
  const maxRequests = Math.floor(o.durationMs / o.intervalMs) + 1;
  const loopStart = performance.now();
  let pending: Promise<void> | null = null;
  for (let i = 0; i < maxRequests && !stopping; i++) {
    await pause(loopStart + i * o.intervalMs - performance.now());
    if (stopping || performance.now() - loopStart > o.durationMs) break;
    if (pending !== null) {
      summary.skipped++;
      continue;
    }
    if (conn === null || conn.closed) {
      if (conn !== null && !o.reconnect) break;
      if (opened >= o.maxConnections) break;
      opened++;
      const id = ++connections;
      try {
        conn = await Conn.open(id, o);
      } catch (e) {
        out({ event: 'closed', conn: id, t: now(), at: Date.now(), error: errorCode(e) });
        conn = null;
        continue;
      }
    }
    const c = conn;
    const seq = i;
    const t = now();
    const at = Date.now();
    const t0 = performance.now();
    summary.requests++;
    pending = c
      .request(o)
      .then(
        (r) => {
          const ms = Math.round((performance.now() - t0) * 10) / 10;
          const ok = r.status >= 200 && r.status < 300;
          if (ok) {
            summary.ok++;
            if (r.node !== undefined) summary.nodes[r.node] = (summary.nodes[r.node] ?? 0) + 1;
            out({ t, at, conn: c.id, seq, ok: true, node: r.node, status: r.status, ms });
          } else {
            summary.failed++;
            out({ t, at, conn: c.id, seq, ok: false, error: `HTTP ${r.status}`, node: r.node, status: r.status, ms });
          }
        },
        (e: unknown) => {
          summary.failed++;
          out({ t, at, conn: c.id, seq, ok: false, error: errorCode(e), ms: Math.round((performance.now() - t0) * 10) / 10 });
        },
      )
      .finally(() => {
        pending = null;
      });
  }
  if (pending !== null) await pending;
  summary.connections = connections;
  conn?.close();
  out(summary);
  return 0;
}

runIfMain(import.meta.url, 'longconn', main);
