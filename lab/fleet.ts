/**
 * Runs the watch fleet (lab/clients/watch-fleet.ts) in a lab's client namespace and drives it:
 * source addresses added to the client, the fleet started, waited for until every connection is
 * open, marks sent on its stdin and each window's lines collected. Used by bench/hitless.ts and
 * the hitless-failover tests.
 */
import type { Lab, LabProcess } from './lab.js';
import { compiledScript, onJsonLines } from './lab.js';
import type { FleetLine, FleetMark, FleetStatus, FleetWindow } from './clients/watch-fleet.js';
import type { FleetConn } from './fleet-summary.js';
import { waitFor } from './wait.js';

/** Options of {@link startWatchFleet}. Times in ms. */
export interface WatchFleetOptions {
  /** https://VIP:port (IPv6: https://[VIP]:port); its family picks the source addresses' */
  url: string;
  /** connections (default 2000) */
  count?: number;
  /** source addresses (default 20, 1..100; lab.addClientSources) */
  sources?: number;
  /** new connections per second (default 250) */
  openRate?: number;
  /** the fleet's whole life (default 600000) */
  durationMs?: number;
  /** default window length (default 10000) */
  windowMs?: number;
  /** silence that makes an open connection `hung` at a window's close (default 3000) */
  hangMs?: number;
  /** tries per connection before it gives up (default 5) */
  attempts?: number;
  /** reopen lost connections after each window (default true) */
  reopen?: boolean;
  token?: string;
  /** the fleet's output is appended here too (relative: under lab.dir) */
  logFile?: string;
}

/** One window's outcome: the mark's acknowledgement, every connection's line and the summary. */
export interface FleetWindowResult {
  mark: FleetMark;
  conns: FleetConn[];
  window: FleetWindow;
}

/** A running fleet. */
export interface WatchFleet {
  proc: LabProcess;
  /** the latest status line (undefined before the first) */
  status(): FleetStatus | undefined;
  /**
   * Resolves with the first status line that shows none opening or queued (every connection
   * open, or given up after its attempts) and at least `count` open (default: every one).
   * @throws after `timeoutMs` (default 60000) or when the fleet exits.
   */
  waitOpen(opts?: { count?: number; timeoutMs?: number }): Promise<FleetStatus>;
  /**
   * Opens a window now: resolves with the fleet's acknowledgement once it is open (inject the
   * event then) and `done`, which resolves when the window closed (its length `windowMs`, default
   * the fleet's). @throws when the fleet refuses the mark or does not acknowledge within 5 s.
   */
  mark(label: string, windowMs?: number): Promise<{ mark: FleetMark; done: Promise<FleetWindowResult> }>;
  /** SIGTERM: an open window is cut and reported; resolves with the final status line. */
  stop(): Promise<FleetStatus | undefined>;
}

/**
 * Adds `sources` addresses to the client namespace and starts the fleet there against `url`
 * with the lab CA; resolves once it runs (its first status line). Connections open at
 * `openRate` per second: wait with {@link WatchFleet.waitOpen}.
 */
export async function startWatchFleet(lab: Lab, o: WatchFleetOptions): Promise<WatchFleet> {
  const family = /^https:\/\/\[/.test(o.url) ? 6 : 4;
  const addrs = await lab.addClientSources(o.sources ?? 20);
  const sources = family === 6 ? addrs.ipv6 : addrs.ipv4;
  if (sources.length === 0) throw new Error('watch fleet: an IPv6 URL needs an IPv6 lab');
  const proc = lab.spawn(
    lab.client.netns,
    [
      process.execPath,
      compiledScript('watch-fleet'),
      '--url',
      o.url,
      '--ca',
      lab.ca.certFile,
      ...sources.flatMap((s) => ['--source', s]),
      '--count',
      String(o.count ?? 2000),
      '--open-rate',
      String(o.openRate ?? 250),
      '--duration',
      String(o.durationMs ?? 600_000),
      '--window',
      String(o.windowMs ?? 10_000),
      '--hang',
      String(o.hangMs ?? 3000),
      '--report',
      '500',
      '--attempts',
      String(o.attempts ?? 5),
      ...(o.reopen === false ? ['--no-reopen'] : []),
      ...(o.token === undefined ? [] : ['--token', o.token]),
    ],
    { stdin: true, ...(o.logFile === undefined ? {} : { logFile: o.logFile }) },
  );
  let last: FleetStatus | undefined;
  let final: FleetStatus | undefined;
  let conns: FleetConn[] = [];
  const marks: ((m: FleetMark | string) => void)[] = [];
  const windows = new Map<number, (w: FleetWindowResult) => void>();
  const acks = new Map<number, FleetMark>();
  onJsonLines<FleetLine>(proc, (l) => {
    switch (l.kind) {
      case 'status':
        last = l;
        if (l.final) final = l;
        break;
      case 'mark':
        acks.set(l.window, l);
        conns = [];
        marks.shift()?.(l);
        break;
      case 'refused':
        marks.shift()?.(l.reason);
        break;
      case 'conn':
        conns.push(l);
        break;
      case 'window': {
        const mark = acks.get(l.window);
        if (mark !== undefined) windows.get(l.window)?.({ mark, conns, window: l });
        conns = [];
        break;
      }
    }
  });
  const exited = (): string => `watch fleet exited; output:\n${proc.output().slice(-2000)}`;
  let gone = false;
  void proc.exited.then(() => (gone = true));
  await waitFor(
    async () => {
      if (gone) throw new Error(exited());
      return last;
    },
    (s) => s !== undefined,
    { timeoutMs: 10_000, intervalMs: 50, what: 'the watch fleet to start' },
  );
  const count = o.count ?? 2000;
  return {
    proc,
    status: () => last,
    waitOpen: (w = {}) =>
      waitFor(
        async () => {
          if (gone) throw new Error(exited());
          return last!;
        },
        (s) => s.open >= (w.count ?? count) && s.opening === 0 && s.queued === 0,
        { timeoutMs: w.timeoutMs ?? 60_000, intervalMs: 100, what: `${w.count ?? count} watches open` },
      ),
    mark: async (label, windowMs) => {
      const ack = new Promise<FleetMark | string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`watch fleet: no acknowledgement of mark ${label} within 5 s`)), 5000);
        marks.push((m) => {
          clearTimeout(timer);
          resolve(m);
        });
      });
      proc.child.stdin?.write(`mark ${label}${windowMs === undefined ? '' : ` ${windowMs}`}\n`);
      const m = await ack;
      if (typeof m === 'string') throw new Error(`watch fleet refused mark ${label}: ${m}`);
      const done = new Promise<FleetWindowResult>((resolve, reject) => {
        windows.set(m.window, resolve);
        void proc.exited.then(() => reject(new Error(`watch fleet exited before window ${m.window} closed`)));
      });
      done.catch(() => undefined);
      return { mark: m, done };
    },
    stop: async () => {
      proc.kill('SIGTERM');
      await proc.exited;
      return final;
    },
  };
}
