/**
 * The admin endpoint's shared renderings (src/observe/admin.ts `shared`): many
 * scrapers cost one rendering per SCRAPE_CACHE_MS, a slow client always gets a fresh one, a
 * failure is not kept, a reload's answer drops what was rendered before it.
 */
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { SCRAPE_CACHE_MS, shared, startAdmin } from '../../src/observe/admin.js';
import type { ReloadResult, StatusDocument } from '../../src/observe/status.js';

describe('shared', () => {
  it('one rendering serves the calls during it and within maxAgeMs of its start; then it renders again', async () => {
    let now = 0;
    let n = 0;
    const s = shared(
      async () => ++n,
      100,
      () => now,
    );
    const [a, b] = await Promise.all([s.get(), s.get()]);
    expect([a, b, n]).toStrictEqual([1, 1, 1]);
    now = 99;
    expect(await s.get()).toBe(1);
    now = 100;
    expect(await s.get()).toBe(2);
    s.drop();
    expect(await s.get()).toBe(3);
  });

  it('a rejection is shared by the calls during it but not kept; a synchronous throw of render is thrown', async () => {
    let fail = true;
    let n = 0;
    const s = shared(
      async () => {
        n++;
        if (fail) throw new Error('engine not running');
        return n;
      },
      1000,
      () => 0,
    );
    const both = await Promise.allSettled([s.get(), s.get()]);
    expect(both.map((r) => r.status)).toStrictEqual(['rejected', 'rejected']);
    expect(n).toBe(1);
    fail = false;
    expect(await s.get()).toBe(2);
    const t = shared<number>(() => {
      throw new Error('sync');
    }, 1000);
    expect(() => t.get()).toThrow('sync');
  });

  it('a stamp that changed (a state, health or configuration change) is never answered with a rendering from before it', async () => {
    let stamp = 0;
    let n = 0;
    const s = shared(
      async () => ++n,
      1000,
      () => 0,
      () => stamp,
    );
    expect(await s.get()).toBe(1);
    expect(await s.get()).toBe(1);
    stamp++;
    expect(await s.get()).toBe(2);
    expect(await s.get()).toBe(2);
  });

  it('maxAgeMs 0: every call after a rendering renders again', async () => {
    let n = 0;
    const s = shared(
      async () => ++n,
      0,
      () => 0,
    );
    await s.get();
    await s.get();
    expect(n).toBe(2);
  });
});

describe('the admin server renders at most once per SCRAPE_CACHE_MS', () => {
  it('50 requests at once to /status, / and /metrics: one status rendering, one metrics rendering; after a reload, a fresh one', async () => {
    let statuses = 0;
    let metrics = 0;
    const doc = {
      state: 'none',
      backends: [],
      dataplane: { mode: 'off', reason: 'test' },
      local: { mode: 'off', reason: 'test' },
    } as unknown as StatusDocument;
    const result = {
      ok: true,
      at: '2026-12-06T00:00:00.000Z',
      trigger: 'admin',
      problems: [],
      changed: [],
      actions: [],
      handover: false,
      durationMs: 1,
    } as ReloadResult;
    const server = await startAdmin('127.0.0.1', 0, {
      status: async () => {
        statuses++;
        return doc;
      },
      metrics: async () => ({ contentType: 'text/plain', body: `n ${++metrics}\n` }),
      reload: async () => result,
    });
    try {
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const t0 = performance.now();
      const answers = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          fetch(`${base}${['/status', '/', '/metrics', '/healthz'][i % 4]}`).then(async (r) => [r.status, await r.text()] as const),
        ),
      );
      // the test's own requests took less than the cache's age (else it says nothing)
      if (performance.now() - t0 < SCRAPE_CACHE_MS) {
        expect(statuses).toBe(1);
        expect(metrics).toBe(1);
      }
      expect(answers.every(([code]) => code === 200)).toBe(true);
      expect(answers.filter((_, i) => i % 4 === 2).every(([, body]) => body === 'n 1\n')).toBe(true);
      const before = statuses;
      expect((await fetch(`${base}/reload`, { method: 'POST' })).status).toBe(200);
      await (await fetch(`${base}/status`)).text();
      expect(await (await fetch(`${base}/metrics`)).text()).toBe(`n ${metrics}\n`);
      expect(statuses).toBe(before + 1);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});
