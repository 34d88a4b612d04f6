/**
 * The engine against a fake OS edge: it carries out the machine's actions through the edge,
 * in order, and turns what the edge reports into events. No root, no sockets.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  LOGGED_SOURCES_MAX,
  PACER_HOLD_MARGIN_MS,
  PACER_HOLD_MS,
  PRECISE_WAIT_MS,
  pacerHoldMs,
  OTHER_MASTER_WINDOW_MS,
  STANDBY_OFF,
  STANDBY_ON,
  STRAY_ON_RELOAD,
  VrrpEngine,
  type EngineEvent,
  type EngineOptions,
} from '../../src/vrrp/engine.js';
import type { EdgeInputs, OpenEdge, VrrpEdge } from '../../src/vrrp/edge.js';
import { decodeAdvertisement, encodeAdvertisement } from '../../src/vrrp/packet.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import type { PrefixedAddress } from '../../src/vip/netlink.js';
import { gratuitousArpFrame, parseMac } from '../../src/vip/frames.js';

const VIP = '10.0.0.100';
const opts: EngineOptions = {
  vrid: 51,
  priority: 100,
  advertisementIntervalCs: 10,
  preempt: true,
  preemptDelayMs: 0,
  checksum: 'rfc5798',
  unicast: false,
  peers: [],
  authKeys: null,
  vips: [VIP],
  family: 4,
  ifname: 'eth0',
  ifindex: 7,
  mac: '02:00:00:00:00:12',
  primaryAddress: '10.0.0.12',
  announce: { count: 2, spacingMs: 0, repeatAfterMs: 0, refreshMs: 0 },
  vipLifetimeMs: 0,
  preemptHoldAtStart: false,
  linkRunning: true,
  owner: false,
};

/** An interface in memory: addresses with prefixes, and a log of every call. */
class FakeEdge implements VrrpEdge {
  addresses: PrefixedAddress[] = [];
  calls: string[] = [];
  adverts: { priority: number; destination: string }[] = [];
  /** Every advert with its time (fake clock, ms), Max Adver Int and address list. */
  sent: { at: number; priority: number; destination: string; intervalCs: number; addresses: string[] }[] = [];
  frames = 0;
  frameBytes: Buffer[] = [];
  destroyed: string[] = [];
  inputs!: EdgeInputs;
  /** When false, removal is refused silently (the kernel said EADDRNOTAVAIL): nothing is removed. */
  removes = true;
  /** What the real edge's receivePending does (reads the socket now); absent unless a test sets it. */
  receivePending?: () => void;
  sendAdvert(payload: Buffer, destination: string): void {
    const r = decodeAdvertisement(payload, { family: 4, source: '10.0.0.12', destination, ttl: 255, checkTtl: true });
    if (!r.ok) throw new Error(`bad advert: ${r.reason}`);
    this.adverts.push({ priority: r.advert.priority, destination });
    this.sent.push({ at: Date.now(), priority: r.advert.priority, destination, intervalCs: r.advert.maxAdvertIntervalCs, addresses: [...r.advert.addresses] });
    this.calls.push(`send ${r.advert.priority}`);
  }
  sendFrame(frame: Buffer): void {
    this.frames++;
    this.frameBytes.push(frame);
  }
  async addVips(vips: readonly string[], lifetimeS: number): Promise<void> {
    this.calls.push(`add ${vips.join(',')} ${lifetimeS}`);
    for (const v of vips) if (!this.addresses.some((a) => a.address === v && a.prefixLen === 32)) this.addresses.push({ address: v, prefixLen: 32 });
  }
  async removeVips(vips: readonly string[]): Promise<PrefixedAddress[]> {
    this.calls.push(`remove ${vips.join(',')}`);
    if (!this.removes) return [];
    const gone = this.addresses.filter((a) => vips.includes(a.address));
    this.addresses = this.addresses.filter((a) => !vips.includes(a.address));
    return gone;
  }
  async vipsPresent(vips: readonly string[]): Promise<string[]> {
    return [...new Set(this.addresses.filter((a) => vips.includes(a.address)).map((a) => a.address))];
  }
  destroySockets(vip: string): number {
    this.destroyed.push(vip);
    return 0;
  }
  async interfaceExists(): Promise<boolean> {
    return true;
  }
  malformedIpHeader(): number {
    return 0;
  }
  close(): void {
    this.calls.push('close');
  }
}

let edge: FakeEdge;
let events: EngineEvent[];
const open: OpenEdge = async (_o, inputs) => {
  edge.inputs = inputs;
  return edge;
};
const start = (over: Partial<EngineOptions> = {}) => VrrpEngine.start({ ...opts, ...over }, (e) => events.push(e), { openEdge: open, now: () => Date.now() });
const logs = (msg: string) => events.filter((e) => e.type === 'log' && e.msg === msg).map((e) => (e.type === 'log' ? e.fields : undefined));
const advertFrom = (source: string, priority: number, maxAdvertIntervalCs = 10) => ({
  payload: encodeAdvertisement(
    { vrid: 51, priority, maxAdvertIntervalCs, addresses: [VIP] },
    { family: 4, checksum: 'rfc5798', source, destination: '224.0.0.18' },
  ),
  source,
  destination: '224.0.0.18',
  ttl: 255,
});

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000 });
  edge = new FakeEdge();
  events = [];
});
afterEach(() => {
  vi.useRealTimers();
});

