/**
 * Discovery: the merge rules, the last-known file, and Discovery against stand-in apiservers on
 * loopback (a real @kubernetes/client-node informer, real TLS).
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStandin, type Standin } from '../../lab/apiserver-standin.js';
import { appendChange, setDenial } from '../../lab/endpointslice-store.js';
import { waitFor } from '../../lab/wait.js';
import { BackendSet, clientCertificateExpiry, denialFix, denialOf, Discovery, readLastKnown, writeLastKnown } from '../../src/discovery/index.js';
import type { Log } from '../../src/log/log.js';
import { formatHostPort, parseHostPort, type HostPort } from '../../src/net/hostport.js';
import { kubeconfigText, makeTestPki, type TestPki } from '../support/tls.js';

const hp = (s: string): HostPort => parseHostPort(s);
const names = (l: { backend: HostPort; source: string }[]): string[] => l.map((s) => `${formatHostPort(s.backend)} ${s.source}`);

describe('BackendSet: the merge rules', () => {
  it('before the API answers: seed, then last-known entries not in the seed', () => {
    const s = new BackendSet([hp('10.0.0.11:6443')], [hp('10.0.0.12:6443'), hp('10.0.0.11:6443')]);
    expect(names(s.current())).toStrictEqual(['10.0.0.11:6443 seed', '10.0.0.12:6443 lastKnown']);
    expect(s.answered).toBe(false);
  });
  it('once the API answers, the discovered set replaces the seed and the last-known set; a later seed changes nothing', () => {
    const s = new BackendSet([hp('10.0.0.11:6443')], [hp('10.0.0.13:6443')]);
    expect(s.discovered([hp('10.0.0.12:6443'), hp('10.0.0.14:6443')])).toStrictEqual({ changed: true, keptOnEmpty: false });
    expect(names(s.current())).toStrictEqual(['10.0.0.12:6443 endpointslice', '10.0.0.14:6443 endpointslice']);
    expect(s.setSeed([hp('10.0.0.99:6443')])).toBe(false);
    expect(s.discovered([hp('10.0.0.12:6443'), hp('10.0.0.14:6443')]).changed).toBe(false);
  });
  it('an empty answer keeps the last non-empty set and is counted', () => {
    const s = new BackendSet([hp('10.0.0.11:6443')], []);
    // empty before any answer: the seed stays
    expect(s.discovered([])).toStrictEqual({ changed: false, keptOnEmpty: true });
    expect(names(s.current())).toStrictEqual(['10.0.0.11:6443 seed']);
    s.discovered([hp('10.0.0.12:6443')]);
    expect(s.discovered([])).toStrictEqual({ changed: false, keptOnEmpty: true });
    expect(names(s.current())).toStrictEqual(['10.0.0.12:6443 endpointslice']);
    expect(s.emptyKept).toBe(2);
  });
  it('a backend that leaves is gone from the set (the checker drains it); one that joins is added', () => {
    const s = new BackendSet([], []);
    s.discovered([hp('10.0.0.11:6443'), hp('10.0.0.12:6443')]);
    expect(s.discovered([hp('10.0.0.12:6443'), hp('10.0.0.13:6443')]).changed).toBe(true);
    expect(s.backends().map(formatHostPort)).toStrictEqual(['10.0.0.12:6443', '10.0.0.13:6443']);
  });
});

describe('the last-known file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ballast-lastknown-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  it('writes atomically (no temporary file left, the directory created) and reads back', () => {
    const path = join(dir, 'sub', 'backends.json');
    writeLastKnown(path, [hp('10.0.0.11:6443'), hp('[fd00::12]:6443')], new Date('2026-12-01T12:00:00Z'));
    expect(JSON.parse(readFileSync(path, 'utf8'))).toStrictEqual({
      version: 1,
      updated: '2026-12-01T12:00:00.000Z',
      backends: ['10.0.0.11:6443', '[fd00::12]:6443'],
    });
    expect(readdirSync(join(dir, 'sub'))).toStrictEqual(['backends.json']);
    const r = readLastKnown(path);
    expect(r.kind === 'ok' && r.backends.map(formatHostPort)).toStrictEqual(['10.0.0.11:6443', '[fd00::12]:6443']);
    // a second write replaces the first whole
    writeLastKnown(path, [hp('10.0.0.13:6443')]);
    const r2 = readLastKnown(path);
    expect(r2.kind === 'ok' && r2.backends.map(formatHostPort)).toStrictEqual(['10.0.0.13:6443']);
  });
  it('a failed write leaves the old file whole', () => {
    const sub = join(dir, 'ro');
    writeLastKnown(join(sub, 'b.json'), [hp('10.0.0.11:6443')]);
    chmodSync(sub, 0o500);
    try {
      // root ignores directory permissions: only assert when the write really failed
      let failed = false;
      try {
        writeLastKnown(join(sub, 'b.json'), [hp('10.0.0.12:6443')]);
      } catch {
        failed = true;
      }
      const r = readLastKnown(join(sub, 'b.json'));
      expect(r.kind === 'ok' && r.backends.map(formatHostPort)).toStrictEqual([failed ? '10.0.0.11:6443' : '10.0.0.12:6443']);
    } finally {
      chmodSync(sub, 0o700);
    }
  });
  it('missing is missing; corrupt says why', () => {
    expect(readLastKnown(join(dir, 'none.json'))).toStrictEqual({ kind: 'missing' });
    const bad = (name: string, text: string): string => {
      writeFileSync(join(dir, name), text);
      const r = readLastKnown(join(dir, name));
      return r.kind === 'corrupt' ? r.reason : `not corrupt: ${r.kind}`;
    };
    expect(bad('trunc.json', '{"version": 1, "backe')).toMatch(/^not JSON: /);
    expect(bad('shape.json', '{"version": 2, "backends": []}')).toBe('expected {"version": 1, "backends": ["host:port", …]}');
    expect(bad('entry.json', '{"version": 1, "backends": ["10.0.0.11:6443", "nonsense"]}')).toMatch(/^backends\[1\]: /);
  });
  it('a path that cannot hold the file is unusable, not corrupt, and logged as such', () => {
    mkdirSync(join(dir, 'isdir.json'));
    expect(readLastKnown(join(dir, 'isdir.json'))).toStrictEqual({ kind: 'unusable', reason: 'it is a directory' });
    writeFileSync(join(dir, 'plain'), 'x');
    expect(readLastKnown(join(dir, 'plain', 'backends.json'))).toStrictEqual({
      kind: 'unusable',
      reason: `its directory ${join(dir, 'plain')} is not a directory`,
    });
    expect(readLastKnown(join(dir, 'plain', 'a', 'backends.json'))).toStrictEqual({
      kind: 'unusable',
      reason: `its directory ${join(dir, 'plain')} is not a directory`,
    });
    const logged: [string, object][] = [];
    const log: Pick<Log, 'info' | 'warn' | 'error'> = { info: () => undefined, warn: (o, m) => logged.push([m, o]), error: (o, m) => logged.push([m, o]) };
    const file = join(dir, 'plain', 'backends.json');
    const d = new Discovery({
      credentials: { kind: 'inCluster' },
      lastKnownFile: file,
      seed: [hp('10.0.0.11:6443')],
      readyBackends: () => [],
      defaultPort: 6443,
      log,
    });
    expect(logged).toStrictEqual([
      ['discovery: the last-known backend file cannot be used; ignored', { file, reason: `its directory ${join(dir, 'plain')} is not a directory` }],
    ]);
    expect(names(d.current())).toStrictEqual(['10.0.0.11:6443 seed']);
  });
});

describe('Discovery waiting for its kubeconfig', () => {
  let dir: string;
  let disc: Discovery | null = null;
  afterEach(async () => {
    await disc?.stop();
    disc = null;
    rmSync(dir, { recursive: true, force: true });
  });
  it('a kubeconfig that appears malformed is logged (file and problem) once per change, not per poll; a valid one starts discovery', async () => {
    dir = mkdtempSync(join(tmpdir(), 'ballast-disc-wait-'));
    const path = join(dir, 'admin.conf');
    const logged: [string, string, Record<string, unknown>][] = [];
    const at = (level: string) => (o: object, m: string) => void logged.push([level, m, o as Record<string, unknown>]);
    const log: Pick<Log, 'info' | 'warn' | 'error'> = { info: at('info'), warn: at('warn'), error: at('error') };
    disc = new Discovery({
      credentials: { kind: 'kubeconfig', path },
      lastKnownFile: join(dir, 'backends.json'),
      seed: [hp('127.0.0.1:6443')],
      readyBackends: () => [],
      defaultPort: 6443,
      log,
      pollMs: 20,
    });
    disc.start();
    const errors = () => logged.filter(([l]) => l === 'error');
    await waitFor(() => logged.some(([, m]) => m.startsWith('discovery: waiting for the credentials')), {
      timeoutMs: 10_000,
      intervalMs: 10,
      what: 'the wait',
    });
    writeFileSync(path, 'clusters: [\n');
    await waitFor(() => errors().length === 1, { timeoutMs: 5000, intervalMs: 10, what: 'the first error' });
    // many polls (20 ms) later, still one line for the one change
    await new Promise((r) => setTimeout(r, 300));
    expect(errors()).toStrictEqual([
      [
        'error',
        'discovery: the credentials cannot be used; waiting for them to change',
        { credentials: path, reason: expect.stringMatching(new RegExp(`^${path}: not YAML: `)) },
      ],
    ]);
    writeFileSync(path, 'hello: world\n');
    await waitFor(() => errors().length === 2, { timeoutMs: 5000, intervalMs: 10, what: 'the second error' });
    await new Promise((r) => setTimeout(r, 300));
    expect(errors().map(([, , o]) => o.reason)).toStrictEqual([
      expect.stringMatching(/: not YAML: /),
      `${path}: not a kubeconfig for discovery: no current-context (the context naming the cluster and user to use)`,
    ]);
    expect(disc.stats().state).toBe('waiting-credentials');
    const pki = makeTestPki(['127.0.0.1']);
    try {
      writeFileSync(path, kubeconfigText('https://127.0.0.9:6443', pki.ca, 'tok'));
    } finally {
      pki.remove();
    }
    await waitFor(() => logged.some(([l, m]) => l === 'info' && m === 'discovery: credentials loaded'), {
      timeoutMs: 5000,
      intervalMs: 10,
      what: 'the credentials to load',
    });
    expect(errors().length).toBe(2);
    await waitFor(() => disc!.stats().state === 'waiting-ready-backend', { timeoutMs: 5000, intervalMs: 10, what: 'discovery to start' });
  });
});

describe('Discovery against stand-in apiservers on loopback', () => {
  /** 25000-29999: below the ephemeral range (see apiserver-standin.test.ts, which takes 20000-24999) */
  const PORT = 25_000 + (process.pid % 5000);
  const TOKEN = 'discovery-test-token-0123';
  let pki: TestPki;
  let dir: string;
  let store: string;
  const standins = new Map<string, Standin>();
  let disc: Discovery | null = null;
  const logs: string[] = [];
  const log: Pick<Log, 'info' | 'warn' | 'error'> = {
    info: (_o, m) => logs.push(m),
    warn: (_o, m) => logs.push(`WARN ${m}`),
    error: (_o, m) => logs.push(`ERROR ${m}`),
  };

  beforeAll(() => {
    pki = makeTestPki(['127.0.0.1', '127.0.0.2', '127.0.0.3']);
  });
  afterAll(() => pki.remove());
  afterEach(async () => {
    await disc?.stop();
    disc = null;
    await Promise.all([...standins.values()].map((s) => s.close()));
    standins.clear();
    rmSync(dir, { recursive: true, force: true });
    logs.length = 0;
  });
  const setup = (): void => {
    dir = mkdtempSync(join(tmpdir(), 'ballast-disc-'));
    store = join(dir, 'store');
  };
  const start = async (host: string): Promise<void> => {
    standins.set(
      host,
      await startStandin({ name: host, cert: pki.cert, key: pki.key, port: PORT, host, ready: true, store, address: host, token: TOKEN, log: () => undefined }),
    );
  };
  const stop = async (host: string): Promise<void> => {
    await standins.get(host)?.close();
    standins.delete(host);
  };
  /** "ready per the health checks": here, the stand-ins that run */
  const ready = (): HostPort[] => [...standins.keys()].sort().map((h) => hp(`${h}:${PORT}`));
  const set = (): string[] => names(disc!.current());
  const make = (seed: string[], o: { kubeconfig?: string } = {}): Discovery =>
    new Discovery({
      credentials: { kind: 'kubeconfig', path: o.kubeconfig ?? join(dir, 'admin.conf') },
      lastKnownFile: join(dir, 'backends.json'),
      seed: seed.map(hp),
      readyBackends: ready,
      defaultPort: 6443,
      log,
      backoffMs: 100,
      maxBackoffMs: 400,
      pollMs: 100,
    });
  // the kubeconfig names the "VIP" (nothing listens there): discovery must not use it
  const writeKubeconfig = (): void => writeFileSync(join(dir, 'admin.conf'), kubeconfigText(`https://127.0.0.9:${PORT}`, pki.ca, TOKEN));

  it('waits for the kubeconfig, then the discovered set replaces the seed; joins and leaves follow; the last-known file follows', async () => {
    setup();
    await start('127.0.0.1');
    disc = make([`127.0.0.1:${PORT}`]);
    const changes: string[][] = [];
    disc.on('change', (l) => changes.push(names(l)));
    disc.start();
    expect(disc.stats().state).toBe('waiting-credentials');
    expect(set()).toStrictEqual([`127.0.0.1:${PORT} seed`]);
    writeKubeconfig();
    await waitFor(() => set()[0]?.endsWith('endpointslice') === true, { timeoutMs: 5000, intervalMs: 20, what: 'the discovered set' });
    expect(set()).toStrictEqual([`127.0.0.1:${PORT} endpointslice`]);
    expect(disc.stats()).toMatchObject({ state: 'watching', server: `https://127.0.0.1:${PORT}`, lists: 1, errors: 0 });
    await start('127.0.0.2');
    await start('127.0.0.3');
    await waitFor(() => set().length === 3, { timeoutMs: 5000, intervalMs: 20, what: 'two joins' });
    expect(set()).toStrictEqual([`127.0.0.1:${PORT} endpointslice`, `127.0.0.2:${PORT} endpointslice`, `127.0.0.3:${PORT} endpointslice`]);
    await stop('127.0.0.2');
    await waitFor(() => set().length === 2, { timeoutMs: 5000, intervalMs: 20, what: 'the leave' });
    expect(set()).toStrictEqual([`127.0.0.1:${PORT} endpointslice`, `127.0.0.3:${PORT} endpointslice`]);
    const lk = readLastKnown(join(dir, 'backends.json'));
    expect(lk.kind === 'ok' && lk.backends.map(formatHostPort)).toStrictEqual([`127.0.0.1:${PORT}`, `127.0.0.3:${PORT}`]);
    // the slice emptied (e.g. deleted): the last non-empty set stays, counted, logged
    appendChange(store, { op: 'delete' });
    await waitFor(() => disc!.stats().emptyKept === 1, { timeoutMs: 5000, intervalMs: 20, what: 'the empty set to be seen' });
    expect(set()).toStrictEqual([`127.0.0.1:${PORT} endpointslice`, `127.0.0.3:${PORT} endpointslice`]);
    expect(logs).toContain('WARN discovery: the kubernetes EndpointSlices list no ready apiserver; the last non-empty set is kept');
    expect(changes.at(-1)).toStrictEqual([`127.0.0.1:${PORT} endpointslice`, `127.0.0.3:${PORT} endpointslice`]);
  });

  // a 401 or 403 has its own condition and counter, and is retried at deniedRetryMs: with the
  // growing backoff (here 100 ms doubling to 2 s, as the agent's 500 ms to 10 s) the set would
  // come 1.5 s after the permission did (the agent: 6 to 8.4 s)
  it('401 then 403: each its own condition and one log line with the fix; the set follows the permission within deniedRetryMs', async () => {
    setup();
    await start('127.0.0.1');
    writeKubeconfig();
    setDenial(store, 401);
    const DENIED_RETRY = 200;
    const lines: { level: string; o: Record<string, unknown>; m: string }[] = [];
    disc = new Discovery({
      credentials: { kind: 'kubeconfig', path: join(dir, 'admin.conf') },
      lastKnownFile: join(dir, 'backends.json'),
      seed: [hp(`127.0.0.1:${PORT}`)],
      readyBackends: ready,
      defaultPort: 6443,
      log: {
        info: (o, m) => lines.push({ level: 'info', o: o as Record<string, unknown>, m }),
        warn: (o, m) => lines.push({ level: 'warn', o: o as Record<string, unknown>, m }),
        error: (o, m) => lines.push({ level: 'error', o: o as Record<string, unknown>, m }),
      },
      backoffMs: 100,
      maxBackoffMs: 2000,
      pollMs: 100,
      deniedRetryMs: DENIED_RETRY,
    } as ConstructorParameters<typeof Discovery>[0]);
    disc.start();
    await waitFor(() => disc!.stats().errors >= 1, { timeoutMs: 5000, intervalMs: 10, what: 'the first refusal' });
    await new Promise((r) => setTimeout(r, 500));
    expect([disc.stats().denied, disc.stats().lastError]).toStrictEqual(['unauthorized', expect.stringContaining('HTTP-Code: 401')]);
    setDenial(store, 403);
    await waitFor(() => disc!.stats().denied === 'forbidden', { timeoutMs: 5000, intervalMs: 10, what: 'the 403' });
    // refused for 1.6 s in all: the old backoff's retries then came at +0.1, +0.3, +0.7, +1.5, +3.1 s
    await new Promise((r) => setTimeout(r, 1100));
    expect(set()).toStrictEqual([`127.0.0.1:${PORT} seed`]);
    setDenial(store, null);
    const t0 = performance.now();
    await waitFor(() => set()[0]?.endsWith('endpointslice') === true, { timeoutMs: 5000, intervalMs: 5, what: 'the discovered set' });
    const lag = performance.now() - t0;
    // one retry period, plus a TLS handshake and a list on loopback (a few ms; 300 ms for a loaded machine)
    expect(lag, `the set came ${Math.round(lag)} ms after the permission`).toBeLessThanOrEqual(DENIED_RETRY + 300);
    const st = disc.stats();
    expect([st.denied, st.deniedSince, st.refusals.unauthorized > 1, st.refusals.forbidden > 1, st.errors]).toStrictEqual([
      null,
      null,
      true,
      true,
      st.refusals.unauthorized + st.refusals.forbidden,
    ]);
    // no 'listing and watching' per retry while refused: the first attempt's only (before any refusal)
    expect(lines.filter((l) => l.m === 'discovery: listing and watching the kubernetes EndpointSlices')).toHaveLength(1);
    // one line per condition (not per retry), each with its fix; then one when it answers again
    const denied = lines.filter((l) => l.level !== 'info' || l.m.includes('answers again'));
    expect(denied.map((l) => [l.level, l.m, l.o.denied ?? l.o.was])).toStrictEqual([
      [
        'warn',
        `discovery: 401 Unauthorized: the API did not accept the credentials; the seed and last-known backends serve meanwhile, retrying every ${DENIED_RETRY} ms`,
        'unauthorized',
      ],
      [
        'warn',
        `discovery: 403 Forbidden: the credentials may not list or watch the kubernetes EndpointSlices; the seed and last-known backends serve meanwhile, retrying every ${DENIED_RETRY} ms`,
        'forbidden',
      ],
      ['info', 'discovery: the API answers again after refusing the credentials or the permission', 'forbidden'],
    ]);
    expect(denied[0]!.o.fix).toBe(
      'the apiserver did not accept the credentials: the token is invalid, expired or revoked; give discovery a valid kubeconfig (docs/kubeadm.md, "Discovery\'s credentials")',
    );
    expect(denied[1]!.o.fix).toContain('`ballast manifest rbac | kubectl apply -f -`');
    console.log(`[discovery] set after the permission: ${Math.round(lag)} ms (deniedRetryMs ${DENIED_RETRY}); refusals ${JSON.stringify(st.refusals)}`);
  });

  it('the apiserver in use stops: the watch moves to another ready one', async () => {
    setup();
    await start('127.0.0.1');
    await start('127.0.0.2');
    writeKubeconfig();
    disc = make([]);
    disc.start();
    await waitFor(() => set().length === 2, { timeoutMs: 5000, intervalMs: 20, what: 'the discovered set' });
    const first = disc.stats().server!;
    const firstHost = new URL(first).hostname;
    await stop(firstHost);
    // it is no longer "ready": tell discovery as the checker's verdict would
    disc.readinessChanged();
    await waitFor(() => disc!.stats().server !== null && disc!.stats().server !== first && disc!.stats().state === 'watching', {
      timeoutMs: 5000,
      intervalMs: 20,
      what: 'the move',
    });
    await waitFor(() => set().length === 1, { timeoutMs: 5000, intervalMs: 20, what: 'the leave of the stopped one' });
    expect(set()).toStrictEqual([`${firstHost === '127.0.0.1' ? '127.0.0.2' : '127.0.0.1'}:${PORT} endpointslice`]);
  });

  it('a restart with the API unreachable knows the members from the last-known file; a corrupt file is ignored', async () => {
    setup();
    writeLastKnown(join(dir, 'backends.json'), [hp('127.0.0.2:6443'), hp('127.0.0.3:6443')]);
    writeKubeconfig();
    disc = make(['127.0.0.1:6443']);
    disc.start();
    // no stand-in runs: nothing is ready, the set is seed + last-known
    expect(set()).toStrictEqual(['127.0.0.1:6443 seed', '127.0.0.2:6443 lastKnown', '127.0.0.3:6443 lastKnown']);
    await waitFor(() => disc!.stats().state === 'waiting-ready-backend', { timeoutMs: 10_000, intervalMs: 20, what: 'discovery to wait for a ready backend' });
    await disc.stop();
    writeFileSync(join(dir, 'backends.json'), '{"version":1,"backends":["127.0.0.2:6443",');
    disc = make(['127.0.0.1:6443']);
    expect(set()).toStrictEqual(['127.0.0.1:6443 seed']);
    expect(logs.some((l) => l.startsWith('WARN discovery: the last-known backend file is corrupt'))).toBe(true);
    expect(existsSync(join(dir, 'backends.json'))).toBe(true);
  });
});

