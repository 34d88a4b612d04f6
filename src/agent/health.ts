/**
 * Phase, health: the active checks start, their verdicts reach the planes that follow them
 * (nftables LoadBalancer, LocalBalancer, election policy) and passive detection (conntrack
 * events) marks dead backends between checks. Last of the phases: everything that follows health
 * exists before the first check.
 */
import type { Config } from '../config/index.js';
import { formatAddress, type BackendHealth, type HealthChecker } from '../health/checker.js';
import { FlowTracker, watchConntrack, type ConntrackWatch } from '../health/passive.js';
import type { LoadBalancer } from '../dataplane/controller.js';
import type { LocalBalancer, LocalDataplane } from '../dataplane/local.js';
import type { Logger } from '../observe/log.js';
import { runPhase, type AgentContext, type PhaseHandle } from './phase.js';

/**
 * What follows backend health, each set by the phase that owns it while that phase runs (null
 * otherwise). The health wiring reads it at each event, so phases can come and go (reload).
 */
export interface HealthFollowers {
  /** The VIP's nftables data plane (phase VIP data plane). */
  lb: LoadBalancer | null;
  /** The node-local endpoint (phase local endpoint). */
  localLb: LocalBalancer | null;
  /** The election policy (phase election policy): re-evaluates priority and preempt hold. */
  balancing: { evaluate(): void } | null;
}

/** Tells the data planes that the health snapshot changed (each re-reads it). */
export function noteHealth(followers: HealthFollowers): void {
  followers.lb?.noteHealth();
  void followers.localLb?.noteHealth();
}

/**
 * Subscribes the followers to `checker`, starts passive detection, syncs the local endpoint and
 * starts the checks. The undo stops passive detection and the checks.
 * @param inputs.local the local endpoint's data plane when one runs (ebpf: passive detection
 *   also watches the flows straight to the backends).
 */
export function startHealth(
  ctx: AgentContext,
  config: Config,
  inputs: { checker: HealthChecker; followers: HealthFollowers; local: LocalDataplane | null },
): Promise<PhaseHandle> {
  return runPhase(ctx, 'health', async (own) => {
    const { checker, followers, local } = inputs;
    const { log } = ctx;
    const f = followers;
    checker.on('change', (c) => {
      log.info({ backend: c.backend, from: c.from, to: c.to, reason: c.reason }, 'backend health');
      f.lb?.onChange(c);
      void f.localLb?.noteHealth();
      f.balancing?.evaluate();
    });
    checker.on('check', () => {
      f.lb?.noteHealth();
      void f.localLb?.noteHealth();
    });
    own.defer('health subscriptions', () => {
      checker.removeAllListeners('change');
      checker.removeAllListeners('check');
    });
    const watch = startPassiveDetection(config, checker, log, () => {
      f.lb?.noteHealth();
      void f.localLb?.noteHealth();
    }, local !== null && local.mode === 'ebpf');
    own.defer('passive detection', () => watch?.stop());
    if (local?.mode === 'ebpf' && !(config.vrrp !== null && config.dataplane.vip === 'nftables')) {
      log.info(
        {},
        'dead backends of the local endpoint are seen at once from conntrack events only where connection tracking is active in this network namespace (kube-proxy or an nftables NAT rule turn it on); otherwise they leave after fall × interval of failed checks',
      );
    }
    // the endpoint exists (with no backend yet: connect()s untouched) before the first check
    await f.localLb?.sync();
    checker.start();
    own.defer('health checks', () => checker.stop());
    f.balancing?.evaluate();
    return {};
  });
}

/**
 * Passive detection from conntrack events: flows DNATed from the VIPs (nftables data plane) and,
 * with the ebpf local endpoint, flows straight to the backends (the connect() rewrite leaves
 * no NAT to see). Needs connection tracking active in this network namespace (it is wherever
 * an nftables NAT rule or kube-proxy runs).
 */
function startPassiveDetection(config: Config, checker: HealthChecker, log: Logger, noteHealth: () => void, direct: boolean): ConntrackWatch | null {
  const vipPath = config.vrrp !== null && config.dataplane.vip === 'nftables';
  if (!vipPath && !direct) return null;
  const api = config.apiserver;
  const tracker = new FlowTracker(
    vipPath ? config.vips : [],
    api.port,
    Math.max(200, Math.min(1000, api.health.timeoutMs)),
    direct ? api.backends.map(formatAddress) : [],
  );
  return watchConntrack(
    tracker,
    (v) => {
      if (v.alive) return;
      if (checker.markDead(v.backend, v.reason)) log.warn({ backend: v.backend, reason: v.reason }, 'backend judged dead from its connections');
      noteHealth();
    },
    { onExit: (code, stderr) => log.warn({ code, stderr }, 'conntrack event watcher ended: passive detection is off (is the conntrack package installed?)') },
  );
}

/** The election knows when the Active router went silent: its node's apiserver is gone too. */
export function backendsOfNode(snapshot: readonly BackendHealth[], nodeAddress: string): string[] {
  return snapshot.filter((b) => b.address.startsWith(`${nodeAddress}:`) || b.address.startsWith(`[${nodeAddress}]:`)).map((b) => b.address);
}
