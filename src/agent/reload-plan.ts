/**
 * What a reload does (pure): the difference between the running Config and the next one, per
 * setting, and the actions it calls for. Agent.reload (index.ts) carries the plan out.
 *
 *   changed setting                              action
 *   ─────────────────────────────────────────    ──────────────────────────────────────────────
 *   log.level                                    the logger's level, at once
 *   vips, vrrp.priority, advertisementInterval,  election: host.reconfigure(patch) — from the
 *     preempt, preemptDelay, peers, announce,      next advert; VIPs added / removed one by one
 *     vipLifetime
 *   vips, apiserver.port                         VIP data plane: the nftables table re-rendered
 *                                                  (one atomic replace; conntrack keeps flows)
 *   apiserver.backends, discovery                the backend set (through the discovery phase; kept states stay)
 *   vrrp.peers, discoveredPeers, acceptFrom,     election membership (membership.ts): peers and
 *     apiserver.backends                           acceptFrom members, from the next advert
 *   apiserver.health.*                           checker: its settings (kept states stay)
 *   vrrp.priority, policy.*, backends, health    election policy: its options (new base priority)
 *   vips, apiserver.port, backends, health       passive detection: restarted with the new flows
 *   localEndpoint.addresses / force (and the     local endpoint: the phase re-run
 *     VIPs, with the ebpf local endpoint)
 *   admin.listen                                 admin: the phase re-run
 *   interface, family, vrrp.vrid, checksum,      hand-over: the election stops (priority 0 if
 *     auth, unicast on/off, owner (255)            Active, VIPs removed) and starts again
 *   family (nftables VIP data plane)             within the hand-over: the VIP data plane re-run
 *                                                  for the new family (its table and lock)
 *   anything else (see RESTART)                  not applied: the reload is refused, nothing changes
 *
 * Durations are compared in the units Config carries them in (ms, cs).
 */
import type { Config } from '../config/index.js';
import type { EngineReconfigure } from '../vrrp/engine.js';

/** The election's runtime change (VrrpHost.reconfigure): only the fields that differ are set; `vips` is the whole new set. */
export type ElectionPatch = EngineReconfigure;

/** What one reload does, derived from the two configs. */
export interface ReloadPlan {
  /** Every setting that differs, as a path (`vrrp.priority`, `vips`, `apiserver.health.intervalMs`), sorted. */
  readonly changed: readonly string[];
  /** The changed settings a reload cannot apply: non-empty = the reload is refused as a whole. */
  readonly restart: readonly string[];
  /** The changed settings that need a new group membership: non-empty = hand-over (election stopped and started again). */
  readonly handover: readonly string[];
  /** The running election's patch (null: none, or a hand-over, which starts the election with the whole new config). */
  readonly election: ElectionPatch | null;
  /** VIPs in the next config and not in the running one, and the reverse (canonical text, config order). */
  readonly vips: { readonly added: readonly string[]; readonly removed: readonly string[] };
  readonly logLevel: boolean;
  /** The checker's backend set. */
  readonly backends: boolean;
  /** The checker's settings (apiserver.health). */
  readonly health: boolean;
  /** The VIP data plane's ruleset inputs (VIPs, port), same family. */
  readonly vipDataplane: boolean;
  /**
   * The VIPs' family changed under the nftables VIP data plane: within the hand-over the plane is
   * re-run for `to` (the new family's table and lock; the old family's table removed). null otherwise.
   */
  readonly vipFamily: { readonly from: 4 | 6; readonly to: 4 | 6 } | null;
  /** The election policy's options. */
  readonly policy: boolean;
  /** Passive detection's inputs (the flows it follows, its timeout). */
  readonly passive: boolean;
  /** The election's peers and acceptFrom members (membership.ts): listed peers, `discovered`, acceptFrom, the seed's hosts. */
  readonly membership: boolean;
  /** The discovery phase's settings (a changed `discovery` section restarts the watch). */
  readonly discovery: boolean;
  /** Re-run the local endpoint phase. */
  readonly localEndpoint: boolean;
  /** Re-run the admin phase. */
  readonly admin: boolean;
}

