/**
 * Who is in the VRRP group, from the configuration and what discovery found: the unicast send
 * list (`vrrp.peers`, with `discovered`) and the acceptFrom members (whose adverts are heard).
 * Pure: the agent's election phase (agent/phases/election.ts) starts the engine with it and calls
 * {@link updateMembership} when discovery or a reload changes the inputs.
 *
 *   nodes   = the discovered apiservers' node addresses once discovery answered, plus the seed
 *             hosts it has not listed yet in this run (not joined yet: they must be heard to
 *             join without a second master); before that the seed (the hosts of
 *             apiserver.backends); of the VIPs' family
 *   peers   = listed vrrp.peers ∪ (discoveredPeers ? nodes : ∅), this node's own addresses removed
 *   members = acceptFrom any → null (any source)
 *             IPv6 multicast → null: the adverts come from link-local addresses (RFC 9568
 *               §5.1.2.1), which neither the backends nor discovery know
 *             nodes ∪ listed peers (own addresses left out: its own adverts are dropped anyway),
 *               possibly empty (this node is the only one known: nobody else may speak), or
 *               null when nothing at all is known (no seed, no peers, nothing discovered)
 *   standby = members non-null (membership in force), nodes non-empty (the seed or discovery
 *             say who the members are: listed peers alone name the others, not this node) and
 *             none of this node's own addresses is among nodes ∪ listed peers: the others drop
 *             our adverts (and in unicast mode with `discovered` do not even send to us), so
 *             the engine stays Backup and listens
 *             instead of becoming a second master (state.ts MachineEvent `standby`)
 */
import type { Config } from '../config/index.js';
import { addressFamily, canonicalAddress } from '../net/address.js';

/** The inputs beyond the config. */
export interface MembershipInputs {
  /** This node's own addresses (any family, canonical or not): never a peer. */
  own: readonly string[];
  /** The discovered members' node addresses, or null before discovery answered (the seed counts then). */
  discovered: readonly string[] | null;
  /**
   * The hosts the EndpointSlices have listed at least once in this run. A seed host not among
   * them has not joined yet (its apiserver has not registered): it stays a node — sent to and
   * heard — so that it can join without becoming a second master; once listed and then gone, it
   * left (retired) and is dropped like any other. Absent: not tracked — once discovery answered
   * the seed no longer counts.
   */
  confirmed?: readonly string[];
}

/** What the engine is given (EngineOptions / EngineReconfigure `peers` and `members`). */
export interface Membership {
  /** Unicast send list (canonical, sorted as listed then as found); [] in multicast mode. */
  peers: string[];
  /** acceptFrom members (canonical), or null for any source. */
  members: string[] | null;
  /** Why `members` is null although acceptFrom is `members`; null otherwise. For the start-up log line. */
  anyBecause: 'ipv6Multicast' | 'noneKnown' | null;
  /**
   * Membership is in force and this node is not itself a member (none of its own addresses is
   * a discovered / seed node or a listed peer): it must not become Active (EngineOptions `standby`).
   */
  standby: boolean;
}

/**
 * The membership for `config` (which has a vrrp section).
 * @throws TypeError when an address in `inputs` is not an IP address.
 */
export function membershipOf(config: Config, inputs: MembershipInputs): Membership {
  const v = config.vrrp!;
  const own = new Set(inputs.own.map(canonicalAddress));
  const seed = config.apiserver.backends.filter((b) => b.family === config.family).map((b) => b.host);
  const confirmed = new Set((inputs.confirmed ?? []).map(canonicalAddress));
  const pending = inputs.discovered === null || inputs.confirmed === undefined ? [] : seed.filter((h) => !confirmed.has(canonicalAddress(h)));
  const nodes = uniq([...(inputs.discovered ?? seed), ...pending].filter((a) => addressFamily(a) === config.family).map(canonicalAddress));
  const listed = v.peers.map(canonicalAddress);
  const peers = v.unicast ? uniq([...listed, ...(v.discoveredPeers ? nodes : [])]).filter((a) => !own.has(a)) : [];
  if (v.acceptFrom === 'any') return { peers, members: null, anyBecause: null, standby: false };
  if (config.family === 6 && !v.unicast) return { peers, members: null, anyBecause: 'ipv6Multicast', standby: false };
  // this node counts as known: a group of one (node 1 alone, its own apiserver the only seed)
  // hears nobody, which is right; only a group nobody is known of at all hears any source
  const known = uniq([...nodes, ...listed, ...peers]);
  if (known.length === 0) return { peers, members: null, anyBecause: 'noneKnown', standby: false };
  // only the nodes (seed, discovery) can leave this node out: listed peers name the others, and
  // a node that only lists peers is a member by its own configuration (the others list it)
  const self = nodes.length === 0 || [...nodes, ...listed].some((a) => own.has(a));
  return { peers, members: known.filter((a) => !own.has(a)), anyBecause: null, standby: !self };
}

/** The operator's line for {@link Membership.anyBecause}. */
export const ANY_BECAUSE: Record<'ipv6Multicast' | 'noneKnown', string> = {
  ipv6Multicast:
    'vrrp.acceptFrom is members, but IPv6 multicast adverts come from link-local addresses, which the backends and discovery do not know: adverts from any source are heard (use vrrp.auth, or unicast link-local peers, to restrict who may speak)',
  noneKnown:
    "vrrp.acceptFrom is members, but no member is known (no apiserver.backends of the VIPs' family, no vrrp.peers, nothing discovered): adverts from any source are heard; any host on this segment can take the VIP (set vrrp.auth, or list the nodes)",
};

/** Same membership (order aside, standby included)? */
export function sameMembership(a: Membership, b: Membership): boolean {
  const same = (x: readonly string[] | null, y: readonly string[] | null): boolean =>
    x === null || y === null ? x === y : x.length === y.length && [...x].sort().join() === [...y].sort().join();
  return same(a.peers, b.peers) && same(a.members, b.members) && a.standby === b.standby;
}

function uniq(list: readonly string[]): string[] {
  return [...new Set(list)];
}
