/**
 * The `foreign-firewall` check: does another firewall on this node (other nftables tables,
 * iptables-legacy) drop traffic to the VIP or the backends? firewall.ts analyses what this module
 * reads.
 */
import { existsSync } from 'node:fs';
import { commandExecutor, type Executor } from '../dataplane/apply.js';
import { analyseIptablesSave, analyseNftRuleset, countForeignChains, type FirewallFinding, type HookFlows } from './firewall.js';
import { fail, ok, warn, type CheckResult } from './report.js';

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

/** The `foreign-firewall` result of {@link foreignFirewall}'s findings. */
export function firewallResult(r: Awaited<ReturnType<typeof foreignFirewall>>): CheckResult {
  const title = 'no other firewall on this node drops traffic to the VIP or the backends';
  if (r.error) return warn('foreign-firewall', title, `${r.error}; other firewalls were not checked`, 'install nftables and run the check as root');
  const fails = r.findings.filter((f) => f.severity === 'fail');
  const list = r.findings.map((f) => `${f.severity === 'fail' ? 'drops' : 'may drop'}: ${f.detail}`).join('; ');
  const fix =
    'add an accept rule for TCP to the VIP port and the backends before the drop (in that table: e.g. `tcp dport <port> accept`), or remove the rule; ballast never edits other tables';
  if (fails.length > 0) return fail('foreign-firewall', title, list, fix);
  if (r.findings.length > 0) return warn('foreign-firewall', title, list, fix);
  return ok(
    'foreign-firewall',
    title,
    `${r.chains} base chain${r.chains === 1 ? '' : 's'} of other nftables tables checked${r.legacy ? ', and iptables-legacy' : ''}: none drops it`,
  );
}
