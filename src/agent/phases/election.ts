/**
 * Phase, election: the VRRP engine (src/vrrp/host.ts; its adverts kept on time by the VRRP
 * socket's native pacer thread), which adds, removes and announces the VIPs. Its events reach
 * the operator's log; the fatal ones (the interface was deleted, a call into the engine threw)
 * make the agent unwind everything and exit.
 */
import type { Config } from '../../config/index.js';
import { createError, ERRORS, isBallastError, type BallastError } from '../../errors.js';
import type { HealthChecker } from '../../health/checker.js';
import { statusState } from '../../observe/status.js';
import { removeLeftoverVips } from '../leftovers.js';
import { VIPS_ADDED, type EngineEvent, type EngineOptions, type EngineReconfigure } from '../../vrrp/engine.js';
import { EngineStartError, VrrpHost } from '../../vrrp/host.js';
import { formatHostPort } from '../../net/hostport.js';
import { confirmDeadlineMs, confirmDown } from '../../health/confirm.js';
import { backendsOfNode } from '../../health/confirm.js';
import { runPhase, type AgentContext, type Change, type PhaseHandle, type PhaseSpec, type ResolvedInterface } from '../phase.js';
import { updateMembership, type MembershipHolder } from '../membership-update.js';
import { seedAndLastKnown } from '../../discovery/lastknown.js';
import { ANY_BECAUSE, membershipOf, type Membership } from '../../vrrp/membership.js';
import { canonicalAddress } from '../../net/address.js';
import { masterDownIntervalMs } from '../../vrrp/state.js';
import { readHandOff, removeHandOff, writeHandOff } from '../handoff.js';

/** Logged when the silent master's backend did not answer a connect either: taken out (dead). */
export const SILENT_MASTER_TAKEN_OUT = 'backend of the silent master taken out';
/** Logged when the silent master's backend accepted a connect: its agent stopped, not its node; the checks decide. */
export const SILENT_MASTER_ALIVE = "the silent master's backend accepts connections: its agent stopped, not its node; left to the health checks";

/** The running election. */
export interface ElectionPhase extends PhaseHandle, MembershipHolder {
  host: VrrpHost;
  /** The interface it runs on (for the hand-over's log lines). */
  ifname: string;
  /**
   * Resolves once the election has its first outcome: this router became Active, or heard an
   * Active router it will not preempt (a higher priority, or Preempt_Mode off), or neither
   * happened within Master_Down_Interval + 250 ms + apiserver.health.settleMs of its start (the
   * longest a starting router holds its preemption for its first verdicts). Work that holds this
   * thread (the Kubernetes client's import) waits for it, so that it never delays a starting
   * router's takeover: neither while nobody is master nor while a lower priority that started
   * first is (this router preempts it once its first verdicts are in, and those checks run on
   * this thread too). Never rejects.
   */
  firstOutcome: Promise<void>;
  /**
   * Since when (performance.now(), ms) this router holds its VIPs: set when they are added on
   * becoming Active (an owner: when it becomes Active), null while it is not Active. Before it, a
   * backend's answer to a flow DNATed here has no way back: it goes to the VIP, which is on no
   * node yet or still on the previous holder in the backends' neighbour tables.
   */
  vipsHeldSince(): number | null;
  /**
   * host.reconfigure(patch) (from the next advert), and a new VIP set is also what the crash
   * path removes from then on.
   * @throws Error when the engine refuses the patch (nothing changed).
   */
  patch(patch: EngineReconfigure): Promise<void>;
}

/** What the election needs from the phases before it. */
export interface ElectionInputs {
  resolved: ResolvedInterface;
  authKeys: Buffer[] | null;
  checker: HealthChecker | null;
  /** Connection sync, when it runs: the replicated flows are committed before a takeover. */
  sync?: { commit(): Promise<void>; resync(): void } | null;
  /** The VIP data plane's reconcile, when it runs: a takeover's commit may bring back a dead backend's flows, reset again once the VIPs are added. */
  vipPlane?: () => { resetDeadAgain(): Promise<void> } | null;
  /** The node addresses discovery found so far (null: none yet, or no discovery): a hand-over's new group hears of them at once. */
  discovered?: () => readonly string[] | null;
}

