/**
 * Deleting the conntrack entries of flows ballast DNATed to a backend that died, so that their
 * clients learn it at once instead of retransmitting into a void for minutes.
 *
 * Why deleting the entry resets the client: the client's next segment arrives at the node as a
 * mid-stream packet with no conntrack entry. conntrack picks it up as a new flow
 * (net.netfilter.nf_conntrack_tcp_loose=1, the default), the nat chains run again and either
 * DNAT it to another, live backend — which has no such connection and answers with a RST — or,
 * with no backend left, deliver it to the node itself, which answers with a RST as well. Either
 * way the RST goes back through the node's NAT to the client, which reconnects. So call this
 * AFTER the ruleset without the dead backend was applied: otherwise the pickup may pick the dead
 * backend again. A client that only receives (a watch) sends no next segment: the deleted
 * entries name each flow's client, and probe.ts asks it for one.
 *
 * The flows are found by their tuples (conntrack(8)): original destination = VIP:port (so only
 * ballast's flows: kube-proxy's flows to the same apiserver have the ClusterIP there), reply
 * source = backend address:port (the DNAT target; masquerade changes the reply destination only).
 * The `conntrack` CLI (Debian package `conntrack`, conntrack-tools) talks ctnetlink for us.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { addressFamily, canonicalAddress } from '../net/address.js';
import { commandExecutor, DataplaneError, type Executor } from './apply.js';
import type { Backend } from './nftables.js';
import type { Log } from '../log/log.js';

/** The default executor: `conntrack` from $PATH. */
export const conntrackExecutor: Executor = commandExecutor(['conntrack']);

/** Options of {@link flushBackend}. */
export interface FlushOptions {
  /** Runs conntrack(8); default {@link conntrackExecutor}. */
  exec?: Executor;
}

/** The client side of a flow through the VIP: its original source address and port. */
export interface FlowClient {
  address: string;
  port: number;
}

/** What {@link flushBackend} deleted. */
export interface FlushedFlows {
  /** entries deleted (the last run's count; see flushBackend) */
  deleted: number;
  /**
   * the clients of the deleted flows whose TCP state leaves the client waiting on the flow
   * (conntrack's ESTABLISHED, SYN_RECV, FIN_WAIT, CLOSE_WAIT, LAST_ACK; not SYN_SENT, whose client
   * repeats its SYN anyway, nor TIME_WAIT or CLOSE), each once, in the order conntrack printed them
   */
  clients: FlowClient[];
}

/** conntrack's TCP states (conntrack(8) `--state`) in which the client still waits on the flow. */
const OPEN_STATES = new Set(['ESTABLISHED', 'SYN_RECV', 'FIN_WAIT', 'CLOSE_WAIT', 'LAST_ACK']);

/**
 * The clients of the entries conntrack(8) printed, one entry a line in its default format
 * (`tcp      6 431999 ESTABLISHED src=C dst=VIP sport=P dport=6443 [UNREPLIED] src=B …`): the
 * original tuple's source address and port of each entry in an {@link OPEN_STATES} state, each
 * client once. Lines of another shape are skipped.
 */
export function parseFlowClients(stdout: string, into: FlowClient[] = [], seen = new Set<string>()): FlowClient[] {
  for (const m of stdout.matchAll(/^tcp +\d+ +\d+ +([A-Z_0-9]+) +src=(\S+) +dst=\S+ +sport=(\d+) /gm)) {
    if (!OPEN_STATES.has(m[1]!)) continue;
    const port = Number(m[3]);
    const address = addressFamily(m[2]!) === null ? null : canonicalAddress(m[2]!);
    if (address === null || !(port >= 1 && port <= 65535)) continue;
    const key = `${address} ${port}`;
    if (seen.has(key)) continue;
    seen.add(key);
    into.push({ address, port });
  }
  return into;
}

