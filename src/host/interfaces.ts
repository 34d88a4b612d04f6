/**
 * The interfaces of this network namespace and their addresses, listed through rtnetlink
 * (vip/netlink.ts): what preflight resolves `interface` against and `ballast check` reports on.
 */
import type { Config } from '../config/index.js';
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

/**
 * mode: bgp's bgp.interface, where the VIPs are bound.
 * @param all every interface of the namespace (rtnetlink).
 * @throws BallastError BALLAST_E_INTERFACE_NOT_FOUND (exit 2) when there is none of that name.
 */
export function bgpInterface(config: Config, all: readonly InterfaceInfo[]): InterfaceInfo {
  const name = config.bgp!.interface;
  const iface = all.find((i) => i.ifname === name);
  if (!iface)
    throw createError(
      'BALLAST_E_INTERFACE_NOT_FOUND',
      `bgp.interface: there is no interface ${name} (ballast binds the VIPs on it; lo, or a dummy interface you created)`,
    );
  return iface;
}
