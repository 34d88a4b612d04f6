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
 *
 * Reload (SIGHUP, POST /reload, {@link Agent.reload}): the new config is compared with the
 * running one (reload-plan.ts) and only the difference is applied, section by section; a phase
 * that must be re-run takes its old one's slot on the stack (CleanupStack.replace), so a stop
 * still unwinds in start-up order reversed. Reloads run one at a time; one asked for during
 * start-up waits for it, one asked for during a stop is refused.
 */
import { formatHostPort } from '../net/hostport.js';
import type { Config, LogLevel } from '../config/index.js';
import { ConfigError, isBallastError } from '../errors.js';
import { HealthChecker } from '../health/checker.js';
import { seedAndLastKnown } from '../discovery/lastknown.js';
import { ReloadUnavailable } from '../observe/admin.js';
import type { Logger } from '../observe/log.js';
import { statusDocument, type ReloadResult, type StatusDocument } from '../observe/status.js';
import { startAdminPhase, type AdminPhase } from './admin.js';
import { startElection, updateMembership, type ElectionPhase } from './election.js';
import { startDiscovery, type DiscoveryPhase } from './discovery.js';
import { startHealth, type HealthFollowers, type HealthPhase } from './health.js';
import { startLocalEndpoint, type LocalEndpointPhase } from './local-endpoint.js';
import { throwIfAborted, type AgentContext, type PhaseHandle } from './phase.js';
import { checkBindAddresses, listAllInterfaces, preflight, readAuthKeys, resolveInterface, type LockSwap, type Preflight, type ResolvedInterface } from './preflight.js';
import { startPriority, type PriorityPhase } from './priority.js';
import { describePlan, planReload, RESTART, type ReloadPlan } from './reload-plan.js';
import { CleanupStack } from './stack.js';
import { dataplaneStatus, startVipDataplane, type VipDataplanePhase } from './vip-dataplane.js';

export { acquireEndpointLock, acquireInstanceLock, acquireVipLock, missingCapabilities, resolveInterface } from './preflight.js';
export { backendsOfNode } from './health.js';
export { CleanupStack } from './stack.js';
export { planReload, type ReloadPlan } from './reload-plan.js';

/** A running agent. */
export interface Agent {
  /** The current /status document. */
  status(): Promise<StatusDocument>;
  /** Clean stop: priority 0 if Active, VIPs removed, admin closed. Idempotent. */
  stop(): Promise<void>;
  /**
   * Applies `next` (a validated Config): only its difference from the running one (see
   * reload-plan.ts). Waits for the start-up and for a reload under way. Never rejects for a
   * refused or failed reload: the result says so (`ok: false`, `problems`), the running state
   * stays, and it is the last reload of /status.
   * @throws ReloadUnavailable when the agent is stopping.
   */
  reload(next: Config): Promise<ReloadResult>;
  /**
   * Reads the configuration file again (startAgent's `load`) and applies it as {@link reload};
   * an invalid file changes nothing: each problem is logged as `ballast validate` prints it.
   * @param trigger what asked for it (for the log and the result).
   * @throws ReloadUnavailable when the agent is stopping, or was started without `load`.
   */
  reloadFile(trigger: 'signal' | 'admin'): Promise<ReloadResult>;
  /** Resolves when the agent has stopped for good (by stop() or a fatal error), with the exit status. */
  readonly done: Promise<number>;
}

