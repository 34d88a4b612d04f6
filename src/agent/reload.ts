/**
 * Reload (SIGHUP, POST /reload, Agent.reload): the next config is compared with the running one
 * (reload-plan.ts) and only the difference is applied, section by section; a phase that must be
 * re-run takes its old one's slot on the stack (CleanupStack.replace), so a stop still unwinds in
 * start-up order reversed. A change of group membership is a hand-over: the election leaves the
 * old group (priority 0 if Active) and joins the new one. docs/reload.md.
 */
import { startConnectionSync, type ConnectionSyncPhase } from './connection-sync.js';
import type { BgpPhase } from './bgp.js';
import type { Config, LogLevel } from '../config/index.js';
import { ConfigError, isBallastError } from '../errors.js';
import type { HealthChecker } from '../health/checker.js';
import { formatHostPort } from '../net/hostport.js';
import type { ReloadResult, StatusDocument } from '../observe/status.js';
import { startAdminPhase, type AdminPhase } from './admin.js';
import { startElection, updateMembership, type ElectionPhase } from './election.js';
import type { DiscoveryPhase } from './discovery.js';
import type { HealthFollowers, HealthPhase } from './health.js';
import { startLocalEndpoint, type LocalEndpointPhase } from './local-endpoint.js';
import type { AgentContext } from './phase.js';
import { listAllInterfaces } from '../host/interfaces.js';
import type { LockSwap } from '../host/locks.js';
import { checkBindAddresses, readAuthKeys, resolveInterface, type Preflight, type ResolvedInterface } from './preflight.js';
import { startPriority, type PriorityPhase } from './priority.js';
import { describePlan, planReload, RESTART, type ReloadPlan } from './reload-plan.js';
import type { CleanupStack } from './stack.js';
import { startVipDataplane, type VipDataplanePhase } from './vip-dataplane.js';

/** What the phases that run expose to /status. */
export interface Running {
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
  /** mode: bgp's phase (agent/bgp.ts); null otherwise. */
  bgp?: BgpPhase | null;
  /** dataplane.connectionSync's conntrackd (agent/connection-sync.ts); null or absent when off. */
  connectionSync?: ConnectionSyncPhase | null;
}

/** What the phases (and a reload) are given. */
export interface PhaseDeps {
  stack: CleanupStack;
  running: Running;
  followers: HealthFollowers;
  checker: HealthChecker | null;
  status: () => Promise<StatusDocument>;
  /** Grows with every state, health or configuration change (observe/admin.ts: no answer rendered before it is served); absent in tests. */
  stamp?: () => unknown;
  /** POST /reload's handler (absent: the agent has no file to reload). */
  reload: (() => Promise<ReloadResult>) | undefined;
}

/** Whether the VIP data plane can serve (it started, or there is none): the policy's input. */
export function dataplaneReady(config: Config, followers: HealthFollowers): boolean {
  return config.dataplane.vip === 'none' || followers.lb !== null;
}

/** A reload's outcome, with the config it applied (when ok). */
export interface ReloadOutcome {
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
export async function runReload(
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
    log.error(
      { trigger: deps.trigger, changed: plan.changed, problems, durationMs: r.durationMs },
      'configuration reload refused: it changes settings only a restart applies; nothing changed',
    );
    return { ok: false, result: r };
  }
  try {
    await applyPlan(ctx, cur, next, plan, deps);
  } catch (err) {
    const problems = problemsOf(err);
    const r = result(false, { problems, plan });
    log.error(
      { trigger: deps.trigger, changed: plan.changed, problems, durationMs: r.durationMs },
      'configuration reload failed; the running state stays (what was applied before the failure is listed in the log above)',
    );
    return { ok: false, result: r };
  }
  const actions = describePlan(plan);
  const r = result(true, { plan, actions });
  log.info(
    { trigger: deps.trigger, changed: plan.changed, actions, handover: r.handover, durationMs: r.durationMs },
    plan.changed.length === 0 ? 'configuration reloaded: nothing changed' : 'configuration reloaded',
  );
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
  const { running, checker, followers } = deps;
  const locks = running.preflight?.locks ?? null;
  const handover = plan.handover.length > 0;

