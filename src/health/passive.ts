/**
 * Passive detection: the kernel's own signals say a backend is dead long before `fall` active
 * checks could. A userspace proxy retries a refused connection on another server; a kernel DNAT
 * cannot, so ballast watches the connections it DNATed, through conntrack events read straight
 * from ctnetlink (a NETLINK_NETFILTER socket subscribed to the conntrack groups; no child process,
 * so nothing can outlive the agent):
 *
 *   NEW      SYN_SENT  orig dst = VIP:port, reply src = backend   → a connection was sent to backend
 *   UPDATE   SYN_RECV / ESTABLISHED                               → the backend answered: alive
 *   UPDATE   no TCP state, CTA_STATUS has IPS_SEEN_REPLY          → the backend's kernel answered the
 *            SYN with a plain ACK: a live socket on the same tuple (a connection whose entry was
 *            flushed or reset, its server side never told, the client port reused): alive
 *   DESTROY  (or UPDATE CLOSE) before any answer                  → refused (RST to the SYN): dead
 *            (a DESTROY still in SYN_SENT is a deletion, e.g. `conntrack -F`: no verdict)
 *   still SYN_SENT after `synTimeoutMs`, and no SYN to that backend → no answer at all: dead
 *   sent since was answered either
 *
 * A live apiserver's kernel answers a SYN within a round trip (the application is not
 * involved), so on a LAN a few hundred ms without a SYN-ACK means the node or its port is gone.
 * The tracker below is pure (events and a clock in, verdicts out); {@link parseCtEvents} turns
 * datagrams into events; {@link watchConntrack} feeds the tracker from the socket.
 *
 * One ctnetlink event (linux/netfilter/nfnetlink.h, nfnetlink_conntrack.h), host byte order
 * except where marked:
 *
 *   nlmsghdr   len u32 | type u16 = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_NEW (0) / _DELETE (2)
 *              | flags u16 (NEW with NLM_F_CREATE|NLM_F_EXCL = a new entry, else an update) | seq | pid
 *   nfgenmsg   family u8 (AF_INET 2 / AF_INET6 10) | version u8 | res_id be16
 *   nlattrs    len u16 | type u16 (low 14 bits; NLA_F_NESTED 0x8000) | value, padded to 4:
 *     CTA_TUPLE_ORIG 1, CTA_TUPLE_REPLY 2 (nested): CTA_TUPLE_IP 1 { CTA_IP_V4_SRC 1, _V4_DST 2,
 *         _V6_SRC 3, _V6_DST 4 } · CTA_TUPLE_PROTO 2 { CTA_PROTO_NUM 1 u8, _SRC_PORT 2 be16, _DST_PORT 3 be16 }
 *     CTA_STATUS 3 be32 · CTA_PROTOINFO 4 { CTA_PROTOINFO_TCP 1 { CTA_PROTOINFO_TCP_STATE 1 u8 } }
 *     CTA_ID 12 be32
 */
import { createRequire } from 'node:module';
import { bytesToAddress, canonicalAddress } from '../net/address.js';
import { formatHostPort, type HostPort } from '../net/hostport.js';

/** One conntrack event, parsed (only what passive detection needs). */
export interface FlowEvent {
  type: 'NEW' | 'UPDATE' | 'DESTROY';
  /** Conntrack id (CTA_ID), decimal. */
  id: string;
  /** TCP state (SYN_SENT, SYN_RECV, ESTABLISHED, CLOSE, …), or null when the event carries none (CTA_PROTOINFO absent). */
  state: string | null;
  origDst: string;
  origDport: number;
  replySrc: string;
  replySport: number;
  /** CTA_STATUS has IPS_SEEN_REPLY (a packet of the reply direction was seen); set only when true. */
  seenReply?: true;
}

/** NETLINK_NETFILTER (netlink(7)). */
export const NETLINK_NETFILTER = 12;
/** enum nfnetlink_groups: NFNLGRP_CONNTRACK_NEW, _UPDATE, _DESTROY. */
export const CONNTRACK_GROUPS = [1, 2, 3] as const;

