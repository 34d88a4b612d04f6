/**
 * The OS edge of the election engine: every effect the engine has on the system, and every
 * input the system gives it, as one object of small functions ({@link VrrpEdge}), shaped like
 * `EbpfSys` in dataplane/ebpf.ts. The engine is unit-tested against a fake edge
 * (test/unit/engine.test.ts); {@link openNativeEdge} is the real one (raw VRRP socket, packet
 * socket, rtnetlink, sock_diag), which the integration tests drive.
 */
import { PacketSocket, VrrpSocket, destroySockets, type AdvertPacerStats, type PacedAdvert } from '../native.js';
import { addVip, openRtnl, removeVips, vipAddresses, type PrefixedAddress, type RtnlSocket } from '../vip/netlink.js';
import type { AddressFamily } from '../net/address.js';
import type { ReceivedAdvert } from './filters.js';

/** What the engine does to the system. Each function does one thing and throws what its syscall throws. */
export interface VrrpEdge {
  /**
   * Sends one IP payload (an encoded advert, signed when auth is on) to `destination` on the
   * raw IP protocol 112 socket (TTL / hop limit 255, RFC 9568 §5.1.1.3).
   * @throws Error with `code` (errno name) and `syscall`.
   */
  sendAdvert(payload: Buffer, destination: string): void;
  /** Sends one link-layer frame (gratuitous ARP / unsolicited NA) on the interface. @throws Error with `code`. */
  sendFrame(frame: Buffer): void;
  /**
   * Adds (or, when present, renews) each VIP as /32 or /128 with this valid lifetime in seconds
   * (0 = permanent), in order. @throws Error with `code` (errno name) when the kernel refuses.
   */
  addVips(vips: readonly string[], lifetimeS: number): Promise<void>;
  /** Removes every instance of each VIP, whatever its prefix length; returns what was removed. @throws Error with `code`. */
  removeVips(vips: readonly string[]): Promise<PrefixedAddress[]>;
  /** Which of `vips` are on the interface now (any prefix length), canonical text. */
  vipsPresent(vips: readonly string[]): Promise<string[]>;
  /** Resets the TCP sockets whose local address is `vip` (sock_diag SOCK_DESTROY); returns how many. @throws Error with `code`. */
  destroySockets(vip: string): number;
  /** Whether the interface still exists (RTM_GETLINK); null when that cannot be told now. */
  interfaceExists(): Promise<boolean | null>;
  /**
   * Hands in (inputs.packet) the adverts already waiting in the VRRP socket, now, before this
   * call returns. Optional: an edge without it delivers them at the loop's next poll only.
   */
  receivePending?(): void;
  /**
   * Starts the advert pacer (native/advert_pacer.h: a thread that sends an Active's adverts
   * while the engine's thread is stalled), at SCHED_FIFO `realtimePriority` when > 0; with
   * `auth` it signs them, sequence numbers from the counter {@link VrrpEdge.takeSequence} shares.
   * Optional: an edge without a pacer sends only what the engine sends.
   * @returns null, or the errno name that refused SCHED_FIFO (the pacer then runs normally).
   * @throws Error with `code` when no thread can be created.
   */
  startPacer?(realtimePriority: number, auth: { key: Buffer; firstSequence: bigint } | null): string | null;
  /** The adverts the pacer repeats for a silent engine (see VrrpSocket.pace), or null: none. */
  pace?(adverts: readonly PacedAdvert[] | null, intervalMs: number, holdMs: number): void;
  /** The next sequence number of a signed advert, taken from the counter the pacer shares. */
  takeSequence?(): bigint;
  /** The pacer's counters. */
  pacerStats?(): AdvertPacerStats;
  /** Received datagrams the socket dropped for a malformed IPv4 header, since it opened. */
  malformedIpHeader(): number;
  /** Closes every socket. Idempotent. */
  close(): void;
}

/** What the system tells the engine. Called on the engine's thread, from the event loop. */
export interface EdgeInputs {
  /** A VRRP datagram arrived. */
  packet(p: ReceivedAdvert): void;
  /** A socket error while receiving. */
  socketError(err: Error & { code?: string; syscall?: string }): void;
  /** A link message for our interface (RTNLGRP_LINK); `running` = IFF_UP and IFF_RUNNING. */
  link(running: boolean): void;
  /** An address on our interface changed (RTNLGRP_IPV4_IFADDR / RTNLGRP_IPV6_IFADDR), by anyone. */
  addressesChanged(): void;
}

