/**
 * A test hook, preloaded into an agent with NODE_OPTIONS="--import <this file, compiled>":
 * on SIGWINCH the main thread busy-waits for BALLAST_TEST_BLOCK_MS milliseconds (default 500),
 * the way a long synchronous task or a GC pause would block it, then prints
 * `{"hook":"blocked","ms":<measured>}` on stderr. The VRRP engine runs on that thread; its
 * socket's advert pacer must keep an Active's adverts on the wire meanwhile. Never loaded by the
 * product itself. Not SIGUSR2: the agent stops on it for a restart in place (docs/operations.md);
 * SIGWINCH is one the agent leaves alone, and its default action is to ignore it.
 */
import { performance } from 'node:perf_hooks';

const ms = Number(process.env.BALLAST_TEST_BLOCK_MS ?? '500');
process.on('SIGWINCH', () => {
  const t0 = performance.now();
  // bounded: ends after `ms`, whatever happens
  while (performance.now() - t0 < ms) {
    /* busy */
  }
  process.stderr.write(`${JSON.stringify({ hook: 'blocked', ms: Math.round(performance.now() - t0) })}\n`);
});
