/**
 * The one typed door to the native addon (build/Release/ballast.node, sources in native/) and to
 * the BPF object it loads (build/Release/ballast_sock_lb.bpf.o, sources in bpf/). Everything
 * outside src/native/ imports the addon through this file.
 *
 * The addon's shape is declared once (native/addon.ts, `Addon`), which also loads it; each addon
 * family has its own module of typed wrappers, which check their arguments before crossing
 * (TypeError naming the argument; the C++ side checks again):
 *
 *   native/addon.ts          the shape, the loader, NativeError (errno name, errno, syscall)
 *   native/vrrp-socket.ts    VrrpSocket: raw IP protocol 112 socket and its advert pacer
 *   native/packet-socket.ts  PacketSocket: AF_PACKET frames (gratuitous ARP, unsolicited NA)
 *   native/sock-lb.ts        SockLb: the cgroup connect()/getpeername() load balancer; netns cookie
 *   native/nft-watch.ts      NftWatch: nftables change events
 *   native/sock-diag.ts      listTcpSockets, destroySockets (sock_diag)
 *   native/lock.ts           lockFile (flock)
 *   native/notify.ts         notify (sd_notify)
 *   native/memory.ts         releaseMemory (malloc_trim, read-only file pages)
 *   native/conntrack.ts      conntrackVipFlows (ctnetlink)
 *   native/tcp-probe.ts      sendTcpProbes, tcpProbePacket (raw IPPROTO_RAW socket)
 *
 * Every failure of a system call arrives as a NativeError; branch on `code`, never on `message`.
 */
export { addonPath, isNativeError, packageRoot } from './native/addon.js';
export type {
  AdvertPacerStats,
  CgroupHookPrograms,
  ConntrackVipFlows,
  ConntrackVipQuery,
  NativeError,
  NftChangeBatch,
  NftWatchStats,
  ReceivedFrame,
  ReceivedPacket,
  SockAddress,
  SockLbEntry,
  SockLbReverse,
  TcpSocketFilter,
  TcpProbeBatch,
  TcpProbeResult,
  TcpProbeSegment,
  TcpSocketInfo,
  VrrpSocketStats,
} from './native/addon.js';
export * from './native/vrrp-socket.js';
export * from './native/packet-socket.js';
export * from './native/sock-lb.js';
export * from './native/nft-watch.js';
export * from './native/sock-diag.js';
export * from './native/lock.js';
export * from './native/notify.js';
export * from './native/memory.js';
export * from './native/conntrack.js';
export * from './native/tcp-probe.js';
