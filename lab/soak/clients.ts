/**
 * The soak's long-running clients (a child process in a lab namespace; one JSON object per line
 * on stdout, times as `at` = ms since the epoch of the machine's clock, which the soak shares).
 *
 *   node dist/lab/soak/clients.js probe --url https://VIP:6443/version --ca CA
 *        [--interval 10] [--duration 600000] [--timeout 500]
 *     the lab prober's fixed schedule (lab/clients/prober.ts `probe`: one new TLS connection per
 *     request, every `interval` ms, bounded in time and count); every result:
 *     {"at":…,"ok":true,"ms":4.1,"node":"n1"} / {"at":…,"ok":false,"ms":500,"error":"timeout"}
 *
 *   node dist/lab/soak/clients.js watch --url … --ca CA [--count 300] [--interval 3000]
 *        [--duration 600000] [--timeout 2000]
 *     `count` long-lived TLS connections (lab/clients/longconn.ts `Conn`), opened over one
 *     interval, each carrying one small request every `interval` ms (± 10 %: a watch's
 *     bookmark); a connection that ends or fails is opened again 100 ms later (each at most
 *     duration / 100 times). Lines: longconn's `connected` / `closed` events, plus
 *     {"w":"fail","conn":3,"at":…,"error":"ECONNRESET"} for a failed request (at: when it was sent),
 *     {"w":"connect-failed","conn":3,"at":…,"error":"ECONNREFUSED"} for a failed (re)connect (at: its start),
 *     {"w":"stats","at":…,"open":300,"ok":N,"failed":N,"reconnects":N} every 5 s and at the end.
 * SIGTERM / SIGINT stop both early. Exit 0.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Conn, type LongconnOptions } from '../clients/longconn.js';
import { probe } from '../clients/prober.js';
import { intArg, runIfMain } from '../entry.js';

const out = (o: object): void => void process.stdout.write(`${JSON.stringify(o)}\n`);
const round = (x: number): number => Math.round(x * 10) / 10;

async function runProbe(url: URL, ca: Buffer, intervalMs: number, durationMs: number, timeoutMs: number, signal: AbortSignal): Promise<void> {
  // probe() counts `t` from its own start, taken in the same tick as this one
  const t0 = performance.timeOrigin + performance.now();
  await probe({
    url,
    ca,
    intervalMs,
    durationMs,
    timeoutMs,
    signal,
    onResult: (r) => out(r.ok ? { at: round(t0 + r.t), ok: true, ms: r.ms, node: r.node } : { at: round(t0 + r.t), ok: false, ms: r.ms, error: r.error }),
  });
}

async function runWatches(o: LongconnOptions, count: number, signal: AbortSignal): Promise<void> {
  const stats = { ok: 0, failed: 0, reconnects: 0 };
  const conns = new Map<number, Conn>();
  const maxOpens = Math.max(1, Math.floor(o.durationMs / 100));
  const end = performance.now() + o.durationMs;
  const pause = (ms: number): Promise<void> =>
    new Promise((r) => {
      if (signal.aborted) return r();
      const timer = setTimeout(done, Math.max(0, ms));
      function done(): void {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        r();
      }
      signal.addEventListener('abort', done, { once: true });
    });
  const live = (): boolean => !signal.aborted && performance.now() < end;

  /** One watch: connect, a request every interval, reconnect on any failure (bounded). */
  const watch = async (i: number): Promise<void> => {
    await pause((i * o.intervalMs) / count);
    for (let opens = 0; opens < maxOpens && live(); opens++) {
      if (opens > 0) stats.reconnects++;
      let c: Conn;
      const tried = Date.now();
      try {
        c = await Conn.open(i, o);
      } catch (e) {
        out({ w: 'connect-failed', conn: i, at: tried, error: (e as NodeJS.ErrnoException).code ?? (e as Error).message });
        await pause(100);
        continue;
      }
      conns.set(i, c);
      while (live()) {
        const sent = Date.now();
        try {
          const r = await c.request(o);
          if (r.status === 200) stats.ok++;
          else throw Object.assign(new Error(`HTTP ${r.status}`), { code: `HTTP ${r.status}` });
        } catch (e) {
          stats.failed++;
          out({ w: 'fail', conn: i, at: sent, error: (e as NodeJS.ErrnoException).code ?? (e as Error).message });
          c.close();
          break;
        }
        await pause(o.intervalMs * (0.9 + Math.random() * 0.2));
      }
      conns.delete(i);
      c.close();
      await pause(100);
    }
  };
  const report = setInterval(() => out({ w: 'stats', at: Date.now(), open: conns.size, ...stats }), 5000);
  try {
    await Promise.all(Array.from({ length: count }, (_, i) => watch(i + 1)));
  } finally {
    clearInterval(report);
    for (const c of conns.values()) c.close();
    out({ w: 'stats', at: Date.now(), open: 0, ...stats, final: true });
  }
}

async function main(argv: string[]): Promise<number> {
  const [mode, ...rest] = argv;
  const { values } = parseArgs({
    args: rest,
    options: {
      url: { type: 'string' },
      ca: { type: 'string' },
      interval: { type: 'string' },
      duration: { type: 'string' },
      timeout: { type: 'string' },
      count: { type: 'string' },
    },
    strict: true,
  });
  if (!values.url || !values.ca) throw new TypeError('--url and --ca are required');
  const url = new URL(values.url);
  const ca = readFileSync(values.ca);
  const ac = new AbortController();
  process.once('SIGTERM', () => ac.abort());
  process.once('SIGINT', () => ac.abort());
  const durationMs = intArg('duration', values.duration, 600_000, 0, 4 * 3_600_000);
  if (mode === 'probe') {
    await runProbe(url, ca, intArg('interval', values.interval, 10, 1, 60_000), durationMs, intArg('timeout', values.timeout, 500, 1, 60_000), ac.signal);
    return 0;
  }
  if (mode === 'watch') {
    const o: LongconnOptions = {
      url,
      ca,
      node: undefined,
      attempts: 1,
      intervalMs: intArg('interval', values.interval, 3000, 10, 60_000),
      durationMs,
      timeoutMs: intArg('timeout', values.timeout, 2000, 1, 60_000),
      reconnect: true,
      maxConnections: 1,
    };
    await runWatches(o, intArg('count', values.count, 300, 1, 5000), ac.signal);
    return 0;
  }
  throw new TypeError(`mode must be probe or watch, got ${JSON.stringify(mode)}`);
}

runIfMain(import.meta.url, 'soak clients', main);
