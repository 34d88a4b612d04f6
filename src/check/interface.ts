/**
 * The `interface` and `vip-address` checks: the election's interface exists, is up and holds each
 * VIP's subnet, and no VIP is the network, broadcast or Subnet-Router anycast address of it.
 */
import type { Config } from '../config/index.js';
import { addressToBytes, bytesToAddress } from '../net/address.js';
import { chooseInterface, inSubnet, type InterfaceInfo } from '../vip/netlink.js';
import { fail, ok, type CheckResult } from './report.js';

/**
 * Whether `vip` is the network address or (IPv4) the broadcast address of `prefixLen`, or
 * (IPv6) the Subnet-Router anycast address (RFC 4291 §2.6.1: the prefix with all host bits 0).
 * IPv4 /31 (RFC 3021) and /32, IPv6 /127 (RFC 6164) and /128 have neither.
 * @returns 'network', 'broadcast', 'subnet-router anycast', or null.
 */
export function reservedInSubnet(vip: string, prefixLen: number): 'network' | 'broadcast' | 'subnet-router anycast' | null {
  const b = addressToBytes(vip);
  const bits = b.length * 8;
  if (prefixLen >= bits - 1) return null;
  let zeros = true;
  let ones = true;
  for (let bit = prefixLen; bit < bits; bit++) {
    const set = (b[bit >> 3]! & (0x80 >> (bit & 7))) !== 0;
    if (set) zeros = false;
    else ones = false;
  }
  if (zeros) return b.length === 4 ? 'network' : 'subnet-router anycast';
  if (ones && b.length === 4) return 'broadcast';
  return null;
}

/** The interface's subnet addresses (not /32, /128, global scope) of the VIP's family that hold `vip`. */
export function subnetsHolding(iface: InterfaceInfo, vip: string): { address: string; prefixLen: number }[] {
  const full = vip.includes(':') ? 128 : 32;
  return iface.addresses.filter((a) => a.prefixLen < full && a.scope === 0 && inSubnet(vip, a.address, a.prefixLen));
}

function networkOf(address: string, prefixLen: number): string {
  const b = addressToBytes(address);
  for (let bit = prefixLen; bit < b.length * 8; bit++) b[bit >> 3]! &= ~(0x80 >> (bit & 7));
  return `${bytesToAddress(b)}/${prefixLen}`;
}

/**
 * The `interface` and `vip-address` checks of a VRRP configuration, given every interface of the
 * node (listAllInterfaces).
 * @returns the results, and the chosen interface (null when none holds the VIP's subnet).
 */
export function interfaceResults(config: Config, all: InterfaceInfo[]): { checks: CheckResult[]; iface: InterfaceInfo | null } {
  const checks: CheckResult[] = [];
  let iface: InterfaceInfo | null = null;
  const vip = config.vips[0]!;
  const chosen = chooseInterface(all, vip, config.interface);
  const name = config.interface ?? 'the interface';
  if (typeof chosen === 'string') {
    checks.push(
      fail(
        'interface',
        `${name} exists and holds the VIP's subnet`,
        chosen,
        config.interface === undefined ? 'set "interface" in the configuration' : 'fix "interface" in the configuration',
      ),
    );
  } else {
    iface = chosen;
    const subnets = config.vips.map((x) => ({ vip: x, s: subnetsHolding(chosen, x) }));
    const without = subnets.filter((x) => x.s.length === 0).map((x) => x.vip);
    const title = `${chosen.ifname} is up and has an address in the VIP's subnet`;
    if (!chosen.running)
      checks.push(
        fail('interface', title, `${chosen.ifname} is down (not IFF_UP and IFF_RUNNING)`, `ip link set ${chosen.ifname} up, and check its cable / carrier`),
      );
    else if (without.length > 0)
      checks.push(
        fail(
          'interface',
          title,
          `${chosen.ifname} has no address whose subnet holds ${without.join(', ')} (it has ${
            chosen.addresses
              .filter((a) => a.family === config.family)
              .map((a) => `${a.address}/${a.prefixLen}`)
              .join(', ') || 'no address of that family'
          }): peers on the segment could not reach the VIP without a route`,
          'choose a VIP in the subnet of the interface, or set "interface" to the one on that segment',
        ),
      );
    else checks.push(ok('interface', title, subnets.map((x) => `${x.vip} is in ${x.s.map((s) => networkOf(s.address, s.prefixLen)).join(', ')}`).join('; ')));
    for (const x of subnets) {
      for (const s of x.s) {
        const r = reservedInSubnet(x.vip, s.prefixLen);
        const t = `VIP ${x.vip} is a host address of ${networkOf(s.address, s.prefixLen)}`;
        if (r === null)
          checks.push(ok('vip-address', t, `neither the network${config.family === 4 ? ' nor the broadcast' : ' (subnet-router anycast)'} address`));
        else
          checks.push(
            fail(
              'vip-address',
              t,
              `${x.vip} is the ${r} address of ${networkOf(s.address, s.prefixLen)}${r === 'broadcast' ? ': packets to it go to every host on the segment' : r === 'network' ? ': hosts treat it as the subnet itself (and some as a broadcast)' : ": RFC 4291 §2.6.1 gives it to the subnet's routers"}`,
              'choose a host address of the subnet for the VIP',
            ),
          );
      }
    }
  }
  return { checks, iface };
}