/** Settings whose change needs a new group membership: the election leaves its group (priority 0 if Active, VIPs removed) and joins the new one. */
const HANDOVER = ['interface', 'family', 'vrrp.vrid', 'vrrp.checksum', 'vrrp.auth', 'vrrp.unicast', 'vrrp.owner'];

/** The engine's runtime change for `change` (only the fields that differ; `vips` is the whole new set); null when none. */
export function electionPatch({ cur, next, has }: Change): EngineReconfigure | null {
  if (cur.vrrp === null || next.vrrp === null) return null;
  const a = cur.vrrp;
  const b = next.vrrp;
  const patch: EngineReconfigure = {};
  if (has('vips')) patch.vips = [...next.vips];
  if (a.priority !== b.priority) patch.priority = b.priority;
  if (a.advertisementIntervalCs !== b.advertisementIntervalCs) patch.advertisementIntervalCs = b.advertisementIntervalCs;
  if (a.preempt !== b.preempt) patch.preempt = b.preempt;
  if (a.preemptDelayMs !== b.preemptDelayMs) patch.preemptDelayMs = b.preemptDelayMs;
  if (has('announce')) patch.announce = { ...next.announce };
  if (cur.vipLifetimeMs !== next.vipLifetimeMs) patch.vipLifetimeMs = next.vipLifetimeMs;
  return Object.keys(patch).length > 0 ? patch : null;
}

/** Settings that change who is in the group (membership.ts): peers and acceptFrom members, from the next advert. */
const MEMBERSHIP = ['vrrp.peers', 'vrrp.discoveredPeers', 'vrrp.acceptFrom', 'apiserver.backends'];

const patched = (change: Change): string | null => {
  const p = electionPatch(change);
  return p === null ? null : `election reconfigured (${Object.keys(p).join(', ')}), from the next advert`;
};

/**
 * Phase 6, the election. Its protocol settings are patched into the running engine (from the
 * next advert); a new group membership (VRID, interface, family, checksum, auth, mode) is a
 * hand-over: a re-run, and when the new group cannot be joined the old one is joined again.
 */
export const electionPhase: PhaseSpec<ElectionInputs, ElectionPhase> = {
  name: 'election',
  handover: true,
  essential: true,
  settings: [
    { path: 'vrrp', exact: true, on: 'restart', why: 'turning the election on or off' },
    ...HANDOVER.map((path) => ({
      path,
      on: 'rerun' as const,
      does: ({ has }: Change) => `hand-over: election stopped (priority 0 if master, VIPs removed) and started again (${HANDOVER.filter(has).join(', ')})`,
    })),
    {
      path: 'vips',
      on: 'reconfigure',
      does: (change) => {
        const { cur, next } = change;
        const added = next.vips.filter((v) => !cur.vips.includes(v));
        const removed = cur.vips.filter((v) => !next.vips.includes(v));
        return [
          ...(added.length > 0 ? [`VIPs added: ${added.join(', ')}`] : []),
          ...(removed.length > 0 ? [`VIPs removed: ${removed.join(', ')}`] : []),
          ...[patched(change)].filter((a) => a !== null),
        ];
      },
    },
    ...[
      'vipLifetimeMs',
      'announce',
      'vrrp.priority',
      'vrrp.advertisementIntervalMs',
      'vrrp.advertisementIntervalCs',
      'vrrp.preempt',
      'vrrp.preemptDelayMs',
    ].map((path) => ({ path, on: 'reconfigure' as const, does: patched })),
    ...MEMBERSHIP.map((path) => ({ path, on: 'reconfigure' as const, does: 'election peers / acceptFrom members recomputed' })),
    // read when the agent stops (a restart in place)
    { path: 'vrrp.restartHoldMs', on: 'reconfigure' },
  ],
  start: startElection,
  rerun: {
    before: (old, { cur, next, has }, log) =>
      log.warn(
        {
          changed: HANDOVER.filter(has),
          from: { vrid: cur.vrrp!.vrid, interface: old.ifname, family: cur.family },
          to: { vrid: next.vrrp!.vrid, interface: next.interface ?? null, family: next.family },
          ...(cur.family !== next.family && cur.dataplane.vip === 'nftables' && cur.apiserver.backends.length > 0
            ? { vipDataplane: { from: cur.family, to: next.family } }
            : {}),
        },
        'reload: hand-over: leaving the group (priority 0 if master, VIPs removed) and joining the new one',
      ),
    after: (h, { next }, log) => void log.info({ vrid: next.vrrp!.vrid, interface: h.ifname, family: next.family }, 'reload: hand-over: joined the group'),
    rolledBack: (h, { cur }, log) => {
      log.warn({ vrid: cur.vrrp!.vrid, interface: h.ifname, family: cur.family }, 'reload: hand-over: rejoined the old group with the running configuration');
      return `hand-over failed: rejoined the old group (VRID ${cur.vrrp!.vrid}, ${h.ifname}, IPv${cur.family}) with the running configuration`;
    },
  },
};

