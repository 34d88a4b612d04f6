/**
 * The election policy, pure: the effective priority, when preemption is held, and which health
 * snapshots lower the priority (nftables mode: none healthy; mode none: the local apiserver down).
 * Times are monotonic ms passed in; the target records what the election was told.
 */
import { describe, expect, it } from 'vitest';
import { effectivePriority, Policy, type PolicyOptions, type PolicyTarget } from '../../src/policy.js';
import type { BackendHealth } from '../../src/health/checker.js';
import type { BackendState } from '../../src/health/hysteresis.js';

const B1 = '10.0.0.11:6443';
const B2 = '10.0.0.12:6443';
const B3 = '10.0.0.13:6443';
const START = 1000;
/** what the agent computes for interval 200 ms, rise 2, fall 2, timeout 200 ms: (2 + 1) x 200 + 200 */
const SETTLE_MS = 800;

function bh(address: string, state: BackendState, reason: string | null = null): BackendHealth {
  return { address, state, healthy: state === 'up', lastCheck: null, lastLatencyMs: null, reason, consecutive: 1 };
}

const all = (s: BackendState, reason: string | null = null): BackendHealth[] => [bh(B1, s, reason), bh(B2, s, reason), bh(B3, s, reason)];

/** A target recording every call, in order. */
function recorder() {
  const calls: string[] = [];
  const target: PolicyTarget = {
    setPriority: (p) => void calls.push(`priority ${p}`),
    setPreemptHold: (h) => void calls.push(`hold ${h}`),
  };
  return { calls, target };
}

function policy(o: Partial<PolicyOptions> = {}) {
  const { calls, target } = recorder();
  const p = new Policy({ priority: 150, weight: 100, mode: 'nftables', localBackend: B1, settleMs: SETTLE_MS, ...o }, target, START);
  return { p, calls };
}

describe('effectivePriority', () => {
  it.each([
    [150, 50, true, 150],
    [150, 50, false, 100],
    [150, 100, false, 50],
    [150, 0, false, 150],
    [150, 149, false, 1],
    [150, 150, false, 1],
    [100, 254, false, 1],
    [1, 50, false, 1],
    [254, 254, false, 1],
    [254, 253, false, 1],
    [254, 1, false, 253],
    // the address owner's priority is fixed (RFC 9568 §6.1)
    [255, 50, false, 255],
    [255, 254, false, 255],
    [255, 50, true, 255],
  ])('priority %i, weight %i, canServe %s → %i', (priority, weight, canServe, want) => {
    expect(effectivePriority(priority, weight, canServe)).toBe(want);
  });
});

describe('Policy: holding preemption until this node is ready', () => {
  it('at start nothing is judged: preemption held, the configured priority (not lowered, though none is healthy)', () => {
    const { p, calls } = policy();
    expect(p.update(all('unknown'), true, START)).toEqual({ priority: 150, hold: true });
    expect(calls).toEqual(['hold true', 'priority 150']);
  });

  it('verdicts in and the data plane programmed: released', () => {
    const { p, calls } = policy();
    p.update(all('unknown'), true, START);
    expect(p.update([bh(B1, 'up'), bh(B2, 'unknown'), bh(B3, 'up')], true, START + 300)).toEqual({ priority: 150, hold: true });
    expect(p.update([bh(B1, 'up'), bh(B2, 'down', 'http 500'), bh(B3, 'up')], true, START + 400)).toEqual({ priority: 150, hold: false });
    expect(calls).toEqual(['hold true', 'priority 150', 'hold false']);
  });

  it('verdicts in but the data plane not programmed yet: still held', () => {
    const { p, calls } = policy();
    expect(p.update(all('up'), false, START + 400)).toEqual({ priority: 150, hold: true });
    expect(p.update(all('up'), true, START + 410)).toEqual({ priority: 150, hold: false });
    expect(calls).toEqual(['hold true', 'priority 150', 'hold false']);
  });

  it('a backend still unknown at settleMs counts as in (a backend that never answers must not hold the node forever)', () => {
    const { p } = policy();
    const snap = [bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'unknown')];
    expect(p.update(snap, true, START + SETTLE_MS - 1).hold).toBe(true);
    expect(p.update(snap, true, START + SETTLE_MS).hold).toBe(false);
  });

  it('settleMs does not stand in for the data plane: without a programmed table the node keeps holding', () => {
    const { p } = policy();
    expect(p.update(all('unknown'), false, START + 10 * SETTLE_MS)).toEqual({ priority: 150, hold: true });
  });

  it('while held, none healthy does not lower the priority; once settled it does', () => {
    const { p, calls } = policy();
    expect(p.update([bh(B1, 'down', 'timeout'), bh(B2, 'down', 'timeout'), bh(B3, 'unknown')], true, START + 500)).toEqual({ priority: 150, hold: true });
    expect(p.update(all('down', 'timeout'), true, START + 600)).toEqual({ priority: 50, hold: false });
    expect(calls).toEqual(['hold true', 'priority 150', 'hold false', 'priority 50']);
  });

  it('no backends configured: settled at once, never lowered', () => {
    const { p } = policy();
    expect(p.update([], true, START)).toEqual({ priority: 150, hold: false });
  });
});

