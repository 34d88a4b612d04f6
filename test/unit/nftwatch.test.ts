/**
 * The table watch (src/dataplane/nftwatch.ts) against a fake event source, a scripted verify and
 * fake timers: which batches lead to a verify, the debounce, the backstop, the fallback when
 * events cannot be watched, what is counted and logged. And the applier's verify
 * (NftablesApplier with `track`) against a fake nft: the reference listing, handles and counter
 * values left out of the comparison.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { NftablesApplier, normalizedTable, type ExecResult, type Executor, type TableCheck } from '../../src/dataplane/apply.js';
import {
  FALLBACK_VERIFY_EVERY_MS,
  QUIET_MS,
  RESTORED_MESSAGE,
  TableWatch,
  touchesTable,
  VERIFY_EVERY_MS,
  type RestoreRecord,
  type TableWatchDeps,
} from '../../src/dataplane/nftwatch.js';
import type { NftChangeBatch } from '../../src/native.js';
import type { DesiredDataplane } from '../../src/dataplane/nftables.js';

const batch = (tables: string[], lost = false): NftChangeBatch => ({ tables, generation: 7, lost });

interface Harness {
  watch: TableWatch;
  emit: (b: NftChangeBatch) => void;
  verifies: () => number;
  restores: RestoreRecord[];
  logs: { level: string; o: Record<string, unknown>; m: string }[];
  closed: () => boolean;
  /** what the next verifies answer (the last one repeats) */
  answers: TableCheck[];
}

function harness(over: Partial<TableWatchDeps> = {}, opts: { subscribeThrows?: boolean } = {}): Harness {
  let onChange: ((b: NftChangeBatch) => void) | null = null;
  let closed = false;
  let verifies = 0;
  const answers: TableCheck[] = ['intact'];
  const restores: RestoreRecord[] = [];
  const logs: Harness['logs'] = [];
  const rec = (level: string) => (o: object, m: string) => void logs.push({ level, o: o as Record<string, unknown>, m });
  let t = 0;
  const watch = new TableWatch({
    family: 4,
    log: { info: rec('info'), warn: rec('warn'), error: rec('error') },
    subscribe: (cb) => {
      if (opts.subscribeThrows) throw Object.assign(new Error('setsockopt(NETLINK_ADD_MEMBERSHIP) failed: EPERM'), { code: 'EPERM' });
      onChange = cb;
      return { close: () => void (closed = true) };
    },
    verify: async () => {
      verifies++;
      return answers.length > 1 ? answers.shift()! : answers[0]!;
    },
    restore: async () => {
      t += 12; // the apply takes 12 ms of the fake monotonic clock
    },
    onRestore: (r) => void restores.push(r),
    now: () => t + Date.now(),
    ...over,
  });
  watch.start();
  return { watch, emit: (b) => onChange?.(b), verifies: () => verifies, restores, logs, closed: () => closed, answers };
}

