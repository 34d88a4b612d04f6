/**
 * The reconnect storm's figures (pure): bench/storm.ts feeds them the client's events
 * (bench/storm-client.ts), the stand-ins' counters and /proc samples. Times in ms.
 */

/** One line of the storm client's output (see bench/storm-client.ts). */
export interface StormEvent {
  e: 'up' | 'down' | 'fail' | 'end';
  /** connection id (absent on "end") */
  c?: number;
  /** Date.now() when it happened, ms */
  t: number;
  /** up: the serving stand-in's name (its x-ballast-lab-node header) */
  node?: string | null;
  /** down / fail: why */
  why?: string;
  /** up: attempts it took */
  a?: number;
  /** up: the successful attempt's TCP connect, TLS handshake and response-header times, ms */
  ms?: [number, number, number];
}

/**
 * The wait before the next attempt after `failures` consecutive failed ones (0 = after the first
 * failure), ms: client-go's exponential backoff manager — `baseMs` doubled per failure, capped at
 * `maxMs`, plus `rand` (0..1) × that much jitter (wait.Jitter with factor 1.0).
 */
export function backoffMs(failures: number, baseMs: number, maxMs: number, rand: number): number {
  const d = Math.min(maxMs, baseMs * 2 ** Math.min(failures, 40));
  return d + rand * d;
}

/**
 * The `q`-quantile (0..1, nearest rank: the ⌈q·n⌉-th smallest) of `times`, where null means
 * "never" (sorts after every number). Null when that rank is a never, or for no values. So the
 * 0.99 of 1,000 connections is the time by which 990 of them were back.
 */
export function timeToFraction(times: readonly (number | null)[], q: number): number | null {
  if (times.length === 0) return null;
  const s = times.map((x) => x ?? Infinity).sort((a, b) => a - b);
  const v = s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
  return Number.isFinite(v) ? v : null;
}

/** What the storm did to the connections that were up when the holder died. */
export interface StormFigures {
  /** connections up at the death (the storm's size) */
  connections: number;
  /** of them, re-established (a new 200 watch) before the end of the observation */
  reestablished: number;
  /** death → 50 % / 99 % / 100 % of them re-established, ms; null: not reached */
  t50Ms: number | null;
  t99Ms: number | null;
  t100Ms: number | null;
  /** death → the client noticed (first "down" after the death), median and 99 %, ms */
  detectP50Ms: number | null;
  detectP99Ms: number | null;
  /** noticed → re-established, per connection, median and 99 %, ms (the load balancer's part) */
  reconnectP50Ms: number | null;
  reconnectP99Ms: number | null;
  /** failed attempts after the death, in all and per reason */
  failed: number;
  failReasons: Record<string, number>;
  /** connections that needed more than one attempt */
  retried: number;
  /** re-established connections per serving stand-in (the client's view, from the header) */
  perNode: Record<string, number>;
  /**
   * the re-establishing attempts' steps, median and 99 % over the connections, ms: TCP connect
   * (SYN → established; a dropped SYN costs 1 s), TLS handshake, response headers
   */
  steps: { tcp: [number | null, number | null]; tls: [number | null, number | null]; headers: [number | null, number | null] };
}

/**
 * The storm's figures from the client's events (pure). `upAtDeath`: the connection ids that
 * were up at `deathAt` (ms since the epoch). A connection's re-establishment is its first "up"
 * after `deathAt`; its detection its first "down" after `deathAt`. Events of other connections
 * are ignored; failed attempts are counted for every connection after `deathAt`.
 */
export function stormFigures(events: readonly StormEvent[], deathAt: number, upAtDeath: readonly number[]): StormFigures {
  const want = new Set(upAtDeath);
  const back = new Map<number, StormEvent>();
  const noticed = new Map<number, number>();
  const failReasons: Record<string, number> = {};
  const tried = new Set<number>();
  let failed = 0;
  for (const ev of events) {
    if (ev.t < deathAt || ev.c === undefined || !want.has(ev.c)) continue;
    if (ev.e === 'down' && !noticed.has(ev.c) && !back.has(ev.c)) noticed.set(ev.c, ev.t);
    else if (ev.e === 'up' && !back.has(ev.c)) back.set(ev.c, ev);
    else if (ev.e === 'fail') {
      failed++;
      if (!back.has(ev.c)) tried.add(ev.c);
      const why = ev.why ?? 'unknown';
      failReasons[why] = (failReasons[why] ?? 0) + 1;
    }
  }
  const ids = [...want];
  const times = ids.map((c) => (back.has(c) ? back.get(c)!.t - deathAt : null));
  const detect = ids.map((c) => (noticed.has(c) ? noticed.get(c)! - deathAt : null));
  const reconnect = ids.flatMap((c) => (back.has(c) && noticed.has(c) ? [back.get(c)!.t - noticed.get(c)!] : []));
  const perNode: Record<string, number> = {};
  for (const ev of back.values()) {
    const n = ev.node ?? 'unknown';
    perNode[n] = (perNode[n] ?? 0) + 1;
  }
  return {
    connections: ids.length,
    reestablished: back.size,
    t50Ms: timeToFraction(times, 0.5),
    t99Ms: timeToFraction(times, 0.99),
    t100Ms: timeToFraction(times, 1),
    detectP50Ms: timeToFraction(detect, 0.5),
    detectP99Ms: timeToFraction(detect, 0.99),
    reconnectP50Ms: timeToFraction(reconnect, 0.5),
    reconnectP99Ms: timeToFraction(reconnect, 0.99),
    failed,
    failReasons,
    retried: tried.size,
    perNode,
    steps: {
      tcp: stepQuantiles(back, 0),
      tls: stepQuantiles(back, 1),
      headers: stepQuantiles(back, 2),
    },
  };
}

