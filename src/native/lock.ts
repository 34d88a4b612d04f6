/**
 * A host-wide lock file through the addon (flock(2), native/addon.cc).
 */
import { native } from './addon.js';

/** A held {@link lockFile} lock; release() removes the file and closes the descriptor (idempotent). */
export interface FileLock {
  readonly path: string;
  release(): void;
}

/**
 * Takes a host-wide exclusive lock: open(2) (creating the file, mode 0600) and
 * flock(LOCK_EX | LOCK_NB) (flock(2)), then checks that `path` still names the inode it locked
 * (fstat(2) against stat(2)) and starts over when not: the previous holder removed the file while
 * this call was between open and flock. release() unlinks the file while still holding the lock
 * (only when it is still the locked inode), then closes the descriptor. The kernel releases the
 * lock when the process dies, however it dies; a killed holder leaves the (empty) file, which is
 * harmless: the next taker locks it as usual.
 * @throws NativeError EAGAIN (= EWOULDBLOCK) "flock" while another process holds it; the open's errno
 *   (ENOENT when the directory is missing, EACCES) otherwise; ESTALE "stat" when the file was
 *   replaced on each of 64 attempts.
 */
export function lockFile(path: string): FileLock {
  if (typeof path !== 'string' || !path.startsWith('/')) throw new TypeError(`path must be an absolute path, got ${JSON.stringify(path)}`);
  const addon = native();
  let fd: number | null = addon.lockFile(path);
  return {
    path,
    release() {
      if (fd !== null) addon.unlockFile(fd, path);
      fd = null;
    },
  };
}
