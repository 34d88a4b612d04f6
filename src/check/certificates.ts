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
 * The names a certificate must carry, and how SANs are matched: health/examine-certificate.ts.
 */
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import tls from 'node:tls';
import type { Config } from '../config/index.js';
import { certificateNeeds, examineCertificate, EXPIRY_WARNING_DAYS } from '../health/examine-certificate.js';
import { seedAndLastKnown } from '../discovery/lastknown.js';
import { createCredentials, describeFailure, type ProbeCredentials } from '../health/probe.js';
import type { Failure } from '../health/verdict.js';
import { formatHostPort, type HostPort } from '../net/hostport.js';
import type { CheckResult } from './report.js';

/** The `id` of every result of {@link checkBackendCertificates}. */
export const CHECK_ID = 'backend-certificate';

/** What the TLS handshake with one backend gave. */
type Handshake = { kind: 'ok'; cert: X509Certificate; authorized: boolean; verifyError: string | null } | { kind: 'failed'; failure: Failure };

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
    const timer = setTimeout(
      () => done({ kind: 'failed', failure: { cause: { kind: 'timeout' }, message: handshaking ? 'timeout after connect' : 'timeout' } }),
      timeoutMs,
    );
    socket.once('connect', () => (handshaking = true));
    socket.once('secureConnect', () => {
      const peer = socket.getPeerCertificate();
      if (peer.raw === undefined)
        return done({ kind: 'failed', failure: { cause: { kind: 'tls', code: null }, message: 'tls: the server sent no certificate' } });
      const err = socket.authorizationError as Error | string | null | undefined;
      done({
        kind: 'ok',
        cert: new X509Certificate(peer.raw),
        authorized: socket.authorized,
        verifyError: err === null || err === undefined ? null : typeof err === 'string' ? err : ((err as NodeJS.ErrnoException).code ?? err.message),
      });
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
    return [
      {
        id: CHECK_ID,
        title: 'backend serving certificates',
        status: 'ok',
        detail: 'no backends (apiserver.backends is empty, no last-known file): nothing to check',
      },
    ];
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
        fix: waiting
          ? 'run the check again once the file exists (after kubeadm init)'
          : 'point apiserver.health.caFile (and clientCertFile / clientKeyFile) at usable PEM files',
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
        return {
          id: CHECK_ID,
          title,
          status: 'warn',
          detail: `backend ${where}: cannot check its certificate, no TLS handshake: ${shake.failure.message}`,
          fix: 'check it again once the backend answers',
        };
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
        return {
          id: CHECK_ID,
          title,
          status: 'ok',
          detail: `backend ${where}: chain verifies against ${ca}; SANs cover ${covered}; expires on ${f.notAfter} (in ${f.daysLeft} days); subject ${f.subject}`,
        };
      }
      return { id: CHECK_ID, title, status: fails.length > 0 ? 'fail' : 'warn', detail: `${problems.join('; ')}.`, fix: fixes.join('; ') };
    }),
  );
}
