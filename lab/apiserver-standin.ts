/**
 * A TLS stand-in for kube-apiserver (a real one cannot run in the lab): enough surface for
 * ballast's health checks and for clients that measure which node served them.
 *
 *   node dist/lab/apiserver-standin.js --name n1 --cert C --key K [--port 6443] [--host ::]
 *        [--unready]
 *
 *   GET /readyz   200 "ok", or 500 "[-]lab-readiness failed …" while unready
 *   GET /livez    200 "ok"
 *   GET /version  200 kube-apiserver-like JSON whose extra `node` field names the node
 *   anything else 404
 *   every response carries `x-ballast-lab-node: <name>`
 *
 * Signals: SIGUSR1 → unready, SIGUSR2 → ready (one line printed per signal, also when the
 * state does not change, so a caller can wait for the acknowledgement); SIGTERM / SIGINT →
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

/** Options of `startStandin`. */
export interface StandinOptions {
  name: string;
  cert: Buffer;
  key: Buffer;
  port: number;
  host: string;
  ready: boolean;
  log?: (line: string) => void;
}

/** A running stand-in: flip readiness, or close (resolves once the server is closed). */
export interface Standin {
  server: https.Server;
  setReady(ready: boolean): void;
  isReady(): boolean;
  close(): Promise<void>;
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

  const handler = (req: IncomingMessage, res: ServerResponse): void => {
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
    const path = new URL(req.url ?? '/', 'https://standin.invalid').pathname;
    switch (path) {
      case '/readyz':
        // the body mimics kube-apiserver's failed-check listing
        return ready ? send(200, 'ok') : send(500, '[-]lab-readiness failed: reason withheld\nreadyz check failed\n');
      case '/livez':
        return send(200, 'ok');
      case '/version':
        return send(200, version, 'application/json');
      default:
        return send(404, '404 page not found\n');
    }
  };

  const server = https.createServer({ cert: opts.cert, key: opts.key, handshakeTimeout: 10_000 }, handler);
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
      log(`${tag} listening on ${where} ready=${ready}`);
      resolve({
        server,
        isReady: () => ready,
        setReady(next: boolean) {
          const changed = next !== ready;
          ready = next;
          log(`${tag} ready=${ready}${changed ? '' : ' (unchanged)'}`);
        },
        close() {
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
    },
    strict: true,
  });
  if (!values.name || !values.cert || !values.key) throw new TypeError('--name, --cert and --key are required');
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new TypeError(`--port must be 1..65535, got ${values.port}`);
  const standin = await startStandin({
    name: values.name,
    cert: readFileSync(values.cert),
    key: readFileSync(values.key),
    port,
    host: values.host,
    ready: !values.unready,
  });
  process.on('SIGUSR1', () => standin.setReady(false));
  process.on('SIGUSR2', () => standin.setReady(true));
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`apiserver-standin ${values.name}: ${signal}, shutting down\n`);
    // bounded: exit even if a socket refuses to close
    setTimeout(() => process.exit(0), 2000).unref();
    void standin.close().then(() => process.exit(0));
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
