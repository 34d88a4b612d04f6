/**
 * The worker_threads entry point of the election engine. The main thread sends
 * {@link ToWorker} messages and receives {@link FromWorker} ones; see host.ts for the other side.
 */
import { constants as perfConstants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import { parentPort, workerData } from 'node:worker_threads';
import { setThreadRealtime } from '../native.js';
import { VrrpEngine, type EngineEvent, type EngineGcStats, type EngineOptions, type EngineReconfigure, type EngineStatus } from './engine.js';

/** Main thread → worker. */
export type ToWorker =
  /** the options of a prewarmed worker (started with workerData null): its first message */
  | { type: 'start'; opts: EngineOptions }
  | { type: 'status'; id: number }
  | { type: 'priority'; priority: number }
  | { type: 'preemptHold'; hold: boolean }
  | { type: 'reconfigure'; id: number; patch: EngineReconfigure }
  | { type: 'shutdown' };

/** Worker → main thread. */
export type FromWorker =
  | EngineEvent
  | { type: 'started'; status: EngineStatus }
  | { type: 'status'; id: number; status: EngineStatus }
  /** The answer to `reconfigure`: applied, or the reason it was refused (nothing changed then). */
  | { type: 'reconfigured'; id: number; error?: string }
  | { type: 'failed'; error: { message: string; code?: string; syscall?: string } }
  | { type: 'stopped' };

const port = parentPort;
if (!port) throw new Error('vrrp/worker.ts must run in a worker thread');
const post = (m: FromWorker): void => port.postMessage(m);
/**
 * Ends the worker a few loop turns after its sockets closed: the netlink package's poll handler
 * aborts the process if it fires while the worker's environment is being torn down.
 */
const finish = (): void => void setTimeout(() => port.close(), 20);

let engine: VrrpEngine | null = null;
/** Puts this thread (only) at SCHED_FIFO when vrrp.realtimePriority asks for it; a refusal is a warning. */
function applyRealtime(options: EngineOptions): void {
  if ((options.realtimePriority ?? 0) <= 0) return;
  // this thread only: the main thread (TLS, health checks, Kubernetes) stays at normal scheduling
  try {
    setThreadRealtime(options.realtimePriority!);
    post({ type: 'log', level: 'info', msg: 'the election thread runs SCHED_FIFO (vrrp.realtimePriority)', fields: { realtimePriority: options.realtimePriority } });
  } catch (err) {
    const e = err as Error & { code?: string };
    post({ type: 'log', level: 'warn', msg: 'cannot give the election thread SCHED_FIFO (vrrp.realtimePriority); it runs with normal scheduling', fields: { realtimePriority: options.realtimePriority, error: e.message, ...(e.code ? { code: e.code } : {}) } });
  }
}
// this thread's GC pauses, for /status timing.gc (a pause delays the adverts like a lost CPU)
const gc = { count: 0, maxMs: 0, totalMs: 0 };
/** the longest pause per kind (perf_hooks constants NODE_PERFORMANCE_GC_*) */
const GC_KINDS: Record<number, string> = {
  [perfConstants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [perfConstants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [perfConstants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [perfConstants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};
const gcMaxByKind: Record<string, number> = {};
const ms3 = (ms: number): number => Math.round(ms * 1000) / 1000;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    gc.count++;
    gc.totalMs += e.duration;
    if (e.duration > gc.maxMs) gc.maxMs = e.duration;
    const kind = GC_KINDS[((e as PerformanceEntry & { detail?: { kind?: number } }).detail)?.kind ?? -1] ?? 'other';
    if (e.duration > (gcMaxByKind[kind] ?? -1)) gcMaxByKind[kind] = e.duration;
  }
}).observe({ entryTypes: ['gc'] });
const gcStats = (): EngineGcStats => ({
  count: gc.count,
  maxMs: ms3(gc.maxMs),
  totalMs: ms3(gc.totalMs),
  maxMsByKind: Object.fromEntries(Object.entries(gcMaxByKind).map(([k, v]) => [k, ms3(v)])),
});
try {
  // a worker started ahead of its election (host.ts prewarmWorker) gets its options in its first message
  const opts = (workerData as EngineOptions | null) ?? (await new Promise<EngineOptions>((resolve) => port.once('message', (m: ToWorker) => m.type === 'start' && resolve(m.opts))));
  applyRealtime(opts);
  engine = await VrrpEngine.start(opts, post, { gcStats });
  post({ type: 'started', status: engine.status() });
} catch (err) {
  const e = err as Error & { code?: string; syscall?: string };
  post({ type: 'failed', error: { message: e.message, ...(e.code ? { code: e.code } : {}), ...(e.syscall ? { syscall: e.syscall } : {}) } });
  finish();
}

port.on('message', (m: ToWorker) => {
  if (!engine) return;
  if (m.type === 'status') post({ type: 'status', id: m.id, status: engine.status() });
  else if (m.type === 'priority') engine.setPriority(m.priority);
  else if (m.type === 'preemptHold') engine.setPreemptHold(m.hold);
  else if (m.type === 'reconfigure') {
    engine.reconfigure(m.patch).then(
      () => post({ type: 'reconfigured', id: m.id }),
      (err: unknown) => post({ type: 'reconfigured', id: m.id, error: (err as Error).message }),
    );
  }
  else if (m.type === 'shutdown') {
    void engine.stop().then(() => {
      post({ type: 'stopped' });
      finish();
    });
  }
});
