/**
 * Phase, VIP data plane: the nftables table that DNATs VIP:apiserver.port to the ready backends
 * (`dataplane.vip: nftables`), built by dataplane/vip-plane.ts and fed by the health checks.
 * Started before the election and undone after it: a resigning master still balances until its
 * VIPs are gone. This phase decides what the plane is given (from the config and the election's
 * interface) and what a stop leaves.
 */
import { existsSync } from 'node:fs';
import { handOffPath } from '../handoff.js';
import type { Config } from '../../config/index.js';
import type { HealthChecker } from '../../health/checker.js';
import type { DataplaneStatus, LoadBalancer } from '../../dataplane/controller.js';
import type { Reconciler } from '../../dataplane/reconcile.js';
import { forgetVipFlows, openVipPlane, type VipPlaneSettings } from '../../dataplane/vip-plane.js';
import type { StatusDocument } from '../../observe/status.js';
import type { InterfaceInfo } from '../../vip/netlink.js';
import { runPhase, type AgentContext, type Change, type PhaseHandle, type PhaseSpec, type Prepared } from '../phase.js';
import type { TableRemoval } from '../leftovers.js';

/** The running VIP data plane. */
export interface VipDataplanePhase extends PhaseHandle {
  /** The plane following the checker's verdicts (for /status, and a re-sync after the backend set changed). */
  lb: Reconciler<LoadBalancer>;
}

/** What the VIP data plane needs: the election's interface (a hand-over may change it), the checks it follows, preflight's table removal. */
export interface VipDataplaneInputs {
  iface: () => InterfaceInfo;
  checker: HealthChecker;
  tables: TableRemoval;
}

const REPROGRAMMED = 'VIP data plane reprogrammed (one atomic nftables replace)';

/**
 * Phase 4, the VIP data plane. Its ruleset's inputs are reprogrammed in place: an added VIP is
 * balanced before the election adds it (prepare: the union of old and new), a removed one until
 * the election removed it (commit: exactly the new set). A new family re-runs it within the
 * hand-over: the old family's table goes (unless keepOnStop is all), the new one's is programmed
 * (preflight took its lock).
 */
export const vipDataplanePhase: PhaseSpec<VipDataplaneInputs, VipDataplanePhase> = {
  name: 'VIP data plane',
  settings: [
    { path: 'dataplane.vip', on: 'restart', why: 'the VIP data plane mode' },
    { path: 'dataplane.commandTimeoutMs', on: 'restart', why: "the time limit of the data plane's nft and conntrack runs" },
    {
      path: 'family',
      on: 'rerun',
      does: ({ cur, next }) =>
        `VIP data plane moved from IPv${cur.family} to IPv${next.family} (within the hand-over: the new family's table and lock; the old family's table removed unless keepOnStop is all)`,
    },
    ...['vips', 'apiserver.port', 'interface', 'dataplane.rebalance'].map((path) => ({ path, on: 'reconfigure' as const, does: REPROGRAMMED })),
  ],
  start: startVipDataplane,
  rerun: {
    after: (_h, { cur, next }, log) =>
      void log.info(
        {
          from: cur.family,
          to: next.family,
          removed: next.dataplane.keepOnStop === 'all' ? null : `table ${cur.family === 4 ? 'ip' : 'ip6'} ballast`,
          table: `${next.family === 4 ? 'ip' : 'ip6'} ballast`,
        },
        'reload: hand-over: VIP data plane moved to the new family',
      ),
  },
};

/**
 * Opens the plane (dataplane/vip-plane.ts: the table with no DNAT rule while nothing is
 * healthy, following the checker's verdicts, watched and restored). The undo closes it and
 * removes the table (through `tables`, preflight's removal: one attempt per stop), unless
 * dataplane.keepOnStop is `all` or the stop is a restart in place. Every apply runs with
 * ctx.signal: a stop kills an nft under way (a hung one is killed after its time limit anyway,
 * see apply.ts) instead of waiting for it.
 * @throws BallastError BALLAST_E_DATAPLANE when the first apply fails or hangs (nothing else changed).
 */
