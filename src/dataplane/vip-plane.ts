/**
 * The VIP data plane, assembled: the nftables table that DNATs VIP:port to the ready backends
 * (one atomic `nft -f` per change, through a {@link LoadBalancer} fed by the checks' verdicts),
 * the connection counts and opt-in rebalancer over it, and a {@link TableWatch} that puts the
 * table back when someone else removes or changes it.
 *
 *   verdicts ─► Reconciler ─► LoadBalancer ─► NftablesApplier ─► table ip|ip6 ballast
 *                                  ▲                                 │
 *             ConnectionTracker ───┘ (counts, rebalance)   TableWatch (events, verify, restore)
 *
 * The agent's VIP data plane phase opens it and decides what a stop leaves (the table itself is
 * removed by the agent's table removal, shared with preflight).
 */
import { readFileSync } from 'node:fs';
import type { RebalanceConfig } from '../config/index.js';
import { createError } from '../errors.js';
import type { Log } from '../log/log.js';
import { conntrackVipFlows, NftWatch } from '../native.js';
import { commandExecutor, NftablesApplier, type Executor } from './apply.js';
import { enableConntrackTimestamps, flushBackend, flushVip } from './conntrack.js';
import { LoadBalancer, VIP_PLANE_MESSAGES } from './controller.js';
import { probeClients } from './probe.js';
import { TableWatch } from './nftwatch.js';
import { ConnectionTracker } from './rebalance.js';
import { Reconciler, type VerdictSource } from './reconcile.js';

/** What the table is rendered from (all reloadable). */
export interface VipPlaneSettings {
  family: 4 | 6;
  vips: readonly string[];
  /** apiserver.port. */
  port: number;
  /** This node's addresses: a backend among them is DNATed without masquerade. */
  local: ReadonlySet<string>;
  /** The source address of the flows the table DNATs: this node's (masquerade) or the VIP (connection sync). */
  sourceNat: 'node' | 'vip';
  /** dataplane.rebalance. */
  rebalance: RebalanceConfig;
}

/** The running VIP data plane. */
export interface VipPlane {
  /** The plane following the checks' verdicts (for /status, and a re-sync after the backend set changed). */
  lb: Reconciler<LoadBalancer>;
  /**
   * Renders the table for `settings` and applies it now in one transaction (established flows
   * keep their conntrack NAT); a rebalancer turned on or retuned acts at once.
   * @throws BallastError BALLAST_E_DATAPLANE when nft refused it (the previous table stays).
   */
  program(settings: VipPlaneSettings): Promise<void>;
}

/**
 * Opens the plane: programs the table (no DNAT rule while nothing is healthy) before the first
 * check, subscribes it to `source`, starts the table watch and the connection counts. Each part
 * is registered with `defer` as it is created (the caller unwinds them, in reverse, on a stop or
 * when this throws). Every nft and conntrack run is killed after `commandTimeoutMs`, and at once
 * when `signal` aborts.
 * @param o.inherit a previous process handed off in place: its table's backends keep their new
 *   connections until their first verdicts here (read from the table; a cold start skips this nft run).
 * @throws BallastError BALLAST_E_DATAPLANE when the first apply fails or hangs.
 */