/**
 * Settings a reload does not apply, and why (said in the refusal). Each needs resources that only
 * preflight takes at start (locks, the eBPF pin directory) or a phase that runs only when the
 * start-up config asks for it.
 */
export const RESTART: Readonly<Record<string, string>> = {
  vrrp: 'turning the election on or off',
  'dataplane.vip': 'the VIP data plane mode',
  'dataplane.local': 'the local endpoint mode',
  'dataplane.keepOnStop': 'what a stop leaves behind',
  'dataplane.commandTimeoutMs': "the time limit of the data plane's nft and conntrack runs",
  localEndpoint: 'adding or removing the local endpoint',
  'localEndpoint.cgroup': "the local endpoint's cgroup",
  'apiserver.backends (none ↔ some)': 'turning load balancing on or off',
};

/** Changed paths that need a new group membership: a hand-over. */
const HANDOVER = ['interface', 'family', 'vrrp.vrid', 'vrrp.checksum', 'vrrp.auth', 'vrrp.unicast', 'vrrp.owner'];

/** Settings whose change a reload knows how to apply (the rest go to `restart`). */
const APPLIED = [
  ...HANDOVER,
  'vips',
  'vipLifetimeMs',
  'announce',
  'vrrp.priority',
  'vrrp.advertisementIntervalMs',
  'vrrp.advertisementIntervalCs',
  'vrrp.preempt',
  'vrrp.preemptDelayMs',
  // read when the agent stops
  'vrrp.restartHoldMs',
  'vrrp.peers',
  'vrrp.discoveredPeers',
  'vrrp.acceptFrom',
  'discovery',
  'apiserver.port',
  'apiserver.backends',
  'apiserver.health',
  'localEndpoint.addresses',
  'localEndpoint.force',
  'dataplane.rebalance',
  'policy',
  'admin.listen',
  'log.level',
];

