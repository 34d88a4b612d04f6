/**
 * What the agent tells its service manager, in the sd_notify(3) protocol (systemd; the packaged
 * unit is `Type=notify`, `NotifyAccess=main`, `WatchdogSec=`): datagrams of newline-separated
 * `KEY=value` lines on $NOTIFY_SOCKET (the addon sends them: src/native.ts `notify`).
 *
 *   when                                              what
 *   the election has its first state (Backup, or      READY=1  STATUS=<state line>  MAINPID=<pid>
 *     Master for the owner); no election: every
 *     phase is up
 *   every WATCHDOG_USEC / 2, while the election's     WATCHDOG=1
 *     timers run on time
 *   every 1 s, when the state line changed            STATUS=<state line>
 *   a reload starts (SIGHUP, POST /reload)            RELOADING=1  MONOTONIC_USEC=<CLOCK_MONOTONIC µs>
 *   the reload ended (applied, refused or failed)     READY=1  STATUS=<state line>
 *   the agent stops (signal, stop(), fatal event)     STOPPING=1  STATUS=stopping
 *
 * The state line reads "MASTER for 10.0.0.100, 3 of 3 backends ready" ({@link statusLine}).
 *
 * The pings come from the main thread's timers, the thread the election runs on (vrrp/host.ts):
 * a main thread stuck for WatchdogSec sends none, and systemd kills the agent (SIGABRT) and, with
 * Restart=on-failure, starts it again. (Its adverts stop sooner: the advert pacer's hold,
 * vrrp/pacing.ts PACER_HOLD_MS.) They are also gated on the election's own timers running (its
 * next deadline at most a second past, vrrp/host.ts alive): a thread that runs while the
 * election's timer chain is broken sends none either.
 *
 * Without NOTIFY_SOCKET (not started by systemd) everything here is a no-op, silently.
 * {@link serviceManagerFromEnv} removes NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID from the
 * environment once read, as sd_notify(3)'s `unset_environment` does: the programs the agent runs
 * (nft, conntrack) are not the service's main process and must not speak for it.
 */
import { notify } from '../native.js';
import type { Logger } from '../log/log.js';
import type { StatusDocument } from './status.js';

/** The service manager the agent reports to: where, and the watchdog it expects. */
export interface ServiceManager {
  /** $NOTIFY_SOCKET: an absolute path, or an abstract socket name starting with '@'. */
  socket: string;
  /** $WATCHDOG_USEC when it is meant for this process (µs); null without a watchdog. */
  watchdogUsec: number | null;
  /** Why WATCHDOG_USEC was ignored (not a positive integer), for one log line; absent when fine. */
  problem?: string;
}

/**
 * Reads what systemd sets for a Type=notify service with WatchdogSec (systemd.exec(5),
 * sd_watchdog_enabled(3)): NOTIFY_SOCKET, and WATCHDOG_USEC unless WATCHDOG_PID names another
 * process. Removes the three variables from `env` (sd_notify(3) unset_environment semantics).
 * @returns null when NOTIFY_SOCKET is unset or empty (nothing to tell).
 */
export function serviceManagerFromEnv(env: NodeJS.ProcessEnv = process.env, pid: number = process.pid): ServiceManager | null {
  const socket = env.NOTIFY_SOCKET;
  const usec = env.WATCHDOG_USEC;
  const wpid = env.WATCHDOG_PID;
  delete env.NOTIFY_SOCKET;
  delete env.WATCHDOG_USEC;
  delete env.WATCHDOG_PID;
  if (socket === undefined || socket === '') return null;
  // the watchdog belongs to WATCHDOG_PID when it is set (sd_watchdog_enabled(3))
  if (usec === undefined || (wpid !== undefined && wpid !== String(pid))) return { socket, watchdogUsec: null };
  const n = /^[0-9]+$/.test(usec) ? Number(usec) : NaN;
  if (!Number.isSafeInteger(n) || n <= 0)
    return { socket, watchdogUsec: null, problem: `WATCHDOG_USEC=${JSON.stringify(usec)} is not a positive integer of microseconds; no watchdog pings` };
  return { socket, watchdogUsec: n };
}

