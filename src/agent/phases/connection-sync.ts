/**
 * Phase, connection sync (`dataplane.connectionSync`): connections through the VIP outlive a move
 * of the VIP. The table source-NATs them to the VIP (dataplane/nftables.ts `sourceNat: 'vip'`),
 * so a flow has the same 4-tuple at its backend on every holder; this phase runs the engine that
 * copies their conntrack entries (with the NAT bindings) to the other nodes — one conntrackd
 * (conntrack-tools, FTFW mode, dataplane/conntrackd.ts) per VRRP router, a child process — and
 * gives the election the two steps that use the copy:
 *
 *   becoming Active   commit()    `conntrackd -c`: the peers' entries into this kernel, BEFORE
 *                                 the engine adds the VIP and announces it (engine.ts
 *                                 `beforeTakeover`); bounded by commitTimeout, then the VIP is
 *                                 added anyway — a move never waits longer than that. The
 *                                 closing entries it brought are deleted again, alongside
 *   becoming Backup   resync()    the daemon stopped, this kernel's entries of flows to the VIP
 *                                 deleted, the daemon started again (it asks the peers for their
 *                                 whole state at start): the stale entries would otherwise stay
 *                                 (ESTABLISHED: 5 days), hold VIP:client port for flows that have
 *                                 ended, and make a later commit fail or the NAT pick another
 *                                 port when this node holds the VIP again. Deleted while no
 *                                 conntrackd listens, so no peer hears of it: a DESTROY message
 *                                 would remove the same flow from the peers' caches, which the
 *                                 new holder fills for them. Also at start, unless a restart in
 *                                 place hands the VIP over to this process (its entries are live)
 *   preempting        held()      true until the state arrived after start (the first messages
 *                                 from a peer and an external cache that stopped growing), at
 *                                 most resyncTimeout: a returning node does not take the VIP back
 *                                 before it has the connections' state
 *
 * Nothing here blocks the election's thread: every conntrackd run is a child process with a time
 * limit (dataplane/apply.ts commandExecutor), and a missing or failing conntrackd only costs the
 * connections (logged, /status `connectionSync`, the metrics): the VIP still moves. A daemon that
 * exits is started again after a back-off (1 s doubling to 30 s).
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { Config } from '../../config/index.js';
import { commandExecutor, type Executor } from '../../dataplane/apply.js';
import {
  conntrackdPaths,
  parseConntrackdStats,
  renderConntrackdConfig,
  syncPort,
  type ConnectionSyncStatus,
  type ConntrackdStats,
} from '../../dataplane/conntrackd.js';
import { ConntrackdDaemon } from '../../dataplane/conntrackd-daemon.js';
import { LOCK_DIR } from '../../dataplane/ebpf.js';
import { handOffPath, netnsId } from '../handoff.js';
import { VipFlows } from '../../dataplane/vip-flows.js';
import { runPhase, type AgentContext, type Change, type PhaseHandle, type PhaseSpec, type ResolvedInterface } from '../phase.js';

/** The running phase; what the election and the policy use. */
export interface ConnectionSyncPhase extends PhaseHandle {
  /** Commits the external cache into the kernel; resolves within commitTimeout (never rejects). */
  commit(): Promise<void>;
  /** Asks the peers for their whole state (after becoming Backup); never rejects. */
  resync(): void;
  /** Whether a preemption should wait for the state (see the file comment). */
  held(): boolean;
  /** Called when {@link held} turns false (the policy re-evaluates its preempt hold). */
  onRelease(cb: () => void): void;
  status(): ConnectionSyncStatus;
}

/** How often `conntrackd -s` runs, ms: the entries and the message age on /status and the metrics. */
export const STATS_INTERVAL_MS = 2000;
/** How often it runs while preemption is held for the state, ms. */
const HOLD_POLL_MS = 250;
/** Growth of the external cache between two polls (or 2 % of it) below which the copy counts as arrived. */
const SETTLED_GROWTH = 16;
/** When, after a daemon starts, the peers are asked again for their whole state, ms. */
const RESYNC_AGAIN_MS = [500, 2000];
/** How often the holder sends its whole table to the peers again, ms. */
const ANNOUNCE_INTERVAL_MS = 5000;

/** The directory of this router's conntrackd files: one per network namespace, interface and VRID. */
export function conntrackdDir(ifname: string, vrid: number, dir = LOCK_DIR): string {
  return `${dir}/conntrackd-${netnsId()}-${ifname}-vrid${vrid}`;
}

/** What connection sync needs: the election's interface (its multicast goes out there) and, in tests, the daemon's path. */
export interface ConnectionSyncInputs {
  resolved: ResolvedInterface;
  binary?: string;
}

