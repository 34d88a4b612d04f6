/**
 * The eBPF fallback's reason (agent/phases/local-endpoint.ts ebpfBlocker): the errno the addon gave,
 * carried as a BallastError's cause, turned into the unit option that causes it.
 */
import { describe, expect, it } from 'vitest';
import { ebpfBlocker } from '../../src/agent/phases/local-endpoint.js';
import { createError } from '../../src/errors.js';

/** An addon error as native/sys_error.h makes it. */
function nativeError(code: string, errno: number, syscall: string, subject: string): Error {
  return Object.assign(new Error(`${syscall} failed on ${subject}: ${code}`), { code, errno, syscall });
}

describe('ebpfBlocker', () => {
  it('EROFS on the pin directory: bpffs read-only, ProtectKernelTunables, ReadWritePaths, systemctl edit', () => {
    const err = createError('BALLAST_E_DATAPLANE', 'cannot attach the eBPF load balancer to /sys/fs/cgroup (pins in /sys/fs/bpf/ballast/local)', {
      cause: nativeError('EROFS', 30, 'mkdir', '/sys/fs/bpf/ballast'),
    });
    const b = ebpfBlocker(err);
    expect(b.code).toBe('EROFS');
    expect(b.text).toBe(
      "bpffs (/sys/fs/bpf) is read-only in this process's mount namespace (mkdir failed on /sys/fs/bpf/ballast: EROFS): under systemd, ProtectKernelTunables=yes makes it so, and ReadWritePaths=/sys/fs/bpf must be listed for it to be writable; " +
        '`systemctl edit ballast` and add `[Service]` `ProtectKernelTunables=no` and `ReadWritePaths=/sys/fs/bpf`, then `systemctl restart ballast` (in a container: mount /sys/fs/bpf read-write)',
    );
  });

  it('EPERM from bpf(): capabilities and the seccomp filter, with the unit options', () => {
    const b = ebpfBlocker(createError('BALLAST_E_PERMISSION', 'cannot attach', { cause: nativeError('EPERM', 1, 'bpf', 'BPF_PROG_LOAD') }));
    expect(b.code).toBe('EPERM');
    expect(b.text).toMatch(/^the kernel refused bpf \(bpf failed on BPF_PROG_LOAD: EPERM\): the process lacks CAP_BPF and CAP_NET_ADMIN/);
    expect(b.text).toContain('`CapabilityBoundingSet=` lists CAP_BPF CAP_NET_ADMIN');
    expect(b.text).toContain('`SystemCallFilter=` allows bpf');
  });

  it('anything else: its own message, and where to look next', () => {
    expect(ebpfBlocker(new Error('verifier says no'))).toStrictEqual({
      text: 'verifier says no (`ballast check` run the same way, under the unit or in the container, tells more)',
    });
    expect(ebpfBlocker(nativeError('ENOENT', 2, 'open', '/x.o')).code).toBe('ENOENT');
  });
});
