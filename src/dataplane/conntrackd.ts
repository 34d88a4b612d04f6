/**
 * conntrackd (conntrack-tools, Debian package `conntrackd`): the engine that replicates the VIP's
 * conntrack entries (with their NAT bindings) from the holder to the other nodes, so that the
 * next holder can put them into its kernel before it claims the address. ballast runs one
 * conntrackd per VRRP router as a child process, with a configuration it renders here, and talks
 * to it with the same binary's client mode over the daemon's own UNIX socket
 * (conntrackd(8), conntrackd.conf(5)):
 *
 *   the daemon   conntrackd -C <conf>            FTFW mode (reliable: sequence numbers, ACK/NACK,
 *                                                 resend queue), multicast on the VRRP interface;
 *                                                 internal cache = this kernel's entries, external
 *                                                 cache = the peers'; StartupResync asks the peers
 *                                                 for their state when it starts
 *   takeover     conntrackd -C <conf> -c         commit the external cache into this kernel
 *                                                 (before the VIP is added: see connection-sync.ts)
 *   backup       conntrackd -C <conf> -n         ask the peers to send their whole state again
 *   stats        conntrackd -C <conf> -s         cache sizes and multicast traffic counters
 *
 * What is replicated: established TCP entries (ESTABLISHED, FIN_WAIT, CLOSE_WAIT, LAST_ACK,
 * TIME_WAIT, CLOSE; a connection still in its handshake is not worth a message and, committed,
 * would look like an unanswered SYN to passive detection, health/passive.ts), loopback excluded.
 * Not only the VIP's flows: conntrackd's address filter (1.4.7) matches an entry's original
 * source and its reply source — for a flow through the VIP the client and the backend — and
 * never the original destination, the VIP; nor can it match a port. So a node replicates all of
 * its TCP entries with a peer address; the others are committed too on a takeover, where they
 * match no packet (they are another node's connections) and expire as they would have.
 */
import { addressFamily } from '../net/address.js';

/** What one conntrackd instance needs to know. */
export interface ConntrackdSettings {
  /** Directory of this instance's files: its lock file, UNIX socket, log (e.g. /run/ballast/conntrackd-…). */
  dir: string;
  /** The VRRP interface: the multicast messages go out and come in here. */
  ifname: string;
  /** This node's IPv4 address on `ifname` (the multicast source), or null when it has none (IPv6 multicast). */
  ipv4: string | null;
  /**
   * The UDP port of the multicast group, 1024..65535: one per VRRP router on a segment
   * ({@link syncPort}), so two clusters on one segment do not mix their state.
   */
  port: number;
}

/** The IPv4 multicast group every instance sends to (administratively scoped, RFC 2365); the port tells clusters apart. */
export const SYNC_GROUP_V4 = '239.255.78.50';
/** The IPv6 multicast group used when the interface has no IPv4 address (link-local scope, RFC 4291). */
export const SYNC_GROUP_V6 = 'ff02::1:78:50';
/** The first port of {@link syncPort}: conntrackd's customary 3780 (conntrackd.conf(5) Group). */
export const SYNC_PORT_BASE = 3780;

/** The multicast port of VRRP router `vrid` (1..255): {@link SYNC_PORT_BASE} + vrid. */
export function syncPort(vrid: number): number {
  if (!Number.isInteger(vrid) || vrid < 1 || vrid > 255) throw new TypeError(`vrid must be an integer from 1 to 255, got ${String(vrid)}`);
  return SYNC_PORT_BASE + vrid;
}

/** The files of an instance in `dir`. */
export function conntrackdPaths(dir: string): { config: string; socket: string; lock: string; log: string } {
  return { config: `${dir}/conntrackd.conf`, socket: `${dir}/ctl`, lock: `${dir}/lock`, log: `${dir}/conntrackd.log` };
}

/**
 * The conntrackd.conf(5) text of one instance (pure): General (own lock file, UNIX socket and
 * log file, so that several instances can run on one machine; no systemd notification; the
 * filter) and Sync (FTFW with StartupResync, multicast on `ifname`).
 * @throws TypeError for an `ipv4` that is not an IPv4 address, a port outside 1024..65535, or a
 *   directory that is not absolute.
 */