/**
 * Phase 5, connection sync (dataplane.connectionSync): after the VIP data plane (the flows it
 * source-NATs to the VIP), before the election (a takeover commits the replicated flows first).
 * resyncTimeout applies in place: it bounds the start-up's preempt hold, so a hold under way
 * ends by the new bound (one that ended stays ended; a start without a hold does not get one).
 * The rest of the section takes a restart (no phase reads it live).
 */
export const connectionSyncPhase: PhaseSpec<ConnectionSyncInputs, ConnectionSyncPhase> = {
  name: 'connection sync',
  settings: [{ path: 'dataplane.connectionSync.resyncTimeoutMs', on: 'reconfigure', does: 'connection sync: preempt hold bound replaced' }],
  start: startConnectionSync,
};

/**
 * Starts conntrackd (after killing one a killed earlier run left on the same socket) and its
 * statistics poll. The undo stops the poll and the daemon (SIGTERM, SIGKILL after 2 s).
 * Never throws for conntrackd's sake: a daemon that cannot start leaves the phase `unavailable`.
 */
export function startConnectionSync(ctx: AgentContext, config: Config, inputs: ConnectionSyncInputs): Promise<ConnectionSyncPhase> {
  return runPhase(ctx, 'connection sync', async (own) => {
    const { log } = ctx;
    const cs = config.dataplane.connectionSync;
    const { iface } = inputs.resolved;
    const binary = inputs.binary ?? 'conntrackd';
    const dir = conntrackdDir(iface.ifname, config.vrrp!.vrid);
    const paths = conntrackdPaths(dir);
    // the node's own IPv4 address (never a VIP, which moves); without one, IPv6 multicast
    const ipv4 = iface.addresses.find((a) => a.family === 4 && a.scope === 0 && !config.vips.includes(a.address))?.address ?? null;
    const client: Executor = commandExecutor([binary, '-C', paths.config], { timeoutMs: cs.commitTimeoutMs });
    const conntrack: Executor = commandExecutor(['conntrack'], { timeoutMs: config.dataplane.commandTimeoutMs });
    // on a takeover's path: bounded like the commit
    const closer: Executor = commandExecutor(['conntrack'], { timeoutMs: cs.commitTimeoutMs });
    // the preempt hold's bound, ms (reloadable)
    let resyncTimeoutMs = cs.resyncTimeoutMs;
    const st: Omit<ConnectionSyncStatus, 'state' | 'error' | 'restarts'> = {
      internalEntries: null,
      externalEntries: null,
      lastMessageAgeMs: null,
      lastCommit: null,
      preemptHold: cs.resyncTimeoutMs > 0,
    };
    let lastReceived = 0;
    let lastMessageAt: number | null = null;
    /** This node became Active (its commit ran) and has not become Backup since: it holds the VIP. */
    let holding = false;
    let stopping = false;
    const releases: (() => void)[] = [];
    const startedAt = performance.now();
    let settled = false;

    const release = (why: string): void => {
      if (!st.preemptHold) return;
      st.preemptHold = false;
      log.info(
        { why, externalEntries: st.externalEntries, waitedMs: Math.round(performance.now() - startedAt) },
        'connection sync: preemption no longer held for the replicated state',
      );
      for (const cb of releases) cb();
    };

    // a former holder that still has the VIP (its agent killed: the address lives out its
    // lifetime) must accept the moved flows the new holder forwards to its apiserver, whose
    // source is that VIP: without accept_local the kernel drops them as martians (a local source
    // address arriving from outside) for up to vipLifetime. IPv4 only: IPv6 has no such check
    if (config.family === 4) acceptLocal(iface.ifname, log);

    const daemon = new ConntrackdDaemon({
      binary,
      config: paths.config,
      lock: paths.lock,
      log,
      // StartupResync asks the peers once, as it starts; that one request (multicast) can go
      // before the daemon hears the group, or the answer be lost with a restart under way: asked
      // again (conntrackd -n), so a copy missing the flows opened meanwhile is filled in before it
      // could be committed
      onStarted: (c) => {
        for (const ms of RESYNC_AGAIN_MS) {
          const t = setTimeout(() => {
            if (daemon.current() === c) void client(['-n'], '').catch(() => undefined);
          }, ms);
          t.unref();
        }
      },
    });
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      writeFileSync(paths.config, renderConntrackdConfig({ dir, ifname: iface.ifname, ipv4, port: syncPort(config.vrrp!.vrid) }), { mode: 0o600 });
    } catch (err) {
      daemon.unavailable(`cannot write ${paths.config}: ${(err as Error).message}`);
    }

    const flows = new VipFlows({
      vips: config.vips,
      port: config.apiserver.port,
      backendPorts: [...new Set([config.apiserver.port, ...config.apiserver.backends.map((b) => b.port)])],
      exec: conntrack,
      urgent: closer,
      log,
    });

    /**
     * After a commit, the Backups learn what this node now holds: the entries a commit puts into
     * the kernel are conntrackd's own writes, which its event handler does not take into its
     * internal cache, so they would reach no Backup until they change state (an established
     * watch may not for hours), and a second move would lose them. So: flush both caches
     * (`-f`: the external one is in the kernel now), load the kernel's table into the internal
     * cache (`-R`) and send it whole to the peers (`-B`); conntrackd(8). Not on the takeover's
     * path; a failure leaves the Backups to the next resync and is logged.
     */
    const announceCommitted = async (steps: readonly string[] = ['-f', '-R', '-B']): Promise<void> => {
      for (const args of steps.map((a) => [a])) {
        const r = await client(args, '').catch((err: unknown) => ({ code: -1, stdout: '', stderr: (err as Error).message }));
        if (r.code !== 0) {
          log.warn(
            { step: `conntrackd ${args.join(' ')}`, error: r.stderr.trim() || `exit status ${r.code}` },
            'connection sync: the committed connections were not sent to the peers; they get them at their next resync',
          );
          return;
        }
      }
    };

    // a daemon a killed earlier run left on this socket: asked to end (conntrackd -k), then ours starts
    if (daemon.state !== 'unavailable') {
      const left = await client(['-k'], '', { signal: ctx.signal }).catch(() => null);
      if (left && left.code === 0) log.warn({ socket: paths.socket }, 'connection sync: ended the conntrackd an earlier run left');
      const resuming = existsSync(handOffPath({ ifname: iface.ifname, family: config.family, vrid: config.vrrp!.vrid }));
      if (!resuming) await flows.purge();
      daemon.start();
    }
    own.defer('conntrackd', async () => {
      stopping = true;
      await daemon.stop();
      // its configuration, log, lock and socket: written anew by the next start
      rmSync(dir, { recursive: true, force: true });
    });

    const poll = async (): Promise<void> => {
      if (daemon.state !== 'running') return;
      const r = await client(['-s'], '').catch(() => null);
      const s: ConntrackdStats | null = r && r.code === 0 ? parseConntrackdStats(r.stdout) : null;
      if (!s) return;
      const now = performance.now();
      if (s.packetsReceived > lastReceived) lastMessageAt = now;
      lastReceived = s.packetsReceived;
      // the peers' bulk answer to the start-up resync comes in one burst; afterwards the copy only
      // follows their connections' churn (the health checks' own connections among them)
      const before = st.externalEntries;
      settled = before !== null && s.external - before <= Math.max(SETTLED_GROWTH, before * 0.02);
      st.internalEntries = s.internal;
      st.externalEntries = s.external;
      // the state arrived: a peer answered our start-up resync and the copy stopped growing
      if (st.preemptHold && lastMessageAt !== null && settled) release('replicated state received');
    };
    let polling = false;
    const tick = (): void => {
      if (polling) return;
      polling = true;
      void poll().finally(() => (polling = false));
    };
    const statsTimer = setInterval(tick, STATS_INTERVAL_MS);
    statsTimer.unref();
    own.defer('conntrackd statistics', () => clearInterval(statsTimer));
    // while this node holds the VIP, its whole table goes to the peers again every
    // ANNOUNCE_INTERVAL_MS (-R, -B): a Backup whose daemon restarted while the last bulk went out,
    // or that lost messages, has a whole copy again within that time. The cost: one kernel table
    // dump and one message per entry per interval.
    let announcing = false;
    const announceTimer = setInterval(() => {
      if (!holding || announcing || daemon.state !== 'running') return;
      announcing = true;
      void announceCommitted(['-R', '-B']).finally(() => (announcing = false));
    }, ANNOUNCE_INTERVAL_MS);
    announceTimer.unref();
    own.defer('connection sync announcements', () => clearInterval(announceTimer));
    if (st.preemptHold) {
      const holdTimer = setInterval(() => {
        if (!st.preemptHold) return clearInterval(holdTimer);
        if (performance.now() - startedAt >= resyncTimeoutMs || daemon.state === 'unavailable') {
          clearInterval(holdTimer);
          return release(daemon.state === 'unavailable' ? 'conntrackd unavailable' : `no replicated state within resyncTimeout (${resyncTimeoutMs} ms)`);
        }
        tick();
      }, HOLD_POLL_MS);
      holdTimer.unref();
      own.defer('connection sync preempt hold', () => clearInterval(holdTimer));
    }

    const commit = async (): Promise<void> => {
      // this node takes the VIP (whether or not there is anything to commit)
      holding = true;
      const t0 = performance.now();
      const at = new Date().toISOString();
      if (daemon.state !== 'running') {
        st.lastCommit = { at, durationMs: 0, ok: false, error: `conntrackd is ${daemon.state}` };
        log.warn(
          { state: daemon.state },
          'connection sync: no commit (conntrackd is not running): connections through the VIP are picked up mid-stream or reset',
        );
        return;
      }
      // until now (the VIP is not added yet) an entry from the VIP is a stale backend side
      await flows.backendSides();
      const r = await client(['-c'], '').catch((err: unknown) => ({ code: -1, stdout: '', stderr: (err as Error).message, killed: undefined }));
      // the closing flows it brought (TIME_WAIT, CLOSE) go again: each keeps its NAT binding, and a
      // client that reuses its port would be sent to that backend, which may have left since
      // (refused); a new connection gets a fresh pick instead. Not awaited: the VIP is added
      // meanwhile (two more processes on the takeover's path cost a loaded node 100s of ms)
      if (r.code === 0) void flows.forgetClosing().then(() => announceCommitted());
      const durationMs = Math.round((performance.now() - t0) * 10) / 10;
      const ok = r.code === 0;
      st.lastCommit = {
        at,
        durationMs,
        ok,
        ...(ok ? {} : { error: (r.killed === 'timeout' ? `timed out after ${cs.commitTimeoutMs} ms` : r.stderr.trim()) || `exit status ${r.code}` }),
      };
      if (ok) log.info({ durationMs, externalEntries: st.externalEntries }, 'connection sync: replicated connections committed to the kernel');
      else log.error({ durationMs, error: st.lastCommit.error }, 'connection sync: commit failed; adding the VIP anyway');
    };
    // one at a time: a second Backup transition while one runs waits for it
    let resyncing: Promise<void> = Promise.resolve();
    const resync = (): void => {
      if (daemon.state === 'unavailable') return;
      holding = false;
      resyncing = resyncing.then(async () => {
        if (stopping) return;
        // stopped on purpose (its exit is no failure): the purge runs while no conntrackd listens
        await daemon.pause();
        await flows.purge();
        daemon.resume();
      });
    };
    const status = (): ConnectionSyncStatus => ({
      state: daemon.state,
      ...st,
      lastMessageAgeMs: lastMessageAt === null ? null : Math.round(performance.now() - lastMessageAt),
      restarts: daemon.restarts,
      ...(daemon.error !== undefined ? { error: daemon.error } : {}),
    });
    return {
      reconfigure: async ({ next }: Change) => {
        resyncTimeoutMs = next.dataplane.connectionSync.resyncTimeoutMs;
      },
      commit,
      resync,
      held: () => st.preemptHold,
      onRelease: (cb) => void releases.push(cb),
      status,
      report: () => ({ connectionSync: status() }),
    };
  });
}

