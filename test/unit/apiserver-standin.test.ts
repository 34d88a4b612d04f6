/**
 * The stand-in apiserver's EndpointSlice API against an unchanged @kubernetes/client-node
 * informer, on loopback (127.0.0.1..3 share one store, as apiservers share etcd).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, DiscoveryV1Api, KubeConfig, makeInformer, Watch, type V1ConfigMap, type V1EndpointSlice } from '@kubernetes/client-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { KUBE_APISERVER_IDLE_TIMEOUT_MS, parseWatchMetrics, startStandin, TICK_PATH, watchMetrics, type Standin } from '../../lab/apiserver-standin.js';
import { appendChange, compactStore } from '../../lab/endpointslice-store.js';
import { waitFor } from '../../lab/wait.js';
import { kubeconfigText, makeTestPki, type TestPki } from '../support/tls.js';

/**
 * 20000-24999: below Linux's ephemeral range (32768-60999, ip_local_port_range), where any
 * outgoing connection on the machine may hold a port (a final suite run here failed on it:
 * EADDRINUSE 127.0.0.1:36772); discovery.test.ts takes 25000-29999, so two workers never clash.
 */
const PORT = 20_000 + (process.pid % 5000);
const TOKEN = 'test-token-0123456789';
const SLICES = '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices';
const SELECTOR = 'kubernetes.io/service-name=kubernetes';

let pki: TestPki;
let store: string;
const running: Standin[] = [];

beforeAll(() => {
  pki = makeTestPki(['127.0.0.1', '127.0.0.2', '127.0.0.3']);
});
afterAll(() => pki.remove());
afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.close()));
  rmSync(store, { recursive: true, force: true });
});

const standin = async (host: string): Promise<Standin> => {
  const s = await startStandin({
    name: host,
    cert: pki.cert,
    key: pki.key,
    port: PORT,
    host,
    ready: true,
    store,
    address: host,
    token: TOKEN,
    bookmarkMs: 200,
    log: () => undefined,
  });
  running.push(s);
  return s;
};

