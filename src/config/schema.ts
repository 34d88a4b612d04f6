/**
 * The configuration schema: the sections of a ballast config file assembled from the field
 * parsers (fields.ts), as one strict zod object ({@link rootSchema}), and the order of the
 * settings ({@link SECTION_KEYS}, {@link CONFIG_FIELDS}). validate.ts runs it.
 */
import { z } from 'zod';
import { BGP_SECTION_KEYS, bgpSection } from './bgp.js';
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
  REMEMBER_DEPARTED,
  serverNameField,
} from './fields.js';
import type { SectionKeys } from './issues.js';
import { ADVERTISEMENT_INTERVAL_MAX_MS, ADVERTISEMENT_INTERVAL_MIN_MS, DEFAULTS, DISCOVERED, HOUR_MS, MAX_VIPS, MINUTE_MS } from './limits.js';
import { expect, show } from './messages.js';
import { LOG_LEVELS, type KeepOnStop } from './types.js';

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
    checksum: z.enum(['rfc5798', 'rfc9568'], { error: expect('"rfc5798" or "rfc9568"', { default: DEFAULTS.checksum }) }).default(DEFAULTS.checksum),
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
    rememberDeparted: durationField(REMEMBER_DEPARTED),
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

  /** `dataplane.connectionSync`: connections through the VIP outlive a move (src/agent/phases/connection-sync.ts). */
  const connectionSyncShape = {
    enabled: boolField(DEFAULTS.connectionSyncEnabled),
    commitTimeout: durationField({ min: 100, max: 10_000, default: DEFAULTS.connectionSyncCommitTimeout, range: rangeMessage('100ms', '10s') }),
    resyncTimeout: durationField({ min: 0, max: MINUTE_MS, default: DEFAULTS.connectionSyncResyncTimeout, range: rangeMessage('0s', '1m') }),
  };

  const dataplaneShape = {
    vip: z
      .enum(['nftables', 'none'], { error: expect('"nftables" or "none" (VIP only, no load balancing)', { default: DEFAULTS.dataplaneVip }) })
      .default(DEFAULTS.dataplaneVip),
    local: z
      .enum(['ebpf', 'proxy', 'off'], { error: expect('"ebpf", "proxy" or "off"', { default: DEFAULTS.dataplaneLocal }) })
      .default(DEFAULTS.dataplaneLocal),
    // true / false: what the setting was before it named what it keeps (all / none)
    keepOnStop: z
      .union([z.boolean(), z.enum(['none', 'localEndpoint', 'all'])], {
        error: expect(
          '"localEndpoint" (keep the eBPF local endpoint serving), "all" (also the nftables table) or "none" (remove everything); true means all, false none',
          { default: DEFAULTS.dataplaneKeepOnStop },
        ),
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
    mode: z
      .enum(['vrrp', 'bgp'], {
        error: expect('"vrrp" (an election on one L2 segment) or "bgp" (announce the VIPs with BGP, docs/bgp.md)', { default: 'vrrp' }),
      })
      .default('vrrp'),
    bgp: bgpSection(),
  };
  return {
    rootShape,
    authShape,
    vrrpShape,
    announceShape,
    apiserverShape,
    healthShape,
    dataplaneShape,
    rebalanceShape,
    connectionSyncShape,
    localEndpointShape,
    discoveryShape,
    policyShape,
    adminShape,
    logShape,
  };
}

/** The known keys of each section, by the section's dotted path ('' = top level), in declaration order. */
/** Each section's keys, in declaration order: the order issues are reported in, and where suggestions come from. */
export const SECTION_KEYS: SectionKeys = ((): SectionKeys => {
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
export function rootSchema() {
  return z.strictObject(shapes().rootShape, { error: rootError });
}

/** The settings as the schema parsed them, before normalize.ts derives the {@link Config}. */
export type ParsedConfig = z.output<ReturnType<typeof rootSchema>>;
