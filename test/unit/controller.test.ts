/**
 * The load-balancer controller, pure: the desired data plane for a health snapshot, which
 * failure reasons drain and which reset, and the LoadBalancer driven by fake deps (no nft, no
 * conntrack): bursts coalesce into one apply, conntrack flushes follow a successful apply and
 * touch only dead backends that are still out of the set.
 */
import { describe, expect, it } from 'vitest';
import { desiredDataplane, isDeadReason, LoadBalancer, type LoadBalancerDeps } from '../../src/dataplane/controller.js';
import type { DesiredDataplane } from '../../src/dataplane/nftables.js';
import type { BackendHealth, HealthChange } from '../../src/health/checker.js';
import type { BackendState } from '../../src/health/hysteresis.js';

const B1 = '10.0.0.11:6443';
const B2 = '10.0.0.12:6443';
const B3 = '10.0.0.13:6443';
const OPTS = { family: 4 as const, vips: ['10.0.0.100'], port: 6443, local: new Set(['10.0.0.11']) };

/** One backend in a snapshot. */
function bh(address: string, state: BackendState, reason: string | null = null): BackendHealth {
  return { address, state, healthy: state === 'up', lastCheck: null, lastLatencyMs: null, reason, consecutive: 1 };
}

/** A `change` event. */
function change(backend: string, from: BackendState, to: BackendState, reason: string): HealthChange {
  return { backend, from, to, reason, at: 0, healthy: to === 'up' };
}

/** Lets every pending promise callback run. */
const settle = (): Promise<void> => new Promise((r) => setImmediate(r));

interface Deferred {
  resolve(): void;
  reject(err: Error): void;
}

/**
 * Fake deps: the snapshot is whatever the test sets; applies and flushes are recorded in one
 * ordered log. `applyMode` 'ok' resolves at once, 'fail' rejects, 'manual' waits for the test.
 */
function fakes(initial: BackendHealth[]) {
  const state = {
    snapshot: initial,
    applyMode: 'ok' as 'ok' | 'fail' | 'manual',
    /** entries each flush reports, per backend address */
    entries: new Map<string, number>(),
    flushFails: new Set<string>(),
    applies: [] as DesiredDataplane[],
    flushes: [] as { vip: string; port: number; backend: { address: string; port: number } }[],
    log: [] as string[],
    pending: [] as Deferred[],
    logs: { info: [] as string[], warn: [] as string[], error: [] as string[] },
  };
  const deps: LoadBalancerDeps = {
    apply: (d) => {
      state.applies.push(d);
      state.log.push(`apply ${d.backends.map((b) => b.address).join(',') || '-'}`);
      if (state.applyMode === 'fail') return Promise.reject(new Error('nft: simulated failure'));
      if (state.applyMode === 'ok') return Promise.resolve({ changed: true, durationMs: 1.25 });
      return new Promise((resolve, reject) => {
        state.pending.push({ resolve: () => resolve({ changed: true, durationMs: 3 }), reject });
      });
    },
    flush: (vip, port, backend) => {
      state.flushes.push({ vip, port, backend });
      state.log.push(`flush ${vip} ${backend.address}:${backend.port}`);
      if (state.flushFails.has(backend.address)) return Promise.reject(new Error('conntrack: simulated failure'));
      return Promise.resolve(state.entries.get(backend.address) ?? 2);
    },
    snapshot: () => state.snapshot.map((b) => ({ ...b })),
    log: {
      info: (_o, m) => void state.logs.info.push(m),
      warn: (_o, m) => void state.logs.warn.push(m),
      error: (_o, m) => void state.logs.error.push(m),
    },
  };
  return { state, deps };
}

