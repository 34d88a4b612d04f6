/**
 * The configuration schema: what a ballast config file may say, its defaults, and the
 * normalized, frozen {@link Config} every other module receives.
 *
 * Validation is pure (no interface lookups, no DNS, no files) and reports every problem at
 * once, each with the path of its setting and a reason written for an operator. Steps:
 *   1. zod checks each setting (strict objects: unknown keys are errors, with a suggestion);
 *   2. checks that span sections (peers against VIPs) run on the raw input, so that they
 *      are reported even when an unrelated setting is also wrong;
 *   3. issues are sorted in the order the settings are declared, then thrown as one
 *      ConfigError; or the normalized object is deep-frozen and returned.
 */
import { z } from 'zod';
import { ConfigError, DOCUMENT_PATH, type ConfigIssue } from '../errors.js';
import { formatDuration, parseDuration } from './duration.js';

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
  /** Unicast peers (canonical text, same family as the VIPs); empty = multicast. */
  readonly peers: readonly string[];
  /** Checksum rule for adverts. */
  readonly checksum: ChecksumMode;
}

/** The `announce` section (gratuitous ARP / unsolicited NA on becoming Active), normalized. */
export interface AnnounceConfig {
  /** Packets per burst (per VIP), 1..100. */
  readonly count: number;
  /** Gap between the packets of a burst, in milliseconds: 0..1000. */
  readonly spacingMs: number;
  /** Delay from the first burst to a second one, in milliseconds: 0..3600000; 0 = no second burst. */
  readonly repeatAfterMs: number;
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

/** The validated, normalized, deep-frozen configuration. */
export interface Config {
  /**
   * Interface to run VRRP on. Absent (undefined) when not configured: the agent then uses the
   * interface whose subnet holds vips[0], resolved at run time.
   */
  readonly interface?: string;
  /** Address family of the VIPs (and of the peers and the VRRP group). */
  readonly family: AddressFamily;
  readonly vrrp: VrrpConfig;
  /** Virtual IP addresses, 1..16, one family, canonical text (IPv6 per RFC 5952), no duplicates. */
  readonly vips: readonly string[];
  readonly announce: AnnounceConfig;
  readonly admin: AdminConfig;
  readonly log: LogConfig;
}

// ---------------------------------------------------------------------------------------------
// Limits and defaults

/** Advertisement_Interval limits, ms: Max Adver Int is a 12-bit count of centiseconds. */
export const ADVERTISEMENT_INTERVAL_MIN_MS = 10;
export const ADVERTISEMENT_INTERVAL_MAX_MS = 40_950;
export const MAX_VIPS = 16;
const HOUR_MS = 3_600_000;

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
    return `${base}: write the address without a prefix length (the prefix comes from the interface's subnet)`;
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

type AddressRole = 'vip' | 'peer' | 'listen';

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
  };
  if (!refused[role].includes(scope)) return ip;
  const what = SCOPE_TEXT[scope];
  const need = {
    vip: 'a VIP must be a unicast address that clients can reach',
    peer: "a peer must be another node's unicast address (leave peers empty for multicast)",
    listen: 'the admin endpoint needs a local unicast address, or 0.0.0.0 / [::] for every address',
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

/**
 * A duration setting: a string such as "100ms" or "1s" (or 0), parsed to integer ms.
 * A bare YAML number other than 0 is refused: "interval: 1" means 1 s to keepalived users
 * and 1 ms to others, and guessing wrong changes failover timing by a factor of 1000.
 */
function durationField(rule: DurationRule) {
  return z
    .unknown()
    .transform((input, ctx) => {
      const fail = (message: string): never => {
        ctx.addIssue({ code: 'custom', message, input });
        return z.NEVER;
      };
      let ms: number;
      if (input === null) {
        return fail(
          `has no value: expected a duration such as "1s" or "100ms" (or delete the key to get the default, ${rule.default})`,
        );
      } else if (typeof input === 'number') {
        if (input !== 0) {
          return fail(`needs a unit: write "${input}ms" or "${input}s", not the bare number ${input}`);
        }
        ms = 0;
      } else if (typeof input === 'string') {
        try {
          ms = parseDuration(input);
        } catch (err) {
          return fail((err as Error).message);
        }
      } else {
        return fail(`must be a duration such as "1s" or "100ms", got ${show(input)}`);
      }
      if (ms < rule.min || ms > rule.max) return fail(rule.range(ms));
      if (rule.step !== undefined && ms % rule.step.ms !== 0) return fail(rule.step.message(ms));
      return ms;
    })
    .prefault(rule.default);
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

function listenField() {
  return z
    .unknown()
    .transform((input, ctx): ListenAddress => {
      const example = 'e.g. "127.0.0.1:9641" or "[::1]:9641"';
      const fail = (message: string): never => {
        ctx.addIssue({ code: 'custom', message, input });
        return z.NEVER;
      };
      if (input === null) {
        return fail(`has no value: expected host:port, ${example} (or delete the key to get the default, ${DEFAULTS.adminListen})`);
      }
      if (typeof input !== 'string') return fail(`must be host:port, ${example}; got ${show(input)}`);
      let host: string;
      let port: string;
      if (input.startsWith('[')) {
        const close = input.indexOf(']');
        if (close < 0) return fail(`missing "]" after the IPv6 host, ${example}; got ${show(input)}`);
        host = input.slice(1, close);
        const rest = input.slice(close + 1);
        if (rest === '') return fail(`missing port: write ${show(`${input}:9641`)}`);
        if (!rest.startsWith(':')) return fail(`must be host:port, ${example}; got ${show(input)}`);
        port = rest.slice(1);
        if (parseIPv6(host) === null && parseIPv4(host) !== null) {
          return fail(`brackets are for IPv6 hosts only: write ${show(`${host}:${port}`)}`);
        }
      } else {
        const colons = input.split(':').length - 1;
        if (colons === 0) return fail(`missing port: write ${show(`${input}:9641`)} (host:port)`);
        if (colons > 1) return fail(`an IPv6 host must be in brackets, ${example}; got ${show(input)}`);
        const cut = input.indexOf(':');
        host = input.slice(0, cut);
        port = input.slice(cut + 1);
        if (host === '') {
          return fail(`missing host: write "127.0.0.1${input}" (this node only) or "0.0.0.0${input}" (every address)`);
        }
      }
      const ip = checkAddress(host, 'listen');
      if (typeof ip === 'string') {
        const named = parseIp(host) === null && /^[A-Za-z0-9.-]+$/.test(host);
        return fail(
          named
            ? `host must be an IP address, got ${show(host)} (names are not resolved: write 127.0.0.1 or [::1])`
            : `host: ${ip}`,
        );
      }
      if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) {
        return fail(`port must be an integer from 1 to 65535, got ${show(port)}`);
      }
      return { host: ip.text, port: Number(port) };
    })
    .prefault(DEFAULTS.adminListen);
}

// ---------------------------------------------------------------------------------------------
// Sections

const mappingError = expect('a mapping of settings (key: value)');

/** A section whose every setting has a default: absent or empty (`announce:`) means all defaults. */
function section<T extends z.ZodType>(schema: T) {
  return z.preprocess((v) => v ?? {}, schema);
}

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
    what: 'a list of IP addresses (empty for multicast)',
    default: '[] (multicast)',
  }).prefault([]),
  checksum: z
    .enum(['rfc5798', 'rfc9568'], { error: expect('"rfc5798" or "rfc9568"', { default: DEFAULTS.checksum }) })
    .default(DEFAULTS.checksum),
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
  vrrp: section(z.strictObject(vrrpShape, { error: mappingError })),
  vips: addressList({
    role: 'vip',
    label: 'vips',
    min: 1,
    max: MAX_VIPS,
    what: `a list of 1 to ${MAX_VIPS} IP addresses of one family, e.g. [10.0.0.100]`,
  }),
  announce: section(z.strictObject(announceShape, { error: mappingError })),
  admin: section(z.strictObject(adminShape, { error: mappingError })),
  log: section(z.strictObject(logShape, { error: mappingError })),
};