/** True when `path` is `prefix` or inside it. */
function under(path: string, prefix: string): boolean {
  return path === prefix || path.startsWith(`${prefix}.`);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * The paths of the settings that differ between `a` and `b`: objects are walked, everything else
 * (arrays included: a list is one setting) compared as JSON. A section present on one side only
 * (`vrrp`, `localEndpoint`) is one path.
 */
export function changedPaths(a: unknown, b: unknown, prefix = ''): string[] {
  if (isRecord(a) && isRecord(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => changedPaths(a[k], b[k], prefix === '' ? k : `${prefix}.${k}`));
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [prefix === '' ? '(document)' : prefix];
}

/**
 * The plan for going from `cur` (running) to `next`.
 * @returns see {@link ReloadPlan}; `restart` non-empty means nothing may be applied.
 */
export function planReload(cur: Config, next: Config): ReloadPlan {
  const changed = changedPaths(cur, next);
  const has = (prefix: string): boolean => changed.some((p) => under(p, prefix));
  const restart = new Set<string>();
  for (const p of changed) {
    const fixed = Object.keys(RESTART).find((r) => p === r);
    if (fixed !== undefined) restart.add(fixed);
    // mode: bgp (agent/bgp.ts) applies the log level, the health settings and the backend set; the rest needs a restart
    else if ((cur.mode === 'bgp' || next.mode === 'bgp') && !['log.level', 'apiserver.health', 'apiserver.backends', 'discovery'].some((a) => under(p, a)))
      restart.add(p);
    else if ((under(p, 'dataplane') && !under(p, 'dataplane.rebalance')) || under(p, 'localEndpoint.cgroup')) restart.add(p);
    else if (!APPLIED.some((a) => under(p, a))) restart.add(p);
  }
  if ((cur.apiserver.backends.length === 0) !== (next.apiserver.backends.length === 0)) restart.add('apiserver.backends (none ↔ some)');
  const nft = (c: Config): boolean => c.vrrp !== null && c.dataplane.vip === 'nftables' && c.apiserver.backends.length > 0;
  // the plane is on in both or neither (vrrp, dataplane.vip and none ↔ some backends are restarts)
  const vipFamily = cur.family !== next.family && nft(cur) && nft(next) ? { from: cur.family, to: next.family } : null;
  const handover = cur.vrrp !== null && next.vrrp !== null ? HANDOVER.filter(has) : [];

  const before = new Set(cur.vips);
  const after = new Set(next.vips);
  const vips = { added: next.vips.filter((v) => !before.has(v)), removed: cur.vips.filter((v) => !after.has(v)) };

  let election: ElectionPatch | null = null;
  if (cur.vrrp !== null && next.vrrp !== null && handover.length === 0) {
    const a = cur.vrrp;
    const b = next.vrrp;
    const patch: ElectionPatch = {};
    if (has('vips')) patch.vips = [...next.vips];
    if (a.priority !== b.priority) patch.priority = b.priority;
    if (a.advertisementIntervalCs !== b.advertisementIntervalCs) patch.advertisementIntervalCs = b.advertisementIntervalCs;
    if (a.preempt !== b.preempt) patch.preempt = b.preempt;
    if (a.preemptDelayMs !== b.preemptDelayMs) patch.preemptDelayMs = b.preemptDelayMs;
    if (has('announce')) patch.announce = { ...next.announce };
    if (cur.vipLifetimeMs !== next.vipLifetimeMs) patch.vipLifetimeMs = next.vipLifetimeMs;
    if (Object.keys(patch).length > 0) election = patch;
  }
  const backends = has('apiserver.backends');
  const health = has('apiserver.health');
  const lbOn = next.vrrp !== null && next.dataplane.vip === 'nftables' && next.apiserver.backends.length > 0;
  const ebpfVips = next.vrrp !== null && next.dataplane.local === 'ebpf' && next.localEndpoint !== null && (has('vips') || has('apiserver.port'));
  return {
    changed,
    restart: [...restart],
    handover,
    election,
    vips,
    logLevel: has('log.level'),
    backends,
    health,
    vipDataplane: lbOn && vipFamily === null && (has('vips') || has('apiserver.port') || has('interface') || has('dataplane.rebalance')),
    vipFamily,
    policy: next.vrrp !== null && (has('vrrp.priority') || has('policy') || backends || health),
    passive: has('vips') || has('apiserver.port') || backends || has('apiserver.health.timeoutMs'),
    localEndpoint: next.localEndpoint !== null && next.dataplane.local !== 'off' && (has('localEndpoint.addresses') || has('localEndpoint.force') || ebpfVips),
    admin: has('admin.listen'),
    membership: next.vrrp !== null && handover.length === 0 && (has('vrrp.peers') || has('vrrp.discoveredPeers') || has('vrrp.acceptFrom') || backends),
    discovery: has('discovery'),
  };
}

/** The plan in a few words per action, for the one log line a reload writes (and its result). */
export function describePlan(p: ReloadPlan): string[] {
  const out: string[] = [];
  if (p.changed.length === 0) return ['nothing changed'];
  if (p.logLevel) out.push('log level set');
  if (p.handover.length > 0) out.push(`hand-over: election stopped (priority 0 if master, VIPs removed) and started again (${p.handover.join(', ')})`);
  if (p.vips.added.length > 0) out.push(`VIPs added: ${p.vips.added.join(', ')}`);
  if (p.vips.removed.length > 0) out.push(`VIPs removed: ${p.vips.removed.join(', ')}`);
  if (p.election) out.push(`election reconfigured (${Object.keys(p.election).join(', ')}), from the next advert`);
  if (p.backends) out.push('backend set replaced (kept backends keep their state)');
  if (p.discovery) out.push('discovery restarted with the new settings (the backend set stays until it answers)');
  if (p.membership) out.push('election peers / acceptFrom members recomputed');
  if (p.health) out.push('health check settings replaced (kept backends keep their state)');
  if (p.vipDataplane) out.push('VIP data plane reprogrammed (one atomic nftables replace)');
  if (p.vipFamily)
    out.push(
      `VIP data plane moved from IPv${p.vipFamily.from} to IPv${p.vipFamily.to} (within the hand-over: the new family's table and lock; the old family's table removed unless keepOnStop is all)`,
    );
  if (p.policy) out.push('election policy updated');
  if (p.passive) out.push('passive detection restarted');
  if (p.localEndpoint) out.push('local endpoint re-run');
  if (p.admin) out.push('admin endpoint re-run');
  return out;
}
