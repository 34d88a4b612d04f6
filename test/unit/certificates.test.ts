/**
 * certificateCoverage / certificateNeeds / examineCertificate: real certificates (openssl),
 * matched by Node's X509Certificate. IPv4 and IPv6 in any spelling, RFC 6125 wildcards, and a
 * certificate whose only name is its CN (ignored: no SAN, every name missing).
 */
import { X509Certificate } from 'node:crypto';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendsToCheck, checkBackendCertificates } from '../../src/check/certificates.js';
import { certificateCoverage, certificateNeeds, examineCertificate, type NeededName } from '../../src/health/examine-certificate.js';
import { createProbe } from '../../src/health/probe.js';
import { parseConfig, type Config } from '../../src/config/index.js';
import { CERT_MISSING_MSG, CERT_OK_MSG, CertificateTracker } from '../../src/health/certificates.js';
import { parseHostPort } from '../../src/net/hostport.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { formatStatus, type EndpointOnlyStatusDocument } from '../../src/observe/status.js';
import { makeCertificate, makeTestPki, type TestPki } from '../support/tls.js';

const full = makeCertificate({ sans: ['DNS:kubernetes', 'DNS:*.api.example.com', 'IP:10.0.0.100', 'IP:127.0.0.1', 'IP:fd00:0:0:0:0:0:0:11', 'IP:::1'] });
const cnOnly = makeCertificate({ sans: [], cn: '10.0.0.100' });

describe('certificateCoverage', () => {
  it('IPv4: covered entries are not missing, others are, in order', () => {
    expect(certificateCoverage(full, { ips: ['10.0.0.100', '127.0.0.1'], names: [] })).toStrictEqual({ missing: [] });
    expect(certificateCoverage(full, { ips: ['10.0.0.101', '10.0.0.100', '127.0.0.2'], names: [] })).toStrictEqual({ missing: ['10.0.0.101', '127.0.0.2'] });
  });

  it('IPv6: compared as addresses, missing ones given in RFC 5952 form', () => {
    expect(
      certificateCoverage(full, { ips: ['fd00::11', 'FD00:0::0:11', 'fd00:0000:0000:0000:0000:0000:0000:0011', '0:0:0:0:0:0:0:1'], names: [] }),
    ).toStrictEqual({ missing: [] });
    expect(certificateCoverage(full, { ips: ['FD00:0:0:0:0:0:0:12', '::ffff:10.0.0.100'], names: [] })).toStrictEqual({
      missing: ['fd00::12', '::ffff:a00:64'],
    });
  });

  it('DNS: exact names case-insensitively, a wildcard for exactly one leftmost label', () => {
    expect(certificateCoverage(full, { ips: [], names: ['kubernetes', 'KUBERNETES', 'cp.api.example.com'] })).toStrictEqual({ missing: [] });
    expect(certificateCoverage(full, { ips: [], names: ['api.example.com', 'a.b.api.example.com', 'kubernetes.default', 'example.com'] })).toStrictEqual({
      missing: ['api.example.com', 'a.b.api.example.com', 'kubernetes.default', 'example.com'],
    });
  });

  it('an IP is not matched by a DNS SAN spelling it, nor a name by an IP SAN', () => {
    const dnsIp = makeCertificate({ sans: ['DNS:10.0.0.100'] });
    expect(certificateCoverage(dnsIp, { ips: ['10.0.0.100'], names: [] })).toStrictEqual({ missing: ['10.0.0.100'] });
  });

  it('a CN-only certificate covers nothing, even the name its CN spells', () => {
    expect(certificateCoverage(cnOnly, { ips: ['10.0.0.100'], names: ['kube-apiserver'] })).toStrictEqual({ missing: ['10.0.0.100', 'kube-apiserver'] });
    const cnName = makeCertificate({ sans: [], cn: 'kubernetes' });
    expect(certificateCoverage(cnName, { ips: [], names: ['kubernetes'] })).toStrictEqual({ missing: ['kubernetes'] });
  });

  it('takes a PeerCertificate-like { raw } and an X509Certificate alike', () => {
    const x = new X509Certificate(full);
    expect(certificateCoverage({ raw: x.raw }, { ips: ['10.0.0.1'], names: [] })).toStrictEqual({ missing: ['10.0.0.1'] });
    expect(certificateCoverage(x, { ips: ['10.0.0.1'], names: [] })).toStrictEqual({ missing: ['10.0.0.1'] });
  });

  it('throws TypeError for a needed IP that is no address', () => {
    expect(() => certificateCoverage(full, { ips: ['kubernetes'], names: [] })).toThrow(TypeError);
  });
});

