/**
 * The argument checks the addon's wrappers run before crossing: each throws a TypeError naming
 * the argument and what it must be (the C++ side checks again).
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { SockAddress } from './addon.js';

export function checkIfname(ifname: unknown): asserts ifname is string {
  // man 7 netdevice: IFNAMSIZ - 1 bytes; the kernel also refuses "/", ":" and whitespace
  if (typeof ifname !== 'string' || ifname.length === 0 || Buffer.byteLength(ifname) > 15 || /[\s/:\0]/.test(ifname)) {
    throw new TypeError(`ifname must be an interface name of 1 to 15 bytes, got ${JSON.stringify(ifname)}`);
  }
}

/** fe80::/10, for an address that passed isIPv6: the first group is exactly fe80..febf. */
export function isLinkLocal6(address: string): boolean {
  return /^fe[89ab][0-9a-f]:/i.test(address);
}

export function checkAddress(name: string, value: unknown, family: 4 | 6): asserts value is string {
  // zones ("%eth0") are refused: the socket's interface is the zone
  const ok = typeof value === 'string' && !value.includes('%') && (family === 4 ? isIPv4(value) : isIPv6(value));
  if (!ok) throw new TypeError(`${name} must be an IPv${family} address, got ${JSON.stringify(value)}`);
}

export function checkBuffer(name: string, value: unknown, min: number, max: number): asserts value is Buffer {
  if (!Buffer.isBuffer(value)) throw new TypeError(`${name} must be a Buffer`);
  if (value.length < min || value.length > max) {
    throw new TypeError(`${name} must be ${min} to ${max} bytes long, got ${value.length}`);
  }
}

export function checkPath(name: string, value: unknown): asserts value is string {
  if (typeof value !== 'string' || !value.startsWith('/') || value.includes('\0')) {
    throw new TypeError(`${name} must be an absolute path, got ${JSON.stringify(value)}`);
  }
}

export function checkSockAddress(name: string, value: unknown, family?: 4 | 6): asserts value is SockAddress {
  if (typeof value !== 'object' || value === null) throw new TypeError(`${name} must be an object { address, port }`);
  const { address, port } = value as { address?: unknown; port?: unknown };
  const ok =
    typeof address === 'string' &&
    !address.includes('%') &&
    (family === 4 ? isIPv4(address) : family === 6 ? isIPv6(address) : isIPv4(address) || isIPv6(address));
  if (!ok) throw new TypeError(`${name}.address must be an IP${family === undefined ? '' : `v${family}`} address, got ${JSON.stringify(address)}`);
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new TypeError(`${name}.port must be an integer 1..65535, got ${JSON.stringify(port)}`);
  }
}

export function checkCookie(name: string, value: unknown): asserts value is bigint {
  if (typeof value !== 'bigint' || value < 0n || value >= 1n << 64n) throw new TypeError(`${name} must be a bigint in 0..2^64-1`);
}
