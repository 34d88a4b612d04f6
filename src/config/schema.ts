/**
 * The configuration schema: what a ballast config file may say, its defaults, and the
 * normalized, frozen {@link Config} every other module receives.
 *
 * Validation is pure (no interface lookups, no DNS; files only through an injected reader,
 * which loadConfig passes) and reports every problem at once, each with the path of its
 * setting and a reason written for an operator. Steps:
 *   1. zod checks each setting (strict objects: unknown keys are errors, with a suggestion);
 *   2. checks that span settings (peers and backends against VIPs, the health timeout against
 *      its interval, caFile required by backends) run on the raw input, so that they are
 *      reported even when an unrelated setting is also wrong;
 *   3. with a file reader, the files the settings name are read and checked (files.ts);
 *   4. issues are sorted in the order the settings are declared, then thrown as one
 *      ConfigError; or the normalized object is deep-frozen and returned.
 */
import type { HostPort } from '../net/hostport.js';
import { z } from 'zod';
import { ConfigError, DOCUMENT_PATH, type ConfigIssue } from '../errors.js';
import { formatDuration, parseDuration } from './duration.js';
import { fileIssues, type ConfigFiles } from './files.js';

// ---------------------------------------------------------------------------------------------
// The normalized shape

/** IP version of the VIPs, and so of the VRRP group (4 = IPv4, 6 = IPv6). */
export type AddressFamily = 4 | 6;

/** Which VRRPv3 checksum rule adverts use; see docs/config.md (`vrrp.checksum`). */
export type ChecksumMode = 'rfc5798' | 'rfc9568';

/** Log levels, lowest first. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error'] as const;
/** One of {@link LOG_LEVELS}. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/** The `vrrp` section, normalized. Names follow RFC 9568. */
export interface VrrpConfig {
  /** Virtual Router ID, 1..255. */
  readonly vrid: number;
  /** Priority, 1..255; 255 = this node owns the VIPs as interface addresses. */
  readonly priority: number;
  /** Advertisement_Interval in milliseconds: 10..40950, a multiple of 10. */
  readonly advertisementIntervalMs: number;
  /** Advertisement_Interval in centiseconds (what the Max Adver Int field carries): 1..4095. */
  readonly advertisementIntervalCs: number;
  /** Preempt_Mode. */
  readonly preempt: boolean;
  /** How long a higher-priority Backup waits before preempting, in milliseconds: 0..3600000. */
  readonly preemptDelayMs: number;
  /**
   * Unicast mode: `vrrp.peers` was given (or `singleNode`). Adverts go to the peers only and
   * adverts from anyone else are dropped. False = multicast (224.0.0.18 / ff02::12).
   */
  readonly unicast: boolean;
  /** Unicast peers (canonical text, same family as the VIPs); empty in multicast mode and for a single node. */
  readonly peers: readonly string[];
  /** Checksum rule for adverts. */
  readonly checksum: ChecksumMode;
  /** Priority 255: this node owns the VIPs as its own addresses (RFC 9568 §1.6). Derived once here. */
  readonly owner: boolean;
  /** Authenticated adverts (docs/auth.md): the shared key's file, or null (off, the default). */
  readonly auth: { readonly keyFile: string } | null;
}

/** The `announce` section (gratuitous ARP / unsolicited NA on becoming Active), normalized. */
export interface AnnounceConfig {
  /** Packets per burst (per VIP), 1..100. */
  readonly count: number;
  /** Gap between the packets of a burst, in milliseconds: 0..1000. */
  readonly spacingMs: number;
  /** Delay from the first burst to a second one, in milliseconds: 0..3600000; 0 = no second burst. */
  readonly repeatAfterMs: number;
  /** While Active, a burst this often (ms) so switches that age their tables keep the right port; 0 = off. */
  readonly refreshMs: number;
}

/** A TCP listen address. */
export interface ListenAddress {
  /** An IP address literal (IPv6 in canonical form, without brackets). */
  readonly host: string;
  /** 1..65535. */
  readonly port: number;
}

/** The `admin` section, normalized. */
export interface AdminConfig {
  /** Where GET /status and /healthz are served. */
  readonly listen: ListenAddress;
}

/** The `log` section, normalized. */
export interface LogConfig {
  readonly level: LogLevel;
}

/** An apiserver endpoint: an IP literal and a TCP port (the one structured form, from src/net/). */
export type BackendAddress = HostPort;

/** The `apiserver.health` section, normalized: how a backend's readiness is checked. */
export interface HealthConfig {
  /** Request path of the check, starting with "/" (may carry a query): "/readyz". */
  readonly path: string;
  /** PEM file of the CA(s) that verify the apiservers' serving certificates; absent when not set. */
  readonly caFile?: string;
  /** Name (or IP) to send as SNI and to verify in the certificate instead of the backend's IP; absent when not set. */
  readonly serverName?: string;
  /** Skip certificate verification (never for production). */
  readonly insecureSkipVerify: boolean;
  /** PEM client certificate presented to the apiservers; set together with `clientKeyFile`. */
  readonly clientCertFile?: string;
  /** PEM private key of `clientCertFile`. */
  readonly clientKeyFile?: string;
  /** File holding a bearer token sent as `Authorization: Bearer …`; re-read when it changes. */
  readonly tokenFile?: string;
  /** Time between two checks of one backend, in milliseconds: 100..60000. */
  readonly intervalMs: number;
  /** Deadline of one check (connect + TLS + response), in milliseconds: 50..60000, at most `intervalMs`. */
  readonly timeoutMs: number;
  /** Consecutive passes that make a backend up: 1..10. */
  readonly rise: number;
  /** Consecutive failures that take an up backend down: 1..10. */
  readonly fall: number;
  /**
   * How long, ms, until every backend has had its first verdict: (max(rise, fall) + 1) × interval +
   * timeout. The election policy waits this long before it judges the backends. Derived once here.
   */
  readonly settleMs: number;
}

/** The `apiserver` section, normalized. */
export interface ApiserverConfig {
  /** The port clients use on the VIP: 1..65535. */
  readonly port: number;
  /** Seed list of apiservers, 0..64, same family as the VIPs, no duplicates; empty = no load balancing. */
  readonly backends: readonly BackendAddress[];
  readonly health: HealthConfig;
}

/** How traffic to the VIP is handled: `nftables` load-balances VIP:port to healthy backends; `none` holds the VIP only. */
export type DataplaneVipMode = 'nftables' | 'none';

/** The `dataplane` section, normalized. */
export interface DataplaneConfig {
  readonly vip: DataplaneVipMode;
  /**
   * How the node-local endpoint is served: `ebpf` (cgroup connect() rewrite, no process on the
   * data path), `proxy` (a TCP proxy in the agent, the slower fallback), `off`.
   */
  readonly local: DataplaneLocalMode;
  /**
   * Keep the nftables table (and, `ebpf`, the pinned programs) when the agent stops cleanly, so
   * clients keep being balanced while it restarts.
   */
  readonly keepOnStop: boolean;
}

export type DataplaneLocalMode = 'ebpf' | 'proxy' | 'off';

/** The `localEndpoint` section, normalized. */
export interface LocalEndpointConfig {
  /** Where local clients connect: 1..4 host:port, loopback or this node's address (default 127.0.0.1:7443). */
  readonly addresses: readonly BackendAddress[];
  /** Start even if something on the node already listens on an endpoint's port (it would be shadowed). */
  readonly force: boolean;
  /** cgroup-v2 directory the ebpf programs attach to; absent = the host's cgroup-v2 root. */
  readonly cgroup?: string;
}

/** The `policy` section, normalized: how health feeds the election. */
export interface PolicyConfig {
  /**
   * Subtracted from `vrrp.priority` while no backend is healthy (`dataplane.vip: nftables`) or
   * while the local apiserver is unhealthy (`dataplane.vip: none`): 0..254. The effective
   * priority never goes below 1.
   */
  readonly unhealthyPriorityWeight: number;
  /**
   * This node's own apiserver. Absent when not configured: the agent then uses the backend
   * whose address is on this node, resolved at run time.
   */
  readonly localBackend?: BackendAddress;
}

