/**
 * Bootstrap before the CA exists: a check whose CA, client certificate or
 * token file does not exist yet fails with cause `waitingForFile` (unready: no traffic, never a
 * reset), the snapshot, `ballast status` and /metrics say so, and the first check after the file
 * appears — also in a directory created later — uses it.
 *
 * The probe runs against a real TLS server on loopback (a self-signed certificate made with
 * openssl, IP SubjectAltName 127.0.0.1) with the host's file system; the checker runs on a fake
 * clock with a probe that waits for a flag.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HealthChecker, type Clock } from '../../src/health/checker.js';
import { createProbe, type ProbeResult } from '../../src/health/probe.js';
import { failureState, type Verdict } from '../../src/health/verdict.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { formatStatus } from '../../src/observe/status.js';

const dir = mkdtempSync(join(tmpdir(), 'ballast-health-wait-'));
let port = 0;
let server: https.Server;
let certPem = '';

beforeAll(async () => {
  const key = join(dir, 'server.key');
  const cert = join(dir, 'server.crt');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '1',
      '-subj',
      '/CN=ballast-health-wait',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ],
    { stdio: 'ignore', timeout: 10_000 },
  );
  certPem = readFileSync(cert, 'utf8');
  server = https.createServer({ key: readFileSync(key), cert: certPem }, (_req, res) => res.end('ok'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  await new Promise((r) => server.close(r));
  rmSync(dir, { recursive: true, force: true });
});

describe('probe: a file that does not exist yet', () => {
  it('waits for the CA in a directory that does not exist yet, then uses it as soon as it is written', async () => {
    const caFile = join(dir, 'pki', 'ca.crt');
    const probe = createProbe({ path: '/readyz', timeoutMs: 2000, insecureSkipVerify: false, caFile });
    const target = { host: '127.0.0.1', port };
    const before = await probe(target);
    expect(before).toMatchObject({
      ok: false,
      cause: { kind: 'waitingForFile', setting: 'apiserver.health.caFile', path: caFile },
      error: `waiting for apiserver.health.caFile ${caFile} (it does not exist yet)`,
    });
    expect(failureState(before.cause)).toBe('unready');
    mkdirSync(join(dir, 'pki'));
    expect((await probe(target)).cause.kind).toBe('waitingForFile');
    writeFileSync(caFile, certPem);
    expect(await probe(target)).toMatchObject({ ok: true, status: 200, cause: { kind: 'http', status: 200 } });
  });

  it('a file that exists but is unusable (an empty token) is localFile, not a wait, even beside a missing CA', async () => {
    const empty = join(dir, 'empty-token');
    writeFileSync(empty, '\n');
    const r = await createProbe({ path: '/readyz', timeoutMs: 2000, insecureSkipVerify: false, tokenFile: empty, caFile: join(dir, 'none', 'ca.crt') })({
      host: '127.0.0.1',
      port,
    });
    expect(r).toMatchObject({ ok: false, cause: { kind: 'localFile', setting: 'tokenFile' }, error: `tokenFile ${empty} is empty` });
  });
  it("a CA file that holds no certificate (junk, or empty) is localFile in validate's words, not a TLS failure of the server", async () => {
    const junk = join(dir, 'junk-ca.crt');
    for (const text of ['junk\n', '']) {
      writeFileSync(junk, text);
      const r = await createProbe({ path: '/readyz', timeoutMs: 2000, insecureSkipVerify: false, caFile: junk })({ host: '127.0.0.1', port });
      expect(r).toMatchObject({
        ok: false,
        cause: { kind: 'localFile', setting: 'caFile' },
        error: `caFile ${junk} holds no PEM certificate (expected a "-----BEGIN CERTIFICATE-----" block)`,
      });
    }
  });
});

/** A clock whose timers run only when the test advances it (in time order). */
class ManualClock implements Clock {
  t = 0;
  #seq = 0;
  readonly #timers = new Map<number, { at: number; fn: () => void }>();
  now(): number {
    return this.t;
  }
  setTimeout(fn: () => void, ms: number): unknown {
    this.#timers.set(++this.#seq, { at: this.t + ms, fn });
    return this.#seq;
  }
  clearTimeout(h: unknown): void {
    this.#timers.delete(h as number);
  }
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    for (;;) {
      await new Promise((r) => setImmediate(r));
      const next = [...this.#timers].filter(([, x]) => x.at <= end).sort((a, b) => a[1].at - b[1].at || a[0] - b[0])[0];
      if (next === undefined) break;
      this.#timers.delete(next[0]);
      this.t = next[1].at;
      next[1].fn();
    }
    this.t = end;
  }
}