/**
 * Deletes the conntrack entries of TCP flows that were sent to `vip`:`port` and DNATed to
 * `backend` (`conntrack -D -f ipv4|ipv6 -p tcp --orig-dst VIP --orig-port-dst PORT
 * --reply-src ADDR --reply-port-src BPORT`), so that each such client gets a RST on its next
 * segment (see the file comment). Other flows, also other flows to the same backend, are kept.
 * conntrack-tools 1.4.7 stops at the first entry that is gone before its turn ("Operation
 * failed: such conntrack doesn't exist": the kernel ended it between the dump and the delete,
 * common right after a backend died), leaving the rest; that run is repeated, up to
 * {@link FLUSH_ATTEMPTS} runs in all.
 *
 * @param vip a VIP (IPv4 or IPv6), of the same family as `backend.address`.
 * @param port the VIP's TCP port, 1..65535.
 * @param backend the dead backend: its address and port.
 * @returns `deleted`: the number of entries the last run deleted (0 when there were none; that is
 *   not an error; runs cut short by a vanished entry deleted some more, uncounted); `clients`: the
 *   clients of the flows every run deleted (conntrack prints each entry it deletes), see
 *   {@link FlushedFlows}.
 * @throws TypeError for a malformed argument (nothing ran).
 * @throws DataplaneError (code BALLAST_E_DATAPLANE) when conntrack cannot run (not installed:
 *   `apt-get install conntrack`), fails (e.g. no CAP_NET_ADMIN), or hangs: the default executor
 *   kills a conntrack still running after COMMAND_TIMEOUT_MS (5 s, see apply.ts commandExecutor).
 */
export async function flushBackend(vip: string, port: number, backend: Pick<Backend, 'address' | 'port'>, opts: FlushOptions = {}): Promise<FlushedFlows> {
  const family = addressFamily(vip);
  if (family === null) throw new TypeError(`vip: not an IP address: ${JSON.stringify(vip)}`);
  if (addressFamily(backend.address) !== family) {
    throw new TypeError(`backend.address: ${JSON.stringify(backend.address)} is not an IPv${family} address like the VIP ${vip}`);
  }
  checkPorts([
    ['port', port],
    ['backend.port', backend.port],
  ]);
  const clients: FlowClient[] = [];
  const seen = new Set<string>();
  const deleted = await deleteEntries(
    family,
    [
      '--orig-dst',
      canonicalAddress(vip),
      '--orig-port-dst',
      String(port),
      '--reply-src',
      canonicalAddress(backend.address),
      '--reply-port-src',
      String(backend.port),
    ],
    opts.exec ?? conntrackExecutor,
    (stdout) => parseFlowClients(stdout, clients, seen),
  );
  return { deleted, clients };
}

/**
 * Deletes the conntrack entries of every TCP flow sent to `vip`:`port`, whatever its backend
 * (`conntrack -D -f ipv4|ipv6 -p tcp --orig-dst VIP --orig-port-dst PORT [--state STATE]`):
 * connection sync's purge of a node that no longer holds the VIP, and of the closing flows a
 * commit brought (src/agent/phases/connection-sync.ts). Same retries and errors as {@link flushBackend}.
 * @returns the entries the last run deleted, as flushBackend's `deleted`.
 * @param state only the entries in this TCP state (conntrack(8) `--state`, e.g. TIME_WAIT); absent: all.
 * @throws TypeError for a malformed argument (nothing ran); DataplaneError as flushBackend.
 */
export async function flushVip(vip: string, port: number, opts: FlushOptions & { state?: 'TIME_WAIT' | 'CLOSE' } = {}): Promise<number> {
  const family = addressFamily(vip);
  if (family === null) throw new TypeError(`vip: not an IP address: ${JSON.stringify(vip)}`);
  checkPorts([['port', port]]);
  return deleteEntries(
    family,
    ['--orig-dst', canonicalAddress(vip), '--orig-port-dst', String(port), ...(opts.state ? ['--state', opts.state] : [])],
    opts.exec ?? conntrackExecutor,
  );
}

/**
 * Deletes the conntrack entries of the backend side of flows through `vip` that reached this
 * node's apiserver (listening on one of `ports`): with the flows through the VIP source-NATed
 * to the VIP, those are VIP:client port ↔ apiserver, tracked here while nothing left them
 * untracked (no agent, or before its first ruleset), in either direction:
 * `conntrack -D -p tcp --orig-src VIP` (the first packet came from the holder) and, per port,
 * `conntrack -D -p tcp --orig-dst VIP --orig-port-src PORT` (it was the apiserver's). Either one
 * holds the tuple apiserver → VIP:client port, the reply tuple of the same flow's replicated
 * entry, so a commit of that entry fails while it exists (the flow then hangs once this node
 * takes the VIP). Same retries and errors as {@link flushBackend}.
 * @returns the entries deleted.
 * @throws TypeError for a malformed address or port (nothing ran); DataplaneError as flushBackend.
 */
