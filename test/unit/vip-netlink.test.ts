/**
 * VIP removal against a fake rtnetlink that matches like the kernel: RTM_DELADDR names the
 * address AND its prefix length (IPv4 inet_rtm_deladdr compares ifa_prefixlen when IFA_ADDRESS is
 * given; IPv6 inet6_addr_del compares prefix_len), and answers EADDRNOTAVAIL otherwise.
 */
import { describe, expect, it } from 'vitest';
import { delVip, removeVips, vipAddresses, type Rtnl } from '../../src/vip/netlink.js';
import { addressToBytes } from '../../src/net/address.js';

interface Entry {
  index: number;
  address: string;
  prefixlen: number;
}

function fakeKernel(entries: Entry[]): Rtnl & { entries: Entry[]; deletes: string[] } {
  const k = {
    entries,
    deletes: [] as string[],
    getLinks: async () => [],
    getAddresses: async () =>
      k.entries.map((e) => {
        const bytes = Buffer.from(addressToBytes(e.address));
        return {
          kind: 'address',
          data: { family: bytes.length === 4 ? 2 : 10, prefixlen: e.prefixlen, index: e.index },
          attrs: bytes.length === 4 ? { local: bytes, address: bytes } : { address: bytes },
        };
      }),
    newAddress: async () => [],
    delAddress: async (data: { prefixlen: number; index: number }, attrs: { local: Uint8Array }) => {
      const same = (e: Entry) => Buffer.from(addressToBytes(e.address)).equals(Buffer.from(attrs.local));
      const i = k.entries.findIndex((e) => e.index === data.index && e.prefixlen === data.prefixlen && same(e));
      if (i < 0) throw new Error('Request rejected: EADDRNOTAVAIL');
      k.deletes.push(`${k.entries[i]!.address}/${data.prefixlen}`);
      k.entries.splice(i, 1);
      return [];
    },
  };
  return k as unknown as Rtnl & { entries: Entry[]; deletes: string[] };
}

/** The node's own /24 and the VIP twice on ifindex 3: as /24 (by hand) and as /32 (ours). */
const twice = (): Entry[] => [
  { index: 3, address: '10.0.0.12', prefixlen: 24 },
  { index: 3, address: '10.0.0.100', prefixlen: 24 },
  { index: 3, address: '10.0.0.100', prefixlen: 32 },
];
const BOTH = [
  { address: '10.0.0.100', prefixLen: 24 },
  { address: '10.0.0.100', prefixLen: 32 },
];

describe('VIP removal whatever the prefix length', () => {
  it('delVip names /32 by default: a /24 instance is not there for the kernel (false, nothing removed)', async () => {
    const k = fakeKernel([{ index: 3, address: '10.0.0.100', prefixlen: 24 }]);
    expect(await delVip(k, 3, '10.0.0.100')).toBe(false);
    expect(k.entries).toHaveLength(1);
    expect(await delVip(k, 3, '10.0.0.100', 24)).toBe(true);
    expect(k.entries).toHaveLength(0);
  });

  it('vipAddresses lists every instance of our VIPs on that interface, with its prefix', async () => {
    const k = fakeKernel([...twice(), { index: 4, address: '10.0.0.101', prefixlen: 32 }]);
    expect(await vipAddresses(k, 3, ['10.0.0.100', '10.0.0.101'])).toStrictEqual(BOTH);
  });

  it('removeVips removes each instance with its own prefix and returns exactly what went', async () => {
    const k = fakeKernel(twice());
    expect(await removeVips(k, 3, ['10.0.0.100', '10.0.0.101'])).toStrictEqual(BOTH);
    expect(k.deletes).toStrictEqual(['10.0.0.100/24', '10.0.0.100/32']);
    expect(k.entries).toStrictEqual([{ index: 3, address: '10.0.0.12', prefixlen: 24 }]);
    expect(await removeVips(k, 3, ['10.0.0.100'])).toStrictEqual([]);
  });

  it('IPv6: a VIP/64 is found and removed as /64', async () => {
    const k = fakeKernel([{ index: 3, address: 'fd00::100', prefixlen: 64 }]);
    expect(await removeVips(k, 3, ['fd00::100'])).toStrictEqual([{ address: 'fd00::100', prefixLen: 64 }]);
    expect(k.entries).toStrictEqual([]);
  });
});