describe('TableWatch', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 1_000_000 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('touchesTable: our table of the family, or lost events; never another table', () => {
    expect(touchesTable(batch(['ip ballast']), 4)).toBe(true);
    expect(touchesTable(batch(['ip6 ballast']), 6)).toBe(true);
    expect(touchesTable(batch(['ip6 ballast']), 4)).toBe(false);
    expect(touchesTable(batch(['inet ballast', 'ip filter', 'ip ballastx']), 4)).toBe(false);
    expect(touchesTable(batch([], true), 4)).toBe(true);
  });

  it('an event naming the table: verified after the quiet time, restored, counted once, logged with detectedBy event', async () => {
    const h = harness();
    h.answers.splice(0, 1, 'missing', 'intact');
    h.emit(batch(['ip ballast', 'ip other']));
    await vi.advanceTimersByTimeAsync(QUIET_MS - 1);
    expect(h.verifies()).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(h.verifies()).toBe(1);
    expect(h.restores).toHaveLength(1);
    expect(h.restores[0]).toMatchObject({ family: 4, detectedBy: 'event', found: 'missing', durationMs: QUIET_MS + 12 });
    const warns = h.logs.filter((l) => l.m === RESTORED_MESSAGE);
    expect(warns).toEqual([{ level: 'warn', m: RESTORED_MESSAGE, o: { family: 4, detectedBy: 'event', found: 'missing', durationMs: QUIET_MS + 12 } }]);
    expect(h.watch.status()).toMatchObject({ mode: 'events', restores: 1, verifies: 1 });
    expect(h.watch.status().lastRestore).toBe(h.restores[0]!.at.toISOString());
    // the restore's own events: one more verify, intact, nothing counted
    h.emit(batch(['ip ballast']));
    await vi.advanceTimersByTimeAsync(QUIET_MS);
    expect(h.verifies()).toBe(2);
    expect(h.watch.status().restores).toBe(1);
    await h.watch.stop();
  });

  it('changes to other tables run nothing', async () => {
    const h = harness();
    h.answers.splice(0, 1, 'missing');
    for (let i = 0; i < 5; i++) h.emit(batch(['ip other', 'inet filter', 'ip6 ballast']));
    await vi.advanceTimersByTimeAsync(1000);
    expect(h.verifies()).toBe(0);
    expect(h.restores).toHaveLength(0);
    await h.watch.stop();
  });

  it('a burst is one verify; a stream cannot put it off past MAX_DEFER_MS', async () => {
    const h = harness({ maxDeferMs: 200 });
    for (let i = 0; i < 3; i++) {
      h.emit(batch(['ip ballast']));
      await vi.advanceTimersByTimeAsync(10);
    }
    await vi.advanceTimersByTimeAsync(QUIET_MS);
    expect(h.verifies()).toBe(1);
    // one event every 30 ms (never quiet for 50): verified by 200 ms after the first
    for (let i = 0; i < 7; i++) {
      h.emit(batch(['ip ballast']));
      await vi.advanceTimersByTimeAsync(30);
    }
    expect(h.verifies()).toBe(2);
    await h.watch.stop();
  });

  it('lost events (ENOBUFS) force a verify, reported as detectedBy verify', async () => {
    const h = harness();
    h.answers.splice(0, 1, 'altered', 'intact');
    h.emit(batch([], true));
    await vi.advanceTimersByTimeAsync(QUIET_MS);
    expect(h.restores.map((r) => [r.detectedBy, r.found])).toEqual([['verify', 'altered']]);
    await h.watch.stop();
  });

  it('the periodic verify is the backstop: every VERIFY_EVERY_MS with events', async () => {
    const h = harness();
    await vi.advanceTimersByTimeAsync(VERIFY_EVERY_MS - 1);
    expect(h.verifies()).toBe(0);
    h.answers.splice(0, 1, 'missing', 'intact');
    await vi.advanceTimersByTimeAsync(1);
    expect(h.verifies()).toBe(1);
    expect(h.restores.map((r) => [r.detectedBy, r.durationMs])).toEqual([['verify', 12]]);
    await h.watch.stop();
  });

  it('without events (subscribe throws) it says so and verifies every FALLBACK_VERIFY_EVERY_MS', async () => {
    const h = harness({}, { subscribeThrows: true });
    expect(h.watch.status().mode).toBe('verify');
    expect(h.logs.filter((l) => l.level === 'warn').map((l) => l.o)).toEqual([
      { family: 4, err: 'setsockopt(NETLINK_ADD_MEMBERSHIP) failed: EPERM', verifyEveryMs: FALLBACK_VERIFY_EVERY_MS },
    ]);
    await vi.advanceTimersByTimeAsync(FALLBACK_VERIFY_EVERY_MS * 4);
    expect(h.verifies()).toBe(4);
    await h.watch.stop();
  });

  it('an event during a verify leads to one more verify after it', async () => {
    let release: (() => void) | null = null;
    let n = 0;
    const h = harness({
      verify: () =>
        new Promise<TableCheck>((resolve) => {
          n++;
          if (n === 1) release = () => resolve('intact');
          else resolve('missing');
        }),
    });
    h.emit(batch(['ip ballast']));
    await vi.advanceTimersByTimeAsync(QUIET_MS);
    expect(n).toBe(1);
    h.emit(batch(['ip ballast']));
    await vi.advanceTimersByTimeAsync(QUIET_MS);
    expect(n).toBe(1);
    release!();
    await vi.advanceTimersByTimeAsync(0);
    expect(n).toBe(2);
    expect(h.restores.map((r) => r.detectedBy)).toEqual(['event']);
    await h.watch.stop();
  });

  it('a failed restore is logged as an error, not counted, and retried at the next check', async () => {
    let fail = true;
    const h = harness({
      restore: async () => {
        if (fail) throw new Error('nft -f - exited with 1: Error: Could not process rule');
      },
    });
    h.answers.splice(0, 1, 'missing');
    h.emit(batch(['ip ballast']));
    await vi.advanceTimersByTimeAsync(QUIET_MS);
    expect(h.restores).toHaveLength(0);
    expect(h.logs.filter((l) => l.level === 'error').map((l) => l.o)).toEqual([
      { family: 4, found: 'missing', detectedBy: 'event', err: 'nft -f - exited with 1: Error: Could not process rule' },
    ]);
    fail = false;
    await vi.advanceTimersByTimeAsync(VERIFY_EVERY_MS);
    expect(h.restores.map((r) => r.detectedBy)).toEqual(['verify']);
    await h.watch.stop();
  });

  it('a verify that throws is logged and checked again later; stop closes the socket and stops the timers', async () => {
    const h = harness({ verify: () => Promise.reject(new Error('nft hung and was killed')) });
    await h.watch.check();
    expect(h.logs.map((l) => [l.level, l.m])).toEqual([['warn', 'cannot verify the nftables table ballast; checked again later']]);
    await h.watch.stop();
    expect(h.closed()).toBe(true);
    h.emit(batch(['ip ballast']));
    await vi.advanceTimersByTimeAsync(VERIFY_EVERY_MS * 2);
    expect(vi.getTimerCount()).toBe(0);
    expect(h.watch.status().verifies).toBe(1);
  });
});

