/**
 * The lab's client that measures outages of an HTTPS endpoint (normally the VIP).
 *
 *   node dist/lab/clients/prober.js --url https://10.78.S.100:6443/version --ca CA
 *        [--interval 10] [--duration 10000] [--timeout 250] [--until-file F]
 *   node dist/lab/clients/prober.js --reach ADDRESS [--port 9] [--timeout 1000]
 *
 * Probe mode sends one request every `interval` ms on a fixed schedule (request i is due at
 * i * interval; requests may overlap), each on a NEW TLS connection (agent: false, no
 * keep-alive, no session reuse) so every request exercises the current path: the client's
 * neighbour entry for the VIP, the VIP holder, the holder's TLS server. The server certificate
 * is verified against --ca. The loop is bounded twice: by time (duration) and by count
 * (floor(duration / interval) + 1). SIGTERM / SIGINT or the appearance of --until-file stop it
 * early; requests in flight still finish (each is bounded by --timeout) before the summary.
 *
 * stdout, one JSON object per line:
 *   {"t":12.3,"ok":true,"node":"n1","status":200,"ms":4.1}        t = request start, ms since start
 *   {"t":22.3,"ok":false,"error":"timeout","ms":250}                ms = latency / time to failure
 *   {"summary":true,"requests":N,"ok":N,"failed":N,"outages":[...],"maxOutageMs":d,"nodes":{...},"startedAt":E}
 *                                                                   E = wall clock of t = 0, ms since the epoch
 *
 * Reach mode answers "is ADDRESS reachable from here?" without ICMP (iputils ping is not part of
 * the base system): a TCP SYN to a closed port comes back as a RST (ECONNREFUSED), which proves
 * the round trip through ARP/ND, the bridge and the peer's stack. Prints one JSON line; exit 0
 * when reachable, 1 when not.
 */
import { existsSync, readFileSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { runIfMain } from '../entry.js';

/** One request's outcome. `t` is the request's start in ms since the prober started. */
export type ProbeResult =
  | {
      t: number;
      ok: true;
      /** node name from the /version body (`node`) or the `x-ballast-lab-node` header */
      node?: string;
      status: number;
      /** latency in ms: request start to the end of the response body */
      ms: number;
    }
  | {
      t: number;
      ok: false;
      /** errno name (ECONNREFUSED, ECONNRESET, …), TLS error code, `timeout`, or `HTTP <status>` */
      error: string;
      node?: string;
      status?: number;
      /** ms from request start to the failure */
      ms: number;
    };

/**
 * A run of consecutive failed requests (ordered by start time).
 * `from` is the start of the last success before the run (or of the run's first failure when
 * no success came before); `to` is the start of the first success after it. When the run lasts
 * to the end of the probe, `ongoing` is true and `to` is the start of its last failure.
 * All times in ms since the prober started; `ms = to - from`; `failed` counts the run.
 */
export interface Outage {
  from: number;
  to: number;
  ms: number;
  failed: number;
  ongoing?: true;
}

/** The final line of a probe run. `nodes` counts successful requests per serving node. */
export interface Summary {
  summary: true;
  requests: number;
  ok: number;
  failed: number;
  outages: Outage[];
  /** the longest outage's `ms`, 0 when there was none */
  maxOutageMs: number;
  nodes: Record<string, number>;
  /**
   * Wall-clock time of t = 0, ms since the epoch (performance.timeOrigin + the loop's start,
   * 0.1 ms steps): another process's `Date.now()` minus this is that instant in this run's `t`.
   * Set by the prober's main, not by {@link summarize}.
   */
  startedAt?: number;
}

const round = (ms: number): number => Math.round(ms * 10) / 10;

/**
 * Pure: folds per-request results (any order) into a Summary. Results are ordered by start
 * time `t` (stable for equal `t`) before outages are found; see `Outage` for the definitions.
 */
export function summarize(results: readonly ProbeResult[]): Summary {
  const sorted = results
    .map((r, i) => ({ r, i }))
    .sort((a, b) => a.r.t - b.r.t || a.i - b.i)
    .map(({ r }) => r);
  const outages: Outage[] = [];
  const nodes: Record<string, number> = {};
  let ok = 0;
  let lastOkT: number | undefined;
  let run: { from: number; lastT: number; failed: number } | undefined;
  for (const r of sorted) {
    if (r.ok) {
      ok++;
      if (r.node !== undefined) nodes[r.node] = (nodes[r.node] ?? 0) + 1;
      if (run) {
        outages.push({ from: run.from, to: r.t, ms: round(r.t - run.from), failed: run.failed });
        run = undefined;
      }
      lastOkT = r.t;
    } else {
      run ??= { from: lastOkT ?? r.t, lastT: r.t, failed: 0 };
      run.failed++;
      run.lastT = r.t;
    }
  }
  if (run) {
    outages.push({ from: run.from, to: run.lastT, ms: round(run.lastT - run.from), failed: run.failed, ongoing: true });
  }
  return {
    summary: true,
    requests: sorted.length,
    ok,
    failed: sorted.length - ok,
    outages,
    maxOutageMs: outages.reduce((m, o) => Math.max(m, o.ms), 0),
    nodes,
  };
}

/** Largest body the prober reads (a /version body is ~150 bytes). */
const BODY_LIMIT = 64 * 1024;

function errorName(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as NodeJS.ErrnoException).code;
    return typeof code === 'string' && code !== '' ? code : err.message;
  }
  return String(err);
}

