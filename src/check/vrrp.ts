/**
 * The checks that listen on the segment: `vrrp-vrid` (no other VRRP group speaks on our VRID) and
 * `vip-in-use` (no other host answers for a VIP), run side by side: the VRRP listen
 * (3 × Advertisement_Interval) and the VIP probes (half a second, probe.ts).
 */
import type { Config } from '../config/index.js';
import { isBallastError } from '../errors.js';
import { acquireInstanceLock } from '../host/locks.js';
import { canonicalAddress } from '../net/address.js';
import type { InterfaceInfo } from '../vip/netlink.js';
import { subnetsHolding } from './interface.js';
import { listenForAdverts, probeAddress, PROBE_COUNT, PROBE_SPACING_MS, PROBE_WAIT_MS, type AddressClaim, type HeardAdvert } from './probe.js';
import { fail, ok, warn, type CheckResult } from './report.js';

/** Who is one of our group: the unicast peers and the backends' hosts (vrrp.acceptFrom members). */
function knownMembers(config: Config): Set<string> {
  return new Set([...(config.vrrp?.peers ?? []), ...config.apiserver.backends.map((b) => b.host)].map((a) => canonicalAddress(a)));
}

interface Speaker {
  source: string;
  mac: string;
  version: number;
  priority: number;
  intervalMs: number;
  addresses: string[];
  count: number;
  /** why it is not one of ours; null when it is */
  foreign: string | null;
}

/**
 * The routers heard on our VRID, one per source and version, each judged ours or foreign: a
 * VRRPv2 advert (RFC 3768; ballast speaks v3 only) is foreign, so is one listing other addresses
 * than our VIPs, and (IPv4, when members are known) one from a source that is none of them.
 */
export function judgeSpeakers(config: Config, heard: readonly HeardAdvert[], ownAddresses: ReadonlySet<string>): Speaker[] {
  const v = config.vrrp!;
  const vips = new Set(config.vips);
  const members = knownMembers(config);
  const bySource = new Map<string, Speaker>();
  for (const a of heard) {
    if (a.vrid !== v.vrid || ownAddresses.has(a.source)) continue;
    const k = `${a.source} v${a.version}`;
    const prev = bySource.get(k);
    if (prev) {
      prev.count++;
      prev.priority = a.priority;
      continue;
    }
    let foreign: string | null = null;
    const same = a.addresses.length === vips.size && a.addresses.every((x) => vips.has(x));
    if (a.version === 2) foreign = 'speaks VRRPv2 (RFC 3768: keepalived `version 2`, its default for IPv4); ballast speaks VRRPv3';
    else if (!same) foreign = `advertises ${a.addresses.join(', ') || 'no address'}, not our VIPs ${config.vips.join(', ')}`;
    else if (config.family === 4 && members.size > 0 && !members.has(a.source))
      foreign = `is not one of our nodes (peers and backends: ${[...members].join(', ')})`;
    bySource.set(k, {
      source: a.source,
      mac: a.mac,
      version: a.version,
      priority: a.priority,
      intervalMs: a.intervalMs,
      addresses: a.addresses,
      count: 1,
      foreign,
    });
  }
  return [...bySource.values()];
}

function describeSpeaker(s: Speaker): string {
  return `${s.source} (MAC ${s.mac}) VRRPv${s.version} priority ${s.priority} interval ${s.intervalMs} ms addresses ${s.addresses.join(', ') || '(none)'}, ${s.count} advert${s.count === 1 ? '' : 's'}`;
}

function vrrpResult(config: Config, heard: readonly HeardAdvert[], speakers: readonly Speaker[], listenMs: number, ifname: string): CheckResult {
  const v = config.vrrp!;
  const title = `no other VRRP group uses VRID ${v.vrid} on ${ifname}`;
  const foreign = speakers.filter((s) => s.foreign !== null);
  const others = [...new Set(heard.filter((a) => a.vrid !== v.vrid).map((a) => `${a.vrid} (v${a.version} from ${a.source})`))];
  const otherText = others.length > 0 ? ` Other VRIDs heard: ${others.join(', ')}.` : '';
  if (foreign.length > 0) {
    return fail(
      'vrrp-vrid',
      title,
      `heard in ${listenMs} ms on VRID ${v.vrid}: ${foreign.map((s) => `${describeSpeaker(s)}, which ${s.foreign}`).join('; ')}.${otherText}`,
      `give this group another vrrp.vrid (one no router on the LAN uses${others.length > 0 ? '' : ', e.g. one not heard here'}), or stop the other group; two groups on one VRID fight over the master role (RFC 9568 §6.4)`,
    );
  }
  const ours = speakers.filter((s) => s.foreign === null);
  if (ours.length > 0)
    return ok(
      'vrrp-vrid',
      title,
      `only our own group speaks on VRID ${v.vrid} (listened ${listenMs} ms): ${ours.map(describeSpeaker).join('; ')}.${otherText}`,
    );
  return ok('vrrp-vrid', title, `no advert for VRID ${v.vrid} in ${listenMs} ms (3 × Advertisement_Interval).${otherText}`);
}

const HOW: Record<AddressClaim['how'], string> = {
  'arp-reply': 'answered our ARP probe',
  'arp-announcement': 'announces it (ARP request from the address)',
  'arp-probe': 'probes for it itself (RFC 5227)',
  'neighbor-advertisement': 'answered our DAD solicitation (Neighbor Advertisement)',
  'dad-probe': 'runs duplicate address detection for it itself (RFC 4862)',
};

