/**
 * The nftables plane, pure: the desired data plane for a ready set, and the LoadBalancer plane
 * driven by the reconcile with fake deps (no nft, no conntrack): the transaction comes first,
 * conntrack flushes follow per VIP and touch only dead backends that are out of the set, and the
 * clients of the flushed flows are probed after their VIP's flush.
 */
import { describe, expect, it } from 'vitest';
import { desiredDataplane, LoadBalancer, VIP_PLANE_MESSAGES, type LoadBalancerDeps, type VipPlaneOptions } from '../../src/dataplane/controller.js';
import type { FlowClient } from '../../src/dataplane/conntrack.js';
import type { DesiredDataplane } from '../../src/dataplane/nftables.js';
import type { ProbeReport } from '../../src/dataplane/probe.js';
import { Reconciler } from '../../src/dataplane/reconcile.js';
import { NftablesApplier, type Executor } from '../../src/dataplane/apply.js';
import type { Cause } from '../../src/health/verdict.js';
import { parseHostPort } from '../../src/net/hostport.js';
import { CAUSES, FakeSource, recordingLog, verdict } from './verdict-fakes.js';

const B1 = '10.0.0.11:6443';
const B2 = '10.0.0.12:6443';
const B3 = '10.0.0.13:6443';
const OPTS: VipPlaneOptions = { family: 4, vips: ['10.0.0.100'], port: 6443, local: new Set(['10.0.0.11']) };
const hp = (l: readonly string[]) => l.map(parseHostPort);

/** Fake deps: applies and flushes are recorded in one ordered log. */
function fakes() {
  const state = {
    applyMode: 'ok' as 'ok' | 'fail',
    entries: new Map<string, number>(),
    flushFails: new Set<string>(),
    applies: [] as DesiredDataplane[],
    flushes: [] as { vip: string; port: number; backend: { address: string; port: number } }[],
    /** the clients each backend's flush reports (by address) */
    clients: new Map<string, FlowClient[]>(),
    probes: [] as { vip: string; port: number; clients: readonly FlowClient[] }[],
    /** the probe's outcome: a report, a rejection, or a promise a test resolves */
    probeWith: null as null | ((clients: readonly FlowClient[]) => Promise<ProbeReport>),
    log: [] as string[],
  };
  const { log, logs } = recordingLog();
  const deps: LoadBalancerDeps = {
    apply: (d) => {
      state.applies.push(d);
      state.log.push(`apply ${d.backends.map((b) => b.address).join(',') || '-'}`);
      if (state.applyMode === 'fail') return Promise.reject(new Error('nft: simulated failure'));
      return Promise.resolve({ changed: true, durationMs: 1.25 });
    },
    flush: (vip, port, backend) => {
      state.flushes.push({ vip, port, backend });
      state.log.push(`flush ${vip} ${backend.address}:${backend.port}`);
      if (state.flushFails.has(backend.address)) return Promise.reject(new Error('conntrack: simulated failure'));
      return Promise.resolve({ deleted: state.entries.get(backend.address) ?? 2, clients: state.clients.get(backend.address) ?? [] });
    },
    probe: (vip, port, clients) => {
      state.probes.push({ vip, port, clients });
      state.log.push(`probe ${vip} ${clients.map((c) => `${c.address}:${c.port}`).join(',')}`);
      if (state.probeWith) return state.probeWith(clients);
      return Promise.resolve({ clients: clients.length, sent: 2 * clients.length, failed: 0, error: null, durationMs: 0.5 });
    },
    log,
  };
  return { state, deps, logs, log };
}

/** The plane under its reconcile, following a fake source of `addresses`. */
function balancer(addresses: string[], o: VipPlaneOptions = OPTS) {
  const f = fakes();
  const source = new FakeSource(addresses);
  const plane = new LoadBalancer(f.deps, o);
  const r = new Reconciler(plane, source, { log: f.log, ...VIP_PLANE_MESSAGES });
  r.follow();
  const status = () => ({ ...plane.status(), ...r.status() });
  return { ...f, source, plane, r, status };
}

