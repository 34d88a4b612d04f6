/**
 * The status page (src/observe/page.ts): a pure function of the /status document. What it must
 * show, that every value from the document is escaped, that nothing external is loaded, and
 * GET / on the admin server.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Server } from 'node:http';
import { escapeHtml, renderStatusPage } from '../../src/observe/page.js';
import { startAdmin } from '../../src/observe/admin.js';
import { statusDocument, type StatusDocument } from '../../src/observe/status.js';
import type { EngineStatus } from '../../src/vrrp/engine.js';

const NOW = Date.parse('2026-11-29T20:01:00.000Z');
const engine: EngineStatus = {
  state: 'backup',
  vrid: 51,
  priority: 150,
  effectivePriority: 50,
  masterAddress: '10.0.0.12',
  masterPriority: 100,
  since: '2026-11-29T20:00:00.000Z',
  masterAdverIntervalMs: 100,
  masterDownIntervalMs: 341.40625,
  skewTimeMs: 41.40625,
  vipsHeld: false,
  counters: { advertsSent: 12, advertsReceived: 3, sendErrors: 0, dropped: { vrid: 7 }, transitions: 2, announcementsSent: 5, foreign: 0 },
};
const fixed = {
  vips: ['10.0.0.100'],
  interface: 'eth0',
  family: 4 as const,
  primaryAddress: '10.0.0.11',
  unicast: false,
  peers: [] as string[],
  auth: false,
  advertisementIntervalMs: 100,
};
const EVIL = '<script>alert("x")</script>&\'';

function doc(over: { reason?: string; lastError?: string | null } = {}): StatusDocument {
  return statusDocument(
    engine,
    fixed,
    {
      reload: {
        last: {
          ok: false,
          at: '2026-11-29T20:00:30.000Z',
          trigger: 'admin',
          problems: [`line 3: vrrp.vrid: ${EVIL}`],
          changed: [],
          actions: [],
          handover: false,
          durationMs: 3,
        },
        lastSuccessAt: '2026-11-29T19:59:00.000Z',
      },
      backends: [
        {
          address: '10.0.0.11:6443',
          state: 'down',
          healthy: false,
          lastCheck: '2026-11-29T20:00:59.000Z',
          lastLatencyMs: 2.25,
          reason: over.reason ?? 'ECONNREFUSED',
          consecutive: 3,
          source: 'seed',
        },
        {
          address: '10.0.0.12:6443',
          state: 'up',
          healthy: true,
          lastCheck: '2026-11-29T20:00:59.500Z',
          lastLatencyMs: 4.5,
          reason: null,
          consecutive: 9,
          source: 'endpointslice',
        },
        {
          address: '10.0.0.13:6443',
          state: 'unknown',
          healthy: false,
          lastCheck: null,
          lastLatencyMs: null,
          reason: null,
          consecutive: 0,
          source: 'lastKnown',
        },
      ],
      dataplane: {
        mode: 'nftables',
        backends: ['10.0.0.12:6443'],
        applies: 4,
        lastApplyMs: 12.34,
        flushedEntries: 1,
        probesSent: 2,
        probesFailed: 0,
        restores: 0,
        lastRestore: null,
        failures: 0,
        lastError: over.lastError ?? null,
        connections: { '10.0.0.12:6443': 42 },
      },
      local: { mode: 'ebpf', endpoints: ['127.0.0.1:7443'], backends: ['10.0.0.12:6443'], updates: 3, socketsReset: 0, failures: 0, lastError: null },
    },
    {
      transitions: [
        { from: 'init', to: 'backup', reason: 'startup', at: '2026-11-29T19:59:00.000Z' },
        { from: 'backup', to: 'master', reason: 'masterDown', at: '2026-11-29T19:59:30.000Z' },
        { from: 'master', to: 'backup', reason: 'higherPriority', detail: '10.0.0.12 priority 100', at: '2026-11-29T20:00:00.000Z' },
      ],
      masterSince: '2026-11-29T20:00:00.000Z',
      priorityReason: 'no ready backend (10.0.0.11:6443 down: ECONNREFUSED)',
    },
  );
}

/** The text of the page with tags removed (what a reader sees, roughly). */
const text = (html: string) =>
  html
    .replace(/<style>[\s\S]*?<\/style>/, '')
    .replace(/<[^>]+>/g, ' ')
    .replace(/\s+/g, ' ');

