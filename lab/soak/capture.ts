/**
 * What happened on the wire to the connections whose TCP handshake stalled (pure, but for
 * {@link startCapture}): the soak's optional packet capture on the lab's bridge (`--capture`),
 * read back after the run and folded into one line per stalled handshake to VIP:port.
 *
 * A client's request that fails with a timeout of T = 1 s is, on this lab, almost always a
 * connection whose first SYN went unanswered: Linux sends the SYN again only after its initial
 * RTO of 1 s (RFC 6298 §2.1, `TCP_TIMEOUT_INIT`), so one lost handshake costs the whole timeout,
 * and the client usually gives up before that retransmission leaves.
 * The bridge sees both legs of a connection the holder DNATs to another node — the client's
 * (client → VIP) and the source-NATed one (holder or VIP → backend, the client's source port kept) —
 * so the capture tells where the handshake was lost:
 *
 *   unanswered at the holder  no backend leg and no answer from the VIP: the holder dropped the
 *                             SYN, or DNATed it to its own apiserver (inside the holder, which
 *                             the bridge cannot see) and that did not answer
 *   refused at the holder     the VIP answered with a RST
 *   backend silent            the backend leg's SYN got no answer
 *   challenge ACK             the backend answered the SYN with a bare ACK (RFC 5961 §4: it
 *                             holds a socket on that 4-tuple from an earlier connection)
 *   reset by backend          the backend answered the SYN with a RST
 *   reply not forwarded       the backend's SYN-ACK reached the holder, the client never got it
 *   answered                  the client's leg saw a SYN-ACK, but late (≥ 500 ms) or followed by
 *                             the SYN again (lost after the bridge)
 *
 * The capture is a classic pcap file (pcap-savefile(5), read by lab/pcap.ts), link type 1
 * (Ethernet).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { pcapRecords } from '../pcap.js';

/** One TCP segment from the capture (IPv4 or IPv6, headers only). */
export interface TcpSegment {
  /** ms since the epoch (the capture's clock: the machine's) */
  t: number;
  srcMac: string;
  dstMac: string;
  src: string;
  sport: number;
  dst: string;
  dport: number;
  /** TCP flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10) */
  flags: number;
  seq: number;
  ack: number;
}

const FIN = 0x01;
const SYN = 0x02;
const RST = 0x04;
const ACK = 0x10;

const mac = (b: Buffer, at: number): string => [...b.subarray(at, at + 6)].map((x) => x.toString(16).padStart(2, '0')).join(':');
const ipv6Text = (b: Buffer): string => {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
  return groups.join(':').replace(/(^|:)0(:0)+(:|$)/, '::');
};

/**
 * The TCP segments of a classic pcap file (lab/pcap.ts), in file order, one at a time (a
 * 30-minute soak captures ~14 million). Records that are not Ethernet + IPv4 / IPv6 + TCP are
 * skipped, as is a truncated last record (a capture stopped mid-write).
 * @throws Error (at the first step) when the global header is not a pcap one or the link type is not Ethernet.
 */
export function* pcapSegments(buf: Buffer): Generator<TcpSegment> {
  for (const r of pcapRecords(buf, { truncated: 'stop' })) {
    const f = r.data;
    if (f.length < 14) continue;
    let off = 14;
    let type = f.readUInt16BE(12);
    if (type === 0x8100 && f.length >= 18) {
      type = f.readUInt16BE(16);
      off = 18;
    }
    let src: string;
    let dst: string;
    let l4: number;
    if (type === 0x0800 && f.length >= off + 20) {
      if (f[off + 9] !== 6) continue;
      src = [...f.subarray(off + 12, off + 16)].join('.');
      dst = [...f.subarray(off + 16, off + 20)].join('.');
      l4 = off + (f[off]! & 0x0f) * 4;
    } else if (type === 0x86dd && f.length >= off + 40) {
      if (f[off + 6] !== 6) continue;
      src = ipv6Text(f.subarray(off + 8, off + 24));
      dst = ipv6Text(f.subarray(off + 24, off + 40));
      l4 = off + 40;
    } else continue;
    if (f.length < l4 + 14) continue;
    yield {
      t: r.tsSec * 1000 + r.tsUsec / 1000,
      srcMac: mac(f, 6),
      dstMac: mac(f, 0),
      src,
      sport: f.readUInt16BE(l4),
      dst,
      dport: f.readUInt16BE(l4 + 2),
      seq: f.readUInt32BE(l4 + 4),
      ack: f.readUInt32BE(l4 + 8),
      flags: f[l4 + 13]!,
    };
  }
}

/** {@link pcapSegments} as an array (small captures, tests). @throws as pcapSegments does. */
export function readPcap(buf: Buffer): TcpSegment[] {
  return [...pcapSegments(buf)];
}

