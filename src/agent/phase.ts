/**
 * The phase protocol: what every start-up phase shares, and how it says what a reload does to it.
 *
 * A phase is a {@link PhaseSpec}: `start(ctx, config, inputs) → handle`, where `inputs` are what
 * earlier phases produced (their handles, or getters of them, named and typed: no phase imports
 * another), and a table of the settings it reads with its reaction to a change of each
 * ({@link Setting}: `same`, `reconfigure`, `rerun`, `restart`). The handle carries what the phase
 * exposes, its `undo`, and how it applies a change in place (`prepare` / `reconfigure` /
 * `commit`). A phase that fails part-way undoes its own steps before it throws, so the agent's
 * list only ever holds whole phases.
 *
 * A reload (reload.ts) asks every phase's table, refuses the whole reload when one says
 * `restart` (or when a changed setting is read by no phase), and otherwise, in the list's order:
 * `prepare` (host checks, locks, widening: a failure there changes nothing), then `reconfigure`
 * or a re-run (undo, start with the new config; the phases that take a re-run phase's handle
 * re-run with it; a failed re-run starts the old config again), then `commit`.
 */
import type { Config, LogLevel } from '../config/index.js';
import type { InternalErrors } from '../observe/contain.js';
import type { ElectionHistory } from '../observe/history.js';
import type { Logger } from '../log/log.js';
import type { InterfaceInfo } from '../vip/netlink.js';
import type { DataplaneStatus } from '../dataplane/controller.js';
import type { BackendSource } from '../discovery/index.js';
import type { CommonStatus } from '../observe/status.js';
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
  /** The log level given on the command line (--log-level), which outranks log.level in a reloaded file; absent: none. */
  readonly logLevel?: LogLevel;
}

/** The interface VRRP runs on and the address adverts go out from. */
export interface ResolvedInterface {
  iface: InterfaceInfo;
  primary: string;
}

/** A stop for a restart in place: how long the Backups are told to wait for the next process, ms. */
export interface RestartIntent {
  holdMs: number;
}

/** What a phase does when a setting it reads changes on a reload, from least to most. */
export type Reaction = 'same' | 'reconfigure' | 'rerun' | 'restart';

/** The order of {@link Reaction}s: a phase takes the strongest its changed settings call for. */
export const REACTION_RANK: Readonly<Record<Reaction, number>> = { same: 0, reconfigure: 1, rerun: 2, restart: 3 };

/** A reload's two configs and what differs between them (reload.ts builds it). */
export interface Change {
  readonly cur: Config;
  readonly next: Config;
  /** Every setting that differs, as a path (`vrrp.priority`, `apiserver.health.intervalMs`), sorted. */
  readonly changed: readonly string[];
  /** Whether the setting at `path`, or one inside it, differs. */
  has(path: string): boolean;
}

/**
 * One setting a phase reads (the model: holo-vrrp's northbound/configuration.rs, where each
 * setting's shape, default and reaction to a change sit together).
 */
export interface Setting {
  /** Its path in Config; a section covers what it holds. '' covers every setting. */
  readonly path: string;
  /** Only the path itself, not what is inside it: a section present on one side only (`vrrp`, `localEndpoint`). */
  readonly exact?: boolean;
  /** What a change of it does to the phase; a function when that depends on the configs or the changed path. */
  readonly on: Reaction | ((change: Change, path: string) => Reaction);
  /** For `restart`: what a reload cannot change, for its refusal ("the VIP data plane mode"). */
  readonly why?: string;
  /** For `reconfigure` / `rerun`: what is done, in a few words, for the reload's result (null: nothing to say). */
  readonly does?: string | ((change: Change) => string | readonly string[] | null);
}

/** What a reload's prepare step took, to be made final or given back. */
export interface Prepared {
  /** The reload went through: releases what the old config held. @throws what failed (the reload is reported failed). */
  commit(): Promise<void> | void;
  /** The reload was given up: gives back what prepare took; never throws. */
  abort(): Promise<void> | void;
}

/**
 * What a running phase reports for /status: its part of the document (observe/status.ts), and
 * what the agent's other parts read of it. The agent merges the reports of the running phases
 * in the list's order and says `off` (with the reason) for a part no phase reported.
 */
export interface StatusReport extends Partial<Pick<CommonStatus, 'local' | 'bgp' | 'connectionSync' | 'discovery'>> {
  /** The VIP's data plane as programmed. */
  dataplane?: DataplaneStatus;
  /** Where each backend came from, by `host:port`. */
  sources?: ReadonlyMap<string, BackendSource>;
  /** Why the advertised priority is below the configured one, or null when it is not. */
  priorityReason?: string | null;
}

/** What a started phase exposes, how to undo it, and how it applies a reload in place. */
export interface PhaseHandle {
  /** The phase's name, for logs ("admin", "election", …). */
  readonly phase: string;
  /** Undoes the whole phase; never rejects (failed steps are logged). */
  undo(): Promise<void>;
  /**
   * A reload's first step when the phase's reaction is `reconfigure`, before anything changes
   * (host checks, locks, serving the union of old and new): a throw changes nothing.
   */
  prepare?(change: Change): Promise<Prepared>;
  /** Applies the change in place (reaction `reconfigure`), in the list's order. @throws when it cannot (the reload is reported failed). */
  reconfigure?(change: Change): Promise<void>;
  /** For a re-run: steps aside for the new instance (default: undo). The admin endpoint keeps answering the request under way. */
  release?(): Promise<void>;
  /** Its part of /status (see {@link StatusReport}); absent: it reports nothing. */
  report?(): StatusReport;
}

/**
 * A phase: its name, the settings it reads, and its start. `I` is what earlier phases give it,
 * `H` its handle.
 */
export interface PhaseSpec<I, H extends PhaseHandle> {
  /** Its name, for logs and the reload's problems ("admin", "election", …). */
  readonly name: string;
  /** Every setting it reads with its reaction; a changed setting that no phase claims is refused (restart). */
  readonly settings: readonly Setting[];
  /** Starts it with `config`. @throws what the phase documents; it undid its own steps then. */
  start(ctx: AgentContext, config: Config, inputs: I): Promise<H>;
  /** Its re-run in a reload is a hand-over (ReloadResult.handover). */
  readonly handover?: boolean;
  /**
   * When its re-run failed and starting it again with the running config failed too: the agent
   * exits (ctx.fail(1)) instead of going on without it.
   */
  readonly essential?: boolean;
  /** What a re-run logs: before the old instance goes, once the new one runs, and the words of a re-run given up (the old config runs again). */
  readonly rerun?: {
    before?(old: H, change: Change, log: Logger): void;
    after?(h: H, change: Change, log: Logger): Promise<void> | void;
    rolledBack?(h: H, change: Change, log: Logger): string;
  };
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
