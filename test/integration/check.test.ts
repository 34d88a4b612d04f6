/**
 * `ballast check --config FILE --json` on a lab of three nodes (prefix bchk, subnet 105), run
 * inside n1's namespace as an operator would run it on the node: a clean lab, then one problem
 * at a time — the VIP answered by another host (IPv4 ARP and IPv6 DAD), keepalived VRRPv2 and
 * VRRPv3 groups on our VRID, foreign nftables tables with a drop policy (and the running agent
 * warning at its start and noticing one appear), the VIP on the network / broadcast / subnet-router anycast address,
 * forwarding off, a port taken by another process; mode: bgp (forwarding with bgp.balance all and
 * local, the BGP checks with BIRD absent and then running in n1's namespace).
 *
 * Bounds: one check run is the VRRP listen (3 × Advertisement_Interval: 300 ms at 100 ms, 3 s at
 * 1 s) beside the VIP probe (3 probes 100 ms apart + 1 s = 1.2 s), plus Node's start and nft.
 * The agent's firewall watch polls every 5 s (FOREIGN_FIREWALL_POLL_MS): a new table is logged
 * within one poll plus 1 s.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { Lab } from '../../lab/lab.js';
import { agentConfig, cliPath, runAgent } from '../../lab/cluster.js';
import { startKeepalived } from '../../lab/peers/keepalived.js';
import type { CheckReport } from '../../src/check/report.js';
import { FOREIGN_FIREWALL_POLL_MS } from '../../src/check/watch.js';
import { needs, startLab, waitFor } from '../support/index.js';

const why = needs('root', 'keepalived');

describe.skipIf(why)('ballast check on the lab (root and keepalived; skipped otherwise)', () => {
  let lab: Lab;
  const n1 = () => lab.nodes[0]!;

  beforeAll(async () => {
    lab = await startLab({ prefix: 'bchk', subnet: 105, nodes: 3, apiservers: true });
  }, 30_000);
  afterAll(async () => {
    await lab?.teardown();
  });

  /** Writes a config for n1 (lab defaults: VRID 51, 100 ms, the three stand-ins as backends) with `extra` merged over it. */
  function config(name: string, extra: Record<string, unknown> = {}, s: { advertisementInterval?: string; family?: 4 | 6 } = {}): string {
    const path = join(lab.dir, `check-${name}.yaml`);
    writeFileSync(path, agentConfig(lab, n1(), { priority: 100, balance: true, ...s, extra }));
    return path;
  }

  async function check(path: string): Promise<{ code: number; report: CheckReport; byId: Map<string, CheckReport['checks']> }> {
    const r = await lab.exec(n1().netns, [process.execPath, cliPath(), 'check', '--config', path, '--json'], { allowFail: true, timeoutMs: 20_000 });
    let report: CheckReport;
    try {
      report = JSON.parse(r.stdout) as CheckReport;
    } catch {
      throw new Error(`ballast check exited ${r.code} without JSON:\n${r.stdout}\n${r.stderr}`);
    }
    const byId = new Map<string, CheckReport['checks']>();
    for (const c of report.checks) byId.set(c.id, [...(byId.get(c.id) ?? []), c]);
    return { code: r.code, report, byId };
  }

  /** `id:status` of every check but the backend certificates (checkcert's, asserted where they matter). */
  const statuses = (report: CheckReport): string[] => report.checks.map((c) => `${c.id}:${c.status}`).filter((s) => !s.startsWith('backend-certificate:'));

  it("a clean lab: every check ok, exit 0 (1 when the only warnings are the lab certificates' expiry)", async () => {
    const { code, report } = await check(config('clean'));
    expect(statuses(report)).toStrictEqual([
      'privileges:ok',
      'interface:ok',
      'vip-address:ok',
      'vip-in-use:ok',
      'vrrp-vrid:ok',
      'membership:ok',
      'ip-forwarding:ok',
      'nftables-ruleset:ok',
      'port-admin:ok',
      'port-vip:ok',
      'foreign-firewall:ok',
    ]);
    // the backend certificates (checkcert's checks, none while certificates.ts is a stub): one per
    // backend, whose SANs the lab covers; the lab CA issues certificates valid for 1 day, so the
    // only warning allowed is "expires … in 0 days (less than 30)" (EXPIRY_WARNING_DAYS)
    const certs = report.checks.filter((c) => c.id === 'backend-certificate');
    expect([0, lab.nodes.length]).toContain(certs.length);
    const warned = certs.filter((c) => c.status !== 'ok');
    for (const c of warned) expect(`${c.status} ${c.detail}`).toMatch(/^warn backend \S+: certificate expires on \S+, in [01] days \(less than 30\)\.$/);
    expect(code).toBe(warned.length > 0 ? 1 : 0);
  });

  // the discovery-server line: informational, always ok
  it('a discovery kubeconfig whose server is the VIP: an ok line says discovery dials each apiserver directly', async () => {
    const kc = join(lab.dir, 'check-admin.conf');
    writeFileSync(
      kc,
      `apiVersion: v1\nkind: Config\nclusters: [{ name: k, cluster: { server: "https://${lab.vip4}:6443" } }]\nusers: [{ name: u, user: { token: t } }]\ncontexts: [{ name: c, context: { cluster: k, user: u } }]\ncurrent-context: c\n`,
    );
    const { byId } = await check(config('discovery-vip', { discovery: { kubeconfig: kc, lastKnownFile: join(lab.dir, 'check-backends.json') } }));
    const r = byId.get('discovery-server')?.[0];
    expect([r?.status, r?.detail]).toStrictEqual([
      'ok',
      expect.stringMatching(
        new RegExp(
          `^the server https://${lab.vip4.replaceAll('.', '\\.')}:6443 is the VIP: harmless, discovery does not connect to it: it dials each apiserver at its own address`,
        ),
      ),
    ]);
  });

  it('IPv4: the VIP answered by another host (the client, no agent), forwarding off, admin.listen taken: exit 2 naming the MAC and the process', async () => {
    const c = lab.client;
    await lab.exec(c.netns, ['ip', 'addr', 'add', `${lab.vip4}/24`, 'dev', 'eth0']);
    await lab.exec(n1().netns, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=0']);
    const socat = lab.spawn(n1().netns, ['socat', 'TCP-LISTEN:9641,bind=127.0.0.1,reuseaddr,fork', 'SYSTEM:true']);
    try {
      await waitFor(
        () => lab.exec(n1().netns, ['ss', '-Htln', 'sport = :9641']),
        (r) => r.stdout.includes('127.0.0.1:9641'),
        { timeoutMs: 3000, what: 'socat listening' },
      );
      // the last VIP is outside eth0's subnet: the interface check fails and it is not probed
      const r = await check(config('problems4', { vips: [lab.vip4, '10.78.105.0', '10.78.105.255', '10.78.205.100'] }));
      expect(r.code).toBe(2);
      expect(statuses(r.report)).toStrictEqual([
        'privileges:ok',
        'interface:fail',
        'vip-address:ok',
        'vip-address:fail',
        'vip-address:fail',
        'vip-in-use:fail',
        'vip-in-use:ok',
        'vip-in-use:ok',
        'vip-in-use:warn',
        'vrrp-vrid:ok',
        'membership:ok',
        'ip-forwarding:fail',
        'nftables-ruleset:ok',
        'port-admin:fail',
        'port-vip:ok',
        'port-vip:ok',
        'port-vip:ok',
        'port-vip:ok',
        'foreign-firewall:ok',
      ]);
      expect(r.byId.get('interface')![0]!.detail).toContain('eth0 has no address whose subnet holds 10.78.205.100');
      expect(r.byId.get('vip-in-use')![3]!.detail).toContain('not probed: eth0 has no address in the subnet of 10.78.205.100');
      const [inUse] = r.byId.get('vip-in-use')!;
      // the lab's MACs are deterministic: 02:78:<subnet in hex>:00:00:<host>
      expect(c.mac).toBe('02:78:69:00:00:50');
      expect(inUse!.detail).toContain(`the host with MAC ${c.mac} answered our ARP probe`);
      const [, network, broadcast] = r.byId.get('vip-address')!;
      expect(network!.detail).toContain('10.78.105.0 is the network address of 10.78.105.0/24');
      expect(broadcast!.detail).toContain('10.78.105.255 is the broadcast address of 10.78.105.0/24');
      expect(r.byId.get('ip-forwarding')![0]!.detail).toContain('net.ipv4.ip_forward = 0');
      expect(r.byId.get('port-admin')![0]!.detail).toContain(`socat (pid ${socat.pid}) listens on 127.0.0.1:9641`);
    } finally {
      await socat.stop('SIGKILL');
      await lab.exec(n1().netns, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']);
      await lab.exec(c.netns, ['ip', 'addr', 'del', `${lab.vip4}/24`, 'dev', 'eth0'], { allowFail: true });
    }
  });

  it('IPv6: the VIP answered by another host (DAD solicitation), and the subnet-router anycast address as a VIP: exit 2', async () => {
    const c = lab.client;
    await lab.exec(c.netns, ['ip', 'addr', 'add', `${lab.vip6}/64`, 'dev', 'eth0', 'nodad']);
    try {
      const r = await check(config('problems6', { vips: [lab.vip6, 'fd78:105::'] }, { family: 6 }));
      expect(r.code).toBe(2);
      const [inUse, anycast] = r.byId.get('vip-in-use')!;
      expect(inUse!.status).toBe('fail');
      expect(inUse!.detail).toContain(`the host with MAC ${c.mac} answered our DAD solicitation`);
      // IPv6 forwarding is on in the lab's nodes, so the kernels of n2 and n3 hold fd78:105:: (the
      // subnet-router anycast address, RFC 4291 §2.6.1) and answer for it: in use, too. Their
      // answers come after a random delay (Linux: up to proxy_delay 0.8 s; RFC 4861 §7.2.7), which
      // the probe's 1 s of listening covers
      expect(anycast!.status).toBe('fail');
      expect(anycast!.detail).toContain(`the host with MAC ${lab.nodes[2]!.mac} answered our DAD solicitation`);
      expect(anycast!.detail).toContain(`the host with MAC ${lab.nodes[1]!.mac} answered our DAD solicitation`);
      const [, reserved] = r.byId.get('vip-address')!;
      expect(reserved!.status).toBe('fail');
      expect(reserved!.detail).toContain('fd78:105:: is the subnet-router anycast address of fd78:105::/64');
    } finally {
      await lab.exec(c.netns, ['ip', 'addr', 'del', `${lab.vip6}/64`, 'dev', 'eth0'], { allowFail: true });
    }
  });

  it('keepalived VRRPv3 and VRRPv2 groups on our VRID: each reported with its version, exit 2', async () => {
    const [, n2, n3] = lab.nodes;
    // another service's VIP on our VRID 51; one group at a time (a v2 and a v3 keepalived on one VRID hear each other)
    const v3 = await startKeepalived(lab, n3!, { vrid: 51, priority: 200, vrrpVersion: 3, advertIntervalS: 0.1, vips: ['10.78.105.202/32'] });
    try {
      await v3.waitForState('MASTER', { timeoutMs: 3000 });
      const r = await check(config('vrrp3'));
      expect(r.code).toBe(2);
      const [c] = r.byId.get('vrrp-vrid')!;
      expect(c!.status).toBe('fail');
      expect(c!.detail).toMatch(
        new RegExp(
          `^heard in 300 ms on VRID 51: ${n3!.ipv4} \\(MAC ${n3!.mac}\\) VRRPv3 priority 200 interval 100 ms addresses 10\\.78\\.105\\.202, \\d+ adverts?, which advertises 10\\.78\\.105\\.202, not our VIPs 10\\.78\\.105\\.100\\.$`,
        ),
      );
    } finally {
      await v3.stop('SIGKILL');
      await lab.exec(n3!.netns, ['ip', 'addr', 'del', '10.78.105.202/32', 'dev', 'eth0'], { allowFail: true });
    }
    // priority 255 (the address owner) becomes MASTER at once; v2 adverts come every whole second
    const v2 = await startKeepalived(lab, n2!, { vrid: 51, priority: 255, vrrpVersion: 2, advertIntervalS: 1, vips: ['10.78.105.201/32'] });
    try {
      await v2.waitForState('MASTER', { timeoutMs: 5000 });
      // our interval 1 s: the check listens 3 s
      const r = await check(config('vrrp2', {}, { advertisementInterval: '1s' }));
      expect(r.code).toBe(2);
      const [c] = r.byId.get('vrrp-vrid')!;
      expect(c!.status).toBe('fail');
      expect(c!.detail).toMatch(
        new RegExp(
          `^heard in 3000 ms on VRID 51: ${n2!.ipv4} \\(MAC ${n2!.mac}\\) VRRPv2 priority 255 interval 1000 ms addresses 10\\.78\\.105\\.201, \\d+ adverts?, which speaks VRRPv2`,
        ),
      );
    } finally {
      await v2.stop('SIGKILL');
      await lab.exec(n2!.netns, ['ip', 'addr', 'del', '10.78.105.201/32', 'dev', 'eth0'], { allowFail: true });
    }
  }, 20_000);

  it("foreign nftables tables with policy drop: warned at the agent's start, logged when one appears, in /status and the metric; a warning in check", async () => {
    // input: loopback stays open (the admin endpoint), ssh too; nothing accepts the VIP port.
    // forward: a drop policy and nothing else, which stops the DNAT to the other nodes' apiservers
    const input =
      'table inet hostfw {\n\tchain input {\n\t\ttype filter hook input priority 0; policy drop;\n\t\tct state established,related accept\n\t\tiifname "lo" accept\n\t\ttcp dport 22 accept\n\t}\n}\n';
    const forward = 'table ip hostfw2 {\n\tchain filter_fwd {\n\t\ttype filter hook forward priority 0; policy drop;\n\t}\n}\n';
    writeFileSync(join(lab.dir, 'hostfw.nft'), input);
    writeFileSync(join(lab.dir, 'hostfw2.nft'), forward);
    await lab.exec(n1().netns, ['nft', '-f', join(lab.dir, 'hostfw.nft')]);
    const agent = await runAgent(lab, n1(), config('agent'), { logFile: join(lab.dir, 'n1-check-agent.log') });
    try {
      // at start: the table already there
      await agent.proc.waitForOutput(
        /foreign firewall: may drop traffic ballast serves: nft table inet hostfw, chain input \(hook input\): policy drop, and no rule provably accepts TCP to the VIP 10\.78\.105\.100:6443/,
        {
          timeoutMs: 2000,
          includeExisting: true,
        },
      );
      // appearing while it runs: logged within one poll
      await lab.exec(n1().netns, ['nft', '-f', join(lab.dir, 'hostfw2.nft')]);
      const added = Date.now();
      await agent.proc.waitForOutput(
        /foreign firewall: may drop traffic ballast serves: nft table ip hostfw2, chain filter_fwd \(hook forward\): policy drop, and no rule provably accepts TCP to the remote backend 10\.78\.105\.12:6443/,
        {
          timeoutMs: FOREIGN_FIREWALL_POLL_MS + 1000,
        },
      );
      console.log(`the agent logged the new table ${Date.now() - added} ms after it appeared`);
      const status = JSON.parse(await agent.admin('/status')) as {
        foreignFirewall?: { rules: { severity: string; table: string; chain: string; flow: string }[] };
      };
      expect(status.foreignFirewall?.rules.map((x) => `${x.severity} ${x.table} ${x.chain} ${x.flow}`)).toStrictEqual([
        'warn hostfw input TCP to the VIP 10.78.105.100:6443',
        'warn hostfw input TCP to the local backend 10.78.105.11:6443',
        'warn hostfw2 filter_fwd TCP to the remote backend 10.78.105.12:6443',
        'warn hostfw2 filter_fwd TCP to the remote backend 10.78.105.13:6443',
      ]);
      expect(await agent.admin('/metrics')).toMatch(/^ballast_foreign_firewall_rules 4$/m);
      // one line per change: each finding logged once
      expect(agent.proc.output().match(/foreign firewall: may drop/g)?.length).toBe(4);
      await agent.stop();
      const r = await check(config('firewall'));
      const [c] = r.byId.get('foreign-firewall')!;
      expect(c!.status).toBe('warn');
      expect(c!.detail).toContain(
        'nft table inet hostfw, chain input (hook input): policy drop, and no rule provably accepts TCP to the VIP 10.78.105.100:6443',
      );
      expect(c!.detail).toContain(
        'nft table ip hostfw2, chain filter_fwd (hook forward): policy drop, and no rule provably accepts TCP to the remote backend 10.78.105.13:6443',
      );
      expect(r.code).toBe(1);
    } finally {
      await agent.stop('SIGKILL');
      await lab.exec(n1().netns, ['nft', 'delete', 'table', 'inet', 'hostfw'], { allowFail: true });
      await lab.exec(n1().netns, ['nft', 'delete', 'table', 'ip', 'hostfw2'], { allowFail: true });
    }
  }, 20_000);

  it.skipIf(needs('bird'))(
    'mode: bgp: ip-forwarding fails with balance: all and forwarding off (ok with balance: local), the ruleset is checked, BIRD absent warns, then answers with its version',
    async () => {
      const dir = join(lab.dir, 'check-bgp');
      mkdirSync(dir, { recursive: true });
      const socket = join(dir, 'bird.ctl');
      const bgpFile = (name: string, bgp: Record<string, unknown>): string => {
        const path = join(lab.dir, `check-${name}.yaml`);
        const doc = parse(agentConfig(lab, n1(), { priority: 100, balance: true, noElection: true })) as Record<string, unknown>;
        writeFileSync(
          path,
          stringify({
            ...doc,
            mode: 'bgp',
            vips: [lab.vip4],
            bgp: { socket, configFile: join(dir, 'ballast.conf'), localAsn: 64512, peers: [{ address: '10.78.105.1', asn: 64500 }], ...bgp },
          }),
        );
        return path;
      };
      await lab.exec(n1().netns, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=0']);
      let bird: ReturnType<Lab['spawn']> | null = null;
      try {
        const r = await check(bgpFile('bgp-all', {}));
        expect(statuses(r.report)).toStrictEqual([
          'privileges:ok',
          'ip-forwarding:fail',
          'nftables-ruleset:ok',
          'bgp-interface:ok',
          'bgp-socket:warn',
          'bgp-config-file:ok',
          'bgp-arp:ok',
          'port-admin:ok',
          'port-vip:ok',
          'foreign-firewall:ok',
        ]);
        expect(r.code).toBe(2);
        expect(r.byId.get('ip-forwarding')![0]!.detail).toContain('net.ipv4.ip_forward = 0');
        expect(r.byId.get('ip-forwarding')![0]!.detail).toContain(`${lab.nodes[1]!.ipv4}:6443`);
        expect(r.byId.get('bgp-socket')![0]!.detail).toContain('waits for BIRD');

        writeFileSync(join(dir, 'bird.conf'), 'router id 10.78.105.11;\nprotocol device { }\n');
        bird = lab.spawn(n1().netns, ['bird', '-f', '-c', join(dir, 'bird.conf'), '-s', socket, '-P', join(dir, 'bird.pid')], { logFile: 'check-bird.out' });
        await waitFor(
          async () => existsSync(socket),
          (x) => x,
          { timeoutMs: 5000, what: "BIRD's control socket" },
        );
        const local = await check(bgpFile('bgp-local', { balance: 'local', interface: 'nosuch0' }));
        expect(statuses(local.report).slice(0, 6)).toStrictEqual([
          'privileges:ok',
          'ip-forwarding:ok',
          'nftables-ruleset:ok',
          'bgp-interface:fail',
          'bgp-socket:ok',
          'bgp-config-file:ok',
        ]);
        expect(local.byId.get('ip-forwarding')![0]!.detail).toContain('bgp.balance: local');
        expect(local.byId.get('bgp-interface')![0]!.detail).toContain('there is no interface nosuch0');
        expect(local.byId.get('bgp-socket')![0]!.detail).toMatch(/^BIRD 2\.\S+, router ID 10\.78\.105\.11, up and running$/);
      } finally {
        await bird?.stop('SIGKILL');
        await lab.exec(n1().netns, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']);
      }
    },
    30_000,
  );
});
