/**
 * `ballast check [--config FILE] [--json]`: a kubeadm-style preflight. Every check says ok, warn
 * or fail, and how to fix a warn or a fail (report.ts); docs/check.md lists every check id.
 *
 *   ballast check --config /etc/ballast/ballast.yaml       the node against that configuration
 *   ballast check                                          the host check only (the eBPF local endpoint)
 *
 * Exit status: 0 all ok, 1 the worst is a warning, 2 a check failed (exitStatus in report.ts);
 * a configuration that does not validate exits 2 with `ballast validate`'s message.
 *
 * Changes nothing on the node: the probes are an ARP probe / a DAD solicitation (nobody learns
 * anything from them), the ruleset is checked with `nft -c` (parsed and validated by the kernel
 * in a batch that is never committed), the eBPF check attaches to a temporary cgroup of its own.
 *
 * The slow parts run side by side: the VRRP listen (3 × Advertisement_Interval), the VIP probe
 * (half a second, probe.ts) and the backend certificates (certificates.ts, owned by checkcert).
 */
import { accessSync, constants as fsConstants, existsSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Config } from '../config/index.js';
import { missingCapabilities } from '../host/capabilities.js';
import { listAllInterfaces } from '../host/interfaces.js';
import { acquireInstanceLock } from '../host/locks.js';
import { commandExecutor, type Executor } from '../dataplane/apply.js';
import { BirdControl, BirdError, foreignSnippet, parseStatus } from '../bgp/bird.js';
import { checkEbpf } from '../dataplane/ebpf.js';
import { renderRuleset } from '../dataplane/nftables.js';
import { isBallastError } from '../errors.js';
import { addressFamily, addressToBytes, bytesToAddress, canonicalAddress } from '../net/address.js';
import { membershipOf } from '../vrrp/membership.js';
import { seedAndLastKnown } from '../discovery/lastknown.js';
import { kubeconfigServer } from '../config/kubeconfig.js';
import { formatHostPort } from '../net/hostport.js';
import { currentListeners, type Listener } from '../net/listening.js';
import { chooseInterface, inSubnet, type InterfaceInfo } from '../vip/netlink.js';
import { ARP_SYSCTL_FIX, ARP_SYSCTLS, sysctlPath } from '../vip/noarp.js';
import { checkBackendCertificates } from './certificates.js';
import { analyseIptablesSave, analyseNftRuleset, countForeignChains, flowsFor, type FirewallFinding, type HookFlows } from './firewall.js';
import { listenForAdverts, probeAddress, PROBE_COUNT, PROBE_SPACING_MS, PROBE_WAIT_MS, type AddressClaim, type HeardAdvert } from './probe.js';
import type { CheckReport, CheckResult } from './report.js';
import { ebpfUnderUnit, realtimeUnderUnit, runningUnitBpffs, unitSandbox, UNIT_NAME, type Sandbox } from './unit.js';

export { exitStatus } from './report.js';
export type { CheckReport, CheckResult } from './report.js';

/** Options of {@link runChecks}. */
export interface CheckOptions {
  /** The configuration file's path, for the report. */
  source: string;
  /** How `nft` is run (default: `nft` on PATH, 5 s limit). */
  nft?: Executor;
  /** Listening time for VRRP adverts, ms (default 3 × Advertisement_Interval). */
  vrrpListenMs?: number;
  /** Timeout of one backend's TLS handshake, ms (passed to checkBackendCertificates). */
  certificateTimeoutMs?: number;
  /** The installed unit's sandbox (unit.ts); default {@link unitSandbox}: null under the unit or when none is installed. */
  unit?: Sandbox | null;
}

const ok = (id: string, title: string, detail: string): CheckResult => ({ id, title, status: 'ok', detail });
const warn = (id: string, title: string, detail: string, fix: string): CheckResult => ({ id, title, status: 'warn', detail, fix });
export const fail = (id: string, title: string, detail: string, fix: string): CheckResult => ({ id, title, status: 'fail', detail, fix });

// ---------------------------------------------------------------------------------------------
// the VIP's address

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
function subnetsHolding(iface: InterfaceInfo, vip: string): { address: string; prefixLen: number }[] {
  const full = vip.includes(':') ? 128 : 32;
  return iface.addresses.filter((a) => a.prefixLen < full && a.scope === 0 && inSubnet(vip, a.address, a.prefixLen));
}

function networkOf(address: string, prefixLen: number): string {
  const b = addressToBytes(address);
  for (let bit = prefixLen; bit < b.length * 8; bit++) b[bit >> 3]! &= ~(0x80 >> (bit & 7));
  return `${bytesToAddress(b)}/${prefixLen}`;
}

// ---------------------------------------------------------------------------------------------
// ports: who listens

/** The pid and command of the process holding the socket `inode`, from /proc/PID/fd (proc(5)). */
export function socketOwner(inode: number | undefined, proc = '/proc'): { pid: number; command: string; cmdline: string } | null {
  if (inode === undefined || inode === 0) return null;
  const want = `socket:[${inode}]`;
  let pids: string[];
  try {
    pids = readdirSync(proc).filter((d) => /^\d+$/.test(d));
  } catch {
    return null;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`${proc}/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`${proc}/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      if (target !== want) continue;
      const read = (f: string): string => {
        try {
          return readFileSync(`${proc}/${pid}/${f}`, 'utf8');
        } catch {
          return '';
        }
      };
      return { pid: Number(pid), command: read('comm').trim(), cmdline: read('cmdline').split('\0').filter(Boolean).join(' ') };
    }
  }
  return null;
}

