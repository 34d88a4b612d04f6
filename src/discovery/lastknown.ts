/**
 * The last-known backend set on disk (default /var/lib/ballast/backends.json), so an agent that
 * restarts while the API is unreachable still knows the members:
 *
 *   { "version": 1, "updated": "2026-12-01T12:00:00.000Z", "backends": ["10.0.0.11:6443", "[fd00::12]:6443"] }
 *
 * Written atomically: a temporary file in the same directory, fsync, rename over the old one,
 * fsync of the directory; a crash leaves either the old or the new file, never a part of one.
 */
import { closeSync, fsyncSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { describeReadError, readRegularFile, unusableFilePath } from '../config/files.js';
import { formatHostPort, tryParseHostPort, type HostPort } from '../net/hostport.js';

/** What reading the file found. */
export type LastKnownRead =
  | { kind: 'ok'; backends: HostPort[]; updated: string | null }
  | { kind: 'missing' }
  /** the path cannot hold the file (a directory, its directory a file, a device): `reason` says what (`its directory /x is not a directory`) */
  | { kind: 'unusable'; reason: string }
  /** unreadable, not JSON, or not the expected shape: `reason` says what (the caller logs it and ignores the file) */
  | { kind: 'corrupt'; reason: string };

/** Reads the last-known set (a regular file of at most 1 MiB). Never throws. */
export function readLastKnown(path: string): LastKnownRead {
  let text: string;
  try {
    text = readRegularFile(path).toString('utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { kind: 'missing' };
    const why = unusableFilePath(path, err);
    if (why !== null) return { kind: 'unusable', reason: why };
    return { kind: 'corrupt', reason: `cannot read it: ${describeReadError(err)}` };
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    return { kind: 'corrupt', reason: `not JSON: ${(err as Error).message}` };
  }
  if (typeof doc !== 'object' || doc === null || (doc as { version?: unknown }).version !== 1 || !Array.isArray((doc as { backends?: unknown }).backends)) {
    return { kind: 'corrupt', reason: 'expected {"version": 1, "backends": ["host:port", …]}' };
  }
  const backends: HostPort[] = [];
  for (const [i, b] of (doc as { backends: unknown[] }).backends.entries()) {
    const hp = typeof b === 'string' ? tryParseHostPort(b) : `backends[${i}] is not a string`;
    if (typeof hp === 'string') return { kind: 'corrupt', reason: `backends[${i}]: ${hp}` };
    backends.push(hp);
  }
  const updated = (doc as { updated?: unknown }).updated;
  return { kind: 'ok', backends, updated: typeof updated === 'string' ? updated : null };
}

/**
 * Writes the set atomically (see the file comment); creates the directory when missing.
 * @throws the file system's error (ENOSPC, EACCES, …); the old file is then untouched.
 */
export function writeLastKnown(path: string, backends: readonly HostPort[], now: Date = new Date()): void {
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true });
  const tmp = join(dir, `.${basename(path)}.${process.pid}.tmp`);
  const text = `${JSON.stringify({ version: 1, updated: now.toISOString(), backends: backends.map(formatHostPort) }, null, 2)}\n`;
  const fd = openSync(tmp, 'w', 0o644);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw err;
  }
  closeSync(fd);
  try {
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
  // the rename itself survives a crash only once the directory is on disk
  try {
    const d = openSync(dir, 'r');
    try {
      fsyncSync(d);
    } finally {
      closeSync(d);
    }
  } catch {
    // some file systems refuse fsync on a directory; the rename is still atomic
  }
}

/**
 * The set an agent starts with before its discovery phase runs: the seed, then the last-known
 * file's backends not in it (the order discovery's merge uses before the API answers). null when
 * the file is missing, unusable, corrupt or empty (then the seed alone). Never throws.
 */
export function seedAndLastKnown<T extends HostPort>(seed: readonly T[], path: string): (T | HostPort)[] | null {
  const read = readLastKnown(path);
  if (read.kind !== 'ok' || read.backends.length === 0) return null;
  const inSeed = new Set(seed.map(formatHostPort));
  return [...seed, ...read.backends.filter((b) => !inSeed.has(formatHostPort(b)))];
}