/** The validated, normalized, deep-frozen configuration. */
export interface Config {
  /**
   * Interface to run VRRP on. Absent (undefined) when not configured: the agent then uses the
   * interface whose subnet holds vips[0], resolved at run time.
   */
  readonly interface?: string;
  /**
   * Address family of the VIPs (and of the peers and the VRRP group). Without an election: the
   * family of the first backend (4 when there is none).
   */
  readonly family: AddressFamily;
  /** The election; null when `vrrp` is absent (a node that only runs the local endpoint, e.g. a worker). */
  readonly vrrp: VrrpConfig | null;
  /** Virtual IP addresses, 1..16, one family, canonical text (IPv6 per RFC 5952), no duplicates; empty without `vrrp`. */
  readonly vips: readonly string[];
  /**
   * Valid lifetime of the VIPs on the interface, ms (0 = permanent). The Active agent keeps
   * renewing it, so a VIP left by an agent killed with SIGKILL disappears by itself.
   */
  readonly vipLifetimeMs: number;
  readonly announce: AnnounceConfig;
  /** Always present: without the section, no backends and the defaults. */
  readonly apiserver: ApiserverConfig;
  readonly dataplane: DataplaneConfig;
  /** The node-local API endpoint; null when `localEndpoint` is absent. */
  readonly localEndpoint: LocalEndpointConfig | null;
  readonly policy: PolicyConfig;
  readonly admin: AdminConfig;
  readonly log: LogConfig;
}

// ---------------------------------------------------------------------------------------------
// Limits and defaults

/** Advertisement_Interval limits, ms: Max Adver Int is a 12-bit count of centiseconds. */
export const ADVERTISEMENT_INTERVAL_MIN_MS = 10;
export const ADVERTISEMENT_INTERVAL_MAX_MS = 40_950;
export const MAX_VIPS = 16;
/** At most this many entries in apiserver.backends. */
export const MAX_BACKENDS = 64;
const HOUR_MS = 3_600_000;
const MINUTE_MS = 60_000;

/** Defaults, as they would be written in the file. */
export const DEFAULTS = Object.freeze({
  priority: 100,
  advertisementInterval: '1s',
  preempt: true,
  preemptDelay: '0s',
  checksum: 'rfc5798',
  announceCount: 5,
  announceSpacing: '0ms',
  announceRepeatAfter: '5s',
  announceRefresh: '60s',
  vipLifetime: '5s',
  apiserverPort: 6443,
  healthPath: '/readyz',
  healthInsecureSkipVerify: false,
  healthInterval: '1s',
  /** the timeout's default is this or the interval, whichever is shorter */
  healthTimeout: '1s',
  healthRise: 2,
  healthFall: 2,
  dataplaneVip: 'nftables',
  dataplaneLocal: 'ebpf',
  dataplaneKeepOnStop: false,
  localEndpoint: '127.0.0.1:7443',
  unhealthyPriorityWeight: 50,
  adminListen: '127.0.0.1:9641',
  logLevel: 'info',
} as const);

// ---------------------------------------------------------------------------------------------
// Messages

/** A value as an operator would recognise it in a message: `"x"`, `0`, `a list`. */
function show(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'an empty value';
  if (typeof v === 'string') return JSON.stringify(v.length > 64 ? `${v.slice(0, 61)}...` : v);
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a mapping';
  return String(v);
}

interface ExpectOptions {
  /** Shown when the key is present with no value. */
  default?: string;
  /** Replaces the text after "required: " when the key is missing. */
  required?: string;
  /** Appended to "must be …, got …" for some inputs. */
  hint?: (input: unknown) => string;
}

/** An error function for zod: "required: …", "has no value: …" or "must be …, got …". */
function expect(what: string, opts: ExpectOptions = {}): (iss: { readonly input?: unknown }) => string {
  return (iss) => {
    const input = iss.input;
    if (input === undefined) return `required: ${opts.required ?? what}`;
    if (input === null) {
      const dflt = opts.default === undefined ? '' : ` (or delete the key to get the default, ${opts.default})`;
      return `has no value: expected ${what}${dflt}`;
    }
    return `must be ${what}, got ${show(input)}${opts.hint?.(input) ?? ''}`;
  };
}

/** Hint for a number written in quotes. */
const quotedNumberHint = (v: unknown): string =>
  typeof v === 'string' && /^\s*-?\d+(\.\d+)?\s*$/.test(v) ? ' (a string: write the number without quotes)' : '';

// ---------------------------------------------------------------------------------------------
// IP addresses (pure text parsing; node:net is not needed and offers no canonical form)

interface Ip {
  readonly family: AddressFamily;
  /** 4 or 16 bytes. */
  readonly bytes: readonly number[];
  /** Canonical text: dotted quad, or RFC 5952 for IPv6. */
  readonly text: string;
}

function parseIPv4(s: string): number[] | null {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  const out: number[] = [];
  for (const p of parts) {
    // no leading zeros: inet_aton() reads "010" as octal, so the meaning would depend on the tool
    if (!/^(0|[1-9]\d{0,2})$/.test(p)) return null;
    const n = Number(p);
    if (n > 255) return null;
    out.push(n);
  }
  return out;
}

function parseIPv6(s: string): number[] | null {
  if (!/^[0-9A-Fa-f:.]+$/.test(s) || !s.includes(':')) return null;
  let text = s;
  let v4: number[] | null = null;
  if (s.includes('.')) {
    // a trailing dotted quad stands for the last two groups (::ffff:10.0.0.1)
    const cut = s.lastIndexOf(':');
    v4 = parseIPv4(s.slice(cut + 1));
    if (v4 === null) return null;
    text = `${s.slice(0, cut + 1)}0:0`;
  }
  const dbl = text.indexOf('::');
  if (dbl !== text.lastIndexOf('::')) return null;
  const split = (t: string): string[] => (t === '' ? [] : t.split(':'));
  let groups: string[];
  if (dbl >= 0) {
    const head = split(text.slice(0, dbl));
    const tail = split(text.slice(dbl + 2));
    if (head.length + tail.length > 7) return null;
    groups = [...head, ...Array<string>(8 - head.length - tail.length).fill('0'), ...tail];
  } else {
    groups = text.split(':');
    if (groups.length !== 8) return null;
  }
  const bytes: number[] = [];
  for (const g of groups) {
    if (!/^[0-9A-Fa-f]{1,4}$/.test(g)) return null;
    const n = parseInt(g, 16);
    bytes.push(n >> 8, n & 0xff);
  }
  if (v4 !== null) bytes.splice(12, 4, ...v4);
  return bytes;
}

/** RFC 5952 text: lowercase, no leading zeros, the longest run (>= 2) of zero groups as "::". */
function formatIPv6(bytes: readonly number[]): string {
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i] ?? 0) << 8) | (bytes[i + 1] ?? 0));
  let bestAt = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestAt = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (gs: number[]): string => gs.map((g) => g.toString(16)).join(':');
  if (bestAt < 0) return hex(groups);
  return `${hex(groups.slice(0, bestAt))}::${hex(groups.slice(bestAt + bestLen))}`;
}

function parseIp(s: string): Ip | null {
  const v4 = parseIPv4(s);
  if (v4 !== null) return { family: 4, bytes: v4, text: v4.join('.') };
  const v6 = parseIPv6(s);
  if (v6 !== null) return { family: 6, bytes: v6, text: formatIPv6(v6) };
  return null;
}

type Scope =
  | 'unspecified'
  | 'loopback'
  | 'multicast'
  | 'link-local'
  | 'broadcast'
  | 'ipv4-mapped'
  | 'reserved'
  | 'unicast';

