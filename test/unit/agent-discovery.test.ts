/**
 * The discovery phase's pieces that need no network: the members of a set and the one place the
 * election hears of them (feedElection → VrrpHost.reconfigure).
 */
import { describe, expect, it } from 'vitest';
import { feedElection, membersOf } from '../../src/agent/phases/discovery.js';
import { membershipOf } from '../../src/vrrp/membership.js';
import type { ElectionPhase } from '../../src/agent/phases/election.js';
import { parseConfig, type Config } from '../../src/config/index.js';
import type { SourcedBackend } from '../../src/discovery/index.js';
import { parseHostPort } from '../../src/net/hostport.js';
import type { Logger } from '../../src/log/log.js';

const set = (...a: string[]): SourcedBackend[] => a.map((s) => ({ backend: parseHostPort(s), source: 'endpointslice' as const }));
const logs: string[] = [];
const log = { info: (_o: object, m: string) => logs.push(m), warn: (_o: object, m: string) => logs.push(`WARN ${m}`) } as unknown as Logger;

/** A config whose vrrp section carries the vrrp helper's fields (discoveredPeers, acceptFrom), whether or not the schema has them yet. */
const withVrrp = (extra: Record<string, unknown>, peers = ['10.0.0.11', '10.0.0.12']): Config => {
  const c = parseConfig(`vrrp:\n  vrid: 51\n  peers: [${peers.join(', ')}]\nvips: [10.0.0.100]\n`);
  return { ...c, vrrp: { ...c.vrrp!, ...extra } } as Config;
};
/** An election phase whose engine records the patches it is given (or refuses them). */
const fakeElection = (config: Config, fail = false) => {
  const patches: unknown[] = [];
  const host = { reconfigure: async (p: unknown) => (fail ? Promise.reject(new Error('family mismatch')) : void patches.push(p)) };
  const own = ['10.0.0.11'];
  const election = {
    phase: 'election',
    undo: async () => undefined,
    host,
    membership: membershipOf(config, { own, discovered: null }),
    membershipInputs: { config, own, discovered: null },
    membershipQueue: Promise.resolve(),
  } as unknown as ElectionPhase;
  return { election, patches };
};

describe('discovery phase: members and the election feed', () => {
  it('members are the hosts of the set, canonical, no repeats', () => {
    expect(membersOf(set('10.0.0.11:6443', '10.0.0.12:6443', '10.0.0.11:8443', '[fd00:0::1]:6443'))).toStrictEqual(['10.0.0.11', '10.0.0.12', 'fd00::1']);
  });
  it('discoveredPeers: the listed peers plus the members of the family, own address left out; acceptFrom members: the same list', async () => {
    const config = withVrrp({ discoveredPeers: true, acceptFrom: 'members' });
    const { election, patches } = fakeElection(config);
    await feedElection(election, ['10.0.0.11', '10.0.0.13', 'fd00::1'], ['10.0.0.11', '10.0.0.13', 'fd00::1'], log);
    expect(election.membership.standby).toBe(false);
    expect(patches).toStrictEqual([{ peers: ['10.0.0.12', '10.0.0.13'], members: ['10.0.0.13', '10.0.0.12'], standby: false }]);
  });
  it('no change of membership (acceptFrom any, listed peers only), or no election: no call', async () => {
    const { election, patches } = fakeElection(withVrrp({ acceptFrom: 'any', discoveredPeers: false }));
    await feedElection(election, ['10.0.0.13'], ['10.0.0.13'], log);
    await feedElection(null, ['10.0.0.13'], ['10.0.0.13'], log);
    expect(patches).toStrictEqual([]);
  });
  it('a refused patch is logged; the election keeps its membership', async () => {
    const { election } = fakeElection(withVrrp({ discoveredPeers: true }), true);
    const before = election.membership;
    logs.length = 0;
    await feedElection(election, ['10.0.0.13'], ['10.0.0.13'], log);
    expect(logs).toStrictEqual(['WARN discovery: cannot update the election members; it keeps the previous ones']);
    expect(election.membership).toBe(before);
  });
});

