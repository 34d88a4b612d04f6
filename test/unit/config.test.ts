import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parseDocument, stringify } from 'yaml';
import {
  CONFIG_FIELDS,
  ConfigError,
  formatDuration,
  formatNote,
  hostFiles,
  loadConfig,
  parseAuthKeys,
  parseConfig,
  parseDuration,
  validateConfig,
  type Config,
  type ConfigFiles,
  type ConfigIssue,
  type ConfigNote,
} from '../../src/config/index.js';
import { BallastError } from '../../src/errors.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

const MINIMAL = 'vrrp:\n  vrid: 51\nvips: [10.0.0.100]\n';

type Plain = Record<string, unknown>;
const isPlain = (v: unknown): v is Plain => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The minimal config with `over` merged in (a key set to `undefined` is removed), as YAML text. */
function yamlWith(over: Plain): string {
  const merge = (base: Plain, o: Plain): Plain => {
    const out: Plain = { ...base };
    for (const [k, v] of Object.entries(o)) {
      if (v === undefined) delete out[k];
      else out[k] = isPlain(v) && isPlain(out[k]) ? merge(out[k] as Plain, v) : v;
    }
    return out;
  };
  return stringify(merge({ vrrp: { vrid: 51 }, vips: ['10.0.0.100'] }, over));
}

/** The ConfigError that parsing `text` throws (fails the test if it does not throw one). */
function configError(text: string): ConfigError {
  try {
    parseConfig(text, 'test.yaml');
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error(`expected a ConfigError for:\n${text}`);
}

const issuesOf = (text: string): readonly ConfigIssue[] => configError(text).issues;

/** A self-signed EC P-256 certificate and its key, made for these tests (never used for anything else). */
const TEST_CERT = `-----BEGIN CERTIFICATE-----
MIIBlDCCATmgAwIBAgIUYwN3cJpm/5MK4Lvqf817TzW8uVQwCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTYmFsbGFzdCBjb25maWcgdGVzdDAgFw0yNjExMjkyMTA5NDRa
GA8yMTI2MTEwNTIxMDk0NFowHjEcMBoGA1UEAwwTYmFsbGFzdCBjb25maWcgdGVz
dDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABAFB8gGAX84279iBmbQwHhKG07GM
yDpd00Kt9iJ6F56NBnhXm1vDGkTHeQaes6n8nNG+a7lSkWQqkjq54dWnuiajUzBR
MB0GA1UdDgQWBBT/p7syfUGMGi2RQ1d2QFFueMztzjAfBgNVHSMEGDAWgBT/p7sy
fUGMGi2RQ1d2QFFueMztzjAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kA
MEYCIQCbougAgnrTaK30HhC1dxQTYsUbGMNHiT/e7WS4/fG9vQIhANTkqi59dC3R
Uv+3gXDIBiY6tI+S5x2vADYvMyMCOdvd
-----END CERTIFICATE-----
`;
const TEST_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgTiDWYJY/sgHZqsmS
A6tT0lSHQEePKB8zIpJOLqRD7TmhRANCAAQBQfIBgF/ONu/YgZm0MB4ShtOxjMg6
XdNCrfYieheejQZ4V5tbwxpEx3kGnrOp/JzRvmu5UpFkKpI6ueHVp7om
-----END PRIVATE KEY-----
`;

/** A file reader over a fixed map (missing paths fail with ENOENT); records what was read. */
function fakeFiles(content: Record<string, string>): ConfigFiles & { read: string[] } {
  const read: string[] = [];
  return {
    read,
    readFile(path: string): Buffer {
      read.push(path);
      const text = content[path];
      if (text === undefined) throw Object.assign(new Error(`ENOENT: no such file or directory, open '${path}'`), { code: 'ENOENT' });
      return Buffer.from(text);
    },
  };
}

/** apiserver settings with one backend and a CA file, so that only the setting under test is wrong. */
const withBackend = (over: Plain = {}, health: Plain = {}): Plain => ({
  apiserver: { backends: ['10.0.0.11:6443'], ...over, health: { caFile: '/etc/ca.crt', ...health } },
});

describe('parseConfig: valid files', () => {
  it('gives every default for the minimal file', () => {
    const expected: Config = {
      mode: 'vrrp',
      family: 4,
      vrrp: {
        vrid: 51,
        priority: 100,
        advertisementIntervalMs: 1000,
        advertisementIntervalCs: 100,
        preempt: true,
        preemptDelayMs: 0,
        realtimePriority: 0,
        restartHoldMs: 8000,
        unicast: false,
        peers: [],
        discoveredPeers: false,
        acceptFrom: 'members',
        checksum: 'rfc5798',
        owner: false,
        auth: null,
      },
      vips: ['10.0.0.100'],
      vipLifetimeMs: 5000,
      announce: { count: 5, spacingMs: 0, repeatAfterMs: 5000, refreshMs: 60000 },
      apiserver: {
        port: 6443,
        backends: [],
        health: {
          path: '/readyz',
          insecureSkipVerify: false,
          intervalMs: 1000,
          timeoutMs: 1000,
          rise: 2,
          fall: 2,
          settleMs: 4000,
          failOpen: true,
          damping: { transitions: 4, windowMs: 120000, holdMs: 30000, maxHoldMs: 300000 },
          rememberDepartedMs: 300000,
        },
      },
      dataplane: {
        vip: 'nftables',
        local: 'ebpf',
        keepOnStop: 'localEndpoint',
        commandTimeoutMs: 5000,
        rebalance: { enabled: false, factor: 1.2, afterMs: 60_000, resetsPerSecond: 5, maxFractionPerMinute: 0.1 },
        connectionSync: { enabled: true, commitTimeoutMs: 1000, resyncTimeoutMs: 5000 },
      },
      localEndpoint: null,
      discovery: null,
      policy: { unhealthyPriorityWeight: 50 },
      admin: { listen: { host: '127.0.0.1', port: 9641 } },
      log: { level: 'info' },
      bgp: null,
    };
    const config = parseConfig(MINIMAL);
    expect(config).toStrictEqual(expected);
    expect('interface' in config).toBe(false);
    for (const key of ['caFile', 'serverName', 'clientCertFile', 'clientKeyFile', 'tokenFile']) {
      expect(key in config.apiserver.health, key).toBe(false);
    }
    expect('localBackend' in config.policy).toBe(false);
  });

  it('parses the example file, which sets every field', () => {
    const path = join(root, 'examples', 'ballast.yaml');
    // the example names /etc/kubernetes/pki/ca.crt, which this machine need not have
    const files = fakeFiles({ '/etc/kubernetes/pki/ca.crt': TEST_CERT });
    const config = loadConfig(path, { files });
    expect(config).toMatchObject({
      interface: 'eth0',
      family: 4,
      vrrp: { vrid: 51, advertisementIntervalMs: 100, advertisementIntervalCs: 10 },
      vips: ['10.0.0.100'],
      apiserver: {
        port: 6443,
        backends: [
          { host: '10.0.0.11', port: 6443, family: 4 },
          { host: '10.0.0.12', port: 6443, family: 4 },
          { host: '10.0.0.13', port: 6443, family: 4 },
        ],
        health: { path: '/readyz', caFile: '/etc/kubernetes/pki/ca.crt', intervalMs: 1000, timeoutMs: 1000, rise: 2, fall: 2 },
      },
      dataplane: {
        vip: 'nftables',
        local: 'ebpf',
        keepOnStop: 'localEndpoint',
        commandTimeoutMs: 5000,
        rebalance: { enabled: false, factor: 1.2, afterMs: 60_000, resetsPerSecond: 5, maxFractionPerMinute: 0.1 },
        connectionSync: { enabled: true, commitTimeoutMs: 1000, resyncTimeoutMs: 5000 },
      },
      localEndpoint: { addresses: [{ host: '127.0.0.1', port: 7443, family: 4 }], force: false },
      policy: { unhealthyPriorityWeight: 50 },
    });
    // and its discovery section's kubeconfig (missing: a note) and last-known file (checked as a path)
    expect(files.read).toStrictEqual(['/etc/kubernetes/pki/ca.crt', '/etc/kubernetes/admin.conf', '/var/lib/ballast/backends.json']);
    const text = readFileSync(path, 'utf8');
    const doc = parseDocument(text);
    // settings that switch a mode on are shown commented out, with an example value
    const commented = ['vrrp.peers', 'vrrp.singleNode', 'vrrp.auth.keyFile', 'mode', ...CONFIG_FIELDS.filter((f) => f.startsWith('bgp.'))];
    for (const field of CONFIG_FIELDS) {
      if (commented.includes(field)) expect(text, field).toMatch(new RegExp(`^\\s*#\\s*${field.split('.').pop()!}: \\S`, 'm'));
      else expect(doc.hasIn(field.split('.')), field).toBe(true);
    }
  });

  it('documents every field in docs/config.md', () => {
    const doc = readFileSync(join(root, 'docs', 'config.md'), 'utf8');
    for (const field of CONFIG_FIELDS) expect(doc, field).toContain(`\`${field}\``);
  });

  it('treats an empty section as all defaults', () => {
    const config = parseConfig(`${MINIMAL}announce:\nadmin:\nlog:\n`);
    expect(config.announce).toStrictEqual({ count: 5, spacingMs: 0, repeatAfterMs: 5000, refreshMs: 60000 });
    expect(config.admin.listen).toStrictEqual({ host: '127.0.0.1', port: 9641 });
  });

  it('converts durations to milliseconds and the interval also to centiseconds', () => {
    const cases: [string, number, number][] = [
      ['10ms', 10, 1],
      ['0.5s', 500, 50],
      ['1s', 1000, 100],
      ['40950ms', 40950, 4095],
      ['40.95s', 40950, 4095],
    ];
    for (const [text, ms, cs] of cases) {
      const vrrp = parseConfig(yamlWith({ vrrp: { advertisementInterval: text } })).vrrp!;
      expect([vrrp.advertisementIntervalMs, vrrp.advertisementIntervalCs], text).toStrictEqual([ms, cs]);
    }
    const c = parseConfig(yamlWith({ vrrp: { preemptDelay: '1m30s' }, announce: { spacing: '20ms', repeatAfter: 0, count: 3 } }));
    expect(c.vrrp!.preemptDelayMs).toBe(90_000);
    expect(c.announce).toStrictEqual({ count: 3, spacingMs: 20, repeatAfterMs: 0, refreshMs: 60000 });
  });

  it('normalizes IPv6 addresses (RFC 5952) and derives family 6', () => {
    const c = parseConfig(
      yamlWith({
        vips: ['FD00:0:0:0:0:0:0:0100', '2001:0db8:0:0:1:0:0:1', '2001:db8:0:1:1:1:1:1', '2001:db8::0:1'],
        vrrp: { peers: ['fd00::0002', 'fe80::1'] },
        admin: { listen: '[0:0:0:0:0:0:0:1]:9000' },
      }),
    );
    expect(c.family).toBe(6);
    expect(c.vips).toStrictEqual(['fd00::100', '2001:db8::1:0:0:1', '2001:db8:0:1:1:1:1:1', '2001:db8::1']);
    expect(c.vrrp!.peers).toStrictEqual(['fd00::2', 'fe80::1']);
    expect(c.admin.listen).toStrictEqual({ host: '::1', port: 9000 });
  });

  it('writes IPv6 the way the WHATWG URL serializer does (an independent RFC 5952 implementation)', () => {
    const spellings = [
      'FD00:0000:0000:0000:0000:0000:0000:0001',
      '2001:db8:0:0:0:0:2:1',
      '2001:db8::0:1:0:0:1',
      '2001:0:0:1:0:0:0:1',
      '2001:db8:aaaa:bbbb:cccc:dddd:eeee:0',
      '0:0:0:0:0:0:0:2',
      '2001:db8::1:2:3:4:5',
      '64:ff9b::10.0.0.1',
    ];
    const { vips } = validateConfig({ vrrp: { vrid: 1 }, vips: spellings });
    expect(vips).toStrictEqual(spellings.map((s) => new URL(`http://[${s}]/`).hostname.slice(1, -1)));
  });

  it('refuses a YAML alias bomb', () => {
    let text = 'a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n';
    for (let i = 1; i < 8; i++)
      text += `a${i}: &a${i} [${Array<string>(10)
        .fill(`*a${i - 1}`)
        .join(', ')}]\n`;
    expect(issuesOf(text)[0]?.message).toMatch(/^cannot be read as data: /);
  });

  it('accepts every field set explicitly', () => {
    const c = parseConfig(
      yamlWith({
        interface: 'bond0.100',
        vrrp: { priority: 255, preempt: false, checksum: 'rfc9568', peers: ['10.0.0.2', '10.0.0.3'] },
        log: { level: 'debug' },
        admin: { listen: '0.0.0.0:8080' },
      }),
    );
    expect(c).toMatchObject({
      interface: 'bond0.100',
      vrrp: { priority: 255, preempt: false, checksum: 'rfc9568', peers: ['10.0.0.2', '10.0.0.3'] },
      log: { level: 'debug' },
      admin: { listen: { host: '0.0.0.0', port: 8080 } },
    });
  });

  it('returns a deeply frozen object', () => {
    const c = parseConfig(yamlWith({ vrrp: { peers: ['10.0.0.2'] } }));
    const walk = (v: unknown, path: string): void => {
      if (typeof v !== 'object' || v === null) return;
      expect(Object.isFrozen(v), path).toBe(true);
      for (const [k, x] of Object.entries(v)) walk(x, `${path}.${k}`);
    };
    walk(c, 'config');
    expect(() => {
      (c.vrrp as { priority: number }).priority = 1;
    }).toThrow(TypeError);
    expect(() => (c.vips as string[]).push('10.0.0.101')).toThrow(TypeError);
    expect(() => {
      (c.admin.listen as { port: number }).port = 1;
    }).toThrow(TypeError);
  });

  it('unicast: peers given → unicast with them; peers absent → multicast; singleNode → unicast to nobody', () => {
    expect(parseConfig(yamlWith({ vrrp: { peers: ['10.0.0.2'] } })).vrrp).toMatchObject({ unicast: true, peers: ['10.0.0.2'] });
    expect(parseConfig(MINIMAL).vrrp).toMatchObject({ unicast: false, peers: [] });
    expect(parseConfig(yamlWith({ vrrp: { singleNode: true } })).vrrp).toMatchObject({ unicast: true, peers: [] });
    expect(parseConfig(yamlWith({ vrrp: { singleNode: true, peers: [] } })).vrrp).toMatchObject({ unicast: true, peers: [] });
  });

  it('unicast: an empty peer list is an error unless singleNode; singleNode with peers is an error', () => {
    expect(issuesOf(yamlWith({ vrrp: { peers: [] } })).map((i) => [i.path, i.message])).toStrictEqual([
      [
        'vrrp.peers',
        'is empty: unicast with no peers sends adverts to nobody and this node holds the VIP alone; list the other nodes, remove vrrp.peers for multicast, or set vrrp.singleNode: true if this group really has one node',
      ],
    ]);
    expect(issuesOf(yamlWith({ vrrp: { singleNode: true, peers: ['10.0.0.2', '10.0.0.3'] } })).map((i) => [i.path, i.message])).toStrictEqual([
      ['vrrp.singleNode', 'is true but vrrp.peers lists 2 addresses: a single node has no peers; remove one of the two'],
    ]);
    expect(issuesOf(yamlWith({ vrrp: { singleNode: 'yes' } }))[0]?.path).toBe('vrrp.singleNode');
  });

  it('peers: discovered alone, or mixed with addresses: discoveredPeers, peers keeps the listed addresses only', () => {
    const seed = withBackend();
    expect(parseConfig(yamlWith({ vrrp: { peers: 'discovered' }, ...seed })).vrrp).toMatchObject({ unicast: true, peers: [], discoveredPeers: true });
    expect(parseConfig(yamlWith({ vrrp: { peers: ['10.0.0.2', 'discovered'] } })).vrrp).toMatchObject({
      unicast: true,
      peers: ['10.0.0.2'],
      discoveredPeers: true,
    });
    expect(parseConfig(yamlWith({ vrrp: { peers: ['10.0.0.2'] } })).vrrp).toMatchObject({ peers: ['10.0.0.2'], discoveredPeers: false });
    expect(issuesOf(yamlWith({ vrrp: { peers: ['discovered', 'nonsense'] } })).map((i) => i.path)).toStrictEqual(['vrrp.peers[1]']);
    expect(issuesOf(yamlWith({ vrrp: { peers: 'everyone' } })).map((i) => i.path)).toStrictEqual(['vrrp.peers']);
  });

  it('peers: discovered needs a seed or discovery, is IPv4 only, and not with singleNode', () => {
    expect(issuesOf(yamlWith({ vrrp: { peers: 'discovered' } })).map((i) => [i.path, i.message])).toStrictEqual([
      [
        'vrrp.peers',
        'discovered needs apiserver.backends (the seed) or discovery: with neither there is nobody to send adverts to; list the other nodes or add the backends',
      ],
    ]);
    expect(issuesOf(yamlWith({ vrrp: { peers: ['fe80::2', 'discovered'] }, vips: ['fd00::100'] })).map((i) => [i.path, i.message])).toStrictEqual([
      [
        'vrrp.peers[1]',
        "discovered is for IPv4 groups: IPv6 adverts come from link-local addresses (RFC 9568 §5.1.2.1), not the apiservers' node addresses; list the other nodes' link-local addresses",
      ],
    ]);
    expect(issuesOf(yamlWith({ vrrp: { peers: 'discovered', singleNode: true }, ...withBackend() })).map((i) => [i.path, i.message])).toStrictEqual([
      ['vrrp.singleNode', 'is true but vrrp.peers is discovered: a single node has no peers; remove one of the two'],
    ]);
  });

  it('acceptFrom: members (default) or any; anything else is refused', () => {
    expect(parseConfig(yamlWith({ vrrp: { acceptFrom: 'any' } })).vrrp!.acceptFrom).toBe('any');
    expect(parseConfig(yamlWith({ vrrp: { acceptFrom: 'members' } })).vrrp!.acceptFrom).toBe('members');
    expect(issuesOf(yamlWith({ vrrp: { acceptFrom: 'peers' } })).map((i) => i.path)).toStrictEqual(['vrrp.acceptFrom']);
  });

  it('auth: keyFile is required in vrrp.auth, absolute, and gives { keyFile }; absent = null', () => {
    expect(parseConfig(yamlWith({ vrrp: { auth: { keyFile: '/etc/ballast/vrrp.key' } } })).vrrp!.auth).toStrictEqual({ keyFile: '/etc/ballast/vrrp.key' });
    expect(parseConfig(MINIMAL).vrrp!.auth).toBeNull();
    expect(issuesOf(yamlWith({ vrrp: { auth: {} } })).map((i) => [i.path, i.message])).toStrictEqual([
      ['vrrp.auth.keyFile', 'is required: the file holding the shared key (or remove vrrp.auth to turn authentication off)'],
    ]);
    expect(issuesOf(yamlWith({ vrrp: { auth: { keyFile: 'vrrp.key' } } }))[0]?.path).toBe('vrrp.auth.keyFile');
    expect(issuesOf(yamlWith({ vrrp: { auth: { key: 'x' } } }))[0]?.path).toMatch(/^vrrp\.auth/);
  });

  it('validateConfig takes an object, and does not modify it', () => {
    const input = { vrrp: { vrid: 7 }, vips: ['fd00::0100'], announce: null };
    const snapshot = structuredClone(input);
    expect(validateConfig(input).vips).toStrictEqual(['fd00::100']);
    expect(input).toStrictEqual(snapshot);
    expect(Object.isFrozen(input)).toBe(false);
  });
});

