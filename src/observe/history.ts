/**
 * What the agent remembers of the election for /status and the status page: the last state
 * changes with their reasons (a small ring), and since when the current master is heard.
 * Main thread only; survives a reload's hand-over (the agent owns it, not the election phase).
 */
import type { TransitionRecord } from './status.js';

/** State changes kept, newest last. */
export const TRANSITIONS_KEPT = 20;

/** The ring of state changes and the master heard now. */
export class ElectionHistory {
  readonly #ring: TransitionRecord[] = [];
  #master: { address: string; since: string } | null = null;
  #changes = 0;

  /** How many state changes and new masters were recorded (the admin endpoint serves nothing rendered before one). */
  get changes(): number {
    return this.#changes;
  }

  /** Records a state change; the oldest beyond {@link TRANSITIONS_KEPT} is dropped. */
  transition(r: TransitionRecord): void {
    this.#changes++;
    this.#ring.push(r);
    if (this.#ring.length > TRANSITIONS_KEPT) this.#ring.shift();
  }

  /** A new master is heard (or this node became master) at `at` (ISO 8601). */
  master(address: string, at: string): void {
    if (this.#master?.address === address) return;
    this.#changes++;
    this.#master = { address, since: at };
  }

  /** The master heard now and since when, or null before any. */
  currentMaster(): { address: string; since: string } | null {
    return this.#master;
  }

  /** The state changes kept, oldest first (a copy). */
  transitions(): TransitionRecord[] {
    return this.#ring.map((r) => ({ ...r }));
  }

  /** The last state change, or null before the first. */
  last(): TransitionRecord | null {
    const r = this.#ring.at(-1);
    return r ? { ...r } : null;
  }
}
