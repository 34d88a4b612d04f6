/**
 * The conntrackd supervisor (src/dataplane/conntrackd-daemon.ts) with stand-in programs in place
 * of conntrackd (shell scripts: the supervision is what is tested, not the daemon): a program
 * that is missing leaves it unavailable; one that exits is started again after the back-off
 * (1 s, then 2 s) and counted; a pause stops it without counting a failure; a stop ends it for
 * good. conntrackd itself runs in test/integration/hitless.test.ts.
 */
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConntrackdDaemon } from '../../src/dataplane/conntrackd-daemon.js';
import type { Log } from '../../src/log/log.js';

const dir = mkdtempSync(join(tmpdir(), 'ballast-daemon-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const lines: { level: string; msg: string }[] = [];
const log: Log = {
  info: (_o, msg) => void lines.push({ level: 'info', msg }),
  warn: (_o, msg) => void lines.push({ level: 'warn', msg }),
  error: (_o, msg) => void lines.push({ level: 'error', msg }),
  debug: () => undefined,
};

/** An executable shell script in the test's directory. */
function program(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}
const until = async (cond: () => boolean, ms: number): Promise<void> => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
};

describe('ConntrackdDaemon', () => {
  it('a program that does not exist: unavailable, with the package to install, and no restart', async () => {
    const d = new ConntrackdDaemon({ binary: join(dir, 'absent'), config: join(dir, 'c.conf'), lock: join(dir, 'lock'), log });
    d.start();
    await until(() => d.state === 'unavailable', 2000);
    expect(d.error).toMatch(/ENOENT.*Debian package "conntrackd"/);
    expect(d.restarts).toBe(0);
  });

  it('one that exits is started again after 1 s, then 2 s; each exit is counted; a stop ends it', async () => {
    const bin = program('exits', `echo "bad config line 3" >&2; exit 3`);
    writeFileSync(join(dir, 'lock2'), '');
    const started: number[] = [];
    const d = new ConntrackdDaemon({ binary: bin, config: join(dir, 'c.conf'), lock: join(dir, 'lock2'), log, onStarted: () => void started.push(Date.now()) });
    d.start();
    await until(() => d.restarts === 1, 2000);
    expect(d.state).toBe('restarting');
    expect(d.error).toBe('conntrackd exited (status 3): bad config line 3');
    await until(() => d.restarts === 2, 3000);
    expect(started).toHaveLength(2);
    // the back-off: the second start at least 1 s after the first
    expect(started[1]! - started[0]!).toBeGreaterThanOrEqual(950);
    await d.stop();
    const n = started.length;
    await new Promise((r) => setTimeout(r, 2200));
    expect(started.length).toBe(n);
  }, 10_000);

  it('a pause stops it without a failure; resume starts it again; the lock file is removed before each start', async () => {
    const lock = join(dir, 'lock3');
    const bin = program('runs', `exec sleep 30`);
    const d = new ConntrackdDaemon({ binary: bin, config: join(dir, 'c.conf'), lock, log });
    writeFileSync(lock, '');
    d.start();
    await until(() => d.state === 'running', 2000);
    expect(existsSync(lock)).toBe(false);
    const first = d.current();
    expect(first?.pid).toBeGreaterThan(0);
    await d.pause();
    expect(d.state).toBe('restarting');
    expect(first?.exitCode !== null || first?.signalCode !== null).toBe(true);
    expect(d.restarts).toBe(0);
    expect(d.current()).toBeNull();
    writeFileSync(lock, '');
    d.resume();
    await until(() => d.state === 'running', 2000);
    expect(existsSync(lock)).toBe(false);
    expect(d.current()).not.toBe(first);
    await d.stop();
    expect(d.restarts).toBe(0);
    expect(lines.filter((l) => l.msg.includes('exited; starting it again'))).toHaveLength(2);
  });
});