describe('parseConfig: one message per invalid field', () => {
  // [what, overrides merged into the minimal file, path, message (exact) or pattern]
  const cases: [string, Plain, string, string | RegExp][] = [
    ['vrid 0', { vrrp: { vrid: 0 } }, 'vrrp.vrid', 'must be an integer from 1 to 255, got 0'],
    ['vrid 256', { vrrp: { vrid: 256 } }, 'vrrp.vrid', 'must be an integer from 1 to 255, got 256'],
    ['vrid 1.5', { vrrp: { vrid: 1.5 } }, 'vrrp.vrid', 'must be an integer from 1 to 255, got 1.5'],
    ['vrid "x"', { vrrp: { vrid: 'x' } }, 'vrrp.vrid', 'must be an integer from 1 to 255, got "x"'],
    ['vrid quoted', { vrrp: { vrid: '51' } }, 'vrrp.vrid', /got "51" \(a string: write the number without quotes\)/],
    ['vrid missing', { vrrp: { vrid: undefined } }, 'vrrp.vrid', /^required: the Virtual Router ID/],
    [
      'vrrp section missing (and no localEndpoint)',
      { vrrp: undefined, vips: undefined },
      'vrrp',
      /^required: vrrp.vrid and vips .*, or localEndpoint with apiserver.backends/,
    ],
    ['vrrp empty', { vrrp: null }, 'vrrp.vrid', /^required: /],
    ['vips without vrrp', { vrrp: undefined }, 'vips', /^is set but vrrp is absent: VIPs need an election/],
    ['vrrp not a mapping', { vrrp: 51 }, 'vrrp', 'must be a mapping of settings (key: value), got 51'],
    ['priority 0', { vrrp: { priority: 0 } }, 'vrrp.priority', /^must be an integer from 1 to 255, got 0 \(0 is reserved/],
    ['priority 256', { vrrp: { priority: 256 } }, 'vrrp.priority', 'must be an integer from 1 to 255, got 256'],
    ['priority empty', { vrrp: { priority: null } }, 'vrrp.priority', /^has no value: .*default, 100\)$/],
    [
      'interval 5ms',
      { vrrp: { advertisementInterval: '5ms' } },
      'vrrp.advertisementInterval',
      'must be from 10ms to 40950ms (RFC 9568 Max Adver Int is 12 bits of centiseconds), got 5ms',
    ],
    [
      'interval 105ms',
      { vrrp: { advertisementInterval: '105ms' } },
      'vrrp.advertisementInterval',
      'must be a multiple of 10ms (RFC 9568 Max Adver Int is in centiseconds), got 105ms',
    ],
    ['interval 40960ms', { vrrp: { advertisementInterval: '40960ms' } }, 'vrrp.advertisementInterval', /^must be from 10ms to 40950ms .*, got 40960ms$/],
    ['interval 0', { vrrp: { advertisementInterval: 0 } }, 'vrrp.advertisementInterval', /^must be from 10ms to 40950ms .*, got 0ms$/],
    [
      'interval "fast"',
      { vrrp: { advertisementInterval: 'fast' } },
      'vrrp.advertisementInterval',
      /^invalid duration "fast": expected a number followed by a unit \(ms, s, m or h\)/,
    ],
    [
      'interval bare number',
      { vrrp: { advertisementInterval: 100 } },
      'vrrp.advertisementInterval',
      'needs a unit: write "100ms" or "100s", not the bare number 100',
    ],
    ['interval a list', { vrrp: { advertisementInterval: [1] } }, 'vrrp.advertisementInterval', /^must be a duration .*, got a list$/],
    ['preempt "yes"', { vrrp: { preempt: 'yes' } }, 'vrrp.preempt', 'must be true or false, got "yes" (YAML 1.2 reads yes/no/on/off as strings)'],
    ['preemptDelay negative', { vrrp: { preemptDelay: '-1s' } }, 'vrrp.preemptDelay', 'negative duration "-1s": must be zero or more'],
    ['preemptDelay unitless', { vrrp: { preemptDelay: 5 } }, 'vrrp.preemptDelay', 'needs a unit: write "5ms" or "5s", not the bare number 5'],
    ['preemptDelay over 1h', { vrrp: { preemptDelay: '61m' } }, 'vrrp.preemptDelay', 'must be from 0s to 1h, got 1h1m'],
    ['peers bad address', { vrrp: { peers: ['foo'] } }, 'vrrp.peers[0]', 'not an IP address: "foo"'],
    ['peers not a list', { vrrp: { peers: '10.0.0.2' } }, 'vrrp.peers', /^must be a list of IP addresses .*, got "10.0.0.2"$/],
    [
      'peers wrong family',
      { vrrp: { peers: ['10.0.0.2', 'fd00::2'] } },
      'vrrp.peers[1]',
      'fd00::2 is IPv6 but the VIPs are IPv4: peers must be the same family as the VIPs',
    ],
    ['peers duplicate', { vrrp: { peers: ['10.0.0.2', '10.0.0.3', '10.0.0.2'] } }, 'vrrp.peers[2]', '10.0.0.2 duplicates vrrp.peers[0]'],
    ['peers a VIP', { vrrp: { peers: ['10.0.0.100'] } }, 'vrrp.peers[0]', "10.0.0.100 is a VIP (vips[0]); peers are the other nodes' own addresses"],
    ['peers multicast', { vrrp: { peers: ['224.0.0.18'] } }, 'vrrp.peers[0]', /^224.0.0.18 is a multicast address; a peer must be/],
    ['checksum "md5"', { vrrp: { checksum: 'md5' } }, 'vrrp.checksum', 'must be "rfc5798" or "rfc9568", got "md5"'],
    ['vips empty', { vips: [] }, 'vips', 'must list at least 1 address, e.g. [10.0.0.100]'],
    ['vips missing', { vips: undefined }, 'vips', /^required: a list of 1 to 16 IP addresses/],
    ['vips a string', { vips: '10.0.0.100' }, 'vips', /^must be a list of 1 to 16 IP addresses.*, got "10.0.0.100"$/],
    ['vips mixed families', { vips: ['fd00::100', '10.0.0.1'] }, 'vips[1]', '10.0.0.1 is IPv4 but vips[0] is IPv6: one VRRP group is one address family'],
    ['vips duplicate', { vips: ['10.0.0.100', '10.0.0.101', '10.0.0.100'] }, 'vips[2]', '10.0.0.100 duplicates vips[0]'],
    ['vips duplicate, other spelling', { vips: ['fd00::100', 'FD00:0::0100'] }, 'vips[1]', 'FD00:0::0100 duplicates vips[0] (both are fd00::100)'],
    ['vips multicast', { vips: ['224.0.0.18'] }, 'vips[0]', '224.0.0.18 is a multicast address; a VIP must be a unicast address that clients can reach'],
    ['vips IPv6 multicast', { vips: ['ff02::12'] }, 'vips[0]', /^ff02::12 is a multicast address/],
    ['vips loopback', { vips: ['127.0.0.1'] }, 'vips[0]', /^127.0.0.1 is a loopback address/],
    ['vips IPv6 loopback', { vips: ['::1'] }, 'vips[0]', /^::1 is a loopback address/],
    ['vips unspecified', { vips: ['0.0.0.0'] }, 'vips[0]', /^0.0.0.0 is the unspecified address/],
    ['vips IPv6 unspecified', { vips: ['::'] }, 'vips[0]', /^:: is the unspecified address/],
    ['vips link-local', { vips: ['169.254.10.1'] }, 'vips[0]', /^169.254.10.1 is a link-local address/],
    ['vips IPv6 link-local', { vips: ['fe80::1'] }, 'vips[0]', /^fe80::1 is a link-local address/],
    ['vips broadcast', { vips: ['255.255.255.255'] }, 'vips[0]', /^255.255.255.255 is the broadcast address/],
    ['vips IPv4-mapped', { vips: ['::ffff:10.0.0.1'] }, 'vips[0]', /IPv4-mapped IPv6 address; write it as IPv4: 10.0.0.1$/],
    ['vips bad', { vips: ['10.0.0.300'] }, 'vips[0]', 'not an IP address: "10.0.0.300"'],
    ['vips a number', { vips: [10] }, 'vips[0]', 'not an IP address: 10'],
    ['vips with prefix length', { vips: ['10.0.0.100/24'] }, 'vips[0]', /^not an IP address: "10.0.0.100\/24": write the address without a prefix length/],
    ['vips leading zeros', { vips: ['10.0.0.010'] }, 'vips[0]', /leading zeros are ambiguous .*; write 10.0.0.10$/],
    ['vips 17', { vips: Array.from({ length: 17 }, (_, i) => `10.0.0.${i + 1}`) }, 'vips', 'must list at most 16 addresses, got 17'],
    ['announce.count 0', { announce: { count: 0 } }, 'announce.count', 'must be an integer from 1 to 100, got 0'],
    ['announce.count 101', { announce: { count: 101 } }, 'announce.count', 'must be an integer from 1 to 100, got 101'],
    ['announce.spacing 2s', { announce: { spacing: '2s' } }, 'announce.spacing', 'must be from 0ms to 1s, got 2s'],
    ['announce.repeatAfter 2h', { announce: { repeatAfter: '2h' } }, 'announce.repeatAfter', 'must be from 0s (no second burst) to 1h, got 2h'],
    ['announce.refresh 2h', { announce: { refresh: '2h' } }, 'announce.refresh', 'must be from 0s (off) to 1h, got 2h'],
    ['vipLifetime 1s', { vipLifetime: '1s' }, 'vipLifetime', 'must be 0s (permanent) or at least 2s: the agent renews it every third of it'],
    ['vipLifetime 2500ms', { vipLifetime: '2500ms' }, 'vipLifetime', 'must be whole seconds (the kernel ages addresses in seconds), got 2.5s'],
    ['admin.listen without port', { admin: { listen: '127.0.0.1' } }, 'admin.listen', 'missing port: write "127.0.0.1:9641" (host:port)'],
    ['admin.listen port 0', { admin: { listen: '127.0.0.1:0' } }, 'admin.listen', 'port must be an integer from 1 to 65535, got "0"'],
    ['admin.listen port 65536', { admin: { listen: '127.0.0.1:65536' } }, 'admin.listen', 'port must be an integer from 1 to 65535, got "65536"'],
    ['admin.listen port name', { admin: { listen: '127.0.0.1:http' } }, 'admin.listen', 'port must be an integer from 1 to 65535, got "http"'],
    [
      'admin.listen host name',
      { admin: { listen: 'localhost:9641' } },
      'admin.listen',
      /^host must be an IP address, got "localhost" \(names are not resolved/,
    ],
    ['admin.listen bad host', { admin: { listen: '300.1.1.1:9641' } }, 'admin.listen', /^host must be an IP address, got "300.1.1.1"/],
    ['admin.listen IPv6 without brackets', { admin: { listen: '::1:9641' } }, 'admin.listen', /^an IPv6 host must be in brackets/],
    ['admin.listen IPv4 in brackets', { admin: { listen: '[127.0.0.1]:9641' } }, 'admin.listen', 'brackets are for IPv6 hosts only: write "127.0.0.1:9641"'],
    ['admin.listen no host', { admin: { listen: ':9641' } }, 'admin.listen', /^missing host: write "127.0.0.1:9641"/],
    ['admin.listen a number', { admin: { listen: 9641 } }, 'admin.listen', /^must be host:port, .*; got 9641$/],
    ['log.level', { log: { level: 'verbose' } }, 'log.level', 'must be trace, debug, info, warn or error, got "verbose"'],
    ['interface with "/"', { interface: 'a/b' }, 'interface', /^"a\/b" is not a valid interface name/],
    ['interface too long', { interface: 'averyveryverylong0' }, 'interface', /is not a valid interface name \(1 to 15 characters/],
    ['interface a number', { interface: 0 }, 'interface', 'must be an interface name such as "eth0", got 0'],
    ['unknown top-level key, near', { vip: ['10.0.0.1'] }, 'vip', "unknown key (did you mean 'vips'?)"],
    ['unknown nested key, near', { vrrp: { priorty: 100 } }, 'vrrp.priorty', "unknown key (did you mean 'priority'?)"],
    ['unknown nested key, other spelling', { vrrp: { preempt_delay: '1s' } }, 'vrrp.preempt_delay', "unknown key (did you mean 'preemptDelay'?)"],
    ['unknown key, other section', { vrid: 51 }, 'vrid', "unknown key (did you mean 'vrrp.vrid'?)"],
    ['unknown nested key, top-level', { vrrp: { vips: ['10.0.0.1'] } }, 'vrrp.vips', "unknown key (did you mean the top-level key 'vips'?)"],
    ['unknown key, keepalived name', { vrrp: { advert_int: 1 } }, 'vrrp.advert_int', "unknown key (did you mean 'advertisementInterval'?)"],
    [
      'unknown key, far',
      { zzz: 1 },
      'zzz',
      'unknown key (expected one of: interface, vrrp, vips, vipLifetime, announce, apiserver, dataplane, localEndpoint, discovery, policy, admin, log, mode, bgp)',
    ],
    ['unknown nested key, far', { announce: { burst: 1 } }, 'announce.burst', 'unknown key (expected one of: count, spacing, repeatAfter, refresh)'],

    // apiserver
    ['apiserver not a mapping', { apiserver: 'yes' }, 'apiserver', 'must be a mapping of settings (key: value), got "yes"'],
    ['apiserver.port 0', { apiserver: { port: 0 } }, 'apiserver.port', 'must be an integer from 1 to 65535, got 0'],
    ['apiserver.port 65536', { apiserver: { port: 65536 } }, 'apiserver.port', 'must be an integer from 1 to 65535, got 65536'],
    ['apiserver.port quoted', { apiserver: { port: '6443' } }, 'apiserver.port', /got "6443" \(a string: write the number without quotes\)$/],
    ['apiserver.port empty', { apiserver: { port: null } }, 'apiserver.port', /^has no value: .*default, 6443\)$/],
    [
      'backends not a list',
      { apiserver: { backends: '10.0.0.11:6443' } },
      'apiserver.backends',
      /^must be a list of up to 64 host:port entries, .*, got "10.0.0.11:6443"$/,
    ],
    [
      'backends empty value',
      { apiserver: { backends: null } },
      'apiserver.backends',
      /^has no value: .*\(or delete the key to get the default, \[\] \(no backends\)\)$/,
    ],
    ['backends without port', withBackend({ backends: ['10.0.0.11'] }), 'apiserver.backends[0]', 'missing port: write "10.0.0.11:6443" (host:port)'],
    [
      'backends a name',
      withBackend({ backends: ['cp1.example:6443'] }),
      'apiserver.backends[0]',
      `host must be an IP address, got "cp1.example" (names are not resolved: write the node's address, e.g. "10.0.0.11:6443")`,
    ],
    [
      'backends IPv6 without brackets',
      withBackend({ backends: ['fd00::11:6443'] }),
      'apiserver.backends[0]',
      /^an IPv6 host must be in brackets, e.g. "10.0.0.11:6443" or "\[fd00::11\]:6443"; got "fd00::11:6443"$/,
    ],
    [
      'backends IPv6 without port',
      { vips: ['fd00::100'], ...withBackend({ backends: ['[fd00::11]'] }) },
      'apiserver.backends[0]',
      'missing port: write "[fd00::11]:6443"',
    ],
    ['backends "]" missing', withBackend({ backends: ['[fd00::11:6443'] }), 'apiserver.backends[0]', /^missing "\]" after the IPv6 host/],
    [
      'backends IPv4 in brackets',
      withBackend({ backends: ['[10.0.0.11]:6443'] }),
      'apiserver.backends[0]',
      'brackets are for IPv6 hosts only: write "10.0.0.11:6443"',
    ],
    [
      'backends no host',
      withBackend({ backends: [':6443'] }),
      'apiserver.backends[0]',
      `missing host: write the apiserver's node address, e.g. "10.0.0.11:6443"`,
    ],
    ['backends port 0', withBackend({ backends: ['10.0.0.11:0'] }), 'apiserver.backends[0]', 'port must be an integer from 1 to 65535, got "0"'],
    [
      'backends loopback',
      withBackend({ backends: ['127.0.0.1:6443'] }),
      'apiserver.backends[0]',
      "host: 127.0.0.1 is a loopback address; a backend must be an apiserver's node address that every node can reach",
    ],
    [
      'backends link-local',
      { vips: ['fd00::100'], ...withBackend({ backends: ['[fe80::11]:6443'] }) },
      'apiserver.backends[0]',
      /^host: fe80::11 is a link-local address; a backend must be/,
    ],
    ['backends multicast', withBackend({ backends: ['224.0.0.1:6443'] }), 'apiserver.backends[0]', /^host: 224.0.0.1 is a multicast address/],
    ['backends a number', withBackend({ backends: [6443] }), 'apiserver.backends[0]', /^must be host:port, .*; got 6443$/],
    ['backends empty entry', withBackend({ backends: [null] }), 'apiserver.backends[0]', /^has no value: expected host:port/],
    [
      'backends duplicate',
      withBackend({ backends: ['10.0.0.11:6443', '10.0.0.11:6443'] }),
      'apiserver.backends[1]',
      '10.0.0.11:6443 duplicates apiserver.backends[0]',
    ],
    [
      'backends duplicate, other spelling',
      { vips: ['fd00::100'], ...withBackend({ backends: ['[fd00::11]:6443', '[FD00:0::11]:6443'] }) },
      'apiserver.backends[1]',
      '[FD00:0::11]:6443 duplicates apiserver.backends[0] (both are [fd00::11]:6443)',
    ],
    [
      'backends 65',
      withBackend({ backends: Array.from({ length: 65 }, (_, i) => `10.0.1.${i + 1}:6443`) }),
      'apiserver.backends',
      'must list at most 64 backends, got 65',
    ],
    [
      'backends wrong family',
      withBackend({ backends: ['[fd00::11]:6443'] }),
      'apiserver.backends[0]',
      "[fd00::11]:6443 is IPv6 but the VIPs are IPv4: backends must be the same family as the VIPs (the VIP's traffic is forwarded without translating families), unless a localEndpoint address of that family uses them",
    ],
    [
      'backends a VIP',
      withBackend({ backends: ['10.0.0.100:6443'] }),
      'apiserver.backends[0]',
      "10.0.0.100 is a VIP (vips[0]); backends are the apiservers' own node addresses",
    ],
    ['health not a mapping', { apiserver: { health: [] } }, 'apiserver.health', 'must be a mapping of settings (key: value), got a list'],
    ['health.failOpen yes', { apiserver: { health: { failOpen: 'yes' } } }, 'apiserver.health.failOpen', /^must be true or false, got "yes"/],
    ['health.damping a number', { apiserver: { health: { damping: 1 } } }, 'apiserver.health.damping', /^must be true or false, got 1/],
    [
      'health.dampingTransitions 0',
      { apiserver: { health: { dampingTransitions: 0 } } },
      'apiserver.health.dampingTransitions',
      /^must be an integer from 1 to 100, got 0/,
    ],
    [
      'health.dampingTransitions 2.5',
      { apiserver: { health: { dampingTransitions: 2.5 } } },
      'apiserver.health.dampingTransitions',
      /^must be an integer from 1 to 100, got 2.5/,
    ],
    [
      'health.dampingWindow bare number',
      { apiserver: { health: { dampingWindow: 120 } } },
      'apiserver.health.dampingWindow',
      'needs a unit: write "120ms" or "120s", not the bare number 120',
    ],
    ['health.dampingWindow too long', { apiserver: { health: { dampingWindow: '2h' } } }, 'apiserver.health.dampingWindow', 'must be from 1s to 1h, got 2h'],
    ['health.dampingHold too short', { apiserver: { health: { dampingHold: '500ms' } } }, 'apiserver.health.dampingHold', 'must be from 1s to 1h, got 500ms'],
    [
      'health.dampingMaxHold below dampingHold',
      { apiserver: { health: { dampingHold: '1m', dampingMaxHold: '30s' } } },
      'apiserver.health.dampingMaxHold',
      'must be at least apiserver.health.dampingHold (1m), got 30s: holds grow from dampingHold up to dampingMaxHold',
    ],
    [
      'health.dampingHold above the default dampingMaxHold',
      { apiserver: { health: { dampingHold: '10m' } } },
      'apiserver.health.dampingHold',
      'must be at most apiserver.health.dampingMaxHold (5m, its default), got 10m: holds grow from dampingHold up to dampingMaxHold',
    ],
    ['health.path without "/"', { apiserver: { health: { path: 'readyz' } } }, 'apiserver.health.path', 'must start with "/", e.g. "/readyz", got "readyz"'],
    [
      'health.path with a space',
      { apiserver: { health: { path: '/ready z' } } },
      'apiserver.health.path',
      'must not contain spaces or control characters (percent-encode them), got "/ready z"',
    ],
    ['health.path with a fragment', { apiserver: { health: { path: '/readyz#x' } } }, 'apiserver.health.path', /^must not contain a fragment/],
    ['health.path a number', { apiserver: { health: { path: 1 } } }, 'apiserver.health.path', 'must be a request path such as "/readyz", got 1'],
    ['health.path empty', { apiserver: { health: { path: null } } }, 'apiserver.health.path', /^has no value: .*default, \/readyz\)$/],
    [
      'health.caFile required by backends',
      { apiserver: { backends: ['10.0.0.11:6443'] } },
      'apiserver.health.caFile',
      /^required when apiserver.backends is not empty: the CA that signed .* \(or set insecureSkipVerify: true, for tests only\)$/,
    ],
    [
      'health.caFile relative',
      { apiserver: { health: { caFile: 'pki/ca.crt' } } },
      'apiserver.health.caFile',
      /^must be an absolute path, got "pki\/ca.crt" \(a relative path would depend/,
    ],
    [
      'health.caFile a number',
      { apiserver: { health: { caFile: 1 } } },
      'apiserver.health.caFile',
      'must be a file path such as "/etc/kubernetes/pki/ca.crt", got 1',
    ],
    ['health.caFile empty value', { apiserver: { health: { caFile: null } } }, 'apiserver.health.caFile', /^has no value: expected a file path/],
    [
      'health.serverName wildcard',
      { apiserver: { health: { serverName: '*.example.com' } } },
      'apiserver.health.serverName',
      'must be one name, not a wildcard, got "*.example.com"',
    ],
    [
      'health.serverName not a name',
      { apiserver: { health: { serverName: 'kube rnetes' } } },
      'apiserver.health.serverName',
      /^must be a DNS name or IP address that the apiservers' certificates carry, .*, got "kube rnetes"$/,
    ],
    ['health.serverName a number', { apiserver: { health: { serverName: 5 } } }, 'apiserver.health.serverName', /^must be a DNS name or IP address .*, got 5$/],
    [
      'health.insecureSkipVerify "yes"',
      { apiserver: { health: { insecureSkipVerify: 'yes' } } },
      'apiserver.health.insecureSkipVerify',
      'must be true or false, got "yes" (YAML 1.2 reads yes/no/on/off as strings)',
    ],
    [
      'health.clientCertFile without key',
      { apiserver: { health: { clientCertFile: '/c.crt' } } },
      'apiserver.health.clientKeyFile',
      'required when apiserver.health.clientCertFile is set: the private key of that certificate',
    ],
    [
      'health.clientKeyFile without cert',
      { apiserver: { health: { clientKeyFile: '/c.key' } } },
      'apiserver.health.clientCertFile',
      'required when apiserver.health.clientKeyFile is set: the certificate of that key',
    ],
    [
      'health.clientKeyFile relative',
      { apiserver: { health: { clientCertFile: '/c.crt', clientKeyFile: 'c.key' } } },
      'apiserver.health.clientKeyFile',
      /^must be an absolute path, got "c.key"/,
    ],
    ['health.tokenFile relative', { apiserver: { health: { tokenFile: 'token' } } }, 'apiserver.health.tokenFile', /^must be an absolute path, got "token"/],
    ['health.interval 50ms', { apiserver: { health: { interval: '50ms' } } }, 'apiserver.health.interval', 'must be from 100ms to 1m, got 50ms'],
    [
      'health.rememberDeparted 2h',
      { apiserver: { health: { rememberDeparted: '2h' } } },
      'apiserver.health.rememberDeparted',
      'must be from 0s (forget at once) to 1h, got 2h',
    ],
    ['health.interval 2m', { apiserver: { health: { interval: '2m' } } }, 'apiserver.health.interval', 'must be from 100ms to 1m, got 2m'],
    [
      'health.interval bare number',
      { apiserver: { health: { interval: 1 } } },
      'apiserver.health.interval',
      'needs a unit: write "1ms" or "1s", not the bare number 1',
    ],
    ['health.interval empty', { apiserver: { health: { interval: null } } }, 'apiserver.health.interval', /^has no value: .*default, 1s\)$/],
    ['health.timeout 10ms', { apiserver: { health: { timeout: '10ms' } } }, 'apiserver.health.timeout', 'must be from 50ms to 1m, got 10ms'],
    [
      'health.timeout bare number',
      { apiserver: { health: { timeout: 500 } } },
      'apiserver.health.timeout',
      'needs a unit: write "500ms" or "500s", not the bare number 500',
    ],
    [
      'health.timeout empty',
      { apiserver: { health: { timeout: null } } },
      'apiserver.health.timeout',
      /^has no value: .*default, 1s, or the interval if that is shorter\)$/,
    ],
    [
      'health.timeout longer than interval',
      { apiserver: { health: { interval: '200ms', timeout: '300ms' } } },
      'apiserver.health.timeout',
      'must be at most apiserver.health.interval (200ms), got 300ms: a check must end before the next one is due',
    ],
    [
      'health.timeout longer than the default interval',
      { apiserver: { health: { timeout: '2s' } } },
      'apiserver.health.timeout',
      'must be at most apiserver.health.interval (1s), got 2s: a check must end before the next one is due',
    ],
    ['health.rise 0', { apiserver: { health: { rise: 0 } } }, 'apiserver.health.rise', 'must be an integer from 1 to 10, got 0'],
    ['health.rise 11', { apiserver: { health: { rise: 11 } } }, 'apiserver.health.rise', 'must be an integer from 1 to 10, got 11'],
    ['health.fall 0', { apiserver: { health: { fall: 0 } } }, 'apiserver.health.fall', 'must be an integer from 1 to 10, got 0'],
    ['health.fall 1.5', { apiserver: { health: { fall: 1.5 } } }, 'apiserver.health.fall', 'must be an integer from 1 to 10, got 1.5'],

    // dataplane, policy
    ['dataplane.vip "ipvs"', { dataplane: { vip: 'ipvs' } }, 'dataplane.vip', 'must be "nftables" or "none" (VIP only, no load balancing), got "ipvs"'],
    [
      'dataplane.keepOnStop "no"',
      { dataplane: { keepOnStop: 'no' } },
      'dataplane.keepOnStop',
      'must be "localEndpoint" (keep the eBPF local endpoint serving), "all" (also the nftables table) or "none" (remove everything); true means all, false none, got "no"',
    ],
    ['dataplane not a mapping', { dataplane: 'nftables' }, 'dataplane', 'must be a mapping of settings (key: value), got "nftables"'],
    ['dataplane.rebalance.factor 1', { dataplane: { rebalance: { factor: 1 } } }, 'dataplane.rebalance.factor', 'must be a number from 1.05 to 100, got 1'],
    [
      'dataplane.rebalance.factor "2"',
      { dataplane: { rebalance: { factor: '2' } } },
      'dataplane.rebalance.factor',
      /^must be a number from 1.05 to 100, got "2"/,
    ],
    ['dataplane.commandTimeout 500ms', { dataplane: { commandTimeout: '500ms' } }, 'dataplane.commandTimeout', 'must be from 1s to 1m, got 500ms'],
    ['dataplane.commandTimeout 2m', { dataplane: { commandTimeout: '2m' } }, 'dataplane.commandTimeout', 'must be from 1s to 1m, got 2m'],
    ['dataplane.rebalance.after 500ms', { dataplane: { rebalance: { after: '500ms' } } }, 'dataplane.rebalance.after', 'must be from 1s to 1h, got 500ms'],
    ['dataplane.rebalance.after 30', { dataplane: { rebalance: { after: 30 } } }, 'dataplane.rebalance.after', /^needs a unit/],
    [
      'dataplane.rebalance.resetsPerSecond 0',
      { dataplane: { rebalance: { resetsPerSecond: 0 } } },
      'dataplane.rebalance.resetsPerSecond',
      'must be an integer from 1 to 1000, got 0',
    ],
    [
      'dataplane.rebalance.resetsPerSecond 2.5',
      { dataplane: { rebalance: { resetsPerSecond: 2.5 } } },
      'dataplane.rebalance.resetsPerSecond',
      'must be an integer from 1 to 1000, got 2.5',
    ],
    [
      'dataplane.rebalance.maxFractionPerMinute 0',
      { dataplane: { rebalance: { maxFractionPerMinute: 0 } } },
      'dataplane.rebalance.maxFractionPerMinute',
      'must be a number from 0.001 to 1, got 0',
    ],
    [
      'dataplane.rebalance.maxFractionPerMinute 1.5',
      { dataplane: { rebalance: { maxFractionPerMinute: 1.5 } } },
      'dataplane.rebalance.maxFractionPerMinute',
      'must be a number from 0.001 to 1, got 1.5',
    ],
    ['dataplane.rebalance.enabled "yes"', { dataplane: { rebalance: { enabled: 'yes' } } }, 'dataplane.rebalance.enabled', /^must be true or false, got "yes"/],
    ['dataplane.rebalance unknown key', { dataplane: { rebalance: { facter: 2 } } }, 'dataplane.rebalance.facter', /factor/],
    ['dataplane.rebalance not a mapping', { dataplane: { rebalance: true } }, 'dataplane.rebalance', 'must be a mapping of settings (key: value), got true'],
    [
      'policy.unhealthyPriorityWeight -1',
      { policy: { unhealthyPriorityWeight: -1 } },
      'policy.unhealthyPriorityWeight',
      'must be an integer from 0 to 254, got -1',
    ],
    [
      'policy.unhealthyPriorityWeight 255',
      { policy: { unhealthyPriorityWeight: 255 } },
      'policy.unhealthyPriorityWeight',
      /^must be an integer from 0 to 254, got 255 \(the effective priority never goes below 1/,
    ],
    ['policy.localBackend without port', { policy: { localBackend: '127.0.0.1' } }, 'policy.localBackend', 'missing port: write "127.0.0.1:6443" (host:port)'],
    [
      'policy.localBackend a name',
      { policy: { localBackend: 'localhost:6443' } },
      'policy.localBackend',
      /^host must be an IP address, got "localhost" \(names are not resolved: write this node's address or a loopback address/,
    ],
    [
      'policy.localBackend multicast',
      { policy: { localBackend: '224.0.0.1:6443' } },
      'policy.localBackend',
      "host: 224.0.0.1 is a multicast address; the local backend must be this node's own address or a loopback address",
    ],
    ['policy.localBackend empty value', { policy: { localBackend: null } }, 'policy.localBackend', /^has no value: expected host:port/],
    ['policy.localBackend a number', { policy: { localBackend: 6443 } }, 'policy.localBackend', /^must be host:port, .*; got 6443$/],

    // unknown keys in the new sections
    ['unknown health key, near', { apiserver: { health: { intervall: '1s' } } }, 'apiserver.health.intervall', "unknown key (did you mean 'interval'?)"],
    ['unknown health key, haproxy name', { apiserver: { health: { inter: '1s' } } }, 'apiserver.health.inter', "unknown key (did you mean 'interval'?)"],
    [
      'unknown health key, kubeconfig name',
      { apiserver: { health: { 'insecure-skip-tls-verify': true } } },
      'apiserver.health.insecure-skip-tls-verify',
      "unknown key (did you mean 'insecureSkipVerify'?)",
    ],
    [
      'unknown key, health setting one level up',
      { apiserver: { caFile: '/ca.crt' } },
      'apiserver.caFile',
      "unknown key (did you mean 'apiserver.health.caFile'?)",
    ],
    ['unknown top-level key, a nested section', { backends: [] }, 'backends', "unknown key (did you mean 'apiserver.backends'?)"],
    ['unknown policy key, keepalived name', { policy: { weight: 20 } }, 'policy.weight', "unknown key (did you mean 'unhealthyPriorityWeight'?)"],
    [
      'unknown health key, far',
      { apiserver: { health: { zzz: 1 } } },
      'apiserver.health.zzz',
      'unknown key (expected one of: path, caFile, serverName, insecureSkipVerify, clientCertFile, clientKeyFile, tokenFile, interval, timeout, rise, fall, failOpen, damping, dampingTransitions, dampingWindow, dampingHold, dampingMaxHold, rememberDeparted)',
    ],
  ];

  it.each(cases)('%s', (_what, over, path, message) => {
    const issues = issuesOf(yamlWith(over));
    expect(issues.map((i) => i.path)).toStrictEqual([path]);
    const [issue] = issues;
    if (typeof message === 'string') expect(issue?.message).toBe(message);
    else expect(issue?.message).toMatch(message);
  });

  it('puts "<path>: <reason>" in the error message', () => {
    const err = configError(yamlWith({ vrrp: { advertisementInterval: '105ms' } }));
    expect(err.message).toBe('vrrp.advertisementInterval: must be a multiple of 10ms (RFC 9568 Max Adver Int is in centiseconds), got 105ms');
    expect(err).toBeInstanceOf(BallastError);
    expect(err.code).toBe('BALLAST_E_CONFIG');
    expect(err.exitCode).toBe(2);
  });
});

describe('parseConfig: apiserver, dataplane and policy', () => {
  it('normalizes backends to { host, port, family } with canonical addresses', () => {
    const c = parseConfig(
      yamlWith({
        vips: ['FD00::100'],
        apiserver: {
          port: 443,
          backends: ['[FD00:0::11]:6443', '[fd00::12]:6443', '[fd00::12]:7443'],
          health: { caFile: '/etc/kubernetes/pki/ca.crt' },
        },
      }),
    );
    expect(c.apiserver.port).toBe(443);
    expect(c.apiserver.backends).toStrictEqual([
      { host: 'fd00::11', port: 6443, family: 6 },
      { host: 'fd00::12', port: 6443, family: 6 },
      { host: 'fd00::12', port: 7443, family: 6 },
    ]);
  });

  it('treats an absent section, an empty one and an empty health section alike', () => {
    const base = parseConfig(MINIMAL).apiserver;
    expect(parseConfig(`${MINIMAL}apiserver:\n`).apiserver).toStrictEqual(base);
    expect(parseConfig(`${MINIMAL}apiserver:\n  health:\n`).apiserver).toStrictEqual(base);
    expect(parseConfig(`${MINIMAL}dataplane:\npolicy:\n`)).toStrictEqual(parseConfig(MINIMAL));
  });

  it('converts health durations to milliseconds and sets every health field', () => {
    const { health } = parseConfig(
      yamlWith({
        apiserver: {
          health: {
            path: '/readyz?exclude=etcd',
            caFile: '/pki/ca.crt',
            serverName: 'kubernetes',
            insecureSkipVerify: true,
            clientCertFile: '/pki/health.crt',
            clientKeyFile: '/pki/health.key',
            tokenFile: '/run/secrets/token',
            interval: '1.5s',
            timeout: '500ms',
            rise: 3,
            fall: 1,
            failOpen: false,
            damping: true,
            dampingTransitions: 6,
            dampingWindow: '1m',
            dampingHold: '10s',
            dampingMaxHold: '10m',
            rememberDeparted: '30s',
          },
        },
      }),
    ).apiserver;
    expect(health).toStrictEqual({
      path: '/readyz?exclude=etcd',
      caFile: '/pki/ca.crt',
      serverName: 'kubernetes',
      insecureSkipVerify: true,
      clientCertFile: '/pki/health.crt',
      clientKeyFile: '/pki/health.key',
      tokenFile: '/run/secrets/token',
      intervalMs: 1500,
      timeoutMs: 500,
      rise: 3,
      fall: 1,
      // (max(rise, fall) + 1) × interval + timeout
      settleMs: 6500,
      failOpen: false,
      damping: { transitions: 6, windowMs: 60000, holdMs: 10000, maxHoldMs: 600000 },
      rememberDepartedMs: 30_000,
    });
  });

  it('fail open and damping: on by default; damping: false gives null (its other settings unused)', () => {
    const health = (h: Plain) => parseConfig(yamlWith({ apiserver: { health: h } })).apiserver.health;
    expect(health({})).toMatchObject({ failOpen: true, damping: { transitions: 4, windowMs: 120_000, holdMs: 30_000, maxHoldMs: 300_000 } });
    expect(health({ failOpen: false, damping: false, dampingHold: '1m' })).toMatchObject({ failOpen: false, damping: null });
    expect(health({ dampingHold: '5m', dampingMaxHold: '5m' }).damping).toStrictEqual({
      transitions: 4,
      windowMs: 120_000,
      holdMs: 300_000,
      maxHoldMs: 300_000,
    });
  });

  it('rememberDeparted: 5m by default, in ms; 0s (forget at once) and 1h are its ends', () => {
    const remember = (health: Plain): number => parseConfig(yamlWith({ apiserver: { health } })).apiserver.health.rememberDepartedMs;
    expect(remember({})).toBe(300_000);
    expect(remember({ rememberDeparted: '0s' })).toBe(0);
    expect(remember({ rememberDeparted: '4s' })).toBe(4000);
    expect(remember({ rememberDeparted: '1h' })).toBe(3_600_000);
  });

  it('defaults the timeout to 1s, or to the interval when that is shorter', () => {
    const timeout = (health: Plain): number => parseConfig(yamlWith({ apiserver: { health } })).apiserver.health.timeoutMs;
    expect(timeout({})).toBe(1000);
    expect(timeout({ interval: '200ms' })).toBe(200);
    expect(timeout({ interval: '5s' })).toBe(1000);
    expect(timeout({ interval: '5s', timeout: '5s' })).toBe(5000);
    expect(timeout({ interval: '100ms', timeout: '50ms' })).toBe(50);
  });

  it('takes "" as "not set" for optional strings', () => {
    const c = parseConfig(
      yamlWith({
        apiserver: { health: { caFile: '', serverName: '', clientCertFile: '', clientKeyFile: '', tokenFile: '' } },
        policy: { localBackend: '' },
      }),
    );
    expect(c.apiserver.health).toStrictEqual(parseConfig(MINIMAL).apiserver.health);
    expect('localBackend' in c.policy).toBe(false);
  });

  it('normalizes an IP serverName and accepts DNS names', () => {
    const name = (serverName: string): string | undefined => parseConfig(yamlWith({ apiserver: { health: { serverName } } })).apiserver.health.serverName;
    expect(name('FD00:0::1')).toBe('fd00::1');
    expect(name('kubernetes.default.svc')).toBe('kubernetes.default.svc');
    expect(name('api-1.cluster.local')).toBe('api-1.cluster.local');
  });

  it('does not require caFile without backends, nor with insecureSkipVerify', () => {
    expect(parseConfig(MINIMAL).apiserver.backends).toStrictEqual([]);
    const c = parseConfig(yamlWith({ apiserver: { backends: ['10.0.0.11:6443'], health: { insecureSkipVerify: true } } }));
    expect(c.apiserver.health.insecureSkipVerify).toBe(true);
    expect('caFile' in c.apiserver.health).toBe(false);
  });

  it('accepts 64 backends', () => {
    const backends = Array.from({ length: 64 }, (_, i) => `10.0.1.${i + 1}:6443`);
    expect(parseConfig(yamlWith(withBackend({ backends }))).apiserver.backends).toHaveLength(64);
  });

  it('parses dataplane and policy, including a loopback or IPv6 localBackend', () => {
    const c = parseConfig(yamlWith({ dataplane: { vip: 'none', keepOnStop: true }, policy: { unhealthyPriorityWeight: 0, localBackend: '127.0.0.1:6443' } }));
    expect(c.dataplane).toStrictEqual({
      vip: 'none',
      local: 'ebpf',
      keepOnStop: 'all',
      commandTimeoutMs: 5000,
      rebalance: { enabled: false, factor: 1.2, afterMs: 60_000, resetsPerSecond: 5, maxFractionPerMinute: 0.1 },
      connectionSync: { enabled: true, commitTimeoutMs: 1000, resyncTimeoutMs: 5000 },
    });
    // true / false are what the setting took before it named what it keeps
    expect(parseConfig(yamlWith({ dataplane: { keepOnStop: false } })).dataplane.keepOnStop).toBe('none');
    expect(parseConfig(yamlWith({ dataplane: { keepOnStop: 'none' } })).dataplane.keepOnStop).toBe('none');
    expect(parseConfig(yamlWith({ dataplane: { keepOnStop: 'localEndpoint' } })).dataplane.keepOnStop).toBe('localEndpoint');
    expect(parseConfig(yamlWith({ dataplane: { commandTimeout: '2s' } })).dataplane.commandTimeoutMs).toBe(2000);
    expect(
      parseConfig(yamlWith({ dataplane: { rebalance: { enabled: true, factor: 1.5, after: '10s', resetsPerSecond: 20, maxFractionPerMinute: 1 } } })).dataplane
        .rebalance,
    ).toStrictEqual({
      enabled: true,
      factor: 1.5,
      afterMs: 10_000,
      resetsPerSecond: 20,
      maxFractionPerMinute: 1,
    });
    expect(parseConfig(yamlWith({ dataplane: { rebalance: null } })).dataplane.rebalance.enabled).toBe(false);
    // connection sync: on by default; durations in ms; off; errors name the field and the range
    expect(
      parseConfig(yamlWith({ dataplane: { connectionSync: { enabled: false, commitTimeout: '250ms', resyncTimeout: '0s' } } })).dataplane.connectionSync,
    ).toStrictEqual({ enabled: false, commitTimeoutMs: 250, resyncTimeoutMs: 0 });
    const bad = issuesOf(yamlWith({ dataplane: { connectionSync: { enabled: 'yes', commitTimeout: '20s', resyncTimeout: '2m', sync: true } } })).map((i) => [
      i.path,
      i.message,
    ]);
    expect(bad.map(([p]) => p).sort()).toStrictEqual([
      'dataplane.connectionSync.commitTimeout',
      'dataplane.connectionSync.enabled',
      'dataplane.connectionSync.resyncTimeout',
      'dataplane.connectionSync.sync',
    ]);
    expect(bad.find(([p]) => p === 'dataplane.connectionSync.commitTimeout')?.[1]).toMatch(/100ms.*10s/);
    expect(c.policy).toStrictEqual({ unhealthyPriorityWeight: 0, localBackend: { host: '127.0.0.1', port: 6443, family: 4 } });
    const v6 = parseConfig(yamlWith({ policy: { unhealthyPriorityWeight: 254, localBackend: '[::1]:6443' } })).policy;
    expect(v6).toStrictEqual({ unhealthyPriorityWeight: 254, localBackend: { host: '::1', port: 6443, family: 6 } });
  });

  it('freezes the new sections too', () => {
    const c = parseConfig(yamlWith({ ...withBackend(), policy: { localBackend: '127.0.0.1:6443' } }));
    expect(Object.isFrozen(c.apiserver.backends[0])).toBe(true);
    expect(Object.isFrozen(c.apiserver.health)).toBe(true);
    expect(Object.isFrozen(c.policy.localBackend)).toBe(true);
    expect(() => (c.apiserver.backends as unknown[]).push({})).toThrow(TypeError);
  });

  it('reports problems in several new settings together, in declaration order', () => {
    const issues = issuesOf(
      yamlWith({
        apiserver: { port: 0, backends: ['10.0.0.11:6443', 'x'], health: { rise: 0, interval: '200ms', timeout: '1s' } },
        dataplane: { vip: 'ipvs' },
        policy: { unhealthyPriorityWeight: 300 },
      }),
    );
    expect(issues.map((i) => i.path)).toStrictEqual([
      'apiserver.port',
      'apiserver.backends[1]',
      'apiserver.health.caFile',
      'apiserver.health.timeout',
      'apiserver.health.rise',
      'dataplane.vip',
      'policy.unhealthyPriorityWeight',
    ]);
  });
});

describe('parseConfig: localEndpoint and dataplane.local', () => {
  const backends = { apiserver: { backends: ['10.0.0.11:6443', '[fd00::11]:6443'], health: { caFile: '/etc/ca.crt' } } };
  it('a worker node: no vrrp, no vips; the endpoint defaults to 127.0.0.1:7443 and ebpf', () => {
    const c = parseConfig(stringify({ localEndpoint: {}, ...backends }));
    expect(c.vrrp).toBeNull();
    expect(c.vips).toStrictEqual([]);
    expect(c.family).toBe(4);
    expect(c.localEndpoint).toStrictEqual({ addresses: [{ host: '127.0.0.1', port: 7443, family: 4 }], force: false });
    expect(c.dataplane.local).toBe('ebpf');
    expect(parseConfig(stringify({ localEndpoint: null, ...backends })).localEndpoint?.addresses).toHaveLength(1);
  });
  it('one address or a list (both families), force, cgroup, proxy mode', () => {
    const c = parseConfig(
      stringify({
        localEndpoint: { address: ['127.0.0.1:7443', '[::1]:7443'], force: true, cgroup: '/sys/fs/cgroup/unified' },
        dataplane: { local: 'proxy' },
        ...backends,
      }),
    );
    expect(c.localEndpoint).toStrictEqual({
      addresses: [
        { host: '127.0.0.1', port: 7443, family: 4 },
        { host: '::1', port: 7443, family: 6 },
      ],
      force: true,
      cgroup: '/sys/fs/cgroup/unified',
    });
    expect(c.dataplane.local).toBe('proxy');
    const v4 = { apiserver: { backends: ['10.0.0.11:6443'], health: { caFile: '/etc/ca.crt' } } };
    expect(parseConfig(yamlWith({ localEndpoint: { address: '127.0.0.2:7443' }, ...v4 })).localEndpoint?.addresses).toStrictEqual([
      { host: '127.0.0.2', port: 7443, family: 4 },
    ]);
  });
  it('a control-plane node with an IPv4 VIP may balance [::1]:7443 to IPv6 backends', () => {
    const c = parseConfig(yamlWith({ localEndpoint: { address: ['127.0.0.1:7443', '[::1]:7443'] }, ...backends }));
    expect(c.family).toBe(4);
    expect(c.apiserver.backends.map((b) => b.family)).toStrictEqual([4, 6]);
  });
  it.each([
    ['no backends', { localEndpoint: {} }, 'localEndpoint', 'needs apiserver.backends: the apiservers the endpoint balances to'],
    [
      'IPv6 endpoint, IPv4 backends only',
      { localEndpoint: { address: '[::1]:7443' }, apiserver: { backends: ['10.0.0.11:6443'], health: { caFile: '/etc/ca.crt' } } },
      'localEndpoint.address',
      '[::1]:7443 is IPv6 but no apiserver.backends entry is: an endpoint balances to backends of its own family',
    ],
    ['no port', { localEndpoint: { address: '127.0.0.1' }, ...backends }, 'localEndpoint.address', 'missing port: write "127.0.0.1:7443" (host:port)'],
    ['a name', { localEndpoint: { address: 'localhost:7443' }, ...backends }, 'localEndpoint.address', /^host must be an IP address, got "localhost"/],
    [
      'listed twice',
      { localEndpoint: { address: ['127.0.0.1:7443', '127.0.0.1:7443'] }, ...backends },
      'localEndpoint.address[1]',
      '127.0.0.1:7443 is listed twice',
    ],
    [
      'an apiserver itself',
      { localEndpoint: { address: '10.0.0.11:6443' }, ...backends },
      'localEndpoint.address',
      /^10\.0\.0\.11:6443 is one of apiserver\.backends: /,
    ],
    [
      'unspecified',
      { localEndpoint: { address: '0.0.0.0:7443' }, ...backends },
      'localEndpoint.address',
      "host: 0.0.0.0 is the unspecified address; a local endpoint must be a loopback address (or one of this node's own)",
    ],
    ['empty list', { localEndpoint: { address: [] }, ...backends }, 'localEndpoint.address', /^expected host:port or a list of 1 to 4 of them/],
    ['relative cgroup', { localEndpoint: { cgroup: 'unified' }, ...backends }, 'localEndpoint.cgroup', /^must be an absolute path/],
    ['bad mode', { localEndpoint: {}, dataplane: { local: 'bpf' }, ...backends }, 'dataplane.local', /^must be "ebpf", "proxy" or "off"/],
  ])('%s', (_name, doc, path, message) => {
    const issues = issuesOf(stringify({ vrrp: { vrid: 51 }, vips: ['10.0.0.100'], ...doc }));
    expect(issues.map((i) => i.path)).toContain(path);
    const issue = issues.find((i) => i.path === path)!;
    if (typeof message === 'string') expect(issue.message).toBe(message);
    else expect(issue.message).toMatch(message);
  });
});

describe('vrrp.auth.keyFile contents', () => {
  const auth = (keyFile: string): Plain => ({ vrrp: { auth: { keyFile } } });
  it('accepts 16 bytes or more, with the trailing newline removed', () => {
    expect(validateIssues(auth('/k'), { '/k': '0123456789abcdef\n' })).toStrictEqual([]);
    expect(parseAuthKeys(Buffer.from('0123456789abcdef \r\n\t'))).toStrictEqual([Buffer.from('0123456789abcdef')]);
  });
  it('one key per line (a rotation): the first signs, all verify; empty lines ignored; each checked', () => {
    expect(parseAuthKeys(Buffer.from('new-key-0123456789\r\n\nold-key-0123456789\n'))).toStrictEqual([
      Buffer.from('new-key-0123456789'),
      Buffer.from('old-key-0123456789'),
    ]);
    expect(parseAuthKeys(Buffer.from('new-key-0123456789\nshort\n'))).toBe(
      'holds on line 2 a 5-byte key; at least 16 bytes are needed (e.g. `openssl rand -base64 32`)',
    );
    expect(parseAuthKeys(Buffer.from(Array.from({ length: 5 }, (_, i) => `key-number-${i}-0123456789`).join('\n')))).toBe(
      'holds 5 keys (lines); at most 4: the first signs, the others only verify during a rotation',
    );
  });
  it('refuses a short, empty or unreadable file, naming the setting and the path', () => {
    expect(validateIssues(auth('/k'), { '/k': '0123456789abcde\n' }).map((i) => [i.path, i.message])).toStrictEqual([
      ['vrrp.auth.keyFile', '/k holds a 15-byte key; at least 16 bytes are needed (e.g. `openssl rand -base64 32`)'],
    ]);
    expect(validateIssues(auth('/k'), { '/k': '\n\n' })[0]?.message).toBe(
      '/k is empty: it must hold the shared key of the group (e.g. `openssl rand -base64 32`)',
    );
    expect(validateIssues(auth('/missing'), {})[0]?.message).toBe('cannot read /missing: no such file (ENOENT)');
  });
  it('a device is refused before a byte is read (reading /dev/zero would never end)', () => {
    expect(validateIssues(auth('/dev/zero'), hostFiles).map((i) => [i.path, i.message])).toStrictEqual([
      ['vrrp.auth.keyFile', 'cannot read /dev/zero: not a regular file (a device, FIFO or socket cannot be read as one)'],
    ]);
    expect(() => loadConfig('/dev/zero')).toThrow(/cannot read the configuration file \/dev\/zero: not a regular file/);
  });
});

describe('files named by the configuration', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ballast-config-files-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, content: string): string => {
    const path = join(dir, name);
    writeFileSync(path, content);
    return path;
  };
  const health = (h: Plain): string => yamlWith({ apiserver: { backends: ['10.0.0.11:6443'], health: h } });
  /** The issues of loading `text` from a file, with the real file system. */
  const loadIssues = (text: string): readonly ConfigIssue[] => {
    try {
      loadConfig(file('config.yaml', text));
    } catch (err) {
      if (err instanceof ConfigError) return err.issues;
      throw err;
    }
    return [];
  };

  it('loads a configuration whose files are all there and well formed', () => {
    const c = loadConfig(
      file(
        'good.yaml',
        health({
          caFile: file('ca.crt', TEST_CERT + TEST_CERT),
          clientCertFile: file('client.crt', TEST_CERT),
          clientKeyFile: file('client.key', TEST_KEY),
          tokenFile: file('token', 'abc.def-ghi_jkl\n'),
        }),
      ),
    );
    expect(c.apiserver.health.caFile).toBe(join(dir, 'ca.crt'));
  });

  it('a missing CA file (and its missing directory) is no error but a note: the checks wait for it (before kubeadm init)', () => {
    const missing = join(dir, 'nope', 'ca.crt');
    const notes: ConfigNote[] = [];
    const c = loadConfig(file('wait.yaml', health({ caFile: missing })), { notes });
    expect(c.apiserver.health.caFile).toBe(missing);
    expect(notes).toStrictEqual([
      {
        path: 'apiserver.health.caFile',
        file: missing,
        message: `${missing} does not exist yet: the health checks wait for it (the backends are not ready until it appears; expected before kubeadm init / join)`,
        line: 9,
        column: 13,
      },
    ]);
    expect(formatNote(notes[0]!)).toBe(`line 9: apiserver.health.caFile: note: ${notes[0]!.message}`);
    expect(loadIssues(health({ caFile: missing }))).toStrictEqual([]);
  });

  it('every health file may be missing (a note each); malformed ones stay errors beside the notes', () => {
    const notes: ConfigNote[] = [];
    const h = { caFile: '/ca.crt', clientCertFile: '/c.crt', clientKeyFile: '/c.key', tokenFile: '/t' };
    expect(validateIssues({ apiserver: { health: h } }, {}, notes)).toStrictEqual([]);
    expect(notes.map((n) => [n.path, n.file])).toStrictEqual([
      ['apiserver.health.caFile', '/ca.crt'],
      ['apiserver.health.clientCertFile', '/c.crt'],
      ['apiserver.health.clientKeyFile', '/c.key'],
      ['apiserver.health.tokenFile', '/t'],
    ]);
    const more: ConfigNote[] = [];
    expect(validateIssues({ apiserver: { health: h } }, { '/ca.crt': 'hello\n', '/t': '' }, more)).toStrictEqual([
      { path: 'apiserver.health.caFile', message: '/ca.crt holds no PEM certificate (expected a "-----BEGIN CERTIFICATE-----" block)' },
      { path: 'apiserver.health.tokenFile', message: '/t is empty: it must hold the bearer token' },
    ]);
    expect(more.map((n) => n.path)).toStrictEqual(['apiserver.health.clientCertFile', 'apiserver.health.clientKeyFile']);
  });

  it('a missing vrrp.auth.keyFile stays an error (the election needs it); ENOTDIR and EACCES stay errors', () => {
    const notes: ConfigNote[] = [];
    expect(validateIssues({ vrrp: { auth: { keyFile: '/k' } } }, {}, notes)).toStrictEqual([
      { path: 'vrrp.auth.keyFile', message: 'cannot read /k: no such file (ENOENT)' },
    ]);
    expect(notes).toStrictEqual([]);
    const fail = (code: string): ConfigFiles => ({
      readFile: () => {
        throw Object.assign(new Error(code), { code });
      },
    });
    expect(validateIssues({ apiserver: { health: { caFile: '/f/ca.crt' } } }, fail('ENOTDIR'), notes)).toStrictEqual([
      { path: 'apiserver.health.caFile', message: 'cannot read /f/ca.crt: a component of the path is not a directory (ENOTDIR)' },
    ]);
    expect(validateIssues({ apiserver: { health: { tokenFile: '/t' } } }, fail('EACCES'), notes)).toStrictEqual([
      { path: 'apiserver.health.tokenFile', message: 'cannot read /t: permission denied (EACCES)' },
    ]);
    expect(notes).toStrictEqual([]);
  });

  it('reports a CA path that is a directory', () => {
    expect(loadIssues(health({ caFile: dir }))[0]?.message).toBe(`cannot read ${dir}: it is a directory, not a file (EISDIR)`);
  });

  it.each([
    ['not PEM', 'hello\n', /holds no PEM certificate \(expected a "-----BEGIN CERTIFICATE-----" block\)$/],
    ['a key, not a certificate', TEST_KEY, /holds no PEM certificate/],
    ['a broken certificate', '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n', /its certificate cannot be parsed: /],
    [
      'a bundle with one broken certificate',
      `${TEST_CERT}-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n`,
      /certificate 2 of 2 cannot be parsed: /,
    ],
  ])('refuses a CA file that is %s', (_what, content, message) => {
    const issues = validateIssues({ apiserver: { health: { caFile: '/ca.crt' } } }, { '/ca.crt': content });
    expect(issues.map((i) => i.path)).toStrictEqual(['apiserver.health.caFile']);
    expect(issues[0]?.message).toMatch(new RegExp(`^/ca.crt ${message.source.replace(/^\^/, '')}`));
  });

  it('checks the client certificate, its key, and that they match', () => {
    const other = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const encrypted = generateKeyPairSync('ec', {
      namedCurve: 'P-256',
      privateKeyEncoding: { type: 'pkcs8', format: 'pem', cipher: 'aes-256-cbc', passphrase: 'secret' },
      publicKeyEncoding: { type: 'spki', format: 'pem' },
    }).privateKey;
    const h = { clientCertFile: '/c.crt', clientKeyFile: '/c.key' };
    expect(validateIssues({ apiserver: { health: h } }, { '/c.crt': TEST_CERT, '/c.key': TEST_KEY })).toStrictEqual([]);
    expect(validateIssues({ apiserver: { health: h } }, { '/c.crt': TEST_CERT, '/c.key': other })).toStrictEqual([
      {
        path: 'apiserver.health.clientKeyFile',
        message: '/c.key is not the private key of the certificate in apiserver.health.clientCertFile',
      },
    ]);
    expect(validateIssues({ apiserver: { health: h } }, { '/c.crt': TEST_CERT, '/c.key': 'junk' })[0]?.message).toMatch(
      /^\/c.key holds no usable PEM private key: /,
    );
    expect(validateIssues({ apiserver: { health: h } }, { '/c.crt': TEST_CERT, '/c.key': encrypted })[0]?.message).toBe(
      '/c.key holds no usable PEM private key: an encrypted key (it needs a passphrase, which ballast cannot supply)',
    );
    expect(validateIssues({ apiserver: { health: h } }, { '/c.crt': 'x', '/c.key': TEST_KEY })).toStrictEqual([
      { path: 'apiserver.health.clientCertFile', message: '/c.crt holds no PEM certificate (expected a "-----BEGIN CERTIFICATE-----" block)' },
    ]);
    // the certificate not there yet: a wait (its key is checked against it once it exists)
    expect(validateIssues({ apiserver: { health: h } }, { '/c.key': TEST_KEY })).toStrictEqual([]);
  });

  it.each([
    ['empty', '', '/t is empty: it must hold the bearer token'],
    ['only whitespace', ' \n\n', '/t is empty: it must hold the bearer token'],
    ['two lines', 'abc\ndef\n', '/t must hold one token on one line, got 2 lines'],
    ['a space inside', 'abc def\n', '/t holds characters a bearer token cannot have (spaces, control or non-ASCII characters)'],
  ])('refuses a token file that is %s', (_what, content, message) => {
    expect(validateIssues({ apiserver: { health: { tokenFile: '/t' } } }, { '/t': content })).toStrictEqual([{ path: 'apiserver.health.tokenFile', message }]);
  });

  it('a missing token file is a note, not an issue', () => {
    const notes: ConfigNote[] = [];
    expect(validateIssues({ apiserver: { health: { tokenFile: '/t' } } }, {}, notes)).toStrictEqual([]);
    expect(notes.map((n) => n.path)).toStrictEqual(['apiserver.health.tokenFile']);
  });

  it('reports file problems together with every other problem', () => {
    const issues = validateIssues(
      { vrrp: { vrid: 0 }, apiserver: { backends: ['10.0.0.11:6443'], health: { caFile: '/ca.crt', tokenFile: '/t' } } },
      { '/ca.crt': 'x', '/t': '' },
    );
    expect(issues.map((i) => i.path)).toStrictEqual(['vrrp.vrid', 'apiserver.health.caFile', 'apiserver.health.tokenFile']);
  });

  it('reads no file without a reader (parseConfig stays pure), and none whose setting is malformed', () => {
    expect(parseConfig(health({ caFile: '/does/not/exist.crt' })).apiserver.health.caFile).toBe('/does/not/exist.crt');
    const files = fakeFiles({});
    validateIssues({ apiserver: { health: { caFile: 'relative.crt', tokenFile: '' } } }, files);
    expect(files.read).toStrictEqual([]);
  });
});

