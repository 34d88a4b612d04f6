/**
 * The `/status` document: what an operator asks first ("who holds the VIP, since when, why").
 */
import type { ConnectionSyncStatus } from '../dataplane/conntrackd.js';
import type { EngineStatus } from '../vrrp/engine.js';
import type { BackendHealth, FailOpenStatus, DepartedBackend } from '../health/checker.js';
import type { BackendSource, DiscoveryStats } from '../discovery/index.js';
import type { DataplaneStatus } from '../dataplane/controller.js';
import type { VrrpState } from '../vrrp/state.js';
import type { LocalDataplaneStatus } from '../dataplane/local.js';
import type { BackendCertificate } from '../health/certificates.js';
import type { BgpStatus } from '../bgp/speaker.js';
import type { ForeignFirewallStatus } from '../check/watch.js';

/** User-facing state names: the RFC's Active is "master" to operators, Initialize is "init". */
export type StatusState = 'init' | 'backup' | 'master' | 'fault';

/** One state change, as /status reports it. `at`: ISO 8601 wall clock. */
export interface TransitionRecord {
  from: StatusState;
  to: StatusState;
  /** The machine's reason (state.ts TransitionReason: masterDown, higherPriority, preempt, …). */
  reason: string;
  /** More about it when the machine says (e.g. the advert that made this node yield). */
  detail?: string;
  at: string;
}

/** The RFC 9568 state as operators name it. */
export function statusState(s: VrrpState): StatusState {
  return s === 'initialize' ? 'init' : s === 'active' ? 'master' : s;
}

/** JSON served at GET /status and printed by `ballast status --json`. Times: ISO 8601; intervals: ms. */
/** The node-local endpoint's part of /status. */
export type LocalStatus = (LocalDataplaneStatus & { failures: number; lastError: string | null }) | { mode: 'off'; reason: string };

/** What one reload did (the last one is in /status, and POST /reload answers with it). Times: ISO 8601. */
export interface ReloadResult {
  /** Applied (true), or refused / failed: then `problems` says why. */
  ok: boolean;
  /** When it ended. */
  at: string;
  /** What asked for it: SIGHUP, POST /reload (`ballast reload`), or a call of Agent.reload. */
  trigger: 'signal' | 'admin' | 'api';
  /** The configuration file read (absent for Agent.reload with a Config). */
  source?: string;
  /** Each problem as `ballast validate` prints it (`line 3: vrrp.vrid: must be …`); empty when ok. */
  problems: string[];
  /** The settings that differ from the running config (`vrrp.priority`, `vips`, …). */
  changed: string[];
  /** What was done, in a few words per action (empty when refused). */
  actions: string[];
  /** Whether the election was handed over (stopped and started again: a new group membership). */
  handover: boolean;
  /** How long it took, ms. */
  durationMs: number;
}

/** The reload part of /status. */
export interface ReloadStatus {
  /** The last reload's result; null before the first. */
  last: ReloadResult | null;
  /** When the running configuration was last loaded successfully: the start, or the last applied reload (ISO 8601). */
  lastSuccessAt: string;
}

/** What every agent reports: backends, the VIP data plane, the local endpoint. */
export interface CommonStatus {
  /** The configuration reloads (absent from documents built without an agent, e.g. in tests). */
  reload?: ReloadStatus;
  /**
   * The apiservers and their health (empty when no backends are configured), each with where it
   * came from (the agent always sets `source`) and, once a check completed a TLS handshake, its
   * serving certificate (`missing`: the names clients use that it lacks; see docs/check.md).
   */
  backends: (BackendHealth & { source?: BackendSource; certificate?: BackendCertificate })[];
  /**
   * Backends that left the set and are remembered for a while (`apiserver.health.rememberDeparted`,
   * health/checker.ts): their state when they left, how often they left and came back; one that
   * comes back resumes from there. Absent when there is none.
   */
  departedBackends?: DepartedBackend[];
  /** Backend discovery's state and counters; absent without a `discovery` section. */
  discovery?: DiscoveryStats;
  /** What the health checks decide over all backends: fail open (docs/health.md); absent without backends. */
  health?: { failOpen: FailOpenStatus };
  /** The VIP data plane: nftables with what is programmed, `none` (VIP only), or `off` (no backends, or no election). */
  dataplane: DataplaneStatus | { mode: 'none' } | { mode: 'off'; reason: string };
  /** The node-local endpoint: ebpf or proxy with the backends in its map, or `off`. */
  local: LocalStatus;
  /** mode: bgp: the routing daemon, the announcement and the peers (src/bgp/speaker.ts); absent otherwise. */
  bgp?: BgpStatus & { localBackend: string | null };
  /**
   * dataplane.connectionSync (src/agent/phases/connection-sync.ts): conntrackd's state, its caches, the
   * age of the last message from a peer and the last commit; absent without the VIP data plane.
   */
  connectionSync?: ConnectionSyncStatus;
  /** Other firewalls on the node that drop (or may drop) traffic to the VIP or the backends (src/check/watch.ts); absent until the agent's first look. */
  foreignFirewall?: ForeignFirewallStatus;
}

