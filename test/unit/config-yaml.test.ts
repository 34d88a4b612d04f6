/**
 * The YAML layer of the configuration: the YAML library's own sentences never
 * reach the operator (a second document, a repeated key, an alias bomb, every kind of syntax
 * error is said in ballast's words, with the line and column), and nesting deeper than
 * MAX_NESTING is refused with one deterministic message before anything recursive runs (it
 * was `Maximum call stack size exceeded` at a varying column). Each case failed on the old code.
 */
import { describe, expect, it } from 'vitest';
import { parseDocument } from 'yaml';
import { MAX_ENTRIES, MAX_NESTING, type ConfigIssue } from '../../src/config/index.js';
import { issuesOf } from '../support/config-issues.js';

describe('YAML problems are said in ballast words', () => {
  it('two documents in one file', () => {
    const issues = issuesOf('vrrp:\n  vrid: 51\nvips: [10.0.0.1]\n---\nlog: {level: info}\n');
    expect(issues).toStrictEqual([
      {
        path: '(document)',
        message: 'YAML syntax error at line 4, column 1: the file holds more than one YAML document (---); ballast reads one',
        line: 4,
        column: 1,
      },
    ]);
  });

  it('a repeated key', () => {
    expect(issuesOf('vrrp:\n  vrid: 51\n  vrid: 52\nvips: [10.0.0.1]\n')[0]?.message).toBe(
      'YAML syntax error at line 3, column 3: this key is already set in the same mapping; write each setting once',
    );
  });

  // each breaks YAML differently; none of the library's own sentences may reach the operator
  const broken: readonly string[] = [
    'vrrp:\n  vrid: 51\n   priority: 5\nvips: [10.0.0.1]\n',
    'vips: [10.0.0.100\nlog:\n  level: info\n',
    'vips: "10.0.0.1\n',
    "vips: '10.0.0.1\n",
    'vrrp:\n\tvrid: 51\n',
    'vips: [10.0.0.1,, 10.0.0.2]\n',
    'vips: "\\q"\n',
    'a: 1\n---\nb: 2\n---\nc: 3\n',
    '{a: 1}}\n',
    'a: b: c\n',
    'a:\n  - 1\n  b: 2\n',
    '"a\nb": 1\n',
    'a: |x\n  t\n',
    'a: &x\n&y 1\n',
    'vrrp: &a &b {vrid: 1}\n',
    'vips: @x\n',
  ];
  it.each(broken.map((t) => [JSON.stringify(t), t]))('%s', (_name, text) => {
    const ours = issuesOf(text);
    const theirs = parseDocument(text, { uniqueKeys: true, prettyErrors: false }).errors.map((e) => e.message);
    expect(theirs.length).toBeGreaterThan(0);
    for (const issue of ours) {
      expect(issue.message).toMatch(/^YAML syntax error at line \d+, column \d+: [a-z]/);
      expect(issue.line).toBeGreaterThanOrEqual(1);
      for (const t of theirs) expect(issue.message).not.toContain(t.split(/[:.]/)[0]);
    }
  });

  it('an alias that names no anchor', () => {
    expect(issuesOf('vrrp: {vrid: 51}\nvips: *nothing\n')).toStrictEqual([
      {
        path: '(document)',
        message: 'YAML syntax error at line 2, column 7: this alias (*name) names no anchor (&name) defined before it',
        line: 2,
        column: 7,
      },
    ]);
  });

  it('an alias bomb', () => {
    let text = 'a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n';
    for (let i = 1; i < 8; i++)
      text += `a${i}: &a${i} [${Array<string>(10)
        .fill(`*a${i - 1}`)
        .join(', ')}]\n`;
    expect(issuesOf(text)).toStrictEqual([
      {
        path: '(document)',
        message: 'cannot be read as data: its aliases (*name) expand to too many copies of their anchors (&name); write the values out',
      },
    ]);
  });
});

