/**
 * The lab itself, on real namespaces (prefix `blab`, subnet 201), plus the stand-in apiserver
 * and the prober over loopback (no root needed for those).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandin, type Standin } from '../../lab/apiserver-standin.js';
import { Lab, probeOnce, runProber, type LabNode, type Summary } from '../../lab/lab.js';
import { reach, requestOnce } from '../../lab/clients/prober.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'blab';
const SUBNET = 201;
const sh = (cmd: string, args: string[]): string => {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 10_000 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
};
const labNetns = (): string[] =>
  sh('ip', ['netns', 'list'])
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n.startsWith(`${PREFIX}-`));
const rootLinks = (): string[] =>
  (JSON.parse(sh('ip', ['-j', 'link', 'show'])) as { ifname: string }[]).map((l) => l.ifname).filter((n) => n.startsWith(PREFIX));

describe.skipIf(needs('root'))('lab on real namespaces (needs root)', () => {
  let lab: Lab;
  let n1: LabNode, n2: LabNode, n3: LabNode;

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET });
    [n1, n2, n3] = lab.nodes as [LabNode, LabNode, LabNode];
    await lab.startApiservers();
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  it('lays out names and addresses as documented', () => {
    expect(lab.nodes.map((n) => [n.name, n.netns, n.ipv4, n.ipv6, n.mac])).toEqual([
      ['n1', 'blab-n1', '10.78.201.11', 'fd78:201::11', '02:78:c9:00:00:11'],
      ['n2', 'blab-n2', '10.78.201.12', 'fd78:201::12', '02:78:c9:00:00:12'],
      ['n3', 'blab-n3', '10.78.201.13', 'fd78:201::13', '02:78:c9:00:00:13'],
    ]);
    expect(lab.client).toMatchObject({ netns: 'blab-c', ipv4: '10.78.201.50', ipv6: 'fd78:201::50' });
    expect([lab.vip4, lab.vip6]).toEqual(['10.78.201.100', 'fd78:201::100']);
  });

  it('gives every eth0 its addresses at once (no DAD) and a link-local address', async () => {
    for (const n of lab.nodes) {
      const a = await lab.addresses(n);
      expect(a).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ address: n.ipv4, prefixLen: 24, tentative: false }),
          expect.objectContaining({ address: n.ipv6, prefixLen: 64, tentative: false, dadfailed: false }),
        ]),
      );
      expect(await n.linkLocal()).toMatch(/^fe80::/);
    }
  });

  it('every node reaches every other node and the client over IPv4 and IPv6', async () => {
    const checks: Promise<string | null>[] = [];
    for (const from of lab.nodes) {
      const targets = [...lab.nodes.filter((n) => n !== from), lab.client];
      for (const to of targets) {
        for (const address of [to.ipv4, to.ipv6]) {
          checks.push(lab.ping(from.netns, address).then((r) => (r.ok ? null : `${from.name} → ${address}: ${r.detail}`)));
        }
      }
    }
    expect((await Promise.all(checks)).filter(Boolean)).toEqual([]);
  });

  it('the client fetches /version from each node over verified TLS, IPv4 and IPv6', async () => {
    for (const n of lab.nodes) {
      for (const host of [n.ipv4, `[${n.ipv6}]`]) {
        const r = await probeOnce(lab, `https://${host}:6443/version`);
        expect(r, host).toMatchObject({ ok: true, node: n.name, status: 200 });
      }
    }
  });

  it('setReady flips /readyz between 500 and 200', async () => {
    const url = `https://${n1.ipv4}:6443/readyz`;
    await lab.setReady(n1, false);
    expect(await probeOnce(lab, url)).toMatchObject({ ok: false, status: 500, error: 'HTTP 500' });
    expect(await probeOnce(lab, `https://${n1.ipv4}:6443/livez`)).toMatchObject({ ok: true });
    await lab.setReady(n1, true);
    expect(await probeOnce(lab, url)).toMatchObject({ ok: true, status: 200 });
  });

  it('stopApiserver refuses connections; startApiserver brings it back', async () => {
    await lab.stopApiserver(n3);
    expect(await probeOnce(lab, `https://${n3.ipv4}:6443/version`)).toMatchObject({ ok: false, error: 'ECONNREFUSED' });
    await lab.startApiserver(n3);
    expect(await probeOnce(lab, `https://${n3.ipv4}:6443/version`)).toMatchObject({ ok: true, node: 'n3' });
  });

  it('the prober sees the VIP held by n1: every request ok, all served by n1', async () => {
    await lab.exec(n1.netns, ['ip', 'addr', 'add', `${lab.vip4}/32`, 'dev', 'eth0']);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
    const report = await runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 10, durationMs: 1500 }).done;
    // bounded by count: floor(1500/10) + 1
    expect(report.requests).toBeLessThanOrEqual(151);
    expect(report.requests).toBeGreaterThan(50);
    expect(report.failed).toBe(0);
    expect(report.nodes).toEqual({ n1: report.requests });
    expect(report.outages).toEqual([]);
    expect(await lab.neighbor(lab.client.netns, lab.vip4)).toBe(n1.mac);
  });

  it('a prober ends early on stop() and on --until-file, with a summary either way', async () => {
    const url = `https://${lab.vip4}:6443/version`;
    /*
     * Runs a 20 ms prober for 300 ms from its first result (its process start, 100–400 ms on 2
     * loaded cores, is not counted: a fixed 400 ms from the spawn once left 7 requests), ends it
     * with `end`, and checks the summary: at least the requests due in the measured window
     * (fixed schedule, one every 20 ms, those in flight finish first; less one), and far fewer
     * than its 20 s would give (1001).
     */
    const endEarly = async (run: ReturnType<typeof runProber>, end: () => Promise<Summary>): Promise<Summary> => {
      await waitFor(() => run.results().length > 0, { timeoutMs: 10_000, intervalMs: 10, what: 'the first probe result' });
      const t0 = performance.now();
      await sleep(300);
      const ms = performance.now() - t0;
      const summary = await end();
      expect(summary.requests, `requests after ${ms.toFixed(0)} ms`).toBeGreaterThanOrEqual(Math.floor(ms / 20));
      expect(summary.requests).toBeLessThan(100);
      return summary;
    };
    const spawnedAt = Date.now();
    const a = runProber(lab, { url, intervalMs: 20, durationMs: 20_000 });
    let firstSeen: { at: number; t: number } | undefined;
    void waitFor(() => a.results()[0], { timeoutMs: 10_000, intervalMs: 5, what: 'the first probe result' }).then(
      (r) => (firstSeen = { at: Date.now(), t: r.t }),
      () => undefined,
    );
    const stopped = await endEarly(a, () => a.stop());
    expect(stopped.failed).toBe(0);
    // startedAt is t = 0 on the wall clock: after the spawn, and no later than the first result's
    // arrival here less its t (the request started at t, then finished, then its line came)
    expect(stopped.startedAt).toBeGreaterThanOrEqual(spawnedAt);
    expect(stopped.startedAt! + firstSeen!.t).toBeLessThanOrEqual(firstSeen!.at + 1);

    const flag = join(lab.dir, 'stop-prober');
    const b = runProber(lab, { url, intervalMs: 20, durationMs: 20_000, untilFile: flag });
    await endEarly(b, async () => {
      await writeFile(flag, '');
      return b.done;
    });
  });

  it('moving the VIP n1 → n2 shows in the prober as an outage, then n2 serving', async () => {
    const url = `https://${lab.vip4}:6443/version`;
    const prober = runProber(lab, { url, intervalMs: 10, durationMs: 3000, timeoutMs: 250 });
    await sleep(700);
    // the VIP is gone for GAP ms: requests in that window still go to n1's MAC and time out
    const GAP = 400;
    await lab.exec(n1.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0']);
    await sleep(GAP);
    await lab.exec(n2.netns, ['ip', 'addr', 'add', `${lab.vip4}/32`, 'dev', 'eth0']);
    // no arping here: forget the stale neighbour entry instead of a gratuitous ARP
    await lab.exec(lab.client.netns, ['ip', 'neigh', 'flush', 'to', lab.vip4, 'dev', 'eth0']);
    const report = await prober.done;

    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n2']);
    expect(report.nodes.n1).toBeGreaterThan(0);
    expect(report.nodes.n2).toBeGreaterThan(0);
    // once n2 served, only n2 serves
    const oks = report.results.filter((r) => r.ok);
    const firstN2 = oks.findIndex((r) => r.node === 'n2');
    expect(oks.slice(firstN2).every((r) => r.node === 'n2')).toBe(true);
    expect(report.results.at(-1)).toMatchObject({ ok: true, node: 'n2' });
    // one outage, at least as long as the gap, bounded above by gap + timeouts + exec slack
    expect(report.outages).toHaveLength(1);
    const [outage] = report.outages;
    expect(outage?.failed).toBeGreaterThan(0);
    expect(report.maxOutageMs).toBeGreaterThanOrEqual(GAP - 20);
    expect(report.maxOutageMs).toBeLessThan(GAP + 1500);
    expect(await lab.neighbor(lab.client.netns, lab.vip4)).toBe(n2.mac);
    // the v6 VIP is in the serving certificate too
    await lab.exec(n2.netns, ['ip', 'addr', 'add', `${lab.vip6}/128`, 'dev', 'eth0', 'nodad']);
    expect(await probeOnce(lab, `https://[${lab.vip6}]:6443/version`)).toMatchObject({ ok: true, node: 'n2' });
  });

  it('linkDown makes a node unreachable to the others; linkUp brings it back', async () => {
    await lab.linkDown(n3);
    const down = await lab.ping(n1.netns, n3.ipv4);
    expect(down.ok).toBe(false);
    expect(await probeOnce(lab, `https://${n3.ipv4}:6443/livez`, { timeoutMs: 500 })).toMatchObject({ ok: false });
    // the node keeps its addresses; only its carrier is gone
    expect((await lab.addresses(n3)).some((a) => a.address === n3.ipv4)).toBe(true);
    await lab.linkUp(n3);
    expect((await lab.ping(n1.netns, n3.ipv4)).ok).toBe(true);
    expect((await lab.ping(n3.netns, n2.ipv6)).ok).toBe(true);
  });

  it('exec and spawn refuse namespaces that are not the lab’s', () => {
    expect(() => lab.exec('somebody-else', ['true'])).toThrow(/not one of this lab's namespaces/);
    expect(() => lab.spawn('somebody-else', ['true'])).toThrow(/not one of this lab's namespaces/);
  });

  it('teardown removes every namespace and link with the prefix, twice without error', async () => {
    const dir = lab.dir;
    const pids = lab.nodes.map((n) => lab.apiserver(n)?.pid);
    expect(pids.every((p) => typeof p === 'number')).toBe(true);
    await lab.teardown();
    await lab.teardown();
    expect(labNetns()).toEqual([]);
    expect(rootLinks()).toEqual([]);
    expect(existsSync(dir)).toBe(process.env.BALLAST_LAB_KEEP === '1');
    for (const pid of pids) expect(() => process.kill(pid as number, 0)).toThrow();
  });
});

describe.skipIf(needs('root'))('Lab.cleanupStale (needs root)', () => {
  it('removes a half-built lab: namespaces, stray links, and the processes inside', async () => {
    // a run that died mid-build: two namespaces, a bridge, a veth between them, a veth pair in
    // this namespace, a process still running inside n1; plus a namespace that only looks alike
    sh('ip', ['netns', 'add', `${PREFIX}-n1`]);
    sh('ip', ['netns', 'add', `${PREFIX}-lan`]);
    sh('ip', ['netns', 'add', `${PREFIX}-other`]);
    const sleeper = spawn('ip', ['netns', 'exec', `${PREFIX}-n1`, 'sleep', '30'], { detached: true, stdio: 'ignore' });
    const sleeperExit = new Promise<void>((r) => sleeper.once('exit', () => r()));
    try {
      sh('ip', ['-n', `${PREFIX}-lan`, 'link', 'add', 'br0', 'type', 'bridge']);
      sh('ip', ['-n', `${PREFIX}-lan`, 'link', 'add', `${PREFIX}n1`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', `${PREFIX}-n1`]);
      sh('ip', ['link', 'add', `${PREFIX}n2`, 'type', 'veth', 'peer', 'name', `${PREFIX}c`]);
      await sleep(100);

      const report = await Lab.cleanupStale(PREFIX);
      expect(report.netns.sort()).toEqual([`${PREFIX}-lan`, `${PREFIX}-n1`]);
      expect(report.links).toContain(`${PREFIX}n2`);
      expect(report.pids).toContain(sleeper.pid);
      await Promise.race([sleeperExit, sleep(3000).then(() => Promise.reject(new Error('the process in the stale namespace survived')))]);
      expect(labNetns()).toEqual([`${PREFIX}-other`]);
      expect(rootLinks()).toEqual([]);
      // nothing left to do the second time
      expect(await Lab.cleanupStale(PREFIX)).toMatchObject({ netns: [], links: [], pids: [] });
    } finally {
      if (sleeper.pid !== undefined) {
        try {
          process.kill(-sleeper.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      spawnSync('ip', ['netns', 'del', `${PREFIX}-other`]);
      await Lab.cleanupStale(PREFIX);
    }
  });
});

describe('lab argument checks (no root needed)', () => {
  it('rejects bad prefixes and subnets before touching anything', async () => {
    await expect(Lab.cleanupStale('toolong')).rejects.toThrow(/prefix/);
    await expect(Lab.cleanupStale('a-b')).rejects.toThrow(/prefix/);
    await expect(Lab.create({ prefix: 'Bad', subnet: 1 })).rejects.toThrow(/prefix/);
    await expect(Lab.create({ prefix: 'ok', subnet: 251 })).rejects.toThrow(/subnet/);
  });
});

describe('stand-in apiserver and prober over loopback (no root needed)', () => {
  let dir: string;
  let standin: Standin;
  let ca: Buffer;
  const lines: string[] = [];
  const port = 20_000 + (process.pid % 20_000);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ballast-standin-test-'));
    await writeFile(join(dir, 'ext.cnf'), '[ext]\nsubjectAltName = IP:127.0.0.1,IP:::1,DNS:localhost\nbasicConstraints = critical,CA:FALSE\n');
    const o = (args: string[]): string => sh('openssl', args);
    o([
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      join(dir, 'ca.key'),
      '-out',
      join(dir, 'ca.crt'),
      '-days',
      '1',
      '-subj',
      '/CN=test ca',
    ]);
    o([
      'req',
      '-new',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      join(dir, 's.key'),
      '-out',
      join(dir, 's.csr'),
      '-subj',
      '/CN=s',
    ]);
    o([
      'x509',
      '-req',
      '-in',
      join(dir, 's.csr'),
      '-CA',
      join(dir, 'ca.crt'),
      '-CAkey',
      join(dir, 'ca.key'),
      '-set_serial',
      '7',
      '-days',
      '1',
      '-extfile',
      join(dir, 'ext.cnf'),
      '-extensions',
      'ext',
      '-out',
      join(dir, 's.crt'),
    ]);
    o([
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      join(dir, 'other.key'),
      '-out',
      join(dir, 'other.crt'),
      '-days',
      '1',
      '-subj',
      '/CN=test ca',
    ]);
    ca = await readFile(join(dir, 'ca.crt'));
    standin = await startStandin({
      name: 'n9',
      cert: await readFile(join(dir, 's.crt')),
      key: await readFile(join(dir, 's.key')),
      port,
      host: '127.0.0.1',
      ready: true,
      log: (l) => lines.push(l),
    });
  });
  afterAll(async () => {
    await standin?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('serves /version, /livez, /readyz and 404 with the node name', async () => {
    const get = (path: string) => requestOnce(new URL(`https://127.0.0.1:${port}${path}`), ca, 2000);
    expect(await get('/version')).toMatchObject({ ok: true, node: 'n9', status: 200 });
    expect(await get('/livez')).toMatchObject({ ok: true, node: 'n9' });
    expect(await get('/readyz')).toMatchObject({ ok: true });
    expect(await get('/nope')).toMatchObject({ ok: false, status: 404, error: 'HTTP 404' });
    standin.setReady(false);
    expect(await get('/readyz')).toMatchObject({ ok: false, status: 500 });
    standin.setReady(false);
    standin.setReady(true);
    expect(await get('/readyz')).toMatchObject({ ok: true });
    expect(lines.filter((l) => l.includes('ready='))).toEqual([
      expect.stringContaining('listening on 127.0.0.1'),
      'apiserver-standin n9: ready=false',
      'apiserver-standin n9: ready=false (unchanged)',
      'apiserver-standin n9: ready=true',
    ]);
  });

  it('the prober rejects a server whose certificate the CA did not sign', async () => {
    // same subject name as the real CA, different key
    const other = await readFile(join(dir, 'other.crt'));
    const r = await requestOnce(new URL(`https://127.0.0.1:${port}/version`), other, 2000);
    expect(r).toMatchObject({ ok: false });
    expect(r.ok ? '' : r.error).toMatch(/CERT|SIGNATURE|VERIFY/);
  });

  it('reach: a RST from a closed loopback port counts as reachable', async () => {
    const r = await reach('127.0.0.1', 9, 1000);
    expect(r.ok).toBe(true);
    expect(['ECONNREFUSED', 'connect']).toContain(r.how);
  });

  it('close() ends keep-alive connections instead of waiting for them', async () => {
    const agent = new https.Agent({ keepAlive: true, ca });
    await new Promise<void>((resolve, reject) => {
      https
        .get(`https://127.0.0.1:${port}/livez`, { agent }, (res) => {
          res.resume();
          res.on('end', resolve);
        })
        .on('error', reject);
    });
    const t0 = Date.now();
    await standin.close();
    expect(Date.now() - t0).toBeLessThan(1000);
    agent.destroy();
  });
});
