/**
 * Is a node's apiserver still there? One TCP connect with a short deadline, asked when the
 * election saw the node's VRRP fall silent (RFC 9568 §6.4.2 Master_Down).
 *
 * A silent Active router says its agent stopped sending; it does not say its node or apiserver
 * died. An agent that crashed or was killed (SIGKILL, OOM) leaves a healthy apiserver behind,
 * and taking that one out (a dead verdict: its connections reset, a flap counted by damping) on
 * every agent restart is an outage no one asked for. A node that is gone, though, answers no SYN:
 *
 *   connect(host:port) ── SYN-ACK within the deadline ──► alive     (leave it to the checks)
 *                      ── RST (ECONNREFUSED), EHOSTUNREACH, … ──► down (that failure)
 *                      ── nothing by the deadline ───────────────► down (timeout)
 *
 * The deadline is looked at only after the event loop has polled its sockets once more
 * (setImmediate after the timer): libuv runs expired timers before it polls, so after a stall of
 * this thread the timer would otherwise fire although the SYN-ACK already waits in the socket.
 */
import net from 'node:net';
import { addressFamily, canonicalAddress } from '../net/address.js';
import type { HostPort } from '../net/hostport.js';
import { deadlineFailure, describeFailure } from './probe.js';
import type { Failure } from './verdict.js';

/** Where to connect: an IP literal (IPv6 without brackets) and a TCP port. */
export interface ConfirmTarget {
  readonly host: string;
  readonly port: number;
}

/** What {@link confirmDown} found: the backend's kernel accepted the connection, or the failure (a dead cause). */
export type ConfirmResult =
  { readonly alive: true; readonly latencyMs: number } | { readonly alive: false; readonly failure: Failure; readonly latencyMs: number };

/** The socket calls {@link confirmDown} makes (net.connect's; injectable for tests). */
export type Connect = (options: { host: string; port: number }) => net.Socket;

/**
 * The shortest deadline, ms. A live kernel on the same segment answers a SYN within a
 * millisecond or two even on a loaded host (the SYN-ACK is sent from softirq, not by the
 * apiserver process); this keeps 10 ms adverts from judging a busy one dead.
 */
export const CONFIRM_MIN_DEADLINE_MS = 50;

/**
 * The deadline of the connect, ms: one Advertisement_Interval (so a dead node's backend leaves
 * within Master_Down_Interval + Advertisement_Interval of its last advert), at least
 * {@link CONFIRM_MIN_DEADLINE_MS}, at most the health check's timeout (a backend that answers
 * no SYN within a check's deadline is what the checks call dead too).
 * @param advertisementIntervalMs vrrp.advertisementInterval, ms (> 0).
 * @param healthTimeoutMs apiserver.health.timeout, ms (> 0).
 */
export function confirmDeadlineMs(advertisementIntervalMs: number, healthTimeoutMs: number): number {
  return Math.min(Math.max(advertisementIntervalMs, CONFIRM_MIN_DEADLINE_MS), Math.max(healthTimeoutMs, CONFIRM_MIN_DEADLINE_MS));
}

/**
 * Opens one TCP connection to `target` and closes it at once (no byte is sent; the apiserver
 * sees a connection reset or closed before TLS). Never rejects.
 * @param deadlineMs how long to wait for the SYN-ACK, ms (> 0); see {@link confirmDeadlineMs}.
 * @param deps.connect net.connect by default.
 * @returns alive when the connection was established; else the failure, classified as a
 *   check's would be (probe.ts: `refused`, `unreachable`, `timeout`, …; all of them dead).
 *   `latencyMs` is the time to the answer (monotonic).
 */
export function confirmDown(target: ConfirmTarget, deadlineMs: number, deps: { connect?: Connect } = {}): Promise<ConfirmResult> {
  const connect = deps.connect ?? ((o) => net.connect(o));
  const t0 = performance.now();
  return new Promise((resolve) => {
    let done = false;
    // eslint-disable-next-line prefer-const -- finish() may run before the timer is set: a const would still be in its TDZ
    let timer: NodeJS.Timeout | undefined;
    let socket: net.Socket | undefined;
    const finish = (r: ConfirmResult): void => {
      if (done) return;
      done = true;
      if (timer !== undefined) clearTimeout(timer);
      // an accepted connection is closed at once; a pending one is abandoned (no RST needed: no SYN-ACK came)
      socket?.destroy();
      resolve(r);
    };
    const ms = (): number => performance.now() - t0;
    try {
      socket = connect({ host: target.host, port: target.port });
    } catch (err) {
      finish({ alive: false, failure: describeFailure(err, false), latencyMs: ms() });
      return;
    }
    socket.once('connect', () => finish({ alive: true, latencyMs: ms() }));
    socket.once('error', (err) => finish({ alive: false, failure: describeFailure(err, false), latencyMs: ms() }));
    // one more poll of the sockets before the deadline counts (see the file comment)
    timer = setTimeout(() => setImmediate(() => finish({ alive: false, failure: deadlineFailure(false), latencyMs: ms() })), deadlineMs);
  });
}

/**
 * The backends on the node at `nodeAddress`: the election asks whether they are gone when that
 * node's Active router went silent (agent/phases/election.ts).
 * @returns the backends whose host is `nodeAddress` (any spelling of it); [] when it is no address.
 */
export function backendsOfNode(backends: readonly HostPort[], nodeAddress: string): HostPort[] {
  const family = addressFamily(nodeAddress);
  if (family === null) return [];
  const node = canonicalAddress(nodeAddress);
  return backends.filter((b) => b.family === family && b.host === node);
}
