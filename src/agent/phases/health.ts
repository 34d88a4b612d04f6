/**
 * Phase, health: the active checks start, their verdicts reach the planes that follow them
 * (nftables LoadBalancer, LocalBalancer, election policy) and passive detection (conntrack
 * events) marks dead backends between checks. Last of the phases: everything that follows health
 * exists before the first check.
 */
import type { Config } from '../../config/index.js';
import type { DampingChange, FailOpenChange, HealthChange, HealthChecker } from '../../health/checker.js';
import type { Verdict } from '../../health/verdict.js';
import { FlowTracker, watchConntrack, type ConntrackWatch, type PassiveVerdict } from '../../health/passive.js';
import type { LocalDataplane } from '../../dataplane/local.js';
import { formatHostPort } from '../../net/hostport.js';
import type { Logger } from '../../log/log.js';
import { pinoSink, RateLimitedLog } from '../../log/ratelimit.js';
import { runPhase, type AgentContext, type Change, type PhaseHandle, type PhaseSpec } from '../phase.js';

/** The running health phase. */
export type HealthPhase = PhaseHandle;

/** What the health phase drives: the checker, and what follows it (getters: a re-run replaces them). */
export interface HealthInputs {
  checker: HealthChecker;
  /** The local endpoint's data plane when one runs (ebpf: passive detection also watches the flows straight to the backends). */
  local: LocalDataplane | null;
  /** The local endpoint's plane, synced before the first check. */
  localLb: () => { sync(): Promise<unknown> } | undefined;
  /** The election policy, re-evaluated at each health change. */
  policy: () => { evaluate(): void } | undefined;
  /** Since when this node holds the VIPs (the election's; ms, performance.now()), null while it does not: passive detection judges the VIPs' flows from then on. */
  vipsHeldSince?: () => number | null;
}

/** What passive detection follows: the VIP flows (VIPs, port), the backends' direct flows, the check timeout. */
const PASSIVE = ['vips', 'apiserver.port', 'apiserver.backends', 'apiserver.health.timeoutMs'];

/**
 * Phase 8, health: the checks and passive detection. New check settings apply in place (kept
 * backends keep their state); passive detection restarts with new flows. Turning load
 * balancing on or off (no backends ↔ some) takes a restart.
 */
export const healthPhase: PhaseSpec<HealthInputs, HealthPhase> = {
  name: 'health',
  settings: [
    {
      path: 'apiserver.backends',
      on: ({ cur, next }) => ((cur.apiserver.backends.length === 0) !== (next.apiserver.backends.length === 0) ? 'restart' : 'same'),
      why: 'turning load balancing on or off (none ↔ some backends)',
    },
    { path: 'apiserver.health', on: 'reconfigure', does: 'health check settings replaced (kept backends keep their state)' },
    ...PASSIVE.map((path) => ({ path, on: 'reconfigure' as const, does: 'passive detection restarted' })),
  ],
  start: startHealth,
};

/**
 * Logs health changes and verdicts, re-evaluates the policy at each change, starts passive
 * detection, syncs the local endpoint and starts the checks. The undo stops passive detection
 * and the checks.
 * @param inputs.local the local endpoint's data plane when one runs (ebpf: passive detection
 *   also watches the flows straight to the backends).
 */
export function startHealth(ctx: AgentContext, config: Config, inputs: HealthInputs): Promise<HealthPhase> {
  return runPhase(ctx, 'health', async (own) => {
    const { checker, local } = inputs;
    const { log } = ctx;
    // log lines and the policy's re-evaluation: a throw here would reach the checker's emit and
    // end the process; contained (observe/contain.ts), the checks and the planes go on
    const contain = <A extends unknown[]>(fn: (...a: A) => void): ((...a: A) => void) => (ctx.internal ? ctx.internal.wrap('health-events', fn) : fn);
    // the planes follow verdicts (their own subscriptions); here: the log and the policy
    const onChange = contain((c: HealthChange): void => {
      log.info({ backend: formatHostPort(c.backend), from: c.from, to: c.to, reason: c.reason, ...(c.cause ? { cause: c.cause.kind } : {}) }, 'backend health');
      inputs.policy()?.evaluate();
    });
    checker.on('change', onChange);
    const onVerdict = contain((v: Verdict): void => {
      if (v.state !== 'up') log.info({ backend: formatHostPort(v.backend), verdict: v.state, cause: v.cause.kind, reason: v.message }, 'backend verdict');
    });
    checker.on('verdict', onVerdict);
    // what the planes serve changed without a health change (a hold ended, a reload): the policy looks again
    const onFailOpen = contain((c: FailOpenChange): void => {
      logFailOpen(log, c);
      inputs.policy()?.evaluate();
    });
    checker.on('failOpen', onFailOpen);
    const onDamping = contain((d: DampingChange): void => {
      logDamping(log, d);
      inputs.policy()?.evaluate();
    });
    checker.on('damping', onDamping);
    own.defer('health subscriptions', () => {
      checker.off('change', onChange);
      checker.off('verdict', onVerdict);
      checker.off('failOpen', onFailOpen);
      checker.off('damping', onDamping);
    });
    const direct = local !== null && local.mode === 'ebpf';
    let watch = startPassiveDetection(config, checker, log, direct, inputs.vipsHeldSince);
    own.defer('passive detection', () => watch?.stop());
    if (local?.mode === 'ebpf' && !(config.vrrp !== null && config.dataplane.vip === 'nftables')) {
      log.info(
        {},
        'dead backends of the local endpoint are seen at once from conntrack events only where connection tracking is active in this network namespace (kube-proxy or an nftables NAT rule turn it on); otherwise they leave after fall × interval of failed checks',
      );
    }
    // the endpoint exists (with no backend yet: connect()s untouched) before the first check
    await inputs.localLb()?.sync();
    checker.start();
    own.defer('health checks', () => checker.stop());
    inputs.policy()?.evaluate();
    const reconfigure = async ({ has, next }: Change): Promise<void> => {
      // kept backends keep their state
      if (has('apiserver.health')) checker.reconfigure(next.apiserver.health);
      if (PASSIVE.some(has)) {
        watch?.stop();
        watch = startPassiveDetection(next, checker, log, direct, inputs.vipsHeldSince);
      }
    };
    return { reconfigure };
  });
}

