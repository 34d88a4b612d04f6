/**
 * The lab's PKI: a CA per lab (and a second one nothing trusts), and the stand-in apiservers'
 * serving certificates it signs, made with openssl.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { run } from './processes.js';

/** A certificate and its key, PEM file paths. */
export interface CertPair {
  certFile: string;
  keyFile: string;
}

/** Options of {@link issueServerCert}. */
export interface IssueOptions {
  sans?: readonly string[];
  omit?: readonly string[];
  days?: number;
  otherCa?: boolean;
}

/**
 * Writes an openssl req(1) config: the subject `dn` (`KEY = value` lines, no prompt) and one
 * extension section `extName` with `ext` (x509v3_config(5)).
 */
async function writeReqConfig(path: string, dn: readonly string[], extName: string, ext: readonly string[]): Promise<void> {
  await writeFile(path, ['[req]', 'distinguished_name = dn', 'prompt = no', '[dn]', ...dn, `[${extName}]`, ...ext, ''].join('\n'));
}

/**
 * Makes a CA (EC P-256, valid 1 day) named `cn`: its key and self-signed certificate at
 * `ca.keyFile` and `ca.certFile`, its openssl config next to them in `dir`/pki (mode 0700).
 */
export async function makeCa(dir: string, ca: CertPair, cn: string): Promise<void> {
  const pki = join(dir, 'pki');
  await run('mkdir', ['-p', '-m', '0700', pki]);
  const cnf = join(pki, `${basename(ca.certFile, '.crt')}.cnf`);
  await writeReqConfig(cnf, [`CN = ${cn}`], 'ca_ext', [
    'basicConstraints = critical,CA:TRUE,pathlen:0',
    'keyUsage = critical,keyCertSign,cRLSign',
    'subjectKeyIdentifier = hash',
  ]);
  await run('openssl', [
    'req',
    '-x509',
    '-config',
    cnf,
    '-extensions',
    'ca_ext',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    ca.keyFile,
    '-out',
    ca.certFile,
    '-days',
    '1',
  ]);
}

/**
 * (Re)issues `node`'s serving certificate and key (new key, new serial) where
 * Lab.serverCert keeps them (`lab.dir`/pki/<node>.crt, .key), replacing what is there: a running
 * stand-in serves it after Lab.reloadApiserverCert, a started one at once.
 * @param defaultSans the SANs when `opts.sans` is absent (Lab.defaultSans)
 * @param opts.sans the SubjectAltNames (`DNS:x`, `IP:a`; default `defaultSans`); `[]` = none (a CN-only certificate)
 * @param opts.omit entries of the default SANs to leave out (e.g. `IP:${lab.vip4}`)
 * @param opts.days validity from now in days (default 1)
 * @param opts.otherCa sign with a second CA (made on first use) that nothing trusts
 */
export async function issueServerCert(
  lab: { dir: string; ca: CertPair },
  node: { name: string },
  defaultSans: readonly string[],
  opts: IssueOptions = {},
): Promise<CertPair> {
  const pki = join(lab.dir, 'pki');
  const certFile = join(pki, `${node.name}.crt`);
  const keyFile = join(pki, `${node.name}.key`);
  const cnf = join(pki, `${node.name}.cnf`);
  const csr = join(pki, `${node.name}.csr`);
  const omit = new Set(opts.omit ?? []);
  const sans = (opts.sans ?? defaultSans).filter((e) => !omit.has(e));
  let ca = lab.ca;
  if (opts.otherCa) {
    ca = { certFile: join(pki, 'other-ca.crt'), keyFile: join(pki, 'other-ca.key') };
    if (!existsSync(ca.certFile)) await makeCa(lab.dir, ca, 'ballast lab other CA');
  }
  await writeReqConfig(cnf, ['CN = kube-apiserver', `O = ballast lab ${node.name}`], 'server_ext', [
    'basicConstraints = critical,CA:FALSE',
    'keyUsage = critical,digitalSignature',
    'extendedKeyUsage = serverAuth',
    'subjectKeyIdentifier = hash',
    'authorityKeyIdentifier = keyid',
    ...(sans.length === 0 ? [] : [`subjectAltName = ${sans.join(',')}`]),
  ]);
  // written next to the old pair and renamed over it: a stand-in re-reading them never sees half a pair
  await run('openssl', [
    'req',
    '-new',
    '-config',
    cnf,
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    `${keyFile}.new`,
    '-out',
    csr,
  ]);
  await run('openssl', [
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.certFile,
    '-CAkey',
    ca.keyFile,
    '-set_serial',
    `0x01${randomBytes(15).toString('hex')}`,
    '-days',
    String(opts.days ?? 1),
    '-extfile',
    cnf,
    '-extensions',
    'server_ext',
    '-out',
    `${certFile}.new`,
  ]);
  await rename(`${keyFile}.new`, keyFile);
  await rename(`${certFile}.new`, certFile);
  return { certFile, keyFile };
}
