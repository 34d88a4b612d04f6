/**
 * Phase, VIP data plane: the nftables table that DNATs VIP:apiserver.port to the ready backends
 * (`dataplane.vip: nftables`), fed by the health checks through a LoadBalancer. Started before
 * the election and undone after it: a resigning master still balances until its VIPs are gone.
 */
import { existsSync, readFileSync } from 'node:fs';
import { handOffPath } from './handoff.js';
import { conntrackVipFlows } from '../native.js';
import { ConnectionTracker } from '../dataplane/rebalance.js';
import { enableConntrackTimestamps } from '../dataplane/conntrack.js';
import type { Config } from '../config/index.js';
import { createError } from '../errors.js';
import type { HealthChecker } from '../health/checker.js';
import { LoadBalancer, VIP_PLANE_MESSAGES, type DataplaneStatus } from '../dataplane/controller.js';
import { Reconciler } from '../dataplane/reconcile.js';
import { commandExecutor, NftablesApplier } from '../dataplane/apply.js';
import { TableWatch } from '../dataplane/nftwatch.js';
import { NftWatch } from '../native.js';
import { flushBackend, flushVip } from '../dataplane/conntrack.js';
import { probeClients } from '../dataplane/probe.js';
import type { StatusDocument } from '../observe/status.js';
import type { InterfaceInfo } from '../vip/netlink.js';
import { runPhase, type AgentContext, type PhaseHandle } from './phase.js';
import type { HealthFollowers } from './health.js';
import type { TableRemoval } from './leftovers.js';

/** The running VIP data plane. */
export interface VipDataplanePhase extends PhaseHandle {
  /**
   * A reload: the table for `vips` (and `config`'s port, `iface`'s addresses), applied now in one
   * transaction (established flows keep their conntrack NAT).
   * @throws BallastError BALLAST_E_DATAPLANE when nft refused it (the previous table stays).
   */
  reconfigure(config: Config, vips: readonly string[], iface: InterfaceInfo): Promise<void>;
}

/**
 * Programs the table (no DNAT rule while nothing is healthy) and has the LoadBalancer follow the
 * checker's verdicts (one subscription; `followers.lb` for /status). The undo unsubscribes it and
 * removes the table (through `tables`, preflight's removal: one attempt per stop), unless
 * dataplane.keepOnStop is `all`. A {@link TableWatch} puts the table back within the data plane's
 * bound when someone else removes or changes it (kernel nftables events of this network
 * namespace, and a slow periodic verify); it stops before the table is removed. Every apply runs with ctx.signal: a stop kills an nft under way (a hung
 * one is killed after its time limit anyway, see apply.ts) instead of waiting for it.
 * @throws BallastError BALLAST_E_DATAPLANE when the first apply fails or hangs (nothing else changed).
 */
