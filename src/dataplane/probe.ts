/**
 * Ending a dead backend's connections at once, also for clients that only receive.
 *
 * Deleting a dead backend's conntrack entries (conntrack.ts flushBackend) resets a client on its
 * next segment. A watch sends none: it waits for the server's next event, and without more it
 * hangs until its own timeout (client-go: 30 s read-idle + 15 s ping). A RST sent unasked would
 * need the flow's sequence numbers, which conntrack does not keep; so the node asks the client
 * for them (the idea of CTDB's "tickle ACK" after an IP takeover):
 *
 *   node   VIP:port → client:port  ACK, seq/ack outside the client's window   (two, 2^31 apart)
 *   client ACK, seq = its SND.NXT, ack = its RCV.NXT                          (RFC 9293 §3.10.7.4)
 *   node   no entry: picked up (nf_conntrack_tcp_loose), DNATed to a live backend (or delivered
 *          here when none is left), which has no such connection
 *   → client  RST, seq = the ack it sent = its RCV.NXT: acceptable, the connection ends (ECONNRESET)
 *
 * So the probes go out after the entries are deleted and after the ruleset without the dead
 * backend was applied (the reconcile's order, reconcile.ts). They carry the mark PROBE_MARK,
 * which ballast's table matches to leave them untracked (nftables.ts, "Probes"). Linux answers
 * an unacceptable segment with at most one ACK per net.ipv4.tcp_invalid_ratelimit (500 ms) per
 * socket: the client answers the first probe, and the second only where the first fell inside
 * its window; when the RST has already ended the connection, the client's kernel answers the
 * second probe with a RST of its own, which ends at this node. Probes are datagrams: a lost probe
 * or answer leaves that client to its own timeout, as before. A client that is not Linux answers
 * the same way (RFC 9293 §3.10.7.4).
 *
 * The bound: a client of a dead backend gets its RST within the flush and the probes' pace
 * (two packets per client at {@link PROBE_PACKETS_PER_SECOND}) plus one round trip after the
 * backend's dead verdict.
 */
import { addressFamily, canonicalAddress } from '../net/address.js';
import { sendTcpProbes, TCP_PROBE_MAX_CLIENTS, type TcpProbeBatch, type TcpProbeResult } from '../native.js';
import type { FlowClient } from './conntrack.js';
import { PROBE_MARK } from './nftables.js';

/** The pace of the probes, packets per second: 2,000 clients (4,000 packets) take 80 ms, 20,000 take 0.8 s. */
export const PROBE_PACKETS_PER_SECOND = 50_000;

/** Sends one batch (the addon's sendTcpProbes; injected by tests). */
export type ProbeSender = (batch: TcpProbeBatch) => Promise<TcpProbeResult>;

/** What {@link probeClients} did. */
export interface ProbeReport {
  /** clients probed (each once) */
  clients: number;
  /** probes the kernel took (two per client) */
  sent: number;
  /** probes it refused */
  failed: number;
  /** the first refusal's message (errno name and call), null when none */
  error: string | null;
  /** from the first send to the last, ms */
  durationMs: number;
}

/**
 * Probes each client of `clients` from `vip`:`port` (see the file comment), in batches of at most
 * TCP_PROBE_MAX_CLIENTS (20,000) clients, one after the other, each paced to
 * {@link PROBE_PACKETS_PER_SECOND} on the addon's worker thread.
 * @param vip the VIP the flows were sent to (their original destination), IPv4 or IPv6.
 * @param port the VIP's port, 1..65535.
 * @param clients the flows' clients (original source address and port), of the VIP's family.
 * @param opts.send the sender (default: the addon's sendTcpProbes).
 * @throws TypeError for a malformed VIP, port or client (nothing sent).
 * @throws NativeError when the raw socket cannot be opened (EPERM without CAP_NET_RAW), or
 *   BallastError BALLAST_E_ADDON_MISSING (the addon lacks the sender).
 */
export async function probeClients(vip: string, port: number, clients: readonly FlowClient[], opts: { send?: ProbeSender } = {}): Promise<ProbeReport> {
  const family = addressFamily(vip);
  if (family === null) throw new TypeError(`vip: not an IP address: ${JSON.stringify(vip)}`);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new TypeError(`port must be an integer from 1 to 65535, got ${String(port)}`);
  const send = opts.send ?? sendTcpProbes;
  const unique = new Map<string, FlowClient>();
  clients.forEach((c, i) => {
    if (addressFamily(c.address) !== family)
      throw new TypeError(`clients[${i}].address: ${JSON.stringify(c.address)} is not an IPv${family} address like the VIP`);
    const address = canonicalAddress(c.address);
    unique.set(`${address} ${c.port}`, { address, port: c.port });
  });
  const list = [...unique.values()];
  const report: ProbeReport = { clients: list.length, sent: 0, failed: 0, error: null, durationMs: 0 };
  const t0 = performance.now();
  for (let i = 0; i < list.length; i += TCP_PROBE_MAX_CLIENTS) {
    const r = await send({
      family,
      source: canonicalAddress(vip),
      sourcePort: port,
      mark: PROBE_MARK,
      packetsPerSecond: PROBE_PACKETS_PER_SECOND,
      clients: list.slice(i, i + TCP_PROBE_MAX_CLIENTS),
    });
    report.sent += r.sent;
    report.failed += r.failed;
    report.error ??= r.error?.message ?? null;
  }
  report.durationMs = performance.now() - t0;
  return report;
}