/**
 * Starts the engine. The undo resigns (priority 0 if Active) and removes the VIPs; after the
 * engine failed it also removes the VIPs itself (unless this node owns them).
 * @throws BallastError BALLAST_E_PERMISSION, BALLAST_E_ADDON_MISSING, BALLAST_E_SOCKET,
 *   BALLAST_E_NETLINK when the engine does not start.
 */
export function startElection(ctx: AgentContext, config: Config, inputs: ElectionInputs): Promise<ElectionPhase> {
  return runPhase(ctx, 'election', async (own) => {
    const { resolved, authKeys, checker } = inputs;
    const sync = inputs.sync ?? null;
    const { log } = ctx;
    const v = config.vrrp!;
    const { iface } = resolved;
    const ownAddresses = iface.addresses.map((a) => a.address);
    const discovered = lastKnownNodes(config);
    // the first run of a seed node (the initial control plane: no last-known file yet) waits for
    // the seed hosts the slices have not listed yet (they are joining); a restart, or a node that
    // joins later (not in the seed), treats the seed as listed before: it may have retired already
    // (the file keeps no history), and a retired seed host must not come back as a peer
    const seedHosts = config.apiserver.backends.map((b) => b.host);
    const inSeed = seedHosts.some((h) => ownAddresses.some((a) => canonicalAddress(a) === canonicalAddress(h)));
    const confirmed = discovered === null && inSeed ? [] : seedHosts;
    const membership = membershipOf(config, { own: ownAddresses, discovered, confirmed });
    if (membership.anyBecause) log.warn({ vrid: v.vrid }, ANY_BECAUSE[membership.anyBecause]);
    else if (membership.members) log.info({ vrid: v.vrid, members: membership.members }, 'adverts are heard from the members only (vrrp.acceptFrom: members)');
    // the previous process handed off in place while master, and the Backups still wait: resume
    const key = { ifname: iface.ifname, family: config.family, vrid: v.vrid, primary: resolved.primary };
    const handOff = readHandOff(key);
    if (handOff.resume)
      log.info(
        { vrid: v.vrid, vips: handOff.note.vips, waitLeftMs: Math.round(handOff.note.until - Date.now()) },
        'resuming as master: the previous process handed off in place and the Backups wait for this one',
      );
    else if (handOff.reason !== null)
      log.warn({ vrid: v.vrid, reason: handOff.reason }, `not resuming from the previous process's hand-off: ${handOff.reason}; starting as a Backup`);
    // connection sync: the replicated connections go into the kernel before the VIPs are added
    const opts = {
      ...engineOptions(config, resolved, authKeys, membership),
      resume: handOff.resume && !v.owner,
      ...(sync ? { beforeTakeover: () => sync.commit() } : {}),
    };
    let crashed = false;
    let fatal = false;
    let becameActive = false;
    // the log lines and /status's history: observers, whose failure (a throw in this microtask
    // would end the process) is contained (observe/contain.ts); the engine's own actions are not
    const observe = (fn: () => void): void => void (ctx.internal ? ctx.internal.run('election-events', fn) : fn());
    // the old master went silent (a resign is a clean stop and never comes here): its agent
    // stopped, and maybe its node with it. Its backend is taken out (dead: its connections reset)
    // only when a TCP connect to it fails too (health/confirm.ts); a killed or crashed agent's
    // healthy apiserver stays, left to its checks. The planes follow the dead verdicts themselves.
    // Advertisement_Interval now (a reload's reconfigure changes it)
    let advertisementIntervalMs = v.advertisementIntervalMs;
    const takeOutIfGone = (checker: HealthChecker, node: string): void => {
      const deadlineMs = confirmDeadlineMs(advertisementIntervalMs, config.apiserver.health.timeoutMs);
      for (const b of backendsOfNode(checker.backends(), node)) {
        void confirmDown(b, deadlineMs).then((r) => {
          const fields = { backend: formatHostPort(b), node, latencyMs: Math.round(r.latencyMs) };
          if (r.alive) return observe(() => log.info(fields, SILENT_MASTER_ALIVE));
          if (checker.markDead(b, { kind: 'nodeDown', node }, `node down (VRRP Master_Down; ${r.failure.message})`))
            observe(() => log.warn({ ...fields, reason: r.failure.message }, SILENT_MASTER_TAKEN_OUT));
        });
      }
    };
    let vipsHeldSince: number | null = null;
    let outcome!: () => void;
    const firstOutcome = new Promise<void>((resolve) => (outcome = resolve));
    const onEvent = (ev: EngineEvent | { type: 'crash'; error: Error }): void => {
      // with connection sync, becoming Active is an outcome once the VIPs are added: the commit
      // before them is a child process, and work waiting for the outcome (the Kubernetes
      // client's import, a second of this thread) would otherwise delay the VIPs by that much
      if (ev.type === 'transition' && ev.to === 'active') {
        if (sync) setTimeout(outcome, config.dataplane.connectionSync.commitTimeoutMs + 250).unref();
        else outcome();
      }
      if ((ev.type === 'master' && !ev.preempting) || (ev.type === 'log' && ev.msg === VIPS_ADDED)) outcome();
      if (ev.type === 'log' && ev.msg === VIPS_ADDED && ev.fields?.reason === undefined) vipsHeldSince ??= performance.now();
      if (ev.type === 'transition' && ev.to === 'active' && v.owner) vipsHeldSince = performance.now();
      if (ev.type === 'transition' && ev.from === 'active') vipsHeldSince = null;
      // the commit before the VIPs brought back the entries of any backend already judged dead
      // (the silent master's may be judged while it runs): they are deleted again and their
      // clients probed now that the VIPs are here (a probe's answer must reach this node; the
      // announcement is next in the engine's queue, before the reset's nft and conntrack runs end)
      if (sync && ev.type === 'log' && ev.msg === VIPS_ADDED && ev.fields?.reason === undefined) void inputs.vipPlane?.()?.resetDeadAgain();
      if (ev.type === 'transition') {
        observe(() => {
          const extra = { ...(ev.detail ? { detail: ev.detail } : {}), ...(ev.previousMaster ? { previousMaster: ev.previousMaster } : {}) };
          // the first Active state is the first advert sent (RFC 9568 6.4.1/6.4.2): its time since the process started
          const first = ev.to === 'active' && !becameActive ? { elapsedMs: Math.round(Date.parse(ev.at) - performance.timeOrigin) } : {};
          if (ev.to === 'active') becameActive = true;
          log.info({ from: statusState(ev.from), to: statusState(ev.to), reason: ev.reason, ...extra, vrid: v.vrid, at: ev.at, ...first }, 'state change');
          ctx.history?.transition({
            from: statusState(ev.from),
            to: statusState(ev.to),
            reason: ev.reason,
            ...(ev.detail ? { detail: ev.detail } : {}),
            at: ev.at,
          });
          if (ev.to === 'active') ctx.history?.master(resolved.primary, ev.at);
        });
        if (ev.previousMaster && ev.reason === 'masterDown' && checker) takeOutIfGone(checker, ev.previousMaster);
        // no longer the holder: the peers send their whole state again (the new holder's included)
        if (ev.from === 'active' && ev.to === 'backup') sync?.resync();
      } else if (ev.type === 'master') {
        // the same master again: only whether this router will preempt it changed
        if (ev.previous === ev.address) return;
        observe(() => {
          ctx.history?.master(ev.address, new Date().toISOString());
          const fields = { vrid: v.vrid, master: ev.address, priority: ev.priority, previous: ev.previous };
          const known = knownNodes(phase?.membershipInputs ?? { config, discovered }, phase?.membership ?? membership);
          if (isStranger(ev.address, known)) {
            log.warn(
              { ...fields, known: [...known] },
              'the new master is not one of the known members (not a seed or discovered node, not in vrrp.peers): a stranger on this VRID, or a node this one does not know yet',
            );
          } else {
            log.info(fields, 'new master');
          }
        });
      } else if (ev.type === 'log') {
        observe(() => log[ev.level]({ vrid: v.vrid, ...ev.fields }, ev.msg));
      } else if (ev.type === 'interfaceGone') {
        // acted on once, whatever comes after it
        if (fatal) return;
        fatal = true;
        log.error({ code: 'BALLAST_E_INTERFACE_GONE', interface: ev.ifname }, 'the interface was deleted; exiting so that the supervisor restarts the agent');
        ctx.fail(ERRORS.BALLAST_E_INTERFACE_GONE.exitCode);
      } else {
        if (fatal) return;
        fatal = true;
        crashed = true;
        log.fatal({ err: ev.error.message }, 'the election failed; removing the VIPs and exiting');
        ctx.fail(1);
      }
    };
    // the handle, once started: the membership it holds is the one in force
    let phase: Omit<ElectionPhase, 'phase' | 'undo'> | null = null;
    let host: VrrpHost;
    try {
      host = await VrrpHost.start(opts, onEvent);
    } catch (err) {
      throw engineError(err);
    }
    // resumed (its first advert sent): the note is spent; a later start is a start
    if (handOff.resume) removeHandOff(key);
    // no outcome within a Master_Down_Interval (RFC 9568 §6.1), the margin and the preempt hold
    const outcomeTimer = setTimeout(
      outcome,
      masterDownIntervalMs(v.priority, v.advertisementIntervalCs) + 250 + (config.apiserver.backends.length > 0 ? config.apiserver.health.settleMs : 0),
    );
    outcomeTimer.unref();
    own.defer('first outcome timer', () => {
      clearTimeout(outcomeTimer);
      outcome();
    });
    // what the crash path removes: the VIPs as the last reconfigure set them
    let vips: readonly string[] = config.vips;
    own.defer('election', async () => {
      const restart = crashed ? null : (ctx.restarting?.() ?? null);
      if (restart) {
        // sent from now on: the Backups' wait ends no earlier than this + the bound
        const sentAt = Date.now();
        const r = await host.handOff(restart.holdMs);
        if (!r.active) return;
        try {
          const path = writeHandOff({ ...key, vips: [...vips], at: sentAt, until: sentAt + r.masterDownBoundMs });
          log.info({ note: path, untilMs: Math.round(r.masterDownBoundMs) }, 'hand-off note written for the next process');
        } catch (err) {
          log.error({ err: (err as Error).message }, 'cannot write the hand-off note: the next process starts as a Backup and the VIP moves once');
        }
        return;
      }
      await host.stop();
      // the engine failed holding them: removed here too, first (preflight's undo would too, but
      // only after the data planes are unwound)
      if (crashed && !opts.owner) await removeLeftoverVips(iface.ifindex, vips, log);
    });
    const patch = async (p: EngineReconfigure): Promise<void> => {
      await host.reconfigure(p);
      if (p.vips) vips = [...p.vips];
      if (p.advertisementIntervalCs !== undefined) advertisementIntervalMs = p.advertisementIntervalCs * 10;
    };
    const handle: Omit<ElectionPhase, 'phase' | 'undo'> = {
      host,
      ifname: iface.ifname,
      patch,
      membership,
      membershipInputs: { config, own: ownAddresses, discovered, confirmed },
      membershipQueue: Promise.resolve(),
      firstOutcome,
      vipsHeldSince: () => vipsHeldSince,
      // from the next advert; rejects (nothing changed) when the engine refuses it
      reconfigure: async (change) => {
        const p = electionPatch(change);
        if (p) await patch(p);
        if (MEMBERSHIP.some(change.has)) await updateMembership(handle, { config: change.next }, log);
      },
    };
    phase = handle;
    // a hand-over's new group hears of the members discovery found, as the old one had
    const found = inputs.discovered?.() ?? null;
    if (found !== null && config.discovery !== null) await updateMembership(handle, { discovered: found }, log).catch(() => undefined);
    return handle;
  });
}

