/**
 * The local TCP proxy (src/dataplane/proxy.ts) on the lab: the proxy runs inside n1's network
 * namespace (lab/proxy-endpoint.ts, driven through a FIFO the way the agent would drive it),
 * listening on 127.0.0.1:7443 and [::1]:7443, in front of the three TLS stand-in apiservers.
 * The clients (lab/clients/prober.ts, lab/clients/longconn.ts) run in n1 too and verify the serving
 * certificates against the lab CA: the proxy passes TLS through, so 127.0.0.1 / ::1 must be
 * SANs of every apiserver's certificate (they are in the lab's). Also: nginx configured as
 * kubespray's node-local proxy (lab/peers/nginx.ts), the baseline for a later benchmark.
 */
import { constants, closeSync, openSync, statSync, writeSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab, runProber, compiledScript, onJsonLines, packageRoot, type LabNode, type LabProcess, type ProbeResult, type Summary } from '../../lab/lab.js';
import { restoreNodes, startLongconn } from '../../lab/cluster.js';
import { startNginx } from '../../lab/peers/nginx.js';
import type { LongconnEvent } from '../../lab/clients/longconn.js';
import type { ProxyDataplaneStatus } from '../../src/dataplane/proxy.js';
import type { LocalBackend } from '../../src/dataplane/local.js';
import { needs, sleep, startLab } from '../support/index.js';

const PREFIX = 'bprx';
const SUBNET = 232;
const PORT = 7443;
const NGINX_PORT = 7444;

/** An answer line of the proxy runner. */
type Ack = { ack: number; ok: true; status: ProxyDataplaneStatus; reset?: number } | { ack: number; ok: false; error: string };

