// Host-wide exclusive locks: flock(2) on a file, held as long as its descriptor is open (the
// kernel drops it when the process dies, however it dies). Used where the thing to protect is
// host-wide (a bpffs pin directory) and a network-namespace lock (abstract socket) is not enough.
//
// The lock file is removed by the holder on release, and that needs care: unlink(2) removes the
// name, not the inode another process may already have opened and be waiting to flock. So the
// holder unlinks while it still holds the lock, and a taker checks, once it has the lock, that
// the name still leads to the inode it locked (fstat(2) of the descriptor against stat(2) of the
// path); when it does not, the lock it got is on a removed file, and it starts over with a fresh
// open. Two takers therefore never both hold "the" lock.
#pragma once

#include <napi.h>

namespace ballast {

// lockFile(path: string): number — opens (creating, mode 0600) and flock(LOCK_EX | LOCK_NB)s
// `path`, retrying while the locked inode is no longer the one at `path` (see above); returns
// the descriptor. Throws SystemError EWOULDBLOCK "flock" when another process holds it, the
// open's/fstat's errno, or ESTALE "stat" when the file was replaced 64 times in a row.
Napi::Value LockFile(const Napi::CallbackInfo& info);

// unlockFile(fd: number, path?: string): undefined — with `path`: unlinks it when it is still the
// locked inode (never someone else's file), while the lock is held; then closes the descriptor,
// which releases the lock. An unlink failure is ignored (the lock is released all the same; a
// file left behind is harmless: flock locks live on open descriptors, not on files).
Napi::Value UnlockFile(const Napi::CallbackInfo& info);

}  // namespace ballast
