/**
 * `ballast cleanup`'s withdrawal in mode: bgp (withdrawBgp, src/commands/cleanup.ts) against the
 * fake control socket: ballast's own snippet rewritten disabled, `configure` and `disable`;
 * BIRD absent or a foreign configFile are notes; a second run finds nothing to do.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { renderBirdConfig } from '../../src/bgp/bird.js';
import { withdrawBgp, type CleanupReport } from '../../src/commands/cleanup.js';
import { fakeBirdConfig, startFakeBird, type FakeBird } from '../support/fake-bird.js';

const { dir, socket, configFile, config } = fakeBirdConfig('ballast-cleanup-bgp-');
const snippet = (announced: boolean): string => renderBirdConfig({ bgp: config.bgp!, family: 4, vips: config.vips, announced }, configFile);
const report = (): CleanupReport => ({ removed: [], inUse: [], notes: [], failed: [] });

let fake: FakeBird | undefined;
afterEach(async () => {
  await fake?.close();
  fake = undefined;
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('withdrawBgp (ballast cleanup, mode: bgp)', () => {
  it("rewrites ballast's snippet disabled, has BIRD re-read it and disable the VIPs' protocol; a second run finds nothing", async () => {
    writeFileSync(configFile, snippet(true));
    fake = await startFakeBird(socket);
    fake.vipUp = true;
    const r = report();
    await withdrawBgp(config, r);
    expect(readFileSync(configFile, 'utf8')).toBe(snippet(false));
    expect(fake.commands).toStrictEqual(['configure', 'disable ballast_vip4']);
    expect(fake.vipUp).toBe(false);
    expect(r).toStrictEqual({
      removed: [
        `the BGP announcement of 10.0.0.100 from ${configFile} (ballast_vip4 disabled)`,
        `the BGP announcement of 10.0.0.100 from BIRD on ${socket} (disable ballast_vip4)`,
      ],
      inUse: [],
      notes: [],
      failed: [],
    });
    const again = report();
    await withdrawBgp(config, again);
    expect(again).toStrictEqual(report());
  });

  it('BIRD not answering is a note, and the snippet still says disabled for its next start', async () => {
    writeFileSync(configFile, snippet(true));
    const r = report();
    await withdrawBgp(config, r, 500);
    expect(readFileSync(configFile, 'utf8')).toBe(snippet(false));
    expect(r.failed).toStrictEqual([]);
    expect(r.notes).toStrictEqual([
      expect.stringMatching(
        new RegExp(`^BIRD does not answer on bgp.socket ${socket} \\((ENOENT|ECONNREFUSED)\\): nothing withdrawn there; .* says ballast_vip4 is disabled`),
      ),
    ]);
  });

  it("a configFile that is not ballast's is left as it was (a note); BIRD still disables ballast's protocol", async () => {
    const operators = 'router id 10.0.1.2;\nprotocol device { }\n';
    writeFileSync(configFile, operators);
    fake = await startFakeBird(socket);
    fake.vipUp = true;
    const r = report();
    await withdrawBgp(config, r);
    expect(readFileSync(configFile, 'utf8')).toBe(operators);
    expect(fake.commands).toStrictEqual(['disable ballast_vip4']);
    expect(r.notes).toStrictEqual([expect.stringContaining(`bgp.configFile ${configFile} exists and is not a snippet ballast wrote`)]);
  });
});
