/**
 * Monitoring load on an agent's admin endpoint: N scrapers, each GETting its path every
 * `interval` ms (the next request starts at the next tick after the answer: never two at once
 * per scraper), the way a fleet of Prometheus servers and dashboards poll /metrics and /status.
 * Keep-alive connections, as Prometheus holds them.
 *
 *   node dist/lab/clients/scraper.js --base http://127.0.0.1:9641 [--path /metrics --path /status]
 *        [--count 20] [--interval 100] [--duration 5000] [--timeout 3000]
 *
 * Scraper i GETs path[i % paths]. Bounded: --duration ms in all, at most
 * count × duration / interval requests (each with --timeout).
 * stdout, one JSON line at the end ({@link ScrapeReport}): requests, failures, and the answer
 * times (ms: from the request's start to the body's end) per path: p50, p99, max.
 * SIGTERM / SIGINT: the report of what was done so far, exit 0.
 */
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { runIfMain } from '../entry.js';

/** The answer times of one path, ms. */
export interface PathReport {
  requests: number;
  failures: number;
  p50: number;
  p99: number;
  max: number;
}

/** The one line printed at the end. */
export interface ScrapeReport {
  requests: number;
  failures: number;
  /** the first failure's message, if any */
  firstError: string | null;
  durationMs: number;
  paths: Record<string, PathReport>;
}

/** The q-quantile (0..1) of `xs` (nearest rank); 0 for none. */
export function quantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      base: { type: 'string' },
      path: { type: 'string', multiple: true },
      count: { type: 'string', default: '20' },
      interval: { type: 'string', default: '100' },
      duration: { type: 'string', default: '5000' },
      timeout: { type: 'string', default: '3000' },
    },
  });
  if (!values.base) throw new Error('--base is required');
  const base = new URL(values.base);
  const paths = values.path && values.path.length > 0 ? values.path : ['/metrics', '/status'];
  const [count, interval, duration, timeout] = [values.count, values.interval, values.duration, values.timeout].map(Number) as [number, number, number, number];
  for (const [k, v] of Object.entries({ count, interval, duration, timeout }))
    if (!Number.isFinite(v) || v <= 0) throw new Error(`--${k} must be a positive number`);

  const agent = new http.Agent({ keepAlive: true, maxSockets: count });
  const times = new Map<string, number[]>(paths.map((p) => [p, []]));
  const failures = new Map<string, number>(paths.map((p) => [p, 0]));
  let firstError: string | null = null;
  const t0 = performance.now();
  let stopped = false;

  const get = (path: string): Promise<void> =>
    new Promise((resolve) => {
      const start = performance.now();
      const fail = (msg: string): void => {
        failures.set(path, failures.get(path)! + 1);
        firstError ??= `${path}: ${msg}`;
        resolve();
      };
      const req = http.get({ host: base.hostname, port: base.port, path, agent, timeout }, (res) => {
        res.on('data', () => undefined);
        res.on('end', () => {
          if (res.statusCode !== 200) return fail(`HTTP ${res.statusCode}`);
          times.get(path)!.push(performance.now() - start);
          resolve();
        });
        res.on('error', (e) => fail(e.message));
      });
      req.on('timeout', () => req.destroy(new Error(`no answer in ${timeout} ms`)));
      req.on('error', (e) => fail(e.message));
    });

  const scraper = async (i: number): Promise<void> => {
    const path = paths[i % paths.length]!;
    // spread the scrapers over one interval, as independent clients are
    let next = t0 + (i * interval) / count;
    const end = t0 + duration;
    // bounded: at most duration / interval + 1 rounds
    for (let n = 0; n <= duration / interval && !stopped; n++) {
      const wait = next - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      if (stopped || performance.now() >= end) return;
      await get(path);
      next += interval;
      // late: the next tick after now (no burst to catch up)
      const now = performance.now();
      if (next < now) next += Math.ceil((now - next) / interval) * interval;
    }
  };

  const report = (): ScrapeReport => {
    const per: Record<string, PathReport> = {};
    for (const p of paths) {
      const xs = times.get(p)!;
      per[p] = {
        requests: xs.length + failures.get(p)!,
        failures: failures.get(p)!,
        p50: round(quantile(xs, 0.5)),
        p99: round(quantile(xs, 0.99)),
        max: round(xs.length ? Math.max(...xs) : 0),
      };
    }
    const all = Object.values(per);
    return {
      requests: all.reduce((a, r) => a + r.requests, 0),
      failures: all.reduce((a, r) => a + r.failures, 0),
      firstError,
      durationMs: Math.round(performance.now() - t0),
      paths: per,
    };
  };
  const done = new Promise<void>((resolve) => {
    for (const sig of ['SIGTERM', 'SIGINT'] as const) {
      process.once(sig, () => {
        stopped = true;
        resolve();
      });
    }
  });
  await Promise.race([Promise.all(Array.from({ length: count }, (_, i) => scraper(i))), done]);
  process.stdout.write(`${JSON.stringify(report())}\n`);
  agent.destroy();
  return 0;
}

const round = (x: number): number => Math.round(x * 10) / 10;

runIfMain(import.meta.url, 'scraper', main);