/** Where a stalled handshake was lost (see the file comment). */
export type SynFate =
  'unanswered at the holder' | 'refused at the holder' | 'backend silent' | 'challenge ACK' | 'reset by backend' | 'reply not forwarded' | 'answered';

/** One client SYN to VIP:port whose handshake stalled: no SYN-ACK back to the client in time, or the SYN sent again. */
export interface StalledHandshake {
  /** the first transmission, ms since the epoch */
  t: number;
  /** "addr:port" of the client */
  client: string;
  /** the node whose MAC the first SYN was sent to (who the client took for the VIP's holder), or the MAC */
  holder: string;
  /** the backend of the masqueraded leg, by node name (or address); null when the bridge saw none */
  backend: string | null;
  fate: SynFate;
  /** ms from the first transmission to the first retransmission; null when the SYN was not sent again (the client gave up first) */
  retransmitAfterMs: number | null;
  /** the segments of this port in the handshake's window (to the retransmission, else `windowMs`), one line each */
  trace: string[];
}

/** The names the lab gives its MAC and IP addresses (node name by MAC, by address). */
export interface CaptureNames {
  byMac: Record<string, string>;
  byAddress: Record<string, string>;
}

const flagText = (f: number): string => (['F', 'S', 'R', 'P', 'A'] as const).filter((_, i) => f & (1 << i)).join('') || '.';

/**
 * Every client SYN to `vip`:`port` whose handshake stalled, with where it was lost: the first
 * transmission (source, port, sequence number) got no SYN-ACK from the VIP within `minGapMs`
 * (ms, default 500), or was seen again at least `minGapMs` after it. A SYN within `minGapMs` of
 * the capture's end is not judged. A client whose request times out at the kernel's initial RTO
 * (1 s) usually gives up before the retransmission, so both kinds are needed. The handshake's
 * window runs from the first SYN to the retransmission, else for `windowMs` (ms, default 1000:
 * the soak's request timeout). The backend leg is the segments between a node's address and a
 * backend's `port` that carry the client's source port (masquerade keeps it when it can).
 * Sorted by time. Reads `segs()` twice.
 */
