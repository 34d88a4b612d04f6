/**
 * The running agent's view of each backend's serving certificate: every health check that got
 * through the TLS handshake hands its peer certificate here; when a backend's certificate
 * differs from the last one seen (first check, rotation) it is examined once (the VIPs, the
 * local endpoint addresses, the name the checks verify: examine-certificate.ts) and one log
 * line says what it covers: warn when a name is missing, info when it is fine.
 *
 * It never changes health: a backend whose certificate lacks the VIP still serves the clients
 * that use another name (its own address, a DNS name), so it is reported, not drained.
 */
import { X509Certificate } from 'node:crypto';
import { examineCertificate, type CertificateFindings, type NeededName } from './examine-certificate.js';
import { formatHostPort, type HostPort } from '../net/hostport.js';
import type { Log } from '../log/log.js';

/**
 * backends[].certificate in /status: the backend's current serving certificate as examined
 * (subject, issuer, notAfter ISO 8601, fingerprint256, `missing`: the names clients use that it
 * lacks, `lacks`: one sentence each; see CertificateFindings), and when it was first seen (ISO 8601).
 */
export type BackendCertificate = Pick<CertificateFindings, 'subject' | 'issuer' | 'notAfter' | 'fingerprint256' | 'missing' | 'lacks'> & { since: string };

/** Log message when a backend's certificate covers every name clients use (stable: operators and tests grep for it). */
export const CERT_OK_MSG = 'backend certificate covers the names clients use';
/** Log message (warn) when it lacks some: the entries are in its `lacks` field (stable, as CERT_OK_MSG). */
export const CERT_MISSING_MSG =
  'backend certificate lacks names clients use (clients connecting by them fail with ERR_TLS_CERT_ALTNAME_INVALID; the backend is not drained)';

/**
 * Follows the serving certificate of each backend; see the file comment.
 * @example
 *   const certs = new CertificateTracker((b) => certificateNeeds(config, b), log);
 *   checker.on('check', (c) => c.result.peerCertificate && certs.observe(c.backend, c.result.peerCertificate));
 */
export class CertificateTracker {
  #needs: (backend: HostPort) => NeededName[];
  readonly #log: Pick<Log, 'info' | 'warn'>;
  readonly #now: () => number;
  readonly #entries = new Map<string, { backend: HostPort; raw: Buffer; cert: BackendCertificate }>();

  /**
   * @param needs the names a backend's certificate must carry (certificateNeeds over the running config).
   * @param now the wall clock, ms since the epoch (default Date.now).
   */
  constructor(needs: (backend: HostPort) => NeededName[], log: Pick<Log, 'info' | 'warn'>, now: () => number = Date.now) {
    this.#needs = needs;
    this.#log = log;
    this.#now = now;
  }

  /**
   * One check's peer certificate. Examines and logs it (one line) only when it differs from the
   * backend's last one (by SHA-256 fingerprint); otherwise costs one map lookup.
   * @throws nothing: an unparseable certificate is logged once and skipped.
   */
  observe(backend: HostPort, peer: { fingerprint256: string; raw: Buffer }): void {
    const address = formatHostPort(backend);
    const old = this.#entries.get(address);
    if (old?.cert.fingerprint256 === peer.fingerprint256) return;
    let x: X509Certificate;
    try {
      x = new X509Certificate(peer.raw);
    } catch (err) {
      // a TLS stack that accepted it and a parser that does not: say so once per certificate
      this.#entries.delete(address);
      this.#log.warn({ backend: address, fingerprint256: peer.fingerprint256, err: (err as Error).message }, 'backend certificate cannot be parsed');
      return;
    }
    const cert = this.#examine(backend, x, new Date(this.#now()).toISOString());
    this.#entries.set(address, { backend, raw: peer.raw, cert });
    this.#report(address, cert, old === undefined ? 'first seen' : 'changed');
  }

  /**
   * New needs (a reload changed the VIPs, the local endpoint or serverName): re-examines every
   * known certificate and logs those whose missing names changed (one line each).
   */
  setNeeds(needs: (backend: HostPort) => NeededName[]): void {
    this.#needs = needs;
    for (const [address, e] of this.#entries) {
      const cert = this.#examine(e.backend, new X509Certificate(e.raw), e.cert.since);
      const changed = cert.missing.join(' ') !== e.cert.missing.join(' ');
      e.cert = cert;
      if (changed) this.#report(address, cert, 'needs changed');
    }
  }

  /** The backend's certificate as last examined (`host:port` as formatHostPort spells it); undefined before its first handshake. */
  get(address: string): BackendCertificate | undefined {
    const c = this.#entries.get(address)?.cert;
    return c === undefined ? undefined : { ...c, missing: [...c.missing], lacks: [...c.lacks] };
  }

  /** How many backends have a certificate on record. */
  get size(): number {
    return this.#entries.size;
  }

  /** Forgets backends not in `addresses` (removed from the set): one that returns is logged again. */
  retain(addresses: ReadonlySet<string>): void {
    for (const a of this.#entries.keys()) if (!addresses.has(a)) this.#entries.delete(a);
  }

  #examine(backend: HostPort, x: X509Certificate, since: string): BackendCertificate {
    const f = examineCertificate(x, this.#needs(backend), this.#now());
    return { subject: f.subject, issuer: f.issuer, notAfter: f.notAfter, fingerprint256: f.fingerprint256, missing: f.missing, lacks: f.lacks, since };
  }

  #report(address: string, c: BackendCertificate, why: string): void {
    const fields = { backend: address, subject: c.subject, issuer: c.issuer, notAfter: c.notAfter, fingerprint256: c.fingerprint256, why, missing: c.missing };
    if (c.missing.length > 0) this.#log.warn({ ...fields, lacks: c.lacks }, CERT_MISSING_MSG);
    else this.#log.info(fields, CERT_OK_MSG);
  }
}
