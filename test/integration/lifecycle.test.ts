/**
 * A cluster's lifecycle, end to end: lab/lifecycle.ts on a 7-node lab (n1..n6
 * control plane, n7 a worker with the eBPF local endpoint in its own cgroup-v2 child). One config
 * file per node, written once before anything exists; unicast VRRP with `peers: discovered`;
 * backends seeded with n1..n3 and then discovered from the stand-ins' `kubernetes` EndpointSlices.
 *
 * Every step asserts its own figures: each failed request of the VIP client and of the worker's
 * local-endpoint client (one request every 10 ms each, a new TLS connection each) started inside
 * the bound of a cause of that step (step 1 and 2 before the apiserver: ECONNREFUSED/ECONNRESET
 * within 1 s; an apiserver appearing: rise × interval + interval + timeout; a leaving master:
 * Skew_Time of the taker; a leaving apiserver: fall × interval + interval; a restart of a master:
 * Skew_Time; a master's takeover adds the commit of the replicated connections the new master
 * logged, which it runs before it adds the VIP; a joining node, a backup's restart, the worker's
 * restart and a reload: no failure);
 * all margins MARGIN_MS. Every check of the step holds (the VIP up within Master_Down_Interval,
 * pools and sources, peers, exit statuses, leftovers on retired nodes, one holder, VIP moves).
 * The steps depend on each other: after a failed step the later ones are not run.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Lifecycle, formatStep, type StepFigures } from '../../lab/lifecycle.js';
import { needs } from '../support/index.js';

const PREFIX = 'blife';
const SUBNET = 245;

describe.skipIf(needs('bpf', 'nft'))('the lifecycle: one config from before kubeadm init to the last node replacement (root; skipped otherwise)', () => {
  let lc: Lifecycle;
  let broken: string | null = null;

  beforeAll(async () => {
    lc = await Lifecycle.create({ prefix: PREFIX, subnet: SUBNET, vrrp: 'unicast' });
  });
  afterAll(async () => {
    await lc?.teardown();
  });

  /** Runs one step unless an earlier one failed, and asserts everything it measured. */
  async function step(run: () => Promise<StepFigures>): Promise<StepFigures> {
    if (broken) throw new Error(`not run: ${broken}`);
    let f: StepFigures;
    try {
      f = await run();
    } catch (e) {
      broken = `an earlier step threw: ${(e as Error).message}`;
      throw e;
    }
    console.log(formatStep(f));
    if (!f.pass) broken = `step ${f.step} failed`;
    expect(
      f.checks.filter((c) => !c.ok),
      formatStep(f),
    ).toStrictEqual([]);
    expect(f.vip.unexplained, `VIP client failures outside every bound of step ${f.step}`).toStrictEqual([]);
    expect(f.local?.unexplained ?? [], `local-endpoint client failures outside every bound of step ${f.step}`).toStrictEqual([]);
    return f;
  }

  it('1. n1 alone, no CA, no apiserver: ballast runs, VIP up within Master_Down_Interval, VIP:6443 refused within 1 s', async () => {
    const f = await step(() => lc.step1());
    // every request of step 1 failed fast (nothing listens yet), none succeeded
    expect(f.vip.failed).toBe(f.vip.requests);
  }, 60_000);

  it('2. the CA and the apiserver appear on n1, the worker joins: both clients served within rise × interval + interval + timeout', async () => {
    const f = await step(() => lc.step2());
    expect(f.local).not.toBeNull();
  }, 60_000);

  it('3. n2 and n3 join: their apiservers enter every pool through discovery, nothing edited on n1, no request fails', async () => {
    const f = await step(() => lc.step3());
    expect([f.vip.failed, f.local!.failed, f.vipMoves]).toStrictEqual([0, 0, 0]);
  }, 60_000);

  it('4. n4, n5, n6 replace n1, n2, n3: each outage within Skew_Time (master) or fall × interval + interval (backend); peers follow', async () => {
    const f = await step(() => lc.step4());
    // n1 leaves as master; then the VIP moves once per leaving master (a check of the step)
    expect(f.vipMoves).toBeGreaterThanOrEqual(1);
  }, 120_000);

  it('5. ballast restarted on every remaining node: one Skew_Time window per restarted master, no extra VIP move, the local endpoint keeps serving', async () => {
    const f = await step(() => lc.step5());
    expect(f.local!.failed).toBe(0);
  }, 120_000);

  it('6. reload: a bad file changes nothing (exit 2), then a second VIP and a new interval without a failover', async () => {
    const f = await step(() => lc.step6());
    expect([f.vip.failed, f.vipMoves]).toStrictEqual([0, 0]);
  }, 60_000);
});