/** /status of an agent without an election (`vrrp` absent: a node that only serves the local endpoint). */
export interface EndpointOnlyStatusDocument extends CommonStatus {
  state: 'none';
}

/** /status: {@link ElectionStatusDocument}, or {@link EndpointOnlyStatusDocument} without an election. */
export type StatusDocument = ElectionStatusDocument | EndpointOnlyStatusDocument;

export interface ElectionStatusDocument extends CommonStatus {
  state: StatusState;
  vrid: number;
  priority: number;
  effectivePriority: number;
  masterAddress: string | null;
  masterPriority: number | null;
  vips: string[];
  vipsHeld: boolean;
  since: string;
  interface: string;
  family: 4 | 6;
  primaryAddress: string;
  mode: 'multicast' | 'unicast';
  /** Unicast peers (empty in multicast mode, and for a single node): the engine's current list. */
  peers: string[];
  /** vrrp.acceptFrom members the engine hears now, or null for any source (absent from older engines). */
  members?: string[] | null;
  /** Not a member of the group (vrrp.acceptFrom members): held in Backup until discovery lists this node (absent from older engines). */
  standby?: boolean;
  /** Whether adverts are authenticated (vrrp.auth). */
  auth: boolean;
  advertisementIntervalMs: number;
  masterAdverIntervalMs: number;
  masterDownIntervalMs: number;
  skewTimeMs: number;
  counters: EngineStatus['counters'];
  /** The election thread's punctuality (engine.ts EngineTiming). */
  timing?: EngineStatus['timing'];
  /**
   * Other Active routers this node heard while it was Active (engine.ts EngineOtherMasters):
   * `heard` > 0 means another master within the last minute; `adverts.kept` counts the adverts of
   * a second master this node outlasted (two nodes held the VIPs). Absent from older engines.
   */
  otherMasters?: EngineStatus['otherMasters'];
  /** Age of the last valid advert from any other router, ms; null before any (absent from older engines). */
  lastAdvertAgeMs?: number | null;
  /** The last state change: from, to, the machine's reason, when (ISO 8601); null before the first (absent from documents built without an agent). */
  lastTransition?: TransitionRecord | null;
  /** The last state changes (at most 20), oldest first (absent without an agent). */
  transitions?: TransitionRecord[];
  /** The master heard now (ours when master) and since when it is heard (ISO 8601); null before any (absent without an agent). */
  masterSince?: string | null;
  /** Why the advertised priority is below the configured one (the policy's reason), or null (absent without an agent or a policy). */
  priorityReason?: string | null;
}

/** The agent's election memory that goes into /status (see history.ts). */
export interface ElectionExtras {
  transitions: TransitionRecord[];
  masterSince: string | null;
  priorityReason: string | null;
}

