/**
 * Start-up defects, on the lab, through `ballast run` as an operator runs it:
 * - two agents with different VRIDs but one VIP on one interface: the second exits 2 naming the
 *   VIP (both running would delete each other's VIP every ~43 ms);
 * - configuration mistakes that only `run` can see (the host's addresses) exit 2, which the
 *   documented systemd unit does not restart (before: exit 1, restarted forever): a local endpoint
 *   or admin.listen on an address that is not this node's, a VIP that is the node's own address;
 * - a deleted interface is logged once with BALLAST_E_INTERFACE_GONE (before: twice).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { agentConfig, cliPath, startAgent, waitForHolder, type AgentSettings, type LabAgent } from '../../lab/cluster.js';
import { needs, startLab } from '../support/index.js';

const PREFIX = 'bdef';
const SUBNET = 237;

describe.skipIf(needs('root'))('start-up defects (root; skipped otherwise)', () => {
  let lab: Lab;
  let agents: LabAgent[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: false });
  });
  afterEach(async () => {
    await Promise.all(agents.map((a) => a.stop('SIGKILL').catch(() => undefined)));
    agents = [];
    // (not resetElectionLab: the last case deletes n2's link, which that would bring up)
    for (const n of lab.nodes) {
      await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
      await lab.exec(n.netns, ['nft', 'delete', 'table', 'ip', 'ballast'], { allowFail: true });
    }
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  /** `ballast run` on n1 with `s`, to completion (10 s at most: 124 then). */
  async function runOnce(name: string, s: AgentSettings): Promise<{ code: number; stderr: string }> {
    const f = join(lab.dir, `${name}.yaml`);
    writeFileSync(f, agentConfig(lab, lab.nodes[0]!, s));
    const r = await lab.exec(lab.nodes[0]!.netns, [process.execPath, cliPath(), 'run', '--config', f], { allowFail: true, timeoutMs: 10_000 });
    return { code: r.code, stderr: r.stderr };
  }

  it('a second agent with another VRID but the same VIP on the same interface exits 2, naming the VIP; the first keeps it', async () => {
    const a1 = await startAgent(lab, lab.nodes[0]!, { priority: 150, vrid: 51 });
    agents.push(a1);
    await waitForHolder(lab, lab.vip4, 'n1');
    const r = await runOnce('second-vrid', { priority: 150, vrid: 52, adminPort: 9650 });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('BALLAST_E_ALREADY_RUNNING');
    expect(r.stderr).toContain(`another ballast agent already manages the VIP ${lab.vip4} (vips) in this network namespace (lock @ballast:vip:${lab.vip4})`);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
    expect((await a1.status()).vipsHeld).toBe(true);
  });

  it('a second agent with the VIP data plane in the namespace (another VRID and VIP) exits 2, naming the table; the first keeps its rules', async () => {
    const a1 = await startAgent(lab, lab.nodes[0]!, { priority: 150, vrid: 51, balance: true });
    agents.push(a1);
    await waitForHolder(lab, lab.vip4, 'n1');
    const other = `10.78.${SUBNET}.101`;
    const r = await runOnce('second-table', { priority: 150, vrid: 53, adminPort: 9651, balance: true, extra: { vips: [other] } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('another ballast agent already programs the nftables table ip ballast (dataplane.vip: nftables)');
    expect(r.stderr).toContain('BALLAST_E_ALREADY_RUNNING');
    const table = await lab.exec(lab.nodes[0]!.netns, ['nft', 'list', 'table', 'ip', 'ballast']);
    expect(table.stdout).toContain(lab.vip4);
    expect(table.stdout).not.toContain(other);
  });

  it('a local endpoint on an address this node does not have exits 2 (BALLAST_E_LOCAL_ENDPOINT_ADDRESS), naming localEndpoint.address', async () => {
    const foreign = `10.78.${SUBNET}.99:7443`;
    const r = await runOnce('le-foreign', {
      priority: 150,
      noElection: true,
      balance: true,
      extra: { localEndpoint: { address: foreign }, dataplane: { local: 'proxy' } },
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`localEndpoint.address: ${foreign} is not an address of this node`);
    expect(r.stderr).toContain('BALLAST_E_LOCAL_ENDPOINT_ADDRESS');
  });

  it('admin.listen on an address this node does not have exits 2 (BALLAST_E_ADMIN_ADDRESS), naming admin.listen; nothing was changed', async () => {
    const foreign = `10.78.${SUBNET}.99:9641`;
    const r = await runOnce('admin-foreign', { priority: 150, balance: true, extra: { admin: { listen: foreign } } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`admin.listen: ${foreign} is not an address of this node`);
    expect(r.stderr).toContain('BALLAST_E_ADMIN_ADDRESS');
    expect((await lab.exec(lab.nodes[0]!.netns, ['nft', 'list', 'table', 'ip', 'ballast'], { allowFail: true })).code).not.toBe(0);
  });

  it("a VIP that is this node's own address exits 2 (BALLAST_E_VIP_IS_NODE_ADDRESS), naming vips[0], and the address stays", async () => {
    const n1 = lab.nodes[0]!;
    const r = await runOnce('vip-own', { priority: 150, extra: { vips: [n1.ipv4] } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`vips[0]: ${n1.ipv4} is this node's own address (eth0 has ${n1.ipv4}/24), not a virtual IP`);
    expect(r.stderr).toContain('BALLAST_E_VIP_IS_NODE_ADDRESS');
    expect((await lab.addresses(n1)).some((a) => a.address === n1.ipv4 && a.prefixLen === 24)).toBe(true);
  });

  it('a deleted interface is logged once with BALLAST_E_INTERFACE_GONE, and the agent exits 1', async () => {
    const a1 = await startAgent(lab, lab.nodes[0]!, { priority: 150 });
    const a2 = await startAgent(lab, lab.nodes[1]!, { priority: 100 });
    agents.push(a1, a2);
    await waitForHolder(lab, lab.vip4, 'n1');
    // n2's eth0 is one end of a veth pair; deleting it is what a NIC vanishing looks like
    await lab.exec(lab.nodes[1]!.netns, ['ip', 'link', 'del', 'eth0']);
    expect(await a2.proc.exited).toBe(1);
    const gone = a2.logLines().filter((l) => l.code === 'BALLAST_E_INTERFACE_GONE');
    expect(gone.map((l) => l.msg)).toStrictEqual(['the interface was deleted; exiting so that the supervisor restarts the agent']);
    // and no other line says it again (the engine does not repeat it per link message)
    expect(a2.logLines().filter((l) => String(l.msg).startsWith('the interface was deleted')).length).toBe(1);
  });
});