/**
 * The nodes this one knows of (canonical): the discovered ones (or the seed's hosts before
 * discovery answered), the listed vrrp.peers, and the membership's peers and members.
 */
export function knownNodes(inputs: { config: Config; discovered: readonly string[] | null }, m: Membership): Set<string> {
  const seed = inputs.config.apiserver.backends.map((b) => b.host);
  const listed = inputs.config.vrrp?.peers ?? [];
  const canon = (a: string): string => {
    try {
      return canonicalAddress(a);
    } catch {
      return a.toLowerCase();
    }
  };
  return new Set([...(inputs.discovered ?? seed), ...listed, ...m.peers, ...(m.members ?? [])].map(canon));
}

/**
 * Whether a new master at `address` is none of the `known` nodes (see {@link knownNodes}). Not
 * when nothing is known, nor for an IPv6 link-local address (multicast adverts come from those,
 * and no list of nodes holds them).
 */
export function isStranger(address: string, known: ReadonlySet<string>): boolean {
  if (known.size === 0 || address.toLowerCase().startsWith('fe80:')) return false;
  return !known.has(canonicalAddress(address));
}

/** The engine's options: the config's vrrp section and what preflight found on the interface. */
function engineOptions(config: Config, resolved: ResolvedInterface, authKeys: Buffer[] | null, membership: Membership): EngineOptions {
  const v = config.vrrp!;
  const { iface, primary } = resolved;
  return {
    vrid: v.vrid,
    priority: v.priority,
    advertisementIntervalCs: v.advertisementIntervalCs,
    preempt: v.preempt,
    preemptDelayMs: v.preemptDelayMs,
    checksum: v.checksum,
    unicast: v.unicast,
    peers: membership.peers,
    members: membership.members,
    standby: membership.standby,
    authKeys,
    vips: [...config.vips],
    family: config.family,
    ifname: iface.ifname,
    ifindex: iface.ifindex,
    mac: iface.mac,
    primaryAddress: primary,
    announce: { ...config.announce },
    vipLifetimeMs: config.vipLifetimeMs,
    // with backends, no preemption until the policy says this node can serve (first verdicts, data plane)
    preemptHoldAtStart: config.apiserver.backends.length > 0,
    linkRunning: iface.running,
    owner: v.owner,
    realtimePriority: v.realtimePriority,
  };
}

