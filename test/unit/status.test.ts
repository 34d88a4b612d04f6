import { describe, expect, it } from 'vitest';
import { formatStatus, statusDocument, statusState } from '../../src/observe/status.js';
import type { EngineStatus } from '../../src/vrrp/engine.js';

const engine: EngineStatus = {
  state: 'active',
  vrid: 51,
  priority: 150,
  effectivePriority: 150,
  masterAddress: '10.0.0.11',
  masterPriority: 150,
  since: '2026-11-29T20:00:00.000Z',
  masterAdverIntervalMs: 100,
  masterDownIntervalMs: 341.40625,
  skewTimeMs: 41.40625,
  vipsHeld: true,
  counters: { advertsSent: 12, advertsReceived: 3, sendErrors: 0, dropped: { checksum: 2, vrid: 7 }, transitions: 2, announcementsSent: 5, foreign: 4 },
};
const fixed = {
  vips: ['10.0.0.100'],
  interface: 'eth0',
  family: 4 as const,
  primaryAddress: '10.0.0.11',
  unicast: false,
  peers: [] as string[],
  auth: false,
  advertisementIntervalMs: 100,
};

describe('status document', () => {
  it('maps RFC states to operator names', () => {
    expect(statusState('initialize')).toBe('init');
    expect(statusState('active')).toBe('master');
    expect(statusState('backup')).toBe('backup');
    expect(statusState('fault')).toBe('fault');
  });
  it('has the fields operators and tools rely on', () => {
    const d = statusDocument(engine, fixed);
    expect(d).toEqual({
      state: 'master',
      vrid: 51,
      priority: 150,
      effectivePriority: 150,
      masterAddress: '10.0.0.11',
      masterPriority: 150,
      vips: ['10.0.0.100'],
      vipsHeld: true,
      since: '2026-11-29T20:00:00.000Z',
      interface: 'eth0',
      family: 4,
      primaryAddress: '10.0.0.11',
      mode: 'multicast',
      peers: [],
      auth: false,
      advertisementIntervalMs: 100,
      masterAdverIntervalMs: 100,
      masterDownIntervalMs: 341.406,
      skewTimeMs: 41.406,
      counters: engine.counters,
      backends: [],
      dataplane: { mode: 'off', reason: 'no apiserver.backends configured' },
      local: { mode: 'off', reason: 'no localEndpoint configured' },
    });
    expect(statusDocument(engine, { ...fixed, unicast: true }).mode).toBe('unicast');
    const u = formatStatus(
      statusDocument(engine, { ...fixed, unicast: true, peers: ['10.0.0.12', '10.0.0.13'], auth: true }),
      Date.parse('2026-11-29T20:00:00.000Z'),
    );
    expect(u.split('\n')).toContain('interface: eth0, IPv4, unicast (peers: 10.0.0.12 10.0.0.13), authenticated, source 10.0.0.11');
    expect(formatStatus(statusDocument(engine, { ...fixed, unicast: true }), 0)).toContain('unicast (peers: none, single node), source');
  });
  it('carries what was heard of other masters, and prints it once there was one', () => {
    const otherMasters = {
      heard: 1,
      windowMs: 60_000,
      adverts: { kept: 2, yielded: 0, handover: 1 },
      last: { source: '10.0.0.12', priority: 100, outcome: 'kept' as const, ageMs: 4_400 },
    };
    const d = statusDocument({ ...engine, otherMasters, lastAdvertAgeMs: 4_400 }, fixed);
    expect(d).toMatchObject({ otherMasters, lastAdvertAgeMs: 4_400 });
    expect(formatStatus(d, 0).split('\n')).toContain(
      'other masters: 1 heard in the last 60s; adverts kept 2, yielded 0, handover 1; last 10.0.0.12 (priority 100, kept) 4s ago',
    );
    const none = statusDocument(
      { ...engine, otherMasters: { ...otherMasters, heard: 0, adverts: { kept: 0, yielded: 0, handover: 0 }, last: null }, lastAdvertAgeMs: null },
      fixed,
    );
    expect(formatStatus(none, 0)).not.toContain('other masters');
  });
  it('carries connection sync and prints its line: running with the last commit, unavailable with the reason, off', () => {
    const common = { backends: [], dataplane: { mode: 'off' as const, reason: 'x' }, local: { mode: 'off' as const, reason: 'y' } };
    const running = {
      state: 'running' as const,
      internalEntries: 12,
      externalEntries: 240,
      lastMessageAgeMs: 400,
      lastCommit: { at: '2026-12-07T01:00:00.000Z', durationMs: 23.5, ok: true },
      preemptHold: false,
      restarts: 0,
    };
    const d = statusDocument(engine, fixed, { ...common, connectionSync: running });
    expect(d.connectionSync).toStrictEqual(running);
    const line = (doc: ReturnType<typeof statusDocument>): string | undefined =>
      formatStatus(doc, 0)
        .split('\n')
        .find((l) => l.startsWith('conn sync'));
    expect(line(d)).toMatch(
      /^conn sync: +conntrackd running; 12 here, 240 from the peers; a peer heard 0\.4 s ago, last commit 23\.5 ms at 2026-12-07T01:00:00\.000Z$/,
    );
    const missing = statusDocument(engine, fixed, {
      ...common,
      connectionSync: {
        ...running,
        state: 'unavailable',
        internalEntries: null,
        externalEntries: null,
        lastMessageAgeMs: null,
        lastCommit: { at: '2026-12-07T01:00:00.000Z', durationMs: 0, ok: false, error: 'conntrackd is unavailable' },
        error: 'cannot run conntrackd: ENOENT (Debian package "conntrackd")',
      },
    });
    expect(line(missing)).toContain(
      'conntrackd unavailable: cannot run conntrackd: ENOENT (Debian package "conntrackd"); no statistics yet; no peer heard yet, last commit FAILED (conntrackd is unavailable)',
    );
    expect(line(statusDocument(engine, fixed, { ...common, connectionSync: { ...running, state: 'off' } }))).toContain(
      'off (dataplane.connectionSync.enabled: false)',
    );
    expect(line(statusDocument(engine, fixed, common))).toBeUndefined();
  });
  it('prints for a person', () => {
    const text = formatStatus(statusDocument(engine, fixed), Date.parse('2026-11-29T20:00:42.000Z'));
    expect(text.split('\n')).toEqual([
      'state:     master (since 2026-11-29T20:00:00.000Z, 42s ago)',
      'vrid:      51',
      'priority:  150',
      'master:    10.0.0.11 (priority 150)',
      'vips:      10.0.0.100 (held here)',
      'interface: eth0, IPv4, multicast, source 10.0.0.11',
      'timers:    advert 100 ms, master advert 100 ms, master down 341.406 ms',
      'adverts:   sent 12, received 3, send errors 0',
      'dropped:   checksum=2 vrid=7',
      'dataplane: off: no apiserver.backends configured',
      'local:     off: no localEndpoint configured',
    ]);
  });
  it('prints an agent without an election (local endpoint only), and the local endpoint', () => {
    const local = {
      mode: 'proxy' as const,
      endpoints: ['127.0.0.1:7443'],
      backends: ['10.0.0.11:6443', '10.0.0.12:6443'],
      updates: 2,
      socketsReset: 1,
      failures: 0,
      lastError: null,
    };
    expect(formatStatus({ state: 'none', backends: [], dataplane: { mode: 'off', reason: 'no election (vrrp absent)' }, local }).split('\n')).toEqual([
      'state: none (no election: vrrp is not configured)',
      'local: proxy (user-space proxy: the slower path), 127.0.0.1:7443 → 10.0.0.11:6443 10.0.0.12:6443, 1 socket(s) reset',
    ]);
    const ebpf = formatStatus(
      statusDocument(engine, fixed, { backends: [], dataplane: { mode: 'none' }, local: { ...local, mode: 'ebpf', backends: [] } }),
      Date.parse('2026-11-29T20:00:00.000Z'),
    );
    expect(ebpf.split('\n')).toContain('local:     ebpf, 127.0.0.1:7443 → no ready backend, 1 socket(s) reset');
  });
  it('shows a lowered priority and an unknown master', () => {
    const d = statusDocument({ ...engine, state: 'backup', effectivePriority: 90, masterAddress: null, masterPriority: null, vipsHeld: false }, fixed);
    const text = formatStatus(d, Date.parse('2026-11-29T20:00:00.000Z'));
    expect(text).toContain('priority:  150 (advertising 90)');
    expect(text).toContain('master:    unknown');
    expect(text).toContain('(not held here)');
  });
  it('the last state change (from, to, reason, at), the transitions ring, since when the master is heard, and why the priority is cut', () => {
    const transitions = [
      { from: 'init' as const, to: 'backup' as const, reason: 'startup', at: '2026-11-29T19:59:58.000Z' },
      { from: 'backup' as const, to: 'master' as const, reason: 'masterDown', at: '2026-11-29T20:00:00.000Z' },
    ];
    const d = statusDocument({ ...engine, effectivePriority: 50 }, fixed, undefined, {
      transitions,
      masterSince: '2026-11-29T20:00:00.000Z',
      priorityReason: 'no ready backend (10.0.0.11:6443 down: timeout)',
    });
    expect(d).toMatchObject({
      lastTransition: transitions[1],
      transitions,
      masterSince: '2026-11-29T20:00:00.000Z',
      priorityReason: 'no ready backend (10.0.0.11:6443 down: timeout)',
    });
    const text = formatStatus(d, Date.parse('2026-11-29T20:00:10.000Z'));
    expect(text).toContain('changed:   backup → master (masterDown) at 2026-11-29T20:00:00.000Z');
    expect(text).toContain('priority:  150 (advertising 50: no ready backend (10.0.0.11:6443 down: timeout))');
    expect(text).toContain('master:    10.0.0.11 (priority 150), heard since 2026-11-29T20:00:00.000Z');
    // none recorded yet: null, and no line
    const none = statusDocument(engine, fixed, undefined, { transitions: [], masterSince: null, priorityReason: null });
    expect(none.lastTransition).toBeNull();
    expect(formatStatus(none, 0)).not.toContain('changed:');
  });
});
