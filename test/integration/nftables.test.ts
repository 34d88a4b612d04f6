/**
 * The nftables data plane on the real kernel with the real `nft` and `conntrack`, in network
 * namespaces this file creates (prefix `bnft`, addresses 10.241.0.0/24 and fd41::/64 only):
 *
 *   bnft-lan: br0 ─┬─ bnftc  ─ bnft-c   eth0 10.241.0.50  fd41::50   the client
 *                  ├─ bnftn1 ─ bnft-n1  eth0 10.241.0.11  fd41::11   the node: VIP 10.241.0.100,
 *                  │                         fd41::100, ballast's table, forwarding on, and a
 *                  │                         backend (local: true) on .11 / ::11 only, not the VIP
 *                  ├─ bnftn2 ─ bnft-n2  eth0 10.241.0.12  fd41::12   backend (remote)
 *                  └─ bnftn3 ─ bnft-n3  eth0 10.241.0.13  fd41::13   backend (remote)
 *
 * Each backend is a tiny TCP server on :6443 that greets with "<name> <peer address> <peer port>"
 * and then echoes lines. The client and the backends share the L2, which is exactly the case
 * where a remote backend without masquerade would answer the client directly and break.
 * Nothing is created in the machine's own namespace: veths are born in bnft-lan with their peer
 * moved straight into the endpoint's namespace.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commandExecutor, NftablesApplier, type Executor } from '../../src/dataplane/apply.js';
import { flushBackend } from '../../src/dataplane/conntrack.js';
import { renderRuleset, type Backend, type DesiredDataplane } from '../../src/dataplane/nftables.js';
import { needs, sleep, waitFor } from '../support/index.js';

const skipWhy = needs('root', 'nft', 'conntrack', 'ip', 'bridge');

const PORT = 6443;
const VIP4 = '10.241.0.100';
const VIP6 = 'fd41::100';
const LAN = 'bnft-lan';
const CLIENT = { ns: 'bnft-c', link: 'bnftc', v4: '10.241.0.50', v6: 'fd41::50' };
const NODES = [1, 2, 3].map((k) => ({ name: `n${k}`, ns: `bnft-n${k}`, link: `bnftn${k}`, v4: `10.241.0.1${k}`, v6: `fd41::1${k}` }));
const [N1, N2, N3] = NODES as [(typeof NODES)[0], (typeof NODES)[0], (typeof NODES)[0]];
const ALL_NS = [CLIENT.ns, ...NODES.map((n) => n.ns), LAN];

function sh(argv: string[], input?: string): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: 30_000, ...(input === undefined ? {} : { input }) });
  return { code: r.status ?? -1, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}
function must(argv: string[], input?: string): string {
  const r = sh(argv, input);
  if (r.code !== 0) throw new Error(`${argv.join(' ')} exited with ${r.code}: ${r.stderr}`);
  return r.stdout;
}
const inNs = (ns: string, argv: string[]): string[] => ['ip', 'netns', 'exec', ns, ...argv];
const nftIn = (ns: string, ...args: string[]): string => must(inNs(ns, ['nft', ...args]));

function deleteNamespaces(): void {
  for (const ns of ALL_NS) {
    // a live process keeps a deleted namespace alive: kill what runs inside first
    for (const pid of sh(['ip', 'netns', 'pids', ns]).stdout.split(/\s+/).filter(Boolean).map(Number)) {
      try {
        if (pid > 1 && pid !== process.pid) process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    sh(['ip', 'netns', 'del', ns]);
  }
}

/** The helper each namespace runs: a greeting/echo TCP server, a connection loop, a held connection. */
const HELPER = String.raw`
import net from 'node:net';
import readline from 'node:readline';
const [mode, ...rest] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
function once(host, port, timeoutMs) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const s = net.connect({ host, port });
    let buf = '';
    const done = (r) => { clearTimeout(timer); s.destroy(); resolve({ ...r, ms: Math.round(performance.now() - t0) }); };
    const timer = setTimeout(() => done({ ok: false, code: 'TIMEOUT' }), timeoutMs);
    s.setEncoding('utf8');
    s.on('data', (d) => { buf += d; const i = buf.indexOf('\n'); if (i >= 0) done({ ok: true, line: buf.slice(0, i) }); });
    s.on('error', (e) => done({ ok: false, code: e.code }));
    s.on('close', () => done({ ok: false, code: 'CLOSED' }));
  });
}
if (mode === 'server') {
  const [name, port, ...hosts] = rest;
  let ready = 0;
  for (const host of hosts) {
    const srv = net.createServer((s) => {
      s.on('error', () => {});
      s.write(name + ' ' + s.remoteAddress + ' ' + s.remotePort + '\n');
      s.on('data', (d) => s.write(d));
    });
    srv.listen({ host, port: Number(port) }, () => { if (++ready === hosts.length) out({ listening: hosts }); });
  }
} else if (mode === 'connect') {
  const [host, port, count, timeoutMs] = rest;
  for (let i = 0; i < Number(count); i++) out(await once(host, Number(port), Number(timeoutMs)));
} else if (mode === 'hold') {
  const [host, port] = rest;
  const s = net.connect({ host, port: Number(port) });
  let first = true;
  let buf = '';
  s.setEncoding('utf8');
  s.on('data', (d) => {
    buf += d;
    for (let i; (i = buf.indexOf('\n')) >= 0; ) {
      out({ event: first ? 'hello' : 'echo', line: buf.slice(0, i) });
      buf = buf.slice(i + 1);
      first = false;
    }
  });
  s.on('error', (e) => out({ event: 'error', code: e.code }));
  s.on('close', () => { out({ event: 'close' }); process.exit(0); });
  readline.createInterface({ input: process.stdin }).on('line', (l) => s.write(l + '\n')).on('close', () => s.end());
}
`;

