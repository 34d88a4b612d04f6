/**
 * Stops that must unwind everything whatever the helpers and earlier runs did: `ballast run` on
 * lab node n1 with backends (the lab's stand-in apiservers), the VIP data plane (nftables) and
 * the eBPF local endpoint in n1's own cgroup-v2 child, `dataplane.keepOnStop: false`.
 *
 * 1. A fake `nft` on PATH that hangs (`sleep 20`): every helper command has a bounded run time
 *    (`dataplane.commandTimeout`, 2 s here, default 5 s: src/dataplane/apply.ts commandExecutor,
 *    the kill reaching the command's whole process group), so a SIGTERM during the stuck first
 *    apply unwinds every phase and exits 0 within the CLI's 10 s stop deadline — and within the
 *    one hung removal's time limit (+ 1.5 s) — eBPF detached, lock file gone, no `nft` (nor its
 *    `sleep`) left; and without a signal the stuck apply fails the start like any failed apply
 *    (exit 1, BALLAST_E_DATAPLANE naming nft and the hang) once the apply's and the removal's
 *    time limits have run out (+ 3 s for Node's start).
 * 2. A run SIGKILLed after it programmed everything leaves `table ip ballast`, the BPF pins and
 *    the lock file; the next run with the same config, stopped by SIGTERM early in its start-up
 *    (before its data-plane phases ran), removes them: preflight registers their removal as soon
 *    as it holds the locks.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab, LabProcess } from '../../lab/lab.js';
import { cliPath } from '../../lab/cluster.js';
import { needs, sleep, waitFor } from '../support/index.js';
import { SockLb } from '../../src/native.js';
import { leftoversOn, pinLockPath, startFullAgentLab, teardownFullAgentLab } from '../support/leftovers.js';

const PREFIX = 'bstk';
const SUBNET = 239;
/** The CLI's own stop deadline is 10 s (src/commands/run.ts): a later exit is a failure. */
const STOP_DEADLINE_MS = 10_000;
const SIGTERM_AT_MS = 1500;
/** dataplane.commandTimeout of this file's agents, ms: above SIGTERM_AT_MS, so the signal comes while the first apply hangs */
const COMMAND_TIMEOUT_MS = 2000;
/** The moments (ms after the spawn) of the early SIGTERMs after a killed run. */
const EARLY_MS = [100, 170, 250, 400];
/** Log lines of a run that has programmed everything: the nft table, the eBPF programs, the VIP (master). */
const PROGRAMMED = [/"msg":"data plane applied"/, /"msg":"ebpf data plane (attached|taken over)/, /^(?=.*"msg":"state change")(?=.*"to":"master").*$/m];

describe.skipIf(needs('bpf'))('stops that unwind everything: a hung nft, a killed earlier run (root; skipped otherwise)', () => {
  let lab: Lab;
  let cgroup: string;
  let pinDir: string;
  let configPath: string;
  let stuckBin: string;
  let nftPids: string;
  const procs: LabProcess[] = [];

  beforeAll(async () => {
    ({ lab, cgroup, pinDir, configPath } = await startFullAgentLab({
      prefix: PREFIX,
      subnet: SUBNET,
      configName: 'n1-stuck.yaml',
      dataplane: { commandTimeout: `${COMMAND_TIMEOUT_MS / 1000}s` },
    }));
    // PATH for the agent: nsenter (how the lab enters n1 keeping the host's mounts) and a hung nft
    // that writes its PID (its process group's id, when the agent gives it a group of its own)
    stuckBin = join(lab.dir, 'bin-stuck');
    nftPids = join(lab.dir, 'stuck-nft.pids');
    mkdirSync(stuckBin, { recursive: true });
    symlinkSync('/usr/bin/nsenter', join(stuckBin, 'nsenter'));
    writeFileSync(join(stuckBin, 'nft'), `#!/bin/sh\necho $$ >> ${nftPids}\n/usr/bin/sleep 20\n`);
    chmodSync(join(stuckBin, 'nft'), 0o755);
  });
  afterEach(async () => {
    await Promise.all(procs.splice(0).map((p) => p.stop('SIGKILL', 2000)));
    await cleanUp();
  });
  afterAll(async () => {
    try {
      if (pinDir) await cleanUp();
    } finally {
      await teardownFullAgentLab({ lab, pinDir });
    }
  });

  const lockPath = (): string => pinLockPath(pinDir);

  async function cleanUp(): Promise<void> {
    if (existsSync(pinDir)) SockLb.detach(pinDir);
    rmSync(lockPath(), { force: true });
    await lab.exec(lab.nodes[0]!.netns, ['nft', 'delete', 'table', 'ip', 'ballast'], { allowFail: true });
    await lab.exec(lab.nodes[0]!.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
  }

  /** What is left of ballast in n1 and on the host, as findings (empty: nothing). */
  const leftovers = (pgids: number[]): Promise<string[]> => leftoversOn(lab, lab.nodes[0]!, { pinDir, cgroup, pgids });

  function spawnAgent(name: string, env?: Record<string, string>): LabProcess {
    const p = lab.spawn(lab.nodes[0]!.netns, [process.execPath, cliPath(), 'run', '--config', configPath], {
      hostMounts: true,
      logFile: `n1-${name}.log`,
      ...(env ? { env } : {}),
    });
    procs.push(p);
    return p;
  }

  async function exitOf(p: LabProcess, ms: number): Promise<number | null | 'hung'> {
    const code = await Promise.race([p.exited, sleep(ms).then(() => 'hung' as const)]);
    if (code === 'hung') await p.stop('SIGKILL', 2000);
    return code;
  }

  const fakeNftPids = (): number[] => (existsSync(nftPids) ? readFileSync(nftPids, 'utf8').split('\n').filter(Boolean).map(Number) : []);

  it(`a hung nft and SIGTERM at ${SIGTERM_AT_MS} ms: exit 0 within the stop deadline, every phase undone, no nft left`, async () => {
    rmSync(nftPids, { force: true });
    const proc = spawnAgent('stuck-sigterm', { PATH: stuckBin });
    await sleep(SIGTERM_AT_MS);
    const sent = performance.now();
    process.kill(proc.pid, 'SIGTERM');
    const code = await exitOf(proc, STOP_DEADLINE_MS + 3000);
    const stopMs = performance.now() - sent;
    await sleep(200); // a killed group's last process reaped
    const pids = fakeNftPids();
    const left = await leftovers([proc.pid, ...pids]);
    const out = proc.output();
    console.log(
      `hung nft + SIGTERM: exit ${code} ${stopMs.toFixed(0)} ms after the signal; fake nft runs ${pids.length}; left: ${JSON.stringify(left)}; log:\n${out
        .split('\n')
        .filter((l) => /stop|nft|cleanup|ebpf|error/i.test(l))
        .join('\n')}`,
    );
    expect(pids.length).toBeGreaterThan(0); // the start did reach the nft apply
    expect(out).not.toMatch(/clean stop did not finish in time/);
    expect(code).toBe(0);
    expect(stopMs).toBeLessThan(STOP_DEADLINE_MS);
    // the nft under way is killed at once; the removal's hung nft after its time limit
    expect(stopMs).toBeLessThan(COMMAND_TIMEOUT_MS + 1500);
    expect(out).toMatch(/ebpf data plane detached/);
    // the removal of the table ran nft too, which hung: the log says so, naming the command
    expect(out).toMatch(/"err":"removing the ip ballast table: nft -f - hung and was killed[^"]*","msg":"cannot remove the nftables table"/);
    expect(left).toEqual([]);
  }, 30_000);

  it('a hung nft and no signal: the start fails as an apply error (exit 1, BALLAST_E_DATAPLANE naming nft), nothing left', async () => {
    rmSync(nftPids, { force: true });
    const t0 = performance.now();
    const proc = spawnAgent('stuck-nosignal', { PATH: stuckBin });
    const code = await exitOf(proc, 25_000);
    const ms = performance.now() - t0;
    await sleep(200);
    const pids = fakeNftPids();
    const left = await leftovers([proc.pid, ...pids]);
    const out = proc.output();
    console.log(
      `hung nft, no signal: exit ${code} after ${ms.toFixed(0)} ms; fake nft runs ${pids.length}; left: ${JSON.stringify(left)}; stderr: ${out
        .split('\n')
        .filter((l) => l.includes('BALLAST_E_'))
        .join(' | ')}`,
    );
    expect(code).toBe(1);
    expect(out).toMatch(/ballast: cannot program nftables: .*nft .* hung and was killed.*\(BALLAST_E_DATAPLANE\)/);
    expect(out).toContain(`did not finish within ${COMMAND_TIMEOUT_MS} ms`);
    // the apply's hung nft, then the removal's, each killed after its time limit
    expect(ms).toBeGreaterThanOrEqual(2 * COMMAND_TIMEOUT_MS);
    expect(ms).toBeLessThan(2 * COMMAND_TIMEOUT_MS + 3000);
    expect(left).toEqual([]);
  }, 40_000);

  it(`a SIGKILLed run's table, pins and lock file are gone after the next run is stopped early (SIGTERM at ${EARLY_MS.join(', ')} ms)`, async () => {
    const results: { atMs: number; code: number | null | 'hung'; dataplaneRan: boolean; left: string[]; tail: string }[] = [];
    for (const atMs of EARLY_MS) {
      const killed = spawnAgent('killed');
      // killed once it has programmed everything (what a fixed 3 s wait stood for): the VIP table
      // applied, the eBPF programs attached (pins and lock file), master (its VIP added)
      await waitFor(
        () => killed.output(),
        (out) => PROGRAMMED.every((re) => re.test(out)),
        { timeoutMs: 10_000, intervalMs: 20, what: 'the run to be killed to program the table, attach eBPF and become master' },
      ).catch(() => undefined);
      process.kill(killed.pid, 'SIGKILL');
      await killed.exited;
      // what the killed run left: the test is about removing it
      const before = await leftovers([]);
      expect(before, `the killed run's output:\n${killed.output()}`).toEqual(
        expect.arrayContaining(['table ip ballast', `lock file ${lockPath()}`, expect.stringMatching(/^BPF pins /)]),
      );
      const t0 = performance.now();
      const proc = spawnAgent('early-stop');
      // Node's own boot (before its first line of JavaScript, where the CLI catches signals) may
      // take longer on a loaded machine: wait for the process to have its own argv, then the moment
      const wait = atMs - (performance.now() - t0);
      if (wait > 0) await sleep(wait);
      process.kill(proc.pid, 'SIGTERM');
      const code = await exitOf(proc, STOP_DEADLINE_MS + 3000);
      const left = await leftovers([proc.pid]);
      const out = proc.output();
      results.push({
        atMs,
        code,
        dataplaneRan: /data plane applied|ebpf data plane (attached|taken over)/.test(out),
        left,
        tail: out.split('\n').slice(-6).join('\n'),
      });
      if (left.length > 0) await cleanUp();
    }
    console.log(
      `killed run, then an early SIGTERM: ${results.map((r) => `${r.atMs} ms: exit ${r.code}${r.dataplaneRan ? ' (a data plane had started)' : ' (before the data planes)'}, left ${r.left.length}`).join('; ')}`,
    );
    // a SIGTERM during Node's own boot kills the process before any JavaScript runs (see
    // startstop.test.ts): such a run (killed by the signal, printed nothing) cannot clean up
    const ran = results.filter((r) => !(r.code === null && r.tail.trim() === ''));
    expect(ran.length, JSON.stringify(results, null, 1)).toBeGreaterThan(0);
    expect(
      ran.some((r) => !r.dataplaneRan),
      JSON.stringify(results, null, 1),
    ).toBe(true);
    const bad = ran.filter((r) => r.code !== 0 || r.left.length > 0);
    expect(bad, JSON.stringify(bad, null, 1)).toEqual([]);
  }, 120_000);
});
