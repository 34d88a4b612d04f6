/**
 * The election engine's interface (engine.ts): what it is given ({@link EngineOptions},
 * {@link EngineDeps}), how a reload changes it ({@link EngineReconfigure}, checked by
 * {@link checkReconfigurePatch}), what it reports ({@link EngineStatus}) and emits
 * ({@link EngineEvent}), and the log lines tests look for.
 */
import { performance } from 'node:perf_hooks';
import { addressFamily, canonicalAddress, type AddressFamily } from '../net/address.js';
import type { OpenEdge } from './edge.js';
import { checkReconfigure, type MachineReconfigure, type MachineSnapshot, type VrrpState } from './state.js';
import type { EngineGcStats, EngineTiming } from './timing.js';

/** Everything the engine needs, already resolved and validated by the main thread (structured-clone safe). */
export interface EngineOptions {
  vrid: number;
  /** 1..255. */
  priority: number;
  /** Advertisement_Interval, centiseconds. */
  advertisementIntervalCs: number;
  preempt: boolean;
  /** ms. */
  preemptDelayMs: number;
  checksum: 'rfc5798' | 'rfc9568';
  /**
   * Unicast: adverts go to `peers` only, and adverts from any other source are dropped
   * (`notPeer`); an empty list is a single node that sends to nobody. Otherwise multicast to
   * 224.0.0.18 / ff02::12 and `peers` is empty.
   */
  unicast: boolean;
  peers: string[];
  /**
   * vrrp.acceptFrom `members`: only adverts from these sources (same family; for IPv6 multicast
   * the link-local addresses the adverts come from) are heard, the rest are dropped as
   * `notMember` and logged once per source. Null or absent: any source (vrrp.acceptFrom `any`).
   */
  members?: string[] | null;
  /**
   * Not a member of the group yet (vrrp.acceptFrom `members`, none of this node's addresses is a
   * member): the others drop our adverts, so the machine stays Backup and listens (state.ts
   * MachineEvent `standby`). Absent: false.
   */
  standby?: boolean;
  /**
   * Shared keys of authenticated adverts (docs/auth.md; the first signs, all verify), or null for plain RFC 9568 adverts.
   * With a key, adverts without a valid trailer are dropped (`authMissing`, `authFailed`, `replayed`).
   */
  authKeys: Uint8Array[] | null;
  vips: string[];
  family: AddressFamily;
  ifname: string;
  ifindex: number;
  /** "aa:bb:cc:dd:ee:ff" */
  mac: string;
  /** The source of our adverts: IPv4 primary address or IPv6 link-local address. */
  primaryAddress: string;
  /**
   * Gratuitous ARP / unsolicited NA on becoming Active: frames per VIP, ms between them, ms to a
   * second burst (0 = none), and ms between refresh bursts while Active (0 = none).
   */
  announce: { count: number; spacingMs: number; repeatAfterMs: number; refreshMs: number };
  /** Valid lifetime of the VIPs, ms (0 = permanent); renewed every third of it while Active. */
  vipLifetimeMs: number;
  /** Start with preemption held (see MachineEvent `preemptHold`) until the policy releases it. */
  preemptHoldAtStart: boolean;
  /**
   * Runs on becoming Active, before the VIPs are added and announced (the address queue waits for
   * it; adverts do not): connection sync commits the replicated conntrack entries here, so that
   * no packet of a moved connection reaches this node before its state is in the kernel. It must
   * bound its own time; a rejection is logged and the VIPs are added anyway. Absent: nothing.
   */
  beforeTakeover?: () => Promise<void>;
  /** Whether the link was up (IFF_UP and IFF_RUNNING) when the main thread looked. */
  linkRunning: boolean;
  /** Priority 255: the VIPs are this node's own addresses; the engine never adds or removes them. */
  owner: boolean;
  /** The advert pacer thread's SCHED_FIFO priority (vrrp.realtimePriority); 0 or absent: normal scheduling. */
  realtimePriority?: number;
  /**
   * The previous process of this router handed off in place while Active (see
   * {@link VrrpEngine.handOff}) and the Backups still wait for it: start Active at once, keep the
   * VIPs on the interface (state.ts MachineEvent `startup` with `resume`). Absent: false.
   */
  resume?: boolean;
}