describe('VrrpEngine carries out the machine through the edge', () => {
  it('start-up: a left-over VIP of any prefix is removed, and the log names what was removed with its prefix', async () => {
    edge.addresses = [
      { address: '10.0.0.12', prefixLen: 24 },
      { address: VIP, prefixLen: 24 },
    ];
    const e = await start();
    expect(edge.calls).toStrictEqual(['remove 10.0.0.100']);
    expect(edge.addresses).toStrictEqual([{ address: '10.0.0.12', prefixLen: 24 }]);
    expect(logs('removed a VIP left on the interface by an earlier run')).toStrictEqual([{ vips: [VIP], addresses: ['10.0.0.100/24'], interface: 'eth0' }]);
    expect(e.status().state).toBe('backup');
    await e.stop();
  });

  it('start-up: nothing is logged as removed when the kernel removed nothing', async () => {
    edge.addresses = [{ address: VIP, prefixLen: 24 }];
    edge.removes = false;
    const e = await start();
    expect(edge.calls).toStrictEqual(['remove 10.0.0.100']);
    expect(logs('removed a VIP left on the interface by an earlier run')).toStrictEqual([]);
    await e.stop();
  });

  it('an advert arriving while the start-up dump runs does not make the clock go backwards', async () => {
    edge.vipsPresent = async () => {
      vi.setSystemTime(Date.now() + 50);
      edge.inputs.packet(advertFrom('10.0.0.11', 200));
      return [];
    };
    const e = await start();
    expect(e.status().state).toBe('backup');
    await e.stop();
  });

  it('Master_Down: advert, then add, then an announce burst of count frames per VIP; vipsHeld', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)));
    expect(edge.calls).toStrictEqual(['send 100', 'add 10.0.0.100 0']);
    expect(edge.frames).toBe(2);
    expect(e.status()).toMatchObject({ state: 'active', vipsHeld: true, counters: { announcementsSent: 2, advertsSent: 1, transitions: 2 } });
    // Adver_Timer: one advert per Advertisement_Interval (100 ms)
    await vi.advanceTimersByTimeAsync(300);
    expect(edge.adverts.length).toBe(4);
    await e.stop();
  });

  it('a higher-priority advert: our last advert, then remove and reset the connections on the VIP', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(400);
    edge.calls = [];
    edge.inputs.packet(advertFrom('10.0.0.11', 200));
    await vi.advanceTimersByTimeAsync(0);
    expect(edge.calls).toStrictEqual(['send 100', 'remove 10.0.0.100']);
    expect(edge.destroyed).toStrictEqual([VIP]);
    expect(e.status()).toMatchObject({ state: 'backup', vipsHeld: false, masterAddress: '10.0.0.11' });
    expect(logs('VIPs removed')).toStrictEqual([{ vips: [VIP], addresses: ['10.0.0.100/32'], interface: 'eth0' }]);
    await e.stop();
  });

  it('the VIP watch: a VIP/24 added by hand on a Backup is removed once the notifications settle', async () => {
    const e = await start();
    edge.addresses.push({ address: VIP, prefixLen: 24 });
    edge.inputs.addressesChanged();
    edge.inputs.addressesChanged();
    await vi.advanceTimersByTimeAsync(25);
    expect(edge.calls).toStrictEqual(['remove 10.0.0.100']);
    expect(edge.addresses).toStrictEqual([]);
    expect(logs('a VIP was added to the interface while this node is not master; removing it')).toStrictEqual([
      { vips: [VIP], addresses: ['10.0.0.100/24'], interface: 'eth0' },
    ]);
    await e.stop();
  });

  it('the VIP watch: an Active router puts a removed VIP back and announces it', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(400);
    edge.calls = [];
    edge.addresses = [];
    edge.inputs.addressesChanged();
    await vi.advanceTimersByTimeAsync(25);
    expect(edge.calls.filter((c) => !c.startsWith('send'))).toStrictEqual(['add 10.0.0.100 0']);
    expect(edge.frames).toBe(4);
    expect(logs('a VIP was removed from the interface by something else; restoring it')).toStrictEqual([{ vips: [VIP], interface: 'eth0' }]);
    await e.stop();
  });

  it('another master heard while Active: counted by outcome with its sender and age in /status; heard for OTHER_MASTER_WINDOW_MS, then not', async () => {
    const e = await start();
    expect(e.status()).toMatchObject({
      otherMasters: { heard: 0, windowMs: OTHER_MASTER_WINDOW_MS, adverts: { kept: 0, yielded: 0, handover: 0 }, last: null },
      lastAdvertAgeMs: null,
    });
    await vi.advanceTimersByTimeAsync(400);
    expect(e.status().state).toBe('active');
    // a lower priority claims the VIP too (a healed partition): we keep it
    edge.inputs.packet(advertFrom('10.0.0.13', 50));
    await vi.advanceTimersByTimeAsync(1000);
    expect(e.status()).toMatchObject({
      state: 'active',
      otherMasters: { heard: 1, adverts: { kept: 1, yielded: 0, handover: 0 }, last: { source: '10.0.0.13', priority: 50, outcome: 'kept', ageMs: 1000 } },
      lastAdvertAgeMs: 1000,
    });
    await vi.advanceTimersByTimeAsync(OTHER_MASTER_WINDOW_MS - 1000 + 1);
    expect(e.status().otherMasters).toMatchObject({ heard: 0, adverts: { kept: 1 }, last: { ageMs: OTHER_MASTER_WINDOW_MS + 1 } });
    // a higher priority: we yield, and as a Backup its adverts are no second master
    edge.inputs.packet(advertFrom('10.0.0.11', 200));
    edge.inputs.packet(advertFrom('10.0.0.11', 200));
    expect(e.status()).toMatchObject({
      state: 'backup',
      otherMasters: { heard: 1, adverts: { kept: 1, yielded: 1, handover: 0 }, last: { source: '10.0.0.11', priority: 200, outcome: 'yielded', ageMs: 0 } },
      lastAdvertAgeMs: 0,
    });
    await e.stop();
  });

  it('drops by the filters are counted by reason (unicast allowlist)', async () => {
    const e = await start({ unicast: true, peers: ['10.0.0.13'] });
    edge.inputs.packet(advertFrom('10.0.0.11', 200));
    edge.inputs.packet(advertFrom('10.0.0.11', 200));
    expect(e.status().counters.dropped).toStrictEqual({ notPeer: 2 });
    expect(events.filter((x) => x.type === 'log' && x.level === 'warn')).toHaveLength(1);
    await e.stop();
  });

  it('link down: Fault, VIPs removed; link up: Backup again', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(400);
    edge.calls = [];
    edge.inputs.link(false);
    await vi.advanceTimersByTimeAsync(0);
    expect(edge.calls).toStrictEqual(['remove 10.0.0.100']);
    expect(e.status().state).toBe('fault');
    edge.inputs.link(true);
    expect(e.status().state).toBe('backup');
    await e.stop();
  });

  it('stop while Active: priority 0 to the group, VIPs removed, edge closed', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(400);
    edge.calls = [];
    await e.stop();
    expect(edge.calls).toStrictEqual(['send 0', 'remove 10.0.0.100', 'close']);
    expect(edge.adverts.at(-1)).toStrictEqual({ priority: 0, destination: '224.0.0.18' });
  });

  it('the owner (255) never adds or removes, but announces and reports the VIPs held', async () => {
    edge.addresses = [{ address: VIP, prefixLen: 24 }];
    const e = await start({ priority: 255, owner: true });
    await vi.advanceTimersByTimeAsync(0);
    expect(edge.calls).toStrictEqual(['send 255']);
    expect(edge.frames).toBe(2);
    expect(e.status()).toMatchObject({ state: 'active', vipsHeld: true });
    await e.stop();
    expect(edge.calls).toStrictEqual(['send 255', 'send 0', 'close']);
  });
});