export async function openVipPlane(o: {
  settings: VipPlaneSettings;
  source: VerdictSource;
  commandTimeoutMs: number;
  inherit: boolean;
  log: Log;
  signal: AbortSignal;
  defer: (what: string, undo: () => unknown) => void;
}): Promise<VipPlane> {
  const { log, signal, defer } = o;
  const { family } = o.settings;
  const applier = new NftablesApplier({ track: true, exec: commandExecutor(['nft'], { timeoutMs: o.commandTimeoutMs }) });
  const conntrack = commandExecutor(['conntrack'], { timeoutMs: o.commandTimeoutMs });
  // connection counts per backend, and the opt-in rebalancer (dataplane.rebalance, reloadable)
  let rebalance = o.settings.rebalance;
  const tracker: ConnectionTracker = new ConnectionTracker({
    read: conntrackVipFlows,
    target: () => plane.target(),
    settings: () => rebalance,
    evict: (f, flows) => applier.evict(f, flows, { signal }),
    probe: (vip, clients, backend) => plane.probe(vip, clients, { backend, why: 'rebalance' }),
    log,
  });
  const { rebalance: _r, ...initial } = o.settings;
  const plane = new LoadBalancer(
    {
      apply: async (d) => {
        const r = await applier.apply(d, { signal });
        // a new ruleset (a backend joined or left): count now, not at the next period (after the plane notes its backends)
        if (r.changed) setImmediate(() => tracker.kick());
        return r;
      },
      flush: (vip, port, backend) => flushBackend(vip, port, backend, { exec: conntrack }),
      probe: (vip, port, clients) => probeClients(vip, port, clients),
      log,
      traffic: () => tracker.status(),
    },
    initial,
  );
  // a dead backend's probes finish before the table (whose rule leaves them untracked) goes
  defer("dead backends' probes", () => plane.probing());
  let timestamps = false;
  const wantTimestamps = (): void => {
    if (!rebalance.enabled || timestamps) return;
    timestamps = true;
    defer('conntrack timestamps', enableConntrackTimestamps(log));
  };
  wantTimestamps();
  const lb = new Reconciler(plane, o.source, { log, ...VIP_PLANE_MESSAGES });
  defer('VIP data plane verdict subscription', lb.follow());
  const inherited = !o.inherit
    ? []
    : await applier.dnatTargets(family, { signal }).catch((err: unknown) => {
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
  if (lb.status().failures > 0) throw createError('BALLAST_E_DATAPLANE', `cannot program nftables: ${lb.status().lastError ?? 'unknown error'}`);
  if (readForwarding(family) === false) {
    const sysctl = family === 4 ? 'net.ipv4.ip_forward' : 'net.ipv6.conf.all.forwarding';
    log.warn({ family, sysctl }, `IP forwarding is off: connections DNATed to apiservers on other nodes will fail (set ${sysctl}=1; kubeadm requires it too)`);
  }
  const watch = new TableWatch({
    family,
    log,
    // the agent's lifetime is its other handles': this one alone keeps nothing running
    subscribe: (onChange) => NftWatch.open(onChange, { keepAlive: false }),
    verify: () => applier.verify(family, { signal }),
    restore: async () => {
      applier.forget(family);
      const before = lb.status().failures;
      await lb.sync();
      if (lb.status().failures > before) throw new Error(lb.status().lastError ?? 'apply failed');
    },
    onRestore: (r) => plane.noteRestore(r.at),
  });
  watch.start();
  defer('nftables table watch', () => watch.stop());
  defer('VIP connection counts', tracker.start());
  const program = async (s: VipPlaneSettings): Promise<void> => {
    const { rebalance: next, ...rendered } = s;
    plane.reconfigure(rendered);
    const before = lb.status().failures;
    await lb.sync();
    if (lb.status().failures > before) throw createError('BALLAST_E_DATAPLANE', `cannot program nftables: ${lb.status().lastError ?? 'unknown error'}`);
    const was = rebalance;
    rebalance = next;
    wantTimestamps();
    // a rebalancer turned on or retuned acts now, not at the next 5 s count
    if (JSON.stringify(was) !== JSON.stringify(rebalance)) tracker.kick();
  };
  return { lb, program };
}

/**
 * Deletes the conntrack entries of flows through `vips`:`port` (after the table went, with
 * connection sync: see the VIP data plane phase); logged, never throws.
 */
export async function forgetVipFlows(
  vips: readonly string[],
  port: number,
  o: { commandTimeoutMs: number; log: Pick<Log, 'info' | 'warn'>; exec?: Executor },
): Promise<void> {
  const exec = o.exec ?? commandExecutor(['conntrack'], { timeoutMs: o.commandTimeoutMs });
  let deleted = 0;
  for (const vip of vips) {
    deleted += await flushVip(vip, port, { exec }).catch((err: unknown) => {
      o.log.warn({ err: (err as Error).message, vip }, 'cannot delete the old conntrack entries of flows through the VIP');
      return 0;
    });
  }
  if (deleted > 0) o.log.info({ entries: deleted }, 'deleted the old conntrack entries of flows through the VIP (they continue through the new holder)');
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
