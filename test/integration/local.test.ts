/**
 * The node-local API endpoint through the agent: `ballast run` with `localEndpoint`
 * on lab node n1, in `ebpf` mode (cgroup connect4/6 + getpeername4/6 programs, attached to n1's
 * own cgroup-v2 child, pins under /sys/fs/bpf/ballast/local-<prefix>-n1) and in `proxy` mode.
 * Clients run in n1's network namespace, inside its cgroup unless a test says otherwise. Three
 * TLS stand-in apiservers; health every 200 ms, fall/rise 2. Nothing attaches to the machine's
 * root cgroup; pins, programs and the cgroup are removed after each test and at the end.
 */
import { existsSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab, runProber } from '../../lab/lab.js';
import { cliPath, connectFrom, restoreNodes, startAgent, startLongconn, type AgentSettings, type LabAgent, type Longconn } from '../../lab/cluster.js';
import { pinDirFor } from '../../src/dataplane/ebpf.js';
import { removeEndpointPins } from '../../lab/pins.js';
import { SockLb, cgroupPrograms } from '../../src/native.js';
import type { StatusDocument } from '../../src/observe/status.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bloc';
const SUBNET = 233;
const INTERVAL_MS = 200;
const FALL = 2;
/** Scheduling on 2 cores, the `ballast status` round trip, one check's jitter. */
const MARGIN_MS = 250;

