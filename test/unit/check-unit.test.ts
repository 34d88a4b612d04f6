/**
 * `ballast check` and the unit's sandbox (check/unit.ts), and the membership check: what check
 * says is what the agent meets under ballast.service, read from the unit and its drop-ins as
 * systemd assembles them, or that it cannot tell.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { membershipResult } from '../../src/check/membership.js';
import {
  DEFAULT_UNIT_DIRS,
  ebpfUnderUnit,
  findUnit,
  readOnlyIn,
  readSandbox,
  realtimeUnderUnit,
  runningUnitBpffs,
  runsUnderUnit,
  sandboxOf,
  serviceAssignments,
  unitDirs,
  unitProcess,
  unitSandbox,
} from '../../src/check/unit.js';
import { stringify } from 'yaml';
import { parseConfig as parseText } from '../../src/config/index.js';
import { systemdUnit } from '../../src/manifest/systemd.js';

const root = mkdtempSync(join(tmpdir(), 'ballast-check-unit-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A unit search path of its own: `files` maps a path under it to its text. */
function dirs(name: string, files: Record<string, string>): string[] {
  const base = join(root, name);
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(join(base, rel, '..'), { recursive: true });
    writeFileSync(join(base, rel), text);
  }
  return ['etc', 'run', 'lib'].map((d) => join(base, d));
}

const shipped = systemdUnit({ configPath: '' });
/** A unit with ProtectKernelTunables=yes and RestrictRealtime=yes: the options that decide eBPF and real time. */
const before26 =
  '[Service]\nProtectKernelTunables=yes\nReadWritePaths=/sys/fs/bpf\nRestrictRealtime=yes\nCapabilityBoundingSet=CAP_BPF CAP_NET_ADMIN CAP_NET_RAW\n';
const sandbox = (...texts: string[]) => sandboxOf(texts.flatMap((t, i) => serviceAssignments(t, `f${i}`)));

