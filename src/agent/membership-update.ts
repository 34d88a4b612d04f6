/**
 * The election's group membership as discovery and reloads change its inputs: one queue of
 * changes per running election, each recomputed by vrrp/membership.ts and given to the engine
 * when it differs. Shared by the election phase (a reload's new peers) and the discovery phase
 * (the members it found), which know each other only through the handle the agent gives them.
 */
import type { Config } from '../config/index.js';
import type { Logger } from '../log/log.js';
import { ANY_BECAUSE, membershipOf, sameMembership, type Membership } from '../vrrp/membership.js';
import type { VrrpHost } from '../vrrp/host.js';

/** A running election's membership, as {@link updateMembership} keeps it. */
export interface MembershipHolder {
  host: Pick<VrrpHost, 'reconfigure'>;
  /** Who is in the group now: the unicast peers and the acceptFrom members (see membership.ts). */
  membership: Membership;
  /** The inputs of {@link membership}; {@link updateMembership} changes them. */
  membershipInputs: { config: Config; own: readonly string[]; discovered: readonly string[] | null; confirmed?: readonly string[] };
  /** The last membership change in flight (changes apply one after another). */
  membershipQueue: Promise<void>;
}

/**
 * Recomputes the membership when discovery found a new member set (`discovered`: node
 * addresses; `confirmed`: those of them the EndpointSlices listed, accumulated over the run) or
 * a reload brought a new `config`, and gives the running engine the new peers and
 * members (host.reconfigure) when they changed. This node's own addresses are never peers.
 * Calls apply in order. Resolves with the membership in force afterwards.
 * @throws Error from the engine when it refuses the change (then the old membership stays).
 */
export function updateMembership(
  election: MembershipHolder,
  change: { discovered?: readonly string[] | null; confirmed?: readonly string[]; config?: Config },
  log?: Logger,
): Promise<Membership> {
  const run = election.membershipQueue.then(async () => {
    // hosts the EndpointSlices listed once stay confirmed for the run (membership.ts: retired when gone)
    const confirmed = [...new Set([...(election.membershipInputs.confirmed ?? []), ...(change.confirmed ?? [])])];
    const inputs = {
      ...election.membershipInputs,
      confirmed,
      ...(change.config ? { config: change.config } : {}),
      ...(change.discovered !== undefined ? { discovered: change.discovered } : {}),
    };
    const next = membershipOf(inputs.config, inputs);
    if (!sameMembership(next, election.membership)) {
      await election.host.reconfigure({ ...(inputs.config.vrrp!.unicast ? { peers: next.peers } : {}), members: next.members, standby: next.standby });
      if (next.anyBecause)
        log?.warn({ peers: next.peers, members: 'any', standby: next.standby }, `election membership changed: ${ANY_BECAUSE[next.anyBecause]}`);
      else log?.info({ peers: next.peers, members: next.members, standby: next.standby }, 'election membership changed');
    }
    election.membershipInputs = inputs;
    election.membership = next;
    return next;
  });
  election.membershipQueue = run.then(
    () => undefined,
    () => undefined,
  );
  return run;
}
