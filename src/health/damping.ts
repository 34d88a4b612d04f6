/**
 * Flap damping of one backend: pure, no clock, no timers. A backend whose verdict goes in and out
 * of `up` more than `transitions` times within `windowMs` is held out of the data planes for a
 * while, and for longer each time it is damped again soon after a release:
 *
 *   event                                   damping
 *   a transition, not held                  counted; more than `transitions` within `windowMs`:
 *                                           held until at + hold(level) (the count starts afresh)
 *   a transition while held                 held until max(until, at + hold(level)): a backend that
 *                                           keeps flapping stays out
 *   the time `until` passes (expireHold)    released
 *
 *   hold(level) = min(holdMs × 2^(level − 1), maxHoldMs)
 *   level       = 1 for a first damping, or one that starts at least maxHoldMs after the last
 *                 release; level + 1 for one that starts sooner (a backend that flaps again at once)
 *
 * The bound: a backend is never held out for more than maxHoldMs after its last transition
 * (every transition sets `until` to at most at + maxHoldMs, nothing else moves it), whatever its
 * history. A transition is a change between `up` and not `up` (unready or dead) of the
 * backend's own verdict, after hysteresis; unready ↔ dead is not one, nor a backend's first
 * verdict, nor anything the fail-open decision (failopen.ts) does.
 */

/** How damping counts and holds (the config's apiserver.health.damping* settings). */
export interface DampingOptions {
  /** More than this many transitions within {@link windowMs} damp the backend: an integer >= 1. */
  readonly transitions: number;
  /** The window the transitions are counted in, ms (> 0). */
  readonly windowMs: number;
  /** The first hold, ms (> 0); each damping soon after a release doubles it. */
  readonly holdMs: number;
  /** The longest hold, ms (>= holdMs): the bound after the last transition. */
  readonly maxHoldMs: number;
}

/** One backend's damping. Immutable; times are ms on the caller's clock. */
export interface DampState {
  /** Times of the transitions counted (within the window; since the last damping started). */
  readonly flaps: readonly number[];
  /** Held out until this time, or null while not held. */
  readonly until: number | null;
  /** When the current hold started; null while not held. */
  readonly heldSince: number | null;
  /** The current (or last) hold's level: 0 before the first damping. */
  readonly level: number;
  /** When the last hold ended; null before the first. */
  readonly releasedAt: number | null;
}

/** What a step changed, for the log. */
export type DampEvent =
  /** Damping started: held out until `until`, for `holdMs`, after `transitions` transitions within the window. */
  | { readonly kind: 'start'; readonly until: number; readonly holdMs: number; readonly level: number; readonly transitions: number }
  /** A transition while held: the hold now lasts until `until`. */
  | { readonly kind: 'extend'; readonly until: number; readonly holdMs: number; readonly level: number }
  /** The hold ended after `heldMs`. */
  | { readonly kind: 'end'; readonly heldMs: number };

/** Not damped, nothing counted. */
export function initialDamp(): DampState {
  return { flaps: [], until: null, heldSince: null, level: 0, releasedAt: null };
}

/** The hold of a damping at `level` (>= 1), ms: holdMs × 2^(level − 1), at most maxHoldMs. */
export function holdFor(level: number, o: DampingOptions): number {
  // 2^31 already exceeds any bounded maxHold: no overflow to Infinity for a long history
  return Math.min(o.holdMs * 2 ** Math.min(Math.max(level, 1) - 1, 31), o.maxHoldMs);
}

/**
 * Checks damping options.
 * @throws RangeError naming the option when transitions is not an integer >= 1, a time is not a
 *   positive finite number, or maxHoldMs < holdMs.
 */
export function checkDampingOptions(o: DampingOptions): void {
  if (!Number.isSafeInteger(o.transitions) || o.transitions < 1) throw new RangeError(`transitions must be an integer >= 1, got ${String(o.transitions)}`);
  for (const key of ['windowMs', 'holdMs', 'maxHoldMs'] as const) {
    const v = o[key];
    if (!(v > 0) || !Number.isFinite(v)) throw new RangeError(`${key} must be a positive number of milliseconds, got ${String(v)}`);
  }
  if (o.maxHoldMs < o.holdMs) throw new RangeError(`maxHoldMs (${o.maxHoldMs}) must be at least holdMs (${o.holdMs})`);
}

/**
 * A transition (into or out of `up`) at `at`. Pure.
 * @returns the new state and the event: `start` when this transition damps the backend,
 *   `extend` when it was held and the hold got longer, else null.
 */
export function noteTransition(s: DampState, at: number, o: DampingOptions): { state: DampState; event: DampEvent | null } {
  const flaps = [...s.flaps.filter((t) => t > at - o.windowMs), at];
  if (s.until !== null) {
    const hold = holdFor(s.level, o);
    const until = Math.max(s.until, at + hold);
    const state = { ...s, flaps, until };
    return { state, event: until > s.until ? { kind: 'extend', until, holdMs: hold, level: s.level } : null };
  }
  if (flaps.length <= o.transitions) return { state: { ...s, flaps }, event: null };
  const level = s.releasedAt === null || at - s.releasedAt >= o.maxHoldMs ? 1 : s.level + 1;
  const hold = holdFor(level, o);
  return {
    state: { flaps: [], until: at + hold, heldSince: at, level, releasedAt: s.releasedAt },
    event: { kind: 'start', until: at + hold, holdMs: hold, level, transitions: flaps.length },
  };
}

/**
 * The time is `at`: a hold whose `until` has passed ends. Pure.
 * @returns the new state and an `end` event, or the same state and null (not held, or not yet).
 */
export function expireHold(s: DampState, at: number): { state: DampState; event: DampEvent | null } {
  if (s.until === null || at < s.until) return { state: s, event: null };
  return {
    state: { flaps: [], until: null, heldSince: null, level: s.level, releasedAt: s.until },
    event: { kind: 'end', heldMs: at - (s.heldSince ?? s.until) },
  };
}

/** Whether the backend is held out at `at`. */
export function isDamped(s: DampState, at: number): boolean {
  return s.until !== null && at < s.until;
}
