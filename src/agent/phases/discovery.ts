/**
 * Phase, discovery (the last one): owns the health checker's backend set. Without a `discovery`
 * section the set is `apiserver.backends` (source `seed`); with one, src/discovery merges the
 * seed, the `kubernetes` EndpointSlices and the last-known file, and every change of the merged
 * set goes to checker.setBackends, then to the data planes:
 *
 *   set change ─► checker.setBackends ─► planes re-sync (VIP nftables, local endpoint) ─► policy
 *                 (new: unknown until rise passes;        (left: out of the ruleset / map; its
 *                  left: checks stop, no verdict)          established flows keep their conntrack
 *                                                          NAT binding or socket: they drain)
 *              └─► election members: unicast peers (vrrp.peers `discovered`) and the acceptFrom
 *                  members, through VrrpHost.reconfigure ({@link feedElection})
 *
 * Nothing resets a backend that left the set: the checker emits no verdict for it (so no `dead`
 * queues a reset), passive detection ignores a backend the checker no longer has, and the
 * nftables apply replaces rules, not conntrack entries. The election never waits on discovery:
 * this phase starts after it and only ever patches it, and discovery itself (the Kubernetes
 * client's import, TLS, each list and watch event) runs on a thread of its own (discovery/thread.ts).
 */
import type { Config } from '../../config/index.js';
import { ConfigError } from '../../errors.js';
import type { HealthChecker } from '../../health/checker.js';
import type { Verdict } from '../../health/verdict.js';
import {
  DiscoveryThread,
  InvalidCredentials,
  type BackendSource,
  type CredentialSource,
  type DiscoveryStats,
  type SourcedBackend,
} from '../../discovery/index.js';
import { canonicalAddress } from '../../net/address.js';
import { formatHostPort } from '../../net/hostport.js';
import type { Logger } from '../../log/log.js';
import { updateMembership, type MembershipHolder } from '../membership-update.js';
import { runPhase, type AgentContext, type Change, type PhaseHandle, type PhaseSpec } from '../phase.js';

/** What discovery feeds (getters: a reload's re-run replaces them). */
export interface DiscoveryInputs {
  checker: HealthChecker;
  /** The planes that follow the backend set (re-synced when it changes) and the policy (re-evaluated). */
  followers: () => { lb?: { sync(): Promise<unknown> }; localLb?: { sync(): Promise<unknown> }; policy?: { evaluate(): void } };
  /** The running election, if any (a reload's hand-over replaces it). */
  election: () => MembershipHolder | null;
  /** Resolves once the election has its first outcome (null: no election): discovery's thread starts after it. */
  firstOutcome?: Promise<void> | null;
  /** The discovery thread's entry (default: the one beside the running code; a test run from src/ names dist's). */
  discoveryWorker?: URL;
}

/**
 * Phase 9, discovery: owns the checker's backend set (seed, EndpointSlices, last-known file).
 * A new seed or discovery section applies in place.
 */
export const discoveryPhase: PhaseSpec<DiscoveryInputs, DiscoveryPhase> = {
  name: 'discovery',
  settings: [
    { path: 'apiserver.backends', on: 'reconfigure', does: 'backend set replaced (kept backends keep their state)' },
    { path: 'discovery', on: 'reconfigure', does: 'discovery restarted with the new settings (the backend set stays until it answers)' },
  ],
  start: startDiscovery,
};

/** What the discovery phase exposes. */
export interface DiscoveryPhase extends PhaseHandle {
  /** Each backend's source, by `host:port` (IPv6 in brackets). */
  sources(): Map<string, BackendSource>;
  /** The node addresses (hosts) of the current backends, canonical, no repeats. */
  members(): string[];
  /** Discovery's counters and state; null without a `discovery` section. */
  stats(): DiscoveryStats | null;
  /**
   * The new seed and discovery settings. A changed `discovery` section restarts the watch (the
   * set stays until the new one answers); otherwise only the seed changes.
   */
  setConfig(config: Config): Promise<void>;
}

/**
 * Starts the phase: the first set goes to the checker at once (seed, or seed + last-known), then
 * discovery runs in the background. A kubeconfig that is missing is waited for.
 * @throws ConfigError (discovery.kubeconfig) when the kubeconfig exists but is malformed.
 */
