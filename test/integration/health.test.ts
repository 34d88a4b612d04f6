/**
 * Health checks for real.
 *
 * 1. The probe over loopback against small HTTPS servers with certificates made here by openssl
 *    (no root): verification, serverName, client certificates, bearer tokens and their rotation,
 *    the hard deadline, the body cap, one new connection per check.
 * 2. The checker in the lab (prefix `bhlth`, subnet 221, needs root): lab/clients/health-probe.ts runs
 *    a HealthChecker in the client namespace against the TLS stand-in apiservers of the nodes.
 *    Timings are asserted as bounds derived from interval, rise, fall and timeout.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import net, { type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Lab, compiledScript, type LabNode, type LabProcess } from '../../lab/lab.js';
import { createProbe, MAX_BODY_BYTES, type ProbeSettings } from '../../src/health/probe.js';
import { needs, sleep, startLab } from '../support/index.js';

// ---------------------------------------------------------------------------------------------
// certificates

interface Pki {
  dir: string;
  caFile: string;
  otherCaFile: string;
  serverCert: Buffer;
  serverKey: Buffer;
  clientCertFile: string;
  clientKeyFile: string;
}

/** A CA, a second unrelated CA, a server certificate (kubernetes, 127.0.0.1, ::1) and a client certificate. */
function makePki(): Pki {
  const dir = mkdtempSync(join(tmpdir(), 'ballast-health-test-'));
  const p = (name: string): string => join(dir, name);
  const openssl = (args: string[]): void => {
    execFileSync('openssl', args, { stdio: 'pipe' });
  };
  writeFileSync(
    p('ext.cnf'),
    [
      '[server]',
      'basicConstraints = critical,CA:FALSE',
      'keyUsage = critical,digitalSignature',
      'extendedKeyUsage = serverAuth',
      'subjectAltName = DNS:kubernetes,IP:127.0.0.1,IP:::1',
      '[client]',
      'basicConstraints = critical,CA:FALSE',
      'keyUsage = critical,digitalSignature',
      'extendedKeyUsage = clientAuth',
      '',
    ].join('\n'),
  );
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  for (const ca of ['ca', 'other-ca']) {
    openssl([
      'req',
      '-x509',
      ...ec,
      '-keyout',
      p(`${ca}.key`),
      '-out',
      p(`${ca}.crt`),
      '-days',
      '1',
      '-subj',
      `/CN=ballast health test ${ca}`,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ]);
  }
  for (const [name, ext, cn] of [
    ['server', 'server', 'kube-apiserver'],
    ['client', 'client', 'ballast-health'],
  ] as const) {
    openssl(['req', '-new', ...ec, '-keyout', p(`${name}.key`), '-out', p(`${name}.csr`), '-subj', `/CN=${cn}`]);
    openssl([
      'x509',
      '-req',
      '-in',
      p(`${name}.csr`),
      '-CA',
      p('ca.crt'),
      '-CAkey',
      p('ca.key'),
      '-set_serial',
      `0x${Date.now().toString(16)}${name.length}`,
      '-days',
      '1',
      '-extfile',
      p('ext.cnf'),
      '-extensions',
      ext,
      '-out',
      p(`${name}.crt`),
    ]);
  }
  return {
    dir,
    caFile: p('ca.crt'),
    otherCaFile: p('other-ca.crt'),
    serverCert: readFileSync(p('server.crt')),
    serverKey: readFileSync(p('server.key')),
    clientCertFile: p('client.crt'),
    clientKeyFile: p('client.key'),
  };
}

// ---------------------------------------------------------------------------------------------
// 1. the probe over loopback

interface Seen {
  path: string;
  authorization: string | undefined;
  servername: string | false | undefined;
  clientCN: string | undefined;
  reused: boolean;
}