/** What {@link VrrpEngine.handOff} did. */
export interface HandOffResult {
  /** Whether the router was Active (then the VIPs stay and the Backups wait); false: a plain stop. */
  active: boolean;
  /** The Max Adver Int the last adverts announced, centiseconds (0 when not Active). */
  intervalCs: number;
  /**
   * Master_Down_Interval of a Backup that heard them, at the lowest possible priority (1): the
   * longest any Backup waits before it takes over, ms (RFC 9568 §6.1). 0 when not Active.
   */
  masterDownBoundMs: number;
  /** The lifetime the VIPs were renewed with, ms (0 when not Active): they expire when the Backups take over. */
  vipLifetimeMs: number;
}

/**
 * A change of a running engine's parameters (a reload), each optional; absent = unchanged.
 * A change of vrid, interface or family is not a reconfigure (the agent hands over and rejoins).
 */
export interface EngineReconfigure {
  /**
   * The whole new VIP set, same family. VIPs that stay are never removed; see state.ts
   * `MachineReconfigure`. A router that is not Active then lists the added VIPs on the interface
   * and removes those it finds (whatever their prefix), as a start does.
   */
  vips?: string[];
  /** The configured base priority, 1..254 (setPriority still sets the effective one). Not for the owner (255). */
  priority?: number;
  /** Advertisement_Interval, centiseconds 1..4095, from the next advert. */
  advertisementIntervalCs?: number;
  preempt?: boolean;
  /** ms. */
  preemptDelayMs?: number;
  /** Unicast: the whole send list (and the allowlist of sources). Our own address is ignored. */
  peers?: string[];
  /** acceptFrom members: the sources whose adverts are heard; null = any. */
  members?: string[] | null;
  /** Not a member (see {@link EngineOptions.standby}); set while Active, the router resigns (priority 0) into Backup. */
  standby?: boolean;
  /** As in {@link EngineOptions}: frames per VIP, ms between them, ms to the repeat burst, ms between refresh bursts. */
  announce?: { count: number; spacingMs: number; repeatAfterMs: number; refreshMs: number };
  /** ms (0 = permanent). Ignored by the owner. */
  vipLifetimeMs?: number;
}

/** Logged when the VIPs were added on becoming Active (or by a reconfigure). */
export const VIPS_ADDED = 'VIPs added';

/** Logged once when this node is found to be in no member source (EngineOptions `standby` set; docs/auth.md). */
export const STANDBY_ON = 'not a member of the group yet: listening as Backup until discovery lists this node';
/** Logged once when standby is cleared: from then on RFC 9568 §6.4 rules apply (a silent group: Active within one Master_Down_Interval). */
export const STANDBY_OFF = 'a member of the group now: normal VRRP rules apply';

/** Logged when a reload added a VIP that was already on the interface of a node that is not master (it is removed, as at start). */
export const STRAY_ON_RELOAD = 'a VIP the reload added was already on the interface while this node is not master; removed it';

/** Most sources logged once each per kind of drop; the rest only count (a flood of forged sources cannot grow memory). */
export const LOGGED_SOURCES_MAX = 256;

/** What the engine reports about itself. */
export interface EngineStatus {
  state: VrrpState;
  vrid: number;
  priority: number;
  effectivePriority: number;
  masterAddress: string | null;
  masterPriority: number | null;
  /** ISO 8601 wall-clock time when the current state was entered. */
  since: string;
  /** Master_Adver_Interval in ms (what the Active router advertises). */
  masterAdverIntervalMs: number;
  masterDownIntervalMs: number;
  skewTimeMs: number;
  vipsHeld: boolean;
  counters: EngineCounters;
  /** The VIPs as they are now (a reconfigure changes them). */
  vips?: string[];
  /** Advertisement_Interval now, ms. */
  advertisementIntervalMs?: number;
  /** Unicast peers now ([] in multicast mode). */
  peers?: string[];
  /** acceptFrom members now, or null for any source. */
  members?: string[] | null;
  /** Not a member of the group: held in Backup until discovery lists this node (EngineOptions `standby`). */
  standby?: boolean;
  /** The election thread's punctuality (see {@link EngineTiming}). */
  timing?: EngineTiming;
  /** Other Active routers heard while this one was Active (see {@link EngineOtherMasters}). */
  otherMasters?: EngineOtherMasters;
  /** Age of the last valid advert heard from any other router (the master's, on a Backup), ms; null before any. */
  lastAdvertAgeMs?: number | null;
}