function scopeOf(ip: Ip): Scope {
  const b = ip.bytes;
  const b0 = b[0] ?? 0;
  const b1 = b[1] ?? 0;
  if (ip.family === 4) {
    if (b.every((x) => x === 0)) return 'unspecified';
    if (b0 === 0) return 'reserved'; // 0.0.0.0/8, "this network"
    if (b0 === 127) return 'loopback';
    if (b0 === 169 && b1 === 254) return 'link-local';
    if (b0 >= 224 && b0 <= 239) return 'multicast';
    if (b.every((x) => x === 255)) return 'broadcast';
    if (b0 >= 240) return 'reserved'; // 240.0.0.0/4
    return 'unicast';
  }
  if (b.every((x) => x === 0)) return 'unspecified';
  if (b.slice(0, 15).every((x) => x === 0) && b[15] === 1) return 'loopback';
  if (b0 === 0xff) return 'multicast';
  if (b0 === 0xfe && (b1 & 0xc0) === 0x80) return 'link-local';
  if (b.slice(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff) return 'ipv4-mapped';
  return 'unicast';
}

const SCOPE_TEXT: Record<Exclude<Scope, 'unicast' | 'ipv4-mapped'>, string> = {
  unspecified: 'the unspecified address',
  loopback: 'a loopback address',
  multicast: 'a multicast address',
  'link-local': 'a link-local address',
  broadcast: 'the broadcast address',
  reserved: 'a reserved address (0.0.0.0/8 or 240.0.0.0/4)',
};

/** Why `s` is not an IP address, as specifically as possible. */
function notAnAddress(s: string): string {
  const base = `not an IP address: ${show(s)}`;
  const slash = s.indexOf('/');
  if (slash > 0 && parseIp(s.slice(0, slash)) !== null) {
    return `${base}: write the address without a prefix length (a VIP is always added as a /32 or /128 of its own)`;
  }
  const pct = s.indexOf('%');
  if (pct > 0 && parseIp(s.slice(0, pct)) !== null) {
    return `${base}: zone indexes are not supported (link-local addresses are on the VRRP interface)`;
  }
  if (s.startsWith('[') && s.endsWith(']') && parseIp(s.slice(1, -1)) !== null) {
    return `${base}: write the address without brackets`;
  }
  if (/^\d+(\.\d+){3}$/.test(s)) {
    const fixed = s
      .split('.')
      .map((p) => String(Number(p)))
      .join('.');
    if (parseIPv4(fixed) !== null) return `${base}: leading zeros are ambiguous (octal to some tools); write ${fixed}`;
  }
  return base;
}

type AddressRole = 'vip' | 'peer' | 'listen' | 'backend' | 'local' | 'endpoint';

/** Parses one address in a given role; returns the address or the reason it is refused. */
function checkAddress(input: unknown, role: AddressRole): Ip | string {
  if (input === null || input === undefined) return 'has no value: expected an IP address';
  if (typeof input !== 'string') return `not an IP address: ${show(input)}`;
  const ip = parseIp(input);
  if (ip === null) return notAnAddress(input);
  const scope = scopeOf(ip);
  if (scope === 'unicast') return ip;
  if (scope === 'ipv4-mapped') {
    return `${input} is an IPv4-mapped IPv6 address; write it as IPv4: ${ip.bytes.slice(12).join('.')}`;
  }
  const refused: Record<AddressRole, readonly Scope[]> = {
    vip: ['unspecified', 'loopback', 'multicast', 'link-local', 'broadcast', 'reserved'],
    // link-local peers are fine: adverts stay on the link, and IPv6 VRRP speaks from link-local
    peer: ['unspecified', 'loopback', 'multicast', 'broadcast', 'reserved'],
    // the unspecified address means "every address", which is a legitimate listen address
    listen: ['multicast', 'broadcast', 'reserved'],
    // every node DNATs to a backend, so it must be routable from all of them: no loopback, and
    // no link-local (a DNAT target has no zone)
    backend: ['unspecified', 'loopback', 'multicast', 'link-local', 'broadcast', 'reserved'],
    // only this node probes its own apiserver, so loopback is fine
    local: ['unspecified', 'multicast', 'link-local', 'broadcast', 'reserved'],
    endpoint: ['unspecified', 'multicast', 'link-local', 'broadcast', 'reserved'],
  };
  if (!refused[role].includes(scope)) return ip;
  const what = SCOPE_TEXT[scope];
  const need = {
    vip: 'a VIP must be a unicast address that clients can reach',
    peer: "a peer must be another node's unicast address (leave peers out for multicast)",
    listen: 'the admin endpoint needs a local unicast address, or 0.0.0.0 / [::] for every address',
    backend: "a backend must be an apiserver's node address that every node can reach",
    local: "the local backend must be this node's own address or a loopback address",
    endpoint: "a local endpoint must be a loopback address (or one of this node's own)",
  }[role];
  return `${input} is ${what}; ${need}`;
}

// ---------------------------------------------------------------------------------------------
// Field schemas

function intField(lo: number, hi: number, opts: ExpectOptions = {}) {
  const hint = opts.hint;
  const err = expect(`an integer from ${lo} to ${hi}`, {
    ...opts,
    hint: (v) => (hint?.(v) ?? '') + quotedNumberHint(v),
  });
  return z.int({ error: err }).min(lo, { error: err }).max(hi, { error: err });
}

interface DurationRule {
  min: number;
  max: number;
  /** Default, as written in the file. */
  default: string;
  /** The "must be …" sentence when out of range. */
  range: (ms: number) => string;
  /** Required granularity in ms, with its message. */
  step?: { ms: number; message: (ms: number) => string };
}

/** Parses a duration setting's value to ms, or says why it is refused (undefined input is not handled here). */
function durationMs(input: unknown, rule: DurationRule): number | string {
  let ms: number;
  if (input === null) {
    return `has no value: expected a duration such as "1s" or "100ms" (or delete the key to get the default, ${rule.default})`;
  } else if (typeof input === 'number') {
    if (input !== 0) return `needs a unit: write "${input}ms" or "${input}s", not the bare number ${input}`;
    ms = 0;
  } else if (typeof input === 'string') {
    try {
      ms = parseDuration(input);
    } catch (err) {
      return (err as Error).message;
    }
  } else {
    return `must be a duration such as "1s" or "100ms", got ${show(input)}`;
  }
  if (ms < rule.min || ms > rule.max) return rule.range(ms);
  if (rule.step !== undefined && ms % rule.step.ms !== 0) return rule.step.message(ms);
  return ms;
}

/**
 * `fail(message)` for a transform: records a custom issue on `input` and returns z.NEVER, so a
 * field's checks read `return fail("must be …")`.
 */
function rejecter(ctx: z.RefinementCtx, input: unknown): (message: string) => never {
  return (message) => {
    ctx.addIssue({ code: 'custom', message, input });
    return z.NEVER as never;
  };
}

/**
 * A duration setting: a string such as "100ms" or "1s" (or 0), parsed to integer ms.
 * A bare YAML number other than 0 is refused: "interval: 1" means 1 s to keepalived users
 * and 1 ms to others, and guessing wrong changes failover timing by a factor of 1000.
 */
function durationField(rule: DurationRule) {
  return z
    .unknown()
    .transform((input, ctx) => {
      const r = durationMs(input, rule);
      if (typeof r === 'string') {
        ctx.addIssue({ code: 'custom', message: r, input });
        return z.NEVER;
      }
      return r;
    })
    .prefault(rule.default);
}

/** A duration setting whose default depends on another setting: undefined when absent. */
function optionalDurationField(rule: DurationRule) {
  return z
    .unknown()
    .transform((input, ctx): number => {
      const r = durationMs(input, rule);
      if (typeof r === 'string') {
        ctx.addIssue({ code: 'custom', message: r, input });
        return z.NEVER;
      }
      return r;
    })
    .optional();
}

const rangeMessage = (lo: string, hi: string) => (ms: number) => `must be from ${lo} to ${hi}, got ${formatDuration(ms)}`;

const IFNAME = /^[^\s/:]{1,15}$/;

const interfaceField = z
  .string({
    error: expect('an interface name such as "eth0"', {
      default: 'the interface whose subnet holds the first VIP',
    }),
  })
  .superRefine((name, ctx) => {
    // the kernel's dev_valid_name(): shorter than IFNAMSIZ (16), not "." or "..", no "/", ":" or space
    if (!IFNAME.test(name) || name === '.' || name === '..') {
      ctx.addIssue({
        code: 'custom',
        message: `${show(name)} is not a valid interface name (1 to 15 characters, no "/", ":" or whitespace)`,
        input: name,
      });
    }
  })
  .optional();

const yesNoHint = (v: unknown): string =>
  typeof v === 'string' && /^(yes|no|on|off|y|n)$/i.test(v) ? ' (YAML 1.2 reads yes/no/on/off as strings)' : '';

/**
 * A list of addresses, checked as a whole so that every element's problem is reported:
 * each element parses, all are one family, none repeats.
 */
function addressList(opts: {
  role: 'vip' | 'peer';
  label: string;
  min: number;
  max: number;
  what: string;
  default?: string;
}) {
  return z
    .array(z.unknown(), { error: expect(opts.what, opts.default === undefined ? {} : { default: opts.default }) })
    .transform((list, ctx) => {
      const before = ctx.issues.length;
      const fail = (path: number[], message: string, input: unknown): void => {
        ctx.addIssue({ code: 'custom', message, path, input });
      };
      if (list.length < opts.min) fail([], `must list at least ${opts.min} address, e.g. [10.0.0.100]`, list);
      if (list.length > opts.max) fail([], `must list at most ${opts.max} addresses, got ${list.length}`, list);
      const out: string[] = [];
      let first: { index: number; family: AddressFamily } | undefined;
      const seen = new Map<string, number>();
      list.forEach((item, i) => {
        const r = checkAddress(item, opts.role);
        if (typeof r === 'string') return fail([i], r, item);
        if (first === undefined) {
          first = { index: i, family: r.family };
        } else if (opts.role === 'vip' && r.family !== first.family) {
          return fail(
            [i],
            `${String(item)} is IPv${r.family} but ${opts.label}[${first.index}] is IPv${first.family}: one VRRP group is one address family`,
            item,
          );
        }
        const prev = seen.get(r.text);
        if (prev !== undefined) {
          const same = list[prev] === item ? '' : ` (both are ${r.text})`;
          return fail([i], `${String(item)} duplicates ${opts.label}[${prev}]${same}`, item);
        }
        seen.set(r.text, i);
        out.push(r.text);
      });
      if (ctx.issues.length > before) return z.NEVER;
      return { family: first?.family ?? 4, addresses: out };
    });
}

interface HostPortRule {
  role: 'listen' | 'backend' | 'local' | 'endpoint';
  /** `e.g. "…" or "…"`, for messages. */
  example: string;
  /** Port used in the "write …" suggestion when the port is missing. */
  port: number;
  /** The message for ":port" with no host. */
  missingHost: (input: string) => string;
  /** What to write instead of a host name, e.g. `write 127.0.0.1 or [::1]`. */
  instead: string;
}

/** Parses `host:port` (IPv6 host in brackets; IP literals only) or says why it is refused. */
function parseHostPort(input: unknown, rule: HostPortRule): { ip: Ip; port: number } | string {
  const example = rule.example;
  if (typeof input !== 'string') return `must be host:port, ${example}; got ${show(input)}`;
  let host: string;
  let port: string;
  if (input.startsWith('[')) {
    const close = input.indexOf(']');
    if (close < 0) return `missing "]" after the IPv6 host, ${example}; got ${show(input)}`;
    host = input.slice(1, close);
    const rest = input.slice(close + 1);
    if (rest === '') return `missing port: write ${show(`${input}:${rule.port}`)}`;
    if (!rest.startsWith(':')) return `must be host:port, ${example}; got ${show(input)}`;
    port = rest.slice(1);
    if (parseIPv6(host) === null && parseIPv4(host) !== null) {
      return `brackets are for IPv6 hosts only: write ${show(`${host}:${port}`)}`;
    }
  } else {
    const colons = input.split(':').length - 1;
    if (colons === 0) return `missing port: write ${show(`${input}:${rule.port}`)} (host:port)`;
    if (colons > 1) return `an IPv6 host must be in brackets, ${example}; got ${show(input)}`;
    const cut = input.indexOf(':');
    host = input.slice(0, cut);
    port = input.slice(cut + 1);
    if (host === '') return rule.missingHost(input);
  }
  const ip = checkAddress(host, rule.role);
  if (typeof ip === 'string') {
    const named = parseIp(host) === null && /^[A-Za-z0-9.-]+$/.test(host);
    return named ? `host must be an IP address, got ${show(host)} (names are not resolved: ${rule.instead})` : `host: ${ip}`;
  }
  if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) {
    return `port must be an integer from 1 to 65535, got ${show(port)}`;
  }
  return { ip, port: Number(port) };
}