/** A ballast agent's command line: `… cli.js run …` or `ballast run …`. */
function isBallastAgent(cmdline: string): boolean {
  return /(?:^|[/\s])(?:ballast|cli\.js)\s+run\b/.test(cmdline);
}

/** Listeners a connect() to address:port would reach: bound to it, or to the wildcard. */
function listenersOn(address: string, port: number, all: readonly Listener[], exact = false): Listener[] {
  const a = canonicalAddress(address);
  const v4 = !a.includes(':');
  return all.filter((l) => l.port === port && (l.address === a || (!exact && (l.address === '::' || (v4 && l.address === '0.0.0.0')))));
}

function describeOwner(l: Listener): { text: string; ballast: boolean } {
  const o = socketOwner(l.inode);
  const where = `${l.address.includes(':') ? `[${l.address}]` : l.address}:${l.port}`;
  if (!o) return { text: `a process (not found in /proc) listens on ${where}`, ballast: false };
  return { text: `${o.command} (pid ${o.pid}) listens on ${where}`, ballast: isBallastAgent(o.cmdline) };
}

function checkPorts(config: Config, listeners: readonly Listener[]): CheckResult[] {
  const out: CheckResult[] = [];
  const admin = config.admin.listen;
  {
    const title = `admin.listen ${formatHostPort(admin)} is free`;
    const found = listenersOn(admin.host, admin.port, listeners).map(describeOwner);
    const others = found.filter((f) => !f.ballast);
    if (others.length > 0) out.push(fail('port-admin', title, `${others.map((f) => f.text).join('; ')}: the agent cannot bind its admin endpoint (EADDRINUSE)`, 'stop that process, or set admin.listen to a free port'));
    else if (found.length > 0) out.push(ok('port-admin', title, `held by a running ballast agent: ${found.map((f) => f.text).join('; ')}`));
    else out.push(ok('port-admin', title, 'nothing listens there'));
  }
  const le = config.localEndpoint;
  if (le && config.dataplane.local !== 'off') {
    for (const a of le.addresses) {
      const title = `local endpoint ${formatHostPort(a)} is free`;
      const found = listenersOn(a.host, a.port, listeners).map(describeOwner);
      const others = found.filter((f) => !f.ballast);
      const what = config.dataplane.local === 'ebpf' ? 'the eBPF connect() rewrite would shadow it (its clients would reach the apiservers instead)' : 'the proxy cannot bind it (EADDRINUSE)';
      if (others.length > 0 && le.force) out.push(warn('port-local-endpoint', title, `${others.map((f) => f.text).join('; ')}; localEndpoint.force is set, so the agent starts anyway and ${what}`, 'move that service or the local endpoint to another port'));
      else if (others.length > 0) out.push(fail('port-local-endpoint', title, `${others.map((f) => f.text).join('; ')}: the agent refuses to start (${what})`, 'stop that process, or give localEndpoint.address another port'));
      else if (found.length > 0) out.push(ok('port-local-endpoint', title, `held by a running ballast agent: ${found.map((f) => f.text).join('; ')}`));
      else out.push(ok('port-local-endpoint', title, 'nothing listens there'));
    }
  }
  if (runsVipDataPlane(config)) {
    for (const vip of config.vips) {
      const title = `no process is bound to the VIP ${formatHostPort({ host: vip, port: config.apiserver.port })} itself`;
      const found = listenersOn(vip, config.apiserver.port, listeners, true).map(describeOwner).filter((f) => !f.ballast);
      if (found.length > 0) out.push(warn('port-vip', title, `${found.map((f) => f.text).join('; ')}: the nftables data plane DNATs every connection to VIP:${config.apiserver.port} to a backend, so it never gets one`, 'bind that service to another address or port (an apiserver on the wildcard address is fine: it is a backend)'));
      else out.push(ok('port-vip', title, 'nothing is bound to the VIP itself (wildcard listeners such as the local apiserver are backends, reached through the DNAT)'));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// membership: can this node ever be master?

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
  if (m.members === null) return ok('membership', title, m.anyBecause ? `adverts from any source are heard (${m.anyBecause === 'ipv6Multicast' ? 'IPv6 multicast' : 'no member is known'}): every node can become master` : 'vrrp.acceptFrom: any: every node can become master');
  if (!m.standby) return ok('membership', title, `an address of ${ifname} (${mine.join(', ')}) is ${discovered === null ? 'a host of apiserver.backends or in vrrp.peers' : 'a backend host (apiserver.backends or the last-known file) or in vrrp.peers'}`);
  const known = [...new Set([...(discovered ?? seedHosts), ...v.peers])].join(', ') || 'none';
  const detail = `none of ${ifname}'s addresses (${mine.join(', ') || 'none of the VIPs\' family'}) is a backend host or a listed peer (known nodes: ${known}): the other nodes drop its adverts (vrrp.acceptFrom: members), so it stays Backup — this node would never become master${config.discovery === null ? '' : ', until discovery lists an apiserver on it'}`;
  const fix = `add this node's apiserver (${mine[0] ?? 'its address'}:${config.apiserver.port}) to apiserver.backends on every node, or list ${mine[0] ?? 'its address'} in vrrp.peers on the others (unicast), or set vrrp.acceptFrom: any`;
  return config.discovery === null ? fail('membership', title, detail, fix) : warn('membership', title, detail, fix);
}

// ---------------------------------------------------------------------------------------------
// VRRP on our VRID

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
    else if (config.family === 4 && members.size > 0 && !members.has(a.source)) foreign = `is not one of our nodes (peers and backends: ${[...members].join(', ')})`;
    bySource.set(k, { source: a.source, mac: a.mac, version: a.version, priority: a.priority, intervalMs: a.intervalMs, addresses: a.addresses, count: 1, foreign });
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
  if (ours.length > 0) return ok('vrrp-vrid', title, `only our own group speaks on VRID ${v.vrid} (listened ${listenMs} ms): ${ours.map(describeSpeaker).join('; ')}.${otherText}`);
  return ok('vrrp-vrid', title, `no advert for VRID ${v.vrid} in ${listenMs} ms (3 × Advertisement_Interval).${otherText}`);
}

// ---------------------------------------------------------------------------------------------
// the VIP in use

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
  if (claims.length > 0) return ok('vip-in-use', title, `held by the master of our own group: ${claims.map((c) => `${master(c)!.source} (MAC ${c.mac})`).join(', ')}`);
  return ok('vip-in-use', title, `no answer to ${PROBE_COUNT} probes in ${(PROBE_COUNT - 1) * PROBE_SPACING_MS + PROBE_WAIT_MS} ms (ARP probe / DAD solicitation, RFC 5227 / RFC 4862)`);
}

