import { describe, expect, it } from 'vitest';
import { cpuPercent, descendants, parseSmapsRollup, parseStat } from '../../bench/procfs.js';

describe('bench/procfs', () => {
  it('parses /proc/PID/stat after the last ")" of the command name', () => {
    const line = '4242 (node (x) y) S 17 4242 4242 0 -1 4194560 9000 0 12 0 150 37 0 0 20 0 12 0 123456 1180000000 29000 18446744073709551615';
    expect(parseStat(line)).toEqual({ pid: 4242, ppid: 17, utime: 150, stime: 37 });
    expect(() => parseStat('garbage')).toThrow(/not a \/proc\/PID\/stat line/);
  });

  it('reads Rss and Pss (kB) of smaps_rollup', () => {
    const text = '55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:              118588 kB\nPss:               75283 kB\nPss_Anon:          59340 kB\n';
    expect(parseSmapsRollup(text)).toEqual({ rssKiB: 118588, pssKiB: 75283 });
    expect(() => parseSmapsRollup('Rss: 1 kB\n')).toThrow(/Pss/);
  });

  it('collects a tree breadth-first, grandchildren included, nothing outside it', () => {
    const s = (pid: number, ppid: number) => ({ pid, ppid, utime: 0, stime: 0 });
    expect(descendants(10, [s(1, 0), s(10, 1), s(11, 10), s(12, 10), s(13, 11), s(20, 1)])).toEqual([10, 11, 12, 13]);
    expect(descendants(99, [s(1, 0)])).toEqual([99]);
  });

  it('gives CPU as % of one core from tick deltas (100 ticks/s), new processes from 0, exited ones left out', () => {
    const before = new Map([
      [1, 100],
      [2, 50],
      [3, 7],
    ]);
    const after = new Map([
      [1, 150],
      [2, 50],
      [4, 25],
    ]);
    // 50 + 0 + 25 ticks = 0.75 s of CPU over 5 s
    expect(cpuPercent(before, after, 5000)).toBeCloseTo(15, 10);
    expect(() => cpuPercent(before, after, 0)).toThrow(RangeError);
  });
});
