/**
 * The `bgp` section (`mode: bgp`, docs/bgp.md): every node announces the VIPs through a routing
 * daemon (BIRD 2) to its BGP peers while it can serve them, and withdraws them when it cannot.
 * Here: the section's zod shape, its cross-field checks (which run on the raw input like
 * checks.ts's) and its normalization. BGP's own numbers: ASNs are 32 bits (RFC 6793), the hold
 * time 0 or 3..65535 s (RFC 4271 §4.2), the graceful-restart time 12 bits of seconds (RFC 4724 §3),
 * standard communities two 16-bit halves (RFC 1997), large communities three 32-bit parts (RFC 8092).
 */
import { z } from 'zod';
import type { AddressFamily } from '../net/address.js';
import { checkAddress, parseIp } from './addresses.js';
import { formatDuration } from './duration.js';
import { boolField, durationField, durationMs, fileField, intField, interfaceNameProblem, rangeMessage, type DurationRule } from './fields.js';
import { isRecord, type RawIssue } from './issues.js';
import { expect, show } from './messages.js';

/** Defaults of the `bgp` section, as they would be written in the file. */
export const BGP_DEFAULTS = Object.freeze({
  daemon: 'bird',
  socket: '/run/bird/bird.ctl',
  configFile: '/etc/bird/ballast.conf',
  interface: 'lo',
  announce: 'backends',
  balance: 'all',
  holdTime: '9s',
  gracefulRestart: true,
  gracefulRestartTime: '120s',
  bfdInterval: '100ms',
  bfdMultiplier: 3,
} as const);

/** The most BGP peers one node may have. */
export const MAX_BGP_PEERS = 16;

/** The largest 32-bit ASN (RFC 6793). */
const ASN_MAX = 4_294_967_295;

const mappingError = expect('a mapping of settings (key: value)');

/** An ASN: 1..4294967295 (0 is reserved, RFC 7607). */
const asnField = (required: string) => intField(1, ASN_MAX, { required, hint: (v) => (v === 0 ? ' (AS 0 is reserved, RFC 7607)' : '') });

/** A duration in whole seconds (BIRD and the BGP messages carry seconds). */
function secondsField(rule: DurationRule) {
  return durationField({ ...rule, step: { ms: 1000, message: (ms) => `must be whole seconds (BGP carries seconds), got ${formatDuration(ms)}` } });
}

const HOLD_TIME: DurationRule = { min: 3000, max: 65_535_000, default: BGP_DEFAULTS.holdTime, range: rangeMessage('3s', '65535s (RFC 4271 §4.2)') };
const KEEPALIVE: DurationRule = { min: 1000, max: 21_845_000, default: 'a third of holdTime', range: rangeMessage('1s', 'a third of 65535s') };
const GR_TIME: DurationRule = {
  min: 1000,
  max: 4_095_000,
  default: BGP_DEFAULTS.gracefulRestartTime,
  range: rangeMessage('1s', '4095s (12 bits, RFC 4724 §3)'),
};
const BFD_INTERVAL: DurationRule = { min: 10, max: 10_000, default: BGP_DEFAULTS.bfdInterval, range: rangeMessage('10ms', '10s') };

/**
 * The `bgp` section's settings as zod shapes, built with the rest of the schema when a validation
 * needs it (validate.ts configSchema), not kept on the agent's heap for its whole life (docs/performance.md).
 */