/** Turns an engine start failure (errno from the addon or netlink) into an operator-facing error. */
function engineError(err: unknown): BallastError {
  if (isBallastError(err)) return err;
  const e = err as EngineStartError;
  const detail = e.message;
  if (e.code === 'EPERM' || e.code === 'EACCES') {
    return createError('BALLAST_E_PERMISSION', `${detail}: run as root, or with CAP_NET_RAW and CAP_NET_ADMIN`, { cause: err });
  }
  if (e.code === 'BALLAST_E_ADDON_MISSING') return createError('BALLAST_E_ADDON_MISSING', detail, { cause: err });
  if (e.syscall) return createError('BALLAST_E_SOCKET', detail, { cause: err });
  return createError('BALLAST_E_NETLINK', detail, { cause: err });
}

/**
 * The node addresses the election starts with when discovery keeps a last-known file: the seed's
 * hosts and the file's (the set the discovery phase feeds a moment later, read here because that
 * phase starts last, after the election, and only once @kubernetes/client-node has loaded — 2 s on
 * a loaded machine, longer than a Master_Down_Interval). Without it a restarted node whose seed
 * nodes were all replaced hears none of the current members (their adverts are not from a peer or
 * member), becomes a second master after Master_Down_Interval and, with the higher priority,
 * takes the VIP back: an extra move per restart. null (the seed alone) without discovery or a
 * usable file.
 */
function lastKnownNodes(config: Config): string[] | null {
  if (config.discovery === null) return null;
  const set = seedAndLastKnown(config.apiserver.backends, config.discovery.lastKnownFile);
  return set === null ? null : [...new Set(set.map((b) => b.host))];
}
