/**
 * A test hook, preloaded into an agent with NODE_OPTIONS="--require <this file, compiled>" (a
 * --require preload runs in worker threads too, unlike --import): inside the election worker, once
 * the file named by BALLAST_TEST_STALL_FILE appears, the worker thread blocks for the number of
 * milliseconds the file holds (Atomics.wait: stuck, not busy, so it costs no CPU), the way a hung
 * worker would, then removes the file and prints `{"hook":"stalled","ms":<measured>}` on stderr.
 * The main thread keeps running. Never loaded by the product itself.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

const file = process.env.BALLAST_TEST_STALL_FILE;
if (!isMainThread && file) {
  const poll = setInterval(() => {
    if (!existsSync(file)) return;
    // bounded: at most 30 s, whatever the file says
    const ms = Math.min(30_000, Math.max(0, Number(readFileSync(file, 'utf8').trim()) || 0));
    const t0 = performance.now();
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
    rmSync(file, { force: true });
    process.stderr.write(`${JSON.stringify({ hook: 'stalled', ms: Math.round(performance.now() - t0) })}\n`);
  }, 20);
  // the worker still exits when the engine stops
  poll.unref();
}
