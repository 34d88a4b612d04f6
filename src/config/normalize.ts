/**
 * From the settings as the schema parsed them to the normalized {@link Config}: durations in
 * `…Ms` fields, unset optional strings absent, and every value derived from the configuration
 * computed here, once, so that no other module recomputes it:
 *   - `family`: the VIPs' (without an election: the first backend's, 4 when there is none);
 *   - `vrrp.advertisementIntervalCs`: what the Max Adver Int field carries (RFC 9568 §5.2.7);
 *   - `vrrp.unicast`: peers given, or a single node;
 *   - `vrrp.discoveredPeers`: `discovered` in (or as) `vrrp.peers`; `peers` keeps the listed addresses;
 *   - `vrrp.owner`: priority 255, the address owner (RFC 9568 §1.6);
 *   - `apiserver.health.timeoutMs` when unset: 1 s or the interval, whichever is shorter;
 *   - `apiserver.health.settleMs`: how long until every backend has had its first verdict;
 *   - `apiserver.health.damping`: the damping settings as one object, null with `damping: false`;
 *   - `discovery`: null unless a kubeconfig or inCluster is set; lastKnownFile's default.
 */
import { normalizeBgp } from './bgp.js';
import { defaultHealthTimeoutMs } from './fields.js';
import { DEFAULTS } from './limits.js';
import type { ParsedConfig } from './schema.js';
import type { Config, HealthConfig, VrrpConfig } from './types.js';

/** `{ [key]: v }`, or `{}` when v is undefined: an unset optional setting is absent, not undefined. */
const optional = <K extends string, V>(key: K, v: V | undefined): { [P in K]?: V } => (v === undefined ? {} : ({ [key]: v } as { [P in K]: V }));

/** The health section, normalized. */
function normalizeHealth(h: ParsedConfig['apiserver']['health']): HealthConfig {
  // a probe must end before the next one is due: an unset timeout never exceeds the interval
  const timeoutMs = h.timeout ?? defaultHealthTimeoutMs(h.interval);
  return {
    path: h.path,
    ...optional('caFile', h.caFile),
    ...optional('serverName', h.serverName),
    insecureSkipVerify: h.insecureSkipVerify,
    ...optional('clientCertFile', h.clientCertFile),
    ...optional('clientKeyFile', h.clientKeyFile),
    ...optional('tokenFile', h.tokenFile),
    intervalMs: h.interval,
    timeoutMs,
    rise: h.rise,
    fall: h.fall,
    // every backend checked `rise` (or `fall`) times, plus one interval of jitter and a timeout
    settleMs: (Math.max(h.rise, h.fall) + 1) * h.interval + timeoutMs,
    failOpen: h.failOpen,
    damping: h.damping ? { transitions: h.dampingTransitions, windowMs: h.dampingWindow, holdMs: h.dampingHold, maxHoldMs: h.dampingMaxHold } : null,
    rememberDepartedMs: h.rememberDeparted,
  };
}

/** The vrrp section, normalized; null without an election. */
function normalizeVrrp(v: ParsedConfig['vrrp']): VrrpConfig | null {
  if (v === undefined) return null;
  return {
    vrid: v.vrid,
    priority: v.priority,
    advertisementIntervalMs: v.advertisementInterval,
    advertisementIntervalCs: v.advertisementInterval / 10,
    preempt: v.preempt,
    preemptDelayMs: v.preemptDelay,
    realtimePriority: v.realtimePriority,
    restartHoldMs: v.restartHold,
    unicast: v.peers !== undefined || v.singleNode,
    peers: v.peers?.addresses ?? [],
    discoveredPeers: v.peers?.keyword ?? false,
    acceptFrom: v.acceptFrom,
    checksum: v.checksum,
    owner: v.priority === 255,
    auth: v.auth?.keyFile === undefined ? null : { keyFile: v.auth.keyFile },
  };
}

/** The whole configuration, normalized (not yet frozen). */
export function normalize(c: ParsedConfig): Config {
  return {
    mode: c.mode,
    ...optional('interface', c.interface),
    family: c.vips?.family ?? c.apiserver.backends[0]?.family ?? 4,
    vrrp: normalizeVrrp(c.vrrp),
    vips: c.vips?.addresses ?? [],
    vipLifetimeMs: c.vipLifetime,
    announce: { count: c.announce.count, spacingMs: c.announce.spacing, repeatAfterMs: c.announce.repeatAfter, refreshMs: c.announce.refresh },
    apiserver: { port: c.apiserver.port, backends: c.apiserver.backends, health: normalizeHealth(c.apiserver.health) },
    dataplane: {
      vip: c.dataplane.vip,
      local: c.dataplane.local,
      keepOnStop: c.dataplane.keepOnStop,
      commandTimeoutMs: c.dataplane.commandTimeout,
      rebalance: {
        enabled: c.dataplane.rebalance.enabled,
        factor: c.dataplane.rebalance.factor,
        afterMs: c.dataplane.rebalance.after,
        resetsPerSecond: c.dataplane.rebalance.resetsPerSecond,
        maxFractionPerMinute: c.dataplane.rebalance.maxFractionPerMinute,
      },
      connectionSync: {
        enabled: c.dataplane.connectionSync.enabled,
        commitTimeoutMs: c.dataplane.connectionSync.commitTimeout,
        resyncTimeoutMs: c.dataplane.connectionSync.resyncTimeout,
      },
    },
    localEndpoint:
      c.localEndpoint === undefined
        ? null
        : { addresses: c.localEndpoint.address, force: c.localEndpoint.force, ...optional('cgroup', c.localEndpoint.cgroup) },
    discovery:
      c.discovery === undefined || (c.discovery.kubeconfig === undefined && !c.discovery.inCluster)
        ? null
        : {
            ...optional('kubeconfig', c.discovery.kubeconfig),
            inCluster: c.discovery.inCluster,
            lastKnownFile: c.discovery.lastKnownFile ?? DEFAULTS.discoveryLastKnownFile,
          },
    policy: { unhealthyPriorityWeight: c.policy.unhealthyPriorityWeight, ...optional('localBackend', c.policy.localBackend) },
    admin: { listen: c.admin.listen },
    log: { level: c.log.level },
    bgp: normalizeBgp(c.bgp),
  };
}