/** The longest time between two consecutive adverts in `sent` from `from` on, ms. */
const longestGap = (sent: { at: number }[], from = 0): number => {
  let gap = 0;
  for (let i = from + 1; i < sent.length; i++) gap = Math.max(gap, sent[i]!.at - sent[i - 1]!.at);
  return gap;
};

describe('VrrpEngine.reconfigure (a reload without a failover)', () => {
  const V2 = '10.0.0.101';
  const V3 = '10.0.0.102';
  const becomeActive = async (over: Partial<EngineOptions> = {}) => {
    const e = await start(over);
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, over.advertisementIntervalCs ?? 10)) + 50);
    expect(e.status().state).toBe('active');
    edge.calls = [];
    edge.sent = [];
    edge.frameBytes = [];
    edge.destroyed = [];
    return e;
  };

  it('removing one of two VIPs while Active: only that one is removed and reset; the other is never touched; adverts go on without a gap longer than one interval and list one VIP from the next advert', async () => {
    const e = await becomeActive({ vips: [VIP, V2] });
    await vi.advanceTimersByTimeAsync(250);
    const before = edge.sent.length;
    await e.reconfigure({ vips: [VIP] });
    expect(edge.calls.filter((c) => !c.startsWith('send'))).toStrictEqual(['remove 10.0.0.101']);
    expect(edge.destroyed).toStrictEqual([V2]);
    expect(edge.addresses).toStrictEqual([{ address: VIP, prefixLen: 32 }]);
    await vi.advanceTimersByTimeAsync(500);
    expect(edge.calls.filter((c) => !c.startsWith('send'))).toStrictEqual(['remove 10.0.0.101']);
    expect(longestGap(edge.sent)).toBeLessThanOrEqual(100);
    expect(edge.sent.slice(0, before).every((s) => s.addresses.join() === `${VIP},${V2}`)).toBe(true);
    expect(edge.sent.slice(before).map((s) => s.addresses)).toStrictEqual(new Array(edge.sent.length - before).fill([VIP]));
    expect(edge.sent.length - before).toBe(5);
    expect(logs('VIPs removed')).toStrictEqual([{ vips: [V2], addresses: ['10.0.0.101/32'], interface: 'eth0', reason: 'reconfigured' }]);
    expect(e.status()).toMatchObject({ state: 'active', vipsHeld: true, counters: { transitions: 2 } });
    await e.stop();
  });

  it('adding a VIP while Active: added, announced alone (count frames), in the adverts from the next one; the kept VIP is not re-added', async () => {
    const e = await becomeActive();
    await e.reconfigure({ vips: [VIP, V3] });
    expect(edge.calls).toStrictEqual(['add 10.0.0.102 0']);
    const g = gratuitousArpFrame(parseMac(opts.mac), V3);
    expect(edge.frameBytes).toStrictEqual([g, g]);
    await vi.advanceTimersByTimeAsync(100);
    expect(edge.sent.map((s) => s.addresses)).toStrictEqual([[VIP, V3]]);
    // a later burst (the VIP watch restoring one) announces both
    edge.frameBytes = [];
    edge.addresses = [];
    edge.inputs.addressesChanged();
    await vi.advanceTimersByTimeAsync(25);
    expect(edge.frameBytes.length).toBe(4);
    await e.stop();
    expect(edge.calls.at(-2)).toBe('remove 10.0.0.100,10.0.0.102');
  });

  it('adding a VIP while Backup that is already on the interface (by hand, a crashed agent): removed, as at start, whatever its prefix; the kept VIP is not looked at again', async () => {
    const e = await start();
    expect(e.status().state).toBe('backup');
    edge.addresses.push({ address: V3, prefixLen: 24 });
    edge.calls = [];
    await e.reconfigure({ vips: [VIP, V3] });
    expect(edge.calls).toStrictEqual(['remove 10.0.0.102']);
    expect(edge.addresses).toStrictEqual([]);
    expect(logs(STRAY_ON_RELOAD)).toStrictEqual([{ vips: [V3], addresses: ['10.0.0.102/24'], interface: 'eth0' }]);
    expect(e.status()).toMatchObject({ state: 'backup', vipsHeld: false, vips: [VIP, V3] });
    // not there: nothing removed, nothing logged
    edge.calls = [];
    await e.reconfigure({ vips: [VIP, V3, V2] });
    expect(edge.calls).toStrictEqual([]);
    await e.stop();
  });

  it('adding a VIP while Active that is already on the interface: kept and announced, never removed', async () => {
    const e = await becomeActive();
    edge.addresses.push({ address: V3, prefixLen: 32 });
    await e.reconfigure({ vips: [VIP, V3] });
    await vi.advanceTimersByTimeAsync(25);
    expect(edge.calls.filter((c) => !c.startsWith('send'))).toStrictEqual(['add 10.0.0.102 0']);
    expect(edge.addresses.map((a) => a.address).sort()).toStrictEqual([VIP, V3]);
    await e.stop();
  });

  it('a longer interval while Active: the next advert comes no later than the old interval and carries the new Max Adver Int, the following ones at the new interval', async () => {
    const e = await becomeActive();
    await vi.advanceTimersByTimeAsync(60);
    const last = edge.sent.at(-1)!.at;
    await e.reconfigure({ advertisementIntervalCs: 100 });
    await vi.advanceTimersByTimeAsync(2100);
    const after = edge.sent.filter((s) => s.at > last);
    expect(after.map((s) => s.intervalCs)).toStrictEqual([100, 100, 100]);
    expect(after[0]!.at - last).toBeLessThanOrEqual(100);
    expect(after[1]!.at - after[0]!.at).toBe(1000);
    expect(after[2]!.at - after[1]!.at).toBe(1000);
    expect(e.status()).toMatchObject({ state: 'active', masterAdverIntervalMs: 1000 });
    await e.stop();
  });

  it('a shorter interval while Active: the next advert is due one new interval after the last one', async () => {
    const e = await becomeActive({ advertisementIntervalCs: 100 });
    await vi.advanceTimersByTimeAsync(1000);
    const last = edge.sent.at(-1)!.at;
    await e.reconfigure({ advertisementIntervalCs: 10 });
    await vi.advanceTimersByTimeAsync(400);
    const after = edge.sent.filter((s) => s.at > last);
    expect(after.length).toBeGreaterThanOrEqual(3);
    expect(after.every((s) => s.intervalCs === 10)).toBe(true);
    expect(longestGap(after)).toBe(100);
    await e.stop();
  });

  it('a patch that cannot apply rejects saying why and changes nothing', async () => {
    const e = await becomeActive({ unicast: true, peers: ['10.0.0.13'] });
    const status = e.status();
    await expect(e.reconfigure({ vips: [VIP, 'fd00::100'] })).rejects.toThrow('vips: fd00::100 is IPv6, but this election is IPv4');
    await expect(e.reconfigure({ vips: [VIP, 'nonsense'] })).rejects.toThrow('vips: "nonsense" is not an IP address');
    await expect(e.reconfigure({ vips: [] })).rejects.toThrow('vips must not be empty');
    await expect(e.reconfigure({ vips: [V2], advertisementIntervalCs: 0 })).rejects.toThrow('advertisementIntervalCs must be 1..4095, got 0');
    await expect(e.reconfigure({ vips: [V2], priority: 255 })).rejects.toThrow('priority must be 1..254, got 255');
    await expect(e.reconfigure({ peers: ['10.0.0.14'], preemptDelayMs: -1 })).rejects.toThrow('preemptDelayMs must be >= 0, got -1');
    await expect(e.reconfigure({ peers: ['fd00::13'] })).rejects.toThrow('peers: fd00::13 is IPv6, but this election is IPv4');
    await expect(e.reconfigure({ members: ['10.0.0.13'], announce: { count: 1.5, spacingMs: 0, repeatAfterMs: 0, refreshMs: 0 } })).rejects.toThrow(
      'announce.count must be an integer >= 0, got 1.5',
    );
    await vi.advanceTimersByTimeAsync(300);
    expect(edge.calls.filter((c) => !c.startsWith('send'))).toStrictEqual([]);
    expect(edge.sent.every((s) => s.destination === '10.0.0.13' && s.intervalCs === 10 && s.priority === 100 && s.addresses.join() === VIP)).toBe(true);
    expect(e.status()).toMatchObject({ state: 'active', priority: status.priority, masterAdverIntervalMs: 100 });
    // the members were not set either: a stranger in the peer list is still heard
    edge.inputs.packet(advertFrom('10.0.0.13', 200));
    expect(e.status().state).toBe('backup');
    await e.stop();
  });

  it('the owner cannot change its priority (that is a new group membership)', async () => {
    edge.addresses = [{ address: VIP, prefixLen: 24 }];
    const e = await start({ priority: 255, owner: true });
    await expect(e.reconfigure({ priority: 200 })).rejects.toThrow('the address owner (priority 255) cannot change its priority at run time');
    await e.stop();
  });

  it('unicast peers: adverts go to the new list from the next advert (a removed peer gets none, an added one within one interval); our own address is ignored', async () => {
    const e = await becomeActive({ unicast: true, peers: ['10.0.0.13', '10.0.0.14'] });
    await vi.advanceTimersByTimeAsync(30);
    const t = Date.now();
    await e.reconfigure({ peers: ['10.0.0.14', '10.0.0.15', '10.0.0.12'] });
    await vi.advanceTimersByTimeAsync(300);
    const after = edge.sent.filter((s) => s.at > t);
    expect(after.length).toBe(6);
    expect(after.filter((s) => s.destination === '10.0.0.13')).toStrictEqual([]);
    expect(after[0]!.at - t).toBeLessThanOrEqual(100);
    expect(after.slice(0, 2).map((s) => s.destination)).toStrictEqual(['10.0.0.14', '10.0.0.15']);
    expect(e.status()).toMatchObject({ peers: ['10.0.0.14', '10.0.0.15'], members: null, vips: [VIP], advertisementIntervalMs: 100 });
    // the removed peer is no longer heard either (unicast: only peers speak)
    edge.inputs.packet(advertFrom('10.0.0.13', 200));
    expect(e.status()).toMatchObject({ state: 'active', counters: { dropped: { notPeer: 1 } } });
    await e.stop();
  });

  it('multicast cannot be given peers', async () => {
    const e = await start();
    await expect(e.reconfigure({ peers: ['10.0.0.13'] })).rejects.toThrow('peers: this election is multicast');
    await e.stop();
  });
});

