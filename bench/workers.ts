/**
 * The benchmarks' client workers and bulk server, run inside the lab's namespaces by
 * common.ts's runWorkers and by balancing.ts (an entry point; nothing imports it):
 *
 *   node dist/bench/workers.js --role rate-worker --url U [--url U…] --ca CA --duration-ms D --start-at T --index I
 *   node dist/bench/workers.js --role bulk-worker --host H --port P --duration-ms D --start-at T
 *   node dist/bench/workers.js --role bulk-server --name N --cert C --key K [--host H] --port P
 *
 * A worker prints one JSON line (`{"role":…}`, see RateWorkerResult / BulkWorkerResult) and exits 0.
 */
import { readFileSync } from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { Duplex } from 'node:stream';
import tls from 'node:tls';
import { parseArgs } from 'node:util';
import { requestOnce } from '../lab/clients/prober.js';
import { runIfMain } from '../lab/entry.js';
import { sleep } from '../lab/wait.js';
import { intArg, round1, type BulkWorkerResult, type RateWorkerResult } from './common.js';

/** request timeout of the rate workers, and connect timeout of the bulk workers */
const RATE_TIMEOUT_MS = 2000;
/** a bulk connection the server cuts short, whatever the client does */
const BULK_CONN_MAX_MS = 60_000;
/** the bulk server exits on its own after this long */
const BULK_SERVER_LIFETIME_MS = 600_000;
/**
 * A rate worker: from `startAt` (ms since the epoch) for `durationMs`, one HTTPS GET after the
 * other, each on a new verified TLS connection, cycling over `urls` from `index`. Bounded by time
 * and by count (durationMs × 10 requests).
 */
async function rateWorker(urls: URL[], ca: Buffer, durationMs: number, startAt: number, index: number): Promise<RateWorkerResult> {
  await sleep(Math.max(0, startAt - Date.now()));
  const maxCount = durationMs * 10;
  const r: RateWorkerResult = { role: 'rate-worker', requests: 0, ok: 0, elapsedMs: 0, latencies: [], errors: {}, nodes: {} };
  const t0 = performance.now();
  while (r.requests < maxCount && performance.now() - t0 < durationMs) {
    const res = await requestOnce(urls[(index + r.requests) % urls.length]!, ca, RATE_TIMEOUT_MS);
    r.requests++;
    if (res.ok) {
      r.ok++;
      r.latencies.push(res.ms);
      const n = res.node ?? '?';
      r.nodes[n] = (r.nodes[n] ?? 0) + 1;
    } else {
      r.errors[res.error] = (r.errors[res.error] ?? 0) + 1;
    }
  }
  r.elapsedMs = round1(performance.now() - t0);
  return r;
}

/**
 * A bulk worker: from `startAt`, one plain TCP connection to host:port that sends `BULK\n`, reads
 * the server's name line, then counts payload bytes for `durationMs` and closes.
 */
function bulkWorker(host: string, port: number, durationMs: number, startAt: number): Promise<BulkWorkerResult> {
  return sleep(Math.max(0, startAt - Date.now())).then(
    () =>
      new Promise((resolve) => {
        const r: BulkWorkerResult = { role: 'bulk-worker', node: null, bytes: 0, ms: 0 };
        let head = '';
        let tFirst: number | undefined;
        let done = false;
        const sock = net.connect({ host, port });
        const finish = (error?: string): void => {
          if (done) return;
          done = true;
          clearTimeout(connectTimer);
          clearTimeout(endTimer);
          r.ms = tFirst === undefined ? 0 : round1(performance.now() - tFirst);
          if (error !== undefined) r.error = error;
          sock.destroy();
          resolve(r);
        };
        const connectTimer = setTimeout(() => finish('connect timeout'), RATE_TIMEOUT_MS);
        let endTimer: NodeJS.Timeout | undefined;
        sock.on('connect', () => {
          clearTimeout(connectTimer);
          sock.write('BULK\n');
          endTimer = setTimeout(() => finish(), durationMs);
        });
        sock.on('data', (d: Buffer) => {
          if (r.node === null) {
            head += d.toString('latin1');
            const nl = head.indexOf('\n');
            if (nl < 0) {
              if (head.length > 64) finish('no name line');
              return;
            }
            r.node = head.slice(0, nl);
            tFirst = performance.now();
            r.bytes += head.length - nl - 1;
            return;
          }
          r.bytes += d.length;
        });
        sock.on('error', (e: NodeJS.ErrnoException) => finish(e.code ?? e.message));
        sock.on('close', () => finish(r.bytes > 0 ? undefined : 'closed by the server'));
      }),
  );
}

/**
 * The bulk server (see the file comment, part 2): listens on host:port; a connection whose first
 * byte is a TLS handshake record (0x16) is served HTTPS (/readyz /livez /healthz → 200 "ok",
 * /version → JSON naming the node, else 404); one opening with `B` gets `<name>\n` and then zeros
 * until it closes (at most BULK_CONN_MAX_MS). Exits after BULK_SERVER_LIFETIME_MS, or on SIGTERM.
 */
