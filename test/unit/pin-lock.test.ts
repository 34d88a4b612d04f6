/**
 * The host-wide lock of the eBPF pins (lockPinDir in src/dataplane/ebpf.ts, lockFile in
 * native/file_lock.cc) on a directory of the test's own: exclusive, removed on release (file and
 * the directory it made), a stale file from a killed holder is taken over, and under contention
 * from several processes that unlink on release, no two ever hold it at once (the inode re-check
 * after flock). Needs the built addon, not root.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { lockPinDir } from '../../src/dataplane/ebpf.js';
import { isBallastError } from '../../src/errors.js';
import { addonPath } from '../../src/native.js';

let addon: string | undefined;
try {
  addon = addonPath();
} catch {
  addon = undefined;
}
if (addon === undefined || !existsSync(addon)) console.warn('[pin-lock.test] SKIPPED: the addon is not built (npm run build:native)');

describe.skipIf(addon === undefined || !existsSync(addon))('lockPinDir / lockFile (addon, no root)', () => {
  let base: string;
  let dir: string;
  beforeEach(() => {
    base = mkdtempSync(join(tmpdir(), 'ballast-pin-lock-'));
    dir = join(base, 'run-ballast');
  });
  afterEach(() => rmSync(base, { recursive: true, force: true }));

  it('is exclusive; release removes the lock file and the directory it created', () => {
    const lock = lockPinDir('/sys/fs/bpf/ballast/local-x', '/sys/fs/cgroup/x', dir);
    expect(lock.path).toBe(join(dir, 'local-x.lock'));
    expect(readdirSync(dir)).toStrictEqual(['local-x.lock']);
    let second: unknown;
    try {
      lockPinDir('/sys/fs/bpf/ballast/local-x', '/sys/fs/cgroup/x', dir).release();
    } catch (err) {
      second = err;
    }
    expect(isBallastError(second) && second.code).toBe('BALLAST_E_LOCAL_ENDPOINT_IN_USE');
    expect(existsSync(lock.path)).toBe(true); // the refused one removed nothing
    lock.release();
    expect(existsSync(dir)).toBe(false);
    lock.release(); // idempotent
    const again = lockPinDir('/sys/fs/bpf/ballast/local-x', '/sys/fs/cgroup/x', dir);
    again.release();
    expect(existsSync(dir)).toBe(false);
  });

  it("a directory it did not create stays, as do other agents' locks in it", () => {
    const other = lockPinDir('/sys/fs/bpf/ballast/local-a', '/a', dir);
    const mine = lockPinDir('/sys/fs/bpf/ballast/local-b', '/b', dir);
    other.release(); // made the directory, but it is not empty
    expect(readdirSync(dir)).toStrictEqual(['local-b.lock']);
    mine.release(); // did not make it
    expect(readdirSync(dir)).toStrictEqual([]);
  });

  it('a file left by a killed holder is locked as usual, and removed on release', () => {
    execFileSync('mkdir', ['-p', dir]);
    writeFileSync(join(dir, 'local.lock'), '');
    const lock = lockPinDir('/sys/fs/bpf/ballast/local', '/sys/fs/cgroup', dir);
    lock.release();
    expect(readdirSync(dir)).toStrictEqual([]);
  });

  it('four processes taking and releasing it 1500 times each: never two holders at once', async () => {
    const path = join(dir, 'race.lock');
    execFileSync('mkdir', ['-p', dir]);
    // each holder creates a marker with O_EXCL while it holds the lock: a second holder fails that
    const child = `
      const fs = require('node:fs');
      const a = require(${JSON.stringify(addon)});
      const [path, marker] = process.argv.slice(1);
      let held = 0, busy = 0, overlaps = 0;
      for (let i = 0; i < 1500; i++) {
        let fd;
        try { fd = a.lockFile(path); } catch (e) { if (e.code === 'EAGAIN' || e.code === 'EWOULDBLOCK') { busy++; continue; } throw e; }
        held++;
        try { fs.closeSync(fs.openSync(marker, 'wx')); fs.unlinkSync(marker); } catch (e) { if (e.code === 'EEXIST' || e.code === 'ENOENT') overlaps++; else throw e; }
        a.unlockFile(fd, path);
      }
      console.log(JSON.stringify({ held, busy, overlaps }));
    `;
    const runs = await Promise.all(
      [0, 1, 2, 3].map(
        () =>
          new Promise<{ held: number; busy: number; overlaps: number }>((resolve, reject) => {
            const p = spawn(process.execPath, ['-e', child, path, join(dir, 'holder')], { stdio: ['ignore', 'pipe', 'inherit'] });
            let out = '';
            p.stdout.on('data', (c: Buffer) => (out += c.toString()));
            p.on('error', reject);
            p.on('exit', (code) =>
              code === 0 ? resolve(JSON.parse(out) as { held: number; busy: number; overlaps: number }) : reject(new Error(`child exit ${code}: ${out}`)),
            );
          }),
      ),
    );
    const total = runs.reduce((s, r) => ({ held: s.held + r.held, busy: s.busy + r.busy, overlaps: s.overlaps + r.overlaps }), {
      held: 0,
      busy: 0,
      overlaps: 0,
    });
    console.log(`lock race: ${JSON.stringify(total)}`);
    expect(total.held + total.busy).toBe(6000);
    expect(total.held).toBeGreaterThan(0);
    expect(total.busy).toBeGreaterThan(0); // there was contention
    expect(total.overlaps).toBe(0);
    expect(readdirSync(dir)).toStrictEqual([]); // every holder removed its file
  }, 60_000);
});