const NFNL_SUBSYS_CTNETLINK = 1;
const IPCTNL_MSG_CT_NEW = 0;
const IPCTNL_MSG_CT_DELETE = 2;
const NLM_F_EXCL = 0x200;
const NLM_F_CREATE = 0x400;
const NLMSG_HDRLEN = 16;
const NFGENMSG_LEN = 4;
const NLA_TYPE_MASK = 0x3fff;
const CTA = { TUPLE_ORIG: 1, TUPLE_REPLY: 2, STATUS: 3, PROTOINFO: 4, ID: 12 } as const;
/** enum ip_conntrack_status (linux/netfilter/nf_conntrack_common.h): IPS_SEEN_REPLY. */
const IPS_SEEN_REPLY = 1 << 1;
const CTA_TUPLE = { IP: 1, PROTO: 2 } as const;
const CTA_IP = { V4_SRC: 1, V4_DST: 2, V6_SRC: 3, V6_DST: 4 } as const;
const CTA_PROTO = { NUM: 1, SRC_PORT: 2, DST_PORT: 3 } as const;
const IPPROTO_TCP = 6;
/** enum tcp_conntrack (linux/netfilter/nf_conntrack_tcp.h), by value. */
const TCP_STATES = ['NONE', 'SYN_SENT', 'SYN_RECV', 'ESTABLISHED', 'FIN_WAIT', 'CLOSE_WAIT', 'LAST_ACK', 'TIME_WAIT', 'CLOSE', 'SYN_SENT2'] as const;

/** The attributes of one nlattr stream, by type (the first of each type wins). Malformed tails are ignored. */
function attrs(buf: Buffer): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  let off = 0;
  while (off + 4 <= buf.length) {
    const len = buf.readUInt16LE(off);
    const type = buf.readUInt16LE(off + 2) & NLA_TYPE_MASK;
    if (len < 4 || off + len > buf.length) break;
    if (!out.has(type)) out.set(type, buf.subarray(off + 4, off + len));
    off += (len + 3) & ~3;
  }
  return out;
}

/** A tuple's addresses and ports, when it is TCP. */
function tuple(buf: Buffer | undefined): { src: string; dst: string; sport: number; dport: number } | null {
  if (buf === undefined) return null;
  const t = attrs(buf);
  const ip = t.get(CTA_TUPLE.IP);
  const proto = t.get(CTA_TUPLE.PROTO);
  if (ip === undefined || proto === undefined) return null;
  const a = attrs(ip);
  const p = attrs(proto);
  const src = a.get(CTA_IP.V4_SRC) ?? a.get(CTA_IP.V6_SRC);
  const dst = a.get(CTA_IP.V4_DST) ?? a.get(CTA_IP.V6_DST);
  const num = p.get(CTA_PROTO.NUM);
  const sport = p.get(CTA_PROTO.SRC_PORT);
  const dport = p.get(CTA_PROTO.DST_PORT);
  if (src === undefined || dst === undefined || num?.length !== 1 || num[0] !== IPPROTO_TCP) return null;
  if (sport?.length !== 2 || dport?.length !== 2 || (src.length !== 4 && src.length !== 16) || src.length !== dst.length) return null;
  return { src: bytesToAddress(src), dst: bytesToAddress(dst), sport: sport.readUInt16BE(0), dport: dport.readUInt16BE(0) };
}

/** CTA_PROTOINFO → CTA_PROTOINFO_TCP → CTA_PROTOINFO_TCP_STATE, as a name. */
function tcpState(buf: Buffer | undefined): string | null {
  if (buf === undefined) return null;
  const tcp = attrs(buf).get(1);
  const st = tcp === undefined ? undefined : attrs(tcp).get(1);
  if (st?.length !== 1) return null;
  return TCP_STATES[st[0]!] ?? null;
}

/**
 * Parses one datagram read from a NETLINK_NETFILTER socket subscribed to the conntrack groups
 * (the layout is in the file comment).
 * @returns the TCP events in it, in order; anything else (other subsystems, UDP, NLMSG_ERROR,
 *   NLMSG_DONE, truncated or malformed messages) is skipped, never thrown.
 */
