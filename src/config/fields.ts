/**
 * Field parsers: one zod schema per kind of setting (integers, durations, the interface name,
 * address lists, host:port settings, file paths, the health check's path and server name).
 * Each refuses a bad value with a message for an operator; addresses go through addresses.ts,
 * which parses with src/net/ only.
 */
import { z } from 'zod';
import type { AddressFamily } from '../net/address.js';
import { formatHostPort } from '../net/hostport.js';
import { formatDuration, parseDuration } from './duration.js';
import {
  BACKEND_RULE,
  checkAddress,
  type BackendAddress,
  type ListenAddress,
  LISTEN_RULE,
  LOCAL_ENDPOINT_RULE,
  LOCAL_RULE,
  parseIp,
  parseRoleHostPort,
} from './addresses.js';
import { DEFAULTS, HOUR_MS, IFNAMSIZ, MAX_BACKENDS, MINUTE_MS } from './limits.js';
import { expect, quotedNumberHint, show, yesNoHint, type ExpectOptions } from './messages.js';

/** An integer setting from `lo` to `hi`. */
export function intField(lo: number, hi: number, opts: ExpectOptions = {}) {
  const hint = opts.hint;
  const err = expect(`an integer from ${lo} to ${hi}`, {
    ...opts,
    hint: (v) => (hint?.(v) ?? '') + quotedNumberHint(v),
  });
  return z.int({ error: err }).min(lo, { error: err }).max(hi, { error: err });
}

/** A number setting (fractions allowed) from `lo` to `hi`, both included. */
export function numberField(lo: number, hi: number, opts: ExpectOptions = {}) {
  const hint = opts.hint;
  const err = expect(`a number from ${lo} to ${hi}`, { ...opts, hint: (v) => (hint?.(v) ?? '') + quotedNumberHint(v) });
  return z.number({ error: err }).min(lo, { error: err }).max(hi, { error: err });
}

/** The bounds of a duration setting. */
export interface DurationRule {
  min: number;
  max: number;
  /** Default, as written in the file. */
  default: string;
  /** The "must be …" sentence when out of range. */
  range: (ms: number) => string;
  /** Required granularity in ms, with its message. */
  step?: { ms: number; message: (ms: number) => string };
}

/** `must be from <lo> to <hi>, got <ms>`. */
export const rangeMessage = (lo: string, hi: string) => (ms: number) => `must be from ${lo} to ${hi}, got ${formatDuration(ms)}`;

