/**
 * What an agent with the eBPF local endpoint (`dataplane.local: ebpf`) leaves on the host for a
 * lab cgroup's pin directory (src/dataplane/ebpf.ts pinDirFor): the pins, the host-wide lock
 * file /run/ballast/<pin dir name>.lock, and the pins' parent directory. For the tests and
 * benchmarks that run such agents.
 */
import { existsSync, rmdirSync, rmSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { SockLb } from '../src/native.js';

/**
 * Removes the pins of `pinDir` (the programs detach), its lock file (flock: free once the agents
 * exited) and the pins' parent directory when nothing else is pinned there. Harmless when gone.
 */
export function removeEndpointPins(pinDir: string): void {
  if (existsSync(pinDir)) SockLb.detach(pinDir);
  rmSync(`/run/ballast/${basename(pinDir)}.lock`, { force: true });
  try {
    rmdirSync(dirname(pinDir));
  } catch {
    // not empty (another pin set lives there), or already gone
  }
}

/**
 * Detaches the pins of `pinDir()` (when it names one) at exit and on the first SIGINT/SIGTERM,
 * for an agent the lab had to SIGKILL (a SIGTERMed agent removes its own with keepOnStop false).
 * The signal listeners run BEFORE the lab's handler and remove themselves: the lab's handler
 * tears down and re-raises the signal, which must then find no listener left, or the process
 * would survive it. `detach` does it now (between rounds, at the end); `release` removes the
 * listeners.
 */
export function detachPinsOnExit(pinDir: () => string | undefined): { detach(): void; release(): void } {
  const detach = (): void => {
    const dir = pinDir();
    if (dir !== undefined && existsSync(dir)) SockLb.detach(dir);
  };
  process.on('exit', detach);
  process.prependOnceListener('SIGINT', detach);
  process.prependOnceListener('SIGTERM', detach);
  return {
    detach,
    release: () => {
      process.off('exit', detach);
      process.off('SIGINT', detach);
      process.off('SIGTERM', detach);
    },
  };
}