export function parseCtEvents(datagram: Buffer): FlowEvent[] {
  const out: FlowEvent[] = [];
  let off = 0;
  while (off + NLMSG_HDRLEN <= datagram.length) {
    const len = datagram.readUInt32LE(off);
    if (len < NLMSG_HDRLEN || off + len > datagram.length) break;
    const type = datagram.readUInt16LE(off + 4);
    const flags = datagram.readUInt16LE(off + 6);
    const msg = datagram.subarray(off + NLMSG_HDRLEN, off + len);
    off += (len + 3) & ~3;
    if (type >> 8 !== NFNL_SUBSYS_CTNETLINK || msg.length < NFGENMSG_LEN) continue;
    const kind = type & 0xff;
    if (kind !== IPCTNL_MSG_CT_NEW && kind !== IPCTNL_MSG_CT_DELETE) continue;
    const a = attrs(msg.subarray(NFGENMSG_LEN));
    const orig = tuple(a.get(CTA.TUPLE_ORIG));
    const reply = tuple(a.get(CTA.TUPLE_REPLY));
    const id = a.get(CTA.ID);
    if (orig === null || reply === null || id?.length !== 4) continue;
    const status = a.get(CTA.STATUS);
    const seenReply = status?.length === 4 && (status.readUInt32BE(0) & IPS_SEEN_REPLY) !== 0;
    out.push({
      type: kind === IPCTNL_MSG_CT_DELETE ? 'DESTROY' : flags & (NLM_F_CREATE | NLM_F_EXCL) ? 'NEW' : 'UPDATE',
      id: String(id.readUInt32BE(0)),
      state: tcpState(a.get(CTA.PROTOINFO)),
      origDst: orig.dst,
      origDport: orig.dport,
      replySrc: reply.src,
      replySport: reply.sport,
      ...(seenReply ? { seenReply: true as const } : {}),
    });
  }
  return out;
}

/**
 * A verdict on one backend: what was seen (a RST to the SYN, no answer within synTimeoutMs, or
 * an answer) and its message (`refused`, `unanswered SYN`, `answered`).
 */
export type PassiveVerdict =
  | { backend: HostPort; alive: true; signal: 'answered'; reason: string }
  | { backend: HostPort; alive: false; signal: 'refused' | 'unanswered'; reason: string };

const VERDICT_TEXT = { refused: 'refused', unanswered: 'unanswered SYN', answered: 'answered' } as const;

/** A {@link PassiveVerdict} of `signal` for `backend`. */
function verdict(backend: HostPort, signal: PassiveVerdict['signal']): PassiveVerdict {
  const reason = VERDICT_TEXT[signal];
  return signal === 'answered' ? { backend, alive: true, signal, reason } : { backend, alive: false, signal, reason };
}

/** The HostPort of a canonical address and port. */
function endpoint(host: string, port: number): HostPort {
  return Object.freeze({ host, port, family: host.includes(':') ? 6 : 4 });
}

/**
 * Follows connections to the VIPs' port and judges backends (pure: times are monotonic ms
 * passed in). Flows to a VIP that were not DNATed (reply source = original destination: a local
 * socket) are ignored. With `direct` backends, flows whose original destination is one of them
 * are followed too: what the node-local endpoint's eBPF connect() rewrite produces (the rewrite
 * happens before the first packet, so conntrack sees the backend itself as the destination).
 */
export class FlowTracker {
  private readonly vips: Set<string>;
  /** followed backends by host:port */
  private readonly direct: Set<string>;
  /** conntrack id → the backend, when its SYN was seen and whether it came to a VIP, for flows not yet answered. */
  private readonly pending = new Map<string, { backend: HostPort; since: number; viaVip: boolean }>();
  /** host:port → when its latest answer was seen (ms): a backend that answers is not silent. */
  private readonly lastAnswer = new Map<string, number>();

  /**
   * @param vips the VIP addresses; @param port the VIP port;
   * @param synTimeoutMs how long a SYN may go unanswered before its backend is judged dead, ms.
   * @param direct backends followed directly (the eBPF local endpoint's rewritten connects).
   * @param vipsHeldSince since when this node holds the VIPs (ms, the clock of `now`), null while
   *   it does not; default: always. A SYN to a VIP seen before that + synTimeoutMs is never held
   *   against its backend: the backend answers the VIP (the flow is source-NATed to it, or
   *   masqueraded by a holder that is this node only from then on), and that answer reaches this
   *   node only once the VIPs are here and the backends' neighbour entries name it (its gratuitous
   *   ARP / unsolicited NA). A new holder would otherwise judge every backend dead from the SYNs
   *   it DNATed around its takeover, lower its priority and give the VIP away again.
   */
  constructor(
    vips: readonly string[],
    private readonly port: number,
    private readonly synTimeoutMs: number,
    direct: readonly Pick<HostPort, 'host' | 'port'>[] = [],
    private readonly vipsHeldSince: () => number | null = () => Number.NEGATIVE_INFINITY,
  ) {
    this.vips = new Set(vips.map(canonicalAddress));
    this.direct = new Set(direct.map(formatHostPort));
  }

