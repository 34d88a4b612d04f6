/**
 * The memory release after start-up (src/agent/memory.ts, native.ts releaseMemory,
 * native/memory.cc) in this process, with the real addon: the node executable's read-only pages
 * leave the page tables (RssFile falls), nothing breaks (the code runs on, mapped back), and
 * MemoryRelease logs once per schedule, after its delay.
 */
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MemoryRelease, RELEASE_DELAY_MS } from '../../src/agent/memory.js';
import { releaseMemory } from '../../src/native.js';
import type { Logger } from '../../src/log/log.js';

const rssFileKiB = (): number => Number(/^RssFile:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]);

describe('releaseMemory (the addon, this process)', () => {
  it('drops the executable’s read-only pages from the page tables and the process runs on', () => {
    const before = rssFileKiB();
    const r = releaseMemory();
    const after = rssFileKiB();
    expect(r).not.toBeNull();
    // node's code (r-xp) and read-only data (r--p) at least
    expect(r!.fileMappings).toBeGreaterThanOrEqual(2);
    expect(r!.fileKiB).toBeGreaterThan(1024);
    expect(typeof r!.mallocTrimmed).toBe('boolean');
    // what the other threads map back meanwhile is far less than what went
    expect(before - after).toBeGreaterThan(r!.fileKiB / 2);
    // the code that was released runs again (mapped back by minor faults)
    expect(JSON.parse(JSON.stringify({ a: [1, 2, 3] }))).toEqual({ a: [1, 2, 3] });
  });
});

describe('MemoryRelease', () => {
  afterEach(() => void vi.useRealTimers());

  const logger = (): { log: Logger; lines: { o: Record<string, unknown>; m: string }[] } => {
    const lines: { o: Record<string, unknown>; m: string }[] = [];
    const log = {
      info: (o: Record<string, unknown>, m: string) => lines.push({ o, m }),
      warn: (o: Record<string, unknown>, m: string) => lines.push({ o, m }),
    } as unknown as Logger;
    return { log, lines };
  };

  it('releases once, RELEASE_DELAY_MS after the last schedule, and logs what it did', () => {
    vi.useFakeTimers();
    const { log, lines } = logger();
    const m = new MemoryRelease(log);
    m.schedule();
    vi.advanceTimersByTime(RELEASE_DELAY_MS - 1);
    m.schedule(); // a reload re-arms it
    vi.advanceTimersByTime(RELEASE_DELAY_MS - 1);
    expect(lines).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(lines.map((l) => l.m)).toEqual(['memory released']);
    expect(lines[0]!.o).toMatchObject({
      mallocTrimmed: expect.any(Boolean),
      fileMappings: expect.any(Number),
      releasedFileKiB: expect.any(Number),
      rssFileKiB: expect.any(Number),
      ms: expect.any(Number),
    });
    vi.advanceTimersByTime(10 * RELEASE_DELAY_MS);
    expect(lines).toHaveLength(1);
  });

  it('stop() cancels the pending release', () => {
    vi.useFakeTimers();
    const { log, lines } = logger();
    const m = new MemoryRelease(log);
    m.schedule();
    m.stop();
    vi.advanceTimersByTime(2 * RELEASE_DELAY_MS);
    expect(lines).toEqual([]);
  });
});
