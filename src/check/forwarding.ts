/**
 * The VIP data plane's checks: `ip-forwarding` (the sysctl where connections are DNATed to another
 * node) and `nftables-ruleset` (the kernel accepts the rendered ruleset, `nft -c`).
 */
import { readFileSync } from 'node:fs';
import type { Config } from '../config/index.js';
import type { Executor } from '../dataplane/apply.js';
import { renderRuleset } from '../dataplane/nftables.js';
import { canonicalAddress } from '../net/address.js';
import { formatHostPort } from '../net/hostport.js';
import { fail, ok, type CheckResult } from './report.js';

/** A sysctl file's trimmed text, null when it cannot be read. */
export function readSysctl(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
}

/**
 * Whether this configuration runs the nftables VIP data plane on this node: VRRP mode with
 * `dataplane.vip: nftables`, or BGP mode (which always balances VIP:port with it, src/agent/phases/bgp.ts).
 */
export function runsVipDataPlane(config: Config): boolean {
  if (config.apiserver.backends.length === 0) return false;
  if (config.bgp) return true;
  return config.vrrp !== null && config.dataplane.vip === 'nftables';
}

/**
 * The backends the VIP data plane balances to here: every backend, except in BGP mode with
 * `bgp.balance: local` (this node's own apiservers only, as balancedSource in src/agent/phases/bgp.ts).
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
    return ok(
      'ip-forwarding',
      title,
      `not needed: no connection to the VIP is DNATed to another node here (${!runsVipDataPlane(config) ? 'no nftables VIP data plane' : config.bgp?.balance === 'local' ? "bgp.balance: local balances to this node's apiserver only" : 'no remote backend'})`,
    );
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

/** `nftables-ruleset`: the ruleset this configuration renders passes `nft -c` (validated by the kernel, never committed). */
export async function rulesetResult(config: Config, nodeAddresses: ReadonlySet<string>, nft: Executor): Promise<CheckResult> {
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
  if (r.code === 0)
    return ok(
      'nftables-ruleset',
      title,
      `the rendered ruleset (${text.split('\n').length - 1} lines: nat hooks prerouting/output/postrouting, jhash, a verdict map, dnat, masquerade, ct expressions, a timeout set, reject) passes nft -c`,
    );
  return fail(
    'nftables-ruleset',
    title,
    `nft -c refused it (exit ${r.code}${r.killed ? `, ${r.killed}` : ''}): ${r.stderr.trim().split('\n').slice(0, 6).join(' | ')}`,
    'the kernel lacks an nftables module the data plane needs (nf_tables, nft_nat, nft_hash, nft_ct, nft_masq, nft_counter, nft_reject_ipv4 or _ipv6): load them or use a kernel with them; or set dataplane.vip: none',
  );
}