// ---------------------------------------------------------------------------------------------
// IP forwarding, the ruleset

function readSysctl(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
}

/**
 * Whether this configuration runs the nftables VIP data plane on this node: VRRP mode with
 * `dataplane.vip: nftables`, or BGP mode (which always balances VIP:port with it, src/agent/bgp.ts).
 */
export function runsVipDataPlane(config: Config): boolean {
  if (config.apiserver.backends.length === 0) return false;
  if (config.bgp) return true;
  return config.vrrp !== null && config.dataplane.vip === 'nftables';
}

/**
 * The backends the VIP data plane balances to here: every backend, except in BGP mode with
 * `bgp.balance: local` (this node's own apiservers only, as balancedSource in src/agent/bgp.ts).
 * @returns [] when no VIP data plane runs ({@link runsVipDataPlane}).
 */
export function vipPlaneBackends(config: Config, nodeAddresses: ReadonlySet<string>): Config['apiserver']['backends'] {
  if (!runsVipDataPlane(config)) return [];
  const all = config.apiserver.backends;
  if (config.bgp?.balance !== 'local') return all;
  const local = config.policy.localBackend;
  return all.filter((b) => (local ? b.port === local.port && canonicalAddress(b.host) === canonicalAddress(local.host) : nodeAddresses.has(b.host)));
}

/** `ip-forwarding`: the sysctl must be 1 when the VIP data plane DNATs to a backend on another node. */
export function forwardingResult(config: Config, nodeAddresses: ReadonlySet<string>, read: (path: string) => string | null = readSysctl): CheckResult {
  const key = config.family === 4 ? 'net.ipv4.ip_forward' : 'net.ipv6.conf.all.forwarding';
  const title = `${key} is on where the data plane forwards`;
  const remote = vipPlaneBackends(config, nodeAddresses).filter((b) => !nodeAddresses.has(b.host));
  if (remote.length === 0) {
    return ok('ip-forwarding', title, `not needed: no connection to the VIP is DNATed to another node here (${!runsVipDataPlane(config) ? 'no nftables VIP data plane' : config.bgp?.balance === 'local' ? 'bgp.balance: local balances to this node\'s apiserver only' : 'no remote backend'})`);
  }
  const value = read(`/proc/sys/${key.replaceAll('.', '/')}`);
  if (value === '1') return ok('ip-forwarding', title, `${key} = 1: connections to the VIP DNATed to ${remote.map(formatHostPort).join(', ')} are forwarded`);
  return fail(
    'ip-forwarding',
    title,
    `${key} = ${value ?? '(unreadable)'}: connections to the VIP that the nftables data plane DNATs to another node's apiserver (${remote.map(formatHostPort).join(', ')}) are forwarded traffic, which the kernel drops; clients would reach only this node's own apiserver`,
    `sysctl -w ${key}=1, and make it permanent in /etc/sysctl.d/ (kubeadm's preflight asks for it too)`,
  );
}