describe.skipIf(needs('root'))('the local proxy on the lab (root; skipped otherwise)', () => {
  let lab: Lab;
  let n1: LabNode;
  let runner: LabProcess;
  let fifoFd = -1;
  let nextId = 1;
  const waiting = new Map<number, (a: Ack) => void>();
  const clients: LabProcess[] = [];

  const v4 = (n: LabNode): LocalBackend => ({ address: n.ipv4, port: 6443 });
  const v6 = (n: LabNode): LocalBackend => ({ address: n.ipv6, port: 6443 });
  const allBackends = (): LocalBackend[] => [...lab.nodes.map(v4), ...lab.nodes.map(v6)];

  /** Sends one command to the runner and resolves with its ack (bounded: 5 s). */
  function command(cmd: Record<string, unknown>): Promise<Extract<Ack, { ok: true }>> {
    const id = nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        waiting.delete(id);
        reject(new Error(`proxy runner: no ack for ${JSON.stringify(cmd)} within 5000 ms; output:\n${runner.output().slice(-2000)}`));
      }, 5000);
      waiting.set(id, (a) => {
        clearTimeout(timer);
        if (a.ok) resolve(a);
        else reject(new Error(`proxy runner refused ${JSON.stringify(cmd)}: ${a.error}`));
      });
      writeSync(fifoFd, `${JSON.stringify({ id, ...cmd })}\n`);
    });
  }
  const setBackends = (backends: LocalBackend[]) => command({ op: 'setBackends', backends });
  const status = async (): Promise<ProxyDataplaneStatus> => (await command({ op: 'status' })).status;

  /** The prober in n1 for `durationMs` (bounded by lab.exec); resolves with its results and summary. */
  async function probeFromN1(url: string, o: { intervalMs: number; durationMs: number; timeoutMs: number }): Promise<Summary & { results: ProbeResult[] }> {
    const r = await lab.exec(
      n1.netns,
      [
        process.execPath,
        compiledScript('prober'),
        '--url',
        url,
        '--ca',
        lab.ca.certFile,
        '--interval',
        String(o.intervalMs),
        '--duration',
        String(o.durationMs),
        '--timeout',
        String(o.timeoutMs),
      ],
      { timeoutMs: o.durationMs + o.timeoutMs + 15_000 },
    );
    const objs = r.stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as ProbeResult | Summary);
    const summary = objs.find((x): x is Summary => 'summary' in x);
    if (!summary) throw new Error(`prober printed no summary:\n${r.stdout}${r.stderr}`);
    return { ...summary, results: objs.filter((x): x is ProbeResult => !('summary' in x)).sort((a, b) => a.t - b.t) };
  }

  beforeAll(async () => {
    for (const s of ['proxy-endpoint', 'longconn', 'prober'] as const) compiledScript(s); // refuses a missing or stale build
    const src = join(packageRoot(), 'src', 'dataplane', 'proxy.ts');
    if (statSync(src).mtimeMs > statSync(join(packageRoot(), 'dist', 'src', 'dataplane', 'proxy.js')).mtimeMs)
      throw new Error('dist/src/dataplane/proxy.js is stale: run npm run build:ts');
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3 });
    n1 = lab.nodes[0]!;
    await lab.startApiservers();

    // lab.spawn gives no stdin: the runner reads its commands from a FIFO in lab.dir. O_RDWR
    // never blocks on Linux (no reader needed yet) and keeps the FIFO open between writes.
    const fifo = join(lab.dir, 'n1-proxy.cmd');
    const mk = spawnSync('mkfifo', ['-m', '0600', fifo], { encoding: 'utf8', timeout: 5000 });
    if (mk.status !== 0) throw new Error(`mkfifo ${fifo}: ${mk.stderr}`);
    fifoFd = openSync(fifo, constants.O_RDWR);
    runner = lab.spawn(
      n1.netns,
      [process.execPath, compiledScript('proxy-endpoint'), '--endpoint', `127.0.0.1:${PORT}`, '--endpoint', `[::1]:${PORT}`, '--commands', fifo],
      { logFile: 'n1-proxy.log' },
    );
    onJsonLines<Ack | { event: string }>(runner, (o) => {
      if ('ack' in o) waiting.get(o.ack)?.(o);
    });
    await runner.waitForOutput(/"event":"listening"/, { timeoutMs: 10_000, includeExisting: true });
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.stop('SIGKILL', 2000)));
    await restoreNodes(lab);
    await setBackends(allBackends());
  });
  afterAll(async () => {
    if (runner) {
      await command({ op: 'close' }).catch(() => undefined);
      expect(await runner.stop('SIGTERM', 3000)).toBe(0);
    }
    if (fifoFd >= 0) closeSync(fifoFd);
    await lab?.teardown();
  });

  it('127.0.0.1:7443 serves /version from all three apiservers, round-robin, TLS verified end to end', async () => {
    const before = (await setBackends(allBackends())).status;
    expect(before.endpoints).toEqual([`127.0.0.1:${PORT}`, `[::1]:${PORT}`]);
    expect(before.backends).toEqual(allBackends().map((b) => (b.address.includes(':') ? `[${b.address}]:6443` : `${b.address}:6443`)));
    const sum = await probeFromN1(`https://127.0.0.1:${PORT}/version`, { intervalMs: 20, durationMs: 600, timeoutMs: 2000 });
    expect(sum.failed).toBe(0);
    expect(Object.keys(sum.nodes).sort()).toEqual(['n1', 'n2', 'n3']);
    // round-robin: the counts differ by at most one
    const counts = Object.values(sum.nodes);
    expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
    const after = await status();
    expect(after.proxy.accepted - before.proxy.accepted).toBe(sum.requests);
    expect(after.proxy.piped - before.proxy.piped).toBe(sum.requests);
    expect(after.proxy.failedOver - before.proxy.failedOver).toBe(0);
  });

  it('[::1]:7443 serves from the IPv6 backends; with no IPv4 backend, 127.0.0.1 clients are reset', async () => {
    await setBackends(lab.nodes.map(v6));
    const six = await probeFromN1(`https://[::1]:${PORT}/version`, { intervalMs: 20, durationMs: 300, timeoutMs: 2000 });
    expect(six.failed).toBe(0);
    expect(Object.keys(six.nodes).sort()).toEqual(['n1', 'n2', 'n3']);
    const four = await probeFromN1(`https://127.0.0.1:${PORT}/version`, { intervalMs: 50, durationMs: 200, timeoutMs: 2000 });
    expect(four.ok).toBe(0);
    for (const r of four.results) expect(r.ok ? 'ok' : r.error).toBe('ECONNRESET');
  });

  it('an apiserver that stops costs the client no failed request: refused connects move on', async () => {
    await setBackends(allBackends());
    const s0 = await status();
    const prober = runProber(lab, { url: `https://127.0.0.1:${PORT}/version`, netns: n1.netns, intervalMs: 10, durationMs: 3000, timeoutMs: 1000 });
    clients.push(prober.process);
    await sleep(800);
    const faultFrom = prober.now();
    // the proxy is not told: n2 stays in the ready set, its port now refuses
    await lab.stopApiserver(lab.nodes[1]!);
    const faultTo = prober.now();
    // done: the prober exited on its own bounds with its summary line
    const { results } = await prober.done;
    expect(await prober.process.exited).toBe(0);
    const failures = results.filter((r) => !r.ok);
    const after = results.filter((r) => r.t > faultTo);
    const s1 = await status();
    console.log(
      `apiserver stop behind the proxy: ${results.length} requests, ${failures.length} failed ` +
        `(${failures.map((f) => `t=${f.t} ${f.ok ? '' : f.error}`).join(', ') || 'none'}), fault window ${faultFrom}..${faultTo} ms, ` +
        `failed over ${s1.proxy.failedOver - s0.proxy.failedOver}`,
    );
    // a request can only fail if n2 cut it mid-exchange while stopping (it closes every socket);
    // once n2 is gone, every connect to it is refused and retried: none fails
    for (const f of failures) expect(f.t).toBeLessThanOrEqual(faultTo);
    // …and only the few that were in flight on n2 at that instant (10 ms apart, ~10 ms each)
    expect(failures.length).toBeLessThanOrEqual(3);
    expect(after.length).toBeGreaterThan(100);
    expect(after.filter((r) => !r.ok)).toEqual([]);
    expect(after.filter((r) => r.ok && r.node === 'n2')).toEqual([]);
    expect(new Set(after.map((r) => (r.ok ? r.node : '')))).toEqual(new Set(['n1', 'n3']));
    // about a third of the connections after the fault went to n2 first and were moved on
    expect(s1.proxy.failedOver - s0.proxy.failedOver).toBeGreaterThanOrEqual(Math.floor(after.length / 3) - 2);
    expect(s1.proxy.rejected - s0.proxy.rejected).toBe(0);
    expect(runner.output()).toMatch(new RegExp(`"backend":"${lab.nodes[1]!.ipv4.replace(/\./g, '\\.')}:6443","err":"ECONNREFUSED"`));
  });

  it('resetBackend resets a long-lived connection, and the client reconnects to a live apiserver', async () => {
    await setBackends(allBackends());
    const n2 = lab.nodes[1]!;
    const {
      proc,
      results,
      events,
      summary: summaryOf,
    } = await startLongconn(
      lab,
      n1,
      `https://127.0.0.1:${PORT}/version`,
      ['--node', 'n2', '--attempts', '10', '--interval', '100', '--duration', '3000', '--timeout', '2000', '--reconnect', '--max-connections', '3'],
      { until: /"event":"pinned"/ },
    );
    clients.push(proc);
    await sleep(20);
    const pinned = events.find((e): e is Extract<LongconnEvent, { event: 'pinned' }> => e.event === 'pinned')!;
    // n2 unready but alive: it leaves the set, its established connection keeps working
    await setBackends(allBackends().filter((b) => b.address !== n2.ipv4 && b.address !== n2.ipv6));
    await sleep(400);
    const drained = results.filter((r) => r.conn === pinned.conn);
    expect(drained.length).toBeGreaterThanOrEqual(3);
    expect(drained.every((r) => r.ok && r.node === 'n2')).toBe(true);
    // n2 dead: its connection is reset
    const resetAt = Date.now();
    const ack = await command({ op: 'resetBackend', backend: v4(n2) });
    expect(ack.reset).toBe(1);
    await sleep(800);
    expect(await proc.stop('SIGTERM', 5000)).toBe(0);
    expect(summaryOf()).toBeDefined();
    const closed = events.filter((e): e is Extract<LongconnEvent, { event: 'closed' }> => e.event === 'closed' && e.conn === pinned.conn);
    expect(closed).toHaveLength(1);
    expect(closed[0]!.error).toBe('ECONNRESET');
    expect(closed[0]!.at).toBeGreaterThanOrEqual(resetAt - 5);
    const later = results.filter((r) => r.conn > pinned.conn);
    console.log(
      `resetBackend: client saw ${closed[0]!.error} ${closed[0]!.at - resetAt} ms after the command; ` +
        `${later.length} requests on the new connection(s), nodes ${JSON.stringify([...new Set(later.map((r) => r.node))])}`,
    );
    expect(later.length).toBeGreaterThanOrEqual(3);
    expect(later.every((r) => r.ok && (r.node === 'n1' || r.node === 'n3'))).toBe(true);
    // at most the one request in flight at the reset failed
    expect(results.filter((r) => !r.ok).length).toBeLessThanOrEqual(1);
    expect((await status()).socketsReset).toBeGreaterThanOrEqual(1);
  });

  it('nginx started as kubespray configures it serves /version through 127.0.0.1:7444', async () => {
    const nginx = await startNginx(lab, n1, { listen: { address: '127.0.0.1', port: NGINX_PORT }, backends: lab.nodes.map(v4) });
    try {
      const sum = await probeFromN1(`https://127.0.0.1:${NGINX_PORT}/version`, { intervalMs: 20, durationMs: 300, timeoutMs: 2000 });
      expect(sum.failed).toBe(0);
      expect(sum.ok).toBe(sum.requests);
      expect(Object.keys(sum.nodes).every((n) => ['n1', 'n2', 'n3'].includes(n))).toBe(true);
    } finally {
      expect(await nginx.stop()).toBe(0);
    }
    const ss = await lab.exec(n1.netns, ['ss', '-ltnH', `sport = :${NGINX_PORT}`]);
    expect(ss.stdout.trim()).toBe('');
  });
});
