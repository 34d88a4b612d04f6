/**
 * Configuration defects a new user meets:
 * interface names the kernel refuses, a checksum rule that means nothing for IPv6, a local
 * endpoint on the apiserver's port, and addresses the file alone shows can never work. The
 * refusals failed on the code before the fix; the "still refuses" / "accepts" cases pin what
 * already worked. YAML-level defects are in config-yaml.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { issuesOf, validateIssues } from '../support/config-issues.js';

const ELECTION = { vrrp: { vrid: 51 }, vips: ['10.0.0.100'] };
const BACKENDS = { backends: ['10.0.0.11:6443', '10.0.0.12:6443'], health: { insecureSkipVerify: true } };

describe('interface names the kernel refuses (net/core/dev.c dev_valid_name)', () => {
  const cases: readonly [string, string, string][] = [
    ['NUL', 'eth\u00000', 'it contains a NUL character'],
    ['NUL at the end', 'eth0\u0000', 'it contains a NUL character'],
    ['16 bytes of UTF-8 in 8 characters', 'é'.repeat(8), 'it is 16 bytes long; the kernel allows 15 (IFNAMSIZ 16, with the final NUL)'],
    ['byte 0xA0 (the kernel counts it as whitespace)', 'ethà', 'it contains the byte 0xA0 (in "à"), which the kernel counts as whitespace'],
    ['"/"', 'a/b', 'it contains "/"'],
    ['":"', 'eth0:1', 'it contains ":" (an alias label, not an interface)'],
    ['a space', 'eth 0', 'it contains whitespace'],
    ['a tab', 'eth\t0', 'it contains whitespace'],
    ['"."', '.', '"." and ".." are not interface names'],
    ['".."', '..', '"." and ".." are not interface names'],
    ['empty', '', 'it is empty'],
    ['16 characters', 'averyveryverylon', 'it is 16 bytes long; the kernel allows 15 (IFNAMSIZ 16, with the final NUL)'],
  ];
  it.each(cases)('%s', (_name, ifname, reason) => {
    expect(validateIssues({ ...ELECTION, interface: ifname })).toStrictEqual([
      {
        path: 'interface',
        message: `${JSON.stringify(ifname)} is not a valid interface name (1 to 15 characters, counted in UTF-8 bytes; no "/", ":", whitespace or NUL; not "." or ".."): ${reason}`,
      },
    ]);
  });

  it('accepts the names the kernel accepts', () => {
    for (const name of ['eth0', 'bond0.100', 'enp0s31f6', 'a', '123456789012345', 'veth-ü', 'br_lan@x']) {
      expect(validateIssues({ ...ELECTION, interface: name })).toStrictEqual([]);
    }
  });
});

describe('vrrp.checksum on an IPv6 group', () => {
  it('refuses rfc9568, saying why', () => {
    expect(validateIssues({ vrrp: { vrid: 51, checksum: 'rfc9568' }, vips: ['fd00::100'] })).toStrictEqual([
      {
        path: 'vrrp.checksum',
        message:
          'is "rfc9568" but the VIPs are IPv6: the rule has no meaning there, because an IPv6 VRRP checksum always covers the pseudo-header (RFC 9568 §5.2.8); remove vrrp.checksum',
      },
    ]);
  });

  it('keeps accepting rfc9568 for IPv4, and the default for IPv6', () => {
    expect(validateIssues({ vrrp: { vrid: 51, checksum: 'rfc9568' }, vips: ['10.0.0.100'] })).toStrictEqual([]);
    expect(validateIssues({ vrrp: { vrid: 51 }, vips: ['fd00::100'] })).toStrictEqual([]);
    expect(validateIssues({ vrrp: { vrid: 51, checksum: 'rfc5798' }, vips: ['fd00::100'] })).toStrictEqual([]);
  });
});

describe("the local endpoint is never the apiserver's port", () => {
  it('refuses apiserver.port (the default 6443)', () => {
    expect(validateIssues({ localEndpoint: { address: '127.0.0.1:6443' }, apiserver: BACKENDS })).toStrictEqual([
      {
        path: 'localEndpoint.address',
        message:
          '127.0.0.1:6443 has port 6443, which is apiserver.port: on a control-plane node the local apiserver listens there, so the endpoint would take its clients (or fail to bind); use another port, e.g. 127.0.0.1:7443',
      },
    ]);
  });

  it('refuses a configured apiserver.port', () => {
    const issues = validateIssues({
      localEndpoint: { address: ['127.0.0.1:7443', '[::1]:8443'] },
      apiserver: { ...BACKENDS, port: 8443, backends: ['10.0.0.11:6443', '[fd00::11]:6443'] },
    });
    expect(issues.map((i) => [i.path, i.message.slice(0, 45)])).toStrictEqual([['localEndpoint.address[1]', '[::1]:8443 has port 8443, which is apiserver.']]);
  });

  it("refuses policy.localBackend's port", () => {
    const issues = validateIssues({ localEndpoint: { address: '127.0.0.1:7000' }, apiserver: BACKENDS, policy: { localBackend: '127.0.0.1:7000' } });
    expect(issues).toStrictEqual([
      {
        path: 'localEndpoint.address',
        message:
          "127.0.0.1:7000 has port 7000, which is policy.localBackend's: on a control-plane node the local apiserver listens there, so the endpoint would take its clients (or fail to bind); use another port, e.g. 127.0.0.1:7443",
      },
    ]);
  });

  it("refuses a backend's port", () => {
    const issues = validateIssues({ localEndpoint: { address: '127.0.0.1:7000' }, apiserver: { ...BACKENDS, port: 443, backends: ['10.0.0.11:7000'] } });
    expect(issues).toStrictEqual([
      {
        path: 'localEndpoint.address',
        message:
          "127.0.0.1:7000 has port 7000, which is apiserver.backends[0]'s: on a control-plane node the local apiserver listens there, so the endpoint would take its clients (or fail to bind); use another port, e.g. 127.0.0.1:7443",
      },
    ]);
  });

  it('accepts the usual 7443', () => {
    expect(validateIssues({ localEndpoint: {}, apiserver: BACKENDS })).toStrictEqual([]);
    expect(
      validateIssues({
        ...ELECTION,
        localEndpoint: { address: ['127.0.0.1:7443', '[::1]:7443'] },
        apiserver: { ...BACKENDS, backends: ['10.0.0.11:6443', '[fd00::11]:6443'] },
      }),
    ).toStrictEqual([]);
  });
});

describe('validate finds what the file alone shows', () => {
  it('refuses a local endpoint that can never be local', () => {
    for (const [address, what] of [
      ['224.0.0.1:7443', 'a multicast address'],
      ['0.0.0.0:7443', 'the unspecified address'],
      ['255.255.255.255:7443', 'the broadcast address'],
      ['[ff02::1]:7443', 'a multicast address'],
      ['[::]:7443', 'the unspecified address'],
    ] as const) {
      const issues = validateIssues({ localEndpoint: { address }, apiserver: { ...BACKENDS, backends: ['10.0.0.11:6443', '[fd00::11]:6443'] } });
      expect(issues.map((i) => [i.path, i.message])).toStrictEqual([
        [
          'localEndpoint.address',
          `host: ${address.replace(/^\[?([^\]]*)\]?:\d+$/, '$1')} is ${what}; a local endpoint must be a loopback address (or one of this node's own)`,
        ],
      ]);
    }
  });

  it('refuses admin.listen on an address that can never be local', () => {
    for (const [listen, what] of [
      ['224.0.0.1:9641', 'a multicast address'],
      ['255.255.255.255:9641', 'the broadcast address'],
      ['[ff02::1]:9641', 'a multicast address'],
    ] as const) {
      expect(validateIssues({ ...ELECTION, admin: { listen } }).map((i) => [i.path, i.message.split(';')[0]])).toStrictEqual([
        ['admin.listen', `host: ${listen.replace(/^\[?([^\]]*)\]?:\d+$/, '$1')} is ${what}`],
      ]);
    }
  });

  it('refuses a local endpoint on a VIP: the VIP is on this node only while it is Active', () => {
    expect(validateIssues({ ...ELECTION, localEndpoint: { address: '10.0.0.100:7443' }, apiserver: BACKENDS })).toStrictEqual([
      {
        path: 'localEndpoint.address',
        message:
          '10.0.0.100:7443 is on a VIP (vips[0]): a VIP is on this node only while it is Active, and the local endpoint must work on every node; use a loopback address such as 127.0.0.1:7443',
      },
    ]);
  });

  it('refuses admin.listen on a VIP: a Backup could not listen there', () => {
    expect(validateIssues({ ...ELECTION, admin: { listen: '10.0.0.100:9641' } })).toStrictEqual([
      {
        path: 'admin.listen',
        message:
          "10.0.0.100:9641 is on a VIP (vips[0]): a VIP is on this node only while it is Active, so a Backup could not serve /status; use 127.0.0.1:9641, this node's own address, or 0.0.0.0:9641",
      },
    ]);
  });

  it('refuses policy.localBackend on a VIP', () => {
    expect(validateIssues({ ...ELECTION, apiserver: BACKENDS, policy: { localBackend: '10.0.0.100:6443' } })).toStrictEqual([
      {
        path: 'policy.localBackend',
        message:
          "10.0.0.100:6443 is on a VIP (vips[0]): the VIP moves between nodes, so it never names this node's own apiserver; use this node's address or 127.0.0.1:6443",
      },
    ]);
  });

  it('still refuses a peer or a backend that is a VIP', () => {
    expect(validateIssues({ vrrp: { vrid: 51, peers: ['10.0.0.100'] }, vips: ['10.0.0.100'] }).map((i) => i.path)).toStrictEqual(['vrrp.peers[0]']);
    expect(validateIssues({ ...ELECTION, apiserver: { ...BACKENDS, backends: ['10.0.0.100:6443'] } }).map((i) => i.path)).toStrictEqual([
      'apiserver.backends[0]',
    ]);
  });

  it('round-trips through YAML text with line numbers', () => {
    const text = stringify({ ...ELECTION, localEndpoint: { address: '127.0.0.1:6443' }, apiserver: BACKENDS });
    const [issue] = issuesOf(text);
    expect([issue?.path, issue?.line]).toStrictEqual(['localEndpoint.address', text.split('\n').findIndex((l) => l.includes('127.0.0.1:6443')) + 1]);
  });
});

describe("keys that are Object.prototype's names ('constructor' must not crash validate)", () => {
  it('constructor, toString and hasOwnProperty are unknown keys with the section’s list, never an exception', () => {
    for (const key of ['constructor', 'toString', 'hasOwnProperty']) {
      expect(issuesOf(`vrrp: {vrid: 77, ${key}: 1}\nvips: [10.0.0.100]\n`).map((i) => [i.path, i.message])).toStrictEqual([
        [
          `vrrp.${key}`,
          'unknown key (expected one of: vrid, priority, advertisementInterval, preempt, preemptDelay, restartHold, realtimePriority, peers, acceptFrom, singleNode, checksum, auth)',
        ],
      ]);
    }
    expect(issuesOf('constructor: {a: 1}\nvrrp: {vrid: 77}\nvips: [10.0.0.100]\n').map((i) => i.path)).toStrictEqual(['constructor']);
  });
});
