/**
 * `ballast check` against the installed unit, run as an operator runs it: from a
 * shell on the node (lab node n1, prefix bfix2, subnet 171), with the unit search path pointed at
 * a directory of the test's own ($SYSTEMD_UNIT_PATH, as systemd reads it). The eBPF probe attaches
 * from this shell; what the agent meets under the unit comes from the unit's options:
 *
 *   the shipped unit (ProtectKernelTunables=no, /sys read-only but ReadWritePaths=/sys/fs/bpf): ok;
 *     a drop-in ProtectKernelTunables=yes: `[warn] ebpf`, cannot
 *     tell (that pair was seen read-only), with the drop-in that fixes it;
 *   vrrp.realtimePriority under a drop-in RestrictRealtime=yes (no CAP_SYS_NICE): `[fail] realtime`;
 *   a node none of whose addresses is a backend or a peer: `[fail] membership`, "would never become master".
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { agentConfig, cliPath } from '../../lab/cluster.js';
import type { CheckReport } from '../../src/check/report.js';
import { systemdUnit } from '../../src/manifest/systemd.js';
import { readOnlyIn } from '../../src/check/unit.js';
import { needs, startLab, waitFor } from '../support/index.js';

describe.skipIf(needs('root', 'bpf'))('ballast check and the unit it runs under (root; skipped otherwise)', () => {
  let lab: Lab;
  let units: string;

  beforeAll(async () => {
    lab = await startLab({ prefix: 'bfix2', subnet: 171, nodes: 2, apiservers: true });
    units = join(lab.dir, 'units');
    mkdirSync(units, { recursive: true });
    writeFileSync(join(units, 'ballast.service'), systemdUnit({ configPath: '' }));
  }, 30_000);
  afterAll(async () => {
    await lab?.teardown();
  });

  /** `ballast check ARGS` in n1, keeping the machine's mounts (cgroup2 and bpffs, which `ip netns exec` would hide). */
  async function check(args: string[]): Promise<{ code: number; stdout: string; report?: CheckReport }> {
    const r = await lab.exec(lab.nodes[0]!.netns, ['env', `SYSTEMD_UNIT_PATH=${units}`, process.execPath, cliPath(), 'check', ...args], {
      allowFail: true,
      timeoutMs: 20_000,
      hostMounts: true,
    });
    return { code: r.code, stdout: r.stdout, ...(args.includes('--json') ? { report: JSON.parse(r.stdout) as CheckReport } : {}) };
  }

  it('no configuration: the probe attaches from this shell and the shipped unit allows it: [ok] ebpf; a drop-in ProtectKernelTunables=yes cannot be told writable: [warn] ebpf with the fix', async () => {
    const shipped = await check([]);
    expect(shipped.stdout).toMatch(/^\[ok\] ebpf: /);
    expect(shipped.stdout).toContain('(from this process); ballast.service allows it');
    expect(shipped.code).toBe(0);
    mkdirSync(join(units, 'ballast.service.d'), { recursive: true });
    writeFileSync(join(units, 'ballast.service.d', '50-bpffs.conf'), '[Service]\nProtectKernelTunables=yes\n');
    try {
      const pkt = await check([]);
      expect(pkt.stdout).toMatch(/^\[warn\] ebpf: /);
      expect(pkt.stdout).toContain(
        'from this process, but cannot tell from here whether bpffs is writable under ballast.service: it has ProtectKernelTunables=yes and ReadWritePaths=/sys/fs/bpf',
      );
      expect(pkt.stdout).toContain('fix: `systemctl edit ballast` and add under [Service]: ProtectKernelTunables=no');
      expect(pkt.code).toBe(1);
    } finally {
      writeFileSync(join(units, 'ballast.service.d', '50-bpffs.conf'), '');
    }
  });

  it('a node that is no member, vrrp.realtimePriority under a drop-in RestrictRealtime=yes: [fail] membership ("would never become master") and [fail] realtime, exit 2; the shipped unit: [ok] realtime', async () => {
    const n1 = lab.nodes[0]!;
    const n2 = lab.nodes[1]!;
    const path = join(lab.dir, 'n1-stranger.yaml');
    // n1's config names n2's apiserver only: n1 is none of the group's members
    writeFileSync(
      path,
      agentConfig(lab, n1, {
        priority: 100,
        realtimePriority: 50,
        extra: { apiserver: { port: 6443, backends: [`${n2.ipv4}:6443`], health: { caFile: lab.ca.certFile } } },
      }),
    );
    expect((await check(['--config', path, '--json'])).report!.checks.find((c) => c.id === 'realtime')).toMatchObject({ status: 'ok' });
    mkdirSync(join(units, 'ballast.service.d'), { recursive: true });
    writeFileSync(join(units, 'ballast.service.d', '60-rt.conf'), '[Service]\nRestrictRealtime=yes\n');
    let got: Awaited<ReturnType<typeof check>>;
    try {
      got = await check(['--config', path, '--json']);
    } finally {
      writeFileSync(join(units, 'ballast.service.d', '60-rt.conf'), '');
    }
    const { code, report } = got;
    const byId = new Map(report!.checks.map((c) => [c.id, c]));
    expect(byId.get('membership')).toMatchObject({ status: 'fail' });
    expect(byId.get('membership')!.detail).toContain(
      `none of ${n1.ifname}'s addresses (${n1.ipv4}) is a backend host or a listed peer (known nodes: ${n2.ipv4})`,
    );
    expect(byId.get('membership')!.detail).toContain('this node would never become master');
    expect(byId.get('realtime')).toMatchObject({ status: 'fail' });
    expect(byId.get('realtime')!.detail).toContain('RestrictRealtime=yes forbids SCHED_FIFO');
    expect(code).toBe(2);
    // a member (its own apiserver among the backends): ok
    const member = join(lab.dir, 'n1-member.yaml');
    writeFileSync(member, agentConfig(lab, n1, { priority: 100, balance: true }));
    const m = await check(['--config', member, '--json']);
    expect(m.report!.checks.find((c) => c.id === 'membership')).toMatchObject({ status: 'ok' });
    expect(m.report!.checks.some((c) => c.id === 'realtime')).toBe(false);
  });

  it("the running unit's mount namespace, read for real: a read-only bpffs over /sys/fs/bpf (as ProtectKernelTunables leaves it) reads read-only", async () => {
    const p = spawn('unshare', ['-m', '--propagation', 'private', 'sh', '-c', 'mount -t bpf -o ro bpf /sys/fs/bpf && exec sleep 30'], { stdio: 'ignore' });
    try {
      const mi = await waitFor(
        () => readFileSync(`/proc/${p.pid}/mountinfo`, 'utf8'),
        (t) => / \/sys\/fs\/bpf ro[, ]/.test(t),
        { timeoutMs: 3000, what: 'the read-only bpffs mount' },
      );
      expect(readOnlyIn(mi, '/sys/fs/bpf')).toBe(true);
      expect(readOnlyIn(mi, '/sys/fs/bpf/ballast')).toBe(true);
      expect(readOnlyIn(mi, '/sys')).toBe(false);
    } finally {
      p.kill('SIGKILL');
    }
  });
});