export function renderConntrackdConfig(s: ConntrackdSettings): string {
  if (!s.dir.startsWith('/')) throw new TypeError(`dir must be an absolute path, got ${JSON.stringify(s.dir)}`);
  if (!Number.isInteger(s.port) || s.port < 1024 || s.port > 65535) throw new TypeError(`port must be an integer from 1024 to 65535, got ${String(s.port)}`);
  if (s.ipv4 !== null && addressFamily(s.ipv4) !== 4) throw new TypeError(`ipv4: not an IPv4 address: ${JSON.stringify(s.ipv4)}`);
  const p = conntrackdPaths(s.dir);
  const transport =
    s.ipv4 !== null
      ? [`\t\tIPv4_address ${SYNC_GROUP_V4}`, `\t\tGroup ${s.port}`, `\t\tIPv4_interface ${s.ipv4}`]
      : // conntrackd 1.4.7 takes the interface from `Interface` for IPv6 ("IPv6_interface not required")
        [`\t\tIPv6_address ${SYNC_GROUP_V6}`, `\t\tGroup ${s.port}`];
  const lines = [
    '# rendered by ballast (src/dataplane/conntrackd.ts); do not edit: replaced at every start',
    'Sync {',
    '\tMode FTFW {',
    '\t\tStartupResync yes',
    '\t\tPurgeTimeout 5',
    '\t}',
    '\tMulticast Default {',
    ...transport,
    `\t\tInterface ${s.ifname}`,
    '\t\tSndSocketBuffer 1249280',
    '\t\tRcvSocketBuffer 1249280',
    '\t\tChecksum on',
    '\t}',
    '}',
    'General {',
    '\tSystemd no',
    '\tHashSize 8192',
    '\tHashLimit 262144',
    `\tLogFile ${p.log}`,
    '\tSyslog no',
    `\tLockFile ${p.lock}`,
    '\tUNIX {',
    `\t\tPath ${p.socket}`,
    '\t}',
    // a burst of new connections (a reconnect storm, a commit) overruns the kernel's event
    // socket and its events are lost: conntrackd then doubles the buffer and dumps the kernel
    // table again after NetlinkOverrunResync s (default 30: the peers' copy would lack those
    // connections that long); 1 s, from a larger buffer
    '\tNetlinkBufferSize 8388608',
    '\tNetlinkBufferSizeMaxGrowth 67108864',
    '\tNetlinkOverrunResync 1',
    '\tFilter From Userspace {',
    '\t\tProtocol Accept {',
    '\t\t\tTCP',
    '\t\t}',
    '\t\tAddress Ignore {',
    '\t\t\tIPv4_address 127.0.0.0/8',
    '\t\t\tIPv6_address ::1',
    '\t\t}',
    '\t\tState Accept {',
    '\t\t\tESTABLISHED FIN_WAIT CLOSE_WAIT LAST_ACK TIME_WAIT CLOSED for TCP',
    '\t\t}',
    '\t}',
    '}',
  ];
  return `${lines.join('\n')}\n`;
}

/** What `conntrackd -s` reports that ballast uses (see {@link parseConntrackdStats}). */
export interface ConntrackdStats {
  /** Entries of this node's kernel in the internal cache (what this node sends). */
  internal: number;
  /** Entries received from the peers, in the external cache (what a commit puts into the kernel). */
  external: number;
  /** Multicast packets received since the daemon started (peers' updates, ACKs and alive messages). */
  packetsReceived: number;
  /** Multicast packets sent since the daemon started. */
  packetsSent: number;
}

/**
 * Parses the text of `conntrackd -s` (conntrack-tools 1.4.x: "cache internal:" / "cache
 * external:" blocks with "current active connections: N", and the multicast block's "N Pckts
 * sent   N Pckts recv").
 * @returns null when the text has neither cache block (not conntrackd's statistics).
 */
export function parseConntrackdStats(text: string): ConntrackdStats | null {
  const block = (name: string): number | null => {
    const m = new RegExp(`cache ${name}:[\\s\\S]*?current active connections:\\s*(\\d+)`).exec(text);
    return m ? Number(m[1]) : null;
  };
  const internal = block('internal');
  const external = block('external');
  if (internal === null && external === null) return null;
  const pk = /(\d+)\s+Pckts sent\s+(\d+)\s+Pckts recv/.exec(text);
  return { internal: internal ?? 0, external: external ?? 0, packetsSent: pk ? Number(pk[1]) : 0, packetsReceived: pk ? Number(pk[2]) : 0 };
}

/** /status `connectionSync` (src/agent/phases/connection-sync.ts keeps it). */
export interface ConnectionSyncStatus {
  /** `running`: the daemon runs; `starting`/`restarting`: it is being (re)started; `unavailable`: it cannot run (see `error`); `off`: disabled. */
  state: 'running' | 'starting' | 'restarting' | 'unavailable' | 'off';
  /** This node's entries conntrackd holds (what it replicates), from the last `conntrackd -s`; null before the first. */
  internalEntries: number | null;
  /** The peers' entries (what a commit puts into this kernel); null before the first `conntrackd -s`. */
  externalEntries: number | null;
  /** ms since the last multicast message from a peer arrived (updates, ACKs, or FTFW's alive messages each second); null: none yet. */
  lastMessageAgeMs: number | null;
  /** The last commit (becoming Active): when, how long it took (ms), whether it completed. */
  lastCommit: { at: string; durationMs: number; ok: boolean; error?: string } | null;
  /** Preemption held until the replicated state arrived (see the file comment). */
  preemptHold: boolean;
  /** Times the daemon exited and was started again. */
  restarts: number;
  /** Why the daemon is not running (spawn error, exit status, its last log line). */
  error?: string;
}
