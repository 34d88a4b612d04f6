/**
 * No child process outlives the agent: passive detection reads conntrack events
 * over ctnetlink inside the agent, so an agent with the nftables data plane has no child but
 * connection sync's conntrackd (started with setpriv --pdeathsig: it ends with the agent),
 * and a SIGKILL of the agent alone leaves no `conntrack` process behind in its namespace (the old
 * `conntrack -E` child kept running, orphaned, for minutes). Passive detection still works: a
 * backend that refuses the DNATed connections is judged dead from them.
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProber, type Lab } from '../../lab/lab.js';
import { startAgent, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { needs, startLab, waitFor } from '../support/index.js';

const run = promisify(execFile);
const PREFIX = 'bpkid';
const SUBNET = 218;

/** The processes whose parent is `pid` (proc(5): /proc/<pid>/stat field 4), as "pid comm". */
function childrenOf(pid: number): string[] {
  const out: string[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${d}/stat`, 'utf8');
    } catch {
      continue;
    }
    // comm may hold spaces and parentheses: the fields after it follow the last ')'
    const close = stat.lastIndexOf(')');
    const ppid = Number(stat.slice(close + 2).split(' ')[1]);
    if (ppid === pid) out.push(`${d} ${stat.slice(stat.indexOf('(') + 1, close)}`);
  }
  return out;
}

/** The processes in a network namespace (`ip netns pids`, ip-netns(8)), as "pid comm". */
async function processesIn(netns: string): Promise<string[]> {
  const { stdout } = await run('ip', ['netns', 'pids', netns]);
  return stdout
    .split('\n')
    .filter((l) => /^\d+$/.test(l.trim()))
    .flatMap((p) => {
      try {
        return [`${p.trim()} ${readFileSync(`/proc/${p.trim()}/comm`, 'utf8').trim()}`];
      } catch {
        return [];
      }
    });
}

describe.skipIf(needs('root'))('no child outlives the agent (root; skipped otherwise)', () => {
  let lab: Lab;
  let agent: LabAgent | undefined;

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: false, apiservers: true });
  });
  afterAll(async () => {
    await agent?.stop('SIGKILL').catch(() => undefined);
    await lab?.teardown();
  });

  it('passive detection runs without a child; after a SIGKILL of the agent no conntrack process remains', async () => {
    agent = await startAgent(lab, lab.nodes[0]!, { priority: 150, balance: true, healthInterval: '200ms' });
    await waitForHolder(lab, lab.vip4, 'n1');
    await waitFor(
      () => agent!.status(),
      (s) => s.backends.length === 2 && s.backends.every((b) => b.healthy),
      { timeoutMs: 5000, what: 'both backends up' },
    );
    const pid = agent.proc.pid;

    // steady state (nothing to apply): sampled ten times over 500 ms. Passive detection never has a
    // child (the defect was a `conntrack -E` child for the agent's life); the table's periodic
    // verify (nftwatch, every 10 s) runs a short `nft` per family, which may fall in the window
    // (a CI run saw two): a child may appear, but none may be conntrack, and none may last the window
    const samples: string[][] = [];
    for (let i = 0; i < 10; i++) {
      samples.push(childrenOf(pid));
      await new Promise((r) => setTimeout(r, 50));
    }
    const seen = [...new Set(samples.flat())];
    const persistent = samples.reduce((a, b) => a.filter((c) => b.includes(c)));
    // soft: the SIGKILL below is the defect's own check, and runs either way
    expect
      .soft(
        seen.filter((c) => !/^\d+ (nft|conntrackd)$/.test(c)),
        "children of the agent other than a verify's nft and connection sync's conntrackd",
      )
      .toStrictEqual([]);
    expect
      .soft(
        persistent.filter((c) => !/^\d+ conntrackd$/.test(c)),
        'children of the agent through the whole 500 ms, but conntrackd',
      )
      .toStrictEqual([]);

    // passive detection works: n2 refuses the connections DNATed to it and is judged dead from them
    const victim = `${lab.nodes[1]!.ipv4}:6443`;
    await lab.stopApiserver(lab.nodes[1]!);
    await runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 10, durationMs: 400, timeoutMs: 300 }).done;
    await waitFor(
      async () => agent!.logLines().some((l) => l.msg === 'backend judged dead from its connections' && l.backend === victim),
      (ok) => ok,
      { timeoutMs: 2000, what: `a passive verdict on ${victim}` },
    );
    expect(agent.logLines().filter((l) => String(l.msg).startsWith('conntrack event'))).toStrictEqual([]);

    // SIGKILL the agent alone (not its process group): nothing it started may stay
    const before = await processesIn(lab.nodes[0]!.netns);
    // (by pid: Node 24 names its main thread, so comm is "MainThread", not "node")
    expect(before.map((p) => Number(p.split(' ')[0]))).toContain(pid);
    process.kill(pid, 'SIGKILL');
    await agent.proc.exited;
    const t0 = Date.now();
    const left = await waitFor(
      () => processesIn(lab.nodes[0]!.netns),
      // conntrackd too: it is started with setpriv --pdeathsig, so the kernel ends it with the agent
      (procs) => !procs.some((p) => / (conntrack|conntrackd|stdbuf)$/.test(p)),
      { timeoutMs: 2000, intervalMs: 100, what: 'no conntrack or conntrackd process left in n1 after the SIGKILL' },
    ).catch((err: Error) => err);
    expect(left instanceof Error ? left.message : null).toBeNull();
    console.log(`after SIGKILL: processes in n1's namespace after ${Date.now() - t0} ms: ${JSON.stringify(left)}; before: ${JSON.stringify(before)}`);
    agent = undefined;
  });
});
