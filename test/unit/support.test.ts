/**
 * The shared test support: waitFor's two forms, its bound and its message; needs() returning a
 * reason and printing it once.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { needs, sleep, waitFor } from '../support/index.js';

describe('waitFor', () => {
  it('predicate form: resolves with the first truthy value, probing every intervalMs', async () => {
    let calls = 0;
    const v = await waitFor(() => (++calls >= 3 ? `done after ${calls}` : undefined), { timeoutMs: 1000, intervalMs: 1 });
    expect(v).toBe('done after 3');
    expect(calls).toBe(3);
  });

  it('probe + done form: resolves with the probe value that satisfied done, async probes too', async () => {
    let n = 0;
    const v = await waitFor(
      async () => ++n,
      (x) => x === 4,
      { timeoutMs: 1000, intervalMs: 1 },
    );
    expect(v).toBe(4);
  });

  it('times out after timeoutMs with what it waited for and the last value', async () => {
    const t0 = Date.now();
    await expect(
      waitFor(
        () => ({ holders: ['n1', 'n2'] }),
        (h) => h.holders.length === 1,
        { timeoutMs: 60, intervalMs: 10, what: 'one holder' },
      ),
    ).rejects.toThrow('timed out after 60 ms waiting for one holder; last: {"holders":["n1","n2"]}');
    const took = Date.now() - t0;
    expect(took).toBeGreaterThanOrEqual(60);
    expect(took).toBeLessThan(1000);
  });

  it('a value JSON cannot show is named with String()', async () => {
    await expect(
      waitFor(
        () => 1n,
        (x) => x === 2n,
        { timeoutMs: 0, what: 'two' },
      ),
    ).rejects.toThrow('waiting for two; last: 1');
  });

  it('a probe that throws rejects at once, without retrying', async () => {
    let calls = 0;
    const probe = (): boolean => {
      calls++;
      throw new Error('boom');
    };
    await expect(waitFor(probe, { timeoutMs: 1000, intervalMs: 1 })).rejects.toThrow('boom');
    expect(calls).toBe(1);
  });

  it('sleep waits at least its time', async () => {
    const t0 = performance.now();
    await sleep(30);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(29);
  });
});

describe('needs', () => {
  afterEach(() => vi.restoreAllMocks());

  it('root: null as uid 0, else the reason, printed once as SKIPPED', () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    const getuid = vi.spyOn(process as { getuid(): number }, 'getuid').mockReturnValue(1000);
    const why = needs('root');
    expect(why).toBe('not root (uid 1000): network namespaces, raw sockets and nftables need it');
    expect(needs('root', 'ip')).toBe(why);
    // a skip is visible, and said once
    expect(warn.mock.calls).toEqual([[`SKIPPED: ${why}`]]);
    getuid.mockReturnValue(0);
    expect(needs('root')).toBeNull();
    // 'bpf' needs root first
    getuid.mockReturnValue(1000);
    expect(needs('bpf')).toBe(why);
  });
});
