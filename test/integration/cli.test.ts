/**
 * The `ballast` command as an operator runs it (the compiled CLI, a child process each time).
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliPath } from '../../lab/cluster.js';
import { needs } from '../support/index.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function ballast(args: string[], netns?: string): Promise<Run> {
  const argv = netns ? ['ip', 'netns', 'exec', netns, process.execPath, cliPath(), ...args] : [process.execPath, cliPath(), ...args];
  return new Promise((resolve) => {
    execFile(argv[0]!, argv.slice(1), { timeout: 15_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

let dir: string;
const good = `vrrp:\n  vrid: 51\n  priority: 100\n  advertisementInterval: 100ms\nvips: [10.79.0.100]\n`;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'ballast-cli-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('ballast validate', () => {
  it('accepts a valid file', async () => {
    writeFileSync(join(dir, 'good.yaml'), good);
    const r = await ballast(['validate', '--config', join(dir, 'good.yaml')]);
    expect(r).toMatchObject({ code: 0, stdout: `${join(dir, 'good.yaml')}: ok\n` });
  });
  it('lists every bad field with its reason and exits 2', async () => {
    const f = join(dir, 'bad.yaml');
    writeFileSync(f, `vrrp:\n  vrid: 0\n  priority: 300\n  advertisementInterval: 105ms\n  checksum: md5\nvips: [10.79.0.100, fd00::1]\n`);
    const r = await ballast(['validate', '--config', f]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    for (const field of ['vrrp.vrid', 'vrrp.priority', 'vrrp.advertisementInterval', 'vrrp.checksum', 'vips[1]']) {
      expect(r.stderr).toContain(field);
    }
    expect(r.stderr).toContain('BALLAST_E_CONFIG');
  });
  it('a missing file is a read error, exit 2', async () => {
    const r = await ballast(['validate', '--config', join(dir, 'nope.yaml')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('BALLAST_E_CONFIG_READ');
  });
});

describe('ballast status', () => {
  it('exits 3 with a clear message when no agent answers', async () => {
    const r = await ballast(['status', '--admin', '127.0.0.1:1']);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/no agent answers at 127\.0\.0\.1:1: .*BALLAST_E_STATUS_UNREACHABLE/);
  });
  it('rejects a malformed --admin', async () => {
    const r = await ballast(['status', '--admin', 'localhost']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('expected host:port');
  });
});

describe('ballast (commander)', () => {
  it('--help exits 0 and lists the commands', async () => {
    const r = await ballast(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/run \[options\]/);
    expect(r.stdout).toMatch(/status \[options\]/);
  });
  it('an unknown command exits 2', async () => {
    expect((await ballast(['frobnicate'])).code).toBe(2);
  });
});

describe.skipIf(needs('root'))('ballast run: the host does not fit (root; in an empty namespace)', () => {
  const ns = 'bcli-x';
  beforeAll(async () => {
    await new Promise((r) => execFile('ip', ['netns', 'del', ns], () => r(null)));
    await new Promise((r, j) => execFile('ip', ['netns', 'add', ns], (e) => (e ? j(e) : r(null))));
  });
  afterAll(async () => {
    await new Promise((r) => execFile('ip', ['netns', 'del', ns], () => r(null)));
  });
  it('no interface holds the VIP subnet: exit 2, BALLAST_E_NO_INTERFACE', async () => {
    writeFileSync(join(dir, 'noif.yaml'), good);
    const r = await ballast(['run', '--config', join(dir, 'noif.yaml')], ns);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('no interface has a subnet that holds 10.79.0.100');
    expect(r.stderr).toContain('BALLAST_E_NO_INTERFACE');
  });
  it('a named interface that does not exist: exit 2, BALLAST_E_INTERFACE_NOT_FOUND', async () => {
    writeFileSync(join(dir, 'badif.yaml'), `interface: eth9\n${good}`);
    const r = await ballast(['run', '--config', join(dir, 'badif.yaml')], ns);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('interface eth9 does not exist');
    expect(r.stderr).toContain('BALLAST_E_INTERFACE_NOT_FOUND');
  });
});

describe("SIGUSR1 never opens the inspector (Node's default for SIGUSR1, in a root process)", () => {
  it('a SIGUSR1 while the command runs leaves no "Debugger listening" and does not change the outcome', async () => {
    // ~3000 unknown keys keep validate busy for a while (each gets a "did you mean")
    const f = join(dir, 'slow.yaml');
    writeFileSync(f, `${good}${Array.from({ length: 3000 }, (_, i) => `unknownKey${i}: 1`).join('\n')}\n`);
    for (const atMs of [150, 300]) {
      const r = await new Promise<Run>((resolve) => {
        const child = execFile(process.execPath, [cliPath(), 'validate', '--config', f], { timeout: 15_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
          resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr });
        });
        setTimeout(() => child.kill('SIGUSR1'), atMs);
      });
      expect(r.stderr).not.toContain('Debugger listening');
      expect(r.code).toBe(2);
    }
  });
});

describe('ballast status against something that is not an agent: a clear error, not a stack trace', () => {
  it('a JSON answer of another shape, or no JSON, is BALLAST_E_STATUS_UNREACHABLE (exit 3) in its own words', async () => {
    const { createServer } = await import('node:http');
    for (const body of ['{}', '{"state":5,"backends":[]}', 'notjson']) {
      const server = createServer((_req, res) => res.end(body));
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
      const port = (server.address() as { port: number }).port;
      const r = await ballast(['status', '--admin', `127.0.0.1:${port}`]);
      server.close();
      expect(r.code).toBe(3);
      expect(r.stderr).toContain(
        `no agent answers at 127.0.0.1:${port}: the answer is ${body === 'notjson' ? 'not JSON, so' : 'JSON but'} not a ballast agent's /status`,
      );
      expect(r.stderr).not.toMatch(/TypeError|Unexpected token|at .*\.js:\d+/);
    }
  });
});

/** The machine's own Node.js (Debian's is 20), when it is older than 24: the one an operator runs a clone with. */
const OLD_NODE = '/usr/bin/node';
const oldNodeVersion = existsSync(OLD_NODE) ? spawnSync(OLD_NODE, ['--version'], { encoding: 'utf8' }).stdout.trim() : '';
const noOldNode =
  /^v(\d+)\./.exec(oldNodeVersion) && Number(/^v(\d+)\./.exec(oldNodeVersion)![1]) < 24
    ? null
    : `${OLD_NODE} is ${oldNodeVersion || 'missing'}, not older than 24`;
if (noOldNode) process.stderr.write(`skip: ballast on an older Node.js: ${noOldNode}\n`);

describe.skipIf(noOldNode)(`ballast on an older Node.js (${OLD_NODE}, ${oldNodeVersion})`, () => {
  it('refuses at once: exit 2, the version found and how to get 24, before it reads the configuration', async () => {
    const config = join(dir, 'old-node.yaml');
    writeFileSync(config, good);
    for (const args of [['run', '--config', config], ['check', '--config', config], ['status']]) {
      const r = await new Promise<Run>((resolve) => {
        execFile(OLD_NODE, [cliPath(), ...args], { timeout: 15_000 }, (err, stdout, stderr) =>
          resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
        );
      });
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe(
        `ballast: this is Node.js ${oldNodeVersion} (${OLD_NODE}); ballast needs Node.js 24 or later and changes nothing on an older one (BALLAST_E_NODE_VERSION). ` +
          'The Debian package and the image bring their own Node.js 24 (/usr/bin/ballast runs /usr/lib/ballast/bin/node); ' +
          'from a clone, run `bash scripts/setup.sh` (it installs Node.js 24 under .node/), then `bash scripts/node-env.sh node dist/src/cli.js ...`\n',
      );
    }
  });
});