/** What the phases that run expose to /status. */
interface Running {
  preflight: Preflight | null;
  /** The election's interface and source address (preflight's, or a hand-over's); null without an election. */
  resolved: ResolvedInterface | null;
  admin: AdminPhase | null;
  local: LocalEndpointPhase | null;
  vipDataplane: VipDataplanePhase | null;
  election: ElectionPhase | null;
  priority: PriorityPhase | null;
  health: HealthPhase | null;
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
export async function startAgent(
  config: Config,
  log: Logger,
  opts: { signal?: AbortSignal; load?: () => Config; source?: string; logLevel?: LogLevel } = {},
): Promise<Agent> {
  const stack = new CleanupStack(log);
  const cancel = new AbortController();
  const running: Running = { preflight: null, resolved: null, admin: null, local: null, vipDataplane: null, election: null, priority: null, health: null, discovery: null };
  const reloads = { current: config, last: null as ReloadResult | null, lastSuccessAt: new Date().toISOString(), queue: Promise.resolve() as Promise<unknown> };
  const followers: HealthFollowers = { lb: null, localLb: null, balancing: null };
  // the seed plus the last-known set from the start: the discovery phase, which feeds the set
  // later, runs last; until then the planes must not drop what a restart inherited (the eBPF
  // local endpoint's map) for a seed whose nodes may all have been replaced
  const initial = config.discovery === null ? null : seedAndLastKnown(config.apiserver.backends, config.discovery.lastKnownFile);
  const checker = config.apiserver.backends.length > 0 ? new HealthChecker({ health: config.apiserver.health, backends: initial ?? config.apiserver.backends, logger: log }) : null;

  let finish!: (code: number) => void;
  const done = new Promise<number>((r) => (finish = r));
  let stopping: Promise<void> | null = null;
  let started: Promise<void> = Promise.resolve();
  /** The one way down: cancel the start, let the phase under way settle, unwind, exit `code`. */
  const stopWith = (code: number): Promise<void> => {
    stopping ??= (async () => {
      cancel.abort();
      await started.catch(() => undefined);
      // a reload under way finishes first (its phase starts see the abort and stop early)
      await reloads.queue.catch(() => undefined);
      log.info(running.election ? 'stopping: resigning (priority 0) if master, removing the VIPs' : 'stopping');
      await stack.unwind();
      log.info('stopped');
      finish(code);
    })();
    return stopping;
  };
  const ctx: AgentContext = { log, signal: cancel.signal, fail: (code) => void stopWith(code) };

  const status = (): Promise<StatusDocument> => statusOf(reloads.current, checker, followers, running, { last: reloads.last, lastSuccessAt: reloads.lastSuccessAt });

  /** One reload at a time, after the start-up; `get` gives the config (or throws why not). */
  const enqueue = (trigger: ReloadResult['trigger'], get: () => Config, source?: string): Promise<ReloadResult> => {
    if (stopping) return Promise.reject(new ReloadUnavailable('the agent is stopping; the configuration was not reloaded'));
    const run = async (): Promise<ReloadResult> => {
      await started;
      if (stopping) throw new ReloadUnavailable('the agent is stopping; the configuration was not reloaded');
      const r = await runReload(ctx, reloads.current, get, { stack, running, followers, checker, status, reload: reloadAdmin, logLevel: opts.logLevel, trigger, source });
      reloads.last = r.result;
      if (r.ok) {
        reloads.current = r.config!;
        reloads.lastSuccessAt = r.result.at;
      }
      return r.result;
    };
    const p = reloads.queue.then(run, run);
    reloads.queue = p.catch(() => undefined);
    return p;
  };
  const reloadFile = (trigger: 'signal' | 'admin'): Promise<ReloadResult> => {
    const { load } = opts;
    if (!load) return Promise.reject(new ReloadUnavailable('this agent was started without a configuration file to reload'));
    return enqueue(trigger, load, opts.source);
  };
  const reloadAdmin = (): Promise<ReloadResult> => reloadFile('admin');

  const onAbort = (): void => void stopWith(0);
  // started first: a stop (also one requested before startAgent) waits for the phase under way
  started = startPhases(ctx, config, { stack, running, followers, checker, status, reload: opts.load ? reloadAdmin : undefined });
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
  return { status, stop: () => stopWith(0), done, reload: (next) => enqueue('api', () => next), reloadFile };
}

/**
 * The phases in order, whichever the config asks for; each one's undo goes on `stack` as soon as
 * it has started, and a stop is checked for before and after each.
 * @throws StartAborted when ctx.signal is aborted; a phase's error otherwise.
 */
async function startPhases(
  ctx: AgentContext,
  config: Config,
  deps: PhaseDeps,
): Promise<void> {
  const { stack, running, followers, checker, status, reload } = deps;
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
  running.resolved = pre.resolved;
  stack.defer(pre.phase, () => pre.undo());
  throwIfAborted(ctx.signal);
  running.admin = await phase(() => startAdminPhase(ctx, config, { status, ...(reload ? { reload } : {}) }));
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
    if (checker && pre.tables) running.vipDataplane = await phase(() => startVipDataplane(ctx, config, { iface, checker, followers, tables: pre.tables! }));
    const election = (running.election = await phase(() => startElection(ctx, config, { resolved: pre.resolved!, authKeys: pre.authKeys, checker, followers })));
    if (checker) running.priority = await phase(() => startPriority(ctx, config, { iface, host: election.host, checker, followers, dataplaneReady: dataplaneReady(config, followers) }));
  } else {
    log.info({ localEndpoint: local?.status().endpoints ?? [], mode: local?.mode ?? 'off', backends: config.apiserver.backends.length, admin, node: process.version }, 'starting (no election: local endpoint only)');
  }
  if (checker) running.health = await phase(() => startHealth(ctx, config, { checker, followers, local }));
  // discovery: owns the checker's backend set (seed, EndpointSlices, last-known file)
  if (checker) {
    running.discovery = await phase(() => startDiscovery(ctx, config, { checker, followers, election: () => running.election }));
  }
}

