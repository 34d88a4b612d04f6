/**
 * The `membership` check: can this node ever become master?
 */
import type { Config } from '../config/index.js';
import { seedAndLastKnown } from '../discovery/lastknown.js';
import { addressFamily, canonicalAddress } from '../net/address.js';
import { membershipOf } from '../vrrp/membership.js';
import { fail, ok, warn, type CheckResult } from './report.js';

/**
 * The `membership` check: whether this node is a member of its group as the agent will compute
 * it at start (vrrp/membership.ts membershipOf, with the interface's addresses, the seed and the
 * last-known file as election.ts gives them). A node that is not (standby) is never Active: the
 * others drop its adverts under vrrp.acceptFrom: members. **fail** without discovery (nothing
 * will make it one); **warn** with discovery (it becomes one once the EndpointSlices list an
 * apiserver on this node).
 * @param own the addresses of the election's interface.
 */
export function membershipResult(config: Config, ifname: string, own: readonly string[]): CheckResult {
  const v = config.vrrp!;
  const title = 'this node is a member of its VRRP group (it can become master)';
  const seedHosts = config.apiserver.backends.map((b) => b.host);
  const lastKnown = config.discovery === null ? null : seedAndLastKnown(config.apiserver.backends, config.discovery.lastKnownFile);
  const discovered = lastKnown === null ? null : [...new Set(lastKnown.map((b) => b.host))];
  const inSeed = seedHosts.some((h) => own.some((a) => canonicalAddress(a) === canonicalAddress(h)));
  const m = membershipOf(config, { own, discovered, confirmed: discovered === null && inSeed ? [] : seedHosts });
  const mine = own.filter((a) => addressFamily(a) === config.family);
  if (m.members === null)
    return ok(
      'membership',
      title,
      m.anyBecause
        ? `adverts from any source are heard (${m.anyBecause === 'ipv6Multicast' ? 'IPv6 multicast' : 'no member is known'}): every node can become master`
        : 'vrrp.acceptFrom: any: every node can become master',
    );
  if (!m.standby)
    return ok(
      'membership',
      title,
      `an address of ${ifname} (${mine.join(', ')}) is ${discovered === null ? 'a host of apiserver.backends or in vrrp.peers' : 'a backend host (apiserver.backends or the last-known file) or in vrrp.peers'}`,
    );
  const known = [...new Set([...(discovered ?? seedHosts), ...v.peers])].join(', ') || 'none';
  const detail = `none of ${ifname}'s addresses (${mine.join(', ') || "none of the VIPs' family"}) is a backend host or a listed peer (known nodes: ${known}): the other nodes drop its adverts (vrrp.acceptFrom: members), so it stays Backup — this node would never become master${config.discovery === null ? '' : ', until discovery lists an apiserver on it'}`;
  const fix = `add this node's apiserver (${mine[0] ?? 'its address'}:${config.apiserver.port}) to apiserver.backends on every node, or list ${mine[0] ?? 'its address'} in vrrp.peers on the others (unicast), or set vrrp.acceptFrom: any`;
  return config.discovery === null ? fail('membership', title, detail, fix) : warn('membership', title, detail, fix);
}
