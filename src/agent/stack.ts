/**
 * One cleanup stack: everything the agent starts registers its undo here where it is created,
 * and stop, a failed start and the fatal paths are all one unwind in reverse order.
 *
 * The shape of TC39's `AsyncDisposableStack` (`defer`, then one reverse dispose), kept as our own
 * small class for what an agent's stop needs and `disposeAsync` does not give: each failed undo
 * is logged with its step's name as it happens (disposeAsync collects them into one
 * SuppressedError chain thrown at the end), a second unwind joins the one under way, and the
 * stack can be used again afterwards. A cleanup that fails must not keep the next one (say,
 * removing the VIPs) from running. (A phase a reload re-runs keeps its place in the agent's
 * phase list, phase-list.ts, not here.)
 */
import type { Log } from '../log/log.js';

/** An undo: releases what one step created. May be async; its errors are logged, not thrown. */
export type Undo = () => unknown;

/** Undos registered in order, run in reverse by {@link CleanupStack.unwind}. */
export class CleanupStack {
  readonly #undos: { what: string; undo: Undo }[] = [];
  readonly #log: Pick<Log, 'error'>;
  #unwinding: Promise<void> | null = null;

  /** @param log where a failed undo is reported (`error`, with the step's name). */
  constructor(log: Pick<Log, 'error'>) {
    this.#log = log;
  }

  /** Registers `undo` for `what` (a short name used in the log when the undo fails). */
  defer(what: string, undo: Undo): void {
    this.#undos.push({ what, undo });
  }

  /** Undos registered and not yet run. */
  get size(): number {
    return this.#undos.length;
  }

  /**
   * Runs every registered undo, the last registered first, each awaited before the next; an undo
   * that throws or rejects is logged and the rest still run. Never rejects. A call while an unwind
   * is under way returns that unwind; undos registered meanwhile run in it too. Afterwards the
   * stack is empty and can be used again.
   */
  unwind(): Promise<void> {
    this.#unwinding ??= (async () => {
      try {
        for (let step = this.#undos.pop(); step !== undefined; step = this.#undos.pop()) {
          try {
            await step.undo();
          } catch (err) {
            this.#log.error({ err: err instanceof Error ? err.message : String(err), step: step.what }, 'a cleanup step failed; going on with the rest');
          }
        }
      } finally {
        this.#unwinding = null;
      }
    })();
    return this.#unwinding;
  }
}
