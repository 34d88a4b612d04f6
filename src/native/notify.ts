/**
 * sd_notify(3) through the addon (native/addon.cc): one datagram to the service manager.
 */
import { native } from './addon.js';

/**
 * Sends one sd_notify(3) message to the service manager: a single AF_UNIX SOCK_DGRAM datagram
 * (sendto(2), MSG_DONTWAIT: never blocks) to `socketPath`, by default $NOTIFY_SOCKET as systemd
 * sets it for a Type=notify service (systemd.exec(5)). A path starting with '@' is an abstract
 * socket name (unix(7)); any other must be absolute. `message` is newline-separated
 * `KEY=value` assignments, e.g. "READY=1\nSTATUS=MASTER for 10.0.0.100" (sd_notify(3) lists the
 * keys). The credentials systemd checks for NotifyAccess=main are attached by the kernel.
 * @param socketPath the socket; undefined or "" (no service manager listening): nothing is sent.
 * @returns true when the datagram was sent, false when there is no socket to send it to.
 * @throws TypeError when `message` is not a non-empty string without NUL bytes.
 * @throws NativeError EAFNOSUPPORT "sendto" for an address that is neither a path nor '@' (such as
 *   systemd's "vsock:…", not supported), ENAMETOOLONG "sendto" for one longer than sun_path holds,
 *   ENOENT / ECONNREFUSED "sendto" when nothing listens there, EAGAIN "sendto" when the manager's
 *   queue is full, EPERM / EACCES without permission on the socket.
 */
export function notify(message: string, socketPath: string | undefined = process.env.NOTIFY_SOCKET): boolean {
  if (typeof message !== 'string' || message.length === 0 || message.includes('\0'))
    throw new TypeError(`message must be a non-empty string without NUL bytes, got ${JSON.stringify(message)}`);
  if (socketPath !== undefined && typeof socketPath !== 'string') throw new TypeError('socketPath must be a string');
  if (socketPath === undefined || socketPath === '') return false;
  native().notify(socketPath, message);
  return true;
}
