/**
 * `ballast check`'s pure parts: the firewall analysis on a ruleset captured from the real nft
 * 1.0.6 here (test/fixtures/nft/: foreign-ruleset.nft loaded into a namespace with
 * `nft -f`, iptables-nft and iptables-legacy rules added, then `nft -j list ruleset` and
 * `iptables-legacy-save`), the probe frames and their parsers (keepalived's captured adverts
 * and NAs), the VIP's place in its subnet, and the VRRP speaker verdicts.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { analyseIptablesSave, analyseNftRuleset, countForeignChains, findingKey, flowsFor } from '../../src/check/firewall.js';
import { reservedInSubnet } from '../../src/check/interface.js';
import { judgeSpeakers } from '../../src/check/vrrp.js';
import { checkCommand, formatReport } from '../../src/commands/check.js';
import { ConfigError } from '../../src/errors.js';
import { vi } from 'vitest';
import { arpClaim, arpProbeFrame, dadSolicitationFrame, ndClaim, neighborDiscoveryFilter, parseVrrpFrame, vrrpFilter } from '../../src/check/probe.js';
import { parseConfig } from '../../src/config/index.js';
import { fixturePath, readPcap } from '../support/pcap.js';
import { ForeignFirewallWatch } from '../../src/check/watch.js';
import type { Executor } from '../../src/dataplane/apply.js';
import type { Logger } from '../../src/log/log.js';
import { waitFor } from '../../lab/wait.js';

const FIXTURES = join(import.meta.dirname, '..', 'fixtures', 'nft');
const ruleset = JSON.parse(readFileSync(join(FIXTURES, 'foreign-ruleset.json'), 'utf8')) as unknown;
const legacy = readFileSync(join(FIXTURES, 'iptables-legacy-save.txt'), 'utf8');

const hooks = flowsFor({
  family: 4,
  vips: ['10.78.105.100'],
  port: 6443,
  backends: [
    { host: '10.78.105.11', port: 6443 },
    { host: '10.78.105.12', port: 6443 },
  ],
  nodeAddresses: new Set(['10.78.105.11']),
  ifname: 'eth0',
});

describe('analyseNftRuleset (nft -j list ruleset of nft 1.0.6)', () => {
  it('names each chain that drops (a rule that provably matches) or may drop (policy drop, no proven accept)', () => {
    expect(analyseNftRuleset(ruleset, hooks).map((f) => `${f.severity} ${f.family} ${f.table} ${f.chain} ${f.handle ?? '-'} | ${f.flow}`)).toStrictEqual([
      // inet fw input: `tcp dport 6443 counter reject with tcp reset` (handle 9), after accepts that do not match
      'fail inet fw input 9 | TCP to the VIP 10.78.105.100:6443',
      'fail inet fw input 9 | TCP to the local backend 10.78.105.11:6443',
      // inet fw forward: `ip daddr 10.78.105.12 tcp dport 6443 drop`
      'fail inet fw forward 13 | TCP to the remote backend 10.78.105.12:6443',
      // iptables-nft: `iptables -P FORWARD DROP`, and `-A INPUT -p tcp --dport 6443 -j DROP` (handle 3)
      'warn ip filter FORWARD - | TCP to the remote backend 10.78.105.12:6443',
      'fail ip filter INPUT 3 | TCP to the VIP 10.78.105.100:6443',
      'fail ip filter INPUT 3 | TCP to the local backend 10.78.105.11:6443',
      // `table ip open` (policy drop, `tcp dport 6443 accept`) accepts: no finding
    ]);
  });

  it('one sentence names table, chain, hook and handle', () => {
    const [first] = analyseNftRuleset(ruleset, hooks);
    expect(first!.detail).toBe('nft table inet fw, chain input (hook input): rule handle 9 drops TCP to the VIP 10.78.105.100:6443');
    expect(findingKey(first!)).toBe('nft inet fw input 9 TCP to the VIP 10.78.105.100:6443');
  });

  it("leaves ballast's own tables out, and an IPv6 flow is not judged by ip tables", () => {
    const skipAll = new Set(['inet fw', 'ip open', 'ip filter']);
    expect(analyseNftRuleset(ruleset, hooks, skipAll)).toStrictEqual([]);
    expect(countForeignChains(ruleset)).toBe(5); // base chains only: `extra` is a regular chain
    const v6 = flowsFor({ family: 6, vips: ['fd78:105::100'], port: 6443, backends: [], nodeAddresses: new Set(), ifname: 'eth0' });
    // inet fw input still rejects tcp dport 6443 for IPv6; the ip tables do not see it
    expect(analyseNftRuleset(ruleset, v6).map((f) => `${f.severity} ${f.table} ${f.chain}`)).toStrictEqual(['fail fw input']);
  });

  it('a port the named set or the jumped-to chain accepts is accepted; an unknown match proves nothing', () => {
    const at = (port: number) => flowsFor({ family: 4, vips: ['10.78.105.100'], port, backends: [], nodeAddresses: new Set(), ifname: 'eth0' });
    // 443 is in @allowed; 7050 is accepted by `jump extra` → `tcp dport 7000-7100 accept`; ip open's input drops both by policy
    expect(analyseNftRuleset(ruleset, at(443), new Set(['ip open', 'ip filter']))).toStrictEqual([]);
    expect(analyseNftRuleset(ruleset, at(7050), new Set(['ip open', 'ip filter']))).toStrictEqual([]);
    expect(analyseNftRuleset(ruleset, at(8080), new Set(['ip open', 'ip filter'])).map((f) => f.detail)).toStrictEqual([
      'nft table inet fw, chain input (hook input): policy drop, and no rule provably accepts TCP to the VIP 10.78.105.100:8080',
    ]);
    // from this node (output) nothing of this ruleset applies
    expect(analyseNftRuleset(ruleset, at(8080)).filter((f) => f.hook === 'output')).toStrictEqual([]);
  });

  it('refuses what is not a ruleset document', () => {
    expect(() => analyseNftRuleset({ tables: [] }, hooks)).toThrow(TypeError);
  });
});

describe('analyseIptablesSave (iptables-legacy-save 1.8.9)', () => {
  it('policy DROP with a matching ACCEPT passes; a REJECT for a backend fails, naming the line', () => {
    expect(analyseIptablesSave(legacy, 4, hooks)).toStrictEqual([]);
    const toFive = flowsFor({
      family: 4,
      vips: ['10.78.105.100'],
      port: 6443,
      backends: [{ host: '10.0.0.5', port: 6443 }],
      nodeAddresses: new Set(),
      ifname: 'eth0',
    });
    expect(analyseIptablesSave(legacy, 4, toFive).map((f) => f.detail)).toStrictEqual([
      'iptables-legacy (iptables) table filter, chain FORWARD: rule "-A FORWARD -d 10.0.0.5/32 -p tcp -m tcp --dport 6443 -j REJECT --reject-with icmp-port-unreachable" drops TCP to the remote backend 10.0.0.5:6443',
    ]);
    const other = flowsFor({ family: 4, vips: ['10.78.105.100'], port: 8443, backends: [], nodeAddresses: new Set(), ifname: 'eth0' });
    expect(analyseIptablesSave(legacy, 4, other).map((f) => `${f.severity} ${f.chain}`)).toStrictEqual(['warn INPUT']);
    expect(analyseIptablesSave('', 4, hooks)).toStrictEqual([]);
  });
});

describe('reservedInSubnet', () => {
  it('IPv4 network and broadcast, IPv6 subnet-router anycast; none in /31, /32, /127, /128', () => {
    expect(reservedInSubnet('10.78.105.0', 24)).toBe('network');
    expect(reservedInSubnet('10.78.105.255', 24)).toBe('broadcast');
    expect(reservedInSubnet('10.78.105.100', 24)).toBeNull();
    expect(reservedInSubnet('10.78.105.0', 31)).toBeNull();
    expect(reservedInSubnet('10.78.105.1', 32)).toBeNull();
    expect(reservedInSubnet('fd78:105::', 64)).toBe('subnet-router anycast');
    expect(reservedInSubnet('fd78:105::ffff:ffff:ffff:ffff', 64)).toBeNull();
    expect(reservedInSubnet('fd78:105::', 127)).toBeNull();
  });
});

describe('probe frames', () => {
  const mac = Buffer.from([0x02, 0x78, 0x69, 0, 0, 0x11]);
  const other = Buffer.from([0x02, 0x78, 0x69, 0, 0, 0x50]);

  it('an ARP probe: broadcast request, sender IP 0.0.0.0, target the VIP (RFC 5227 §2.1.1)', () => {
    expect(arpProbeFrame(mac, '10.78.105.100').toString('hex')).toBe(
      'ffffffffffff' + '027869000011' + '0806' + '0001' + '0800' + '06' + '04' + '0001' + '027869000011' + '00000000' + '000000000000' + '0a4e6964',
    );
  });

  it("arpClaim: a reply from the address, an announcement, another host's probe; never our own frames", () => {
    const reply = arpProbeFrame(other, '10.78.105.1');
    reply.writeUInt16BE(2, 20);
    Buffer.from([10, 78, 105, 100]).copy(reply, 28);
    expect(arpClaim(reply, '10.78.105.100', mac)).toStrictEqual({ mac: '02:78:69:00:00:50', how: 'arp-reply' });
    expect(arpClaim(arpProbeFrame(other, '10.78.105.100'), '10.78.105.100', mac)).toStrictEqual({ mac: '02:78:69:00:00:50', how: 'arp-probe' });
    expect(arpClaim(arpProbeFrame(mac, '10.78.105.100'), '10.78.105.100', mac)).toBeNull();
    expect(arpClaim(arpProbeFrame(other, '10.78.105.101'), '10.78.105.100', mac)).toBeNull();
    // keepalived's gratuitous ARP for its VIP is an announcement of it
    const [garp] = readPcap(fixturePath('keepalived-garp.pcap'));
    expect(arpClaim(garp!.data, '10.77.0.100', mac)).toStrictEqual({ mac: '02:77:00:00:00:11', how: 'arp-announcement' });
  });

  it('a DAD solicitation: :: to the solicited-node group, no option, checksum right (RFC 4862 §5.4.2)', () => {
    const f = dadSolicitationFrame(mac, 'fd78:105::100');
    expect(f.length).toBe(78);
    expect(f.subarray(0, 6).toString('hex')).toBe('3333ff000100');
    expect(f.subarray(14 + 24, 14 + 40).toString('hex')).toBe('ff0200000000000000000001ff000100');
    expect(f.subarray(22, 38).every((b) => b === 0)).toBe(true);
    expect(f[21]).toBe(255);
    // the ones'-complement sum over the pseudo-header (::, the group, length 24, next header 58) and the message is 0xffff
    const pseudo = Buffer.concat([Buffer.alloc(16), f.subarray(38, 54), Buffer.from([0, 0, 0, 24, 0, 0, 0, 58])]);
    const all = Buffer.concat([pseudo, f.subarray(54)]);
    let sum = 0;
    for (let i = 0; i < all.length; i += 2) sum += all.readUInt16BE(i);
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
    expect(sum).toBe(0xffff);
    expect(f.subarray(54, 54 + 8).toString('hex')).toMatch(/^8700[0-9a-f]{4}00000000$/);
    // another host's DAD for the same address is a claim; ours is not
    expect(ndClaim(dadSolicitationFrame(other, 'fd78:105::100'), 'fd78:105::100', mac)).toStrictEqual({ mac: '02:78:69:00:00:50', how: 'dad-probe' });
    expect(ndClaim(f, 'fd78:105::100', mac)).toBeNull();
  });

  it("ndClaim: a Neighbor Advertisement names its Target Link-Layer Address (keepalived's NA)", () => {
    const [na] = readPcap(fixturePath('keepalived-ipv6-na.pcap'));
    expect(ndClaim(na!.data, 'fd77::100', mac)).toStrictEqual({ mac: '02:77:00:00:00:11', how: 'neighbor-advertisement' });
    expect(ndClaim(na!.data, 'fd77::101', mac)).toBeNull();
  });

  it('the socket filters are classic BPF programs of 8-byte instructions', () => {
    expect(vrrpFilter(4).toString('hex')).toBe('3000000017000000' + '1500000170000000' + '0600000000000400' + '0600000000000000');
    expect(vrrpFilter(6).subarray(4, 8).readUInt32LE(0)).toBe(20);
    expect(neighborDiscoveryFilter().length).toBe(7 * 8);
  });
});

describe('parseVrrpFrame (keepalived 2.2.7 captures)', () => {
  it('VRRPv2: version 2, whole-second interval', () => {
    const [f] = readPcap(fixturePath('keepalived-vrrp2-ipv4.pcap'));
    expect(parseVrrpFrame(f!.data)).toStrictEqual({
      source: '10.77.0.11',
      mac: '02:77:00:00:00:11',
      version: 2,
      vrid: 51,
      priority: 150,
      intervalMs: 1000,
      addresses: ['10.77.0.100'],
      ttl: 255,
    });
  });
  it('VRRPv3 over IPv4 (centiseconds) and IPv6', () => {
    const [f] = readPcap(fixturePath('keepalived-vrrp3-ipv4-adv10cs.pcap'));
    expect(parseVrrpFrame(f!.data)).toMatchObject({ source: '10.77.0.11', version: 3, vrid: 51, intervalMs: 100, addresses: ['10.77.0.100'] });
    const [g] = readPcap(fixturePath('keepalived-vrrp3-ipv6.pcap'));
    expect(parseVrrpFrame(g!.data)).toStrictEqual({
      source: 'fe80::77:ff:fe00:11',
      mac: '02:77:00:00:00:11',
      version: 3,
      vrid: 51,
      priority: 150,
      intervalMs: 1000,
      addresses: ['fd77::100'],
      ttl: 255,
    });
    const [arp] = readPcap(fixturePath('keepalived-garp.pcap'));
    expect(parseVrrpFrame(arp!.data)).toBeNull();
  });
});

describe('judgeSpeakers', () => {
  const config = parseConfig(
    'interface: eth0\nvrrp: { vrid: 51, priority: 100 }\nvips: [10.78.105.100]\napiserver: { backends: ["10.78.105.11:6443", "10.78.105.12:6443"], health: { insecureSkipVerify: true } }\n',
    'test.yaml',
  );
  const advert = (source: string, version: number, addresses: string[], vrid = 51) => ({
    source,
    mac: '02:00:00:00:00:01',
    version,
    vrid,
    priority: 100,
    intervalMs: 1000,
    addresses,
    ttl: 255,
  });
  it('our peers with our VIPs are ours; VRRPv2, other addresses, a stranger are foreign; other VRIDs and our own adverts are left out', () => {
    const s = judgeSpeakers(
      config,
      [
        advert('10.78.105.12', 3, ['10.78.105.100']),
        advert('10.78.105.12', 3, ['10.78.105.100']),
        advert('10.78.105.12', 2, ['10.78.105.100']),
        advert('10.78.105.13', 3, ['10.78.105.100']),
        advert('10.78.105.12', 3, ['10.78.105.200']),
        advert('10.78.105.14', 3, ['10.78.105.100'], 52),
        advert('10.78.105.11', 3, ['10.78.105.100']),
      ],
      new Set(['10.78.105.11']),
    );
    expect(s.map((x) => [x.source, x.version, x.count, x.foreign])).toStrictEqual([
      ['10.78.105.12', 3, 3, null],
      ['10.78.105.12', 2, 1, 'speaks VRRPv2 (RFC 3768: keepalived `version 2`, its default for IPv4); ballast speaks VRRPv3'],
      ['10.78.105.13', 3, 1, 'is not one of our nodes (peers and backends: 10.78.105.11, 10.78.105.12)'],
    ]);
  });
  it('formatReport prints kubeadm-style lines with the fix under a failure', () => {
    expect(
      formatReport({
        config: 'x.yaml',
        checks: [
          { id: 'a', title: 'A', status: 'ok', detail: 'fine' },
          { id: 'b', title: 'B', status: 'fail', detail: 'broken', fix: 'mend it' },
        ],
      }),
    ).toBe(
      '[ok] a: A\n       fine\n[fail] b: B\n       broken\n       fix: mend it\nx.yaml: 1 ok, 0 warnings, 1 failed: this node is not ready to run ballast\n',
    );
  });
});

describe('ForeignFirewallWatch', () => {
  it('logs at start, then one line per change; status holds the last look', async () => {
    const lines: string[] = [];
    const log = { warn: (_o: unknown, m: string) => lines.push(`warn ${m}`), info: (_o: unknown, m: string) => lines.push(`info ${m}`) } as unknown as Logger;
    const empty = { nftables: [{ metainfo: { version: '1.0.6' } }] };
    const docs: unknown[] = [empty, ruleset, ruleset, empty];
    const nft: Executor = async () => ({ code: 0, stdout: JSON.stringify(docs.shift() ?? empty), stderr: '' });
    const only = flowsFor({ family: 4, vips: ['10.78.105.100'], port: 6443, backends: [], nodeAddresses: new Set(), ifname: 'eth0' });
    const w = new ForeignFirewallWatch({
      log,
      nft,
      legacy: async () => null,
      flows: async () => ({ family: 4, hooks: only.filter((h) => h.hook === 'input') }),
      pollMs: 10,
    });
    w.start();
    await waitFor(
      () => docs.length,
      (n) => n === 0,
      { timeoutMs: 2000, intervalMs: 5, what: 'four looks' },
    );
    await new Promise((r) => setTimeout(r, 30));
    await w.stop();
    expect(lines).toStrictEqual([
      'info foreign firewall: none of 0 base chains of other tables drops traffic to the VIP or the backends',
      'warn foreign firewall: drops traffic ballast serves: nft table inet fw, chain input (hook input): rule handle 9 drops TCP to the VIP 10.78.105.100:6443',
      'warn foreign firewall: drops traffic ballast serves: nft table ip filter, chain INPUT (hook input): rule handle 3 drops TCP to the VIP 10.78.105.100:6443',
      'info foreign firewall: no longer in the way: nft table inet fw, chain input (hook input): rule handle 9 drops TCP to the VIP 10.78.105.100:6443',
      'info foreign firewall: no longer in the way: nft table ip filter, chain INPUT (hook input): rule handle 3 drops TCP to the VIP 10.78.105.100:6443',
    ]);
    expect(w.status()?.rules).toStrictEqual([]);
  });
});

describe('checkCommand --json with a configuration that does not load', () => {
  it('prints a report with one failed config check naming the problems, then throws the ConfigError (exit 2)', async () => {
    const out: string[] = [];
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => (out.push(String(s)), true));
    const err = new ConfigError([{ path: 'vrrp.vrid', message: 'must be an integer from 1 to 255, got 300' }]);
    try {
      await expect(
        checkCommand({ config: '/etc/ballast/bad.yaml', json: true }, () => {
          throw err;
        }),
      ).rejects.toBe(err);
    } finally {
      spy.mockRestore();
    }
    const report = JSON.parse(out.join('')) as { config: string; checks: { id: string; status: string; detail: string }[] };
    expect(report.config).toBe('/etc/ballast/bad.yaml');
    expect(report.checks.map((c) => [c.id, c.status])).toEqual([['config', 'fail']]);
    expect(report.checks[0]!.detail).toContain('vrrp.vrid: must be an integer from 1 to 255, got 300');
  });
});