let dir = '';
let helperPath = '';
const children = new Set<ChildProcess>();

interface Conn {
  ok: boolean;
  line?: string;
  code?: string;
  ms: number;
}
/** backend name and the peer address it saw, from a greeting "<name> <addr> <port>" */
const parseHello = (line: string): { backend: string; peer: string } => {
  const [backend = '', peer = ''] = line.split(' ');
  return { backend, peer: peer.replace(/^::ffff:/, '') };
};

/** `count` sequential connections from `ns` to host:port, each bounded by `timeoutMs`. */
async function connectMany(ns: string, host: string, count: number, timeoutMs = 2000): Promise<Conn[]> {
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, helperPath, 'connect', host, String(PORT), String(count), String(timeoutMs)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const code = await new Promise<number | null>((r) => child.once('close', r));
  children.delete(child);
  if (code !== 0) throw new Error(`connect helper in ${ns} exited with ${code}: ${stderr}`);
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Conn);
}

/** Tally of successful connections per backend name. */
function tally(conns: Conn[]): Record<string, number> {
  const t: Record<string, number> = {};
  for (const c of conns) if (c.ok && c.line) t[parseHello(c.line).backend] = (t[parseHello(c.line).backend] ?? 0) + 1;
  return t;
}

/** A connection held open from `ns`; `send` writes a line, `next` waits for the next event. */
interface Held {
  hello: { backend: string; peer: string };
  send(line: string): void;
  next(timeoutMs?: number): Promise<{ event: string; line?: string; code?: string }>;
  close(): void;
}
async function hold(ns: string, host: string): Promise<Held> {
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, helperPath, 'hold', host, String(PORT)], { stdio: ['pipe', 'pipe', 'pipe'] });
  children.add(child);
  child.once('close', () => children.delete(child));
  const events: { event: string; line?: string; code?: string }[] = [];
  const waiters: (() => void)[] = [];
  let partial = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => {
    partial += s;
    const lines = partial.split('\n');
    partial = lines.pop() ?? '';
    for (const l of lines) if (l.startsWith('{')) events.push(JSON.parse(l) as { event: string });
    for (const w of waiters.splice(0)) w();
  });
  const next = async (timeoutMs = 3000): Promise<{ event: string; line?: string; code?: string }> => {
    const deadline = Date.now() + timeoutMs;
    while (events.length === 0) {
      if (Date.now() > deadline) return { event: 'timeout' };
      await Promise.race([new Promise<void>((r) => waiters.push(r)), sleep(50)]);
    }
    return events.shift()!;
  };
  const first = await next(3000);
  if (first.event !== 'hello' || !first.line) throw new Error(`held connection from ${ns}: ${JSON.stringify(first)}`);
  return {
    hello: parseHello(first.line),
    send: (line) => child.stdin.write(`${line}\n`),
    next,
    close: () => {
      child.stdin.end();
      child.kill('SIGKILL');
    },
  };
}