function bgpShapes() {
  /** A peer's address: an IP literal, unicast (the family against the VIPs is a cross-field check). */
  const peerAddressField = z.unknown().transform((input, ctx) => {
    const r = checkAddress(input, 'peer');
    if (typeof r === 'string') {
      ctx.addIssue({ code: 'custom', message: input === undefined ? "required: the peer router's IP address, e.g. 10.0.0.1" : r, input });
      return z.NEVER;
    }
    return { text: r.text, family: r.family };
  });

  /** A community: "asn:value" (standard, two 16-bit parts) or "a:b:c" (large, three 32-bit parts). */
  const communityField = z.unknown().transform((input, ctx) => {
    const fail = (m: string) => {
      ctx.addIssue({ code: 'custom', message: m, input });
      return z.NEVER;
    };
    const what = 'a BGP community "asn:value" (0..65535 each, RFC 1997) or a large community "asn:a:b" (0..4294967295 each, RFC 8092)';
    if (typeof input !== 'string') return fail(`must be ${what}, got ${show(input)}`);
    const parts = input.split(':');
    if ((parts.length !== 2 && parts.length !== 3) || parts.some((p) => !/^\d{1,10}$/.test(p))) return fail(`must be ${what}, got ${show(input)}`);
    const max = parts.length === 2 ? 65_535 : ASN_MAX;
    const n = parts.map(Number);
    if (n.some((x) => x > max)) return fail(`${input}: each part must be from 0 to ${max} in a ${parts.length === 2 ? 'standard' : 'large'} community`);
    return n.join(':');
  });

  /** `bgp.interface`: a name the kernel accepts (where the VIPs are bound: lo, or a dummy interface the operator made). */
  const bgpInterfaceField = z
    .string({ error: expect('an interface name such as "lo"', { default: BGP_DEFAULTS.interface }) })
    .superRefine((name, ctx) => {
      const problem = interfaceNameProblem(name);
      if (problem !== null) ctx.addIssue({ code: 'custom', message: `${show(name)} is not a valid interface name: ${problem}`, input: name });
    })
    .default(BGP_DEFAULTS.interface);

  /** `bgp.routerId`: an IPv4 address (BGP identifiers are 32 bits, also on IPv6-only nodes). */
  const routerIdField = z
    .unknown()
    .transform((input, ctx) => {
      if (input === undefined || input === '') return undefined;
      const ip = typeof input === 'string' ? parseIp(input) : null;
      if (ip === null || ip.family !== 4) {
        ctx.addIssue({ code: 'custom', message: `must be an IPv4 address (a BGP identifier is 32 bits, RFC 6286), got ${show(input)}`, input });
        return z.NEVER;
      }
      return ip.text;
    })
    .optional();

  /** A socket or snippet path: absolute. */
  const pathField = (example: string) => fileField(example).transform((v) => v ?? example);

  /** One entry of `bgp.peers`. */
  const bgpPeerShape = {
    address: peerAddressField,
    asn: asnField("the peer's ASN, an integer from 1 to 4294967295"),
    bfd: boolField(true),
    nextHopSelf: boolField(true),
  };

  /** `bgp.bfd`: the BFD timers of every session (RFC 5880: detection time = interval × multiplier). */
  const bgpBfdShape = {
    interval: durationField(BFD_INTERVAL),
    multiplier: intField(1, 255, { default: String(BGP_DEFAULTS.bfdMultiplier) }).default(BGP_DEFAULTS.bfdMultiplier),
  };

  /** The `bgp` section's settings. */
  const bgpShape = {
    daemon: z.enum(['bird'], { error: expect('"bird" (BIRD 2)', { default: BGP_DEFAULTS.daemon }) }).default(BGP_DEFAULTS.daemon),
    socket: pathField(BGP_DEFAULTS.socket),
    configFile: pathField(BGP_DEFAULTS.configFile),
    interface: bgpInterfaceField,
    localAsn: asnField("this node's ASN, an integer from 1 to 4294967295"),
    routerId: routerIdField,
    announce: z
      .enum(['backends', 'local'], {
        error: expect('"backends" (while the data plane has a ready backend) or "local" (while this node\'s apiserver is ready)', {
          default: BGP_DEFAULTS.announce,
        }),
      })
      .default(BGP_DEFAULTS.announce),
    balance: z
      .enum(['all', 'local'], { error: expect('"all" (every ready apiserver) or "local" (this node\'s apiserver only)', { default: BGP_DEFAULTS.balance }) })
      .default(BGP_DEFAULTS.balance),
    communities: z.array(communityField, { error: expect('a list of communities such as ["64512:100"]', { default: '[]' }) }).default([]),
    holdTime: secondsField(HOLD_TIME),
    keepaliveTime: z
      .unknown()
      .transform((input, ctx) => {
        if (input === undefined) return undefined;
        const r = durationMs(input, {
          ...KEEPALIVE,
          step: { ms: 1000, message: (ms) => `must be whole seconds (BGP carries seconds), got ${formatDuration(ms)}` },
        });
        if (typeof r === 'string') {
          ctx.addIssue({ code: 'custom', message: r, input });
          return z.NEVER;
        }
        return r;
      })
      .optional(),
    gracefulRestart: boolField(BGP_DEFAULTS.gracefulRestart),
    gracefulRestartTime: secondsField(GR_TIME),
    bfd: z.preprocess((v) => v ?? {}, z.strictObject(bgpBfdShape, { error: mappingError })),
    peers: z
      .array(z.strictObject(bgpPeerShape, { error: mappingError }), {
        error: expect(`a list of 1 to ${MAX_BGP_PEERS} peers, e.g. [{ address: 10.0.0.1, asn: 64500 }]`),
      })
      .min(1, { error: 'must list at least one peer, e.g. [{ address: 10.0.0.1, asn: 64500 }]' })
      .max(MAX_BGP_PEERS, { error: `must list at most ${MAX_BGP_PEERS} peers` }),
  };
  return { bgpPeerShape, bgpBfdShape, bgpShape };
}