  // 1. what may fail because of the host: nothing has changed yet
  const { resolved, authKeys, swaps, abortLocks } = await takeReloadLocks(next, plan, running);

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
  if (plan.localEndpoint) await rerunLocalEndpoint(ctx, next, deps);
  // 10. admin: the new listener replaces the old one (which answers the POST /reload under way)
  if (plan.admin) await rerunAdmin(ctx, cur, next, deps);
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
    {
      changed: plan.handover,
      from: { vrid: cur.vrrp!.vrid, interface: old.iface.ifname, family: cur.family },
      to: { vrid: next.vrrp!.vrid, interface: resolved.iface.ifname, family: next.family },
      ...(plan.vipFamily ? { vipDataplane: plan.vipFamily } : {}),
    },
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
    log.info(
      {
        from,
        to: c.family,
        removed: c.dataplane.keepOnStop === 'all' ? null : `table ${from === 4 ? 'ip' : 'ip6'} ballast`,
        table: `${c.family === 4 ? 'ip' : 'ip6'} ballast`,
      },
      'reload: hand-over: VIP data plane moved to the new family',
    );
  };
  const start = async (c: Config, r: ResolvedInterface, keys: Buffer[] | null): Promise<void> => {
    if (plan.vipFamily && checker && tables && tables.family !== c.family) await movePlane(c, r);
    // conntrackd follows the group: its interface, VRID (its multicast port) and VIPs
    if (running.connectionSync) {
      const undo = stack.replace('connection sync', null);
      running.connectionSync = null;
      await undo?.();
      const cs = await startConnectionSync(ctx, c, { resolved: r });
      stack.replace('connection sync', () => cs.undo());
      running.connectionSync = cs;
    }
    const e = await startElection(ctx, c, { resolved: r, authKeys: keys, checker, followers, sync: running.connectionSync ?? null });
    stack.replace('election', () => e.undo());
    running.election = e;
    // the new group hears of the members discovery found, as the old one had
    if (running.discovery && c.discovery !== null) await updateMembership(e, { discovered: running.discovery.members() }, log).catch(() => undefined);
    if (checker) {
      const p = await startPriority(ctx, c, {
        iface: r.iface,
        host: e.host,
        checker,
        followers,
        dataplaneReady: dataplaneReady(c, followers),
        sync: running.connectionSync ?? null,
      });
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

/**
 * A reload's first step, before anything changes: the interfaces and bind addresses the next
 * config needs, and the locks it takes — a hand-over's instance lock (and its interface and
 * keys), the other family's table lock (plan.vipFamily), the added VIPs'.
 * @returns the election's interface and keys after the reload, the lock swaps to commit once
 *   the hand-over is done, and `abortLocks`, which gives the new locks back.
 * @throws BallastError (BALLAST_E_ALREADY_RUNNING, an interface or address problem): then
 *   nothing is held that was not held before.
 */
async function takeReloadLocks(
  next: Config,
  plan: ReloadPlan,
  running: Running,
): Promise<{ resolved: ResolvedInterface | null; authKeys: Buffer[] | null; swaps: LockSwap[]; abortLocks: () => void }> {
  const locks = running.preflight?.locks ?? null;
  const handover = plan.handover.length > 0;
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
  return { resolved, authKeys, swaps, abortLocks };
}

/** Re-runs the local endpoint phase with `next` in its stack slot. @throws the phase's BallastError. */
async function rerunLocalEndpoint(ctx: AgentContext, next: Config, deps: PhaseDeps): Promise<void> {
  const { running, checker, followers, stack } = deps;
  const { log } = ctx;
  if (!running.local || !checker || !running.preflight) return;
  const old = stack.replace('local endpoint', null);
  await old?.();
  running.local = null;
  const h = await startLocalEndpoint(ctx, next, { checker, followers, ebpf: running.preflight.ebpf });
  stack.replace('local endpoint', () => h.undo());
  running.local = h;
  await followers.localLb?.sync();
  log.info({ endpoints: h.local.status().endpoints, mode: h.local.mode }, 'reload: local endpoint re-run');
}

/**
 * Re-runs the admin phase on `next`'s address in its slot; the old listener (which answers the
 * POST /reload under way) is released first. When the new one cannot listen the old address is
 * taken again, so the agent can still be asked.
 * @throws BallastError BALLAST_E_ADMIN_LISTEN.
 */
async function rerunAdmin(ctx: AgentContext, cur: Config, next: Config, deps: PhaseDeps): Promise<void> {
  const { running, stack } = deps;
  const { log } = ctx;
  if (!running.admin) return;
  const old = running.admin;
  await old.release();
  const start = (c: Config): Promise<AdminPhase> =>
    startAdminPhase(ctx, c, { status: deps.status, ...(deps.stamp ? { stamp: deps.stamp } : {}), ...(deps.reload ? { reload: deps.reload } : {}) });
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
