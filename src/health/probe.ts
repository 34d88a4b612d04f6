/**
 * One readiness check of one apiserver: an HTTPS GET of the health path on a new connection.
 *
 *   t=0 ─ read changed files (CA, client cert/key, token) ─ TCP connect ─ TLS handshake
 *         (verify chain against the CA, then the name: serverName or the backend's IP)
 *       ─ GET path ─ status line ─ body (at most 64 KiB) ─ result
 *   one deadline (timeoutMs) covers all of it; when it fires the socket is destroyed.
 *
 * Every check opens its own connection (agent: false, no keep-alive): a pooled connection would
 * keep passing after the backend stopped accepting new ones, which is exactly what a kernel load
 * balancer sends new clients to. The TLS session is resumed (RFC 8446 §2.2, a session ticket) for
 * at most {@link SESSION_REUSE_MS} after a full handshake with the same backend and TLS context,
 * which saves the signature and the chain verification of most checks: the TCP connection, the
 * handshake and the request are still new each time. Any failed check forgets the session.
 */
import { stat, readFile } from 'node:fs/promises';
import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import { performance } from 'node:perf_hooks';
import tls, { type PeerCertificate, type SecureContext } from 'node:tls';
import { parsePemCertificates } from '../config/files.js';
import type { Cause, Failure } from './verdict.js';

/** At most this much of a response body is read; the rest is discarded with the connection. */
export const MAX_BODY_BYTES = 64 * 1024;

/**
 * How long (ms) a TLS session from a full handshake is resumed by later checks of the same backend.
 * After it, the next check makes a full handshake again and verifies the serving certificate
 * (chain and name) anew: a certificate that stopped verifying is seen within this bound.
 */
export const SESSION_REUSE_MS = 30_000;

/** Where to send a check: an IP literal (IPv6 without brackets) and a TCP port. */
export interface ProbeTarget {
  readonly host: string;
  readonly port: number;
}

/**
 * How to check: the fields of the config's `apiserver.health` (HealthConfig satisfies this).
 * File paths are read when they change (size, mtime or inode), so rotated files need no restart.
 */
export interface ProbeSettings {
  /** Request path, starting with "/". */
  readonly path: string;
  /** Deadline of the whole check in ms (connect + TLS + response), > 0. */
  readonly timeoutMs: number;
  /** PEM CA bundle verifying the server; absent = the system's root CAs. */
  readonly caFile?: string | undefined;
  /** Name (or IP) to verify instead of the target's IP; a DNS name is also sent as SNI. */
  readonly serverName?: string | undefined;
  /** Skip certificate verification (chain and name). */
  readonly insecureSkipVerify: boolean;
  /** PEM client certificate (with clientKeyFile). */
  readonly clientCertFile?: string | undefined;
  /** PEM private key of clientCertFile. */
  readonly clientKeyFile?: string | undefined;
  /** File holding a bearer token for `Authorization: Bearer …` (surrounding whitespace ignored). */
  readonly tokenFile?: string | undefined;
}

/**
 * The outcome of one check.
 * - `ok`: true exactly when the response status is 2xx (and its body, up to 64 KiB, arrived).
 * - `status`: the HTTP status, when a response arrived.
 * - `latencyMs`: from the start of the check to its result, in ms (monotonic clock).
 * - `cause`: what happened, typed (see verdict.ts): `{kind: 'http', status}` for any answer,
 *   else the failure's kind, decided here from the error's code (never from its text).
 * - `error`, when not ok: the message for people: an errno name for network failures
 *   (`ECONNREFUSED`, `ECONNRESET`, `EHOSTUNREACH`, `ETIMEDOUT`…), `timeout` (our deadline, before
 *   the TCP connection was established: cause `timeout`), `timeout after connect` (our deadline,
 *   the connection established but TLS or the answer late: cause `slow`),
 *   `tls: <code>: <message>` (verification or handshake failure), `http <status>` (a non-2xx
 *   answer), `aborted` (the caller's signal), `cannot read <setting> <path>: <code>` /
 *   `tokenFile <path> is empty` (a local file), or `waiting for apiserver.health.<setting> <path>
 *   (it does not exist yet)` (cause `waitingForFile`: the file is looked for again at every check).
 */
