/**
 * The keepalived captures are part of the repository: the codec tests find them in
 * test/fixtures/ of this checkout, with nothing beside it, unless BALLAST_FIXTURES says otherwise.
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { fixturePath, readPcap } from '../support/pcap.js';

const repoFixtures = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures');
const CAPTURES = [
  'keepalived-garp',
  'keepalived-ipv6-na',
  'keepalived-vrrp2-ipv4',
  'keepalived-vrrp3-ipv4',
  'keepalived-vrrp3-ipv4-adv10cs',
  'keepalived-vrrp3-ipv6',
];

describe('fixturePath', () => {
  const saved = process.env.BALLAST_FIXTURES;
  afterEach(() => {
    if (saved === undefined) delete process.env.BALLAST_FIXTURES;
    else process.env.BALLAST_FIXTURES = saved;
  });

  it('finds every capture and its decoded text in test/fixtures/ of the repository', () => {
    delete process.env.BALLAST_FIXTURES;
    const files = readdirSync(repoFixtures);
    for (const c of CAPTURES) {
      expect(fixturePath(`${c}.pcap`)).toBe(join(repoFixtures, `${c}.pcap`));
      expect(files).toContain(`${c}.txt`);
      // a real capture: at least one Ethernet frame
      expect(readPcap(fixturePath(`${c}.pcap`)).length).toBeGreaterThan(0);
    }
  });

  it('BALLAST_FIXTURES overrides the directory, and a missing file is named in the error', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ballast-fixtures-'));
    try {
      writeFileSync(join(dir, 'x.pcap'), '');
      process.env.BALLAST_FIXTURES = dir;
      expect(fixturePath('x.pcap')).toBe(join(dir, 'x.pcap'));
      expect(() => fixturePath('keepalived-garp.pcap')).toThrow(`the keepalived capture keepalived-garp.pcap is not at ${join(dir, 'keepalived-garp.pcap')}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
