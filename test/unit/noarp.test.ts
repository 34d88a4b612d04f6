/**
 * BGP mode's ARP sysctls (src/vip/noarp.ts) against a fake /proc/sys, and `ballast check`'s
 * `bgp-arp` (src/check/bgp.ts) with the installed unit's sandbox.
 */
import { describe, expect, it } from 'vitest';
import { bgpArpResult, writableUnder } from '../../src/check/bgp.js';
import type { Sandbox } from '../../src/check/unit.js';
import { validateConfig } from '../../src/config/index.js';
import { ARP_SYSCTLS, raiseArpSysctls, restoreArpSysctls, sysctlPath, type SysctlIo } from '../../src/vip/noarp.js';

const IGNORE = 'net.ipv4.conf.all.arp_ignore';
const ANNOUNCE = 'net.ipv4.conf.all.arp_announce';

/** A /proc/sys of `values`; writes to keys in `readOnly` throw EROFS as the kernel's would under a read-only bind mount. */
function fakeSysctl(values: Record<string, number>, readOnly: string[] = []): SysctlIo & { values: Record<string, number> } {
  return {
    values,
    read: (key) => values[key] ?? null,
    write(key, value) {
      if (readOnly.includes(key)) throw Object.assign(new Error(`EROFS: read-only file system, open '${sysctlPath(key)}'`), { code: 'EROFS' });
      values[key] = value;
    },
  };
}

describe('ARP sysctls of BGP mode', () => {
  it('are arp_ignore 1 and arp_announce 2 in conf/all (ip-sysctl.rst: the maximum of all and the interface counts)', () => {
    expect(ARP_SYSCTLS).toStrictEqual([
      { key: IGNORE, want: 1 },
      { key: ANNOUNCE, want: 2 },
    ]);
    expect(sysctlPath(IGNORE)).toBe('/proc/sys/net/ipv4/conf/all/arp_ignore');
  });

  it("raises Linux's defaults and restores them on stop", () => {
    const io = fakeSysctl({ [IGNORE]: 0, [ANNOUNCE]: 0 });
    const r = raiseArpSysctls(io);
    expect(r).toStrictEqual({
      changed: [
        { key: IGNORE, from: 0, to: 1 },
        { key: ANNOUNCE, from: 0, to: 2 },
      ],
      already: [],
      failed: [],
    });
    expect(io.values).toStrictEqual({ [IGNORE]: 1, [ANNOUNCE]: 2 });
    expect(restoreArpSysctls(r.changed, io)).toStrictEqual({ restored: [IGNORE, ANNOUNCE], left: [], failed: [] });
    expect(io.values).toStrictEqual({ [IGNORE]: 0, [ANNOUNCE]: 0 });
  });

  it('never lowers a value (kube-proxy IPVS strictARP sets 1 / 2; 2 is stricter) and leaves one changed by someone else since', () => {
    const io = fakeSysctl({ [IGNORE]: 2, [ANNOUNCE]: 1 });
    const r = raiseArpSysctls(io);
    expect(r.already).toStrictEqual([{ key: IGNORE, value: 2 }]);
    expect(r.changed).toStrictEqual([{ key: ANNOUNCE, from: 1, to: 2 }]);
    io.values[ANNOUNCE] = 0;
    expect(restoreArpSysctls(r.changed, io)).toStrictEqual({ restored: [], left: [ANNOUNCE], failed: [] });
    expect(io.values).toStrictEqual({ [IGNORE]: 2, [ANNOUNCE]: 0 });
  });

  it('reports a value it cannot write (a read-only /proc/sys) and does not throw', () => {
    const io = fakeSysctl({ [IGNORE]: 0, [ANNOUNCE]: 0 }, [IGNORE, ANNOUNCE]);
    const r = raiseArpSysctls(io);
    expect(r.changed).toStrictEqual([]);
    expect(r.failed.map((f) => [f.key, f.value, f.error.split(':')[0]])).toStrictEqual([
      [IGNORE, 0, 'EROFS'],
      [ANNOUNCE, 0, 'EROFS'],
    ]);
  });
});