describe('VrrpEngine acceptFrom members', () => {
  it('a stranger with a higher priority and Max Adver Int 4095 is dropped as notMember, logged once, and changes nothing (no transition, its interval is not adopted)', async () => {
    const e = await start({ members: ['10.0.0.11', '10.0.0.13'] });
    await vi.advanceTimersByTimeAsync(400);
    expect(e.status().state).toBe('active');
    edge.calls = [];
    for (let i = 0; i < 5; i++) {
      edge.inputs.packet(advertFrom('10.0.0.66', 254, 4095));
      await vi.advanceTimersByTimeAsync(100);
    }
    expect(e.status()).toMatchObject({
      state: 'active',
      masterAdverIntervalMs: 100,
      counters: { transitions: 2, advertsReceived: 0, dropped: { notMember: 5 } },
    });
    expect(edge.calls.filter((c) => !c.startsWith('send'))).toStrictEqual([]);
    const warn = events.filter((x) => x.type === 'log' && x.level === 'warn');
    expect(warn).toHaveLength(1);
    expect(warn[0]).toMatchObject({ fields: { source: '10.0.0.66', members: ['10.0.0.11', '10.0.0.13'] } });
    // a member is heard
    edge.inputs.packet(advertFrom('10.0.0.13', 200));
    expect(e.status()).toMatchObject({ state: 'backup', masterAddress: '10.0.0.13' });
    await e.stop();
  });

  it('as a Backup, a stranger does not reset the Master_Down_Timer: the Backup takes over on time', async () => {
    const e = await start({ members: ['10.0.0.13'] });
    await vi.advanceTimersByTimeAsync(200);
    edge.inputs.packet(advertFrom('10.0.0.66', 254, 4095));
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)) - 200 + 1);
    expect(e.status()).toMatchObject({ state: 'active', counters: { dropped: { notMember: 1 } } });
    await e.stop();
  });

  it('reconfigure members null (acceptFrom any): the stranger is heard again (the filter is what kept it out)', async () => {
    const e = await start({ members: ['10.0.0.13'] });
    await vi.advanceTimersByTimeAsync(400);
    await e.reconfigure({ members: null });
    edge.inputs.packet(advertFrom('10.0.0.66', 254, 4095));
    expect(e.status()).toMatchObject({ state: 'backup', masterAddress: '10.0.0.66', masterAdverIntervalMs: 40950 });
    await e.stop();
  });

  it('reconfigure members: a newly listed member is heard, a removed one is dropped', async () => {
    const e = await start({ members: ['10.0.0.13'] });
    await vi.advanceTimersByTimeAsync(400);
    await e.reconfigure({ members: ['10.0.0.14'] });
    expect(e.status().members).toStrictEqual(['10.0.0.14']);
    edge.inputs.packet(advertFrom('10.0.0.13', 200));
    expect(e.status()).toMatchObject({ state: 'active', counters: { dropped: { notMember: 1 } } });
    edge.inputs.packet(advertFrom('10.0.0.14', 200));
    expect(e.status()).toMatchObject({ state: 'backup', masterAddress: '10.0.0.14' });
    await e.stop();
  });

  it('standby (not a member) at start: logged once, no advert and no takeover over three Master_Down_Intervals; cleared, Active within one', async () => {
    const e = await start({ members: ['10.0.0.13'], standby: true });
    await vi.advanceTimersByTimeAsync(Math.ceil(3 * masterDownIntervalMs(100, 10)) + 1);
    expect(e.status()).toMatchObject({ state: 'backup', standby: true });
    expect(edge.sent).toStrictEqual([]);
    expect(logs(STANDBY_ON)).toHaveLength(1);
    await e.reconfigure({ standby: false });
    expect(logs(STANDBY_OFF)).toHaveLength(1);
    expect(e.status()).toMatchObject({ state: 'backup', standby: false });
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)) + 1);
    expect(e.status().state).toBe('active');
    expect(edge.sent.map((x) => x.priority)).toStrictEqual([100]);
    await e.stop();
  });

  it('standby set while Active: resigns (priority 0, VIP removed) into Backup, logged once; the same value again changes nothing', async () => {
    const e = await start({ members: ['10.0.0.13'] });
    await vi.advanceTimersByTimeAsync(400);
    expect(e.status()).toMatchObject({ state: 'active', standby: false });
    edge.calls = [];
    await e.reconfigure({ standby: true });
    expect(edge.calls).toStrictEqual(['send 0', 'remove 10.0.0.100']);
    expect(e.status()).toMatchObject({ state: 'backup', standby: true, vipsHeld: false });
    await e.reconfigure({ standby: true });
    expect(logs(STANDBY_ON)).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(Math.ceil(2 * masterDownIntervalMs(100, 10)) + 1);
    expect(e.status().state).toBe('backup');
    expect(edge.calls).toStrictEqual(['send 0', 'remove 10.0.0.100']);
    await expect(e.reconfigure({ standby: 'yes' as unknown as boolean })).rejects.toThrow('standby must be a boolean, got yes');
    await e.stop();
  });

  it('the once-per-source log is bounded: past LOGGED_SOURCES_MAX sources one line says so, the counter counts them all', async () => {
    const e = await start({ members: ['10.0.0.13'] });
    const n = LOGGED_SOURCES_MAX + 44;
    for (let i = 0; i < n; i++) {
      const src = `10.1.${Math.floor(i / 250)}.${(i % 250) + 1}`;
      edge.inputs.packet(advertFrom(src, 200));
      edge.inputs.packet(advertFrom(src, 200));
    }
    const warn = events.filter((x) => x.type === 'log' && x.level === 'warn');
    expect(warn).toHaveLength(LOGGED_SOURCES_MAX + 1);
    expect(warn.at(-1)).toMatchObject({
      msg: `more than ${LOGGED_SOURCES_MAX} sources to warn about: further ones are only counted (see the dropped counters)`,
    });
    expect(e.status().counters.dropped).toStrictEqual({ notMember: 2 * n });
    await e.stop();
  });
});