  /** Feeds one event; returns the verdicts it implies (often none). */
  onEvent(e: FlowEvent, now: number): PassiveVerdict[] {
    const origDst = canonicalAddress(e.origDst);
    const replySrc = canonicalAddress(e.replySrc);
    const toVip = e.origDport === this.port && this.vips.has(origDst) && replySrc !== origDst;
    if (!toVip && !this.direct.has(formatHostPort({ host: origDst, port: e.origDport }))) return [];
    if (e.type === 'NEW') {
      if (e.state === 'SYN_SENT') this.pending.set(e.id, { backend: endpoint(replySrc, e.replySport), since: now, viaVip: toVip });
      return [];
    }
    const p = this.pending.get(e.id);
    if (!p) return [];
    if (e.type === 'UPDATE' && e.state === null) {
      // the reply direction seen with no state change: the backend's kernel answered the SYN with
      // a plain ACK (conntrack ignores it in SYN_SENT), which a live socket on the same tuple
      // does: one whose conntrack entry was flushed or reset while its server side was never
      // told, when the client reuses the port. The client's RST to that ACK then moves the
      // flow to CLOSE, which is no refusal (judged one, a `conntrack -F` on the holder would make
      // its own live apiserver dead and reset its connections)
      if (!e.seenReply) return []; // a mark or another status bit: nothing
      this.pending.delete(e.id);
      this.lastAnswer.set(formatHostPort(p.backend), now);
      return [verdict(p.backend, 'answered')];
    }
    this.pending.delete(e.id);
    // DESTROY of an entry still in SYN_SENT: it was deleted (`conntrack -F`, an agent resetting a
    // dead backend's flows), not refused: a RST to the SYN moves it to CLOSE first (else a flush
    // on the holder would judge every backend with a SYN in flight dead)
    if (e.type === 'DESTROY' && e.state !== null && e.state !== 'CLOSE') return [];
    // SYN_RECV / ESTABLISHED: the backend's kernel answered the SYN
    if (e.type === 'UPDATE' && e.state !== 'CLOSE') {
      this.lastAnswer.set(formatHostPort(p.backend), now);
      return [verdict(p.backend, 'answered')];
    }
    // DESTROY, or CLOSE, before any answer: a RST to the SYN
    return [verdict(p.backend, 'refused')];
  }

  /**
   * Judges SYNs unanswered for longer than synTimeoutMs; call it periodically. A SYN is held
   * against its backend only when no SYN to that backend seen at or after it was answered: a live
   * listener whose accept queue is full drops SYNs without a word (the client retransmits), which
   * is what a reconnect storm does to the survivors of a node death — judging them dead then would
   * reset their connections and feed the storm.
   */
  tick(now: number): PassiveVerdict[] {
    const out: PassiveVerdict[] = [];
    const judged = new Set<string>();
    for (const [id, p] of this.pending) {
      if (now - p.since < this.synTimeoutMs) continue;
      this.pending.delete(id);
      if (p.viaVip) {
        const held = this.vipsHeldSince();
        if (held === null || p.since < held + this.synTimeoutMs) continue;
      }
      const key = formatHostPort(p.backend);
      if ((this.lastAnswer.get(key) ?? -Infinity) >= p.since || judged.has(key)) continue;
      judged.add(key);
      out.push(verdict(p.backend, 'unanswered'));
    }
    return out;
  }

  /** Flows waiting for an answer (for tests and /status). */
  get pendingCount(): number {
    return this.pending.size;
  }
}

/** The part of the `netlink` package's raw socket the watcher uses (injectable for tests). */
export interface CtSocket {
  addMembership(group: number): void;
  on(event: 'message', listener: (msg: Buffer) => void): unknown;
  on(event: 'error', listener: (err: Error & { code?: string }) => void): unknown;
  setRecvBufferSize(bytes: number): unknown;
  unref(): void;
  close(): void;
}

