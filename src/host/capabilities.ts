/**
 * The capabilities this process has, as the kernel reports them (proc(5), capabilities(7)).
 */
import { readFileSync } from 'node:fs';

/** Linux capability numbers (capabilities(7)). */
const CAP_NET_ADMIN = 12;
const CAP_NET_RAW = 13;

/**
 * The capabilities ballast needs that this process lacks, read from CapEff in
 * /proc/self/status (proc(5)): CAP_NET_RAW for raw and packet sockets, CAP_NET_ADMIN for
 * addresses and multicast membership.
 * @returns e.g. ['CAP_NET_RAW']; empty when everything is there (or /proc cannot be read).
 */
export function missingCapabilities(status = '/proc/self/status'): string[] {
  let text: string;
  try {
    text = readFileSync(status, 'utf8');
  } catch {
    return [];
  }
  const hex = /^CapEff:\s*([0-9a-f]+)$/m.exec(text)?.[1];
  if (!hex) return [];
  const eff = BigInt(`0x${hex}`);
  const out: string[] = [];
  if (!(eff & (1n << BigInt(CAP_NET_ADMIN)))) out.push('CAP_NET_ADMIN');
  if (!(eff & (1n << BigInt(CAP_NET_RAW)))) out.push('CAP_NET_RAW');
  return out;
}
