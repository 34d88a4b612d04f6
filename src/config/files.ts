/**
 * The files a configuration names (vrrp.auth.keyFile, apiserver.health.caFile, clientCertFile,
 * clientKeyFile, tokenFile, discovery.kubeconfig, discovery.lastKnownFile, and the service-account
 * token of discovery.inCluster): do they exist, and do they hold what they should? Checked by loadConfig and
 * `ballast validate` through an injected reader, so validateConfig itself stays pure and tests
 * can hand it a fake file system.
 *
 * Only files whose setting is well formed (a non-empty absolute path) are read; a malformed
 * setting already has its own issue from the schema.
 */
import { createPrivateKey, X509Certificate, type KeyObject } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { kubeconfigProblem, SERVICE_ACCOUNT_TOKEN } from './kubeconfig.js';
import { AUTH_KEY_MIN_LENGTH, DEFAULTS } from './limits.js';

/** Reads files for the checks: the host's file system, or a fake in tests. */
export interface ConfigFiles {
  /**
   * The whole file.
   * @throws an fs-style error with `code` (ENOENT, EACCES, EISDIR, …) when it cannot be read.
   */
  readFile(path: string): Buffer;
}

/** The largest file the configuration may name (and the configuration itself), in bytes. */
export const MAX_CONFIG_FILE_BYTES = 1 << 20;

/**
 * Reads a whole regular file of at most {@link MAX_CONFIG_FILE_BYTES}. A device, FIFO or socket
 * (`/dev/zero`, a named pipe) is refused before any byte is read: reading one would never end.
 * @throws an fs-style error with `code`: the open's (ENOENT, EACCES, EISDIR…), ENOTREG (not a
 *   regular file) or EFBIG (too large).
 */
