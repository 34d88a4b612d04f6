/**
 * The note a master leaves for its next process when it stops for a restart in place (an
 * upgrade, `systemctl restart`, SIGUSR2): which router it was, and until when the Backups wait
 * for it (the Max Adver Int its last adverts announced, RFC 9568 §6.4.2). The next process of
 * the same router reads it at start and, while the Backups still wait,
 * starts Active with the VIPs where they are (engine.ts `resume`) instead of as a Backup that
 * would remove them. docs/operations.md explains the restart.
 *
 * One file per router, in the runtime directory (tmpfs: a reboot forgets it; the boot id in the
 * note says so too), named by the network namespace (its inode), the interface, the family and
 * the VRID, so agents of other namespaces or groups never read each other's note.
 */
import { readFileSync, renameSync, rmSync, statSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { LOCK_DIR } from '../dataplane/ebpf.js';

/** What identifies one router on this host. */
export interface RouterKey {
  ifname: string;
  family: 4 | 6;
  vrid: number;
  /** The address adverts go out from (a changed primary address is another router to the Backups). */
  primary: string;
}

/** The note (JSON, version 1). Times are the wall clock, ms since the epoch. */
export interface HandOffNote extends RouterKey {
  version: 1;
  /** /proc/sys/kernel/random/boot_id when written: a note from before a reboot is never used. */
  bootId: string;
  /** The VIPs held (canonical text). */
  vips: string[];
  /** When the last adverts went out. */
  at: number;
  /** When the Backups stop waiting: `at` + the Master_Down_Interval they computed (the longest, priority 1). */
  until: number;
}

/**
 * How much of the Backups' wait must be left for a new process to resume, ms: its first advert
 * has to reach them before their Master_Down_Timer fires.
 */
export const RESUME_MARGIN_MS = 500;

/** The note's path for `key` in `dir` (default the runtime directory, /run/ballast). */
export function handOffPath(key: Pick<RouterKey, 'ifname' | 'family' | 'vrid'>, dir = LOCK_DIR): string {
  return join(dir, `handoff-${netnsId()}-${key.ifname}-ipv${key.family}-vrid${key.vrid}.json`);
}

/**
 * Writes the note atomically (a temporary file renamed over it), mode 0600.
 * @throws Error from the file system (the caller logs it: the next process then starts as a Backup).
 */
export function writeHandOff(note: Omit<HandOffNote, 'version' | 'bootId'>, dir = LOCK_DIR): string {
  const path = handOffPath(note, dir);
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  const full: HandOffNote = { version: 1, bootId: bootId(), ...note };
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(full)}\n`, { mode: 0o600 });
  renameSync(tmp, path);
  return path;
}

/** Why a note is not used (logged), or null when it is. */
export type HandOffVerdict = { resume: true; note: HandOffNote } | { resume: false; reason: string | null };

/**
 * Reads the note of `key`, and says whether this process resumes as the master it names: the
 * same boot, the same router (interface, family, VRID, primary address), and at least
 * {@link RESUME_MARGIN_MS} of the Backups' wait left at `now`. `reason` null: no note. A note
 * that is not used is removed; one that is stays until {@link removeHandOff} (after the election
 * started): a process killed before that leaves it to the next start, which may still resume
 * (systemd's Restart= comes back within a second). Never throws (an unreadable note is a reason).
 */
export function readHandOff(key: RouterKey, now = Date.now(), dir = LOCK_DIR): HandOffVerdict {
  const v = judge(key, now, dir);
  if (!v.resume && v.reason !== null) removeHandOff(key, dir);
  return v;
}

/** Removes the note of `key` (none: nothing to do). */
export function removeHandOff(key: Pick<RouterKey, 'ifname' | 'family' | 'vrid'>, dir = LOCK_DIR): void {
  rmSync(handOffPath(key, dir), { force: true });
}

function judge(key: RouterKey, now: number, dir: string): HandOffVerdict {
  const path = handOffPath(key, dir);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return { resume: false, reason: null };
  }
  let note: HandOffNote;
  try {
    note = JSON.parse(text) as HandOffNote;
  } catch {
    return { resume: false, reason: 'the hand-off note is not JSON' };
  }
  if (note.version !== 1 || typeof note.until !== 'number' || !Array.isArray(note.vips))
    return { resume: false, reason: 'the hand-off note is of an unknown version' };
  if (note.bootId !== bootId()) return { resume: false, reason: 'the hand-off note is from before a reboot' };
  if (note.ifname !== key.ifname || note.family !== key.family || note.vrid !== key.vrid || note.primary !== key.primary) {
    return { resume: false, reason: `the hand-off note is of another router (${note.ifname} IPv${note.family} VRID ${note.vrid} from ${note.primary})` };
  }
  if (now > note.until - RESUME_MARGIN_MS)
    return { resume: false, reason: `too late: the Backups stopped waiting ${Math.round(now - note.until)} ms ago (or will within ${RESUME_MARGIN_MS} ms)` };
  return { resume: true, note };
}

/** This process's network namespace, as the inode of /proc/self/ns/net ("0" when unreadable). */
export function netnsId(): string {
  try {
    return String(statSync('/proc/self/ns/net').ino);
  } catch {
    return '0';
  }
}

/** The kernel's boot id ("" when unreadable). */
function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}
