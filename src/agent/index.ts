/**
 * The agent: start-up is a list of phases, each undone on one cleanup stack.
 *
 *   preflight ─► admin ─► local endpoint ─► VIP data plane ─► election ─► election policy ─► health ─► discovery
 *   (checks,     (/status)  (ebpf | proxy)   (nftables)        (VRRP       (priority from    (checks start,   (owns the
 *    locks)                                                      engine)     health)           passive          backend set)
 *                                                                                              detection)
 *
 * Stop, a failed start, a signal during start-up and the fatal events (the interface was
 * deleted, the election failed) are the same thing: one unwind of the stack, last phase
 * first. Nothing on the system changes before preflight has checked the configuration against
 * the host. The local endpoint and the VIP data plane start before the election (a failure there
 * leaves the VIPs untouched) and are undone after it (a resigning master still serves).
 *
 * Reload (SIGHUP, POST /reload, {@link Agent.reload}) is reload.ts: only the difference is
 * applied; a re-run phase takes its old one's slot on the stack. Reloads run one at a time; one
 * asked for during start-up waits for it, one asked for during a stop is refused.
 */
import { formatHostPort } from '../net/hostport.js';
import type { BackendSource } from '../discovery/merge.js';
import type { Config, LogLevel } from '../config/index.js';
import { HealthChecker } from '../health/checker.js';
import { CertificateTracker } from '../health/certificates.js';
import { certificateNeeds } from '../health/examine-certificate.js';
import { seedAndLastKnown } from '../discovery/lastknown.js';
import { ReloadUnavailable } from '../observe/admin.js';
import { ElectionHistory } from '../observe/history.js';
import { InternalErrors } from '../observe/contain.js';
import type { Logger } from '../log/log.js';
import { createNotifier, type ServiceManager } from '../observe/notify.js';
import { statusDocument, type ReloadResult, type StatusDocument } from '../observe/status.js';
import { startAdminPhase } from './admin.js';
import { startBgp } from './bgp.js';
import { startElection } from './election.js';
import { startDiscovery } from './discovery.js';
import { startHealth, type HealthFollowers } from './health.js';
import { startLocalEndpoint } from './local-endpoint.js';
import { throwIfAborted, type AgentContext, type PhaseHandle } from './phase.js';
import { preflight, type ResolvedInterface } from './preflight.js';
import { startPriority } from './priority.js';
import { dataplaneReady, runReload, type PhaseDeps, type Running } from './reload.js';
import { CleanupStack } from './stack.js';
import { dataplaneStatus, startVipDataplane } from './vip-dataplane.js';
import { connectionSyncOff, startConnectionSync } from './connection-sync.js';
import { ForeignFirewallWatch } from '../check/watch.js';
import { flowsFor } from '../check/firewall.js';
import { commandExecutor } from '../dataplane/apply.js';
import { listAllInterfaces } from '../host/interfaces.js';
import { MemoryRelease } from './memory.js';
import { parseDuration } from '../config/duration.js';
import { DEFAULTS } from '../config/limits.js';

/** vrrp.restartHold's default, ms: the hold of a restart in place without an election (mode: bgp keeps everything alike). */
const DEFAULT_RESTART_HOLD_MS = parseDuration(DEFAULTS.restartHold);

export { resolveInterface } from './preflight.js';
export { backendsOfNode } from './health.js';
export { CleanupStack } from './stack.js';
export { planReload, type ReloadPlan } from './reload-plan.js';

/** A running agent. */
export interface Agent {
  /** The current /status document. */
  status(): Promise<StatusDocument>;
  /**
   * Clean stop: priority 0 if Active, VIPs removed, admin closed. With `restart` (a restart in
   * place, docs/operations.md): an Active router keeps its VIPs and tells the Backups to wait up
   * to vrrp.restartHold for the next process; the nftables table and the eBPF programs stay.
   * Idempotent: the first call decides which.
   */
  stop(opts?: { restart?: boolean }): Promise<void>;
  /**
   * Applies `next` (a validated Config): only its difference from the running one (see
   * reload-plan.ts). Waits for the start-up and for a reload under way. Never rejects for a
   * refused or failed reload: the result says so (`ok: false`, `problems`), the running state
   * stays, and it is the last reload of /status.
   * @throws ReloadUnavailable when the agent is stopping.
   */
  reload(next: Config): Promise<ReloadResult>;
  /**
   * Reads the configuration file again (startAgent's `load`) and applies it as {@link reload};
   * an invalid file changes nothing: each problem is logged as `ballast validate` prints it.
   * @param trigger what asked for it (for the log and the result).
   * @throws ReloadUnavailable when the agent is stopping, or was started without `load`.
   */
  reloadFile(trigger: 'signal' | 'admin'): Promise<ReloadResult>;
  /** Resolves when the agent has stopped for good (by stop() or a fatal error), with the exit status. */
  readonly done: Promise<number>;
}

