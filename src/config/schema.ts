/**
 * The configuration schema: the sections of a ballast config file assembled from the field
 * parsers (fields.ts), and {@link validateConfig}, which turns a parsed file into the
 * normalized, frozen {@link Config} (types.ts) every other module receives.
 *
 * Validation is pure (no interface lookups, no DNS; files only through an injected reader,
 * which loadConfig passes) and reports every problem at once, each with the path of its
 * setting and a reason written for an operator. Steps:
 *   1. zod checks each setting (strict objects: unknown keys are errors, with a suggestion from
 *      suggest.ts);
 *   2. checks that span settings (checks.ts) run on the raw input, so that they are reported
 *      even when an unrelated setting is also wrong;
 *   3. with a file reader, the files the settings name are read and checked (files.ts);
 *   4. issues are sorted in the order the settings are declared, then thrown as one
 *      ConfigError; or the normalized object (normalize.ts, where derived values are computed)
 *      is deep-frozen and returned.
 */
import { z } from 'zod';
import { ConfigError, type ConfigIssue } from '../errors.js';
import { BGP_SECTION_KEYS, bgpSection } from './bgp.js';
import { crossFieldIssues } from './checks.js';
import { formatDuration } from './duration.js';
import {
  addressList,
  backendList,
  boolField,
  DAMPING_HOLD,
  DAMPING_MAX_HOLD,
  DAMPING_WINDOW,
  durationField,
  fileField,
  HEALTH_INTERVAL,
  HEALTH_TIMEOUT,
  healthPathField,
  intField,
  interfaceField,
  listenField,
  localBackendField,
  localEndpointAddressField,
  numberField,
  optionalDurationField,
  rangeMessage,
  serverNameField,
} from './fields.js';
import { fileIssues, type ConfigFiles, type ConfigNote, type FileNote } from './files.js';
import { formatPath, issueOrder, type Locator, type RawIssue, type SectionKeys } from './issues.js';
import { ADVERTISEMENT_INTERVAL_MAX_MS, ADVERTISEMENT_INTERVAL_MIN_MS, DEFAULTS, DISCOVERED, HOUR_MS, MAX_VIPS, MINUTE_MS } from './limits.js';
import { expect, show } from './messages.js';
import { normalize } from './normalize.js';
import { unknownKeyMessage } from './suggest.js';
import { LOG_LEVELS, type Config, type KeepOnStop } from './types.js';

export type { Locator } from './issues.js';

const mappingError = expect('a mapping of settings (key: value)');

/** A section whose every setting has a default: absent or empty (`announce:`) means all defaults. */
function section<T extends z.ZodType>(schema: T) {
  return z.preprocess((v) => v ?? {}, schema);
}

/** An optional section: absent means off; `vrrp:` with nothing under it is an empty section. */
function optionalSection<T extends z.ZodType>(schema: T) {
  return z.preprocess((v) => (v === null ? {} : v), schema.optional());
}

/**
 * Every section's settings as zod shapes, built when a validation needs them ({@link configSchema})
 * and left to the GC after it: built once at import, the schema objects stayed on the agent's
 * heap for its whole life (docs/performance.md).
 */
