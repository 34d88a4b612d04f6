/**
 * The checks of the host itself: `privileges` (CAP_NET_RAW, CAP_NET_ADMIN), `ebpf` (the local
 * endpoint's programs attach here and under the unit's sandbox) and `realtime` (the advert
 * pacer's SCHED_FIFO under the unit).
 */
import type { Config } from '../config/index.js';
import { missingCapabilities } from '../host/capabilities.js';
import { fail, ok, warn, type CheckResult } from './report.js';
import { ebpfUnderUnit, realtimeUnderUnit, runningUnitBpffs, UNIT_NAME, type Sandbox } from './unit.js';

/**
 * The `ebpf` check: the probe (this process), then what the unit's sandbox allows when the check
 * does not run under it (unit.ts): an attach that works from a root shell is no answer for
 * ballast.service.
 */
export function ebpfResult(
  r: { ok: boolean; reasons: string[] },
  configured: boolean,
  unit: Sandbox | null,
  running: { pid: number; readOnly: boolean } | null = unit ? runningUnitBpffs() : null,
): CheckResult {
  const title = 'eBPF local endpoint (cgroup v2, BPF programs, sock_diag)';
  const probed = 'cgroup connect4/6 and getpeername4/6 programs loaded and attached to a test cgroup, and SOCK_DESTROY works';
  if (r.ok && unit) {
    const u = ebpfUnderUnit(unit);
    // the running unit's own mount namespace settles what the options cannot
    const seen =
      running === null
        ? ''
        : `in the running ${UNIT_NAME} (pid ${running.pid}, as of its last start) /sys/fs/bpf is ${running.readOnly ? 'read-only' : 'writable'}`;
    if (running?.readOnly) {
      return warn(
        'ebpf',
        title,
        `${probed} from this process, but ${seen}: the agent falls back to the user-space proxy${u.status === 'ok' ? '' : ` (${u.detail})`}`,
        u.fix ??
          `\`systemctl edit ballast\` and add under [Service]: ProtectKernelTunables=no and ReadWritePaths=/sys/fs/bpf, then \`systemctl restart ballast\``,
      );
    }
    if (running && !u.known) return ok('ebpf', title, `${probed} (from this process), and ${seen}`);
    if (u.status === 'ok') return ok('ebpf', title, `${probed} (from this process); ${u.detail}`);
    return warn('ebpf', title, `${probed} from this process, but ${u.detail}`, u.fix!);
  }
  if (r.ok) return ok('ebpf', title, probed);
  return warn(
    'ebpf',
    title,
    `not available here: ${r.reasons.join('; ')}${configured ? '; dataplane.local: ebpf falls back to the proxy' : ''}`,
    'a kernel ≥ 5.14 with cgroup v2 mounted and CAP_BPF + CAP_NET_ADMIN (or root); or set dataplane.local: proxy',
  );
}

/** `privileges`: this process can open raw sockets and talk netlink. */
export function privilegesResult(): CheckResult {
  const missing = missingCapabilities();
  const title = 'privileges for raw sockets and netlink (CAP_NET_RAW, CAP_NET_ADMIN)';
  if (missing.length === 0) return ok('privileges', title, 'this process has them');
  return fail(
    'privileges',
    title,
    `this process lacks ${missing.join(' and ')}: the agent cannot run, and the probes below are skipped`,
    'run as root, or grant CAP_NET_RAW and CAP_NET_ADMIN',
  );
}

/** `realtime`: the advert pacer gets SCHED_FIFO vrrp.realtimePriority under the unit's sandbox. */
export function realtimeResult(v: NonNullable<Config['vrrp']>, unit: Sandbox): CheckResult {
  const r = realtimeUnderUnit(unit, v.realtimePriority);
  const title = `the advert pacer gets SCHED_FIFO ${v.realtimePriority} (vrrp.realtimePriority) under ${UNIT_NAME}`;
  return r.status === 'ok' ? ok('realtime', title, r.detail) : fail('realtime', title, r.detail, r.fix!);
}
