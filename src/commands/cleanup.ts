/**
 * `ballast cleanup`: the uninstall. A clean stop is a restart (the eBPF local endpoint stays
 * attached, see dataplane.keepOnStop); this removes everything any ballast agent left on this
 * node, for the package's prerm and for a node being retired:
 *
 *   what                                         where                          guarded by
 *   mode: bgp (--config): the announcement       bgp.configFile (ballast's own  the table lock of
 *     withdrawn: the snippet rewritten with the    only) and BIRD on bgp.socket   its family (what a
 *     static protocol disabled, `configure`,                                      BGP agent holds)
 *     `disable ballast_vipF`
 *   the VIPs of the configured set (--config)    any interface of this netns    the VIP locks
 *   `table ip ballast`, `table ip6 ballast`      this network namespace         the table locks
 *   every pin directory (programs, maps, links)  /sys/fs/bpf/ballast/*          each one's flock
 *   the pins' lock files, then the directories   /run/ballast, /sys/fs/bpf/ballast
 *
 * Each lock is taken before its object is removed, so a running agent's state is never touched:
 * the command then fails with BALLAST_E_ALREADY_RUNNING (stop the agent first) after removing
 * what no agent holds. Idempotent: a second run finds nothing and succeeds. BIRD not answering
 * is a note (the snippet says disabled: a BIRD that starts does not announce); BIRD refusing is
 * a failure, reported after the rest was removed.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { createError, isBallastError } from '../errors.js';
import { NftablesApplier } from '../dataplane/apply.js';
import { announceCommand, BirdControl, BirdError, configure, foreignSnippet, renderBirdConfig, vipProtocol, writeSnippet } from '../bgp/bird.js';
import { DEFAULT_PIN_DIR, LOCK_DIR, lockPinDir, nativeEbpfSys } from '../dataplane/ebpf.js';
import { listInterfaces, openRtnl, removeVips } from '../vip/netlink.js';
import { acquireTableLock, acquireVipLock } from '../host/locks.js';

/** What {@link cleanupNode} removed and what it could not, as lines for people. */
export interface CleanupReport {
  removed: string[];
  /** held by a running agent (its lock is taken): left alone */
  inUse: string[];
  /** what was left as it was and why, not a failure (BIRD not answering, a bgp.configFile that is not ballast's) */
  notes: string[];
  /** what could not be done (BIRD refused the withdrawal): the rest was removed */
  failed: string[];
}

/** Where ballast pins (the parent of every pin directory) and keeps its lock files; tests change them. */
export interface CleanupPaths {
  bpfDir: string;
  lockDir: string;
}

const DEFAULT_PATHS: CleanupPaths = { bpfDir: join(DEFAULT_PIN_DIR, '..'), lockDir: LOCK_DIR };

/**
 * Removes what ballast left on this node (see the file comment).
 * @param config when given, its VIPs are removed too (not those of an address owner, priority
 *   255: they are the node's own addresses).
 * @returns the report; `inUse` non-empty means an agent runs.
 * @throws BallastError BALLAST_E_NETLINK / BALLAST_E_DATAPLANE when the kernel refuses a removal.
 */