/**
 * How long a second master, once heard, counts as heard now ({@link EngineOtherMasters} `heard`),
 * ms: longer than a usual Prometheus scrape interval, so that a short episode (a healed
 * partition ends in one advert) is seen by a scrape, and a lasting one (a peer that cannot hear
 * us keeps advertising) keeps it set.
 */
export const OTHER_MASTER_WINDOW_MS = 60_000;

/**
 * state.ts OtherMastersHeard for /status: ages instead of monotonic times. Nobody hears a second
 * master while the two cannot hear each other (a partition): this reports what was heard, from
 * the moment it is heard (the partition heals, or one direction works).
 */
export interface EngineOtherMasters {
  /** Distinct other routers heard advertising as Active, while this one was Active, within the last `windowMs`. */
  heard: number;
  /** {@link OTHER_MASTER_WINDOW_MS}, ms. */
  windowMs: number;
  /** Such adverts since start, per outcome (state.ts OtherMastersHeard): `kept` means two masters held the VIPs. */
  adverts: { kept: number; yielded: number; handover: number };
  /** The latest: sender, its priority, what this router did, how long ago (ms); null before any. */
  last: { source: string; priority: number; outcome: 'kept' | 'yielded' | 'handover'; ageMs: number } | null;
}

export interface EngineCounters {
  advertsSent: number;
  advertsReceived: number;
  sendErrors: number;
  /** Received packets dropped, by reason (the codec's §7.1 checks, plus `notPeer`, `notMember`, `own`, `malformedIpHeader`). */
  dropped: Record<string, number>;
  transitions: number;
  announcementsSent: number;
  /** Valid adverts for our VRID whose address list differs from our VIPs (RFC 9568 §7.1: log it). */
  foreign: number;
}

/** Events the engine emits (to the main thread, for logs, /status and metrics). */
export type EngineEvent =
  | { type: 'transition'; from: VrrpState; to: VrrpState; reason: string; detail?: string; previousMaster?: string; at: string }
  | { type: 'log'; level: 'debug' | 'info' | 'warn' | 'error'; msg: string; fields?: Record<string, unknown> }
  /** The interface was deleted: the engine cannot go on (the agent exits so its supervisor restarts it). */
  | { type: 'interfaceGone'; ifname: string }
  /**
   * A Backup heard a new Active router (another source than the last one; not a resign), or the
   * same one with `preempting` changed (then `previous` is `address`): the agent tells whether it
   * is one of the known members (agent/phases/election.ts). `preempting`: its priority is lower and this
   * Backup will take over (MachineSnapshot.preempting; a lowered priority of ours ends it).
   */
  | { type: 'master'; address: string; priority: number; previous: string | null; preempting: boolean }
  /**
   * An exception escaped the engine's own processing (a timer, a packet, a netlink
   * notification): its state can no longer be trusted; the agent unwinds and exits.
   */
  | { type: 'failed'; error: Error };

/** What the engine is given besides its options: the OS edge and the clock (tests pass fakes). */
export interface EngineDeps {
  /** Opens the OS edge; default {@link openNativeEdge}. */
  openEdge?: OpenEdge;
  /** Monotonic ms; default `performance.now`. */
  now?: () => number;
  /** This thread's garbage collections so far, for `timing.gc` (host.ts observes them). */
  gcStats?: () => EngineGcStats;
  /**
   * Blocks the thread for `ms` (fractional ms), for the last stretch before a deadline (see
   * {@link PRECISE_WAIT_MS}). Default: Atomics.wait on a private cell when `now` is the real
   * clock; none (libuv's millisecond timers alone) when a `now` is injected (tests).
   */
  preciseWait?: ((ms: number) => void) | null;
}

