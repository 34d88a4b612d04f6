/**
 * Who is in the VRRP group (src/vrrp/membership.ts): the unicast send list and the acceptFrom
 * members, from the config, this node's own addresses and what discovery found.
 */
import { describe, expect, it } from 'vitest';
import { validateConfig } from '../../src/config/index.js';
import { membershipOf, sameMembership } from '../../src/vrrp/membership.js';
import { isStranger, knownNodes } from '../../src/agent/phases/election.js';

const config = (vrrp: Record<string, unknown>, backends: string[] = ['10.0.0.11:6443', '10.0.0.12:6443', '10.0.0.13:6443'], vips = ['10.0.0.100']) =>
  validateConfig({ vrrp: { vrid: 51, ...vrrp }, vips, apiserver: { backends, health: { insecureSkipVerify: true } } });
const own = ['10.0.0.12', 'fe80::12'];

describe('membershipOf', () => {
  it('multicast, acceptFrom members (default): the seed backends’ hosts, own address excluded; no peers', () => {
    expect(membershipOf(config({}), { own, discovered: null })).toStrictEqual({
      peers: [],
      members: ['10.0.0.11', '10.0.0.13'],
      anyBecause: null,
      standby: false,
    });
  });

  it('discovery replaces the seed; listed peers stay members', () => {
    expect(membershipOf(config({}), { own, discovered: ['10.0.0.21', '10.0.0.12', '10.0.0.21'] })).toStrictEqual({
      peers: [],
      members: ['10.0.0.21'],
      anyBecause: null,
      standby: false,
    });
  });

  it('a seed host the EndpointSlices have not listed yet stays a node (it is joining: heard and, unicast, sent to); once listed and then gone it has left', () => {
    // discovery answered with n1 (.11) and n3 (.13) only; n2 is this node, so take n1's view: own = .11
    const n1 = ['10.0.0.11'];
    const uni = config({ peers: ['discovered'] });
    expect(membershipOf(uni, { own: n1, discovered: ['10.0.0.11'], confirmed: ['10.0.0.11'] })).toMatchObject({
      peers: ['10.0.0.12', '10.0.0.13'],
      members: ['10.0.0.12', '10.0.0.13'],
    });
    // .12 was listed once and is gone now: it left; .13 never listed: still joining
    expect(membershipOf(uni, { own: n1, discovered: ['10.0.0.11'], confirmed: ['10.0.0.11', '10.0.0.12'] })).toMatchObject({
      peers: ['10.0.0.13'],
      members: ['10.0.0.13'],
    });
    // before discovery answered: the seed, whatever was confirmed
    expect(membershipOf(uni, { own: n1, discovered: null, confirmed: ['10.0.0.12'] })).toMatchObject({ peers: ['10.0.0.12', '10.0.0.13'] });
  });

  it('listed peers and no seed (a hand-written unicast group, keepalived interop): a member by its own configuration, never standby', () => {
    const c = validateConfig({ vrrp: { vrid: 51, peers: ['10.0.0.11', '10.0.0.13'] }, vips: ['10.0.0.100'] });
    expect(membershipOf(c, { own, discovered: null })).toStrictEqual({
      peers: ['10.0.0.11', '10.0.0.13'],
      members: ['10.0.0.11', '10.0.0.13'],
      anyBecause: null,
      standby: false,
    });
  });

  it('acceptFrom any: members null, no reason to log', () => {
    expect(membershipOf(config({ acceptFrom: 'any' }), { own, discovered: null })).toStrictEqual({
      peers: [],
      members: null,
      anyBecause: null,
      standby: false,
    });
  });

  it('this node is the only one known (node 1 alone: its own apiserver is the seed, or discovery lists only it): nobody else may speak — not any source', () => {
    expect(membershipOf(config({}, ['10.0.0.12:6443']), { own, discovered: null })).toStrictEqual({ peers: [], members: [], anyBecause: null, standby: false });
    expect(membershipOf(config({}), { own, discovered: ['10.0.0.12'] })).toStrictEqual({ peers: [], members: [], anyBecause: null, standby: false });
  });

  it('no backends and no peers: any source, and says why', () => {
    expect(membershipOf(config({}, []), { own, discovered: null })).toStrictEqual({ peers: [], members: null, anyBecause: 'noneKnown', standby: false });
  });

  it('IPv6 multicast: any source (adverts come from link-local addresses), and says why', () => {
    const c = config({}, ['[fd00::11]:6443'], ['fd00::100']);
    expect(membershipOf(c, { own, discovered: null })).toStrictEqual({ peers: [], members: null, anyBecause: 'ipv6Multicast', standby: false });
  });

  it('unicast with listed peers: peers as listed (own removed), members the backends and the peers', () => {
    const c = config({ peers: ['10.0.0.12', '10.0.0.31'] });
    expect(membershipOf(c, { own, discovered: null })).toStrictEqual({
      peers: ['10.0.0.31'],
      members: ['10.0.0.11', '10.0.0.13', '10.0.0.31'],
      anyBecause: null,
      standby: false,
    });
  });

  it('peers: discovered: the seed hosts until discovery answers, then the discovered nodes, plus the listed ones; own excluded', () => {
    const c = config({ peers: ['discovered', '10.0.0.40'] });
    expect(membershipOf(c, { own, discovered: null }).peers).toStrictEqual(['10.0.0.40', '10.0.0.11', '10.0.0.13']);
    expect(membershipOf(c, { own, discovered: ['10.0.0.12', '10.0.0.14', '10.0.0.15'] })).toStrictEqual({
      peers: ['10.0.0.40', '10.0.0.14', '10.0.0.15'],
      members: ['10.0.0.14', '10.0.0.15', '10.0.0.40'],
      anyBecause: null,
      standby: false,
    });
  });

  it('discovered nodes of the other family are not members', () => {
    expect(membershipOf(config({}), { own, discovered: ['fd00::12', '10.0.0.14'] }).members).toStrictEqual(['10.0.0.14']);
  });

  it('sameMembership ignores order, not content', () => {
    const a = { peers: ['10.0.0.1', '10.0.0.2'], members: null, anyBecause: null, standby: false };
    expect(sameMembership(a, { ...a, peers: ['10.0.0.2', '10.0.0.1'] })).toBe(true);
    expect(sameMembership(a, { ...a, standby: true })).toBe(false);
    expect(sameMembership(a, { ...a, members: [] })).toBe(false);
    expect(sameMembership(a, { ...a, peers: ['10.0.0.1'] })).toBe(false);
  });

  describe('standby: membership in force and this node is in no member source', () => {
    const standby = (c: ReturnType<typeof config>, o: readonly string[], discovered: readonly string[] | null) =>
      membershipOf(c, { own: o, discovered }).standby;

    it('seed: a member when one of its addresses is a seed host (any spelling), standby when none is', () => {
      expect(standby(config({}), own, null)).toBe(false);
      expect(standby(config({}), ['10.0.0.99'], null)).toBe(true);
      const v6 = config({ peers: ['fe80::11', 'fe80::12'] }, ['[fd00::11]:6443'], ['fd00::100']);
      expect(standby(v6, ['fd00::99', 'fe80:0:0::12'], null)).toBe(false);
      expect(standby(v6, ['fd00::99', 'fe80::99'], null)).toBe(true);
      expect(standby(v6, ['fd00:0::11'], null)).toBe(false);
    });

    it('discovered: once discovery answered, the seed no longer counts', () => {
      expect(standby(config({}), own, ['10.0.0.11', '10.0.0.13'])).toBe(true);
      expect(standby(config({}), ['10.0.0.99'], ['10.0.0.11', '10.0.0.99'])).toBe(false);
      const c = config({ peers: ['discovered'] });
      expect(standby(c, ['10.0.0.14'], ['10.0.0.11', '10.0.0.13'])).toBe(true);
      expect(membershipOf(c, { own: ['10.0.0.14'], discovered: ['10.0.0.11', '10.0.0.13', '10.0.0.14'] })).toStrictEqual({
        peers: ['10.0.0.11', '10.0.0.13'],
        members: ['10.0.0.11', '10.0.0.13'],
        anyBecause: null,
        standby: false,
      });
    });

    it('listed: a node listed in vrrp.peers is a member from the start, whatever discovery says', () => {
      const c = config({ peers: ['10.0.0.11', '10.0.0.14', 'discovered'] });
      expect(standby(c, ['10.0.0.14'], null)).toBe(false);
      expect(standby(c, ['10.0.0.14'], ['10.0.0.11'])).toBe(false);
    });

    it('never standby when membership is not in force (acceptFrom any, IPv6 multicast, nobody known)', () => {
      expect(standby(config({ acceptFrom: 'any' }), ['10.0.0.99'], ['10.0.0.11'])).toBe(false);
      expect(standby(config({}, ['[fd00::11]:6443'], ['fd00::100']), ['fd00::99'], null)).toBe(false);
      expect(standby(config({}, []), ['10.0.0.99'], null)).toBe(false);
    });
  });
});

describe('knownNodes / isStranger: is a new master one of the nodes this one knows?', () => {
  it('seed or discovered nodes, listed peers, the membership; link-local and an empty set never warn', () => {
    const c = config({ acceptFrom: 'any' }, ['10.0.0.11:6443', '10.0.0.12:6443']);
    const m = { peers: [], members: null, anyBecause: null, standby: false };
    const seed = knownNodes({ config: c, discovered: null }, m);
    expect([...seed].sort()).toStrictEqual(['10.0.0.11', '10.0.0.12']);
    expect(isStranger('10.0.0.12', seed)).toBe(false);
    expect(isStranger('10.0.0.66', seed)).toBe(true);
    // once discovery answered, its nodes count (the seed no longer does), and the membership's too
    const found = knownNodes({ config: c, discovered: ['10.0.0.13'] }, { ...m, members: ['10.0.0.14'] });
    expect([...found].sort()).toStrictEqual(['10.0.0.13', '10.0.0.14']);
    expect(isStranger('10.0.0.11', found)).toBe(true);
    expect(isStranger('fe80::1', found)).toBe(false);
    expect(isStranger('10.0.0.66', new Set())).toBe(false);
  });
});