/**
 * Passive detection from conntrack events (ctnetlink, read in the agent: no child process):
 * flows DNATed from the VIPs (nftables data plane) and, with the ebpf local endpoint, flows
 * straight to the backends (the connect() rewrite leaves no NAT to see). Needs connection
 * tracking active in this network namespace (it is wherever an nftables NAT rule or kube-proxy runs).
 */
function startPassiveDetection(
  config: Config,
  checker: HealthChecker,
  log: Logger,
  direct: boolean,
  vipsHeldSince: (() => number | null) | undefined,
): ConntrackWatch | null {
  const vipPath = config.vrrp !== null && config.dataplane.vip === 'nftables';
  if (!vipPath && !direct) return null;
  const api = config.apiserver;
  const tracker = new FlowTracker(
    vipPath ? config.vips : [],
    api.port,
    Math.max(200, Math.min(1000, api.health.timeoutMs)),
    direct ? api.backends : [],
    vipsHeldSince,
  );
  // one line per burst (lost events; a dead backend's repeated verdicts, per backend), then one per window with the count
  const limited = new RateLimitedLog(pinoSink(log));
  return watchConntrack(tracker, passiveVerdictHandler(checker, limited), {
    onExit: (code, err) =>
      log.warn({ code, err }, 'conntrack event watch ended: passive detection is off (it needs CAP_NET_ADMIN and ctnetlink, module nf_conntrack_netlink)'),
    // a burst overflowed the socket buffer: some flows are not followed; active checks still are
    onLost: () => void limited.log('warn', 'lost', {}, 'conntrack events were lost (receive buffer full); passive detection missed some connections'),
  });
}

/** The line passive detection writes when it judges a backend dead (docs/health.md). */
export const PASSIVE_DEAD_MESSAGE = 'backend judged dead from its connections';

/**
 * What passive detection does with each verdict: an answered SYN is noted, a refused or
 * unanswered one takes the backend down at once (markDead: the planes reset it). A backend that
 * is down keeps refusing every new connection the holder still sends it, so its verdicts repeat
 * (one a second with an active client): the line is rate-limited per backend in `limited` (the
 * first, then one summary with the count per window; ratelimit.ts), not written per verdict.
 * @param limited the passive watch's rate limiter (warn lines, key `dead <host:port>`).
 */
export function passiveVerdictHandler(checker: Pick<HealthChecker, 'markDead' | 'noteAnswered'>, limited: RateLimitedLog): (v: PassiveVerdict) => void {
  return (v) => {
    // its kernel answers SYNs: an active check's connect timeout is then a full accept queue, not a death
    if (v.alive) return checker.noteAnswered(v.backend);
    // a dead verdict follows (also for a backend already draining); the planes reset it
    if (!checker.markDead(v.backend, { kind: 'passive', signal: v.signal }, v.reason)) return;
    const backend = formatHostPort(v.backend);
    limited.log('warn', `dead ${backend}`, { backend, reason: v.reason }, PASSIVE_DEAD_MESSAGE);
  };
}

/** The log messages of fail open (docs/health.md), by what happened. */
export const FAIL_OPEN_MESSAGES = {
  start: 'every backend turned unready at once; keeping the last ready set (fail open)',
  passed: 'a backend passes again; fail open ends',
  gone: 'fail open ends: every backend it kept is dead or left the set',
  disabled: 'fail open ends: apiserver.health.failOpen was turned off',
} as const;

/** The log messages of flap damping (docs/health.md), by event kind. */
export const DAMPING_MESSAGES = {
  start: 'backend flaps: held out of the data planes (damped)',
  extend: 'damped backend changed again: held out longer',
  end: 'backend damping ends',
} as const;

/** One line for a fail-open start (warn) or end (info; warn when every kept backend died). */
function logFailOpen(log: Logger, c: FailOpenChange): void {
  const fields = { family: c.family, kept: c.kept.map(formatHostPort), since: new Date(c.since).toISOString() };
  if (c.active) log.warn(fields, FAIL_OPEN_MESSAGES.start);
  else log[c.reason === 'gone' ? 'warn' : 'info']({ ...fields, reason: c.reason, durationMs: c.at - c.since }, FAIL_OPEN_MESSAGES[c.reason ?? 'passed']);
}

/** One line per damping event: start (warn), a longer hold (info), end (info). */
function logDamping(log: Logger, d: DampingChange): void {
  const backend = formatHostPort(d.backend);
  const e = d.event;
  if (e.kind === 'end') log.info({ backend, heldMs: e.heldMs }, DAMPING_MESSAGES.end);
  else if (e.kind === 'start')
    log.warn({ backend, until: new Date(e.until).toISOString(), holdMs: e.holdMs, holdLevel: e.level, transitions: e.transitions }, DAMPING_MESSAGES.start);
  else log.info({ backend, until: new Date(e.until).toISOString(), holdMs: e.holdMs, holdLevel: e.level }, DAMPING_MESSAGES.extend);
}