describe('check: bgp-arp', () => {
  const config = (vip: string) =>
    validateConfig({
      mode: 'bgp',
      vips: [vip],
      apiserver: { backends: [vip.includes(':') ? '[fd00:1::2]:6443' : '10.0.1.2:6443'], health: { insecureSkipVerify: true } },
      bgp: { localAsn: 64512, peers: [{ address: vip.includes(':') ? 'fd00:1::1' : '10.0.1.1', asn: 64500 }] },
    });
  const sandbox = (s: Partial<Sandbox>): Sandbox => ({
    files: [],
    protectKernelTunables: false,
    readWritePaths: [],
    readOnlyPaths: [],
    inaccessiblePaths: [],
    hasCapability: () => true,
    restrictRealtime: false,
    limitRtprio: null,
    ...s,
  });
  // what the packaged unit says (src/manifest/systemd.ts)
  const packaged = sandbox({ readWritePaths: ['/sys/fs/bpf'], readOnlyPaths: ['/proc/sys', '/sys', '-/proc/acpi'] });
  const read =
    (v: Record<string, string>) =>
    (key: string): string | null =>
      v[key] ?? null;

  it('ok when the values already are 1 / 2', () => {
    const r = bgpArpResult(config('10.0.0.100'), read({ [IGNORE]: '1', [ANNOUNCE]: '2' }), packaged)!;
    expect([r.id, r.status]).toStrictEqual(['bgp-arp', 'ok']);
    expect(r.detail).toContain(`${IGNORE} = 1, ${ANNOUNCE} = 2`);
  });

  it("ok when lower and the agent can raise them (no unit); warn with the sysctl.d fix under the packaged unit's read-only /proc/sys", () => {
    const low = read({ [IGNORE]: '0', [ANNOUNCE]: '0' });
    const free = bgpArpResult(config('10.0.0.100'), low, null)!;
    expect(free.status).toBe('ok');
    expect(free.detail).toContain('the agent raises arp_ignore to 1 and arp_announce to 2 at start');
    const unit = bgpArpResult(config('10.0.0.100'), low, packaged)!;
    expect(unit.status).toBe('warn');
    expect(unit.detail).toContain('every interface of this node answers ARP for 10.0.0.100');
    expect(unit.fix).toContain(`sysctl -w ${IGNORE}=1 sysctl -w ${ANNOUNCE}=2`);
    expect(unit.fix).toContain('/etc/sysctl.d/');
    // a drop-in that makes the two files writable lets the agent raise them
    const dropIn = sandbox({ readOnlyPaths: packaged.readOnlyPaths, readWritePaths: ['/sys/fs/bpf', sysctlPath(IGNORE), sysctlPath(ANNOUNCE)] });
    expect(bgpArpResult(config('10.0.0.100'), low, dropIn)!.status).toBe('ok');
  });

  it('IPv6: ok, nothing to set (NDP answers only for an address of the receiving interface)', () => {
    const r = bgpArpResult(config('fd00::100'), () => null, packaged)!;
    expect([r.status, r.title]).toStrictEqual(['ok', 'no interface answers NDP for the VIPs on lo']);
  });

  it('writableUnder: the longest path decides; ProtectKernelTunables=yes keeps /proc/sys read-only', () => {
    expect(writableUnder(packaged, '/proc/sys/net/ipv4/conf/all/arp_ignore')).toBe(false);
    expect(
      writableUnder(sandbox({ readOnlyPaths: ['/proc/sys'], readWritePaths: ['-/proc/sys/net/ipv4/conf/all'] }), '/proc/sys/net/ipv4/conf/all/arp_ignore'),
    ).toBe(true);
    expect(writableUnder(sandbox({ protectKernelTunables: true, readWritePaths: ['/proc/sys/net'] }), '/proc/sys/net/ipv4/conf/all/arp_ignore')).toBe(false);
    expect(writableUnder(sandbox({ readOnlyPaths: ['/proc/sysrq-trigger'] }), '/proc/sys/net/x')).toBe(true);
  });
});
