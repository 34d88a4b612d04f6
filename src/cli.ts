#!/usr/bin/env node
/**
 * The `ballast` command's entry point (the commands are in commands/).
 *
 * It catches SIGTERM, SIGINT, SIGHUP and SIGUSR2 before anything else is loaded: Node's default for them
 * is to die, and a `ballast run` killed half-way through start-up would leave VIPs, nftables
 * tables or BPF programs behind. Signals that arrive before a command takes them over are kept
 * and handed to it (`ballast run` stops cleanly, the other commands exit 128 + signal number).
 * SIGUSR1 is caught too, so that it never opens Node's inspector (`ballast run` answers it with
 * its status). Before all that it refuses a Node.js older than 24 and names the process `ballast`.
 * This file imports nothing at run time but node:v8 (for its V8 flags) and node:fs (to name the
 * process), so the handlers exist as soon as Node runs its first line; the commands come from
 * dist/bundle/ (scripts/bundle.ts), not from dist/src/commands/.
 */
import type { StopSignals } from './commands/index.js';
import { writeFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';

/**
 * The oldest Node.js major ballast runs on (package.json `engines`; the package ships 24). An older
 * one fails late and in the middle of things (Node 20 has no X509Certificate.validToDate, which
 * the certificate report reads after the VIP is up), so it is refused here, before anything:
 * this file is the first code Node runs and uses nothing Node 20 cannot parse or load.
 * Registry: BALLAST_E_NODE_VERSION (src/errors.ts; this file cannot import it before the check).
 */
// the first statement: a listener of our own keeps Node from opening its inspector (127.0.0.1:9229,
// in a root process) on SIGUSR1 while the commands load; `ballast run` adds the one that logs the
// status. Only a SIGUSR1 before Node runs this line (its boot, tens of ms) still reaches the inspector.
process.on('SIGUSR1', () => undefined);

const MIN_NODE_MAJOR = 24;
const nodeMajor = Number(process.versions.node.split('.')[0]);
if (!(nodeMajor >= MIN_NODE_MAJOR)) {
  process.stderr.write(
    `ballast: this is Node.js ${process.version} (${process.execPath}); ballast needs Node.js ${MIN_NODE_MAJOR} or later and changes nothing on an older one (BALLAST_E_NODE_VERSION). ` +
      'The Debian package and the image bring their own Node.js 24 (/usr/bin/ballast runs /usr/lib/ballast/bin/node); ' +
      'from a clone, run `bash scripts/setup.sh` (it installs Node.js 24 under .node/), then `bash scripts/node-env.sh node dist/src/cli.js ...`\n',
  );
  process.exit(2);
}

// `ballast` in ps, top, pgrep and systemctl status, instead of the name Node gives its main thread
// (MainThread): writing /proc/self/comm is prctl(PR_SET_NAME) on the main thread (proc(5)). The
// command line (/proc/self/cmdline) is left as it is: process.title would overwrite it.
try {
  writeFileSync('/proc/self/comm', 'ballast');
} catch {
  // no /proc (a container without it): the name is cosmetic
}

/**
 * V8 flags for the whole process, set before any of ballast's modules load: the agent is started
 * as `node dist/src/cli.js run` (the lab), through /usr/bin/ballast (scripts/package.sh) and by
 * the image's entrypoint, and NODE_OPTIONS or a re-exec would not reach all of them, so the
 * entry point sets them itself. Flags V8 reads only when it creates an isolate's heap
 * (--max-semi-space-size) do nothing here; these are read on every scavenge:
 *   --semi-space-growth-factor=1  the young generation stays at its initial size (1 MiB per
 *     semi-space) instead of doubling up to 16 MiB during start-up's allocation burst and keeping
 *     it: 10 MiB less RSS, the same idle CPU (docs/performance.md has the measurement).
 *   --no-maglev  no mid-tier JIT: hot functions go from the baseline code (Sparkplug) straight to
 *     TurboFan. Maglev's compiler is code of the node executable that, once run, stays mapped:
 *     2.0-2.4 MiB less RSS (file-backed and its compile zones), idle CPU within the noise
 *     (docs/performance.md has the measurement), the same failover times. Read by V8 whenever it
 *     tiers a function up, so setting it here works.
 *   --optimize-for-size  V8's heap heuristics favour memory (the old generation's limit grows by
 *     smaller steps, so it is collected before it grows): 1.8 MiB less RSS, idle CPU within the
 *     noise (docs/performance.md has the measurement). Its one start-time implication,
 *     --max-semi-space-size=1, is what --semi-space-growth-factor=1 already gives.
 *   --no-concurrent-sparkplug  baseline code is compiled on the main thread (in the same batches)
 *     instead of by a job on a V8 worker thread. Such a job whose code allocation needs a garbage
 *     collection waits for the main thread to run one; if the main thread is in process.exit()
 *     then, it is joining that very worker (NodePlatform::Shutdown), and the process hangs with
 *     its stop done until it is killed (nodejs/node#54918). With --no-maglev this was the last
 *     compiler that allocated on the heap off the main thread. Read by V8 at each batch.
 */
const V8_FLAGS = ['--semi-space-growth-factor=1', '--no-maglev', '--optimize-for-size', '--no-concurrent-sparkplug'] as const;
for (const flag of V8_FLAGS) setFlagsFromString(flag);

function catchStopSignals(): StopSignals {
  const pending: NodeJS.Signals[] = [];
  let handler: ((sig: NodeJS.Signals) => void) | null = null;
  const on = (sig: NodeJS.Signals): void => {
    if (handler) handler(sig);
    else pending.push(sig);
  };
  // SIGUSR2: a stop for a restart in place (docs/operations.md); Node's default would kill the process
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR2'] as const) process.on(sig, on);
  return {
    handle(fn) {
      handler = fn;
      for (const sig of pending.splice(0)) fn(sig);
    },
  };
}

const stops = catchStopSignals();
// the commands from the minified bundle beside dist/src (scripts/bundle.ts; built with tsc by
// `npm run build:ts`, `npm run build` and scripts/setup.sh, shipped by scripts/package.sh): V8
// keeps every module's source on the heap, and the bundle's is a fraction of dist/src's
const COMMANDS = new URL('../bundle/commands.js', import.meta.url).href;
const { cli } = (await import(COMMANDS)) as typeof import('./commands/index.js');
cli(process.argv, stops);
