/**
 * {@link validateConfig}: a parsed file to the normalized, frozen {@link Config} (types.ts) every
 * other module receives.
 *
 * Validation is pure (no interface lookups, no DNS; files only through an injected reader,
 * which loadConfig passes) and reports every problem at once, each with the path of its
 * setting and a reason written for an operator. Steps:
 *   1. zod checks each setting (schema.ts; strict objects: unknown keys are errors, with a
 *      suggestion from suggest.ts);
 *   2. checks that span settings (checks.ts) run on the raw input, so that they are reported
 *      even when an unrelated setting is also wrong;
 *   3. with a file reader, the files the settings name are read and checked (files.ts);
 *   4. issues are sorted in the order the settings are declared, then thrown as one
 *      ConfigError; or the normalized object (normalize.ts, where derived values are computed)
 *      is deep-frozen and returned.
 */
import type { z } from 'zod';
import { ConfigError, type ConfigIssue } from '../errors.js';
import { crossFieldIssues } from './checks.js';
import { fileIssues, type ConfigFiles, type ConfigNote, type FileNote } from './files.js';
import { formatPath, issueOrder, type Locator, type RawIssue } from './issues.js';
import { normalize } from './normalize.js';
import { rootSchema, SECTION_KEYS } from './schema.js';
import { unknownKeyMessage } from './suggest.js';
import type { Config } from './types.js';

function buildConfigSchema() {
  return rootSchema().transform(normalize);
}

/** The last schema built, for as long as the GC leaves it: a burst of validations (a test, fuzzing) builds it once. */
let cached: WeakRef<ReturnType<typeof buildConfigSchema>> | null = null;

/**
 * The zod schema of a config file's content (after YAML parsing), producing a {@link Config}.
 * Held only weakly: building it takes ~3 ms, keeping it costs the agent its heap for the whole run.
 */
export function configSchema(): ReturnType<typeof buildConfigSchema> {
  let schema = cached?.deref();
  if (schema === undefined) {
    schema = buildConfigSchema();
    cached = new WeakRef(schema);
  }
  return schema;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** zod's issues as ours; an unknown key gets a suggestion. */
function schemaIssues(error: z.ZodError): RawIssue[] {
  return error.issues.flatMap((iss): RawIssue[] => {
    const path = iss.path.map((s) => (typeof s === 'number' ? s : String(s)));
    if (iss.code !== 'unrecognized_keys') return [{ path, message: iss.message }];
    const at = path.join('.');
    return iss.keys.map((key) => ({ path: [...path, key], message: unknownKeyMessage(SECTION_KEYS, at, key), atKey: true }));
  });
}

/**
 * Validates an already-parsed configuration value (what YAML parsing of the file gives, or
 * an object the CLI assembled) and returns the normalized, deep-frozen {@link Config}.
 * Pure: touches nothing on the system, unless `options.files` is given.
 *
 * Durations become integer milliseconds (`…Ms` fields) and the advertisement interval also
 * centiseconds (`advertisementIntervalCs`); IPv6 addresses become canonical (RFC 5952);
 * backends become `{ host, port, family }`; unset optional strings ("" or absent) are absent;
 * derived values (`vrrp.owner`, `apiserver.health.settleMs`, …) are computed (normalize.ts).
 *
 * @param value the configuration; never modified.
 * @param options.source file path or other origin, for messages.
 * @param options.locate maps a path to a line and column in the source text (parseConfig
 *   passes one; without it issues carry no line numbers).
 * @param options.files when given, the files named by vrrp.auth and apiserver.health (keyFile,
 *   caFile, clientCertFile, clientKeyFile, tokenFile) are read through it and checked; a missing
 *   or malformed file is an issue on its setting, except a health file (caFile, clientCertFile,
 *   clientKeyFile, tokenFile) that does not exist yet: the checks wait for it (a note). Without
 *   it, files are not looked at.
 * @param options.notes receives those notes (one per missing health file), also when the
 *   configuration turns out invalid.
 * @throws ConfigError (code BALLAST_E_CONFIG) listing every problem found, in declaration order.
 */
export function validateConfig(value: unknown, options: { source?: string; locate?: Locator; files?: ConfigFiles; notes?: ConfigNote[] } = {}): Config {
  const result = configSchema().safeParse(value);
  const raw: RawIssue[] = result.success ? [] : schemaIssues(result.error);
  raw.push(...crossFieldIssues(value));
  const waits: FileNote[] = [];
  if (options.files !== undefined) raw.push(...fileIssues(value, options.files, waits));
  for (const w of waits) {
    const at = options.locate?.(w.path, false);
    const base = { path: formatPath(w.path), file: w.file, message: w.message };
    options.notes?.push(at === undefined ? base : { ...base, line: at.line, column: at.column });
  }
  if (result.success && raw.length === 0) return deepFreeze(result.data);
  raw.sort(issueOrder(SECTION_KEYS));
  const issues = raw.map((r): ConfigIssue => {
    const at = options.locate?.(r.path, r.atKey === true);
    const base = { path: formatPath(r.path), message: r.message };
    return at === undefined ? base : { ...base, line: at.line, column: at.column };
  });
  throw new ConfigError(issues, { source: options.source });
}
