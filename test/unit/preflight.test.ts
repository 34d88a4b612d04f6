/**
 * resolveInterface (src/agent/preflight.ts), pure over the interfaces rtnetlink listed: when a
 * VIP is the node's own address (a config error, exit 2) and when it is a leftover beside the
 * node's own address (removed by the election's start-up cleanup).
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/index.js';
import { resolveInterface } from '../../src/agent/preflight.js';
import type { InterfaceAddress, InterfaceInfo } from '../../src/vip/netlink.js';

const addr = (address: string, prefixLen: number, more: Partial<InterfaceAddress> = {}): InterfaceAddress => ({
  address,
  prefixLen,
  family: address.includes(':') ? 6 : 4,
  scope: address.startsWith('fe80:') ? 253 : 0,
  secondary: false,
  tentative: false,
  dadfailed: false,
  ...more,
});
const eth0 = (...addresses: InterfaceAddress[]): InterfaceInfo => ({ ifname: 'eth0', ifindex: 2, mac: '02:00:00:00:00:11', running: true, addresses });
const config = (vip: string) => parseConfig(`vrrp: { vrid: 51, priority: 100 }\nvips: [${vip}]\n`);

describe('resolveInterface: a VIP that is the node address', () => {
  it("refuses a VIP that is the interface's only global IPv4 address (BALLAST_E_VIP_IS_NODE_ADDRESS, vips[0])", () => {
    expect(() => resolveInterface(config('10.0.0.11'), [eth0(addr('10.0.0.11', 24))])).toThrow(
      expect.objectContaining({ code: 'BALLAST_E_VIP_IS_NODE_ADDRESS', message: expect.stringMatching(/^vips\[0\]: 10\.0\.0\.11 is this node's own address \(eth0 has 10\.0\.0\.11\/24\)/) }),
    );
  });
  it("refuses a VIP that is the interface's only global IPv6 address", () => {
    expect(() => resolveInterface(config('fd00::11'), [eth0(addr('fe80::11', 64), addr('fd00::11', 64))])).toThrow(expect.objectContaining({ code: 'BALLAST_E_VIP_IS_NODE_ADDRESS' }));
  });
  it('takes a VIP/24 left as a secondary beside the node address for a leftover, and sends from the node address', () => {
    const r = resolveInterface(config('10.0.0.100'), [eth0(addr('10.0.0.11', 24), addr('10.0.0.100', 24, { secondary: true }))]);
    expect(r.primary).toBe('10.0.0.11');
  });
  it('takes an IPv6 VIP/64 beside the node address (no secondary flag in IPv6) for a leftover, and sends from the link-local', () => {
    const r = resolveInterface(config('fd00::100'), [eth0(addr('fe80::11', 64), addr('fd00::11', 64), addr('fd00::100', 64))]);
    expect(r.primary).toBe('fe80::11');
  });
});