async function bulkServer(name: string, cert: Buffer, key: Buffer, host: string, port: number): Promise<void> {
  const secureContext = tls.createSecureContext({ cert, key });
  const web = http.createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? '/', 'https://bulk.invalid').pathname;
    const send = (status: number, body: string, type = 'text/plain; charset=utf-8'): void => {
      res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), 'x-ballast-lab-node': name, connection: 'close' });
      res.end(body);
    };
    if (path === '/readyz' || path === '/livez' || path === '/healthz') return send(200, 'ok');
    if (path === '/version') return send(200, JSON.stringify({ major: '1', minor: '31', gitVersion: 'v1.31.0-ballast-bulk', node: name }), 'application/json');
    return send(404, '404 page not found\n');
  });
  web.headersTimeout = 10_000;
  web.requestTimeout = 10_000;
  const zeros = Buffer.alloc(256 * 1024);
  const sockets = new Set<net.Socket>();

  const serveBulk = (sock: net.Socket): void => {
    const deadline = Date.now() + BULK_CONN_MAX_MS;
    sock.write(`${name}\n`);
    const pump = (): void => {
      while (!sock.destroyed && Date.now() < deadline) {
        if (!sock.write(zeros)) {
          sock.once('drain', pump);
          return;
        }
      }
      if (!sock.destroyed) sock.end();
    };
    pump();
  };

  // TLS over a JS stream: net.Socket data already read (the peeked first chunk) would be lost if
  // TLSSocket took over the socket's handle directly, so it reads through this Duplex instead
  const serveTls = (sock: net.Socket, head: Buffer): void => {
    sock.pause();
    const d = new Duplex({
      read() {
        sock.resume();
      },
      write(chunk: Buffer, _enc, cb) {
        sock.write(chunk, cb);
      },
      final(cb) {
        sock.end(cb);
      },
      destroy(err, cb) {
        sock.destroy();
        cb(err);
      },
    });
    d.push(head);
    sock.on('data', (c: Buffer) => {
      if (!d.push(c)) sock.pause();
    });
    sock.on('end', () => d.push(null));
    sock.on('close', () => d.destroy());
    const t = new tls.TLSSocket(d, { isServer: true, secureContext });
    t.on('error', () => sock.destroy());
    web.emit('connection', t);
  };

  const server = net.createServer((sock) => {
    sockets.add(sock);
    sock.once('close', () => sockets.delete(sock));
    sock.on('error', () => undefined);
    sock.setTimeout(10_000, () => {
      // only until the first byte: a bulk reader or a TLS client speaks at once
      if (sock.bytesRead === 0) sock.destroy();
    });
    sock.once('data', (head: Buffer) => {
      sock.setTimeout(0);
      if (head[0] === 0x16) serveTls(sock, head);
      else if (head[0] === 0x42 /* B */) serveBulk(sock);
      else sock.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => resolve());
  });
  process.stdout.write(`bulk-server ${name}: listening on ${host}:${port}\n`);
  const stop = (): void => {
    server.close();
    for (const s of sockets) s.destroy();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  setTimeout(stop, BULK_SERVER_LIFETIME_MS).unref();
  await new Promise<void>((resolve) => server.once('close', () => resolve()));
}

const OPTIONS = {
  role: { type: 'string' },
  url: { type: 'string', multiple: true },
  ca: { type: 'string' },
  host: { type: 'string' },
  port: { type: 'string' },
  'duration-ms': { type: 'string' },
  'start-at': { type: 'string' },
  index: { type: 'string' },
  name: { type: 'string' },
  cert: { type: 'string' },
  key: { type: 'string' },
} as const;

const parseCli = (): ReturnType<typeof parseArgs<{ options: typeof OPTIONS; strict: true }>> => parseArgs({ options: OPTIONS, strict: true });

/** Runs one of the internal roles (in a lab namespace); resolves with the exit status. */
async function role(values: ReturnType<typeof parseCli>['values']): Promise<number> {
  const out = (o: unknown): void => void process.stdout.write(`${JSON.stringify(o)}\n`);
  const durationMs = (): number => intArg('duration-ms', values['duration-ms'], 0, 1, 60_000);
  const startAt = (): number => intArg('start-at', values['start-at'], Date.now(), 0, Number.MAX_SAFE_INTEGER);
  switch (values.role) {
    case 'rate-worker': {
      if (!values.url?.length || values.ca === undefined) throw new TypeError('rate-worker: --url and --ca are required');
      out(
        await rateWorker(
          values.url.map((u) => new URL(u)),
          readFileSync(values.ca),
          durationMs(),
          startAt(),
          intArg('index', values.index, 0, 0, 1000),
        ),
      );
      return 0;
    }
    case 'bulk-worker': {
      if (values.host === undefined) throw new TypeError('bulk-worker: --host is required');
      out(await bulkWorker(values.host, intArg('port', values.port, 0, 1, 65535), durationMs(), startAt()));
      return 0;
    }
    case 'bulk-server': {
      if (values.name === undefined || values.cert === undefined || values.key === undefined)
        throw new TypeError('bulk-server: --name, --cert and --key are required');
      await bulkServer(values.name, readFileSync(values.cert), readFileSync(values.key), values.host ?? '0.0.0.0', intArg('port', values.port, 0, 1, 65535));
      return 0;
    }
    default:
      throw new TypeError(`unknown --role ${values.role}`);
  }
}

runIfMain(import.meta.url, 'bench worker', async () => role(parseCli().values), { stack: true });