/** The `bgp` section as a strict zod object (absent = undefined), built anew by each call. */
export function bgpSection() {
  return z.preprocess((v) => (v === null ? {} : v), z.strictObject(bgpShapes().bgpShape, { error: mappingError }).optional());
}

/** The `bgp` section's known keys, by dotted path (for unknown-key suggestions and issue order). */
export const BGP_SECTION_KEYS = ((): { readonly bgp: readonly string[]; readonly 'bgp.bfd': readonly string[] } => {
  const s = bgpShapes();
  return { bgp: Object.keys(s.bgpShape), 'bgp.bfd': Object.keys(s.bgpBfdShape) };
})();

/** `bgp` as the schema parsed it. */
export type ParsedBgp = z.output<ReturnType<typeof bgpSection>>;

/** One BGP peer, normalized. */
export interface BgpPeerConfig {
  /** The peer router's address, canonical text. */
  readonly address: string;
  readonly family: AddressFamily;
  /** The peer's ASN (eBGP when it differs from `localAsn`). */
  readonly asn: number;
  /** Run BFD on this session (bgp.bfd's timers). */
  readonly bfd: boolean;
  /** Announce this node's own address as the next hop (BIRD `next hop self`). */
  readonly nextHopSelf: boolean;
}

/** The `bgp` section, normalized. */
export interface BgpConfig {
  /** The routing daemon ballast drives: BIRD 2 (`birdc`). */
  readonly daemon: 'bird';
  /** The daemon's control socket (`birdc -s`). */
  readonly socket: string;
  /** The configuration snippet ballast owns and rewrites; the operator's bird.conf includes it. */
  readonly configFile: string;
  /** Where the VIPs are bound, /32 or /128 (default lo); the interface must exist, ballast adds and removes the addresses only. */
  readonly interface: string;
  readonly localAsn: number;
  /** BGP identifier; absent = BIRD's `router id` (the operator's bird.conf, or its lowest IPv4 address). */
  readonly routerId?: string;
  /** When to announce: `backends` = the data plane has ≥ 1 ready backend; `local` = this node's apiserver is ready. */
  readonly announce: 'backends' | 'local';
  /** Where VIP:port goes: `all` ready apiservers, or the `local` one only. */
  readonly balance: 'all' | 'local';
  /** Communities added to the announcement, canonical "a:b" or "a:b:c". */
  readonly communities: readonly string[];
  /** Hold time, ms (whole seconds). */
  readonly holdTimeMs: number;
  /** Keepalive time, ms (whole seconds); absent = BIRD's default, a third of the hold time. */
  readonly keepaliveTimeMs?: number;
  /** Graceful restart (RFC 4724): the peers keep the route while BIRD restarts. */
  readonly gracefulRestart: boolean;
  /** How long the peers keep it, ms (whole seconds). */
  readonly gracefulRestartTimeMs: number;
  /** BFD timers (RFC 5880): detection time = intervalMs × multiplier. */
  readonly bfd: { readonly intervalMs: number; readonly multiplier: number };
  readonly peers: readonly BgpPeerConfig[];
}

/** The section, normalized; null when absent. */
export function normalizeBgp(b: ParsedBgp): BgpConfig | null {
  if (b === undefined) return null;
  return {
    daemon: b.daemon,
    socket: b.socket,
    configFile: b.configFile,
    interface: b.interface,
    localAsn: b.localAsn,
    ...(b.routerId === undefined ? {} : { routerId: b.routerId }),
    announce: b.announce,
    balance: b.balance,
    communities: b.communities,
    holdTimeMs: b.holdTime,
    ...(b.keepaliveTime === undefined ? {} : { keepaliveTimeMs: b.keepaliveTime }),
    gracefulRestart: b.gracefulRestart,
    gracefulRestartTimeMs: b.gracefulRestartTime,
    bfd: { intervalMs: b.bfd.interval, multiplier: b.bfd.multiplier },
    peers: b.peers.map((p) => ({ address: p.address.text, family: p.address.family, asn: p.asn, bfd: p.bfd, nextHopSelf: p.nextHopSelf })),
  };
}