describe('certificateNeeds', () => {
  const base = 'vrrp:\n  vrid: 51\nvips: [10.0.0.100]\napiserver:\n  backends: ["10.0.0.11:6443"]\n  health:\n    caFile: /etc/kubernetes/pki/ca.crt\n';
  it('the VIPs, the local endpoint addresses, and the backend itself without serverName', () => {
    const c = parseConfig(`${base}localEndpoint:\n  address: ["127.0.0.1:7443"]\n`);
    expect(certificateNeeds(c, c.apiserver.backends[0]!)).toStrictEqual([
      { kind: 'ip', value: '10.0.0.100', role: 'the VIP' },
      { kind: 'ip', value: '127.0.0.1', role: 'a local endpoint address, localEndpoint 127.0.0.1:7443' },
      { kind: 'ip', value: '10.0.0.11', role: "the backend's own address, which the health checks verify without apiserver.health.serverName" },
    ]);
  });

  it('serverName instead of the backend address; no local endpoint with dataplane.local off; each name once', () => {
    const c = parseConfig(`${base}    serverName: Kubernetes\nlocalEndpoint:\n  address: ["127.0.0.1:7443"]\ndataplane:\n  local: "off"\n`);
    expect(certificateNeeds(c, c.apiserver.backends[0]!)).toStrictEqual([
      { kind: 'ip', value: '10.0.0.100', role: 'the VIP' },
      { kind: 'dns', value: 'kubernetes', role: 'apiserver.health.serverName, the name the health checks verify' },
    ]);
    const same = parseConfig(`${base}    serverName: 10.0.0.100\n`);
    expect(certificateNeeds(same, same.apiserver.backends[0]!).map((n) => n.value)).toStrictEqual(['10.0.0.100']);
  });
});

