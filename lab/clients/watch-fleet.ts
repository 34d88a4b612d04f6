/**
 * A fleet of long-lived watches in one process: N TLS connections to one apiserver address (the
 * VIP), spread over M local source addresses (each connection binds its own), each holding the
 * stand-in's ticking watch (apiserver-standin.ts: a ConfigMap watch with an event every ~200 ms,
 * the real watch JSON shape, chunked). Per connection it knows the node that serves it (the
 * stand-in's `x-ballast-lab-node` header), the time of its last event and how it ended.
 *
 * A "mark" (a stdin line, or SIGUSR2) opens a window at the moment an event is injected; when the
 * window closes, every connection that was open at the mark is reported: kept or not, how it
 * ended, its stall (the longest gap between two consecutive events in the window, the one that
 * spans the mark included), and a summary per serving node (lab/fleet-summary.ts), so that a test
 * can count "kept among the connections whose backend survived".
 *
 *   node dist/lab/clients/watch-fleet.js --url https://10.78.S.100:6443 --ca CA
 *        --source 10.78.S.150 --source 10.78.S.151 … [--count 2000] [--open-rate 250]
 *        [--duration 600000] [--window 10000] [--hang 3000] [--timeout 5000] [--retry 500]
 *        [--attempts 3] [--report 1000] [--token T] [--no-reopen] [--quiet-conns]
 *
 *   stdin: `mark LABEL [WINDOW_MS]`  opens a window now (default length --window); a mark
 *                                    during a window is refused (a `{"kind":"refused"}` line)
 *          `quit`                    as SIGTERM
 *   SIGUSR2: `mark signal` with the default window. SIGTERM / SIGINT: the open window (if any) is
 *   closed early and reported (`cut: true`), then the final line; exit 0.
 *
 * stdout, one JSON object per line (t = ms since the fleet started, monotonic; `at` = wall
 * clock, Date.now(), comparable with another process's on this machine):
 *   {"kind":"status","t":…,"open":1998,"opening":2,"queued":0,"nodes":{"n1":667,…},
 *    "connects":2000,"failedAttempts":0,"failures":{},"gaveUp":0,"lost":0,"events":…,"cpuPercent":12.5,
 *    "rssMiB":180.2}                       every --report ms; the last one has "final":true
 *   {"kind":"mark","window":1,"label":"sigkill","at":…,"t":…,"windowMs":10000,"open":2000,
 *    "nodes":{"n1":667,…}}                 the acknowledgement of a mark (inject after it)
 *   {"kind":"conn","window":1,"conn":17,"src":"10.78.S.167","node":"n2","ended":"kept",
 *    "stallMs":612.3,"events":47,"firstEventMs":540.1,"endedMs":null}
 *                                          one per connection open at the mark (see FleetConn;
 *                                          left out with --quiet-conns)
 *   {"kind":"window","window":1,"label":"sigkill","at":…,"windowMs":10000,"cut":false,
 *    "hangMs":3000,"all":{FleetSummary},"byNode":{"n1":{FleetSummary},…},"cpuPercent":…}
 *                                          after the window's conn lines
 *
 * What "ended" means: see FleetEnd (kept / reset / fin / hung / error). A connection silent for
 * more than --hang ms at the window's close is `hung` and is closed then.
 *
 * Reconnects: a connection lost DURING a window is not reopened during it (that would add
 * handshakes to the failover being measured, and a reopened connection is not a kept one); the
 * lost ones, hung ones included, are reopened AFTER the window closes (unless --no-reopen), at
 * --open-rate, each with at most --attempts tries --retry ms apart, then given up. A connection
 * lost between windows is reopened the same way. So the fleet can take several marks in a row;
 * wait for `open` to reach --count again before the next mark.
 *
 * Bounded: --duration ms in all; at most count × attempts × (windows + 1) connection attempts;
 * no reconnect storm (--open-rate per second, nothing opened during a window).
 *
 * File descriptors: one per connection. Node.js raises its soft RLIMIT_NOFILE to the hard limit
 * at start-up; the fleet reads the limit from /proc/self/limits and refuses a --count that does
 * not fit under it with 64 to spare.
 *
 * CPU: one event loop; ~2,000 connections × 5 events/s is ~10,000 small TLS records a second
 * (each parsed as one JSON line). The status lines carry the fleet's own CPU (% of one core) so
 * that a bench can see what the client costs on the machine it shares with the nodes.
 */
