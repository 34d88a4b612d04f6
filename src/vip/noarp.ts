/**
 * BGP mode binds the VIPs on `lo` (bgp.interface): the node accepts their traffic, and must never
 * answer ARP for them, nor use them as the sender of its own ARP requests. With Linux's defaults
 * (`arp_ignore` 0, `arp_announce` 0) it does both on every interface: on a shared segment every
 * node then replies to an ARP request for the VIP and hosts there route it on-link instead of
 * through the routers. The kernel's answer (Documentation/networking/ip-sysctl.rst):
 *
 *   net.ipv4.conf.all.arp_ignore = 1     reply only if the target IP is configured on the
 *                                        interface the request came in on (a VIP on lo: never)
 *   net.ipv4.conf.all.arp_announce = 2   the sender IP of an ARP request is the best local
 *                                        address of the outgoing interface, never the VIP
 *
 * Both take the maximum of `conf/all` and `conf/<interface>`, so `all` covers every interface,
 * including those created after the agent started; it is what kube-proxy's IPVS mode sets with
 * strictARP. The cost: no interface answers ARP for an address configured only on another one.
 * A NOARP dummy device for the VIPs would not do instead: with arp_ignore 0 the receiving
 * interface answers for any local address, whatever device holds it (net/ipv4/arp.c).
 *
 * IPv6 needs nothing: a Neighbor Solicitation is answered only for an address on the interface it
 * arrived on (the kernel's ndisc_recv_ns looks the target up strictly on that device; proxy NDP
 * aside), and an NS the node sends takes its source from that interface too; the BGP lab checks
 * both families (test/integration/bgp.test.ts).
 *
 * The agent raises the two values at start (never lowers one) and on stop puts back those it
 * changed, unless something else changed them meanwhile.
 */
import { readFileSync, writeFileSync } from 'node:fs';

/** One sysctl and the least value BGP mode needs. */
export interface ArpSysctl {
  /** sysctl name, e.g. `net.ipv4.conf.all.arp_ignore`. */
  key: string;
  want: number;
}

/** The sysctls of an IPv4 VIP bound on a non-ARP interface (ip-sysctl.rst, see the file's head). */
export const ARP_SYSCTLS: readonly ArpSysctl[] = [
  { key: 'net.ipv4.conf.all.arp_ignore', want: 1 },
  { key: 'net.ipv4.conf.all.arp_announce', want: 2 },
];

/** Reads and writes sysctls by name; throws errno errors (EROFS under a read-only /proc/sys, EACCES). */
export interface SysctlIo {
  /** The value, or null when it cannot be read. */
  read(key: string): number | null;
  write(key: string, value: number): void;
}

/** /proc/sys/<key with dots as slashes>, in this process's network namespace. */
export function sysctlPath(key: string): string {
  return `/proc/sys/${key.replaceAll('.', '/')}`;
}

/** The real /proc/sys. */
export const procSysctl: SysctlIo = {
  read(key) {
    try {
      const n = Number.parseInt(readFileSync(sysctlPath(key), 'utf8').trim(), 10);
      return Number.isFinite(n) ? n : null;
    } catch {
      return null;
    }
  },
  write(key, value) {
    writeFileSync(sysctlPath(key), `${value}\n`);
  },
};

/** One value the agent changed: from what, to what. */
export interface ArpChange {
  key: string;
  from: number;
  to: number;
}

/** What {@link raiseArpSysctls} did. */
export interface ArpRaise {
  /** Values it raised (to restore on stop). */
  changed: ArpChange[];
  /** Values already at least what is needed (left alone, never restored). */
  already: { key: string; value: number }[];
  /** Values it could not set, with the error's message: the node answers ARP for the VIPs. */
  failed: { key: string; value: number | null; error: string }[];
}

/**
 * Raises each of `sysctls` to its `want` where it is lower; never lowers one. Never throws.
 * @returns what changed, what already was enough, and what could not be set.
 */
export function raiseArpSysctls(io: SysctlIo = procSysctl, sysctls: readonly ArpSysctl[] = ARP_SYSCTLS): ArpRaise {
  const out: ArpRaise = { changed: [], already: [], failed: [] };
  for (const { key, want } of sysctls) {
    const value = io.read(key);
    if (value !== null && value >= want) {
      out.already.push({ key, value });
      continue;
    }
    try {
      if (value === null) throw new Error(`cannot read ${sysctlPath(key)}`);
      io.write(key, want);
      out.changed.push({ key, from: value, to: want });
    } catch (err) {
      out.failed.push({ key, value, error: (err as Error).message });
    }
  }
  return out;
}

/**
 * Puts back what {@link raiseArpSysctls} changed, where the value is still the one it wrote (an
 * operator or kube-proxy that set it since keeps theirs). Never throws.
 * @returns the keys restored, left (changed by someone else) and failed (with the error).
 */
export function restoreArpSysctls(
  changed: readonly ArpChange[],
  io: SysctlIo = procSysctl,
): { restored: string[]; left: string[]; failed: { key: string; error: string }[] } {
  const out = { restored: [] as string[], left: [] as string[], failed: [] as { key: string; error: string }[] };
  for (const c of changed) {
    if (io.read(c.key) !== c.to) {
      out.left.push(c.key);
      continue;
    }
    try {
      io.write(c.key, c.from);
      out.restored.push(c.key);
    } catch (err) {
      out.failed.push({ key: c.key, error: (err as Error).message });
    }
  }
  return out;
}

/** The line for /etc/sysctl.d/ that makes the values permanent (and lets the agent run under a read-only /proc/sys). */
export const ARP_SYSCTL_FIX = `${ARP_SYSCTLS.map((s) => `sysctl -w ${s.key}=${s.want}`).join(' ')}, and make them permanent in /etc/sysctl.d/ (e.g. /etc/sysctl.d/90-ballast-bgp.conf)`;