describe('isDeadReason: which failures drain and which reset', () => {
  // a process answered: it is alive (an apiserver in its shutdown delay answers /readyz 500)
  it.each(['http 500', 'http 503', 'http 404', 'http 429', 'tls: CERT_HAS_EXPIRED: certificate has expired', 'tls: UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate', 'tls: ERR_SSL_WRONG_VERSION_NUMBER: wrong version number'])(
    '%j drains (not dead)',
    (reason) => {
      expect(isDeadReason(reason)).toBe(false);
    },
  );
  // nothing answered: refused, reset, silent, the node gone
  it.each(['ECONNREFUSED', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'timeout', 'refused', 'unanswered SYN', 'node down (VRRP Master_Down)'])(
    '%j resets (dead)',
    (reason) => {
      expect(isDeadReason(reason)).toBe(true);
    },
  );
  it('no reason is not dead', () => {
    expect(isDeadReason(null)).toBe(false);
  });
  // the checker aborted its own check (stopping, or the backend removed): nothing was learnt
  it('"aborted" is not dead', () => {
    expect(isDeadReason('aborted')).toBe(false);
  });
  // a local file the checks need is unreadable: that says nothing about the backends, and
  // resetting every client connection to every apiserver because a CA file is being rotated
  // would turn a local hiccup into a cluster-wide reconnect storm
  it.each(['cannot read caFile /etc/kubernetes/pki/ca.crt: ENOENT', 'cannot read tokenFile /var/run/token: EACCES', 'tokenFile /var/run/token is empty'])(
    'a local file problem (%j) does not reset established connections',
    (reason) => {
      expect(isDeadReason(reason)).toBe(false);
    },
  );
});

describe('desiredDataplane', () => {
  it('healthy backends are balanced, unready-but-alive ones drain, dead and unknown ones are in neither list', () => {
    const d = desiredDataplane(
      [bh(B1, 'up'), bh(B2, 'down', 'http 500'), bh(B3, 'down', 'ECONNREFUSED'), bh('10.0.0.14:6443', 'unknown'), bh('10.0.0.15:6443', 'down', 'tls: CERT_HAS_EXPIRED: x')],
      OPTS,
    );
    expect(d).toEqual({
      family: 4,
      vips: ['10.0.0.100'],
      port: 6443,
      backends: [{ address: '10.0.0.11', port: 6443, local: true }],
      draining: [
        { address: '10.0.0.12', port: 6443, local: false },
        { address: '10.0.0.15', port: 6443, local: false },
      ],
      masqueradeRemote: true,
    });
  });
  it('backends of the other family (there for a local endpoint of theirs) are never DNAT targets', () => {
    const d = desiredDataplane([bh(B1, 'up'), bh('[fd00::12]:6443', 'up'), bh('[fd00::13]:6443', 'down', 'http 500')], OPTS);
    expect(d.backends.map((b) => b.address)).toEqual(['10.0.0.11']);
    expect(d.draining).toEqual([]);
  });
  it('only this node’s own address is local; the vips list is a copy', () => {
    const vips = ['10.0.0.100'];
    const d = desiredDataplane([bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'up')], { ...OPTS, vips });
    expect(d.backends.map((b) => [b.address, b.local])).toEqual([
      ['10.0.0.11', true],
      ['10.0.0.12', false],
      ['10.0.0.13', false],
    ]);
    vips.push('10.0.0.101');
    expect(d.vips).toEqual(['10.0.0.100']);
  });
  it('nothing healthy: an empty set (no DNAT rule), nothing draining when every backend is dead', () => {
    const d = desiredDataplane([bh(B1, 'down', 'timeout'), bh(B2, 'down', 'refused'), bh(B3, 'unknown')], OPTS);
    expect(d.backends).toEqual([]);
    expect(d.draining).toEqual([]);
  });
  it('an unknown backend with a failure on record is not draining (only down ones are)', () => {
    const d = desiredDataplane([bh(B1, 'unknown', 'http 500')], OPTS);
    expect(d.backends).toEqual([]);
    expect(d.draining).toEqual([]);
  });
  it('IPv6 backends lose their brackets and get canonical text', () => {
    const d = desiredDataplane([bh('[fd00:0:0::11]:6443', 'up'), bh('[fd00::12]:6443', 'down', 'http 500')], {
      family: 6,
      vips: ['fd00::100'],
      port: 6443,
      local: new Set(['fd00::11']),
    });
    expect(d.backends).toEqual([{ address: 'fd00::11', port: 6443, local: true }]);
    expect(d.draining).toEqual([{ address: 'fd00::12', port: 6443, local: false }]);
  });
});

