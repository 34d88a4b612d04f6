/**
 * Discovery on its own thread (src/discovery/thread.ts, the shipped dist/bundle/discovery-worker.js,
 * which `npm test` builds first: test/support/discovery-worker.ts): the first report (seed and last-known), the set and counters
 * from a stand-in apiserver's EndpointSlices, a malformed kubeconfig refused before anything
 * starts, a thread that fails started again, and a stop that ends the thread.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { getPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStandin, type Standin } from '../../lab/apiserver-standin.js';
import { waitFor } from '../../lab/wait.js';
import { DiscoveryThread, InvalidCredentials, writeLastKnown, type DiscoveryThreadOptions } from '../../src/discovery/index.js';
import type { Log } from '../../src/log/log.js';
import { formatHostPort, parseHostPort, type HostPort } from '../../src/net/hostport.js';
import { builtDiscoveryWorker } from '../support/discovery-worker.js';
import { kubeconfigText, makeTestPki, type TestPki } from '../support/tls.js';

const WORKER = builtDiscoveryWorker();
const CRASHING = new URL('../fixtures/workers/discovery-crash.mjs', import.meta.url);
/** 30000-34999: below the ephemeral range, apart from discovery.test.ts's 25000-29999 */
const PORT = 30_000 + (process.pid % 5000);
const TOKEN = 'discovery-thread-token-0123';
const hp = (s: string): HostPort => parseHostPort(s);
/** The nice value (proc(5) stat field 19) of each of this process's threads named `comm`. */
const threadNice = (comm: string): number[] =>
  readdirSync('/proc/self/task')
    .filter((t) => readFileSync(`/proc/self/task/${t}/comm`, 'utf8').trim() === comm)
    .map((t) => {
      const stat = readFileSync(`/proc/self/task/${t}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
    });
const names = (l: { backend: HostPort; source: string }[]): string[] => l.map((s) => `${formatHostPort(s.backend)} ${s.source}`);

describe('DiscoveryThread', () => {
  let pki: TestPki;
  let dir: string;
  let thread: DiscoveryThread | null = null;
  let standin: Standin | null = null;
  const logs: string[] = [];
  /** the `err` field of each error line */
  const errs: string[] = [];
  const log: Pick<Log, 'info' | 'warn' | 'error'> = {
    info: (_o, m) => logs.push(m),
    warn: (_o, m) => logs.push(`WARN ${m}`),
    error: (o, m) => {
      logs.push(`ERROR ${m}`);
      errs.push(String((o as { err?: unknown }).err));
    },
  };
  const options = (o: Partial<DiscoveryThreadOptions> = {}): DiscoveryThreadOptions => ({
    credentials: { kind: 'kubeconfig', path: join(dir, 'admin.conf') },
    lastKnownFile: join(dir, 'backends.json'),
    seed: [hp('127.0.0.9:6443')],
    readyBackends: () => (standin === null ? [] : [hp(`127.0.0.1:${PORT}`)]),
    defaultPort: 6443,
    log,
    timing: { backoffMs: 100, maxBackoffMs: 400, pollMs: 100 },
    workerUrl: WORKER,
    ...o,
  });

  beforeAll(() => {
    pki = makeTestPki(['127.0.0.1']);
  });
  afterAll(() => pki.remove());
  afterEach(async () => {
    await thread?.stop();
    thread = null;
    await standin?.close();
    standin = null;
    rmSync(dir, { recursive: true, force: true });
    logs.length = 0;
    errs.length = 0;
  });
  const setup = (): void => {
    dir = mkdtempSync(join(tmpdir(), 'ballast-disc-thread-'));
  };
  /**
   * A stand-in apiserver on 127.0.0.1 (listed in its own EndpointSlice) and a kubeconfig that
   * names the "VIP" 127.0.0.9, where nothing listens: the thread must dial the ready backend.
   */
  const apiserver = async (): Promise<void> => {
    standin = await startStandin({
      name: 'n1',
      cert: pki.cert,
      key: pki.key,
      port: PORT,
      host: '127.0.0.1',
      ready: true,
      store: join(dir, 'store'),
      address: '127.0.0.1',
      token: TOKEN,
      log: () => undefined,
    });
    writeFileSync(join(dir, 'admin.conf'), kubeconfigText(`https://127.0.0.9:${PORT}`, pki.ca, TOKEN));
  };

  it('reports the seed and last-known set first, then the EndpointSlices and the counters, and its log lines', async () => {
    setup();
    writeLastKnown(join(dir, 'backends.json'), [hp('127.0.0.8:6443')]);
    await apiserver();
    thread = await DiscoveryThread.open(options());
    expect(names(thread.current())).toStrictEqual(['127.0.0.9:6443 seed', '127.0.0.8:6443 lastKnown']);
    expect(thread.stats()?.state).toBe('waiting-credentials');
    const changes: string[][] = [];
    thread.on('change', (set) => changes.push(names(set)));
    thread.start();
    await waitFor(() => thread!.stats()?.state === 'watching' && changes.length > 0, { timeoutMs: 10_000, intervalMs: 20, what: 'the watch and a change' });
    expect(changes.at(-1)).toStrictEqual([`127.0.0.1:${PORT} endpointslice`]);
    expect(names(thread.current())).toStrictEqual([`127.0.0.1:${PORT} endpointslice`]);
    expect(thread.stats()).toMatchObject({ state: 'watching', server: `https://127.0.0.1:${PORT}`, lists: 1, errors: 0 });
    expect(logs).toContain('discovery: credentials loaded');
    expect(logs).toContain('discovery: listing and watching the kubernetes EndpointSlices');
    // the thread is named for `top -H` and /proc, and nicer than the thread that started it (10 more)
    expect(threadNice('discovery')).toStrictEqual([Math.min(19, getPriority() + 10)]);
  });

  it('a kubeconfig that exists and is malformed: InvalidCredentials with the reason, before any report', async () => {
    setup();
    writeFileSync(join(dir, 'admin.conf'), 'clusters: [\n');
    const err: unknown = await DiscoveryThread.open(options()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidCredentials);
    expect((err as InvalidCredentials).reason).toContain(join(dir, 'admin.conf'));
  });

  it('a thread that fails is logged and started again; the answered set and the counters stay; the restarted one is not asked to validate', async () => {
    setup();
    thread = await DiscoveryThread.open(options({ workerUrl: CRASHING, restartMs: 50 }));
    thread.start();
    await waitFor(() => logs.filter((m) => m.startsWith('ERROR discovery: its thread failed')).length >= 3, {
      timeoutMs: 10_000,
      intervalMs: 10,
      what: 'three failures, two after a restart',
    });
    // the first thread's answer serves; the restarted ones' seed did not replace it
    expect(names(thread.current())).toStrictEqual(['127.0.0.7:6443 endpointslice']);
    expect(logs.find((m) => m.startsWith('ERROR'))).toBe('ERROR discovery: its thread failed; the last set serves meanwhile');
    // the first thread validated the kubeconfig; the restarted ones did not (and were started: they failed on start)
    expect(errs.slice(0, 3)).toStrictEqual(['crash on start (validate: true)', 'crash on start (validate: false)', 'crash on start (validate: false)']);
    // counters add up across threads: the first one's list, one error per failed thread
    const st = thread.stats()!;
    expect(st.lists).toBe(1);
    expect(st.errors).toBeGreaterThanOrEqual(3);
    // the failures have their own count, and the last one stays visible while a new thread runs
    expect(st.thread!.failures).toBe(st.errors);
    expect(st.thread!.lastFailure).toBe('crash on start (validate: false)');
    expect(Date.parse(st.thread!.lastFailureAt!)).toBeGreaterThan(Date.now() - 10_000);
  });

  it('a thread that cannot start: the seed and last-known set serve, state backoff, and it is tried again', async () => {
    setup();
    writeLastKnown(join(dir, 'backends.json'), [hp('127.0.0.8:6443')]);
    thread = await DiscoveryThread.open(options({ workerUrl: new URL('file:///nonexistent/discovery-worker.js'), restartMs: 50 }));
    expect(names(thread.current())).toStrictEqual(['127.0.0.9:6443 seed', '127.0.0.8:6443 lastKnown']);
    expect(thread.stats()).toMatchObject({ state: 'backoff', lists: 0, errors: 1, thread: { failures: 1 } });
    expect(thread.stats()!.lastError).toMatch(/^discovery thread: /);
    await waitFor(() => logs.filter((m) => m.startsWith('ERROR discovery: its thread failed')).length >= 2, {
      timeoutMs: 10_000,
      intervalMs: 10,
      what: 'a second attempt',
    });
  });

  it('stop ends the thread; nothing is reported afterwards', async () => {
    setup();
    thread = await DiscoveryThread.open(options());
    thread.start();
    const changes: string[][] = [];
    thread.on('change', (set) => changes.push(names(set)));
    const t0 = performance.now();
    await thread.stop();
    // the thread's own stop answered (STOP_WAIT_MS is 1 s)
    expect(performance.now() - t0).toBeLessThan(1000);
    const logged = logs.length;
    // a stand-in that would be listed now: nothing reaches a stopped thread, nothing comes back
    await apiserver();
    thread.start();
    thread.readinessChanged();
    await new Promise((r) => setTimeout(r, 500));
    expect(changes).toStrictEqual([]);
    expect(logs.length).toBe(logged);
    thread = null;
  });
});