/** What the phases (and a reload) are given. */
interface PhaseDeps {
  stack: CleanupStack;
  running: Running;
  followers: HealthFollowers;
  checker: HealthChecker | null;
  status: () => Promise<StatusDocument>;
  /** POST /reload's handler (absent: the agent has no file to reload). */
  reload: (() => Promise<ReloadResult>) | undefined;
}

/** Whether the VIP data plane can serve (it started, or there is none): the policy's input. */
function dataplaneReady(config: Config, followers: HealthFollowers): boolean {
  return config.dataplane.vip === 'none' || followers.lb !== null;
}

/** A reload's outcome, with the config it applied (when ok). */
interface ReloadOutcome {
  ok: boolean;
  result: ReloadResult;
  config?: Config;
}

/** Each problem of a refused reload, as `ballast validate` prints it (ConfigError), or the error's own words. */
function problemsOf(err: unknown): string[] {
  if (err instanceof HandoverFailed) return [...problemsOf(err.cause), err.outcome];
  if (err instanceof ConfigError) return err.problemLines();
  if (isBallastError(err)) return [`${err.message} (${err.code})`];
  return [err instanceof Error ? err.message : String(err)];
}

/**
 * One reload: gets the next config (`get` throws a ConfigError for an invalid file), plans it
 * against `cur`, refuses what it cannot apply, applies the rest, and logs one line saying what
 * changed and what was done (plus, for an invalid file, one line per problem).
 * Never rejects: a failure is an outcome with ok false.
 */
async function runReload(
  ctx: AgentContext,
  cur: Config,
  get: () => Config,
  deps: PhaseDeps & { logLevel: LogLevel | undefined; trigger: ReloadResult['trigger']; source: string | undefined },
): Promise<ReloadOutcome> {
  const { log } = ctx;
  const t0 = performance.now();
  const result = (ok: boolean, o: { problems?: string[]; plan?: ReloadPlan; actions?: string[] }): ReloadResult => ({
    ok,
    at: new Date().toISOString(),
    trigger: deps.trigger,
    ...(deps.source === undefined ? {} : { source: deps.source }),
    problems: o.problems ?? [],
    changed: [...(o.plan?.changed ?? [])],
    actions: o.actions ?? [],
    handover: (o.plan?.handover.length ?? 0) > 0 && ok,
    durationMs: Math.round((performance.now() - t0) * 10) / 10,
  });
  let next: Config;
  try {
    next = get();
  } catch (err) {
    const problems = problemsOf(err);
    // each problem on a line of its own, in validate's words
    for (const p of problems) log.error({ trigger: deps.trigger, ...(deps.source ? { source: deps.source } : {}) }, `reload: ${p}`);
    const r = result(false, { problems });
    log.error({ trigger: deps.trigger, problems, durationMs: r.durationMs }, 'configuration reload failed: the file is invalid; nothing changed');
    return { ok: false, result: r };
  }
  const plan = planReload(cur, next);
  if (plan.restart.length > 0) {
    const problems = plan.restart.map((p) => `${p}: a reload cannot change ${RESTART[p] ?? 'this setting'}; restart the agent to apply it`);
    const r = result(false, { problems, plan });
    log.error({ trigger: deps.trigger, changed: plan.changed, problems, durationMs: r.durationMs }, 'configuration reload refused: it changes settings only a restart applies; nothing changed');
    return { ok: false, result: r };
  }
  try {
    await applyPlan(ctx, cur, next, plan, deps);
  } catch (err) {
    const problems = problemsOf(err);
    const r = result(false, { problems, plan });
    log.error({ trigger: deps.trigger, changed: plan.changed, problems, durationMs: r.durationMs }, 'configuration reload failed; the running state stays (what was applied before the failure is listed in the log above)');
    return { ok: false, result: r };
  }
  const actions = describePlan(plan);
  const r = result(true, { plan, actions });
  log.info({ trigger: deps.trigger, changed: plan.changed, actions, handover: r.handover, durationMs: r.durationMs }, plan.changed.length === 0 ? 'configuration reloaded: nothing changed' : 'configuration reloaded');
  return { ok: true, result: r, config: next };
}