async function rulesetResult(config: Config, nodeAddresses: ReadonlySet<string>, nft: Executor): Promise<CheckResult> {
  const title = 'the kernel accepts the nftables ruleset of this configuration (nft -c)';
  const text = renderRuleset({
    family: config.family,
    vips: [...config.vips],
    port: config.apiserver.port,
    backends: vipPlaneBackends(config, nodeAddresses).map((b) => ({ address: b.host, port: b.port, local: nodeAddresses.has(b.host) })),
    masqueradeRemote: true,
  });
  let r;
  try {
    r = await nft(['-c', '-f', '-'], text);
  } catch (err) {
    return fail('nftables-ruleset', title, `cannot run nft: ${(err as Error).message}`, 'install nftables (apt install nftables)');
  }
  if (r.code === 0) return ok('nftables-ruleset', title, `the rendered ruleset (${text.split('\n').length - 1} lines: nat hooks prerouting/output/postrouting, jhash, a verdict map, dnat, masquerade, ct expressions, a timeout set, reject) passes nft -c`);
  return fail(
    'nftables-ruleset',
    title,
    `nft -c refused it (exit ${r.code}${r.killed ? `, ${r.killed}` : ''}): ${r.stderr.trim().split('\n').slice(0, 6).join(' | ')}`,
    'the kernel lacks an nftables module the data plane needs (nf_tables, nft_nat, nft_hash, nft_ct, nft_masq, nft_counter, nft_reject_ipv4 or _ipv6): load them or use a kernel with them; or set dataplane.vip: none',
  );
}

// ---------------------------------------------------------------------------------------------
// BGP mode: the interface, BIRD's control socket, the snippet

/**
 * Whether `path` can be written under `unit`'s sandbox: not with ProtectKernelTunables=yes under
 * /proc/sys, else the longest of ReadWritePaths= / ReadOnlyPaths= holding it decides (systemd.exec(5);
 * a leading `-` only makes a missing path no error). Pure.
 */
export function writableUnder(unit: Sandbox, path: string): boolean {
  if (unit.protectKernelTunables && path.startsWith('/proc/sys/')) return false;
  const holds = (p: string): boolean => {
    const q = p.replace(/^[-+]/, '').replace(/\/+$/, '');
    return path === q || path.startsWith(`${q}/`);
  };
  const rw = Math.max(-1, ...unit.readWritePaths.filter(holds).map((p) => p.length));
  const ro = Math.max(-1, ...unit.readOnlyPaths.filter(holds).map((p) => p.length));
  return rw >= ro;
}

/**
 * `bgp-arp` (mode: bgp): the node must never answer ARP (NDP) for a VIP it announces by BGP
 * (src/vip/noarp.ts). IPv4: ok when `net.ipv4.conf.all.arp_ignore` ≥ 1 and `arp_announce` ≥ 2
 * already; when lower, ok if the agent can raise them at start (it does, and restores them on
 * stop), warn when it cannot (the installed unit's /proc/sys is read-only). IPv6: ok, nothing to
 * set (NDP answers only for an address on the receiving interface).
 * @param read a sysctl's value by name (null: unreadable)
 * @param unit the installed unit's sandbox, null when the agent does not run under one
 * @returns one result; null without a bgp section.
 */
export function bgpArpResult(config: Config, read: (key: string) => string | null, unit: Sandbox | null): CheckResult | null {
  const bgp = config.bgp;
  if (!bgp) return null;
  const title = `no interface answers ${config.family === 4 ? 'ARP' : 'NDP'} for the VIPs on ${bgp.interface}`;
  if (config.family === 6) {
    return ok('bgp-arp', title, `nothing to set: the kernel answers a Neighbor Solicitation only for an address on the interface it arrived on (RFC 4861 §7.2.3; no proxy NDP), so ${config.vips.join(', ')} on ${bgp.interface} is answered by no other interface`);
  }
  const now = ARP_SYSCTLS.map((s) => ({ ...s, value: read(s.key) }));
  const shown = now.map((s) => `${s.key} = ${s.value ?? '(unreadable)'}`).join(', ');
  const low = now.filter((s) => s.value === null || Number(s.value) < s.want);
  if (low.length === 0) return ok('bgp-arp', title, `${shown}: an ARP request for ${config.vips.join(', ')} is answered only where the VIP is configured (${bgp.interface}, which speaks no ARP), and the node's ARP requests never carry a VIP as the sender (ip-sysctl.rst)`);
  const blocked = unit === null ? [] : low.filter((s) => !writableUnder(unit, sysctlPath(s.key)));
  if (blocked.length === 0) {
    return ok('bgp-arp', title, `${shown} now: the agent raises ${low.map((s) => `${s.key.split('.').pop()} to ${s.want}`).join(' and ')} at start (before the VIPs are on ${bgp.interface}) and restores ${low.length === 1 ? 'it' : 'them'} on stop; with 0 every interface would answer ARP for ${config.vips.join(', ')}`);
  }
  return warn('bgp-arp', title, `${shown}, and the agent cannot raise ${blocked.map((s) => s.key).join(', ')} under ${UNIT_NAME} (/proc/sys is read-only there): every interface of this node answers ARP for ${config.vips.join(', ')}, so on a shared segment hosts reach the VIP on-link instead of through the routers`, ARP_SYSCTL_FIX);
}

