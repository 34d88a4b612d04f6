/**
 * `ballast check`: each backend's serving certificate, as the clients of the endpoint see it.
 *
 *   for each backend (apiserver.backends, then the last-known file's others)
 *     TLS handshake with the health checks' settings (caFile, client cert / key, serverName as SNI)
 *     ├─ no handshake (refused, timeout)          → warn: cannot check
 *     ├─ chain does not verify against caFile     → fail, with OpenSSL's verify result
 *     ├─ a needed name is not a SubjectAltName    → fail, naming the backend and the entry
 *     └─ expired → fail; expires within 30 days   → warn
 *
 * The names a certificate must carry ({@link certificateNeeds}): every VIP (clients of the
 * endpoint connect to it), every node-local endpoint address (127.0.0.1: the eBPF rewrite and
 * the proxy hand the client's TLS session to a backend unchanged, so the client verifies the
 * address it dialled), and the name the health checks verify: `apiserver.health.serverName`
 * when set, else the backend's own address (what ballast verifies without a serverName).
 * `kubernetes`, `kubernetes.default.svc` and the ClusterIP are not ballast's to require: kubeadm
 * always adds them, and in-cluster clients do not go through the VIP.
 *
 * SANs are matched by Node's X509Certificate (OpenSSL's X509_check_ip / X509_check_host): IPs
 * as addresses (any spelling of an IPv6 address), DNS names with RFC 6125 wildcards (`*` as the
 * whole leftmost label, matching one label), and the subject's CN never (RFC 6125 §6.4.4: a
 * certificate with SANs is matched on them; Go, and so every Kubernetes client, ignores the CN).
 */
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import tls from 'node:tls';
import type { Config } from '../config/index.js';
import { seedAndLastKnown } from '../discovery/lastknown.js';
import { createCredentials, describeFailure, type ProbeCredentials } from '../health/probe.js';
import type { Failure } from '../health/verdict.js';
import { canonicalAddress } from '../net/address.js';
import { formatHostPort, type HostPort } from '../net/hostport.js';
import type { CheckResult } from './report.js';

/** A certificate expiring within this many days is a warning. */
export const EXPIRY_WARNING_DAYS = 30;
const DAY_MS = 86_400_000;

/** The `id` of every result of {@link checkBackendCertificates}. */
export const CHECK_ID = 'backend-certificate';

/** A certificate in any of the forms Node gives one: parsed, a PeerCertificate (its `raw` DER), or DER / PEM bytes. */
export type CertificateLike = X509Certificate | { readonly raw: Buffer } | Buffer;

/** What a certificate must cover: IP addresses (any spelling) and DNS names. */
export interface CertificateNeed {
  ips: readonly string[];
  names: readonly string[];
}

/** One name a certificate must carry, and why (for the messages). */
export interface NeededName {
  kind: 'ip' | 'dns';
  /** The address (canonical text) or the DNS name. */
  value: string;
  /** Why it is needed, as the messages say it: `the VIP`, `a local endpoint address`, … */
  role: string;
}

function x509(cert: CertificateLike): X509Certificate {
  if (cert instanceof X509Certificate) return cert;
  return new X509Certificate(Buffer.isBuffer(cert) ? cert : cert.raw);
}

/**
 * Which of `need` the certificate's SubjectAltNames do not cover. Pure.
 * IPs are compared as addresses (only iPAddress SANs count); names as RFC 6125 DNS-ID matches
 * (dNSName SANs only, `*` as a whole leftmost label matching exactly one label, no partial
 * wildcards); the subject's CN is never considered.
 * @param cert the certificate (X509Certificate, a PeerCertificate, or DER / PEM bytes).
 * @returns `missing`: the needed entries not covered, IPs in canonical form (RFC 5952), in the
 *   order of `need` (IPs first).
 * @throws TypeError when an entry of `need.ips` is not an IP address; Node's error when `cert` cannot be parsed.
 */
export function certificateCoverage(cert: CertificateLike, need: CertificateNeed): { missing: string[] } {
  const x = x509(cert);
  const missing: string[] = [];
  for (const ip of need.ips) {
    const c = canonicalAddress(ip);
    if (x.checkIP(c) === undefined) missing.push(c);
  }
  for (const name of need.names) {
    const found = x.checkHost(name, { subject: 'never', wildcards: true, partialWildcards: false, multiLabelWildcards: false, singleLabelSubdomains: false });
    if (found === undefined) missing.push(name);
  }
  return { missing };
}

/**
 * The names `backend`'s certificate must carry under `config` (see the file comment), each once
 * (the first role wins), VIPs first.
 */