describe('LoadBalancer', () => {
  it('a burst of changes in one tick makes one apply, of the latest snapshot', async () => {
    const { state, deps } = fakes([bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'up')]);
    const lb = new LoadBalancer(deps, OPTS);
    state.snapshot = [bh(B1, 'up'), bh(B2, 'down', 'http 500'), bh(B3, 'down', 'http 500')];
    lb.onChange(change(B2, 'up', 'down', 'http 500'));
    lb.onChange(change(B3, 'up', 'down', 'http 500'));
    const p1 = lb.sync();
    const p2 = lb.sync();
    await Promise.all([p1, p2]);
    expect(state.applies).toHaveLength(1);
    expect(state.applies[0]!.backends.map((b) => b.address)).toEqual(['10.0.0.11']);
    expect(state.applies[0]!.draining!.map((b) => b.address)).toEqual(['10.0.0.12', '10.0.0.13']);
    expect(lb.status()).toMatchObject({ mode: 'nftables', backends: [B1], applies: 1, failures: 0, lastApplyMs: 1.25, lastError: null, flushedEntries: 0 });
  });

  it('changes during an apply make exactly one more apply, after it', async () => {
    const { state, deps } = fakes([bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'up')]);
    state.applyMode = 'manual';
    const lb = new LoadBalancer(deps, OPTS);
    const first = lb.sync();
    await settle();
    expect(state.applies).toHaveLength(1);
    // ten changes while nft runs
    state.snapshot = [bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'down', 'http 500')];
    const later: Promise<void>[] = [];
    for (let i = 0; i < 10; i++) {
      lb.onChange(change(B3, 'up', 'down', 'http 500'));
      later.push(lb.sync());
    }
    await settle();
    expect(state.applies).toHaveLength(1);
    state.pending.shift()!.resolve();
    await first;
    await settle();
    expect(state.applies).toHaveLength(2);
    expect(state.applies[1]!.backends.map((b) => b.address)).toEqual(['10.0.0.11', '10.0.0.12']);
    state.pending.shift()!.resolve();
    await Promise.all(later);
    expect(state.applies).toHaveLength(2);
    expect(lb.status().applies).toBe(2);
  });

  it('a dead backend’s flows are flushed only after the apply that removed it succeeded, once per VIP', async () => {
    const { state, deps } = fakes([bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'up')]);
    state.applyMode = 'manual';
    state.entries.set('10.0.0.13', 3);
    const lb = new LoadBalancer(deps, { ...OPTS, vips: ['10.0.0.100', '10.0.0.101'] });
    state.snapshot = [bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'down', 'ECONNREFUSED')];
    lb.onChange(change(B3, 'up', 'down', 'ECONNREFUSED'));
    const done = lb.sync();
    await settle();
    // nft has not answered yet: a reset client would be DNATed straight back to the dead backend
    expect(state.flushes).toEqual([]);
    state.pending.shift()!.resolve();
    await done;
    expect(state.log).toEqual(['apply 10.0.0.11,10.0.0.12', 'flush 10.0.0.100 10.0.0.13:6443', 'flush 10.0.0.101 10.0.0.13:6443']);
    expect(state.flushes[0]).toEqual({ vip: '10.0.0.100', port: 6443, backend: { address: '10.0.0.13', port: 6443 } });
    expect(lb.status().flushedEntries).toBe(6);
    expect(state.logs.info).toContain('dead backend: its connections were reset');
    // the flush is not repeated by later applies
    state.applyMode = 'ok';
    await lb.sync();
    expect(state.flushes).toHaveLength(2);
  });

  it.each(['ECONNREFUSED', 'ECONNRESET', 'timeout', 'refused', 'unanswered SYN', 'node down (VRRP Master_Down)'])('%j is dead: flushed', async (reason) => {
    const { state, deps } = fakes([bh(B1, 'up'), bh(B2, 'down', reason), bh(B3, 'up')]);
    const lb = new LoadBalancer(deps, OPTS);
    lb.onChange(change(B2, 'up', 'down', reason));
    await lb.sync();
    expect(state.flushes.map((f) => f.backend.address)).toEqual(['10.0.0.12']);
  });

  it.each(['http 500', 'http 503', 'tls: CERT_HAS_EXPIRED: certificate has expired'])('%j is unready but alive: drained, never flushed', async (reason) => {
    const { state, deps } = fakes([bh(B1, 'up'), bh(B2, 'down', reason), bh(B3, 'up')]);
    const lb = new LoadBalancer(deps, OPTS);
    lb.onChange(change(B2, 'up', 'down', reason));
    await lb.sync();
    expect(state.applies).toHaveLength(1);
    expect(state.applies[0]!.draining!.map((b) => b.address)).toEqual(['10.0.0.12']);
    expect(state.flushes).toEqual([]);
    expect(lb.status().flushedEntries).toBe(0);
  });

  it('changes to up (or unknown → up) never flush', async () => {
    const { state, deps } = fakes([bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'up')]);
    const lb = new LoadBalancer(deps, OPTS);
    lb.onChange(change(B1, 'unknown', 'up', 'http 200'));
    lb.onChange(change(B2, 'down', 'up', 'http 200'));
    await lb.sync();
    expect(state.flushes).toEqual([]);
  });

  it('a dead backend that is back in the set by the time of the apply is never flushed', async () => {
    const { state, deps } = fakes([bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'up')]);
    const lb = new LoadBalancer(deps, OPTS);
    lb.onChange(change(B3, 'up', 'down', 'refused'));
    // passive detection said dead, an active check brought it back before the apply ran
    state.snapshot = [bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'up')];
    lb.onChange(change(B3, 'down', 'up', 'http 200'));
    await lb.sync();
    expect(state.applies).toHaveLength(1);
    expect(state.applies[0]!.backends.map((b) => b.address)).toEqual(['10.0.0.11', '10.0.0.12', '10.0.0.13']);
    expect(state.flushes).toEqual([]);
    // nor later, when it leaves the set for an unready (not dead) reason
    state.snapshot = [bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'down', 'http 500')];
    lb.onChange(change(B3, 'up', 'down', 'http 500'));
    await lb.sync();
    expect(state.applies).toHaveLength(2);
    expect(state.flushes).toEqual([]);
  });

  it('IPv6: a dead backend is flushed by its bare address; one back in the set is recognised with brackets', async () => {
    const o = { family: 6 as const, vips: ['fd00::100'], port: 6443, local: new Set(['fd00::11']) };
    const { state, deps } = fakes([bh('[fd00::11]:6443', 'up'), bh('[fd00::12]:6443', 'down', 'ECONNREFUSED'), bh('[fd00::13]:6443', 'up')]);
    const lb = new LoadBalancer(deps, o);
    lb.onChange(change('[fd00::12]:6443', 'up', 'down', 'ECONNREFUSED'));
    lb.onChange(change('[fd00::13]:6443', 'up', 'down', 'ECONNRESET'));
    // fd00::13 came back before the apply
    await lb.sync();
    expect(state.flushes).toEqual([{ vip: 'fd00::100', port: 6443, backend: { address: 'fd00::12', port: 6443 } }]);
    expect(lb.status().backends).toEqual(['[fd00::11]:6443', '[fd00::13]:6443']);
  });

  it('a failed apply counts, keeps the previous backends in /status, flushes nothing; the next good apply flushes', async () => {
    const { state, deps } = fakes([bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'up')]);
    const lb = new LoadBalancer(deps, OPTS);
    await lb.sync();
    expect(lb.status()).toMatchObject({ applies: 1, failures: 0, backends: [B1, B2, B3] });

    state.applyMode = 'fail';
    state.snapshot = [bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'down', 'ECONNREFUSED')];
    lb.onChange(change(B3, 'up', 'down', 'ECONNREFUSED'));
    await lb.sync();
    expect(state.flushes).toEqual([]);
    expect(lb.status()).toMatchObject({ applies: 1, failures: 1, backends: [B1, B2, B3], lastError: 'nft: simulated failure', flushedEntries: 0 });
    expect(state.logs.error).toEqual(['data plane apply failed; the previous rules stay']);

    // it keeps counting
    await lb.sync();
    await lb.sync();
    expect(lb.status()).toMatchObject({ applies: 1, failures: 3 });
    expect(state.flushes).toEqual([]);

    // the kernel accepts the next one: only now are the dead backend's flows reset
    state.applyMode = 'ok';
    await lb.sync();
    expect(state.flushes.map((f) => f.backend.address)).toEqual(['10.0.0.13']);
    expect(lb.status()).toMatchObject({ applies: 2, failures: 3, backends: [B1, B2], lastError: null, flushedEntries: 2 });
  });

  it('a failed apply followed by the backend’s return: nothing is ever flushed', async () => {
    const { state, deps } = fakes([bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'down', 'timeout')]);
    const lb = new LoadBalancer(deps, OPTS);
    state.applyMode = 'fail';
    lb.onChange(change(B3, 'up', 'down', 'timeout'));
    await lb.sync();
    state.applyMode = 'ok';
    state.snapshot = [bh(B1, 'up'), bh(B2, 'up'), bh(B3, 'up')];
    lb.onChange(change(B3, 'down', 'up', 'http 200'));
    await lb.sync();
    expect(state.flushes).toEqual([]);
    expect(lb.status()).toMatchObject({ applies: 1, failures: 1, backends: [B1, B2, B3] });
  });

  it('a flush that fails is logged; the other VIPs and backends are still flushed', async () => {
    const { state, deps } = fakes([bh(B1, 'up'), bh(B2, 'down', 'ECONNREFUSED'), bh(B3, 'down', 'ECONNREFUSED')]);
    state.flushFails.add('10.0.0.12');
    state.entries.set('10.0.0.13', 5);
    const lb = new LoadBalancer(deps, { ...OPTS, vips: ['10.0.0.100', '10.0.0.101'] });
    lb.onChange(change(B2, 'up', 'down', 'ECONNREFUSED'));
    lb.onChange(change(B3, 'up', 'down', 'ECONNREFUSED'));
    await lb.sync();
    expect(state.flushes.map((f) => `${f.vip} ${f.backend.address}`)).toEqual([
      '10.0.0.100 10.0.0.12',
      '10.0.0.101 10.0.0.12',
      '10.0.0.100 10.0.0.13',
      '10.0.0.101 10.0.0.13',
    ]);
    expect(state.logs.warn).toEqual(['cannot reset connections to a dead backend', 'cannot reset connections to a dead backend']);
    expect(lb.status().flushedEntries).toBe(10);
  });

  it('status() is a copy', async () => {
    const { deps } = fakes([bh(B1, 'up')]);
    const lb = new LoadBalancer(deps, OPTS);
    await lb.sync();
    const s = lb.status();
    s.backends.push('x');
    s.applies = 99;
    expect(lb.status()).toMatchObject({ backends: [B1], applies: 1 });
  });
});

