/**
 * Phase, BGP (`mode: bgp`, docs/bgp.md): in place of the election, this node announces the VIPs
 * through BIRD while it can serve them.
 *
 *   arp_ignore 1, arp_announce 2 (IPv4)        no ARP reply for the VIPs, nor ARP requests
 *                                               sent from them (src/vip/noarp.ts)
 *   VIPs /32 (/128) on bgp.interface (lo)      the node accepts their traffic
 *   nftables table (the VIP data plane)         VIP:port DNAT to the ready set: all ready
 *                                               apiservers, or this node's only (bgp.balance)
 *   BirdSpeaker                                 announce while the plane serves ≥ 1 backend
 *                                               (bgp.announce: backends) or while this node's
 *                                               apiserver is up (local); withdraw otherwise
 *
 * The announcement follows what the data plane *applied* (not the verdicts): a route is offered
 * only once the DNAT rules that serve it are in the kernel, and withdrawn before the plane drops
 * its last backend's rule. Undo: withdraw (unless dataplane.keepOnStop is `all`: then BIRD keeps
 * announcing, the table and the VIPs stay, and the next start takes over), remove the VIPs,
 * remove the table.
 */
import type { Config } from '../../config/index.js';
import { createError } from '../../errors.js';
import type { HealthChecker } from '../../health/checker.js';
import type { BackendVerdict, Verdict } from '../../health/verdict.js';
import { LoadBalancer, VIP_PLANE_MESSAGES } from '../../dataplane/controller.js';
import { NftablesApplier } from '../../dataplane/apply.js';
import { flushBackend } from '../../dataplane/conntrack.js';
import { probeClients } from '../../dataplane/probe.js';
import { Reconciler, type ReadySet, type VerdictSource } from '../../dataplane/reconcile.js';
import { canonicalAddress } from '../../net/address.js';
import { formatHostPort, sameHostPort, type HostPort } from '../../net/hostport.js';
import { BirdSpeaker, type BgpStatus } from '../../bgp/speaker.js';
import { BirdError } from '../../bgp/bird.js';
import { birdRefusalFix } from '../../bgp/refusal.js';
import { addVip, delVip, openRtnl, listInterfaces } from '../../vip/netlink.js';
import { ARP_SYSCTL_FIX, raiseArpSysctls, restoreArpSysctls, type SysctlIo } from '../../vip/noarp.js';
import { TableRemoval } from '../leftovers.js';
import { runPhase, type AgentContext, type PhaseHandle, type PhaseSpec } from '../phase.js';
import { acquireTableLock } from '../../host/locks.js';
import { bgpInterface } from '../../host/interfaces.js';

/**
 * After a stop's withdrawal the data plane stays until no new connection has been DNATed for
 * this long, ms: the peers have then acted on the UPDATE (processed it and rewritten their FIB),
 * and requests already in flight have had that long to finish.
 */
export const WITHDRAW_QUIET_MS = 300;
/** The longest a stop waits for that quiet, ms (traffic from this node's own processes to the VIP never stops). */
export const WITHDRAW_DRAIN_MAX_MS = 3000;
/** How often the drain reads the per-backend counters, ms. */
export const WITHDRAW_POLL_MS = 50;

/** What {@link drainAfterWithdraw} saw. */
export interface DrainResult {
  /** No new connection for quietMs before maxMs passed. */
  quiet: boolean;
  /** Time from the call to its end, ms. */
  waitedMs: number;
  /** New connections DNATed after the withdrawal (counter increase). */
  arrived: number;
  /** The counters could not be read (the drain then waited quietMs once). */
  error: string | null;
}

/**
 * Waits until the data plane has taken no new connection for `quietMs` (the peers route
 * elsewhere now), at most `maxMs`. `newConnections` returns a monotonic count of connections
 * DNATed so far (the sum of the per-backend nftables counters, {@link NftablesApplier.counters}).
 * Never throws: a failed read ends the count and the drain waits `quietMs` once from then.
 * @param opts.quietMs, opts.maxMs, opts.pollMs in ms (defaults WITHDRAW_QUIET_MS, WITHDRAW_DRAIN_MAX_MS, WITHDRAW_POLL_MS)
 * @param opts.now, opts.sleep the clock (ms) and a sleep, injected by tests
 */