/**
 * Carries `plan` out. First what can fail because of the host (the locks of added VIPs, a
 * hand-over's interface, keys and instance lock): a failure there changes nothing. Then, in
 * order: log level, the checker (backends, settings), the VIP data plane for the union of old and
 * new VIPs (an added VIP is balanced before it is added), the election (patch, or hand-over), the
 * VIP data plane for the new VIPs only, the policy, passive detection, the local endpoint, admin.
 * @throws the first failure (BallastError, or the engine's Error).
 */
async function applyPlan(ctx: AgentContext, cur: Config, next: Config, plan: ReloadPlan, deps: PhaseDeps & { logLevel: LogLevel | undefined }): Promise<void> {
  const { log } = ctx;
  const { running, checker, followers, stack } = deps;
  const locks = running.preflight?.locks ?? null;
  const handover = plan.handover.length > 0;

  // 1. what may fail because of the host: nothing has changed yet
  const swaps: LockSwap[] = [];
  /** Gives up the new locks (hand-over): the old ones are still held. */
  const abortLocks = (): void => {
    for (const s of swaps) s.abort();
    if (locks && plan.vips.added.length > 0) locks.releaseVips(plan.vips.added);
  };
  let resolved = running.resolved;
  let authKeys = running.preflight?.authKeys ?? null;
  if (handover || plan.admin || plan.localEndpoint) {
    const all = await listAllInterfaces();
    checkBindAddresses(next, all);
    if (handover) {
      resolved = resolveInterface(next, all);
      authKeys = next.vrrp!.auth ? readAuthKeys(next.vrrp!.auth.keyFile) : null;
      if (locks) swaps.push(await locks.instance(resolved.iface.ifname, next.family, next.vrrp!.vrid));
    }
  }
  try {
    // the VIP data plane moves to the other family: its table lock (another ballast may program that table)
    if (locks && plan.vipFamily) swaps.push(await locks.table(plan.vipFamily.to));
    if (locks && plan.vips.added.length > 0) await locks.addVips(plan.vips.added);
  } catch (err) {
    // addVips took none of the VIPs when it throws; the new instance / table locks go
    for (const s of swaps) s.abort();
    throw err;
  }

  // 2. at once
  if (plan.logLevel) log.level = deps.logLevel ?? next.log.level;

  // 3. the checker: kept backends keep their state
  if (checker && plan.health) checker.reconfigure(next.apiserver.health);
  if (running.discovery && (plan.backends || plan.discovery)) await running.discovery.reconfigure(next);
  else if (checker && plan.backends) await applySeedBackends(checker, next, followers);

  // 4. an added VIP is balanced before it is on the interface; a removed one until it is gone
  const iface = resolved?.iface;
  const union = [...new Set([...cur.vips, ...next.vips])];
  if (plan.vipDataplane && running.vipDataplane && iface && plan.vips.added.length > 0) await running.vipDataplane.reconfigure(next, union, iface);

  // 5. the election
  if (handover && resolved) {
    try {
      await handOver(ctx, cur, next, resolved, authKeys, deps, plan);
    } catch (err) {
      // the old group was rejoined (or the agent exits): its locks and backends are the ones in force
      abortLocks();
      if (checker && (plan.backends || plan.discovery)) {
        if (running.discovery) await running.discovery.reconfigure(cur).catch(() => undefined);
        else await applySeedBackends(checker, cur, followers);
      }
      throw err;
    }
    for (const s of swaps) s.commit();
    running.resolved = resolved;
  } else if (plan.election && running.election) {
    // from the next advert; rejects (nothing changed) when the engine refuses it
    await running.election.reconfigure(plan.election);
  }
  if (plan.membership && !handover && running.election) await updateMembership(running.election, { config: next }, log);
  if (locks && plan.vips.removed.length > 0) locks.releaseVips(plan.vips.removed);

  // 6. the VIP data plane for exactly the new VIPs
  if (plan.vipDataplane && running.vipDataplane && iface) await running.vipDataplane.reconfigure(next, next.vips, iface);

  // 7. the policy (a hand-over started a new one with `next` already)
  if (plan.policy && !handover) running.priority?.reconfigure(next);

  // 8. passive detection follows the new flows
  if (plan.passive) await running.health?.restartPassive(next);

  // 9. the local endpoint: the phase re-run in its slot
  if (plan.localEndpoint && running.local && checker && running.preflight) {
    const old = stack.replace('local endpoint', null);
    await old?.();
    running.local = null;
    const h = await startLocalEndpoint(ctx, next, { checker, followers, ebpf: running.preflight.ebpf });
    stack.replace('local endpoint', () => h.undo());
    running.local = h;
    await followers.localLb?.sync();
    log.info({ endpoints: h.local.status().endpoints, mode: h.local.mode }, 'reload: local endpoint re-run');
  }

  // 10. admin: the new listener replaces the old one (which answers the POST /reload under way)
  if (plan.admin && running.admin) {
    const old = running.admin;
    await old.release();
    const start = (c: Config): Promise<AdminPhase> => startAdminPhase(ctx, c, { status: deps.status, ...(deps.reload ? { reload: deps.reload } : {}) });
    let h: AdminPhase;
    try {
      h = await start(next);
    } catch (err) {
      // back on the old address, so the agent can still be asked
      const back = await start(cur).catch(() => null);
      stack.replace('admin', back ? () => back.undo() : null);
      running.admin = back;
      throw err;
    }
    stack.replace('admin', () => h.undo());
    running.admin = h;
    log.info({ admin: formatHostPort(next.admin.listen) }, 'reload: admin endpoint re-run');
  }
}