/**
 * `discovery-server` (with `discovery.kubeconfig`): says what the kubeconfig's `server` is used
 * for. Discovery never connects through it: it dials each apiserver at its own address (the seed,
 * then the EndpointSlices' endpoints) with the kubeconfig's CA and credentials
 * (src/discovery/credentials.ts forServer), so a server that is the VIP or the node-local
 * endpoint (what kubeadm's admin.conf and a kubelet's kubeconfig name) is harmless: discovery does
 * not depend on the endpoint ballast programs. Always ok (an informational line); null without a
 * kubeconfig.
 * @param readText the file's text, or null when it cannot be read (default fs.readFileSync)
 */
export function discoveryServerResult(config: Config, readText: (path: string) => string | null = readText0): CheckResult | null {
  const path = config.discovery?.kubeconfig;
  if (path === undefined) return null;
  const title = `discovery connects to each apiserver directly, not through ${path}'s server`;
  const text = readText(path);
  if (text === null) return ok('discovery-server', title, `${path} cannot be read yet: discovery waits for it, and then dials each apiserver at its own address whatever server it names`);
  const server = kubeconfigServer(text);
  if (server === null) return ok('discovery-server', title, `${path} names no usable server (ballast validate says why); discovery dials each apiserver at its own address in any case`);
  // a name (not resolved here) matches neither
  const canon = (h: string): string => {
    try {
      return canonicalAddress(h);
    } catch {
      return h.toLowerCase();
    }
  };
  const host = canon(server.host);
  const isVip = config.vips.some((v) => canon(v) === host);
  const local = config.localEndpoint?.addresses.find((a) => canon(a.host) === host && a.port === server.port);
  const backends = config.apiserver.backends.map(formatHostPort).join(', ') || 'none listed';
  const how = `discovery does not connect to it: it dials each apiserver at its own address (the seed ${backends}, then the EndpointSlices' endpoints) with that file's CA and credentials, so it never depends on the endpoint ballast programs`;
  if (isVip) return ok('discovery-server', title, `the server ${server.url} is the VIP: harmless, ${how}`);
  if (local) return ok('discovery-server', title, `the server ${server.url} is this node's local endpoint (${formatHostPort(local)}): harmless, ${how}`);
  return ok('discovery-server', title, `the server ${server.url}: ${how}`);
}

