#!/usr/bin/env node
/**
 * The `ballast` command's entry point (the commands are in commands.ts).
 *
 * It catches SIGTERM, SIGINT and SIGHUP before anything else is loaded: Node's default for them
 * is to die, and a `ballast run` killed half-way through start-up would leave VIPs, nftables
 * tables or BPF programs behind. Signals that arrive before a command takes them over are kept
 * and handed to it (`ballast run` stops cleanly, the other commands exit 128 + signal number).
 * SIGUSR1 is caught too, so that it never opens Node's inspector (`ballast run` answers it with
 * its status). This file imports nothing at run time, so the handlers exist as soon as Node runs
 * its first line.
 */
import type { StopSignals } from './commands.js';

function catchStopSignals(): StopSignals {
  const pending: NodeJS.Signals[] = [];
  let handler: ((sig: NodeJS.Signals) => void) | null = null;
  const on = (sig: NodeJS.Signals): void => {
    if (handler) handler(sig);
    else pending.push(sig);
  };
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(sig, on);
  return {
    handle(fn) {
      handler = fn;
      for (const sig of pending.splice(0)) fn(sig);
    },
  };
}

const stops = catchStopSignals();
// a listener of our own keeps Node from opening its inspector (127.0.0.1:9229, in a root process)
// on SIGUSR1 while the commands load; `ballast run` adds the one that logs the status. Only a
// SIGUSR1 before Node runs this line (its boot, tens of ms) still reaches the inspector.
process.on('SIGUSR1', () => undefined);
const { cli } = await import('./commands.js');
cli(process.argv, stops);