/** `host:port` text of an address, IPv6 in brackets. */
const hostPort = (host: string, port: number): string => (host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`);

const LISTEN_RULE: HostPortRule = {
  role: 'listen',
  example: 'e.g. "127.0.0.1:9641" or "[::1]:9641"',
  port: 9641,
  missingHost: (input) => `missing host: write "127.0.0.1${input}" (this node only) or "0.0.0.0${input}" (every address)`,
  instead: 'write 127.0.0.1 or [::1]',
};

const BACKEND_RULE: HostPortRule = {
  role: 'backend',
  example: 'e.g. "10.0.0.11:6443" or "[fd00::11]:6443"',
  port: 6443,
  missingHost: (input) => `missing host: write the apiserver's node address, e.g. "10.0.0.11${input}"`,
  instead: `write the node's address, e.g. "10.0.0.11:6443"`,
};

const LOCAL_RULE: HostPortRule = {
  ...BACKEND_RULE,
  role: 'local',
  missingHost: (input) => `missing host: write this node's address or a loopback address, e.g. "127.0.0.1${input}"`,
  instead: `write this node's address or a loopback address, e.g. "127.0.0.1:6443"`,
};

function listenField() {
  return z
    .unknown()
    .transform((input, ctx): ListenAddress => {
      const fail = rejecter(ctx, input);
      if (input === null) {
        return fail(
          `has no value: expected host:port, ${LISTEN_RULE.example} (or delete the key to get the default, ${DEFAULTS.adminListen})`,
        );
      }
      const r = parseHostPort(input, LISTEN_RULE);
      if (typeof r === 'string') return fail(r);
      return { host: r.ip.text, port: r.port };
    })
    .prefault(DEFAULTS.adminListen);
}

/**
 * apiserver.backends: a list of host:port, checked as a whole so that every element's problem
 * is reported (the family against the VIPs is a cross-section check).
 */
function backendList() {
  const what = `a list of up to ${MAX_BACKENDS} host:port entries, ${BACKEND_RULE.example}`;
  return z
    .array(z.unknown(), { error: expect(what, { default: '[] (no backends)' }) })
    .transform((list, ctx): BackendAddress[] => {
      const before = ctx.issues.length;
      const fail = (path: number[], message: string, input: unknown): void => {
        ctx.addIssue({ code: 'custom', message, path, input });
      };
      if (list.length > MAX_BACKENDS) fail([], `must list at most ${MAX_BACKENDS} backends, got ${list.length}`, list);
      const out: BackendAddress[] = [];
      const seen = new Map<string, number>();
      list.forEach((item, i) => {
        if (item === null) return fail([i], `has no value: expected host:port, ${BACKEND_RULE.example}`, item);
        const r = parseHostPort(item, BACKEND_RULE);
        if (typeof r === 'string') return fail([i], r, item);
        const key = hostPort(r.ip.text, r.port);
        const prev = seen.get(key);
        if (prev !== undefined) {
          const same = list[prev] === item ? '' : ` (both are ${key})`;
          return fail([i], `${String(item)} duplicates apiserver.backends[${prev}]${same}`, item);
        }
        seen.set(key, i);
        out.push({ host: r.ip.text, port: r.port, family: r.ip.family });
      });
      if (ctx.issues.length > before) return z.NEVER;
      return out;
    })
    .prefault([]);
}

/** policy.localBackend: host:port, or "" (the default) for "the backend whose address is on this node". */
const localBackendField = z
  .unknown()
  .transform((input, ctx): BackendAddress | undefined => {
    if (input === undefined || input === '') return undefined;
    const fail = rejecter(ctx, input);
    if (input === null) {
      return fail(`has no value: expected host:port, e.g. "127.0.0.1:6443" (or delete the key: the backend whose address is on this node)`);
    }
    const r = parseHostPort(input, LOCAL_RULE);
    if (typeof r === 'string') return fail(r);
    return { host: r.ip.text, port: r.port, family: r.ip.family };
  })
  .optional();

/**
 * An optional absolute file path; "" means not set. Whether the file exists is checked by
 * loadConfig (see files.ts), not here: validation is pure.
 */
function fileField(example: string) {
  return z
    .unknown()
    .transform((input, ctx): string | undefined => {
      if (input === undefined || input === '') return undefined;
      const fail = rejecter(ctx, input);
      if (input === null) return fail(`has no value: expected a file path such as ${show(example)} (or delete the key)`);
      if (typeof input !== 'string') return fail(`must be a file path such as ${show(example)}, got ${show(input)}`);
      if (input.includes('\0')) return fail('must not contain a NUL character');
      if (!input.startsWith('/')) {
        return fail(
          `must be an absolute path, got ${show(input)} (a relative path would depend on the agent's working directory)`,
        );
      }
      return input;
    })
    .optional();
}

const DNS_NAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** apiserver.health.serverName: a DNS name or an IP literal; "" = verify the backend's own IP. */
const serverNameField = z
  .unknown()
  .transform((input, ctx): string | undefined => {
    if (input === undefined || input === '') return undefined;
    const fail = rejecter(ctx, input);
    const what = 'a DNS name or IP address that the apiservers\' certificates carry, e.g. "kubernetes"';
    if (input === null) return fail(`has no value: expected ${what} (or delete the key to verify each backend's IP address)`);
    if (typeof input !== 'string') return fail(`must be ${what}, got ${show(input)}`);
    const ip = parseIp(input);
    if (ip !== null) return ip.text;
    if (input.startsWith('*')) return fail(`must be one name, not a wildcard, got ${show(input)}`);
    if (!DNS_NAME.test(input)) return fail(`must be ${what}, got ${show(input)}`);
    return input;
  })
  .optional();

