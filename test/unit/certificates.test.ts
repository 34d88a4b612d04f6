/**
 * certificateCoverage / certificateNeeds / examineCertificate: real certificates (openssl),
 * matched by Node's X509Certificate. IPv4 and IPv6 in any spelling, RFC 6125 wildcards, and a
 * certificate whose only name is its CN (ignored: no SAN, every name missing).
 */
import { X509Certificate } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { certificateCoverage, certificateNeeds, examineCertificate } from '../../src/check/certificates.js';
import { parseConfig } from '../../src/config/index.js';
import { makeCertificate } from '../support/tls.js';

const full = makeCertificate({ sans: ['DNS:kubernetes', 'DNS:*.api.example.com', 'IP:10.0.0.100', 'IP:127.0.0.1', 'IP:fd00:0:0:0:0:0:0:11', 'IP:::1'] });
const cnOnly = makeCertificate({ sans: [], cn: '10.0.0.100' });

describe('certificateCoverage', () => {
  it('IPv4: covered entries are not missing, others are, in order', () => {
    expect(certificateCoverage(full, { ips: ['10.0.0.100', '127.0.0.1'], names: [] })).toStrictEqual({ missing: [] });
    expect(certificateCoverage(full, { ips: ['10.0.0.101', '10.0.0.100', '127.0.0.2'], names: [] })).toStrictEqual({ missing: ['10.0.0.101', '127.0.0.2'] });
  });

  it('IPv6: compared as addresses, missing ones given in RFC 5952 form', () => {
    expect(certificateCoverage(full, { ips: ['fd00::11', 'FD00:0::0:11', 'fd00:0000:0000:0000:0000:0000:0000:0011', '0:0:0:0:0:0:0:1'], names: [] })).toStrictEqual({ missing: [] });
    expect(certificateCoverage(full, { ips: ['FD00:0:0:0:0:0:0:12', '::ffff:10.0.0.100'], names: [] })).toStrictEqual({ missing: ['fd00::12', '::ffff:a00:64'] });
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

describe('examineCertificate', () => {
  const needs = [
    { kind: 'ip' as const, value: '10.0.0.100', role: 'the VIP' },
    { kind: 'ip' as const, value: '10.0.0.12', role: 'the backend' },
  ];
  it('names each missing SAN with its role, and judges expiry against the clock given', () => {
    const x = new X509Certificate(full);
    const notAfter = x.validToDate.getTime();
    const f = examineCertificate(x, needs, notAfter - 40 * 86_400_000);
    expect(f).toMatchObject({ missing: ['10.0.0.12'], lacks: ['certificate lacks IP SAN 10.0.0.12 (the backend)'], expiry: 'ok', daysLeft: 40, subject: 'CN=kube-apiserver', notAfter: x.validToDate.toISOString(), fingerprint256: x.fingerprint256 });
    expect(examineCertificate(x, needs, notAfter - 10 * 86_400_000 - 1000)).toMatchObject({ expiry: 'soon', daysLeft: 10 });
    expect(examineCertificate(x, needs, notAfter - 30 * 86_400_000)).toMatchObject({ expiry: 'soon', daysLeft: 30 });
    expect(examineCertificate(x, needs, notAfter + 1)).toMatchObject({ expiry: 'expired' });
  });
});
