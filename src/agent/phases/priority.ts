/**
 * Phase, election policy: the effective priority and the preempt hold follow backend health
 * (src/policy.ts). Started after the election (it drives the running engine) and before the
 * health checks (the settle time starts with the first checks).
 */
import type { Config } from '../../config/index.js';
import type { HealthChecker } from '../../health/checker.js';
import { formatHostPort } from '../../net/hostport.js';
import { Policy, type PolicyOptions } from '../../policy.js';
import type { InterfaceInfo } from '../../vip/netlink.js';
import type { VrrpHost } from '../../vrrp/host.js';
import { runPhase, type AgentContext, type PhaseHandle, type PhaseSpec } from '../phase.js';

/** The running election policy. */
export interface PriorityPhase extends PhaseHandle {
  /** Looks at the backends' health again: priority and preempt hold (at each health change). */
  evaluate(): void;
  /** Why the advertised priority is below the configured one now, or null when it is not (Policy.reason). */
  reason(): string | null;
}

/** What the policy drives and reads. */
export interface PriorityInputs {
  iface: InterfaceInfo;
  host: Pick<VrrpHost, 'setPriority' | 'setPreemptHold'>;
  checker: HealthChecker;
  /** Whether the VIP data plane can serve (it started, or there is none). */
  dataplaneReady: boolean;
  /** Connection sync, when it runs: preemption waits for its replicated state too. */
  sync?: { held(): boolean; onRelease(cb: () => void): void } | null;
  /** The checks run already (a re-run with a new election): evaluate at once instead of at the first health change. */
  evaluateNow?: boolean;
}

/**
 * Phase 7, the election policy. Started after the election (it drives the engine it is given:
 * a hand-over re-runs it with the new one) and before the health checks. Its options follow a
 * reload in place.
 */
export const priorityPhase: PhaseSpec<PriorityInputs, PriorityPhase> = {
  name: 'election policy',
  settings: ['vrrp.priority', 'policy', 'apiserver.backends', 'apiserver.health'].map((path) => ({
    path,
    on: 'reconfigure' as const,
    does: 'election policy updated',
  })),
  start: startPriority,
};

/** Creates the policy; the health phase has it evaluate at each health change. */
export function startPriority(ctx: AgentContext, config: Config, inputs: PriorityInputs): Promise<PriorityPhase> {
  return runPhase(ctx, 'election policy', async (own) => {
    const { iface, checker, dataplaneReady } = inputs;
    const sync = inputs.sync ?? null;
    // preemption is held while the policy holds it OR connection sync waits for the replicated state
    let policyHold = false;
    const host = {
      setPriority: (priority: number): void => inputs.host.setPriority(priority),
      setPreemptHold: (hold: boolean): void => {
        policyHold = hold;
        inputs.host.setPreemptHold(hold || (sync?.held() ?? false));
      },
    };
    sync?.onRelease(() => inputs.host.setPreemptHold(policyHold));
    const { log } = ctx;
    const api = config.apiserver;
    const local = new Set(iface.addresses.map((a) => a.address));
    let family = config.family;

    // the settle time starts now: the first checks start now, after the first apply
    const policy = new Policy(policyOptions(config, local), host, performance.now());
    // the engine starts at the configured priority; each change after that is logged with its reason
    let current = config;
    let advertised = config.vrrp!.priority;
    let cut = false;
    const evaluate = (): void => {
      // only the VIP's family can serve the VIP (other backends serve a local endpoint of theirs)
      const ours = checker.snapshot({ family });
      const r = policy.update(ours, dataplaneReady, performance.now());
      log.debug({ priority: r.priority, preemptHold: r.hold }, 'policy');
      if (r.priority === advertised) return;
      const configured = current.vrrp!.priority;
      const fields = { from: advertised, to: r.priority, configured, weight: current.policy.unhealthyPriorityWeight };
      advertised = r.priority;
      const why = policy.reason();
      if (why !== null) log.warn({ ...fields, reason: why }, `election priority lowered to ${r.priority}: ${why}`);
      else if (cut) log.info({ ...fields, reason: 'this node can serve again' }, `election priority restored to ${r.priority}: this node can serve again`);
      else log.info({ ...fields, reason: 'reconfigured' }, `election priority now ${r.priority} (reconfigured)`);
      cut = why !== null;
    };
    // the settle deadline passes without an event: look again then
    const settleTimer = setTimeout(evaluate, api.health.settleMs + 10);
    settleTimer.unref();
    own.defer('policy settle timer', () => clearTimeout(settleTimer));
    if (inputs.evaluateNow) evaluate();
    // the policy takes the new base priority, weight, local backend and settle time, and re-evaluates
    const reconfigure = async ({ next }: { next: Config }): Promise<void> => {
      family = next.family;
      current = next;
      policy.reconfigure(policyOptions(next, local));
      evaluate();
    };
    return { evaluate, reconfigure, reason: () => policy.reason(), report: () => ({ priorityReason: policy.reason() }) };
  });
}

/** The policy's options from a config; `local`: this node's addresses (to find its own apiserver). */
function policyOptions(config: Config, local: ReadonlySet<string>): PolicyOptions {
  const api = config.apiserver;
  const localBackend = config.policy.localBackend
    ? formatHostPort(config.policy.localBackend)
    : (api.backends.filter((b) => local.has(b.host)).map(formatHostPort)[0] ?? null);
  return {
    priority: config.vrrp!.priority,
    weight: config.policy.unhealthyPriorityWeight,
    mode: config.dataplane.vip,
    localBackend,
    settleMs: api.health.settleMs,
  };
}
