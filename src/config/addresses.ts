/**
 * Addresses in their roles: a VIP, a peer, a backend, the local backend, a local endpoint, the
 * admin listen address. The text is parsed by src/net/ (address.ts, hostport.ts) only; this
 * module decides which kinds of address each role refuses (a loopback VIP, a multicast peer, …)
 * and words the reason for an operator.
 */
import { addressFamily, addressToBytes, bytesToAddress, type AddressFamily } from '../net/address.js';
import { tryParseHostPort, type HostPort } from '../net/hostport.js';
import { show } from './messages.js';

/** A TCP listen address. */
export interface ListenAddress {
  /** An IP address literal (IPv6 in canonical form, without brackets). */
  readonly host: string;
  /** 1..65535. */
  readonly port: number;
}

/** An apiserver endpoint: an IP literal and a TCP port (the one structured form, from src/net/). */
export type BackendAddress = HostPort;

/** An IP address as config sees it. */
export interface Ip {
  readonly family: AddressFamily;
  /** 4 or 16 network-order bytes. */
  readonly bytes: Uint8Array;
  /** Canonical text: dotted quad, or RFC 5952 for IPv6. */
  readonly text: string;
}

/** Parses an IP literal (no zone, no brackets) with src/net/address.ts; null when it is not one. */
export function parseIp(s: string): Ip | null {
  const family = addressFamily(s);
  if (family === null) return null;
  const bytes = addressToBytes(s);
  return { family, bytes, text: bytesToAddress(bytes) };
}

type Scope = 'unspecified' | 'loopback' | 'multicast' | 'link-local' | 'broadcast' | 'ipv4-mapped' | 'reserved' | 'unicast';

/** The kind of an address (RFC 6890 special-purpose blocks that matter to ballast). */
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
  if (b.subarray(0, 15).every((x) => x === 0) && b[15] === 1) return 'loopback';
  if (b0 === 0xff) return 'multicast';
  if (b0 === 0xfe && (b1 & 0xc0) === 0x80) return 'link-local';
  if (b.subarray(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff) return 'ipv4-mapped';
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

/** Dotted-quad text with leading zeros (`010.0.0.1`) written without them, or null when `s` is not such text. */
function withoutLeadingZeros(s: string): string | null {
  const parts = s.split('.');
  if (parts.length !== 4 || !parts.every((p) => p !== '' && [...p].every((c) => c >= '0' && c <= '9'))) return null;
  const fixed = parts.map((p) => String(Number(p))).join('.');
  return fixed !== s && addressFamily(fixed) === 4 ? fixed : null;
}

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
  const fixed = withoutLeadingZeros(s);
  if (fixed !== null) return `${base}: leading zeros are ambiguous (octal to some tools); write ${fixed}`;
  return base;
}

/** What an address is used as; each role refuses some kinds of address. */
export type AddressRole = 'vip' | 'peer' | 'listen' | 'backend' | 'local' | 'endpoint';

const REFUSED: Record<AddressRole, readonly Scope[]> = {
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

const NEED: Record<AddressRole, string> = {
  vip: 'a VIP must be a unicast address that clients can reach',
  peer: "a peer must be another node's unicast address (leave peers out for multicast)",
  listen: 'the admin endpoint needs a local unicast address, or 0.0.0.0 / [::] for every address',
  backend: "a backend must be an apiserver's node address that every node can reach",
  local: "the local backend must be this node's own address or a loopback address",
  endpoint: "a local endpoint must be a loopback address (or one of this node's own)",
};

/** Parses one address in a given role; returns the address or the reason it is refused. */
export function checkAddress(input: unknown, role: AddressRole): Ip | string {
  if (input === null || input === undefined) return 'has no value: expected an IP address';
  if (typeof input !== 'string') return `not an IP address: ${show(input)}`;
  const ip = parseIp(input);
  if (ip === null) return notAnAddress(input);
  const scope = scopeOf(ip);
  if (scope === 'unicast') return ip;
  if (scope === 'ipv4-mapped') {
    return `${input} is an IPv4-mapped IPv6 address; write it as IPv4: ${ip.bytes.subarray(12).join('.')}`;
  }
  if (!REFUSED[role].includes(scope)) return ip;
  return `${input} is ${SCOPE_TEXT[scope]}; ${NEED[role]}`;
}

/** How one role's `host:port` is explained. */
export interface HostPortRule {
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

/**
 * Parses `host:port` in a role: src/net/hostport.ts parses, then the role decides whether the
 * host is acceptable; when the text does not parse, says what is wrong with it as specifically
 * as possible (missing port, brackets, a host name).
 * @returns the endpoint (canonical host), or the reason it is refused.
 */
export function parseRoleHostPort(input: unknown, rule: HostPortRule): HostPort | string {
  if (typeof input !== 'string') return `must be host:port, ${rule.example}; got ${show(input)}`;
  const hp = tryParseHostPort(input);
  if (typeof hp === 'string') return whyNotHostPort(input, rule);
  // the host as written, for messages: "[FD00::1]:1" names FD00::1, not fd00::1
  const written = input.startsWith('[') ? input.slice(1, input.lastIndexOf(']')) : input.slice(0, input.lastIndexOf(':'));
  const ip = checkAddress(written, rule.role);
  return typeof ip === 'string' ? `host: ${ip}` : hp;
}

/** Why `input` is not `host:port` (IPv6 host in brackets; IP literals only). */
function whyNotHostPort(input: string, rule: HostPortRule): string {
  const example = rule.example;
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
    if (addressFamily(host) === 4) return `brackets are for IPv6 hosts only: write ${show(`${host}:${port}`)}`;
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
  return `port must be an integer from 1 to 65535, got ${show(port)}`;
}

/** host:port of a listener this node opens (admin.listen): loopback, a node address or unspecified. */
export const LISTEN_RULE: HostPortRule = {
  role: 'listen',
  example: 'e.g. "127.0.0.1:9641" or "[::1]:9641"',
  port: 9641,
  missingHost: (input) => `missing host: write "127.0.0.1${input}" (this node only) or "0.0.0.0${input}" (every address)`,
  instead: 'write 127.0.0.1 or [::1]',
};

/** host:port of an apiserver (apiserver.backends): a node address every node can reach (no loopback, no link-local). */
export const BACKEND_RULE: HostPortRule = {
  role: 'backend',
  example: 'e.g. "10.0.0.11:6443" or "[fd00::11]:6443"',
  port: 6443,
  missingHost: (input) => `missing host: write the apiserver's node address, e.g. "10.0.0.11${input}"`,
  instead: `write the node's address, e.g. "10.0.0.11:6443"`,
};

/** host:port of this node's own apiserver (policy.localBackend): a node address or loopback. */
export const LOCAL_RULE: HostPortRule = {
  ...BACKEND_RULE,
  role: 'local',
  missingHost: (input) => `missing host: write this node's address or a loopback address, e.g. "127.0.0.1${input}"`,
  instead: `write this node's address or a loopback address, e.g. "127.0.0.1:6443"`,
};

/** host:port of the node-local endpoint (localEndpoint.address): loopback or a node address (checks.ts also refuses a VIP and the apiserver ports). */
export const LOCAL_ENDPOINT_RULE: HostPortRule = {
  role: 'endpoint',
  example: 'e.g. "127.0.0.1:7443" or "[::1]:7443"',
  port: 7443,
  missingHost: (input) => `missing host: write a loopback address, e.g. "127.0.0.1${input}"`,
  instead: 'write 127.0.0.1 or [::1]',
};