// --- the applier's verify -------------------------------------------------------------------

const listing = (over: { handle?: number; packets?: number; extraRule?: boolean } = {}): string =>
  JSON.stringify({
    nftables: [
      { metainfo: { version: '1.0.6', release_name: 'Lester Gooch #5', json_schema_version: 1 } },
      { table: { family: 'ip', name: 'ballast', handle: over.handle ?? 3 } },
      {
        chain: {
          family: 'ip',
          table: 'ballast',
          name: 'prerouting',
          handle: (over.handle ?? 3) + 1,
          type: 'nat',
          hook: 'prerouting',
          prio: -100,
          policy: 'accept',
        },
      },
      { counter: { family: 'ip', name: 'be_10_0_0_11_6443', table: 'ballast', handle: 9, packets: over.packets ?? 0, bytes: (over.packets ?? 0) * 60 } },
      ...(over.extraRule ? [{ rule: { family: 'ip', table: 'ballast', chain: 'prerouting', handle: 12, expr: [{ accept: null }] } }] : []),
    ],
  });

const DESIRED: DesiredDataplane = {
  family: 4,
  vips: ['10.0.0.100'],
  port: 6443,
  backends: [{ address: '10.0.0.11', port: 6443, local: false }],
  masqueradeRemote: true,
};

