/**
 * Passive detection: the kernel's own signals say a backend is dead long before `fall` active
 * checks could. A userspace proxy retries a refused connection on another server; a kernel DNAT
 * cannot, so ballast watches the connections it DNATed, through conntrack events (ctnetlink,
 * read with `conntrack -E`, conntrack(8)):
 *
 *   [NEW]     SYN_SENT  orig dst = VIP:port, reply src = backend   → a connection was sent to backend
 *   [UPDATE]  SYN_RECV / ESTABLISHED                               → the backend answered: alive
 *   [DESTROY] (or [UPDATE] CLOSE) before any answer               → refused (RST to the SYN): dead
 *   still SYN_SENT after `synTimeoutMs`                            → no answer at all: dead
 *
 * A live apiserver's kernel answers a SYN within a round trip (the application is not
 * involved), so on a LAN a few hundred ms without a SYN-ACK means the node or its port is gone.
 * The tracker below is pure (events and a clock in, verdicts out); {@link watchConntrack} feeds
 * it from the `conntrack` process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { canonicalAddress, hostPort } from '../net/address.js';

/** One conntrack event line, parsed (only what passive detection needs). */
export interface FlowEvent {
  type: 'NEW' | 'UPDATE' | 'DESTROY';
  /** Conntrack id (`-o id`). */
  id: string;
  /** TCP state, e.g. SYN_SENT, SYN_RECV, ESTABLISHED, CLOSE. */
  state: string;
  origDst: string;
  origDport: number;
  replySrc: string;
  replySport: number;
}

/**
 * Parses one line of `conntrack -E -o id` output for TCP, e.g.
 * `[NEW] tcp 6 120 SYN_SENT src=… dst=10.0.0.100 sport=40000 dport=6443 [UNREPLIED] src=10.0.0.12 dst=… sport=6443 dport=40000 id=42`
 * (an optional `[timestamp]` first is skipped).
 * @returns the event, or null for any other line (not TCP, a summary line, garbage).
 */
export function parseConntrackLine(line: string): FlowEvent | null {
  const m = /\[(NEW|UPDATE|DESTROY)\]\s+tcp\s+6\s+(?:\d+\s+)?([A-Z_]+)\s+(.*)$/.exec(line);
  if (!m) return null;
  const rest = m[3]!;
  const kv = [...rest.matchAll(/\b(src|dst|sport|dport|id)=(\S+)/g)].map((x) => [x[1]!, x[2]!] as const);
  // the first src/dst/sport/dport are the original tuple, the second the reply tuple
  const orig = new Map<string, string>();
  const reply = new Map<string, string>();
  let id: string | undefined;
  for (const [k, v] of kv) {
    if (k === 'id') id = v;
    else if (!orig.has(k)) orig.set(k, v);
    else if (!reply.has(k)) reply.set(k, v);
  }
  const origDst = orig.get('dst');
  const origDport = Number(orig.get('dport'));
  const replySrc = reply.get('src');
  const replySport = Number(reply.get('sport'));
  if (!id || !origDst || !replySrc || !Number.isInteger(origDport) || !Number.isInteger(replySport)) return null;
  return { type: m[1] as FlowEvent['type'], id, state: m[2]!, origDst, origDport, replySrc, replySport };
}

/** A verdict on one backend. */
export interface PassiveVerdict {
  /** host:port (IPv6 in brackets), as the health checker names backends. */
  backend: string;
  alive: boolean;
  /** 'refused', 'unanswered SYN', or 'answered'. */
  reason: string;
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
  private readonly direct: Set<string>;
  /** conntrack id → the backend and when its SYN was seen, for flows not yet answered. */
  private readonly pending = new Map<string, { backend: string; since: number }>();

  /**
   * @param vips the VIP addresses; @param port the VIP port;
   * @param synTimeoutMs how long a SYN may go unanswered before its backend is judged dead, ms.
   */
  constructor(
    vips: readonly string[],
    private readonly port: number,
    private readonly synTimeoutMs: number,
    /** Backends followed directly, as host:port (IPv6 in brackets). */
    direct: readonly string[] = [],
  ) {
    this.vips = new Set(vips.map(canonicalAddress));
    this.direct = new Set(direct);
  }

