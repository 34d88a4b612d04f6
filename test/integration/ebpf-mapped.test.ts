/**
 * The eBPF node-local endpoint dialled in its IPv4-mapped form: an AF_INET6 socket
 * connecting to ::ffff:127.0.0.1:7443, as dual-stack runtimes do (Java by default), is balanced
 * like a connect() to 127.0.0.1:7443, and getpeername() says ::ffff:127.0.0.1:7443. And a clean
 * stop of the agent leaves no lock file in /run/ballast.
 *
 * `ballast run` on lab node n1 without election, IPv4 and IPv6 backends (three TLS stand-in
 * apiservers), localEndpoint 127.0.0.1:7443 and [::1]:7443, ebpf mode attached to n1's own
 * cgroup-v2 child (never the machine's root cgroup). Clients run in n1's namespace and cgroup.
 * The mapped-form client is inline below: Node opens an AF_INET6 socket for an IPv6 literal
 * (the client reports its socket's localFamily), and it checks the serving certificate against
 * the IPv4 address the mapped form denotes, as Java's and Go's TLS stacks do (Node's own check
 * compares the text "::ffff:127.0.0.1" with the certificate's 127.0.0.1 and fails).
 */
import { existsSync, rmdirSync, rmSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lab, LabProcess } from '../../lab/lab.js';
import { connectFrom, restoreNodes, startAgent, type LabAgent } from '../../lab/cluster.js';
import { needs, startLab, waitFor } from '../support/index.js';
import { LOCK_DIR, pinDirFor } from '../../src/dataplane/ebpf.js';
import { SockLb } from '../../src/native.js';

const PREFIX = 'bmap';
const SUBNET = 238;
const INTERVAL_MS = 200;

/**
 * node -e CLIENT dial HOST PORT CA IDENTITY COUNT: COUNT TLS connections one after another,
 * GET /version on each; one summary line {count, ok, nodes, peers, families, errors}.
 * node -e CLIENT hold HOST PORT CA IDENTITY DURATION_MS: one TLS connection, GET /version every
 * 100 ms on it; {"event":"pinned",node,peer,family} after the first answer, {"event":"closed",
 * error} when it ends (or {"event":"done"} after DURATION_MS).
 */
const CLIENT = String.raw`
const tls = require('node:tls'), fs = require('node:fs');
const [mode, host, port, caFile, identity, n] = process.argv.slice(1);
const ca = fs.readFileSync(caFile);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const peerOf = (s) => s.remoteFamily === 'IPv6' ? '[' + s.remoteAddress + ']:' + s.remotePort : s.remoteAddress + ':' + s.remotePort;
const open = () => tls.connect({ host, port: Number(port), ca, checkServerIdentity: (_h, cert) => tls.checkServerIdentity(identity, cert) });
const ask = (s) => s.write('GET /version HTTP/1.1\r\nHost: kubernetes\r\n\r\n');
function once() {
  return new Promise((resolve) => {
    const s = open();
    let peer, family, body = '';
    const timer = setTimeout(() => { s.destroy(); resolve({ ok: false, error: 'timeout' }); }, 2000);
    s.once('secureConnect', () => { peer = peerOf(s); family = s.localFamily; ask(s); });
    s.on('data', (c) => {
      body += c;
      const m = /"node":"([^"]+)"/.exec(body);
      if (m) { clearTimeout(timer); s.destroy(); resolve({ ok: true, node: m[1], peer, family }); }
    });
    s.on('error', (e) => { clearTimeout(timer); resolve({ ok: false, error: e.code || e.message }); });
  });
}
async function dial() {
  const sum = { count: Number(n), ok: 0, nodes: {}, peers: {}, families: {}, errors: {} };
  const add = (o, k) => { if (k !== undefined) o[k] = (o[k] || 0) + 1; };
  for (let i = 0; i < sum.count; i++) {
    const r = await once();
    if (r.ok) sum.ok++;
    add(sum.nodes, r.node); add(sum.peers, r.peer); add(sum.families, r.family); add(sum.errors, r.error);
  }
  out(sum);
}
function hold() {
  const s = open();
  let pinned = false;
  const tick = setInterval(() => ask(s), 100);
  const stop = setTimeout(() => { out({ event: 'done' }); process.exit(0); }, Number(n));
  s.once('secureConnect', () => ask(s));
  s.on('data', (c) => {
    const m = /"node":"([^"]+)"/.exec(String(c));
    if (m && !pinned) { pinned = true; out({ event: 'pinned', node: m[1], peer: peerOf(s), family: s.localFamily }); }
  });
  let err = null;
  s.on('error', (e) => { err = e.code || e.message; });
  s.on('close', () => { clearInterval(tick); clearTimeout(stop); out({ event: 'closed', error: err, at: Date.now() }); process.exit(0); });
}
mode === 'dial' ? dial() : hold();
`;

