/**
 * The rtnetlink edge: interface lookup and address add/remove, through the `netlink` npm package
 * (rtnetlink(7)). Everything here takes an {@link Rtnl} so tests can run it against a fake and
 * against the real kernel alike (STYLE.md: inject the OS edge).
 */
import { createRequire } from 'node:module';
import type { RtNetlinkSocket } from 'netlink';
import { addressFamily, addressToBytes, bytesToAddress, canonicalAddress, type AddressFamily } from '../net/address.js';

/** The part of the `netlink` package's rtnetlink socket that ballast uses. */
export type Rtnl = Pick<RtNetlinkSocket, 'getLinks' | 'getAddresses' | 'newAddress' | 'delAddress'>;

/** An rtnetlink socket, closed with `close()`. The caller owns it. */
export interface RtnlSocket extends Rtnl {
  close(): void;
  /**
   * The underlying socket, for notifications (RTNLGRP_LINK, …): on a socket of its own — the
   * package ends a multipart reply (a dump) at the first other message on the socket, so a
   * notification arriving during a dump fails it.
   */
  raw: RtNetlinkSocket;
}

/** Opens an rtnetlink socket (rtnetlink(7)) that does not keep the event loop alive. */
export function openRtnl(): RtnlSocket {
  const require = createRequire(import.meta.url);
  // rtnetlink alone: the package's index also loads its nl80211, genl and WireGuard parts
  // (0.5 MiB of heap)
  const netlink = require('netlink/dist/rt/rt.js') as typeof import('netlink/dist/rt/rt.js');
  const raw = netlink.createRtNetlink();
  return {
    raw,
    getLinks: raw.getLinks.bind(raw),
    getAddresses: raw.getAddresses.bind(raw),
    newAddress: raw.newAddress.bind(raw),
    delAddress: raw.delAddress.bind(raw),
    close: () => raw.socket.close(),
  };
}

/**
 * The errno name in an error from the `netlink` package, which reports kernel refusals as
 * "Request rejected: EEXIST" without a `code` property.
 * @returns e.g. "EEXIST", or null when the error names none.
 */
export function netlinkErrno(err: unknown): string | null {
  const msg = err instanceof Error ? err.message : String(err);
  const m = /\b(E[A-Z0-9]{2,})\b/.exec(msg);
  return m?.[1] ?? null;
}

/** An address on an interface, as rtnetlink reports it (RTM_GETADDR). */
export interface InterfaceAddress {
  address: string;
  prefixLen: number;
  family: AddressFamily;
  /** RT_SCOPE_*: 0 universe (global), 253 link, 254 host. */
  scope: number;
  secondary: boolean;
  tentative: boolean;
  dadfailed: boolean;
}

/** A network interface, with what VRRP needs from it. */
export interface InterfaceInfo {
  ifname: string;
  ifindex: number;
  /** The link-layer address, "aa:bb:cc:dd:ee:ff". */
  mac: string;
  /** IFF_UP and IFF_RUNNING (RFC 2863 operational state up). */
  running: boolean;
  addresses: InterfaceAddress[];
}

const AF_INET = 2;
const AF_INET6 = 10;
/** netlink(7) request flags. */
const NLM_F_REPLACE = 0x100;
const NLM_F_CREATE = 0x400;
/** A kernel that does not answer an address change within this long (ms) is treated as an error. */
const NETLINK_TIMEOUT_MS = 2000;
/** IFA_CACHEINFO lifetime meaning "forever" (rtnetlink(7), ip-address(8) `forever`). */
const INFINITY_LIFETIME = 0xffffffff;

