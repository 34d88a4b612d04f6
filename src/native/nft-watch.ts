/**
 * The kernel's nftables change events through the addon (native/nft_watch.cc).
 */
import { native, type NftChangeBatch, type NftWatchStats, type RawNftWatch } from './addon.js';

/**
 * The kernel's nftables change events, as `nft monitor` sees them but without a child process:
 * a NETLINK_NETFILTER socket (libmnl) subscribed to the multicast group NFNLGRP_NFTABLES, read
 * through libuv on the event loop of the thread that opened it. Every committed transaction
 * that touches a table, chain, rule, set, element, object or flowtable produces notifications;
 * each wake-up calls `onChange` once with the tables they named. Only the network namespace the
 * thread is in when it opens the watch is seen (netlink sockets belong to their namespace).
 * Nothing runs while nothing changes. An open watch keeps the event loop alive unless opened
 * with `keepAlive: false`.
 */
export class NftWatch {
  readonly #raw: RawNftWatch;

  private constructor(raw: RawNftWatch) {
    this.#raw = raw;
  }

  /**
   * Opens the socket and starts receiving at once.
   * @param onChange called once per wake-up with what arrived ({@link NftChangeBatch}); a call
   *   with `lost: true` may name no table. An exception it throws is an uncaught exception.
   * @param opts.keepAlive whether the open watch keeps the event loop alive (default true; false
   *   is uv_unref: the process may exit while it is open).
   * @throws TypeError when onChange is not a function.
   * @throws NativeError EPERM from setsockopt(NETLINK_ADD_MEMBERSHIP) without CAP_NET_ADMIN;
   *   EPROTONOSUPPORT from socket() when nfnetlink is not available.
   * @throws BallastError BALLAST_E_ADDON_MISSING when the addon is not built.
   */
  static open(onChange: (batch: NftChangeBatch) => void, opts: { keepAlive?: boolean } = {}): NftWatch {
    if (typeof onChange !== 'function') throw new TypeError('onChange must be a function');
    const { NftWatch: Raw } = native();
    return new NftWatch(new Raw(onChange, opts.keepAlive ?? true));
  }

  /** Counters since opening ({@link NftWatchStats}), read from the addon; still readable after close. */
  get stats(): NftWatchStats {
    return this.#raw.stats();
  }

  /** Stops receiving and closes the socket. Idempotent; never throws. */
  close(): void {
    this.#raw.close();
  }
}
