/**
 * A throw-away CA and a server certificate (openssl), for tests that need real TLS on loopback.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** PEM files of a test CA and one server certificate signed by it. */
export interface TestPki {
  dir: string;
  caFile: string;
  ca: Buffer;
  cert: Buffer;
  key: Buffer;
  remove(): void;
}

/** Makes a CA and a server certificate whose SANs are `ips` (IP entries). @throws when openssl fails. */
export function makeTestPki(ips: readonly string[]): TestPki {
  const dir = mkdtempSync(join(tmpdir(), 'ballast-pki-'));
  const f = (n: string): string => join(dir, n);
  const run = (args: string[]): void => void execFileSync('openssl', args, { stdio: 'pipe' });
  run([
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    f('ca.key'),
    '-out',
    f('ca.crt'),
    '-days',
    '1',
    '-subj',
    '/CN=ballast-test-ca',
  ]);
  run([
    'req',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    f('server.key'),
    '-out',
    f('server.csr'),
    '-subj',
    '/CN=kube-apiserver',
  ]);
  writeFileSync(f('ext.cnf'), `subjectAltName=${ips.map((ip) => `IP:${ip}`).join(',')}\nextendedKeyUsage=serverAuth\n`);
  run([
    'x509',
    '-req',
    '-in',
    f('server.csr'),
    '-CA',
    f('ca.crt'),
    '-CAkey',
    f('ca.key'),
    '-CAcreateserial',
    '-out',
    f('server.crt'),
    '-days',
    '1',
    '-extfile',
    f('ext.cnf'),
  ]);
  return {
    dir,
    caFile: f('ca.crt'),
    ca: readFileSync(f('ca.crt')),
    cert: readFileSync(f('server.crt')),
    key: readFileSync(f('server.key')),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** A kubeconfig (YAML text) for `server` with the CA inline and a bearer token, like kubeadm's admin.conf. */
export { kubeconfigYaml as kubeconfigText } from '../../lab/lab.js';

/**
 * A self-signed certificate (PEM) with exactly these SubjectAltNames (`DNS:x`, `IP:a`; none:
 * a CN-only certificate), subject CN `cn`, valid `days` from now. For tests of SAN matching.
 * @throws when openssl fails.
 */
export function makeCertificate(opts: { sans: readonly string[]; cn?: string; days?: number }): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'ballast-cert-'));
  try {
    const f = (n: string): string => join(dir, n);
    writeFileSync(
      f('ext.cnf'),
      `[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = ${opts.cn ?? 'kube-apiserver'}\n[ext]\nbasicConstraints = critical,CA:FALSE\n${opts.sans.length === 0 ? '' : `subjectAltName = ${opts.sans.join(',')}\n`}`,
    );
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-config',
        f('ext.cnf'),
        '-extensions',
        'ext',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        f('k.pem'),
        '-out',
        f('c.pem'),
        '-days',
        String(opts.days ?? 1),
      ],
      { stdio: 'pipe' },
    );
    return readFileSync(f('c.pem'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
