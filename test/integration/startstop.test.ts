/**
 * A SIGTERM at any moment of start-up: `ballast run` on lab node n1 with backends (the
 * lab's stand-in apiservers), the VIP data plane (nftables) and the local endpoint (ebpf, in n1's
 * own cgroup-v2 child) gets SIGTERM — to its own PID only, not its process group, so a child it
 * forgot to end would stay — at 20 seeded-random moments from 0 to 2 s after it was spawned.
 * Every run must exit 0 and leave no VIP on eth0, no `table ip ballast`, no BPF pin, no program
 * on the cgroup, no lock file under /run/ballast, and no process of its process group.
 *
 * One exception, stated rather than hidden: a signal that reaches the process before Node has run
 * its first line of JavaScript (Node's own boot: 50 to 300 ms on a loaded 2-core machine) cannot
 * be caught by any program written in JavaScript; Node then dies of SIGTERM. A run may end by the
 * signal only when the signal was sent within `2 × bootMs` of the spawn (bootMs: the most of 3
 * boots of a one-line script started the same way, measured first) and the process printed
 * nothing — and, like every run, it must have left nothing. ballast's handlers exist from the
 * first line of its entry point (src/cli.ts), so on this code only a signal during Node's boot
 * ends a run that way; on the old code (handlers installed after start-up) the test fails.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { cliPath } from '../../lab/cluster.js';
import { needs, sleep } from '../support/index.js';
import { SockLb } from '../../src/native.js';
import { prng } from '../support/prng.js';
import { leftoversOn, startFullAgentLab, teardownFullAgentLab, processGroup } from '../support/leftovers.js';

const PREFIX = 'bss';
const SUBNET = 236;
/** Bin edges (ms after the spawn): one seeded moment in each [EDGES[i], EDGES[i + 1]). */
const EDGES = [0, 50, 100, 200, 300, 400, 600, 800, 1000, 1250, 1500, 1750, 2000] as const;
const RUNS = EDGES.length - 1;
const WINDOW_MS = EDGES[RUNS]!;
const SEED = 0x9_5157;
/** The CLI's own stop deadline is 10 s; a run that has not exited by then has failed. */
const EXIT_TIMEOUT_MS = 12_000;

describe.skipIf(needs('bpf'))('SIGTERM at any moment of start-up (root; skipped otherwise)', () => {
  let lab: Lab;
  let cgroup: string;
  let pinDir: string;
  let configPath: string;
  let bootMs: number;

  beforeAll(async () => {
    ({ lab, cgroup, pinDir, configPath } = await startFullAgentLab({ prefix: PREFIX, subnet: SUBNET, configName: 'n1-startstop.yaml' }));
    const script = join(lab.dir, 'boot.mjs');
    writeFileSync(script, "process.stdout.write('up\\n');\n");
    const boots: number[] = [];
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      const p = lab.spawn(lab.nodes[0]!.netns, [process.execPath, script], { hostMounts: true });
      await p.waitForOutput(/up/, { includeExisting: true, timeoutMs: 5000 });
      boots.push(performance.now() - t0);
      await p.exited;
    }
    bootMs = Math.max(...boots);
  });
  afterEach(async () => {
    if (existsSync(pinDir)) SockLb.detach(pinDir);
    await lab.exec(lab.nodes[0]!.netns, ['nft', 'delete', 'table', 'ip', 'ballast'], { allowFail: true });
    await lab.exec(lab.nodes[0]!.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
  });
  afterAll(() => teardownFullAgentLab({ lab, pinDir }));

  /** What one run left behind, as a list of findings (empty: nothing). */
  const leftovers = (pgid: number): Promise<string[]> => leftoversOn(lab, lab.nodes[0]!, { pinDir, cgroup, pgids: [pgid] });

  it(`${RUNS} runs, SIGTERM at seeded moments, one per bin of [0, ${WINDOW_MS}) ms: each exits 0 and leaves nothing`, async () => {
    const rand = prng(SEED);
    const delays = Array.from({ length: RUNS }, (_, i) => Math.floor(EDGES[i]! + rand() * (EDGES[i + 1]! - EDGES[i]!)));
    const results: { delayMs: number; code: number | null; beforeNode: boolean; left: string[]; tail: string }[] = [];
    for (const delayMs of delays) {
      const t0 = performance.now();
      const proc = lab.spawn(lab.nodes[0]!.netns, [process.execPath, cliPath(), 'run', '--config', configPath], {
        hostMounts: true,
        logFile: 'n1-startstop.log',
      });
      const wait = delayMs - (performance.now() - t0);
      if (wait > 0) await sleep(wait);
      const sentAt = performance.now() - t0;
      try {
        process.kill(proc.pid, 'SIGTERM');
      } catch {
        /* already exited: then its status says why */
      }
      const code = await Promise.race([proc.exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), EXIT_TIMEOUT_MS))]);
      if (code === 'timeout') await proc.stop('SIGKILL', 1000);
      const left = await leftovers(proc.pid);
      const bootExempt = code === null && proc.output() === '' && sentAt < 2 * bootMs;
      results.push({
        delayMs,
        code: code === 'timeout' ? -1 : bootExempt ? 0 : code,
        beforeNode: bootExempt,
        left,
        tail: proc.output().split('\n').slice(-4).join('\n'),
      });
      if (left.length > 0) {
        // clean up for the next run (afterEach runs only after the whole test)
        if (existsSync(pinDir)) SockLb.detach(pinDir);
        await lab.exec(lab.nodes[0]!.netns, ['nft', 'delete', 'table', 'ip', 'ballast'], { allowFail: true });
        await lab.exec(lab.nodes[0]!.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
        for (const p of processGroup(proc.pid)) process.kill(p, 'SIGKILL');
      }
    }
    console.log(
      `startstop: node boot ${bootMs.toFixed(0)} ms; runs (delay ms: exit): ${results.map((r) => `${r.delayMs}: ${r.beforeNode ? 'SIGTERM before node ran' : r.code}`).join(', ')}`,
    );
    const bad = results.filter((r) => r.code !== 0 || r.left.length > 0);
    expect(bad, `node boot ${bootMs.toFixed(0)} ms; failed runs:\n${JSON.stringify(bad, null, 1)}`).toStrictEqual([]);
  }, 120_000);
});
