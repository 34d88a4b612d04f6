/**
 * The pure parts of the eBPF data plane (src/dataplane/ebpf.ts) and its bookkeeping against a
 * fake OS edge (EbpfSys): no root, no kernel. The same class runs against the kernel in
 * test/integration/ebpf.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { parseEndpoint } from '../../lab/ebpf-endpoint.js';
import {
  EbpfLocalDataplane,
  backendsFor,
  findCgroup2Root,
  isBpffsMounted,
  kernelAtLeast,
  missingCapabilities,
  type EbpfMaps,
  type EbpfSys,
} from '../../src/dataplane/ebpf.js';
import { isBallastError } from '../../src/errors.js';
import type { SockAddress, SockLbEntry, SockLbOptions, SockLbReverse, TcpSocketFilter, TcpSocketInfo } from '../../src/native.js';

// /proc/self/mountinfo of a hybrid host (systemd "hybrid": v1 controllers + cgroup2 at unified)
const HYBRID = [
  '22 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw',
  '25 22 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755',
  '26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate',
  '27 25 0:25 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd',
  '33 22 0:31 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:12 - bpf bpf rw,mode=700',
  '',
].join('\n');
// a unified host
const UNIFIED = [
  '22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw',
  '26 22 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot',
].join('\n');
// inside a container: the cgroup2 mount's root is the container's own cgroup, plus an escaped path
const CONTAINER = [
  '1200 1100 0:24 /kubepods/pod1/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw',
  '1201 1100 0:24 / /host\\040root/cgroup rw - cgroup2 cgroup rw',
].join('\n');

describe('findCgroup2Root', () => {
  it('finds the unified mount on a hybrid host and on a unified host', () => {
    expect(findCgroup2Root(HYBRID)).toBe('/sys/fs/cgroup/unified');
    expect(findCgroup2Root(UNIFIED)).toBe('/sys/fs/cgroup');
  });
  it("skips a mount whose root is not the hierarchy's root, and unescapes \\040", () => {
    expect(findCgroup2Root(CONTAINER)).toBe('/host root/cgroup');
  });
  it('prefers /sys/fs/cgroup over any other cgroup2 mount', () => {
    expect(findCgroup2Root(`${CONTAINER.split('\n')[1]}\n${UNIFIED}`)).toBe('/sys/fs/cgroup');
  });
  it('returns undefined without a cgroup2 mount, and ignores malformed lines', () => {
    expect(findCgroup2Root('25 22 0:23 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n')).toBeUndefined();
    expect(findCgroup2Root('garbage - cgroup2\n\n')).toBeUndefined();
  });
});

describe('isBpffsMounted, kernelAtLeast, missingCapabilities', () => {
  it('sees bpffs at /sys/fs/bpf only when mounted there', () => {
    expect(isBpffsMounted(HYBRID)).toBe(true);
    expect(isBpffsMounted(UNIFIED)).toBe(false);
  });
  it('compares kernel releases numerically', () => {
    expect(kernelAtLeast('6.18.44-fc-v782', 5, 14)).toBe(true);
    expect(kernelAtLeast('5.14.0-362.el9.x86_64', 5, 14)).toBe(true);
    expect(kernelAtLeast('5.10.0-28-amd64', 5, 14)).toBe(false);
    expect(kernelAtLeast('4.19.0', 5, 14)).toBe(false);
    expect(kernelAtLeast('weird', 5, 14)).toBe(false);
  });
  it('needs CAP_NET_ADMIN and CAP_BPF or CAP_SYS_ADMIN', () => {
    expect(missingCapabilities('000001ffffffffff')).toEqual([]); // root
    expect(missingCapabilities('0000008000001000')).toEqual([]); // CAP_BPF (39) + CAP_NET_ADMIN (12)
    expect(missingCapabilities('0000000000201000')).toEqual([]); // CAP_SYS_ADMIN (21) + CAP_NET_ADMIN
    expect(missingCapabilities('0000008000000000')).toEqual(['CAP_NET_ADMIN']);
    expect(missingCapabilities('0000000000000000')).toEqual(['CAP_BPF (or CAP_SYS_ADMIN)', 'CAP_NET_ADMIN']);
  });
});

describe('backendsFor', () => {
  it('keeps the family, the order, canonical text; drops duplicates', () => {
    const ready = [
      { address: '10.0.0.12', port: 6443 },
      { address: 'FD00::0011', port: 6443 },
      { address: '10.0.0.11', port: 6443 },
      { address: '10.0.0.12', port: 6443 },
      { address: 'fd00::11', port: 6443 },
    ];
    expect(backendsFor(ready, 4)).toEqual([
      { address: '10.0.0.12', port: 6443 },
      { address: '10.0.0.11', port: 6443 },
    ]);
    expect(backendsFor(ready, 6)).toEqual([{ address: 'fd00::11', port: 6443 }]);
  });
  it('cuts at 64 (the map value holds 64 backends)', () => {
    const many = Array.from({ length: 70 }, (_, i) => ({ address: `10.0.1.${i + 1}`, port: 6443 }));
    expect(backendsFor(many, 4)).toHaveLength(64);
  });
});

describe('parseEndpoint (ebpf-endpoint.ts)', () => {
  it('reads host:port and [v6]:port', () => {
    expect(parseEndpoint('127.0.0.1:7443')).toEqual({ address: '127.0.0.1', port: 7443 });
    expect(parseEndpoint('[::1]:7443')).toEqual({ address: '::1', port: 7443 });
    expect(() => parseEndpoint('::1:7443')).toThrow(TypeError);
  });
});

// ---------------------------------------------------------------------------------------------
// the data plane against a fake kernel

const key = (a: SockAddress): string => `${a.address}|${a.port}`;

class FakeKernel implements EbpfSys {
  endpoints = new Map<string, SockLbEntry>();
  reverseMap = new Map<bigint, SockLbReverse>();
  sockets: TcpSocketInfo[] = [];
  netns = 4242n;
  cookieSet: bigint | undefined;
  attached: SockLbOptions[] = [];
  detached: string[] = [];
  destroyed: TcpSocketFilter[] = [];
  closed = 0;
  failAttach: Error | undefined;
  reused = { maps: [] as string[], links: [] as string[] };

  attach(opts: SockLbOptions): EbpfMaps {
    if (this.failAttach) throw this.failAttach;
    this.attached.push(opts);
    return {
      reused: this.reused,
      setEndpoint: (endpoint, backends) => void this.endpoints.set(key(endpoint), { endpoint, backends: [...backends] }),
      deleteEndpoint: (endpoint) => this.endpoints.delete(key(endpoint)),
      readEndpoints: () => [...this.endpoints.values()],
      setNetnsCookie: (cookie) => void (this.cookieSet = cookie),
      reverse: (cookie) => this.reverseMap.get(cookie) ?? null,
      close: () => void this.closed++,
    };
  }
  detach(pinDir: string): number {
    this.detached.push(pinDir);
    return 7;
  }
  netnsCookie(): bigint {
    return this.netns;
  }
  listTcpSockets(filter: TcpSocketFilter): TcpSocketInfo[] {
    return this.sockets.filter((s) => filter.dst === undefined || (s.dst.address === filter.dst.address && s.dst.port === filter.dst.port));
  }
  destroySockets(filter: TcpSocketFilter): number {
    this.destroyed.push(filter);
    return filter.cookies?.length ?? 0;
  }
}

const quiet = { info: () => undefined, warn: () => undefined };
const LOCAL = [
  { address: '127.0.0.1', port: 7443 },
  { address: '::1', port: 7443 },
];

function sock(cookie: bigint, dst: SockAddress): TcpSocketInfo {
  return { cookie, state: 1, src: { address: '10.0.0.11', port: 40000 + Number(cookie) }, dst, ifindex: 0, inode: Number(cookie) };
}

describe('EbpfLocalDataplane (fake kernel)', () => {
  it('open attaches with the given paths and names this netns', async () => {
    const k = new FakeKernel();
    const dp = await EbpfLocalDataplane.open({ endpoints: LOCAL, cgroup: '/cg', pinDir: '/sys/fs/bpf/x', object: '/o.bpf.o', log: quiet, sys: k });
    expect(k.attached).toEqual([{ cgroup: '/cg', pinDir: '/sys/fs/bpf/x', object: '/o.bpf.o' }]);
    expect(k.cookieSet).toBe(4242n);
    expect(dp.status()).toEqual({ mode: 'ebpf', endpoints: ['127.0.0.1:7443', '[::1]:7443'], backends: [], updates: 0, socketsReset: 0, map: {} });
  });

  it('open drops endpoints no longer configured and keeps the backends of the others (restart)', async () => {
    const k = new FakeKernel();
    k.endpoints.set('127.0.0.1|7443', { endpoint: { address: '127.0.0.1', port: 7443 }, backends: [{ address: '10.0.0.11', port: 6443 }] });
    k.endpoints.set('10.0.0.100|6443', { endpoint: { address: '10.0.0.100', port: 6443 }, backends: [{ address: '10.0.0.11', port: 6443 }] });
    const dp = await EbpfLocalDataplane.open({ endpoints: LOCAL, cgroup: '/cg', log: quiet, sys: k });
    expect([...k.endpoints.keys()]).toEqual(['127.0.0.1|7443']);
    expect(dp.status().backends).toEqual(['10.0.0.11:6443']);
  });

  it('setBackends writes each endpoint the ready backends of its own family (empty for none)', async () => {
    const k = new FakeKernel();
    const dp = await EbpfLocalDataplane.open({ endpoints: LOCAL, cgroup: '/cg', log: quiet, sys: k });
    await dp.setBackends([
      { address: '10.0.0.11', port: 6443 },
      { address: '10.0.0.12', port: 6443 },
    ]);
    expect(k.endpoints.get('127.0.0.1|7443')?.backends).toEqual([
      { address: '10.0.0.11', port: 6443 },
      { address: '10.0.0.12', port: 6443 },
    ]);
    expect(k.endpoints.get('::1|7443')?.backends).toEqual([]);
    expect(dp.status()).toMatchObject({ backends: ['10.0.0.11:6443', '10.0.0.12:6443'], updates: 1 });
  });

  it('resetBackend destroys only sockets the reverse map records as balanced to that backend', async () => {
    const k = new FakeKernel();
    const dp = await EbpfLocalDataplane.open({ endpoints: LOCAL, cgroup: '/cg', log: quiet, sys: k });
    const be = { address: '10.0.0.12', port: 6443 };
    const ep = { address: '127.0.0.1', port: 7443 };
    k.sockets = [sock(1n, be), sock(2n, be), sock(3n, be), sock(4n, { address: '10.0.0.13', port: 6443 })];
    k.reverseMap.set(1n, { endpoint: ep, backend: be }); // balanced to it
    k.reverseMap.set(3n, { endpoint: ep, backend: { address: '10.0.0.13', port: 6443 } }); // stale: another backend
    // 2n: connected to the backend directly, not through the endpoint
    expect(await dp.resetBackend(be)).toBe(1);
    expect(k.destroyed).toEqual([{ family: 4, dst: be, cookies: [1n] }]);
    expect(await dp.resetBackend({ address: '10.0.0.99', port: 6443 })).toBe(0);
    expect(k.destroyed).toHaveLength(1); // nothing to destroy: no call at all
    expect(dp.status().socketsReset).toBe(1);
  });

  it('resetBackend of an IPv4 backend also destroys the AF_INET6 sockets balanced to it from ::ffff:<endpoint>', async () => {
    const k = new FakeKernel();
    const dp = await EbpfLocalDataplane.open({ endpoints: LOCAL, cgroup: '/cg', log: quiet, sys: k });
    const be = { address: '10.0.0.12', port: 6443 };
    const mapped = { address: '::ffff:10.0.0.12', port: 6443 };
    k.sockets = [sock(1n, be), sock(2n, mapped), sock(3n, mapped)];
    // a v4-mapped connect is remembered with the IPv4 endpoint and backend (sock_lb.bpf.c)
    k.reverseMap.set(1n, { endpoint: { address: '127.0.0.1', port: 7443 }, backend: be });
    k.reverseMap.set(2n, { endpoint: { address: '127.0.0.1', port: 7443 }, backend: be });
    // 3n: a v6 socket that dialled ::ffff:10.0.0.12:6443 itself
    expect(await dp.resetBackend(be)).toBe(2);
    expect(k.destroyed).toEqual([
      { family: 4, dst: be, cookies: [1n] },
      { family: 6, dst: mapped, cookies: [2n] },
    ]);
    k.destroyed = [];
    await dp.resetBackend({ address: 'fd00::12', port: 6443 });
    expect(k.destroyed).toEqual([]); // an IPv6 backend has no mapped view
  });

  it('close keep leaves the pins; close without keep detaches; both idempotent', async () => {
    const k = new FakeKernel();
    const a = await EbpfLocalDataplane.open({ endpoints: LOCAL, cgroup: '/cg', pinDir: '/sys/fs/bpf/a', log: quiet, sys: k });
    await a.close({ keep: true });
    await a.close({ keep: false });
    expect(k.closed).toBe(1);
    expect(k.detached).toEqual([]);
    const b = await EbpfLocalDataplane.open({ endpoints: LOCAL, cgroup: '/cg', pinDir: '/sys/fs/bpf/b', log: quiet, sys: k });
    await b.close({ keep: false });
    await b.close({ keep: false });
    expect(k.detached).toEqual(['/sys/fs/bpf/b']);
    await expect(b.setBackends([])).rejects.toThrow(/closed/);
  });

  it('maps kernel failures to BallastErrors: EPERM → BALLAST_E_PERMISSION, others → BALLAST_E_DATAPLANE', async () => {
    const k = new FakeKernel();
    k.failAttach = Object.assign(new Error('bpf_object__load failed on x: EPERM (Operation not permitted)'), {
      code: 'EPERM',
      errno: 1,
      syscall: 'bpf_object__load',
    });
    const denied = await EbpfLocalDataplane.open({ endpoints: LOCAL, cgroup: '/cg', log: quiet, sys: k }).catch((e: unknown) => e);
    expect(isBallastError(denied, 'BALLAST_E_PERMISSION')).toBe(true);
    k.failAttach = Object.assign(new Error('fstatfs failed on /cg: EINVAL'), { code: 'EINVAL', errno: 22, syscall: 'fstatfs' });
    const bad = await EbpfLocalDataplane.open({ endpoints: LOCAL, cgroup: '/cg', log: quiet, sys: k }).catch((e: unknown) => e);
    expect(isBallastError(bad, 'BALLAST_E_DATAPLANE')).toBe(true);
    expect((bad as Error).message).toMatch(/cannot attach the eBPF load balancer to \/cg/);
  });

  it('rejects a malformed endpoint before touching the kernel', async () => {
    const k = new FakeKernel();
    await expect(EbpfLocalDataplane.open({ endpoints: [{ address: 'localhost', port: 7443 }], cgroup: '/cg', log: quiet, sys: k })).rejects.toThrow(TypeError);
    // the mapped form is served from the IPv4 endpoint; as a key of its own it would never match
    await expect(EbpfLocalDataplane.open({ endpoints: [{ address: '::ffff:127.0.0.1', port: 7443 }], cgroup: '/cg', log: quiet, sys: k })).rejects.toThrow(
      /endpoints\[0\]: ::ffff:127\.0\.0\.1 is IPv4-mapped/,
    );
    expect(k.attached).toEqual([]);
  });
});

describe('src/native.ts BPF wrappers check their arguments before loading the addon', () => {
  it('throws TypeErrors naming the argument', async () => {
    const { SockLb, destroySockets, listTcpSockets, cgroupPrograms } = await import('../../src/native.js');
    expect(() => SockLb.attach({ cgroup: 'relative', pinDir: '/sys/fs/bpf/x' })).toThrow(/cgroup must be an absolute path/);
    expect(() => SockLb.attach({ cgroup: '/cg', pinDir: 'x' })).toThrow(/pinDir must be an absolute path/);
    expect(() => SockLb.detach('')).toThrow(TypeError);
    expect(() => cgroupPrograms('cg')).toThrow(TypeError);
    expect(() => destroySockets({ family: 5 as 4 })).toThrow(/filter.family/);
    expect(() => destroySockets({ family: 4, dst: { address: '::1' } })).toThrow(/filter.dst.address must be an IPv4/);
    expect(() => listTcpSockets({ family: 6, src: { address: '::1', port: 0 } })).toThrow(/filter.src.port/);
    expect(() => destroySockets({ family: 4, cookies: [1 as unknown as bigint] })).toThrow(/cookies\[0\]/);
  });
});
