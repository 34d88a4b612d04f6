/**
 * The nftables renderer against golden files, every golden file against the real `nft -c`
 * (check mode, in a throwaway network namespace `bnft-chk`, root only), and the applier and the
 * conntrack flush against a fake executor. The real-kernel behaviour is in
 * test/integration/nftables.test.ts.
 *
 * Regenerate the golden files after an intended change of the ruleset:
 *   UPDATE_GOLDEN=1 npx vitest run test/unit/nftables.test.ts
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataplaneError, NftablesApplier, parseCountersJson, type ExecResult, type Executor } from '../../src/dataplane/apply.js';
import { FLUSH_ATTEMPTS, flushBackend } from '../../src/dataplane/conntrack.js';
import {
  backendKey,
  counterName,
  evictElements,
  parseCounterName,
  renderRemoval,
  renderRuleset,
  PROBE_MARK,
  RULESET_FORMAT,
  SPREAD_SEED,
  type Backend,
  type DesiredDataplane,
} from '../../src/dataplane/nftables.js';
import { needs, sleep } from '../support/index.js';

const GOLDEN_DIR = join(dirname(fileURLToPath(import.meta.url)), 'golden');
const UPDATE = process.env.UPDATE_GOLDEN === '1';

// ---------------------------------------------------------------------------------------------
// fixtures: 0, 1, 3 and 500 backends, IPv4 and IPv6 (addresses of the test ranges only)

function v4(n: number): string {
  // 500 distinct addresses 10.241.1.1 … 10.241.2.250
  return `10.241.${1 + Math.floor(n / 250)}.${1 + (n % 250)}`;
}
function v6(n: number): string {
  return `fd41::1:${(n + 1).toString(16)}`;
}

function fixture(family: 4 | 6, count: 0 | 1 | 3 | 500): DesiredDataplane {
  const vip = family === 4 ? '10.241.0.100' : 'fd41::100';
  const node = (k: number): string => (family === 4 ? `10.241.0.${k}` : `fd41::${k}`);
  let backends: Backend[];
  let draining: Backend[] = [];
  if (count === 500) {
    backends = Array.from({ length: 500 }, (_, i) => ({ address: family === 4 ? v4(i) : v6(i), port: 6443, local: i === 0 }));
  } else {
    backends = [
      { address: node(11), port: 6443, local: true },
      { address: node(12), port: 6443, local: false },
      { address: node(13), port: 6443, local: false },
    ].slice(0, count);
    if (count === 3) draining = [{ address: node(14), port: 6443, local: false }];
  }
  return { family, vips: [vip], port: 6443, backends, draining, masqueradeRemote: true };
}

const CASES: { family: 4 | 6; count: 0 | 1 | 3 | 500; file: string; sourceNat?: 'vip' }[] = [
  ...([4, 6] as const).flatMap((family) => ([0, 1, 3, 500] as const).map((count) => ({ family, count, file: `${family === 4 ? 'ip' : 'ip6'}-${count}.nft` }))),
  // connection sync: every flow source-NATed to the VIP, the backend side untracked where the VIP is not held
  ...([4, 6] as const).map((family) => ({ family, count: 3 as const, sourceNat: 'vip' as const, file: `${family === 4 ? 'ip' : 'ip6'}-3-snat-vip.nft` })),
];
const caseFixture = (c: (typeof CASES)[number]): DesiredDataplane => ({ ...fixture(c.family, c.count), ...(c.sourceNat ? { sourceNat: c.sourceNat } : {}) });

describe('renderRuleset: golden files', () => {
  for (const c of CASES) {
    it(`${c.file}: IPv${c.family}, ${c.count} backends${c.sourceNat ? ', source NAT to the VIP' : ''}`, () => {
      const text = renderRuleset(caseFixture(c));
      const path = join(GOLDEN_DIR, c.file);
      if (UPDATE) writeFileSync(path, text);
      expect(text).toBe(readFileSync(path, 'utf8'));
    });
  }

  it('has exactly the golden files the cases name (no stale ones)', () => {
    const files = readdirSync(GOLDEN_DIR)
      .filter((f) => f.endsWith('.nft'))
      .sort();
    expect(files).toEqual(CASES.map((c) => c.file).sort());
  });
});

/** The lines of `t` that match `re`, trimmed. */
const lines = (t: string, re: RegExp): string[] =>
  t
    .split('\n')
    .filter((l) => re.test(l))
    .map((l) => l.trim());

