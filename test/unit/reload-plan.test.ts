/** The reload diff (src/agent/reload-plan.ts): which change calls for which action, exactly. */
import { describe, expect, it } from 'vitest';
import { changedPaths, describePlan, planReload, type ReloadPlan } from '../../src/agent/reload-plan.js';
import { parseConfig } from '../../src/config/index.js';

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

/** The plan's actions, with the default (nothing) left out, for exact comparison. */
function actions(p: ReloadPlan): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(p)) {
    if (k === 'changed') continue;
    if (v === false || v === null || (Array.isArray(v) && v.length === 0)) continue;
    if (k === 'vips' && p.vips.added.length === 0 && p.vips.removed.length === 0) continue;
    out[k] = v;
  }
  return out;
}

describe('changedPaths', () => {
  it('walks objects, compares lists whole, names a section present on one side only', () => {
    expect(changedPaths({ a: { b: 1, c: [1, 2] }, d: null }, { a: { b: 2, c: [1, 2] }, d: { e: 1 } })).toStrictEqual(['a.b', 'd']);
    expect(changedPaths({ a: [1, 2] }, { a: [2, 1] })).toStrictEqual(['a']);
    expect(changedPaths({ a: 1 }, { a: 1 })).toStrictEqual([]);
    expect(changedPaths({ a: 1 }, { a: 1, b: undefined })).toStrictEqual([]);
  });
});