/**
 * Checks a reconfigure patch against the running options `o` and turns it into the machine's
 * patch: addresses canonical and of the election's family, duplicates dropped, our own address
 * left out of the peers; the machine's own rules (state.ts checkReconfigure) checked too.
 * Changes nothing.
 * @throws Error saying why (an address of the other family, a list that must not be empty, peers
 *   in multicast mode, a bad announce setting, a number out of range, a priority change of the owner).
 */
export function checkReconfigurePatch(
  patch: EngineReconfigure,
  o: EngineOptions,
): { vips: string[] | undefined; peers: string[] | undefined; members: string[] | null | undefined; machinePatch: MachineReconfigure } {
  const fam = (list: unknown, what: string, allowEmpty = true): string[] => {
    if (!Array.isArray(list)) throw new Error(`${what} must be a list of addresses`);
    const out: string[] = [];
    for (const a of list as unknown[]) {
      if (typeof a !== 'string' || addressFamily(a) === null) throw new Error(`${what}: ${JSON.stringify(a)} is not an IP address`);
      if (addressFamily(a) !== o.family) throw new Error(`${what}: ${a} is IPv${addressFamily(a)}, but this election is IPv${o.family}`);
      const c = canonicalAddress(a);
      if (!out.includes(c)) out.push(c);
    }
    if (!allowEmpty && out.length === 0) throw new Error(`${what} must not be empty`);
    return out;
  };
  const vips = patch.vips !== undefined ? fam(patch.vips, 'vips', false) : undefined;
  const peers = patch.peers !== undefined ? fam(patch.peers, 'peers').filter((p) => p !== o.primaryAddress) : undefined;
  if (peers !== undefined && !o.unicast && peers.length > 0) throw new Error('peers: this election is multicast (peers are for unicast mode)');
  const members = patch.members === undefined ? undefined : patch.members === null ? null : fam(patch.members, 'members');
  if (patch.standby !== undefined && typeof patch.standby !== 'boolean') throw new Error(`standby must be a boolean, got ${String(patch.standby)}`);
  const a = patch.announce;
  if (a !== undefined) {
    if (!Number.isInteger(a.count) || a.count < 0) throw new Error(`announce.count must be an integer >= 0, got ${a.count}`);
    if (!(Number.isFinite(a.spacingMs) && a.spacingMs >= 0)) throw new Error(`announce.spacingMs must be >= 0, got ${a.spacingMs}`);
  }
  const machinePatch = {
    ...(vips !== undefined ? { vips } : {}),
    ...(patch.priority !== undefined ? { priority: patch.priority } : {}),
    ...(patch.advertisementIntervalCs !== undefined ? { advertisementIntervalCs: patch.advertisementIntervalCs } : {}),
    ...(patch.preempt !== undefined ? { preempt: patch.preempt } : {}),
    ...(patch.preemptDelayMs !== undefined ? { preemptDelayMs: patch.preemptDelayMs } : {}),
    ...(a !== undefined ? { announce: { repeatAfterMs: a.repeatAfterMs, refreshMs: a.refreshMs } } : {}),
    ...(patch.vipLifetimeMs !== undefined && !o.owner ? { vipLifetimeMs: patch.vipLifetimeMs } : {}),
  };
  try {
    checkReconfigure(machinePatch, o.owner);
  } catch (err) {
    throw new Error((err as Error).message, { cause: err });
  }
  return { vips, peers, members, machinePatch };
}

/**
 * Writes a checked patch into the running options `o` (the engine's own copy): the VIPs and peers
 * as {@link checkReconfigurePatch} gave them, the rest as given; the owner keeps its lifetime.
 */