/** Lists every interface with its addresses (RTM_GETLINK + RTM_GETADDR). */
export async function listInterfaces(rt: Rtnl): Promise<InterfaceInfo[]> {
  // one dump at a time: the netlink package cannot interleave two multipart replies on one socket
  const links = await rt.getLinks();
  const addrs = await rt.getAddresses();
  return links.map((l) => {
    const ifindex = l.data.index ?? 0;
    const mac = l.attrs.address ? Array.from(l.attrs.address, (b) => b.toString(16).padStart(2, '0')).join(':') : '';
    return {
      ifname: l.attrs.ifname ?? '',
      ifindex,
      mac,
      running: Boolean(l.data.flags?.up && l.data.flags?.running),
      addresses: addrs
        .filter((a) => a.data.index === ifindex && (a.data.family === AF_INET || a.data.family === AF_INET6))
        .flatMap((a): InterfaceAddress[] => {
          // IFA_LOCAL is the local address for IPv4; IPv6 only carries IFA_ADDRESS
          const bytes = a.attrs.local ?? a.attrs.address;
          if (!bytes) return [];
          const flags = a.attrs.flags ?? a.data.flags ?? {};
          return [
            {
              address: bytesToAddress(bytes),
              prefixLen: a.data.prefixlen ?? 0,
              family: a.data.family === AF_INET ? 4 : 6,
              scope: a.data.scope ?? 0,
              secondary: Boolean(flags.secondary),
              tentative: Boolean(flags.tentative),
              dadfailed: Boolean(flags.dadfailed),
            },
          ];
        }),
    };
  });
}

/** True when `address` lies in `network`/`prefixLen` (same family). */
export function inSubnet(address: string, network: string, prefixLen: number): boolean {
  if (addressFamily(address) !== addressFamily(network)) return false;
  const a = addressToBytes(address);
  const n = addressToBytes(network);
  for (let bit = 0; bit < prefixLen; bit++) {
    const byte = bit >> 3;
    const mask = 0x80 >> (bit & 7);
    if ((a[byte]! & mask) !== (n[byte]! & mask)) return false;
  }
  return true;
}

/**
 * The interface VRRP runs on: the named one, or else the one with an address whose subnet
 * holds `vip` (not the default route's: the VIP must live on the segment its peers share).
 * Addresses of length /32 or /128 (other VIPs) do not count as a subnet.
 * @returns the interface, or a string saying why none fits (the caller turns it into an error).
 */
export function chooseInterface(all: InterfaceInfo[], vip: string, ifname?: string): InterfaceInfo | string {
  if (ifname !== undefined) {
    return all.find((i) => i.ifname === ifname) ?? `interface ${ifname} does not exist (have: ${all.map((i) => i.ifname).join(', ')})`;
  }
  const full = addressFamily(vip) === 4 ? 32 : 128;
  const matches = all.filter((i) => i.addresses.some((a) => a.prefixLen < full && a.scope === 0 && inSubnet(vip, a.address, a.prefixLen)));
  if (matches.length === 0) return `no interface has a subnet that holds ${vip}; set "interface" in the config`;
  if (matches.length > 1)
    return `several interfaces have a subnet that holds ${vip} (${matches.map((i) => i.ifname).join(', ')}); set "interface" in the config`;
  return matches[0]!;
}

/**
 * The address VRRP adverts are sent from (RFC 9568 §5.1.1.1 / §5.1.2.1): for IPv4 the
 * interface's primary (first non-secondary, global-scope) address that is not a VIP; for IPv6 its
 * link-local address.
 * @returns the address, or null when the interface has none.
 */
export function primaryAddress(iface: InterfaceInfo, family: AddressFamily, vips: readonly string[]): string | null {
  if (family === 6) {
    return iface.addresses.find((a) => a.family === 6 && a.scope === 253 && !a.dadfailed)?.address ?? null;
  }
  return iface.addresses.find((a) => a.family === 4 && a.scope === 0 && !a.secondary && !vips.includes(a.address))?.address ?? null;
}

/** rtnetlink(7) ifaddrmsg for one address on `ifindex`, global scope; `prefixLen` defaults to /32 or /128. */
function vipMessage(ifindex: number, vip: string, prefixLen?: number) {
  const family = addressFamily(vip) === 4 ? AF_INET : AF_INET6;
  return { family, prefixlen: prefixLen ?? (family === AF_INET ? 32 : 128), index: ifindex, scope: 0 };
}

/** One address as it sits on an interface. */
export interface PrefixedAddress {
  /** Canonical text form. */
  address: string;
  prefixLen: number;
}

/**
 * Every address on `ifindex` that is one of `vips`, whatever its prefix length (RTM_GETADDR):
 * a VIP left by keepalived or added by hand may be `10.0.0.100/24`, and the same address can be
 * there more than once with different prefixes (IPv4).
 */