/** apiserver.health.path: an absolute request path (a query is allowed). */
const healthPathField = z
  .unknown()
  .transform((input, ctx): string => {
    const fail = rejecter(ctx, input);
    if (input === null) {
      return fail(`has no value: expected a request path such as "/readyz" (or delete the key to get the default, ${DEFAULTS.healthPath})`);
    }
    if (typeof input !== 'string') return fail(`must be a request path such as "/readyz", got ${show(input)}`);
    if (!input.startsWith('/')) return fail(`must start with "/", e.g. "/readyz", got ${show(input)}`);
    if (/[\s\x00-\x1f\x7f]/.test(input)) return fail(`must not contain spaces or control characters (percent-encode them), got ${show(input)}`);
    if (input.includes('#')) return fail(`must not contain a fragment ("#…"): it is never sent to the server, got ${show(input)}`);
    if (input.length > 1024) return fail(`must be at most 1024 characters, got ${input.length}`);
    return input;
  })
  .prefault(DEFAULTS.healthPath);

// ---------------------------------------------------------------------------------------------
// Sections

const mappingError = expect('a mapping of settings (key: value)');

/** A section whose every setting has a default: absent or empty (`announce:`) means all defaults. */
function section<T extends z.ZodType>(schema: T) {
  return z.preprocess((v) => v ?? {}, schema);
}

/** `vrrp.auth`; an absent or empty keyFile is reported by {@link authIssues}. */
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
    range: (ms) =>
      `must be from 10ms to 40950ms (RFC 9568 Max Adver Int is 12 bits of centiseconds), got ${ms}ms`,
    step: {
      ms: 10,
      message: (ms) => `must be a multiple of 10ms (RFC 9568 Max Adver Int is in centiseconds), got ${ms}ms`,
    },
  }),
  preempt: z
    .boolean({ error: expect('true or false', { default: 'true', hint: yesNoHint }) })
    .default(DEFAULTS.preempt),
  preemptDelay: durationField({
    min: 0,
    max: HOUR_MS,
    default: DEFAULTS.preemptDelay,
    range: rangeMessage('0s', '1h'),
  }),
  peers: addressList({
    role: 'peer',
    label: 'vrrp.peers',
    min: 0,
    max: Number.MAX_SAFE_INTEGER,
    what: 'a list of IP addresses (leave it out for multicast)',
    default: 'absent (multicast)',
  }).optional(),
  singleNode: z
    .boolean({ error: expect('true or false', { default: 'false', hint: yesNoHint }) })
    .default(false),
  checksum: z
    .enum(['rfc5798', 'rfc9568'], { error: expect('"rfc5798" or "rfc9568"', { default: DEFAULTS.checksum }) })
    .default(DEFAULTS.checksum),
  auth: z.strictObject(authShape, { error: mappingError }).optional(),
};

const announceShape = {
  count: intField(1, 100, { default: String(DEFAULTS.announceCount) }).default(DEFAULTS.announceCount),
  spacing: durationField({ min: 0, max: 1000, default: DEFAULTS.announceSpacing, range: rangeMessage('0ms', '1s') }),
  repeatAfter: durationField({
    min: 0,
    max: HOUR_MS,
    default: DEFAULTS.announceRepeatAfter,
    range: rangeMessage('0s (no second burst)', '1h'),
  }),
  refresh: durationField({
    min: 0,
    max: HOUR_MS,
    default: DEFAULTS.announceRefresh,
    range: rangeMessage('0s (off)', '1h'),
  }),
};

/** vipLifetime: 0 (permanent) or 2s..1h; the kernel ages addresses in whole seconds. */
const vipLifetimeField = durationField({
  min: 0,
  max: HOUR_MS,
  default: DEFAULTS.vipLifetime,
  range: rangeMessage('0s (permanent)', '1h'),
  step: { ms: 1000, message: (ms) => `must be whole seconds (the kernel ages addresses in seconds), got ${formatDuration(ms)}` },
}).refine((ms) => ms === 0 || ms >= 2000, { message: 'must be 0s (permanent) or at least 2s: the agent renews it every third of it' });

const HEALTH_INTERVAL: DurationRule = {
  min: 100,
  max: MINUTE_MS,
  default: DEFAULTS.healthInterval,
  range: rangeMessage('100ms', '1m'),
};
const HEALTH_TIMEOUT: DurationRule = {
  min: 50,
  max: MINUTE_MS,
  default: `${DEFAULTS.healthTimeout}, or the interval if that is shorter`,
  range: rangeMessage('50ms', '1m'),
};

const healthShape = {
  path: healthPathField,
  caFile: fileField('/etc/kubernetes/pki/ca.crt'),
  serverName: serverNameField,
  insecureSkipVerify: z
    .boolean({ error: expect('true or false', { default: String(DEFAULTS.healthInsecureSkipVerify), hint: yesNoHint }) })
    .default(DEFAULTS.healthInsecureSkipVerify),
  clientCertFile: fileField('/etc/ballast/health.crt'),
  clientKeyFile: fileField('/etc/ballast/health.key'),
  tokenFile: fileField('/etc/ballast/health.token'),
  interval: durationField(HEALTH_INTERVAL),
  timeout: optionalDurationField(HEALTH_TIMEOUT),
  rise: intField(1, 10, { default: String(DEFAULTS.healthRise) }).default(DEFAULTS.healthRise),
  fall: intField(1, 10, { default: String(DEFAULTS.healthFall) }).default(DEFAULTS.healthFall),
};

const apiserverShape = {
  port: intField(1, 65535, { default: String(DEFAULTS.apiserverPort) }).default(DEFAULTS.apiserverPort),
  backends: backendList(),
  health: section(z.strictObject(healthShape, { error: mappingError })),
};

const dataplaneShape = {
  vip: z
    .enum(['nftables', 'none'], {
      error: expect('"nftables" or "none" (VIP only, no load balancing)', { default: DEFAULTS.dataplaneVip }),
    })
    .default(DEFAULTS.dataplaneVip),
  local: z
    .enum(['ebpf', 'proxy', 'off'], {
      error: expect('"ebpf", "proxy" or "off"', { default: DEFAULTS.dataplaneLocal }),
    })
    .default(DEFAULTS.dataplaneLocal),
  keepOnStop: z
    .boolean({ error: expect('true or false', { default: String(DEFAULTS.dataplaneKeepOnStop), hint: yesNoHint }) })
    .default(DEFAULTS.dataplaneKeepOnStop),
};

const policyShape = {
  unhealthyPriorityWeight: intField(0, 254, {
    default: String(DEFAULTS.unhealthyPriorityWeight),
    hint: (v) => (v === 255 ? ' (the effective priority never goes below 1, so 254 already takes any priority to 1)' : ''),
  }).default(DEFAULTS.unhealthyPriorityWeight),
  localBackend: localBackendField,
};

const LOCAL_ENDPOINT_RULE: HostPortRule = {
  role: 'endpoint',
  example: 'e.g. "127.0.0.1:7443" or "[::1]:7443"',
  port: 7443,
  missingHost: (input) => `missing host: write a loopback address, e.g. "127.0.0.1${input}"`,
  instead: 'write 127.0.0.1 or [::1]',
};

/** localEndpoint.address: one host:port or a list of 1..4 (one per family is the usual). */
const localEndpointAddressField = z
  .unknown()
  .transform((input, ctx): BackendAddress[] => {
    const fail = rejecter(ctx, input);
    const list = Array.isArray(input) ? input : [input];
    if (input === null || list.length === 0 || list.length > 4) {
      return fail(`expected host:port or a list of 1 to 4 of them, ${LOCAL_ENDPOINT_RULE.example} (default ${DEFAULTS.localEndpoint})`);
    }
    const out: BackendAddress[] = [];
    const before = ctx.issues.length;
    list.forEach((item, i) => {
      const path = Array.isArray(input) ? [i] : [];
      const r = parseHostPort(item, LOCAL_ENDPOINT_RULE);
      if (typeof r === 'string') {
        ctx.addIssue({ code: 'custom', message: r, path, input: item });
      } else if (out.some((o) => o.host === r.ip.text && o.port === r.port)) {
        ctx.addIssue({ code: 'custom', message: `${String(item)} is listed twice`, path, input: item });
      } else {
        out.push({ host: r.ip.text, port: r.port, family: r.ip.family });
      }
    });
    return ctx.issues.length > before ? z.NEVER : out;
  })
  .prefault(DEFAULTS.localEndpoint);