function shapes() {
  /** `vrrp.auth`; an absent or empty keyFile is reported by the cross-field checks. */
  const authShape = {
    keyFile: fileField('/etc/ballast/vrrp.key'),
  };

  const vrrpShape = {
    vrid: intField(1, 255, {
      required: 'the Virtual Router ID, an integer from 1 to 255, the same on every node of the group',
    }),
    priority: intField(1, 255, {
      default: String(DEFAULTS.priority),
      hint: (v) => (v === 0 ? ' (0 is reserved: an Active that leaves sends priority 0)' : ''),
    }).default(DEFAULTS.priority),
    advertisementInterval: durationField({
      min: ADVERTISEMENT_INTERVAL_MIN_MS,
      max: ADVERTISEMENT_INTERVAL_MAX_MS,
      default: DEFAULTS.advertisementInterval,
      range: (ms) => `must be from 10ms to 40950ms (RFC 9568 Max Adver Int is 12 bits of centiseconds), got ${ms}ms`,
      step: {
        ms: 10,
        message: (ms) => `must be a multiple of 10ms (RFC 9568 Max Adver Int is in centiseconds), got ${ms}ms`,
      },
    }),
    preempt: boolField(DEFAULTS.preempt),
    preemptDelay: durationField({ min: 0, max: HOUR_MS, default: DEFAULTS.preemptDelay, range: rangeMessage('0s', '1h') }),
    // how long the Backups wait for the next process of a master that restarts in place (docs/config.md)
    restartHold: durationField({ min: 1000, max: 120_000, default: DEFAULTS.restartHold, range: rangeMessage('1s', '2m') }),
    // the election thread's SCHED_FIFO priority; 0 = normal scheduling (docs/config.md)
    realtimePriority: intField(0, 99, { default: String(DEFAULTS.realtimePriority) }).default(DEFAULTS.realtimePriority),
    // `discovered` alone stands for [discovered]: the discovered apiservers' node addresses
    peers: z
      .preprocess(
        (v) => (v === DISCOVERED ? [DISCOVERED] : v),
        addressList({
          role: 'peer',
          label: 'vrrp.peers',
          min: 0,
          max: Number.MAX_SAFE_INTEGER,
          what: `a list of IP addresses and/or the word ${DISCOVERED}, or ${DISCOVERED} alone (leave it out for multicast)`,
          default: 'absent (multicast)',
          keyword: DISCOVERED,
        }),
      )
      .optional(),
    acceptFrom: z
      .enum(['members', 'any'], { error: expect('"members" (adverts only from known nodes) or "any"', { default: DEFAULTS.acceptFrom }) })
      .default(DEFAULTS.acceptFrom),
    singleNode: boolField(false),
    checksum: z
      .enum(['rfc5798', 'rfc9568'], { error: expect('"rfc5798" or "rfc9568"', { default: DEFAULTS.checksum }) })
      .default(DEFAULTS.checksum),
    auth: z.strictObject(authShape, { error: mappingError }).optional(),
  };

  const announceShape = {
    count: intField(1, 100, { default: String(DEFAULTS.announceCount) }).default(DEFAULTS.announceCount),
    spacing: durationField({ min: 0, max: 1000, default: DEFAULTS.announceSpacing, range: rangeMessage('0ms', '1s') }),
    repeatAfter: durationField({ min: 0, max: HOUR_MS, default: DEFAULTS.announceRepeatAfter, range: rangeMessage('0s (no second burst)', '1h') }),
    refresh: durationField({ min: 0, max: HOUR_MS, default: DEFAULTS.announceRefresh, range: rangeMessage('0s (off)', '1h') }),
  };

  /** vipLifetime: 0 (permanent) or 2s..1h; the kernel ages addresses in whole seconds. */
  const vipLifetimeField = durationField({
    min: 0,
    max: HOUR_MS,
    default: DEFAULTS.vipLifetime,
    range: rangeMessage('0s (permanent)', '1h'),
    step: { ms: 1000, message: (ms) => `must be whole seconds (the kernel ages addresses in seconds), got ${formatDuration(ms)}` },
  }).refine((ms) => ms === 0 || ms >= 2000, { message: 'must be 0s (permanent) or at least 2s: the agent renews it every third of it' });

  const healthShape = {
    path: healthPathField(),
    caFile: fileField('/etc/kubernetes/pki/ca.crt'),
    serverName: serverNameField(),
    insecureSkipVerify: boolField(DEFAULTS.healthInsecureSkipVerify),
    clientCertFile: fileField('/etc/ballast/health.crt'),
    clientKeyFile: fileField('/etc/ballast/health.key'),
    tokenFile: fileField('/etc/ballast/health.token'),
    interval: durationField(HEALTH_INTERVAL),
    timeout: optionalDurationField(HEALTH_TIMEOUT),
    rise: intField(1, 10, { default: String(DEFAULTS.healthRise) }).default(DEFAULTS.healthRise),
    fall: intField(1, 10, { default: String(DEFAULTS.healthFall) }).default(DEFAULTS.healthFall),
    failOpen: boolField(DEFAULTS.healthFailOpen),
    damping: boolField(DEFAULTS.healthDamping),
    dampingTransitions: intField(1, 100, { default: String(DEFAULTS.dampingTransitions) }).default(DEFAULTS.dampingTransitions),
    dampingWindow: durationField(DAMPING_WINDOW),
    dampingHold: durationField(DAMPING_HOLD),
    dampingMaxHold: durationField(DAMPING_MAX_HOLD),
  };

  const apiserverShape = {
    port: intField(1, 65535, { default: String(DEFAULTS.apiserverPort) }).default(DEFAULTS.apiserverPort),
    backends: backendList(),
    health: section(z.strictObject(healthShape, { error: mappingError })),
  };

  /** `dataplane.rebalance`: resetting the oldest flows of an overloaded backend (src/dataplane/rebalance.ts). */
  const rebalanceShape = {
    enabled: boolField(false),
    factor: numberField(1.05, 100, { default: String(DEFAULTS.rebalanceFactor) }).default(DEFAULTS.rebalanceFactor),
    after: durationField({ min: 1000, max: HOUR_MS, default: DEFAULTS.rebalanceAfter, range: rangeMessage('1s', '1h') }),
    resetsPerSecond: intField(1, 1000, { default: String(DEFAULTS.rebalanceResetsPerSecond) }).default(DEFAULTS.rebalanceResetsPerSecond),
    maxFractionPerMinute: numberField(0.001, 1, { default: String(DEFAULTS.rebalanceMaxFractionPerMinute) }).default(DEFAULTS.rebalanceMaxFractionPerMinute),
  };

  /** `dataplane.connectionSync`: connections through the VIP outlive a move (src/agent/connection-sync.ts). */
  const connectionSyncShape = {
    enabled: boolField(DEFAULTS.connectionSyncEnabled),
    commitTimeout: durationField({ min: 100, max: 10_000, default: DEFAULTS.connectionSyncCommitTimeout, range: rangeMessage('100ms', '10s') }),
    resyncTimeout: durationField({ min: 0, max: MINUTE_MS, default: DEFAULTS.connectionSyncResyncTimeout, range: rangeMessage('0s', '1m') }),
  };

  const dataplaneShape = {
    vip: z
      .enum(['nftables', 'none'], { error: expect('"nftables" or "none" (VIP only, no load balancing)', { default: DEFAULTS.dataplaneVip }) })
      .default(DEFAULTS.dataplaneVip),
    local: z.enum(['ebpf', 'proxy', 'off'], { error: expect('"ebpf", "proxy" or "off"', { default: DEFAULTS.dataplaneLocal }) }).default(DEFAULTS.dataplaneLocal),
    // true / false: what the setting was before it named what it keeps (all / none)
    keepOnStop: z
      .union([z.boolean(), z.enum(['none', 'localEndpoint', 'all'])], {
        error: expect('"localEndpoint" (keep the eBPF local endpoint serving), "all" (also the nftables table) or "none" (remove everything); true means all, false none', { default: DEFAULTS.dataplaneKeepOnStop }),
      })
      .transform((v): KeepOnStop => (v === true ? 'all' : v === false ? 'none' : v))
      .default(DEFAULTS.dataplaneKeepOnStop),
    commandTimeout: durationField({ min: 1000, max: MINUTE_MS, default: DEFAULTS.dataplaneCommandTimeout, range: rangeMessage('1s', '1m') }),
    rebalance: section(z.strictObject(rebalanceShape, { error: mappingError })),
    connectionSync: section(z.strictObject(connectionSyncShape, { error: mappingError })),
  };

  const policyShape = {
    unhealthyPriorityWeight: intField(0, 254, {
      default: String(DEFAULTS.unhealthyPriorityWeight),
      hint: (v) => (v === 255 ? ' (the effective priority never goes below 1, so 254 already takes any priority to 1)' : ''),
    }).default(DEFAULTS.unhealthyPriorityWeight),
    localBackend: localBackendField(),
  };

  const localEndpointShape = {
    address: localEndpointAddressField(),
    force: boolField(false),
    cgroup: fileField('/sys/fs/cgroup'),
  };

  /** `discovery`: the kubernetes EndpointSlices feed the backend set (see src/discovery/). */
  const discoveryShape = {
    kubeconfig: fileField('/etc/kubernetes/admin.conf'),
    inCluster: boolField(false),
    lastKnownFile: fileField(DEFAULTS.discoveryLastKnownFile),
  };

  const adminShape = { listen: listenField() };

  const logShape = {
    level: z
      .enum(LOG_LEVELS, { error: expect(`${LOG_LEVELS.slice(0, -1).join(', ')} or ${LOG_LEVELS.at(-1)}`, { default: DEFAULTS.logLevel }) })
      .default(DEFAULTS.logLevel),
  };

  const rootShape = {
    interface: interfaceField(),
    // absent: no election (a node that only serves the local endpoint)
    vrrp: optionalSection(z.strictObject(vrrpShape, { error: mappingError })),
    vips: addressList({
      role: 'vip',
      label: 'vips',
      min: 1,
      max: MAX_VIPS,
      what: `a list of 1 to ${MAX_VIPS} IP addresses of one family, e.g. [10.0.0.100]`,
    }).optional(),
    vipLifetime: vipLifetimeField,
    announce: section(z.strictObject(announceShape, { error: mappingError })),
    apiserver: section(z.strictObject(apiserverShape, { error: mappingError })),
    dataplane: section(z.strictObject(dataplaneShape, { error: mappingError })),
    localEndpoint: optionalSection(z.strictObject(localEndpointShape, { error: mappingError })),
    discovery: optionalSection(z.strictObject(discoveryShape, { error: mappingError })),
    policy: section(z.strictObject(policyShape, { error: mappingError })),
    admin: section(z.strictObject(adminShape, { error: mappingError })),
    log: section(z.strictObject(logShape, { error: mappingError })),
    // vrrp (default): an election on one L2 segment; bgp: every ready node announces the VIPs (docs/bgp.md)
    mode: z.enum(['vrrp', 'bgp'], { error: expect('"vrrp" (an election on one L2 segment) or "bgp" (announce the VIPs with BGP, docs/bgp.md)', { default: 'vrrp' }) }).default('vrrp'),
    bgp: bgpSection(),
  };
  return { rootShape, authShape, vrrpShape, announceShape, apiserverShape, healthShape, dataplaneShape, rebalanceShape, connectionSyncShape, localEndpointShape, discoveryShape, policyShape, adminShape, logShape };
}