/** The issues validateConfig reports for the minimal config merged with `over`, reading files from `files`. */
function validateIssues(over: Plain, files: Record<string, string> | ConfigFiles, notes?: ConfigNote[]): readonly ConfigIssue[] {
  const reader = typeof (files as ConfigFiles).readFile === 'function' ? (files as ConfigFiles) : fakeFiles(files as Record<string, string>);
  const value = { vips: ['10.0.0.100'], ...over, vrrp: { vrid: 51, ...(over.vrrp as Plain | undefined) } };
  try {
    validateConfig(value, { files: reader, ...(notes === undefined ? {} : { notes }) });
  } catch (err) {
    if (err instanceof ConfigError) return err.issues;
    throw err;
  }
  return [];
}

describe('parseConfig: the file as a whole', () => {
  it('reports a YAML syntax error with its line and column', () => {
    const issues = issuesOf('vrrp:\n  vrid: 51\nvips: [10.0.0.100\nlog:\n  level: info\n');
    expect(issues[0]?.path).toBe('(document)');
    expect(issues[0]?.message).toMatch(/^YAML syntax error at line \d+, column \d+: /);
    expect(issues[0]?.line).toBeGreaterThanOrEqual(3);
  });

  it('reports bad indentation at its line', () => {
    const [issue] = issuesOf('vrrp:\n  vrid: 51\n   priority: 5\nvips: [10.0.0.1]\n');
    expect(issue?.message).toMatch(/^YAML syntax error at line 2, column 9: /);
    expect(issue?.line).toBe(2);
  });

  it('refuses a repeated key', () => {
    const [issue] = issuesOf('vrrp:\n  vrid: 51\n  vrid: 52\nvips: [10.0.0.1]\n');
    expect(issue?.message).toBe('YAML syntax error at line 3, column 3: this key is already set in the same mapping; write each setting once');
  });

  it('refuses an empty file', () => {
    for (const text of ['', '\n', '# only a comment\n', '---\n']) {
      expect(issuesOf(text)).toStrictEqual([
        { path: '(document)', message: 'the file is empty; at least vrrp.vrid and vips (an election), or localEndpoint and apiserver.backends, are required' },
      ]);
    }
  });

  it('refuses a file that is a YAML list', () => {
    const [issue] = issuesOf('- vrrp: {vrid: 51}\n- vips: [10.0.0.1]\n');
    expect(issue?.path).toBe('(document)');
    expect(issue?.message).toBe('the top level must be a mapping of settings (key: value), got a list');
  });

  it('refuses a file that is a scalar', () => {
    expect(issuesOf('hello\n')[0]?.message).toBe('the top level must be a mapping of settings (key: value), got "hello"');
  });
});