/** Builds the document from the engine's status and the static facts of this instance. */
export function statusDocument(
  s: EngineStatus,
  fixed: {
    vips: string[];
    interface: string;
    family: 4 | 6;
    primaryAddress: string;
    unicast: boolean;
    peers: readonly string[];
    auth: boolean;
    advertisementIntervalMs: number;
  },
  common: CommonStatus = {
    backends: [],
    dataplane: { mode: 'off', reason: 'no apiserver.backends configured' },
    local: { mode: 'off', reason: 'no localEndpoint configured' },
  },
  extras?: ElectionExtras,
): ElectionStatusDocument {
  return {
    state: statusState(s.state),
    vrid: s.vrid,
    priority: s.priority,
    effectivePriority: s.effectivePriority,
    masterAddress: s.masterAddress,
    masterPriority: s.masterPriority,
    vips: [...(s.vips ?? fixed.vips)],
    vipsHeld: s.vipsHeld,
    since: s.since,
    interface: fixed.interface,
    family: fixed.family,
    primaryAddress: fixed.primaryAddress,
    mode: fixed.unicast ? 'unicast' : 'multicast',
    peers: [...(s.peers ?? fixed.peers)],
    ...(s.members !== undefined ? { members: s.members } : {}),
    ...(s.standby !== undefined ? { standby: s.standby } : {}),
    auth: fixed.auth,
    advertisementIntervalMs: s.advertisementIntervalMs ?? fixed.advertisementIntervalMs,
    masterAdverIntervalMs: s.masterAdverIntervalMs,
    masterDownIntervalMs: round(s.masterDownIntervalMs),
    skewTimeMs: round(s.skewTimeMs),
    counters: s.counters,
    ...(s.timing ? { timing: s.timing } : {}),
    ...(s.otherMasters ? { otherMasters: s.otherMasters } : {}),
    ...(s.lastAdvertAgeMs !== undefined ? { lastAdvertAgeMs: s.lastAdvertAgeMs } : {}),
    ...(extras
      ? {
          lastTransition: extras.transitions.at(-1) ?? null,
          transitions: extras.transitions,
          masterSince: extras.masterSince,
          priorityReason: extras.priorityReason,
        }
      : {}),
    backends: common.backends,
    ...(common.departedBackends === undefined ? {} : { departedBackends: common.departedBackends }),
    ...(common.discovery === undefined ? {} : { discovery: common.discovery }),
    ...(common.health === undefined ? {} : { health: common.health }),
    dataplane: common.dataplane,
    local: common.local,
    ...(common.connectionSync ? { connectionSync: common.connectionSync } : {}),
    ...(common.reload ? { reload: common.reload } : {}),
  };
}

/** The `changed:` line of `ballast status` (the last state change); none without a recorded change. */
function formatTransition(t: TransitionRecord | null | undefined): [string, string][] {
  if (!t) return [];
  return [['changed', `${t.from} → ${t.to} (${t.reason}${t.detail ? `: ${t.detail}` : ''}) at ${t.at}`]];
}

/** The `reload:` line of `ballast status`; null before the first reload. */
function formatReload(r: ReloadStatus | undefined): [string, string][] {
  const last = r?.last;
  if (!last) return [];
  const what = last.ok ? `applied (${last.changed.length === 0 ? 'nothing changed' : last.changed.join(', ')})` : `FAILED: ${last.problems.join('; ')}`;
  return [['reload', `${last.at} ${what}`]];
}

/**
 * The rows of /status `bgp` (mode: bgp, src/bgp/speaker.ts): the announcement and why, the
 * routing daemon, one `bgp peer` row per session, this node's backend, the last error when set.
 */
export function bgpRows(b: NonNullable<StatusDocument['bgp']>): [string, string][] {
  const since = (t: string | null): string => (t === null ? '' : ` since ${t}`);
  const daemon = b.daemonUp
    ? `${b.daemon} ${b.version ?? ''} up${since(b.daemonSince)}${b.routerId ? `, router ID ${b.routerId}` : ''} (socket ${b.socket}, ${b.pushes} configuration push${b.pushes === 1 ? '' : 'es'}, lost ${b.daemonLosses} time${b.daemonLosses === 1 ? '' : 's'})`
    : `${b.daemon} not answering${since(b.daemonSince)} (socket ${b.socket}; waiting for it, lost ${b.daemonLosses} time${b.daemonLosses === 1 ? '' : 's'})`;
  return [
    ['bgp', `${b.announced ? 'announced' : 'not announced'}${since(b.since)}${b.lastChangeMs === null ? '' : `, last change took ${b.lastChangeMs} ms`}`],
    ['bgp wanted', `${b.wanted ? 'yes' : 'no'}: ${b.reason} (announce: ${b.announce}, balance: ${b.balance})`],
    ['bgp daemon', daemon.replace(/ {2,}/g, ' ')],
    ...b.peers.map((p): [string, string] => [
      'bgp peer',
      `${p.address} AS ${p.asn} (${p.protocol}): ${p.session ?? 'unknown'}${p.state === null ? '' : `, protocol ${p.state}`}${p.bfd ? ', BFD' : ''}`,
    ]),
    ['bgp local', b.localBackend ?? 'none (no backend on this node)'],
    ...(b.lastError === null ? [] : [['bgp error', b.lastError] as [string, string]]),
  ];
}

