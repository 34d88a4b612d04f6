/**
 * TCP probes through a raw socket (native/tcp_probe.cc): a bare ACK from a VIP:port to a client
 * whose sequence number lies outside the client's receive window, so that the client answers with
 * an ACK carrying its real sequence numbers (RFC 9293 §3.10.7.4). src/dataplane/probe.ts says why.
 */
import { createError } from '../errors.js';
import { addonPath, native, type Addon, type TcpProbeBatch, type TcpProbeResult, type TcpProbeSegment } from './addon.js';
import { checkAddress } from './checks.js';

/** The most clients one {@link sendTcpProbes} call takes (two packets each). */
export const TCP_PROBE_MAX_CLIENTS = 20_000;

function checkPort(name: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 65535) {
    throw new TypeError(`${name} must be an integer 1..65535, got ${JSON.stringify(value)}`);
  }
}

function checkU32(name: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 0xffffffff) {
    throw new TypeError(`${name} must be an integer 0..4294967295, got ${JSON.stringify(value)}`);
  }
}

function checkFamily(name: string, value: unknown): asserts value is 4 | 6 {
  if (value !== 4 && value !== 6) throw new TypeError(`${name} must be 4 or 6, got ${JSON.stringify(value)}`);
}

function probeAddon(what: 'tcpProbePacket' | 'sendTcpProbes'): Required<Pick<Addon, 'tcpProbePacket' | 'sendTcpProbes'>> {
  const a = native();
  if (typeof a.tcpProbePacket !== 'function' || typeof a.sendTcpProbes !== 'function') {
    throw createError('BALLAST_E_ADDON_MISSING', `${addonPath()} has no ${what}: rebuild it with \`npm run build:native\``);
  }
  return a as Required<Pick<Addon, 'tcpProbePacket' | 'sendTcpProbes'>>;
}

/**
 * Sends two probes to each client (sequence numbers 2^31 apart, so that one at least lies outside
 * any receive window, RFC 7323 §2.3), from `batch.source`:`batch.sourcePort`, each packet marked
 * `batch.mark` (SO_MARK). The raw socket (IPPROTO_RAW: the addon writes the whole IP packet, any
 * source address) is opened in the caller's network namespace; the packets are built and sent on
 * a libuv worker thread, paced to `batch.packetsPerSecond` (the event loop only waits for the
 * promise), with sendmmsg(2) in batches of up to 64. A packet the kernel refuses (a firewall's
 * output rule: EPERM; no route: ENETUNREACH) is counted and the others still go.
 * @returns the packets sent and refused, and the first refusal as a NativeError (`code`, `errno`,
 *   `syscall` "sendmmsg").
 * @throws TypeError (synchronously checked, the promise rejects) on a bad batch: more than
 *   {@link TCP_PROBE_MAX_CLIENTS} clients, an address not of `family`, a port outside 1..65535,
 *   a pace outside 1,000..1,000,000 packets per second.
 * @throws NativeError EPERM "socket(AF_INET, SOCK_RAW, IPPROTO_RAW)" without CAP_NET_RAW, EPERM
 *   "setsockopt(SO_MARK)" without CAP_NET_ADMIN.
 * @throws BallastError BALLAST_E_ADDON_MISSING when the addon lacks the function (rebuild it).
 */
export async function sendTcpProbes(batch: TcpProbeBatch): Promise<TcpProbeResult> {
  if (typeof batch !== 'object' || batch === null) throw new TypeError('batch must be an object');
  checkFamily('batch.family', batch.family);
  checkAddress('batch.source', batch.source, batch.family);
  checkPort('batch.sourcePort', batch.sourcePort);
  checkU32('batch.mark', batch.mark);
  const rate = batch.packetsPerSecond;
  if (typeof rate !== 'number' || !(rate >= 1000 && rate <= 1_000_000)) {
    throw new TypeError(`batch.packetsPerSecond must be from 1000 to 1000000, got ${JSON.stringify(rate)}`);
  }
  if (!Array.isArray(batch.clients)) throw new TypeError('batch.clients must be an array of { address, port }');
  if (batch.clients.length > TCP_PROBE_MAX_CLIENTS) {
    throw new TypeError(`batch.clients must hold at most ${TCP_PROBE_MAX_CLIENTS} clients, got ${batch.clients.length}`);
  }
  batch.clients.forEach((c, i) => {
    checkAddress(`batch.clients[${i}].address`, c?.address, batch.family);
    checkPort(`batch.clients[${i}].port`, c.port);
  });
  return probeAddon('sendTcpProbes').sendTcpProbes(batch);
}

/**
 * One probe packet as {@link sendTcpProbes} sends it, IP header included (IPv4: 40 bytes, DF,
 * TTL 64, id and header checksum 0, which the kernel fills in; IPv6: 60 bytes, hop limit 64),
 * TCP flags ACK, window 1024, the checksum over the pseudo-header (RFC 9293 §3.1, RFC 8200 §8.1).
 * Pure; for tests and captures.
 * @throws TypeError on a bad segment. @throws BallastError BALLAST_E_ADDON_MISSING (rebuild the addon).
 */
export function tcpProbePacket(segment: TcpProbeSegment): Buffer {
  if (typeof segment !== 'object' || segment === null) throw new TypeError('segment must be an object');
  checkFamily('segment.family', segment.family);
  checkAddress('segment.source', segment.source, segment.family);
  checkAddress('segment.destination', segment.destination, segment.family);
  checkPort('segment.sourcePort', segment.sourcePort);
  checkPort('segment.destinationPort', segment.destinationPort);
  checkU32('segment.seq', segment.seq);
  checkU32('segment.ack', segment.ack);
  return probeAddon('tcpProbePacket').tcpProbePacket(segment);
}
