/**
 * What every start-up phase shares: the context it runs in and the handle it returns.
 *
 * A phase is `(ctx, config, inputs) => Promise<handle>`: `inputs` are what earlier phases
 * produced (named, typed, no shared mutable state), the handle carries what the phase exposes and
 * its `undo`. A phase that fails part-way undoes its own steps before it throws, so the agent's
 * stack only ever holds whole phases. Reload (next issue) is then: undo one phase's handle, run the
 * phase again with the new config.
 */
import type { InternalErrors } from '../observe/contain.js';
import type { ElectionHistory } from '../observe/history.js';
import type { Logger } from '../log/log.js';
import { CleanupStack } from './stack.js';

/** What a phase runs in. */
export interface AgentContext {
  readonly log: Logger;
  /**
   * Aborted when the agent is asked to stop (a signal, stop(), a fatal event) while it starts:
   * a phase checks it between its steps and inside its long waits, after registering what
   * already exists.
   */
  readonly signal: AbortSignal;
  /**
   * A running part found a fatal condition (the election failed, the interface is gone):
   * the agent unwinds everything and exits with `exitCode`. Returns at once.
   */
  fail(exitCode: number): void;
  /** The election's state changes and master, for /status (absent in tests that build a context by hand). */
  readonly history?: ElectionHistory;
  /**
   * Whether the stop under way is a restart in place (SIGUSR2, a systemd restart job: see
   * docs/operations.md): then the undos keep what the next process adopts (the VIPs, the
   * nftables table, the eBPF programs) and the election hands off (engine.ts `handOff`) instead
   * of resigning. Its `holdMs` is vrrp.restartHold, ms. null (or absent): a stop.
   */
  readonly restarting?: () => RestartIntent | null;
  /** Where observer paths (reports, status, metrics, log-only listeners) contain their failures (observe/contain.ts); absent in tests that build a context by hand: failures then propagate. */
  readonly internal?: InternalErrors;
}

/** A stop for a restart in place: how long the Backups are told to wait for the next process, ms. */
export interface RestartIntent {
  holdMs: number;
}

/** What a started phase exposes, and how to undo it. */
export interface PhaseHandle {
  /** The phase's name, for logs ("admin", "election", …). */
  readonly phase: string;
  /** Undoes the whole phase; never rejects (failed steps are logged). */
  undo(): Promise<void>;
}

/** The error thrown by {@link throwIfAborted}: the start was cancelled, not a failure. */
export class StartAborted extends Error {
  override name = 'StartAborted';
}

/** @throws StartAborted when `signal` is aborted. */
export function throwIfAborted(signal: AbortSignal): void {
  if (signal.aborted) throw new StartAborted('start-up cancelled');
}

/**
 * Runs a phase's `body` on a stack of its own: the body registers each step's undo on `own` as it
 * creates it. When the body throws, `own` is unwound and the error rethrown; otherwise the result
 * is returned with `phase` and `undo` (one unwind of `own`).
 */
export async function runPhase<T extends object>(ctx: AgentContext, phase: string, body: (own: CleanupStack) => Promise<T>): Promise<T & PhaseHandle> {
  const own = new CleanupStack(ctx.log);
  try {
    const out = await body(own);
    return Object.assign(out, { phase, undo: () => own.unwind() });
  } catch (err) {
    await own.unwind();
    throw err;
  }
}