describe('renderStatusPage', () => {
  it('shows who holds the VIP and since when, this node, each backend, the planes, the transitions and the reload', () => {
    const html = renderStatusPage(doc(), { now: NOW });
    const t = text(html);
    expect(html.startsWith('<!doctype html>')).toBe(true);
    expect(t).toContain('VIP holder 10.0.0.12 (priority 100)');
    expect(t).toContain('heard since 2026-11-29T20:00:00.000Z (60 s ago)');
    expect(t).toContain('state backup since 2026-11-29T20:00:00.000Z (60 s ago)');
    expect(t).toContain('150 configured, 50 advertised lowered no ready backend (10.0.0.11:6443 down: ECONNREFUSED)');
    // each backend: address, state, source, latency, reason
    expect(t).toContain('10.0.0.11:6443 down seed — 2.3 ms 2026-11-29T20:00:59.000Z (1 s ago) ECONNREFUSED');
    expect(t).toContain('10.0.0.12:6443 up endpointslice 42 4.5 ms');
    expect(t).toContain('10.0.0.13:6443 unknown lastKnown — — —');
    expect(t).toContain('VIP table nftables: 10.0.0.12:6443');
    expect(t).toContain('local endpoint ebpf: 127.0.0.1:7443 → 10.0.0.12:6443');
    // newest first, with the detail
    expect(t.indexOf('higherPriority')).toBeLessThan(t.indexOf('masterDown'));
    expect(t).toContain('master → backup higherPriority 10.0.0.12 priority 100');
    expect(t).toContain('last reload failed 2026-11-29T20:00:30.000Z (30 s ago) (admin)');
    expect(html).toContain('<meta http-equiv="refresh" content="5">');
  });

  it('a backend whose certificate lacks a name clients use says which, beside its health', () => {
    const d = doc();
    const lacks = 'IP SAN 10.0.0.100 (the VIP)';
    d.backends[1] = {
      ...d.backends[1]!,
      certificate: {
        subject: 'CN=kube-apiserver',
        issuer: 'CN=kubernetes',
        notAfter: '2027-11-29T00:00:00.000Z',
        fingerprint256: 'AB:CD',
        missing: ['10.0.0.100'],
        lacks: [lacks],
        since: '2026-11-29T19:59:00.000Z',
      },
    };
    const t = text(renderStatusPage(d, { now: NOW }));
    expect(t).toContain(`10.0.0.12:6443 up endpointslice 42 4.5 ms 2026-11-29T20:00:59.500Z (1 s ago) certificate ${lacks}`);
    expect(t).not.toContain('10.0.0.11:6443 down seed — 2.3 ms 2026-11-29T20:00:59.000Z (1 s ago) ECONNREFUSED certificate');
  });

  it('discovery refused by the API: the refusal, since when, and the counts', () => {
    const d = {
      ...doc(),
      discovery: {
        state: 'backoff' as const,
        server: 'https://10.0.0.12:6443',
        lists: 0,
        errors: 7,
        emptyKept: 0,
        lastChange: null,
        lastError: 'HTTP-Code: 403',
        denied: 'forbidden' as const,
        deniedSince: '2026-11-29T20:00:30.000Z',
        refusals: { unauthorized: 0, forbidden: 7 },
      },
    };
    const t = text(renderStatusPage(d, { now: NOW }));
    expect(t).toContain('refused 403 forbidden since 2026-11-29T20:00:30.000Z (30 s ago)');
    expect(t).toContain('0 lists, 7 errors (7 forbidden, 0 unauthorized), 0 empty sets ignored');
  });

  it('a master shows itself as the holder', () => {
    const d = statusDocument(
      { ...engine, state: 'active', effectivePriority: 150, masterAddress: '10.0.0.11', masterPriority: 150, vipsHeld: true },
      fixed,
      undefined,
      { transitions: [], masterSince: null, priorityReason: null },
    );
    const t = text(renderStatusPage(d, { now: NOW, refreshS: 0 }));
    expect(t).toContain('VIP holder this node (10.0.0.11) held here');
    expect(t).toContain('150 (advertised as configured)');
    expect(t).toContain('no state change recorded');
  });

  it('without an election: the local endpoint only', () => {
    const t = text(
      renderStatusPage(
        { state: 'none', backends: [], dataplane: { mode: 'off', reason: 'no election' }, local: { mode: 'off', reason: 'no localEndpoint configured' } },
        { now: NOW },
      ),
    );
    expect(t).toContain('no election vrrp is not configured');
    expect(t).toContain('no apiserver backends configured');
  });

  it('escapes every value from the document; no script, no external asset', () => {
    const html = renderStatusPage(doc({ reason: EVIL, lastError: EVIL }), { now: NOW });
    expect(html).not.toContain('<script');
    expect(html).not.toContain('"x")');
    expect(html).toContain('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;');
    // the reason (backend), the plane's error and the reload problem: three escaped copies
    expect(html.split('&lt;script&gt;').length - 1).toBe(3);
    // nothing loaded from elsewhere: no src=, no stylesheet link, only the page's own relative links
    expect(html).not.toMatch(/\ssrc=|<link|@import|url\(/i);
    expect([...html.matchAll(/href="([^"]*)"/g)].map((m) => m[1])).toStrictEqual(['/status', '/metrics', '/healthz']);
  });

  it('escapeHtml covers the five characters', () => {
    expect(escapeHtml(`<a href="x" title='y'>&</a>`)).toBe('&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
    expect(escapeHtml(null)).toBe('');
    expect(escapeHtml(42)).toBe('42');
  });
});

describe('GET / on the admin server', () => {
  let server: Server | null = null;
  afterEach(async () => {
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
    server = null;
  });

  it('serves the page as HTML with a CSP that loads nothing; 503 with the error when the engine does not answer', async () => {
    let fail = false;
    server = await startAdmin(
      '127.0.0.1',
      0,
      {
        status: async () => {
          if (fail) throw new Error(`worker <gone>`);
          return doc();
        },
        metrics: async () => ({ contentType: 'text/plain', body: '' }),
        // no shared rendering (admin.ts SCRAPE_CACHE_MS): the second request must see the failure
      },
      { cacheMs: 0 },
    );
    const port = (server.address() as { port: number }).port;
    const r = await fetch(`http://127.0.0.1:${port}/`);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(r.headers.get('content-security-policy')).toBe("default-src 'none'; style-src 'unsafe-inline'");
    expect(text(await r.text())).toContain('VIP holder 10.0.0.12');
    fail = true;
    const down = await fetch(`http://127.0.0.1:${port}/`);
    expect(down.status).toBe(503);
    expect(await down.text()).toContain('The election engine is not answering: worker &lt;gone&gt;');
  });
});
