/**
 * The engine against a fake OS edge: it carries out the machine's actions through the edge,
 * in order, and turns what the edge reports into events. No root, no sockets.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { VrrpEngine, type EngineEvent, type EngineOptions } from '../../src/vrrp/engine.js';
import type { EdgeInputs, OpenEdge, VrrpEdge } from '../../src/vrrp/edge.js';
import { decodeAdvertisement, encodeAdvertisement } from '../../src/vrrp/packet.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import type { PrefixedAddress } from '../../src/vip/netlink.js';

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
  frames = 0;
  destroyed: string[] = [];
  inputs!: EdgeInputs;
  /** When false, removal is refused silently (the kernel said EADDRNOTAVAIL): nothing is removed. */
  removes = true;
  sendAdvert(payload: Buffer, destination: string): void {
    const r = decodeAdvertisement(payload, { family: 4, source: '10.0.0.12', destination, ttl: 255, checkTtl: true });
    if (!r.ok) throw new Error(`bad advert: ${r.reason}`);
    this.adverts.push({ priority: r.advert.priority, destination });
    this.calls.push(`send ${r.advert.priority}`);
  }
  sendFrame(): void {
    this.frames++;
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
const advertFrom = (source: string, priority: number) => ({
  payload: encodeAdvertisement({ vrid: 51, priority, maxAdvertIntervalCs: 10, addresses: [VIP] }, { family: 4, checksum: 'rfc5798', source, destination: '224.0.0.18' }),
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
    edge.addresses = [{ address: '10.0.0.12', prefixLen: 24 }, { address: VIP, prefixLen: 24 }];
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