export async function drainAfterWithdraw(
  newConnections: () => Promise<number>,
  opts: { quietMs?: number; maxMs?: number; pollMs?: number; now?: () => number; sleep?: (ms: number) => Promise<void> } = {},
): Promise<DrainResult> {
  const quietMs = opts.quietMs ?? WITHDRAW_QUIET_MS;
  const maxMs = opts.maxMs ?? WITHDRAW_DRAIN_MAX_MS;
  const pollMs = opts.pollMs ?? WITHDRAW_POLL_MS;
  const now = opts.now ?? ((): number => performance.now());
  const sleep = opts.sleep ?? ((ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms)));
  const t0 = now();
  let first: number;
  try {
    first = await newConnections();
  } catch (err) {
    await sleep(quietMs);
    return { quiet: false, waitedMs: now() - t0, arrived: 0, error: (err as Error).message };
  }
  let last = first;
  let lastChange = now();
  while (now() - t0 < maxMs) {
    if (now() - lastChange >= quietMs) return { quiet: true, waitedMs: now() - t0, arrived: last - first, error: null };
    await sleep(Math.min(pollMs, quietMs - (now() - lastChange)));
    let n: number;
    try {
      n = await newConnections();
    } catch (err) {
      await sleep(quietMs);
      return { quiet: false, waitedMs: now() - t0, arrived: last - first, error: (err as Error).message };
    }
    if (n !== last) {
      last = n;
      lastChange = now();
    }
  }
  return { quiet: now() - lastChange >= quietMs, waitedMs: now() - t0, arrived: last - first, error: null };
}

/** The running BGP phase. */
export interface BgpPhase extends PhaseHandle {
  /** /status's `bgp`. */
  status(): BgpStatus & { localBackend: string | null };
  /** The VIP's data plane, following the checker's verdicts (for /status and a re-sync after the backend set changed). */
  lb: Reconciler<LoadBalancer>;
}

/** What mode: bgp follows without a restart: the log level, the health settings and the backend set. */
const BGP_FOLLOWS = ['log.level', 'apiserver.health', 'apiserver.backends', 'discovery'];

/**
 * Phase 6 in mode: bgp (instead of the election): this node announces the VIPs through BIRD
 * while it can serve them. In that mode a reload applies only {@link BGP_FOLLOWS}; any other
 * change takes a restart.
 */
export const bgpPhase: PhaseSpec<{ checker: HealthChecker; sysctl?: SysctlIo }, BgpPhase> = {
  name: 'BGP',
  settings: [
    {
      path: '',
      on: ({ cur, next }, path) =>
        (cur.mode === 'bgp' || next.mode === 'bgp') && !BGP_FOLLOWS.some((a) => path === a || path.startsWith(`${a}.`)) ? 'restart' : 'same',
      why: 'this setting in mode: bgp',
    },
  ],
  start: startBgp,
};

/**
 * Which backends the plane balances to under `bgp.balance` (pure): all, or those of `local`.
 * @returns a VerdictSource showing only those backends' verdicts.
 */
export function balancedSource(source: VerdictSource, local: (b: HostPort) => boolean, balance: 'all' | 'local'): VerdictSource {
  if (balance === 'all') return source;
  const wrapped = new Map<(v: Verdict) => void, (v: Verdict) => void>();
  return {
    verdicts: (): readonly BackendVerdict[] => source.verdicts().filter((v) => local(v.backend)),
    on(event, listener) {
      const w = (v: Verdict): void => {
        if (local(v.backend)) listener(v);
      };
      wrapped.set(listener, w);
      return source.on(event, w);
    },
    off(event, listener) {
      const w = wrapped.get(listener);
      wrapped.delete(listener);
      return w ? source.off(event, w) : undefined;
    },
  };
}

/**
 * Whether to announce (pure): `backends` = the plane serves at least one; `local` = this node's
 * apiserver is among the ready ones.
 * @returns the decision and its reason.
 */
export function announceDecision(
  announce: 'backends' | 'local',
  served: readonly HostPort[],
  ready: readonly HostPort[],
  local: (b: HostPort) => boolean,
): { want: boolean; reason: string } {
  if (announce === 'local') {
    const mine = ready.filter(local);
    return mine.length > 0
      ? { want: true, reason: `the local apiserver ${formatHostPort(mine[0]!)} is ready` }
      : { want: false, reason: 'the local apiserver is not ready' };
  }
  return served.length > 0
    ? { want: true, reason: `the data plane serves ${served.length} ready backend${served.length === 1 ? '' : 's'}` }
    : { want: false, reason: 'no ready backend in the data plane' };
}

