/**
 * The agent: start-up is an ordered list of phases ({@link agentPhases}, the only place that
 * knows the order), undone last first on one cleanup stack.
 *
 *   preflight ─► admin ─► local endpoint ─► VIP data plane ─► connection sync ─► election ─► election policy ─► health ─► discovery
 *   (checks,     (/status)  (ebpf | proxy)   (nftables)        (conntrackd)       (VRRP, or   (priority from    (checks,   (owns the
 *    locks)                                                                        BGP mode)   health)           passive)   backend set)
 *
 * Stop, a failed start, a signal during start-up and the fatal events (the interface was
 * deleted, the election failed) are the same thing: one unwind of the stack, last phase
 * first. Nothing on the system changes before preflight has checked the configuration against
 * the host. The local endpoint and the VIP data plane start before the election (a failure there
 * leaves the VIPs untouched) and are undone after it (a resigning master still serves).
 *
 * Reload (SIGHUP, POST /reload, {@link Agent.reload}) is reload.ts, one loop over the phases:
 * each says from its table of settings what a change does to it, only the difference is applied,
 * and a re-run phase keeps its place in the list (docs/phases.md). Reloads run one at a time; one
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
import { adminPhase, type AdminPhase } from './phases/admin.js';
import { bgpPhase, type BgpPhase } from './phases/bgp.js';
import { electionPhase, type ElectionPhase } from './phases/election.js';
import { discoveryPhase, type DiscoveryPhase } from './phases/discovery.js';
import { healthPhase, type HealthPhase } from './phases/health.js';
import { localEndpointPhase, type LocalEndpointPhase } from './phases/local-endpoint.js';
import type { AgentContext, ResolvedInterface, StatusReport } from './phase.js';
import { phase, PhaseList, step } from './phase-list.js';
import { preflightPhase, type Preflight } from './phases/preflight.js';
import { priorityPhase, type PriorityPhase } from './phases/priority.js';
import { runReload } from './reload.js';
import { CleanupStack } from './stack.js';
import { dataplaneStatus, vipDataplanePhase, type VipDataplanePhase } from './phases/vip-dataplane.js';
import { connectionSyncOff, connectionSyncPhase, type ConnectionSyncPhase } from './phases/connection-sync.js';
import { runsNftables } from './leftovers.js';
import { ForeignFirewallWatch } from '../check/watch.js';
import { flowsFor } from '../check/firewall.js';
import { commandExecutor } from '../dataplane/apply.js';
import { listAllInterfaces } from '../host/interfaces.js';
import { MemoryRelease } from './memory.js';
import { parseDuration } from '../config/duration.js';
import { DEFAULTS } from '../config/limits.js';

/** vrrp.restartHold's default, ms: the hold of a restart in place without an election (mode: bgp keeps everything alike). */
const DEFAULT_RESTART_HOLD_MS = parseDuration(DEFAULTS.restartHold);

export { resolveInterface } from './phases/preflight.js';
export { backendsOfNode } from '../health/confirm.js';
export { CleanupStack } from './stack.js';
export { planReload, type ReloadPlan } from './reload.js';

/** The agent's phases by key: the handles the list holds while they run. */
interface Phases {
  preflight: Preflight;
  admin: AdminPhase;
  local: LocalEndpointPhase;
  vipDataplane: VipDataplanePhase;
  connectionSync: ConnectionSyncPhase;
  election: ElectionPhase;
  priority: PriorityPhase;
  bgp: BgpPhase;
  health: HealthPhase;
  discovery: DiscoveryPhase;
}