/**
 * Starts the agent: the phases in order (see the top of this file), whichever the config asks for.
 * @param opts.signal aborting it stops the agent: during start-up the phase under way finishes
 *   (or stops at its next check; an nft under way is killed), everything started is unwound, and
 *   the returned agent's `done` resolves 0 (startAgent itself resolves then, it does not reject).
 * @param opts.serviceManager where to send sd_notify(3) messages (observe/notify.ts: READY=1 once
 *   the election has its first state, watchdog pings, RELOADING=1 / READY=1 around a reload,
 *   STOPPING=1); null or absent: none.
 *   Preflight always runs, even when the signal was aborted before startAgent: its undo removes
 *   what a killed earlier run left (VIPs, tables, pins), which needs its locks.
 * @throws BallastError (see errors.ts) when a phase fails — in that case everything started was
 *   undone, except that VIPs left by an earlier run may have been removed.
 */
export async function startAgent(
  config: Config,
  log: Logger,
  opts: {
    signal?: AbortSignal;
    load?: () => Config;
    source?: string;
    logLevel?: LogLevel;
    serviceManager?: ServiceManager | null;
    /** Asked when `signal` aborts: whether that stop is a restart in place (see {@link Agent.stop}). */
    restartOnAbort?: () => boolean;
  } = {},
): Promise<Agent> {
  const stack = new CleanupStack(log);
  const cancel = new AbortController();
  const running: Running = {
    preflight: null,
    resolved: null,
    admin: null,
    local: null,
    vipDataplane: null,
    election: null,
    priority: null,
    health: null,
    discovery: null,
  };
  const reloads = { current: config, last: null as ReloadResult | null, lastSuccessAt: new Date().toISOString(), queue: Promise.resolve() as Promise<unknown> };
  const followers: HealthFollowers = { lb: null, localLb: null, balancing: null };
  // the seed plus the last-known set from the start: the discovery phase, which feeds the set
  // later, runs last; until then the planes must not drop what a restart inherited (the eBPF
  // local endpoint's map) for a seed whose nodes may all have been replaced
  const initial = config.discovery === null ? null : seedAndLastKnown(config.apiserver.backends, config.discovery.lastKnownFile);
  const checker =
    config.apiserver.backends.length > 0
      ? new HealthChecker({ health: config.apiserver.health, backends: initial ?? config.apiserver.backends, logger: log })
      : null;
  // each backend's serving certificate, from the checks' handshakes: reported, never a health input
  const certificates = checker ? new CertificateTracker((b) => certificateNeeds(reloads.current, b), log) : null;
  // observer paths contain their failures here: counted, logged, never fatal (observe/contain.ts)
  const internal = new InternalErrors(log);
  // health and configuration changes: the admin endpoint answers none of them with a rendering
  // from before (observe/admin.ts shared), the election's are counted by its history
  let changes = 0;
  const changed = (): void => void changes++;
  for (const ev of ['change', 'failOpen', 'damping'] as const) checker?.on(ev, changed);
  if (checker && certificates) {
    checker.on(
      'check',
      internal.wrap('certificates', (c) => {
        if (c.result.peerCertificate) certificates.observe(c.backend, c.result.peerCertificate);
        if (certificates.size > checker.backends().length) certificates.retain(new Set(checker.snapshot().map((b) => b.address)));
      }),
    );
  }

  let finish!: (code: number) => void;
  const done = new Promise<number>((r) => (finish = r));
  let stopping: Promise<void> | null = null;
  let started: Promise<void> = Promise.resolve();
  /** The one way down: cancel the start, let the phase under way settle, unwind, exit `code`. */
  let restart = false;
  const stopWith = (code: number, asRestart = false): Promise<void> => {
    stopping ??= (async () => {
      restart = asRestart;
      notifier.stopping();
      cancel.abort();
      await started.catch(() => undefined);
      // a reload under way finishes first (its phase starts see the abort and stop early)
      await reloads.queue.catch(() => undefined);
      if (restart)
        log.info(
          { restartHoldMs: reloads.current.vrrp?.restartHoldMs ?? null },
          'stopping for a restart in place: the VIPs, the nftables table and the eBPF programs stay for the next process; the Backups wait for it',
        );
      else log.info(running.election ? 'stopping: resigning (priority 0) if master, removing the VIPs' : 'stopping');
      await stack.unwind();
      log.info('stopped');
      finish(code);
    })();
    return stopping;
  };
  const history = new ElectionHistory();
  const stamp = (): number => changes + history.changes;
  const ctx: AgentContext = {
    log,
    signal: cancel.signal,
    fail: (code) => void stopWith(code),
    history,
    internal,
    restarting: () => (restart ? { holdMs: reloads.current.vrrp?.restartHoldMs ?? DEFAULT_RESTART_HOLD_MS } : null),
  };

  // other firewalls on the node that would drop what ballast serves (src/check/watch.ts)
  const firewall = new ForeignFirewallWatch({
    log,
    nft: commandExecutor(['nft']),
    flows: async () => {
      const c = reloads.current;
      if (!c.vrrp && c.apiserver.backends.length === 0) return null;
      const all = await listAllInterfaces();
      const nodeAddresses = new Set(all.flatMap((i) => i.addresses.map((a) => a.address)));
      const ifname = running.resolved?.iface.ifname;
      return {
        family: c.family,
        hooks: flowsFor({
          family: c.family,
          vips: c.vips,
          port: c.apiserver.port,
          backends: c.apiserver.backends,
          nodeAddresses,
          ...(ifname ? { ifname } : {}),
        }),
      };
    },
  });
  const status = (): Promise<StatusDocument> =>
    statusOf(reloads.current, checker, certificates, followers, running, { last: reloads.last, lastSuccessAt: reloads.lastSuccessAt }, history, internal).then(
      (d) => {
        const f = firewall.status();
        return f ? { ...d, foreignFirewall: f } : d;
      },
    );
  // the watchdog's gate: the election's timers run (it is on this thread, as the pings are)
  const notifier = createNotifier(opts.serviceManager ?? null, { log, status, alive: () => running.election?.host.alive() ?? Promise.resolve() });

  const memory = new MemoryRelease(log, undefined, internal);
  /** One reload at a time, after the start-up; `get` gives the config (or throws why not). */
  const enqueue = (trigger: ReloadResult['trigger'], get: () => Config, source?: string): Promise<ReloadResult> => {
    if (stopping) return Promise.reject(new ReloadUnavailable('the agent is stopping; the configuration was not reloaded'));
    const run = async (): Promise<ReloadResult> => {
      await started;
      if (stopping) throw new ReloadUnavailable('the agent is stopping; the configuration was not reloaded');
      notifier.reloading();
      const r = await runReload(ctx, reloads.current, get, {
        stack,
        running,
        followers,
        checker,
        status,
        stamp,
        reload: reloadAdmin,
        logLevel: opts.logLevel,
        trigger,
        source,
      }).finally(() => notifier.ready());
      reloads.last = r.result;
      changed();
      if (r.ok) {
        memory.schedule();
        reloads.current = r.config!;
        reloads.lastSuccessAt = r.result.at;
        internal.run('certificates', () => certificates?.setNeeds((b) => certificateNeeds(reloads.current, b)));
      }
      return r.result;
    };
    const p = reloads.queue.then(run, run);
    reloads.queue = p.catch(() => undefined);
    return p;
  };
  const reloadFile = (trigger: 'signal' | 'admin'): Promise<ReloadResult> => {
    const { load } = opts;
    if (!load) return Promise.reject(new ReloadUnavailable('this agent was started without a configuration file to reload'));
    return enqueue(trigger, load, opts.source);
  };
  const reloadAdmin = (): Promise<ReloadResult> => reloadFile('admin');

  const onAbort = (): void => void stopWith(0, opts.restartOnAbort?.() ?? false);
  // started first: a stop (also one requested before startAgent) waits for the phase under way
  started = startPhases(ctx, config, { stack, running, followers, checker, status, stamp, reload: opts.load ? reloadAdmin : undefined }, () =>
    notifier.ready(),
  );
  if (opts.signal?.aborted) onAbort();
  else opts.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    await started;
    if (!cancel.signal.aborted) {
      stack.defer('foreign firewall watch', () => firewall.stop());
      firewall.start();
      stack.defer('memory release', () => memory.stop());
      stack.defer('internal errors log', () => internal.close());
      memory.schedule();
    }
  } catch (err) {
    // cancelled: stopWith is unwinding, and `done` tells when it is over
    if (!cancel.signal.aborted) {
      notifier.stopping();
      stopping = stack.unwind();
      await stopping;
      opts.signal?.removeEventListener('abort', onAbort);
      throw err;
    }
  }
  return { status, stop: (o) => stopWith(0, o?.restart ?? false), done, reload: (next) => enqueue('api', () => next), reloadFile };
}