const backendsOf = (family: 4 | 6, nodes: (typeof NODES)[number][]): Backend[] =>
  nodes.map((n) => ({ address: family === 4 ? n.v4 : n.v6, port: PORT, local: n === N1 }));
const desired = (family: 4 | 6, nodes: (typeof NODES)[number][], extra: Partial<DesiredDataplane> = {}): DesiredDataplane => ({
  family,
  vips: [family === 4 ? VIP4 : VIP6],
  port: PORT,
  backends: backendsOf(family, nodes),
  masqueradeRemote: true,
  ...extra,
});
/** For a failure message: the node's conntrack entries to VIP4:6443 and counters, both ends' neighbours, the node's ruleset. */
const kernelStateOfVip = (from: string): string =>
  [
    `from ${from}; conntrack on ${N1.ns}:`,
    sh(inNs(N1.ns, ['conntrack', '-L', '-p', 'tcp', '--orig-dst', VIP4, '--orig-port-dst', String(PORT)])).stdout,
    sh(inNs(N1.ns, ['conntrack', '-S'])).stdout,
    ...[CLIENT.ns, N1.ns].map((ns) => `neighbours in ${ns}:\n${sh(['ip', '-n', ns, 'neigh']).stdout}`),
    sh(inNs(N1.ns, ['nft', 'list', 'ruleset'])).stdout,
  ].join('\n');
const counterKey = (family: 4 | 6, n: (typeof NODES)[number]): string => (family === 4 ? `${n.v4}:${PORT}` : `[${n.v6}]:${PORT}`);

