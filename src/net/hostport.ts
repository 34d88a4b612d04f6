/**
 * An endpoint as `host:port`, parsed once and carried structured: the one parser for backends,
 * local endpoints, the admin address and policy.localBackend, in config, health, data planes,
 * status and metrics.
 */
import { isIP } from 'node:net';
import { canonicalAddress, hostPort, type AddressFamily } from './address.js';

/** An IP endpoint: an address literal and a TCP port. */
export interface HostPort {
  /** IP address literal, canonical text (IPv6 per RFC 5952, without brackets). */
  readonly host: string;
  /** 1..65535. */
  readonly port: number;
  /** Address family of `host`. */
  readonly family: AddressFamily;
}

/**
 * Parses `host:port` (IPv6 as `[addr]:port`; IP literals only, no zone) into a {@link HostPort}
 * with a canonical host.
 * @returns the endpoint, or a string saying what is wrong with `text` (for config messages).
 */
export function tryParseHostPort(text: string): HostPort | string {
  const m = /^\[([^\]]+)\]:(\d{1,5})$/.exec(text) ?? /^([^:[\]]+):(\d{1,5})$/.exec(text);
  const host = m?.[1];
  const bracketed = text.startsWith('[');
  const family = host === undefined || host.includes('%') ? 0 : isIP(host);
  if (host === undefined || family === 0 || (family === 6) !== bracketed) {
    return 'is not host:port with an IP address (IPv6 as [addr]:port)';
  }
  const port = Number(m?.[2]);
  if (!(port >= 1 && port <= 65535)) return `has port ${m?.[2]}, outside 1..65535`;
  return Object.freeze({ host: canonicalAddress(host), port, family: family as AddressFamily });
}

/**
 * Parses `host:port` like {@link tryParseHostPort}.
 * @throws TypeError naming the text when it is not an IP literal with a port 1..65535.
 */
export function parseHostPort(text: string): HostPort {
  const r = tryParseHostPort(text);
  if (typeof r === 'string') throw new TypeError(`${JSON.stringify(text)} ${r}`);
  return r;
}

/** `host:port` text, IPv6 in brackets (`10.0.0.11:6443`, `[fd00::11]:6443`): the key and the display form. */
export function formatHostPort(hp: Pick<HostPort, 'host' | 'port'>): string {
  return hostPort(hp.host, hp.port);
}

/** Whether two endpoints are the same address and port. */
export function sameHostPort(a: Pick<HostPort, 'host' | 'port'>, b: Pick<HostPort, 'host' | 'port'>): boolean {
  return a.port === b.port && canonicalAddress(a.host) === canonicalAddress(b.host);
}