export function applyReconfigure(o: EngineOptions, patch: EngineReconfigure, checked: { vips: string[] | undefined; peers: string[] | undefined }): void {
  const a = patch.announce;
  if (checked.vips !== undefined) o.vips = checked.vips;
  if (checked.peers !== undefined) o.peers = checked.peers;
  if (patch.priority !== undefined) o.priority = patch.priority;
  if (patch.advertisementIntervalCs !== undefined) o.advertisementIntervalCs = patch.advertisementIntervalCs;
  if (patch.preempt !== undefined) o.preempt = patch.preempt;
  if (patch.preemptDelayMs !== undefined) o.preemptDelayMs = patch.preemptDelayMs;
  if (a !== undefined) o.announce = { count: a.count, spacingMs: a.spacingMs, repeatAfterMs: a.repeatAfterMs, refreshMs: a.refreshMs };
  if (patch.vipLifetimeMs !== undefined && !o.owner) o.vipLifetimeMs = patch.vipLifetimeMs;
}

/** Counters at zero, for a new engine. */
export function emptyCounters(): EngineCounters {
  return { advertsSent: 0, advertsReceived: 0, sendErrors: 0, dropped: {}, transitions: 0, announcementsSent: 0, foreign: 0 };
}

/** What the engine keeps besides the machine, for {@link engineStatus}. */
export interface EngineRecords {
  opts: EngineOptions;
  counters: EngineCounters;
  /** acceptFrom members now, or null for any source. */
  members: ReadonlySet<string> | null;
  vipsHeld: boolean;
  /** IPv4 headers the socket could not parse (edge malformedIpHeader). */
  malformed: number;
  timing: EngineTiming;
  /** When the last valid advert of another router was handled (monotonic ms), null before any. */
  lastHeardAt: number | null;
  /** Monotonic ms now. */
  now: number;
}

/**
 * The engine's /status snapshot from the machine's snapshot `s` and the engine's records. The
 * pacer's adverts and send errors count as this router's (they are its adverts).
 */
export function engineStatus(s: MachineSnapshot, r: EngineRecords): EngineStatus {
  const dropped = { ...r.counters.dropped };
  if (r.malformed > 0) dropped.malformedIpHeader = r.malformed;
  const pacer = r.timing.pacer;
  const now = r.now;
  const om = s.otherMasters;
  return {
    state: s.state,
    vrid: r.opts.vrid,
    priority: s.priority,
    effectivePriority: s.effectivePriority,
    masterAddress: s.masterAddress,
    masterPriority: s.masterPriority,
    since: new Date(performance.timeOrigin + s.since).toISOString(),
    masterAdverIntervalMs: s.masterAdverIntervalCs * 10,
    masterDownIntervalMs: s.masterDownIntervalMs,
    skewTimeMs: s.skewTimeMs,
    vipsHeld: r.vipsHeld,
    counters: {
      ...r.counters,
      advertsSent: r.counters.advertsSent + (pacer?.sent ?? 0),
      sendErrors: r.counters.sendErrors + (pacer?.sendErrors ?? 0),
      dropped,
    },
    vips: [...r.opts.vips],
    advertisementIntervalMs: r.opts.advertisementIntervalCs * 10,
    peers: [...r.opts.peers],
    members: r.members ? [...r.members] : null,
    standby: s.standby,
    timing: r.timing,
    otherMasters: {
      heard: om.sources.filter((h) => now - h.at <= OTHER_MASTER_WINDOW_MS).length,
      windowMs: OTHER_MASTER_WINDOW_MS,
      adverts: om.adverts,
      last:
        om.last === null
          ? null
          : { source: om.last.source, priority: om.last.priority, outcome: om.last.outcome, ageMs: Math.max(0, Math.round(now - om.last.at)) },
    },
    lastAdvertAgeMs: r.lastHeardAt === null ? null : Math.max(0, Math.round(now - r.lastHeardAt)),
  };
}

/** The acceptFrom filter's set: canonical text, or null for any source. */
export function memberSet(members: readonly string[] | null | undefined): ReadonlySet<string> | null {
  return members ? new Set(members.map(canonicalAddress)) : null;
}
