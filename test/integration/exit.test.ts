/**
 * The agent's exit after a clean stop. `ballast run` ends with process.exit(), and Node's exit
 * joins the V8 platform's worker threads (NodePlatform::Shutdown) before it returns: a worker that
 * waits for the main thread never lets it. A concurrent Sparkplug job does exactly that when its
 * code allocation needs a garbage collection (CollectionBarrier::AwaitCollectionBackground waits
 * for the main thread to run it; nodejs/node#54918, open), so an agent that had logged "stopped"
 * hung in its exit until it was killed — about one SIGTERM in ten on the 2-core lab machine.
 * src/cli.ts turns concurrent Sparkplug off (`--no-concurrent-sparkplug`, with --no-maglev the
 * last V8 tier that allocated code off the main thread): baseline code is compiled on the main
 * thread, in the same batches, and no job is left that an exit could wait for.
 *
 * The hang itself is a race (before the change, 3 SIGTERMs in 55 hung; see the commit); what
 * this test asserts is its precondition, exactly, through V8's own trace (`--trace-baseline`, on
 * stdout with the log): over an agent's whole life, start, VRRP, a VIP held and released, no more
 * batches were handed to the concurrent compiler than `ballast --version` hands it — those of
 * Node's own boot, before the entry point's first line sets the flag (5 on Node 24.22) —, while
 * batches were compiled on the main thread (so the trace was on); and both agents exited 0 on
 * SIGTERM (a killed one is null).
 */
import { describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { cliPath, startAgent, waitForHolder } from '../../lab/cluster.js';
import { needs, useElectionLab } from '../support/index.js';

const PREFIX = 'b27d';
const SUBNET = 190;
/** V8's trace: a batch handed to the background compiler, and one compiled where it was asked for. */
const CONCURRENT = /^\[Concurrent Sparkplug\] compiling \d+ functions$/gm;
const BATCH = /^\[Baseline batch compilation\] Compiling current batch of \d+ functions$/gm;

describe.skipIf(needs('root'))('the agent exits after a clean stop (root; skipped otherwise)', () => {
  let lab!: Lab;
  const { agents } = useElectionLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2 }, (l) => (lab = l));

  it('SIGTERM of the holder and of the backup: each exits 0, and no V8 compile job ran off the main thread', async () => {
    const [n1, n2] = lab.nodes;
    const nodeFlags = ['--trace-baseline', '--trace-baseline-batch-compilation'];
    const version = await lab.exec(n1!.netns, [process.execPath, ...nodeFlags, cliPath(), '--version']);
    const boot = version.stdout.match(CONCURRENT)?.length ?? 0;
    const started = await Promise.all([startAgent(lab, n1!, { priority: 150, nodeFlags }), startAgent(lab, n2!, { priority: 100, nodeFlags })]);
    agents.push(...started);
    const [a1, a2] = started;
    await waitForHolder(lab, lab.vip4, 'n1');
    expect(await a1!.stop('SIGTERM')).toBe(0);
    await waitForHolder(lab, lab.vip4, 'n2', 2000);
    expect(await a2!.stop('SIGTERM')).toBe(0);
    for (const a of [a1!, a2!]) {
      const out = a.proc.output();
      // the last message logged is "stopped" (searched in the text, not as the last JSON line: V8's
      // trace writes to the same stdout through C stdio, and a trace line can run into a log line)
      const at = out.lastIndexOf('"msg":"stopped"');
      expect(at).toBeGreaterThan(-1);
      // no message follows it (all of them shown when one does: the log is written in order,
      // the last lines before the exit included; log/log.ts logWritten)
      expect(out.slice(at + 1).match(/"msg":"[^"]*"/g) ?? []).toEqual([]);
      expect(out.match(BATCH)?.length ?? 0).toBeGreaterThan(0);
      expect(out.match(CONCURRENT)?.length ?? 0).toBeLessThanOrEqual(boot);
    }
  });
});