export function stalledHandshakes(
  segs: () => Iterable<TcpSegment>,
  o: { vip: string; port: number; names: CaptureNames; minGapMs?: number; windowMs?: number },
): StalledHandshake[] {
  const minGap = o.minGapMs ?? 500;
  const windowMs = o.windowMs ?? 1000;
  const name = (addr: string): string => o.names.byAddress[addr] ?? addr;
  interface Open {
    syn: TcpSegment;
    again?: TcpSegment;
    answeredAt?: number;
  }
  // first pass: every handshake by "client port seq", judged (and forgotten) once it is 10 s old
  const open = new Map<string, Open>();
  const found: { syn: TcpSegment; end: number; again?: TcpSegment }[] = [];
  let lastT = -Infinity;
  // stalled: sent again, or not answered within minGap (judged only when the capture ran that long)
  const judge = (x: Open): void => {
    const late = (x.answeredAt ?? Infinity) - x.syn.t >= minGap && lastT - x.syn.t >= minGap;
    if (x.again || late) found.push({ syn: x.syn, again: x.again, end: x.again?.t ?? x.syn.t + windowMs });
  };
  let n = 0;
  for (const s of segs()) {
    lastT = s.t;
    if (s.dst === o.vip && s.dport === o.port && (s.flags & (SYN | ACK)) === SYN) {
      const k = `${s.src} ${s.sport} ${s.seq}`;
      const f = open.get(k);
      if (!f) open.set(k, { syn: s });
      else if (!f.again && s.t - f.syn.t >= minGap) f.again = s;
    } else if (s.src === o.vip && s.sport === o.port && (s.flags & (SYN | ACK)) === (SYN | ACK)) {
      const f = open.get(`${s.dst} ${s.dport} ${(s.ack - 1) >>> 0}`);
      if (f && f.answeredAt === undefined) f.answeredAt = s.t;
    }
    if (++n % 50_000 === 0) {
      for (const [k, x] of open) {
        if (s.t - x.syn.t < 10_000) break; // insertion order is time order
        judge(x);
        open.delete(k);
      }
    }
  }
  for (const x of open.values()) judge(x);
  const byPort = new Map<number, TcpSegment[]>();
  const windows = new Map<number, [number, number][]>();
  for (const x of found) {
    byPort.set(x.syn.sport, []);
    windows.set(x.syn.sport, [...(windows.get(x.syn.sport) ?? []), [x.syn.t, x.end]]);
  }
  // second pass: only the segments of the ports that matter are kept
  const inWindow = (port: number, t: number): boolean => windows.get(port)?.some(([a, b]) => t >= a && t < b) === true;
  for (const s of segs()) {
    if (inWindow(s.sport, s.t)) byPort.get(s.sport)!.push(s);
    else if (s.dport !== s.sport && inWindow(s.dport, s.t)) byPort.get(s.dport)!.push(s);
  }
  return found
    .sort((a, b) => a.syn.t - b.syn.t)
    .map(({ syn, again, end }): StalledHandshake => {
      const port = syn.sport;
      const during = (byPort.get(port) ?? []).filter((s) => s.t >= syn.t && s.t < end);
      const fromVip = during.filter((s) => s.src === o.vip && s.dst === syn.src && s.dport === port);
      const holder = o.names.byMac[syn.dstMac] ?? syn.dstMac;
      // the holder's own leg, with the client's port: from its address (masquerade), or from the
      // VIP in a frame the holder sent (source NAT to the VIP, connection sync); another node's
      // health check may use the same port
      const fromHolder = (s: TcpSegment): boolean => name(s.src) === holder || (s.src === o.vip && (o.names.byMac[s.srcMac] ?? s.srcMac) === holder);
      const legSyn = during.find((s) => s.sport === port && s.dport === o.port && s.dst !== o.vip && fromHolder(s) && (s.flags & (SYN | ACK)) === SYN);
      const backend = legSyn ? legSyn.dst : null;
      const fromBackend = legSyn ? during.filter((s) => s.src === backend && s.sport === o.port && s.dst === legSyn.src && s.dport === port) : [];
      // a SYN-ACK answers this SYN only if it acknowledges its sequence number (NAT keeps it)
      const synAck = (s: TcpSegment): boolean => (s.flags & (SYN | ACK)) === (SYN | ACK) && (s.ack - 1) >>> 0 === syn.seq;
      let fate: SynFate;
      if (fromVip.some(synAck)) fate = 'answered';
      else if (legSyn) {
        fate = fromBackend.some(synAck)
          ? 'reply not forwarded'
          : fromBackend.some((s) => s.flags & RST)
            ? 'reset by backend'
            : fromBackend.some((s) => s.flags & ACK)
              ? 'challenge ACK'
              : 'backend silent';
      } else fate = fromVip.some((s) => s.flags & RST) ? 'refused at the holder' : 'unanswered at the holder';
      return {
        t: syn.t,
        client: `${syn.src}:${port}`,
        holder,
        backend: backend === null ? null : name(backend),
        fate,
        retransmitAfterMs: again ? Math.round((again.t - syn.t) * 10) / 10 : null,
        trace: during.map(
          (s) => `+${(s.t - syn.t).toFixed(1)} ms ${name(s.src)}:${s.sport} > ${name(s.dst)}:${s.dport} ${flagText(s.flags & (FIN | SYN | RST | 0x08 | ACK))}`,
        ),
      };
    });
}

/** A running capture: stop() ends it (SIGTERM, the file flushed) and resolves when it exited. */
export interface Capture {
  file: string;
  stop(): Promise<void>;
}

/**
 * Starts tcpdump(8) inside network namespace `netns` on `ifname`, headers only (96 bytes of each
 * frame), TCP port `port`, written to `file` packet by packet (-U). Resolves once tcpdump says it
 * is listening.
 * @throws Error when tcpdump cannot start or exits first (its stderr in the message).
 */
export function startCapture(o: { netns: string; ifname: string; port: number; file: string; tcpdump?: string }): Promise<Capture> {
  const p: ChildProcess = spawn(
    'ip',
    ['netns', 'exec', o.netns, o.tcpdump ?? 'tcpdump', '-i', o.ifname, '-s', '96', '-n', '-U', '-w', o.file, 'tcp', 'port', String(o.port)],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let err = '';
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  let started = false;
  return new Promise((resolve, reject) => {
    const fail = (why: string): void => void (started || reject(new Error(`tcpdump in ${o.netns}: ${why}${err ? `: ${err.trim()}` : ''}`)));
    const t = setTimeout(() => {
      p.kill('SIGKILL');
      fail('did not start within 5 s');
    }, 5000);
    p.once('error', (e) => {
      clearTimeout(t);
      fail(e.message);
    });
    p.once('exit', (code) => {
      clearTimeout(t);
      fail(`exited with code ${code}`);
    });
    p.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      if (/listening on/.test(err)) {
        if (started) return;
        started = true;
        clearTimeout(t);
        resolve({
          file: o.file,
          stop: async () => {
            if (p.exitCode === null && p.signalCode === null) p.kill('SIGTERM');
            await exited;
          },
        });
      }
    });
  });
}