/**
 * The phases in order, whichever the config asks for; each one's undo goes on `stack` as soon as
 * it has started, and a stop is checked for before and after each. `ready` is called (and
 * awaited) once the election has its first state (the engine's start emits it), or, without an
 * election, once every phase is up.
 * @throws StartAborted when ctx.signal is aborted; a phase's error otherwise.
 */
async function startPhases(ctx: AgentContext, config: Config, deps: PhaseDeps, ready: () => Promise<void>): Promise<void> {
  const { stack, running, followers, checker, status, reload, stamp } = deps;
  const { log } = ctx;
  /** Runs one phase and puts its undo on the stack; checks for a stop before and after. */
  const phase = async <H extends PhaseHandle>(start: () => Promise<H>): Promise<H> => {
    throwIfAborted(ctx.signal);
    const h = await start();
    stack.defer(h.phase, () => h.undo());
    throwIfAborted(ctx.signal);
    return h;
  };

  // preflight runs even when a stop came first: its undo is what removes a killed earlier run's
  // leftovers, and it needs the locks it takes to do that safely (see preflight.ts)
  const pre = (running.preflight = await preflight(ctx, config));
  running.resolved = pre.resolved;
  stack.defer(pre.phase, () => pre.undo());
  throwIfAborted(ctx.signal);
  running.admin = await phase(() => startAdminPhase(ctx, config, { status, ...(stamp ? { stamp } : {}), ...(reload ? { reload } : {}) }));
  if (config.localEndpoint && config.dataplane.local !== 'off' && checker) {
    running.local = await phase(() => startLocalEndpoint(ctx, config, { checker, followers, ebpf: pre.ebpf }));
  }
  const local = running.local?.local ?? null;
  const admin = formatHostPort(config.admin.listen);
  const v = config.vrrp;
  if (v && pre.resolved) {
    const { iface, primary } = pre.resolved;
    log.info(
      {
        interface: iface.ifname,
        family: config.family,
        source: primary,
        vips: config.vips,
        vrid: v.vrid,
        priority: v.priority,
        advertisementIntervalMs: v.advertisementIntervalMs,
        mode: v.unicast ? 'unicast' : 'multicast',
        auth: v.auth !== null,
        localEndpoint: local?.status().endpoints ?? [],
        admin,
        node: process.version,
      },
      'starting',
    );
    if (checker && pre.tables) running.vipDataplane = await phase(() => startVipDataplane(ctx, config, { iface, checker, followers, tables: pre.tables! }));
    // after the table (it source-NATs to the VIP), before the election (a takeover commits first)
    if (running.vipDataplane && config.dataplane.connectionSync.enabled)
      running.connectionSync = await phase(() => startConnectionSync(ctx, config, { resolved: pre.resolved! }));
    const sync = running.connectionSync ?? null;
    const election = (running.election = await phase(() =>
      startElection(ctx, config, { resolved: pre.resolved!, authKeys: pre.authKeys, checker, followers, sync }),
    ));
    // the engine's first state came with its start (VrrpHost.start resolves after it)
    await ready();
    if (checker)
      running.priority = await phase(() =>
        startPriority(ctx, config, { iface, host: election.host, checker, followers, dataplaneReady: dataplaneReady(config, followers), sync }),
      );
  } else if (config.bgp && checker) {
    // mode: bgp: no election; this node announces the VIPs through BIRD while it can serve them
    log.info({ mode: 'bgp', vips: config.vips, localEndpoint: local?.status().endpoints ?? [], admin, node: process.version }, 'starting');
    running.bgp = await phase(() => startBgp(ctx, config, { checker, followers }));
  } else {
    log.info(
      { localEndpoint: local?.status().endpoints ?? [], mode: local?.mode ?? 'off', backends: config.apiserver.backends.length, admin, node: process.version },
      'starting (no election: local endpoint only)',
    );
  }
  if (checker) running.health = await phase(() => startHealth(ctx, config, { checker, followers, local }));
  // discovery: owns the checker's backend set (seed, EndpointSlices, last-known file)
  if (checker) {
    // the Kubernetes client library takes 0.4 s (idle) to seconds (busy) of this thread to
    // import: not before the election has a first outcome. Imported earlier (before the election
    // or while a starting Backup waits for its Master_Down_Timer) it delayed that node's first
    // takeover, and a cold start of a control plane went to a lower priority first, then moved.
    // Afterwards a held thread costs nothing: the pacer covers an Active's adverts, and a Backup
    // reads the adverts waiting in its socket before its late timer acts
    if (config.discovery !== null && running.election && !ctx.signal.aborted) {
      const t0 = performance.now();
      await Promise.race([running.election.firstOutcome, new Promise<void>((r) => ctx.signal.addEventListener('abort', () => r(), { once: true }))]);
      log.debug({ waitedMs: Math.round(performance.now() - t0) }, "discovery starts after the election's first outcome");
    }
    running.discovery = await phase(() => startDiscovery(ctx, config, { checker, followers, election: () => running.election }));
  }
  if (!running.election) await ready();
}