export async function cleanupNode(config: Config | null, paths: CleanupPaths = DEFAULT_PATHS): Promise<CleanupReport> {
  const report: CleanupReport = { removed: [], inUse: [], notes: [], failed: [] };
  /** Runs `fn` under the lock `take` gives; a lock held by an agent puts `what` in inUse. */
  const locked = async <L extends { close(): unknown } | { release(): unknown }>(
    what: string,
    take: () => L | Promise<L>,
    fn: () => Promise<void> | void,
  ): Promise<void> => {
    let lock: L;
    try {
      lock = await take();
    } catch (err) {
      if (isBallastError(err) && (err.code === 'BALLAST_E_ALREADY_RUNNING' || err.code === 'BALLAST_E_LOCAL_ENDPOINT_IN_USE')) {
        report.inUse.push(what);
        return;
      }
      throw err;
    }
    try {
      await fn();
    } finally {
      if ('close' in lock) lock.close();
      else lock.release();
    }
  };

  const removeVipsEverywhere = async (vips: readonly string[]): Promise<void> => {
    for (const vip of vips) {
      await locked(
        `VIP ${vip}`,
        () => acquireVipLock(vip),
        async () => {
          const rt = openRtnl();
          try {
            for (const iface of await listInterfaces(rt)) {
              for (const a of await removeVips(rt, iface.ifindex, [vip])) report.removed.push(`VIP ${a.address}/${a.prefixLen} on ${iface.ifname}`);
            }
          } catch (err) {
            throw createError('BALLAST_E_NETLINK', `cannot remove the VIP ${vip}: ${(err as Error).message}`, { cause: err });
          } finally {
            rt.close();
          }
        },
      );
    }
  };
  // the VIPs first: an address nobody answers for is worse than a stale rule
  if (config !== null && config.vrrp !== null && !config.vrrp.owner && config.vips.length > 0) await removeVipsEverywhere(config.vips);
  // mode: bgp: the routers stop sending first, then the VIPs go (a dead agent's BIRD announced them)
  if (config !== null && config.bgp !== null && config.vips.length > 0) {
    const table = config.family === 4 ? 'table ip ballast' : 'table ip6 ballast';
    await locked(
      `the BGP announcement and VIPs of ${config.vips.join(', ')} (guarded by the ${table} lock)`,
      () => acquireTableLock(config.family),
      async () => {
        await withdrawBgp(config, report);
        await removeVipsEverywhere(config.vips);
      },
    );
  }

  const applier = new NftablesApplier();
  for (const family of [4, 6] as const) {
    const table = family === 4 ? 'table ip ballast' : 'table ip6 ballast';
    await locked(
      table,
      () => acquireTableLock(family),
      async () => {
        if (tableExists(family)) {
          await applier.remove([family]);
          report.removed.push(table);
        }
      },
    );
  }

  // every pin directory, whichever cgroup it served
  const pinDirs = existsSync(paths.bpfDir) ? readdirSync(paths.bpfDir).map((n) => join(paths.bpfDir, n)) : [];
  for (const pinDir of pinDirs) {
    await locked(
      `eBPF pins ${pinDir}`,
      () => lockPinDir(pinDir, '(any)', paths.lockDir),
      () => {
        const n = nativeEbpfSys.detach(pinDir);
        report.removed.push(`eBPF pins ${pinDir} (${n})`);
      },
    );
  }
  // lock files a SIGKILLed agent left: taking and releasing one removes it
  const locks = existsSync(paths.lockDir) ? readdirSync(paths.lockDir).filter((n) => n.endsWith('.lock')) : [];
  for (const name of locks) {
    await locked(
      `lock ${join(paths.lockDir, name)}`,
      () => lockPinDir(join(paths.bpfDir, name.slice(0, -'.lock'.length)), '(any)', paths.lockDir),
      () => {
        report.removed.push(`lock file ${join(paths.lockDir, name)}`);
      },
    );
  }
  for (const dir of [paths.bpfDir, paths.lockDir]) {
    try {
      rmdirSync(dir);
      report.removed.push(`directory ${dir}`);
    } catch {
      /* absent, or not empty (an agent's) */
    }
  }
  return report;
}

/**
 * Withdraws mode: bgp's announcement the way the agent does: ballast's own snippet rewritten with
 * the static protocol disabled (so that a BIRD starting later does not announce either), then,
 * through bgp.socket, `configure` (when the file changed) and `disable ballast_vipF`. Never throws:
 * BIRD not answering and a configFile that is not ballast's are notes, BIRD refusing is a failure.
 * @param timeoutMs how long each BIRD command may take, ms.
 */