/**
 * The checks of `mode: bgp` that span settings (on the raw input): the mode and the sections
 * agree (bgp needs `vips` and `bgp`, no `vrrp`; `bgp` without the mode is refused), backends to
 * balance to, peers of the VIPs' family that are not VIPs and not repeated, keepalive below hold.
 * @returns the issues, unsorted; null when the file is not in BGP mode and has no `bgp` section
 *   (checks.ts's role checks apply then).
 */
export function bgpIssues(raw: Record<string, unknown>): RawIssue[] | null {
  const bgp = raw.bgp;
  if (raw.mode !== 'bgp') {
    if (bgp === undefined) return null;
    return [
      {
        path: ['bgp'],
        message: `is set but mode is ${raw.mode === undefined ? 'not set (vrrp, the default)' : show(raw.mode)}: set mode: bgp to announce the VIPs with BGP, or remove bgp`,
      },
    ];
  }
  const out: RawIssue[] = [];
  if (raw.vrrp !== undefined)
    out.push({
      path: ['vrrp'],
      message: 'must be absent with mode: bgp: no election runs, every ready node announces the VIPs (remove vrrp, or use mode: vrrp)',
    });
  if (raw.vips === undefined) out.push({ path: ['vips'], message: 'required with mode: bgp: the addresses announced to the BGP peers, e.g. [10.0.0.100]' });
  if (bgp === undefined) out.push({ path: ['bgp'], message: 'required with mode: bgp: at least bgp.localAsn and bgp.peers' });
  const backends = isRecord(raw.apiserver) ? raw.apiserver.backends : undefined;
  if (!Array.isArray(backends) || backends.length === 0) {
    out.push({
      path: ['apiserver', 'backends'],
      message: 'required with mode: bgp: the apiservers the VIP balances to (a node announces while it has a ready one)',
    });
  }
  if (!isRecord(bgp)) return out;
  const vipFamily = vipsFamily(raw.vips);
  const vips = new Set(
    Array.isArray(raw.vips)
      ? raw.vips.flatMap((v) => {
          const ip = checkAddress(v, 'vip');
          return typeof ip === 'string' ? [] : [ip.text];
        })
      : [],
  );
  if (Array.isArray(bgp.peers)) {
    const seen = new Map<string, number>();
    bgp.peers.forEach((p, i) => {
      if (!isRecord(p)) return;
      const ip = checkAddress(p.address, 'peer');
      if (typeof ip === 'string') return;
      const path = ['bgp', 'peers', i, 'address'];
      const prev = seen.get(ip.text);
      if (prev !== undefined) out.push({ path, message: `${String(p.address)} duplicates bgp.peers[${prev}].address` });
      else if (vipFamily !== undefined && ip.family !== vipFamily)
        out.push({ path, message: `${String(p.address)} is IPv${ip.family} but the VIPs are IPv${vipFamily}: the peers carry the VIPs' family` });
      else if (vips.has(ip.text)) out.push({ path, message: `${String(p.address)} is a VIP; a peer is a router's address` });
      seen.set(ip.text, i);
    });
  }
  const hold = bgp.holdTime === undefined ? 9000 : durationMs(bgp.holdTime, HOLD_TIME);
  const keep = bgp.keepaliveTime === undefined ? undefined : durationMs(bgp.keepaliveTime, KEEPALIVE);
  if (typeof hold === 'number' && typeof keep === 'number' && keep * 3 > hold) {
    out.push({
      path: ['bgp', 'keepaliveTime'],
      message: `must be at most a third of bgp.holdTime (${formatDuration(hold)}; RFC 4271 §10), got ${formatDuration(keep)}`,
    });
  }
  return out;
}

/** The family of the first VIP that parses. */
function vipsFamily(vips: unknown): AddressFamily | undefined {
  if (!Array.isArray(vips)) return undefined;
  for (const v of vips) {
    const ip = checkAddress(v, 'vip');
    if (typeof ip !== 'string') return ip.family;
  }
  return undefined;
}