describe('LoadBalancer.noteHealth: a draining backend that dies later', () => {
  const opts = { family: 4 as const, vips: ['10.0.0.100'], port: 6443, local: new Set<string>() };
  it('resets its flows once when its reason turns from unready to dead, and not again', async () => {
    const { state, deps } = fakes([bh('10.0.0.11:6443', 'up'), bh('10.0.0.13:6443', 'down', 'http 500')]);
    state.applyMode = 'ok';
    const lb = new LoadBalancer(deps, opts);
    lb.noteHealth();
    await settle();
    expect(state.flushes).toEqual([]);
    state.snapshot = [bh('10.0.0.11:6443', 'up'), bh('10.0.0.13:6443', 'down', 'timeout')];
    lb.noteHealth();
    await lb.sync();
    expect(state.flushes).toEqual([{ vip: '10.0.0.100', port: 6443, backend: { address: '10.0.0.13', port: 6443 } }]);
    lb.noteHealth();
    await lb.sync();
    expect(state.flushes).toHaveLength(1);
    // back up, then dead again: reset again
    state.snapshot = [bh('10.0.0.11:6443', 'up'), bh('10.0.0.13:6443', 'up')];
    lb.noteHealth();
    state.snapshot = [bh('10.0.0.11:6443', 'up'), bh('10.0.0.13:6443', 'down', 'ECONNREFUSED')];
    lb.noteHealth();
    await lb.sync();
    expect(state.flushes).toHaveLength(2);
  });
});
