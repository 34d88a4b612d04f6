/**
 * The worker_threads entry point of the election engine. The main thread sends
 * {@link ToWorker} messages and receives {@link FromWorker} ones; see host.ts for the other side.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { VrrpEngine, type EngineEvent, type EngineOptions, type EngineReconfigure, type EngineStatus } from './engine.js';

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
try {
  // a worker started ahead of its election (host.ts prewarmWorker) gets its options in its first message
  const opts = (workerData as EngineOptions | null) ?? (await new Promise<EngineOptions>((resolve) => port.once('message', (m: ToWorker) => m.type === 'start' && resolve(m.opts))));
  engine = await VrrpEngine.start(opts, post);
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
