/** The agent's cleanup stack (src/agent/stack.ts) and a phase's own steps (src/agent/phase.ts runPhase). */
import { describe, expect, it } from 'vitest';
import { CleanupStack } from '../../src/agent/stack.js';
import { runPhase, StartAborted, throwIfAborted, type AgentContext } from '../../src/agent/phase.js';
import type { Logger } from '../../src/log/log.js';

function recorder(): { log: Logger; errors: [Record<string, unknown>, string][] } {
  const errors: [Record<string, unknown>, string][] = [];
  const log = {
    error: (o: Record<string, unknown>, m: string) => errors.push([o, m]),
    info: () => undefined,
    warn: () => undefined,
    debug: () => undefined,
    fatal: () => undefined,
  } as unknown as Logger;
  return { log, errors };
}

describe('CleanupStack', () => {
  it('unwinds in reverse order, awaiting each undo before the next', async () => {
    const { log } = recorder();
    const s = new CleanupStack(log);
    const order: string[] = [];
    s.defer('a', () => order.push('a'));
    s.defer('b', async () => {
      await new Promise((r) => setTimeout(r, 5));
      order.push('b');
    });
    s.defer('c', () => order.push('c'));
    expect(s.size).toBe(3);
    await s.unwind();
    expect(order).toStrictEqual(['c', 'b', 'a']);
    expect(s.size).toBe(0);
  });
  it('a failing undo (throw or reject) is logged with its name and the rest still run', async () => {
    const { log, errors } = recorder();
    const s = new CleanupStack(log);
    const order: string[] = [];
    s.defer('first', () => order.push('first'));
    s.defer('rejects', () => Promise.reject(new Error('nft said no')));
    s.defer('throws', () => {
      throw new Error('boom');
    });
    s.defer('last', () => order.push('last'));
    await expect(s.unwind()).resolves.toBeUndefined();
    expect(order).toStrictEqual(['last', 'first']);
    expect(errors).toStrictEqual([
      [{ err: 'boom', step: 'throws' }, 'a cleanup step failed; going on with the rest'],
      [{ err: 'nft said no', step: 'rejects' }, 'a cleanup step failed; going on with the rest'],
    ]);
  });
  it('a second unwind while one runs is the same unwind; each undo runs once; the stack is reusable after', async () => {
    const { log } = recorder();
    const s = new CleanupStack(log);
    let runs = 0;
    s.defer('slow', async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 10));
    });
    const u1 = s.unwind();
    const u2 = s.unwind();
    expect(u2).toBe(u1);
    await Promise.all([u1, u2]);
    expect(runs).toBe(1);
    s.defer('again', () => runs++);
    await s.unwind();
    expect(runs).toBe(2);
  });
});

describe('runPhase', () => {
  const ctx = (signal = new AbortController().signal): AgentContext => ({ log: recorder().log, signal, fail: () => undefined });
  it('a phase that throws part-way undoes its own steps (reverse), then rethrows', async () => {
    const order: string[] = [];
    const err = new Error('second step failed');
    await expect(
      runPhase(ctx(), 'p', async (own) => {
        own.defer('one', () => order.push('one'));
        own.defer('two', () => order.push('two'));
        throw err;
      }),
    ).rejects.toBe(err);
    expect(order).toStrictEqual(['two', 'one']);
  });
  it('a phase that succeeds returns its outputs, its name and one undo for all its steps', async () => {
    const order: string[] = [];
    const h = await runPhase(ctx(), 'admin', async (own) => {
      own.defer('one', () => order.push('one'));
      own.defer('two', () => order.push('two'));
      return { port: 9641 };
    });
    expect(h.phase).toBe('admin');
    expect(h.port).toBe(9641);
    expect(order).toStrictEqual([]);
    await h.undo();
    expect(order).toStrictEqual(['two', 'one']);
  });
  it('throwIfAborted throws StartAborted only once the signal is aborted; the steps before are undone', async () => {
    const c = new AbortController();
    expect(() => throwIfAborted(c.signal)).not.toThrow();
    const order: string[] = [];
    const p = runPhase(ctx(c.signal), 'p', async (own) => {
      own.defer('made', () => order.push('made'));
      c.abort();
      throwIfAborted(c.signal);
      return {};
    });
    await expect(p).rejects.toBeInstanceOf(StartAborted);
    expect(order).toStrictEqual(['made']);
  });
});
