/**
 * The interfaces of this network namespace and their addresses, listed through rtnetlink
 * (vip/netlink.ts): what preflight resolves `interface` against and `ballast check` reports on.
 */
import { createError } from '../errors.js';
import { listInterfaces, openRtnl, type InterfaceInfo } from '../vip/netlink.js';

/** Every interface of this network namespace with its addresses. @throws BallastError BALLAST_E_NETLINK. */
export async function listAllInterfaces(): Promise<InterfaceInfo[]> {
  const rt = openRtnl();
  try {
    return await listInterfaces(rt);
  } catch (err) {
    throw createError('BALLAST_E_NETLINK', `cannot list interfaces through rtnetlink: ${(err as Error).message}`, { cause: err });
  } finally {
    rt.close();
  }
}
