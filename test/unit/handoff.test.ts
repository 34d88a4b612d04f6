/**
 * The hand-off note of a restart in place (src/agent/handoff.ts), in a directory of the test's
 * own: what resumes, what does not and why, and when the note goes.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { handOffPath, readHandOff, removeHandOff, RESUME_MARGIN_MS, writeHandOff } from '../../src/agent/handoff.js';
import { handOffIntervalCs } from '../../src/vrrp/engine.js';

const KEY = { ifname: 'eth0', family: 4 as const, vrid: 51, primary: '10.0.0.11' };

describe('hand-off note', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'ballast-handoff-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('resumes the same router within the wait, and keeps the note until removed', () => {
    const path = writeHandOff({ ...KEY, vips: ['10.0.0.100'], at: 1000, until: 9000 }, dir);
    expect(path).toBe(handOffPath(KEY, dir));
    const v = readHandOff(KEY, 9000 - RESUME_MARGIN_MS, dir);
    expect(v.resume).toBe(true);
    expect(v.resume && v.note.vips).toStrictEqual(['10.0.0.100']);
    // a process killed before its election started leaves it to the next start
    expect(existsSync(path)).toBe(true);
    removeHandOff(KEY, dir);
    expect(readHandOff(KEY, 2000, dir)).toStrictEqual({ resume: false, reason: null });
  });

  it('refuses, and removes the note, when the Backups stop waiting within the margin', () => {
    writeHandOff({ ...KEY, vips: [], at: 1000, until: 9000 }, dir);
    const v = readHandOff(KEY, 9000 - RESUME_MARGIN_MS + 1, dir);
    expect(v.resume).toBe(false);
    expect(!v.resume && v.reason).toMatch(/^too late/);
    expect(existsSync(handOffPath(KEY, dir))).toBe(false);
  });

  it('refuses another router: another primary address, and never reads another VRID or family', () => {
    writeHandOff({ ...KEY, vips: [], at: 0, until: 9000 }, dir);
    const v = readHandOff({ ...KEY, primary: '10.0.0.12' }, 100, dir);
    expect(!v.resume && v.reason).toMatch(/another router/);
    writeHandOff({ ...KEY, vips: [], at: 0, until: 9000 }, dir);
    expect(readHandOff({ ...KEY, vrid: 52 }, 100, dir)).toStrictEqual({ resume: false, reason: null });
    expect(readHandOff({ ...KEY, family: 6 }, 100, dir)).toStrictEqual({ resume: false, reason: null });
  });

  it('refuses a note from before a reboot, and one that is not JSON', () => {
    const path = writeHandOff({ ...KEY, vips: [], at: 0, until: 9000 }, dir);
    writeFileSync(path, JSON.stringify({ ...JSON.parse(readFileSync(path, 'utf8')), bootId: 'another-boot' }));
    expect(readHandOff(KEY, 100, dir)).toStrictEqual({ resume: false, reason: 'the hand-off note is from before a reboot' });
    writeFileSync(path, '{');
    expect(readHandOff(KEY, 100, dir)).toStrictEqual({ resume: false, reason: 'the hand-off note is not JSON' });
  });

  it('announces the longest interval whose Master_Down_Interval fits the hold at any priority', () => {
    // 8 s: 200 cs; a priority-1 Backup waits 3 × 2 s + 255/256 × 2 s = 7.99 s
    expect(handOffIntervalCs(8000, 100)).toBe(200);
    // never below our own interval, never above the 12-bit field
    expect(handOffIntervalCs(1000, 100)).toBe(100);
    expect(handOffIntervalCs(200_000, 10)).toBe(4095);
  });
});