interface DialSummary {
  count: number;
  ok: number;
  nodes: Record<string, number>;
  peers: Record<string, number>;
  families: Record<string, number>;
  errors: Record<string, number>;
}

describe.skipIf(needs('bpf'))('eBPF local endpoint: the IPv4-mapped form, and a clean stop (root; skipped otherwise)', () => {
  let lab: Lab;
  let cgroup: string;
  let pinDir: string;
  let lockPath: string;
  let lockDirBefore: boolean;
  let agent: LabAgent | undefined;
  const extra: LabProcess[] = [];
  const n1 = (): Lab['nodes'][number] => lab.nodes[0]!;

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: true, apiservers: true });
    cgroup = await lab.cgroup(n1());
    pinDir = pinDirFor(cgroup);
    lockPath = `${LOCK_DIR}/${basename(pinDir)}.lock`;
    if (existsSync(pinDir)) SockLb.detach(pinDir); // an interrupted run's
    rmSync(lockPath, { force: true });
    lockDirBefore = existsSync(LOCK_DIR);
    const backends = [...lab.nodes.map((n) => `${n.ipv4}:6443`), ...lab.nodes.map((n) => `[${n.ipv6}]:6443`)];
    agent = await startAgent(lab, n1(), {
      priority: 150,
      noElection: true,
      hostMounts: true,
      extra: {
        apiserver: { port: 6443, backends, health: { caFile: lab.ca.certFile, interval: `${INTERVAL_MS}ms`, timeout: `${INTERVAL_MS}ms`, rise: 2, fall: 2 } },
        localEndpoint: { address: ['127.0.0.1:7443', '[::1]:7443'], cgroup },
        dataplane: { local: 'ebpf', keepOnStop: false },
      },
    });
    await backendsIn(6);
  });

  afterAll(async () => {
    for (const p of extra) await p.stop('SIGKILL', 1000).catch(() => undefined);
    await agent?.stop('SIGKILL').catch(() => undefined);
    // what a killed agent leaves (a failed test): its pins, their parent when empty, its lock file
    const leftovers = [() => existsSync(pinDir) && SockLb.detach(pinDir), () => rmdirSync(dirname(pinDir)), () => rmSync(lockPath, { force: true })];
    for (const remove of leftovers) {
      try {
        remove();
      } catch {
        /* gone already, not empty, or never made (beforeAll failed early) */
      }
    }
    await lab?.teardown();
  });

  /** Waits until the endpoints balance to `n` backends in all. */
  const backendsIn = (n: number, timeoutMs = 5000): Promise<unknown> =>
    waitFor(
      async () => (await agent!.anyStatus()).local,
      (l) => l.mode === 'ebpf' && l.backends.length === n,
      { timeoutMs, intervalMs: 50, what: `${n} backends in the local endpoint` },
    );

  async function dial(host: string, port: number, count: number, identity = '127.0.0.1'): Promise<DialSummary> {
    const r = await lab.exec(n1().netns, [process.execPath, '-e', CLIENT, 'dial', host, String(port), lab.ca.certFile, identity, String(count)], {
      cgroup,
      timeoutMs: 60_000,
    });
    return JSON.parse(r.stdout.trim().split('\n').pop() ?? '') as DialSummary;
  }

  it('an AF_INET6 socket dialling ::ffff:127.0.0.1:7443: 200 of 200 connect, over every IPv4 backend, and getpeername says ::ffff:127.0.0.1:7443', async () => {
    const s = await dial('::ffff:127.0.0.1', 7443, 200);
    console.log(`::ffff:127.0.0.1:7443: ${s.ok}/${s.count} ok, nodes ${JSON.stringify(s.nodes)}, errors ${JSON.stringify(s.errors)}`);
    expect(s).toMatchObject({ count: 200, ok: 200, errors: {}, families: { IPv6: 200 }, peers: { '[::ffff:127.0.0.1]:7443': 200 } });
    // uniform over 3: 66.7 ± 6.7 each; 30 is 5.5 standard deviations below
    expect(Object.keys(s.nodes).sort()).toStrictEqual(['n1', 'n2', 'n3']);
    for (const n of ['n1', 'n2', 'n3']) expect(s.nodes[n], n).toBeGreaterThanOrEqual(30);
  });

  it("127.0.0.1:7443 and [::1]:7443 are balanced as before; ::ffff:127.0.0.1:6443 is no endpoint and stays n1's own", async () => {
    const v4 = await connectFrom(lab, n1(), { address: '127.0.0.1', port: 7443, tls: true, count: 30, cgroup });
    expect(v4).toMatchObject({ ok: 30, errors: {}, peers: { '127.0.0.1:7443': 30 } });
    expect(Object.keys(v4.nodes).sort()).toStrictEqual(['n1', 'n2', 'n3']);
    const v6 = await connectFrom(lab, n1(), { address: '::1', port: 7443, tls: true, count: 30, cgroup });
    expect(v6).toMatchObject({ ok: 30, errors: {}, peers: { '[::1]:7443': 30 } });
    expect(Object.keys(v6.nodes).sort()).toStrictEqual(['n1', 'n2', 'n3']);
    expect(await dial('::ffff:127.0.0.1', 6443, 5)).toMatchObject({ ok: 5, nodes: { n1: 5 }, peers: { '[::ffff:127.0.0.1]:6443': 5 } });
  });

  it('a v4-mapped connection to a backend that goes silent is reset (SOCK_DESTROY finds AF_INET6 sockets of IPv4 backends)', async () => {
    // a backend on another node (n1's own is reached over loopback: its link going down would not matter)
    let p: LabProcess | undefined;
    let pinned: { node: string; peer: string; family: string } | undefined;
    for (let attempt = 0; attempt < 12 && (pinned === undefined || pinned.node === 'n1'); attempt++) {
      await p?.stop('SIGTERM', 2000);
      p = lab.spawn(n1().netns, [process.execPath, '-e', CLIENT, 'hold', '::ffff:127.0.0.1', '7443', lab.ca.certFile, '127.0.0.1', '15000'], { cgroup });
      extra.push(p);
      const line = await p.waitForOutput(/\{"event":"pinned".*\}/, { timeoutMs: 5000, includeExisting: true });
      pinned = JSON.parse(line[0]) as { node: string; peer: string; family: string };
    }
    expect(pinned).toMatchObject({ node: expect.stringMatching(/^n[23]$/), peer: '[::ffff:127.0.0.1]:7443', family: 'IPv6' });
    const target = lab.nodes.find((n) => n.name === pinned!.node)!;
    try {
      const t0 = Date.now();
      await lab.linkDown(target);
      const closedLine = await p!.waitForOutput(/\{"event":"(closed|done)".*\}/, { timeoutMs: 5000, includeExisting: true });
      const closed = JSON.parse(closedLine[0]) as { event: string; error: string | null; at: number };
      console.log(`v4-mapped connection to ${target.name}: ${JSON.stringify(closed)} ${closed.at - t0} ms after its link went down`);
      expect(closed.event).toBe('closed');
      expect(closed.error).not.toBeNull();
      // fall (2) × interval to be judged dead, one more interval, the reset, 2 cores' scheduling
      expect(closed.at - t0).toBeLessThanOrEqual(2 * INTERVAL_MS + INTERVAL_MS + 200 + 1000);
      // the eBPF plane's own account of it (logged just after the destroy)
      const destroyed = await waitFor(
        async () => agent!.logLines().find((x) => x.msg === 'dead backend: balanced sockets destroyed' && x.backend === `${target.ipv4}:6443`),
        (x) => x !== undefined,
        { timeoutMs: 2000, intervalMs: 50, what: 'the agent to log the destroyed sockets' },
      );
      expect(destroyed).toMatchObject({ sockets: 1 });
    } finally {
      await restoreNodes(lab);
    }
    await backendsIn(6);
  });

  it('a clean stop (SIGTERM) exits 0 and leaves no pins and no lock file (nor /run/ballast, when the agent made it)', async () => {
    expect(existsSync(lockPath)).toBe(true);
    expect(await agent!.stop('SIGTERM')).toBe(0);
    agent = undefined;
    expect(existsSync(pinDir)).toBe(false);
    expect(existsSync(lockPath)).toBe(false);
    if (!lockDirBefore) expect(existsSync(LOCK_DIR)).toBe(false);
  });
});