/** One `firewall` row per foreign chain in the way (docs/check.md); none when nothing is. */
function formatFirewall(f: ForeignFirewallStatus | undefined): [string, string][] {
  if (!f) return [];
  if (f.error) return [['firewall', `not watched: ${f.error}`]];
  return f.rules.map((r) => ['firewall', `${r.severity === 'fail' ? 'drops' : 'may drop'}: ${r.detail}`]);
}

function formatDataplane(d: StatusDocument['dataplane']): string {
  if (d.mode === 'none') return 'none (VIP only)';
  if (d.mode === 'off') return `off: ${d.reason}`;
  const err = d.lastError ? `, last error: ${d.lastError}` : '';
  const restored = d.restores > 0 ? `, restored ${d.restores}× after someone else removed or changed it (last ${d.lastRestore})` : '';
  return `nftables, ${d.backends.length} backend(s) in the ruleset, ${d.applies} applies${restored}${err}`;
}

/** The `conn sync` line: conntrackd's state, its caches, the peers' last message, the last commit; none without the section. */
function formatConnectionSync(s: ConnectionSyncStatus | undefined): [string, string][] {
  if (!s) return [];
  if (s.state === 'off') return [['conn sync', 'off (dataplane.connectionSync.enabled: false): connections through the VIP end when it moves']];
  const entries = s.internalEntries === null ? 'no statistics yet' : `${s.internalEntries} here, ${s.externalEntries} from the peers`;
  const heard = s.lastMessageAgeMs === null ? 'no peer heard yet' : `a peer heard ${(s.lastMessageAgeMs / 1000).toFixed(1)} s ago`;
  const commit = s.lastCommit
    ? `, last commit ${s.lastCommit.ok ? `${s.lastCommit.durationMs} ms` : `FAILED (${s.lastCommit.error ?? 'unknown'})`} at ${s.lastCommit.at}`
    : '';
  const hold = s.preemptHold ? ', preemption held for the state' : '';
  const err = s.error ? `: ${s.error}` : '';
  return [['conn sync', `conntrackd ${s.state}${err}; ${entries}; ${heard}${commit}${hold}${s.restarts > 0 ? `; ${s.restarts} restart(s)` : ''}`]];
}

function formatLocal(l: LocalStatus): string {
  if (l.mode === 'off') return `off: ${l.reason}`;
  const err = l.lastError ? `, last error: ${l.lastError}` : '';
  const slow = l.mode === 'proxy' ? ' (user-space proxy: the slower path)' : '';
  return `${l.mode}${slow}, ${l.endpoints.join(' ')} → ${l.backends.length ? l.backends.join(' ') : 'no ready backend'}, ${l.socketsReset} socket(s) reset${err}`;
}

function backendRows(d: CommonStatus): [string, string][] {
  return d.backends.map((b): [string, string] => {
    // a file still to come (the CA before kubeadm init) is what the operator must read first
    const source = b.source === undefined ? '' : ` [${b.source}]`;
    if (b.waitingFor)
      return ['backend', `${b.address} waiting for ${b.waitingFor.setting} ${b.waitingFor.path} (${b.state}, not ready until the file exists)${source}`];
    const damped = b.dampedUntil ? `, damped (held out) until ${b.dampedUntil}` : '';
    return [
      'backend',
      `${b.address} ${b.state}${b.reason ? ` (${b.reason})` : ''}${b.lastLatencyMs === null ? '' : `, ${Math.round(b.lastLatencyMs)} ms`}${damped}${source}`,
    ];
  });
}

/** The `fail open:` line of `ballast status` while every backend is unready and the last ready set is kept; none otherwise. */
function failOpenRows(d: CommonStatus): [string, string][] {
  const f = d.health?.failOpen;
  if (!f?.active) return [];
  return [['fail open', `since ${f.since ?? '?'}: every backend turned unready together; keeping ${f.kept.join(', ')}`]];
}

/** Days before notAfter from which `ballast status` shows a certificate's expiry (as `ballast check` warns). */
const CERT_EXPIRY_ROW_DAYS = 30;

/** One `certificate:` line per backend whose certificate lacks a name clients use, or expires within 30 days. */
function certificateRows(d: CommonStatus, now: number): [string, string][] {
  return d.backends.flatMap((b): [string, string][] => {
    const c = b.certificate;
    if (c === undefined) return [];
    const problems = [...c.lacks];
    const left = Date.parse(c.notAfter) - now;
    if (left <= 0) problems.push(`certificate expired on ${c.notAfter}`);
    else if (left <= CERT_EXPIRY_ROW_DAYS * 86_400_000) problems.push(`certificate expires on ${c.notAfter} (in ${Math.floor(left / 86_400_000)} days)`);
    if (problems.length === 0) return [];
    const clients = c.missing.length > 0 ? '; clients using those names fail with ERR_TLS_CERT_ALTNAME_INVALID' : '';
    return [['certificate', `${b.address}: ${problems.join('; ')}${clients}`]];
  });
}

