/**
 * The reload plan (src/agent/reload.ts planReload) over the agent's real phase list
 * (src/agent/index.ts agentPhases): which change calls for which reaction of which phase, the
 * refusals and the actions, exactly.
 */
import { describe, expect, it } from 'vitest';
import { agentPhases } from '../../src/agent/index.js';
import { changedPaths, changeOf, planReload, type ReloadPlan } from '../../src/agent/reload.js';
import { parseConfig } from '../../src/config/index.js';
import type { Logger } from '../../src/log/log.js';

/** A full config: election, two VIPs, three backends, a local endpoint; `over` replaces top-level sections. */
function config(over: Record<string, string> = {}) {
  const sections: Record<string, string> = {
    interface: 'interface: eth0',
    vrrp: 'vrrp:\n  vrid: 51\n  priority: 100\n  advertisementInterval: 100ms\n  preempt: true',
    vips: 'vips: [10.0.0.100, 10.0.0.101]',
    apiserver:
      'apiserver:\n  port: 6443\n  backends: [10.0.0.11:6443, 10.0.0.12:6443, 10.0.0.13:6443]\n  health:\n    insecureSkipVerify: true\n    interval: 200ms\n    timeout: 200ms',
    localEndpoint: 'localEndpoint:\n  address: 127.0.0.1:7443',
    dataplane: 'dataplane:\n  local: proxy',
    admin: 'admin:\n  listen: 127.0.0.1:9641',
    log: 'log:\n  level: info',
    ...over,
  };
  return parseConfig(
    Object.values(sections)
      .filter((s) => s !== '')
      .join('\n'),
  );
}

const phases = agentPhases({
  checker: null,
  status: () => Promise.reject(new Error('not in this test')),
  stamp: () => 0,
  ready: () => Promise.resolve(),
  log: {} as Logger,
})
  .phases()
  .map((p) => p.entry);

const plan = (a: ReturnType<typeof config>, b: ReturnType<typeof config>): ReloadPlan => planReload(phases, changeOf(a, b));

describe('changedPaths', () => {
  it('walks objects, compares lists whole, names a section present on one side only', () => {
    expect(changedPaths({ a: { b: 1, c: [1, 2] }, d: null }, { a: { b: 2, c: [1, 2] }, d: { e: 1 } })).toStrictEqual(['a.b', 'd']);
    expect(changedPaths({ a: [1, 2] }, { a: [2, 1] })).toStrictEqual(['a']);
    expect(changedPaths({ a: 1 }, { a: 1 })).toStrictEqual([]);
    expect(changedPaths({ a: 1 }, { a: 1, b: undefined })).toStrictEqual([]);
  });
});