/**
 * The backend set of the checker follows the config's seed list (`apiserver.backends`). The
 * discovery phase (src/agent/discovery.ts) takes this over when it exists: then it gets the new
 * seed instead. The data planes re-sync (setBackends emits nothing for a removed backend).
 */
async function applySeedBackends(checker: HealthChecker, next: Config, followers: HealthFollowers): Promise<void> {
  checker.setBackends(next.apiserver.backends);
  await Promise.all([followers.lb?.sync(), followers.localLb?.sync()]);
  followers.balancing?.evaluate();
}

/**
 * A hand-over that did not go through: the failure (`cause`) and what was done about it
 * (`outcome`: the old group rejoined, or the agent exits), both in the reload's problems.
 */
class HandoverFailed extends Error {
  override name = 'HandoverFailed';
  constructor(
    override readonly cause: unknown,
    readonly outcome: string,
  ) {
    super(cause instanceof Error ? cause.message : String(cause));
  }
}

/**
 * A change of group membership (VRID, interface, family, checksum, auth, mode): the election
 * phase stops (priority 0 if Active, VIPs removed) and starts again with `next`, in its slot;
 * the policy follows the new engine. A family change under the nftables VIP data plane
 * (plan.vipFamily) re-runs that plane in its slot between the two: the old family's table goes
 * (unless keepOnStop is all), the new family's is programmed (the caller holds its lock).
 * When a step fails, the old config's data plane and election are started again and a
 * HandoverFailed thrown; when that fails too, the agent exits (ctx.fail(1)).
 * @throws HandoverFailed (its cause: BallastError, or the engine's Error).
 */