describe('NftablesApplier.verify (fake nft)', () => {
  function nft(): { exec: Executor; live: { text: string | null }; calls: string[] } {
    const live: { text: string | null } = { text: listing() };
    const calls: string[] = [];
    const missing: ExecResult = { code: 1, stdout: '', stderr: 'Error: No such file or directory\n' };
    const exec: Executor = async (args) => {
      calls.push(args.join(' '));
      if (args.includes('counters')) return missing;
      if (args.join(' ') === '-j list table ip ballast') return live.text === null ? missing : { code: 0, stdout: live.text, stderr: '' };
      return { code: 0, stdout: '', stderr: '' };
    };
    return { exec, live, calls };
  }

  it('compares with the listing taken right after the apply, handles and counter values aside', async () => {
    const f = nft();
    const a = new NftablesApplier({ exec: f.exec, track: true });
    expect(await a.verify(4)).toBe('untracked');
    await a.apply(DESIRED);
    expect(f.calls).toEqual(['-j list counters table ip ballast', '-f -', '-j list table ip ballast']);
    expect(await a.verify(4)).toBe('intact');
    f.live.text = listing({ handle: 40, packets: 17 });
    expect(await a.verify(4)).toBe('intact');
    f.live.text = listing({ extraRule: true });
    expect(await a.verify(4)).toBe('altered');
    f.live.text = null;
    expect(await a.verify(4)).toBe('missing');
    expect(await a.verify(6)).toBe('untracked');
    // unchanged text: no nft, until forget()
    const before = f.calls.length;
    await a.apply(DESIRED);
    expect(f.calls).toHaveLength(before);
    a.forget(4);
    expect((await a.apply(DESIRED)).changed).toBe(true);
    // the table was found missing: no counters to read before putting it back
    expect(f.calls.slice(before)).toEqual(['-f -', '-j list table ip ballast']);
    a.forget(4);
    await a.apply(DESIRED);
    expect(f.calls.slice(before + 2)).toEqual(['-j list counters table ip ballast', '-f -', '-j list table ip ballast']);
    await a.remove([4]);
    expect(await a.verify(4)).toBe('untracked');
  });

  it('without track, apply lists nothing more', async () => {
    const f = nft();
    await new NftablesApplier({ exec: f.exec }).apply(DESIRED);
    expect(f.calls).toEqual(['-j list counters table ip ballast', '-f -']);
  });

  it('normalizedTable drops metainfo, handles and counter values, keeps the rest', () => {
    expect(normalizedTable(JSON.parse(listing()))).toBe(normalizedTable(JSON.parse(listing({ handle: 99, packets: 5 }))));
    expect(normalizedTable(JSON.parse(listing()))).not.toBe(normalizedTable(JSON.parse(listing({ extraRule: true }))));
    expect(normalizedTable({ nftables: [{ metainfo: {} }, { table: { family: 'ip', name: 'ballast', handle: 1 } }] })).toBe(
      '[{"table":{"family":"ip","name":"ballast"}}]',
    );
    expect(() => normalizedTable({})).toThrow(TypeError);
  });

  it('normalizedTable ignores the evict set’s elements (the rebalancer adds them at run time), not other sets’', () => {
    const set = (name: string, elem?: unknown[]) => ({
      set: { family: 'ip', name, table: 'ballast', type: ['ipv4_addr'], handle: 3, ...(elem ? { elem } : {}) },
    });
    const doc = (...sets: object[]) => ({ nftables: [{ metainfo: {} }, { table: { family: 'ip', name: 'ballast', handle: 1 } }, ...sets] });
    const added = [{ elem: { val: { concat: ['10.0.0.5', 40000, '10.0.0.100'] }, timeout: 120, expires: 119 } }];
    expect(normalizedTable(doc(set('evict', added)))).toBe(normalizedTable(doc(set('evict'))));
    expect(normalizedTable(doc(set('vips', ['10.0.0.100'])))).not.toBe(normalizedTable(doc(set('vips'))));
    expect(normalizedTable(doc(set('evict', added)))).not.toBe(normalizedTable(doc(set('vips'))));
  });

  it('evict adds flows in one serialized nft -f transaction; nothing runs for none; a failure throws', async () => {
    const calls: { args: string[]; stdin: string }[] = [];
    let code = 0;
    const exec: Executor = async (args, stdin) => {
      calls.push({ args, stdin });
      return { code, stdout: '', stderr: code ? 'Error: No such file or directory' : '' };
    };
    const a = new NftablesApplier({ exec });
    expect(await a.evict(4, [])).toBe(0);
    expect(calls).toEqual([]);
    expect(await a.evict(4, [{ source: '10.0.0.5', sourcePort: 40000, vip: '10.0.0.100' }])).toBe(1);
    expect(calls).toEqual([{ args: ['-f', '-'], stdin: 'add element ip ballast evict {\n\t10.0.0.5 . 40000 . 10.0.0.100\n}\n' }]);
    code = 1;
    await expect(a.evict(6, [{ source: 'fd00::5', sourcePort: 1, vip: 'fd00::100' }])).rejects.toMatchObject({ code: 'BALLAST_E_DATAPLANE' });
  });
});
