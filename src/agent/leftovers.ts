/**
 * What this configuration's data planes leave on the system, and what a SIGKILLed earlier run of
 * it may have left: its VIPs on the interface, ballast's nftables tables (`table ip ballast`,
 * `table ip6 ballast`) and the eBPF pins of its local-endpoint cgroup. Preflight registers their removal right after it has
 * taken the locks, so that a clean stop with `dataplane.keepOnStop: none` at any moment of
 * start-up — also before the data-plane phases ran — leaves nothing of ballast's.
 */
import { existsSync, rmdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Config } from '../config/index.js';
import { NftablesApplier } from '../dataplane/apply.js';
import { nativeEbpfSys } from '../dataplane/ebpf.js';
import type { Log } from '../log/log.js';
import { openRtnl, removeVips } from '../vip/netlink.js';

/**
 * Removes `vips` from the interface `ifindex` whatever their prefix length, from the main thread
 * (the caller holds their VIP locks): what a killed master left, at a stop before the election
 * ran, and what a failed election held. A clean election stop removes its own.
 * @throws Error when netlink refuses (the stack logs it).
 */
export async function removeLeftoverVips(ifindex: number, vips: readonly string[], log: Pick<Log, 'info'>): Promise<void> {
  const rt = openRtnl();
  try {
    const removed = await removeVips(rt, ifindex, vips);
    if (removed.length > 0) log.info({ vips: removed.map((a) => `${a.address}/${a.prefixLen}`) }, 'VIPs an earlier run left removed');
  } finally {
    rt.close();
  }
}

/** Whether this configuration runs the nftables VIP data plane (as startPhases decides it). */
export function runsNftables(config: Config): boolean {
  return config.vrrp !== null && config.apiserver.backends.length > 0 && config.dataplane.vip === 'nftables';
}

/** Whether this configuration runs the eBPF local endpoint (as startPhases decides it; it may still fall back to the proxy). */
export function runsEbpfLocalEndpoint(config: Config): boolean {
  return config.localEndpoint !== null && config.apiserver.backends.length > 0 && config.dataplane.local === 'ebpf';
}

/**
 * Removes this agent's nftables table (its VIPs' family), at most once per stop: the VIP data-plane phase's undo and
 * preflight's (for what an earlier run left) share it, so a hung nft costs one time limit, not
 * two. {@link rearm} (the VIP data plane about to apply again) allows the next removal.
 */
export class TableRemoval {
  readonly #log: Pick<Log, 'error' | 'info'>;
  readonly #applier: NftablesApplier;
  #done: Promise<void> | null = null;

  #family: 4 | 6;

  /**
   * @param family the VIPs' family: only its table is this agent's (an agent of the other family
   *   may run beside it in the namespace, holding the other table's lock).
   */
  constructor(log: Pick<Log, 'error' | 'info'>, family: 4 | 6, applier = new NftablesApplier()) {
    this.#log = log;
    this.#family = family;
    this.#applier = applier;
  }

  /** Deletes this family's table (an absent one is fine); a failure is logged, naming nft and why. Never rejects. */
  remove(): Promise<void> {
    this.#done ??= this.#applier.remove([this.#family]).catch((err: unknown) => {
      this.#log.error({ err: err instanceof Error ? err.message : String(err) }, 'cannot remove the nftables table');
    });
    return this.#done;
  }

  /** The tables are (about to be) programmed again: the next {@link remove} runs nft again. */
  rearm(): void {
    this.#done = null;
  }

  /** The family whose table {@link remove} deletes. */
  get family(): 4 | 6 {
    return this.#family;
  }

  /**
   * The VIPs' family changed (a reload's hand-over; the caller holds `family`'s table lock): the
   * next removals are of that family's table. Rearms.
   */
  retarget(family: 4 | 6): void {
    this.#family = family;
    this.#done = null;
  }
}

/**
 * Detaches and removes the pins in `pinDir` (this agent's cgroup's, found by pinDirFor; the
 * caller holds its lock, so no other running agent uses them) when they exist, and the parent
 * directory when it is empty then.
 * @throws BallastError/NativeError when the pins cannot be removed (the stack logs it).
 */
export function removePins(pinDir: string, log: Pick<Log, 'info'>): void {
  if (!existsSync(pinDir)) return;
  const n = nativeEbpfSys.detach(pinDir);
  try {
    rmdirSync(dirname(pinDir)); // ENOTEMPTY while another agent's pins are there
  } catch {
    /* not empty, or gone */
  }
  if (n > 0) log.info({ pinDir, pins: n }, 'eBPF pins an earlier run left removed');
}