function stepQuantiles(back: ReadonlyMap<number, StormEvent>, k: 0 | 1 | 2): [number | null, number | null] {
  const xs = [...back.values()].flatMap((ev) => (ev.ms === undefined ? [] : [ev.ms[k]]));
  return [timeToFraction(xs, 0.5), timeToFraction(xs, 0.99)];
}

/** The connection ids whose last event at or before `t` is "up" (pure). */
export function upAt(events: readonly StormEvent[], t: number): number[] {
  const last = new Map<number, StormEvent['e']>();
  for (const ev of events) if (ev.c !== undefined && ev.t <= t) last.set(ev.c, ev.e);
  return [...last]
    .filter(([, e]) => e === 'up')
    .map(([c]) => c)
    .sort((a, b) => a - b);
}

/** How evenly new connections landed on the surviving backends. */
export interface Spread {
  /** per backend (every one of `backends`, 0 when none landed there) */
  counts: Record<string, number>;
  total: number;
  /** the busiest backend's count over the fair share (total / backends); 1 = perfectly even; null for none */
  maxOverFair: number | null;
}

/** The spread of `counts` over `backends` (pure); counts of other names are left out. */
export function spread(counts: Readonly<Record<string, number>>, backends: readonly string[]): Spread {
  const c: Record<string, number> = {};
  for (const b of backends) c[b] = counts[b] ?? 0;
  const total = Object.values(c).reduce((a, b) => a + b, 0);
  const max = Math.max(0, ...Object.values(c));
  return { counts: c, total, maxOverFair: total === 0 || backends.length === 0 ? null : Math.round((max / (total / backends.length)) * 1000) / 1000 };
}

/** CPU time of a process from its /proc/PID/stat line, in clock ticks (`getconf CLK_TCK`, 100 on Linux). */
export interface ProcCpu {
  utime: number;
  stime: number;
  /** of its waited-for children (a keepalived check script's runs) */
  cutime: number;
  cstime: number;
}

/**
 * Parses /proc/PID/stat (pure): fields 14–17 (utime, stime, cutime, cstime), counted after the
 * command name's closing parenthesis (the name itself may hold spaces and parentheses).
 * @throws Error when the text is not a stat line.
 */
export function parseProcStat(text: string): ProcCpu {
  const close = text.lastIndexOf(')');
  const f =
    close < 0
      ? []
      : text
          .slice(close + 2)
          .trim()
          .split(/\s+/);
  // f[0] is field 3 (state): field k is f[k - 3]
  const n = (k: number): number => Number(f[k - 3]);
  const cpu = { utime: n(14), stime: n(15), cutime: n(16), cstime: n(17) };
  if (Object.values(cpu).some((v) => !Number.isInteger(v) || v < 0)) throw new Error(`not a /proc/PID/stat line: ${text.slice(0, 80)}`);
  return cpu;
}

/** The machine's softirq time from /proc/stat's first (`cpu`) line, in clock ticks (pure). @throws when absent. */
export function parseSoftirq(procStat: string): number {
  const m = /^cpu\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(procStat);
  if (m === null) throw new Error('/proc/stat has no cpu line');
  return Number(m[7]);
}

/**
 * /proc/net/netstat or /proc/net/snmp (pure): every "Proto: names…" line followed by its
 * "Proto: values…" line, as `Proto:Name` → value (e.g. "TcpExt:ListenOverflows").
 */
export function parseNetstat(text: string): Record<string, number> {
  const out: Record<string, number> = {};
  const lines = text.split('\n');
  for (let i = 0; i + 1 < lines.length; i++) {
    const [names, values] = [lines[i]!.trim().split(/\s+/), lines[i + 1]!.trim().split(/\s+/)];
    const proto = names[0];
    if (proto === undefined || !proto.endsWith(':') || values[0] !== proto || names.length !== values.length) continue;
    if (values.slice(1).some((v) => !/^-?\d+$/.test(v))) continue;
    for (let k = 1; k < names.length; k++) out[`${proto}${names[k]}`] = Number(values[k]);
    i++;
  }
  return out;
}

/** `conntrack -S` (pure): each counter summed over the CPUs, e.g. { insert_failed: 0, drop: 0, … }. */
export function parseConntrackStats(text: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/(\w+)=(\d+)/g)) if (m[1] !== 'cpu') out[m[1]!] = (out[m[1]!] ?? 0) + Number(m[2]);
  return out;
}

/** `after` − `before` for the `keys` (pure; absent counts 0). */
export function counterDelta(
  before: Readonly<Record<string, number>>,
  after: Readonly<Record<string, number>>,
  keys: readonly string[],
): Record<string, number> {
  return Object.fromEntries(keys.map((k) => [k, (after[k] ?? 0) - (before[k] ?? 0)]));
}