describe('sources in ballast status and /metrics', () => {
  it('each backend row names its source; ballast_backend_info and the discovery counters', async () => {
    const { formatStatus } = await import('../../src/observe/status.js');
    const { createMetrics } = await import('../../src/observe/metrics.js');
    const b = (address: string, source: 'seed' | 'endpointslice' | 'lastKnown') => ({
      address,
      state: 'up' as const,
      healthy: true,
      lastCheck: null,
      lastLatencyMs: 3,
      reason: null,
      consecutive: 2,
      source,
    });
    const doc = {
      state: 'none' as const,
      backends: [b('10.0.0.11:6443', 'seed'), b('10.0.0.12:6443', 'endpointslice'), b('10.0.0.13:6443', 'lastKnown')],
      discovery: {
        state: 'watching' as const,
        server: 'https://10.0.0.12:6443',
        lists: 2,
        errors: 1,
        emptyKept: 3,
        lastChange: null,
        lastError: 'HTTP-Code: 403',
        denied: 'forbidden' as const,
        deniedSince: '2026-12-06T22:00:00.000Z',
        refusals: { unauthorized: 2, forbidden: 5 },
        thread: { failures: 1, lastFailure: 'out of memory', lastFailureAt: '2026-12-06T21:59:00.000Z' },
      },
      dataplane: { mode: 'off' as const, reason: 'test' },
      local: { mode: 'off' as const, reason: 'test' },
    };
    expect(
      formatStatus(doc)
        .split('\n')
        .filter((l) => l.startsWith('backend')),
    ).toStrictEqual([
      'backend: 10.0.0.11:6443 up, 3 ms [seed]',
      'backend: 10.0.0.12:6443 up, 3 ms [endpointslice]',
      'backend: 10.0.0.13:6443 up, 3 ms [lastKnown]',
    ]);
    const m = createMetrics();
    m.update(doc);
    const text = (await m.registry.metrics()).split('\n');
    expect(text).toContain('ballast_backend_info{backend="10.0.0.12:6443",source="endpointslice"} 1');
    expect(text).toContain('ballast_backend_info{backend="10.0.0.13:6443",source="lastKnown"} 1');
    expect(text).toContain('ballast_discovery_empty_kept_total 3');
    expect(text).toContain('ballast_discovery_errors_total 1');
    expect(text).toContain('ballast_discovery_lists_total 2');
    expect(text).toContain('ballast_discovery_thread_failures_total 1');
    // a refusal has its own series, by reason
    expect(text).toContain('ballast_discovery_denied{reason="forbidden"} 1');
    expect(text).toContain('ballast_discovery_denied{reason="unauthorized"} 0');
    expect(text).toContain('ballast_discovery_refusals_total{reason="forbidden"} 5');
    expect(text).toContain('ballast_discovery_refusals_total{reason="unauthorized"} 2');
  });
});

describe('the discovery phase with a checker (no network)', () => {
  it('without a discovery section: the seed, source seed; a reconfigure replaces it', async () => {
    const { startDiscovery } = await import('../../src/agent/phases/discovery.js');
    const { HealthChecker } = await import('../../src/health/checker.js');
    const config = parseConfig('vrrp:\n  vrid: 51\nvips: [10.0.0.100]\napiserver:\n  backends: [10.0.0.11:6443]\n  health: {insecureSkipVerify: true}\n');
    const checker = new HealthChecker({
      health: config.apiserver.health,
      backends: config.apiserver.backends,
      probe: async () => ({ ok: true, latencyMs: 1, cause: { kind: 'http', status: 200 }, status: 200 }),
    });
    const ctx = { log: { ...log, error: () => undefined, child: () => log } as unknown as Logger, signal: new AbortController().signal, fail: () => undefined };
    const phase = await startDiscovery(ctx, config, { checker, followers: () => ({}), election: () => null });
    expect([...phase.sources()]).toStrictEqual([['10.0.0.11:6443', 'seed']]);
    expect(phase.stats()).toBeNull();
    const next = parseConfig(
      'vrrp:\n  vrid: 51\nvips: [10.0.0.100]\napiserver:\n  backends: [10.0.0.12:6443, 10.0.0.13:6443]\n  health: {insecureSkipVerify: true}\n',
    );
    await phase.setConfig(next);
    expect(checker.backends().map((b) => b.host)).toStrictEqual(['10.0.0.12', '10.0.0.13']);
    expect(phase.members()).toStrictEqual(['10.0.0.12', '10.0.0.13']);
    await phase.undo();
  });
  it('a kubeconfig that exists but is malformed is a configuration error on discovery.kubeconfig', async () => {
    const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const { startDiscovery } = await import('../../src/agent/phases/discovery.js');
    const { HealthChecker } = await import('../../src/health/checker.js');
    const { ConfigError } = await import('../../src/errors.js');
    const dir = mkdtempSync(join(tmpdir(), 'ballast-kc-'));
    try {
      writeFileSync(join(dir, 'admin.conf'), 'apiVersion: v1\nclusters: [unclosed\n');
      const config = parseConfig(
        `vrrp:\n  vrid: 51\nvips: [10.0.0.100]\napiserver:\n  backends: [10.0.0.11:6443]\n  health: {insecureSkipVerify: true}\ndiscovery:\n  kubeconfig: ${join(dir, 'admin.conf')}\n  lastKnownFile: ${join(dir, 'b.json')}\n`,
      );
      const checker = new HealthChecker({ health: config.apiserver.health, backends: config.apiserver.backends });
      const ctx = { log: { ...log, error: () => undefined } as unknown as Logger, signal: new AbortController().signal, fail: () => undefined };
      // the discovery thread as shipped (npm test builds it first): it reads the kubeconfig
      const { builtDiscoveryWorker } = await import('../support/discovery-worker.js');
      const discoveryWorker = builtDiscoveryWorker();
      const err = await startDiscovery(ctx, config, { checker, followers: () => ({}), election: () => null, discoveryWorker }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as InstanceType<typeof ConfigError>).issues[0]?.path).toBe('discovery.kubeconfig');
      expect((err as InstanceType<typeof ConfigError>).issues[0]?.message).toContain(join(dir, 'admin.conf'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