/** Parses a duration setting's value to ms, or says why it is refused (undefined input is not handled here). */
export function durationMs(input: unknown, rule: DurationRule): number | string {
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

/** apiserver.health.interval. */
export const HEALTH_INTERVAL: DurationRule = {
  min: 100,
  max: MINUTE_MS,
  default: DEFAULTS.healthInterval,
  range: rangeMessage('100ms', '1m'),
};

/** apiserver.health.timeout (its default depends on the interval). */
export const HEALTH_TIMEOUT: DurationRule = {
  min: 50,
  max: MINUTE_MS,
  default: `${DEFAULTS.healthTimeout}, or the interval if that is shorter`,
  range: rangeMessage('50ms', '1m'),
};

/** apiserver.health.dampingWindow: the window transitions are counted in. */
export const DAMPING_WINDOW: DurationRule = { min: 1000, max: HOUR_MS, default: DEFAULTS.dampingWindow, range: rangeMessage('1s', '1h') };
/** apiserver.health.dampingHold: the first hold of a damped backend. */
export const DAMPING_HOLD: DurationRule = { min: 1000, max: HOUR_MS, default: DEFAULTS.dampingHold, range: rangeMessage('1s', '1h') };
/** apiserver.health.dampingMaxHold: the longest hold (at least dampingHold: checks.ts). */
export const DAMPING_MAX_HOLD: DurationRule = { min: 1000, max: HOUR_MS, default: DEFAULTS.dampingMaxHold, range: rangeMessage('1s', '1h') };
/** apiserver.health.rememberDeparted: how long a backend that left the set keeps its state, counts and series. */
export const REMEMBER_DEPARTED: DurationRule = { min: 0, max: HOUR_MS, default: DEFAULTS.rememberDeparted, range: rangeMessage('0s (forget at once)', '1h') };

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

/** A transform that parses a duration, recording the refusal as an issue. */
const toMs =
  (rule: DurationRule) =>
  (input: unknown, ctx: z.RefinementCtx): number => {
    const r = durationMs(input, rule);
    return typeof r === 'string' ? rejecter(ctx, input)(r) : r;
  };

/**
 * A duration setting: a string such as "100ms" or "1s" (or 0), parsed to integer ms.
 * A bare YAML number other than 0 is refused: "interval: 1" means 1 s to keepalived users
 * and 1 ms to others, and guessing wrong changes failover timing by a factor of 1000.
 */
export function durationField(rule: DurationRule) {
  return z.unknown().transform(toMs(rule)).prefault(rule.default);
}

/** A duration setting whose default depends on another setting: undefined when absent. */
export function optionalDurationField(rule: DurationRule) {
  return z.unknown().transform(toMs(rule)).optional();
}

/** A boolean setting; YAML 1.1 yes/no get a hint. */
export function boolField(dflt: boolean) {
  return z.boolean({ error: expect('true or false', { default: String(dflt), hint: yesNoHint }) }).default(dflt);
}

/**
 * Why the kernel would refuse `name` as an interface name, or null when it accepts it: the
 * rules of dev_valid_name() (net/core/dev.c): not empty, shorter than IFNAMSIZ bytes, not "."
 * or "..", no "/", ":" or whitespace (isspace() of lib/ctype.c, which counts byte 0xA0 too).
 * A NUL would cut the name short in every C API, so the kernel would see another name.
 */
export function interfaceNameProblem(name: string): string | null {
  if (name === '') return 'it is empty';
  if (name.includes('\0')) return 'it contains a NUL character';
  const bytes = Buffer.byteLength(name, 'utf8');
  if (bytes >= IFNAMSIZ) return `it is ${bytes} bytes long; the kernel allows ${IFNAMSIZ - 1} (IFNAMSIZ ${IFNAMSIZ}, with the final NUL)`;
  if (name === '.' || name === '..') return '"." and ".." are not interface names';
  if (name.includes('/')) return 'it contains "/"';
  if (name.includes(':')) return 'it contains ":" (an alias label, not an interface)';
  // the kernel's isspace(): space, \t \n \v \f \r, and byte 0xA0
  if (/[ \t\n\v\f\r]/.test(name)) return 'it contains whitespace';
  const nbsp = [...name].find((c) => Buffer.from(c, 'utf8').includes(0xa0));
  if (nbsp !== undefined) return `it contains the byte 0xA0 (in ${JSON.stringify(nbsp)}), which the kernel counts as whitespace`;
  return null;
}

/** `interface`: a name the kernel accepts; absent = picked at run time. */
export function interfaceField() {
  return z
    .string({
      error: expect('an interface name such as "eth0"', {
        default: 'the interface whose subnet holds the first VIP',
      }),
    })
    .superRefine((name, ctx) => {
      const problem = interfaceNameProblem(name);
      if (problem === null) return;
      ctx.addIssue({
        code: 'custom',
        message: `${show(name)} is not a valid interface name (1 to 15 characters, counted in UTF-8 bytes; no "/", ":", whitespace or NUL; not "." or ".."): ${problem}`,
        input: name,
      });
    })
    .optional();
}

/**
 * A list of addresses, checked as a whole so that every element's problem is reported:
 * each element parses, all are one family, none repeats.
 */
export function addressList(opts: { role: 'vip' | 'peer'; label: string; min: number; max: number; what: string; default?: string; keyword?: string }) {
  return z.array(z.unknown(), { error: expect(opts.what, opts.default === undefined ? {} : { default: opts.default }) }).transform((list, ctx) => {
    const before = ctx.issues.length;
    const fail = (path: number[], message: string, input: unknown): void => {
      ctx.addIssue({ code: 'custom', message, path, input });
    };
    if (list.length < opts.min) fail([], `must list at least ${opts.min} address, e.g. [10.0.0.100]`, list);
    if (list.length > opts.max) fail([], `must list at most ${opts.max} addresses, got ${list.length}`, list);
    const out: string[] = [];
    let first: { index: number; family: AddressFamily } | undefined;
    const seen = new Map<string, number>();
    let keyword = false;
    list.forEach((item, i) => {
      // a word that stands for addresses found at run time (vrrp.peers: discovered)
      if (opts.keyword !== undefined && item === opts.keyword) {
        keyword = true;
        return;
      }
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
    return { family: first?.family ?? 4, addresses: out, keyword };
  });
}

/** `admin.listen`: host:port, where the unspecified address means every address. */
export function listenField() {
  return z
    .unknown()
    .transform((input, ctx): ListenAddress => {
      const fail = rejecter(ctx, input);
      if (input === null) {
        return fail(`has no value: expected host:port, ${LISTEN_RULE.example} (or delete the key to get the default, ${DEFAULTS.adminListen})`);
      }
      const r = parseRoleHostPort(input, LISTEN_RULE);
      if (typeof r === 'string') return fail(r);
      return { host: r.host, port: r.port };
    })
    .prefault(DEFAULTS.adminListen);
}

/**
 * apiserver.backends: a list of host:port, checked as a whole so that every element's problem
 * is reported (the family against the VIPs is a cross-field check).
 */
export function backendList() {
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
        const r = parseRoleHostPort(item, BACKEND_RULE);
        if (typeof r === 'string') return fail([i], r, item);
        const key = formatHostPort(r);
        const prev = seen.get(key);
        if (prev !== undefined) {
          const same = list[prev] === item ? '' : ` (both are ${key})`;
          return fail([i], `${String(item)} duplicates apiserver.backends[${prev}]${same}`, item);
        }
        seen.set(key, i);
        out.push({ host: r.host, port: r.port, family: r.family });
      });
      if (ctx.issues.length > before) return z.NEVER;
      return out;
    })
    .prefault([]);
}

