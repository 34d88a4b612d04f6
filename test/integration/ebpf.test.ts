/**
 * The eBPF node-local endpoint (bpf/sock_lb.bpf.c, native/bpf_loader.cc, native/sock_diag.cc,
 * src/dataplane/ebpf.ts) against the real kernel on the lab: three nodes with TLS stand-in
 * apiservers on :6443; node n1 gets its own cgroup-v2 child (bebp-n1) and runs the data plane
 * in its network namespace (lab/ebpf-endpoint.ts serve, driven over stdin), attached to
 * that cgroup with pins in /sys/fs/bpf/bebp-n1. Clients (ebpf-endpoint.ts connect, longconn,
 * prober) run in n1's namespace, inside or outside its cgroup. Nothing attaches to the
 * machine's root cgroup; everything is removed in afterAll, also after a failure.
 *
 * Needs root, a built addon and BPF object (npm run build:native) and the compiled scripts
 * (npm run build:ts).
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Lab, compiledScript, onJsonLines, type LabProcess } from '../../lab/lab.js';
import { connectFrom, startLongconn, type ConnectSummary, type Longconn } from '../../lab/cluster.js';
import type { ProbeResult, Summary } from '../../lab/clients/prober.js';
import { checkEbpf } from '../../src/dataplane/ebpf.js';
import { SockLb, cgroupPrograms, type SockLbEntry } from '../../src/native.js';
import { needs, sleep, startLab } from '../support/index.js';

const PREFIX = 'bebp';
const SUBNET = 231;
const PIN_DIR = `/sys/fs/bpf/${PREFIX}-n1`;

interface Reply {
  id?: number;
  ok?: boolean;
  event?: string;
  error?: string;
  code?: string;
  destroyed?: number;
  reused?: { maps: string[]; links: string[] };
  map?: SockLbEntry[];
  status?: { backends: string[]; endpoints: string[]; updates: number; socketsReset: number };
}

/** The data plane helper in n1's namespace: one JSON command per line in, one reply per line out. */
class Helper {
  readonly proc: LabProcess;
  readonly ready: Promise<Reply>;
  #next = 1;
  readonly #pending = new Map<number, (r: Reply) => void>();

  constructor(lab: Lab, cgroup: string) {
    const n1 = lab.nodes[0]!;
    this.proc = lab.spawn(
      n1.netns,
      [
        process.execPath,
        compiledScript('ebpf-endpoint'),
        'serve',
        '--cgroup',
        cgroup,
        '--pin-dir',
        PIN_DIR,
        '--endpoint',
        '127.0.0.1:7443',
        '--endpoint',
        '[::1]:7443',
      ],
      { hostMounts: true, stdin: true, logFile: 'ebpf-endpoint.log' },
    );
    let onReady: (r: Reply) => void = () => undefined;
    this.ready = new Promise((resolve, reject) => {
      onReady = (r) => (r.event === 'ready' ? resolve(r) : reject(new Error(`helper failed: ${JSON.stringify(r)}`)));
      void this.proc.exited.then(() => reject(new Error(`helper exited before ready: ${this.proc.output().slice(-2000)}`)));
    });
    onJsonLines<Reply>(this.proc, (o) => {
      if (o.event !== undefined) onReady(o);
      else if (o.id !== undefined) this.#pending.get(o.id)?.(o);
    });
  }