function readText0(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

/** Options of {@link bgpResults}. */
export interface BgpCheckOptions {
  /** How long BIRD's control socket may take to greet and answer `show status`, ms (default 3000). */
  timeoutMs?: number;
  /**
   * access(2) on bgp.configFile's directory (default fs.accessSync); throws an errno error
   * (EACCES, EROFS, …) when it may not be written. Tests replace it: root passes every mode check.
   */
  access?: (path: string, mode: number) => void;
}

/**
 * The checks of `mode: bgp` (docs/check.md): `bgp-interface` (bgp.interface exists), `bgp-socket`
 * (BIRD's control socket answers `show status`; a warn when it does not, since the agent waits
 * for BIRD), `bgp-config-file` (bgp.configFile's directory is writable and the file, when there,
 * is ballast's to write: bird.ts's foreignSnippet, the rule the agent applies at start).
 * Whether BIRD's own configuration includes the snippet is not knowable from here and not checked.
 * @param interfaces every interface of the node (listAllInterfaces).
 * @returns three results; [] when `config` is not in BGP mode.
 */
export async function bgpResults(config: Config, interfaces: readonly InterfaceInfo[], opts: BgpCheckOptions = {}): Promise<CheckResult[]> {
  const bgp = config.bgp;
  if (!bgp) return [];
  const out: CheckResult[] = [];
  {
    const title = `bgp.interface ${bgp.interface} exists`;
    const found = interfaces.find((i) => i.ifname === bgp.interface);
    if (found) out.push(ok('bgp-interface', title, `${bgp.interface} (ifindex ${found.ifindex}) is where the agent binds ${config.vips.join(', ')}`));
    else out.push(fail('bgp-interface', title, `there is no interface ${bgp.interface} (${interfaces.map((i) => i.ifname).join(', ') || 'none'} exist): the agent refuses to start`, `set bgp.interface to lo, or create it (ip link add ${bgp.interface} type dummy && ip link set ${bgp.interface} up)`));
  }
  {
    const title = `BIRD answers on its control socket ${bgp.socket}`;
    const bird = new BirdControl(bgp.socket, opts.timeoutMs ?? 3000);
    try {
      const s = parseStatus(await bird.command('show status'));
      out.push(ok('bgp-socket', title, `BIRD ${s.version ?? '(version not given)'}${s.routerId ? `, router ID ${s.routerId}` : ''}${s.up ? ', up and running' : ''}`));
    } catch (err) {
      const why = err instanceof BirdError && err.errno === 'ENOENT' ? 'no socket there (BIRD is not running, or bgp.socket names another path)' : (err as Error).message;
      out.push(warn('bgp-socket', title, `${why}; the agent starts anyway and waits for BIRD, announcing nothing until it answers`, `start BIRD 2 (systemctl start bird), or set bgp.socket to the path of its control socket (bird -s)`));
    } finally {
      bird.close();
    }
  }
  {
    const path = bgp.configFile;
    const dir = dirname(path);
    const title = `bgp.configFile ${path} can be written by ballast`;
    // the agent creates a missing directory (mkdir -p, bird.ts writeSnippet): the nearest existing one must be writable
    let existing = dir;
    while (!existsSync(existing) && dirname(existing) !== existing) existing = dirname(existing);
    const creates = existing !== dir;
    let dirProblem: string | null = null;
    try {
      if (!statSync(existing).isDirectory()) dirProblem = `${existing} is not a directory`;
      else (opts.access ?? accessSync)(existing, fsConstants.W_OK | fsConstants.X_OK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      dirProblem = code === 'EACCES' ? `the directory ${existing} is not writable by this user${creates ? ` (the agent would create ${dir} in it)` : ''}` : `${existing}: ${(err as Error).message}`;
    }
    // whose the file is: the agent's own rule (bird.ts foreignSnippet, BALLAST_E_BGP_CONFIG_FILE at start)
    const foreign = foreignSnippet(path);
    const present = existsSync(path);
    if (dirProblem) out.push(fail('bgp-config-file', title, `${dirProblem}: the agent cannot write the snippet`, `run the agent (and the check) as root, or set bgp.configFile to a path in a directory it can write`));
    else if (foreign !== null) out.push(fail('bgp-config-file', title, `${path} ${foreign}: the agent refuses to start (BALLAST_E_BGP_CONFIG_FILE)`, `set bgp.configFile to a file of ballast's own (e.g. /etc/bird/ballast4.conf, one per family) and include it from bird.conf, or move that file away`));
    else out.push(ok('bgp-config-file', title, `${!present ? `${path} does not exist yet; the agent writes it${creates ? `, creating ${dir} in ${existing}` : ` in ${dir}`}` : `${path} is ballast's to write (its snippet, or empty)`} (whether BIRD's configuration includes it is not checked: docs/bgp.md gives the include line)`));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// foreign firewalls

/** Runs `iptables-legacy-save` / `ip6tables-legacy-save` when installed; null when not (or it fails). */
export async function legacySave(family: 4 | 6): Promise<string | null> {
  const name = family === 4 ? 'iptables-legacy-save' : 'ip6tables-legacy-save';
  const dirs = (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':').concat(['/usr/sbin', '/sbin']);
  const path = dirs.map((d) => `${d}/${name}`).find((p) => existsSync(p));
  if (!path) return null;
  const r = await commandExecutor([path])([], '');
  return r.code === 0 ? r.stdout : null;
}

/**
 * Every finding of the other firewalls on this node for `hooks`: nft tables that are not
 * ballast's (iptables-nft's among them), and iptables-legacy when installed.
 * @param nft runs `nft` (the JSON listing); @param legacy gives the iptables-legacy-save text (default: run it).
 * @returns the findings and how many base chains were looked at; `error` when nft could not be read.
 */
export async function foreignFirewall(
  hooks: readonly HookFlows[],
  family: 4 | 6,
  nft: Executor,
  legacy: (family: 4 | 6) => Promise<string | null> = legacySave,
): Promise<{ findings: FirewallFinding[]; chains: number; legacy: boolean; error?: string }> {
  const findings: FirewallFinding[] = [];
  let chains = 0;
  let error: string | undefined;
  try {
    const r = await nft(['-j', 'list', 'ruleset'], '');
    if (r.code !== 0) error = `nft -j list ruleset exited ${r.code}: ${r.stderr.trim()}`;
    else {
      const doc: unknown = JSON.parse(r.stdout);
      findings.push(...analyseNftRuleset(doc, hooks));
      chains = countForeignChains(doc);
    }
  } catch (err) {
    error = `cannot read the nftables ruleset: ${(err as Error).message}`;
  }
  const text = await legacy(family).catch(() => null);
  if (text) findings.push(...analyseIptablesSave(text, family, hooks));
  return { findings, chains, legacy: text !== null, ...(error ? { error } : {}) };
}

function firewallResult(r: Awaited<ReturnType<typeof foreignFirewall>>): CheckResult {
  const title = 'no other firewall on this node drops traffic to the VIP or the backends';
  if (r.error) return warn('foreign-firewall', title, `${r.error}; other firewalls were not checked`, 'install nftables and run the check as root');
  const fails = r.findings.filter((f) => f.severity === 'fail');
  const list = r.findings.map((f) => `${f.severity === 'fail' ? 'drops' : 'may drop'}: ${f.detail}`).join('; ');
  const fix = 'add an accept rule for TCP to the VIP port and the backends before the drop (in that table: e.g. `tcp dport <port> accept`), or remove the rule; ballast never edits other tables';
  if (fails.length > 0) return fail('foreign-firewall', title, list, fix);
  if (r.findings.length > 0) return warn('foreign-firewall', title, list, fix);
  return ok('foreign-firewall', title, `${r.chains} base chain${r.chains === 1 ? '' : 's'} of other nftables tables checked${r.legacy ? ', and iptables-legacy' : ''}: none drops it`);
}

// ---------------------------------------------------------------------------------------------

/**
 * The `ebpf` check: the probe (this process), then what the unit's sandbox allows when the check
 * does not run under it (unit.ts): an attach that works from a root shell is no answer for
 * ballast.service.
 */
function ebpfResult(r: { ok: boolean; reasons: string[] }, configured: boolean, unit: Sandbox | null, running: { pid: number; readOnly: boolean } | null = unit ? runningUnitBpffs() : null): CheckResult {
  const title = 'eBPF local endpoint (cgroup v2, BPF programs, sock_diag)';
  const probed = 'cgroup connect4/6 and getpeername4/6 programs loaded and attached to a test cgroup, and SOCK_DESTROY works';
  if (r.ok && unit) {
    const u = ebpfUnderUnit(unit);
    // the running unit's own mount namespace settles what the options cannot
    const seen = running === null ? '' : `in the running ${UNIT_NAME} (pid ${running.pid}, as of its last start) /sys/fs/bpf is ${running.readOnly ? 'read-only' : 'writable'}`;
    if (running?.readOnly) {
      return warn('ebpf', title, `${probed} from this process, but ${seen}: the agent falls back to the user-space proxy${u.status === 'ok' ? '' : ` (${u.detail})`}`, u.fix ?? `\`systemctl edit ballast\` and add under [Service]: ProtectKernelTunables=no and ReadWritePaths=/sys/fs/bpf, then \`systemctl restart ballast\``);
    }
    if (running && !u.known) return ok('ebpf', title, `${probed} (from this process), and ${seen}`);
    if (u.status === 'ok') return ok('ebpf', title, `${probed} (from this process); ${u.detail}`);
    return warn('ebpf', title, `${probed} from this process, but ${u.detail}`, u.fix!);
  }
  if (r.ok) return ok('ebpf', title, probed);
  return warn(
    'ebpf',
    title,
    `not available here: ${r.reasons.join('; ')}${configured ? '; dataplane.local: ebpf falls back to the proxy' : ''}`,
    'a kernel ≥ 5.14 with cgroup v2 mounted and CAP_BPF + CAP_NET_ADMIN (or root); or set dataplane.local: proxy',
  );
}

function privilegesResult(): CheckResult {
  const missing = missingCapabilities();
  const title = 'privileges for raw sockets and netlink (CAP_NET_RAW, CAP_NET_ADMIN)';
  if (missing.length === 0) return ok('privileges', title, 'this process has them');
  return fail('privileges', title, `this process lacks ${missing.join(' and ')}: the agent cannot run, and the probes below are skipped`, 'run as root, or grant CAP_NET_RAW and CAP_NET_ADMIN');
}

/**
 * The host checks alone (no configuration): the eBPF local endpoint, as `ballast check` did
 * before it took a configuration (exit 0 when the host can run it, 1 when not).
 */
export async function runHostChecks(opts: { unit?: Sandbox | null } = {}): Promise<{ report: CheckReport; ebpf: { ok: boolean; reasons: string[] } }> {
  const e = await checkEbpf();
  return { report: { config: '', checks: [ebpfResult(e, false, opts.unit === undefined ? unitSandbox() : opts.unit)] }, ebpf: e };
}

/**
 * Runs every check of `config` on this node (see docs/check.md), in a fixed order.
 * Resolves, never rejects: a check that cannot run reports why as a warn or a fail.
 */
export async function runChecks(config: Config, opts: CheckOptions): Promise<CheckReport> {
  const nft = opts.nft ?? commandExecutor(['nft']);
  const unit = opts.unit === undefined ? unitSandbox() : opts.unit;
  const checks: CheckResult[] = [];
  const priv = privilegesResult();
  checks.push(priv);
  let all: InterfaceInfo[] = [];
  try {
    all = await listAllInterfaces();
  } catch (err) {
    checks.push(fail('interface', 'the interface', (err as Error).message, 'run the check as root on the node'));
  }
  const nodeAddresses = new Set(all.flatMap((i) => i.addresses.map((a) => a.address)));
  const v = config.vrrp;
  let iface: InterfaceInfo | null = null;
  const certificates = checkBackendCertificates(config, opts.certificateTimeoutMs === undefined ? {} : { timeoutMs: opts.certificateTimeoutMs }).catch((err: Error): CheckResult[] => [
    warn('backend-certificate', 'backend certificates', `the certificate checks did not run: ${err.message}`, 'see the error'),
  ]);

  if (v && all.length > 0) {
    const vip = config.vips[0]!;
    const chosen = chooseInterface(all, vip, config.interface);
    const name = config.interface ?? 'the interface';
    if (typeof chosen === 'string') {
      checks.push(fail('interface', `${name} exists and holds the VIP's subnet`, chosen, config.interface === undefined ? 'set "interface" in the configuration' : 'fix "interface" in the configuration'));
    } else {
      iface = chosen;
      const subnets = config.vips.map((x) => ({ vip: x, s: subnetsHolding(chosen, x) }));
      const without = subnets.filter((x) => x.s.length === 0).map((x) => x.vip);
      const title = `${chosen.ifname} is up and has an address in the VIP's subnet`;
      if (!chosen.running) checks.push(fail('interface', title, `${chosen.ifname} is down (not IFF_UP and IFF_RUNNING)`, `ip link set ${chosen.ifname} up, and check its cable / carrier`));
      else if (without.length > 0) checks.push(fail('interface', title, `${chosen.ifname} has no address whose subnet holds ${without.join(', ')} (it has ${chosen.addresses.filter((a) => a.family === config.family).map((a) => `${a.address}/${a.prefixLen}`).join(', ') || 'no address of that family'}): peers on the segment could not reach the VIP without a route`, 'choose a VIP in the subnet of the interface, or set "interface" to the one on that segment'));
      else checks.push(ok('interface', title, subnets.map((x) => `${x.vip} is in ${x.s.map((s) => networkOf(s.address, s.prefixLen)).join(', ')}`).join('; ')));
      for (const x of subnets) {
        for (const s of x.s) {
          const r = reservedInSubnet(x.vip, s.prefixLen);
          const t = `VIP ${x.vip} is a host address of ${networkOf(s.address, s.prefixLen)}`;
          if (r === null) checks.push(ok('vip-address', t, `neither the network${config.family === 4 ? ' nor the broadcast' : ' (subnet-router anycast)'} address`));
          else checks.push(fail('vip-address', t, `${x.vip} is the ${r} address of ${networkOf(s.address, s.prefixLen)}${r === 'broadcast' ? ': packets to it go to every host on the segment' : r === 'network' ? ': hosts treat it as the subnet itself (and some as a broadcast)' : ': RFC 4291 §2.6.1 gives it to the subnet\'s routers'}`, 'choose a host address of the subnet for the VIP'));
        }
      }
    }
  }

  // the slow listens side by side: VRRP adverts, the VIP probes, the certificates
  if (v && iface && priv.status === 'ok' && iface.running) {
    const listenMs = opts.vrrpListenMs ?? 3 * v.advertisementIntervalMs;
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
      if (subnetsHolding(probed, vip).length === 0) return Promise.resolve({ vip, claims: [] as AddressClaim[], local: false, error: null as string | null, offLink: true });
      return probeAddress(ifname, vip, config.family).then(
        (claims) => ({ vip, claims, local: false, error: null as string | null }),
        (err: Error) => ({ vip, claims: [] as AddressClaim[], local: false, error: err.message }),
      );
    });
    const [a, ...p] = await Promise.all([adverts, ...probes]);
    const speakers = judgeSpeakers(config, a.heard, nodeAddresses);
    for (const r of p) {
      const title = `VIP ${r.vip} is not in use on ${ifname}`;
      if ('offLink' in r) checks.push(warn('vip-in-use', title, `not probed: ${ifname} has no address in the subnet of ${r.vip} (see the interface check), so a probe would go to a segment the VIP is not on`, 'fix the interface check first, then run the check again'));
      else if (r.error) checks.push(warn('vip-in-use', title, `the probe could not run: ${r.error}`, 'run the check as root'));
      else if (r.local && v.owner) checks.push(ok('vip-in-use', title, `this node owns it (priority 255): ${ifname} has ${r.vip}`));
      else if (r.local && own) checks.push(ok('vip-in-use', title, `held by this node's running agent (${ifname} has ${r.vip})`));
      else if (r.local) checks.push(warn('vip-in-use', title, `${ifname} already has ${r.vip} and no ballast agent runs VRID ${v.vrid} here: left by a killed agent or by hand`, `ballast cleanup --config FILE removes it (or ip addr del ${r.vip} dev ${ifname})`));
      else checks.push(vipInUseResult(r.vip, ifname, r.claims, speakers));
    }
    if (a.error) checks.push(warn('vrrp-vrid', `no other VRRP group uses VRID ${v.vrid} on ${ifname}`, `could not listen: ${a.error}`, 'run the check as root'));
    else checks.push(vrrpResult(config, a.heard, speakers, listenMs, ifname));
  }

  if (v && iface) checks.push(membershipResult(config, iface.ifname, iface.addresses.map((a) => a.address)));

  checks.push(forwardingResult(config, nodeAddresses));
  if (vipPlaneBackends(config, nodeAddresses).length > 0) checks.push(await rulesetResult(config, nodeAddresses, nft));
  if (config.bgp && all.length > 0) checks.push(...(await bgpResults(config, all)));
  const arp = bgpArpResult(config, (key) => readSysctl(sysctlPath(key)), unit);
  if (arp) checks.push(arp);
  const server = discoveryServerResult(config);
  if (server) checks.push(server);
  if (config.localEndpoint && config.dataplane.local === 'ebpf') checks.push(ebpfResult(await checkEbpf(), true, unit));
  if (v && v.realtimePriority > 0 && unit) {
    const r = realtimeUnderUnit(unit, v.realtimePriority);
    const title = `the advert pacer gets SCHED_FIFO ${v.realtimePriority} (vrrp.realtimePriority) under ${UNIT_NAME}`;
    checks.push(r.status === 'ok' ? ok('realtime', title, r.detail) : fail('realtime', title, r.detail, r.fix!));
  }
  checks.push(...checkPorts(config, currentListeners()));
  if (v || config.apiserver.backends.length > 0) {
    const hooks = flowsFor({
      family: config.family,
      vips: config.vips,
      port: config.apiserver.port,
      backends: config.apiserver.backends,
      nodeAddresses,
      ...(iface ? { ifname: iface.ifname } : {}),
    });
    checks.push(firewallResult(await foreignFirewall(hooks, config.family, nft)));
  }
  checks.push(...(await certificates));
  return { config: opts.source, checks };
}