export function startDiscovery(ctx: AgentContext, config: Config, inputs: DiscoveryInputs): Promise<DiscoveryPhase> {
  return runPhase(ctx, 'discovery', async (own) => {
    const { checker, election } = inputs;
    const { log } = ctx;
    // discovery runs on a thread of its own, but its start (the Kubernetes client's import, the
    // first TLS handshakes) takes a core for 0.1-0.7 s: not before the election has a first
    // outcome, so that a control plane starting at once does not slow its own elections
    if (config.discovery !== null && inputs.firstOutcome && !ctx.signal.aborted) {
      const t0 = performance.now();
      await Promise.race([inputs.firstOutcome, new Promise<void>((r) => ctx.signal.addEventListener('abort', () => r(), { once: true }))]);
      log.debug({ waitedMs: Math.round(performance.now() - t0) }, "discovery starts after the election's first outcome");
    }
    let cfg = config;
    let current: SourcedBackend[] = cfg.apiserver.backends.map((backend) => ({ backend, source: 'seed' as const }));
    let disc: DiscoveryThread | null = null;
    /** undone (or the agent stopping): no thread starts, one that was starting is stopped */
    let closed = false;
    let lastMembers = '';

    const apply = (set: SourcedBackend[]): void => {
      current = set;
      checker.setBackends(set.map((s) => s.backend));
      // the planes read the checker's verdicts: a new backend is unknown (no traffic), one that
      // left is not in the set (no new connections; established ones untouched)
      const f = inputs.followers();
      void f.lb?.sync();
      void f.localLb?.sync();
      f.policy?.evaluate();
      const members = membersOf(set);
      const key = members.join(',');
      // the election hears of members only from discovery (without it, the seed is in its config)
      if (key !== lastMembers && cfg.discovery !== null) {
        lastMembers = key;
        void feedElection(election(), members, confirmedOf(set), log);
      }
    };

    const startWatch = async (c: Config): Promise<DiscoveryThread | null> => {
      const d = c.discovery;
      if (d === null || closed || ctx.signal.aborted) return null;
      const credentials: CredentialSource = d.inCluster ? { kind: 'inCluster' } : { kind: 'kubeconfig', path: d.kubeconfig! };
      const dd = await DiscoveryThread.open({
        credentials,
        lastKnownFile: d.lastKnownFile,
        seed: c.apiserver.backends,
        readyBackends: () =>
          checker
            .verdicts()
            .filter((v) => v.state === 'up')
            .map((v) => v.backend),
        defaultPort: c.apiserver.port,
        log,
        ...(inputs.discoveryWorker === undefined ? {} : { workerUrl: inputs.discoveryWorker }),
      }).catch((err: unknown) => {
        throw err instanceof InvalidCredentials ? new ConfigError([{ path: 'discovery.kubeconfig', message: err.reason }]) : err;
      });
      if (closed || ctx.signal.aborted) {
        await dd.stop();
        return null;
      }
      dd.on('change', apply);
      apply(dd.current());
      dd.start();
      return dd;
    };

    const onVerdict = (_v: Verdict): void => disc?.readinessChanged();
    checker.on('verdict', onVerdict);
    own.defer('discovery readiness subscription', () => void checker.off('verdict', onVerdict));
    disc = await startWatch(cfg);
    if (disc === null) apply(current);
    own.defer('discovery watch', async () => {
      closed = true;
      const d = disc;
      disc = null;
      await d?.stop();
    });

    return {
      sources: () => new Map(current.map((s) => [formatHostPort(s.backend), s.source])),
      members: () => membersOf(current),
      stats: () => disc?.stats() ?? null,
      report: () => {
        const stats = disc?.stats() ?? null;
        return { sources: new Map(current.map((s) => [formatHostPort(s.backend), s.source])), ...(stats === null ? {} : { discovery: stats }) };
      },
      reconfigure: async ({ has, next }: Change) => {
        if (has('apiserver.backends') || has('discovery')) await setConfig(next);
      },
      setConfig,
    };
    async function setConfig(next: Config): Promise<void> {
      const before = JSON.stringify(cfg.discovery);
      cfg = next;
      if (JSON.stringify(next.discovery) !== before) {
        const old = disc;
        disc = null;
        await old?.stop();
        disc = await startWatch(next);
        if (disc === null) apply(next.apiserver.backends.map((backend) => ({ backend, source: 'seed' as const })));
        log.info({ discovery: next.discovery === null ? 'off' : 'restarted' }, 'discovery: settings changed');
      } else if (disc !== null) {
        disc.setSeed(next.apiserver.backends);
      } else {
        apply(next.apiserver.backends.map((backend) => ({ backend, source: 'seed' as const })));
      }
    }
  });
}

/** The hosts of the backends the EndpointSlices listed, canonical, no repeats. */
export function confirmedOf(set: readonly SourcedBackend[]): string[] {
  return membersOf(set.filter((s) => s.source === 'endpointslice'));
}

/** The hosts of a backend set, canonical, in order, no repeats. */
export function membersOf(set: readonly SourcedBackend[]): string[] {
  return [...new Set(set.map((s) => canonicalAddress(s.backend.host)))];
}

/**
 * Gives the election the members discovery found (node addresses of the current backends): its
 * unicast peers (with `vrrp.peers: discovered`) and acceptFrom members follow them, through
 * {@link updateMembership} (membership.ts decides; this node's own addresses are left out there).
 * Never throws: a refused change is logged and the election keeps its previous membership.
 * @param election null when no election runs (a worker with the local endpoint only): no call.
 * @param confirmed the hosts of `members` that came from the EndpointSlices (membership.ts: a seed
 *   host not yet listed is still waited for; one listed and then gone has left).
 */
export async function feedElection(election: MembershipHolder | null, members: readonly string[], confirmed: readonly string[], log: Logger): Promise<void> {
  if (election === null) return;
  try {
    await updateMembership(election, { discovered: members, confirmed }, log);
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'discovery: cannot update the election members; it keeps the previous ones');
  }
}
