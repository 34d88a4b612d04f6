/**
 * A reload that adds a VIP already on a Backup's interface: a start removes
 * such a VIP (left by hand, by a crashed agent, by an old config), and a reload must too, or two
 * nodes answer ARP / NS for it until the agent stops (keepalived #2700).
 *
 * Two real agents (n1 priority 200, n2 priority 100), adverts every 100 ms, one VIP; the second
 * VIP is put on n2's interface by hand, then both agents are reloaded with both VIPs. Within 1 s
 * of the SIGHUP only n1 holds it, and the client hears one answer (arping; ndisc6 for IPv6,
 * which prints every Neighbor Advertisement it gets).
 */
import { writeFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { agentConfig, resetElectionLab, startAgents, waitForHolder, type AgentSettings, type LabAgent } from '../../lab/cluster.js';
import { STRAY_ON_RELOAD } from '../../src/vrrp/engine.js';
import { needs, startLab, waitFor } from '../support/index.js';

const PREFIX = 'b27a';
const SUBNET = 181;
/** The issue's bound: one responder within 1 s of the reload. */
const WITHIN_MS = 1000;

const skip = needs('root', 'arping', 'ndisc6');

describe.skipIf(skip)(`reload adding a VIP a Backup already has${skip ? `: SKIPPED, ${skip}` : ''}`, () => {
  let lab: Lab;
  let agents: LabAgent[] = [];
  const extra = { 4: `10.78.${SUBNET}.101`, 6: `fd78:${SUBNET}::101` } as const;
  const figures: string[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2 });
  });
  afterEach(async () => {
    await resetElectionLab(lab, agents);
    agents = [];
    for (const n of lab.nodes) {
      await lab.exec(n.netns, ['ip', 'addr', 'flush', 'dev', 'eth0', 'to', `${extra[4]}/32`], { allowFail: true });
      await lab.exec(n.netns, ['ip', '-6', 'addr', 'flush', 'dev', 'eth0', 'to', `${extra[6]}/128`], { allowFail: true });
    }
  });
  afterAll(async () => {
    if (figures.length > 0) console.log(`reload-stray figures:\n  ${figures.join('\n  ')}`);
    await lab?.teardown();
  });

  /** Distinct MACs that answer ARP (IPv4) or NS (IPv6) for `address` from the client namespace. */
  async function answers(family: 4 | 6, address: string): Promise<string[]> {
    if (family === 4) {
      const r = await lab.exec(lab.client.netns, ['arping', '-c', '2', '-w', '2', '-I', 'eth0', address], { allowFail: true, timeoutMs: 4000 });
      return [...new Set([...r.stdout.matchAll(/reply from \S+ \[([0-9A-Fa-f:]+)\]/g)].map((m) => m[1]!.toLowerCase()))].sort();
    }
    // -m: every advertisement, not the first; 2 solicitations, 1 s for the answers of each
    const r = await lab.exec(lab.client.netns, ['ndisc6', '-m', '-n', '-r', '2', '-w', '1000', address, 'eth0'], { allowFail: true, timeoutMs: 4000 });
    return [...new Set([...r.stdout.matchAll(/Target link-layer address:\s*([0-9A-Fa-f:]+)/g)].map((m) => m[1]!.toLowerCase()))].sort();
  }

  const results = (a: LabAgent): Record<string, unknown>[] =>
    a.logLines().filter((l) => typeof l.msg === 'string' && /^configuration reload(ed| failed| refused)/.test(l.msg));

  it.each([4, 6] as const)("IPv%i: the Backup's copy is removed within 1 s of the reload; one node answers", async (family) => {
    const vip = family === 4 ? lab.vip4 : lab.vip6;
    const added = extra[family];
    const s: AgentSettings[] = [
      { priority: 200, family },
      { priority: 100, family },
    ];
    const [a1, a2] = await startAgents(lab, s, agents);
    await waitForHolder(lab, vip, 'n1');
    // the stray copy: on n2 by hand (nodad: no duplicate address detection to wait for)
    const [n1, n2] = lab.nodes;
    await lab.exec(n2!.netns, ['ip', 'addr', 'add', `${added}/${family === 4 ? 32 : 128}`, 'dev', 'eth0', ...(family === 6 ? ['nodad'] : [])]);
    expect(await answers(family, added)).toStrictEqual([n2!.mac]);

    const list = [a1!, a2!];
    list.forEach((a, i) => writeFileSync(a.configPath, agentConfig(lab, a.node, { ...s[i]!, extra: { vips: [vip, added] } })));
    const t0 = Date.now();
    for (const a of list) a.proc.kill('SIGHUP');
    // the wait goes on past the bound (then fails below), so that the answers show what stayed
    const alone = await waitFor(
      () => lab.holders(added),
      (h) => h.length === 1 && h[0]!.name === 'n1',
      { timeoutMs: 3 * WITHIN_MS, intervalMs: 20, what: `n1 alone to hold ${added}` },
    ).then(
      () => true,
      () => false,
    );
    const tookMs = Date.now() - t0;
    for (const a of list)
      expect(await waitFor(() => results(a)[0], { timeoutMs: 5000, intervalMs: 20, what: `${a.node.name} to log its reload` })).toMatchObject({
        msg: 'configuration reloaded',
      });
    expect(await answers(family, added)).toStrictEqual([n1!.mac]);
    expect(alone).toBe(true);
    expect(tookMs).toBeLessThanOrEqual(WITHIN_MS);
    expect(
      a2!
        .logLines()
        .filter((l) => l.msg === STRAY_ON_RELOAD)
        .map((l) => l.addresses),
    ).toStrictEqual([[`${added}/${family === 4 ? 32 : 128}`]]);
    // no failover: the reload moved nothing
    expect([(await a1!.status()).state, (await a2!.status()).state]).toStrictEqual(['master', 'backup']);
    expect((await lab.holders(vip)).map((n) => n.name)).toStrictEqual(['n1']);
    figures.push(`IPv${family}: n1 the only holder of the added VIP ${tookMs} ms after SIGHUP (bound ${WITHIN_MS} ms)`);
  });
});
