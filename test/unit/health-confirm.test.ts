/**
 * health/confirm.ts: the connect that tells a stopped agent from a gone node, against loopback
 * listeners (no root) and a socket that never connects (injected).
 */
import { createServer, Socket, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { CONFIRM_MIN_DEADLINE_MS, confirmDeadlineMs, confirmDown } from '../../src/health/confirm.js';

describe('confirmDeadlineMs', () => {
  it('one Advertisement_Interval, at least the floor, at most the health timeout', () => {
    expect(confirmDeadlineMs(100, 200)).toBe(100);
    expect(confirmDeadlineMs(1000, 1000)).toBe(1000);
    expect(confirmDeadlineMs(1000, 300)).toBe(300);
    expect(confirmDeadlineMs(10, 200)).toBe(CONFIRM_MIN_DEADLINE_MS);
    expect(confirmDeadlineMs(10, 20)).toBe(CONFIRM_MIN_DEADLINE_MS);
  });
});

describe('confirmDown', () => {
  let server: Server | undefined;
  afterEach(async () => {
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
    server = undefined;
  });

  const listen = (): Promise<number> =>
    new Promise((resolve) => {
      server = createServer((s) => s.destroy());
      server.listen(0, '127.0.0.1', () => resolve((server!.address() as { port: number }).port));
    });

  it('a listener: alive', async () => {
    const port = await listen();
    const r = await confirmDown({ host: '127.0.0.1', port }, 1000);
    expect(r.alive).toBe(true);
  });

  it('nobody listening: refused (a dead cause)', async () => {
    const port = await listen();
    await new Promise<void>((r) => server!.close(() => r()));
    server = undefined;
    const r = await confirmDown({ host: '127.0.0.1', port }, 1000);
    expect(r).toMatchObject({ alive: false, failure: { cause: { kind: 'refused' }, message: 'ECONNREFUSED' } });
  });

  it('no answer by the deadline: timeout, no sooner than the deadline', async () => {
    let destroyed = false;
    const silent = (): Socket => {
      const s = new Socket();
      s.destroy = () => {
        destroyed = true;
        return s;
      };
      return s;
    };
    const r = await confirmDown({ host: '192.0.2.1', port: 6443 }, 60, { connect: silent });
    expect(r).toMatchObject({ alive: false, failure: { cause: { kind: 'timeout' }, message: 'timeout' } });
    expect(r.latencyMs).toBeGreaterThanOrEqual(59);
    expect(destroyed).toBe(true);
  });

  it('a connect that throws: its failure, classified', async () => {
    const r = await confirmDown({ host: '127.0.0.1', port: 1 }, 100, {
      connect: () => {
        throw Object.assign(new Error('connect EHOSTUNREACH'), { code: 'EHOSTUNREACH', syscall: 'connect' });
      },
    });
    expect(r).toMatchObject({ alive: false, failure: { cause: { kind: 'unreachable', code: 'EHOSTUNREACH' } } });
  });
});