describe('parseConfig: several problems', () => {
  const text = [
    'log:',
    '  level: loud', // 2
    'vrrp:',
    '  vrid: 0', // 4
    '  priorty: 5', // 5
    '  advertisementInterval: 105ms', // 6
    '  peers: [fd00::2, bogus]', // 7
    'vips: [10.0.0.100, 10.0.0.100]', // 8
    'announce:',
    '  count: 0', // 10
    'admin:',
    '  listen: 127.0.0.1', // 12
    'extra: 1', // 13
    '',
  ].join('\n');

  it('reports them all, in the order the settings are declared, with line numbers', () => {
    const issues = issuesOf(text);
    expect(issues.map((i) => [i.path, i.line])).toStrictEqual([
      ['vrrp.vrid', 4],
      ['vrrp.advertisementInterval', 6],
      ['vrrp.peers[0]', 7],
      ['vrrp.peers[1]', 7],
      ['vrrp.priorty', 5],
      ['vips[1]', 8],
      ['announce.count', 10],
      ['admin.listen', 12],
      ['log.level', 2],
      ['extra', 13],
    ]);
    expect(issues[2]?.message).toBe('fd00::2 is IPv6 but the VIPs are IPv4: peers must be the same family as the VIPs');
  });

  it('puts one issue per line in the message, and formats them for the CLI', () => {
    const err = configError(text);
    const lines = err.message.split('\n');
    expect(lines).toHaveLength(err.issues.length);
    expect(lines[0]).toBe('vrrp.vrid: must be an integer from 1 to 255, got 0');
    const out = err.format();
    expect(out.split('\n')[0]).toBe('ballast: invalid configuration in test.yaml (10 problems):');
    expect(out).toContain('\n  line 4: vrrp.vrid: must be an integer from 1 to 255, got 0\n');
    expect(out).toContain('BALLAST_E_CONFIG');
    expect(out.endsWith('\n')).toBe(true);
  });
});