import { readFileSync } from 'node:fs';
import net, { isIP } from 'node:net';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import tls from 'node:tls';
import { parseArgs } from 'node:util';
import { runIfMain } from '../entry.js';
import { TICK_PATH } from '../apiserver-standin.js';
import { summarizeByNode, summarizeFleet, type FleetConn, type FleetEnd, type FleetSummary } from '../fleet-summary.js';

/** A status line. Times in ms. */
export interface FleetStatus {
  kind: 'status';
  t: number;
  open: number;
  opening: number;
  /** connections waiting to be (re)opened */
  queued: number;
  /** open connections per serving node */
  nodes: Record<string, number>;
  /** connections that got their first event (opens and reopens) */
  connects: number;
  failedAttempts: number;
  /** failed attempts by cause: errno or TLS code, HTTP_<status>, ETIMEDOUT (no first event within --timeout), EOF */
  failures: Record<string, number>;
  /** connections that gave up after --attempts tries */
  gaveUp: number;
  /** connections lost (in or between windows) */
  lost: number;
  /** events received in all */
  events: number;
  /** the fleet's CPU since the previous status line, % of one core */
  cpuPercent: number;
  rssMiB: number;
  final?: true;
}

/** A mark's acknowledgement. */
export interface FleetMark {
  kind: 'mark';
  window: number;
  label: string;
  /** wall clock of the mark, ms since the epoch */
  at: number;
  t: number;
  windowMs: number;
  /** connections open at the mark (the window's population) */
  open: number;
  nodes: Record<string, number>;
}

/** A window's summary line. */
export interface FleetWindow {
  kind: 'window';
  window: number;
  label: string;
  at: number;
  windowMs: number;
  /** closed early by SIGTERM / quit */
  cut: boolean;
  hangMs: number;
  all: FleetSummary;
  byNode: Record<string, FleetSummary>;
  /** the fleet's CPU over the window, % of one core */
  cpuPercent: number;
}

/** A mark refused (one already open, or a bad line). */
export interface FleetRefused {
  kind: 'refused';
  line: string;
  reason: string;
}

export type FleetLine = FleetStatus | FleetMark | FleetConn | FleetWindow | FleetRefused;

interface Options {
  host: string;
  port: number;
  /** the Host header */
  authority: string;
  ca: Buffer;
  sources: string[];
  count: number;
  openRate: number;
  durationMs: number;
  windowMs: number;
  hangMs: number;
  timeoutMs: number;
  retryMs: number;
  attempts: number;
  reportMs: number;
  token: string | undefined;
  reopen: boolean;
  conns: boolean;
}

const started = performance.now();
const now = (): number => performance.now() - started;
const r1 = (x: number): number => Math.round(x * 10) / 10;
const out = (o: FleetLine): void => void process.stdout.write(`${JSON.stringify(o)}\n`);

/** The window a connection is measured in (from the mark on). */
interface Measure {
  markAt: number;
  maxGap: number;
  events: number;
  firstAt: number | null;
  ended: Exclude<FleetEnd, 'kept' | 'hung'> | null;
  code?: string;
  endedAt: number | null;
}

class Conn {
  state: 'idle' | 'opening' | 'open' | 'gone' = 'idle';
  /** the serving node, from the response head; kept after a loss until the connection is reopened */
  node: string | null = null;
  lastEvent = 0;
  tries = 0;
  measure: Measure | null = null;
  #socket: tls.TLSSocket | null = null;
  // the response parser: head, then chunks (size line, data, CRLF), data split into lines
  #buf = '';
  #head = true;
  #chunk: 'size' | 'data' | 'crlf' = 'size';
  #left = 0;
  #line = '';

  constructor(
    readonly id: number,
    readonly src: string,
    readonly fleet: Fleet,
  ) {}

