/**
 * Reload (SIGHUP, POST /reload, Agent.reload): the next config is compared with the running one
 * and every phase says, from its own table of settings (phase.ts {@link Setting}), what the
 * difference does to it. Only the difference is applied; the loop names no phase and no setting.
 *
 *   1. plan     each phase's reaction: the strongest of its changed settings'. A `restart`, or a
 *               changed setting no phase reads, refuses the whole reload: nothing changes.
 *   2. prepare  in order, the running phases that reconfigure: host checks, locks, serving the
 *               union of old and new. A failure gives back what was taken: nothing changed.
 *   3. apply    in order: `reconfigure` in place; a `rerun` undoes the phase and every later
 *               phase that uses its handle (last first) and starts them with the new config
 *               (first first). A re-run that fails is rolled back: what started of the new config
 *               is undone, the prepared steps are given back, and the old config's phases start
 *               again (when that fails too and a phase is essential, the agent exits).
 *   4. commit   in order: what the old config held is released (the removed VIPs' locks, the old
 *               group's), the planes narrowed to exactly the new config.
 *
 * docs/reload.md says what each setting does; docs/phases.md how a phase declares it.
 */
import type { Config } from '../config/index.js';
import { ConfigError, isBallastError } from '../errors.js';
import type { ReloadResult } from '../observe/status.js';
import { REACTION_RANK, type AgentContext, type Change, type PhaseHandle, type PhaseSpec, type Prepared, type Reaction, type Setting } from './phase.js';
import type { AnyPhaseEntry, PhaseList } from './phase-list.js';

/** A reload's outcome, with the config it applied (when ok). */
export interface ReloadOutcome {
  ok: boolean;
  result: ReloadResult;
  config?: Config;
}

/** What one reload does, derived from the two configs and the phases' tables (pure). */
export interface ReloadPlan {
  /** Every setting that differs, as a path (`vrrp.priority`, `vips`, `apiserver.health.intervalMs`), sorted. */
  readonly changed: readonly string[];
  /** Why it cannot be applied, one line per setting (non-empty: the reload is refused as a whole). */
  readonly refusals: readonly string[];
  /** Each phase's reaction, by name (phases with `same` left out). */
  readonly reactions: Readonly<Record<string, Reaction>>;
  /** What is done, in a few words per action, in the phases' order. */
  readonly actions: readonly string[];
  /** Whether a phase whose re-run is a hand-over re-runs. */
  readonly handover: boolean;
}