const localEndpointShape = {
  address: localEndpointAddressField,
  force: z
    .boolean({ error: expect('true or false', { default: 'false', hint: yesNoHint }) })
    .default(false),
  cgroup: fileField('/sys/fs/cgroup'),
};

const adminShape = { listen: listenField() };

const logShape = {
  level: z
    .enum(LOG_LEVELS, {
      error: expect(`${LOG_LEVELS.slice(0, -1).join(', ')} or ${LOG_LEVELS.at(-1)}`, { default: DEFAULTS.logLevel }),
    })
    .default(DEFAULTS.logLevel),
};

const rootShape = {
  interface: interfaceField,
  // absent: no election (a node that only serves the local endpoint); `vrrp:` with nothing under it is an empty section
  vrrp: z.preprocess((v) => (v === null ? {} : v), z.strictObject(vrrpShape, { error: mappingError }).optional()),
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
  localEndpoint: z.preprocess((v) => (v === null ? {} : v), z.strictObject(localEndpointShape, { error: mappingError }).optional()),
  policy: section(z.strictObject(policyShape, { error: mappingError })),
  admin: section(z.strictObject(adminShape, { error: mappingError })),
  log: section(z.strictObject(logShape, { error: mappingError })),
};

/** The known keys of each section, by the section's dotted path ('' = top level), in declaration order. */
const SECTION_KEYS: Readonly<Record<string, readonly string[]>> = {
  '': Object.keys(rootShape),
  vrrp: Object.keys(vrrpShape),
  'vrrp.auth': Object.keys(authShape),
  announce: Object.keys(announceShape),
  apiserver: Object.keys(apiserverShape),
  'apiserver.health': Object.keys(healthShape),
  dataplane: Object.keys(dataplaneShape),
  localEndpoint: Object.keys(localEndpointShape),
  policy: Object.keys(policyShape),
  admin: Object.keys(adminShape),
  log: Object.keys(logShape),
};

/** The leaf settings under the section at `prefix` ('' = top level), depth first. */
function leaves(prefix: string): string[] {
  return (SECTION_KEYS[prefix] ?? []).flatMap((k) => {
    const path = prefix === '' ? k : `${prefix}.${k}`;
    return SECTION_KEYS[path] === undefined ? [path] : leaves(path);
  });
}

/** Every setting's path, in declaration order: "interface", "vrrp.vrid", …, "apiserver.health.path", …, "log.level". */
export const CONFIG_FIELDS: readonly string[] = Object.freeze(leaves(''));

/** The health section as the schema parsed it, normalized: unset files absent, durations in ms. */
function normalizeHealth(h: {
  path: string;
  caFile?: string | undefined;
  serverName?: string | undefined;
  insecureSkipVerify: boolean;
  clientCertFile?: string | undefined;
  clientKeyFile?: string | undefined;
  tokenFile?: string | undefined;
  interval: number;
  timeout?: number | undefined;
  rise: number;
  fall: number;
}): HealthConfig {
  const optional = <K extends string>(key: K, v: string | undefined) => (v === undefined ? {} : { [key]: v });
  return {
    path: h.path,
    ...optional('caFile', h.caFile),
    ...optional('serverName', h.serverName),
    insecureSkipVerify: h.insecureSkipVerify,
    ...optional('clientCertFile', h.clientCertFile),
    ...optional('clientKeyFile', h.clientKeyFile),
    ...optional('tokenFile', h.tokenFile),
    intervalMs: h.interval,
    // a probe must end before the next one is due: an unset timeout never exceeds the interval
    timeoutMs: h.timeout ?? Math.min(parseDuration(DEFAULTS.healthTimeout), h.interval),
    rise: h.rise,
    fall: h.fall,
    // every backend checked `rise` (or `fall`) times, plus one interval of jitter and a timeout
    settleMs: (Math.max(h.rise, h.fall) + 1) * h.interval + (h.timeout ?? Math.min(parseDuration(DEFAULTS.healthTimeout), h.interval)),
  };
}

const rootError = (iss: { readonly input?: unknown }): string =>
  iss.input === null || iss.input === undefined
    ? 'the file is empty; at least vrrp.vrid and vips (an election), or localEndpoint and apiserver.backends, are required'
    : `the top level must be a mapping of settings (key: value), got ${show(iss.input)}`;

/** The zod schema of a config file's content (after YAML parsing), producing a {@link Config}. */
export const configSchema = z.strictObject(rootShape, { error: rootError }).transform(
  (c): Config => ({
    ...(c.interface === undefined ? {} : { interface: c.interface }),
    family: c.vips?.family ?? c.apiserver.backends[0]?.family ?? 4,
    vrrp:
      c.vrrp === undefined
        ? null
        : {
            vrid: c.vrrp.vrid,
            priority: c.vrrp.priority,
            advertisementIntervalMs: c.vrrp.advertisementInterval,
            advertisementIntervalCs: c.vrrp.advertisementInterval / 10,
            preempt: c.vrrp.preempt,
            preemptDelayMs: c.vrrp.preemptDelay,
            unicast: c.vrrp.peers !== undefined || c.vrrp.singleNode,
            peers: c.vrrp.peers?.addresses ?? [],
            checksum: c.vrrp.checksum,
            owner: c.vrrp.priority === 255,
            auth: c.vrrp.auth?.keyFile === undefined ? null : { keyFile: c.vrrp.auth.keyFile },
          },
    vips: c.vips?.addresses ?? [],
    vipLifetimeMs: c.vipLifetime,
    announce: {
      count: c.announce.count,
      spacingMs: c.announce.spacing,
      repeatAfterMs: c.announce.repeatAfter,
      refreshMs: c.announce.refresh,
    },
    apiserver: {
      port: c.apiserver.port,
      backends: c.apiserver.backends,
      health: normalizeHealth(c.apiserver.health),
    },
    dataplane: { vip: c.dataplane.vip, local: c.dataplane.local, keepOnStop: c.dataplane.keepOnStop },
    localEndpoint:
      c.localEndpoint === undefined
        ? null
        : {
            addresses: c.localEndpoint.address,
            force: c.localEndpoint.force,
            ...(c.localEndpoint.cgroup === undefined ? {} : { cgroup: c.localEndpoint.cgroup }),
          },
    policy: {
      unhealthyPriorityWeight: c.policy.unhealthyPriorityWeight,
      ...(c.policy.localBackend === undefined ? {} : { localBackend: c.policy.localBackend }),
    },
    admin: { listen: c.admin.listen },
    log: { level: c.log.level },
  }),
);

// ---------------------------------------------------------------------------------------------
// Checks across sections

type Segment = string | number;
interface RawIssue {
  path: Segment[];
  message: string;
  /** the problem is the key itself (unknown key), not its value */
  atKey?: boolean;
}

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** The VIPs of the raw input that parse: their family (of the first) and index by canonical text. */
function rawVips(raw: Record<string, unknown>): { family: AddressFamily; index: Map<string, number> } | undefined {
  if (!Array.isArray(raw.vips)) return undefined;
  const index = new Map<string, number>();
  let family: AddressFamily | undefined;
  raw.vips.forEach((v, i) => {
    const ip = checkAddress(v, 'vip');
    if (typeof ip === 'string') return;
    family ??= ip.family;
    if (!index.has(ip.text)) index.set(ip.text, i);
  });
  return family === undefined ? undefined : { family, index };
}

/** Peers against VIPs: same family, not a VIP. */
function peerIssues(raw: Record<string, unknown>, vips: { family: AddressFamily; index: Map<string, number> }): RawIssue[] {
  if (!isRecord(raw.vrrp) || !Array.isArray(raw.vrrp.peers)) return [];
  const fam = vips.family;
  const out: RawIssue[] = [];
  const seen = new Set<string>();
  raw.vrrp.peers.forEach((p, i) => {
    const ip = checkAddress(p, 'peer');
    // bad addresses and repeats already have their own issue from the peers list itself
    if (typeof ip === 'string' || seen.has(ip.text)) return;
    seen.add(ip.text);
    const path = ['vrrp', 'peers', i];
    if (ip.family !== fam) {
      out.push({
        path,
        message: `${String(p)} is IPv${ip.family} but the VIPs are IPv${fam}: peers must be the same family as the VIPs`,
      });
    } else if (vips.index.has(ip.text)) {
      out.push({
        path,
        message: `${String(p)} is a VIP (vips[${vips.index.get(ip.text)}]); peers are the other nodes' own addresses`,
      });
    }
  });
  return out;
}