export interface ProbeResult {
  ok: boolean;
  status?: number;
  latencyMs: number;
  cause: Cause;
  error?: string;
  /**
   * The backend's serving certificate, when a full TLS handshake completed (whatever the answer;
   * a resumed session carries none):
   * `raw` is its DER, `fingerprint256` OpenSSL's colon-separated SHA-256. What the agent's
   * certificate tracker (src/health/certificates.ts) follows.
   */
  peerCertificate?: { fingerprint256: string; raw: Buffer };
}

/** Runs one check of `target`; never rejects (every failure is a result). `signal` aborts it. */
export type Probe = (target: ProbeTarget, signal?: AbortSignal) => Promise<ProbeResult>;

/** What the probe needs from the file system (injectable for tests). */
export interface ProbeFiles {
  /** Identity of the file's current content: changes when it is rewritten or replaced. */
  version(path: string): Promise<string>;
  readFile(path: string): Promise<Buffer>;
}

/** The host's file system: the version is inode, size and mtime (ns). */
export const hostProbeFiles: ProbeFiles = {
  version: async (path) => {
    const s = await stat(path, { bigint: true });
    return `${s.ino}:${s.size}:${s.mtimeNs}`;
  },
  readFile: (path) => readFile(path),
};

/** Error codes of TLS failures that do not start with ERR_SSL_ / ERR_TLS_: OpenSSL's X509 verify results. */
const X509_CODE = /^(UNABLE_TO_|CERT_|DEPTH_ZERO_|SELF_SIGNED_|INVALID_|PATH_LENGTH_|HOSTNAME_MISMATCH|ERR_OSSL_)/;

const REASON_MAX = 240;
const clip = (s: string): string => (s.length > REASON_MAX ? `${s.slice(0, REASON_MAX - 3)}...` : s);

/** errno names that say the backend's host or network cannot be reached (connect(2), ip(7)). */
const UNREACHABLE = new Set(['EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENETDOWN']);

/**
 * The cause and message of a failed check, from the error's `code` (and `name` for an abort).
 * @param handshaking true when TCP was connected and TLS not yet established.
 */
export function describeFailure(err: unknown, handshaking: boolean): Failure {
  const e = err as NodeJS.ErrnoException;
  const code = typeof e?.code === 'string' ? e.code : undefined;
  if (e?.name === 'AbortError' || code === 'ABORT_ERR') return { cause: { kind: 'aborted' }, message: 'aborted' };
  const tlsCode = code !== undefined && (/^ERR_(SSL|TLS)_/.test(code) || X509_CODE.test(code));
  // an errno during the handshake (a reset) is a network failure, not a TLS one
  if (tlsCode || (handshaking && e?.syscall === undefined && code !== undefined && !/^E[A-Z]+$/.test(code))) {
    // the code first: the message can be long (it lists the certificate's names) and is clipped
    // Node appends a hint about its own command line (--use-system-ca) that does not apply to ballast
    const text = e.message.replace(/; if the root CA is installed locally, try running Node\.js with --use-system-ca$/, '');
    return { cause: { kind: 'tls', code: code ?? null }, message: clip(`tls: ${code === undefined ? '' : `${code}: `}${text}`) };
  }
  if (code === undefined) return { cause: { kind: 'failed' }, message: clip(e instanceof Error ? e.message : String(err)) };
  return { cause: causeOfCode(code), message: code };
}

/**
 * The failure of a check whose deadline passed: `timeout` (dead) when no TCP connection was
 * established (no SYN-ACK: the host or its port is gone), `slow` (unready) when the backend's
 * kernel accepted the connection but TLS or the answer did not come in time.
 * @param connected whether the TCP connection was established before the deadline.
 */
export function deadlineFailure(connected: boolean): Failure {
  return connected ? { cause: { kind: 'slow' }, message: 'timeout after connect' } : { cause: { kind: 'timeout' }, message: 'timeout' };
}

/** The cause of a connection error by its code. */
function causeOfCode(code: string): Cause {
  if (code === 'ECONNREFUSED') return { kind: 'refused' };
  if (code === 'ECONNRESET' || code === 'EPIPE') return { kind: 'reset' };
  if (code === 'ETIMEDOUT') return { kind: 'timeout' };
  if (UNREACHABLE.has(code)) return { kind: 'unreachable', code };
  return { kind: 'network', code };
}

/** A session ticket to resume, with the context it was made with and when its full handshake was (ms, monotonic). */
interface CachedSession {
  ticket: Buffer;
  context: SecureContext;
  fullAt: number;
}