describe('what the engine tells the operator, once per change or rate-limited', () => {
  it('a send error to 252 unreachable peers: one line (one key per error, not per peer), then one per 10 s window with the count', async () => {
    edge.sendAdvert = () => {
      throw Object.assign(new Error('sendto: Network is unreachable'), { code: 'ENETUNREACH', syscall: 'sendto' });
    };
    const peers = Array.from({ length: 252 }, (_, i) => `10.9.${Math.floor(i / 200)}.${(i % 200) + 1}`);
    // 500 ms keeps the test fast (each advert is encoded per peer); the interval does not change what is logged
    const e = await start({ unicast: true, peers, advertisementIntervalCs: 50 });
    const lines = () => events.filter((x) => x.type === 'log' && x.msg.startsWith('cannot send advertisement'));
    // Master_Down (about 1.6 s), then adverts every 500 ms, each to 252 peers
    const down = masterDownIntervalMs(100, 50);
    await vi.advanceTimersByTimeAsync(Math.ceil(down) + 3500);
    expect(e.status().counters.sendErrors).toBe(252 * 8);
    expect(lines()).toHaveLength(1);
    expect(lines()[0]).toMatchObject({
      level: 'warn',
      msg: 'cannot send advertisement',
      fields: { destination: peers[0], code: 'ENETUNREACH', sendErrors: 1 },
    });
    // the window ends 10 s after the first line: one summary with the count of the ones left out
    await vi.advanceTimersByTimeAsync(6400);
    expect(lines()).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(200);
    const summary = lines()[1];
    expect(lines()).toHaveLength(2);
    expect(summary).toMatchObject({ level: 'warn', fields: { code: 'ENETUNREACH' } });
    const repeated = summary?.type === 'log' ? (summary.fields?.repeated as number) : 0;
    expect(summary?.type === 'log' && summary.msg).toBe(`cannot send advertisement (repeated ${repeated} times in the last 10 s)`);
    expect(summary?.type === 'log' && summary.fields?.sendErrors).toBe(repeated + 1);
    // stop: the count since the last summary is written, nothing is lost
    const before = e.status().counters.sendErrors;
    await e.stop();
    const last = lines().at(-1);
    expect(lines()).toHaveLength(3);
    expect(last?.type === 'log' && (last.fields?.repeated as number) + repeated + 1).toBe(before + 252);
  });

  it('a Backup adopting another Master_Adver_Interval says so once per change, with both values in centiseconds; a new master is an event', async () => {
    const e = await start();
    edge.inputs.packet(advertFrom('10.0.0.11', 200, 100));
    edge.inputs.packet(advertFrom('10.0.0.11', 200, 100));
    const adopted = events.filter((x) => x.type === 'log' && x.msg.startsWith("adopted the master's advertisement interval"));
    expect(adopted).toStrictEqual([
      {
        type: 'log',
        level: 'warn',
        msg: "adopted the master's advertisement interval (RFC 9568 §6.4.2): 100 cs, ours is 10 cs",
        fields: { master: '10.0.0.11', masterAdverIntervalCs: 100, advertisementIntervalCs: 10, masterDownIntervalMs: masterDownIntervalMs(100, 100) },
      },
    ]);
    expect(events.filter((x) => x.type === 'master')).toStrictEqual([
      { type: 'master', address: '10.0.0.11', priority: 200, previous: null, preempting: false },
    ]);
    // another master with our interval: a new master, and the interval is ours again
    edge.inputs.packet(advertFrom('10.0.0.13', 220, 10));
    expect(events.filter((x) => x.type === 'master').at(-1)).toStrictEqual({
      type: 'master',
      address: '10.0.0.13',
      priority: 220,
      previous: '10.0.0.11',
      preempting: false,
    });
    expect(logs('the master advertises our advertisement interval again')).toStrictEqual([
      {
        master: '10.0.0.13',
        masterAdverIntervalCs: 10,
        advertisementIntervalCs: 10,
        masterDownIntervalMs: Math.round(masterDownIntervalMs(100, 10) * 1000) / 1000,
      },
    ]);
    // a resign (priority 0) is not a new master
    edge.inputs.packet(advertFrom('10.0.0.13', 0, 10));
    expect(events.filter((x) => x.type === 'master')).toHaveLength(2);
    await e.stop();
  });

  it('a new master of a lower priority is an event with preempting: this Backup discards its adverts and will take over (§6.4.2)', async () => {
    const e = await start();
    edge.inputs.packet(advertFrom('10.0.0.14', 50, 10));
    expect(events.filter((x) => x.type === 'master')).toStrictEqual([{ type: 'master', address: '10.0.0.14', priority: 50, previous: null, preempting: true }]);
    expect(e.status().state).toBe('backup');
    await e.stop();
  });

  it('while its preemption is held (first verdicts not in) a lower-priority master is still one it will preempt; a higher one is not', async () => {
    const e = await start({ preemptHoldAtStart: true });
    edge.inputs.packet(advertFrom('10.0.0.14', 50, 10));
    edge.inputs.packet(advertFrom('10.0.0.15', 150, 10));
    expect(events.filter((x) => x.type === 'master').map((x) => x.type === 'master' && [x.address, x.preempting])).toStrictEqual([
      ['10.0.0.14', true],
      ['10.0.0.15', false],
    ]);
    await e.stop();
  });

  it('a lowered priority of ours ends the preemption of the same master: the event again, preempting false, previous = address', async () => {
    const e = await start();
    edge.inputs.packet(advertFrom('10.0.0.14', 80, 10));
    e.setPriority(60);
    edge.inputs.packet(advertFrom('10.0.0.14', 80, 10));
    edge.inputs.packet(advertFrom('10.0.0.14', 80, 10));
    expect(events.filter((x) => x.type === 'master')).toStrictEqual([
      { type: 'master', address: '10.0.0.14', priority: 80, previous: null, preempting: true },
      { type: 'master', address: '10.0.0.14', priority: 80, previous: '10.0.0.14', preempting: false },
    ]);
    await e.stop();
  });
});

