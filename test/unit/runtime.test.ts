/**
 * The tests run on Node.js 24 LTS, and so do the processes they start (process.execPath: the
 * agents, the lab's scripts and clients); package.json's engines says the same.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

describe('runtime', () => {
  it('is Node.js 24 or newer, as package.json engines requires', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { engines: { node: string } };
    expect(pkg.engines.node).toBe('>=24');
    expect(Number(process.versions.node.split('.')[0])).toBeGreaterThanOrEqual(24);
  });

  it('a child started with process.execPath runs the same Node.js (how tests start agents and lab scripts)', () => {
    expect(execFileSync(process.execPath, ['-p', 'process.version'], { encoding: 'utf8' }).trim()).toBe(process.version);
  });
});
