/**
 * Election policy: what this node's health means for the VRRP priority it advertises.
 *
 * - A node that cannot serve (no healthy backend in nftables mode; its own apiserver unhealthy
 *   with `dataplane.vip: none`, as keepalived's track_script would) lowers its priority by
 *   `policy.unhealthyPriorityWeight`, so a node that can serve holds the VIP.
 * - Until its first health verdicts are in and its data plane is programmed, a node does not
 *   preempt (it may still take over a silent group: a VIP nobody holds is worse).
 * - One flapping backend among several changes nothing: only "none healthy" lowers the priority.
 */
import type { BackendHealth } from './health/checker.js';

/**
 * The priority to advertise: `priority`, lowered by `weight` (never below 1) when this node
 * cannot serve. The address owner (255) is never lowered (RFC 9568 §6.1: its priority is fixed).
 */
export function effectivePriority(priority: number, weight: number, canServe: boolean): number {
  if (priority === 255 || canServe) return priority;
  return Math.max(1, priority - weight);
}

/** What the policy drives (the election's host). */
export interface PolicyTarget {
  setPriority(priority: number): void;
  setPreemptHold(hold: boolean): void;
}

/** Inputs of the policy. */
export interface PolicyOptions {
  priority: number;
  weight: number;
  mode: 'nftables' | 'none';
  /** host:port of this node's own apiserver (mode none); null = unknown, which never lowers the priority. */
  localBackend: string | null;
  /** After this long (ms since start) the first verdicts count as in, even if some backend is still unknown. */
  settleMs: number;
}

/**
 * Evaluates the policy on every health or data-plane change and tells the election only what
 * changed.
 */
export class Policy {
  private hold: boolean | null = null;
  private prio: number | null = null;
  private why: string | null = null;

  constructor(
    private o: PolicyOptions,
    private readonly target: PolicyTarget,
    private readonly startedAt: number,
  ) {}

  /**
   * New options (a reload: a new base priority, weight, local backend, settle time); the start
   * time stays, so a settled node does not hold preemption again. The next {@link update} tells
   * the election what changed.
   */
  reconfigure(o: PolicyOptions): void {
    this.o = o;
    // a new base priority must reach the engine even when the effective one looks the same
    this.prio = null;
  }

  /** Whether this node can serve, from a health snapshot. */
  canServe(snapshot: readonly BackendHealth[]): boolean {
    if (this.o.mode === 'none') {
      const local = snapshot.find((b) => b.address === this.o.localBackend);
      return local === undefined || local.state !== 'down';
    }
    return snapshot.length === 0 || snapshot.some((b) => b.healthy);
  }

  /**
   * Why this node cannot serve, for the operator (the priority cut's reason), or null when it
   * can: "no ready backend (…)" in nftables mode, "the local apiserver … is down" in mode none.
   */
  cannotServeBecause(snapshot: readonly BackendHealth[]): string | null {
    if (this.canServe(snapshot)) return null;
    if (this.o.mode === 'none') {
      const local = snapshot.find((b) => b.address === this.o.localBackend)!;
      return `the local apiserver ${local.address} is down${local.reason ? ` (${local.reason})` : ''} (dataplane.vip: none)`;
    }
    const each = snapshot.slice(0, 5).map((b) => `${b.address} ${b.state}${b.reason ? `: ${b.reason}` : ''}`);
    return `no ready backend (${each.join(', ')}${snapshot.length > 5 ? `, and ${snapshot.length - 5} more` : ''})`;
  }

  /** The reason for the priority the last {@link update} set: why it is lowered, or null at the configured priority (also while not settled). */
  reason(): string | null {
    return this.why;
  }

  /**
   * Re-evaluates. `dataplaneReady`: the data plane has been applied at least once (always true
   * in mode none). `now`: monotonic ms.
   * @returns the effective priority and whether preemption is held, after this update.
   */
  update(snapshot: readonly BackendHealth[], dataplaneReady: boolean, now: number): { priority: number; hold: boolean } {
    const verdictsIn = snapshot.every((b) => b.state !== 'unknown') || now - this.startedAt >= this.o.settleMs;
    const settled = verdictsIn && dataplaneReady;
    const hold = !settled;
    const why = settled ? this.cannotServeBecause(snapshot) : null;
    const priority = settled ? effectivePriority(this.o.priority, this.o.weight, why === null) : this.o.priority;
    this.why = priority === this.o.priority ? null : why;
    if (hold !== this.hold) {
      this.hold = hold;
      this.target.setPreemptHold(hold);
    }
    if (priority !== this.prio) {
      this.prio = priority;
      this.target.setPriority(priority);
    }
    return { priority, hold };
  }
}
