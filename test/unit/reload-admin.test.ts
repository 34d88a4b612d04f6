/**
 * The reload's admin and command side, without an agent: POST /reload (src/observe/admin.ts),
 * what `ballast reload` prints and exits with (src/commands/reload.ts), the reload metrics and the
 * status line, and the problem lines shared with `ballast validate`.
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { formatReload, postReload, reloadAddress } from '../../src/commands/reload.js';
import { parseConfig } from '../../src/config/index.js';
import { ConfigError } from '../../src/errors.js';
import { ReloadUnavailable, startAdmin } from '../../src/observe/admin.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { formatStatus, type ReloadResult, type StatusDocument } from '../../src/observe/status.js';

const OK: ReloadResult = {
  ok: true,
  at: '2026-12-01T12:00:00.000Z',
  trigger: 'admin',
  source: '/etc/ballast/ballast.yaml',
  problems: [],
  changed: ['vips'],
  actions: ['VIPs removed: 10.0.0.101', 'election reconfigured (vips), from the next advert'],
  handover: false,
  durationMs: 12.3,
};
const BAD: ReloadResult = {
  ok: false,
  at: '2026-12-01T12:00:01.000Z',
  trigger: 'admin',
  source: '/etc/ballast/ballast.yaml',
  problems: ['line 3: vrrp.vrid: must be an integer from 1 to 255, got 0'],
  changed: [],
  actions: [],
  handover: false,
  durationMs: 1,
};

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

async function admin(reload: () => Promise<ReloadResult>): Promise<{ host: string; port: number; family: 4 }> {
  const s = await startAdmin('127.0.0.1', 0, { status: () => Promise.reject(new Error('no')), metrics: () => Promise.reject(new Error('no')), reload });
  servers.push(s);
  return { host: '127.0.0.1', port: (s.address() as AddressInfo).port, family: 4 };
}

describe('POST /reload and `ballast reload`', () => {
  it('applied: 200 with the result; exit 0, what changed and what was done', async () => {
    const at = await admin(() => Promise.resolve(OK));
    const a = await postReload(at);
    expect(a).toStrictEqual({ statusCode: 200, result: OK });
    expect(formatReload(a, '127.0.0.1:9641')).toStrictEqual({
      code: 0,
      stdout: 'reloaded (12 ms): changed: vips\n  - VIPs removed: 10.0.0.101\n  - election reconfigured (vips), from the next advert\n',
      stderr: '',
    });
  });
  it('refused: 422 with the problems; exit 2, each problem as validate prints it', async () => {
    const at = await admin(() => Promise.resolve(BAD));
    const a = await postReload(at);
    expect(a).toStrictEqual({ statusCode: 422, result: BAD });
    expect(formatReload(a, '127.0.0.1:9641')).toStrictEqual({
      code: 2,
      stdout: '',
      stderr:
        'ballast: configuration not reloaded from /etc/ballast/ballast.yaml (1 problem); the agent keeps running as before:\n  line 3: vrrp.vrid: must be an integer from 1 to 255, got 0\n',
    });
  });
  it('the agent cannot reload now (stopping): 503; exit 1', async () => {
    const at = await admin(() => Promise.reject(new ReloadUnavailable('the agent is stopping; the configuration was not reloaded')));
    const a = await postReload(at);
    expect(a).toStrictEqual({ statusCode: 503, result: { ok: false, problems: ['the agent is stopping; the configuration was not reloaded'] } });
    expect(formatReload(a, '127.0.0.1:9641').code).toBe(1);
  });
  it('GET /reload is 405; no agent at the address rejects (the command maps it to exit 1)', async () => {
    const at = await admin(() => Promise.resolve(OK));
    const res = await fetch(`http://127.0.0.1:${at.port}/reload`);
    expect([res.status, res.headers.get('allow')]).toStrictEqual([405, 'POST']);
    const closed = servers.pop()!;
    await new Promise((r) => closed.close(r));
    await expect(postReload(at, 1000)).rejects.toThrow(/ECONNREFUSED/);
  });
  it('three concurrent POSTs each get their own answer', async () => {
    let n = 0;
    const at = await admin(async () => ({ ...OK, durationMs: ++n }));
    const answers = await Promise.all([postReload(at), postReload(at), postReload(at)]);
    expect(answers.map((a) => (a.result as ReloadResult).durationMs).sort()).toStrictEqual([1, 2, 3]);
  });
});

describe('reloadAddress', () => {
  const files: Record<string, string> = {
    '/a.yaml': 'admin:\n  listen: 127.0.0.1:9700\n',
    '/any.yaml': 'admin:\n  listen: 0.0.0.0:9701\n',
    '/any6.yaml': 'admin:\n  listen: "[::]:9702"\n',
    '/bad.yaml': 'vrrp: [\n',
  };
  const read = (p: string): string => {
    if (!(p in files)) throw new Error('ENOENT');
    return files[p]!;
  };
  it('--admin first, then admin.listen of --config (unspecified → loopback), else the default', () => {
    expect(reloadAddress({ admin: { host: '10.0.0.1', port: 1, family: 4 }, config: '/a.yaml' }, read)).toStrictEqual({ host: '10.0.0.1', port: 1, family: 4 });
    expect(reloadAddress({ config: '/a.yaml' }, read)).toMatchObject({ host: '127.0.0.1', port: 9700 });
    expect(reloadAddress({ config: '/any.yaml' }, read)).toMatchObject({ host: '127.0.0.1', port: 9701 });
    expect(reloadAddress({ config: '/any6.yaml' }, read)).toMatchObject({ host: '::1', port: 9702 });
    expect(reloadAddress({ config: '/bad.yaml' }, read)).toMatchObject({ host: '127.0.0.1', port: 9641 });
    expect(reloadAddress({}, read)).toMatchObject({ host: '127.0.0.1', port: 9641 });
  });
  it('a --config file that cannot be read is an error (exit 2), not a reload sent to the default address; a bad admin.listen is said', () => {
    expect(() => reloadAddress({ config: '/missing.yaml' }, read)).toThrow(
      expect.objectContaining({ code: 'BALLAST_E_CONFIG_READ', message: expect.stringMatching(/^cannot read \/missing\.yaml: /) }),
    );
    const notes: string[] = [];
    files['/badlisten.yaml'] = 'admin:\n  listen: nowhere\n';
    expect(reloadAddress({ config: '/badlisten.yaml' }, read, (l) => notes.push(l))).toMatchObject({ host: '127.0.0.1', port: 9641 });
    expect(notes).toStrictEqual(['/badlisten.yaml: admin.listen is not a host:port; asking the default 127.0.0.1:9641']);
    expect(reloadAddress({}, read)).toMatchObject({ host: '127.0.0.1', port: 9641 });
  });
});

describe('the reload in /metrics and `ballast status`', () => {
  const base: StatusDocument = {
    state: 'none',
    backends: [],
    dataplane: { mode: 'off', reason: 'no election (vrrp absent)' },
    local: { mode: 'off', reason: 'no localEndpoint configured' },
  };
  it('ballast_config_last_reload_successful and _success_timestamp_seconds, as Prometheus names them', async () => {
    const m = createMetrics();
    m.update({ ...base, reload: { last: null, lastSuccessAt: '2026-12-01T11:00:00.000Z' } });
    let text = (await m.registry.metrics()).split('\n');
    expect(text).toContain('ballast_config_last_reload_successful 1');
    expect(text).toContain(`ballast_config_last_reload_success_timestamp_seconds ${Date.parse('2026-12-01T11:00:00.000Z') / 1000}`);
    m.update({ ...base, reload: { last: BAD, lastSuccessAt: '2026-12-01T11:00:00.000Z' } });
    text = (await m.registry.metrics()).split('\n');
    expect(text).toContain('ballast_config_last_reload_successful 0');
    expect(text).toContain(`ballast_config_last_reload_success_timestamp_seconds ${Date.parse('2026-12-01T11:00:00.000Z') / 1000}`);
    m.update({ ...base, reload: { last: OK, lastSuccessAt: OK.at } });
    text = (await m.registry.metrics()).split('\n');
    expect(text).toContain('ballast_config_last_reload_successful 1');
    expect(text).toContain(`ballast_config_last_reload_success_timestamp_seconds ${Date.parse(OK.at) / 1000}`);
  });
  it('the status line of the last reload', () => {
    expect(
      formatStatus({ ...base, reload: { last: BAD, lastSuccessAt: OK.at } })
        .split('\n')
        .at(-1),
    ).toBe('reload: 2026-12-01T12:00:01.000Z FAILED: line 3: vrrp.vrid: must be an integer from 1 to 255, got 0');
    expect(
      formatStatus({ ...base, reload: { last: OK, lastSuccessAt: OK.at } })
        .split('\n')
        .at(-1),
    ).toBe('reload: 2026-12-01T12:00:00.000Z applied (vips)');
    expect(formatStatus({ ...base, reload: { last: null, lastSuccessAt: OK.at } })).not.toMatch(/reload/);
  });
});

describe('ConfigError.problemLines', () => {
  it('are the lines `ballast validate` prints, without the indent', () => {
    let err: ConfigError | undefined;
    try {
      parseConfig('vrrp:\n  vrid: 0\n  priority: 100\nvips: [10.0.0.100]\nbogus: 1\n', '/x.yaml');
    } catch (e) {
      err = e as ConfigError;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const lines = err!.problemLines();
    expect(lines.length).toBe(2);
    expect(lines[0]).toMatch(/^line 2: vrrp\.vrid: /);
    expect(
      err!
        .format()
        .split('\n')
        .slice(1, 1 + lines.length),
    ).toStrictEqual(lines.map((l) => `  ${l}`));
  });
});