describe('planReload over the agent phases', () => {
  it('the same file: nothing changed, nothing done', () => {
    const p = plan(config(), config());
    expect([p.changed, p.refusals, p.reactions, p.actions, p.handover]).toStrictEqual([[], [], {}, ['nothing changed'], false]);
  });

  it('one VIP removed: the VIP data plane, the election (a patch) and passive detection reconfigure; preflight releases its lock', () => {
    const p = plan(config(), config({ vips: 'vips: [10.0.0.100]' }));
    expect(p.changed).toStrictEqual(['vips']);
    expect(p.refusals).toStrictEqual([]);
    expect(p.reactions).toStrictEqual({ preflight: 'reconfigure', 'VIP data plane': 'reconfigure', election: 'reconfigure', health: 'reconfigure' });
    expect(p.actions).toStrictEqual([
      'VIP data plane reprogrammed (one atomic nftables replace)',
      'VIPs removed: 10.0.0.101',
      'election reconfigured (vips), from the next advert',
      'passive detection restarted',
    ]);
    expect(p.handover).toBe(false);
  });

  it('a new interval and priority: one patch of the election, the policy takes the new base priority', () => {
    const p = plan(config(), config({ vrrp: 'vrrp:\n  vrid: 51\n  priority: 150\n  advertisementInterval: 200ms\n  preempt: true' }));
    expect(p.changed).toStrictEqual(['vrrp.advertisementIntervalCs', 'vrrp.advertisementIntervalMs', 'vrrp.priority']);
    expect(p.reactions).toStrictEqual({ election: 'reconfigure', 'election policy': 'reconfigure' });
    expect(p.actions).toStrictEqual(['election reconfigured (priority, advertisementIntervalCs), from the next advert', 'election policy updated']);
  });

  it('a new VRID: the election re-runs (a hand-over), preflight takes the new instance lock first', () => {
    const p = plan(config(), config({ vrrp: 'vrrp:\n  vrid: 52\n  priority: 100\n  advertisementInterval: 100ms\n  preempt: true' }));
    expect(p.reactions).toStrictEqual({ preflight: 'reconfigure', election: 'rerun' });
    expect(p.actions).toStrictEqual(['hand-over: election stopped (priority 0 if master, VIPs removed) and started again (vrrp.vrid)']);
    expect(p.handover).toBe(true);
  });

  it('IPv4 → IPv6 under the nftables VIP data plane: the plane re-runs for the new family within the hand-over', () => {
    const v6 = config({
      vips: 'vips: [fd00::100]',
      apiserver: 'apiserver:\n  port: 6443\n  backends: ["[fd00::11]:6443"]\n  health:\n    insecureSkipVerify: true\n    interval: 200ms\n    timeout: 200ms',
      localEndpoint: '',
      dataplane: '',
    });
    const v4 = config({ localEndpoint: '', dataplane: '' });
    const p = plan(v4, v6);
    expect(p.changed).toStrictEqual(['apiserver.backends', 'family', 'vips']);
    expect(p.refusals).toStrictEqual([]);
    expect(p.reactions['VIP data plane']).toBe('rerun');
    expect(p.reactions.election).toBe('rerun');
    expect(p.handover).toBe(true);
  });

  it('admin.listen and log.level: the log level at once, admin re-run, in the phases order', () => {
    const p = plan(config(), config({ admin: 'admin:\n  listen: 127.0.0.1:9642', log: 'log:\n  level: debug' }));
    expect(p.changed).toStrictEqual(['admin.listen.port', 'log.level']);
    expect(p.reactions).toStrictEqual({ preflight: 'reconfigure', admin: 'rerun' });
    expect(p.actions).toStrictEqual(['log level set', 'admin endpoint re-run']);
    expect(p.handover).toBe(false);
  });

  it('a phase says why it cannot apply a setting: the whole reload is refused, each setting named', () => {
    const p = plan(config(), config({ dataplane: 'dataplane:\n  local: proxy\n  vip: none', vips: 'vips: [10.0.0.100]' }));
    expect(p.refusals).toStrictEqual(['dataplane.vip: a reload cannot change the VIP data plane mode; restart the agent to apply it']);
  });

  it('a setting no phase reads is refused with the generic words', () => {
    const p = plan(config(), config({ dataplane: 'dataplane:\n  local: proxy\n  connectionSync:\n    enabled: false' }));
    expect(p.refusals).toContain('dataplane.connectionSync.enabled: a reload cannot change this setting; restart the agent to apply it');
  });

  it('load balancing on or off (no backends ↔ some) and the election on or off take a restart', () => {
    const none = config({ apiserver: 'apiserver:\n  port: 6443', localEndpoint: '' });
    expect(plan(config({ localEndpoint: '' }), none).refusals).toStrictEqual([
      'apiserver.backends: a reload cannot change turning load balancing on or off (none ↔ some backends); restart the agent to apply it',
    ]);
    const off = plan(config(), config({ vrrp: '', interface: '', vips: '' }));
    expect(off.refusals).toContain('vrrp: a reload cannot change turning the election on or off; restart the agent to apply it');
  });

  it('connection sync: resyncTimeout applies in place (its phase alone reads it); its other settings take a restart', () => {
    const sync = (extra: string) => config({ localEndpoint: '', dataplane: `dataplane:\n  connectionSync:\n    enabled: true${extra}` });
    const p = plan(sync(''), sync('\n    resyncTimeout: 20s'));
    expect([p.changed, p.refusals, p.reactions, p.actions]).toStrictEqual([
      ['dataplane.connectionSync.resyncTimeoutMs'],
      [],
      { 'connection sync': 'reconfigure' },
      ['connection sync: preempt hold bound replaced'],
    ]);
    expect(plan(sync(''), sync('\n    commitTimeout: 2s')).refusals).toStrictEqual([
      'dataplane.connectionSync.commitTimeoutMs: a reload cannot change this setting; restart the agent to apply it',
    ]);
  });

  it('the eBPF local endpoint re-runs for a new VIP (VIP:port is one of its endpoints); the proxy does not', () => {
    const ebpf = config({ dataplane: 'dataplane:\n  local: ebpf' });
    expect(plan(ebpf, config({ dataplane: 'dataplane:\n  local: ebpf', vips: 'vips: [10.0.0.100]' })).reactions['local endpoint']).toBe('rerun');
    expect(plan(config(), config({ vips: 'vips: [10.0.0.100]' })).reactions['local endpoint']).toBeUndefined();
  });
});