describe('the unit as systemd assembles it', () => {
  it('the shipped unit: ProtectKernelTunables=no with /proc/sys and /sys read-only but ReadWritePaths=/sys/fs/bpf, RestrictRealtime=no, the four capabilities', () => {
    const s = sandbox(shipped);
    expect(s.protectKernelTunables).toBe(false);
    expect(s.readWritePaths).toStrictEqual(['/sys/fs/bpf']);
    expect(s.readOnlyPaths.slice(0, 2)).toStrictEqual(['/proc/sys', '/sys']);
    expect(s.inaccessiblePaths).toStrictEqual(['/proc/kallsyms', '/proc/kcore']);
    expect(s.restrictRealtime).toBe(false);
    expect(['CAP_BPF', 'CAP_NET_ADMIN', 'CAP_NET_RAW', 'CAP_SYS_NICE', 'CAP_SYS_ADMIN'].map((c) => s.hasCapability(c))).toStrictEqual([
      true,
      true,
      true,
      true,
      false,
    ]);
    expect(s.limitRtprio).toBeNull();
  });

  it('[Service] only, comments, continuation lines; drop-ins: the last wins, lists append, an empty one resets, ~ removes', () => {
    const s = sandbox(
      '[Unit]\nProtectKernelTunables=yes\n[Service]\n# ProtectKernelTunables=no\nProtectKernelTunables = yes\nReadWritePaths=/var/lib/x \\\n  -/sys/fs/bpf\nCapabilityBoundingSet=CAP_NET_RAW\n',
      '[Service]\nProtectKernelTunables=no\nReadWritePaths=\nReadWritePaths=/run/y\nCapabilityBoundingSet=CAP_BPF CAP_SYS_NICE\nCapabilityBoundingSet=~CAP_SYS_NICE\nLimitRTPRIO=10:20\n',
    );
    expect(s.protectKernelTunables).toBe(false);
    expect(s.readWritePaths).toStrictEqual(['/run/y']);
    expect(['CAP_NET_RAW', 'CAP_BPF', 'CAP_SYS_NICE', 'CAP_NET_ADMIN'].map((c) => s.hasCapability(c))).toStrictEqual([true, true, false, false]);
    expect(s.limitRtprio).toBe(10);
    expect(sandbox('[Service]\nCapabilityBoundingSet=\n').hasCapability('CAP_NET_RAW')).toBe(false);
    expect(sandbox('[Service]\nNoNewPrivileges=yes\n').hasCapability('CAP_SYS_NICE')).toBe(true);
  });

  it('findUnit: the first directory with the unit; drop-ins of every directory by name, an earlier one hiding the same name', () => {
    const d = dirs('find', {
      'etc/ballast.service': '[Service]\nRestrictRealtime=no\n',
      'lib/ballast.service': shipped,
      'lib/ballast.service.d/10-a.conf': '[Service]\nProtectKernelTunables=yes\n',
      'etc/ballast.service.d/20-b.conf': '[Service]\nProtectKernelTunables=no\n',
      'run/ballast.service.d/10-a.conf': '[Service]\nReadWritePaths=/sys/fs/bpf\n',
      'lib/ballast.service.d/notes.txt': 'ignored',
    });
    const f = findUnit(d);
    expect(f.main).toBe(join(d[0]!, 'ballast.service'));
    expect(f.dropIns).toStrictEqual([join(d[1]!, 'ballast.service.d', '10-a.conf'), join(d[0]!, 'ballast.service.d', '20-b.conf')]);
    const s = readSandbox(f)!;
    expect(s.files).toStrictEqual([f.main, ...f.dropIns]);
    expect(s.protectKernelTunables).toBe(false);
    expect(s.restrictRealtime).toBe(false);
    expect(findUnit(dirs('none', {}))).toStrictEqual({ main: null, dropIns: [] });
    expect(readSandbox({ main: null, dropIns: [] })).toBeNull();
  });

  it('unitDirs: $SYSTEMD_UNIT_PATH replaces the defaults; an empty last entry appends them', () => {
    expect(unitDirs({})).toStrictEqual(DEFAULT_UNIT_DIRS);
    expect(unitDirs({ SYSTEMD_UNIT_PATH: '/a:/b' })).toStrictEqual(['/a', '/b']);
    expect(unitDirs({ SYSTEMD_UNIT_PATH: '/a:' })).toStrictEqual(['/a', ...DEFAULT_UNIT_DIRS]);
  });

  it('under the unit the probes answer (null); elsewhere the installed unit', () => {
    expect(runsUnderUnit('0::/system.slice/ballast.service\n')).toBe(true);
    expect(runsUnderUnit('0::/user.slice/user-0.slice/session-3.scope\n')).toBe(false);
    expect(runsUnderUnit('0::/system.slice/ballast.service.d\n')).toBe(false);
    expect(runsUnderUnit('0::/ballast.service\n')).toBe(true);
    // a container's unit of the same name, seen from the host
    expect(runsUnderUnit('0::/machine.slice/systemd-nspawn@n1.service/payload/system.slice/ballast.service\n')).toBe(false);
    const d = dirs('installed', { 'lib/ballast.service': shipped });
    const env = { SYSTEMD_UNIT_PATH: d.join(':') };
    expect(unitSandbox(env, () => '0::/system.slice/ballast.service\n')).toBeNull();
    expect(unitSandbox(env, () => '0::/user.slice/session-1.scope\n')?.readWritePaths).toStrictEqual(['/sys/fs/bpf']);
  });
});