/**
 * Starts BGP mode: takes the nftables table lock of the VIPs' family, raises arp_ignore /
 * arp_announce (IPv4; `inputs.sysctl`, default /proc/sys; a failure is a warning), binds the VIPs on
 * bgp.interface, programs the table, writes and pushes the BIRD snippet (not announced), then
 * follows the data plane.
 * @throws BallastError BALLAST_E_DATAPLANE when the first apply fails; BALLAST_E_INTERFACE_NOT_FOUND
 *   when bgp.interface is missing; BALLAST_E_NETLINK when the VIPs cannot be added; BALLAST_E_BGP when BIRD refuses the snippet.
 */
export function startBgp(ctx: AgentContext, config: Config, inputs: { checker: HealthChecker; sysctl?: SysctlIo }): Promise<BgpPhase> {
  return runPhase(ctx, 'BGP', async (own) => {
    const { checker } = inputs;
    const { log } = ctx;
    const bgp = config.bgp!;
    const family = config.family;
    const keepAllSetting = config.dataplane.keepOnStop === 'all';
    // a restart in place keeps the announcement, the VIPs and the table for the next process
    const keepAll = (): boolean => keepAllSetting || (ctx.restarting?.() ?? null) !== null;

    const lock = await acquireTableLock(family);
    own.defer('nftables table lock', () => void lock.close());

    const rt = openRtnl();
    own.defer('rtnetlink socket', () => rt.close());
    const all = await listInterfaces(rt).catch((err: unknown) => {
      throw createError('BALLAST_E_NETLINK', `cannot list interfaces through rtnetlink: ${(err as Error).message}`, { cause: err });
    });
    // preflight checked it before anything changed; it may have gone since
    const iface = bgpInterface(config, all);
    const nodeAddresses = new Set(all.flatMap((i) => i.addresses.map((a) => a.address)));
    const localBackend = config.policy.localBackend ?? config.apiserver.backends.find((b) => nodeAddresses.has(b.host));
    const isLocal = (b: HostPort): boolean =>
      localBackend !== undefined
        ? sameHostPort(b, localBackend) || (b.port === localBackend.port && canonicalAddress(b.host) === canonicalAddress(localBackend.host))
        : nodeAddresses.has(b.host);
    if ((bgp.balance === 'local' || bgp.announce === 'local') && localBackend === undefined) {
      log.warn(
        { balance: bgp.balance, announce: bgp.announce },
        'no backend is on this node (set policy.localBackend): with bgp.balance or bgp.announce local, this node never announces',
      );
    }

    // before the VIPs exist: the node must never answer ARP for a VIP it announces by BGP
    if (family === 4) {
      const r = raiseArpSysctls(inputs.sysctl);
      const keys = (xs: readonly { key: string }[]): string[] => xs.map((x) => x.key);
      if (r.changed.length > 0)
        log.info(
          { changed: r.changed, already: r.already },
          'BGP mode: raised arp_ignore / arp_announce, so that no interface answers ARP for the VIPs (restored on stop)',
        );
      for (const f of r.failed)
        log.warn(
          { key: f.key, value: f.value, err: f.error, fix: ARP_SYSCTL_FIX },
          'BGP mode: cannot set an ARP sysctl: this node answers ARP for the VIPs on its other interfaces',
        );
      own.defer('ARP sysctls', () => {
        if (keepAll() || r.changed.length === 0) return;
        const back = restoreArpSysctls(r.changed, inputs.sysctl);
        if (back.left.length > 0) log.info({ left: back.left }, 'BGP mode: left ARP sysctls changed by someone else since the start');
        for (const f of back.failed) log.warn({ key: f.key, err: f.error }, 'BGP mode: cannot restore an ARP sysctl');
        if (back.restored.length > 0) log.debug({ restored: keys(r.changed) }, 'BGP mode: restored the ARP sysctls');
      });
    }

    for (const vip of config.vips) {
      await addVip(rt, iface.ifindex, vip).catch((err: unknown) => {
        throw createError('BALLAST_E_NETLINK', `cannot add ${vip} to ${bgp.interface}: ${(err as Error).message}`, { cause: err });
      });
    }
    own.defer('VIPs on bgp.interface', async () => {
      if (keepAll()) return;
      for (const vip of config.vips)
        await delVip(rt, iface.ifindex, vip).catch((err: unknown) => log.error({ vip, err: (err as Error).message }, 'cannot remove a VIP'));
    });

    const speaker = new BirdSpeaker(bgp, family, config.vips, { log });
    // the decision follows what the plane applied
    let served: readonly HostPort[] = [];
    let ready: readonly HostPort[] = [];
    const decide = (): void => {
      const d = announceDecision(bgp.announce, served, ready, isLocal);
      void speaker.set(d.want, d.reason);
    };

    const tables = new TableRemoval(log, family);
    own.defer('nftables table', async () => {
      if (!keepAll()) await tables.remove();
    });
    const applier = new NftablesApplier();
    const lb = new LoadBalancer(
      {
        apply: (d) => applier.apply(d, { signal: ctx.signal }),
        flush: (vip, port, backend) => flushBackend(vip, port, backend),
        probe: (vip, port, clients) => probeClients(vip, port, clients),
        log,
      },
      { family, vips: config.vips, port: config.apiserver.port, local: nodeAddresses },
    );
    // a dead backend's probes finish before the table (whose rule leaves them untracked) goes
    own.defer("dead backends' probes", () => lb.probing());
    // the plane as the reconcile drives it, reporting each applied set to the decision
    const plane = {
      apply: async (set: ReadySet): Promise<readonly HostPort[]> => {
        // withdraw before the last rule goes: a route must not outlive what serves it
        const next = set.ready.filter((b) => b.family === family);
        if (next.length === 0 && served.length > 0 && bgp.announce === 'backends') {
          served = [];
          ready = set.ready;
          decide();
        }
        const now = await lb.apply(set);
        served = now;
        ready = set.ready;
        decide();
        return now;
      },
      reset: (v: Verdict) => lb.reset(v),
      status: () => lb.status(),
    };
    const source = balancedSource(checker, isLocal, bgp.balance);
    const rec = new Reconciler(plane, source, { log, ...VIP_PLANE_MESSAGES });
    // with announce: local, the local apiserver's verdict counts even when balance is all
    const onVerdict = (): void => {
      ready = checker
        .verdicts()
        .filter((v) => v.state === 'up')
        .map((v) => v.backend);
      if (bgp.announce === 'local') decide();
    };
    checker.on('verdict', onVerdict);
    own.defer('BGP verdict subscription', () => void checker.off('verdict', onVerdict));
    own.defer('VIP data plane verdict subscription', rec.follow());
    await rec.sync();
    if (rec.status().failures > 0) throw createError('BALLAST_E_DATAPLANE', `cannot program nftables: ${rec.status().lastError ?? 'unknown error'}`);

    try {
      await speaker.start();
    } catch (err) {
      if (err instanceof BirdError)
        throw createError(
          'BALLAST_E_BGP',
          `BIRD refused ballast's configuration (${bgp.configFile}): ${err.message}; ${birdRefusalFix(err.message, bgp.socket)}`,
          { cause: err },
        );
      throw err;
    }
    // withdraw first on the way down (the undo runs in reverse: this one before the table goes),
    // then keep serving until the routers have acted on the UPDATE: until no new connection has
    // arrived for WITHDRAW_QUIET_MS. A fixed 300 ms wait reset a client connection in a loaded CI run
    // (the router still hashed a new flow here after it); the DNAT counters show when flows stop.
    own.defer('BGP announcement', async () => {
      const wasAnnounced = speaker.status().announced;
      await speaker.stop(!keepAll());
      if (keepAll() || !wasAnnounced) return;
      const total = async (): Promise<number> => Object.values(await applier.counters()).reduce((sum, c) => sum + c.packets, 0);
      const d = await drainAfterWithdraw(total);
      const fields = { waitedMs: Math.round(d.waitedMs), newConnections: d.arrived, quietMs: WITHDRAW_QUIET_MS, maxMs: WITHDRAW_DRAIN_MAX_MS };
      if (d.error !== null) log.warn({ ...fields, err: d.error }, 'BGP: cannot read the data plane counters after the withdrawal; waited the quiet time once');
      else if (d.quiet) log.info(fields, 'BGP: withdrawn; no new connection for the quiet time, the data plane goes');
      else log.warn(fields, 'BGP: withdrawn, but new connections still arrive (the peers still route here, or local clients use the VIP); the data plane goes');
    });
    decide();
    log.info(
      {
        vips: config.vips,
        interface: bgp.interface,
        socket: bgp.socket,
        configFile: bgp.configFile,
        peers: bgp.peers.map((p) => p.address),
        announce: bgp.announce,
        balance: bgp.balance,
        localBackend: localBackend ? formatHostPort(localBackend) : null,
      },
      'BGP mode: the VIPs are announced through BIRD while this node can serve them',
    );
    return {
      status: () => ({ ...speaker.status(), localBackend: localBackend ? formatHostPort(localBackend) : null }),
      lb: rec as unknown as Reconciler<LoadBalancer>,
      report: () => ({
        dataplane: { ...rec.plane.status(), ...rec.status() },
        bgp: { ...speaker.status(), localBackend: localBackend ? formatHostPort(localBackend) : null },
      }),
    };
  });
}