/** The sessions of one probe, by backend (`host:port`), resumed while younger than `reuseMs`. */
class SessionCache {
  readonly #reuseMs: number;
  readonly #byTarget = new Map<string, CachedSession>();

  constructor(reuseMs: number) {
    this.#reuseMs = reuseMs;
  }

  /** The ticket to offer `key` now, when one is fresh and was made with `context`. */
  take(key: string, context: SecureContext, now: number): CachedSession | undefined {
    const c = this.#byTarget.get(key);
    if (c === undefined) return undefined;
    if (c.context !== context || now - c.fullAt >= this.#reuseMs) {
      this.#byTarget.delete(key);
      return undefined;
    }
    return c;
  }

  store(key: string, session: CachedSession): void {
    this.#byTarget.set(key, session);
  }

  forget(key: string): void {
    this.#byTarget.delete(key);
  }
}

/** A file's content, re-read only when its version changes. */
class FileCache {
  readonly #files: ProbeFiles;
  readonly #entries = new Map<string, { version: string; data: Buffer }>();

  constructor(files: ProbeFiles) {
    this.#files = files;
  }

  /** @returns the content and its version. @throws the fs error (with `code`) when it cannot be read. */
  async get(path: string): Promise<{ version: string; data: Buffer }> {
    const version = await this.#files.version(path);
    const cached = this.#entries.get(path);
    if (cached?.version === version) return cached;
    const entry = { version, data: await this.#files.readFile(path) };
    this.#entries.set(path, entry);
    return entry;
  }
}

/** What a check sends and verifies with, from the current files. */
export interface ProbeCredentials {
  secureContext: SecureContext;
  token: string | undefined;
}

/**
 * The TLS context (CA, client certificate and key) and the bearer token of `settings`, read
 * from their files on each call and rebuilt only when one of them changed (inode, size, mtime).
 * What {@link createProbe} and `ballast check` (src/check/certificates.ts) connect with.
 * @param deps.files the file system (default: the host's).
 * @returns a function resolving to the credentials, or the {@link Failure} (cause `localFile`
 *   or `waitingForFile`) that says which file cannot be used; it never rejects.
 */
export function createCredentials(settings: ProbeSettings, deps: { files?: ProbeFiles } = {}): () => Promise<ProbeCredentials | Failure> {
  const cache = new FileCache(deps.files ?? hostProbeFiles);
  let context: { key: string; value: SecureContext } | undefined;

  return async (): Promise<ProbeCredentials | Failure> => {
    const local = (setting: string, message: string): Failure => ({ cause: { kind: 'localFile', setting }, message });
    const load = async (setting: string, path: string | undefined): Promise<{ version: string; data: Buffer } | Failure | undefined> => {
      if (path === undefined || path === '') return undefined;
      try {
        return await cache.get(path);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        // not there yet (the CA before kubeadm init): a wait, checked again at every check
        if (code === 'ENOENT') {
          const full = `apiserver.health.${setting}`;
          return { cause: { kind: 'waitingForFile', setting: full, path }, message: `waiting for ${full} ${path} (it does not exist yet)` };
        }
        return local(setting, `cannot read ${setting} ${path}: ${code ?? (err as Error).message}`);
      }
    };
    const loaded = await Promise.all([
      load('caFile', settings.caFile),
      load('clientCertFile', settings.clientCertFile),
      load('clientKeyFile', settings.clientKeyFile),
      load('tokenFile', settings.tokenFile),
    ]);
    const [ca, cert, key, token] = loaded;
    // a file that exists but cannot be used says more than one still to come
    const failures = loaded.filter((f): f is Failure => f !== undefined && 'cause' in f);
    const unusable = failures.find((f) => f.cause.kind !== 'waitingForFile');
    if (unusable !== undefined) return unusable;
    const waiting = failures[0];
    const file = (f: typeof ca): { version: string; data: Buffer } | undefined => (f === undefined || 'cause' in f ? undefined : f);
    const [caF, certF, keyF, tokenF] = [file(ca), file(cert), file(key), file(token)];
    // a CA file that holds no certificate would make every server look wrong ("unable to verify
    // the first certificate"): say what `ballast validate` says about it instead
    for (const [setting, f, path] of [
      ['caFile', caF, settings.caFile],
      ['clientCertFile', certF, settings.clientCertFile],
    ] as const) {
      const certs = f === undefined ? null : parsePemCertificates(f.data.toString('utf8'));
      if (typeof certs === 'string') return local(setting, `${setting} ${path} ${certs}`);
    }
    const ctxKey = `${caF?.version}|${certF?.version}|${keyF?.version}`;
    // the TLS files that are there are still checked while another is awaited (half a pair is not)
    const tlsWaiting = [ca, cert, key].some((f) => f !== undefined && 'cause' in f);
    if (context?.key !== ctxKey && !(tlsWaiting && (certF === undefined) !== (keyF === undefined))) {
      try {
        context = {
          key: ctxKey,
          value: tls.createSecureContext({
            ...(caF === undefined ? {} : { ca: caF.data }),
            ...(certF === undefined ? {} : { cert: certF.data }),
            ...(keyF === undefined ? {} : { key: keyF.data }),
          }),
        };
      } catch (err) {
        // our own files are unusable: that says nothing about the backend
        return local('caFile', clip(`tls: cannot use the CA or client certificate files: ${(err as Error).message}`));
      }
    }
    let bearer: string | undefined;
    if (tokenF !== undefined) {
      bearer = tokenF.data.toString('utf8').trim();
      if (bearer === '') return local('tokenFile', `tokenFile ${settings.tokenFile} is empty`);
      if (/[^\x21-\x7e]/.test(bearer)) return local('tokenFile', `tokenFile ${settings.tokenFile} holds characters a bearer token cannot have`);
    }
    if (waiting !== undefined) return waiting;
    if (context === undefined) return local('caFile', 'tls: no TLS context');
    return { secureContext: context.value, token: bearer };
  };
}

/**
 * Makes a {@link Probe} for these settings. The files they name are read on the first check and
 * again whenever they change (inode, size or mtime), so rotated CAs, client certificates and
 * tokens are picked up without a restart; the TLS context is rebuilt only then. A file that does
 * not exist yet (also one whose directory is missing) fails the check with cause
 * `waitingForFile`, and is looked for again at the next one: the first check after it appears uses it.
 * TLS sessions are resumed for `sessionReuseMs` after each full handshake (see {@link SESSION_REUSE_MS});
 * a resumed handshake carries no certificate, so its result has no `peerCertificate`.
 *
 * @param settings see {@link ProbeSettings}; `timeoutMs` must be > 0.
 * @param deps.files the file system (default: the host's).
 * @param deps.sessionReuseMs ms a session is resumed after its full handshake (default
 *   {@link SESSION_REUSE_MS}; 0 = a full handshake every check).
 * @returns the probe function; it never rejects.
 * @throws RangeError when `timeoutMs` is not a positive number or `path` does not start with "/".
 */
export function createProbe(settings: ProbeSettings, deps: { files?: ProbeFiles; sessionReuseMs?: number } = {}): Probe {
  if (!(settings.timeoutMs > 0) || !Number.isFinite(settings.timeoutMs)) {
    throw new RangeError(`timeoutMs must be a positive number of milliseconds, got ${settings.timeoutMs}`);
  }
  if (!settings.path.startsWith('/')) throw new RangeError(`path must start with "/", got ${JSON.stringify(settings.path)}`);
  const credentials = createCredentials(settings, deps);
  const sessions = new SessionCache(deps.sessionReuseMs ?? SESSION_REUSE_MS);
  return (target, signal) => probeWith(target, settings, credentials, sessions, signal);
}

/**
 * One check with the credentials of the moment. Never rejects.
 */
function probeWith(
  target: ProbeTarget,
  settings: ProbeSettings,
  credentials: () => Promise<ProbeCredentials | Failure>,
  sessions: SessionCache,
  signal: AbortSignal | undefined,
): Promise<ProbeResult> {
  const key = `${target.host}:${target.port}`;
  const start = performance.now();
  const elapsed = (): number => Math.round((performance.now() - start) * 100) / 100;
  return new Promise<ProbeResult>((resolve) => {
    let done = false;
    let req: ReturnType<typeof https.request> | undefined;
    let handshaking = false;
    /** the backend's kernel accepted the TCP connection (SYN-ACK seen) */
    let connected = false;
    /** the serving certificate, once the handshake completed */
    let peer: ProbeResult['peerCertificate'];
    const finish = (r: Omit<ProbeResult, 'latencyMs'>): void => {
      if (done) return;
      done = true;
      clearTimeout(deadline);
      signal?.removeEventListener('abort', onAbort);
      // the connection is never reused: destroying it also ends a body we stopped reading
      req?.destroy();
      if (!r.ok) sessions.forget(key);
      resolve({ ...r, latencyMs: elapsed(), ...(peer === undefined ? {} : { peerCertificate: peer }) });
    };
    const fail = (f: Failure, status?: number): void => finish({ ok: false, ...(status === undefined ? {} : { status }), cause: f.cause, error: f.message });
    // The deadline is judged in the check phase of the loop iteration it fires in, after that
    // iteration's poll phase: when this process itself was not scheduled for a while (a loaded
    // machine), what the backend sent meanwhile (the SYN-ACK, the answer) is read first, and a
    // check answered in time is not failed by a timer that ran late.
    const deadline = setTimeout(() => setImmediate(() => fail(deadlineFailure(connected))), settings.timeoutMs);
    const onAbort = (): void => fail({ cause: { kind: 'aborted' }, message: 'aborted' });
    if (signal?.aborted) return onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });

    credentials().then(
      (creds) => {
        if (done) return;
        if ('cause' in creds) return fail(creds);
        const name = settings.serverName === undefined || settings.serverName === '' ? undefined : settings.serverName;
        // SNI carries host names only (RFC 6066 §3): an IP serverName is verified, not sent
        const sni = name !== undefined && isIP(name) === 0 ? name : undefined;
        // the name verified: serverName when set, else the backend's own IP (an IP SubjectAltName)
        const verifyName = name ?? target.host;
        const headers: Record<string, string> = { 'user-agent': 'ballast-health', accept: '*/*', connection: 'close' };
        if (creds.token !== undefined) headers.authorization = `Bearer ${creds.token}`;
        // secureContext and session are passed through to tls.connect(); @types/node lists them for tls only
        const options: https.RequestOptions & Pick<tls.ConnectionOptions, 'secureContext' | 'session'> = {
          host: target.host,
          port: target.port,
          method: 'GET',
          path: settings.path,
          headers,
          agent: false,
          secureContext: creds.secureContext,
          rejectUnauthorized: !settings.insecureSkipVerify,
          ...(sni === undefined ? {} : { servername: sni }),
          checkServerIdentity: (_host: string, cert: PeerCertificate) => tls.checkServerIdentity(verifyName, cert),
        };
        const cached = sessions.take(key, creds.secureContext, start);
        if (cached !== undefined) options.session = cached.ticket;
        const r = https.request(options);
        req = r;
        r.on('socket', (socket) => {
          // a new ticket from a resumed session keeps the time of the full handshake it came from
          socket.on('session', (ticket: Buffer) => {
            if (done) return;
            const fullAt = (socket as tls.TLSSocket).isSessionReused() && cached !== undefined ? cached.fullAt : start;
            sessions.store(key, { ticket, context: creds.secureContext, fullAt });
          });
          socket.once('connect', () => {
            connected = true;
            handshaking = true;
          });
          socket.once('secureConnect', () => {
            handshaking = false;
            const c = (socket as tls.TLSSocket).getPeerCertificate();
            // an empty object when the server sent none (an anonymous cipher: not with verification)
            if (c.raw !== undefined) peer = { fingerprint256: c.fingerprint256, raw: c.raw };
          });
        });
        r.on('error', (err) => fail(describeFailure(err, handshaking)));
        r.on('response', (res: IncomingMessage) => {
          const status = res.statusCode ?? 0;
          const ok = status >= 200 && status <= 299;
          const cause: Cause = { kind: 'http', status };
          const result = ok ? { ok, status, cause } : { ok, status, cause, error: `http ${status}` };
          let read = 0;
          res.on('data', (chunk: Buffer) => {
            read += chunk.length;
            if (read >= MAX_BODY_BYTES) finish(result);
          });
          res.on('end', () => finish(result));
          res.on('error', (err) => fail(describeFailure(err, false), status));
          // the connection closed before the body was complete
          res.on('close', () => {
            if (!res.complete) fail({ cause: { kind: 'reset' }, message: 'ECONNRESET' }, status);
          });
        });
        r.end();
      },
      (err: unknown) => fail(describeFailure(err, false)),
    );
  });
}

/**
 * One check with a fresh {@link createProbe}: reads the files now. For one-off use (the CLI, a
 * script); a checker keeps one probe so that files are read only when they change.
 * @returns the result; never rejects.
 * @throws RangeError for invalid settings (see createProbe).
 */
export function probeOnce(target: ProbeTarget, settings: ProbeSettings, signal?: AbortSignal): Promise<ProbeResult> {
  return createProbe(settings)(target, signal);
}