describe('discovery denials (pure)', () => {
  it("denialOf: a list's ApiException code, a watch's statusCode, the HTTP-Code text; other statuses are none", () => {
    expect(denialOf(Object.assign(new Error('HTTP-Code: 403\nMessage: Unknown API Status Code!'), { code: 403 }))).toBe('forbidden');
    expect(denialOf(Object.assign(new Error('Unauthorized'), { statusCode: 401 }))).toBe('unauthorized');
    expect(denialOf(new Error('HTTP-Code: 401\nMessage: x'))).toBe('unauthorized');
    expect(denialOf(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))).toBeNull();
    expect(denialOf(Object.assign(new Error('Gone'), { statusCode: 410 }))).toBeNull();
    expect(denialOf(undefined)).toBeNull();
  });

  it('clientCertificateExpiry and the 401 fix name an expired client certificate', () => {
    const pki = makeTestPki(['127.0.0.1']);
    try {
      const certData = pki.cert.toString('base64');
      const e = clientCertificateExpiry({ certData }, Date.now())!;
      expect(e.expired).toBe(false);
      const later = clientCertificateExpiry({ certData }, Date.parse(e.notAfter) + 1)!;
      expect(later).toStrictEqual({ notAfter: e.notAfter, expired: true });
      expect(denialFix('unauthorized', later)).toBe(
        `the client certificate expired on ${e.notAfter}: renew it (kubeadm certs renew, or a new kubeconfig) and the agent picks it up`,
      );
      expect(clientCertificateExpiry({})).toBeNull();
      expect(clientCertificateExpiry({ certData: 'bm90IGEgY2VydA==' })).toBeNull();
    } finally {
      pki.remove();
    }
  });
});
