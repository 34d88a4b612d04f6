/**
 * The admin HTTP endpoint (node:http), meant for localhost: GET / (the status page, HTML: page.ts),
 * GET /status (JSON), GET /healthz, GET /metrics (Prometheus text format), POST /reload (re-read
 * the configuration file).
 *
 * POST /reload answers with the {@link ReloadResult} as JSON: 200 when it was applied, 422 when
 * it was refused (an invalid file, a change a reload cannot make, a VIP another agent holds:
 * `problems` says which; nothing changed), 503 when the agent cannot reload now (stopping), with
 * `{ ok: false, problems: [why] }`. `ballast reload` maps these to exit 0, 2 and 1.
 */
import { createRequire } from 'node:module';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { escapeHtml, renderStatusPage } from './page.js';
import type { ReloadResult, StatusDocument } from './status.js';
/**
 * node:http through require, not an ESM import: Node builds a builtin's ESM namespace from all of
 * its exports, and reading node:http's lazy WebSocket / CloseEvent / MessageEvent getters loads
 * the whole of undici (Node 24: +2.4 MiB of heap, a 770 kB source string, for nothing here).
 */
const { createServer } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

/** The page has no script and no external asset: the browser is told to load none. */
const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'",
  'cache-control': 'no-store',
};

/**
 * How long one rendering of the status document and of /metrics serves the requests that follow
 * it, ms (see {@link shared}). Twenty scrapers at 10 Hz each would ask for 200 renderings a
 * second, each 1–3 ms of the main thread where the election runs (prom-client's collects, the
 * engine's and the checks' status), and delay the Active's adverts; with this, at most
 * 1000 / SCRAPE_CACHE_MS renderings a second of each, whatever the number of scrapers. A client
 * that asks less often than this always gets a fresh answer; Prometheus scrapes every 15–60 s.
 */
export const SCRAPE_CACHE_MS = 100;

/** Connections the admin server holds at most (more are closed at once): a bound on what scrapers can make it parse. */
export const ADMIN_MAX_CONNECTIONS = 64;

/**
 * `render` shared by its callers: a call while one runs gets that one's outcome, and a call within
 * `maxAgeMs` of the start of the last one that succeeded gets its value, so the work is done at most
 * once per `maxAgeMs` however many ask. A rejection is not kept (the next call renders again).
 * A value is also not reused once `stamp()` differs from what it was at its rendering (the agent's
 * count of state changes, health changes and reloads: those are never answered stale).
 * A synchronous throw of `render` is thrown to the caller. `drop()` forgets the last value (after a reload: the next call renders).
 * `maxAgeMs` 0: every call renders, only calls during a rendering share it.
 */
export function shared<T>(
  render: () => Promise<T>,
  maxAgeMs: number,
  now: () => number = () => performance.now(),
  stamp: () => unknown = () => 0,
): { get(): Promise<T>; drop(): void } {
  let running: Promise<T> | null = null;
  let last: { at: number; stamp: unknown; value: Promise<T> } | null = null;
  let epoch = 0;
  return {
    get() {
      if (running) return running;
      const at = now();
      const st = stamp();
      if (last && at - last.at < maxAgeMs && Object.is(st, last.stamp)) return last.value;
      const mine = ++epoch;
      // a synchronous throw goes to the caller as it is (the admin server answers it with a 500)
      const p = render();
      running = p;
      const settle = (ok: boolean): void => {
        if (epoch !== mine) return;
        running = null;
        last = ok ? { at, stamp: st, value: p } : null;
      };
      p.then(
        () => settle(true),
        () => settle(false),
      );
      return p;
    },
    drop() {
      epoch++;
      running = null;
      last = null;
    },
  };
}

/** A reload the agent refuses to start (it is stopping): 503, not a failed reload. */
export class ReloadUnavailable extends Error {
  override name = 'ReloadUnavailable';
}

/** What the admin server asks of the agent. */
export interface AdminHandlers {
  /** The current status; rejects when the election engine is not running ("the election engine is not running"). */
  status(): Promise<StatusDocument>;
  /** The Prometheus exposition: content type and body. */
  metrics(): Promise<{ contentType: string; body: string }>;
  /** Re-reads the configuration file and applies it; rejects with {@link ReloadUnavailable} when the agent cannot reload now. Absent: 404. */
  reload?(): Promise<ReloadResult>;
  /** Changes (a number that grows) whenever the state, a backend's health or the configuration changed: a rendering from before is not served. Absent: only time and POST /reload decide. */
  stamp?(): unknown;
  /** A handler or an answer threw (a bug): told here (observe/contain.ts counts it); the request gets a 500, the server goes on. */
  internalError?(err: unknown): void;
}