describe('planReload', () => {
  it('the same file: nothing changed, nothing done', () => {
    const p = planReload(config(), config());
    expect(p.changed).toStrictEqual([]);
    expect(actions(p)).toStrictEqual({});
    expect(describePlan(p)).toStrictEqual(['nothing changed']);
  });

  it('one VIP removed: that VIP only, by a patch; the VIP data plane, passive detection and ... nothing else', () => {
    const p = planReload(config(), config({ vips: 'vips: [10.0.0.100]' }));
    expect(p.changed).toStrictEqual(['vips']);
    expect(actions(p)).toStrictEqual({
      election: { vips: ['10.0.0.100'] },
      vips: { added: [], removed: ['10.0.0.101'] },
      vipDataplane: true,
      passive: true,
    });
  });

  it('a VIP added and the interval changed: one patch with both, from the next advert', () => {
    const p = planReload(
      config(),
      config({
        vips: 'vips: [10.0.0.100, 10.0.0.101, 10.0.0.102]',
        vrrp: 'vrrp:\n  vrid: 51\n  priority: 100\n  advertisementInterval: 200ms\n  preempt: true',
      }),
    );
    expect(p.changed).toStrictEqual(['vips', 'vrrp.advertisementIntervalCs', 'vrrp.advertisementIntervalMs']);
    expect(actions(p)).toStrictEqual({
      election: { vips: ['10.0.0.100', '10.0.0.101', '10.0.0.102'], advertisementIntervalCs: 20 },
      vips: { added: ['10.0.0.102'], removed: [] },
      vipDataplane: true,
      passive: true,
    });
  });

  it('priority and preempt: the election patch and the policy (new base priority)', () => {
    const p = planReload(
      config(),
      config({ vrrp: 'vrrp:\n  vrid: 51\n  priority: 150\n  advertisementInterval: 100ms\n  preempt: false\n  preemptDelay: 2s' }),
    );
    expect(p.changed).toStrictEqual(['vrrp.preempt', 'vrrp.preemptDelayMs', 'vrrp.priority']);
    expect(actions(p)).toStrictEqual({ election: { priority: 150, preempt: false, preemptDelayMs: 2000 }, policy: true });
  });

  it('backends: the checker set, the policy, passive detection and the election membership (the seed hosts are members); no election patch', () => {
    const p = planReload(
      config(),
      config({
        apiserver:
          'apiserver:\n  port: 6443\n  backends: [10.0.0.11:6443, 10.0.0.12:6443]\n  health:\n    insecureSkipVerify: true\n    interval: 200ms\n    timeout: 200ms',
      }),
    );
    expect(p.changed).toStrictEqual(['apiserver.backends']);
    expect(actions(p)).toStrictEqual({ backends: true, policy: true, passive: true, membership: true });
  });

  it('health settings: the checker settings and the policy (settle time); timeout also passive detection', () => {
    const p = planReload(
      config(),
      config({
        apiserver:
          'apiserver:\n  port: 6443\n  backends: [10.0.0.11:6443, 10.0.0.12:6443, 10.0.0.13:6443]\n  health:\n    insecureSkipVerify: true\n    interval: 500ms\n    timeout: 300ms\n    rise: 3',
      }),
    );
    expect(p.changed).toStrictEqual(['apiserver.health.intervalMs', 'apiserver.health.rise', 'apiserver.health.settleMs', 'apiserver.health.timeoutMs']);
    expect(actions(p)).toStrictEqual({ health: true, policy: true, passive: true });
    const q = planReload(
      config(),
      config({
        apiserver:
          'apiserver:\n  port: 6443\n  backends: [10.0.0.11:6443, 10.0.0.12:6443, 10.0.0.13:6443]\n  health:\n    insecureSkipVerify: true\n    interval: 200ms\n    timeout: 200ms\n    path: /livez',
      }),
    );
    expect(actions(q)).toStrictEqual({ health: true, policy: true });
  });

  it('apiserver.port: the VIP data plane and passive detection', () => {
    const p = planReload(
      config(),
      config({
        apiserver:
          'apiserver:\n  port: 8443\n  backends: [10.0.0.11:6443, 10.0.0.12:6443, 10.0.0.13:6443]\n  health:\n    insecureSkipVerify: true\n    interval: 200ms\n    timeout: 200ms',
      }),
    );
    expect(actions(p)).toStrictEqual({ vipDataplane: true, passive: true });
  });

  it('dataplane.rebalance: the VIP data plane (the rebalancer retuned in place), not a restart', () => {
    const p = planReload(config(), config({ dataplane: 'dataplane:\n  local: proxy\n  rebalance:\n    enabled: true\n    factor: 1.5' }));
    expect(p.changed).toStrictEqual(['dataplane.rebalance.enabled', 'dataplane.rebalance.factor']);
    expect(actions(p)).toStrictEqual({ vipDataplane: true });
  });

  it('log level, admin listen, local endpoint address: each its own action', () => {
    expect(actions(planReload(config(), config({ log: 'log:\n  level: debug' })))).toStrictEqual({ logLevel: true });
    expect(actions(planReload(config(), config({ admin: 'admin:\n  listen: 127.0.0.1:9642' })))).toStrictEqual({ admin: true });
    expect(actions(planReload(config(), config({ localEndpoint: 'localEndpoint:\n  address: 127.0.0.1:7444' })))).toStrictEqual({ localEndpoint: true });
  });

  it('announce and vipLifetime: election patch only', () => {
    const p = planReload(config(), config({ log: 'log:\n  level: info\nannounce:\n  count: 3\nvipLifetime: 10s' }));
    expect(p.changed).toStrictEqual(['announce.count', 'vipLifetimeMs']);
    expect(actions(p)).toStrictEqual({ election: { announce: { count: 3, spacingMs: 0, repeatAfterMs: 5000, refreshMs: 60000 }, vipLifetimeMs: 10000 } });
  });

  it('a new VRID is a hand-over (no patch); so are the interface, the checksum rule, priority 255', () => {
    const p = planReload(config(), config({ vrrp: 'vrrp:\n  vrid: 52\n  priority: 100\n  advertisementInterval: 100ms\n  preempt: true' }));
    expect(p.changed).toStrictEqual(['vrrp.vrid']);
    expect(actions(p)).toStrictEqual({ handover: ['vrrp.vrid'] });
    expect(describePlan(p)).toStrictEqual(['hand-over: election stopped (priority 0 if master, VIPs removed) and started again (vrrp.vrid)']);
    expect(planReload(config(), config({ interface: 'interface: eth1' })).handover).toStrictEqual(['interface']);
    expect(
      planReload(config(), config({ vrrp: 'vrrp:\n  vrid: 51\n  priority: 100\n  advertisementInterval: 100ms\n  checksum: rfc9568' })).handover,
    ).toStrictEqual(['vrrp.checksum']);
    const owner = planReload(config(), config({ vrrp: 'vrrp:\n  vrid: 51\n  priority: 255\n  advertisementInterval: 100ms' }));
    expect(owner.handover).toStrictEqual(['vrrp.owner']);
    expect(owner.election).toBeNull();
  });

  it('multicast to unicast is a hand-over; a new unicast peer list is a membership change (membership.ts computes the peers)', () => {
    const uni = (peers: string) => config({ vrrp: `vrrp:\n  vrid: 51\n  priority: 100\n  advertisementInterval: 100ms\n  preempt: true\n  peers: [${peers}]` });
    expect(planReload(config(), uni('10.0.0.12')).handover).toStrictEqual(['vrrp.unicast']);
    const p = planReload(uni('10.0.0.12'), uni('10.0.0.12, 10.0.0.13'));
    expect(actions(p)).toStrictEqual({ membership: true });
  });

  it('a change of the VIPs family with dataplane.vip none is a hand-over of the election only', () => {
    const v6 = { vips: 'vips: ["fd00::100"]', apiserver: '', localEndpoint: '', dataplane: 'dataplane:\n  vip: none\n  local: off' };
    const v4 = { vips: 'vips: [10.0.0.100]', apiserver: '', localEndpoint: '', dataplane: 'dataplane:\n  vip: none\n  local: off' };
    const p = planReload(config(v4), config(v6));
    expect(p.changed).toStrictEqual(['family', 'vips']);
    expect(actions(p)).toStrictEqual({ handover: ['family'], vips: { added: ['fd00::100'], removed: ['10.0.0.100'] }, passive: true });
  });

  it('a change of the VIPs family with the nftables data plane is a hand-over that moves the plane (not a restart, no same-family reprogram)', () => {
    const health = '  health:\n    insecureSkipVerify: true\n    interval: 200ms\n    timeout: 200ms';
    const six = {
      interface: 'interface: eth0',
      vips: 'vips: ["fd00::100"]',
      apiserver: `apiserver:\n  port: 6443\n  backends: ["[fd00::11]:6443", "[fd00::12]:6443"]\n${health}`,
      localEndpoint: '',
      dataplane: 'dataplane:\n  local: off',
    };
    const four = {
      ...six,
      vips: 'vips: [10.0.0.100, 10.0.0.101]',
      apiserver: `apiserver:\n  port: 6443\n  backends: [10.0.0.11:6443, 10.0.0.12:6443]\n${health}`,
    };
    const p = planReload(config(four), config(six));
    expect(p.changed).toStrictEqual(['apiserver.backends', 'family', 'vips']);
    expect(p.restart).toStrictEqual([]);
    expect(actions(p)).toStrictEqual({
      handover: ['family'],
      vips: { added: ['fd00::100'], removed: ['10.0.0.100', '10.0.0.101'] },
      vipFamily: { from: 4, to: 6 },
      backends: true,
      policy: true,
      passive: true,
    });
    expect(describePlan(p)).toStrictEqual([
      'hand-over: election stopped (priority 0 if master, VIPs removed) and started again (family)',
      'VIPs added: fd00::100',
      'VIPs removed: 10.0.0.100, 10.0.0.101',
      'backend set replaced (kept backends keep their state)',
      "VIP data plane moved from IPv4 to IPv6 (within the hand-over: the new family's table and lock; the old family's table removed unless keepOnStop is all)",
      'election policy updated',
      'passive detection restarted',
    ]);
    // and back; the same family keeps the in-place reprogram
    expect(planReload(config(six), config(four)).vipFamily).toStrictEqual({ from: 6, to: 4 });
    const same = planReload(config(four), config({ ...four, vips: 'vips: [10.0.0.100]' }));
    expect([same.vipFamily, same.vipDataplane, same.handover]).toStrictEqual([null, true, []]);
  });

  it('what a reload cannot apply is listed in restart (the reload is refused as a whole)', () => {
    expect(planReload(config(), config({ dataplane: 'dataplane:\n  local: proxy\n  keepOnStop: true' })).restart).toStrictEqual(['dataplane.keepOnStop']);
    expect(planReload(config(), config({ dataplane: 'dataplane:\n  local: ebpf' })).restart).toStrictEqual(['dataplane.local']);
    // connection sync: its conntrackd and the table's source NAT come with the start
    expect(
      planReload(config(), config({ dataplane: 'dataplane:\n  local: proxy\n  connectionSync:\n    enabled: false\n    commitTimeout: 2s' })).restart,
    ).toStrictEqual(['dataplane.connectionSync.commitTimeoutMs', 'dataplane.connectionSync.enabled']);
    expect(planReload(config(), config({ localEndpoint: '' })).restart).toStrictEqual(['localEndpoint']);
    expect(planReload(config(), config({ vrrp: '', vips: '', interface: '' })).restart).toContain('vrrp');
    expect(planReload(config(), config({ apiserver: '', localEndpoint: '' })).restart).toStrictEqual(['localEndpoint', 'apiserver.backends (none ↔ some)']);
  });
});

describe('mode: bgp reloads', () => {
  const bgp = (configFile: string) =>
    parseConfig(
      `mode: bgp\nvips: [10.0.0.100]\napiserver: { backends: ["10.0.0.11:6443"], health: { insecureSkipVerify: true } }\nbgp: { configFile: ${configFile}, localAsn: 64512, peers: [{ address: 10.0.1.1, asn: 64500 }] }\n`,
    );
  it('a bgp.configFile moved (onto bird.conf, say) is refused as a restart: the running snippet and announcement stay', () => {
    const p = planReload(bgp('/etc/bird/ballast4.conf'), bgp('/etc/bird/bird.conf'));
    expect(p.restart).toStrictEqual(['bgp.configFile']);
  });
});
