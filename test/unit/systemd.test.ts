/**
 * systemdUnit() (src/manifest/systemd.ts): the options the package's unit must have, each with
 * its reason on the line above, the capability list from capabilities.ts, and the paths.
 * (systemd-analyze verify of the installed unit is in test/integration/package.test.ts.)
 */
import { describe, expect, it } from 'vitest';
import { AGENT_CAPABILITIES, AGENT_CAPABILITIES_EBPF_FREE, REALTIME_CAPABILITIES, UNIT_CAPABILITIES } from '../../src/manifest/capabilities.js';
import { systemdUnit, WATCHDOG_SEC } from '../../src/manifest/systemd.js';

/** `Key=value` lines of one [Section], in order. */
function section(unit: string, name: string): [string, string][] {
  const body = unit.split(/^\[/m).find((s) => s.startsWith(`${name}]`)) ?? '';
  return body.split('\n').flatMap((l) => {
    const m = /^([A-Za-z]+)=(.*)$/.exec(l);
    return m ? [[m[1]!, m[2]!] as [string, string]] : [];
  });
}

describe('systemdUnit', () => {
  const unit = systemdUnit({ configPath: '/etc/ballast/ballast.yaml' });
  const service = Object.fromEntries(section(unit, 'Service'));

  it('runs ballast run under Type=notify with the watchdog, reload, restart policy and stop settings', () => {
    expect(service).toMatchObject({
      Type: 'notify',
      NotifyAccess: 'main',
      WatchdogSec: `${WATCHDOG_SEC}s`,
      ExecStart: '/usr/bin/ballast run --config /etc/ballast/ballast.yaml',
      ExecReload: '/usr/bin/ballast reload --config /etc/ballast/ballast.yaml',
      Restart: 'on-failure',
      RestartPreventExitStatus: '2 4',
      KillSignal: 'SIGTERM',
      KillMode: 'mixed',
      TimeoutStopSec: '15s',
    });
    expect(service.ExecStartPre).toBeUndefined();
    expect(Object.fromEntries(section(unit, 'Unit'))).toMatchObject({
      Wants: 'network-online.target',
      After: 'network-online.target',
      Before: 'kubelet.service',
    });
    expect(section(unit, 'Install')).toEqual([['WantedBy', 'multi-user.target']]);
  });

  it('bounds the capabilities to AGENT_CAPABILITIES plus CAP_SYS_NICE (vrrp.realtimePriority) and hardens the rest, without MemoryDenyWriteExecute (V8 JIT)', () => {
    expect(service.CapabilityBoundingSet).toBe(UNIT_CAPABILITIES.join(' '));
    expect(UNIT_CAPABILITIES).toEqual(['CAP_BPF', 'CAP_NET_ADMIN', 'CAP_NET_RAW', 'CAP_SYS_NICE']);
    expect(REALTIME_CAPABILITIES).toEqual(['CAP_SYS_NICE']);
    expect(AGENT_CAPABILITIES).toEqual(['CAP_BPF', 'CAP_NET_ADMIN', 'CAP_NET_RAW']);
    expect(AGENT_CAPABILITIES_EBPF_FREE).toEqual(['CAP_NET_ADMIN', 'CAP_NET_RAW']);
    expect(service).toMatchObject({
      NoNewPrivileges: 'yes',
      ProtectSystem: 'strict',
      ReadWritePaths: '/sys/fs/bpf',
      RuntimeDirectory: 'ballast',
      StateDirectory: 'ballast',
      ConfigurationDirectory: 'ballast',
      ProtectHome: 'yes',
      PrivateTmp: 'yes',
      // not yes: it keeps bpffs read-only despite ReadWritePaths=; what it
      // protects is listed instead, and only bpffs is writable
      ProtectKernelTunables: 'no',
      ReadOnlyPaths:
        '/proc/sys /sys -/proc/acpi -/proc/apm -/proc/asound -/proc/bus -/proc/fs -/proc/irq -/proc/latency_stats -/proc/mtrr -/proc/scsi -/proc/sysrq-trigger -/proc/timer_stats',
      InaccessiblePaths: '-/proc/kallsyms -/proc/kcore',
      // not yes: vrrp.realtimePriority gives the pacer thread SCHED_FIFO
      RestrictRealtime: 'no',
      ProtectKernelModules: 'yes',
      ProtectControlGroups: 'yes',
      ProtectClock: 'yes',
      ProtectHostname: 'yes',
      PrivateMounts: 'yes',
      RestrictAddressFamilies: 'AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_PACKET',
      RestrictNamespaces: 'yes',
      LockPersonality: 'yes',
      SystemCallArchitectures: 'native',
      UMask: '0077',
    });
    expect(service.MemoryDenyWriteExecute).toBeUndefined();
    expect(service.User).toBeUndefined();
  });

  it('says why on the line above every [Unit] ordering and [Service] option', () => {
    const lines = unit.split('\n');
    const uncommented = lines.flatMap((l, i) =>
      /^(Wants|After|Before|[A-Z][A-Za-z]+)=/.test(l) &&
      !l.startsWith('Description=') &&
      !l.startsWith('WantedBy=') &&
      !lines[i - 1]!.startsWith('#') &&
      !/^[A-Z][A-Za-z]+=/.test(lines[i - 1]!)
        ? [l]
        : [],
    );
    expect(uncommented).toEqual([]);
    // and no two options share one comment except the pairs that belong together
    const shared = lines.flatMap((l, i) =>
      /^[A-Z][A-Za-z]+=/.test(l) && /^[A-Z][A-Za-z]+=/.test(lines[i - 1] ?? '') ? [`${lines[i - 1]!.split('=')[0]} ${l.split('=')[0]}`] : [],
    );
    expect(shared.sort()).toEqual(['ProtectSystem ReadWritePaths', 'Restart RestartSec', 'RuntimeDirectory RuntimeDirectoryPreserve', 'Wants After']);
  });

  it('takes other paths, quoting those with spaces, escaping % as %% (systemd specifiers), and refuses relative ones or newlines', () => {
    const u = systemdUnit({ configPath: '/srv/my cluster/ballast.yaml', binPath: '/opt/ballast/bin/ballast' });
    expect(Object.fromEntries(section(u, 'Service')).ExecStart).toBe('/opt/ballast/bin/ballast run --config "/srv/my cluster/ballast.yaml"');
    expect(systemdUnit({ configPath: '' })).toBe(unit);
    expect(() => systemdUnit({ configPath: 'ballast.yaml' })).toThrow(TypeError);
    const pct = Object.fromEntries(section(systemdUnit({ configPath: '/tmp/x/pct%n.yaml' }), 'Service'));
    expect([pct.ExecStart, pct.ExecReload]).toStrictEqual([
      '/usr/bin/ballast run --config /tmp/x/pct%%n.yaml',
      '/usr/bin/ballast reload --config /tmp/x/pct%%n.yaml',
    ]);
    expect(Object.fromEntries(section(systemdUnit({ configPath: '/srv/a b/%i.yaml' }), 'Service')).ExecStart).toBe(
      '/usr/bin/ballast run --config "/srv/a b/%%i.yaml"',
    );
    expect(() => systemdUnit({ configPath: '/etc/ballast/a\nb.yaml' })).toThrow(/without newlines/);
    expect(() => systemdUnit({ configPath: '/etc/ballast.yaml', binPath: 'ballast' })).toThrow(/binPath/);
  });
});