describe('a late election thread (the machine was CPU-starved)', () => {
  it('a Backup reads the adverts waiting in the socket before it acts on Master_Down: no takeover, counted as rescued', async () => {
    const e = await start();
    edge.inputs.packet(advertFrom('10.0.0.11', 200));
    await vi.advanceTimersByTimeAsync(0);
    // the master's next advert sits in the socket when the Master_Down_Timer fires
    const waiting = [advertFrom('10.0.0.11', 200)];
    let reads = 0;
    edge.receivePending = () => {
      reads++;
      for (const p of waiting.splice(0)) edge.inputs.packet(p);
    };
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)));
    expect(reads).toBe(1);
    expect(e.status()).toMatchObject({ state: 'backup', masterAddress: '10.0.0.11', timing: { rescued: 1 } });
    expect(edge.calls).toStrictEqual([]);
    // nothing waiting the next time: the master is gone, the Backup takes over
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)));
    expect(reads).toBe(2);
    expect(e.status()).toMatchObject({ state: 'active', timing: { rescued: 1 } });
    await e.stop();
  });

  it('the Active records how late its Adver_Timer ticks ran, in fixed buckets', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)) + 1000);
    const t = e.status().timing!;
    expect(t.boundsMs).toStrictEqual([1, 2, 5, 10, 15, 20, 30, 40, 50, 100]);
    expect(t.sendLate).toHaveLength(11);
    // fake timers fire on the millisecond: every tick within 1 ms of its deadline
    expect(t.sendLate[0]).toBeGreaterThanOrEqual(10);
    expect(t.sendLate.slice(1).every((c) => c === 0)).toBe(true);
    expect(t.sendLateMaxMs).toBeLessThanOrEqual(1);
    await e.stop();
  });
});

describe("VrrpEngine.overdueMs (the watchdog's gate)", () => {
  it('0 while the timers run, in Backup and Active; how far past its deadline when the timer did not fire; 0 once stopped', async () => {
    const e = await start();
    expect(e.overdueMs()).toBe(0);
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)) + 250);
    expect(e.status().state).toBe('active');
    expect(e.overdueMs()).toBe(0);
    // the clock moves on, the timers do not run (a broken timer chain as the gate sees it):
    // the next Adver_Timer deadline is at most one interval (100 ms) ahead
    vi.setSystemTime(Date.now() + 1500);
    expect(e.overdueMs()).toBeGreaterThanOrEqual(1400);
    expect(e.overdueMs()).toBeLessThanOrEqual(1500);
    // the timer fires (within one interval of the fake clock): the next deadline is ahead again
    await vi.advanceTimersByTimeAsync(100);
    expect(e.overdueMs()).toBe(0);
    await e.stop();
    vi.setSystemTime(Date.now() + 5000);
    expect(e.overdueMs()).toBe(0);
  });
});