  /** Sends one command; resolves with its reply, rejects after 5 s or when it says ok: false. */
  send(cmd: Record<string, unknown>): Promise<Reply> {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no reply to ${JSON.stringify(cmd)}; output: ${this.proc.output().slice(-2000)}`)), 5000);
      this.#pending.set(id, (r) => {
        clearTimeout(timer);
        this.#pending.delete(id);
        if (r.ok) resolve(r);
        else reject(new Error(`${JSON.stringify(cmd)} failed: ${r.error} (${r.code})`));
      });
      this.proc.child.stdin?.write(`${JSON.stringify({ id, ...cmd })}\n`);
    });
  }
}

describe.skipIf(needs('bpf'))('eBPF node-local endpoint on the lab (root; skipped otherwise)', () => {
  let lab: Lab;
  let cgroup: string;
  let helper: Helper | undefined;
  const extra: LabProcess[] = [];
  const v4 = (): { address: string; port: number }[] => lab.nodes.map((n) => ({ address: n.ipv4, port: 6443 }));
  const v6 = (): { address: string; port: number }[] => lab.nodes.map((n) => ({ address: n.ipv6, port: 6443 }));

  beforeAll(async () => {
    SockLb.detach(PIN_DIR); // pins of an interrupted run
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, apiservers: true });
    compiledScript('ebpf-endpoint');
    cgroup = await lab.cgroup(lab.nodes[0]!);
    helper = new Helper(lab, cgroup);
    const ready = await helper.ready;
    expect(ready.reused).toEqual({ maps: [], links: [] });
    await helper.send({ op: 'set', backends: [...v4(), ...v6()] });
  });

  afterAll(async () => {
    helper?.proc.child.stdin?.end();
    await helper?.proc.stop('SIGTERM', 3000);
    for (const p of extra) await p.stop('SIGKILL', 1000);
    try {
      SockLb.detach(PIN_DIR);
    } finally {
      await lab?.teardown();
    }
    expect(existsSync(PIN_DIR)).toBe(false);
  });

  /** `connect` runs in n1's namespace, inside its cgroup unless `outside`. */
  const connect = (o: { address: string; port: number; tls?: boolean; count?: number; listen?: boolean; outside?: boolean }): Promise<ConnectSummary> =>
    connectFrom(lab, lab.nodes[0]!, { ...o, ...(o.outside ? {} : { cgroup }) });

  /** longconn in n1's cgroup + namespace; resolves once its first request was answered. */
  async function longconn(url: string, args: string[]): Promise<Longconn> {
    const l = await startLongconn(lab, lab.nodes[0]!, url, args, { cgroup });
    extra.push(l.proc);
    return l;
  }

  it('checkEbpf passes here (loads and attaches to a temporary cgroup it removes)', async () => {
    const r = await checkEbpf();
    expect(r.reasons).toEqual([]);
    expect(r.ok).toBe(true);
  });

  it('attach errors name the call and the cause: not cgroup v2, pinDir not on bpffs, object missing', () => {
    const err = (f: () => unknown): { code?: string; syscall?: string; message?: string } => {
      try {
        f();
      } catch (e) {
        return e as { code?: string; syscall?: string; message?: string };
      }
      throw new Error('did not throw');
    };
    expect(err(() => SockLb.attach({ cgroup: lab.dir, pinDir: `${PIN_DIR}-x` }))).toMatchObject({
      code: 'EINVAL',
      syscall: 'fstatfs',
      message: expect.stringMatching(/not a cgroup v2 directory/),
    });
    expect(err(() => SockLb.attach({ cgroup, pinDir: `${lab.dir}/pins` }))).toMatchObject({
      code: 'EINVAL',
      syscall: 'statfs',
      message: expect.stringMatching(/not on a BPF filesystem/),
    });
    expect(err(() => SockLb.attach({ cgroup, pinDir: `${PIN_DIR}-x`, object: `${lab.dir}/missing.bpf.o` }))).toMatchObject({
      code: 'ENOENT',
      syscall: 'bpf_object__open_file',
    });
    expect(SockLb.detach(`${PIN_DIR}-x`)).toBe(0); // made empty by the failed attach, removed
    expect(existsSync(`${PIN_DIR}-x`)).toBe(false);
    expect(err(() => SockLb.detach(lab.dir))).toMatchObject({ code: 'EINVAL', syscall: 'statfs' });
  });

  it('balances 127.0.0.1:7443 over every ready apiserver; TLS verifies; getpeername shows the endpoint', async () => {
    const map = (await helper!.send({ op: 'status' })).map!;
    expect(map.map((e) => `${e.endpoint.address}:${e.endpoint.port}=${e.backends.length}`).sort()).toEqual(['127.0.0.1:7443=3', '::1:7443=3']);
    const s = await connect({ address: '127.0.0.1', port: 7443, tls: true, count: 60 });
    expect(s.errors).toEqual({});
    expect(s.ok).toBe(60);
    expect(Object.keys(s.nodes).sort()).toEqual(['n1', 'n2', 'n3']);
    for (const n of ['n1', 'n2', 'n3']) expect(s.nodes[n]).toBeGreaterThanOrEqual(5);
    expect(s.peers).toEqual({ '127.0.0.1:7443': 60 });
  });

  it('a process in the namespace but outside the cgroup is not balanced (ECONNREFUSED)', async () => {
    const s = await connect({ address: '127.0.0.1', port: 7443, count: 3, outside: true });
    expect(s.errors).toEqual({ ECONNREFUSED: 3 });
  });

  it('[::1]:7443 is balanced over the IPv6 backends; getpeername shows [::1]:7443', async () => {
    const s = await connect({ address: '::1', port: 7443, tls: true, count: 30 });
    expect(s.ok).toBe(30);
    expect(Object.keys(s.nodes).sort()).toEqual(['n1', 'n2', 'n3']);
    expect(s.peers).toEqual({ '[::1]:7443': 30 });
  });

  it("127.0.0.1:6443 is not an endpoint: it still reaches n1's own apiserver", async () => {
    const s = await connect({ address: '127.0.0.1', port: 6443, tls: true, count: 10 });
    expect(s.nodes).toEqual({ n1: 10 });
    expect(s.peers).toEqual({ '127.0.0.1:6443': 10 });
  });

  it('with no backend the connect() is left untouched: refused, or served by a local listener', async () => {
    await helper!.send({ op: 'set', backends: [] });
    try {
      const map = (await helper!.send({ op: 'status' })).map!;
      expect(map.every((e) => e.backends.length === 0)).toBe(true);
      expect((await connect({ address: '127.0.0.1', port: 7443, count: 3 })).errors).toEqual({ ECONNREFUSED: 3 });
      const listened = await connect({ address: '127.0.0.1', port: 7443, count: 3, listen: true });
      expect(listened.nodes).toEqual({ self: 3 });
      expect(listened.peers).toEqual({ '127.0.0.1:7443': 3 });
    } finally {
      await helper!.send({ op: 'set', backends: [...v4(), ...v6()] });
    }
  });

  it('resetBackend destroys the balanced connections to that backend, and only those', async () => {
    const n2 = lab.nodes[1]!;
    const through = await longconn('https://127.0.0.1:7443/version', [
      '--node',
      'n2',
      '--attempts',
      '60',
      '--interval',
      '100',
      '--duration',
      '15000',
      '--timeout',
      '2000',
    ]);
    // the same backend reached directly (not through the endpoint): must survive
    const direct = await longconn(`https://${n2.ipv4}:6443/version`, ['--interval', '100', '--duration', '15000', '--timeout', '2000']);
    expect(through.events.some((e) => e.event === 'pinned')).toBe(true);
    const r = await helper!.send({ op: 'reset', backend: { address: n2.ipv4, port: 6443 } });
    expect(r.destroyed).toBe(1);
    const closedAt = Date.now();
    await through.proc.waitForOutput(/"event":"closed"/, { timeoutMs: 3000, includeExisting: true });
    const closed = through.events.find((e) => e.event === 'closed');
    console.log(`resetBackend: the client saw ${JSON.stringify(closed)} ${Date.now() - closedAt} ms after the reset`);
    expect(closed).toMatchObject({ event: 'closed' });
    expect((closed as { error: string | null }).error).not.toBeNull();
    const before = direct.results.length;
    await sleep(500);
    expect(direct.results.slice(before).length).toBeGreaterThanOrEqual(3);
    expect(direct.results.every((x) => x.ok)).toBe(true);
    expect(direct.events.some((e) => e.event === 'closed')).toBe(false);
    const status = (await helper!.send({ op: 'status' })).status!;
    expect(status.socketsReset).toBe(1);
    await through.proc.stop();
    await direct.proc.stop();
  });

  it('a restart with keep: established connections keep working and new connects never fail', async () => {
    const long = await longconn('https://127.0.0.1:7443/version', ['--interval', '50', '--duration', '6000', '--timeout', '2000']);
    const prober = lab.spawn(
      lab.nodes[0]!.netns,
      [
        process.execPath,
        compiledScript('prober'),
        '--url',
        'https://127.0.0.1:7443/version',
        '--ca',
        lab.ca.certFile,
        '--interval',
        '20',
        '--duration',
        '4000',
        '--timeout',
        '1000',
      ],
      { cgroup },
    );
    extra.push(prober);
    const probes: ProbeResult[] = [];
    let summary: Summary | undefined;
    onJsonLines<ProbeResult | Summary>(prober, (o) => {
      if ('summary' in o) summary = o;
      else probes.push(o);
    });
    await sleep(700);
    await helper!.send({ op: 'close', keep: true });
    expect(await helper!.proc.exited).toBe(0);
    expect(existsSync(`${PIN_DIR}/ballast_lb_ep`)).toBe(true);
    await sleep(700); // no agent at all: the pinned programs and maps keep balancing
    helper = new Helper(lab, cgroup);
    const ready = await helper.ready;
    expect([...ready.reused!.maps].sort()).toEqual(['ballast_lb_cfg', 'ballast_lb_ep', 'ballast_lb_rev']);
    expect([...ready.reused!.links].sort()).toEqual(['ballast_conn4', 'ballast_conn6', 'ballast_peer4', 'ballast_peer6']);
    // the endpoints kept their backends across the restart
    const map = (await helper.send({ op: 'status' })).map!;
    expect(map.map((e) => e.backends.length)).toEqual([3, 3]);
    await helper.send({ op: 'set', backends: [...v4(), ...v6()] });
    await prober.exited;
    expect(summary).toBeDefined();
    console.log(`restart: prober ${summary!.ok}/${summary!.requests} ok, nodes ${JSON.stringify(summary!.nodes)}`);
    expect(summary!.failed).toBe(0);
    expect(summary!.requests).toBeGreaterThan(100);
    await long.proc.stop();
    const ls = long.summary();
    expect(ls).toBeDefined();
    expect(ls!.failed).toBe(0);
    expect(ls!.connections).toBe(1);
    expect(long.events.filter((e) => e.event === 'closed')).toEqual([]);
  });

  it('close({ keep: false }) detaches every program and removes every pin', async () => {
    const attached = cgroupPrograms(cgroup);
    expect(attached.map((h) => h.ids.length)).toEqual([1, 1, 1, 1]);
    await helper!.send({ op: 'close', keep: false });
    expect(await helper!.proc.exited).toBe(0);
    helper = undefined;
    expect(existsSync(PIN_DIR)).toBe(false);
    expect(cgroupPrograms(cgroup)).toEqual([
      { attachType: 'connect4', ids: [] },
      { attachType: 'connect6', ids: [] },
      { attachType: 'getpeername4', ids: [] },
      { attachType: 'getpeername6', ids: [] },
    ]);
    expect((await connect({ address: '127.0.0.1', port: 7443, count: 2 })).errors).toEqual({ ECONNREFUSED: 2 });
  });
});