/** An HTTPS server on `host` answering by path; records every request and counts connections. */
async function startServer(pki: Pki, host: string, opts: { requireClientCert?: boolean } = {}) {
  const seen: Seen[] = [];
  let connections = 0;
  const sockets = new Set<Socket>();
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const socket = req.socket as TLSSocket;
    const peer = socket.getPeerCertificate();
    seen.push({
      path: req.url ?? '',
      authorization: req.headers.authorization,
      servername: (socket as TLSSocket & { servername?: string | false }).servername,
      clientCN: peer && 'subject' in peer ? [peer.subject?.CN].flat()[0] : undefined,
      reused: socket.isSessionReused(),
    });
    switch (req.url) {
      case '/readyz':
        res.end('ok');
        return;
      case '/fail':
        res.writeHead(500).end('[-]etcd failed\n');
        return;
      case '/moved':
        res.writeHead(301, { location: '/readyz' }).end();
        return;
      case '/big': {
        // an endless body: the probe must stop after 64 KiB, not wait for the end
        res.writeHead(200, { 'content-type': 'text/plain' });
        const chunk = Buffer.alloc(16 * 1024, 0x61);
        const pump = (): void => {
          while (!res.destroyed && res.write(chunk));
          if (!res.destroyed) res.once('drain', pump);
        };
        pump();
        return;
      }
      case '/stall':
        // headers, then nothing: the deadline covers the body too
        res.writeHead(200, { 'content-length': '10' });
        res.write('12345');
        return;
      default:
        res.writeHead(404).end();
    }
  };
  const server = https.createServer(
    {
      cert: pki.serverCert,
      key: pki.serverKey,
      ...(opts.requireClientCert ? { requestCert: true, rejectUnauthorized: true, ca: readFileSync(pki.caFile) } : {}),
    },
    handler,
  );
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  server.on('secureConnection', () => connections++);
  server.on('tlsClientError', () => undefined);
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    seen,
    connections: () => connections,
    open: () => sockets.size,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