describe('desiredDataplane', () => {
  it('ready backends are balanced, unready ones drain; the local one is marked', () => {
    const d = desiredDataplane({ ready: hp([B1]), draining: hp([B2, '10.0.0.15:6443']) }, OPTS);
    expect(d).toStrictEqual({
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
    const d = desiredDataplane({ ready: hp([B1, '[fd00::12]:6443']), draining: hp(['[fd00::13]:6443']) }, OPTS);
    expect(d.backends.map((b) => b.address)).toStrictEqual(['10.0.0.11']);
    expect(d.draining).toStrictEqual([]);
  });
  it('the vips list is a copy; IPv6 backends are bare canonical addresses', () => {
    const vips = ['fd00::100'];
    const d = desiredDataplane(
      { ready: hp(['[fd00:0:0::11]:6443']), draining: hp(['[fd00::12]:6443']) },
      { family: 6, vips, port: 6443, local: new Set(['fd00::11']) },
    );
    vips.push('fd00::101');
    expect(d.vips).toStrictEqual(['fd00::100']);
    expect(d.backends).toStrictEqual([{ address: 'fd00::11', port: 6443, local: true }]);
    expect(d.draining).toStrictEqual([{ address: 'fd00::12', port: 6443, local: false }]);
  });
});

describe('LoadBalancer (nftables plane) under the reconcile', () => {
  it('one transaction of the verdicts: ready, draining, and nothing for unknown or dead', async () => {
    const { source, r, state, status } = balancer([B1, B2, B3, '10.0.0.14:6443']);
    source.judge(verdict(B1, 'up'));
    source.judge(verdict(B2, CAUSES.http500));
    source.judge(verdict(B3, CAUSES.refused));
    await r.sync();
    expect(state.applies).toHaveLength(1);
    expect(state.applies[0]!.backends.map((b) => b.address)).toStrictEqual(['10.0.0.11']);
    expect(state.applies[0]!.draining!.map((b) => b.address)).toStrictEqual(['10.0.0.12']);
    expect(status()).toStrictEqual({
      mode: 'nftables',
      backends: [B1],
      applies: 1,
      failures: 0,
      lastApplyMs: 1.25,
      lastError: null,
      flushedEntries: 2,
      probesSent: 0,
      probesFailed: 0,
      restores: 0,
      lastRestore: null,
    });
  });

  it('the clients of a dead backend’s deleted flows are probed per VIP, after the apply and the flush of that VIP', async () => {
    const { source, r, plane, state, logs, status } = balancer([B1, B2, B3], { ...OPTS, vips: ['10.0.0.100', '10.0.0.101'] });
    state.clients.set('10.0.0.13', [
      { address: '10.0.0.50', port: 40000 },
      { address: '10.0.0.51', port: 40001 },
    ]);
    for (const b of [B1, B2, B3]) source.judge(verdict(b, 'up'));
    await r.sync();
    state.log.length = 0;
    source.judge(verdict(B3, { kind: 'timeout' }));
    await r.sync();
    await plane.probing();
    expect(state.log).toStrictEqual([
      'apply 10.0.0.11,10.0.0.12',
      'flush 10.0.0.100 10.0.0.13:6443',
      'probe 10.0.0.100 10.0.0.50:40000,10.0.0.51:40001',
      'flush 10.0.0.101 10.0.0.13:6443',
      'probe 10.0.0.101 10.0.0.50:40000,10.0.0.51:40001',
    ]);
    expect(state.probes[0]!.port).toBe(6443);
    expect(status()).toMatchObject({ probesSent: 8, probesFailed: 0 });
    expect(logs.info.filter((m) => m === VIP_PLANE_MESSAGES.probed)).toHaveLength(2);
    // a backend whose flush found no client that waits: no probe
    source.judge(verdict(B2, CAUSES.refused));
    await r.sync();
    await plane.probing();
    expect(state.probes).toHaveLength(2);
  });

  it('the probes run on after the reset: the next apply does not wait for them, probing() does', async () => {
    const { source, r, plane, state, status } = balancer([B1, B2, B3]);
    state.clients.set('10.0.0.13', [{ address: '10.0.0.50', port: 40000 }]);
    let finish!: () => void;
    state.probeWith = (clients) =>
      new Promise((resolve) => (finish = () => resolve({ clients: clients.length, sent: 2, failed: 0, error: null, durationMs: 800 })));
    for (const b of [B1, B2, B3]) source.judge(verdict(b, 'up'));
    await r.sync();
    source.judge(verdict(B3, { kind: 'timeout' }));
    await r.sync();
    source.judge(verdict(B2, CAUSES.refused));
    await r.sync();
    expect(state.log.filter((l) => l.startsWith('apply'))).toHaveLength(3);
    expect(status().probesSent).toBe(0);
    let done = false;
    const waiting = plane.probing().then(() => (done = true));
    await Promise.resolve();
    expect(done).toBe(false);
    finish();
    await waiting;
    expect(status().probesSent).toBe(2);
  });

  it('a sender that throws at once is logged like one that rejects; the reset goes on', async () => {
    const { source, r, plane, state, logs, status } = balancer([B1, B2]);
    state.clients.set('10.0.0.12', [{ address: '10.0.0.50', port: 40000 }]);
    state.probeWith = () => {
      throw new TypeError('batch.clients[0].address must be an IPv4 address');
    };
    source.judge(verdict(B1, 'up'));
    source.judge(verdict(B2, CAUSES.refused));
    await r.sync();
    await plane.probing();
    expect(logs.warn).toStrictEqual([VIP_PLANE_MESSAGES.probeFailed]);
    expect(status()).toMatchObject({ backends: [B1], flushedEntries: 2, probesSent: 0 });
  });

  it('a probe that fails, or whose packets the kernel refused, is logged and counted; nothing else changes', async () => {
    const { source, r, plane, state, logs, status } = balancer([B1, B2, B3]);
    state.clients.set('10.0.0.12', [{ address: '10.0.0.50', port: 40000 }]);
    state.clients.set('10.0.0.13', [{ address: '10.0.0.51', port: 40001 }]);
    state.probeWith = (clients) =>
      clients[0]!.port === 40000
        ? Promise.reject(new Error('socket(AF_INET, SOCK_RAW, IPPROTO_RAW) failed on a raw IPv4 socket: EPERM'))
        : Promise.resolve({ clients: 1, sent: 1, failed: 1, error: 'sendmmsg failed on a raw IPv4 socket: EPERM', durationMs: 0.1 });
    source.judge(verdict(B1, 'up'));
    source.judge(verdict(B2, CAUSES.refused));
    source.judge(verdict(B3, CAUSES.refused));
    await r.sync();
    await plane.probing();
    expect(logs.warn).toStrictEqual([VIP_PLANE_MESSAGES.probeFailed, VIP_PLANE_MESSAGES.probeFailed]);
    expect(status()).toMatchObject({ backends: [B1], flushedEntries: 4, probesSent: 1, probesFailed: 1, failures: 0 });
  });

  it('a dead backend’s flows are flushed after the apply, once per VIP, and not again', async () => {
    const { source, r, state, logs, status } = balancer([B1, B2, B3], { ...OPTS, vips: ['10.0.0.100', '10.0.0.101'] });
    state.entries.set('10.0.0.13', 3);
    for (const b of [B1, B2, B3]) source.judge(verdict(b, 'up'));
    await r.sync();
    state.log.length = 0;
    source.judge(verdict(B3, CAUSES.refused));
    await r.sync();
    expect(state.log).toStrictEqual(['apply 10.0.0.11,10.0.0.12', 'flush 10.0.0.100 10.0.0.13:6443', 'flush 10.0.0.101 10.0.0.13:6443']);
    expect(state.flushes[0]).toStrictEqual({ vip: '10.0.0.100', port: 6443, backend: { address: '10.0.0.13', port: 6443 } });
    expect(status().flushedEntries).toBe(6);
    expect(logs.info).toContain('dead backend: its connections were reset');
    await r.sync();
    expect(state.flushes).toHaveLength(2);
  });

  const dead: Cause[] = [
    { kind: 'refused' },
    { kind: 'reset' },
    { kind: 'timeout' },
    { kind: 'unreachable', code: 'EHOSTUNREACH' },
    { kind: 'network', code: 'EADDRNOTAVAIL' },
    { kind: 'failed' },
    { kind: 'passive', signal: 'refused' },
    { kind: 'passive', signal: 'unanswered' },
    { kind: 'nodeDown', node: '10.0.0.12' },
  ];
  it.each(dead.map((c) => [JSON.stringify(c), c] as const))('%s is dead: flushed', async (_n, cause) => {
    const { source, r, state } = balancer([B1, B2]);
    source.judge(verdict(B1, 'up'));
    source.judge(verdict(B2, cause));
    await r.sync();
    expect(state.flushes.map((f) => f.backend.address)).toStrictEqual(['10.0.0.12']);
  });

  const unready: Cause[] = [
    { kind: 'http', status: 500 },
    { kind: 'http', status: 503 },
    { kind: 'tls', code: 'CERT_HAS_EXPIRED' },
    { kind: 'localFile', setting: 'caFile' },
    { kind: 'localFile', setting: 'tokenFile' },
    { kind: 'aborted' },
  ];
  it.each(unready.map((c) => [JSON.stringify(c), c] as const))('%s is unready but alive: drained, never flushed', async (_n, cause) => {
    const { source, r, state, status } = balancer([B1, B2]);
    source.judge(verdict(B1, 'up'));
    source.judge(verdict(B2, cause));
    await r.sync();
    expect(state.applies[0]!.draining!.map((b) => b.address)).toStrictEqual(['10.0.0.12']);
    expect(state.flushes).toStrictEqual([]);
    expect(status().flushedEntries).toBe(0);
  });

  it('IPv6: flushed by the bare address; a dead backend of the other family is not flushed here', async () => {
    const { source, r, state, status } = balancer(['[fd00::11]:6443', '[fd00::12]:6443', B3], {
      family: 6,
      vips: ['fd00::100'],
      port: 6443,
      local: new Set(['fd00::11']),
    });
    source.judge(verdict('[fd00::11]:6443', 'up'));
    source.judge(verdict('[fd00::12]:6443', CAUSES.refused));
    source.judge(verdict(B3, CAUSES.refused));
    await r.sync();
    expect(state.flushes).toStrictEqual([{ vip: 'fd00::100', port: 6443, backend: { address: 'fd00::12', port: 6443 } }]);
    expect(status().backends).toStrictEqual(['[fd00::11]:6443']);
  });

  it('a failed apply keeps the previous backends in /status and flushes nothing; the next good one flushes', async () => {
    const { source, r, state, logs, status } = balancer([B1, B2, B3]);
    for (const b of [B1, B2, B3]) source.judge(verdict(b, 'up'));
    await r.sync();
    state.applyMode = 'fail';
    source.judge(verdict(B3, CAUSES.refused));
    await r.sync();
    expect(state.flushes).toStrictEqual([]);
    expect(status()).toMatchObject({ applies: 1, failures: 1, backends: [B1, B2, B3], lastError: 'nft: simulated failure', flushedEntries: 0 });
    expect(logs.error).toStrictEqual(['data plane apply failed; the previous rules stay']);
    state.applyMode = 'ok';
    await r.sync();
    expect(state.flushes.map((f) => f.backend.address)).toStrictEqual(['10.0.0.13']);
    expect(status()).toMatchObject({ applies: 2, failures: 1, backends: [B1, B2], lastError: null, flushedEntries: 2 });
  });

  it('a flush that fails is logged; the other VIPs and backends are still flushed', async () => {
    const { source, r, state, logs, status } = balancer([B1, B2, B3], { ...OPTS, vips: ['10.0.0.100', '10.0.0.101'] });
    state.flushFails.add('10.0.0.12');
    state.entries.set('10.0.0.13', 5);
    source.judge(verdict(B2, CAUSES.refused));
    source.judge(verdict(B3, CAUSES.refused));
    await r.sync();
    expect(state.flushes.map((f) => `${f.vip} ${f.backend.address}`)).toStrictEqual([
      '10.0.0.100 10.0.0.12',
      '10.0.0.101 10.0.0.12',
      '10.0.0.100 10.0.0.13',
      '10.0.0.101 10.0.0.13',
    ]);
    expect(logs.warn).toStrictEqual(['cannot reset connections to a dead backend', 'cannot reset connections to a dead backend']);
    expect(status().flushedEntries).toBe(10);
  });

  it('status() is a copy', async () => {
    const { source, r, plane } = balancer([B1]);
    source.judge(verdict(B1, 'up'));
    await r.sync();
    const s = plane.status();
    s.backends.push('x');
    s.applies = 99;
    expect(plane.status()).toMatchObject({ backends: [B1], applies: 1 });
  });

  it('set changes that leave the ruleset as it is (a backend that is not ready comes and goes): no nft run, no apply counted, no log', async () => {
    // the real applier on a fake nft: what runs is what `nft monitor` would see
    const runs: string[][] = [];
    const exec: Executor = (args) => {
      runs.push(args);
      // no table yet: reading its counters fails as nft does; everything else succeeds
      return Promise.resolve(
        args.includes('counters') ? { code: 1, stdout: '', stderr: 'Error: No such file or directory\n' } : { code: 0, stdout: '', stderr: '' },
      );
    };
    const applier = new NftablesApplier({ exec });
    const { log, logs } = recordingLog();
    const source = new FakeSource([B1, B2]);
    const plane = new LoadBalancer({ apply: (d) => applier.apply(d), flush: () => Promise.resolve({ deleted: 0, clients: [] }), log }, OPTS);
    const r = new Reconciler(plane, source, { log, ...VIP_PLANE_MESSAGES });
    source.set(verdict(B1, 'up'));
    source.set(verdict(B2, CAUSES.http500));
    await r.sync();
    const transactions = (): number => runs.filter((a) => a.join(' ') === '-f -').length;
    expect(transactions()).toBe(1);
    expect(plane.status()).toMatchObject({ backends: [B1], applies: 1 });
    const first = plane.status().lastApplyMs;
    const applied = logs.info.length;
    const ran = runs.length;
    // B3, not ready (no verdict yet, then refused), joins and leaves the set ten times; each change re-syncs
    const N = 10;
    for (let i = 0; i < N; i++) {
      source.list.push({ backend: parseHostPort(B3), state: 'unknown' });
      await r.sync();
      source.judge(verdict(B3, CAUSES.refused));
      await r.sync();
      source.list.pop();
      await r.sync();
    }
    expect(runs.length).toBe(ran);
    expect(transactions()).toBe(1);
    expect(plane.status()).toMatchObject({ backends: [B1], applies: 1, lastApplyMs: first });
    expect(logs.info.length).toBe(applied);
  });
});