/**
 * One GET on a fresh TLS connection, verified against `ca`; never rejects.
 * Resolves to a ProbeResult without `t` (the caller owns the clock origin).
 */
export function requestOnce(url: URL, ca: Buffer, timeoutMs: number): Promise<DistributiveOmit<ProbeResult, 't'>> {
  return new Promise((resolve) => {
    const start = performance.now();
    let settled = false;
    const finish = (r: DistributiveOmit<ProbeResult, 't'>): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(r);
    };
    const elapsed = (): number => round(performance.now() - start);
    const req = https.request(
      url,
      // agent: false gives this request its own one-shot agent: a new TCP+TLS connection and
      // no TLS session cache, so nothing from an earlier holder's connection is reused
      { method: 'GET', agent: false, ca, rejectUnauthorized: true, headers: { accept: 'application/json', connection: 'close' } },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size <= BODY_LIMIT) chunks.push(c);
        });
        res.on('error', (e) => finish({ ok: false, error: errorName(e), ms: elapsed() }));
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          let node: string | undefined;
          try {
            const body: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            if (body && typeof body === 'object' && typeof (body as { node?: unknown }).node === 'string') {
              node = (body as { node: string }).node;
            }
          } catch {
            // not JSON (/readyz, /livez): fall back to the header below
          }
          const header = res.headers['x-ballast-lab-node'];
          if (node === undefined && typeof header === 'string') node = header;
          const base = node === undefined ? {} : { node };
          if (status >= 200 && status < 300) finish({ ok: true, ...base, status, ms: elapsed() });
          else finish({ ok: false, error: `HTTP ${status}`, ...base, status, ms: elapsed() });
        });
      },
    );
    const timer = setTimeout(() => {
      finish({ ok: false, error: 'timeout', ms: elapsed() });
      req.destroy();
    }, timeoutMs);
    req.on('error', (e) => finish({ ok: false, error: errorName(e), ms: elapsed() }));
    req.end();
  });
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** Options of `probe` (all times in ms). */
export interface ProbeOptions {
  url: URL;
  ca: Buffer;
  intervalMs: number;
  durationMs: number;
  timeoutMs: number;
  /** stop scheduling once this file exists (checked before each request) */
  untilFile?: string;
  /** called once per finished request, in completion order */
  onResult?: (r: ProbeResult) => void;
  /** stops scheduling when aborted; requests in flight still finish */
  signal?: AbortSignal;
  /** the performance.now() reading that `t` counts from; default: when probe() is called */
  origin?: number;
}

/**
 * Runs the fixed-schedule probe loop and resolves with every result once the last request
 * in flight finished. Bounded by time (durationMs) and count (floor(durationMs/intervalMs)+1).
 */