describe('checker: waiting for the CA, then up within rise × interval', () => {
  it('reports waitingFor while the file is missing (snapshot, status text, metrics), and up rise checks after it appears', async () => {
    const clock = new ManualClock();
    let present = false;
    const waiting: ProbeResult = {
      ok: false,
      latencyMs: 0,
      cause: { kind: 'waitingForFile', setting: 'apiserver.health.caFile', path: '/etc/kubernetes/pki/ca.crt' },
      error: 'waiting for apiserver.health.caFile /etc/kubernetes/pki/ca.crt (it does not exist yet)',
    };
    const probe = async (): Promise<ProbeResult> => (present ? { ok: true, status: 200, latencyMs: 1, cause: { kind: 'http', status: 200 } } : waiting);
    const health = { path: '/readyz', timeoutMs: 100, insecureSkipVerify: false, intervalMs: 1000, rise: 2, fall: 2 };
    // random 0.5: the first check at 500 ms, then every 1000 ms (no jitter)
    const checker = new HealthChecker({ health, backends: [{ host: '10.0.0.11', port: 6443 }], probe, clock, random: () => 0.5 });
    const verdicts: Verdict[] = [];
    checker.on('verdict', (v) => verdicts.push(v));
    checker.start();
    await clock.advance(500);
    // one failed check: still unknown, but already saying what it waits for
    expect(checker.snapshot()[0]).toMatchObject({ state: 'unknown', waitingFor: { setting: 'apiserver.health.caFile', path: '/etc/kubernetes/pki/ca.crt' } });
    await clock.advance(1000);
    const snap = checker.snapshot();
    expect(snap[0]).toMatchObject({ state: 'down', healthy: false, reason: waiting.error, waitingFor: { setting: 'apiserver.health.caFile' } });
    expect(verdicts.map((v) => [v.state, v.cause.kind])).toStrictEqual([['unready', 'waitingForFile']]);

    const doc = {
      state: 'none' as const,
      backends: snap,
      dataplane: { mode: 'off' as const, reason: 'no election (vrrp absent)' },
      local: { mode: 'off' as const, reason: 'x' },
    };
    expect(formatStatus(doc)).toContain(
      'backend: 10.0.0.11:6443 waiting for apiserver.health.caFile /etc/kubernetes/pki/ca.crt (down, not ready until the file exists)',
    );
    const metrics = createMetrics();
    metrics.update(doc);
    const text = await metrics.registry.metrics();
    expect(text).toContain('ballast_backend_waiting_for_file{backend="10.0.0.11:6443",setting="apiserver.health.caFile",path="/etc/kubernetes/pki/ca.crt"} 1');
    expect(text).toContain('ballast_backend_up{backend="10.0.0.11:6443"} 0');

    // the file appears at t = 2000 (after the check at 1500): up at the second passing check,
    // 2500 and 3500, i.e. within rise × interval of its appearance
    await clock.advance(500);
    present = true;
    const appeared = clock.now();
    await clock.advance(2 * health.intervalMs);
    expect(checker.snapshot()[0]).toMatchObject({ state: 'up', healthy: true, reason: null });
    expect('waitingFor' in checker.snapshot()[0]!).toBe(false);
    expect(verdicts.map((v) => v.state)).toStrictEqual(['unready', 'up']);
    expect(clock.now() - appeared).toBeLessThanOrEqual(health.rise * health.intervalMs);
    metrics.update({ ...doc, backends: checker.snapshot() });
    expect(await metrics.registry.metrics()).not.toMatch(/ballast_backend_waiting_for_file\{/);
    await checker.stop();
  });
});