/** One sd_notify(3) message from `fields`, in order: "KEY=value" lines; a newline in a value becomes a space. */
export function notifyMessage(fields: readonly (readonly [string, string | number | bigint])[]): string {
  return fields.map(([k, v]) => `${k}=${String(v).replace(/[\r\n]+/g, ' ')}`).join('\n');
}

/** CLOCK_MONOTONIC in µs, as MONOTONIC_USEC wants it (libuv's hrtime reads CLOCK_MONOTONIC on Linux). */
export function monotonicUsec(): bigint {
  return process.hrtime.bigint() / 1000n;
}

/**
 * The one-line state for STATUS= (what `systemctl status ballast` shows):
 * "MASTER for 10.0.0.100, 3 of 3 backends ready", "BACKUP for 10.0.0.100 (master 10.0.0.2)",
 * "no election; local endpoint 127.0.0.1:7443 (ebpf), 1 of 3 backends ready".
 */
export function statusLine(doc: StatusDocument): string {
  const ready = doc.backends.filter((b) => b.healthy).length;
  const backends = doc.backends.length === 0 ? '' : `, ${ready} of ${doc.backends.length} ${doc.backends.length === 1 ? 'backend' : 'backends'} ready`;
  if (doc.state === 'none') {
    const local = doc.local.mode === 'off' ? 'local endpoint off' : `local endpoint ${doc.local.endpoints.join(' ')} (${doc.local.mode})`;
    return `no election; ${local}${backends}`;
  }
  const master = doc.state !== 'master' && doc.masterAddress !== null ? ` (master ${doc.masterAddress})` : '';
  const standby = doc.standby ? ' (standby: not a member yet)' : '';
  return `${doc.state.toUpperCase()} for ${doc.vips.join(', ')}${master}${standby}${backends}`;
}

/** How often STATUS= is refreshed (sent only when the line changed), ms. */
export const STATUS_REFRESH_MS = 1000;

/** What the agent calls at its moments (see the table at the top). Every method is a no-op without a manager. */
export interface ServiceNotifier {
  /** Whether a service manager listens (NOTIFY_SOCKET was set). */
  readonly enabled: boolean;
  /**
   * READY=1 with STATUS= and MAINPID= (start-up, and the end of each reload); the first call
   * starts the watchdog pings and the status refresh. Ignored once stopping.
   */
  ready(): Promise<void>;
  /** RELOADING=1 with MONOTONIC_USEC=. Ignored once stopping. */
  reloading(): void;
  /** STOPPING=1 with STATUS=; ends the pings and the refresh. Idempotent. */
  stopping(): void;
}

/** What {@link createNotifier} needs from the agent. */
export interface NotifierDeps {
  log: Logger;
  /** The agent's /status document (for STATUS=). */
  status: () => Promise<StatusDocument>;
  /**
   * The watchdog's gate: resolves while the election runs on time (vrrp/host.ts alive), rejects
   * when it does not; resolves at once when no election runs.
   */
  alive: () => Promise<void>;
  /** Sends one message (default: the addon's notify). @throws NativeError as src/native.ts notify. */
  send?: (socket: string, message: string) => void;
  /** CLOCK_MONOTONIC µs (default {@link monotonicUsec}). */
  monotonicUsec?: () => bigint;
  /** MAINPID= (default process.pid). */
  pid?: number;
  /** STATUS= refresh period, ms (default {@link STATUS_REFRESH_MS}). */
  statusRefreshMs?: number;
}

/**
 * The agent's notifier for `manager` (null: every method a no-op). A failed send is logged once
 * per errno until a send succeeds again; the watchdog gate's failure is logged once until the
 * election runs on time again: a broken election or a vanished manager makes one line, not one
 * per second.
 */