/** The known keys of each section ('' = top level), in declaration order. */
const SECTION_KEYS: Readonly<Record<string, readonly string[]>> = {
  '': Object.keys(rootShape),
  vrrp: Object.keys(vrrpShape),
  announce: Object.keys(announceShape),
  admin: Object.keys(adminShape),
  log: Object.keys(logShape),
};

/** Every setting's path, in declaration order: "interface", "vrrp.vrid", …, "log.level". */
export const CONFIG_FIELDS: readonly string[] = Object.freeze(
  (SECTION_KEYS[''] ?? []).flatMap((k) => (SECTION_KEYS[k] ?? [null]).map((sub) => (sub === null ? k : `${k}.${sub}`))),
);

const rootError = (iss: { readonly input?: unknown }): string =>
  iss.input === null || iss.input === undefined
    ? 'the file is empty; at least vrrp.vrid and vips are required'
    : `the top level must be a mapping of settings (key: value), got ${show(iss.input)}`;

/** The zod schema of a config file's content (after YAML parsing), producing a {@link Config}. */
export const configSchema = z.strictObject(rootShape, { error: rootError }).transform(
  (c): Config => ({
    ...(c.interface === undefined ? {} : { interface: c.interface }),
    family: c.vips.family,
    vrrp: {
      vrid: c.vrrp.vrid,
      priority: c.vrrp.priority,
      advertisementIntervalMs: c.vrrp.advertisementInterval,
      advertisementIntervalCs: c.vrrp.advertisementInterval / 10,
      preempt: c.vrrp.preempt,
      preemptDelayMs: c.vrrp.preemptDelay,
      peers: c.vrrp.peers.addresses,
      checksum: c.vrrp.checksum,
    },
    vips: c.vips.addresses,
    announce: {
      count: c.announce.count,
      spacingMs: c.announce.spacing,
      repeatAfterMs: c.announce.repeatAfter,
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

/**
 * Peers against VIPs. Runs on the raw input rather than inside zod, so it reports even when
 * another setting is wrong (zod skips refinements once a field has failed).
 */
function crossSectionIssues(raw: unknown): RawIssue[] {
  if (!isRecord(raw) || !Array.isArray(raw.vips) || !isRecord(raw.vrrp) || !Array.isArray(raw.vrrp.peers)) return [];
  const vips = new Map<string, number>();
  let family: { index: number; family: AddressFamily } | undefined;
  raw.vips.forEach((v, i) => {
    const ip = checkAddress(v, 'vip');
    if (typeof ip === 'string') return;
    family ??= { index: i, family: ip.family };
    if (!vips.has(ip.text)) vips.set(ip.text, i);
  });
  if (family === undefined) return [];
  const fam = family.family;
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
    } else if (vips.has(ip.text)) {
      out.push({
        path,
        message: `${String(p)} is a VIP (vips[${vips.get(ip.text)}]); peers are the other nodes' own addresses`,
      });
    }
  });
  return out;
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
  garpmasterrepeat: 'announce.count',
  garpmasterdelay: 'announce.repeatAfter',
  garpinterval: 'announce.spacing',
  loglevel: 'log.level',
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
        ? { section: alias.slice(0, alias.indexOf('.')), key: alias.slice(alias.indexOf('.') + 1) }
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
    const keys = SECTION_KEYS[i === 0 ? '' : String(a.path[0])] ?? [];
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
 * Pure: touches nothing on the system.
 *
 * Durations become integer milliseconds (`…Ms` fields) and the advertisement interval also
 * centiseconds (`advertisementIntervalCs`); IPv6 addresses become canonical (RFC 5952).
 *
 * @param value the configuration; never modified.
 * @param options.source file path or other origin, for messages.
 * @param options.locate maps a path to a line and column in the source text (parseConfig
 *   passes one; without it issues carry no line numbers).
 * @throws ConfigError (code BALLAST_E_CONFIG) listing every problem found, in declaration order.
 */
export function validateConfig(value: unknown, options: { source?: string; locate?: Locator } = {}): Config {
  const result = configSchema.safeParse(value);
  const raw: RawIssue[] = [];
  if (!result.success) {
    for (const iss of result.error.issues) {
      const path = iss.path.map((s) => (typeof s === 'number' ? s : String(s)));
      if (iss.code === 'unrecognized_keys') {
        const section = path.length === 0 ? '' : String(path[0]);
        for (const key of iss.keys) {
          raw.push({ path: [...path, key], message: unknownKeyMessage(section, key), atKey: true });
        }
      } else {
        raw.push({ path, message: iss.message });
      }
    }
  }
  raw.push(...crossSectionIssues(value));
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
