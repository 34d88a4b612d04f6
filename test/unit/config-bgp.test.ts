import { describe, expect, it } from 'vitest';
import { ConfigError, validateConfig, type Config } from '../../src/config/index.js';

const BASE = {
  mode: 'bgp',
  vips: ['10.0.0.100'],
  apiserver: { backends: ['10.0.1.2:6443', '10.0.2.2:6443'], health: { insecureSkipVerify: true } },
  bgp: { localAsn: 64512, peers: [{ address: '10.0.1.1', asn: 64500 }] },
};

/** BASE with `over` merged one level into each section. */
function withBgp(over: Record<string, unknown>, root: Record<string, unknown> = {}): unknown {
  return { ...BASE, ...root, bgp: { ...BASE.bgp, ...over } };
}

function issues(value: unknown): [string, string][] {
  try {
    validateConfig(value);
  } catch (err) {
    if (err instanceof ConfigError) return err.issues.map((i) => [i.path, i.message]);
    throw err;
  }
  throw new Error('the configuration was accepted');
}

describe('config: mode bgp', () => {
  it('gives every default of the bgp section', () => {
    const c: Config = validateConfig(BASE);
    expect(c.mode).toBe('bgp');
    expect(c.vrrp).toBeNull();
    expect(c.family).toBe(4);
    expect(c.vips).toStrictEqual(['10.0.0.100']);
    expect(c.bgp).toStrictEqual({
      daemon: 'bird',
      socket: '/run/bird/bird.ctl',
      configFile: '/etc/bird/ballast.conf',
      interface: 'lo',
      localAsn: 64512,
      announce: 'backends',
      balance: 'all',
      communities: [],
      holdTimeMs: 9000,
      gracefulRestart: true,
      gracefulRestartTimeMs: 120_000,
      bfd: { intervalMs: 100, multiplier: 3 },
      peers: [{ address: '10.0.1.1', family: 4, asn: 64500, bfd: true, nextHopSelf: true }],
    });
    expect(Object.isFrozen(c.bgp!.peers[0])).toBe(true);
  });

  it('normalizes every setting', () => {
    // the settings whose normalized form is what was written
    const same = {
      socket: '/run/b.ctl',
      configFile: '/etc/bird/x.conf',
      interface: 'vip0',
      localAsn: 4_200_000_000,
      routerId: '10.0.1.2',
      announce: 'local',
      balance: 'local',
    };
    const c = validateConfig(
      withBgp({
        ...same,
        communities: ['64512:100', '4200000000:1:02'],
        holdTime: '30s',
        keepaliveTime: '10s',
        gracefulRestart: false,
        gracefulRestartTime: '60s',
        bfd: { interval: '50ms', multiplier: 5 },
        peers: [
          { address: '10.0.1.1', asn: 64500, bfd: false, nextHopSelf: false },
          { address: '10.0.2.1', asn: 64501 },
        ],
      }),
    );
    expect(c.bgp).toMatchObject({
      ...same,
      communities: ['64512:100', '4200000000:1:2'],
      holdTimeMs: 30_000,
      keepaliveTimeMs: 10_000,
      gracefulRestart: false,
      gracefulRestartTimeMs: 60_000,
      bfd: { intervalMs: 50, multiplier: 5 },
    });
    expect(c.bgp!.peers.map((p) => [p.address, p.asn, p.bfd, p.nextHopSelf])).toStrictEqual([
      ['10.0.1.1', 64500, false, false],
      ['10.0.2.1', 64501, true, true],
    ]);
  });

  it('takes IPv6 VIPs and peers', () => {
    const c = validateConfig({
      ...BASE,
      vips: ['fd00::0100'],
      apiserver: { backends: ['[fd00:1::2]:6443'], health: { insecureSkipVerify: true } },
      bgp: { localAsn: 1, peers: [{ address: 'FD00:1::1', asn: 2 }] },
    });
    expect([c.family, c.vips, c.bgp!.peers[0]!.address, c.bgp!.peers[0]!.family]).toStrictEqual([6, ['fd00::100'], 'fd00:1::1', 6]);
  });

  it('names the field of each bad setting', () => {
    expect(issues(withBgp({ localAsn: 0 }))).toStrictEqual([['bgp.localAsn', 'must be an integer from 1 to 4294967295, got 0 (AS 0 is reserved, RFC 7607)']]);
    expect(issues(withBgp({ localAsn: undefined }))).toStrictEqual([['bgp.localAsn', "required: this node's ASN, an integer from 1 to 4294967295"]]);
    expect(
      issues(
        withBgp({
          peers: [
            { address: '10.0.1.1', asn: 64500 },
            { address: 'router', asn: 1 },
          ],
        }),
      ),
    ).toStrictEqual([['bgp.peers[1].address', expect.stringContaining('router')]]);
    expect(issues(withBgp({ peers: [{ address: '10.0.1.1' }] }))).toStrictEqual([
      ['bgp.peers[0].asn', "required: the peer's ASN, an integer from 1 to 4294967295"],
    ]);
    expect(issues(withBgp({ peers: [] }))).toStrictEqual([['bgp.peers', 'must list at least one peer, e.g. [{ address: 10.0.0.1, asn: 64500 }]']]);
    expect(issues(withBgp({ peers: [{ address: '10.0.1.1', asn: 1, bfd: 'yes' }] }))).toStrictEqual([
      ['bgp.peers[0].bfd', 'must be true or false, got "yes" (YAML 1.2 reads yes/no/on/off as strings)'],
    ]);
    expect(issues(withBgp({ peers: [{ address: '10.0.1.1', asn: 1, hold: 3 }] }))[0]?.[0]).toBe('bgp.peers[0].hold');
    expect(issues(withBgp({ bfd: { interval: '5ms' } }))).toStrictEqual([['bgp.bfd.interval', 'must be from 10ms to 10s, got 5ms']]);
    expect(issues(withBgp({ bfd: { multiplier: 0 } }))[0]?.[0]).toBe('bgp.bfd.multiplier');
    expect(issues(withBgp({ holdTime: '2s' }))).toStrictEqual([['bgp.holdTime', 'must be from 3s to 65535s (RFC 4271 §4.2), got 2s']]);
    expect(issues(withBgp({ holdTime: '3500ms' }))).toStrictEqual([['bgp.holdTime', 'must be whole seconds (BGP carries seconds), got 3.5s']]);
    expect(issues(withBgp({ holdTime: '9s', keepaliveTime: '4s' }))).toStrictEqual([
      ['bgp.keepaliveTime', 'must be at most a third of bgp.holdTime (9s; RFC 4271 §10), got 4s'],
    ]);
    expect(issues(withBgp({ communities: ['64512:70000'] }))).toStrictEqual([
      ['bgp.communities[0]', '64512:70000: each part must be from 0 to 65535 in a standard community'],
    ]);
    expect(issues(withBgp({ communities: ['no-export'] }))[0]?.[0]).toBe('bgp.communities[0]');
    expect(issues(withBgp({ routerId: 'fd00::1' }))).toStrictEqual([
      ['bgp.routerId', 'must be an IPv4 address (a BGP identifier is 32 bits, RFC 6286), got "fd00::1"'],
    ]);
    expect(issues(withBgp({ daemon: 'frr' }))).toStrictEqual([['bgp.daemon', 'must be "bird" (BIRD 2), got "frr"']]);
    expect(issues(withBgp({ socket: 'bird.ctl' }))[0]?.[0]).toBe('bgp.socket');
    expect(issues(withBgp({ interface: 'a/b' }))[0]?.[0]).toBe('bgp.interface');
    expect(issues(withBgp({ balance: 'some' }))).toStrictEqual([
      ['bgp.balance', 'must be "all" (every ready apiserver) or "local" (this node\'s apiserver only), got "some"'],
    ]);
    expect(issues(withBgp({ annouce: 'local' }))[0]?.[0]).toBe('bgp.annouce');
  });

  it('checks the mode against the sections, and peers against the VIPs', () => {
    expect(issues({ ...BASE, mode: undefined })).toStrictEqual([
      ['bgp', 'is set but mode is not set (vrrp, the default): set mode: bgp to announce the VIPs with BGP, or remove bgp'],
    ]);
    expect(issues({ ...BASE, vrrp: { vrid: 1 } })).toStrictEqual([
      ['vrrp', 'must be absent with mode: bgp: no election runs, every ready node announces the VIPs (remove vrrp, or use mode: vrrp)'],
    ]);
    expect(issues({ ...BASE, vips: undefined }).map((i) => i[0])).toStrictEqual(['vips']);
    expect(issues({ ...BASE, bgp: undefined }).map((i) => i[0])).toStrictEqual(['bgp']);
    expect(issues({ ...BASE, apiserver: {} }).map((i) => i[0])).toStrictEqual(['apiserver.backends']);
    expect(issues({ ...BASE, mode: 'ospf' })[0]?.[0]).toBe('mode');
    expect(issues(withBgp({ peers: [{ address: 'fd00::1', asn: 1 }] }))).toStrictEqual([
      ['bgp.peers[0].address', "fd00::1 is IPv6 but the VIPs are IPv4: the peers carry the VIPs' family"],
    ]);
    expect(
      issues(
        withBgp({
          peers: [
            { address: '10.0.1.1', asn: 1 },
            { address: '10.0.1.1', asn: 2 },
          ],
        }),
      ),
    ).toStrictEqual([['bgp.peers[1].address', '10.0.1.1 duplicates bgp.peers[0].address']]);
    expect(issues(withBgp({ peers: [{ address: '10.0.0.100', asn: 1 }] }))).toStrictEqual([
      ['bgp.peers[0].address', "10.0.0.100 is a VIP; a peer is a router's address"],
    ]);
  });
});
