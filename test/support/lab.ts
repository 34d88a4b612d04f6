/**
 * The one way a test starts a lab: `lab = await startLab({ prefix, subnet, nodes, apiservers: true })`
 * in `beforeAll`, and `await lab?.teardown()` in `afterAll`. Lab.create already removes what an
 * interrupted run with the same prefix left (Lab.cleanupStale), so tests do not call that first.
 */
import { Lab, type LabOptions } from '../../lab/lab.js';

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