/** A raw GET (status, body) over TLS with the test CA. */
const get = (host: string, path: string, token: string | null = TOKEN, port = PORT): Promise<{ status: number; body: string }> =>
  new Promise((resolve, reject) => {
    const req = https.get({ host, port, path, ca: pki.ca, headers: token === null ? {} : { authorization: `Bearer ${token}` } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.setTimeout(3000, () => req.destroy(new Error('timeout')));
  });

const kubeconfig = (host: string): KubeConfig => {
  const kc = new KubeConfig();
  kc.loadFromString(kubeconfigText(`https://${host}:${PORT}`, pki.ca, TOKEN));
  return kc;
};

const addresses = (items: readonly V1EndpointSlice[]): string[] => items.flatMap((s) => (s.endpoints ?? []).flatMap((e) => e.addresses)).sort();

describe('stand-in apiserver: the kubernetes EndpointSlices', () => {
  beforeAll(() => undefined);
  it('lists a real EndpointSliceList; unauthenticated is 401 Status; a list below the floor is 410', async () => {
    store = mkdtempSync(join(tmpdir(), 'ballast-store-'));
    await standin('127.0.0.1');
    await standin('127.0.0.2');
    const unauth = await get('127.0.0.1', `${SLICES}?labelSelector=${encodeURIComponent(SELECTOR)}`, null);
    expect(unauth.status).toBe(401);
    expect(JSON.parse(unauth.body)).toStrictEqual({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: 'Unauthorized',
      reason: 'Unauthorized',
      code: 401,
    });
    const r = await get('127.0.0.2', `${SLICES}?labelSelector=${encodeURIComponent(SELECTOR)}`);
    expect(r.status).toBe(200);
    const list = JSON.parse(r.body) as { kind: string; apiVersion: string; metadata: { resourceVersion: string }; items: Record<string, unknown>[] };
    expect(list).toMatchObject({ kind: 'EndpointSliceList', apiVersion: 'discovery.k8s.io/v1', metadata: { resourceVersion: '2' } });
    expect(list.items).toHaveLength(1);
    expect(list.items[0]).toMatchObject({
      kind: 'EndpointSlice',
      metadata: {
        name: 'kubernetes',
        namespace: 'default',
        resourceVersion: '2',
        labels: { 'kubernetes.io/service-name': 'kubernetes', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
      },
      addressType: 'IPv4',
      endpoints: [
        { addresses: ['127.0.0.1'], conditions: { ready: true, serving: true, terminating: false } },
        { addresses: ['127.0.0.2'], conditions: { ready: true, serving: true, terminating: false } },
      ],
      ports: [{ name: 'https', port: PORT, protocol: 'TCP' }],
    });
    // another service's selector matches nothing
    expect(JSON.parse((await get('127.0.0.1', `${SLICES}?labelSelector=${encodeURIComponent('kubernetes.io/service-name=other')}`)).body).items).toStrictEqual(
      [],
    );
    // the generated client parses it
    const typed = await kubeconfig('127.0.0.1').makeApiClient(DiscoveryV1Api).listNamespacedEndpointSlice({ namespace: 'default', labelSelector: SELECTOR });
    expect(addresses(typed.items)).toStrictEqual(['127.0.0.1', '127.0.0.2']);
    compactStore(store);
    const stale = await get('127.0.0.1', `${SLICES}?resourceVersion=1`);
    expect(stale.status).toBe(410);
    expect(JSON.parse(stale.body)).toMatchObject({ kind: 'Status', code: 410, reason: 'Expired' });
    // a watch from below the floor: one ERROR event with the Status, then the stream ends
    const w = await get('127.0.0.1', `${SLICES}?watch=true&resourceVersion=1`);
    expect(
      w.body
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as unknown),
    ).toStrictEqual([
      {
        type: 'ERROR',
        object: { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: 'too old resource version: 1 (2)', reason: 'Expired', code: 410 },
      },
    ]);
  });

  it('a watch resumes from a resourceVersion (the events after it), sends BOOKMARKs when allowed and ends after timeoutSeconds', async () => {
    store = mkdtempSync(join(tmpdir(), 'ballast-store-'));
    await standin('127.0.0.1');
    await standin('127.0.0.2');
    const t0 = performance.now();
    const w = await get(
      '127.0.0.1',
      `${SLICES}?watch=true&resourceVersion=1&allowWatchBookmarks=true&timeoutSeconds=1&labelSelector=${encodeURIComponent(SELECTOR)}`,
    );
    const took = performance.now() - t0;
    expect(took).toBeGreaterThanOrEqual(950);
    expect(took).toBeLessThan(2000);
    const events = w.body
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string; object: { metadata: { resourceVersion: string }; endpoints?: { addresses: string[] }[] } });
    expect(events[0]).toMatchObject({
      type: 'MODIFIED',
      object: { metadata: { resourceVersion: '2' }, endpoints: [{ addresses: ['127.0.0.1'] }, { addresses: ['127.0.0.2'] }] },
    });
    // one bookmark per 200 ms for 1 s (at most 5; fewer when timers run late), at the store's version
    const marks = events.slice(1);
    expect(marks.length).toBeGreaterThanOrEqual(2);
    expect(marks.length).toBeLessThanOrEqual(5);
    for (const m of marks)
      expect(m).toStrictEqual({ type: 'BOOKMARK', object: { kind: 'EndpointSlice', apiVersion: 'discovery.k8s.io/v1', metadata: { resourceVersion: '2' } } });
  });

  it('an unchanged informer: list, ADDED / MODIFIED / DELETED as stand-ins start and stop, 410 → relist', async () => {
    store = mkdtempSync(join(tmpdir(), 'ballast-store-'));
    const s1 = await standin('127.0.0.1');
    const kc = kubeconfig('127.0.0.1');
    const api = kc.makeApiClient(DiscoveryV1Api);
    let lists = 0;
    const inf = makeInformer<V1EndpointSlice>(
      kc,
      SLICES,
      () => (lists++, api.listNamespacedEndpointSlice({ namespace: 'default', labelSelector: SELECTOR })),
      SELECTOR,
    );
    const events: string[] = [];
    inf.on('add', (o) => events.push(`add ${addresses([o]).join(',')}`));
    inf.on('update', (o) => events.push(`update ${addresses([o]).join(',')}`));
    inf.on('delete', (o) => events.push(`delete ${o.metadata?.name}`));
    const errors: unknown[] = [];
    inf.on('error', (e) => errors.push(e));
    try {
      await inf.start();
      expect(lists).toBe(1);
      expect(events).toStrictEqual(['add 127.0.0.1']);
      // a second apiserver starts: the watch delivers MODIFIED
      const s2 = await standin('127.0.0.2');
      await waitFor(() => events.length === 2, { timeoutMs: 3000, intervalMs: 20, what: 'the MODIFIED event' });
      expect(events[1]).toBe('update 127.0.0.1,127.0.0.2');
      // it stops gracefully: removed from the slice
      await s2.close();
      await waitFor(() => events.length === 3, { timeoutMs: 3000, intervalMs: 20, what: 'the MODIFIED event of the removal' });
      expect(events[2]).toBe('update 127.0.0.1');
      expect(addresses(inf.list())).toStrictEqual(['127.0.0.1']);
      // the slice object deleted: DELETED
      appendChange(store, { op: 'delete' });
      await waitFor(() => events.length === 4, { timeoutMs: 3000, intervalMs: 20, what: 'the DELETED event' });
      expect(events[3]).toBe('delete kubernetes');
      expect(inf.list()).toStrictEqual([]);
      // changes while the watch is cut, then compaction: the informer's resume gets 410 and relists
      // (the slice was deleted: the add re-creates it with 127.0.0.3 alone)
      appendChange(store, { op: 'add', address: '127.0.0.3' });
      compactStore(store);
      const before = Number(inf.list()[0]?.metadata?.resourceVersion ?? 0);
      s1.endWatches();
      await waitFor(() => lists === 2, { timeoutMs: 5000, intervalMs: 20, what: 'the relist after 410' });
      await waitFor(() => addresses(inf.list()).join() === '127.0.0.3', { timeoutMs: 3000, intervalMs: 20, what: 'the relisted set' });
      expect(Number(inf.list()[0]?.metadata?.resourceVersion)).toBeGreaterThan(before);
      expect(events.at(-1)).toBe('add 127.0.0.3');
      expect(errors).toStrictEqual([]);
    } finally {
      await inf.stop();
    }
  });

  it("/metrics counts WATCH streams with kube-apiserver's names: open now and started; behind the token", async () => {
    store = mkdtempSync(join(tmpdir(), 'ballast-store-'));
    // a port of its own: the informer of the test before may still retry on PORT
    const port = PORT + 1;
    const s = await startStandin({
      name: 'm',
      cert: pki.cert,
      key: pki.key,
      port,
      host: '127.0.0.1',
      ready: true,
      store,
      address: '127.0.0.1',
      token: TOKEN,
      log: () => undefined,
    });
    running.push(s);
    const metrics = async (token: string | null = TOKEN): Promise<{ status: number; body: string }> => get('127.0.0.1', '/metrics', token, port);
    expect(parseWatchMetrics((await metrics()).body)).toStrictEqual({ open: 0, started: 0 });
    expect((await metrics(null)).status).toBe(401);
    // two watches: while they stream, 2 open and 2 started; after they end, 0 open and 2 started
    const ws = [1, 2].map(() => get('127.0.0.1', `${SLICES}?watch=true`, TOKEN, port));
    const open = await waitFor(
      async () => parseWatchMetrics((await metrics()).body),
      (x) => x.open === 2,
      { timeoutMs: 900, intervalMs: 20, what: 'two open watches' },
    );
    expect(open).toStrictEqual({ open: 2, started: 2 });
    s.endWatches();
    await Promise.all(ws);
    // the stream's end is written after the stand-in dropped it from its set: 0 at once
    expect(parseWatchMetrics((await metrics()).body)).toStrictEqual({ open: 0, started: 2 });
    const m = await metrics();
    expect(m.status).toBe(200);
    expect(parseWatchMetrics(m.body)).toStrictEqual({ open: 0, started: 2 });
    expect(m.body).toBe(watchMetrics(0, 2));
  });

  it('the ticking watch: an unchanged client Watch gets ADDED, then a MODIFIED every tick, the resourceVersion counting; behind the token', async () => {
    const port = PORT + 3;
    const TICK = 100;
    /** how late the first MODIFIED may arrive after its tick (a loaded CI machine; loopback TLS) */
    const ARRIVAL_JITTER_MS = 10;
    const s = await startStandin({
      name: 'tk',
      cert: pki.cert,
      key: pki.key,
      port,
      host: '127.0.0.1',
      ready: true,
      token: TOKEN,
      tickMs: TICK,
      log: () => undefined,
    });
    running.push(s);
    expect((await get('127.0.0.1', `${TICK_PATH}?watch=true`, null, port)).status).toBe(401);
    const kc = new KubeConfig();
    kc.loadFromString(kubeconfigText(`https://127.0.0.1:${port}`, pki.ca, TOKEN));
    // the generated client parses the list
    const list = await kc.makeApiClient(CoreV1Api).listNamespacedConfigMap({ namespace: 'default' });
    expect(list.items.map((c) => [c.metadata?.name, c.data?.node])).toStrictEqual([['ballast-lab-tick', 'tk']]);
    const events: { type: string; rv: number; node: string | undefined; at: number }[] = [];
    let ended: unknown = 'not yet';
    const req = await new Watch(kc).watch(
      TICK_PATH,
      { timeoutSeconds: 1 },
      (type: string, o: V1ConfigMap) => void events.push({ type, rv: Number(o.metadata?.resourceVersion), node: o.data?.node, at: performance.now() }),
      (err: unknown) => void (ended = err),
    );
    await waitFor(
      async () => ended,
      (e) => e !== 'not yet',
      { timeoutMs: 3000, intervalMs: 50, what: 'the watch to end after timeoutSeconds' },
    );
    req.abort();
    expect(events[0]?.type).toBe('ADDED');
    const mods = events.slice(1);
    // 1 s of 100 ms ticks: at most 10 (fewer when timers run late), each one resourceVersion on
    expect(mods.length).toBeGreaterThanOrEqual(4);
    expect(mods.length).toBeLessThanOrEqual(10);
    expect(mods.every((e) => e.type === 'MODIFIED' && e.node === 'tk')).toBe(true);
    for (let i = 1; i < events.length; i++) expect(events[i]!.rv).toBe(events[i - 1]!.rv + 1);
    // timers never fire early: the k-th MODIFIED at least k - 1 ticks after the first. Counted from
    // the first, not between neighbours: these are the client's arrival times, and one event that
    // arrived a little late puts the next one less than a tick after it (98.7 ms seen in CI)
    for (let i = 2; i < events.length; i++) expect(events[i]!.at - events[1]!.at).toBeGreaterThanOrEqual((i - 1) * TICK - ARRIVAL_JITTER_MS);
  });

  it("keeps an idle keep-alive connection as long as kube-apiserver does (90 s), not Node's 5 s", async () => {
    const port = PORT + 2;
    const s = await startStandin({ name: 'k', cert: pki.cert, key: pki.key, port, host: '127.0.0.1', ready: true, log: () => undefined });
    running.push(s);
    expect(KUBE_APISERVER_IDLE_TIMEOUT_MS).toBe(90_000);
    expect(s.server.keepAliveTimeout).toBe(KUBE_APISERVER_IDLE_TIMEOUT_MS);
  });
});
