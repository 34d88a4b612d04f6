/**
 * EndpointSlice churn of a backend that is not ready: an address with no
 * apiserver behind it joins and leaves the `kubernetes` slice again and again. Each change is a
 * new backend set, and each set change re-syncs the VIP data plane; but a backend without a
 * verdict, or a dead one, is in no DNAT rule, so the ruleset stays as it was: no nft transaction
 * may run (`nft monitor` in the node's namespace sees none) and none may be counted
 * (/status `dataplane.applies`, ballast_dataplane_applies_total). The lab: two nodes, node 1's
 * stand-in apiserver on the shared EndpointSlice store, one agent on node 1 with discovery.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lab, LabProcess } from '../../lab/lab.js';
import { startAgent, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import type { DataplaneStatus } from '../../src/dataplane/controller.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'b27dx';
const SUBNET = 191;
const TOKEN = 'lab-churn-token-0123456789abcdef';
const INTERVAL_MS = 200;
/** joins and leaves of the stranger: 2 × ROUNDS backend set changes */
const ROUNDS = 5;

describe.skipIf(needs('root'))('EndpointSlice churn of a backend that is not ready (root; skipped otherwise)', () => {
  let lab: Lab;
  let agent: LabAgent | undefined;
  let monitor: LabProcess | undefined;

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: false });
    const n1 = lab.nodes[0]!;
    await lab.startApiservers({ store: true, token: TOKEN, nodes: [n1] });
    agent = await startAgent(lab, n1, {
      priority: 150,
      extra: {
        apiserver: {
          port: 6443,
          backends: [`${n1.ipv4}:6443`],
          health: { caFile: lab.ca.certFile, interval: `${INTERVAL_MS}ms`, timeout: `${INTERVAL_MS}ms`, rise: 2, fall: 2 },
        },
        discovery: { kubeconfig: await lab.writeKubeconfig(n1, { token: TOKEN }), lastKnownFile: join(lab.dir, 'n1-backends.json') },
      },
    });
    await waitForHolder(lab, lab.vip4, 'n1');
  }, 60_000);
  afterAll(async () => {
    await monitor?.stop('SIGTERM', 2000);
    await agent?.stop('SIGTERM');
    await lab?.teardown();
  });

  it(`a stranger joining and leaving the slice ${ROUNDS} times: ${2 * ROUNDS} set changes, no nft transaction run or counted`, async () => {
    const n1 = lab.nodes[0]!;
    const dp = async (): Promise<DataplaneStatus> => (await agent!.status()).dataplane as DataplaneStatus;
    const served = `${n1.ipv4}:6443`;
    await waitFor(dp, (d) => d.backends.join() === served, { timeoutMs: 10_000, what: "n1's apiserver in the ruleset" });
    const before = await dp();
    // every change of ballast's table in n1's namespace, from now on
    monitor = lab.spawn(n1.netns, ['nft', 'monitor', 'ruleset']);
    await sleep(200);
    const t0 = Date.now();
    const stranger = `10.78.${SUBNET}.50`;
    const changes = (): string[][] =>
      agent!
        .logLines()
        .filter((l) => l.msg === 'discovery: backend set changed')
        .map((l) => l.backends as string[]);
    for (let i = 0; i < ROUNDS; i++) {
      for (const op of ['add', 'remove'] as const) {
        const seen = changes().length;
        lab.sliceChange({ op, address: stranger });
        const set = await waitFor(
          () => Promise.resolve(changes().slice(seen)),
          (c) => c.length > 0,
          { timeoutMs: 5000, intervalMs: 20, what: `the set change (${op} ${stranger})` },
        );
        expect(set.at(-1)!.some((b) => b.startsWith(`${stranger}:`))).toBe(op === 'add');
        await sleep(INTERVAL_MS);
      }
    }
    await sleep(INTERVAL_MS);
    const after = await dp();
    expect(after.backends).toStrictEqual([served]);
    expect(
      monitor
        .output()
        .split('\n')
        .filter((l) => /ballast/.test(l)),
    ).toStrictEqual([]);
    expect(after.applies).toBe(before.applies);
    expect(after.lastApplyMs).toBe(before.lastApplyMs);
    expect(agent!.logLines().filter((l) => l.msg === 'data plane applied' && Date.parse(String(l.time)) >= t0)).toStrictEqual([]);
  });
});
