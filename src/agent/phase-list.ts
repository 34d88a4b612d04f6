/**
 * The agent's phases in order, and their handles while they run: start-up walks the list, stop
 * (and a failed start) undoes the started phases last first, and a reload re-runs a phase in its
 * own place, so a stop still unwinds in the list's order reversed however often it re-ran.
 *
 * The list is generic: the agent (index.ts) gives the entries, each with the condition under
 * which its phase runs, the earlier handles it uses and how its inputs are built from them.
 * Nothing here names a phase or a setting.
 */
import type { Config } from '../config/index.js';
import type { Logger } from '../log/log.js';
import { throwIfAborted, type AgentContext, type PhaseHandle, type PhaseSpec } from './phase.js';

/** The key of a handle in `HS` (the agent's map from phase keys to their handle types). */
type Key<HS> = keyof HS & string;

/** One phase in the list. */
export interface PhaseEntry<HS, K extends Key<HS>, I> {
  /** The handle's key in `HS`. */
  readonly key: K;
  readonly spec: PhaseSpec<I, HS[K] & PhaseHandle>;
  /** Whether the phase runs under `config` (config only: a reload that would turn a phase on or off is refused). */
  when(config: Config): boolean;
  /** The earlier phases whose handles its inputs hold: when one of them re-runs, this one re-runs after it. */
  readonly uses?: readonly Key<HS>[];
  /** Its inputs under `config`, from the handles of the phases started before it (or getters of later ones). */
  inputs(config: Config, handles: Readonly<Partial<HS>>): I;
  /** Started even when a stop came first (its undo is what cleans up an earlier run). */
  readonly runsWhenStopping?: boolean;
}

/** A start-up step between phases that is no phase (a log line, a readiness notice, a wait): it does not re-run on reload. */
export interface StartStep<HS> {
  readonly step: string;
  when(config: Config, handles: Readonly<Partial<HS>>): boolean;
  run(config: Config, handles: Readonly<Partial<HS>>): Promise<void> | void;
}

/** Types one start step, for the heterogeneous list. */
export function step<HS>(s: StartStep<HS>): StartStep<HS> {
  return s;
}

/** A phase entry with its input type erased (the list holds phases of different inputs). */
export type AnyPhaseEntry<HS> = PhaseEntry<HS, Key<HS>, unknown>;

/** Types one entry (checks its inputs against its phase's), for the heterogeneous list. */
export function phase<HS, K extends Key<HS>, I>(e: PhaseEntry<HS, K, I>): AnyPhaseEntry<HS> {
  return e as unknown as AnyPhaseEntry<HS>;
}

/** A running or not running phase of the list, for a reload. */
export interface ListedPhase<HS> {
  readonly entry: AnyPhaseEntry<HS>;
  /** Its handle; null when it does not run. */
  readonly handle: PhaseHandle | null;
}

/** The agent's phases and start steps, in order, and the handles of those that run. */
export class PhaseList<HS> {
  readonly #items: readonly (AnyPhaseEntry<HS> | StartStep<HS>)[];
  readonly #handles: Partial<Record<Key<HS>, PhaseHandle>> = {};
  readonly #log: Logger;

  constructor(items: readonly (AnyPhaseEntry<HS> | StartStep<HS>)[], log: Logger) {
    this.#items = items;
    this.#log = log;
  }

  /** The handles of the running phases, by key (a view: it follows re-runs). */
  get handles(): Readonly<Partial<HS>> {
    return this.#handles as Partial<HS>;
  }

  /** The phases in order, with their handles. */
  phases(): ListedPhase<HS>[] {
    return this.#items.filter((i): i is AnyPhaseEntry<HS> => 'key' in i).map((entry) => ({ entry, handle: this.#handles[entry.key] ?? null }));
  }

  /**
   * Starts every phase whose `when` holds, in order, and runs the start steps; checks for a stop
   * before and after each.
   * @throws StartAborted when ctx.signal is aborted; a phase's error otherwise (the phases
   *   started stay in the list: {@link unwind} undoes them).
   */
  async start(ctx: AgentContext, config: Config): Promise<void> {
    for (const item of this.#items) {
      if ('step' in item) {
        if (!item.when(config, this.handles)) continue;
        throwIfAborted(ctx.signal);
        await item.run(config, this.handles);
        continue;
      }
      if (!item.when(config)) continue;
      if (!item.runsWhenStopping) throwIfAborted(ctx.signal);
      await this.startOne(ctx, item, config);
      throwIfAborted(ctx.signal);
    }
  }

  /** Starts one phase with `config` in its place. @throws the phase's error (its place stays empty). */
  async startOne(ctx: AgentContext, entry: AnyPhaseEntry<HS>, config: Config): Promise<PhaseHandle> {
    const h = await entry.spec.start(ctx, config, entry.inputs(config, this.handles));
    this.#handles[entry.key] = h;
    return h;
  }

  /** Stops one running phase (its `release`, else its `undo`) and empties its place. */
  async stopOne(entry: AnyPhaseEntry<HS>): Promise<void> {
    const h = this.#handles[entry.key];
    if (!h) return;
    delete this.#handles[entry.key];
    await this.#undo(entry.spec.name, () => (h.release ? h.release() : h.undo()));
  }

  /** Undoes every running phase, the last in the list first, each awaited; never rejects. */
  async unwind(): Promise<void> {
    for (const { entry, handle } of this.phases().reverse()) {
      if (!handle) continue;
      delete this.#handles[entry.key];
      await this.#undo(entry.spec.name, () => handle.undo());
    }
  }

  async #undo(what: string, undo: () => Promise<void>): Promise<void> {
    try {
      await undo();
    } catch (err) {
      this.#log.error({ err: err instanceof Error ? err.message : String(err), step: what }, 'a cleanup step failed; going on with the rest');
    }
  }
}