describe.skipIf(skipWhy)(`nftables data plane on the real kernel${skipWhy ? ` (SKIPPED: ${skipWhy})` : ''}`, () => {
  const nftExec: Executor = commandExecutor(inNs(N1.ns, ['nft']));
  const conntrackExec: Executor = commandExecutor(inNs(N1.ns, ['conntrack']));
  let applier: NftablesApplier;

  beforeAll(async () => {
    deleteNamespaces();
    dir = mkdtempSync(join(tmpdir(), 'bnft-'));
    helperPath = join(dir, 'helper.mjs');
    writeFileSync(helperPath, HELPER);
    for (const ns of ALL_NS) {
      must(['ip', 'netns', 'add', ns]);
      must(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
    }
    // the bridge namespace: no IPv6 of its own, no bridge-netfilter (-e: absent keys are fine)
    must(
      inNs(LAN, [
        'sysctl',
        '-q',
        '-e',
        '-w',
        'net.ipv6.conf.all.disable_ipv6=1',
        'net.ipv6.conf.default.disable_ipv6=1',
        'net.bridge.bridge-nf-call-iptables=0',
        'net.bridge.bridge-nf-call-ip6tables=0',
      ]),
    );
    must(['ip', '-n', LAN, 'link', 'add', 'br0', 'type', 'bridge', 'mcast_snooping', '0', 'stp_state', '0']);
    must(['ip', '-n', LAN, 'link', 'set', 'br0', 'up']);
    for (const ep of [CLIENT, ...NODES]) {
      must(['ip', '-n', LAN, 'link', 'add', ep.link, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ep.ns]);
      must(['ip', '-n', LAN, 'link', 'set', ep.link, 'master', 'br0']);
      must(['ip', '-n', LAN, 'link', 'set', ep.link, 'up']);
      must(inNs(ep.ns, ['sysctl', '-q', '-w', 'net.ipv6.conf.eth0.accept_dad=0']));
      must(['ip', '-n', ep.ns, 'link', 'set', 'eth0', 'up']);
      must(['ip', '-n', ep.ns, 'addr', 'add', `${ep.v4}/24`, 'dev', 'eth0']);
      must(['ip', '-n', ep.ns, 'addr', 'add', `${ep.v6}/64`, 'dev', 'eth0', 'nodad']);
    }
    // the node: holds the VIPs and forwards (DNAT to another node is forwarding)
    must(['ip', '-n', N1.ns, 'addr', 'add', `${VIP4}/32`, 'dev', 'eth0']);
    // as src/vip/netlink.ts adds them: /32, and /128 without DAD and without a prefix route
    must(['ip', '-n', N1.ns, 'addr', 'add', `${VIP6}/128`, 'dev', 'eth0', 'nodad', 'noprefixroute']);
    must(inNs(N1.ns, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']));
    await waitFor(
      () => JSON.parse(must(['bridge', '-n', LAN, '-j', 'link'])) as { state?: string }[],
      (ports) => ports.length === 4 && ports.every((p) => p.state === 'forwarding'),
      { timeoutMs: 10_000, what: 'the bridge ports to forward' },
    );
    // backends: n1's listens on its own addresses only, not on the VIP
    await Promise.all(
      NODES.map(async (n) => {
        const child = spawn('ip', ['netns', 'exec', n.ns, process.execPath, helperPath, 'server', n.name, String(PORT), n.v4, n.v6], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        children.add(child);
        let out = '';
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`server ${n.name} did not listen: ${out}`)), 10_000);
          const on = (s: Buffer): void => {
            out += s.toString();
            if (out.includes('listening')) {
              clearTimeout(timer);
              resolve();
            }
          };
          child.stdout.on('data', on);
          child.stderr.on('data', on);
        });
      }),
    );
    applier = new NftablesApplier({ exec: nftExec });
  });

  afterAll(() => {
    for (const c of children) c.kill('SIGKILL');
    deleteNamespaces();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the lab works without ballast: the client reaches each backend directly, the VIP:6443 refuses', async () => {
    for (const n of NODES) expect(tally(await connectMany(CLIENT.ns, n.v4, 1))).toEqual({ [n.name]: 1 });
    const [c] = await connectMany(CLIENT.ns, VIP4, 1);
    expect(c).toMatchObject({ ok: false, code: 'ECONNREFUSED' });
  });

  it('spreads 60 client connections to VIP:6443 over all 3 backends, and the counters match', async () => {
    const before = await applier.counters();
    const r = await applier.apply(desired(4, NODES));
    expect(r.changed).toBe(true);
    const conns = await connectMany(CLIENT.ns, VIP4, 60);
    expect(conns.filter((c) => !c.ok)).toEqual([]);
    const t = tally(conns);
    for (const n of NODES) expect(t[n.name] ?? 0).toBeGreaterThan(5);
    const after = await applier.counters();
    for (const n of NODES) {
      const k = counterKey(4, n);
      expect({ n: n.name, delta: after[k]!.packets - (before[k]?.packets ?? 0) }).toEqual({ n: n.name, delta: t[n.name] });
    }
  });

  it('masquerades remote backends only: they see the node, the local backend sees the client', async () => {
    await applier.apply(desired(4, NODES));
    const conns = await connectMany(CLIENT.ns, VIP4, 30);
    const peers = new Map<string, Set<string>>();
    for (const c of conns) {
      expect(c.ok).toBe(true);
      const h = parseHello(c.line!);
      peers.set(h.backend, (peers.get(h.backend) ?? new Set()).add(h.peer));
    }
    expect([...(peers.get('n2') ?? [])]).toEqual([N1.v4]);
    expect([...(peers.get('n3') ?? [])]).toEqual([N1.v4]);
    expect([...(peers.get('n1') ?? [])]).toEqual([CLIENT.v4]);
  });

  it('without masquerade a remote backend on the client’s L2 breaks the connection (why masquerade exists)', async () => {
    await applier.apply(desired(4, [N2], { masqueradeRemote: false }));
    const [c] = await connectMany(CLIENT.ns, VIP4, 1, 1000);
    // n2 answers the client directly from 10.241.0.12; the client resets that SYN-ACK
    expect(c).toMatchObject({ ok: false });
    await applier.apply(desired(4, [N2]));
    expect(tally(await connectMany(CLIENT.ns, VIP4, 3))).toEqual({ n2: 3 });
  });

  it('balances connections the node itself opens (output hook)', async () => {
    await applier.apply(desired(4, NODES));
    const conns = await connectMany(N1.ns, VIP4, 60);
    expect(conns.filter((c) => !c.ok)).toEqual([]);
    const t = tally(conns);
    for (const n of NODES) expect(t[n.name] ?? 0).toBeGreaterThan(5);
    // the remote ones are masqueraded to the node's address, replies come back to it
    for (const c of conns) {
      const h = parseHello(c.line!);
      if (h.backend !== 'n1') expect(h.peer).toBe(N1.v4);
    }
  });

  it('with zero backends there is no DNAT: VIP:6443 is refused at once (no hang), from the client and the node', async () => {
    await applier.apply(desired(4, []));
    const listing = nftIn(N1.ns, 'list', 'table', 'ip', 'ballast');
    expect(listing).not.toMatch(/dnat to|numgen|goto/);
    for (const chain of ['prerouting', 'output', 'spread', 'postrouting']) expect(listing).toContain(`chain ${chain} {`);
    for (const ns of [CLIENT.ns, N1.ns]) {
      const conns = await connectMany(ns, VIP4, 3, 3000);
      // a connection not refused at once: its SYN went somewhere (a conntrack entry's NAT) or
      // its RST was lost (neighbours); what the node's kernel held then goes with the failure
      const why = conns.every((c) => c.code === 'ECONNREFUSED' && c.ms < 1000) ? '' : kernelStateOfVip(ns);
      for (const c of conns) {
        expect(c, why).toMatchObject({ ok: false, code: 'ECONNREFUSED' });
        expect(c.ms, why).toBeLessThan(1000);
      }
    }
    // and a later apply is still a replacement
    await applier.apply(desired(4, NODES));
    expect(tally(await connectMany(CLIENT.ns, VIP4, 20))).not.toEqual({});
  });

  it('skips an apply that changes nothing', async () => {
    await applier.apply(desired(4, NODES));
    const r = await applier.apply(desired(4, [...NODES].reverse()));
    expect(r).toMatchObject({ changed: false });
  });

  it('replacing the table is atomic: no connection fails while the backend set flips 40 times', async () => {
    // n1's backend listens on .11 only, so any instant without the DNAT rules would refuse a connection
    const traffic = connectMany(CLIENT.ns, VIP4, 250, 2000);
    for (let i = 0; i < 40; i++) {
      await applier.apply(desired(4, i % 2 === 0 ? [N2, N3] : NODES));
      await sleep(5);
    }
    const conns = await traffic;
    expect(conns).toHaveLength(250);
    expect(conns.filter((c) => !c.ok)).toEqual([]);
  });

  it('each apply is exactly one kernel transaction (one new ruleset generation in nft monitor)', async () => {
    const mon = spawn('ip', ['netns', 'exec', N1.ns, 'nft', 'monitor'], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(mon);
    let out = '';
    mon.stdout.setEncoding('utf8').on('data', (s: string) => (out += s));
    // wait until the monitor has subscribed: it prints nothing until an event, so make one
    for (let i = 0; !out.includes('bnftprobe'); i++) {
      if (i > 100) throw new Error(`nft monitor printed nothing: ${out}`);
      must(inNs(N1.ns, ['nft', '-f', '-']), 'table ip bnftprobe {}\ndelete table ip bnftprobe\n');
      await sleep(50);
    }
    await sleep(100);
    const mark = out.length;
    await applier.apply(desired(4, [N2, N3]));
    await applier.apply(desired(4, NODES));
    await sleep(300);
    mon.kill('SIGKILL');
    children.delete(mon);
    out = out.slice(mark);
    const gens = out.split('\n').filter((l) => l.startsWith('# new generation'));
    expect(gens).toHaveLength(2);
    // and the delete and the re-add of the table sit inside each of them
    const first = out.slice(0, out.indexOf(gens[0]!));
    expect(first).toMatch(/delete table ip ballast\n(?:.*\n)*?add table ip ballast/);
  });

  it('a rejected transaction leaves the previous table byte-identical and throws BALLAST_E_DATAPLANE with nft’s stderr', async () => {
    await applier.apply(desired(4, NODES));
    const before = nftIn(N1.ns, 'list', 'table', 'ip', 'ballast');
    // 1. the kernel rejects the LAST command of the batch, after the delete and the new table
    //    were already queued: the whole transaction must be undone
    const kernelReject: Executor = (args, stdin) =>
      nftExec(args, args.includes('-f') ? `${stdin}add rule ip ballast prerouting counter name "no_such_counter"\n` : stdin);
    const a1 = new NftablesApplier({ exec: kernelReject });
    const e1 = await a1.apply(desired(4, [N2])).catch((e: unknown) => e);
    expect(e1).toMatchObject({ code: 'BALLAST_E_DATAPLANE' });
    expect((e1 as { stderr: string }).stderr).toMatch(/No such file or directory/);
    expect(nftIn(N1.ns, 'list', 'table', 'ip', 'ballast')).toBe(before);
    // 1b. the kernel rejects a rule in the MIDDLE of the new table (a backend chain naming a
    //     counter that does not exist)
    const midReject: Executor = (args, stdin) =>
      nftExec(args, args.includes('-f') ? stdin.replace(`counter name "be_10_241_0_12_6443"`, 'counter name "be_no_such"') : stdin);
    const e1b = await new NftablesApplier({ exec: midReject }).apply(desired(4, [N1, N2])).catch((e: unknown) => e);
    expect(e1b).toMatchObject({ code: 'BALLAST_E_DATAPLANE', stderr: expect.stringMatching(/No such file or directory/) });
    expect(nftIn(N1.ns, 'list', 'table', 'ip', 'ballast')).toBe(before);
    // 2. a syntax error at the end: nothing reaches the kernel
    const syntax: Executor = (args, stdin) => nftExec(args, args.includes('-f') ? `${stdin}add rule ip ballast prerouting bogus\n` : stdin);
    const e2 = await new NftablesApplier({ exec: syntax }).apply(desired(4, [N3])).catch((e: unknown) => e);
    expect(e2).toMatchObject({ code: 'BALLAST_E_DATAPLANE', message: expect.stringContaining('syntax error') });
    expect(nftIn(N1.ns, 'list', 'table', 'ip', 'ballast')).toBe(before);
    // 3. an executor that cannot run at all
    const e3 = await new NftablesApplier({ exec: commandExecutor(['/nonexistent/nft']) }).apply(desired(4, [N2])).catch((e: unknown) => e);
    expect(e3).toMatchObject({ code: 'BALLAST_E_DATAPLANE' });
    expect(nftIn(N1.ns, 'list', 'table', 'ip', 'ballast')).toBe(before);
    // and traffic still flows over all three
    const t = tally(await connectMany(CLIENT.ns, VIP4, 30));
    expect(Object.keys(t).sort()).toEqual(['n1', 'n2', 'n3']);
  });

  it('conntrack flushBackend resets established connections to that backend only', async () => {
    await applier.apply(desired(4, NODES));
    // hold one connection on each backend
    const held = new Map<string, Held>();
    for (let i = 0; i < 60 && held.size < 3; i++) {
      const h = await hold(CLIENT.ns, VIP4);
      if (held.has(h.hello.backend)) h.close();
      else held.set(h.hello.backend, h);
    }
    expect([...held.keys()].sort()).toEqual(['n1', 'n2', 'n3']);
    const dead = held.get('n2')!;
    // n2 leaves the set (as if it died): established flows keep their NAT binding…
    await applier.apply(desired(4, [N1, N3]));
    dead.send('still-there');
    expect(await dead.next()).toEqual({ event: 'echo', line: 'still-there' });
    // …until their conntrack entries are deleted
    const flushed = await flushBackend(VIP4, PORT, { address: N2.v4, port: PORT }, { exec: conntrackExec });
    expect(flushed.deleted).toBeGreaterThanOrEqual(1);
    // the established client the probes would go to: one, with its port
    expect(flushed.clients).toHaveLength(1);
    expect(flushed.clients[0]!.port).toBeGreaterThan(0);
    const t0 = Date.now();
    dead.send('hello?');
    const ev = await dead.next(3000);
    expect(ev).toMatchObject({ event: 'error', code: 'ECONNRESET' });
    expect(Date.now() - t0).toBeLessThan(1000);
    for (const name of ['n1', 'n3']) {
      const h = held.get(name)!;
      h.send(`ping-${name}`);
      expect(await h.next()).toEqual({ event: 'echo', line: `ping-${name}` });
    }
    // nothing left to delete
    expect(await flushBackend(VIP4, PORT, { address: N2.v4, port: PORT }, { exec: conntrackExec })).toStrictEqual({ deleted: 0, clients: [] });
    for (const h of held.values()) h.close();
  });

  it('IPv6: spreads over all 3 backends with [addr]:port DNAT, counters match, masquerade works, flushBackend resets', async () => {
    const before = await applier.counters();
    expect((await applier.apply(desired(6, NODES))).changed).toBe(true);
    const conns = await connectMany(CLIENT.ns, VIP6, 60);
    expect(conns.filter((c) => !c.ok)).toEqual([]);
    const t = tally(conns);
    for (const n of NODES) expect(t[n.name] ?? 0).toBeGreaterThan(5);
    const after = await applier.counters();
    for (const n of NODES) {
      const k = counterKey(6, n);
      expect(after[k]!.packets - (before[k]?.packets ?? 0)).toBe(t[n.name]);
    }
    // the source masquerade picks is an address of the node: the kernel's IPv6 source selection
    // (RFC 6724 rule 8, Linux capping the match at each address's prefix length) prefers the
    // /128 VIP over the node's /64 address for neighbours on the same /64
    const sources = new Set<string>();
    for (const c of conns) {
      const h = parseHello(c.line!);
      if (h.backend === 'n1') expect(h.peer).toBe(CLIENT.v6);
      else sources.add(h.peer);
    }
    expect([...sources].every((a) => a === N1.v6 || a === VIP6)).toBe(true);
    console.info(`[nftables integration] IPv6 masquerade source seen by remote backends: ${[...sources].join(', ')}`);
    // conntrack -f ipv6: an established IPv6 connection to a backend that left is reset
    let h = await hold(CLIENT.ns, VIP6);
    for (let i = 0; i < 30 && h.hello.backend !== 'n3'; i++) {
      h.close();
      h = await hold(CLIENT.ns, VIP6);
    }
    expect(h.hello.backend).toBe('n3');
    await applier.apply(desired(6, [N1, N2]));
    expect((await flushBackend(VIP6, PORT, { address: N3.v6, port: PORT }, { exec: conntrackExec })).deleted).toBeGreaterThanOrEqual(1);
    h.send('hello?');
    expect(await h.next(3000)).toMatchObject({ event: 'error', code: 'ECONNRESET' });
    h.close();
    // the IPv4 table is untouched by the IPv6 one
    expect(tally(await connectMany(CLIENT.ns, VIP4, 10))).not.toEqual({});
  });

  it('counters survive table replacements (seeded from the live values)', async () => {
    await applier.apply(desired(4, NODES));
    const t = tally(await connectMany(CLIENT.ns, VIP4, 15));
    const mid = await applier.counters();
    // a real replacement (the set changes, then changes back)
    await applier.apply(desired(4, [N2, N3]));
    await applier.apply(desired(4, NODES));
    const after = await applier.counters();
    for (const n of NODES) expect(after[counterKey(4, n)]).toEqual(mid[counterKey(4, n)]);
    expect(Object.values(t).reduce((a, b) => a + b, 0)).toBe(15);
    // and a fresh applier (an agent restart) reads them from the kernel
    expect(await new NftablesApplier({ exec: nftExec }).counters()).toMatchObject(
      Object.fromEntries(NODES.map((n) => [counterKey(4, n), after[counterKey(4, n)]])),
    );
  });

  it('a 500-backend table applies in one transaction', async () => {
    const many = Array.from({ length: 500 }, (_, i) => ({ address: `10.241.${1 + Math.floor(i / 250)}.${1 + (i % 250)}`, port: PORT, local: false }));
    const r = await applier.apply({ ...desired(4, []), backends: many });
    expect(r.changed).toBe(true);
    console.info(`[nftables integration] 500-backend apply took ${r.durationMs.toFixed(1)} ms`);
    expect(r.durationMs).toBeLessThan(10_000);
    const listing = nftIn(N1.ns, 'list', 'table', 'ip', 'ballast');
    expect(listing.match(/^\tchain be_/gm)).toHaveLength(500);
    expect(listing).toContain('jhash ip saddr . tcp sport . ip daddr . tcp dport mod 500 seed 0x62616c73 vmap');
    // back to the lab's backends
    await applier.apply(desired(4, NODES));
  });

  it('touches no other table, and remove() leaves no ballast table (idempotently)', async () => {
    must(
      inNs(N1.ns, ['nft', '-f', '-']),
      [
        'table inet bnftother {',
        '\tcounter c { comment "unrelated" }',
        '\tchain c {',
        '\t\ttype filter hook input priority 0; policy accept;',
        '\t\ttcp dport 9 counter name "c"',
        '\t}',
        '}',
        '',
      ].join('\n'),
    );
    const other = (): string => nftIn(N1.ns, 'list', 'table', 'inet', 'bnftother');
    const before = other();
    await applier.apply(desired(4, [N2]));
    await applier.apply(desired(6, [N3]));
    await applier.apply(desired(4, []));
    await applier.apply(desired(4, NODES), { force: true });
    expect(other()).toBe(before);
    await applier.remove();
    expect(other()).toBe(before);
    const tables = nftIn(N1.ns, 'list', 'tables');
    expect(tables).not.toMatch(/ballast/);
    expect(tables.trim()).toBe('table inet bnftother');
    await applier.remove();
    expect(nftIn(N1.ns, 'list', 'tables').trim()).toBe('table inet bnftother');
    // without the table the VIP port is refused again, and the rendered text still checks
    const [c] = await connectMany(CLIENT.ns, VIP4, 1);
    expect(c).toMatchObject({ ok: false, code: 'ECONNREFUSED' });
    expect(sh(inNs(N1.ns, ['nft', '-c', '-f', '-']), renderRuleset(desired(6, NODES))).code).toBe(0);
    must(inNs(N1.ns, ['nft', 'delete', 'table', 'inet', 'bnftother']));
  });

  it('IPv6: remove() leaves no ip6 ballast table', async () => {
    await applier.apply(desired(6, NODES));
    expect(nftIn(N1.ns, 'list', 'tables')).toContain('table ip6 ballast');
    await applier.remove();
    expect(nftIn(N1.ns, 'list', 'tables')).not.toMatch(/ballast/);
    const [c] = await connectMany(CLIENT.ns, VIP6, 1);
    expect(c).toMatchObject({ ok: false, code: 'ECONNREFUSED' });
  });
});