export function certificateNeeds(config: Config, backend: Pick<HostPort, 'host'>): NeededName[] {
  const out: NeededName[] = [];
  const seen = new Set<string>();
  const add = (value: string, role: string): void => {
    const kind = isIP(value) === 0 ? 'dns' : 'ip';
    const v = kind === 'ip' ? canonicalAddress(value) : value.toLowerCase();
    if (seen.has(`${kind}:${v}`)) return;
    seen.add(`${kind}:${v}`);
    out.push({ kind, value: v, role });
  };
  for (const vip of config.vips) add(vip, 'the VIP');
  if (config.localEndpoint !== null && config.dataplane.local !== 'off') {
    for (const a of config.localEndpoint.addresses) add(a.host, `a local endpoint address, localEndpoint ${formatHostPort(a)}`);
  }
  const name = config.apiserver.health.serverName;
  if (name !== undefined && name !== '') add(name, 'apiserver.health.serverName, the name the health checks verify');
  else add(backend.host, 'the backend\'s own address, which the health checks verify without apiserver.health.serverName');
  return out;
}

/** What one certificate says against what it must cover, at one moment. */
export interface CertificateFindings {
  /** RFC 2253-ish one-line subject and issuer (`CN=kube-apiserver, O=…`). */
  subject: string;
  issuer: string;
  /** notAfter, ISO 8601. */
  notAfter: string;
  /** OpenSSL's colon-separated SHA-256 of the DER. */
  fingerprint256: string;
  /** The needed names it lacks (values: canonical IPs, DNS names). */
  missing: string[];
  /** One sentence per missing name: `certificate lacks IP SAN 10.0.0.100 (the VIP)`. */
  lacks: string[];
  /** `expired` (notAfter passed), `soon` (within {@link EXPIRY_WARNING_DAYS}), `ok`. */
  expiry: 'ok' | 'soon' | 'expired';
  /** Whole days left until notAfter (negative once expired). */
  daysLeft: number;
}

/**
 * Checks one certificate against the names it must carry and the clock. Pure (given `nowMs`).
 * @param nowMs the time to judge expiry at, ms since the epoch.
 */
export function examineCertificate(cert: CertificateLike, needs: readonly NeededName[], nowMs: number): CertificateFindings {
  const x = x509(cert);
  const { missing } = certificateCoverage(x, { ips: needs.filter((n) => n.kind === 'ip').map((n) => n.value), names: needs.filter((n) => n.kind === 'dns').map((n) => n.value) });
  const lost = new Set(missing);
  const lacks = needs.filter((n) => lost.has(n.value)).map((n) => `certificate lacks ${n.kind === 'ip' ? 'IP' : 'DNS'} SAN ${n.value} (${n.role})`);
  const notAfter = x.validToDate.getTime();
  const left = notAfter - nowMs;
  return {
    subject: oneLine(x.subject),
    issuer: oneLine(x.issuer),
    notAfter: new Date(notAfter).toISOString(),
    fingerprint256: x.fingerprint256,
    missing,
    lacks,
    expiry: left <= 0 ? 'expired' : left <= EXPIRY_WARNING_DAYS * DAY_MS ? 'soon' : 'ok',
    daysLeft: Math.floor(left / DAY_MS),
  };
}

/** X509Certificate's subject (one `K=V` per line) on one line. */
function oneLine(dn: string): string {
  return dn.split('\n').filter((l) => l !== '').join(', ');
}

/** What the TLS handshake with one backend gave. */
type Handshake =
  | { kind: 'ok'; cert: X509Certificate; authorized: boolean; verifyError: string | null }
  | { kind: 'failed'; failure: Failure };

/**
 * One TLS handshake with `backend` (no HTTP request): the serving certificate and whether its
 * chain verified against the context's CAs. The name is not verified here (the SANs are
 * examined separately, every needed one); SNI is `serverName` when that is a DNS name.
 */
function handshake(backend: HostPort, creds: ProbeCredentials, serverName: string | undefined, timeoutMs: number): Promise<Handshake> {
  return new Promise((resolve) => {
    let handshaking = false;
    const sni = serverName !== undefined && serverName !== '' && isIP(serverName) === 0 ? serverName : undefined;
    const socket = tls.connect({
      host: backend.host,
      port: backend.port,
      secureContext: creds.secureContext,
      // verified below from socket.authorized, so that a bad chain still shows its certificate
      rejectUnauthorized: false,
      checkServerIdentity: () => undefined,
      ...(sni === undefined ? {} : { servername: sni }),
    });
    const done = (h: Handshake): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(h);
    };
    const timer = setTimeout(() => done({ kind: 'failed', failure: { cause: { kind: 'timeout' }, message: handshaking ? 'timeout after connect' : 'timeout' } }), timeoutMs);
    socket.once('connect', () => (handshaking = true));
    socket.once('secureConnect', () => {
      const peer = socket.getPeerCertificate();
      if (peer.raw === undefined) return done({ kind: 'failed', failure: { cause: { kind: 'tls', code: null }, message: 'tls: the server sent no certificate' } });
      const err = socket.authorizationError as Error | string | null | undefined;
      done({ kind: 'ok', cert: new X509Certificate(peer.raw), authorized: socket.authorized, verifyError: err === null || err === undefined ? null : typeof err === 'string' ? err : ((err as NodeJS.ErrnoException).code ?? err.message) });
    });
    socket.once('error', (err) => done({ kind: 'failed', failure: describeFailure(err, handshaking) }));
  });
}

/**
 * The backends `ballast check` looks at: `apiserver.backends`, then those of the last-known
 * file (discovery's, when configured) not among them.
 */
