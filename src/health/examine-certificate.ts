/**
 * What a backend's serving certificate must carry and what it lacks, judged at one moment: pure,
 * used by the health checks (certificates.ts: what the running agent reports) and by
 * `ballast check` (check/certificates.ts).
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
import type { Config } from '../config/index.js';
import { canonicalAddress } from '../net/address.js';
import { formatHostPort, type HostPort } from '../net/hostport.js';

/** A certificate expiring within this many days is a warning. */
export const EXPIRY_WARNING_DAYS = 30;
const DAY_MS = 86_400_000;

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
  else add(backend.host, "the backend's own address, which the health checks verify without apiserver.health.serverName");
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
  const { missing } = certificateCoverage(x, {
    ips: needs.filter((n) => n.kind === 'ip').map((n) => n.value),
    names: needs.filter((n) => n.kind === 'dns').map((n) => n.value),
  });
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
  return dn
    .split('\n')
    .filter((l) => l !== '')
    .join(', ');
}