export async function vipAddresses(rt: Rtnl, ifindex: number, vips: readonly string[]): Promise<PrefixedAddress[]> {
  const wanted = new Set(vips.map(canonicalAddress));
  const out: PrefixedAddress[] = [];
  for (const a of await rt.getAddresses()) {
    const bytes = a.attrs.local ?? a.attrs.address;
    if (a.data.index !== ifindex || !bytes) continue;
    const address = bytesToAddress(bytes);
    if (wanted.has(address)) out.push({ address, prefixLen: a.data.prefixlen ?? (bytes.length === 4 ? 32 : 128) });
  }
  return out;
}

/**
 * Removes every instance of each of `vips` from `ifindex`, whatever its prefix length
 * ({@link vipAddresses}, then {@link delVip} with the prefix found).
 * @returns what was removed (an address that vanished in between is not listed).
 * @throws Error with `code` = errno name when the kernel refuses.
 */
export async function removeVips(rt: Rtnl, ifindex: number, vips: readonly string[]): Promise<PrefixedAddress[]> {
  const removed: PrefixedAddress[] = [];
  for (const a of await vipAddresses(rt, ifindex, vips)) {
    if (await delVip(rt, ifindex, a.address, a.prefixLen)) removed.push(a);
  }
  return removed;
}

/**
 * Adds `vip` to the interface as a /32 (IPv4) or /128 (IPv6) of its own, so it can never be
 * promoted to the subnet's primary address and is never the source the kernel picks for the
 * subnet (IPv4: the subnet route's preferred source stays the primary; IPv6: the VIP is added
 * with preferred lifetime 0); IPv6 without duplicate-address detection (IFA_F_NODAD) and
 * without a prefix route.
 * `lifetimeS`: valid lifetime in seconds (0 = permanent); adding the address again renews it.
 * Adding an address that is already there is not an error (NLM_F_REPLACE).
 * @throws Error with `code` = errno name (EPERM, ENODEV, …) when the kernel refuses.
 */
export async function addVip(rt: Rtnl, ifindex: number, vip: string, lifetimeS = 0): Promise<void> {
  const bytes = addressToBytes(vip);
  const v6 = bytes.length === 16;
  const valid = lifetimeS > 0 ? lifetimeS : INFINITY_LIFETIME;
  // IPv6: preferred lifetime 0 ("deprecated"): the address accepts traffic, but source address
  // selection (RFC 6724 rule 3) never picks it, whereas a /128 would otherwise win the longest
  // match against the node's own /64 address for every neighbour on the link
  const cacheInfo = { ifaPrefered: v6 ? 0 : valid, ifaValid: valid, cstamp: 0, tstamp: 0 };
  const flags = v6 ? { nodad: true as const, noprefixroute: true as const } : undefined;
  await rt
    .newAddress(
      vipMessage(ifindex, vip),
      { local: bytes, address: bytes, cacheInfo, ...(flags ? { flags } : {}) },
      { flags: NLM_F_CREATE | NLM_F_REPLACE, timeout: NETLINK_TIMEOUT_MS },
    )
    .catch((err: unknown) => {
      throw withErrno(err, `add ${vip}`);
    });
}

/**
 * Removes `vip`/`prefixLen` (default /32 or /128) from the interface. The kernel matches the
 * prefix length too (IPv4 inet_rtm_deladdr, IPv6 inet6_addr_del), so a VIP with another prefix
 * needs its own length: see {@link removeVips}. Removing an address that is not there is not an error.
 * @returns true when the kernel removed it, false when it was not there (EADDRNOTAVAIL).
 * @throws Error with `code` = errno name when the kernel refuses for another reason.
 */
export async function delVip(rt: Rtnl, ifindex: number, vip: string, prefixLen?: number): Promise<boolean> {
  const bytes = addressToBytes(vip);
  try {
    await rt.delAddress(vipMessage(ifindex, vip, prefixLen), { local: bytes, address: bytes }, { timeout: NETLINK_TIMEOUT_MS });
    return true;
  } catch (err) {
    if (netlinkErrno(err) === 'EADDRNOTAVAIL') return false;
    throw withErrno(err, `remove ${vip}`);
  }
}

function withErrno(err: unknown, what: string): Error & { code: string } {
  const code = netlinkErrno(err) ?? 'EUNKNOWN';
  const out = new Error(`rtnetlink: cannot ${what}: ${code}`, { cause: err }) as Error & { code: string };
  out.code = code;
  return out;
}