describe('probe (HTTPS over loopback, no root)', () => {
  let pki: Pki;
  let srv: Awaited<ReturnType<typeof startServer>>;
  let srv6: Awaited<ReturnType<typeof startServer>>;
  let mtls: Awaited<ReturnType<typeof startServer>>;
  const target = (): { host: string; port: number } => ({ host: '127.0.0.1', port: srv.port });
  const settings = (over: Partial<ProbeSettings> = {}): ProbeSettings => ({
    path: '/readyz',
    timeoutMs: 1000,
    insecureSkipVerify: false,
    caFile: pki.caFile,
    ...over,
  });

  beforeAll(async () => {
    pki = makePki();
    srv = await startServer(pki, '127.0.0.1');
    srv6 = await startServer(pki, '::1');
    mtls = await startServer(pki, '127.0.0.1', { requireClientCert: true });
  });
  afterAll(async () => {
    await Promise.all([srv?.close(), srv6?.close(), mtls?.close()]);
    if (pki) rmSync(pki.dir, { recursive: true, force: true });
  });

  it('passes on 2xx over verified TLS, checking the IP SubjectAltName of the backend', async () => {
    const r = await createProbe(settings())(target());
    expect(r).toMatchObject({ ok: true, status: 200 });
    expect(r.error).toBeUndefined();
    expect(r.latencyMs).toBeGreaterThan(0);
    expect(r.latencyMs).toBeLessThan(1000);
    // no SNI for an IP address
    expect(srv.seen.at(-1)?.servername).toBeFalsy();
    expect(await createProbe(settings())({ host: '::1', port: srv6.port })).toMatchObject({ ok: true, status: 200 });
  });

  it('fails on any other status, naming it', async () => {
    expect(await createProbe(settings({ path: '/fail' }))(target())).toMatchObject({ ok: false, status: 500, error: 'http 500' });
    expect(await createProbe(settings({ path: '/moved' }))(target())).toMatchObject({ ok: false, status: 301, error: 'http 301' });
    expect(await createProbe(settings({ path: '/nope' }))(target())).toMatchObject({ ok: false, status: 404, error: 'http 404' });
  });

  it('reports a closed port as ECONNREFUSED', async () => {
    const s = net.createServer();
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const port = (s.address() as AddressInfo).port;
    await new Promise<void>((r) => s.close(() => r()));
    expect(await createProbe(settings())({ host: '127.0.0.1', port })).toMatchObject({ ok: false, error: 'ECONNREFUSED' });
  });

  it('fails verification against the wrong CA ("tls: …"), and skips it with insecureSkipVerify', async () => {
    const wrong = await createProbe(settings({ caFile: pki.otherCaFile }))(target());
    expect(wrong.ok).toBe(false);
    expect(wrong.error).toMatch(/^tls: UNABLE_TO_VERIFY_LEAF_SIGNATURE: /);
    expect(wrong.status).toBeUndefined();
    expect(await createProbe(settings({ caFile: pki.otherCaFile, insecureSkipVerify: true }))(target())).toMatchObject({ ok: true });
    // the system roots do not know the test CA either
    expect((await createProbe(settings({ caFile: undefined }))(target())).error).toMatch(/^tls: /);
  });

  it('verifies serverName instead of the IP, and sends it as SNI', async () => {
    // 127.0.0.2 is not in the certificate: only the serverName override makes it pass
    const server = await startServer(pki, '127.0.0.2');
    try {
      const t = { host: '127.0.0.2', port: server.port };
      const plain = await createProbe(settings())(t);
      expect(plain.error).toMatch(/^tls: ERR_TLS_CERT_ALTNAME_INVALID: /);
      expect(await createProbe(settings({ serverName: 'kubernetes' }))(t)).toMatchObject({ ok: true, status: 200 });
      expect(server.seen.at(-1)?.servername).toBe('kubernetes');
      // an IP serverName is verified but not sent (SNI carries names only)
      expect(await createProbe(settings({ serverName: '127.0.0.1' }))(t)).toMatchObject({ ok: true });
      expect(server.seen.at(-1)?.servername).toBeFalsy();
      const wrong = await createProbe(settings({ serverName: 'wrong.example' }))(t);
      expect(wrong.error).toMatch(/^tls: ERR_TLS_CERT_ALTNAME_INVALID: .*wrong\.example/);
    } finally {
      await server.close();
    }
  });

  it('presents the client certificate', async () => {
    const t = { host: '127.0.0.1', port: mtls.port };
    const withCert = await createProbe(settings({ clientCertFile: pki.clientCertFile, clientKeyFile: pki.clientKeyFile }))(t);
    expect(withCert).toMatchObject({ ok: true, status: 200 });
    expect(mtls.seen.at(-1)?.clientCN).toBe('ballast-health');
    const without = await createProbe(settings())(t);
    expect(without.ok).toBe(false);
    expect(without.error).toBeDefined();
  });

  it('sends the bearer token and picks up a rotated one (rewritten or replaced)', async () => {
    const tokenFile = join(pki.dir, 'token');
    writeFileSync(tokenFile, 'first-token\n');
    const probe = createProbe(settings({ tokenFile }));
    await probe(target());
    expect(srv.seen.at(-1)?.authorization).toBe('Bearer first-token');
    await probe(target());
    expect(srv.seen.at(-1)?.authorization).toBe('Bearer first-token');
    // rewritten in place (a longer token: size and mtime change)
    writeFileSync(tokenFile, 'second-token-longer\n');
    await probe(target());
    expect(srv.seen.at(-1)?.authorization).toBe('Bearer second-token-longer');
    // replaced atomically, as kubelet does for projected tokens
    writeFileSync(`${tokenFile}.new`, 'third-token');
    renameSync(`${tokenFile}.new`, tokenFile);
    await probe(target());
    expect(srv.seen.at(-1)?.authorization).toBe('Bearer third-token');
    writeFileSync(tokenFile, '\n');
    expect(await probe(target())).toMatchObject({ ok: false, error: `tokenFile ${tokenFile} is empty` });
    rmSync(tokenFile);
    expect(await probe(target())).toMatchObject({ ok: false, error: `waiting for apiserver.health.tokenFile ${tokenFile} (it does not exist yet)` });
    expect(statSync(pki.dir).isDirectory()).toBe(true);
  });

  it('picks up a replaced CA file', async () => {
    const caFile = join(pki.dir, 'rotating-ca.crt');
    writeFileSync(caFile, readFileSync(pki.otherCaFile));
    const probe = createProbe(settings({ caFile }));
    expect((await probe(target())).error).toMatch(/^tls: /);
    writeFileSync(`${caFile}.new`, readFileSync(pki.caFile));
    renameSync(`${caFile}.new`, caFile);
    expect(await probe(target())).toMatchObject({ ok: true });
  });

  it('opens a new connection for every check, resuming the TLS session of the first (none with sessionReuseMs 0)', async () => {
    const before = srv.connections();
    const probe = createProbe(settings());
    for (let i = 0; i < 3; i++) expect((await probe(target())).ok).toBe(true);
    expect(srv.connections() - before).toBe(3);
    expect(srv.seen.slice(-3).map((s) => s.reused)).toStrictEqual([false, true, true]);
    const full = createProbe(settings(), { sessionReuseMs: 0 });
    for (let i = 0; i < 2; i++) expect((await full(target())).ok).toBe(true);
    expect(srv.connections() - before).toBe(5);
    expect(srv.seen.slice(-2).map((s) => s.reused)).toStrictEqual([false, false]);
  });

  it('enforces one deadline over connect + TLS + response, and destroys the socket', async () => {
    // accepts TCP, never speaks TLS
    const sockets: Socket[] = [];
    let closedByPeer = 0;
    const mute = net.createServer((s) => {
      sockets.push(s);
      s.on('end', () => closedByPeer++);
      s.on('error', () => undefined);
      s.resume();
    });
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', r));
    const port = (mute.address() as AddressInfo).port;
    try {
      const r = await createProbe(settings({ timeoutMs: 200 }))({ host: '127.0.0.1', port });
      expect(r).toMatchObject({ ok: false, cause: { kind: 'slow' }, error: 'timeout after connect' });
      expect(r.latencyMs).toBeGreaterThanOrEqual(199);
      expect(r.latencyMs).toBeLessThan(400);
      // the server sees the connection closed: the probe destroyed it
      await sleep(100);
      expect(sockets).toHaveLength(1);
      expect(closedByPeer).toBe(1);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => mute.close(() => r()));
    }
    // headers arrive, the body stalls
    const stalled = await createProbe(settings({ path: '/stall', timeoutMs: 200 }))(target());
    expect(stalled).toMatchObject({ ok: false, cause: { kind: 'slow' }, error: 'timeout after connect' });
    await sleep(100);
    expect(srv.open()).toBe(0);
  });

  it(`reads at most ${MAX_BODY_BYTES} bytes of body`, async () => {
    const r = await createProbe(settings({ path: '/big', timeoutMs: 2000 }))(target());
    expect(r).toMatchObject({ ok: true, status: 200 });
    expect(r.latencyMs).toBeLessThan(1000);
    await sleep(100);
    expect(srv.open()).toBe(0);
  });

  it('ends at once when aborted', async () => {
    const ac = new AbortController();
    const pending = createProbe(settings({ path: '/stall', timeoutMs: 5000 }))(target(), ac.signal);
    await sleep(50);
    ac.abort();
    const r = await pending;
    expect(r).toMatchObject({ ok: false, error: 'aborted' });
    expect(r.latencyMs).toBeLessThan(1000);
  });

  it('reports a missing CA file as waited for, without connecting', async () => {
    const before = srv.connections();
    const missing = join(pki.dir, 'missing.crt');
    expect(await createProbe(settings({ caFile: missing }))(target())).toMatchObject({
      ok: false,
      error: `waiting for apiserver.health.caFile ${missing} (it does not exist yet)`,
      cause: { kind: 'waitingForFile', setting: 'apiserver.health.caFile', path: missing },
    });
    expect(srv.connections()).toBe(before);
  });
});

