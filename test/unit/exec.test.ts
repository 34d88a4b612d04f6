/**
 * commandExecutor (src/dataplane/apply.ts): every helper command has a bounded run time, and the
 * kill reaches what the command started (a shell script's `sleep`), so nothing outlives the call.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { COMMAND_TIMEOUT_MS, commandExecutor, DataplaneError, NftablesApplier } from '../../src/dataplane/apply.js';

/** True while `pid` is a live (not zombie) process. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** A shell that prints the PID of a `sleep 20` it started, then waits for it. */
const HANG = ['sh', '-c', 'sleep 20 & echo $!; wait'];

describe('commandExecutor', () => {
  it('has a 5 s default limit', () => {
    expect(COMMAND_TIMEOUT_MS).toBe(5000);
  });

  it('kills a command that runs past its limit, and the children it started, and says so naming the command', async () => {
    const t0 = performance.now();
    const r = await commandExecutor(HANG, { timeoutMs: 300 })([], '');
    const ms = performance.now() - t0;
    expect(ms).toBeLessThan(3000);
    expect(r).toMatchObject({ code: -1, killed: 'timeout' });
    expect(r.stderr).toMatch(/sh -c sleep 20 & echo \$!; wait did not finish within 300 ms; killed/);
    const sleepPid = Number(r.stdout.trim());
    expect(sleepPid).toBeGreaterThan(0);
    await new Promise((res) => setTimeout(res, 100));
    expect(alive(sleepPid)).toBe(false);
  });

  it('kills the command at once when the call is aborted', async () => {
    const ac = new AbortController();
    const t0 = performance.now();
    const p = commandExecutor(HANG, { timeoutMs: 10_000 })([], '', { signal: ac.signal });
    setTimeout(() => ac.abort(), 200);
    const r = await p;
    expect(performance.now() - t0).toBeLessThan(3000);
    expect(r).toMatchObject({ code: -1, killed: 'aborted' });
    const already = await commandExecutor(['true'])([], '', { signal: ac.signal });
    expect(already).toMatchObject({ code: -1, killed: 'aborted' });
  });

  it('a normal command is untouched', async () => {
    const r = await commandExecutor(['sh', '-c', 'cat; echo err >&2; exit 3'])([], 'in');
    expect(r).toEqual({ code: 3, stdout: 'in', stderr: 'err\n' });
  });

  it('the applier turns a hung nft into a DataplaneError naming nft and the hang', async () => {
    const applier = new NftablesApplier({ exec: commandExecutor(['sh', '-c', 'sleep 20', 'nft'], { timeoutMs: 200 }) });
    const err = await applier.remove().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DataplaneError);
    expect((err as Error).message).toMatch(/removing the ip ballast table: nft -f - hung and was killed/);
  });
});
