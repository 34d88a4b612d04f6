/**
 * `ballast check` in BGP mode (src/check/bgp.ts, forwarding.ts): ip-forwarding and the ruleset follow the VIP
 * data plane BGP mode runs (bgp.balance), and the BGP checks: bgp.interface, BIRD's control socket
 * (a BIRD-speaking unix socket in a temporary directory), bgp.configFile.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { renderBirdConfig } from '../../src/bgp/bird.js';
import { bgpResults } from '../../src/check/bgp.js';
import { forwardingResult, vipPlaneBackends } from '../../src/check/forwarding.js';
import { validateConfig } from '../../src/config/index.js';
import type { InterfaceInfo } from '../../src/vip/netlink.js';

const dir = mkdtempSync(join(tmpdir(), 'ballast-check-bgp-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const bgpConfig = (bgp: Record<string, unknown> = {}) =>
  validateConfig({
    mode: 'bgp',
    vips: ['10.0.0.100'],
    apiserver: { backends: ['10.0.1.2:6443', '10.0.2.2:6443'], health: { insecureSkipVerify: true } },
    bgp: { socket: join(dir, 'none.ctl'), configFile: join(dir, 'ballast.conf'), localAsn: 64512, peers: [{ address: '10.0.1.1', asn: 64500 }], ...bgp },
  });
const here = new Set(['10.0.1.2']);
const iface = (ifname: string, ifindex: number): InterfaceInfo => ({ ifname, ifindex, mac: '00:00:00:00:00:00', running: true, addresses: [] });

describe('check in BGP mode: the VIP data plane', () => {
  it('ip-forwarding applies with balance: all and a remote backend; not with balance: local', () => {
    const all = bgpConfig();
    expect(vipPlaneBackends(all, here).map((b) => b.host)).toStrictEqual(['10.0.1.2', '10.0.2.2']);
    const off = forwardingResult(all, here, () => '0');
    expect(off.status).toBe('fail');
    expect(off.detail).toContain('net.ipv4.ip_forward = 0');
    expect(off.detail).toContain('10.0.2.2:6443');
    expect(forwardingResult(all, here, () => '1').status).toBe('ok');
    const local = bgpConfig({ balance: 'local' });
    expect(vipPlaneBackends(local, here).map((b) => b.host)).toStrictEqual(['10.0.1.2']);
    const r = forwardingResult(local, here, () => '0');
    expect(r.status).toBe('ok');
    expect(r.detail).toContain('bgp.balance: local');
  });
});

/** A unix socket that speaks BIRD's control protocol for `show status` only. */
function fakeBird(path: string): Promise<Server> {
  const server = createServer((s) => {
    s.write('0001 BIRD 2.0.12 ready.\n');
    s.on('data', (d) => {
      if (d.toString().startsWith('show status')) s.write('1000-BIRD 2.0.12\n1011-Router ID is 10.0.1.2\n0013 Daemon is up and running\n');
    });
  });
  return new Promise((resolve) => server.listen(path, () => resolve(server)));
}

describe('bgpResults', () => {
  it('not BGP mode: no result', async () => {
    const vrrp = validateConfig({
      interface: 'eth0',
      vrrp: { vrid: 51, priority: 100 },
      vips: ['10.0.0.100'],
      apiserver: { backends: ['10.0.1.2:6443'], health: { insecureSkipVerify: true } },
    });
    expect(await bgpResults(vrrp, [iface('lo', 1)])).toStrictEqual([]);
  });

  it('a missing interface fails naming it; no BIRD warns that the agent waits; a missing snippet in a writable directory is ok', async () => {
    const r = await bgpResults(bgpConfig({ interface: 'vip0' }), [iface('lo', 1), iface('eth0', 2)]);
    expect(r.map((c) => `${c.id}:${c.status}`)).toStrictEqual(['bgp-interface:fail', 'bgp-socket:warn', 'bgp-config-file:ok']);
    expect(r[0]!.detail).toContain('there is no interface vip0 (lo, eth0 exist)');
    expect(r[1]!.detail).toContain('no socket there');
    expect(r[1]!.detail).toContain('waits for BIRD');
    expect(r[2]!.detail).toContain('does not exist yet');
  });

  it("BIRD answering: ok with its version; ballast's own snippet is ok, another file or a missing directory fails", async () => {
    const socket = join(dir, 'bird.ctl');
    const server = await fakeBird(socket);
    try {
      const configFile = join(dir, 'ballast.conf');
      const c = bgpConfig({ socket, configFile });
      writeFileSync(configFile, renderBirdConfig({ bgp: c.bgp!, family: 4, vips: c.vips, announced: true }, configFile));
      const r = await bgpResults(c, [iface('lo', 1)]);
      expect(r.map((x) => `${x.id}:${x.status}`)).toStrictEqual(['bgp-interface:ok', 'bgp-socket:ok', 'bgp-config-file:ok']);
      expect(r[1]!.detail).toBe('BIRD 2.0.12, router ID 10.0.1.2, up and running');
      expect(r[2]!.detail).toContain("is ballast's to write (its snippet, or empty)");

      writeFileSync(configFile, 'protocol device { }\n');
      const other = (await bgpResults(c, [iface('lo', 1)]))[2]!;
      expect(other.status).toBe('fail');
      expect(other.detail).toContain(`${configFile} exists and is not a snippet ballast wrote`);
      expect(other.detail).toContain('the agent refuses to start (BALLAST_E_BGP_CONFIG_FILE)');

      // the agent creates a missing directory (mkdir -p): ok when the nearest existing one is writable
      const missing = (await bgpResults(bgpConfig({ configFile: join(dir, 'no', 'such', 'ballast.conf') }), [iface('lo', 1)]))[2]!;
      expect(missing.status).toBe('ok');
      expect(missing.detail).toContain(`the agent writes it, creating ${join(dir, 'no', 'such')} in ${dir}`);
      // a file where a directory should be
      writeFileSync(join(dir, 'plain'), '');
      const notDir = (await bgpResults(bgpConfig({ configFile: join(dir, 'plain', 'ballast.conf') }), [iface('lo', 1)]))[2]!;
      expect(notDir.status).toBe('fail');
      expect(notDir.detail).toContain(`${join(dir, 'plain')} is not a directory: the agent cannot write the snippet`);
    } finally {
      await new Promise((r) => server.close(() => r(undefined)));
    }
  });

  it('a directory this user cannot write fails, by its errno (access(2) stands in: root may write any mode)', async () => {
    const denied = (code: string) => (): never => {
      throw Object.assign(new Error(`${code}: permission denied, access`), { code });
    };
    const cfg = bgpConfig({ configFile: join(dir, 'not-yet.conf') });
    const r = (await bgpResults(cfg, [iface('lo', 1)], { access: denied('EACCES') }))[2]!;
    expect([r.status, r.detail]).toStrictEqual(['fail', `the directory ${dir} is not writable by this user: the agent cannot write the snippet`]);
    const ro = (await bgpResults(cfg, [iface('lo', 1)], { access: denied('EROFS') }))[2]!;
    expect([ro.status, ro.detail]).toStrictEqual(['fail', `${dir}: EROFS: permission denied, access: the agent cannot write the snippet`]);
    const fine = (await bgpResults(cfg, [iface('lo', 1)], { access: () => undefined }))[2]!;
    expect(fine.status, fine.detail).toBe('ok');
  });
});
