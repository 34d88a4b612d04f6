/**
 * A VIP on the interface with another prefix than /32 (`10.78.217.100/24`, left by keepalived
 * or added by hand) is still the VIP: a backup that keeps it answers ARP for it, so two nodes
 * claim the address. The start-up cleanup and the address watch remove it whatever its prefix
 * (rtnetlink matches the prefix length on delete, so the one found must be named), and log only
 * what they removed. Real agents on the lab (prefix `bvpfx`: 10.78.217.0/24, fd78:217::/64), adverts
 * every 100 ms.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab, LabNode } from '../../lab/lab.js';
import { resetElectionLab, startAgents, waitForHolder, type AgentSettings, type LabAgent } from '../../lab/cluster.js';
import { needs, startLab, waitFor } from '../support/index.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';

const PREFIX = 'bvpfx';
const SUBNET = 217;
const INTERVAL_CS = 10;

describe.skipIf(needs('root'))('VIPs of any prefix length (root; skipped otherwise)', () => {
  let lab: Lab;
  let agents: LabAgent[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2 });
  });
  afterEach(async () => {
    await resetElectionLab(lab, agents);
    agents = [];
    for (const n of lab.nodes) {
      await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/24`, 'dev', 'eth0'], { allowFail: true });
      await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip6}/64`, 'dev', 'eth0'], { allowFail: true });
    }
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  const start = (settings: AgentSettings[]): Promise<LabAgent[]> => startAgents(lab, settings, agents);
  /** Every prefix length with which `node`'s eth0 holds `vip` (`ip -j addr`; default the IPv4 VIP). */
  const vipPrefixes = async (node: LabNode, vip = lab.vip4): Promise<number[]> =>
    (await lab.addresses(node)).filter((a) => a.address === vip).map((a) => a.prefixLen);
  /** Distinct MACs that answer ARP for the VIP from the client namespace (arping: 2 requests, 1 s apart). */
  async function arpAnswers(): Promise<string[]> {
    const r = await lab.exec(lab.client.netns, ['arping', '-c', '2', '-w', '2', '-I', 'eth0', lab.vip4], { allowFail: true, timeoutMs: 4000 });
    return [...new Set([...r.stdout.matchAll(/reply from \S+ \[([0-9A-Fa-f:]+)\]/g)].map((m) => m[1]!.toLowerCase()))];
  }
  const removedLines = (a: LabAgent, msg: string) => a.logLines().filter((l) => l.msg === msg);

  it('a VIP/24 left on a backup before start is removed at start-up; only the holder answers ARP', async () => {
    const [n1, n2] = lab.nodes as [LabNode, LabNode];
    await lab.exec(n2.netns, ['ip', 'addr', 'add', `${lab.vip4}/24`, 'dev', 'eth0']);
    expect(await vipPrefixes(n2)).toStrictEqual([24]);
    const [, a2] = await start([{ priority: 150 }, { priority: 100 }]);
    await waitForHolder(lab, lab.vip4, 'n1', masterDownIntervalMs(150, INTERVAL_CS) + 5000);
    expect(await vipPrefixes(n2)).toStrictEqual([]);
    expect(await vipPrefixes(n1)).toStrictEqual([32]);
    expect(await arpAnswers()).toStrictEqual([n1.mac]);
    // logged once, naming the address with the prefix it had
    expect(removedLines(a2!, 'removed a VIP left on the interface by an earlier run').map((l) => l.addresses)).toStrictEqual([[`${lab.vip4}/24`]]);
  });

  it('a VIP/24 added by hand on a running backup is removed within the settle time; only the holder answers ARP', async () => {
    const [n1, n2] = lab.nodes as [LabNode, LabNode];
    const [, a2] = await start([{ priority: 150 }, { priority: 100 }]);
    await waitForHolder(lab, lab.vip4, 'n1', masterDownIntervalMs(150, INTERVAL_CS) + 5000);
    // nothing to clean at start-up, so nothing is logged as removed
    expect(removedLines(a2!, 'removed a VIP left on the interface by an earlier run')).toStrictEqual([]);
    await lab.exec(n2.netns, ['ip', 'addr', 'add', `${lab.vip4}/24`, 'dev', 'eth0']);
    // 20 ms settle + one dump and one delete; 2 s covers scheduling on 2 shared cores
    await waitFor(
      () => vipPrefixes(n2),
      (p) => p.length === 0,
      { timeoutMs: 2000, what: 'n2 to remove the VIP/24' },
    );
    expect(await vipPrefixes(n1)).toStrictEqual([32]);
    expect(await arpAnswers()).toStrictEqual([n1.mac]);
    expect(removedLines(a2!, 'a VIP was added to the interface while this node is not master; removing it').map((l) => l.addresses)).toStrictEqual([
      [`${lab.vip4}/24`],
    ]);
    expect((await a2!.status()).state).toBe('backup');
  });

  it('IPv6: a VIP/64 left on a backup is removed at start-up; the holder has it as /128', async () => {
    const [n1, n2] = lab.nodes as [LabNode, LabNode];
    await lab.exec(n2.netns, ['ip', 'addr', 'add', `${lab.vip6}/64`, 'dev', 'eth0', 'nodad']);
    expect(await vipPrefixes(n2, lab.vip6)).toStrictEqual([64]);
    const [, a2] = await start([
      { priority: 150, family: 6 },
      { priority: 100, family: 6 },
    ]);
    await waitForHolder(lab, lab.vip6, 'n1', masterDownIntervalMs(150, INTERVAL_CS) + 5000);
    expect(await vipPrefixes(n2, lab.vip6)).toStrictEqual([]);
    expect(await vipPrefixes(n1, lab.vip6)).toStrictEqual([128]);
    expect(removedLines(a2!, 'removed a VIP left on the interface by an earlier run').map((l) => l.addresses)).toStrictEqual([[`${lab.vip6}/64`]]);
  });
});
