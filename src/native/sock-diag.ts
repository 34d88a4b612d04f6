/**
 * TCP sockets listed and destroyed through sock_diag (native/sock_diag.cc).
 */
import { native, type TcpSocketFilter, type TcpSocketInfo } from './addon.js';
import { checkAddress, checkCookie } from './checks.js';

function checkFilter(filter: TcpSocketFilter): void {
  if (typeof filter !== 'object' || filter === null) throw new TypeError('filter must be an object');
  const { family, dst, src, cookies } = filter;
  if (family !== 4 && family !== 6) throw new TypeError(`filter.family must be 4 or 6, got ${JSON.stringify(family)}`);
  for (const [name, end] of [
    ['dst', dst],
    ['src', src],
  ] as const) {
    if (end === undefined) continue;
    checkAddress(`filter.${name}.address`, end.address, family);
    if (end.port !== undefined && (!Number.isInteger(end.port) || end.port < 1 || end.port > 65535)) {
      throw new TypeError(`filter.${name}.port must be an integer 1..65535, got ${JSON.stringify(end.port)}`);
    }
  }
  if (cookies !== undefined) {
    if (!Array.isArray(cookies)) throw new TypeError('filter.cookies must be an array of bigint');
    cookies.forEach((c, i) => checkCookie(`filter.cookies[${i}]`, c));
  }
}

/**
 * The TCP sockets of the caller's network namespace that match `filter`, in every state that
 * has a peer except TIME_WAIT and SYN_RECV (listeners are never listed). One sock_diag dump
 * (sock_diag(7), SOCK_DIAG_BY_FAMILY with inet_diag_req_v2), synchronous, bounded by a 2 s
 * receive timeout.
 * @throws TypeError on a bad filter. @throws NativeError ETIMEDOUT "recv" when the kernel does not answer.
 */
export function listTcpSockets(filter: TcpSocketFilter): TcpSocketInfo[] {
  checkFilter(filter);
  return native().listSockets(filter);
}

/**
 * Destroys the TCP sockets {@link listTcpSockets} would list for `filter` (SOCK_DESTROY, one
 * request per socket, each naming the socket by 4-tuple and cookie): the owner's next read or
 * write fails with ECONNABORTED and the peer gets a RST. Acts in the caller's network namespace.
 * Used for sockets connected to a dead backend, and for sockets whose local address is a VIP
 * this node released.
 * @returns how many sockets were destroyed (a socket that closed meanwhile is not counted).
 * @throws TypeError on a bad filter.
 * @throws NativeError EPERM "SOCK_DESTROY" without CAP_NET_ADMIN, EOPNOTSUPP without
 *   CONFIG_INET_DIAG_DESTROY, ETIMEDOUT "recv" when the kernel does not answer within 2 s.
 */
export function destroySockets(filter: TcpSocketFilter): number {
  checkFilter(filter);
  return native().destroySockets(filter);
}