// ---------------------------------------------------------------------------------------------
// 2. the checker in the lab

interface ChangeLine {
  event: 'change';
  backend: string;
  from: string;
  to: string;
  reason: string;
  at: string;
  healthy: boolean;
}
type Line =
  | { event: 'start'; at: string; backends: string[] }
  | ChangeLine
  | { event: 'snapshot'; backends: { address: string; state: string; reason: string | null }[] }
  | { event: 'warn' };

/** The compiled script, refusing a stale build (child processes run dist/, not the sources). */
function healthProbeScript(): string {
  return compiledScript('health-probe', ['src/health/checker.ts', 'src/health/probe.ts', 'src/health/hysteresis.ts']);
}

/** A health-probe process in the client namespace, its output parsed line by line. */
class CheckerRun {
  readonly lines: Line[] = [];
  readonly proc: LabProcess;
  #partial = '';
  #waiters: (() => void)[] = [];

  constructor(lab: Lab, config: object) {
    this.proc = lab.spawn(lab.client.netns, [process.execPath, healthProbeScript(), JSON.stringify(config)], { logFile: 'health-probe.log' });
    this.proc.child.stdout?.on('data', (buf: Buffer) => {
      this.#partial += buf.toString('utf8');
      const parts = this.#partial.split('\n');
      this.#partial = parts.pop() ?? '';
      for (const l of parts) {
        if (!l.startsWith('{')) continue;
        this.lines.push(JSON.parse(l) as Line);
        for (const w of this.#waiters.splice(0)) w();
      }
    });
  }

  changes(): ChangeLine[] {
    return this.lines.filter((l): l is ChangeLine => l.event === 'change');
  }

  /** Resolves with the first line (after index `from`) that `pred` accepts; rejects after `timeoutMs`. */
  async waitFor<T extends Line>(pred: (l: Line) => l is T, timeoutMs: number, from?: number): Promise<T>;
  async waitFor(pred: (l: Line) => boolean, timeoutMs: number, from?: number): Promise<Line>;
  async waitFor(pred: (l: Line) => boolean, timeoutMs: number, from = 0): Promise<Line> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.lines.slice(from).find(pred);
      if (hit !== undefined) return hit;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(`no matching line within ${timeoutMs} ms; output:\n${this.proc.output().slice(-3000)}`);
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** SIGTERM; resolves with the final snapshot. */
  async stop(): Promise<Extract<Line, { event: 'snapshot' }>['backends']> {
    const n = this.lines.length;
    await this.proc.stop('SIGTERM', 3000);
    const snap = this.lines.slice(n).find((l): l is Extract<Line, { event: 'snapshot' }> => l.event === 'snapshot');
    if (snap === undefined) throw new Error(`no final snapshot; output:\n${this.proc.output().slice(-3000)}`);
    return snap.backends;
  }
}

const isChange =
  (backend: string, to: string) =>
  (l: Line): l is ChangeLine =>
    l.event === 'change' && l.backend === backend && l.to === to;

describe.skipIf(needs('root'))(`checker against the lab's stand-in apiservers (needs root)`, () => {
  const INTERVAL = 200;
  const TIMEOUT = 150;
  const RISE = 2;
  const FALL = 2;
  // scheduling noise on a busy 2-core machine (node start-up excluded: times come from the script's own clock)
  const SLACK = 400;
  let lab: Lab;
  let n1: LabNode, n2: LabNode, n3: LabNode;
  let main: CheckerRun;
  let pki: Pki;
  const addr = (n: LabNode): string => `${n.ipv4}:6443`;
  const health = (over: object = {}): object => ({
    path: '/readyz',
    caFile: lab.ca.certFile,
    intervalMs: INTERVAL,
    timeoutMs: TIMEOUT,
    rise: RISE,
    fall: FALL,
    ...over,
  });
  const ms = (iso: string): number => Date.parse(iso);

  beforeAll(async () => {
    healthProbeScript();
    pki = makePki(); // only its unrelated CA is used, as the wrong CA
    lab = await startLab({ prefix: 'bhlth', subnet: 221 });
    [n1, n2, n3] = lab.nodes as [LabNode, LabNode, LabNode];
    await lab.startApiservers();
  });
  afterAll(async () => {
    await lab?.teardown();
    if (pki) rmSync(pki.dir, { recursive: true, force: true });
  });

  it('brings all three nodes up within the first interval + rise × interval', async () => {
    main = new CheckerRun(lab, { backends: lab.nodes.map(addr), health: health() });
    const start = await main.waitFor((l): l is Extract<Line, { event: 'start' }> => l.event === 'start', 10_000);
    // first check within one interval, then rise - 1 more at most 1.1 × interval apart, each under the timeout
    const bound = INTERVAL + (RISE - 1) * INTERVAL * 1.1 + TIMEOUT + SLACK;
    for (const n of lab.nodes) {
      const up = await main.waitFor(isChange(addr(n), 'up'), bound + 5_000);
      expect(up).toMatchObject({ from: 'unknown', reason: 'http 200', healthy: true });
      expect(ms(up.at) - ms(start.at)).toBeLessThanOrEqual(bound);
      expect(ms(up.at) - ms(start.at)).toBeGreaterThanOrEqual((RISE - 1) * INTERVAL * 0.9);
    }
    expect(main.changes().every((c) => c.to === 'up')).toBe(true);
  });

  it('takes n1 down with "http 500" within fall × interval (+ one interval + timeout) of it turning unready', async () => {
    const from = main.lines.length;
    const t0 = Date.now();
    await lab.setReady(n1, false);
    const down = await main.waitFor(isChange(addr(n1), 'down'), 10_000, from);
    expect(down).toMatchObject({ from: 'up', reason: 'http 500', healthy: false });
    expect(ms(down.at) - t0).toBeLessThanOrEqual(FALL * INTERVAL + INTERVAL + TIMEOUT + SLACK);
    expect(ms(down.at) - t0).toBeGreaterThanOrEqual((FALL - 1) * INTERVAL * 0.9);
    // nobody else moved
    expect(
      main
        .changes()
        .filter((c) => c.backend !== addr(n1))
        .every((c) => c.to === 'up'),
    ).toBe(true);
  });

  it('brings n1 back within rise × interval (+ one interval + timeout) of it turning ready', async () => {
    const from = main.lines.length;
    const t0 = Date.now();
    await lab.setReady(n1, true);
    const up = await main.waitFor(isChange(addr(n1), 'up'), 10_000, from);
    expect(up).toMatchObject({ from: 'down', reason: 'http 200' });
    expect(ms(up.at) - t0).toBeLessThanOrEqual(RISE * INTERVAL + INTERVAL + TIMEOUT + SLACK);
  });

  it('takes n2 down with ECONNREFUSED when its apiserver stops, and back up when it returns', async () => {
    const from = main.lines.length;
    const t0 = Date.now();
    await lab.stopApiserver(n2);
    const down = await main.waitFor(isChange(addr(n2), 'down'), 10_000, from);
    expect(down).toMatchObject({ from: 'up', reason: 'ECONNREFUSED' });
    // stopApiserver waits for the process to exit; the bound starts before it
    expect(ms(down.at) - t0).toBeLessThanOrEqual(FALL * INTERVAL + INTERVAL + TIMEOUT + SLACK + 3_000);
    await lab.startApiserver(n2);
    const up = await main.waitFor(isChange(addr(n2), 'up'), RISE * INTERVAL + INTERVAL + TIMEOUT + SLACK + 5_000, from);
    expect(up.reason).toBe('http 200');
    const snapshot = await main.stop();
    expect(snapshot.map((b) => [b.address, b.state])).toStrictEqual(lab.nodes.map((n) => [addr(n), 'up']));
  });

  it('with the wrong CA never brings a node up, and says why ("tls: …")', async () => {
    const run = new CheckerRun(lab, { backends: [addr(n3)], health: health({ caFile: pki.otherCaFile }) });
    try {
      const down = await run.waitFor(isChange(addr(n3), 'down'), 10_000);
      expect(down.from).toBe('unknown');
      expect(down.reason).toMatch(/^tls: /);
      // several more intervals: still never up
      await sleep((RISE + 3) * INTERVAL);
      expect(run.changes().filter((c) => c.to === 'up')).toStrictEqual([]);
    } finally {
      const snapshot = await run.stop();
      expect(snapshot[0]).toMatchObject({ address: addr(n3), state: 'down', reason: expect.stringMatching(/^tls: UNABLE_TO_VERIFY_LEAF_SIGNATURE: /) });
    }
  });

  it('verifies serverName "kubernetes" instead of the node IP; a name not in the certificate fails', async () => {
    const good = new CheckerRun(lab, { backends: lab.nodes.map(addr), health: health({ serverName: 'kubernetes' }) });
    const bad = new CheckerRun(lab, { backends: [addr(n1)], health: health({ serverName: 'not-in-the-cert.example' }) });
    try {
      for (const n of lab.nodes) await good.waitFor(isChange(addr(n), 'up'), 10_000);
      const down = await bad.waitFor(isChange(addr(n1), 'down'), 10_000);
      expect(down.reason).toMatch(/^tls: ERR_TLS_CERT_ALTNAME_INVALID: /);
    } finally {
      await Promise.all([good.stop(), bad.stop()]);
    }
    expect(bad.changes().filter((c) => c.to === 'up')).toStrictEqual([]);
  });

  it('checks IPv6 backends, verifying the IPv6 SubjectAltName', async () => {
    const backends = lab.nodes.map((n) => `[${n.ipv6}]:6443`);
    const run = new CheckerRun(lab, { backends, health: health() });
    try {
      for (const b of backends) expect((await run.waitFor(isChange(b, 'up'), 10_000)).reason).toBe('http 200');
    } finally {
      await run.stop();
    }
  });
});
