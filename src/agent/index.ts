/**
 * The agent: start-up is a list of phases, each undone on one cleanup stack.
 *
 *   preflight ─► admin ─► local endpoint ─► VIP data plane ─► election ─► election policy ─► health ─► discovery
 *   (checks,     (/status)  (ebpf | proxy)   (nftables)        (VRRP       (priority from    (checks start,   (owns the
 *    locks)                                                      worker)     health)           passive          backend set)
 *                                                                                              detection)
 *
 * Stop, a failed start, a signal during start-up and the fatal events (the interface was
 * deleted, the election worker died) are the same thing: one unwind of the stack, last phase
 * first. Nothing on the system changes before preflight has checked the configuration against
 * the host. The local endpoint and the VIP data plane start before the election (a failure there
 * leaves the VIPs untouched) and are undone after it (a resigning master still serves).
 */
import { formatHostPort } from '../net/hostport.js';
import type { Config } from '../config/index.js';
import { HealthChecker } from '../health/checker.js';
import type { Logger } from '../observe/log.js';
import { statusDocument, type StatusDocument } from '../observe/status.js';
import { startAdminPhase } from './admin.js';
import { startElection, type ElectionPhase } from './election.js';
import { startDiscovery, type DiscoveryPhase } from './discovery.js';
import { startHealth, type HealthFollowers } from './health.js';
import { startLocalEndpoint, type LocalEndpointPhase } from './local-endpoint.js';
import { throwIfAborted, type AgentContext, type PhaseHandle } from './phase.js';
import { preflight, type Preflight } from './preflight.js';
import { startPriority } from './priority.js';
import { CleanupStack } from './stack.js';
import { dataplaneStatus, startVipDataplane } from './vip-dataplane.js';

export { acquireEndpointLock, acquireInstanceLock, acquireVipLock, missingCapabilities, resolveInterface } from './preflight.js';
export { backendsOfNode } from './health.js';
export { CleanupStack } from './stack.js';

/** A running agent. */
export interface Agent {
  /** The current /status document. */
  status(): Promise<StatusDocument>;
  /** Clean stop: priority 0 if Active, VIPs removed, admin closed. Idempotent. */
  stop(): Promise<void>;
  /** Resolves when the agent has stopped for good (by stop() or a fatal error), with the exit status. */
  readonly done: Promise<number>;
}

/** What the phases that run expose to /status. */
interface Running {
  preflight: Preflight | null;
  local: LocalEndpointPhase | null;
  election: ElectionPhase | null;
  discovery: DiscoveryPhase | null;
}

/**
 * Starts the agent: the phases in order (see the top of this file), whichever the config asks for.
 * @param opts.signal aborting it stops the agent: during start-up the phase under way finishes
 *   (or stops at its next check; an nft under way is killed), everything started is unwound, and
 *   the returned agent's `done` resolves 0 (startAgent itself resolves then, it does not reject).
 *   Preflight always runs, even when the signal was aborted before startAgent: its undo removes
 *   what a killed earlier run left (VIPs, tables, pins), which needs its locks.
 * @throws BallastError (see errors.ts) when a phase fails — in that case everything started was
 *   undone, except that VIPs left by an earlier run may have been removed.
 */
export async function startAgent(config: Config, log: Logger, opts: { signal?: AbortSignal } = {}): Promise<Agent> {
  const stack = new CleanupStack(log);
  const cancel = new AbortController();
  const running: Running = { preflight: null, local: null, election: null, discovery: null };
  const followers: HealthFollowers = { lb: null, localLb: null, balancing: null };
  const checker = config.apiserver.backends.length > 0 ? new HealthChecker({ health: config.apiserver.health, backends: config.apiserver.backends, logger: log }) : null;

  let finish!: (code: number) => void;
  const done = new Promise<number>((r) => (finish = r));
  let stopping: Promise<void> | null = null;
  let started: Promise<void> = Promise.resolve();
  /** The one way down: cancel the start, let the phase under way settle, unwind, exit `code`. */
  const stopWith = (code: number): Promise<void> => {
    stopping ??= (async () => {
      cancel.abort();
      await started.catch(() => undefined);
      log.info(running.election ? 'stopping: resigning (priority 0) if master, removing the VIPs' : 'stopping');
      await stack.unwind();
      log.info('stopped');
      finish(code);
    })();
    return stopping;
  };
  const ctx: AgentContext = { log, signal: cancel.signal, fail: (code) => void stopWith(code) };

  const status = (): Promise<StatusDocument> => statusOf(config, checker, followers, running);

  const onAbort = (): void => void stopWith(0);
  // started first: a stop (also one requested before startAgent) waits for the phase under way
  started = startPhases(ctx, config, { stack, running, followers, checker, status });
  if (opts.signal?.aborted) onAbort();
  else opts.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    await started;
  } catch (err) {
    // cancelled: stopWith is unwinding, and `done` tells when it is over
    if (!cancel.signal.aborted) {
      stopping = stack.unwind();
      await stopping;
      opts.signal?.removeEventListener('abort', onAbort);
      throw err;
    }
  }
  return { status, stop: () => stopWith(0), done };
}