/** Backends against VIPs: same family (DNAT does not translate families), not a VIP. */
function backendIssues(raw: Record<string, unknown>, vips: { family: AddressFamily; index: Map<string, number> }): RawIssue[] {
  if (!isRecord(raw.apiserver) || !Array.isArray(raw.apiserver.backends)) return [];
  const out: RawIssue[] = [];
  const seen = new Set<string>();
  // a local endpoint of the other family balances to that family's backends (the VIP's DNAT skips them)
  const endpointFamilies = new Set<AddressFamily>();
  if (raw.localEndpoint !== undefined) {
    const le = isRecord(raw.localEndpoint) ? raw.localEndpoint : {};
    const list = Array.isArray(le.address) ? le.address : [le.address ?? DEFAULTS.localEndpoint];
    for (const a of list) {
      const r = parseHostPort(a, LOCAL_ENDPOINT_RULE);
      if (typeof r !== 'string') endpointFamilies.add(r.ip.family);
    }
  }
  raw.apiserver.backends.forEach((b, i) => {
    const r = parseHostPort(b, BACKEND_RULE);
    // bad entries and repeats already have their own issue from the list itself
    if (typeof r === 'string') return;
    const key = hostPort(r.ip.text, r.port);
    if (seen.has(key)) return;
    seen.add(key);
    const path = ['apiserver', 'backends', i];
    if (r.ip.family !== vips.family && !endpointFamilies.has(r.ip.family)) {
      out.push({
        path,
        message: `${String(b)} is IPv${r.ip.family} but the VIPs are IPv${vips.family}: backends must be the same family as the VIPs (the VIP's traffic is forwarded without translating families), unless a localEndpoint address of that family uses them`,
      });
    } else if (vips.index.has(r.ip.text)) {
      out.push({
        path,
        message: `${r.ip.text} is a VIP (vips[${vips.index.get(r.ip.text)}]); backends are the apiservers' own node addresses`,
      });
    }
  });
  return out;
}

/** A setting that is set to a non-empty value ("" and absence both mean "not set"). */
const isSet = (v: unknown): boolean => v !== undefined && v !== '';

/** Settings of apiserver.health that depend on each other or on the backends. */
function healthIssues(raw: Record<string, unknown>): RawIssue[] {
  const apiserver = isRecord(raw.apiserver) ? raw.apiserver : {};
  const health = isRecord(apiserver.health) ? apiserver.health : {};
  const at = (key: string): Segment[] => ['apiserver', 'health', key];
  const out: RawIssue[] = [];

  if (health.timeout !== undefined) {
    const timeout = durationMs(health.timeout, HEALTH_TIMEOUT);
    const interval = health.interval === undefined ? parseDuration(DEFAULTS.healthInterval) : durationMs(health.interval, HEALTH_INTERVAL);
    // a bad value of either has its own issue
    if (typeof timeout === 'number' && typeof interval === 'number' && timeout > interval) {
      out.push({
        path: at('timeout'),
        message: `must be at most apiserver.health.interval (${formatDuration(interval)}), got ${formatDuration(timeout)}: a check must end before the next one is due`,
      });
    }
  }

  const backends = Array.isArray(apiserver.backends) ? apiserver.backends.length : 0;
  if (backends > 0 && health.insecureSkipVerify !== true && !isSet(health.caFile)) {
    out.push({
      path: at('caFile'),
      message:
        "required when apiserver.backends is not empty: the CA that signed the apiservers' serving certificates, e.g. /etc/kubernetes/pki/ca.crt (or set insecureSkipVerify: true, for tests only)",
    });
  }

  const cert = isSet(health.clientCertFile);
  const key = isSet(health.clientKeyFile);
  if (cert && !key) {
    out.push({ path: at('clientKeyFile'), message: 'required when apiserver.health.clientCertFile is set: the private key of that certificate' });
  } else if (key && !cert) {
    out.push({ path: at('clientCertFile'), message: 'required when apiserver.health.clientKeyFile is set: the certificate of that key' });
  }
  return out;
}

/**
 * Checks that span settings. They run on the raw input rather than inside zod, so they report
 * even when another setting is wrong (zod skips refinements once a field has failed).
 */
function crossSectionIssues(raw: unknown): RawIssue[] {
  if (!isRecord(raw)) return [];
  const vips = rawVips(raw);
  return [...roleIssues(raw), ...localEndpointIssues(raw), ...unicastIssues(raw), ...authIssues(raw), ...(vips === undefined ? [] : [...peerIssues(raw, vips), ...backendIssues(raw, vips)]), ...healthIssues(raw)];
}

/**
 * What the node does: an election (`vrrp` with `vips`), a local endpoint, or both. `vips`
 * belongs to `vrrp`: one without the other is an error.
 */
function roleIssues(raw: Record<string, unknown>): RawIssue[] {
  const election = raw.vrrp !== undefined;
  if (election && raw.vips === undefined) {
    return [{ path: ['vips'], message: `required: a list of 1 to ${MAX_VIPS} IP addresses of one family, e.g. [10.0.0.100] (the addresses vrrp elects a holder for)` }];
  }
  if (!election && raw.vips !== undefined) {
    return [{ path: ['vips'], message: 'is set but vrrp is absent: VIPs need an election; add vrrp (at least vrrp.vrid), or remove vips on a node that only serves the local endpoint' }];
  }
  if (!election && raw.localEndpoint === undefined) {
    return [{ path: ['vrrp'], message: 'required: vrrp.vrid and vips (an election for the VIPs), or localEndpoint with apiserver.backends (a node-local API endpoint), or both' }];
  }
  return [];
}

/** The local endpoint needs backends, and backends of each endpoint's family. */
function localEndpointIssues(raw: Record<string, unknown>): RawIssue[] {
  if (raw.localEndpoint === undefined) return [];
  const apiserver = isRecord(raw.apiserver) ? raw.apiserver : {};
  const backends = Array.isArray(apiserver.backends) ? apiserver.backends : [];
  if (backends.length === 0) {
    return [{ path: ['localEndpoint'], message: 'needs apiserver.backends: the apiservers the endpoint balances to' }];
  }
  const families = new Set<AddressFamily>();
  for (const b of backends) {
    const r = parseHostPort(b, BACKEND_RULE);
    if (typeof r !== 'string') families.add(r.ip.family);
  }
  const le = isRecord(raw.localEndpoint) ? raw.localEndpoint : {};
  const list = Array.isArray(le.address) ? le.address : le.address === undefined ? [DEFAULTS.localEndpoint] : [le.address];
  const out: RawIssue[] = [];
  const backendKeys = new Set<string>();
  for (const b of backends) {
    const r = parseHostPort(b, BACKEND_RULE);
    if (typeof r !== 'string') backendKeys.add(hostPort(r.ip.text, r.port));
  }
  list.forEach((a, i) => {
    const r = parseHostPort(a, LOCAL_ENDPOINT_RULE);
    const path = Array.isArray(le.address) ? ['localEndpoint', 'address', i] : ['localEndpoint', 'address'];
    if (typeof r !== 'string' && backendKeys.has(hostPort(r.ip.text, r.port))) {
      out.push({ path, message: `${String(a)} is one of apiserver.backends: connect()s to that apiserver (the health checks' too) would be balanced away from it; use a loopback address such as 127.0.0.1:7443` });
      return;
    }
    // a malformed address has its own issue; no backend parsed: the backends have theirs
    if (typeof r === 'string' || families.size === 0 || families.has(r.ip.family)) return;
    out.push({
      path,
      message: `${String(a)} is IPv${r.ip.family} but no apiserver.backends entry is: an endpoint balances to backends of its own family`,
    });
  });
  return out;
}

/** `vrrp.auth` without a key file (a required setting inside an optional section). */
function authIssues(raw: Record<string, unknown>): RawIssue[] {
  if (!isRecord(raw.vrrp) || !isRecord(raw.vrrp.auth)) return [];
  const k = raw.vrrp.auth.keyFile;
  if (k !== undefined && k !== '') return [];
  return [{ path: ['vrrp', 'auth', 'keyFile'], message: 'is required: the file holding the shared key (or remove vrrp.auth to turn authentication off)' }];
}

/**
 * Unicast with nobody to send to: `peers: []` would hold the VIP alone without saying so, so it
 * must be asked for with `singleNode: true`; and a single node has no peers.
 */