  /** Feeds one event; returns the verdicts it implies (often none). */
  onEvent(e: FlowEvent, now: number): PassiveVerdict[] {
    const dst = hostPort(canonicalAddress(e.origDst), e.origDport);
    const toVip = e.origDport === this.port && this.vips.has(canonicalAddress(e.origDst)) && canonicalAddress(e.replySrc) !== canonicalAddress(e.origDst);
    if (!toVip && !this.direct.has(dst)) return [];
    const backend = hostPort(canonicalAddress(e.replySrc), e.replySport);
    if (e.type === 'NEW') {
      if (e.state === 'SYN_SENT') this.pending.set(e.id, { backend, since: now });
      return [];
    }
    const p = this.pending.get(e.id);
    if (!p) return [];
    if (e.type === 'UPDATE' && e.state !== 'CLOSE') {
      // SYN_RECV / ESTABLISHED: the backend's kernel answered the SYN
      this.pending.delete(e.id);
      return [{ backend, alive: true, reason: 'answered' }];
    }
    // DESTROY, or CLOSE, before any answer: a RST to the SYN
    this.pending.delete(e.id);
    return [{ backend, alive: false, reason: 'refused' }];
  }

  /** Judges SYNs unanswered for longer than synTimeoutMs; call it periodically. */
  tick(now: number): PassiveVerdict[] {
    const out: PassiveVerdict[] = [];
    for (const [id, p] of this.pending) {
      if (now - p.since >= this.synTimeoutMs) {
        this.pending.delete(id);
        out.push({ backend: p.backend, alive: false, reason: 'unanswered SYN' });
      }
    }
    return out;
  }

  /** Flows waiting for an answer (for tests and /status). */
  get pendingCount(): number {
    return this.pending.size;
  }
}

/** A running `conntrack -E` watcher. */
export interface ConntrackWatch {
  stop(): void;
  readonly child: ChildProcess;
}

/**
 * Runs `conntrack -E -p tcp -o id` (line-buffered through stdbuf) and feeds a
 * {@link FlowTracker}; calls `onVerdict` for every verdict, and checks for unanswered SYNs every
 * `tickMs` (ms). `onExit` is called if the process ends while not stopped (e.g. conntrack not
 * installed, or no CAP_NET_ADMIN).
 */
export function watchConntrack(
  tracker: FlowTracker,
  onVerdict: (v: PassiveVerdict) => void,
  o: { tickMs?: number; onExit?: (code: number | null, stderr: string) => void; now?: () => number } = {},
): ConntrackWatch {
  const now = o.now ?? (() => performance.now());
  const child = spawn('stdbuf', ['-oL', 'conntrack', '-E', '-p', 'tcp', '-o', 'id'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stopped = false;
  let stderr = '';
  // never outlive the agent, whatever path it exits by
  const reap = (): void => void child.kill('SIGTERM');
  process.once('exit', reap);
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (c: string) => (stderr = (stderr + c).slice(-4096)));
  createInterface({ input: child.stdout }).on('line', (line) => {
    const e = parseConntrackLine(line);
    if (e) for (const v of tracker.onEvent(e, now())) onVerdict(v);
  });
  const timer = setInterval(() => {
    for (const v of tracker.tick(now())) onVerdict(v);
  }, o.tickMs ?? 50);
  timer.unref();
  child.on('exit', (code) => {
    clearInterval(timer);
    process.off('exit', reap);
    if (!stopped) o.onExit?.(code, stderr.trim());
  });
  child.on('error', (err) => {
    clearInterval(timer);
    if (!stopped) o.onExit?.(null, err.message);
  });
  return {
    child,
    stop() {
      stopped = true;
      clearInterval(timer);
      child.kill('SIGTERM');
    },
  };
}
