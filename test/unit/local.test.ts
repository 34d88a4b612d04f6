import { describe, expect, it } from 'vitest';
import { LOCAL_PLANE_MESSAGES, LocalBalancer, type LocalBackend, type LocalDataplane, type LocalDataplaneStatus } from '../../src/dataplane/local.js';
import { Reconciler } from '../../src/dataplane/reconcile.js';
import { pinDirFor } from '../../src/dataplane/ebpf.js';
import { CAUSES, FakeSource, recordingLog, verdict } from './verdict-fakes.js';

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

const A = '10.0.0.11:6443';
const B = '10.0.0.12:6443';
const C = '[fd00::13]:6443';

function setup(addresses: string[], dp = new FakeDataplane()) {
  const source = new FakeSource(addresses);
  const { log, logs } = recordingLog();
  const r = new Reconciler(new LocalBalancer(dp, log), source, { log, ...LOCAL_PLANE_MESSAGES });
  r.follow();
  return { dp, source, r, logs, status: () => ({ ...r.plane.status(), ...r.status() }) };
}

describe('LocalBalancer (local endpoint plane) under the reconcile', () => {
  it('writes the ready set in the checker’s order, coalescing a burst; an unchanged set is not rewritten', async () => {
    const { dp, source, r } = setup([A, B, C]);
    source.judge(verdict(C, 'up'));
    source.judge(verdict(B, CAUSES.http500));
    source.judge(verdict(A, 'up'));
    await r.sync();
    expect(dp.sets).toStrictEqual([[A, C]]);
    source.judge(verdict(B, 'up'));
    await r.sync();
    expect(dp.sets.at(-1)).toStrictEqual([A, B, C]);
    await r.sync();
    await r.sync();
    expect(dp.sets).toHaveLength(2);
  });

  it('after a restart, backends already in the map stay until their first verdict', async () => {
    const { dp, source, r } = setup(['10.0.0.11:6443', '10.0.0.12:6443', '10.0.0.13:6443'], new FakeDataplane([A, B]));
    await r.sync();
    expect(dp.sets).toStrictEqual([[A, B]]);
    source.judge(verdict(A, CAUSES.refused));
    source.judge(verdict('10.0.0.13:6443', 'up'));
    await r.sync();
    expect(dp.sets.at(-1)).toStrictEqual([B, '10.0.0.13:6443']);
  });

  it('a dead backend is reset once per death, after the set without it; unready (draining) is never reset', async () => {
    const { dp, source, r, logs } = setup([A, B]);
    source.judge(verdict(A, 'up'));
    source.judge(verdict(B, CAUSES.http500));
    await r.sync();
    expect(dp.resets).toStrictEqual([]);
    source.judge(verdict(B, { kind: 'timeout' }));
    await r.sync();
    await r.sync();
    expect(dp.resets).toStrictEqual(['10.0.0.12:6443']);
    expect(dp.sets.at(-1)).toStrictEqual([A]);
    expect(logs.info).toStrictEqual(['dead backend: local endpoint connections reset']);
    source.judge(verdict(B, 'up'));
    source.judge(verdict(B, CAUSES.refused));
    await r.sync();
    expect(dp.resets).toStrictEqual(['10.0.0.12:6443', '10.0.0.12:6443']);
  });

  it('a failed update keeps the previous set, is counted, and resets nothing', async () => {
    const dp = new FakeDataplane([A]);
    dp.fail = new Error('EPERM');
    const { source, r, status, logs } = setup([A], dp);
    source.judge(verdict(A, { kind: 'timeout' }));
    await r.sync();
    expect(status()).toMatchObject({ backends: [A], failures: 1, lastError: 'EPERM' });
    expect(logs.error).toStrictEqual(['local endpoint update failed; the previous backends stay']);
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