export function probe(opts: ProbeOptions): Promise<ProbeResult[]> {
  const maxCount = Math.floor(opts.durationMs / opts.intervalMs) + 1;
  const results: ProbeResult[] = [];
  const inflight = new Set<Promise<void>>();
  const t0 = opts.origin ?? performance.now();
  let issued = 0;
  let timer: NodeJS.Timeout | undefined;
  return new Promise((resolve) => {
    let stopped = false;
    const stop = (): void => {
      if (stopped) return;
      stopped = true;
      if (timer) clearTimeout(timer);
      void Promise.all([...inflight]).then(() => resolve(results));
    };
    opts.signal?.addEventListener('abort', stop, { once: true });
    if (opts.signal?.aborted) return stop();
    const tick = (): void => {
      timer = undefined;
      const now = performance.now() - t0;
      // the time bound holds even if the event loop lagged behind the schedule
      if (stopped || issued >= maxCount || now > opts.durationMs + opts.intervalMs) return stop();
      if (opts.untilFile !== undefined && existsSync(opts.untilFile)) return stop();
      const t = round(now);
      issued++;
      const p = requestOnce(opts.url, opts.ca, opts.timeoutMs).then((r) => {
        const full = { t, ...r } as ProbeResult;
        results.push(full);
        opts.onResult?.(full);
        inflight.delete(p);
      });
      inflight.add(p);
      if (issued >= maxCount) return stop();
      timer = setTimeout(tick, Math.max(0, issued * opts.intervalMs - (performance.now() - t0)));
    };
    tick();
  });
}

/** Result of `reach`: `how` is `connect`, `ECONNREFUSED` (both mean reachable) or the failure. */
export interface ReachResult {
  reach: string;
  ok: boolean;
  how: string;
  ms: number;
}

/**
 * Is `address` reachable? A TCP connect to `port` (default 9, normally closed): a RST
 * (ECONNREFUSED) or an accept both prove the round trip. Bounded by timeoutMs; never rejects.
 */
export function reach(address: string, port = 9, timeoutMs = 1000): Promise<ReachResult> {
  return new Promise((resolve) => {
    const start = performance.now();
    const sock = net.connect({ host: address, port });
    const done = (ok: boolean, how: string): void => {
      clearTimeout(timer);
      sock.destroy();
      resolve({ reach: address, ok, how, ms: round(performance.now() - start) });
    };
    const timer = setTimeout(() => done(false, 'timeout'), timeoutMs);
    sock.once('connect', () => done(true, 'connect'));
    sock.once('error', (e) => {
      const name = errorName(e);
      done(name === 'ECONNREFUSED', name);
    });
  });
}

function positiveInt(name: string, v: string | undefined, dflt: number, min = 1): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new TypeError(`--${name} must be an integer >= ${min}, got ${JSON.stringify(v)}`);
  return n;
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string' },
      ca: { type: 'string' },
      interval: { type: 'string' },
      duration: { type: 'string' },
      timeout: { type: 'string' },
      'until-file': { type: 'string' },
      reach: { type: 'string' },
      port: { type: 'string' },
    },
    strict: true,
  });
  const out = (o: unknown): void => {
    process.stdout.write(`${JSON.stringify(o)}\n`);
  };

  if (values.reach !== undefined) {
    const r = await reach(values.reach, positiveInt('port', values.port, 9), positiveInt('timeout', values.timeout, 1000));
    out(r);
    return r.ok ? 0 : 1;
  }

  if (values.url === undefined || values.ca === undefined) throw new TypeError('--url and --ca are required');
  const url = new URL(values.url);
  if (url.protocol !== 'https:') throw new TypeError(`--url must be https, got ${values.url}`);
  const ac = new AbortController();
  const onSignal = (): void => ac.abort();
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  const origin = performance.now();
  const results = await probe({
    origin,
    url,
    ca: readFileSync(values.ca),
    intervalMs: positiveInt('interval', values.interval, 10),
    durationMs: positiveInt('duration', values.duration, 10_000, 0),
    timeoutMs: positiveInt('timeout', values.timeout, 250),
    ...(values['until-file'] === undefined ? {} : { untilFile: values['until-file'] }),
    onResult: out,
    signal: ac.signal,
  });
  out({ ...summarize(results), startedAt: round(performance.timeOrigin + origin) });
  return 0;
}

// run only when executed (`node dist/lab/clients/prober.js`), not when imported by tests or lab.ts
runIfMain(import.meta.url, 'prober', main, { failStatus: 2 });