/** The /status document, from the phases that run. @throws Error while the election is not running. */
async function statusOf(
  config: Config,
  checker: HealthChecker | null,
  certificates: CertificateTracker | null,
  followers: HealthFollowers,
  running: Running,
  reload: StatusDocument['reload'],
  history: ElectionHistory,
  internal: InternalErrors,
): Promise<StatusDocument> {
  const sources = running.discovery?.sources();
  // before the discovery phase runs, the checker holds the seed and the last-known file's set
  const seed = new Set(config.apiserver.backends.map(formatHostPort));
  const sourceOf = (address: string): BackendSource => sources?.get(address) ?? (seed.has(address) || config.discovery === null ? 'seed' : 'lastKnown');
  const stats = running.discovery?.stats() ?? null;
  const departed = checker?.departed() ?? [];
  const common = {
    ...(reload ? { reload } : {}),
    backends: (checker?.snapshot() ?? []).map((b) => {
      // a certificate that cannot be reported leaves the backend's entry without one, not /status failing
      const certificate = internal.run('certificates', () => certificates?.get(b.address));
      return { ...b, source: sourceOf(b.address), ...(certificate === undefined ? {} : { certificate }) };
    }),
    ...(stats === null ? {} : { discovery: stats }),
    ...(departed.length === 0 ? {} : { departedBackends: departed }),
    ...(checker ? { health: { failOpen: checker.failOpen() } } : {}),
    dataplane: dataplaneStatus(config, followers.lb ? { ...followers.lb.plane.status(), ...followers.lb.status() } : null),
    local: followers.localLb
      ? { ...followers.localLb.plane.status(), ...followers.localLb.status() }
      : { mode: 'off' as const, reason: config.localEndpoint === null ? 'no localEndpoint configured' : 'dataplane.local: off' },
    ...(running.bgp ? { bgp: running.bgp.status() } : {}),
    ...(config.vrrp !== null && followers.lb ? { connectionSync: running.connectionSync?.status() ?? connectionSyncOff() } : {}),
  };
  const fixed = electionFacts(config, running.resolved);
  if (!fixed) return { state: 'none', ...common };
  if (!running.election) throw new Error('the election engine is not running');
  const engine = await running.election.host.status();
  // since when the master the engine names now is heard (not an earlier one's time)
  const heard = internal.run('history', () => history.currentMaster()) ?? null;
  const masterSince = heard !== null && heard.address === engine.masterAddress ? heard.since : null;
  return statusDocument(engine, fixed, common, {
    transitions: internal.run('history', () => history.transitions()) ?? [],
    masterSince,
    priorityReason: running.priority?.reason() ?? null,
  });
}

/** The parts of /status that do not change while the election runs; null without an election. */
function electionFacts(config: Config, resolved: ResolvedInterface | null) {
  const v = config.vrrp;
  if (!v || !resolved) return null;
  return {
    vips: [...config.vips],
    interface: resolved.iface.ifname,
    family: config.family,
    primaryAddress: resolved.primary,
    unicast: v.unicast,
    peers: v.peers,
    auth: v.auth !== null,
    advertisementIntervalMs: v.advertisementIntervalMs,
  };
}