describe('timer precision and the advert hot path', () => {
  it('with a precise wait the timer wakes PRECISE_WAIT_MS early and the rest is slept: Master_Down fires on time, not at the next whole ms', async () => {
    const waits: number[] = [];
    // a clock with sub-millisecond time: the fake timers' Date.now, plus what the waits slept
    let slept = 0;
    const now = (): number => Date.now() + slept;
    const preciseWait = (ms: number): void => {
      waits.push(ms);
      slept += ms;
    };
    const t0 = now();
    const e = await VrrpEngine.start(opts, (ev) => events.push(ev), { openEdge: open, now, preciseWait });
    const mdi = masterDownIntervalMs(100, 10); // 360.9375 ms (100 ms adverts)
    await vi.advanceTimersByTimeAsync(Math.floor(mdi - PRECISE_WAIT_MS) - 1);
    expect(e.status().state).toBe('backup');
    expect(waits).toStrictEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(e.status().state).toBe('active');
    // woken at 358 ms of 360.94: the wait covered the 2.94 ms left, and the first advert went out at once
    expect(waits.length).toBe(1);
    expect(waits[0]).toBeCloseTo(mdi - Math.floor(mdi - PRECISE_WAIT_MS), 6);
    expect(now() - t0).toBeCloseTo(mdi, 6);
    expect(e.status().timing!.sendLate[0]).toBe(1);
    expect(e.status().timing!.sendLateMaxMs).toBe(0);
    await e.stop();
  });

  it('without a precise wait (an injected clock) the timer alone fires at the next whole ms', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)) - 1);
    expect(e.status().state).toBe('backup');
    await vi.advanceTimersByTimeAsync(1);
    expect(e.status().state).toBe('active');
    await e.stop();
  });

  it('an Active sends the same encoded bytes every interval, and new ones after a priority or VIP change', async () => {
    const payloads: Buffer[] = [];
    const send = edge.sendAdvert.bind(edge);
    edge.sendAdvert = (payload, destination) => {
      payloads.push(payload);
      send(payload, destination);
    };
    const e = await start();
    // 100 ms adverts (10 cs): the first on becoming Active, then two more
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)) + 250);
    expect(e.status().state).toBe('active');
    expect(payloads.length).toBe(3);
    expect(payloads[1]).toBe(payloads[0]);
    expect(payloads[2]).toBe(payloads[0]);
    e.setPriority(90);
    await vi.advanceTimersByTimeAsync(100);
    expect(payloads.at(-1)).not.toBe(payloads[0]);
    expect(edge.sent.at(-1)!.priority).toBe(90);
    await e.reconfigure({ vips: [VIP, '10.0.0.101'] });
    await vi.advanceTimersByTimeAsync(100);
    expect(edge.sent.at(-1)!.addresses).toStrictEqual([VIP, '10.0.0.101']);
    expect(decodeAdvertisement(payloads.at(-1)!, { family: 4, source: '10.0.0.12', destination: '224.0.0.18', ttl: 255, checkTtl: true }).ok).toBe(true);
    await e.stop();
  });
});

/** The fake edge with a pacer: what the engine hands it, in the same call log. */
class PacingEdge extends FakeEdge {
  started: { realtimePriority: number; auth: { key: Buffer; firstSequence: bigint } | null }[] = [];
  rounds: ({ priority: number; destination: string }[] | null)[] = [];
  paceArgs: { intervalMs: number; holdMs: number }[] = [];
  stats = { sent: 0, sendErrors: 0, lastErrno: 0, covers: 0, holds: 0, longestSilenceMs: 0 };
  sequence = 1000n;
  startPacer(realtimePriority: number, auth: { key: Buffer; firstSequence: bigint } | null): string | null {
    this.started.push({ realtimePriority, auth });
    if (auth) this.sequence = auth.firstSequence;
    return realtimePriority > 0 ? 'EPERM' : null;
  }
  pace(adverts: readonly { message: Buffer; destination: string }[] | null, intervalMs: number, holdMs: number): void {
    const round =
      adverts === null
        ? null
        : adverts.map((a) => {
            const r = decodeAdvertisement(a.message, { family: 4, source: '10.0.0.12', destination: a.destination, ttl: 255, checkTtl: true });
            if (!r.ok) throw new Error(`bad paced advert: ${r.reason}`);
            return { priority: r.advert.priority, destination: a.destination };
          });
    this.rounds.push(round);
    this.paceArgs.push({ intervalMs, holdMs });
    this.calls.push(round === null ? 'pace null' : `pace ${round.map((a) => a.priority).join(',')}`);
  }
  takeSequence(): bigint {
    return this.sequence++;
  }
  pacerStats() {
    return { ...this.stats };
  }
}

