// Host-wide exclusive locks: flock(2) on a file, held as long as its descriptor is open (the
// kernel drops it when the process dies, however it dies). Used where the thing to protect is
// host-wide (a bpffs pin directory) and a network-namespace lock (abstract socket) is not enough.
#pragma once

#include <napi.h>

namespace ballast {

// lockFile(path: string): number — opens (creating, mode 0600) and flock(LOCK_EX | LOCK_NB)s
// `path`; returns the descriptor. Throws SystemError EWOULDBLOCK "flock" when another process
// holds it, or the open's errno.
Napi::Value LockFile(const Napi::CallbackInfo& info);

// unlockFile(fd: number): undefined — closes the descriptor, which releases the lock.
Napi::Value UnlockFile(const Napi::CallbackInfo& info);

}  // namespace ballast
