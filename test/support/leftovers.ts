/**
 * What ballast may leave on a lab node after an agent ends, for the tests that check it leaves
 * nothing (start-up signals, hung helpers, killed runs).
 */
import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { Lab, LabNode } from '../../lab/lab.js';
import { agentConfig } from '../../lab/cluster.js';
import { LOCK_DIR, pinDirFor } from '../../src/dataplane/ebpf.js';
import { cgroupPrograms, SockLb } from '../../src/native.js';
import { startLab } from './lab.js';

/** PIDs of the live processes whose process group is `pgid` (/proc/PID/stat field 5, proc(5)). */
export function processGroup(pgid: number): number[] {
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      // the command name (field 2) may hold spaces and parentheses: fields follow the last ')'
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(f[2]) === pgid && f[0] !== 'Z') out.push(Number(e));
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

/** A process's command line, space-separated ('?' when it is gone). */
export function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
  } catch {
    return '?';
  }
}

/** The host-wide lock file of the pins in `pinDir` (dataplane/ebpf.ts lockPinDir). */
export const pinLockPath = (pinDir: string): string => `${LOCK_DIR}/${basename(pinDir)}.lock`;

/**
 * What is left of ballast on `node` (the lab's IPv4 and IPv6 VIPs, `table ip ballast`, `table ip6 ballast`) and on the host (the pins of
 * `pinDir`, programs on `cgroup`, the pins' lock file, live processes of each group in `pgids`),
 * as findings; empty when nothing is.
 */
export async function leftoversOn(lab: Lab, node: LabNode, o: { pinDir: string; cgroup: string; pgids: readonly number[] }): Promise<string[]> {
  const found: string[] = [];
  const addresses = await lab.addresses(node);
  for (const vip of [lab.vip4, lab.vip6]) if (addresses.some((a) => a.address === vip)) found.push(`VIP ${vip} on eth0`);
  for (const family of ['ip', 'ip6']) {
    if ((await lab.exec(node.netns, ['nft', 'list', 'table', family, 'ballast'], { allowFail: true })).code === 0) found.push(`table ${family} ballast`);
  }
  if (existsSync(o.pinDir)) found.push(`BPF pins ${o.pinDir}: ${readdirSync(o.pinDir).join(', ')}`);
  const progs = cgroupPrograms(o.cgroup).filter((p) => p.ids.length > 0);
  if (progs.length > 0) found.push(`programs on the cgroup: ${progs.map((p) => p.attachType).join(', ')}`);
  if (existsSync(pinLockPath(o.pinDir))) found.push(`lock file ${pinLockPath(o.pinDir)}`);
  for (const g of o.pgids) {
    const ps = processGroup(g);
    if (ps.length > 0) found.push(`processes of group ${g}: ${ps.map((p) => `${p} ${cmdline(p)}`).join('; ')}`);
  }
  return found;
}

/** A lab of 2 nodes with stand-in apiservers, and n1 set up for an agent that uses every part. */
export interface FullAgentLab {
  lab: Lab;
  /** n1's own cgroup-v2 child, where the eBPF local endpoint attaches (never the root cgroup). */
  cgroup: string;
  pinDir: string;
  /** A config for n1: election, backends, nftables VIP data plane, eBPF local endpoint (keepOnStop false). */
  configPath: string;
}

/**
 * Starts the lab and writes n1's config with every part that leaves state behind; removes a pins
 * lock file an interrupted earlier run of the same test left, so it is not blamed on this one.
 * `dataplane` is merged into the config's `dataplane` section.
 */
export async function startFullAgentLab(o: { prefix: string; subnet: number; configName: string; dataplane?: Record<string, unknown> }): Promise<FullAgentLab> {
  const lab = await startLab({ prefix: o.prefix, subnet: o.subnet, nodes: 2, ipv6: false, apiservers: true });
  const n1 = lab.nodes[0]!;
  const cgroup = await lab.cgroup(n1);
  const pinDir = pinDirFor(cgroup);
  rmSync(pinLockPath(pinDir), { force: true });
  const configPath = join(lab.dir, o.configName);
  const extra = { localEndpoint: { address: '127.0.0.1:7443', cgroup }, dataplane: { vip: 'nftables', local: 'ebpf', keepOnStop: false, ...o.dataplane } };
  writeFileSync(configPath, agentConfig(lab, n1, { priority: 150, balance: true, extra }));
  return { lab, cgroup, pinDir, configPath };
}

/** Undoes {@link startFullAgentLab}: the pins and their lock (whatever a failed case left), their empty parent, the lab. */
export async function teardownFullAgentLab(f: Partial<FullAgentLab>): Promise<void> {
  try {
    if (f.pinDir) {
      if (existsSync(f.pinDir)) SockLb.detach(f.pinDir);
      rmSync(pinLockPath(f.pinDir), { force: true });
      try {
        rmdirSync(dirname(f.pinDir));
      } catch {
        /* not empty (another agent's pins), or already gone */
      }
    }
  } finally {
    await f.lab?.teardown();
  }
}