export function readRegularFile(path: string): Buffer {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  try {
    const st = fstatSync(fd);
    if (st.isDirectory()) throw Object.assign(new Error(`${path} is a directory`), { code: 'EISDIR' });
    if (!st.isFile()) throw Object.assign(new Error(`${path} is not a regular file`), { code: 'ENOTREG' });
    if (st.size > MAX_CONFIG_FILE_BYTES) throw Object.assign(new Error(`${path} is larger than ${MAX_CONFIG_FILE_BYTES} bytes`), { code: 'EFBIG' });
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** The host's file system (synchronous: the configuration is read once, at start). */
export const hostFiles: ConfigFiles = { readFile: readRegularFile };

/** One problem with a named file: the setting's path (`['apiserver', 'health', 'caFile']`) and why. */
export interface FileIssue {
  path: (string | number)[];
  message: string;
}

/**
 * A file a health or discovery setting names that does not exist yet (ENOENT, also when a
 * directory on its path is missing): not an error. Before `kubeadm init` / `join` there is no
 * /etc/kubernetes/pki/ca.crt nor admin.conf, and the VIP must exist before the first apiserver;
 * the health checks report the backends as waiting for the file, discovery waits for its
 * kubeconfig (or the pod's service-account token), and each starts using it when it appears.
 */
export interface FileNote {
  /** The setting's path, e.g. `['apiserver', 'health', 'caFile']`. */
  path: (string | number)[];
  /** The file's path. */
  file: string;
  /** For people: `/etc/kubernetes/pki/ca.crt does not exist yet: the health checks wait for it …`. */
  message: string;
}

/** A {@link FileNote} as loadConfig gives it: the setting written as in the file, and its line when known. */
export interface ConfigNote {
  /** `apiserver.health.caFile`. */
  readonly path: string;
  readonly file: string;
  readonly message: string;
  readonly line?: number;
  readonly column?: number;
}

/** How `ballast validate` (and the agent's log) write a note: `line 9: apiserver.health.caFile: note: …`. */
export function formatNote(n: ConfigNote): string {
  return `${n.line === undefined ? '' : `line ${n.line}: `}${n.path}: note: ${n.message}`;
}

const HEALTH_WAIT = 'the health checks wait for it (the backends are not ready until it appears; expected before kubeadm init / join)';
/** The settings whose file may be missing at start, and who waits for it; vrrp.auth.keyFile may not be missing. */
const WAITABLE = new Map([
  ['apiserver.health.caFile', HEALTH_WAIT],
  ['apiserver.health.clientCertFile', HEALTH_WAIT],
  ['apiserver.health.clientKeyFile', HEALTH_WAIT],
  ['apiserver.health.tokenFile', HEALTH_WAIT],
  ['discovery.kubeconfig', 'discovery waits for it (it appears after kubeadm init / join)'],
  ['discovery.inCluster', 'discovery waits for it (it is mounted in a pod with a service account; validate may run outside one)'],
]);

/** Why a file could not be read, for an operator: `no such file (ENOENT)`. */
export function describeReadError(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  switch (code) {
    case 'ENOENT':
      return 'no such file (ENOENT)';
    case 'EACCES':
    case 'EPERM':
      return `permission denied (${code})`;
    case 'EISDIR':
      return 'it is a directory, not a file (EISDIR)';
    case 'ENOTDIR':
      return 'a component of the path is not a directory (ENOTDIR)';
    case 'ENOTREG':
      return 'not a regular file (a device, FIFO or socket cannot be read as one)';
    case 'EFBIG':
      return `larger than ${MAX_CONFIG_FILE_BYTES} bytes (EFBIG)`;
    default:
      return err instanceof Error ? err.message : String(err);
  }
}

/**
 * Why `path` cannot be a file ballast writes and reads (discovery.lastKnownFile), from the error
 * reading it gave: `it is a directory`, `its directory /x is not a directory` (ENOTDIR: the nearest
 * ancestor that exists and is not a directory, found through `files`), `it is not a regular file`.
 * @returns the reason, or null when the error is of another kind (ENOENT, EACCES, …).
 */
export function unusableFilePath(path: string, err: unknown, files: ConfigFiles = hostFiles): string | null {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'EISDIR') return 'it is a directory';
  if (code === 'ENOTREG') return 'it is not a regular file (a device, FIFO or socket)';
  if (code !== 'ENOTDIR') return null;
  for (let d = dirname(path); d !== dirname(d); d = dirname(d)) {
    let c: string | undefined;
    try {
      files.readFile(d);
    } catch (e) {
      c = (e as NodeJS.ErrnoException | undefined)?.code;
    }
    if (c === undefined || c === 'ENOTREG' || c === 'EFBIG') return `its directory ${d} is not a directory`;
    if (c !== 'ENOENT' && c !== 'ENOTDIR') break;
  }
  return 'a component of its path is not a directory (ENOTDIR)';
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

/**
 * The certificates of a PEM bundle, in order.
 * @returns the parsed certificates, or a reason (no certificate in the text, one does not parse).
 */
export function parsePemCertificates(text: string): X509Certificate[] | string {
  const blocks = text.match(PEM_CERT) ?? [];
  if (blocks.length === 0) return 'holds no PEM certificate (expected a "-----BEGIN CERTIFICATE-----" block)';
  const out: X509Certificate[] = [];
  for (const [i, block] of blocks.entries()) {
    try {
      out.push(new X509Certificate(block));
    } catch (err) {
      const which = blocks.length === 1 ? 'its certificate' : `certificate ${i + 1} of ${blocks.length}`;
      return `${which} cannot be parsed: ${(err as Error).message}`;
    }
  }
  return out;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** At most this many keys in `vrrp.auth.keyFile` (a rotation needs two). */
export const AUTH_KEYS_MAX = 4;

/**
 * The shared keys of `vrrp.auth.keyFile`: one per line, each line's trailing whitespace (and a
 * CR) removed, empty lines ignored; the first line signs, every line verifies (docs/auth.md).
 * Each key at least {@link AUTH_KEY_MIN_LENGTH} bytes, at most {@link AUTH_KEYS_MAX} keys.
 * @returns the keys, or why the file cannot hold them (text after the path in a message).
 */
export function parseAuthKeys(bytes: Buffer): Buffer[] | string {
  const keys: Buffer[] = [];
  let start = 0;
  for (let i = 0; i <= bytes.length; i++) {
    if (i < bytes.length && bytes[i] !== 0x0a) continue;
    let end = i;
    while (end > start && (bytes[end - 1] === 0x0d || bytes[end - 1] === 0x20 || bytes[end - 1] === 0x09)) end--;
    if (end > start) keys.push(Buffer.from(bytes.subarray(start, end)));
    start = i + 1;
  }
  if (keys.length === 0) return 'is empty: it must hold the shared key of the group (e.g. `openssl rand -base64 32`)';
  if (keys.length > AUTH_KEYS_MAX)
    return `holds ${keys.length} keys (lines); at most ${AUTH_KEYS_MAX}: the first signs, the others only verify during a rotation`;
  const short = keys.findIndex((k) => k.length < AUTH_KEY_MIN_LENGTH);
  if (short >= 0) {
    const which = keys.length === 1 ? 'a' : `on line ${short + 1} a`;
    return `holds ${which} ${keys[short]!.length}-byte key; at least ${AUTH_KEY_MIN_LENGTH} bytes are needed (e.g. \`openssl rand -base64 32\`)`;
  }
  return keys;
}

/** A setting that names a file, when it is well formed. */
const filePath = (v: unknown): string | undefined => (typeof v === 'string' && v.startsWith('/') && !v.includes('\0') ? v : undefined);

/**
 * Checks the files the raw configuration value names (what YAML parsing gave, before the
 * schema): caFile and clientCertFile must hold PEM certificates, clientKeyFile a PEM private
 * key matching clientCertFile, tokenFile one non-empty line.
 *
 * discovery.kubeconfig must be a kubeconfig discovery can use (see kubeconfigProblem), and
 * discovery.lastKnownFile (or its default) a path that can be a file: not a directory, its
 * directory not a file (see {@link unusableFilePath}); its contents are the agent's concern (a
 * corrupt file is ignored). A health file (caFile, clientCertFile, clientKeyFile, tokenFile),
 * discovery.kubeconfig, or with discovery.inCluster the service-account token, that does not
 * exist (ENOENT) is no issue but a {@link FileNote} pushed to `notes`: it is waited for. One that exists
 * and cannot be read (a directory, EACCES, a device) or is malformed is an issue, and so is a
 * missing vrrp.auth.keyFile (the election cannot run without it). A missing client certificate
 * leaves its key unchecked against it (and the other way round): both are checked when they exist.
 *
 * @param raw the configuration value; `vrrp.auth`, `apiserver.health` and `discovery` are looked at.
 * @param files how to read (see {@link hostFiles}).
 * @param notes receives a note per missing file that is waited for, when given.
 * @returns one issue per bad file, each naming its setting; empty when all is well.
 */
export function fileIssues(raw: unknown, files: ConfigFiles, notes?: FileNote[]): FileIssue[] {
  if (!isRecord(raw)) return [];
  const out: FileIssue[] = [];
  const reader = readerOf(files, out, notes ?? []);
  const auth = isRecord(raw.vrrp) ? raw.vrrp.auth : undefined;
  authKeyIssue(reader(auth, ['vrrp', 'auth', 'keyFile']), out);
  const health = isRecord(raw.apiserver) ? raw.apiserver.health : undefined;
  if (isRecord(health)) {
    const read = (key: string) => reader(health, ['apiserver', 'health', key]);
    certificatesOf(read('caFile'), out);
    const clientCert = certificatesOf(read('clientCertFile'), out)?.[0];
    clientKeyIssue(read('clientKeyFile'), clientCert, out);
    tokenIssue(read('tokenFile'), out);
  }
  if (isRecord(raw.discovery)) discoveryFileIssues(raw.discovery, files, reader, out);
  return out;
}

/** discovery.kubeconfig, the service-account token of inCluster, discovery.lastKnownFile (see {@link fileIssues}). */
function discoveryFileIssues(d: Record<string, unknown>, files: ConfigFiles, reader: ReturnType<typeof readerOf>, out: FileIssue[]): void {
  const kc = reader(d, ['discovery', 'kubeconfig']);
  const problem = kc === undefined ? null : kubeconfigProblem(kc.bytes.toString('utf8'));
  if (kc !== undefined && problem !== null) out.push({ path: kc.at, message: `${kc.path}: ${problem}` });
  if (d.inCluster === true) reader({ inCluster: SERVICE_ACCOUNT_TOKEN }, ['discovery', 'inCluster']);
  if (d.kubeconfig === undefined && d.inCluster !== true) return;
  const at = ['discovery', 'lastKnownFile'];
  const path = d.lastKnownFile === undefined || d.lastKnownFile === '' ? DEFAULTS.discoveryLastKnownFile : filePath(d.lastKnownFile);
  if (path === undefined) return;
  try {
    files.readFile(path);
  } catch (err) {
    const why = unusableFilePath(path, err, files);
    if (why !== null) out.push({ path: at, message: `${path} cannot be used: ${why}; discovery writes the last-known backend set to this file` });
  }
}

/** A file a setting names, read: the setting's path, the file's path and its bytes. */
interface ReadFile {
  at: (string | number)[];
  path: string;
  bytes: Buffer;
}

/**
 * `read(section, at)`: the file named by the last key of `at` in `section`, or undefined when the
 * setting is not a well-formed path (its own issue), a waited-for file does not exist yet (a note
 * in `notes`) or the file cannot be read (an issue in `out`).
 */
function readerOf(files: ConfigFiles, out: FileIssue[], notes: FileNote[]): (section: unknown, at: (string | number)[]) => ReadFile | undefined {
  return (section, at) => {
    const key = String(at.at(-1));
    const path = isRecord(section) ? filePath(section[key]) : undefined;
    if (path === undefined) return undefined;
    try {
      return { at, path, bytes: files.readFile(path) };
    } catch (err) {
      const waiter = WAITABLE.get(at.join('.'));
      if (waiter !== undefined && (err as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
        notes.push({ path: at, file: path, message: `${path} does not exist yet: ${waiter}` });
        return undefined;
      }
      out.push({ path: at, message: `cannot read ${path}: ${describeReadError(err)}` });
      return undefined;
    }
  };
}

/** vrrp.auth.keyFile: one to AUTH_KEYS_MAX keys, each long enough. */
function authKeyIssue(file: ReadFile | undefined, out: FileIssue[]): void {
  if (file === undefined) return;
  const key = parseAuthKeys(file.bytes);
  if (typeof key === 'string') out.push({ path: file.at, message: `${file.path} ${key}` });
}

/** caFile, clientCertFile: PEM certificates. @returns them, or undefined (with an issue when they do not parse). */
function certificatesOf(file: ReadFile | undefined, out: FileIssue[]): X509Certificate[] | undefined {
  if (file === undefined) return undefined;
  const certs = parsePemCertificates(file.bytes.toString('utf8'));
  if (typeof certs !== 'string') return certs;
  out.push({ path: file.at, message: `${file.path} ${certs}` });
  return undefined;
}

/** clientKeyFile: an unencrypted PEM private key, the key of `cert` when that parsed. */
function clientKeyIssue(file: ReadFile | undefined, cert: X509Certificate | undefined, out: FileIssue[]): void {
  if (file === undefined) return;
  let parsed: KeyObject;
  try {
    parsed = createPrivateKey(file.bytes);
  } catch (err) {
    // OpenSSL asks for a passphrase and, given none, fails with a generic "interrupted or cancelled"
    const text = file.bytes.toString('utf8');
    const encrypted = /-----BEGIN ENCRYPTED PRIVATE KEY-----|Proc-Type:\s*4,ENCRYPTED/.test(text);
    const why = encrypted ? 'an encrypted key (it needs a passphrase, which ballast cannot supply)' : (err as Error).message;
    out.push({ path: file.at, message: `${file.path} holds no usable PEM private key: ${why}` });
    return;
  }
  if (cert !== undefined && !cert.checkPrivateKey(parsed)) {
    out.push({ path: file.at, message: `${file.path} is not the private key of the certificate in apiserver.health.clientCertFile` });
  }
}

/** tokenFile: one non-empty line of printable ASCII without spaces (a superset of RFC 6750 §2.1 b64token). */
function tokenIssue(file: ReadFile | undefined, out: FileIssue[]): void {
  if (file === undefined) return;
  const text = file.bytes.toString('utf8').trim();
  if (text === '') out.push({ path: file.at, message: `${file.path} is empty: it must hold the bearer token` });
  else if (/[\r\n]/.test(text)) {
    out.push({ path: file.at, message: `${file.path} must hold one token on one line, got ${text.split(/\r?\n/).length} lines` });
  } else if (/[^\x21-\x7e]/.test(text)) {
    out.push({ path: file.at, message: `${file.path} holds characters a bearer token cannot have (spaces, control or non-ASCII characters)` });
  }
}