describe(`nesting deeper than ${MAX_NESTING} levels is refused before anything recursive runs`, () => {
  const refused = (line: number, column: number): ConfigIssue[] => [
    {
      path: '(document)',
      message: `nests deeper than ${MAX_NESTING} levels at line ${line}, column ${column}; ballast's settings nest at most 4`,
      line,
      column,
    },
  ];

  it('is 64', () => expect(MAX_NESTING).toBe(64));

  it('flow sequences, 100000 deep, unterminated', () => {
    // the first collection past the limit starts at column 65; the same every time
    expect(issuesOf('['.repeat(100_000))).toStrictEqual(refused(1, 65));
    expect(issuesOf('['.repeat(100_000))).toStrictEqual(refused(1, 65));
  });

  it('flow sequences, 100000 deep, closed, under a key', () => {
    expect(issuesOf(`vips: ${'['.repeat(100_000)}${']'.repeat(100_000)}\n`)).toStrictEqual(refused(1, 70));
  });

  it('flow mappings {a: {a: …}} 100000 deep', () => {
    // the top-level {…} is level 1; level 65 starts at offset 64 × 4
    expect(issuesOf(`${'{a: '.repeat(100_000)}1${'}'.repeat(100_000)}`)).toStrictEqual(refused(1, 64 * 4 + 1));
  });

  it('block sequences "- - - …" 100000 deep', () => {
    expect(issuesOf(`${'- '.repeat(100_000)}x\n`)).toStrictEqual(refused(1, 64 * 2 + 1));
  });

  it('block mappings nested by indentation, 70 deep', () => {
    const text = Array.from({ length: 70 }, (_, i) => `${'  '.repeat(i)}a:`).join('\n') + ' 1\n';
    expect(issuesOf(text)).toStrictEqual(refused(65, 64 * 2 + 1));
  });

  it('exactly the limit is read (and then judged as settings)', () => {
    const text = `vrrp: {vrid: 51}\nvips: [10.0.0.1]\nx: ${'['.repeat(MAX_NESTING - 1)}${']'.repeat(MAX_NESTING - 1)}\n`;
    expect(issuesOf(text).map((i) => [i.path, i.message])).toStrictEqual([
      [
        'x',
        'unknown key (expected one of: interface, vrrp, vips, vipLifetime, announce, apiserver, dataplane, localEndpoint, discovery, policy, admin, log, mode, bgp)',
      ],
    ]);
  });
});

describe('collections with more entries than any setting needs (60,000 keys would take minutes to validate)', () => {
  const head = 'vrrp: {vrid: 77}\nvips: [10.0.0.100]\n';
  it(`refuses a mapping of more than ${MAX_ENTRIES} entries at once, with its place, before composing it`, () => {
    const text = `${head}${Array.from({ length: 20_000 }, (_, i) => `k${i}: 1`).join('\n')}\n`;
    const t0 = performance.now();
    const issues = issuesOf(text);
    expect(performance.now() - t0).toBeLessThan(5000); // the old code: > 10 s for 20,000 keys
    expect(issues.map((i) => [i.path, i.message, i.line, i.column])).toStrictEqual([
      ['(document)', `a mapping at line 1, column 1 has 20002 entries, more than ${MAX_ENTRIES}; ballast's longest list (apiserver.backends) holds 64`, 1, 1],
    ]);
  });
  it('refuses a flow list of more entries, and says list', () => {
    const text = `${head}apiserver:\n  backends: [${Array.from({ length: MAX_ENTRIES + 1 }, (_, i) => `10.0.${i >> 8}.${i & 255}:6443`).join(', ')}]\n`;
    expect(issuesOf(text).map((i) => i.message)).toStrictEqual([
      `a list at line 4, column 13 has ${MAX_ENTRIES + 1} entries, more than ${MAX_ENTRIES}; ballast's longest list (apiserver.backends) holds 64`,
    ]);
  });
  it(`a list of exactly ${MAX_ENTRIES} entries gets the ordinary message`, () => {
    const text = `${head}apiserver:\n  backends: [${Array.from({ length: MAX_ENTRIES }, (_, i) => `10.0.${i >> 8}.${i & 255}:6443`).join(', ')}]\n`;
    expect(issuesOf(text).map((i) => i.message)).toContain('must list at most 64 backends, got 1000');
  });
});