/** Whether this node's own agent runs the instance (its instance lock is taken). */
async function ownAgentRuns(ifname: string, family: 4 | 6, vrid: number): Promise<boolean> {
  try {
    const lock = await acquireInstanceLock(ifname, family, vrid);
    lock.close();
    return false;
  } catch (err) {
    return isBallastError(err) && err.code === 'BALLAST_E_ALREADY_RUNNING';
  }
}

function vipInUseResult(vip: string, ifname: string, claims: readonly AddressClaim[], speakers: readonly Speaker[]): CheckResult {
  const title = `VIP ${vip} is not in use on ${ifname}`;
  // the master of our own group holds it: that is the point
  const master = (c: AddressClaim): Speaker | undefined => speakers.find((s) => s.foreign === null && s.mac === c.mac && s.addresses.includes(vip));
  const strangers = claims.filter((c) => !master(c));
  if (strangers.length > 0) {
    return fail(
      'vip-in-use',
      title,
      `${strangers.map((c) => `the host with MAC ${c.mac} ${HOW[c.how]}`).join('; ')}: ${vip} is already in use on the LAN; taking it would split the traffic between that host and this group`,
      `choose a VIP no host uses, or remove ${vip} from that host (find it by its MAC in the switch's table, or \`ip neigh\` on a neighbour)`,
    );
  }
  if (claims.length > 0)
    return ok('vip-in-use', title, `held by the master of our own group: ${claims.map((c) => `${master(c)!.source} (MAC ${c.mac})`).join(', ')}`);
  return ok(
    'vip-in-use',
    title,
    `no answer to ${PROBE_COUNT} probes in ${(PROBE_COUNT - 1) * PROBE_SPACING_MS + PROBE_WAIT_MS} ms (ARP probe / DAD solicitation, RFC 5227 / RFC 4862)`,
  );
}

/**
 * Listens for adverts on `iface` for `listenMs` and probes every VIP at the same time, then judges
 * what was heard: the `vip-in-use` results (one per VIP) and the `vrrp-vrid` result.
 * @param nodeAddresses every address of the node (its own adverts are not speakers).
 */
export async function segmentResults(config: Config, iface: InterfaceInfo, nodeAddresses: ReadonlySet<string>, listenMs: number): Promise<CheckResult[]> {
  const v = config.vrrp!;
  const checks: CheckResult[] = [];
  const own = await ownAgentRuns(iface.ifname, config.family, v.vrid);
  const ifname = iface.ifname;
  const probed = iface;
  const onIface = new Set(iface.addresses.map((a) => a.address));
  const adverts = listenForAdverts(ifname, config.family, listenMs).then(
    (h) => ({ heard: h, error: null as string | null }),
    (err: Error) => ({ heard: [] as HeardAdvert[], error: err.message }),
  );
  const probes = config.vips.map((vip) => {
    if (onIface.has(vip)) return Promise.resolve({ vip, claims: [] as AddressClaim[], local: true, error: null as string | null });
    // a VIP outside the interface's subnets (the interface check failed): a probe would ask a
    // segment the VIP is not on, and its silence would read as "not in use"
    if (subnetsHolding(probed, vip).length === 0)
      return Promise.resolve({ vip, claims: [] as AddressClaim[], local: false, error: null as string | null, offLink: true });
    return probeAddress(ifname, vip, config.family).then(
      (claims) => ({ vip, claims, local: false, error: null as string | null }),
      (err: Error) => ({ vip, claims: [] as AddressClaim[], local: false, error: err.message }),
    );
  });
  const [a, ...p] = await Promise.all([adverts, ...probes]);
  const speakers = judgeSpeakers(config, a.heard, nodeAddresses);
  for (const r of p) {
    const title = `VIP ${r.vip} is not in use on ${ifname}`;
    if ('offLink' in r)
      checks.push(
        warn(
          'vip-in-use',
          title,
          `not probed: ${ifname} has no address in the subnet of ${r.vip} (see the interface check), so a probe would go to a segment the VIP is not on`,
          'fix the interface check first, then run the check again',
        ),
      );
    else if (r.error) checks.push(warn('vip-in-use', title, `the probe could not run: ${r.error}`, 'run the check as root'));
    else if (r.local && v.owner) checks.push(ok('vip-in-use', title, `this node owns it (priority 255): ${ifname} has ${r.vip}`));
    else if (r.local && own) checks.push(ok('vip-in-use', title, `held by this node's running agent (${ifname} has ${r.vip})`));
    else if (r.local)
      checks.push(
        warn(
          'vip-in-use',
          title,
          `${ifname} already has ${r.vip} and no ballast agent runs VRID ${v.vrid} here: left by a killed agent or by hand`,
          `ballast cleanup --config FILE removes it (or ip addr del ${r.vip} dev ${ifname})`,
        ),
      );
    else checks.push(vipInUseResult(r.vip, ifname, r.claims, speakers));
  }
  if (a.error) checks.push(warn('vrrp-vrid', `no other VRRP group uses VRID ${v.vrid} on ${ifname}`, `could not listen: ${a.error}`, 'run the check as root'));
  else checks.push(vrrpResult(config, a.heard, speakers, listenMs, ifname));
  return checks;
}