/**
 * The phases in order, whichever the config asks for; each one's undo goes on `stack` as soon as
 * it has started, and a stop is checked for before and after each.
 * @throws StartAborted when ctx.signal is aborted; a phase's error otherwise.
 */
async function startPhases(
  ctx: AgentContext,
  config: Config,
  deps: { stack: CleanupStack; running: Running; followers: HealthFollowers; checker: HealthChecker | null; status: () => Promise<StatusDocument> },
): Promise<void> {
  const { stack, running, followers, checker, status } = deps;
  const { log } = ctx;
  /** Runs one phase and puts its undo on the stack; checks for a stop before and after. */
  const phase = async <H extends PhaseHandle>(start: () => Promise<H>): Promise<H> => {
    throwIfAborted(ctx.signal);
    const h = await start();
    stack.defer(h.phase, () => h.undo());
    throwIfAborted(ctx.signal);
    return h;
  };

  // preflight runs even when a stop came first: its undo is what removes a killed earlier run's
  // leftovers, and it needs the locks it takes to do that safely (see preflight.ts)
  const pre = (running.preflight = await preflight(ctx, config));
  stack.defer(pre.phase, () => pre.undo());
  throwIfAborted(ctx.signal);
  await phase(() => startAdminPhase(ctx, config, { status }));
  if (config.localEndpoint && config.dataplane.local !== 'off' && checker) {
    running.local = await phase(() => startLocalEndpoint(ctx, config, { checker, followers, ebpf: pre.ebpf }));
  }
  const local = running.local?.local ?? null;
  const admin = formatHostPort(config.admin.listen);
  // what ships and is tested is Node 24 (package.json engines); an older one is the operator's to know
  if (Number(process.versions.node.split('.')[0]) < 24) log.warn({ node: process.version }, 'ballast is tested on Node.js 24 LTS; this Node.js is older');
  const v = config.vrrp;
  if (v && pre.resolved) {
    const { iface, primary } = pre.resolved;
    log.info(
      { interface: iface.ifname, family: config.family, source: primary, vips: config.vips, vrid: v.vrid, priority: v.priority, advertisementIntervalMs: v.advertisementIntervalMs, mode: v.unicast ? 'unicast' : 'multicast', auth: v.auth !== null, localEndpoint: local?.status().endpoints ?? [], admin, node: process.version },
      'starting',
    );
    if (checker && pre.tables) await phase(() => startVipDataplane(ctx, config, { iface, checker, followers, tables: pre.tables! }));
    const election = (running.election = await phase(() => startElection(ctx, config, { resolved: pre.resolved!, authKeys: pre.authKeys, checker, followers })));
    if (checker) await phase(() => startPriority(ctx, config, { iface, host: election.host, checker, followers, dataplaneReady: config.dataplane.vip === 'none' || followers.lb !== null }));
  } else {
    log.info({ localEndpoint: local?.status().endpoints ?? [], mode: local?.mode ?? 'off', backends: config.apiserver.backends.length, admin, node: process.version }, 'starting (no election: local endpoint only)');
  }
  if (checker) await phase(() => startHealth(ctx, config, { checker, followers, local }));
  // discovery: owns the checker's backend set (seed, EndpointSlices, last-known file)
  if (checker) {
    running.discovery = await phase(() => startDiscovery(ctx, config, { checker, followers, election: running.election }));
  }
}

/** The /status document, from the phases that run. @throws Error while the election is not running. */
async function statusOf(config: Config, checker: HealthChecker | null, followers: HealthFollowers, running: Running): Promise<StatusDocument> {
  const sources = running.discovery?.sources();
  const stats = running.discovery?.stats() ?? null;
  const common = {
    backends: (checker?.snapshot() ?? []).map((b) => ({ ...b, source: sources?.get(b.address) ?? ('seed' as const) })),
    ...(stats === null ? {} : { discovery: stats }),
    dataplane: dataplaneStatus(config, followers.lb ? { ...followers.lb.plane.status(), ...followers.lb.status() } : null),
    local: followers.localLb ? { ...followers.localLb.plane.status(), ...followers.localLb.status() } : { mode: 'off' as const, reason: config.localEndpoint === null ? 'no localEndpoint configured' : 'dataplane.local: off' },
  };
  const fixed = electionFacts(config, running.preflight);
  if (!fixed) return { state: 'none', ...common };
  if (!running.election) throw new Error('the election engine is not running');
  return statusDocument(await running.election.host.status(), fixed, common);
}

/** The parts of /status that do not change while the election runs; null without an election. */
function electionFacts(config: Config, pre: Preflight | null) {
  const v = config.vrrp;
  if (!v || !pre?.resolved) return null;
  return {
    vips: [...config.vips],
    interface: pre.resolved.iface.ifname,
    family: config.family,
    primaryAddress: pre.resolved.primary,
    unicast: v.unicast,
    peers: v.peers,
    auth: v.auth !== null,
    advertisementIntervalMs: v.advertisementIntervalMs,
  };
}
