/**
 * IP address text <-> bytes, for the wire (VRRP address lists, pseudo-headers, frames) and for
 * the RFC 9568 §6.4.3 tie-break, which compares primary addresses as unsigned integers.
 */
import { isIPv4, isIPv6 } from 'node:net';

/** 4 or 6. */
export type AddressFamily = 4 | 6;

/**
 * The family of an IP address in text form.
 * @returns 4, 6, or null when `address` is not an IP address (an IPv6 zone suffix `%eth0` is not accepted).
 */
export function addressFamily(address: string): AddressFamily | null {
  if (isIPv4(address)) return 4;
  if (isIPv6(address) && !address.includes('%')) return 6;
  return null;
}

/**
 * Network-order bytes of an IP address: 4 bytes for IPv4, 16 for IPv6 (RFC 4291 §2.2 text forms,
 * including `::` compression and a trailing dotted quad).
 * @throws TypeError when `address` is not an IPv4 or IPv6 address.
 */
export function addressToBytes(address: string): Buffer {
  const family = addressFamily(address);
  if (family === 4) return Buffer.from(address.split('.').map(Number));
  if (family !== 6) throw new TypeError(`not an IP address: ${JSON.stringify(address)}`);
  let text = address;
  const lastColon = text.lastIndexOf(':');
  if (text.includes('.', lastColon)) {
    // an embedded IPv4 address in the last 32 bits (e.g. ::ffff:10.0.0.1) becomes two hex groups
    const v4 = addressToBytes(text.slice(lastColon + 1));
    text = `${text.slice(0, lastColon + 1)}${v4.readUInt16BE(0).toString(16)}:${v4.readUInt16BE(2).toString(16)}`;
  }
  const parse = (s: string): number[] => (s === '' ? [] : s.split(':').map((h) => parseInt(h, 16)));
  const [head = '', rest] = text.split('::') as [string, string | undefined];
  const left = parse(head);
  const right = rest === undefined ? [] : parse(rest);
  const zeros = rest === undefined ? 0 : 8 - left.length - right.length;
  const groups = [...left, ...new Array<number>(zeros).fill(0), ...right];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(g, i * 2));
  return out;
}

/**
 * Text form of 4 (IPv4) or 16 (IPv6) network-order bytes; IPv6 in RFC 5952 canonical form
 * (lowercase, longest run of two or more zero groups compressed, leftmost on a tie).
 * @throws RangeError when `bytes` is neither 4 nor 16 bytes long.
 */
export function bytesToAddress(bytes: Uint8Array): string {
  if (bytes.length === 4) return Array.from(bytes).join('.');
  if (bytes.length !== 16) throw new RangeError(`an IP address is 4 or 16 bytes, got ${bytes.length}`);
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((bytes[i]! << 8) | bytes[i + 1]!);
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

/** The canonical text form of an IP address (RFC 5952 for IPv6). @throws TypeError if not an address. */
export function canonicalAddress(address: string): string {
  return bytesToAddress(addressToBytes(address));
}

/**
 * Compares two addresses of one family as unsigned integers in network byte order: the
 * comparison RFC 9568 §6.4.3 uses to break a priority tie between primary addresses.
 * @returns negative, 0 or positive, like a sort comparator.
 * @throws TypeError when either is not an IP address, RangeError when the families differ.
 */
export function compareAddresses(a: string, b: string): number {
  const x = addressToBytes(a);
  const y = addressToBytes(b);
  if (x.length !== y.length) throw new RangeError(`cannot compare ${a} with ${b}: different address families`);
  return Buffer.compare(x, y);
}

/**
 * `host:port` text of an endpoint, the host in canonical form and IPv6 in brackets
 * (`10.0.0.11:6443`, `[fd00::11]:6443`): how backends are named in config, status and metrics.
 * @throws TypeError when `address` is not an IP address.
 */
export function hostPort(address: string, port: number): string {
  const a = canonicalAddress(address);
  return a.includes(':') ? `[${a}]:${port}` : `${a}:${port}`;
}
