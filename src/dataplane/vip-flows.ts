/**
 * Connection sync's deletions of this kernel's conntrack entries of flows through the VIPs
 * (conntrack(8) through dataplane/conntrack.ts): what a node that does not hold the VIP must not
 * keep, and what a commit must not bring back. Each deletion is logged when it fails and counts
 * as 0; none throws. agent/phases/connection-sync.ts says when each runs.
 */
import type { Log } from '../log/log.js';
import type { Executor } from './apply.js';
import { flushBackendSides, flushVip } from './conntrack.js';

/** Options of {@link VipFlows}. */
export interface VipFlowsOptions {
  vips: readonly string[];
  /** apiserver.port: the VIPs' port. */
  port: number;
  /** The ports the apiservers listen on (this node's among them). */
  backendPorts: readonly number[];
  /** Runs conntrack(8) off the takeover's path (the command timeout). */
  exec: Executor;
  /** Runs it on the takeover's path (bounded like the commit). */
  urgent: Executor;
  log: Log;
}

/** The deletions, for one router's VIPs. */
export class VipFlows {
  constructor(private readonly o: VipFlowsOptions) {}

  /**
   * Deletes every entry of a flow to the VIPs and every backend side ({@link backendSides}): the
   * purge of a node that does not hold the VIP (stale entries would hold VIP:client port for
   * flows that ended and make a later commit fail). @returns how many went.
   */
  async purge(): Promise<number> {
    const { vips, port, exec, log } = this.o;
    let deleted = 0;
    for (const vip of vips) {
      deleted += await flushVip(vip, port, { exec }).catch((err: unknown) => {
        log.warn({ err: (err as Error).message, vip }, 'connection sync: cannot delete the stale conntrack entries of flows to the VIP');
        return 0;
      });
    }
    deleted += await this.backendSides(exec);
    if (deleted > 0) log.info({ entries: deleted }, 'connection sync: deleted the stale conntrack entries of flows to the VIP (this node does not hold it)');
    return deleted;
  }

  /**
   * Deletes the backend side of flows through the VIP to this node's apiserver, tracked here
   * while nothing left it untracked: it would make the commit of the same flow fail
   * (flushBackendSides). @param exec default: the urgent runner (a takeover waits for it).
   * @returns how many went.
   */
  async backendSides(exec: Executor = this.o.urgent): Promise<number> {
    const { vips, backendPorts, log } = this.o;
    const counts = await Promise.all(
      vips.map((vip) =>
        flushBackendSides(vip, backendPorts, { exec }).catch((err: unknown) => {
          log.warn({ err: (err as Error).message, vip }, 'connection sync: cannot delete the conntrack entries of flows from the VIP');
          return 0;
        }),
      ),
    );
    return counts.reduce((a, b) => a + b, 0);
  }

  /**
   * Deletes the closing entries (TIME_WAIT, CLOSE) of flows to the VIPs that a commit brought:
   * each keeps its NAT binding, and a client reusing its port would be sent to a backend that
   * may have left since.
   */
  async forgetClosing(): Promise<void> {
    const { vips, port, urgent } = this.o;
    await Promise.all(vips.flatMap((vip) => (['TIME_WAIT', 'CLOSE'] as const).map((state) => flushVip(vip, port, { exec: urgent, state }).catch(() => 0))));
  }
}
