/**
 * BirdSpeaker against a stand-in of BIRD's control socket (a Unix socket server here speaking
 * the reply format of bird.ts's header): the commands ballast sends, and the daemon's absence,
 * loss and return. BIRD itself is driven in test/integration/bgp.test.ts.
 */
import { readFileSync, rmSync } from 'node:fs';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { BirdSpeaker } from '../../src/bgp/speaker.js';
import { waitFor } from '../../lab/wait.js';
import { fakeBirdConfig, startFakeBird, type FakeBird } from '../support/fake-bird.js';

const { dir, socket, configFile, config } = fakeBirdConfig('ballast-speaker-');
const log = {
  lines: [] as string[],
  info(_o: object, m: string) {
    this.lines.push(`info ${m}`);
  },
  warn(_o: object, m: string) {
    this.lines.push(`warn ${m}`);
  },
  error(_o: object, m: string) {
    this.lines.push(`error ${m}`);
  },
};

let speaker: BirdSpeaker | undefined;
let fake: FakeBird | undefined;
afterEach(async () => {
  await speaker?.stop(false);
  await fake?.close();
  speaker = undefined;
  fake = undefined;
});

describe('BirdSpeaker', () => {
  it('pushes the snippet, announces with enable, withdraws with disable', async () => {
    fake = await startFakeBird(socket);
    speaker = new BirdSpeaker(config.bgp!, 4, config.vips, { log, pollMs: 50 });
    await speaker.start();
    expect(fake.commands.slice(0, 2)).toStrictEqual(['configure', 'disable ballast_vip4']);
    expect(readFileSync(configFile, 'utf8')).toContain('  disabled yes;');
    await speaker.set(true, 'test');
    expect(fake.commands.at(-1)).toBe('enable ballast_vip4');
    expect(readFileSync(configFile, 'utf8')).toContain('  disabled no;');
    expect(speaker.status()).toMatchObject({
      daemonUp: true,
      announced: true,
      wanted: true,
      reason: 'test',
      version: '2.0.12',
      routerId: '10.0.1.2',
      pushes: 1,
    });
    await waitFor(
      () => speaker!.status().peers[0]!.session,
      (s) => s === 'Established',
      { timeoutMs: 2000, what: 'the peer state' },
    );
    await speaker.set(false, 'gone');
    expect(fake.commands.at(-1)).toBe('disable ballast_vip4');
    expect(speaker.status().announced).toBe(false);
  });

  it('runs without the daemon, reports it, and pushes when it appears', async () => {
    speaker = new BirdSpeaker(config.bgp!, 4, config.vips, { log, pollMs: 50 });
    await speaker.start();
    await speaker.set(true, 'ready');
    expect(speaker.status()).toMatchObject({ daemonUp: false, announced: false, wanted: true });
    expect(speaker.status().lastError).toMatch(/ENOENT|ECONNREFUSED/);
    expect(readFileSync(configFile, 'utf8')).toContain('  disabled no;');
    fake = await startFakeBird(socket);
    await waitFor(
      () => speaker!.status(),
      (s) => s.daemonUp && s.announced,
      { timeoutMs: 2000, what: 'the push' },
    );
    expect(fake.commands.slice(0, 2)).toStrictEqual(['configure', 'enable ballast_vip4']);
  });

  // BIRD prints "Last reboot on" as the wall clock minus the monotonic time since boot (lib/timer.c,
  // tm_format_time): a busy event loop moves it by a millisecond (seen: 58 × .412, 2 × .413 in 60
  // reads during reconfigurations), NTP by its step; neither is a restart
  it('a "Last reboot on" that moves while the connection stays open is no restart: no loss, one push', async () => {
    fake = await startFakeBird(socket, '2026-12-01 10:00:00.412');
    speaker = new BirdSpeaker(config.bgp!, 4, config.vips, { log, pollMs: 20 });
    await speaker.start();
    await speaker.set(true, 'ready');
    const reads = (): number => fake!.commands.filter((c) => c === 'show status').length;
    const n = reads();
    fake.reboot = '2026-12-01 10:00:00.413';
    await waitFor(reads, (k) => k >= n + 3, { timeoutMs: 2000, what: 'three reads after the move' });
    expect(speaker.status()).toMatchObject({ daemonUp: true, announced: true, daemonLosses: 0, pushes: 1 });
    expect(fake.commands.filter((c) => c === 'configure')).toHaveLength(1);
  });

  it('a restart between two polls (the connection closes, the successor answers at once) is one loss and one push', async () => {
    fake = await startFakeBird(socket);
    speaker = new BirdSpeaker(config.bgp!, 4, config.vips, { log, pollMs: 5000 });
    await speaker.start();
    await speaker.set(true, 'ready');
    // the same boot time: only the closed connection can tell
    await fake.close();
    fake = await startFakeBird(socket);
    await waitFor(
      () => speaker!.status(),
      (s) => s.pushes === 2 && s.daemonUp && s.announced,
      { timeoutMs: 2000, what: 'the push to the successor' },
    );
    expect(speaker.status().daemonLosses).toBe(1);
    expect(fake.commands.slice(0, 2)).toStrictEqual(['configure', 'enable ballast_vip4']);
  });

  it('notices the daemon going away and a restart, and pushes again', async () => {
    fake = await startFakeBird(socket);
    speaker = new BirdSpeaker(config.bgp!, 4, config.vips, { log, pollMs: 50 });
    await speaker.start();
    await speaker.set(true, 'ready');
    await fake.close();
    await waitFor(
      () => speaker!.status(),
      (s) => !s.daemonUp,
      { timeoutMs: 2000, what: 'the loss' },
    );
    expect(speaker.status()).toMatchObject({ announced: false, wanted: true, daemonLosses: 1 });
    fake = await startFakeBird(socket, '2026-12-01 11:00:00.000');
    await waitFor(
      () => speaker!.status(),
      (s) => s.daemonUp && s.announced,
      { timeoutMs: 2000, what: 'the push after the return' },
    );
    expect(fake.commands.slice(0, 2)).toStrictEqual(['configure', 'enable ballast_vip4']);
    expect(speaker.status().pushes).toBe(2);
    // someone disables the protocol by hand: put back at the next look
    fake.vipUp = false;
    const n = fake.commands.length;
    await waitFor(
      () => fake!.commands.slice(n),
      (c) => c.includes('enable ballast_vip4'),
      { timeoutMs: 2000, what: 'the state set again' },
    );
  });
});

// vitest runs files in reused workers: a process 'exit' handler would run long after, or never
afterAll(() => rmSync(dir, { recursive: true, force: true }));