export async function flushBackendSides(vip: string, ports: readonly number[], opts: FlushOptions = {}): Promise<number> {
  const family = addressFamily(vip);
  if (family === null) throw new TypeError(`vip: not an IP address: ${JSON.stringify(vip)}`);
  checkPorts(ports.map((p) => ['port', p] as const));
  const exec = opts.exec ?? conntrackExecutor;
  const addr = canonicalAddress(vip);
  // side by side (on a takeover's path); an entry one run deletes under another is retried there
  const counts = await Promise.all([
    deleteEntries(family, ['--orig-src', addr], exec),
    ...[...new Set(ports)].map((p) => deleteEntries(family, ['--orig-dst', addr, '--orig-port-src', String(p)], exec)),
  ]);
  return counts.reduce((a, b) => a + b, 0);
}

function checkPorts(ports: readonly (readonly [string, number])[]): void {
  for (const [what, p] of ports) {
    if (!Number.isInteger(p) || p < 1 || p > 65535) throw new TypeError(`${what} must be an integer from 1 to 65535, got ${String(p)}`);
  }
}

/**
 * `conntrack -D -f FAMILY -p tcp <match>`, repeated when an entry vanished under it; `printed`
 * gets each run's stdout (the entries it deleted). @returns the count of the last run.
 */
async function deleteEntries(family: 4 | 6, match: readonly string[], exec: Executor, printed?: (stdout: string) => void): Promise<number> {
  const args = ['-D', '-f', family === 4 ? 'ipv4' : 'ipv6', '-p', 'tcp', ...match];
  for (let attempt = 1; ; attempt++) {
    let r;
    try {
      r = await exec(args, '');
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      throw new DataplaneError(
        `flushing conntrack entries: could not run conntrack (Debian package "conntrack"): ${why}`,
        args,
        { code: -1, stderr: '' },
        { cause: err },
      );
    }
    printed?.(r.stdout);
    // conntrack-tools 1.4.x: "conntrack v1.4.7 (conntrack-tools): N flow entries have been deleted."
    // on stderr; exit status 1 when N is 0
    const m = /(\d+) flow entr(?:y has|ies have) been deleted/.exec(r.stderr);
    if (m) return Number(m[1]);
    if (r.killed !== undefined)
      throw new DataplaneError(
        `flushing conntrack entries: conntrack ${args.join(' ')} ${r.killed === 'timeout' ? 'hung and was killed' : 'was killed because the agent is stopping'}: ${r.stderr.trim()}`,
        args,
        r,
      );
    if (attempt < FLUSH_ATTEMPTS && /such conntrack doesn't exist/.test(r.stderr)) continue;
    throw new DataplaneError(`flushing conntrack entries: conntrack ${args.join(' ')} exited with ${r.code}: ${r.stderr.trim() || '(no message)'}`, args, r);
  }
}

/** How many times {@link flushBackend} runs conntrack when entries vanish under it. */
export const FLUSH_ATTEMPTS = 5;

/** The sysctl that gives conntrack entries a start time (per network namespace): net.netfilter.nf_conntrack_timestamp. */
export const CONNTRACK_TIMESTAMP_SYSCTL = '/proc/sys/net/netfilter/nf_conntrack_timestamp';

/**
 * Turns on conntrack's timestamp extension in this network namespace (net.netfilter.
 * nf_conntrack_timestamp=1, nf_conntrack(7) sysctls), so that entries made from now on carry
 * their start time (CTA_TIMESTAMP_START): the rebalancer resets the oldest connections first.
 * Logs what it did; a failure (no such file before nf_conntrack is loaded, read-only /proc) is
 * logged and the rebalancer orders the entries without a start time first.
 * @param path the sysctl file (tests); default {@link CONNTRACK_TIMESTAMP_SYSCTL}.
 * @returns the undo: puts 0 back when this call changed it from 0 (never throws).
 */
export function enableConntrackTimestamps(log: Pick<Log, 'info' | 'warn'>, path = CONNTRACK_TIMESTAMP_SYSCTL): () => void {
  let before: string;
  try {
    before = readFileSync(path, 'utf8').trim();
    if (before === '1') return () => undefined;
    writeFileSync(path, '1\n');
  } catch (err) {
    log.warn(
      { sysctl: 'net.netfilter.nf_conntrack_timestamp', err: (err as Error).message },
      'cannot turn on conntrack timestamps: the rebalancer cannot tell the oldest connections',
    );
    return () => undefined;
  }
  log.info(
    { sysctl: 'net.netfilter.nf_conntrack_timestamp', before, now: '1' },
    'conntrack timestamps on (the rebalancer resets the oldest connections first)',
  );
  return () => {
    try {
      writeFileSync(path, `${before}\n`);
    } catch {
      // the namespace may be going away; nothing else depends on it
    }
  };
}