describe('the running unit', () => {
  const mountinfo = [
    '23 27 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw',
    '98 23 0:43 / /sys/fs/bpf rw,relatime shared:40 - bpf bpf rw,mode=700',
    '69 98 0:40 / /sys/fs/bpf ro,relatime - bpf bpf ro',
  ].join('\n');
  it('readOnlyIn: the deepest mount holding the path, the last listed on top; ro in its mount or super block options', () => {
    expect(readOnlyIn(mountinfo, '/sys/fs/bpf')).toBe(true);
    expect(readOnlyIn(mountinfo, '/sys/fs/bpf/ballast')).toBe(true);
    expect(readOnlyIn(mountinfo.split('\n').slice(0, 2).join('\n'), '/sys/fs/bpf')).toBe(false);
    // ProtectKernelTunables: /sys remounted read-only, bpffs below it not a mount of its own
    expect(readOnlyIn('23 27 0:22 / /sys ro,nosuid - sysfs sysfs rw', '/sys/fs/bpf')).toBe(true);
    expect(readOnlyIn('40 1 0:50 / /sys/fs/bpf rw,relatime - bpf bpf ro', '/sys/fs/bpf')).toBe(true);
    expect(readOnlyIn('', '/sys/fs/bpf')).toBeNull();
  });

  it("unitProcess / runningUnitBpffs: the lowest PID in ballast.service's cgroup, and bpffs in its mount namespace", () => {
    const proc = join(root, 'proc');
    const pid = (n: number, cgroup: string, mi = mountinfo) => {
      mkdirSync(join(proc, String(n)), { recursive: true });
      writeFileSync(join(proc, String(n), 'cgroup'), `${cgroup}\n`);
      writeFileSync(join(proc, String(n), 'mountinfo'), mi);
    };
    pid(7, '0::/user.slice/session-1.scope');
    pid(31, '0::/system.slice/ballast.service');
    pid(12, '0::/machine.slice/systemd-nspawn@n1.service/payload/system.slice/ballast.service');
    pid(40, '0::/system.slice/ballast.service', '23 27 0:22 / /sys rw - sysfs sysfs rw');
    mkdirSync(join(proc, 'self'), { recursive: true });
    expect(unitProcess(proc)).toBe(31);
    expect(runningUnitBpffs(proc)).toStrictEqual({ pid: 31, readOnly: true });
    expect(unitProcess(join(root, 'no-proc'))).toBeNull();
    expect(runningUnitBpffs(join(root, 'no-proc'))).toBeNull();
  });
});

describe('what the agent meets under the unit', () => {
  it('eBPF, a unit with ProtectKernelTunables=yes: cannot tell (ProtectKernelTunables=yes with ReadWritePaths=/sys/fs/bpf was seen read-only), warn with the drop-in', () => {
    const v = ebpfUnderUnit(sandbox(before26));
    expect(v.status).toBe('warn');
    expect(v.detail).toMatch(
      /^cannot tell from here whether bpffs is writable under ballast\.service: it has ProtectKernelTunables=yes and ReadWritePaths=\/sys\/fs\/bpf/,
    );
    expect(v.fix).toBe(
      '`systemctl edit ballast` and add under [Service]: ProtectKernelTunables=no (ReadWritePaths=/sys/fs/bpf stays), then `systemctl restart ballast`; `journalctl -u ballast -p warning` shows the fallback if it happens',
    );
  });

  it('eBPF: ProtectKernelTunables=yes without ReadWritePaths, or no CAP_BPF: it cannot, warn naming each option', () => {
    const v = ebpfUnderUnit(sandbox('[Service]\nProtectKernelTunables=yes\nCapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW\n'));
    expect(v.status).toBe('warn');
    expect(v.detail).toBe(
      'under ballast.service it cannot: CapabilityBoundingSet= leaves out CAP_BPF: the kernel refuses the BPF programs (EPERM); ProtectKernelTunables=yes makes /sys, bpffs included, read-only and no ReadWritePaths= lists /sys/fs/bpf (mkdir of the pin directory: EROFS); the agent falls back to the user-space proxy',
    );
    expect(v.fix).toBe(
      '`systemctl edit ballast` and add under [Service]: CapabilityBoundingSet=CAP_BPF and ProtectKernelTunables=no and ReadWritePaths=/sys/fs/bpf, then `systemctl restart ballast`',
    );
    expect(ebpfUnderUnit(sandbox('[Service]\nReadOnlyPaths=/sys\n')).detail).toContain('ReadOnlyPaths=/sys makes bpffs read-only');
    expect(ebpfUnderUnit(sandbox('[Service]\nReadOnlyPaths=/sys\nReadWritePaths=/sys/fs/bpf\n')).status).toBe('ok');
  });

  it('eBPF: the shipped unit: ok (its ReadOnlyPaths=/sys leaves /sys/fs/bpf writable); with a drop-in ProtectKernelTunables=yes: cannot tell', () => {
    expect(ebpfUnderUnit(sandbox(shipped))).toMatchObject({ status: 'ok' });
    expect(ebpfUnderUnit(sandbox(before26, '[Service]\nProtectKernelTunables=no\n'))).toMatchObject({ status: 'ok' });
    expect(ebpfUnderUnit(sandbox(shipped, '[Service]\nProtectKernelTunables=yes\n'))).toMatchObject({ status: 'warn', known: false });
  });

  it('realtime, a unit with RestrictRealtime=yes: fails (RestrictRealtime=yes, no CAP_SYS_NICE); a drop-in lifting both, or LimitRTPRIO, makes it ok; the shipped unit: ok', () => {
    expect(realtimeUnderUnit(sandbox(shipped), 50).status).toBe('ok');
    const v = realtimeUnderUnit(sandbox(before26), 50);
    expect(v.status).toBe('fail');
    expect(v.detail).toBe(
      'vrrp.realtimePriority: 50 cannot work under ballast.service: RestrictRealtime=yes forbids SCHED_FIFO (sched_setscheduler fails with EPERM); CapabilityBoundingSet= leaves out CAP_SYS_NICE; the pacer thread runs with normal scheduling (one warning at start)',
    );
    expect(v.fix).toBe(
      '`systemctl edit ballast` and add under [Service]: RestrictRealtime=no and CapabilityBoundingSet=CAP_SYS_NICE, then `systemctl restart ballast`; or set vrrp.realtimePriority: 0',
    );
    expect(realtimeUnderUnit(sandbox(before26, '[Service]\nRestrictRealtime=no\nCapabilityBoundingSet=CAP_SYS_NICE\n'), 50).status).toBe('ok');
    expect(realtimeUnderUnit(sandbox(before26, '[Service]\nRestrictRealtime=no\nLimitRTPRIO=50\n'), 50).status).toBe('ok');
    expect(realtimeUnderUnit(sandbox(before26, '[Service]\nRestrictRealtime=no\nLimitRTPRIO=49\n'), 50).detail).toContain('LimitRTPRIO=49 is below 50');
    // and the drop-in docs/install.md gives for taking CAP_SYS_NICE away again
    expect(realtimeUnderUnit(sandbox(shipped, '[Service]\nCapabilityBoundingSet=~CAP_SYS_NICE\nRestrictRealtime=yes\n'), 50).status).toBe('fail');
  });
});