/** Whether the config has backends to check (else no health, discovery or data plane phase runs). */
const balances = (c: Config): boolean => c.apiserver.backends.length > 0;

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
   * reload.ts). Waits for the start-up and for a reload under way. Never rejects for a
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
  const reloads = { current: config, last: null as ReloadResult | null, lastSuccessAt: new Date().toISOString(), queue: Promise.resolve() as Promise<unknown> };
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
      else log.info(list.handles.election ? 'stopping: resigning (priority 0) if master, removing the VIPs' : 'stopping');
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
    ...(opts.logLevel ? { logLevel: opts.logLevel } : {}),
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
      const ifname = list.handles.preflight?.resolved?.iface.ifname;
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
  const ready = (): Promise<void> => notifier.ready();
  const list: PhaseList<Phases> = agentPhases({
    checker,
    status: () => status(),
    stamp,
    ...(opts.load ? { reload: () => reloadAdmin() } : {}),
    ready: () => ready(),
    log,
  });
  const status = (): Promise<StatusDocument> =>
    statusOf(reloads.current, checker, certificates, list, { last: reloads.last, lastSuccessAt: reloads.lastSuccessAt }, history, internal).then((d) => {
      const f = firewall.status();
      return f ? { ...d, foreignFirewall: f } : d;
    });
  // the watchdog's gate: the election's timers run (it is on this thread, as the pings are)
  const notifier = createNotifier(opts.serviceManager ?? null, { log, status, alive: () => list.handles.election?.host.alive() ?? Promise.resolve() });

  const memory = new MemoryRelease(log, undefined, internal);
  /** One reload at a time, after the start-up; `get` gives the config (or throws why not). */
  const enqueue = (trigger: ReloadResult['trigger'], get: () => Config, source?: string): Promise<ReloadResult> => {
    if (stopping) return Promise.reject(new ReloadUnavailable('the agent is stopping; the configuration was not reloaded'));
    const run = async (): Promise<ReloadResult> => {
      await started;
      if (stopping) throw new ReloadUnavailable('the agent is stopping; the configuration was not reloaded');
      notifier.reloading();
      const r = await runReload(ctx, reloads.current, get, list, { trigger, source }).finally(() => notifier.ready());
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
  stack.defer('phases', () => list.unwind());
  // started first: a stop (also one requested before startAgent) waits for the phase under way
  started = list.start(ctx, config);
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
 * The agent's phases in order (the only place that knows it; see the top of this file), not
 * started: {@link PhaseList.start} runs those the config asks for.
 *
 * Each entry says when its phase runs, which earlier handles it uses (a re-run of one re-runs it
 * too) and how its inputs are built from them; a getter where a reload may replace the handle.
 * `ready` is called (and awaited) once the election has its first state (its start resolves
 * after it), or, without an election, once every phase is up.
 */
export function agentPhases(deps: {
  checker: HealthChecker | null;
  status: () => Promise<StatusDocument>;
  stamp: () => unknown;
  reload?: () => Promise<ReloadResult>;
  ready: () => Promise<void>;
  log: Logger;
}): PhaseList<Phases> {
  const { checker, log } = deps;
  const checks = (): HealthChecker => checker!;
  return new PhaseList<Phases>(
    [
      // preflight runs even when a stop came first: its undo is what removes a killed earlier
      // run's leftovers, and it needs the locks it takes to do that safely (see preflight.ts)
      phase({ key: 'preflight', spec: preflightPhase, when: () => true, runsWhenStopping: true, inputs: () => ({}) }),
      phase({
        key: 'admin',
        spec: adminPhase,
        when: () => true,
        inputs: () => ({ status: deps.status, stamp: deps.stamp, ...(deps.reload ? { reload: deps.reload } : {}) }),
      }),
      phase({
        key: 'local',
        spec: localEndpointPhase,
        when: (c) => c.localEndpoint !== null && c.dataplane.local !== 'off' && balances(c),
        inputs: (_c, h) => ({ checker: checks(), ebpf: h.preflight!.ebpf }),
      }),
      step<Phases>({ step: 'starting', when: () => true, run: (c, h) => logStarting(log, c, h) }),
      phase({
        key: 'vipDataplane',
        spec: vipDataplanePhase,
        when: runsNftables,
        inputs: (_c, h) => ({ iface: () => h.preflight!.resolved!.iface, checker: checks(), tables: h.preflight!.tables! }),
      }),
      // after the table (it source-NATs to the VIP), before the election (a takeover commits first)
      phase({
        key: 'connectionSync',
        spec: connectionSyncPhase,
        when: (c) => runsNftables(c) && c.dataplane.connectionSync.enabled,
        inputs: (_c, h) => ({ resolved: h.preflight!.resolved! }),
      }),
      phase({
        key: 'election',
        spec: electionPhase,
        when: (c) => c.vrrp !== null,
        inputs: (_c, h) => ({
          resolved: h.preflight!.resolved!,
          authKeys: h.preflight!.authKeys,
          checker,
          sync: h.connectionSync ?? null,
          vipPlane: () => h.vipDataplane?.lb ?? null,
          discovered: () => h.discovery?.members() ?? null,
        }),
      }),
      // the engine's first state came with its start (VrrpHost.start resolves after it)
      step<Phases>({ step: 'ready (election)', when: (c) => c.vrrp !== null, run: () => deps.ready() }),
      phase({
        key: 'priority',
        spec: priorityPhase,
        when: (c) => c.vrrp !== null && balances(c),
        uses: ['election'],
        inputs: (c, h) => ({
          iface: h.preflight!.resolved!.iface,
          host: h.election!.host,
          checker: checks(),
          // whether the VIP data plane can serve (it started, or there is none)
          dataplaneReady: c.dataplane.vip === 'none' || h.vipDataplane !== undefined,
          sync: h.connectionSync ?? null,
          evaluateNow: h.health !== undefined,
        }),
      }),
      // mode: bgp: no election; this node announces the VIPs through BIRD while it can serve them
      phase({ key: 'bgp', spec: bgpPhase, when: (c) => c.vrrp === null && c.bgp !== null && balances(c), inputs: () => ({ checker: checks() }) }),
      phase({
        key: 'health',
        spec: healthPhase,
        when: balances,
        inputs: (_c, h) => ({
          checker: checks(),
          local: h.local?.local ?? null,
          localLb: () => h.local?.lb,
          policy: () => h.priority,
          // with an election, the VIPs' flows are judged only while this node holds them
          ...(h.election ? { vipsHeldSince: () => h.election?.vipsHeldSince() ?? null } : {}),
        }),
      }),
      // discovery: owns the checker's backend set (seed, EndpointSlices, last-known file)
      phase({
        key: 'discovery',
        spec: discoveryPhase,
        when: balances,
        inputs: (_c, h) => ({
          checker: checks(),
          followers: () => ({
            ...(h.vipDataplane || h.bgp ? { lb: (h.vipDataplane ?? h.bgp)!.lb } : {}),
            ...(h.local ? { localLb: h.local.lb } : {}),
            ...(h.priority ? { policy: h.priority } : {}),
          }),
          election: () => h.election ?? null,
          firstOutcome: h.election?.firstOutcome ?? null,
        }),
      }),
      step<Phases>({ step: 'ready', when: (c) => c.vrrp === null, run: () => deps.ready() }),
    ],
    log,
  );
}

/** The one line that says what starts, after the local endpoint (its endpoints are known then). */
function logStarting(log: Logger, config: Config, h: Readonly<Partial<Phases>>): void {
  const local = h.local?.local ?? null;
  const admin = formatHostPort(config.admin.listen);
  const v = config.vrrp;
  const resolved = h.preflight?.resolved ?? null;
  if (v && resolved) {
    log.info(
      {
        interface: resolved.iface.ifname,
        family: config.family,
        source: resolved.primary,
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
  } else if (config.bgp && balances(config)) {
    log.info({ mode: 'bgp', vips: config.vips, localEndpoint: local?.status().endpoints ?? [], admin, node: process.version }, 'starting');
  } else {
    log.info(
      { localEndpoint: local?.status().endpoints ?? [], mode: local?.mode ?? 'off', backends: config.apiserver.backends.length, admin, node: process.version },
      'starting (no election: local endpoint only)',
    );
  }
}

/**
 * The /status document: each running phase reports its part (PhaseHandle.report, merged in the
 * list's order), the agent adds the checker's backends and says `off` for a part no phase
 * reported; with an election, the engine's state around them.
 * @throws Error while the election is not running.
 */
async function statusOf(
  config: Config,
  checker: HealthChecker | null,
  certificates: CertificateTracker | null,
  list: PhaseList<Phases>,
  reload: StatusDocument['reload'],
  history: ElectionHistory,
  internal: InternalErrors,
): Promise<StatusDocument> {
  const running = list.handles;
  // each running phase's part, in the list's order
  const r: StatusReport = Object.assign({}, ...list.phases().map((p) => p.handle?.report?.() ?? {}));
  // before the discovery phase runs, the checker holds the seed and the last-known file's set
  const seed = new Set(config.apiserver.backends.map(formatHostPort));
  const sourceOf = (address: string): BackendSource => r.sources?.get(address) ?? (seed.has(address) || config.discovery === null ? 'seed' : 'lastKnown');
  const departed = checker?.departed() ?? [];
  const common = {
    ...(reload ? { reload } : {}),
    backends: (checker?.snapshot() ?? []).map((b) => {
      // a certificate that cannot be reported leaves the backend's entry without one, not /status failing
      const certificate = internal.run('certificates', () => certificates?.get(b.address));
      return { ...b, source: sourceOf(b.address), ...(certificate === undefined ? {} : { certificate }) };
    }),
    ...(r.discovery === undefined ? {} : { discovery: r.discovery }),
    ...(departed.length === 0 ? {} : { departedBackends: departed }),
    ...(checker ? { health: { failOpen: checker.failOpen() } } : {}),
    dataplane: dataplaneStatus(config, r.dataplane ?? null),
    local: r.local ?? { mode: 'off' as const, reason: config.localEndpoint === null ? 'no localEndpoint configured' : 'dataplane.local: off' },
    ...(r.bgp ? { bgp: r.bgp } : {}),
    ...(config.vrrp !== null && r.dataplane ? { connectionSync: r.connectionSync ?? connectionSyncOff() } : {}),
  };
  const fixed = electionFacts(config, running.preflight?.resolved ?? null);
  if (!fixed) return { state: 'none', ...common };
  if (!running.election) throw new Error('the election engine is not running');
  const engine = await running.election.host.status();
  // since when the master the engine names now is heard (not an earlier one's time)
  const heard = internal.run('history', () => history.currentMaster()) ?? null;
  const masterSince = heard !== null && heard.address === engine.masterAddress ? heard.since : null;
  return statusDocument(engine, fixed, common, {
    transitions: internal.run('history', () => history.transitions()) ?? [],
    masterSince,
    priorityReason: r.priorityReason ?? null,
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