export function startVipDataplane(
  ctx: AgentContext,
  config: Config,
  inputs: { iface: InterfaceInfo; checker: HealthChecker; followers: HealthFollowers; tables: TableRemoval },
): Promise<VipDataplanePhase> {
  return runPhase(ctx, 'VIP data plane', async (own) => {
    const { iface, checker, followers, tables } = inputs;
    const { log } = ctx;
    const api = config.apiserver;
    const local = new Set(iface.addresses.map((a) => a.address));
    // every nft and conntrack run is killed after dataplane.commandTimeout (a hung one fails its apply or flush)
    const timeoutMs = config.dataplane.commandTimeoutMs;
    const applier = new NftablesApplier({ track: true, exec: commandExecutor(['nft'], { timeoutMs }) });
    const conntrack = commandExecutor(['conntrack'], { timeoutMs });
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
      if (sourceNatOf(config) === 'vip') await forgetVipFlows(config, conntrack, log);
    });
    const a = applier;
    // connection counts per backend, and the opt-in rebalancer (dataplane.rebalance, reloadable)
    let rebalance = config.dataplane.rebalance;
    const tracker: ConnectionTracker = new ConnectionTracker({
      read: conntrackVipFlows,
      target: () => plane.target(),
      settings: () => rebalance,
      evict: (family, flows) => a.evict(family, flows, { signal: ctx.signal }),
      probe: (vip, clients, backend) => plane.probe(vip, clients, { backend, why: 'rebalance' }),
      log,
    });
    const plane = new LoadBalancer(
      {
        apply: async (d) => {
          const r = await a.apply(d, { signal: ctx.signal });
          // a new ruleset (a backend joined or left): count now, not at the next period (after the plane notes its backends)
          if (r.changed) setImmediate(() => tracker.kick());
          return r;
        },
        flush: (vip, port, backend) => flushBackend(vip, port, backend, { exec: conntrack }),
        probe: (vip, port, clients) => probeClients(vip, port, clients),
        log,
        traffic: () => tracker.status(),
      },
      { family: config.family, vips: config.vips, port: api.port, local, sourceNat: sourceNatOf(config) },
    );
    // a dead backend's probes finish before the table (whose rule leaves them untracked) goes
    own.defer("dead backends' probes", () => plane.probing());
    let timestamps = false;
    const wantTimestamps = (): void => {
      if (!rebalance.enabled || timestamps) return;
      timestamps = true;
      own.defer('conntrack timestamps', enableConntrackTimestamps(log));
    };
    wantTimestamps();
    const lb = new Reconciler(plane, checker, { log, ...VIP_PLANE_MESSAGES });
    own.defer('VIP data plane verdict subscription', lb.follow());
    // a previous process handed off in place (its note is there): its table's backends keep their
    // new connections until their first verdicts here, instead of none being DNATed meanwhile.
    // Only then: a cold start pays no extra nft run before its election
    const handedOff = config.vrrp !== null && existsSync(handOffPath({ ifname: iface.ifname, family: config.family, vrid: config.vrrp.vrid }));
    const inherited = !handedOff
      ? []
      : await applier.dnatTargets(config.family, { signal: ctx.signal }).catch((err: unknown) => {
          log.warn(
            { err: (err as Error).message },
            'cannot read the nftables table left by a previous process; starting with no backend until the first verdicts',
          );
          return [] as string[];
        });
    if (inherited.length > 0) {
      plane.inherit(inherited);
      log.info({ backends: inherited }, "serving the backends of the previous process's nftables table until their first verdicts");
    }
    // the table exists (with no DNAT rule while nothing is healthy) before the first check
    await lb.sync();
    if (lb.status().failures > 0) {
      throw createError('BALLAST_E_DATAPLANE', `cannot program nftables: ${lb.status().lastError ?? 'unknown error'}`);
    }
    if (readForwarding(config.family) === false) {
      const sysctl = config.family === 4 ? 'net.ipv4.ip_forward' : 'net.ipv6.conf.all.forwarding';
      log.warn(
        { family: config.family, sysctl },
        `IP forwarding is off: connections DNATed to apiservers on other nodes will fail (set ${sysctl}=1; kubeadm requires it too)`,
      );
    }
    const family = config.family;
    const watch = new TableWatch({
      family,
      log,
      // the agent's lifetime is its other handles': this one alone keeps nothing running
      subscribe: (onChange) => NftWatch.open(onChange, { keepAlive: false }),
      verify: () => applier.verify(family, { signal: ctx.signal }),
      restore: async () => {
        applier.forget(family);
        const before = lb.status().failures;
        await lb.sync();
        if (lb.status().failures > before) throw new Error(lb.status().lastError ?? 'apply failed');
      },
      onRestore: (r) => plane.noteRestore(r.at),
    });
    watch.start();
    own.defer('nftables table watch', () => watch.stop());
    followers.lb = lb;
    own.defer('VIP connection counts', tracker.start());
    own.defer('VIP data plane health subscription', () => {
      followers.lb = null;
    });
    const reconfigure = async (next: Config, vips: readonly string[], at: InterfaceInfo): Promise<void> => {
      plane.reconfigure({
        family: next.family,
        vips,
        port: next.apiserver.port,
        local: new Set(at.addresses.map((a) => a.address)),
        sourceNat: sourceNatOf(next),
      });
      const before = lb.status().failures;
      await lb.sync();
      if (lb.status().failures > before) throw createError('BALLAST_E_DATAPLANE', `cannot program nftables: ${lb.status().lastError ?? 'unknown error'}`);
      const was = rebalance;
      rebalance = next.dataplane.rebalance;
      wantTimestamps();
      // a rebalancer turned on or retuned acts now, not at the next 5 s count
      if (JSON.stringify(was) !== JSON.stringify(rebalance)) tracker.kick();
    };
    return { reconfigure };
  });
}

/**
 * The source address of the flows the table DNATs: the VIP with dataplane.connectionSync (a flow
 * keeps its 4-tuple at the backend whichever node holds the VIP), else this node's (masquerade).
 */
export function sourceNatOf(config: Config): 'node' | 'vip' {
  return config.dataplane.connectionSync.enabled ? 'vip' : 'node';
}

/** Deletes the conntrack entries of flows through the VIPs (see the caller); logged, never throws. */
async function forgetVipFlows(config: Config, exec: ReturnType<typeof commandExecutor>, log: AgentContext['log']): Promise<void> {
  let deleted = 0;
  for (const vip of config.vips) {
    deleted += await flushVip(vip, config.apiserver.port, { exec }).catch((err: unknown) => {
      log.warn({ err: (err as Error).message, vip }, 'cannot delete the old conntrack entries of flows through the VIP');
      return 0;
    });
  }
  if (deleted > 0) log.info({ entries: deleted }, 'deleted the old conntrack entries of flows through the VIP (they continue through the new holder)');
}

/** The data-plane part of /status. */
export function dataplaneStatus(config: Config, lb: DataplaneStatus | null): StatusDocument['dataplane'] {
  if (config.vrrp === null && config.bgp === null) return { mode: 'off', reason: 'no election (vrrp absent)' };
  if (config.dataplane.vip === 'none') return { mode: 'none' };
  if (lb === null) return { mode: 'off', reason: 'no apiserver.backends configured' };
  return lb;
}

/** net.ipv4.ip_forward / net.ipv6.conf.all.forwarding, or null when unreadable. */
function readForwarding(family: 4 | 6): boolean | null {
  try {
    const p = family === 4 ? '/proc/sys/net/ipv4/ip_forward' : '/proc/sys/net/ipv6/conf/all/forwarding';
    return readFileSync(p, 'utf8').trim() === '1';
  } catch {
    return null;
  }
}
