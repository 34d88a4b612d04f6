/**
 * The limits and defaults of the configuration: numbers the schema checks against and the
 * values an absent setting takes, as they would be written in the file. No imports: vrrp/ and
 * the CLI may use these without pulling in the schema.
 */

/** Advertisement_Interval limits, ms: Max Adver Int is a 12-bit count of centiseconds. */
export const ADVERTISEMENT_INTERVAL_MIN_MS = 10;
/** The longest Advertisement_Interval, ms: 4095 centiseconds (RFC 9568 §5.2.7). */
export const ADVERTISEMENT_INTERVAL_MAX_MS = 40_950;
/** At most this many entries in vips. */
export const MAX_VIPS = 16;
/** At most this many entries in apiserver.backends. */
export const MAX_BACKENDS = 64;
/** One hour and one minute, in ms: the upper bounds of several durations. */
export const HOUR_MS = 3_600_000;
/** One minute, in ms. */
export const MINUTE_MS = 60_000;

/** Defaults, as they would be written in the file. */
/** The word in `vrrp.peers` that stands for the discovered apiservers' node addresses. */
export const DISCOVERED = 'discovered';

export const DEFAULTS = Object.freeze({
  priority: 100,
  advertisementInterval: '1s',
  preempt: true,
  preemptDelay: '0s',
  realtimePriority: 0,
  restartHold: '8s',
  checksum: 'rfc5798',
  acceptFrom: 'members',
  announceCount: 5,
  announceSpacing: '0ms',
  announceRepeatAfter: '5s',
  announceRefresh: '60s',
  vipLifetime: '5s',
  apiserverPort: 6443,
  healthPath: '/readyz',
  healthInsecureSkipVerify: false,
  discoveryLastKnownFile: '/var/lib/ballast/backends.json',
  healthInterval: '1s',
  /** the timeout's default is this or the interval, whichever is shorter */
  healthTimeout: '1s',
  healthRise: 2,
  healthFall: 2,
  healthFailOpen: true,
  healthDamping: true,
  dampingTransitions: 4,
  dampingWindow: '2m',
  dampingHold: '30s',
  dampingMaxHold: '5m',
  /** apiserver.health.rememberDeparted: src/health/checker.ts REMEMBER_DEPARTED_MS */
  rememberDeparted: '5m',
  dataplaneVip: 'nftables',
  dataplaneLocal: 'ebpf',
  dataplaneKeepOnStop: 'localEndpoint' as const,
  /** dataplane.commandTimeout: src/dataplane/apply.ts COMMAND_TIMEOUT_MS */
  dataplaneCommandTimeout: '5s',
  connectionSyncEnabled: true,
  /** dataplane.connectionSync.commitTimeout: the longest a takeover waits for conntrackd's commit */
  connectionSyncCommitTimeout: '1s',
  /** dataplane.connectionSync.resyncTimeout: the longest a preempting node waits for the state */
  connectionSyncResyncTimeout: '5s',
  rebalanceFactor: 1.2,
  rebalanceAfter: '60s',
  rebalanceResetsPerSecond: 5,
  rebalanceMaxFractionPerMinute: 0.1,
  localEndpoint: '127.0.0.1:7443',
  unhealthyPriorityWeight: 50,
  adminListen: '127.0.0.1:9641',
  logLevel: 'info',
} as const);

/**
 * The deepest nesting of collections (mappings and lists) a file may have; the top-level
 * mapping is level 1. ballast's own settings nest at most {@link SETTINGS_DEPTH} levels; the
 * limit is checked on the token stream before any recursive step (composing the YAML
 * document, converting it to data), so deep input gets this message instead of a stack overflow.
 */
export const MAX_NESTING = 64;

/**
 * The most entries one collection (a mapping or a list) may have. ballast's longest list is
 * apiserver.backends ({@link MAX_BACKENDS}); checked on the token stream with the nesting, because
 * composing a mapping checks its keys for repeats pairwise (quadratic: 60,000 keys took 106 s).
 */
export const MAX_ENTRIES = 1000;

/** How many collections deep ballast's settings nest: the top-level mapping, `bgp`, the list `bgp.peers`, one peer's mapping. */
export const SETTINGS_DEPTH = 4;

/** The shortest `vrrp.auth` key accepted, in bytes (RFC 2104 §3: at least the hash output length is recommended; 16 is the floor). */
export const AUTH_KEY_MIN_LENGTH = 16;

/** Linux IFNAMSIZ (include/uapi/linux/if.h): an interface name is at most IFNAMSIZ - 1 bytes, plus its NUL. */
export const IFNAMSIZ = 16;
