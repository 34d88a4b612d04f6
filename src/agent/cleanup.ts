/**
 * `ballast cleanup`: the uninstall. A clean stop is a restart (the eBPF local endpoint stays
 * attached, see dataplane.keepOnStop); this removes everything any ballast agent left on this
 * node, for the package's prerm and for a node being retired:
 *
 *   what                                         where                          guarded by
 *   the VIPs of the configured set (--config)    any interface of this netns    the VIP locks
 *   `table ip ballast`, `table ip6 ballast`      this network namespace         the table locks
 *   every pin directory (programs, maps, links)  /sys/fs/bpf/ballast/*          each one's flock
 *   the pins' lock files, then the directories   /run/ballast, /sys/fs/bpf/ballast
 *
 * Each lock is taken before its object is removed, so a running agent's state is never touched:
 * the command then fails with BALLAST_E_ALREADY_RUNNING (stop the agent first) after removing
 * what no agent holds. Idempotent: a second run finds nothing and succeeds.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { createError, isBallastError } from '../errors.js';
import { NftablesApplier } from '../dataplane/apply.js';
import { DEFAULT_PIN_DIR, LOCK_DIR, lockPinDir, nativeEbpfSys } from '../dataplane/ebpf.js';
import { listInterfaces, openRtnl, removeVips } from '../vip/netlink.js';
import { acquireTableLock, acquireVipLock } from './preflight.js';

/** What {@link cleanupNode} removed and what it could not, as lines for people. */
export interface CleanupReport {
  removed: string[];
  /** held by a running agent (its lock is taken): left alone */
  inUse: string[];
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
  const report: CleanupReport = { removed: [], inUse: [] };
  /** Runs `fn` under the lock `take` gives; a lock held by an agent puts `what` in inUse. */
  const locked = async <L extends { close(): unknown } | { release(): unknown }>(what: string, take: () => L | Promise<L>, fn: () => Promise<void> | void): Promise<void> => {
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

  // the VIPs first: an address nobody answers for is worse than a stale rule
  if (config !== null && config.vrrp !== null && !config.vrrp.owner && config.vips.length > 0) {
    for (const vip of config.vips) {
      await locked(`VIP ${vip}`, () => acquireVipLock(vip), async () => {
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
      });
    }
  }

  const applier = new NftablesApplier();
  for (const family of [4, 6] as const) {
    const table = family === 4 ? 'table ip ballast' : 'table ip6 ballast';
    await locked(table, () => acquireTableLock(family), async () => {
      if (tableExists(family)) {
        await applier.remove([family]);
        report.removed.push(table);
      }
    });
  }

  // every pin directory, whichever cgroup it served
  const pinDirs = existsSync(paths.bpfDir) ? readdirSync(paths.bpfDir).map((n) => join(paths.bpfDir, n)) : [];
  for (const pinDir of pinDirs) {
    await locked(`eBPF pins ${pinDir}`, () => lockPinDir(pinDir, '(any)', paths.lockDir), () => {
      const n = nativeEbpfSys.detach(pinDir);
      report.removed.push(`eBPF pins ${pinDir} (${n})`);
    });
  }
  // lock files a SIGKILLed agent left: taking and releasing one removes it
  const locks = existsSync(paths.lockDir) ? readdirSync(paths.lockDir).filter((n) => n.endsWith('.lock')) : [];
  for (const name of locks) {
    await locked(`lock ${join(paths.lockDir, name)}`, () => lockPinDir(join(paths.bpfDir, name.slice(0, -'.lock'.length)), '(any)', paths.lockDir), () => {
      report.removed.push(`lock file ${join(paths.lockDir, name)}`);
    });
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

/** Whether `table ip|ip6 ballast` exists in this network namespace (`nft list table`, at most 5 s). */
function tableExists(family: 4 | 6): boolean {
  const r = spawnSync('nft', ['list', 'table', family === 4 ? 'ip' : 'ip6', 'ballast'], { stdio: 'ignore', timeout: 5000 });
  return r.status === 0;
}