describe('VrrpEngine and the advert pacer (edge.pace)', () => {
  let pacing: PacingEdge;
  beforeEach(() => {
    pacing = new PacingEdge();
    edge = pacing;
  });

  it('becoming Active hands the pacer the advert it sent, once; unchanged adverts are not handed again', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)));
    expect(pacing.started).toStrictEqual([{ realtimePriority: 0, auth: null }]);
    expect(pacing.calls).toStrictEqual(['send 100', 'pace 100', 'add 10.0.0.100 0']);
    // the hold: PACER_HOLD_MS (permanent VIPs here: vipLifetimeMs 0)
    expect(pacing.paceArgs).toStrictEqual([{ intervalMs: 100, holdMs: PACER_HOLD_MS }]);
    await vi.advanceTimersByTimeAsync(300);
    expect(pacing.calls.filter((c) => c.startsWith('pace'))).toStrictEqual(['pace 100']);
    expect(pacing.adverts.length).toBe(4);
    await e.stop();
  });

  it("the hold is 2 s unless the VIPs' lifetime would run out first: two thirds of it, less a margin, must cover it", async () => {
    expect(pacerHoldMs({ vipLifetimeMs: 5000, owner: false })).toBe(PACER_HOLD_MS);
    expect(pacerHoldMs({ vipLifetimeMs: 0, owner: false })).toBe(PACER_HOLD_MS);
    expect(pacerHoldMs({ vipLifetimeMs: 2000, owner: true })).toBe(PACER_HOLD_MS);
    // 2000 × 2/3 − 250
    expect(pacerHoldMs({ vipLifetimeMs: 2000, owner: false })).toBeCloseTo(2000 * (2 / 3) - PACER_HOLD_MARGIN_MS, 6);
    const e = await start({ vipLifetimeMs: 2000 });
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)));
    expect(pacing.paceArgs[0]!.holdMs).toBeCloseTo(1083.33, 2);
    // a reload of vipLifetime alone: the same adverts, a new hold
    await e.reconfigure({ vipLifetimeMs: 5000 });
    expect(pacing.paceArgs.at(-1)).toStrictEqual({ intervalMs: 100, holdMs: PACER_HOLD_MS });
    expect(pacing.rounds.at(-1)).toStrictEqual([{ priority: 100, destination: '224.0.0.18' }]);
    await e.stop();
  });

  it('a new priority reaches the pacer at once, before the advert that carries it (a stall in between advertises the new one)', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(400);
    pacing.calls = [];
    e.setPriority(90);
    expect(pacing.calls).toStrictEqual(['pace 90']);
    await vi.advanceTimersByTimeAsync(100);
    expect(pacing.calls).toStrictEqual(['pace 90', 'send 90']);
    await e.stop();
  });

  it("an exception in the engine's own processing is one failed event, not an uncaught exception", async () => {
    const e = await start();
    pacing.receivePending = () => {
      throw new Error('boom');
    };
    // a Backup's Master_Down_Timer reads the socket first: the edge throws there
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)) + 10);
    const failed = events.filter((ev) => ev.type === 'failed');
    expect(failed).toHaveLength(1);
    expect(failed[0]!.type === 'failed' && failed[0]!.error.message).toBe('boom');
    await e.stop();
  });

  it('leaving Active for a higher priority: the pacer stops before our last advert', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(400);
    pacing.calls = [];
    pacing.inputs.packet(advertFrom('10.0.0.11', 200));
    await vi.advanceTimersByTimeAsync(0);
    expect(pacing.calls).toStrictEqual(['pace null', 'send 100', 'remove 10.0.0.100']);
    // a Backup hands the pacer nothing (within n1's Master_Down_Interval, before we would take over again)
    await vi.advanceTimersByTimeAsync(300);
    expect(pacing.calls.filter((c) => c.startsWith('pace'))).toStrictEqual(['pace null']);
    await e.stop();
  });

  it('stop while Active: the pacer stops before priority 0, so nothing after it advertises the old priority', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(400);
    pacing.calls = [];
    await e.stop();
    expect(pacing.calls).toStrictEqual(['pace null', 'send 0', 'remove 10.0.0.100', 'close']);
  });

  it('a refused SCHED_FIFO is a warning; with auth the pacer gets the key and the next sequence, and the engine signs from the shared counter', async () => {
    const key = Buffer.from('a key of thirty-two bytes or more, for the test');
    const signed: Buffer[] = [];
    pacing.sendAdvert = (payload) => {
      signed.push(payload);
      pacing.calls.push('send signed');
    };
    const e = await start({ realtimePriority: 10, authKeys: [key] });
    expect(pacing.started).toHaveLength(1);
    expect(pacing.started[0]!.realtimePriority).toBe(10);
    expect(pacing.started[0]!.auth!.key).toStrictEqual(key);
    const first = pacing.started[0]!.auth!.firstSequence;
    // the high half is the start second (docs/auth.md)
    expect(Number(first >> 32n)).toBe(Math.floor(Date.now() / 1000));
    expect(logs('cannot give the advert pacer thread SCHED_FIFO (vrrp.realtimePriority); it runs with normal scheduling')).toStrictEqual([
      { realtimePriority: 10, code: 'EPERM' },
    ]);
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)) + 100);
    // the trailer's sequence (message 8 + 4 bytes, then magic, version, 2 reserved) comes from takeSequence
    expect(signed.map((p) => p.readBigUInt64BE(12 + 4))).toStrictEqual([first, first + 1n]);
    expect(pacing.sequence).toBe(first + 2n);
    await e.stop();
  });

  it('after a silence of the engine while Active it says what the pacer did: covered, or stopped at the hold', async () => {
    const e = await start();
    await vi.advanceTimersByTimeAsync(400);
    // the clock jumps past the next deadline, as a stalled thread sees it when it runs again
    pacing.stats = { ...pacing.stats, covers: 1, sent: 4 };
    vi.setSystemTime(Date.now() + 500);
    await vi.advanceTimersByTimeAsync(100);
    expect(logs('the election thread was silent; the advert pacer sent its adverts meanwhile')).toStrictEqual([
      { silentMs: expect.any(Number), advertisementIntervalMs: 100, pacerSent: 4 },
    ]);
    expect(logs('the election thread was silent; the advert pacer sent its adverts meanwhile')[0]!.silentMs).toBeGreaterThanOrEqual(500);
    pacing.stats = { ...pacing.stats, covers: 2, holds: 1, sent: 24 };
    vi.setSystemTime(Date.now() + 2500);
    await vi.advanceTimersByTimeAsync(100);
    expect(
      logs("the election thread was silent longer than the advert pacer's hold: the pacer stopped sending, and a Backup may have taken over"),
    ).toHaveLength(1);
    expect(e.status().timing!.pacer).toMatchObject({ covers: 2, holds: 1, sent: 24 });
    // the pacer's adverts are adverts sent
    expect(e.status().counters.advertsSent).toBe(pacing.adverts.length + 24);
    await e.stop();
  });

  it('a silence is one of this Active period: the time as Backup is none, and what the pacer did before is not put on it', async () => {
    const silent = () => logs('the election thread was silent; the advert pacer sent its adverts meanwhile');
    const e = await start();
    await vi.advanceTimersByTimeAsync(400);
    // a cover of a thread a few ms late, seen at the next send: no silence, nothing said
    pacing.stats = { ...pacing.stats, covers: 1, sent: 1 };
    await vi.advanceTimersByTimeAsync(100);
    expect(silent()).toStrictEqual([]);
    // preempted, Backup for 1.5 s (a higher priority's adverts), with the pacer's last cover of the period
    pacing.stats = { ...pacing.stats, covers: 2, sent: 2 };
    for (let i = 0; i < 15; i++) {
      pacing.inputs.packet(advertFrom('10.0.0.11', 200));
      await vi.advanceTimersByTimeAsync(100);
    }
    expect(e.status().state).toBe('backup');
    // the higher one stops: Master_Down, Active again; its first sends are no silence
    await vi.advanceTimersByTimeAsync(Math.ceil(masterDownIntervalMs(100, 10)) + 300);
    expect(e.status().state).toBe('active');
    expect(silent()).toStrictEqual([]);
    // a real silence of this period: the pacer's adverts of that silence only
    pacing.stats = { ...pacing.stats, covers: 3, sent: 7 };
    vi.setSystemTime(Date.now() + 500);
    await vi.advanceTimersByTimeAsync(100);
    expect(silent()).toStrictEqual([{ silentMs: expect.any(Number), advertisementIntervalMs: 100, pacerSent: 5 }]);
    await e.stop();
  });
});