describe('backendsToCheck', () => {
  it("the seed, then the last-known file's others; the seed alone without the file", () => {
    const dir = mkdtempSync(join(tmpdir(), 'ballast-lastknown-'));
    try {
      const file = join(dir, 'backends.json');
      const c = parseConfig(
        `vrrp:\n  vrid: 51\nvips: [10.0.0.100]\napiserver:\n  backends: ["10.0.0.11:6443"]\n  health:\n    insecureSkipVerify: true\ndiscovery:\n  kubeconfig: ${join(dir, 'admin.conf')}\n  lastKnownFile: ${file}\n`,
      );
      expect(backendsToCheck(c).map((b) => `${b.host}:${b.port}`)).toStrictEqual(['10.0.0.11:6443']);
      writeFileSync(file, JSON.stringify({ version: 1, backends: ['10.0.0.12:6443', '10.0.0.11:6443'] }));
      expect(backendsToCheck(c).map((b) => `${b.host}:${b.port}`)).toStrictEqual(['10.0.0.11:6443', '10.0.0.12:6443']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('examineCertificate', () => {
  const needs = [
    { kind: 'ip' as const, value: '10.0.0.100', role: 'the VIP' },
    { kind: 'ip' as const, value: '10.0.0.12', role: 'the backend' },
  ];
  it('names each missing SAN with its role, and judges expiry against the clock given', () => {
    const x = new X509Certificate(full);
    const notAfter = x.validToDate.getTime();
    const f = examineCertificate(x, needs, notAfter - 40 * 86_400_000);
    expect(f).toMatchObject({
      missing: ['10.0.0.12'],
      lacks: ['certificate lacks IP SAN 10.0.0.12 (the backend)'],
      expiry: 'ok',
      daysLeft: 40,
      subject: 'CN=kube-apiserver',
      notAfter: x.validToDate.toISOString(),
      fingerprint256: x.fingerprint256,
    });
    expect(examineCertificate(x, needs, notAfter - 10 * 86_400_000 - 1000)).toMatchObject({ expiry: 'soon', daysLeft: 10 });
    expect(examineCertificate(x, needs, notAfter - 30 * 86_400_000)).toMatchObject({ expiry: 'soon', daysLeft: 30 });
    expect(examineCertificate(x, needs, notAfter + 1)).toMatchObject({ expiry: 'expired' });
  });
});

describe('CertificateTracker: one log line per certificate change, never per check', () => {
  const vipOnly = (): NeededName[] => [{ kind: 'ip', value: '10.0.0.100', role: 'the VIP' }];
  const noVip = makeCertificate({ sans: ['IP:10.0.0.12'] });
  const peer = (pem: Buffer): { fingerprint256: string; raw: Buffer } => {
    const x = new X509Certificate(pem);
    return { fingerprint256: x.fingerprint256, raw: x.raw };
  };
  const b11 = parseHostPort('10.0.0.11:6443');
  const b12 = parseHostPort('10.0.0.12:6443');

  it('warns once for a certificate lacking the VIP, infos once for a good one, again only on rotation', () => {
    const lines: [string, string, Record<string, unknown>][] = [];
    const log = {
      info: (o: object, m: string) => lines.push(['info', m, o as Record<string, unknown>]),
      warn: (o: object, m: string) => lines.push(['warn', m, o as Record<string, unknown>]),
    };
    const t = new CertificateTracker(vipOnly, log, () => Date.parse('2026-12-01T12:00:00Z'));
    for (let i = 0; i < 5; i++) {
      t.observe(b11, peer(full));
      t.observe(b12, peer(noVip));
    }
    expect(lines.map(([l, m, o]) => [l, m, o.backend, o.missing])).toStrictEqual([
      ['info', CERT_OK_MSG, '10.0.0.11:6443', []],
      ['warn', CERT_MISSING_MSG, '10.0.0.12:6443', ['10.0.0.100']],
    ]);
    expect(t.get('10.0.0.12:6443')).toMatchObject({
      missing: ['10.0.0.100'],
      lacks: ['certificate lacks IP SAN 10.0.0.100 (the VIP)'],
      subject: 'CN=kube-apiserver',
      since: '2026-12-01T12:00:00.000Z',
    });
    expect(t.get('10.0.0.13:6443')).toBeUndefined();
    // rotation to a good certificate: one info line, nothing missing
    t.observe(b12, peer(full));
    t.observe(b12, peer(full));
    expect(lines.slice(2).map(([l, , o]) => [l, o.backend, o.why, o.missing])).toStrictEqual([['info', '10.0.0.12:6443', 'changed', []]]);
    expect(t.get('10.0.0.12:6443')?.missing).toStrictEqual([]);
    // a reload that needs another name: one line per certificate whose verdict changed
    t.setNeeds(() => [{ kind: 'ip', value: '10.0.0.12', role: 'the backend' }]);
    expect(lines.slice(3).map(([l, , o]) => [l, o.backend, o.why, o.missing])).toStrictEqual([
      ['warn', '10.0.0.11:6443', 'needs changed', ['10.0.0.12']],
      ['warn', '10.0.0.12:6443', 'needs changed', ['10.0.0.12']],
    ]);
    t.retain(new Set(['10.0.0.11:6443']));
    expect([t.size, t.get('10.0.0.12:6443')]).toStrictEqual([1, undefined]);
  });
});

describe('the certificate in ballast status and the metrics', () => {
  const cert = (missing: string[], notAfter: string) => ({
    subject: 'CN=kube-apiserver',
    issuer: 'CN=ca',
    notAfter,
    fingerprint256: 'AA:BB',
    missing,
    lacks: missing.map((m) => `certificate lacks IP SAN ${m} (the VIP)`),
    since: '2026-12-01T00:00:00.000Z',
  });
  const doc: EndpointOnlyStatusDocument = {
    state: 'none',
    backends: [
      {
        address: '10.0.0.11:6443',
        state: 'up',
        healthy: true,
        lastCheck: null,
        lastLatencyMs: null,
        reason: null,
        consecutive: 1,
        certificate: cert([], '2027-12-01T00:00:00.000Z'),
      },
      {
        address: '10.0.0.12:6443',
        state: 'up',
        healthy: true,
        lastCheck: null,
        lastLatencyMs: null,
        reason: null,
        consecutive: 1,
        certificate: cert(['10.0.0.100'], '2027-12-01T00:00:00.000Z'),
      },
      {
        address: '10.0.0.13:6443',
        state: 'up',
        healthy: true,
        lastCheck: null,
        lastLatencyMs: null,
        reason: null,
        consecutive: 1,
        certificate: cert([], '2026-12-11T00:00:00.000Z'),
      },
      { address: '10.0.0.14:6443', state: 'down', healthy: false, lastCheck: null, lastLatencyMs: null, reason: 'ECONNREFUSED', consecutive: 1 },
    ],
    dataplane: { mode: 'off', reason: 'x' },
    local: { mode: 'off', reason: 'x' },
  };
  it('one line per backend with a problem: the missing SAN, an expiry within 30 days', () => {
    const rows = formatStatus(doc, Date.parse('2026-12-01T00:00:00Z'))
      .split('\n')
      .filter((l) => l.startsWith('certificate:'));
    expect(rows).toStrictEqual([
      'certificate: 10.0.0.12:6443: certificate lacks IP SAN 10.0.0.100 (the VIP); clients using those names fail with ERR_TLS_CERT_ALTNAME_INVALID',
      'certificate: 10.0.0.13:6443: certificate expires on 2026-12-11T00:00:00.000Z (in 10 days)',
    ]);
  });
  it('ballast_backend_certificate_san_missing and _expiry_timestamp_seconds for backends with a certificate', async () => {
    const m = createMetrics();
    m.update(doc);
    const text = (await m.registry.metrics()).split('\n').filter((l) => l.startsWith('ballast_backend_certificate_'));
    expect(text).toStrictEqual([
      'ballast_backend_certificate_san_missing{backend="10.0.0.11:6443"} 0',
      'ballast_backend_certificate_san_missing{backend="10.0.0.12:6443"} 1',
      'ballast_backend_certificate_san_missing{backend="10.0.0.13:6443"} 0',
      `ballast_backend_certificate_expiry_timestamp_seconds{backend="10.0.0.11:6443"} ${Date.parse('2027-12-01T00:00:00Z') / 1000}`,
      `ballast_backend_certificate_expiry_timestamp_seconds{backend="10.0.0.12:6443"} ${Date.parse('2027-12-01T00:00:00Z') / 1000}`,
      `ballast_backend_certificate_expiry_timestamp_seconds{backend="10.0.0.13:6443"} ${Date.parse('2026-12-11T00:00:00Z') / 1000}`,
    ]);
  });
});

describe('over loopback: the probe keeps the peer certificate, checkBackendCertificates judges it', () => {
  let pki: TestPki;
  let server: https.Server;
  let port = 0;
  beforeAll(async () => {
    // the certificate covers 127.0.0.1 only: not the second local endpoint address the config names
    pki = makeTestPki(['127.0.0.1']);
    server = https.createServer({ cert: pki.cert, key: pki.key }, (_req, res) => res.end('ok'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise<void>((r) => server.close(() => r()));
    pki.remove();
  });

  it('a passing check carries the certificate it was served', async () => {
    const r = await createProbe({ path: '/readyz', timeoutMs: 2000, caFile: pki.caFile, insecureSkipVerify: false })({ host: '127.0.0.1', port });
    const x = new X509Certificate(pki.cert);
    expect([r.ok, r.peerCertificate?.fingerprint256, r.peerCertificate?.raw.equals(x.raw)]).toStrictEqual([true, x.fingerprint256, true]);
    const refused = await createProbe({ path: '/readyz', timeoutMs: 2000, caFile: pki.caFile, insecureSkipVerify: false })({ host: '127.0.0.1', port: 1 });
    expect([refused.ok, refused.peerCertificate]).toStrictEqual([false, undefined]);
  });

  it('no election: the local endpoint address and the backend itself; a missing CA file is a warning for all', async () => {
    // a loopback backend is refused by the schema: parsed with a node address, then pointed here
    const config = (ca: string): Config => {
      const c = parseConfig(
        `apiserver:\n  backends: ["10.0.0.11:6443"]\n  health:\n    caFile: ${ca}\nlocalEndpoint:\n  address: ["127.0.0.1:7443", "127.0.0.2:7443"]\ndataplane:\n  local: proxy\n`,
      );
      return { ...c, apiserver: { ...c.apiserver, backends: [{ host: '127.0.0.1', port, family: 4 }] } };
    };
    // judged 60 days ago: the one-day certificate is far from expiry then
    const rs = await checkBackendCertificates(config(pki.caFile), { now: () => Date.now() - 60 * 86_400_000 });
    expect(rs.map((r) => [r.id, r.title, r.status, r.detail])).toStrictEqual([
      [
        'backend-certificate',
        `serving certificate of backend 127.0.0.1:${port}`,
        'fail',
        `backend 127.0.0.1:${port}: certificate lacks IP SAN 127.0.0.2 (a local endpoint address, localEndpoint 127.0.0.2:7443).`,
      ],
    ]);
    const missing = join(pki.dir, 'not-yet.crt');
    const waiting = await checkBackendCertificates(config(missing));
    expect(waiting.map((r) => [r.status, r.detail])).toStrictEqual([
      ['warn', `cannot check the backends' certificates: waiting for apiserver.health.caFile ${missing} (it does not exist yet)`],
    ]);
    const empty = join(pki.dir, 'empty.crt');
    writeFileSync(empty, '');
    expect((await checkBackendCertificates(config(empty)))[0]!.status).toBe('fail');
  });
});
