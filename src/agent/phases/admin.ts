/**
 * Phase 2, admin: the admin HTTP endpoint (/status, /healthz, /metrics) on admin.listen. Started
 * before the data planes so a half-started agent can already be asked what it is doing; the
 * status it serves is read from the phases that run, through `status`.
 */
import { formatHostPort } from '../../net/hostport.js';
import type { Config } from '../../config/index.js';
import { createError } from '../../errors.js';
import { startAdmin } from '../../observe/admin.js';
import { createMetrics } from '../../observe/metrics.js';
import type { ReloadResult, StatusDocument } from '../../observe/status.js';
import { runPhase, type AgentContext, type PhaseHandle, type PhaseSpec } from '../phase.js';

/** What the admin endpoint serves: the /status document, POST /reload's handler, the change stamp. */
export interface AdminInputs {
  status: () => Promise<StatusDocument>;
  reload?: () => Promise<ReloadResult>;
  stamp?: () => unknown;
}

/**
 * Phase 2, admin. A new admin.listen re-runs it: the old listener is released first (it answers
 * the POST /reload under way), and when the new address cannot be listened on the old one is
 * taken again, so the agent can still be asked.
 */
export const adminPhase: PhaseSpec<AdminInputs, AdminPhase> = {
  name: 'admin',
  settings: [{ path: 'admin.listen', on: 'rerun', does: 'admin endpoint re-run' }],
  start: startAdminPhase,
  rerun: {
    after: (_h, { next }, log) => void log.info({ admin: formatHostPort(next.admin.listen) }, 'reload: admin endpoint re-run'),
  },
};

/** The running admin endpoint. */
export interface AdminPhase extends PhaseHandle {
  /**
   * For a re-run (reload): stops listening at once and gives the open connections `graceMs` to
   * finish (the POST /reload that asked for the re-run is answered on one of them) before they
   * are closed; resolves once the listener is closed. `undo` afterwards is a no-op.
   */
  release(graceMs?: number): Promise<void>;
}

/**
 * Listens on admin.listen.
 * @param inputs.status the current /status document (rejects while the election is not running).
 * @throws BallastError BALLAST_E_ADMIN_ADDRESS (exit 2) when the address is not this node's,
 *   BALLAST_E_ADMIN_LISTEN (exit 1) for any other listen failure (the port is in use, …).
 */
export function startAdminPhase(ctx: AgentContext, config: Config, inputs: AdminInputs): Promise<AdminPhase> {
  return runPhase(ctx, 'admin', async (own) => {
    const { status, reload } = inputs;
    const metrics = createMetrics();
    const where = formatHostPort(config.admin.listen);
    const { internal } = ctx;
    const admin = await startAdmin(config.admin.listen.host, config.admin.listen.port, {
      status,
      ...(inputs.stamp ? { stamp: inputs.stamp } : {}),
      metrics: async () => {
        const doc = await status();
        // a metric that cannot be set leaves the others served, and is counted
        if (internal) internal.run('metrics', () => metrics.update(doc));
        else metrics.update(doc);
        if (internal) metrics.internalErrors(internal.counts());
        return { contentType: metrics.registry.contentType, body: await metrics.registry.metrics() };
      },
      ...(internal ? { internalError: (err: unknown) => internal.note('admin', err) } : {}),
      ...(reload ? { reload } : {}),
    }).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === 'EADDRNOTAVAIL') {
        throw createError('BALLAST_E_ADMIN_ADDRESS', `admin.listen: ${where} is not an address of this node: ${(err as Error).message}`, { cause: err });
      }
      throw createError('BALLAST_E_ADMIN_LISTEN', `cannot listen on ${where} for the admin endpoint: ${(err as Error).message}`, { cause: err });
    });
    let released = false;
    own.defer('admin endpoint', async () => {
      if (released) return;
      // close() waits for open connections; a status client must not hold up the exit
      const closed = new Promise<void>((r) => admin.close(() => r()));
      admin.closeAllConnections();
      await closed;
    });
    const release = async (graceMs = 2000): Promise<void> => {
      if (released) return;
      released = true;
      const closed = new Promise<void>((r) => admin.close(() => r()));
      admin.closeIdleConnections();
      const t = setTimeout(() => admin.closeAllConnections(), graceMs);
      t.unref();
      void closed.then(() => clearTimeout(t));
      // the listening socket is closed once `listening` turns false (the handle closes on the next tick)
      await new Promise<void>((r) => setImmediate(r));
    };
    return { release };
  });
}