  open(): void {
    const o = this.fleet.o;
    this.state = 'opening';
    this.tries++;
    this.#buf = '';
    this.#head = true;
    this.#chunk = 'size';
    this.#left = 0;
    this.#line = '';
    // the TCP socket binds the connection's source address; TLS runs over it (no SNI: an IP)
    const tcp = net.connect({ host: o.host, port: o.port, localAddress: this.src });
    const s = tls.connect({ socket: tcp, ca: o.ca, host: o.host });
    this.#socket = s;
    s.setNoDelay(true);
    // latin1: one char per byte, so chunk sizes count chars (the events are ASCII JSON)
    s.setEncoding('latin1');
    const openTimer = setTimeout(() => this.#failOpen(s, 'ETIMEDOUT'), o.timeoutMs);
    s.once('secureConnect', () => {
      const auth = o.token === undefined ? '' : `Authorization: Bearer ${o.token}\r\n`;
      s.write(
        `GET ${TICK_PATH}?watch=true&timeoutSeconds=3600 HTTP/1.1\r\nHost: ${o.authority}\r\nAccept: application/json\r\nUser-Agent: ballast-lab-watch-fleet\r\n${auth}\r\n`,
      );
    });
    s.on('data', (d: string) => {
      if (this.#socket !== s) return;
      const wasOpening = this.state === 'opening';
      const bad = this.#parse(d);
      if (bad !== null) {
        if (wasOpening) {
          clearTimeout(openTimer);
          this.#failOpen(s, bad);
        } else {
          this.#lost(s, 'error', bad);
        }
        return;
      }
      if (wasOpening && this.state === 'open') clearTimeout(openTimer);
    });
    s.on('error', (e: NodeJS.ErrnoException) => {
      if (this.#socket !== s) return;
      if (this.state === 'opening') {
        clearTimeout(openTimer);
        this.#failOpen(s, e.code ?? 'error');
      } else this.#lost(s, e.code === 'ECONNRESET' ? 'reset' : 'error', e.code ?? e.message);
    });
    s.on('end', () => {
      if (this.#socket !== s) return;
      if (this.state === 'opening') {
        clearTimeout(openTimer);
        this.#failOpen(s, 'EOF');
      } else this.#lost(s, 'fin');
    });
    s.on('close', () => {
      if (this.#socket !== s) return;
      clearTimeout(openTimer);
      if (this.state === 'opening') this.#failOpen(s, 'closed');
      else if (this.state === 'open') this.#lost(s, 'fin');
    });
  }

  /** Closes the connection on purpose (hung, or the fleet stops): no loss is counted. */
  drop(): void {
    const s = this.#socket;
    this.#socket = null;
    if (this.state === 'open') this.fleet.left(this);
    // `node` stays: the window's report names the node that served a connection it closed
    this.state = 'gone';
    s?.destroy();
  }

  #failOpen(s: tls.TLSSocket, code: string): void {
    if (this.#socket !== s) return;
    this.#socket = null;
    s.destroy();
    this.state = 'idle';
    this.fleet.openFailed(this, code);
  }

  #lost(s: tls.TLSSocket, how: 'reset' | 'fin' | 'error', code?: string): void {
    if (this.#socket !== s) return;
    this.#socket = null;
    s.destroy();
    const m = this.measure;
    if (m !== null && m.ended === null) {
      m.ended = how;
      if (how === 'error' && code !== undefined) m.code = code;
      m.endedAt = now();
    }
    this.fleet.left(this);
    this.state = 'gone';
    this.fleet.lost(this);
  }

  /** Feeds received text to the parser; returns an error code when the response is not a watch. */
  #parse(d: string): string | null {
    this.#buf += d;
    if (this.#head) {
      const end = this.#buf.indexOf('\r\n\r\n');
      if (end < 0) return this.#buf.length > 16_384 ? 'EHEADTOOLONG' : null;
      const head = this.#buf.slice(0, end);
      this.#buf = this.#buf.slice(end + 4);
      this.#head = false;
      const status = /^HTTP\/1\.1 (\d{3}) /.exec(head)?.[1];
      if (status !== '200') return `HTTP_${status ?? 'BAD'}`;
      if (!/^transfer-encoding:\s*chunked/im.test(head)) return 'ENOTCHUNKED';
      this.node = /^x-ballast-lab-node:\s*(\S+)/im.exec(head)?.[1] ?? '?';
    }
    for (;;) {
      if (this.#chunk === 'size') {
        const i = this.#buf.indexOf('\r\n');
        if (i < 0) return null;
        const size = parseInt(this.#buf.slice(0, i), 16);
        this.#buf = this.#buf.slice(i + 2);
        if (!Number.isFinite(size)) return 'EBADCHUNK';
        // the last chunk: the server ended the watch; the socket's end follows
        if (size === 0) return null;
        this.#left = size;
        this.#chunk = 'data';
      }
      if (this.#chunk === 'data') {
        if (this.#buf.length === 0) return null;
        const part = this.#buf.length <= this.#left ? this.#buf : this.#buf.slice(0, this.#left);
        this.#buf = this.#buf.slice(part.length);
        this.#left -= part.length;
        const bad = this.#lines(part);
        if (bad !== null) return bad;
        if (this.#left > 0) return null;
        this.#chunk = 'crlf';
      }
      if (this.#buf.length < 2) return null;
      if (!this.#buf.startsWith('\r\n')) return 'EBADCHUNK';
      this.#buf = this.#buf.slice(2);
      this.#chunk = 'size';
    }
  }

  /** Splits chunk data into watch event lines (one JSON object each). */
  #lines(part: string): string | null {
    let from = 0;
    for (let nl = part.indexOf('\n'); nl >= 0; nl = part.indexOf('\n', from)) {
      const line = this.#line + part.slice(from, nl);
      this.#line = '';
      from = nl + 1;
      let type: unknown;
      try {
        type = (JSON.parse(line) as { type?: unknown }).type;
      } catch {
        return 'EBADEVENT';
      }
      if (type === 'ERROR') return 'EWATCHERROR';
      if (type !== 'ADDED' && type !== 'MODIFIED' && type !== 'BOOKMARK') return 'EBADEVENT';
      this.#event();
    }
    this.#line += part.slice(from);
    return this.#line.length > 65_536 ? 'EBADEVENT' : null;
  }

  #event(): void {
    const t = now();
    this.fleet.events++;
    if (this.state === 'opening') {
      this.state = 'open';
      this.tries = 0;
      this.lastEvent = t;
      this.fleet.opened(this);
      return;
    }
    const m = this.measure;
    if (m !== null && m.ended === null) {
      m.maxGap = Math.max(m.maxGap, t - this.lastEvent);
      m.events++;
      m.firstAt ??= t;
    }
    this.lastEvent = t;
  }
}

class Fleet {
  readonly conns: Conn[];
  /** connections waiting to be (re)opened, in order */
  readonly queue: Conn[] = [];
  events = 0;
  connects = 0;
  failedAttempts = 0;
  gaveUp = 0;
  lostCount = 0;
  windows = 0;
  window: { n: number; label: string; at: number; t: number; ms: number; timer: NodeJS.Timeout; cpu: NodeJS.CpuUsage } | null = null;
  readonly perNode = new Map<string, number>();
  /** failed opening attempts by cause (errno or TLS code, HTTP_<status>, ETIMEDOUT, …) */
  readonly failures: Record<string, number> = {};
  stopped = false;

  constructor(readonly o: Options) {
    this.conns = Array.from({ length: o.count }, (_, i) => new Conn(i, o.sources[i % o.sources.length]!, this));
    this.queue.push(...this.conns);
  }

  /** Opens up to `n` queued connections (none during a window). */
  openSome(n: number): void {
    if (this.window !== null || this.stopped) return;
    for (let i = 0; i < n && this.queue.length > 0; i++) {
      this.queue.shift()!.open();
    }
  }

  opened(c: Conn): void {
    this.connects++;
    this.perNode.set(c.node!, (this.perNode.get(c.node!) ?? 0) + 1);
  }

  left(c: Conn): void {
    if (c.node !== null && c.state === 'open') this.perNode.set(c.node, (this.perNode.get(c.node) ?? 1) - 1);
  }

  openFailed(c: Conn, code: string): void {
    this.failedAttempts++;
    this.failures[code] = (this.failures[code] ?? 0) + 1;
    if (c.tries >= this.o.attempts) {
      this.gaveUp++;
      c.state = 'gone';
      return;
    }
    // retried after --retry ms, behind the rate limit
    setTimeout(() => {
      if (!this.stopped) this.queue.push(c);
    }, this.o.retryMs).unref();
  }

  lost(c: Conn): void {
    this.lostCount++;
    // during a window it waits for the window's end (see the file comment)
    if (this.window === null && this.o.reopen && !this.stopped) this.#requeue(c);
  }

  #requeue(c: Conn): void {
    c.tries = 0;
    c.state = 'idle';
    c.node = null;
    this.queue.push(c);
  }

  open(): number {
    return this.conns.filter((c) => c.state === 'open').length;
  }

  nodes(): Record<string, number> {
    return Object.fromEntries([...this.perNode].filter(([, v]) => v > 0).sort(([a], [b]) => a.localeCompare(b)));
  }

  mark(label: string, ms: number): FleetMark | string {
    if (this.stopped) return 'the fleet is stopping';
    if (this.window !== null) return `window ${this.window.n} (${this.window.label}) is still open`;
    const t = now();
    const n = ++this.windows;
    for (const c of this.conns) {
      c.measure = c.state === 'open' ? { markAt: t, maxGap: 0, events: 0, firstAt: null, ended: null, endedAt: null } : null;
    }
    this.window = { n, label, at: Date.now(), t, ms, timer: setTimeout(() => this.closeWindow(false), ms), cpu: process.cpuUsage() };
    return { kind: 'mark', window: n, label, at: this.window.at, t: r1(t), windowMs: ms, open: this.open(), nodes: this.nodes() };
  }

  closeWindow(cut: boolean): void {
    const w = this.window;
    if (w === null) return;
    clearTimeout(w.timer);
    const t = now();
    const rows: FleetConn[] = [];
    for (const c of this.conns) {
      const m = c.measure;
      if (m === null) continue;
      c.measure = null;
      let ended: FleetEnd;
      let stall = m.maxGap;
      let endedAt: number | null = null;
      if (m.ended !== null) {
        ended = m.ended;
        endedAt = m.endedAt;
        stall = Math.max(stall, (m.endedAt ?? t) - c.lastEvent);
      } else {
        const silent = t - c.lastEvent;
        stall = Math.max(stall, silent);
        if (silent > this.o.hangMs || m.events === 0) {
          ended = 'hung';
          endedAt = t;
          c.drop();
          this.lostCount++;
        } else ended = 'kept';
      }
      rows.push({
        kind: 'conn',
        window: w.n,
        conn: c.id,
        src: c.src,
        node: c.node ?? '?',
        ended,
        ...(m.code === undefined ? {} : { code: m.code }),
        stallMs: r1(stall),
        events: m.events,
        firstEventMs: m.firstAt === null ? null : r1(m.firstAt - m.markAt),
        endedMs: endedAt === null ? null : r1(endedAt - m.markAt),
      });
    }
    const cpu = process.cpuUsage(w.cpu);
    this.window = null;
    if (this.o.conns) process.stdout.write(rows.map((r) => `${JSON.stringify(r)}\n`).join(''));
    out({
      kind: 'window',
      window: w.n,
      label: w.label,
      at: w.at,
      windowMs: r1(t - w.t),
      cut,
      hangMs: this.o.hangMs,
      all: summarizeFleet(rows),
      byNode: summarizeByNode(rows),
      cpuPercent: r1(((cpu.user + cpu.system) / 1000 / Math.max(1, t - w.t)) * 100),
    });
    // the connections lost in the window (and the hung ones, just closed) are reopened now
    if (this.o.reopen && !this.stopped) for (const c of this.conns) if (c.state === 'gone' && c.tries < this.o.attempts) this.#requeue(c);
  }

  status(cpuPercent: number, final: boolean): FleetStatus {
    const opening = this.conns.filter((c) => c.state === 'opening').length;
    return {
      kind: 'status',
      t: r1(now()),
      open: this.open(),
      opening,
      queued: this.queue.length,
      nodes: this.nodes(),
      connects: this.connects,
      failedAttempts: this.failedAttempts,
      failures: { ...this.failures },
      gaveUp: this.gaveUp,
      lost: this.lostCount,
      events: this.events,
      cpuPercent: r1(cpuPercent),
      rssMiB: r1(process.memoryUsage.rss() / 1048576),
      ...(final ? { final: true as const } : {}),
    };
  }
}

/** The soft RLIMIT_NOFILE of this process (from /proc/self/limits); Infinity when unlimited or unknown. */
function openFilesLimit(): number {
  try {
    const m = /^Max open files\s+(\S+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    return m === null || m[1] === 'unlimited' ? Infinity : Number(m[1]);
  } catch {
    return Infinity;
  }
}

function parseOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string' },
      ca: { type: 'string' },
      source: { type: 'string', multiple: true },
      count: { type: 'string', default: '2000' },
      'open-rate': { type: 'string', default: '250' },
      duration: { type: 'string', default: '600000' },
      window: { type: 'string', default: '10000' },
      hang: { type: 'string', default: '3000' },
      timeout: { type: 'string', default: '5000' },
      retry: { type: 'string', default: '500' },
      attempts: { type: 'string', default: '3' },
      report: { type: 'string', default: '1000' },
      token: { type: 'string' },
      'no-reopen': { type: 'boolean', default: false },
      'quiet-conns': { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (!values.url || !values.ca) throw new TypeError('--url and --ca are required');
  const num = (name: string, v: string, lo: number, hi: number): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < lo || n > hi) throw new TypeError(`--${name} must be an integer from ${lo} to ${hi}, got ${v}`);
    return n;
  };
  const url = new URL(values.url);
  if (url.protocol !== 'https:') throw new TypeError(`--url must be https://, got ${values.url}`);
  // URL.hostname keeps an IPv6 literal's brackets; tls.connect wants the bare address
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const family = isIP(host);
  if (family === 0) throw new TypeError(`--url must name an IP address (the VIP), got ${url.hostname}`);
  const sources = values.source ?? [];
  if (sources.length === 0) throw new TypeError('--source is required (one or more local addresses to bind)');
  for (const s of sources) if (isIP(s) !== family) throw new TypeError(`--source ${s} is not an IPv${family} address (the --url's family)`);
  const o: Options = {
    host,
    port: Number(url.port || 443),
    authority: url.host,
    ca: readFileSync(values.ca),
    sources,
    count: num('count', values.count, 1, 50_000),
    openRate: num('open-rate', values['open-rate'], 1, 10_000),
    durationMs: num('duration', values.duration, 100, 3_600_000),
    windowMs: num('window', values.window, 100, 600_000),
    hangMs: num('hang', values.hang, 10, 600_000),
    timeoutMs: num('timeout', values.timeout, 10, 60_000),
    retryMs: num('retry', values.retry, 10, 60_000),
    attempts: num('attempts', values.attempts, 1, 100),
    reportMs: num('report', values.report, 10, 60_000),
    token: values.token,
    reopen: !values['no-reopen'],
    conns: !values['quiet-conns'],
  };
  const limit = openFilesLimit();
  if (o.count + 64 > limit)
    throw new RangeError(
      `--count ${o.count} does not fit under the open-files limit ${limit} (RLIMIT_NOFILE) with 64 to spare; raise it (ulimit -n) or open fewer`,
    );
  return o;
}

const LABEL_RE = /^[A-Za-z0-9_.:-]{1,64}$/;

function main(argv: string[]): Promise<number> {
  const o = parseOptions(argv);
  const fleet = new Fleet(o);
  // the rate limit: a batch every 50 ms
  const batch = Math.max(1, Math.round(o.openRate / 20));
  const opener = setInterval(() => fleet.openSome(batch), 50);
  let cpuAt = { t: now(), u: process.cpuUsage() };
  const cpuSince = (): number => {
    const t = now();
    const u = process.cpuUsage(cpuAt.u);
    const pct = ((u.user + u.system) / 1000 / Math.max(1, t - cpuAt.t)) * 100;
    cpuAt = { t, u: process.cpuUsage() };
    return pct;
  };
  const reporter = setInterval(() => out(fleet.status(cpuSince(), false)), o.reportMs);
  const doMark = (line: string, label: string, ms: number): void => {
    const r = fleet.mark(label, ms);
    if (typeof r === 'string') out({ kind: 'refused', line, reason: r });
    else out(r);
  };
  return new Promise((resolve) => {
    const stop = (): void => {
      if (fleet.stopped) return;
      fleet.closeWindow(true);
      fleet.stopped = true;
      clearInterval(opener);
      clearInterval(reporter);
      clearTimeout(deadline);
      out(fleet.status(cpuSince(), true));
      for (const c of fleet.conns) c.drop();
      rl.close();
      resolve(0);
    };
    const deadline = setTimeout(stop, o.durationMs);
    const rl = createInterface({ input: process.stdin });
    rl.on('line', (raw) => {
      const line = raw.trim();
      if (line === '') return;
      if (line === 'quit') return stop();
      const [cmd, label, ms, ...rest] = line.split(/\s+/);
      if (cmd !== 'mark' || label === undefined || !LABEL_RE.test(label) || rest.length > 0) {
        return out({ kind: 'refused', line, reason: `expected "mark LABEL [WINDOW_MS]" (LABEL ${LABEL_RE}) or "quit"` });
      }
      const windowMs = ms === undefined ? o.windowMs : Number(ms);
      if (!Number.isInteger(windowMs) || windowMs < 100 || windowMs > 600_000)
        return out({ kind: 'refused', line, reason: `WINDOW_MS must be an integer 100..600000, got ${ms}` });
      doMark(line, label, windowMs);
    });
    process.on('SIGUSR2', () => doMark('SIGUSR2', 'signal', o.windowMs));
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
}

runIfMain(import.meta.url, 'watch-fleet', main, { failStatus: 2 });
