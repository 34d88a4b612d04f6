/**
 * The log rate limiter (src/log/ratelimit.ts) on a fake clock: per key the first line, then
 * one summary line per window with the count, and quiet keys forgotten.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { RateLimitedLog, repeatedMessage, type RateLimitedLevel } from '../../src/log/ratelimit.js';

type Line = { level: RateLimitedLevel; fields: Record<string, unknown>; msg: string };

function make(opts: { windowMs?: number; maxKeys?: number; timer?: boolean } = {}) {
  let t = 0;
  const lines: Line[] = [];
  const log = new RateLimitedLog((level, fields, msg) => lines.push({ level, fields, msg }), { windowMs: 10_000, timer: false, ...opts, now: () => t });
  return { log, lines, at: (ms: number) => void (t = ms) };
}

afterEach(() => void vi.useRealTimers());

describe('RateLimitedLog', () => {
  it('writes the first occurrence as is and counts the rest of the window', () => {
    const { log, lines, at } = make();
    expect(log.log('warn', 'send:ENETUNREACH', { destination: '10.0.0.1' }, 'cannot send advertisement')).toBe(true);
    for (let i = 1; i < 833; i++) {
      at(i * 4);
      expect(log.log('warn', 'send:ENETUNREACH', { destination: `10.0.0.${(i % 250) + 1}` }, 'cannot send advertisement')).toBe(false);
    }
    expect(lines).toStrictEqual([{ level: 'warn', fields: { destination: '10.0.0.1' }, msg: 'cannot send advertisement' }]);
    // the window ends: one line with the count and the last occurrence's fields
    at(10_000);
    log.flush();
    expect(lines).toHaveLength(2);
    expect(lines[1]).toStrictEqual({
      level: 'warn',
      fields: { destination: '10.0.0.83', repeated: 832, repeatedOverS: 10 },
      msg: 'cannot send advertisement (repeated 832 times in the last 10 s)',
    });
  });

  it('a steady stream gives one line per window, and a quiet window forgets the key', () => {
    const { log, lines, at } = make();
    // every 10 ms for 35 s: 3500 occurrences
    for (let t = 0; t < 35_000; t += 10) {
      at(t);
      if (t % 1000 === 0) log.flush();
      log.log('error', 'k', {}, 'nft apply failed');
    }
    at(40_000);
    log.flush();
    // first at 0, summaries at 10 s, 20 s, 30 s and 40 s (the last 500 of the 3500)
    expect(lines.map((l) => l.fields.repeated ?? 1)).toStrictEqual([1, 999, 1000, 1000, 500]);
    expect(lines.reduce((n, l) => n + ((l.fields.repeated as number | undefined) ?? 1), 0)).toBe(3500);
    expect(log.size).toBe(1);
    at(50_000);
    log.flush();
    expect(log.size).toBe(0);
    log.log('error', 'k', {}, 'nft apply failed');
    expect(lines.at(-1)).toStrictEqual({ level: 'error', fields: {}, msg: 'nft apply failed' });
  });

  it('without a flush, the first occurrence after the window carries the count (itself included)', () => {
    const { log, lines, at } = make({ windowMs: 1000 });
    log.log('warn', 'k', { n: 0 }, 'm');
    at(100);
    log.log('warn', 'k', { n: 1 }, 'm');
    at(1500);
    expect(log.log('warn', 'k', { n: 2 }, 'm')).toBe(true);
    expect(lines.map((l) => l.msg)).toStrictEqual(['m', 'm (repeated 2 times in the last 1.5 s)']);
    expect(lines[1]!.fields).toStrictEqual({ n: 2, repeated: 2, repeatedOverS: 1.5 });
    // a window with one occurrence only: logged as is
    at(3000);
    log.log('warn', 'k', { n: 3 }, 'm');
    expect(lines.at(-1)!.msg).toBe('m');
  });

  it('keys are independent', () => {
    const { log, lines } = make();
    log.log('warn', 'a', {}, 'A');
    log.log('warn', 'b', {}, 'B');
    log.log('warn', 'a', {}, 'A');
    expect(lines.map((l) => l.msg)).toStrictEqual(['A', 'B']);
  });

  it('past maxKeys a new key is written each time, nothing more is remembered', () => {
    const { log, lines } = make({ maxKeys: 2 });
    for (const k of ['a', 'b', 'c', 'c', 'a']) log.log('info', k, {}, k);
    expect(lines.map((l) => l.msg)).toStrictEqual(['a', 'b', 'c', 'c']);
    expect(log.size).toBe(2);
  });

  it('close() writes the pending counts', () => {
    const { log, lines, at } = make();
    log.log('warn', 'k', {}, 'm');
    log.log('warn', 'k', {}, 'm');
    at(2500);
    log.close();
    expect(lines.map((l) => l.msg)).toStrictEqual(['m', 'm (repeated 1 time in the last 2.5 s)']);
  });

  it('its timer writes the summary when the window ends (fake timers)', () => {
    vi.useFakeTimers({ now: 0 });
    const lines: string[] = [];
    const log = new RateLimitedLog((_l, _f, msg) => lines.push(msg), { windowMs: 10_000, now: () => Date.now() });
    log.log('warn', 'k', {}, 'm');
    vi.advanceTimersByTime(3000);
    log.log('warn', 'k', {}, 'm');
    log.log('warn', 'k', {}, 'm');
    vi.advanceTimersByTime(6999);
    expect(lines).toStrictEqual(['m']);
    vi.advanceTimersByTime(1);
    expect(lines).toStrictEqual(['m', repeatedMessage('m', 2, 10_000)]);
    // a quiet window: forgotten, and no timer left behind
    vi.advanceTimersByTime(10_000);
    expect(log.size).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
    log.close();
  });
});
