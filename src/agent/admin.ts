/**
 * Phase 2, admin: the admin HTTP endpoint (/status, /healthz, /metrics) on admin.listen. Started
 * before the data planes so a half-started agent can already be asked what it is doing; the
 * status it serves is read from the phases that run, through `status`.
 */
import { formatHostPort } from '../net/hostport.js';
import type { Config } from '../config/index.js';
import { createError } from '../errors.js';
import { startAdmin } from '../observe/admin.js';
import { createMetrics } from '../observe/metrics.js';
import type { StatusDocument } from '../observe/status.js';
import { runPhase, type AgentContext, type PhaseHandle } from './phase.js';

/**
 * Listens on admin.listen.
 * @param inputs.status the current /status document (rejects while the election is not running).
 * @throws BallastError BALLAST_E_ADMIN_ADDRESS (exit 2) when the address is not this node's,
 *   BALLAST_E_ADMIN_LISTEN (exit 1) for any other listen failure (the port is in use, …).
 */
export function startAdminPhase(ctx: AgentContext, config: Config, inputs: { status: () => Promise<StatusDocument> }): Promise<PhaseHandle> {
  return runPhase(ctx, 'admin', async (own) => {
    const { status } = inputs;
    const metrics = createMetrics();
    const where = formatHostPort(config.admin.listen);
    const admin = await startAdmin(config.admin.listen.host, config.admin.listen.port, {
      status,
      metrics: async () => {
        metrics.update(await status());
        return { contentType: metrics.registry.contentType, body: await metrics.registry.metrics() };
      },
    }).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === 'EADDRNOTAVAIL') {
        throw createError('BALLAST_E_ADMIN_ADDRESS', `admin.listen: ${where} is not an address of this node: ${(err as Error).message}`, { cause: err });
      }
      throw createError('BALLAST_E_ADMIN_LISTEN', `cannot listen on ${where} for the admin endpoint: ${(err as Error).message}`, { cause: err });
    });
    own.defer('admin endpoint', async () => {
      // close() waits for open connections; a status client must not hold up the exit
      const closed = new Promise<void>((r) => admin.close(() => r()));
      admin.closeAllConnections();
      await closed;
    });
    return {};
  });
}