/** True when `path` is `prefix` or inside it ('' covers every path). */
function under(path: string, prefix: string): boolean {
  return prefix === '' || path === prefix || path.startsWith(`${prefix}.`);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * The paths of the settings that differ between `a` and `b`: objects are walked, everything else
 * (arrays included: a list is one setting) compared as JSON. A section present on one side only
 * (`vrrp`, `localEndpoint`) is one path.
 */
export function changedPaths(a: unknown, b: unknown, prefix = ''): string[] {
  if (isRecord(a) && isRecord(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => changedPaths(a[k], b[k], prefix === '' ? k : `${prefix}.${k}`));
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [prefix === '' ? '(document)' : prefix];
}

/** The change from `cur` to `next`. */
export function changeOf(cur: Config, next: Config): Change {
  const changed = changedPaths(cur, next);
  return { cur, next, changed, has: (path) => changed.some((p) => under(p, path)) };
}

/** The reaction of one setting to a change of `path` (null: the setting does not cover it). */
function reactionOf(s: Setting, change: Change, path: string): Reaction | null {
  if (s.exact ? path !== s.path : !under(path, s.path)) return null;
  return typeof s.on === 'function' ? s.on(change, path) : s.on;
}

/** What the plan reads of a phase: its table, and when it runs. */
export interface PlannedPhase {
  readonly spec: Pick<PhaseSpec<never, PhaseHandle>, 'name' | 'settings' | 'handover'>;
  when(config: Config): boolean;
}

/**
 * The plan for `change` over `phases` (every phase of the list, running or not: a setting is
 * judged by the phase that reads it; only running phases then act).
 */
export function planReload(phases: readonly PlannedPhase[], change: Change): ReloadPlan {
  const { cur, next, changed } = change;
  const refusals: string[] = [];
  const reactions: Record<string, Reaction> = {};
  const actions: string[] = [];
  for (const path of changed) {
    let claimed = false;
    for (const { spec } of phases) {
      for (const s of spec.settings) {
        const r = reactionOf(s, change, path);
        if (r === null || r === 'same') continue;
        if (r === 'restart') refusals.push(`${path}: a reload cannot change ${s.why ?? 'this setting'}; restart the agent to apply it`);
        else claimed = true;
        if (REACTION_RANK[r] > REACTION_RANK[reactions[spec.name] ?? 'same']) reactions[spec.name] = r;
      }
    }
    if (!claimed && !refusals.some((l) => l.startsWith(`${path}: `)))
      refusals.push(`${path}: a reload cannot change this setting; restart the agent to apply it`);
  }
  // a phase that would start or stop: only a restart does that
  for (const { spec, when } of phases) {
    if (when(cur) !== when(next) && !Object.values(reactions).includes('restart'))
      refusals.push(`${spec.name}: a reload cannot start or stop this phase; restart the agent to apply it`);
  }
  for (const { spec, when } of phases) {
    const r = reactions[spec.name];
    if ((r !== 'reconfigure' && r !== 'rerun') || !when(next)) continue;
    for (const s of spec.settings) {
      if (s.does === undefined || !changed.some((p) => reactionOf(s, change, p) === r)) continue;
      const said = typeof s.does === 'function' ? s.does(change) : s.does;
      for (const a of said === null ? [] : typeof said === 'string' ? [said] : said) if (!actions.includes(a)) actions.push(a);
    }
  }
  return {
    changed,
    refusals: [...new Set(refusals)],
    reactions,
    actions: changed.length === 0 ? ['nothing changed'] : actions,
    handover: phases.some(({ spec, when }) => spec.handover === true && reactions[spec.name] === 'rerun' && when(cur)),
  };
}

/**
 * Re-runs that did not go through: the failure (`cause`) and what was done about it
 * (`outcome`: the old config's phases run again, or the agent exits), both in the reload's problems.
 */
class RerunFailed extends Error {
  override name = 'RerunFailed';
  constructor(
    override readonly cause: unknown,
    readonly outcome: string,
  ) {
    super(cause instanceof Error ? cause.message : String(cause));
  }
}

/** Each problem of a refused reload, as `ballast validate` prints it (ConfigError), or the error's own words. */
function problemsOf(err: unknown): string[] {
  if (err instanceof RerunFailed) return [...problemsOf(err.cause), err.outcome];
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
export async function runReload<HS>(
  ctx: AgentContext,
  cur: Config,
  get: () => Config,
  list: PhaseList<HS>,
  opts: { trigger: ReloadResult['trigger']; source: string | undefined },
): Promise<ReloadOutcome> {
  const { log } = ctx;
  const t0 = performance.now();
  const result = (ok: boolean, o: { problems?: string[]; plan?: ReloadPlan }): ReloadResult => ({
    ok,
    at: new Date().toISOString(),
    trigger: opts.trigger,
    ...(opts.source === undefined ? {} : { source: opts.source }),
    problems: o.problems ?? [],
    changed: [...(o.plan?.changed ?? [])],
    actions: ok ? [...(o.plan?.actions ?? [])] : [],
    handover: (o.plan?.handover ?? false) && ok,
    durationMs: Math.round((performance.now() - t0) * 10) / 10,
  });
  let next: Config;
  try {
    next = get();
  } catch (err) {
    const problems = problemsOf(err);
    // each problem on a line of its own, in validate's words
    for (const p of problems) log.error({ trigger: opts.trigger, ...(opts.source ? { source: opts.source } : {}) }, `reload: ${p}`);
    const r = result(false, { problems });
    log.error({ trigger: opts.trigger, problems, durationMs: r.durationMs }, 'configuration reload failed: the file is invalid; nothing changed');
    return { ok: false, result: r };
  }
  const change = changeOf(cur, next);
  const plan = planReload(
    list.phases().map((p) => p.entry),
    change,
  );
  if (plan.refusals.length > 0) {
    const problems = [...plan.refusals];
    const r = result(false, { problems, plan });
    log.error(
      { trigger: opts.trigger, changed: plan.changed, problems, durationMs: r.durationMs },
      'configuration reload refused: it changes settings only a restart applies; nothing changed',
    );
    return { ok: false, result: r };
  }
  try {
    await applyPlan(ctx, change, plan, list);
  } catch (err) {
    const problems = problemsOf(err);
    const r = result(false, { problems, plan });
    log.error(
      { trigger: opts.trigger, changed: plan.changed, problems, durationMs: r.durationMs },
      'configuration reload failed; the running state stays (what was applied before the failure is listed in the log above)',
    );
    return { ok: false, result: r };
  }
  const r = result(true, { plan });
  log.info(
    { trigger: opts.trigger, changed: plan.changed, actions: r.actions, handover: r.handover, durationMs: r.durationMs },
    plan.changed.length === 0 ? 'configuration reloaded: nothing changed' : 'configuration reloaded',
  );
  return { ok: true, result: r, config: next };
}

/**
 * Carries `plan` out over the running phases: prepare, apply (reconfigure or re-run), commit.
 * @throws the first failure (BallastError, the engine's Error, or RerunFailed).
 */
async function applyPlan<HS>(ctx: AgentContext, change: Change, plan: ReloadPlan, list: PhaseList<HS>): Promise<void> {
  const phases = list.phases();
  const reaction = (e: AnyPhaseEntry<HS>): Reaction => plan.reactions[e.spec.name] ?? 'same';
  const running = phases.filter((p): p is { entry: AnyPhaseEntry<HS>; handle: PhaseHandle } => p.handle !== null);

  // the phases a re-run takes along: those that use a re-run phase's handle, transitively
  const rerun = new Set(running.filter((p) => reaction(p.entry) === 'rerun').map((p) => p.entry.key));
  for (const { entry } of running) if (entry.uses?.some((k) => rerun.has(k))) rerun.add(entry.key);
  const group = running.filter((p) => rerun.has(p.entry.key));

  // 2. prepare (the phases that reconfigure in place): a failure gives back what was taken, nothing else changed
  const prepared: Prepared[] = [];
  const abort = async (): Promise<void> => {
    for (const p of prepared.reverse()) await p.abort();
    prepared.length = 0;
  };
  try {
    for (const { entry, handle } of running)
      if (!rerun.has(entry.key) && reaction(entry) === 'reconfigure' && handle.prepare) prepared.push(await handle.prepare(change));
  } catch (err) {
    await abort();
    throw err;
  }

  // 3. apply, in order; the re-run group goes where its first phase is
  try {
    for (const { entry, handle } of running) {
      if (rerun.has(entry.key)) {
        if (entry.key === group[0]!.entry.key) await rerunGroup(ctx, change, group, list, abort);
        continue;
      }
      if (reaction(entry) === 'reconfigure') await handle.reconfigure?.(change);
    }
  } catch (err) {
    await abort();
    throw err;
  }

  // 4. commit, in order
  for (const p of prepared) await p.commit();
}

/**
 * Re-runs `group` (in list order) with `change.next`: undoes it last first, starts it first first.
 * When a start fails: what started is undone, `abort` gives back the prepared steps, and the
 * group starts again with `change.cur`.
 * @throws RerunFailed (its cause: the start's error); when the old config does not start again
 *   either and a phase of the group is essential, ctx.fail(1) was called.
 */
async function rerunGroup<HS>(
  ctx: AgentContext,
  change: Change,
  group: readonly { entry: AnyPhaseEntry<HS>; handle: PhaseHandle }[],
  list: PhaseList<HS>,
  abort: () => Promise<void>,
): Promise<void> {
  const { log } = ctx;
  for (const { entry, handle } of group) entry.spec.rerun?.before?.(handle as never, change, log);
  for (const { entry } of [...group].reverse()) await list.stopOne(entry);
  const startAll = async (config: Config, after: boolean): Promise<void> => {
    for (const { entry } of group) {
      if (!entry.when(config)) continue;
      const h = await list.startOne(ctx, entry, config);
      if (after) await entry.spec.rerun?.after?.(h as never, change, log);
    }
  };
  try {
    await startAll(change.next, true);
  } catch (err) {
    const names = group.map((g) => g.entry.spec.name).join(', ');
    log.error({ err: (err as Error).message, phases: names }, 'reload: a re-run failed; starting the running configuration again');
    for (const { entry } of [...group].reverse()) await list.stopOne(entry);
    await abort();
    try {
      await startAll(change.cur, false);
    } catch (e2) {
      const essential = group.some((g) => g.entry.spec.essential);
      if (essential) {
        log.fatal({ err: (e2 as Error).message, phases: names }, 'reload: the running configuration did not start again either; exiting');
        ctx.fail(1);
        throw new RerunFailed(
          err,
          `re-run of ${names} failed; starting the running configuration again failed too (${(e2 as Error).message}): the agent exits`,
        );
      }
      log.error({ err: (e2 as Error).message, phases: names }, 'reload: the running configuration did not start again either; going on without it');
      throw new RerunFailed(err, `re-run of ${names} failed; starting the running configuration again failed too (${(e2 as Error).message})`);
    }
    const words = group.flatMap(({ entry }) => {
      const h = list.handles[entry.key];
      const said = h && entry.spec.rerun?.rolledBack ? entry.spec.rerun.rolledBack(h as never, change, log) : null;
      return said === null ? [] : [said];
    });
    throw new RerunFailed(err, words[0] ?? `re-run of ${names} failed: the running configuration runs again`);
  }
}
