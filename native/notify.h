// The sd_notify(3) protocol's transport: one datagram to the service manager's socket
// ($NOTIFY_SOCKET, systemd.exec(5) "Environment variables set or propagated by the service
// manager"). Node has no AF_UNIX datagram sockets, hence this.
#pragma once

#include <napi.h>

namespace ballast {

// notify(socketPath: string, message: string): undefined — socket(AF_UNIX, SOCK_DGRAM) and one
// sendto(2) of `message` to `socketPath`, then close. A path starting with '@' is an abstract
// socket name (the '@' becomes the leading NUL byte, unix(7)); any other path must be absolute.
// Never blocks: MSG_DONTWAIT, so a full receive queue is EAGAIN, not a stall of the event loop.
// Throws TypeError for a non-string or empty argument; SystemError EAFNOSUPPORT "sendto" for
// an address that is neither (e.g. systemd's "vsock:"), ENAMETOOLONG "sendto" for one longer
// than sun_path holds, and the errno of socket(2) / sendto(2) otherwise (ENOENT, ECONNREFUSED,
// EAGAIN, EPERM, ...).
Napi::Value Notify(const Napi::CallbackInfo& info);

}  // namespace ballast
