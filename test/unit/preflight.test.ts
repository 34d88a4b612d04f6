/**
 * resolveInterface (src/agent/phases/preflight.ts), pure over the interfaces rtnetlink listed: when a
 * VIP is the node's own address (a config error, exit 2) and when it is a leftover beside the
 * node's own address (removed by the election's start-up cleanup).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/index.js';
import { acquireInstanceLock, ElectionLocks } from '../../src/host/locks.js';
import { checkBgpConfigFile, resolveInterface } from '../../src/agent/phases/preflight.js';
import { bgpInterface } from '../../src/host/interfaces.js';
import { renderBirdConfig, SNIPPET_HEADER } from '../../src/bgp/bird.js';
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
      expect.objectContaining({
        code: 'BALLAST_E_VIP_IS_NODE_ADDRESS',
        message: expect.stringMatching(/^vips\[0\]: 10\.0\.0\.11 is this node's own address \(eth0 has 10\.0\.0\.11\/24\)/),
      }),
    );
  });
  it("refuses a VIP that is the interface's only global IPv6 address", () => {
    expect(() => resolveInterface(config('fd00::11'), [eth0(addr('fe80::11', 64), addr('fd00::11', 64))])).toThrow(
      expect.objectContaining({ code: 'BALLAST_E_VIP_IS_NODE_ADDRESS' }),
    );
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

describe('ElectionLocks: a hand-over swaps a lock (commit releases the old one, abort the new one)', () => {
  /** Whether the instance lock of `ifname` / `vrid` can be taken now (it is released at once). */
  const free = async (ifname: string, vrid: number): Promise<boolean> => {
    try {
      (await acquireInstanceLock(ifname, 4, vrid)).close();
      return true;
    } catch (err) {
      expect((err as { code?: string }).code).toBe('BALLAST_E_ALREADY_RUNNING');
      return false;
    }
  };
  const ifname = `unit${process.pid}`;

  it('commit: the new lock held, the old one released; the same key again is a no-op', async () => {
    const l = new ElectionLocks();
    (await l.instance(ifname, 4, 1)).commit();
    const swap = await l.instance(ifname, 4, 2);
    expect([await free(ifname, 1), await free(ifname, 2)]).toStrictEqual([false, false]);
    swap.commit();
    swap.abort(); // settled: does nothing
    expect([await free(ifname, 1), await free(ifname, 2)]).toStrictEqual([true, false]);
    (await l.instance(ifname, 4, 2)).abort(); // the held one: nothing taken, nothing released
    expect(await free(ifname, 2)).toBe(false);
    l.close();
    expect(await free(ifname, 2)).toBe(true);
  });

  it('vips(): the VIPs whose locks are held now (what a stop removes as leftovers), after a reload gave some up', async () => {
    const l = new ElectionLocks();
    const a = `198.51.100.${(process.pid % 200) + 1}`;
    const b = `2001:db8::${(process.pid % 65000).toString(16)}`;
    await l.addVips([a, b]);
    expect(l.vips()).toStrictEqual([a, b]);
    l.releaseVips([a]);
    expect(l.vips()).toStrictEqual([b]);
    l.close();
    expect(l.vips()).toStrictEqual([]);
  });

  it('abort: the new lock released, the old one still held and the one close() releases', async () => {
    const l = new ElectionLocks();
    (await l.instance(ifname, 4, 3)).commit();
    const swap = await l.instance(ifname, 4, 4);
    swap.abort();
    expect([await free(ifname, 3), await free(ifname, 4)]).toStrictEqual([false, true]);
    // the held one is the old one again: asking for it takes nothing
    (await l.instance(ifname, 4, 3)).commit();
    expect(await free(ifname, 3)).toBe(false);
    l.close();
    expect(await free(ifname, 3)).toBe(true);
  });
});

describe('mode: bgp host checks (before anything changes)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ballast-preflight-bgp-'));
  const bgpConfig = (iface: string, configFile: string) =>
    parseConfig(
      `mode: bgp\nvips: [10.0.0.100]\napiserver: { backends: ["10.0.1.2:6443"], health: { insecureSkipVerify: true } }\nbgp: { interface: ${iface}, configFile: ${configFile}, localAsn: 64512, peers: [{ address: 10.0.1.1, asn: 64500 }] }\n`,
    );
  const lo: InterfaceInfo = { ifname: 'lo', ifindex: 1, mac: '00:00:00:00:00:00', running: true, addresses: [addr('127.0.0.1', 8)] };
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('a missing bgp.interface is BALLAST_E_INTERFACE_NOT_FOUND, exit 2, the message naming the field', () => {
    const c = bgpConfig('dummy9', join(dir, 'b4.conf'));
    expect(() => bgpInterface(c, [lo, eth0()])).toThrow(
      expect.objectContaining({
        code: 'BALLAST_E_INTERFACE_NOT_FOUND',
        exitCode: 2,
        message: 'bgp.interface: there is no interface dummy9 (ballast binds the VIPs on it; lo, or a dummy interface you created)',
      }),
    );
    expect(bgpInterface(bgpConfig('lo', join(dir, 'b4.conf')), [lo, eth0()]).ifindex).toBe(1);
  });

  it("bgp.configFile: absent, empty or ballast's own snippet may be written; another file (bird.conf) is BALLAST_E_BGP_CONFIG_FILE, exit 2, and stays as it was", () => {
    const path = join(dir, 'ballast4.conf');
    expect(() => checkBgpConfigFile(path)).not.toThrow();
    writeFileSync(path, '\n');
    expect(() => checkBgpConfigFile(path)).not.toThrow();
    const c = bgpConfig('lo', path);
    writeFileSync(path, renderBirdConfig({ bgp: c.bgp!, family: 4, vips: c.vips, announced: true }, path));
    expect(() => checkBgpConfigFile(path)).not.toThrow();
    const birdConf = join(dir, 'bird.conf');
    const operators = 'router id 10.0.1.2;\nprotocol device { }\ninclude "/etc/bird/ballast4.conf";\n';
    writeFileSync(birdConf, operators);
    expect(() => checkBgpConfigFile(birdConf)).toThrow(
      expect.objectContaining({
        code: 'BALLAST_E_BGP_CONFIG_FILE',
        exitCode: 2,
        message: expect.stringMatching(/^bgp\.configFile: .*bird\.conf exists and is not a snippet ballast wrote .*it may be BIRD's own configuration/),
      }),
    );
    // the header further down (a copy pasted into bird.conf) does not make it ballast's
    writeFileSync(birdConf, `${operators}${SNIPPET_HEADER}\n`);
    expect(() => checkBgpConfigFile(birdConf)).toThrow(expect.objectContaining({ code: 'BALLAST_E_BGP_CONFIG_FILE' }));
    expect(() => checkBgpConfigFile(dir)).toThrow(
      expect.objectContaining({ code: 'BALLAST_E_BGP_CONFIG_FILE', message: expect.stringContaining('is not a regular file') }),
    );
    expect(readFileSync(birdConf, 'utf8')).toBe(`${operators}${SNIPPET_HEADER}\n`);
  });
});
