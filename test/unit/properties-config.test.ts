/**
 * Property-based tests of configuration validation (src/config: validateConfig, and parseConfig
 * for the YAML path): random YAML-ish trees, with keys drawn from the real field
 * names and random ones, values of every JSON type and deep nesting, always give a Config or a
 * ConfigError whose every issue has a non-empty path naming the field (or `(document)`), never
 * another exception. `npm run fuzz` runs each property 1,000,000 times (test/support/fuzz.ts).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { CONFIG_FIELDS, ConfigError, DOCUMENT_PATH, parseConfig, validateConfig } from '../../src/config/index.js';
import { FUZZ_TIMEOUT_MS, fuzzParameters } from '../support/fuzz.js';

const SEGMENTS = [...new Set(CONFIG_FIELDS.flatMap((f) => f.split('.')))];
const TOP = new Set(CONFIG_FIELDS.map((f) => f.split('.')[0]!));

const fieldKey = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...SEGMENTS) }, { weight: 1, arbitrary: fc.string({ maxLength: 8 }) });
/** Leaves of every JSON type, plus the strings a setting is likely to hold (durations, addresses). */
const leaf = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer({ min: -70000, max: 70000 }),
  fc.double(),
  fc.string({ maxLength: 12 }),
  fc.constantFrom('1s', '100ms', '10.0.0.100', 'fd00::1', 'eth0', '10.0.0.1:6443', '', '0', 'yes', 'ebpf', 'proxy', '1h', '/readyz'),
);
const { tree } = fc.letrec((tie) => ({
  tree: fc.oneof({ depthSize: 'xsmall', maxDepth: 12, withCrossShrink: true }, leaf, tie('array'), tie('object')),
  array: fc.array(tie('tree'), { maxLength: 3 }),
  object: fc.dictionary(fieldKey, tie('tree'), { maxKeys: 4 }),
}));

/** Deep nesting: a chain of 1..100 mappings and sequences (past the YAML path's MAX_NESTING, 64). */
const deep = fc
  .tuple(fc.array(fc.option(fieldKey, { nil: undefined }), { minLength: 1, maxLength: 100 }), leaf)
  .map(([steps, end]) => steps.reduceRight<unknown>((inner, key) => (key === undefined ? [inner] : { [key]: inner }), end));

/** A tree shaped like the real file: a random subset of the real settings, each set to a random value. */
const shaped = fc
  .tuple(
    fc.subarray([...CONFIG_FIELDS], { maxLength: 10 }),
    fc.array(fc.oneof({ weight: 3, arbitrary: leaf }, { weight: 1, arbitrary: tree }), { minLength: 10, maxLength: 10 }),
    fc.boolean(),
  )
  .map(([fields, values, minimal]) => {
    const root: Record<string, unknown> = minimal ? { vrrp: { vrid: 51 }, vips: ['10.0.0.100'] } : {};
    fields.forEach((field, i) => {
      const parts = field.split('.');
      let at = root;
      for (const p of parts.slice(0, -1)) {
        if (at[p] === null || typeof at[p] !== 'object' || Array.isArray(at[p])) at[p] = {};
        at = at[p] as Record<string, unknown>;
      }
      at[parts[parts.length - 1]!] = values[i];
    });
    return root;
  });

/**
 * Calls `run`; it must return a Config or throw a ConfigError whose issues all name a path: one
 * starting at a key of `input` (when the input is known) or at a real top-level setting.
 */
function expectConfigOrIssues(input: unknown, run: () => unknown): void {
  let config: unknown;
  try {
    config = run();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    expect(err.issues.length).toBeGreaterThan(0);
    for (const issue of err.issues) {
      expect(typeof issue.path).toBe('string');
      expect(issue.path.length).toBeGreaterThan(0);
      expect(issue.message.length).toBeGreaterThan(0);
      if (issue.path !== DOCUMENT_PATH && input !== undefined) {
        // the path starts at a key the input has, or at a real section it lacks (a required one);
        // a key that is not a plain word is written as ["key"]
        const quoted = /^\[("(?:[^"\\]|\\.)*")\]/.exec(issue.path);
        const head = quoted ? (JSON.parse(quoted[1]!) as string) : /^[^.[]*/.exec(issue.path)![0];
        const keys = input !== null && typeof input === 'object' && !Array.isArray(input) ? Object.keys(input) : [];
        expect(keys.includes(head) || TOP.has(head), `issue path ${issue.path}`).toBe(true);
      }
    }
    return;
  }
  expect(config).toBeTypeOf('object');
  expect(Object.isFrozen(config)).toBe(true);
}

describe('config validation properties', () => {
  it(
    'validateConfig: any tree gives a Config or path-named issues, never another exception',
    () => {
      fc.assert(
        fc.property(fc.oneof(tree, shaped, deep), (input) => expectConfigOrIssues(input, () => validateConfig(input))),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    'parseConfig: the same trees as YAML text give a Config or path-named issues',
    () => {
      fc.assert(
        fc.property(fc.oneof(tree, shaped, deep), (input) => {
          const text = stringify(input);
          expectConfigOrIssues(input, () => parseConfig(text, 'fuzz.yaml'));
        }),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );

  it(
    'parseConfig: any text gives a Config or issues, never another exception',
    () => {
      const yamlish = fc
        .array(
          fc.oneof(
            fc.string({ maxLength: 10 }),
            fc.constantFrom(':', ' ', '\n', '- ', '{', '}', '[', ']', '&a ', '*a', '!!', '#', '"', "'", '|', '>', '? ', '---\n', '\t'),
            fc.constantFrom(...SEGMENTS),
          ),
          { maxLength: 30 },
        )
        .map((p) => p.join(''));
      fc.assert(
        fc.property(yamlish, (text) => expectConfigOrIssues(undefined, () => parseConfig(text))),
        fuzzParameters(),
      );
    },
    FUZZ_TIMEOUT_MS,
  );
});