const parseConfig = (doc: object) => parseText(stringify(doc));

describe('membership: would this node ever become master?', () => {
  const base = { vrrp: { vrid: 51, priority: 100, advertisementInterval: '1s' }, vips: ['10.0.0.100'] };
  it('a backend host: ok; none of its addresses a backend or peer, no discovery: fail "would never become master"', () => {
    const member = parseConfig({ ...base, apiserver: { backends: ['10.0.0.11:6443', '10.0.0.12:6443'], health: { insecureSkipVerify: true } } });
    expect(membershipResult(member, 'eth0', ['10.0.0.11', 'fe80::1'])).toMatchObject({ id: 'membership', status: 'ok' });
    const r = membershipResult(member, 'eth0', ['10.0.0.13', 'fe80::1']);
    expect(r.status).toBe('fail');
    expect(r.detail).toBe(
      "none of eth0's addresses (10.0.0.13) is a backend host or a listed peer (known nodes: 10.0.0.11, 10.0.0.12): the other nodes drop its adverts (vrrp.acceptFrom: members), so it stays Backup — this node would never become master",
    );
    expect(r.fix).toBe(
      "add this node's apiserver (10.0.0.13:6443) to apiserver.backends on every node, or list 10.0.0.13 in vrrp.peers on the others (unicast), or set vrrp.acceptFrom: any",
    );
  });

  it('acceptFrom: any, or nothing known: ok, any source is heard', () => {
    const any = parseConfig({
      ...base,
      vrrp: { ...base.vrrp, acceptFrom: 'any' },
      apiserver: { backends: ['10.0.0.11:6443'], health: { insecureSkipVerify: true } },
    });
    expect(membershipResult(any, 'eth0', ['10.0.0.13']).status).toBe('ok');
    expect(membershipResult(parseConfig(base), 'eth0', ['10.0.0.13']).status).toBe('ok');
  });
});
