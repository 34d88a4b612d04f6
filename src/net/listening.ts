/**
 * Which TCP ports something on this node listens on, from /proc/net/tcp and /proc/net/tcp6
 * (proc(5); the kernel's Documentation/networking/proc_net_tcp.rst): rows whose `st` is 0A
 * (TCP_LISTEN). Used to refuse a local endpoint that would shadow an existing service.
 */
import { readFileSync } from 'node:fs';
import { canonicalAddress } from './address.js';

/** One listening socket: its local address (canonical text) and port. */
export interface Listener {
  address: string;
  port: number;
  /** the socket's inode (the `inode` column; 0 when absent): /proc/PID/fd/N links to `socket:[inode]` */
  inode?: number;
}

/** The kernel writes each 32-bit word of the address in host byte order (little-endian here). */
function decodeHexAddress(hex: string): string | null {
  if (hex.length === 8) {
    const b = Buffer.from(hex, 'hex').reverse();
    return [...b].join('.');
  }
  if (hex.length === 32) {
    const words = [0, 8, 16, 24].map((i) => Buffer.from(hex.slice(i, i + 8), 'hex').reverse());
    const b = Buffer.concat(words);
    const groups = [];
    for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
    return canonicalAddress(groups.join(':'));
  }
  return null;
}

/**
 * Parses the text of /proc/net/tcp or /proc/net/tcp6.
 * @returns the listening sockets (rows with st 0A); malformed rows are skipped.
 */
export function parseProcNetTcp(text: string): Listener[] {
  const out: Listener[] = [];
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 4 || f[3] !== '0A') continue;
    const [hexAddr, hexPort] = (f[1] ?? '').split(':');
    const address = hexAddr ? decodeHexAddress(hexAddr) : null;
    const port = Number.parseInt(hexPort ?? '', 16);
    const inode = Number.parseInt(f[9] ?? '', 10);
    if (address !== null && Number.isInteger(port)) out.push({ address, port, ...(Number.isInteger(inode) ? { inode } : {}) });
  }
  return out;
}

/**
 * Whether a connect() to `address`:`port` would reach a listener: one bound to that address, or
 * to the wildcard of its family, or to `::` (which also takes IPv4 unless the socket is
 * IPV6_V6ONLY — not visible here, so counted).
 * @param listeners what {@link parseProcNetTcp} found; by default this network namespace's.
 */
export function listeningOn(address: string, port: number, listeners: readonly Listener[] = currentListeners()): boolean {
  const a = canonicalAddress(address);
  const v4 = !a.includes(':');
  return listeners.some((l) => l.port === port && (l.address === a || l.address === '::' || (v4 && l.address === '0.0.0.0')));
}

/** This network namespace's listening TCP sockets (empty where /proc cannot be read). */
export function currentListeners(): Listener[] {
  const read = (p: string): string => {
    try {
      return readFileSync(p, 'utf8');
    } catch {
      return '';
    }
  };
  return [...parseProcNetTcp(read('/proc/net/tcp')), ...parseProcNetTcp(read('/proc/net/tcp6'))];
}
