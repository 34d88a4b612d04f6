/**
 * The reconnect storm's client (bench/storm.ts): holds `--connections` long-lived watches, each
 * on its own TLS connection, and re-establishes every one that ends, the way client-go's
 * reflector re-establishes a watch.
 *
 *   node dist/bench/storm-client.js --url https://VIP:6443/apis/…?watch=true --ca CA
 *        --connections N [--first 0] [--ramp-ms 4000] [--duration-ms 120000]
 *        [--keepalive-ms 1000] [--dial-timeout-ms 30000] [--tls-timeout-ms 10000]
 *        [--header-timeout-ms 30000] [--backoff-ms 800] [--backoff-max-ms 30000]
 *
 * Each connection is one `GET <url>` (HTTP/1.1, `agent: false`: a connection of its own, no TLS
 * session reuse: client-go's Go TLS client has no session cache unless one is configured). A
 * 200 whose headers arrived is "up"; the stream then stays open and its events (the stand-in's
 * BOOKMARKs) are read and dropped. When an up stream ends (FIN, reset, error) the connection is
 * re-established at once, as the reflector starts the next watch at once after one ends. A
 * failed attempt (no connection within --dial-timeout-ms, no TLS within --tls-timeout-ms, no
 * response headers within --header-timeout-ms, refused, reset, a status other than 200) backs
 * off before the next, as the reflector's backoff manager does: --backoff-ms doubled per
 * consecutive failure, capped at --backoff-max-ms, plus a uniform jitter of up to 100 %
 * (client-go: wait.NewExponentialBackoffManager(800ms, 30s, 2m, 2.0, 1.0)); a success resets it.
 * The timeouts are Go's net/http defaults as client-go sets them (dial 30 s, TLS handshake
 * 10 s); client-go sets no response-header timeout for a watch, --header-timeout-ms bounds it here.
 *
 * Dead-peer detection: TCP keepalive after --keepalive-ms idle, then every 1 s (libuv's probe
 * interval). A connection whose load balancer died silently learns it from the answer to a
 * probe: a RST from the new VIP holder, which has no state for it. (client-go on HTTP/2 uses
 * pings after 30 s read-idle; a shorter probe here keeps detection out of the comparison's way:
 * it is the same for every load balancer.)
 *
 * The initial connections are opened over --ramp-ms (evenly); the re-establishing ones are not
 * spread (that is the storm). Bounded: every connection stops after --duration-ms; SIGTERM /
 * SIGINT stop it early. Connection ids are --first … --first+N-1.
 *
 * stdout, one JSON object per line (t = Date.now(), ms):
 *   {"e":"up","c":12,"t":…,"node":"n2","a":1,"ms":[1,3,1]}
 *       a: attempts it took (1 = first try); ms: this attempt's TCP connect, TLS handshake and
 *       response headers, each from the end of the previous step
 *   {"e":"down","c":12,"t":…,"why":"ECONNRESET"}   an up stream ended ("end": a clean end)
 *   {"e":"fail","c":12,"t":…,"why":"dial timeout"} a failed attempt (then the backoff)
 *   {"e":"end","t":…,"up":N}                       the last line
 */