export async function withdrawBgp(config: Config, report: CleanupReport, timeoutMs = 3000): Promise<void> {
  const bgp = config.bgp!;
  const path = bgp.configFile;
  const what = `the BGP announcement of ${config.vips.join(', ')}`;
  const foreign = foreignSnippet(path);
  let written = false;
  if (foreign !== null) report.notes.push(`bgp.configFile ${path} ${foreign}: left alone`);
  else if (existsSync(path) && readFileSync(path, 'utf8').trim() !== '') {
    try {
      written = writeSnippet(path, renderBirdConfig({ bgp, family: config.family, vips: config.vips, announced: false }, path));
    } catch (err) {
      report.failed.push(`cannot rewrite ${path} with ${vipProtocol(config.family)} disabled: ${(err as Error).message}`);
    }
    if (written) report.removed.push(`${what} from ${path} (${vipProtocol(config.family)} disabled)`);
  }
  const ctl = new BirdControl(bgp.socket, timeoutMs);
  try {
    if (written) await configure(ctl);
    const lines = await ctl.command(announceCommand(config.family, false));
    // 0009 "disabled"; 0008 "already disabled" (withdrawn before: nothing to report)
    if (lines.some((l) => l.code === 9)) report.removed.push(`${what} from BIRD on ${bgp.socket} (disable ${vipProtocol(config.family)})`);
  } catch (err) {
    const msg = (err as Error).message;
    if (err instanceof BirdError && err.code === 8003) {
      // "No protocols match": this BIRD never loaded ballast's snippet
    } else if (err instanceof BirdError && err.code === null) {
      report.notes.push(
        `BIRD does not answer on bgp.socket ${bgp.socket} (${err.errno ?? msg}): nothing withdrawn there; ${foreign === null ? `${path} says ${vipProtocol(config.family)} is disabled, so BIRD does not announce the VIPs when it starts` : `withdraw by hand once it runs: birdc -s ${bgp.socket} disable ${vipProtocol(config.family)}`}`,
      );
    } else {
      report.failed.push(`BIRD on ${bgp.socket} refused the withdrawal of ${config.vips.join(', ')}: ${msg}`);
    }
  } finally {
    ctl.close();
  }
}

/** Whether `table ip|ip6 ballast` exists in this network namespace (`nft list table`, at most 5 s). */
function tableExists(family: 4 | 6): boolean {
  const r = spawnSync('nft', ['list', 'table', family === 4 ? 'ip' : 'ip6', 'ballast'], { stdio: 'ignore', timeout: 5000 });
  return r.status === 0;
}

/**
 * `ballast cleanup`: what an uninstall runs after the agent stopped (a stop is a restart and
 * keeps the eBPF local endpoint serving). A configuration that cannot be read only costs its VIPs.
 */
export async function cleanup(o: { config?: string }): Promise<number> {
  const { parseConfig } = await import('../config/index.js');
  let config: Config | null = null;
  if (o.config !== undefined) {
    try {
      // its files are not looked at: a missing CA or key must not stop an uninstall
      config = parseConfig(readFileSync(o.config, 'utf8'), o.config);
    } catch (err) {
      process.stderr.write(`ballast cleanup: cannot use ${o.config} (${(err as Error).message.split('\n')[0]}); its VIPs are not removed\n`);
    }
  }
  const r = await cleanupNode(config);
  for (const line of r.removed) process.stdout.write(`removed ${line}\n`);
  for (const line of r.notes) process.stderr.write(`ballast cleanup: ${line}\n`);
  if (r.removed.length === 0 && r.inUse.length === 0 && r.failed.length === 0) process.stdout.write('nothing of ballast left on this node\n');
  if (r.inUse.length > 0) {
    throw createError('BALLAST_E_ALREADY_RUNNING', `a running ballast agent holds ${r.inUse.join(', ')}: left alone; stop the agent first`);
  }
  if (r.failed.length > 0) throw createError('BALLAST_E_BGP', `${r.failed.join('; ')} (the rest was removed)`);
  return 0;
}