describe('Policy: nftables mode lowers the priority only when no backend is healthy', () => {
  it('all down → priority - weight; one back → priority', () => {
    const { p, calls } = policy();
    expect(p.update(all('down', 'ECONNREFUSED'), true, START + 900).priority).toBe(50);
    expect(p.update([bh(B1, 'down', 'ECONNREFUSED'), bh(B2, 'up'), bh(B3, 'down', 'ECONNREFUSED')], true, START + 1000).priority).toBe(150);
    expect(calls).toEqual(['hold false', 'priority 50', 'priority 150']);
  });

  it('unready (http 500) counts as not healthy, like dead', () => {
    const { p } = policy();
    expect(p.update(all('down', 'http 500'), true, START + 900).priority).toBe(50);
  });

  it('the local apiserver down with others healthy changes nothing: traffic goes to the others', () => {
    const { p } = policy();
    expect(p.update([bh(B1, 'down', 'ECONNREFUSED'), bh(B2, 'up'), bh(B3, 'up')], true, START + 900).priority).toBe(150);
  });

  it('one backend flapping among three never changes the priority or the hold', () => {
    const { p, calls } = policy();
    p.update(all('up'), true, START + 500);
    const before = [...calls];
    // 50 flaps, bounded
    for (let i = 0; i < 50; i++) {
      const s: BackendState = i % 2 === 0 ? 'down' : 'up';
      expect(p.update([bh(B1, 'up'), bh(B2, 'up'), bh(B3, s, s === 'down' ? 'timeout' : null)], true, START + 600 + i * 200)).toEqual({
        priority: 150,
        hold: false,
      });
    }
    expect(calls).toEqual(before);
    expect(calls).toEqual(['hold false', 'priority 150']);
  });

  it('tells the election only what changed', () => {
    const { p, calls } = policy();
    for (let i = 0; i < 5; i++) p.update(all('down', 'timeout'), true, START + 900 + i);
    expect(calls).toEqual(['hold false', 'priority 50']);
  });

  it('never below 1', () => {
    const { p } = policy({ priority: 20, weight: 100 });
    expect(p.update(all('down', 'timeout'), true, START + 900).priority).toBe(1);
  });

  it('the address owner (255) is never lowered', () => {
    const { p, calls } = policy({ priority: 255 });
    expect(p.update(all('down', 'timeout'), true, START + 900)).toEqual({ priority: 255, hold: false });
    expect(calls).toEqual(['hold false', 'priority 255']);
  });
});

describe('Policy: mode none follows the local apiserver only', () => {
  const none = (o: Partial<PolicyOptions> = {}) => policy({ mode: 'none', ...o });

  it('local down lowers the priority even when every other backend is healthy', () => {
    const { p } = none();
    expect(p.update([bh(B1, 'down', 'ECONNREFUSED'), bh(B2, 'up'), bh(B3, 'up')], true, START + 900).priority).toBe(50);
  });

  it('local unready (http 500) lowers it too', () => {
    const { p } = none();
    expect(p.update([bh(B1, 'down', 'http 500'), bh(B2, 'up'), bh(B3, 'up')], true, START + 900).priority).toBe(50);
  });

  it('local up with every other backend down: not lowered', () => {
    const { p } = none();
    expect(p.update([bh(B1, 'up'), bh(B2, 'down', 'timeout'), bh(B3, 'down', 'timeout')], true, START + 900).priority).toBe(150);
  });

  it('local unknown (after settleMs) is not down: not lowered', () => {
    const { p } = none();
    expect(p.update([bh(B1, 'unknown'), bh(B2, 'up'), bh(B3, 'up')], true, START + SETTLE_MS)).toEqual({ priority: 150, hold: false });
  });

  it('local back up restores the priority', () => {
    const { p, calls } = none();
    p.update([bh(B1, 'down', 'ECONNREFUSED'), bh(B2, 'up'), bh(B3, 'up')], true, START + 900);
    p.update(all('up'), true, START + 1300);
    expect(calls).toEqual(['hold false', 'priority 50', 'priority 150']);
  });

  it('no local backend known (null), or not in the snapshot: never lowered', () => {
    expect(none({ localBackend: null }).p.update(all('down', 'timeout'), true, START + 900).priority).toBe(150);
    expect(none({ localBackend: '10.0.0.99:6443' }).p.update(all('down', 'timeout'), true, START + 900).priority).toBe(150);
  });

  it('the address owner (255) is never lowered', () => {
    const { p } = none({ priority: 255 });
    expect(p.update([bh(B1, 'down', 'ECONNREFUSED'), bh(B2, 'up'), bh(B3, 'up')], true, START + 900).priority).toBe(255);
  });

  it('canServe', () => {
    const { p } = none();
    expect(p.canServe([bh(B1, 'down', 'timeout')])).toBe(false);
    expect(p.canServe([bh(B1, 'up')])).toBe(true);
    expect(p.canServe([])).toBe(true);
  });
});