export function startVipDataplane(ctx: AgentContext, config: Config, inputs: VipDataplaneInputs): Promise<VipDataplanePhase> {
  return runPhase(ctx, 'VIP data plane', async (own) => {
    const { checker, tables } = inputs;
    const iface = inputs.iface();
    const { log } = ctx;
    const commandTimeoutMs = config.dataplane.commandTimeoutMs;
    // a re-run for the other family (the old one's table is gone by now)
    if (tables.family !== config.family) tables.retarget(config.family);
    tables.rearm();
    own.defer('nftables table', async () => {
      // a restart in place keeps the table: the flows through it keep their NAT, the next process adopts it
      if (config.dataplane.keepOnStop === 'all' || ctx.restarting?.()) return;
      await tables.remove();
      // connection sync: this node's apiserver keeps the flows the VIP took to another holder,
      // which now arrive from VIP:client port. Without the table's notrack rules this kernel
      // would match them against their old entries here (client → VIP, NATed to this node) and
      // drop them as clashes; deleted (after conntrackd stopped: no peer hears of it), they are
      // tracked afresh, unNATed. The other flows' old entries would only linger.
      if (sourceNatOf(config) === 'vip') await forgetVipFlows(config.vips, config.apiserver.port, { commandTimeoutMs, log });
    });
    // a previous process handed off in place (its note is there): its table's backends keep their
    // new connections until their first verdicts here, instead of none being DNATed meanwhile
    const inherit = config.vrrp !== null && existsSync(handOffPath({ ifname: iface.ifname, family: config.family, vrid: config.vrrp.vrid }));
    const plane = await openVipPlane({
      settings: settingsOf(config, config.vips, iface),
      source: checker,
      commandTimeoutMs,
      inherit,
      log,
      signal: ctx.signal,
      defer: (what, undo) => own.defer(what, undo),
    });
    const prepare = async ({ cur, next }: Change): Promise<Prepared> => {
      // an added VIP is balanced before the election puts it on the interface
      const added = next.vips.some((v) => !cur.vips.includes(v));
      if (added) await plane.program(settingsOf(next, [...new Set([...cur.vips, ...next.vips])], inputs.iface()));
      return {
        // a removed VIP was balanced until the election took it off
        commit: () => plane.program(settingsOf(next, next.vips, inputs.iface())),
        abort: () =>
          added
            ? plane
                .program(settingsOf(cur, cur.vips, inputs.iface()))
                .catch((err: unknown) => log.error({ err: (err as Error).message }, 'reload: cannot program the running VIPs again'))
            : undefined,
      };
    };
    const { lb } = plane;
    return { lb, prepare, report: () => ({ dataplane: { ...lb.plane.status(), ...lb.status() } }) };
  });
}

/** The plane's settings under `config`, for `vips` on `iface`. */
function settingsOf(config: Config, vips: readonly string[], iface: InterfaceInfo): VipPlaneSettings {
  return {
    family: config.family,
    vips,
    port: config.apiserver.port,
    local: new Set(iface.addresses.map((a) => a.address)),
    sourceNat: sourceNatOf(config),
    rebalance: config.dataplane.rebalance,
  };
}

/**
 * The source address of the flows the table DNATs: the VIP with dataplane.connectionSync (a flow
 * keeps its 4-tuple at the backend whichever node holds the VIP), else this node's (masquerade).
 */
export function sourceNatOf(config: Config): 'node' | 'vip' {
  return config.dataplane.connectionSync.enabled ? 'vip' : 'node';
}

/** The data-plane part of /status. */
export function dataplaneStatus(config: Config, lb: DataplaneStatus | null): StatusDocument['dataplane'] {
  if (config.vrrp === null && config.bgp === null) return { mode: 'off', reason: 'no election (vrrp absent)' };
  if (config.dataplane.vip === 'none') return { mode: 'none' };
  if (lb === null) return { mode: 'off', reason: 'no apiserver.backends configured' };
  return lb;
}