/**
 * Starts listening on `host`:`port`.
 * @throws Error with `code` EADDRINUSE / EACCES / EADDRNOTAVAIL when the address cannot be bound.
 */
export async function startAdmin(host: string, port: number, h: AdminHandlers, o: { cacheMs?: number } = {}): Promise<Server> {
  const cacheMs = o.cacheMs ?? SCRAPE_CACHE_MS;
  // /status, / and /healthz read one status document; /metrics has its own rendering
  const stamp = h.stamp ? () => h.stamp!() : undefined;
  const status = shared(() => h.status(), cacheMs, undefined, stamp);
  const metrics = shared(() => h.metrics(), cacheMs, undefined, stamp);
  /** The 500 of a handler that threw: never a throw out of the request (it would end the process). */
  const fail500 = (res: ServerResponse, err: unknown): void => {
    try {
      h.internalError?.(err);
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      if (!res.writableEnded) res.end('internal error\n');
    } catch {
      res.destroy();
    }
  };
  /**
   * `p()`'s outcome to `ok` or `fail`; a throw in any of the three is a 500 (each callback makes
   * its body before writeHead, so that a throw leaves the status unsent).
   */
  const answer = <T>(res: ServerResponse, p: () => Promise<T>, ok: (v: T) => void, fail: (err: Error) => void): void => {
    let q: Promise<T>;
    try {
      q = p();
    } catch (err) {
      fail500(res, err);
      return;
    }
    q.then(ok, fail).catch((err: unknown) => fail500(res, err));
  };
  const server = createServer((req, res) => {
    try {
      route(req, res);
    } catch (err) {
      fail500(res, err);
    }
  });
  const route = (req: IncomingMessage, res: ServerResponse): void => {
    const url = (req.url ?? '/').split('?')[0];
    if (url === '/reload' && h.reload) {
      if (req.method !== 'POST') {
        res.writeHead(405, { allow: 'POST' }).end();
        return;
      }
      // the body is not read (there is none to read): drain it so the connection stays usable
      req.resume();
      answer(
        res,
        () => h.reload!(),
        (r) => {
          // what a reload changed is in the next answer, not in one rendered before it
          status.drop();
          metrics.drop();
          const body = `${JSON.stringify(r)}\n`;
          res.writeHead(r.ok ? 200 : 422, { 'content-type': 'application/json' }).end(body);
        },
        (err: Error) =>
          res
            .writeHead(err instanceof ReloadUnavailable ? 503 : 500, { 'content-type': 'application/json' })
            .end(`${JSON.stringify({ ok: false, problems: [err.message] })}\n`),
      );
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (url === '/status' || url === '/healthz') {
      answer(
        res,
        () => status.get(),
        (doc) => {
          if (url === '/status') {
            const body = `${JSON.stringify(doc)}\n`;
            res.writeHead(200, { 'content-type': 'application/json' }).end(body);
          } else {
            res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
          }
        },
        (err: Error) => {
          res.writeHead(503, { 'content-type': 'text/plain' }).end(`election engine not answering: ${err.message}\n`);
        },
      );
      return;
    }
    if (url === '/') {
      answer(
        res,
        () => status.get(),
        (doc) => {
          const page = renderStatusPage(doc);
          res.writeHead(200, PAGE_HEADERS).end(page);
        },
        (err: Error) =>
          res
            .writeHead(503, PAGE_HEADERS)
            .end(
              `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5"><title>ballast: election engine not answering</title></head><body><h1>ballast</h1><p>The election engine is not answering: ${escapeHtml(err.message)}</p></body></html>\n`,
            ),
      );
      return;
    }
    if (url === '/metrics') {
      answer(
        res,
        () => metrics.get(),
        (m) => res.writeHead(200, { 'content-type': m.contentType }).end(m.body),
        (err: Error) => res.writeHead(503, { 'content-type': 'text/plain' }).end(`metrics unavailable: ${err.message}\n`),
      );
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found; try /, /status, /healthz, /metrics or POST /reload\n');
  };
  server.keepAliveTimeout = 5000;
  server.maxConnections = ADMIN_MAX_CONNECTIONS;
  // a client that sends its headers or its request this slowly holds a connection for nothing
  server.headersTimeout = 5000;
  server.requestTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}