export function createNotifier(manager: ServiceManager | null, deps: NotifierDeps): ServiceNotifier {
  if (manager === null) return { enabled: false, ready: () => Promise.resolve(), reloading: () => undefined, stopping: () => undefined };
  const { log } = deps;
  const send = deps.send ?? ((socket: string, message: string) => void notify(message, socket));
  const now = deps.monotonicUsec ?? monotonicUsec;
  const pid = deps.pid ?? process.pid;
  const refreshMs = deps.statusRefreshMs ?? STATUS_REFRESH_MS;
  const pingMs = manager.watchdogUsec === null ? null : Math.max(1, Math.floor(manager.watchdogUsec / 2000));
  let stopped = false;
  let loops = false;
  let lastStatus: string | null = null;
  let sendFailure: string | null = null;
  let gateFailing = false;
  let reloadingNow = false;
  const timers = new Set<NodeJS.Timeout>();

  if (manager.problem) log.warn({ notifySocket: manager.socket }, manager.problem);
  log.info(
    { notifySocket: manager.socket, watchdogMs: manager.watchdogUsec === null ? null : manager.watchdogUsec / 1000 },
    'service manager: notifying it (sd_notify)',
  );

  const put = (fields: readonly (readonly [string, string | number | bigint])[]): void => {
    try {
      send(manager.socket, notifyMessage(fields));
      if (sendFailure !== null) log.info({ notifySocket: manager.socket }, 'service manager: notifications are delivered again');
      sendFailure = null;
    } catch (err) {
      const code = (err as { code?: string }).code ?? (err as Error).message;
      if (code !== sendFailure)
        log.warn(
          { notifySocket: manager.socket, err: (err as Error).message },
          'service manager: cannot notify it (further failures of this kind are not logged)',
        );
      sendFailure = code;
    }
  };
  const line = async (): Promise<string | null> => {
    try {
      return statusLine(await deps.status());
    } catch {
      // the election is being handed over, or slow: the next refresh tells
      return null;
    }
  };
  /** Runs `fn` every `ms` (from the start of one run to the next), until stopping. */
  const every = (ms: number, fn: () => Promise<void>): void => {
    const tick = async (): Promise<void> => {
      const t0 = performance.now();
      await fn();
      if (stopped) return;
      const t = setTimeout(
        () => {
          timers.delete(t);
          void tick();
        },
        Math.max(0, ms - (performance.now() - t0)),
      );
      t.unref();
      timers.add(t);
    };
    void tick();
  };
  const ping = async (): Promise<void> => {
    try {
      await deps.alive();
    } catch (err) {
      if (!gateFailing)
        log.warn(
          { err: (err as Error).message },
          'the election is not running on time: the watchdog is not pinged (systemd restarts the agent after WatchdogSec)',
        );
      gateFailing = true;
      return;
    }
    if (stopped) return;
    if (gateFailing) log.info('the election runs on time again: watchdog pings resumed');
    gateFailing = false;
    put([['WATCHDOG', 1]]);
  };
  const refresh = async (): Promise<void> => {
    const l = await line();
    // a reload's STATUS stays until its READY=1
    if (l === null || l === lastStatus || stopped || reloadingNow) return;
    lastStatus = l;
    put([['STATUS', l]]);
  };

  return {
    enabled: true,
    async ready() {
      if (stopped) return;
      const l = await line();
      if (stopped) return;
      reloadingNow = false;
      lastStatus = l ?? lastStatus;
      put([['READY', 1], ...(l === null ? [] : [['STATUS', l] as const]), ['MAINPID', pid]]);
      if (loops) return;
      loops = true;
      if (pingMs !== null) every(pingMs, ping);
      every(refreshMs, refresh);
    },
    reloading() {
      if (stopped) return;
      reloadingNow = true;
      put([
        ['RELOADING', 1],
        ['MONOTONIC_USEC', now()],
        ['STATUS', 'reloading the configuration'],
      ]);
    },
    stopping() {
      if (stopped) return;
      stopped = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      put([
        ['STOPPING', 1],
        ['STATUS', 'stopping'],
      ]);
    },
  };
}