function unicastIssues(raw: Record<string, unknown>): RawIssue[] {
  if (!isRecord(raw.vrrp)) return [];
  const { peers, singleNode } = raw.vrrp;
  if (Array.isArray(peers) && peers.length === 0 && singleNode !== true) {
    return [
      {
        path: ['vrrp', 'peers'],
        message:
          'is empty: unicast with no peers sends adverts to nobody and this node holds the VIP alone; list the other nodes, remove vrrp.peers for multicast, or set vrrp.singleNode: true if this group really has one node',
      },
    ];
  }
  if (singleNode === true && Array.isArray(peers) && peers.length > 0) {
    return [{ path: ['vrrp', 'singleNode'], message: `is true but vrrp.peers lists ${peers.length} address${peers.length === 1 ? '' : 'es'}: a single node has no peers; remove one of the two` }];
  }
  return [];
}

// ---------------------------------------------------------------------------------------------
// Unknown keys: say which, and suggest the key that was probably meant

/** Names from keepalived.conf and other spellings people bring with them, normalized. */
const ALIASES: Readonly<Record<string, string>> = {
  virtualrouterid: 'vrrp.vrid',
  advertint: 'vrrp.advertisementInterval',
  nopreempt: 'vrrp.preempt',
  unicastpeer: 'vrrp.peers',
  unicastpeers: 'vrrp.peers',
  virtualipaddress: 'vips',
  virtualipaddresses: 'vips',
  addresses: 'vips',
  // a VIP list, not dataplane.vip, when written at the top level
  vip: 'vips',
  garpmasterrepeat: 'announce.count',
  garpmasterdelay: 'announce.repeatAfter',
  garpinterval: 'announce.spacing',
  loglevel: 'log.level',
  // haproxy, keepalived (real_server, delay_loop, track_script weight) and kubeconfig spellings
  inter: 'apiserver.health.interval',
  delayloop: 'apiserver.health.interval',
  realserver: 'apiserver.backends',
  servers: 'apiserver.backends',
  endpoints: 'apiserver.backends',
  weight: 'policy.unhealthyPriorityWeight',
  ca: 'apiserver.health.caFile',
  cacert: 'apiserver.health.caFile',
  certificateauthority: 'apiserver.health.caFile',
  clientcertificate: 'apiserver.health.clientCertFile',
  clientkey: 'apiserver.health.clientKeyFile',
  token: 'apiserver.health.tokenFile',
  tlsservername: 'apiserver.health.serverName',
  sni: 'apiserver.health.serverName',
  insecure: 'apiserver.health.insecureSkipVerify',
  insecureskiptlsverify: 'apiserver.health.insecureSkipVerify',
};

const normalizeKey = (k: string): string => k.toLowerCase().replace(/[-_\s]/g, '');

/** Optimal string alignment distance (Levenshtein plus adjacent transpositions). */
function editDistance(a: string, b: string): number {
  const rows: number[][] = [];
  for (let i = 0; i <= a.length; i++) {
    const row: number[] = [i];
    for (let j = 1; j <= b.length; j++) {
      if (i === 0) {
        row.push(j);
        continue;
      }
      const prev = rows[i - 1] ?? [];
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min((prev[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        d = Math.min(d, (rows[i - 2]?.[j - 2] ?? 0) + 1);
      }
      row.push(d);
    }
    rows.push(row);
  }
  return rows[a.length]?.[b.length] ?? 0;
}

function unknownKeyMessage(section: string, key: string): string {
  const here = SECTION_KEYS[section] ?? [];
  const all = Object.entries(SECTION_KEYS).flatMap(([s, keys]) => keys.map((k) => ({ section: s, key: k })));
  const display = (t: { section: string; key: string }): string => {
    if (t.section === section) return `'${t.key}'`;
    if (t.section === '') return `the top-level key '${t.key}'`;
    return `'${t.section}.${t.key}'`;
  };
  const norm = normalizeKey(key);
  const local = all.filter((t) => t.section === section);
  const elsewhere = all.filter((t) => t.section !== section);
  const byName = (list: typeof all) => list.find((t) => normalizeKey(t.key) === norm);
  const byDistance = (list: typeof all) => {
    const limit = norm.length <= 4 ? 1 : norm.length <= 10 ? 2 : 3;
    let best: (typeof all)[number] | undefined;
    let bestD = limit + 1;
    for (const t of list) {
      const d = editDistance(norm, normalizeKey(t.key));
      if (d < bestD) {
        best = t;
        bestD = d;
      }
    }
    return best;
  };
  const alias = ALIASES[norm];
  const aliasTarget =
    alias === undefined
      ? undefined
      : alias.includes('.')
        ? { section: alias.slice(0, alias.lastIndexOf('.')), key: alias.slice(alias.lastIndexOf('.') + 1) }
        : { section: '', key: alias };
  const guess = byName(local) ?? aliasTarget ?? byName(elsewhere) ?? byDistance(local) ?? byDistance(elsewhere);
  if (guess !== undefined) return `unknown key (did you mean ${display(guess)}?)`;
  return `unknown key (expected one of: ${here.join(', ')})`;
}

// ---------------------------------------------------------------------------------------------
// Putting it together

/** Finds where a path is in the source text; used to add line numbers to issues. */
export type Locator = (
  path: readonly Segment[],
  atKey: boolean,
) => { readonly line: number; readonly column: number } | undefined;

/** Renders a path the way it looks in the file: `vrrp.peers[0]`, `vips`, `(document)`. */
function formatPath(path: readonly Segment[]): string {
  if (path.length === 0) return DOCUMENT_PATH;
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else if (/^[A-Za-z_][\w-]*$/.test(seg)) out += out === '' ? seg : `.${seg}`;
    else out += `[${JSON.stringify(seg)}]`;
  }
  return out;
}

/** Sort key: declaration order of the settings, then list index; unknown keys after known ones. */
function compareIssues(a: RawIssue, b: RawIssue): number {
  const n = Math.min(a.path.length, b.path.length);
  for (let i = 0; i < n; i++) {
    const x = a.path[i];
    const y = b.path[i];
    if (x === y) continue;
    if (typeof x === 'number' && typeof y === 'number') return x - y;
    const keys = SECTION_KEYS[a.path.slice(0, i).join('.')] ?? [];
    const rank = (s: Segment | undefined): number => {
      const r = keys.indexOf(String(s));
      return r < 0 ? keys.length : r;
    };
    return rank(x) - rank(y);
  }
  return a.path.length - b.path.length;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/**
 * Validates an already-parsed configuration value (what YAML parsing of the file gives, or
 * an object the CLI assembled) and returns the normalized, deep-frozen {@link Config}.
 * Pure: touches nothing on the system, unless `options.files` is given.
 *
 * Durations become integer milliseconds (`…Ms` fields) and the advertisement interval also
 * centiseconds (`advertisementIntervalCs`); IPv6 addresses become canonical (RFC 5952);
 * backends become `{ host, port, family }`; unset optional strings ("" or absent) are absent.
 *
 * @param value the configuration; never modified.
 * @param options.source file path or other origin, for messages.
 * @param options.locate maps a path to a line and column in the source text (parseConfig
 *   passes one; without it issues carry no line numbers).
 * @param options.files when given, the files named by apiserver.health (caFile,
 *   clientCertFile, clientKeyFile, tokenFile) are read through it and checked; a missing or
 *   malformed file is an issue on its setting. Without it, files are not looked at.
 * @throws ConfigError (code BALLAST_E_CONFIG) listing every problem found, in declaration order.
 */
export function validateConfig(
  value: unknown,
  options: { source?: string; locate?: Locator; files?: ConfigFiles } = {},
): Config {
  const result = configSchema.safeParse(value);
  const raw: RawIssue[] = [];
  if (!result.success) {
    for (const iss of result.error.issues) {
      const path = iss.path.map((s) => (typeof s === 'number' ? s : String(s)));
      if (iss.code === 'unrecognized_keys') {
        const section = path.join('.');
        for (const key of iss.keys) {
          raw.push({ path: [...path, key], message: unknownKeyMessage(section, key), atKey: true });
        }
      } else {
        raw.push({ path, message: iss.message });
      }
    }
  }
  raw.push(...crossSectionIssues(value));
  if (options.files !== undefined) raw.push(...fileIssues(value, options.files));
  if (!result.success || raw.length > 0) {
    raw.sort(compareIssues);
    const issues = raw.map((r): ConfigIssue => {
      const at = options.locate?.(r.path, r.atKey === true);
      const base = { path: formatPath(r.path), message: r.message };
      return at === undefined ? base : { ...base, line: at.line, column: at.column };
    });
    throw new ConfigError(issues, { source: options.source });
  }
  return deepFreeze(result.data);
}