describe('renderRuleset: source NAT to the VIP (connection sync)', () => {
  const vip4 = renderRuleset({ ...fixture(4, 3), sourceNat: 'vip' });

  it('SNATs every flow DNATed by us to the VIP it was sent to, in postrouting and input, and masquerades nothing', () => {
    expect(lines(vip4, /^\s*[^#c\s][^"]*\b(snat|masquerade)\b/)).toEqual([
      'meta l4proto tcp ct status dnat ct original ip daddr @vips ct original proto-dst 6443 snat ip to ct original ip daddr comment "DNATed by us to this node"',
      'meta l4proto tcp ct status dnat ct original ip daddr @vips ct original proto-dst 6443 snat ip to ct original ip daddr comment "DNATed by us to another node"',
    ]);
    expect(vip4).toMatch(/chain input \{\n\t\ttype nat hook input priority 100;/);
    expect(vip4).not.toMatch(/remote_backends/);
  });

  it('leaves the backend side untracked where the VIP is not held: both directions, only for the local apiserver (draining too)', () => {
    const withDrainingLocal = renderRuleset({ ...fixture(6, 3), draining: [{ address: 'fd41::14', port: 6443, local: true }], sourceNat: 'vip' });
    expect(lines(withDrainingLocal, /elements = \{ fd41::1[14] \./)).toEqual(['elements = { fd41::11 . 6443, fd41::14 . 6443 }']);
    expect(lines(vip4, /notrack/).filter((l) => !l.startsWith('meta mark'))).toEqual([
      'ip saddr @vips ip daddr . tcp dport @local_backends notrack comment "from VIP:client port"',
      'ip daddr @vips tcp dport != 6443 fib daddr type != local notrack comment "replies to a VIP not held here"',
      'ip daddr @vips fib daddr type != local ip saddr . tcp sport @local_backends notrack comment "to VIP:client port"',
    ]);
    expect(vip4).toMatch(/chain untracked \{\n\t\ttype filter hook prerouting priority raw;/);
    expect(vip4).toMatch(/chain untracked_out \{\n\t\ttype filter hook output priority raw;/);
  });

  it('with masquerade off there is no source NAT in either mode', () => {
    const off = renderRuleset({ ...fixture(4, 3), sourceNat: 'vip', masqueradeRemote: false });
    expect(lines(off, /^\s*[^#c\s][^"]*\b(snat|masquerade)\b/)).toEqual([]);
    expect(lines(off, /^\s*[^#c\s][^"]*\bnotrack\b/)).toEqual([
      `meta mark 0x${PROBE_MARK.toString(16)} ip saddr @vips tcp sport 6443 notrack meta mark set 0x0 comment "from VIP:6443"`,
    ]);
  });
});

describe("renderRuleset: the TCP probes to a dead backend's clients", () => {
  it('leaves them untracked at the output hook before conntrack and clears their mark, in every mode and family', () => {
    for (const family of [4, 6] as const) {
      for (const sourceNat of ['node', 'vip'] as const) {
        const text = renderRuleset({ ...fixture(family, 3), sourceNat });
        const l3 = family === 4 ? 'ip' : 'ip6';
        expect(text).toMatch(/chain probes \{\n\t\ttype filter hook output priority raw; policy accept;\n/);
        expect(lines(text, /meta mark/)).toEqual([`meta mark 0xba ${l3} saddr @vips tcp sport 6443 notrack meta mark set 0x0 comment "from VIP:6443"`]);
      }
    }
    // with no backend at all too: a probe follows the apply that took the last backend out
    expect(lines(renderRuleset(fixture(4, 0)), /meta mark/)).toHaveLength(1);
  });
});

describe('renderRuleset: shape', () => {
  const three = renderRuleset(fixture(4, 3));

  it('replaces the whole table in one file: create-if-missing, delete, recreate, in that order', () => {
    const lines = three.split('\n').filter((l) => /^(table|delete)/.test(l));
    expect(lines).toEqual(['table ip ballast {}', 'delete table ip ballast', 'table ip ballast {']);
    expect(three.startsWith(`# ${RULESET_FORMAT}:`)).toBe(true);
    expect(three.endsWith('}\n')).toBe(true);
  });

  it('names no other table, and never flushes the ruleset', () => {
    expect(three).not.toMatch(/flush ruleset|table inet|table ip6|delete table ip (?!ballast)/);
  });

  it('hooks prerouting and output at dstnat and postrouting at srcnat', () => {
    expect(three).toContain('type nat hook prerouting priority dstnat; policy accept;');
    expect(three).toContain('type nat hook output priority -100; policy accept;');
    expect(three).toContain('type nat hook postrouting priority srcnat; policy accept;');
  });

  it('spreads with a seeded jhash of the tuple over one chain per backend, each counting and DNATing', () => {
    expect(three).toContain(
      'jhash ip saddr . tcp sport . ip daddr . tcp dport mod 3 seed 0x62616c73 vmap { 0 : goto be_10_241_0_11_6443, 1 : goto be_10_241_0_12_6443, 2 : goto be_10_241_0_13_6443 }',
    );
    expect(SPREAD_SEED).toBe(0x62616c73);
    // no random pick anywhere: a pickup after lost conntrack state must take the same slot
    expect(three).not.toContain('numgen');
    for (const a of ['10.241.0.11', '10.241.0.12', '10.241.0.13']) {
      const n = `be_${a.replace(/\./g, '_')}_6443`;
      expect(three).toContain(`counter ${n} {`);
      expect(three).toContain(`meta l4proto tcp counter name "${n}" dnat to ${a}:6443`);
    }
    // the same text on every render: the seed is not drawn per apply
    expect(renderRuleset(fixture(4, 3))).toBe(three);
  });

  it('resets only mid-stream pickups of flows in the evict set (the rebalancer’s), on both hooks', () => {
    expect(three).toMatch(/set evict \{\n\t\ttype ipv4_addr \. inet_service \. ipv4_addr\n\t\tflags timeout\n\t\ttimeout 120s\n/);
    const stray = 'ip daddr @vips tcp dport 6443 ct state new tcp flags & (syn | rst) == 0 ip saddr . tcp sport . ip daddr @evict reject with tcp reset';
    expect(three.split(stray)).toHaveLength(3);
    expect(three).toContain('type filter hook prerouting priority mangle; policy accept;');
    expect(three).toContain('type filter hook output priority mangle; policy accept;');
    // no blanket reset of pickups: that would reset every flow after a conntrack flush
    expect(three).not.toMatch(/ct state new tcp flags & \(syn \| rst\) == 0 reject/);
    const six = renderRuleset(fixture(6, 3));
    expect(six).toContain('type ipv6_addr . inet_service . ipv6_addr');
    expect(six).toContain('ip6 saddr . tcp sport . ip6 daddr @evict reject with tcp reset');
    expect(six).toContain('jhash ip6 saddr . tcp sport . ip6 daddr . tcp dport mod 3 seed 0x62616c73 vmap');
  });

  it('evictElements: one add-element transaction, canonical addresses, nothing for no flows', () => {
    expect(evictElements(4, [])).toBe('');
    expect(
      evictElements(4, [
        { source: '10.241.0.200', sourcePort: 40000, vip: '10.241.0.100' },
        { source: '10.241.0.201', sourcePort: 1, vip: '10.241.0.100' },
      ]),
    ).toBe('add element ip ballast evict {\n\t10.241.0.200 . 40000 . 10.241.0.100,\n\t10.241.0.201 . 1 . 10.241.0.100\n}\n');
    expect(evictElements(6, [{ source: 'FD41:0::200', sourcePort: 65535, vip: 'fd41::100' }])).toBe(
      'add element ip6 ballast evict {\n\tfd41::200 . 65535 . fd41::100\n}\n',
    );
    expect(() => evictElements(4, [{ source: 'fd41::200', sourcePort: 1, vip: '10.241.0.100' }])).toThrow(/flows\[0\]\.source.*IPv6/);
    expect(() => evictElements(4, [{ source: '10.0.0.1', sourcePort: 0, vip: '10.241.0.100' }])).toThrow(/sourcePort/);
    expect(() => evictElements(4, [{ source: '10.0.0.1', sourcePort: 1, vip: '10.0.0.1; flush ruleset' }])).toThrow(TypeError);
  });

  it('masquerades only remote backends, and only flows it DNATed from a VIP', () => {
    expect(three).toMatch(/elements = \{ 10\.241\.0\.12 \. 6443, 10\.241\.0\.13 \. 6443 \}/);
    expect(three).toContain('ct status dnat ct original ip daddr @vips ct original proto-dst 6443 ip daddr . tcp dport @remote_backends masquerade');
    const off = renderRuleset({ ...fixture(4, 3), masqueradeRemote: false });
    expect(off).not.toMatch(/\bmasquerade comment/);
    expect(off).toContain('chain postrouting {');
  });

  it('renders a draining backend as a counter only: not in the spread, no chain', () => {
    expect(three).toContain('counter be_10_241_0_14_6443 {');
    expect(three).toContain('draining, no new connections');
    expect(three).not.toContain('goto be_10_241_0_14_6443');
    expect(three).not.toContain('chain be_10_241_0_14_6443');
    expect(three).not.toContain('dnat to 10.241.0.14');
  });

  it('with zero backends: no dnat and no spread rule, but every chain and set still exists', () => {
    const zero = renderRuleset(fixture(4, 0));
    expect(zero).not.toMatch(/dnat to|jhash|numgen|goto/);
    for (const chain of ['prerouting', 'output', 'spread', 'postrouting']) expect(zero).toContain(`chain ${chain} {`);
    expect(zero).toContain('set vips {');
    expect(zero).toContain('set remote_backends {');
  });

  it('writes IPv6 DNAT targets as [addr]:port and matches ip6 daddr', () => {
    const text = renderRuleset(fixture(6, 3));
    expect(text).toContain('table ip6 ballast {}\ndelete table ip6 ballast\ntable ip6 ballast {');
    expect(text).toContain('dnat to [fd41::12]:6443');
    expect(text).toContain('ip6 daddr @vips tcp dport 6443 goto spread');
    expect(text).toContain('ct original ip6 daddr @vips');
    expect(text).toContain('counter be_fd41__12_6443 {');
  });

  it('is deterministic: backend order, address spelling and duplicate VIPs do not change the text', () => {
    const d = fixture(6, 3);
    const shuffled: DesiredDataplane = {
      ...d,
      vips: ['FD41:0::100', 'fd41::100'],
      backends: [...d.backends].reverse().map((b) => ({ ...b, address: b.address.replace('fd41::', 'fd41:0:0::') })),
    };
    expect(renderRuleset(shuffled)).toBe(renderRuleset(d));
  });

  it('ignores weights for now', () => {
    const d = fixture(4, 3);
    expect(renderRuleset({ ...d, backends: d.backends.map((b, i) => ({ ...b, weight: i + 5 })) })).toBe(renderRuleset(d));
  });

  it('seeds counters with given values, only for rendered backends', () => {
    const text = renderRuleset(fixture(4, 3), {
      counters: { '10.241.0.12:6443': { packets: 7, bytes: 420 }, '10.241.0.14:6443': { packets: 1, bytes: 60 }, '10.9.9.9:1': { packets: 3, bytes: 3 } },
    });
    expect(text).toMatch(/counter be_10_241_0_12_6443 \{\n\t\tcomment "[^"]*"\n\t\tpackets 7 bytes 420\n\t\}/);
    expect(text).toMatch(/counter be_10_241_0_14_6443 \{\n\t\tcomment "[^"]*"\n\t\tpackets 1 bytes 60\n\t\}/);
    expect(text).not.toContain('packets 3');
  });

  it('keeps every comment within nft’s 128-byte limit', () => {
    for (const c of CASES) {
      for (const m of renderRuleset(fixture(c.family, c.count)).matchAll(/comment "([^"]*)"/g)) {
        expect(Buffer.byteLength(m[1]!)).toBeLessThanOrEqual(128);
      }
    }
  });

  it('rejects malformed input with a TypeError naming the field', () => {
    const d = fixture(4, 3);
    expect(() => renderRuleset({ ...d, vips: [] })).toThrow(/vips/);
    expect(() => renderRuleset({ ...d, vips: ['fd41::100'] })).toThrow(/vips\[0\].*IPv6/);
    expect(() => renderRuleset({ ...d, port: 0 })).toThrow(/port/);
    expect(() => renderRuleset({ ...d, port: 65536 })).toThrow(/port/);
    expect(() => renderRuleset({ ...d, backends: [{ address: '10.0.0.1', port: 1.5, local: false }] })).toThrow(/backends\[0\].*port/);
    expect(() => renderRuleset({ ...d, backends: [{ address: 'x; flush ruleset', port: 1, local: false }] })).toThrow(TypeError);
    expect(() => renderRuleset({ ...d, draining: [d.backends[1]!] })).toThrow(/listed twice/);
    expect(() => renderRuleset({ ...d, family: 5 as 4 })).toThrow(/family/);
  });
});

describe('counter names', () => {
  it('round-trip for IPv4 and IPv6', () => {
    for (const b of [
      { address: '10.241.0.11', port: 6443 },
      { address: 'fd41::11', port: 6443 },
      { address: '::1', port: 1 },
      { address: 'fd41:1:2:3:4:5:6:7', port: 65535 },
      { address: '::ffff:10.0.0.1', port: 443 },
    ]) {
      const name = counterName(b);
      expect(name).toMatch(/^be_[0-9a-f_]+_\d+$/);
      const back = parseCounterName(name);
      expect(back && backendKey(back)).toBe(backendKey(b));
    }
    expect(counterName({ address: '10.241.0.11', port: 6443 })).toBe('be_10_241_0_11_6443');
    expect(counterName({ address: 'FD41:0::11', port: 6443 })).toBe('be_fd41__11_6443');
    expect(parseCounterName('other')).toBeNull();
    expect(parseCounterName('be_10_241_0_11_0')).toBeNull();
  });
});

// ---------------------------------------------------------------------------------------------
// the real nft, in check mode, on every golden file

const why = needs('root', 'nft', 'ip');

const CHK_NS = 'bnft-chk';
const ipCmd = (args: string[], input?: string): ReturnType<typeof spawnSync> =>
  spawnSync('ip', args, { encoding: 'utf8', timeout: 30_000, ...(input === undefined ? {} : { input }) });

describe.skipIf(why)(`golden files pass the real nft -c in netns ${CHK_NS}${why ? ` (SKIPPED: ${why})` : ''}`, () => {
  beforeAll(() => {
    ipCmd(['netns', 'del', CHK_NS]);
    const r = ipCmd(['netns', 'add', CHK_NS]);
    if (r.status !== 0) throw new Error(`ip netns add ${CHK_NS}: ${String(r.stderr)}`);
  });
  afterAll(() => {
    ipCmd(['netns', 'del', CHK_NS]);
  });

  const check = (text: string): { status: number | null; stderr: string } => {
    const r = ipCmd(['netns', 'exec', CHK_NS, 'nft', '-c', '-f', '-'], text);
    return { status: r.status, stderr: String(r.stderr) };
  };

  for (const c of CASES) {
    it(`nft -c accepts ${c.file}`, () => {
      expect(check(readFileSync(join(GOLDEN_DIR, c.file), 'utf8'))).toEqual({ status: 0, stderr: '' });
    });
  }

  it('nft -c accepts seeded counters, masquerade off, and the removal text', () => {
    expect(check(renderRuleset(fixture(4, 3), { counters: { '10.241.0.11:6443': { packets: 12, bytes: 720 } } })).status).toBe(0);
    expect(check(renderRuleset({ ...fixture(6, 3), masqueradeRemote: false })).status).toBe(0);
    expect(check(renderRemoval(4) + renderRemoval(6)).status).toBe(0);
  });

  it('nft -c accepts evict elements added to a rendered table, both families', () => {
    const four = evictElements(4, [
      { source: '10.241.0.200', sourcePort: 40000, vip: '10.241.0.100' },
      { source: '10.241.0.201', sourcePort: 40001, vip: '10.241.0.100' },
    ]);
    expect(check(renderRuleset(fixture(4, 3)) + four)).toEqual({ status: 0, stderr: '' });
    const six = evictElements(6, [{ source: 'fd41::200', sourcePort: 40000, vip: 'fd41::100' }]);
    expect(check(renderRuleset(fixture(6, 3)) + six)).toEqual({ status: 0, stderr: '' });
  });

  it('nft -c rejects a broken ruleset (the check is real)', () => {
    const r = check(renderRuleset(fixture(4, 3)).replace('dnat to 10.241.0.12:6443', 'dnat to 10.241.0.12:99999'));
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/Error/);
  });

  it('check mode changed nothing: the namespace has no table', () => {
    const r = ipCmd(['netns', 'exec', CHK_NS, 'nft', 'list', 'ruleset']);
    expect(String(r.stdout).trim()).toBe('');
  });
});

// ---------------------------------------------------------------------------------------------
// the applier and conntrack against a fake executor

interface Call {
  args: string[];
  stdin: string;
}

/** A fake nft: records calls; answers `list counters` from `counters`, everything else with `result`. */
function fakeNft(opts: { result?: (c: Call) => ExecResult; counters?: () => ExecResult } = {}): { exec: Executor; calls: Call[] } {
  const calls: Call[] = [];
  const exec: Executor = async (args, stdin) => {
    const c = { args, stdin };
    calls.push(c);
    if (args.includes('counters'))
      return opts.counters?.() ?? { code: 1, stdout: '', stderr: 'Error: No such file or directory\nlist counters table ip ballast\n' };
    return opts.result?.(c) ?? { code: 0, stdout: '', stderr: '' };
  };
  return { exec, calls };
}

const countersJson = (entries: { family?: string; table?: string; name: string; packets: number; bytes: number }[]): string =>
  JSON.stringify({
    nftables: [
      { metainfo: { version: '1.0.6', release_name: 'Lester Gooch #5', json_schema_version: 1 } },
      ...entries.map((e) => ({
        counter: { family: e.family ?? 'ip', table: e.table ?? 'ballast', handle: 1, name: e.name, packets: e.packets, bytes: e.bytes },
      })),
    ],
  });

describe('NftablesApplier (fake nft)', () => {
  it('applies the rendered text with nft -f - and skips an unchanged state', async () => {
    const { exec, calls } = fakeNft();
    const a = new NftablesApplier({ exec });
    const d = fixture(4, 3);
    const first = await a.apply(d);
    expect(first.changed).toBe(true);
    expect(first.durationMs).toBeGreaterThanOrEqual(0);
    const applies = calls.filter((c) => c.args.join(' ') === '-f -');
    expect(applies).toHaveLength(1);
    expect(applies[0]!.stdin).toBe(renderRuleset(d));
    // the live counters are read first, so the new table can start from them
    expect(calls[0]!.args).toEqual(['-j', 'list', 'counters', 'table', 'ip', 'ballast']);

    const n = calls.length;
    expect((await a.apply({ ...d, backends: [...d.backends].reverse() })).changed).toBe(false);
    expect(calls).toHaveLength(n);
    expect((await a.apply(d, { force: true })).changed).toBe(true);
    expect((await a.apply({ ...d, backends: d.backends.slice(1) })).changed).toBe(true);
  });

  it('keeps one last-applied text per family', async () => {
    const { exec, calls } = fakeNft();
    const a = new NftablesApplier({ exec });
    await a.apply(fixture(4, 3));
    await a.apply(fixture(6, 3));
    expect((await a.apply(fixture(4, 3))).changed).toBe(false);
    expect((await a.apply(fixture(6, 3))).changed).toBe(false);
    expect(calls.filter((c) => c.args.join(' ') === '-f -')).toHaveLength(2);
  });

  it('throws a BALLAST_E_DATAPLANE error with nft’s stderr, and retries the same state next time', async () => {
    let fail = true;
    const stderr = '/dev/stdin:40:3-9: Error: Could not process rule: No such file or directory\n';
    const { exec } = fakeNft({ result: () => (fail ? { code: 1, stdout: '', stderr } : { code: 0, stdout: '', stderr: '' }) });
    const a = new NftablesApplier({ exec });
    const err = await a.apply(fixture(4, 1)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DataplaneError);
    expect(err).toMatchObject({ code: 'BALLAST_E_DATAPLANE', stderr, status: 1, args: ['-f', '-'] });
    expect((err as Error).message).toContain('Could not process rule');
    fail = false;
    expect((await a.apply(fixture(4, 1))).changed).toBe(true);
  });

  it('wraps an executor that cannot start nft', async () => {
    const a = new NftablesApplier({
      exec: () => Promise.reject(Object.assign(new Error('spawn nft ENOENT'), { code: 'ENOENT' })),
    });
    await expect(a.apply(fixture(4, 1))).rejects.toMatchObject({ code: 'BALLAST_E_DATAPLANE', message: expect.stringContaining('ENOENT') });
  });

  it('rejects a malformed desired state before running anything', async () => {
    const { exec, calls } = fakeNft();
    await expect(new NftablesApplier({ exec }).apply({ ...fixture(4, 1), vips: [] })).rejects.toThrow(TypeError);
    expect(calls).toHaveLength(0);
  });

  it('seeds the new table with the counters it read, keeping them monotonic', async () => {
    let live = [{ name: 'be_10_241_0_12_6443', packets: 9, bytes: 540 }];
    const { exec, calls } = fakeNft({ counters: () => ({ code: 0, stdout: countersJson(live), stderr: '' }) });
    const a = new NftablesApplier({ exec });
    await a.apply(fixture(4, 3));
    const applied = calls.filter((c) => c.args.join(' ') === '-f -').at(-1)!.stdin;
    expect(applied).toMatch(/counter be_10_241_0_12_6443 \{\n\t\tcomment "[^"]*"\n\t\tpackets 9 bytes 540\n/);
    // a backend that left the table keeps its last value in counters()
    live = [{ name: 'be_10_241_0_11_6443', packets: 2, bytes: 120 }];
    expect(await a.counters()).toEqual({
      '10.241.0.11:6443': { packets: 2, bytes: 120 },
      '10.241.0.12:6443': { packets: 9, bytes: 540 },
    });
  });

  it('remove() deletes both families’ tables with the idempotent idiom and forgets the last text', async () => {
    const { exec, calls } = fakeNft();
    const a = new NftablesApplier({ exec });
    await a.apply(fixture(4, 1));
    calls.length = 0;
    await a.remove();
    expect(calls.map((c) => c.stdin)).toEqual([renderRemoval(4), renderRemoval(6)]);
    expect(renderRemoval(4)).toBe('table ip ballast {}\ndelete table ip ballast\n');
    expect((await a.apply(fixture(4, 1))).changed).toBe(true);
  });

  it("remove([family]) deletes only that family's table: an agent of the other family may own the other one", async () => {
    const { exec, calls } = fakeNft();
    await new NftablesApplier({ exec }).remove([4]);
    expect(calls.map((c) => c.stdin)).toEqual([renderRemoval(4)]);
  });

  it('remove() tolerates a kernel without IPv6 but not other failures', async () => {
    const noV6 = fakeNft({
      result: (c) =>
        c.stdin.includes('ip6') ? { code: 1, stdout: '', stderr: 'Error: Address family not supported by protocol\n' } : { code: 0, stdout: '', stderr: '' },
    });
    await new NftablesApplier({ exec: noV6.exec }).remove();
    const denied = fakeNft({ result: () => ({ code: 1, stdout: '', stderr: 'Error: Operation not permitted\n' }) });
    await expect(new NftablesApplier({ exec: denied.exec }).remove()).rejects.toMatchObject({ code: 'BALLAST_E_DATAPLANE' });
  });

  it('counters() reads both families, ignores missing tables and foreign counters', async () => {
    const { exec, calls } = fakeNft({
      counters: () => ({
        code: 0,
        stdout: countersJson([
          { name: 'be_10_241_0_11_6443', packets: 3, bytes: 180 },
          { name: 'be_fd41__11_6443', family: 'ip6', packets: 4, bytes: 320 },
          { name: 'be_10_241_0_12_6443', table: 'other', packets: 99, bytes: 99 },
          { name: 'something_else', packets: 99, bytes: 99 },
        ]),
        stderr: '',
      }),
    });
    expect(await new NftablesApplier({ exec }).counters()).toEqual({
      '10.241.0.11:6443': { packets: 3, bytes: 180 },
      '[fd41::11]:6443': { packets: 4, bytes: 320 },
    });
    expect(calls.map((c) => c.args.join(' '))).toEqual(['-j list counters table ip ballast', '-j list counters table ip6 ballast']);
    expect(await new NftablesApplier({ exec: fakeNft().exec }).counters()).toEqual({});
    const broken = fakeNft({ counters: () => ({ code: 0, stdout: 'not json', stderr: '' }) });
    await expect(new NftablesApplier({ exec: broken.exec }).counters()).rejects.toMatchObject({ code: 'BALLAST_E_DATAPLANE' });
  });

  it('serializes concurrent calls', async () => {
    let running = 0;
    let overlap = false;
    const exec: Executor = async () => {
      running++;
      if (running > 1) overlap = true;
      await sleep(5);
      running--;
      return { code: 0, stdout: '{"nftables":[]}', stderr: '' };
    };
    const a = new NftablesApplier({ exec });
    await Promise.all([a.apply(fixture(4, 1)), a.apply(fixture(4, 3)), a.counters(), a.remove(), a.apply(fixture(6, 3))]);
    expect(overlap).toBe(false);
  });

  it('parseCountersJson tolerates odd documents', () => {
    expect(parseCountersJson(null, 4)).toEqual([]);
    expect(parseCountersJson({ nftables: 'x' }, 4)).toEqual([]);
    expect(parseCountersJson({ nftables: [null, 1, { counter: null }] }, 4)).toEqual([]);
  });
});

describe('flushBackend (fake conntrack)', () => {
  it('runs conntrack -D with the original destination and the reply source, and returns the count', async () => {
    const calls: string[][] = [];
    const exec: Executor = async (args) => {
      calls.push(args);
      return { code: 0, stdout: 'tcp 6 431999 ESTABLISHED src=…\n', stderr: 'conntrack v1.4.7 (conntrack-tools): 2 flow entries have been deleted.\n' };
    };
    expect(await flushBackend('10.241.0.100', 6443, { address: '10.241.0.12', port: 6443 }, { exec })).toStrictEqual({ deleted: 2, clients: [] });
    expect(calls[0]).toEqual([
      '-D',
      '-f',
      'ipv4',
      '-p',
      'tcp',
      '--orig-dst',
      '10.241.0.100',
      '--orig-port-dst',
      '6443',
      '--reply-src',
      '10.241.0.12',
      '--reply-port-src',
      '6443',
    ]);
    await flushBackend('FD41::100', 6443, { address: 'fd41:0::12', port: 6444 }, { exec });
    expect(calls[1]).toEqual([
      '-D',
      '-f',
      'ipv6',
      '-p',
      'tcp',
      '--orig-dst',
      'fd41::100',
      '--orig-port-dst',
      '6443',
      '--reply-src',
      'fd41::12',
      '--reply-port-src',
      '6444',
    ]);
  });

  it('returns 0 when nothing matched (conntrack exits 1 then)', async () => {
    const exec: Executor = async () => ({ code: 1, stdout: '', stderr: 'conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.\n' });
    expect(await flushBackend('10.241.0.100', 6443, { address: '10.241.0.12', port: 6443 }, { exec })).toStrictEqual({ deleted: 0, clients: [] });
  });

  it("returns the clients of the deleted flows the client still waits on, read from conntrack's own lines, each once", async () => {
    // conntrack -D prints each entry it deletes on stdout (conntrack-tools 1.4.7, default format)
    const stdout = [
      'tcp      6 431999 ESTABLISHED src=10.241.0.50 dst=10.241.0.100 sport=40000 dport=6443 src=10.241.0.12 dst=10.241.0.100 sport=6443 dport=40000 [ASSURED] mark=0 use=1',
      'tcp      6 59 CLOSE_WAIT src=10.241.0.51 dst=10.241.0.100 sport=40001 dport=6443 src=10.241.0.12 dst=10.241.0.100 sport=6443 dport=40001 [ASSURED] mark=0 use=1',
      'tcp      6 119 SYN_SENT src=10.241.0.52 dst=10.241.0.100 sport=40002 dport=6443 [UNREPLIED] src=10.241.0.12 dst=10.241.0.100 sport=6443 dport=40002 mark=0 use=1',
      'tcp      6 117 TIME_WAIT src=10.241.0.53 dst=10.241.0.100 sport=40003 dport=6443 src=10.241.0.12 dst=10.241.0.100 sport=6443 dport=40003 [ASSURED] mark=0 use=1',
      'tcp      6 8 CLOSE src=10.241.0.54 dst=10.241.0.100 sport=40004 dport=6443 src=10.241.0.12 dst=10.241.0.100 sport=6443 dport=40004 [ASSURED] mark=0 use=1',
      'tcp      6 55 SYN_RECV src=10.241.0.55 dst=10.241.0.100 sport=40005 dport=6443 src=10.241.0.12 dst=10.241.0.100 sport=6443 dport=40005 mark=0 use=1',
      'tcp      6 119 FIN_WAIT src=10.241.0.56 dst=10.241.0.100 sport=40006 dport=6443 src=10.241.0.12 dst=10.241.0.100 sport=6443 dport=40006 [ASSURED] mark=0 use=1',
      'tcp      6 29 LAST_ACK src=10.241.0.57 dst=10.241.0.100 sport=40007 dport=6443 src=10.241.0.12 dst=10.241.0.100 sport=6443 dport=40007 [ASSURED] mark=0 zone=3 use=1',
      'not an entry',
      '',
    ].join('\n');
    const exec: Executor = async () => ({ code: 0, stdout, stderr: 'conntrack v1.4.7 (conntrack-tools): 8 flow entries have been deleted.\n' });
    const r = await flushBackend('10.241.0.100', 6443, { address: '10.241.0.12', port: 6443 }, { exec });
    expect(r.deleted).toBe(8);
    expect(r.clients.map((c) => `${c.address}:${c.port}`)).toStrictEqual([
      '10.241.0.50:40000',
      '10.241.0.51:40001',
      '10.241.0.55:40005',
      '10.241.0.56:40006',
      '10.241.0.57:40007',
    ]);
    // IPv6, canonical addresses; a retried run's entries join the first run's, each client once
    const v6 = (port: number, state = 'ESTABLISHED'): string =>
      `tcp      6 431999 ${state} src=fd41:0::50 dst=fd41::100 sport=${port} dport=6443 src=fd41::12 dst=fd41::100 sport=6443 dport=${port} [ASSURED] mark=0 use=1\n`;
    let n = 0;
    const flaky: Executor = async () =>
      ++n === 1
        ? { code: 1, stdout: v6(40000) + v6(40001), stderr: "conntrack v1.4.7 (conntrack-tools): Operation failed: such conntrack doesn't exist\n" }
        : { code: 0, stdout: v6(40001) + v6(40002), stderr: 'conntrack v1.4.7 (conntrack-tools): 2 flow entries have been deleted.\n' };
    const r6 = await flushBackend('fd41::100', 6443, { address: 'fd41::12', port: 6443 }, { exec: flaky });
    expect(r6).toStrictEqual({
      deleted: 2,
      clients: [
        { address: 'fd41::50', port: 40000 },
        { address: 'fd41::50', port: 40001 },
        { address: 'fd41::50', port: 40002 },
      ],
    });
  });

  it('runs conntrack again when an entry vanished under it (1.4.7 stops there), at most FLUSH_ATTEMPTS times', async () => {
    const gone = { code: 1, stdout: '', stderr: "conntrack v1.4.7 (conntrack-tools): Operation failed: such conntrack doesn't exist\n" };
    let n = 0;
    const flaky: Executor = async () =>
      ++n < 3 ? gone : { code: 0, stdout: '', stderr: 'conntrack v1.4.7 (conntrack-tools): 4 flow entries have been deleted.\n' };
    expect((await flushBackend('10.241.0.100', 6443, { address: '10.241.0.12', port: 6443 }, { exec: flaky })).deleted).toBe(4);
    expect(n).toBe(3);
    let m = 0;
    const always: Executor = async () => (m++, gone);
    await expect(flushBackend('10.241.0.100', 6443, { address: '10.241.0.12', port: 6443 }, { exec: always })).rejects.toMatchObject({
      code: 'BALLAST_E_DATAPLANE',
      message: expect.stringContaining("such conntrack doesn't exist"),
    });
    expect(m).toBe(FLUSH_ATTEMPTS);
  });

  it('throws BALLAST_E_DATAPLANE on a real failure, TypeError on bad arguments', async () => {
    const exec: Executor = async () => ({ code: 1, stdout: '', stderr: 'conntrack v1.4.7 (conntrack-tools): Operation failed: Operation not permitted\n' });
    await expect(flushBackend('10.241.0.100', 6443, { address: '10.241.0.12', port: 6443 }, { exec })).rejects.toMatchObject({
      code: 'BALLAST_E_DATAPLANE',
      message: expect.stringContaining('not permitted'),
    });
    const missing: Executor = () => Promise.reject(new Error('spawn conntrack ENOENT'));
    await expect(flushBackend('10.241.0.100', 6443, { address: '10.241.0.12', port: 6443 }, { exec: missing })).rejects.toMatchObject({
      code: 'BALLAST_E_DATAPLANE',
    });
    await expect(flushBackend('10.241.0.100', 6443, { address: 'fd41::12', port: 6443 }, { exec })).rejects.toThrow(TypeError);
    await expect(flushBackend('nope', 6443, { address: '10.241.0.12', port: 6443 }, { exec })).rejects.toThrow(TypeError);
    await expect(flushBackend('10.241.0.100', 0, { address: '10.241.0.12', port: 6443 }, { exec })).rejects.toThrow(/port/);
  });
});
