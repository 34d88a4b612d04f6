/**
 * Who is in the VRRP group (src/agent/membership.ts): the unicast send list and the acceptFrom
 * members, from the config, this node's own addresses and what discovery found.
 */
import { describe, expect, it } from 'vitest';
import { validateConfig } from '../../src/config/index.js';
import { membershipOf, sameMembership } from '../../src/agent/membership.js';

const config = (vrrp: Record<string, unknown>, backends: string[] = ['10.0.0.11:6443', '10.0.0.12:6443', '10.0.0.13:6443'], vips = ['10.0.0.100']) =>
  validateConfig({ vrrp: { vrid: 51, ...vrrp }, vips, apiserver: { backends, health: { insecureSkipVerify: true } } });
const own = ['10.0.0.12', 'fe80::12'];

describe('membershipOf', () => {
  it('multicast, acceptFrom members (default): the seed backends’ hosts, own address excluded; no peers', () => {
    expect(membershipOf(config({}), { own, discovered: null })).toStrictEqual({ peers: [], members: ['10.0.0.11', '10.0.0.13'], anyBecause: null });
  });

  it('discovery replaces the seed; listed peers stay members', () => {
    expect(membershipOf(config({}), { own, discovered: ['10.0.0.21', '10.0.0.12', '10.0.0.21'] })).toStrictEqual({ peers: [], members: ['10.0.0.21'], anyBecause: null });
  });

  it('acceptFrom any: members null, no reason to log', () => {
    expect(membershipOf(config({ acceptFrom: 'any' }), { own, discovered: null })).toStrictEqual({ peers: [], members: null, anyBecause: null });
  });

  it('this node is the only one known (node 1 alone: its own apiserver is the seed, or discovery lists only it): nobody else may speak — not any source', () => {
    expect(membershipOf(config({}, ['10.0.0.12:6443']), { own, discovered: null })).toStrictEqual({ peers: [], members: [], anyBecause: null });
    expect(membershipOf(config({}), { own, discovered: ['10.0.0.12'] })).toStrictEqual({ peers: [], members: [], anyBecause: null });
  });

  it('no backends and no peers: any source, and says why', () => {
    expect(membershipOf(config({}, []), { own, discovered: null })).toStrictEqual({ peers: [], members: null, anyBecause: 'noneKnown' });
  });

  it('IPv6 multicast: any source (adverts come from link-local addresses), and says why', () => {
    const c = config({}, ['[fd00::11]:6443'], ['fd00::100']);
    expect(membershipOf(c, { own, discovered: null })).toStrictEqual({ peers: [], members: null, anyBecause: 'ipv6Multicast' });
  });

  it('unicast with listed peers: peers as listed (own removed), members the backends and the peers', () => {
    const c = config({ peers: ['10.0.0.12', '10.0.0.31'] });
    expect(membershipOf(c, { own, discovered: null })).toStrictEqual({ peers: ['10.0.0.31'], members: ['10.0.0.11', '10.0.0.13', '10.0.0.31'], anyBecause: null });
  });

  it('peers: discovered: the seed hosts until discovery answers, then the discovered nodes, plus the listed ones; own excluded', () => {
    const c = config({ peers: ['discovered', '10.0.0.40'] });
    expect(membershipOf(c, { own, discovered: null }).peers).toStrictEqual(['10.0.0.40', '10.0.0.11', '10.0.0.13']);
    expect(membershipOf(c, { own, discovered: ['10.0.0.12', '10.0.0.14', '10.0.0.15'] })).toStrictEqual({
      peers: ['10.0.0.40', '10.0.0.14', '10.0.0.15'],
      members: ['10.0.0.14', '10.0.0.15', '10.0.0.40'],
      anyBecause: null,
    });
  });

  it('discovered nodes of the other family are not members', () => {
    expect(membershipOf(config({}), { own, discovered: ['fd00::12', '10.0.0.14'] }).members).toStrictEqual(['10.0.0.14']);
  });

  it('sameMembership ignores order, not content', () => {
    const a = { peers: ['10.0.0.1', '10.0.0.2'], members: null, anyBecause: null };
    expect(sameMembership(a, { ...a, peers: ['10.0.0.2', '10.0.0.1'] })).toBe(true);
    expect(sameMembership(a, { ...a, members: [] })).toBe(false);
    expect(sameMembership(a, { ...a, peers: ['10.0.0.1'] })).toBe(false);
  });
});