describe('loadConfig', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ballast-config-test-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads and validates a file', () => {
    const path = join(dir, 'ok.yaml');
    writeFileSync(path, MINIMAL);
    expect(loadConfig(path).vrrp!.vrid).toBe(51);
  });

  it('names the file in a ConfigError', () => {
    const path = join(dir, 'bad.yaml');
    writeFileSync(path, 'vrrp: {vrid: 0}\nvips: [10.0.0.1]\n');
    const err = (() => {
      try {
        loadConfig(path);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).source).toBe(path);
    expect((err as ConfigError).format()).toContain(`in ${path} (1 problem)`);
  });

  it('reports a missing file as BALLAST_E_CONFIG_READ with the fs error as cause', () => {
    const path = join(dir, 'missing.yaml');
    expect(() => loadConfig(path)).toThrow(
      expect.objectContaining({
        code: 'BALLAST_E_CONFIG_READ',
        exitCode: 2,
        message: `cannot read the configuration file ${path}: no such file (ENOENT)`,
        cause: expect.objectContaining({ code: 'ENOENT' }),
      }),
    );
  });

  it('reports a directory as BALLAST_E_CONFIG_READ', () => {
    expect(() => loadConfig(dir)).toThrow(expect.objectContaining({ code: 'BALLAST_E_CONFIG_READ', message: expect.stringContaining('EISDIR') }));
  });

  it('refuses a file that is not UTF-8', () => {
    const path = join(dir, 'latin1.yaml');
    writeFileSync(path, Buffer.from([0x69, 0x6e, 0x74, 0x65, 0x72, 0x66, 0x61, 0x63, 0x65, 0x3a, 0x20, 0xe9, 0x0a]));
    expect(() => loadConfig(path)).toThrow(
      expect.objectContaining({ code: 'BALLAST_E_CONFIG', issues: [{ path: '(document)', message: 'the file is not UTF-8 text' }] }),
    );
  });
});