describe.skipIf(needs('bpf'))('node-local endpoint through the agent (root; skipped otherwise)', () => {
  let lab: Lab;
  let cgroup: string;
  let pinDir: string;
  let agents: LabAgent[] = [];
  const extra: { stop(): Promise<unknown> }[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: true, apiservers: true });
    cgroup = await lab.cgroup(lab.nodes[0]!);
    pinDir = pinDirFor(cgroup);
  });
  afterEach(async () => {
    for (const p of extra.splice(0)) await p.stop().catch(() => undefined);
    await Promise.all(agents.map((a) => a.stop('SIGKILL').catch(() => undefined)));
    agents = [];
    if (existsSync(pinDir)) SockLb.detach(pinDir);
    await lab.exec(lab.nodes[0]!.netns, ['nft', 'delete', 'table', 'ip', 'ballast'], { allowFail: true });
    await lab.exec(lab.nodes[0]!.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
    await restoreNodes(lab);
  });
  afterAll(async () => {
    try {
      if (pinDir) removeEndpointPins(pinDir);
    } finally {
      await lab?.teardown();
    }
  });

  const n1 = (): Lab['nodes'][number] => lab.nodes[0]!;

  /** `ballast run` on n1 with a local endpoint; `election: false` makes it a worker (no vrrp, no VIP). */
  async function startLocal(o: {
    mode: 'ebpf' | 'proxy';
    election?: boolean;
    family?: 4 | 6;
    address?: string | string[];
    keepOnStop?: boolean;
    force?: boolean;
    failOpen?: boolean;
  }): Promise<LabAgent> {
    const settings: AgentSettings = {
      priority: 150,
      balance: true,
      ...(o.failOpen === undefined ? {} : { failOpen: o.failOpen }),
      healthInterval: `${INTERVAL_MS}ms`,
      hostMounts: true,
      ...(o.family === 6 ? { family: 6 as const } : {}),
      ...(o.election === false ? { noElection: true } : {}),
      extra: {
        localEndpoint: { address: o.address ?? '127.0.0.1:7443', cgroup, ...(o.force ? { force: true } : {}) },
        dataplane: { vip: 'nftables', local: o.mode, keepOnStop: o.keepOnStop ?? false },
      },
    };
    const a = await startAgent(lab, n1(), settings);
    agents.push(a);
    return a;
  }
  const localOf = async (a: LabAgent): Promise<StatusDocument['local']> => (await a.anyStatus()).local;
  /** Waits until the endpoint balances to exactly `n` backends; returns the status. */
  const backendsIn = (a: LabAgent, n: number, timeoutMs = 5000): Promise<StatusDocument['local']> =>
    waitFor(
      () => localOf(a),
      (l) => l.mode !== 'off' && l.backends.length === n,
      { timeoutMs, intervalMs: 50, what: `${n} backends in the local endpoint` },
    );
  const inCgroup = (o: { address: string; port: number; tls?: boolean; count?: number; listen?: boolean }) => connectFrom(lab, n1(), { ...o, cgroup });
  async function longconn(url: string, args: string[]): Promise<Longconn> {
    const l = await startLongconn(lab, n1(), url, args, { cgroup });
    extra.push({ stop: () => l.proc.stop('SIGTERM', 3000) });
    return l;
  }

  it("ebpf: 127.0.0.1:7443 reaches every ready apiserver, getpeername says 127.0.0.1:7443, TLS verifies; outside the cgroup nothing changes; 127.0.0.1:6443 stays n1's; VIP:6443 from n1 is balanced in the kernel", async () => {
    const a = await startLocal({ mode: 'ebpf' });
    const local = await backendsIn(a, 3);
    expect(local).toMatchObject({ mode: 'ebpf', endpoints: ['127.0.0.1:7443', `${lab.vip4}:6443`] });
    const all = lab.nodes.map((n) => `${n.ipv4}:6443`).sort();
    expect([...(local.mode === 'off' ? [] : local.backends)].sort()).toStrictEqual(all);
    // what the kernel's map holds, read back through /status
    const map = local.mode === 'off' ? {} : (local.map ?? {});
    expect(Object.keys(map).sort()).toStrictEqual(['127.0.0.1:7443', `${lab.vip4}:6443`].sort());
    for (const backends of Object.values(map)) expect([...backends].sort()).toStrictEqual(all);
    expect(cgroupPrograms(cgroup).map((p) => [p.attachType, p.ids.length])).toStrictEqual([
      ['connect4', 1],
      ['connect6', 1],
      ['getpeername4', 1],
      ['getpeername6', 1],
    ]);

    const s = await inCgroup({ address: '127.0.0.1', port: 7443, tls: true, count: 60 });
    expect(s).toMatchObject({ count: 60, ok: 60, peers: { '127.0.0.1:7443': 60 }, errors: {} });
    for (const n of lab.nodes) expect(s.nodes[n.name] ?? 0, n.name).toBeGreaterThanOrEqual(5);

    const outside = await connectFrom(lab, n1(), { address: '127.0.0.1', port: 7443, count: 3 });
    expect(outside.errors).toStrictEqual({ ECONNREFUSED: 3 });
    expect((await inCgroup({ address: '127.0.0.1', port: 6443, tls: true, count: 10 })).nodes).toStrictEqual({ n1: 10 });

    const vip = await inCgroup({ address: lab.vip4, port: 6443, tls: true, count: 30 });
    expect(vip).toMatchObject({ ok: 30, peers: { [`${lab.vip4}:6443`]: 30 } });
    expect(Object.keys(vip.nodes).length).toBeGreaterThanOrEqual(2);
  });

  it("ebpf: an apiserver process stops: the client's error window is at most 150 ms, and the backend leaves the map", async () => {
    const a = await startLocal({ mode: 'ebpf' });
    await backendsIn(a, 3);
    const p = runProber(lab, { url: 'https://127.0.0.1:7443/version', netns: n1().netns, cgroup, intervalMs: 10, durationMs: 4000, timeoutMs: 250 });
    extra.push({ stop: () => p.stop() });
    await sleep(1000);
    await lab.stopApiserver(lab.nodes[1]!);
    const stopped = p.results().length;
    await backendsIn(a, 2, 3000);
    const report = await p.done;
    const failed = report.results.filter((r) => !r.ok);
    const window = failed.length === 0 ? 0 : failed.at(-1)!.t - failed[0]!.t;
    expect(window).toBeLessThanOrEqual(150);
    expect(report.results.slice(stopped + 30).every((r) => r.ok && r.node !== 'n2')).toBe(true);
    expect(a.logLines().some((l) => l.msg === 'backend judged dead from its connections' && l.backend === `${lab.nodes[1]!.ipv4}:6443`)).toBe(true);
    console.log(`ebpf local endpoint, apiserver stopped: ${failed.length} failed of ${report.requests}, error window ${window.toFixed(1)} ms`);
  });

  it('ebpf: unready leaves the map within fall × interval and its connection drains; its node dying resets that connection and the reconnect lands on a live backend', async () => {
    const a = await startLocal({ mode: 'ebpf' });
    await backendsIn(a, 3);
    const n3 = lab.nodes[2]!;
    const l = await longconn('https://127.0.0.1:7443/version', [
      '--node',
      'n3',
      '--interval',
      '100',
      '--duration',
      '15000',
      '--reconnect',
      '--max-connections',
      '3',
    ]);
    const t0 = Date.now();
    await lab.setReady(n3, false);
    await backendsIn(a, 2, FALL * INTERVAL_MS + INTERVAL_MS + MARGIN_MS + 1000);
    const left = Date.now() - t0;
    expect(left).toBeLessThanOrEqual(FALL * INTERVAL_MS + INTERVAL_MS + MARGIN_MS);
    // draining: the pinned connection keeps being served by n3
    await sleep(1000);
    expect(l.events.filter((e) => e.event === 'closed')).toStrictEqual([]);
    expect(l.results.slice(-5).every((r) => r.ok && r.node === 'n3')).toBe(true);
    // now n3 goes silent (its link): dead, so what was sent to it is reset
    const t1 = Date.now();
    await lab.linkDown(n3);
    const closed = await waitFor(
      async () => l.events.find((e) => e.event === 'closed'),
      (e) => e !== undefined,
      { timeoutMs: 5000, intervalMs: 20, what: 'the pinned connection to be reset' },
    );
    const resetAfter = Number(closed!.at) - t1;
    expect(resetAfter).toBeLessThanOrEqual(INTERVAL_MS + 200 + 1000);
    await waitFor(
      async () => l.results.filter((r) => r.ok && r.node !== 'n3').length,
      (n) => n >= 3,
      { timeoutMs: 3000, intervalMs: 50, what: 'answers from a live backend after the reconnect' },
    );
    expect(
      a.logLines().some((x) => x.msg === 'dead backend: local endpoint connections reset' && x.backend === `${n3.ipv4}:6443` && Number(x.sockets) >= 1),
    ).toBe(true);
    console.log(`ebpf local endpoint: unready out of the map after ${left} ms; connection to the dead node reset after ${resetAfter} ms`);
  });

  it('ebpf: agent restarts (SIGKILL, then SIGTERM with keepOnStop) keep established connections and new connections work throughout', async () => {
    const first = await startLocal({ mode: 'ebpf', election: false, keepOnStop: true });
    await backendsIn(first, 3);
    const l = await longconn('https://127.0.0.1:7443/version', ['--interval', '100', '--duration', '12000']);
    const p = runProber(lab, { url: 'https://127.0.0.1:7443/version', netns: n1().netns, cgroup, intervalMs: 20, durationMs: 9000, timeoutMs: 1000 });
    extra.push({ stop: () => p.stop() });
    await sleep(1000);
    await first.stop('SIGKILL');
    agents = [];
    await sleep(500);
    const second = await startLocal({ mode: 'ebpf', election: false, keepOnStop: true });
    await backendsIn(second, 3);
    expect(second.logLines().some((x) => x.msg === 'ebpf data plane taken over (programs replaced in place)')).toBe(true);
    await sleep(1000);
    expect(await second.stop('SIGTERM')).toBe(0);
    agents = [];
    expect(existsSync(pinDir)).toBe(true);
    await sleep(500);
    const third = await startLocal({ mode: 'ebpf', election: false, keepOnStop: true });
    await backendsIn(third, 3);
    const report = await p.done;
    expect(report.failed).toBe(0);
    expect(report.requests).toBeGreaterThan(200);
    expect(l.events.filter((e) => e.event === 'closed')).toStrictEqual([]);
    expect(l.results.every((r) => r.ok)).toBe(true);
    console.log(
      `ebpf local endpoint over two agent restarts: ${report.requests} requests, 0 failed; the long-lived connection answered ${l.results.length} times`,
    );
  });

  it('ebpf: with zero ready backends the connect() is not rewritten', async () => {
    // every backend unready at once would fail open (test/integration/fail-open.test.ts): off here
    const a = await startLocal({ mode: 'ebpf', election: false, failOpen: false });
    await backendsIn(a, 3);
    for (const n of lab.nodes) await lab.setReady(n, false);
    await backendsIn(a, 0);
    expect((await inCgroup({ address: '127.0.0.1', port: 7443, count: 3 })).errors).toStrictEqual({ ECONNREFUSED: 3 });
    expect((await inCgroup({ address: '127.0.0.1', port: 7443, count: 3, listen: true })).nodes).toStrictEqual({ self: 3 });
  });

  it("ebpf: a control-plane node with an IPv4 VIP serves [::1]:7443 from the IPv6 backends, and the VIP's DNAT keeps the IPv4 ones", async () => {
    const both = [...lab.nodes.map((n) => `${n.ipv4}:6443`), ...lab.nodes.map((n) => `[${n.ipv6}]:6443`)];
    const a = await startAgent(lab, n1(), {
      priority: 150,
      hostMounts: true,
      extra: {
        apiserver: {
          port: 6443,
          backends: both,
          health: { caFile: lab.ca.certFile, interval: `${INTERVAL_MS}ms`, timeout: `${INTERVAL_MS}ms`, rise: 2, fall: FALL },
        },
        localEndpoint: { address: ['127.0.0.1:7443', '[::1]:7443'], cgroup },
        dataplane: { vip: 'nftables', local: 'ebpf', keepOnStop: false },
      },
    });
    agents.push(a);
    const local = await backendsIn(a, 6);
    expect(local.mode === 'off' ? {} : local.map).toMatchObject({ '[::1]:7443': expect.arrayContaining(lab.nodes.map((n) => `[${n.ipv6}]:6443`)) });
    const s = await inCgroup({ address: '::1', port: 7443, tls: true, count: 30 });
    expect(s).toMatchObject({ ok: 30, peers: { '[::1]:7443': 30 } });
    const st = await a.status();
    expect(st.dataplane.mode === 'nftables' ? [...st.dataplane.backends].sort() : []).toStrictEqual(lab.nodes.map((n) => `${n.ipv4}:6443`).sort());
  });

  it('ebpf: a worker node (no election) with [::1]:7443 and IPv6 backends', async () => {
    const a = await startLocal({ mode: 'ebpf', election: false, family: 6, address: '[::1]:7443' });
    expect((await a.anyStatus()).state).toBe('none');
    await backendsIn(a, 3);
    const s = await inCgroup({ address: '::1', port: 7443, tls: true, count: 30 });
    expect(s).toMatchObject({ ok: 30, peers: { '[::1]:7443': 30 } });
    expect(Object.keys(s.nodes).sort()).toStrictEqual(['n1', 'n2', 'n3']);
  });

  it('an endpoint port something already listens on: exit 2, BALLAST_E_LOCAL_ENDPOINT_IN_USE, nothing attached; force starts anyway', async () => {
    const listener = lab.spawn(n1().netns, [process.execPath, '-e', "require('net').createServer().listen(7443, '127.0.0.1', () => console.log('listening'))"]);
    extra.push({ stop: () => listener.stop('SIGTERM', 2000) });
    await listener.waitForOutput(/listening/, { timeoutMs: 5000, includeExisting: true });
    const config = `${lab.dir}/n1-in-use.yaml`;
    const { writeFileSync } = await import('node:fs');
    const { stringify } = await import('yaml');
    writeFileSync(
      config,
      stringify({
        localEndpoint: { address: '127.0.0.1:7443', cgroup },
        apiserver: { backends: lab.nodes.map((n) => `${n.ipv4}:6443`), health: { caFile: lab.ca.certFile } },
      }),
    );
    const r = await lab.exec(n1().netns, [process.execPath, cliPath(), 'run', '--config', config], { allowFail: true, timeoutMs: 10_000, hostMounts: true });
    expect(r.code).toBe(2);
    expect(r.stdout + r.stderr).toMatch(/BALLAST_E_LOCAL_ENDPOINT_IN_USE/);
    expect(r.stdout + r.stderr).toMatch(/already listens on 127\.0\.0\.1:7443/);
    expect(existsSync(pinDir)).toBe(false);
    expect(cgroupPrograms(cgroup).every((p) => p.ids.length === 0)).toBe(true);
    const forced = await startLocal({ mode: 'ebpf', election: false, force: true });
    await backendsIn(forced, 3);
  });

  it('one agent per cgroup on the host: a second one (another namespace) is refused and the first keeps serving; a wrong cgroup exits 2', async () => {
    const a = await startLocal({ mode: 'ebpf', election: false });
    await backendsIn(a, 3);
    const { writeFileSync } = await import('node:fs');
    const { stringify } = await import('yaml');
    const second = `${lab.dir}/n2-same-cgroup.yaml`;
    const backends = { backends: lab.nodes.map((n) => `${n.ipv4}:6443`), health: { caFile: lab.ca.certFile } };
    writeFileSync(second, stringify({ localEndpoint: { cgroup }, apiserver: backends }));
    const r = await lab.exec(lab.nodes[1]!.netns, [process.execPath, cliPath(), 'run', '--config', second], {
      allowFail: true,
      timeoutMs: 10_000,
      hostMounts: true,
    });
    expect(r.code).toBe(2);
    expect(r.stdout + r.stderr).toMatch(/BALLAST_E_LOCAL_ENDPOINT_IN_USE/);
    expect(r.stdout + r.stderr).toMatch(/another ballast agent on this host already serves the local endpoint for cgroup/);
    // the first one's programs are untouched
    expect((await inCgroup({ address: '127.0.0.1', port: 7443, tls: true, count: 6 })).ok).toBe(6);
    const wrong = `${lab.dir}/n2-wrong-cgroup.yaml`;
    for (const bad of [`${cgroup}-missing`, lab.dir]) {
      writeFileSync(wrong, stringify({ localEndpoint: { cgroup: bad }, apiserver: backends }));
      const w = await lab.exec(lab.nodes[1]!.netns, [process.execPath, cliPath(), 'run', '--config', wrong], {
        allowFail: true,
        timeoutMs: 10_000,
        hostMounts: true,
      });
      expect(w.code, bad).toBe(2);
      expect(w.stdout + w.stderr).toMatch(/BALLAST_E_CGROUP/);
      expect(w.stdout + w.stderr).toMatch(/localEndpoint\.cgroup: /);
    }
  });

  it('proxy: the same endpoint served by the agent: spread, TLS, an apiserver stopping costs no request once stopped, zero backends refuse', async () => {
    // every backend unready at once would fail open (test/integration/fail-open.test.ts): off here
    const a = await startLocal({ mode: 'proxy', election: false, failOpen: false });
    const local = await backendsIn(a, 3);
    expect(local.mode).toBe('proxy');
    expect(a.logLines().some((x) => /user-space proxy/.test(String(x.msg)))).toBe(true);
    const s = await inCgroup({ address: '127.0.0.1', port: 7443, tls: true, count: 60 });
    expect(s).toMatchObject({ ok: 60, peers: { '127.0.0.1:7443': 60 } });
    for (const n of lab.nodes) expect(s.nodes[n.name] ?? 0, n.name).toBeGreaterThanOrEqual(5);
    // the proxy serves every process of the namespace, not a cgroup
    expect((await connectFrom(lab, n1(), { address: '127.0.0.1', port: 7443, tls: true, count: 3 })).ok).toBe(3);

    const p = runProber(lab, { url: 'https://127.0.0.1:7443/version', netns: n1().netns, intervalMs: 10, durationMs: 3000, timeoutMs: 500 });
    extra.push({ stop: () => p.stop() });
    await sleep(800);
    await lab.stopApiserver(lab.nodes[1]!);
    const stopped = p.results().length;
    const report = await p.done;
    // a request in flight on n2 when its process exits can fail; none after that
    expect(report.results.slice(stopped).filter((r) => !r.ok)).toStrictEqual([]);
    expect(report.failed).toBeLessThanOrEqual(3);
    await lab.startApiserver(lab.nodes[1]!);

    for (const n of lab.nodes) await lab.setReady(n, false);
    await backendsIn(a, 0);
    const none = await inCgroup({ address: '127.0.0.1', port: 7443, tls: true, count: 2 });
    expect(none.ok).toBe(0);
    console.log(`proxy local endpoint, apiserver stopped: ${report.failed} failed of ${report.requests}`);
  });

  it('`ballast check` says this host can run the eBPF mode', async () => {
    const r = await lab.exec(n1().netns, [process.execPath, cliPath(), 'check', '--json'], { hostMounts: true });
    expect(JSON.parse(r.stdout)).toStrictEqual({ ok: true, reasons: [] });
  });
});