import { readFileSync } from 'node:fs';
import https from 'node:https';
import type { ClientRequest, IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { parseArgs } from 'node:util';
import { runIfMain } from '../lab/entry.js';
import { backoffMs } from './storm-stats.js';

interface Options {
  url: URL;
  ca: Buffer;
  connections: number;
  first: number;
  rampMs: number;
  durationMs: number;
  keepaliveMs: number;
  dialTimeoutMs: number;
  tlsTimeoutMs: number;
  headerTimeoutMs: number;
  backoffMs: number;
  backoffMaxMs: number;
}

const out = (o: object): void => void process.stdout.write(`${JSON.stringify(o)}\n`);

function errName(e: unknown): string {
  const err = e as NodeJS.ErrnoException;
  return err.code ?? err.message ?? String(e);
}

function run(o: Options): Promise<void> {
  let stopping = false;
  let upNow = 0;
  const live = new Set<ClientRequest>();
  const timers = new Set<NodeJS.Timeout>();
  const later = (ms: number, f: () => void): void => {
    const t = setTimeout(() => {
      timers.delete(t);
      f();
    }, ms);
    timers.add(t);
  };

  const connect = (c: number, failures: number, attempts: number): void => {
    if (stopping) return;
    let settled = false;
    let up = false;
    let timer: NodeJS.Timeout | undefined;
    const arm = (ms: number, why: string): void => {
      clearTimeout(timer);
      timer = setTimeout(() => req.destroy(new Error(why)), ms);
    };
    const finish = (why: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      live.delete(req);
      if (stopping) return;
      if (up) {
        upNow--;
        out({ e: 'down', c, t: Date.now(), why });
        connect(c, 0, 0);
      } else {
        out({ e: 'fail', c, t: Date.now(), why });
        later(backoffMs(failures, o.backoffMs, o.backoffMaxMs, Math.random()), () => connect(c, failures + 1, attempts + 1));
      }
    };
    const t0 = Date.now();
    let tcpAt = 0;
    let tlsAt = 0;
    const req = https.request(o.url, { agent: false, ca: o.ca, method: 'GET', headers: { accept: 'application/json' } });
    live.add(req);
    arm(o.dialTimeoutMs, 'dial timeout');
    req.on('socket', (s) => {
      const sock = s as TLSSocket;
      sock.setNoDelay(true);
      sock.setKeepAlive(true, o.keepaliveMs);
      sock.once('connect', () => {
        tcpAt = Date.now();
        arm(o.tlsTimeoutMs, 'tls timeout');
      });
      sock.once('secureConnect', () => {
        tlsAt = Date.now();
        arm(o.headerTimeoutMs, 'header timeout');
      });
    });
    req.on('response', (res: IncomingMessage) => {
      clearTimeout(timer);
      if (res.statusCode !== 200) {
        res.resume();
        req.destroy(new Error(`status ${res.statusCode}`));
        return;
      }
      up = true;
      upNow++;
      const node = res.headers['x-ballast-lab-node'];
      const t = Date.now();
      out({ e: 'up', c, t, node: typeof node === 'string' ? node : null, a: attempts + 1, ms: [tcpAt - t0, tlsAt - tcpAt, t - tlsAt] });
      res.on('data', () => undefined);
      res.once('end', () => finish('end'));
      res.once('error', (e) => finish(errName(e)));
      res.once('close', () => finish('closed'));
    });
    req.on('error', (e) => finish(errName(e)));
    req.on('close', () => finish('closed'));
    req.end();
  };

  return new Promise<void>((resolve) => {
    const stop = (): void => {
      if (stopping) return;
      stopping = true;
      for (const t of timers) clearTimeout(t);
      for (const r of live) r.destroy();
      out({ e: 'end', t: Date.now(), up: upNow });
      resolve();
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
    // also keeps the event loop alive until the end
    setTimeout(stop, o.durationMs);
    for (let i = 0; i < o.connections; i++) later(Math.floor((i * o.rampMs) / o.connections), () => connect(o.first + i, 0, 0));
  });
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      url: { type: 'string' },
      ca: { type: 'string' },
      connections: { type: 'string' },
      first: { type: 'string', default: '0' },
      'ramp-ms': { type: 'string', default: '4000' },
      'duration-ms': { type: 'string', default: '120000' },
      'keepalive-ms': { type: 'string', default: '1000' },
      'dial-timeout-ms': { type: 'string', default: '30000' },
      'tls-timeout-ms': { type: 'string', default: '10000' },
      'header-timeout-ms': { type: 'string', default: '30000' },
      'backoff-ms': { type: 'string', default: '800' },
      'backoff-max-ms': { type: 'string', default: '30000' },
    },
    strict: true,
  });
  const int = (name: keyof typeof values, min: number, max: number): number => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < min || n > max) throw new TypeError(`--${name} must be an integer ${min}..${max}, got ${values[name]}`);
    return n;
  };
  if (values.url === undefined || values.ca === undefined) throw new TypeError('--url and --ca are required');
  await run({
    url: new URL(values.url),
    ca: readFileSync(values.ca),
    connections: int('connections', 1, 20_000),
    first: int('first', 0, 1_000_000),
    rampMs: int('ramp-ms', 0, 600_000),
    durationMs: int('duration-ms', 1000, 3_600_000),
    keepaliveMs: int('keepalive-ms', 1000, 3_600_000),
    dialTimeoutMs: int('dial-timeout-ms', 100, 600_000),
    tlsTimeoutMs: int('tls-timeout-ms', 100, 600_000),
    headerTimeoutMs: int('header-timeout-ms', 100, 600_000),
    backoffMs: int('backoff-ms', 1, 600_000),
    backoffMaxMs: int('backoff-max-ms', 1, 3_600_000),
  });
  return 0;
}

runIfMain(import.meta.url, 'storm-client failed', main);