/**
 * Sets net.ipv4.conf.<ifname>.accept_local=1 (ip-sysctl: "Accept packets with local source
 * addresses"), logged; a failure (read-only /proc) is logged and costs only the flows to this
 * node's apiserver after its agent was killed while holding the VIP (they stall until the
 * address expires). Left set at stop: it serves exactly the case where the agent is gone.
 */
export function acceptLocal(
  ifname: string,
  log: { info(o: object, m: string): void; warn(o: object, m: string): void },
  root = '/proc/sys/net/ipv4/conf',
): void {
  const path = `${root}/${ifname}/accept_local`;
  try {
    if (readFileSync(path, 'utf8').trim() === '1') return;
    writeFileSync(path, '1\n');
    log.info(
      { sysctl: `net.ipv4.conf.${ifname}.accept_local`, now: 1 },
      'connection sync: accepting packets from the VIP on the VRRP interface (flows moved away from this node)',
    );
  } catch (err) {
    log.warn(
      { sysctl: `net.ipv4.conf.${ifname}.accept_local`, err: (err as Error).message },
      "connection sync: cannot set accept_local: after this agent is killed, its apiserver's connections stall until the VIP expires here",
    );
  }
}

/** /status of a node where connection sync is off (disabled, or no election). */
export function connectionSyncOff(): ConnectionSyncStatus {
  return { state: 'off', internalEntries: null, externalEntries: null, lastMessageAgeMs: null, lastCommit: null, preemptHold: false, restarts: 0 };
}
