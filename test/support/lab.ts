/**
 * The one way a test starts a lab: `lab = await startLab({ prefix, subnet, nodes, apiservers: true })`
 * in `beforeAll`, and `await lab?.teardown()` in `afterAll`. Lab.create already removes what an
 * interrupted run with the same prefix left (Lab.cleanupStale), so tests do not call that first.
 */
import { afterAll, afterEach, beforeAll } from 'vitest';
import { Lab, type LabOptions } from '../../lab/lab.js';
import { resetElectionLab, startAgents, type AgentSettings, type LabAgent } from '../../lab/cluster.js';

/** Lab.create's options, plus whether to start a stand-in apiserver on every node. */
export interface StartLabOptions extends LabOptions {
  /** start a TLS stand-in apiserver per node (true: port 6443) and wait until each is ready */
  apiservers?: boolean | { port: number };
}

/**
 * Builds the lab (needs root; see Lab.create) and, with `apiservers`, starts the stand-ins.
 * A lab whose stand-ins fail to start is torn down before the error is rethrown, so a failed
 * `beforeAll` leaves no namespace behind.
 * @throws what Lab.create or Lab.startApiservers throws.
 */
export async function startLab(opts: StartLabOptions): Promise<Lab> {
  const { apiservers, ...labOpts } = opts;
  const lab = await Lab.create(labOpts);
  if (apiservers) {
    try {
      await lab.startApiservers(apiservers === true ? {} : apiservers);
    } catch (e) {
      await lab.teardown().catch(() => undefined);
      throw e;
    }
  }
  return lab;
}

/**
 * The hooks of a test file whose tests each start agents on one lab (inside its `describe`):
 * the lab up in `beforeAll` (handed to `onLab`), the agents stopped and the lab's election state
 * reset after each test (lab/cluster.ts resetElectionLab), the lab down in `afterAll`.
 * @returns `agents`, the test's agents (the same array all along, emptied after each test), and
 *   `start`, which starts agents into it (lab/cluster.ts startAgents).
 */
export function useElectionLab(
  opts: StartLabOptions,
  onLab: (lab: Lab) => void,
): { agents: LabAgent[]; start: (settings: readonly AgentSettings[]) => Promise<LabAgent[]> } {
  let lab: Lab | undefined;
  const agents: LabAgent[] = [];
  beforeAll(async () => {
    lab = await startLab(opts);
    onLab(lab);
  });
  afterEach(async () => {
    if (lab) await resetElectionLab(lab, agents);
    agents.length = 0;
  });
  afterAll(async () => {
    await lab?.teardown();
  });
  return {
    agents,
    start: (settings) => {
      if (!lab) throw new Error('useElectionLab: the lab is not up (start agents inside a test)');
      return startAgents(lab, settings, agents);
    },
  };
}
