/**
 * Contained observer failures (observe/contain.ts): a throw is counted per path, logged at error
 * once per window per path with its stack, and swallowed; the metric exports every path.
 */
import { describe, expect, it } from 'vitest';
import { InternalErrors, INTERNAL_ERROR_MSG, INTERNAL_ERROR_PATHS } from '../../src/observe/contain.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { startAdmin } from '../../src/observe/admin.js';
import type { StatusDocument } from '../../src/observe/status.js';

function setup() {
  let now = 0;
  const lines: { fields: Record<string, unknown>; msg: string }[] = [];
  const internal = new InternalErrors(
    { error: (fields, msg) => void lines.push({ fields: fields as Record<string, unknown>, msg }) },
    { now: () => now, timer: false },
  );
  return { internal, lines, advance: (ms: number) => (now += ms) };
}

describe('InternalErrors', () => {
  it('run: a throw is swallowed (undefined), counted and logged with its stack; a value passes through', () => {
    const t = setup();
    expect(t.internal.run('certificates', () => 42)).toBe(42);
    expect(t.internal.run('certificates', () => (undefined as unknown as Date).getTime())).toBeUndefined();
    expect(t.internal.counts()).toStrictEqual({ certificates: 1 });
    expect(t.lines).toHaveLength(1);
    expect(t.lines[0]!.msg).toBe(INTERNAL_ERROR_MSG);
    expect(t.lines[0]!.fields).toMatchObject({ path: 'certificates', err: expect.stringMatching(/getTime/) });
    expect(String(t.lines[0]!.fields.stack)).toMatch(/^TypeError: /);
  });

  it('a failure every 200 ms for 5 s: 25 counted, one line (then the window summary at close)', () => {
    const t = setup();
    const listener = t.internal.wrap('health-events', (n: number) => {
      throw new Error(`boom ${n}`);
    });
    for (let i = 0; i < 25; i++) {
      expect(() => listener(i)).not.toThrow();
      t.advance(200);
    }
    expect(t.internal.counts()).toStrictEqual({ 'health-events': 25 });
    expect(t.lines).toHaveLength(1);
    t.internal.close();
    expect(t.lines).toHaveLength(2);
    expect(t.lines[1]!.fields).toMatchObject({ path: 'health-events', repeated: 24, err: 'boom 24' });
  });

  it('note: a rejection caught elsewhere, and a non-Error; paths count apart', () => {
    const t = setup();
    t.internal.note('admin', 'text');
    t.internal.note('metrics', new RangeError('x'));
    expect(t.internal.counts()).toStrictEqual({ admin: 1, metrics: 1 });
    expect(t.lines.map((l) => l.fields.path)).toStrictEqual(['admin', 'metrics']);
  });

  it('a logger that throws does not make run() throw', () => {
    const internal = new InternalErrors({
      error: () => {
        throw new Error('log down');
      },
    });
    expect(
      internal.run('status', () => {
        throw new Error('x');
      }),
    ).toBeUndefined();
    expect(internal.counts()).toStrictEqual({ status: 1 });
  });

  it('ballast_internal_errors_total{path}: every path exported, 0 until it fails', async () => {
    const m = createMetrics({ version: '0.0.0-test' });
    const zero = await m.registry.metrics();
    for (const path of INTERNAL_ERROR_PATHS) expect(zero).toContain(`ballast_internal_errors_total{path="${path}"} 0`);
    m.internalErrors({ certificates: 3 });
    const text = await m.registry.metrics();
    expect(text).toContain('ballast_internal_errors_total{path="certificates"} 3');
    expect(text).toContain('ballast_internal_errors_total{path="admin"} 0');
  });
});

describe('the admin endpoint contains a throwing answer', () => {
  it('a status document that throws when read (page, /status), a metrics handler that throws at once: 500 each, told to internalError, the server goes on', async () => {
    const errors: unknown[] = [];
    const server = await startAdmin('127.0.0.1', 0, {
      // a document whose reading throws: the page and JSON.stringify throw inside the then-callback
      status: () =>
        Promise.resolve({
          get state(): never {
            throw new TypeError('broken report');
          },
        } as unknown as StatusDocument),
      metrics: () => {
        throw new Error('sync throw');
      },
      internalError: (err) => void errors.push(err),
    });
    try {
      const port = (server.address() as { port: number }).port;
      const page = await fetch(`http://127.0.0.1:${port}/`);
      expect(page.status).toBe(500);
      expect(await page.text()).toBe('internal error\n');
      const metrics = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(metrics.status).toBe(500);
      await metrics.text();
      expect(errors.map((e) => (e as Error).message)).toStrictEqual(['broken report', 'sync throw']);
      const status = await fetch(`http://127.0.0.1:${port}/status`);
      expect(status.status).toBe(500);
      await status.text();
      expect(errors).toHaveLength(3);
      expect((await fetch(`http://127.0.0.1:${port}/nope`)).status).toBe(404);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