/** Opens a NETLINK_NETFILTER socket (netlink(7)) that does not keep the event loop alive. */
export function openCtSocket(): CtSocket {
  const require = createRequire(import.meta.url);
  // the raw socket alone: the package's index loads all its protocol families (vip/netlink.ts)
  const netlink = require('netlink/dist/raw.js') as typeof import('netlink/dist/raw.js');
  const sock = new netlink.RawNetlinkSocket(NETLINK_NETFILTER);
  sock.unref();
  return sock;
}

/** A running conntrack event watcher. */
export interface ConntrackWatch {
  /** Closes the socket and the timer. Idempotent. */
  stop(): void;
  /** True while the unanswered-SYN timer is armed (only while a SYN waits for its answer). */
  readonly ticking: boolean;
}

/** Receive buffer asked for: bursts of new connections (a reconnect storm) must not overflow it. */
const RECV_BUFFER_BYTES = 4 * 1024 * 1024;

/**
 * Reads conntrack events from ctnetlink (NFNLGRP_CONNTRACK_NEW, _UPDATE, _DESTROY) and feeds a
 * {@link FlowTracker}; calls `onVerdict` for every verdict, and checks for unanswered SYNs every
 * `tickMs` (ms, default 50) while one waits (the timer is disarmed when none does). Everything
 * runs in this process: there is no child to outlive it.
 *
 * `onExit(code, message)` is called when the watch cannot start (e.g. EPERM without
 * CAP_NET_ADMIN; then `code` is the errno name) or the socket fails for good; `onLost` when the
 * kernel dropped events because the receive buffer overflowed (ENOBUFS: the watch goes on).
 */
export function watchConntrack(
  tracker: FlowTracker,
  onVerdict: (v: PassiveVerdict) => void,
  o: {
    tickMs?: number;
    onExit?: (code: string | null, message: string) => void;
    onLost?: () => void;
    now?: () => number;
    open?: () => CtSocket;
  } = {},
): ConntrackWatch {
  const now = o.now ?? (() => performance.now());
  let sock: CtSocket | undefined;
  try {
    sock = (o.open ?? openCtSocket)();
    for (const g of CONNTRACK_GROUPS) sock.addMembership(g);
  } catch (err) {
    sock?.close();
    o.onExit?.((err as NodeJS.ErrnoException).code ?? null, (err as Error).message);
    return { stop: () => undefined, ticking: false };
  }
  const s = sock;
  let stopped = false;
  try {
    s.setRecvBufferSize(RECV_BUFFER_BYTES);
  } catch {
    // the default buffer still works; only a burst may overflow it (ENOBUFS, reported)
  }
  // the unanswered-SYN check runs only while a SYN waits: an idle agent (no new connections
  // through the VIP) takes no wake-ups for it
  let timer: NodeJS.Timeout | undefined;
  const tickMs = o.tickMs ?? 50;
  const disarm = (): void => {
    if (timer !== undefined) clearInterval(timer);
    timer = undefined;
  };
  const arm = (): void => {
    if (timer !== undefined || tracker.pendingCount === 0) return;
    // judged in the check phase, after this loop iteration's poll phase has read the events
    // that queued up meanwhile: after an event-loop stall (GC, a busy main thread, CPU
    // starvation) the timers phase runs first, and answers already in the socket buffer would be
    // judged unanswered (every pending SYN of every backend, after a 1 s stall)
    timer = setInterval(() => {
      setImmediate(() => {
        if (stopped) return;
        for (const v of tracker.tick(now())) onVerdict(v);
        if (tracker.pendingCount === 0) disarm();
      });
    }, tickMs);
    timer.unref();
  };
  const stop = (): void => {
    if (stopped) return;
    stopped = true;
    disarm();
    s.close();
  };
  s.on('message', (msg) => {
    if (stopped) return;
    for (const e of parseCtEvents(msg)) for (const v of tracker.onEvent(e, now())) onVerdict(v);
    arm();
  });
  s.on('error', (err) => {
    if (stopped) return;
    if (err.code === 'ENOBUFS') return o.onLost?.();
    stop();
    o.onExit?.(err.code ?? null, err.message);
  });
  return {
    stop,
    get ticking() {
      return timer !== undefined;
    },
  };
}