/** Where the edge works. */
export interface EdgeOptions {
  family: AddressFamily;
  ifname: string;
  ifindex: number;
  /** Source of our adverts. */
  primaryAddress: string;
  /** Multicast: join 224.0.0.18 / ff02::12. */
  joinGroup: boolean;
}

/** Opens an edge; the engine calls it once, at start. */
export type OpenEdge = (opts: EdgeOptions, inputs: EdgeInputs) => Promise<VrrpEdge>;

/**
 * The real edge: opens rtnetlink (one socket for requests, one for notifications), the packet
 * socket and the VRRP socket (in that order), joins the group, and follows the interface through
 * rtnetlink notifications (rtnetlink(7)).
 * @throws Error with `code` (errno name) and `syscall` when a socket cannot be opened; what was
 *   opened is closed again.
 */
export const openNativeEdge: OpenEdge = async (o, inputs) => {
  let rtnl: RtnlSocket | null = null;
  let events: RtnlSocket | null = null;
  let packets: PacketSocket | null = null;
  let socket: VrrpSocket | null = null;
  const close = (): void => {
    socket?.close();
    packets?.close();
    events?.close();
    rtnl?.close();
    socket = packets = events = rtnl = null;
  };
  try {
    // two rtnetlink sockets: requests on one, notifications on the other — the netlink package
    // ends a multipart reply at the first other message on its socket, so a notification that
    // arrived during a dump failed it ("Multipart message not terminated properly"; an agent the
    // chaos soak restarted after SIGKILL exited 1 on it, at the edge's first dump)
    rtnl = openRtnl();
    events = openRtnl();
    packets = PacketSocket.open(o.ifname);
    socket = VrrpSocket.open(
      { family: o.family, ifname: o.ifname, sourceAddress: o.primaryAddress },
      (p) => inputs.packet(p),
      (err) => inputs.socketError(err),
    );
    if (o.joinGroup) socket.joinGroup();
  } catch (err) {
    close();
    throw err;
  }
  const raw = events.raw;
  raw.addMembership('LINK');
  raw.addMembership(o.family === 4 ? 'IPV4_IFADDR' : 'IPV6_IFADDR');
  raw.on('message', (msgs) => {
    for (const m of msgs) {
      if (m.kind === 'address' && m.data.index === o.ifindex) inputs.addressesChanged();
      else if (m.kind === 'link' && m.data.index === o.ifindex) inputs.link(Boolean(m.data.flags?.up && m.data.flags?.running));
    }
  });
  const rt = (): RtnlSocket => {
    if (!rtnl) throw Object.assign(new Error('the rtnetlink socket is closed'), { code: 'EBADF' });
    return rtnl;
  };
  return {
    sendAdvert: (payload, destination) => {
      if (!socket) throw Object.assign(new Error('the VRRP socket is closed'), { code: 'EBADF' });
      socket.send(payload, destination);
    },
    sendFrame: (frame) => {
      if (!packets) throw Object.assign(new Error('the packet socket is closed'), { code: 'EBADF' });
      packets.send(frame);
    },
    addVips: async (vips, lifetimeS) => {
      for (const vip of vips) await addVip(rt(), o.ifindex, vip, lifetimeS);
    },
    removeVips: (vips) => removeVips(rt(), o.ifindex, vips),
    vipsPresent: async (vips) => [...new Set((await vipAddresses(rt(), o.ifindex, vips)).map((a) => a.address))],
    destroySockets: (vip) => destroySockets({ family: o.family, src: { address: vip } }),
    interfaceExists: async () => {
      const links = await rtnl?.getLinks().catch(() => null);
      return links ? links.some((l) => l.data.index === o.ifindex) : null;
    },
    receivePending: () => socket?.receivePending(),
    startPacer: (realtimePriority, auth) => {
      if (!socket) throw Object.assign(new Error('the VRRP socket is closed'), { code: 'EBADF' });
      if (auth) socket.setAuth(auth.key, auth.firstSequence);
      return socket.startPacer(realtimePriority);
    },
    pace: (adverts, intervalMs, holdMs) => socket?.pace(adverts, intervalMs, holdMs),
    takeSequence: () => {
      if (!socket) throw Object.assign(new Error('the VRRP socket is closed'), { code: 'EBADF' });
      return socket.takeSequence();
    },
    pacerStats: () => socket?.stats().pacer ?? { sent: 0, sendErrors: 0, lastErrno: 0, covers: 0, holds: 0, longestSilenceMs: 0 },
    malformedIpHeader: () => socket?.stats().malformedIpHeader ?? 0,
    close,
  };
};