function aligned(rows: [string, string][]): string {
  const w = Math.max(...rows.map(([k]) => k.length)) + 1;
  return rows.map(([k, v]) => `${`${k}:`.padEnd(w)} ${v}`).join('\n');
}

/** The `other masters` row: only once this node heard one while it was master. */
function formatOtherMasters(d: ElectionStatusDocument): [string, string][] {
  const o = d.otherMasters;
  if (!o || o.last === null) return [];
  const { kept, yielded, handover } = o.adverts;
  const last = `last ${o.last.source} (priority ${o.last.priority}, ${o.last.outcome}) ${Math.round(o.last.ageMs / 1000)}s ago`;
  return [
    [
      'other masters',
      `${o.heard} heard in the last ${Math.round(o.windowMs / 1000)}s; adverts kept ${kept}, yielded ${yielded}, handover ${handover}; ${last}`,
    ],
  ];
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

/** `ballast status` for a person: aligned `key: value` lines. `now` is the wall clock in ms. */
export function formatStatus(d: StatusDocument, now = Date.now()): string {
  if (d.state === 'none' && d.bgp) {
    return aligned([
      ['state', 'none (mode: bgp: no election, this node announces the VIPs while it can serve them)'],
      ...bgpRows(d.bgp),
      ['dataplane', formatDataplane(d.dataplane)],
      ['local', formatLocal(d.local)],
      ...failOpenRows(d),
      ...backendRows(d),
      ...certificateRows(d, now),
      ...formatReload(d.reload),
      ...formatFirewall(d.foreignFirewall),
    ]);
  }
  if (d.state === 'none') {
    return aligned([
      ['state', 'none (no election: vrrp is not configured)'],
      ['local', formatLocal(d.local)],
      ...failOpenRows(d),
      ...backendRows(d),
      ...certificateRows(d, now),
      ...formatReload(d.reload),
      ...formatFirewall(d.foreignFirewall),
    ]);
  }
  const age = Math.max(0, Math.round((now - Date.parse(d.since)) / 1000));
  const dropped =
    Object.entries(d.counters.dropped)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ') || 'none';
  const rows: [string, string][] = [
    ['state', `${d.state} (since ${d.since}, ${age}s ago)`],
    ['vrid', String(d.vrid)],
    [
      'priority',
      d.effectivePriority === d.priority
        ? String(d.priority)
        : `${d.priority} (advertising ${d.effectivePriority}${d.priorityReason ? `: ${d.priorityReason}` : ''})`,
    ],
    [
      'master',
      d.masterAddress === null
        ? 'unknown'
        : `${d.masterAddress}${d.masterPriority === null ? '' : ` (priority ${d.masterPriority})`}${d.masterSince ? `, heard since ${d.masterSince}` : ''}`,
    ],
    ...formatTransition(d.lastTransition),
    ['vips', `${d.vips.join(', ')} (${d.vipsHeld ? 'held here' : 'not held here'})`],
    [
      'interface',
      `${d.interface}, IPv${d.family}, ${d.mode}${d.mode === 'unicast' ? ` (peers: ${d.peers.join(' ') || 'none, single node'})` : ''}${d.auth ? ', authenticated' : ''}, source ${d.primaryAddress}`,
    ],
    ['timers', `advert ${d.advertisementIntervalMs} ms, master advert ${d.masterAdverIntervalMs} ms, master down ${d.masterDownIntervalMs} ms`],
    ['adverts', `sent ${d.counters.advertsSent}, received ${d.counters.advertsReceived}, send errors ${d.counters.sendErrors}`],
    ['dropped', dropped],
    ...formatOtherMasters(d),
    ['dataplane', formatDataplane(d.dataplane)],
    ...formatConnectionSync(d.connectionSync),
    ['local', formatLocal(d.local)],
    ...failOpenRows(d),
    ...backendRows(d),
    ...certificateRows(d, now),
    ...formatReload(d.reload),
    ...formatFirewall(d.foreignFirewall),
  ];
  return aligned(rows);
}
