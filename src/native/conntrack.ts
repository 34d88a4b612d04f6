/**
 * The VIP data plane's conntrack entries, read and reset through ctnetlink (native/conntrack_dump.cc).
 */
import { createError } from '../errors.js';
import { addonPath, native, type ConntrackVipFlows, type ConntrackVipQuery } from './addon.js';

/**
 * The VIP data plane's established flows from conntrack, per backend: one ctnetlink dump
 * (IPCTNL_MSG_CT_GET, NLM_F_DUMP, this family only) in the caller's network namespace, matched
 * in the addon (TCP, original destination = a VIP and `port`, status DST_NAT, TCP state
 * ESTABLISHED) and aggregated by reply source. With `query.reset`, the oldest `count` flows of
 * that backend are then deleted (IPCTNL_MSG_CT_DELETE naming tuple, id and zone), oldest by
 * conntrack's start timestamp (entries without one first, ties by id), and their original
 * tuples returned (`reset.flows`); `reset.dryRun` only chooses, `reset.only` narrows the choice
 * to given flows. Synchronous: about
 * 10 ms of CPU per 2,000 entries (measured; most of it the kernel building the dump); every receive is bounded by a 2 s timeout.
 * @throws TypeError on a bad query.
 * @throws NativeError EPERM without CAP_NET_ADMIN, EPROTONOSUPPORT/ENOENT without ctnetlink
 *   (module nf_conntrack_netlink), ETIMEDOUT "recv" when the kernel does not answer within 2 s.
 * @throws BallastError BALLAST_E_ADDON_MISSING when the addon lacks the function (rebuild it).
 */
export function conntrackVipFlows(query: ConntrackVipQuery): ConntrackVipFlows {
  const a = native();
  if (typeof a.conntrackVipFlows !== 'function') {
    throw createError('BALLAST_E_ADDON_MISSING', `${addonPath()} has no conntrackVipFlows: rebuild it with \`npm run build:native\``);
  }
  return a.conntrackVipFlows(query);
}
