/**
 * Rise/fall hysteresis of one backend's health. {@link stepHealth} is pure: no clock, no timers,
 * no I/O. Each input carries its own time (`at`, milliseconds on whatever clock the caller
 * uses); the output is the next state and, when the state changed, a transition to report.
 * {@link Hysteresis} keeps that state for one backend and stamps inputs from an injected clock.
 *
 *   from      input                              to
 *   unknown   `rise` consecutive passes          up
 *   unknown   `fall` consecutive failures        down   (so a backend that never answers is reported)
 *   up        `fall` consecutive failures        down
 *   down      `rise` consecutive passes          up
 *   any       markDead                           down   at once; `rise` passes bring it back
 *
 * A pass and a failure in alternation never change the state once rise and fall are >= 2:
 * each input resets the other kind's streak. markDead (passive detection: refused or reset
 * connections, or the election saying the backend's node fell silent) takes a backend down
 * at once from any state and clears its pass streak, so `rise` passes are needed to come back.
 */

/** Where a backend stands: not yet judged, healthy, or not. Only `up` receives traffic. */
export type BackendState = 'unknown' | 'up' | 'down';

/** How many consecutive results change the state. */
export interface HysteresisOptions {
  /** Consecutive passes that make a backend up (from unknown or down): an integer >= 1. */
  readonly rise: number;
  /** Consecutive failures that make a backend down (from up or unknown): an integer >= 1. */
  readonly fall: number;
}

/**
 * One backend's health, as {@link stepHealth} keeps it. Immutable. `R` is what a reason is: text
 * by default; the checker uses a typed {@link Failure} (cause and message), so the verdict's cause
 * follows exactly the same keep/clear rule as the reason.
 */
export interface HealthState<R = string> {
  readonly state: BackendState;
  /** Consecutive passes up to now (0 after a failure or markDead). */
  readonly passes: number;
  /** Consecutive failures up to now (0 after a pass); markDead counts as one. */
  readonly failures: number;
  /**
   * Why the backend is not clean: the latest failure's reason (a probe error such as
   * `http 500`, or the markDead reason). Kept while the backend recovers; cleared (null) when
   * it becomes up and by a pass while it is up.
   */
  readonly reason: R | null;
  /** `at` of the last state change, or null while it never changed. */
  readonly since: number | null;
}

/** An input: a check passed, a check failed, or the backend is known to be dead. */
export type HealthInput<R = string> =
  | { readonly kind: 'pass'; readonly at: number; readonly reason?: R }
  | { readonly kind: 'fail'; readonly at: number; readonly reason: R }
  | { readonly kind: 'dead'; readonly at: number; readonly reason: R };

/** A state change, as reported to listeners. `B` names the backend, `R` is a reason (see {@link HealthState}). */
export interface Transition<B = string, R = string> {
  /** The backend, as its caller names it (the checker uses its HostPort). */
  readonly backend: B;
  readonly from: BackendState;
  readonly to: BackendState;
  /**
   * What caused it: for `down`, the failure (`http 500`, `ECONNREFUSED`, `timeout`,
   * `tls: …`, or the markDead reason); for `up`, the pass's reason when it had one (the
   * checker gives `http 200`), else `passed <rise> consecutive checks`.
   */
  readonly reason: R | string;
  /** The `at` of the input that caused it (ms, the caller's clock). */
  readonly at: number;
}

/** The state a backend starts in: unknown, no streak, no reason. */
export function initialHealth<R = string>(): HealthState<R> {
  return { state: 'unknown', passes: 0, failures: 0, reason: null, since: null };
}

/**
 * Checks hysteresis options.
 * @throws RangeError naming the option when rise or fall is not an integer >= 1.
 */
export function checkHysteresisOptions(opts: HysteresisOptions): void {
  for (const key of ['rise', 'fall'] as const) {
    const v = opts[key];
    if (!Number.isSafeInteger(v) || v < 1) throw new RangeError(`${key} must be an integer >= 1, got ${String(v)}`);
  }
}

/**
 * The next health of a backend after one input. Pure.
 *
 * @param backend the backend's name, copied into the transition.
 * @param current its health so far ({@link initialHealth} at first).
 * @param input a pass, a failure, or markDead, with its time `at` (ms).
 * @param opts rise and fall (integers >= 1; not checked here, see {@link checkHysteresisOptions}).
 * @returns the new state (a new object; `current` is not modified) and the transition, or null
 *   when the state did not change.
 */
export function stepHealth<B, R = string>(
  backend: B,
  current: HealthState<R>,
  input: HealthInput<R>,
  opts: HysteresisOptions,
): { state: HealthState<R>; transition: Transition<B, R> | null } {
  const from = current.state;
  let next: HealthState<R>;
  let to: BackendState = from;
  let cause: R | string;
  switch (input.kind) {
    case 'pass': {
      const passes = current.passes + 1;
      if (from !== 'up' && passes >= opts.rise) to = 'up';
      cause = input.reason ?? `passed ${opts.rise} consecutive ${opts.rise === 1 ? 'check' : 'checks'}`;
      // up again (or still up and passing): nothing left to explain
      const reason = to === 'up' ? null : current.reason;
      next = { state: to, passes, failures: 0, reason, since: current.since };
      break;
    }
    case 'fail': {
      const failures = current.failures + 1;
      if (from !== 'down' && failures >= opts.fall) to = 'down';
      cause = input.reason;
      next = { state: to, passes: 0, failures, reason: input.reason, since: current.since };
      break;
    }
    case 'dead': {
      to = 'down';
      cause = input.reason;
      next = { state: to, passes: 0, failures: current.failures + 1, reason: input.reason, since: current.since };
      break;
    }
  }
  if (to === from) return { state: next, transition: null };
  return {
    state: { ...next, since: input.at },
    transition: { backend, from, to, reason: cause, at: input.at },
  };
}

/**
 * {@link stepHealth} with the state kept inside and the time from an injected clock: one per
 * backend.
 */
export class Hysteresis {
  readonly backend: string;
  readonly #opts: HysteresisOptions;
  readonly #now: () => number;
  #state: HealthState = initialHealth();

  /**
   * @param backend the name put in transitions (`host:port`).
   * @param opts rise and fall, integers >= 1.
   * @param now the clock (ms) that stamps inputs; default Date.now.
   * @throws RangeError when rise or fall is not an integer >= 1.
   */
  constructor(backend: string, opts: HysteresisOptions, now: () => number = Date.now) {
    checkHysteresisOptions(opts);
    this.backend = backend;
    this.#opts = { rise: opts.rise, fall: opts.fall };
    this.#now = now;
  }

  /** The current health (immutable). */
  get health(): HealthState {
    return this.#state;
  }

  /** A check passed. @returns the transition (to `up`), or null. */
  pass(reason?: string): Transition | null {
    return this.#step(reason === undefined ? { kind: 'pass', at: this.#now() } : { kind: 'pass', at: this.#now(), reason });
  }

  /** A check failed for `reason`. @returns the transition (to `down`), or null. */
  fail(reason: string): Transition | null {
    return this.#step({ kind: 'fail', at: this.#now(), reason });
  }

  /** The backend is known dead: down at once. @returns the transition, or null when it was already down. */
  markDead(reason: string): Transition | null {
    return this.#step({ kind: 'dead', at: this.#now(), reason });
  }

  #step(input: HealthInput): Transition | null {
    const { state, transition } = stepHealth(this.backend, this.#state, input, this.#opts);
    this.#state = state;
    return transition;
  }
}
