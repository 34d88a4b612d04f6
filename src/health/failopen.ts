/**
 * Which backends of one address family the data planes serve, from their verdicts and damping:
 * the normal ready set, or — when every backend turned unready together — the last ready set kept
 * (fail open, as Envoy's panic threshold does). Pure: no clock, no timers, no I/O.
 *
 *   members (verdict, damped)            served                             fail open
 *   some up and not damped               exactly those                      ends ('passed')
 *   none of those, fail open active      kept ∩ unready, plus damped up ones  goes on; ends ('gone')
 *                                                                           when no kept one is left
 *   none of those, not active:
 *     some unready one was served now,   those (kept), plus damped up ones   starts
 *     or left the served set within
 *     windowMs  (and mayStart)
 *     otherwise                          the damped up ones (may be none)   —
 *
 * Why each rule:
 * - A shared dependency (etcd defragmenting, a lost quorum) makes every apiserver's /readyz fail
 *   at once while they still serve most requests; emptying the pool then turns a partial outage
 *   into a total one. "Together" is the window: a backend counts as part of the last ready set
 *   when it left the served set at most `windowMs` before the set emptied. The checks of
 *   different backends are not in step (a random offset in the first interval, ±10 % jitter), so
 *   one failure takes them out up to about one interval plus fall × 20 % of one apart; a slow
 *   failure adds a timeout. {@link failOpenWindowMs} is (fall + 1) × interval + timeout.
 * - Only `unready` backends are kept (an answer with an error status, a slow answer): a dead
 *   one (refused, reset, silent, its node gone) leaves at once, also during fail open, and when
 *   every one is dead there is nothing to keep. A backend that never was in the served set is
 *   never added (an agent that starts while every backend is unready serves none, as before).
 * - One backend alone fails open too: its /readyz failing is the same event seen from one
 *   backend, and an unready apiserver serves more than no DNAT (a RST, or the holder's own socket).
 * - Damping never empties the pool: a damped backend that is up is held out only while a
 *   backend that is up and not damped serves; otherwise it serves (with the kept ones during
 *   fail open). Fail open ends only when a backend that is up and not damped exists, so a
 *   flapping backend cannot end it and start it again at its own rhythm.
 * - Only a verdict change starts fail open (`mayStart`): a backend set that loses its last ready
 *   backend by a discovery change or a reload does not.
 */

/** One backend as the decision sees it. */
export interface PoolMember {
  /** `host:port`. */
  readonly key: string;
  /** Its verdict's state (after hysteresis), or unknown before the first. */
  readonly state: 'up' | 'unready' | 'dead' | 'unknown';
  /** Held out by flap damping now (damping.ts). */
  readonly damped: boolean;
}

/** The decision's memory for one family. Immutable; times are ms on the caller's clock. */
export interface PoolState {
  /** Fail open is on. */
  readonly active: boolean;
  /** When it started; null while not active. */
  readonly since: number | null;
  /** The backends fail open keeps (each unready, in member order); empty while not active. */
  readonly kept: readonly string[];
  /** The backends served after the last decision, in member order. */
  readonly served: readonly string[];
  /** When each backend that left the served set left it (kept for `windowMs`). */
  readonly left: ReadonlyMap<string, number>;
}

/** Options of {@link decidePool}. */
export interface PoolOptions {
  /** Fail open at all (apiserver.health.failOpen). */
  readonly failOpen: boolean;
  /** How long before the set emptied a backend may have left it and still be kept, ms ({@link failOpenWindowMs}). */
  readonly windowMs: number;
  /** Whether this decision may start fail open: a verdict changed (not a set change or a reload). */
  readonly mayStart: boolean;
}

/** Why fail open ended: a backend is up (and not damped) again; every kept one died or left the set; it was turned off. */
export type FailOpenEnd = 'passed' | 'gone' | 'disabled';

/** The result of one decision. */
export interface PoolDecision {
  readonly state: PoolState;
  /** Fail open started with this decision. */
  readonly started: boolean;
  /** Fail open ended with this decision, and why; null when it did not. */
  readonly ended: FailOpenEnd | null;
}

/** Nothing served yet, not failing open. */
export function initialPool(): PoolState {
  return { active: false, since: null, kept: [], served: [], left: new Map() };
}

/**
 * The fail-open window for health settings, ms: (fall + 1) × interval + timeout (see the file comment).
 * @param s intervalMs and timeoutMs in ms, fall in checks.
 */
export function failOpenWindowMs(s: { readonly intervalMs: number; readonly timeoutMs: number; readonly fall: number }): number {
  return (s.fall + 1) * s.intervalMs + s.timeoutMs;
}

/**
 * The served set of one family at `at` (the table in the file comment). Pure.
 * @param prev the previous decision's state ({@link initialPool} at first).
 * @param members every backend of the family, in order.
 * @returns the new state (served in member order) and whether fail open started or ended.
 */
export function decidePool(prev: PoolState, members: readonly PoolMember[], at: number, o: PoolOptions): PoolDecision {
  const clean = members.filter((m) => m.state === 'up' && !m.damped).map((m) => m.key);
  const dampedUp = members.filter((m) => m.state === 'up' && m.damped).map((m) => m.key);
  const unready = new Set(members.filter((m) => m.state === 'unready').map((m) => m.key));
  const recent = (k: string): boolean => prev.served.includes(k) || (prev.left.get(k) ?? -Infinity) >= at - o.windowMs;

  let active = false;
  let since: number | null = null;
  let kept: string[] = [];
  let ended: FailOpenEnd | null = null;
  let started = false;
  if (clean.length === 0 && o.failOpen) {
    if (prev.active) {
      kept = prev.kept.filter((k) => unready.has(k));
      if (kept.length > 0) {
        active = true;
        since = prev.since;
      } else ended = 'gone';
    } else if (o.mayStart) {
      kept = members.filter((m) => unready.has(m.key) && recent(m.key)).map((m) => m.key);
      if (kept.length > 0) {
        active = true;
        since = at;
        started = true;
      }
    }
  } else if (prev.active) ended = o.failOpen ? 'passed' : 'disabled';

  const chosen = new Set(clean.length > 0 ? clean : [...kept, ...dampedUp]);
  const served = members.filter((m) => chosen.has(m.key)).map((m) => m.key);
  const present = new Set(members.map((m) => m.key));
  const left = new Map<string, number>();
  for (const [k, t] of prev.left) if (present.has(k) && !chosen.has(k) && t >= at - o.windowMs) left.set(k, t);
  for (const k of prev.served) if (present.has(k) && !chosen.has(k)) left.set(k, at);
  return {
    state: { active, since, kept: members.filter((m) => kept.includes(m.key)).map((m) => m.key), served, left },
    started,
    ended,
  };
}