async function handOver(
  ctx: AgentContext,
  cur: Config,
  next: Config,
  resolved: ResolvedInterface,
  authKeys: Buffer[] | null,
  deps: PhaseDeps,
  plan: ReloadPlan,
): Promise<void> {
  const { log } = ctx;
  const { running, stack, checker, followers } = deps;
  const old = running.resolved!;
  const tables = running.preflight?.tables ?? null;
  log.warn(
    { changed: plan.handover, from: { vrid: cur.vrrp!.vrid, interface: old.iface.ifname, family: cur.family }, to: { vrid: next.vrrp!.vrid, interface: resolved.iface.ifname, family: next.family }, ...(plan.vipFamily ? { vipDataplane: plan.vipFamily } : {}) },
    'reload: hand-over: leaving the group (priority 0 if master, VIPs removed) and joining the new one',
  );
  const oldPolicy = stack.replace('election policy', null);
  running.priority = null;
  await oldPolicy?.();
  const oldElection = stack.replace('election', null);
  running.election = null;
  await oldElection?.();
  /** The VIP data plane for `c`'s family, in its slot (the other family's table removed first). */
  const movePlane = async (c: Config, r: ResolvedInterface): Promise<void> => {
    const undo = stack.replace('VIP data plane', null);
    running.vipDataplane = null;
    await undo?.();
    const from = tables!.family;
    tables!.retarget(c.family);
    const h = await startVipDataplane(ctx, c, { iface: r.iface, checker: checker!, followers, tables: tables! });
    stack.replace('VIP data plane', () => h.undo());
    running.vipDataplane = h;
    log.info({ from, to: c.family, removed: c.dataplane.keepOnStop === 'all' ? null : `table ${from === 4 ? 'ip' : 'ip6'} ballast`, table: `${c.family === 4 ? 'ip' : 'ip6'} ballast` }, 'reload: hand-over: VIP data plane moved to the new family');
  };
  const start = async (c: Config, r: ResolvedInterface, keys: Buffer[] | null): Promise<void> => {
    if (plan.vipFamily && checker && tables && tables.family !== c.family) await movePlane(c, r);
    const e = await startElection(ctx, c, { resolved: r, authKeys: keys, checker, followers });
    stack.replace('election', () => e.undo());
    running.election = e;
    // the new group hears of the members discovery found, as the old one had
    if (running.discovery && c.discovery !== null) await updateMembership(e, { discovered: running.discovery.members() }, log).catch(() => undefined);
    if (checker) {
      const p = await startPriority(ctx, c, { iface: r.iface, host: e.host, checker, followers, dataplaneReady: dataplaneReady(c, followers) });
      stack.replace('election policy', () => p.undo());
      running.priority = p;
      followers.balancing?.evaluate();
    }
  };
  try {
    await start(next, resolved, authKeys);
  } catch (err) {
    log.error({ err: (err as Error).message }, 'reload: hand-over: the new group could not be joined; rejoining with the running configuration');
    // whatever of the new group started goes first (its slots are refilled by the rejoin)
    for (const slot of ['election policy', 'election'] as const) {
      const undo = stack.replace(slot, null);
      await undo?.();
    }
    running.priority = null;
    running.election = null;
    const back = `rejoined the old group (VRID ${cur.vrrp!.vrid}, ${old.iface.ifname}, IPv${cur.family}) with the running configuration`;
    try {
      await start(cur, old, running.preflight?.authKeys ?? null);
    } catch (e2) {
      log.fatal({ err: (e2 as Error).message }, "reload: hand-over: the running configuration's election did not start again either; exiting");
      ctx.fail(1);
      throw new HandoverFailed(err, `hand-over failed; rejoining the old group failed too (${(e2 as Error).message}): the agent exits`);
    }
    log.warn({ vrid: cur.vrrp!.vrid, interface: old.iface.ifname, family: cur.family }, `reload: hand-over: ${back}`);
    throw new HandoverFailed(err, `hand-over failed: ${back}`);
  }
  log.info({ vrid: next.vrrp!.vrid, interface: resolved.iface.ifname, family: next.family }, 'reload: hand-over: joined the group');
}

/** The /status document, from the phases that run. @throws Error while the election is not running. */
async function statusOf(config: Config, checker: HealthChecker | null, followers: HealthFollowers, running: Running, reload: StatusDocument['reload']): Promise<StatusDocument> {
  const sources = running.discovery?.sources();
  const stats = running.discovery?.stats() ?? null;
  const common = {
    ...(reload ? { reload } : {}),
    backends: (checker?.snapshot() ?? []).map((b) => ({ ...b, source: sources?.get(b.address) ?? ('seed' as const) })),
    ...(stats === null ? {} : { discovery: stats }),
    dataplane: dataplaneStatus(config, followers.lb ? { ...followers.lb.plane.status(), ...followers.lb.status() } : null),
    local: followers.localLb ? { ...followers.localLb.plane.status(), ...followers.localLb.status() } : { mode: 'off' as const, reason: config.localEndpoint === null ? 'no localEndpoint configured' : 'dataplane.local: off' },
  };
  const fixed = electionFacts(config, running.resolved);
  if (!fixed) return { state: 'none', ...common };
  if (!running.election) throw new Error('the election engine is not running');
  return statusDocument(await running.election.host.status(), fixed, common);
}

/** The parts of /status that do not change while the election runs; null without an election. */
function electionFacts(config: Config, resolved: ResolvedInterface | null) {
  const v = config.vrrp;
  if (!v || !resolved) return null;
  return {
    vips: [...config.vips],
    interface: resolved.iface.ifname,
    family: config.family,
    primaryAddress: resolved.primary,
    unicast: v.unicast,
    peers: v.peers,
    auth: v.auth !== null,
    advertisementIntervalMs: v.advertisementIntervalMs,
  };
}
