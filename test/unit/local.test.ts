import { describe, expect, it } from 'vitest';
import { LocalBalancer, type LocalBackend, type LocalDataplane, type LocalDataplaneStatus } from '../../src/dataplane/local.js';
import type { BackendHealth } from '../../src/health/checker.js';
import { pinDirFor } from '../../src/dataplane/ebpf.js';

/** A data plane that records what it is told. */
class FakeDataplane implements LocalDataplane {
  readonly mode = 'ebpf' as const;
  sets: string[][] = [];
  resets: string[] = [];
  fail: Error | null = null;
  constructor(private current: string[] = []) {}
  async setBackends(ready: readonly LocalBackend[]): Promise<void> {
    if (this.fail) throw this.fail;
    this.current = ready.map((b) => `${b.address.includes(':') ? `[${b.address}]` : b.address}:${b.port}`);
    this.sets.push(this.current);
  }
  async resetBackend(b: LocalBackend): Promise<number> {
    this.resets.push(`${b.address}:${b.port}`);
    return 1;
  }
  status(): LocalDataplaneStatus {
    return { mode: 'ebpf', endpoints: ['127.0.0.1:7443'], backends: [...this.current], updates: this.sets.length, socketsReset: this.resets.length };
  }
  async close(): Promise<void> {}
}

const h = (address: string, state: BackendHealth['state'], reason: string | null = null): BackendHealth => ({
  address, state, healthy: state === 'up', lastCheck: null, lastLatencyMs: null, reason, consecutive: 1,
});
const log = { info: () => undefined, warn: () => undefined, error: () => undefined };

describe('LocalBalancer', () => {
  it('writes the healthy set, coalescing a burst of changes into one update', async () => {
    const dp = new FakeDataplane();
    let snap = [h('10.0.0.11:6443', 'up'), h('10.0.0.12:6443', 'down', 'http 500'), h('[fd00::13]:6443', 'up')];
    const lb = new LocalBalancer(dp, { snapshot: () => snap, log });
    await Promise.all([lb.sync(), lb.sync(), lb.noteHealth()]);
    expect(dp.sets).toStrictEqual([['10.0.0.11:6443', '[fd00::13]:6443']]);
    snap = [h('10.0.0.11:6443', 'up'), h('10.0.0.12:6443', 'up'), h('[fd00::13]:6443', 'up')];
    await lb.sync();
    expect(dp.sets.at(-1)).toStrictEqual(['10.0.0.11:6443', '10.0.0.12:6443', '[fd00::13]:6443']);
    // checks that change nothing write nothing
    await lb.noteHealth();
    await lb.noteHealth();
    expect(dp.sets).toHaveLength(2);
  });

  it('after a restart, backends already in the map stay until their first verdict', async () => {
    const dp = new FakeDataplane(['10.0.0.11:6443', '10.0.0.12:6443']);
    let snap = [h('10.0.0.11:6443', 'unknown'), h('10.0.0.12:6443', 'unknown'), h('10.0.0.13:6443', 'unknown')];
    const lb = new LocalBalancer(dp, { snapshot: () => snap, log });
    await lb.sync();
    expect(dp.sets).toStrictEqual([['10.0.0.11:6443', '10.0.0.12:6443']]);
    snap = [h('10.0.0.11:6443', 'down', 'ECONNREFUSED'), h('10.0.0.12:6443', 'unknown'), h('10.0.0.13:6443', 'up')];
    await lb.sync();
    expect(dp.sets.at(-1)).toStrictEqual(['10.0.0.12:6443', '10.0.0.13:6443']);
  });

  it('a dead backend is reset once per death, after the set without it; unready (draining) is never reset', async () => {
    const dp = new FakeDataplane();
    let snap = [h('10.0.0.11:6443', 'up'), h('10.0.0.12:6443', 'down', 'http 500')];
    const lb = new LocalBalancer(dp, { snapshot: () => snap, log });
    await lb.noteHealth();
    expect(dp.resets).toStrictEqual([]);
    snap = [h('10.0.0.11:6443', 'up'), h('10.0.0.12:6443', 'down', 'timeout')];
    await lb.noteHealth();
    await lb.noteHealth();
    expect(dp.resets).toStrictEqual(['10.0.0.12:6443']);
    expect(dp.sets.at(-1)).toStrictEqual(['10.0.0.11:6443']);
    // back up, then dead again: a second reset
    snap = [h('10.0.0.11:6443', 'up'), h('10.0.0.12:6443', 'up')];
    await lb.noteHealth();
    snap = [h('10.0.0.11:6443', 'up'), h('10.0.0.12:6443', 'down', 'refused')];
    await lb.noteHealth();
    expect(dp.resets).toStrictEqual(['10.0.0.12:6443', '10.0.0.12:6443']);
  });

  it('a failed update keeps the previous set, is counted, and resets nothing', async () => {
    const dp = new FakeDataplane(['10.0.0.11:6443']);
    dp.fail = new Error('EPERM');
    const lb = new LocalBalancer(dp, { snapshot: () => [h('10.0.0.11:6443', 'down', 'timeout')], log });
    await lb.noteHealth();
    expect(lb.status()).toMatchObject({ backends: ['10.0.0.11:6443'], failures: 1, lastError: 'EPERM' });
    expect(dp.resets).toStrictEqual([]);
  });
});

describe('pinDirFor', () => {
  it('one pin directory per cgroup: the root cgroup gets the default', () => {
    expect(pinDirFor('/sys/fs/cgroup')).toBe('/sys/fs/bpf/ballast/local');
    expect(pinDirFor('/sys/fs/cgroup/unified/')).toBe('/sys/fs/bpf/ballast/local');
    expect(pinDirFor('/sys/fs/cgroup/unified/bloc-n1')).toMatch(/^\/sys\/fs\/bpf\/ballast\/local-bloc-n1-[0-9a-f]{8}$/);
    expect(pinDirFor('/sys/fs/cgroup/system.slice/kubelet.service')).toMatch(/^\/sys\/fs\/bpf\/ballast\/local-system.slice_kubelet.service-[0-9a-f]{8}$/);
    // the same cgroup always gets the same directory (a restarted agent finds its pins) …
    expect(pinDirFor('/sys/fs/cgroup/unified/bloc-n1/')).toBe(pinDirFor('/sys/fs/cgroup/unified/bloc-n1'));
    // … and names that sanitize alike stay apart
    expect(pinDirFor('/sys/fs/cgroup/a/b')).not.toBe(pinDirFor('/sys/fs/cgroup/a_b'));
  });
});