export function backendsToCheck(config: Config): HostPort[] {
  const seed = config.apiserver.backends;
  if (config.discovery === null) return [...seed];
  return seedAndLastKnown(seed, config.discovery.lastKnownFile) ?? [...seed];
}

const FIX_SANS =
  'add the missing entries to the serving certificate of that apiserver and reissue it: with kubeadm, list them in ClusterConfiguration apiServer.certSANs, move /etc/kubernetes/pki/apiserver.crt and apiserver.key away, run `kubeadm init phase certs apiserver --config FILE` on that node and restart kube-apiserver (docs/operations.md)';
const FIX_EXPIRY = 'renew it before it expires: `kubeadm certs renew apiserver` on that node, then restart kube-apiserver (docs/operations.md)';

/**
 * Checks the serving certificate of every backend (see the file comment): one
 * {@link CheckResult} per backend, id `backend-certificate`, in the order of
 * {@link backendsToCheck}. With no backend: one `ok` result saying so. When the CA or client
 * files cannot be used: one result for all (`warn` while a file does not exist yet, else `fail`).
 *
 * @param opts.timeoutMs deadline of each handshake in ms (default: apiserver.health.timeout, at least 2000).
 * @param opts.now the clock for expiry, ms since the epoch (default Date.now).
 * @returns the results; never rejects for a backend's failure (an unreachable backend is a `warn`).
 */
export async function checkBackendCertificates(config: Config, opts: { timeoutMs?: number; now?: () => number } = {}): Promise<CheckResult[]> {
  const backends = backendsToCheck(config);
  const h = config.apiserver.health;
  if (backends.length === 0) {
    return [{ id: CHECK_ID, title: 'backend serving certificates', status: 'ok', detail: 'no backends (apiserver.backends is empty, no last-known file): nothing to check' }];
  }
  const creds = await createCredentials(h)();
  if ('cause' in creds) {
    const waiting = creds.cause.kind === 'waitingForFile';
    return [
      {
        id: CHECK_ID,
        title: 'backend serving certificates',
        status: waiting ? 'warn' : 'fail',
        detail: `cannot check the backends' certificates: ${creds.message}`,
        fix: waiting ? 'run the check again once the file exists (after kubeadm init)' : 'point apiserver.health.caFile (and clientCertFile / clientKeyFile) at usable PEM files',
      },
    ];
  }
  const timeoutMs = opts.timeoutMs ?? Math.max(2000, h.timeoutMs);
  const now = opts.now ?? Date.now;
  const ca = h.caFile === undefined ? 'the system root CAs' : `apiserver.health.caFile ${h.caFile}`;
  return Promise.all(
    backends.map(async (b): Promise<CheckResult> => {
      const where = formatHostPort(b);
      const title = `serving certificate of backend ${where}`;
      const shake = await handshake(b, creds, h.serverName, timeoutMs);
      if (shake.kind === 'failed') {
        return { id: CHECK_ID, title, status: 'warn', detail: `backend ${where}: cannot check its certificate, no TLS handshake: ${shake.failure.message}`, fix: 'check it again once the backend answers' };
      }
      const needs = certificateNeeds(config, b);
      const f = examineCertificate(shake.cert, needs, now());
      const fails: string[] = [];
      const warns: string[] = [];
      const fixes: string[] = [];
      // an expired leaf is also OpenSSL's CERT_HAS_EXPIRED: said once, as the expiry
      if (!shake.authorized && !(shake.verifyError === 'CERT_HAS_EXPIRED' && f.expiry === 'expired')) {
        fails.push(`backend ${where}: certificate chain does not verify against ${ca}: ${shake.verifyError ?? 'not authorized'} (issuer ${f.issuer})`);
        fixes.push(`make ${ca} the CA that issued the apiservers' serving certificates (kubeadm: /etc/kubernetes/pki/ca.crt), or reissue this one from it`);
      }
      for (const l of f.lacks) fails.push(`backend ${where}: ${l}`);
      if (f.lacks.length > 0) fixes.push(FIX_SANS);
      if (f.expiry === 'expired') {
        fails.push(`backend ${where}: certificate expired on ${f.notAfter}`);
        fixes.push(FIX_EXPIRY);
      } else if (f.expiry === 'soon') {
        warns.push(`backend ${where}: certificate expires on ${f.notAfter}, in ${f.daysLeft} days (less than ${EXPIRY_WARNING_DAYS})`);
        fixes.push(FIX_EXPIRY);
      }
      const problems = [...fails, ...warns];
      if (problems.length === 0) {
        const covered = needs.map((n) => `${n.value} (${n.role.split(',')[0]})`).join(', ');
        return { id: CHECK_ID, title, status: 'ok', detail: `backend ${where}: chain verifies against ${ca}; SANs cover ${covered}; expires on ${f.notAfter} (in ${f.daysLeft} days); subject ${f.subject}` };
      }
      return { id: CHECK_ID, title, status: fails.length > 0 ? 'fail' : 'warn', detail: `${problems.join('; ')}.`, fix: fixes.join('; ') };
    }),
  );
}