/** The known keys of each section, by the section's dotted path ('' = top level), in declaration order. */
const SECTION_KEYS: SectionKeys = ((): SectionKeys => {
  const s = shapes();
  return {
    '': Object.keys(s.rootShape),
    vrrp: Object.keys(s.vrrpShape),
    'vrrp.auth': Object.keys(s.authShape),
    announce: Object.keys(s.announceShape),
    apiserver: Object.keys(s.apiserverShape),
    'apiserver.health': Object.keys(s.healthShape),
    dataplane: Object.keys(s.dataplaneShape),
    'dataplane.rebalance': Object.keys(s.rebalanceShape),
    'dataplane.connectionSync': Object.keys(s.connectionSyncShape),
    localEndpoint: Object.keys(s.localEndpointShape),
    discovery: Object.keys(s.discoveryShape),
    policy: Object.keys(s.policyShape),
    admin: Object.keys(s.adminShape),
    log: Object.keys(s.logShape),
    ...BGP_SECTION_KEYS,
  };
})();

/** The leaf settings under the section at `prefix` ('' = top level), depth first. */
function leaves(prefix: string): string[] {
  return (SECTION_KEYS[prefix] ?? []).flatMap((k) => {
    const path = prefix === '' ? k : `${prefix}.${k}`;
    return SECTION_KEYS[path] === undefined ? [path] : leaves(path);
  });
}

/** Every setting's path, in declaration order: "interface", "vrrp.vrid", …, "apiserver.health.path", …, "log.level". */
export const CONFIG_FIELDS: readonly string[] = Object.freeze(leaves(''));

const rootError = (iss: { readonly input?: unknown }): string =>
  iss.input === null || iss.input === undefined
    ? 'the file is empty; at least vrrp.vrid and vips (an election), or localEndpoint and apiserver.backends, are required'
    : `the top level must be a mapping of settings (key: value), got ${show(iss.input)}`;

/** The top level as a strict zod object, built for one validation ({@link shapes}). */
function rootSchema() {
  return z.strictObject(shapes().rootShape, { error: rootError });
}

/** The settings as the schema parsed them, before {@link normalize}. */
export type ParsedConfig = z.output<ReturnType<typeof rootSchema>>;

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