describe('parseDuration', () => {
  it.each([
    ['0', 0],
    ['0s', 0],
    ['0ms', 0],
    ['100ms', 100],
    ['1s', 1000],
    ['0.5s', 500],
    ['0.29s', 290],
    ['1.5m', 90_000],
    ['2m', 120_000],
    ['1h', 3_600_000],
    ['1m30s', 90_000],
    ['1h2m3s4ms', 3_723_004],
    ['  1s ', 1000],
    ['40.95s', 40_950],
  ] as const)('%j → %i ms', (input, ms) => {
    expect(parseDuration(input)).toBe(ms);
  });

  it.each([
    ['', /empty/],
    ['fast', /^invalid duration "fast": expected a number followed by a unit/],
    ['100', /^invalid duration "100": expected/],
    ['1 s', /expected/],
    ['1sec', /expected/],
    ['1S', /\(units are lowercase\)$/],
    ['-1s', /^negative duration "-1s"/],
    ['+1s', /expected/],
    ['.5s', /expected/],
    ['0.5ms', /not a whole number of milliseconds/],
    ['1s1m', /units must go from largest to smallest/],
    ['1s1s', /units must go from largest to smallest/],
    ['99999999999999999h', /too large/],
  ] as const)('%j is a RangeError', (input, message) => {
    expect(() => parseDuration(input)).toThrow(RangeError);
    expect(() => parseDuration(input)).toThrow(message);
  });

  it('takes a number as milliseconds, if it is a non-negative integer', () => {
    expect(parseDuration(250)).toBe(250);
    expect(parseDuration(0)).toBe(0);
    for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) expect(() => parseDuration(bad)).toThrow(RangeError);
  });
});

describe('formatDuration', () => {
  it.each([
    [0, '0s'],
    [5, '5ms'],
    [100, '100ms'],
    [1000, '1s'],
    [1500, '1.5s'],
    [1010, '1.01s'],
    [90_000, '1m30s'],
    [60_100, '1m0.1s'],
    [3_600_000, '1h'],
    [3_723_004, '1h2m3.004s'],
    [-1500, '-1.5s'],
  ] as const)('%i ms → %j', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  it('round-trips through parseDuration', () => {
    for (const ms of [1, 10, 999, 1000, 1001, 59_999, 60_000, 86_400_000, 3_599_999, 40_950]) {
      expect(parseDuration(formatDuration(ms))).toBe(ms);
    }
  });

  it('refuses a non-integer', () => {
    expect(() => formatDuration(1.5)).toThrow(RangeError);
  });
});