describe('Policy.reconfigure (a reload)', () => {
  it('a new base priority reaches the election at the next update, lowered the same way when nothing is healthy; no new hold', () => {
    const { p, calls } = policy();
    p.update(all('up'), true, START + 10);
    expect(calls).toStrictEqual(['hold false', 'priority 150']);
    calls.length = 0;
    p.reconfigure({ priority: 200, weight: 100, mode: 'nftables', localBackend: B1, settleMs: SETTLE_MS });
    expect(p.update(all('up'), true, START + 20)).toStrictEqual({ priority: 200, hold: false });
    expect(calls).toStrictEqual(['priority 200']);
    calls.length = 0;
    expect(p.update(all('down'), true, START + 30)).toStrictEqual({ priority: 100, hold: false });
    expect(calls).toStrictEqual(['priority 100']);
  });
  it('keeps the start time: the settle deadline still counts from the start, not from the reload', () => {
    const { p, calls } = policy();
    p.update(all('up'), true, START + 10);
    calls.length = 0;
    // a new backend, still unknown, 1600 ms after the start; the new settle time is 1200 ms
    p.reconfigure({ priority: 150, weight: 100, mode: 'nftables', localBackend: B1, settleMs: 1.5 * SETTLE_MS });
    expect(p.update([...all('up'), bh('10.0.0.14:6443', 'unknown')], true, START + 2 * SETTLE_MS)).toStrictEqual({ priority: 150, hold: false });
    expect(calls).toStrictEqual(['priority 150']);
  });
});

describe('Policy.reason: why the priority is cut, for the log and /status', () => {
  it('nftables: names each backend with its state and reason; null once one serves, and while held', () => {
    const { p } = policy();
    p.update(all('unknown'), true, START);
    expect(p.reason()).toBeNull();
    p.update([bh(B1, 'down', 'ECONNREFUSED'), bh(B2, 'down', 'http 500'), bh(B3, 'down', 'timeout')], true, START + 900);
    expect(p.reason()).toBe(`no ready backend (${B1} down: ECONNREFUSED, ${B2} down: http 500, ${B3} down: timeout)`);
    p.update([bh(B1, 'up'), bh(B2, 'down', 'http 500'), bh(B3, 'down')], true, START + 1000);
    expect(p.reason()).toBeNull();
  });
  it('nftables: more than five backends are summed up', () => {
    const { p } = policy();
    const many = Array.from({ length: 7 }, (_, i) => bh(`10.0.0.${i + 1}:6443`, 'down'));
    p.update(many, true, START + 900);
    expect(p.reason()).toBe(
      'no ready backend (10.0.0.1:6443 down, 10.0.0.2:6443 down, 10.0.0.3:6443 down, 10.0.0.4:6443 down, 10.0.0.5:6443 down, and 2 more)',
    );
  });
  it('mode none: the local apiserver down', () => {
    const { p } = policy({ mode: 'none' });
    p.update([bh(B1, 'down', 'timeout'), bh(B2, 'up'), bh(B3, 'up')], true, START + 900);
    expect(p.reason()).toBe(`the local apiserver ${B1} is down (timeout) (dataplane.vip: none)`);
  });
  it('a weight of 0 (or the owner) cuts nothing, so there is no reason', () => {
    const { p } = policy({ weight: 0 });
    expect(p.update(all('down'), true, START + 900).priority).toBe(150);
    expect(p.reason()).toBeNull();
  });
});