/** policy.localBackend: host:port, or "" (the default) for "the backend whose address is on this node". */
export function localBackendField() {
  return z
    .unknown()
    .transform((input, ctx): BackendAddress | undefined => {
      if (input === undefined || input === '') return undefined;
      const fail = rejecter(ctx, input);
      if (input === null) {
        return fail(`has no value: expected host:port, e.g. "127.0.0.1:6443" (or delete the key: the backend whose address is on this node)`);
      }
      const r = parseRoleHostPort(input, LOCAL_RULE);
      if (typeof r === 'string') return fail(r);
      return { host: r.host, port: r.port, family: r.family };
    })
    .optional();
}

/** localEndpoint.address: one host:port or a list of 1..4 (one per family is the usual). */
export function localEndpointAddressField() {
  return z
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
        const r = parseRoleHostPort(item, LOCAL_ENDPOINT_RULE);
        if (typeof r === 'string') {
          ctx.addIssue({ code: 'custom', message: r, path, input: item });
        } else if (out.some((o) => o.host === r.host && o.port === r.port)) {
          ctx.addIssue({ code: 'custom', message: `${String(item)} is listed twice`, path, input: item });
        } else {
          out.push({ host: r.host, port: r.port, family: r.family });
        }
      });
      return ctx.issues.length > before ? z.NEVER : out;
    })
    .prefault(DEFAULTS.localEndpoint);
}

/**
 * An optional absolute file path; "" means not set. Whether the file exists is checked by
 * loadConfig (see files.ts), not here: validation is pure.
 */
export function fileField(example: string) {
  return z
    .unknown()
    .transform((input, ctx): string | undefined => {
      if (input === undefined || input === '') return undefined;
      const fail = rejecter(ctx, input);
      if (input === null) return fail(`has no value: expected a file path such as ${show(example)} (or delete the key)`);
      if (typeof input !== 'string') return fail(`must be a file path such as ${show(example)}, got ${show(input)}`);
      if (input.includes('\0')) return fail('must not contain a NUL character');
      if (!input.startsWith('/')) {
        return fail(`must be an absolute path, got ${show(input)} (a relative path would depend on the agent's working directory)`);
      }
      return input;
    })
    .optional();
}

/** RFC 1123 host name: labels of 1..63 letters, digits and inner hyphens, 253 characters in all. */
const DNS_NAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** apiserver.health.serverName: a DNS name or an IP literal; "" = verify the backend's own IP. */
export function serverNameField() {
  return z
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
}

/** apiserver.health.path: an absolute request path (a query is allowed). */
export function healthPathField() {
  return z
    .unknown()
    .transform((input, ctx): string => {
      const fail = rejecter(ctx, input);
      if (input === null) {
        return fail(`has no value: expected a request path such as "/readyz" (or delete the key to get the default, ${DEFAULTS.healthPath})`);
      }
      if (typeof input !== 'string') return fail(`must be a request path such as "/readyz", got ${show(input)}`);
      if (!input.startsWith('/')) return fail(`must start with "/", e.g. "/readyz", got ${show(input)}`);
      // eslint-disable-next-line no-control-regex -- control characters are what this refuses
      if (/[\s\x00-\x1f\x7f]/.test(input)) return fail(`must not contain spaces or control characters (percent-encode them), got ${show(input)}`);
      if (input.includes('#')) return fail(`must not contain a fragment ("#…"): it is never sent to the server, got ${show(input)}`);
      if (input.length > 1024) return fail(`must be at most 1024 characters, got ${input.length}`);
      return input;
    })
    .prefault(DEFAULTS.healthPath);
}

/** The default health timeout for an interval: 1 s, or the interval when that is shorter (a check ends before the next is due). */
export const defaultHealthTimeoutMs = (intervalMs: number): number => Math.min(parseDuration(DEFAULTS.healthTimeout), intervalMs);
