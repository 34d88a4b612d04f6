/**
 * Logging: pino JSON lines on stdout, one object per event. State changes are logged by the
 * agent as `{"msg":"state change","from":…,"to":…,"reason":…}`.
 *
 * When stdout is the journal (systemd's `StandardOutput=journal`), each line starts with the
 * kernel-style syslog level `<N>` that journald reads as the line's PRIORITY= (sd-daemon(3)),
 * so `journalctl -u ballast -p warning` shows ballast's warnings and errors:
 *
 *   pino level   fatal  error  warn  info  debug  trace
 *   <N>            2      3     4     6     7      7
 *
 * systemd says stdout is the journal by setting JOURNAL_STREAM=<st_dev>:<st_ino> of the stream
 * it connected (systemd.exec(5)); the agent compares it with fstat of fd 1, as
 * sd_journal_stream_fd's callers are told to, so a redirect (`ballast run > file`, a pipe to
 * `jq`) or a child that inherited the variable gets plain JSON lines.
 */
import { fstatSync } from 'node:fs';
import { pino, type Level, type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

/**
 * What a part of ballast logs through: pino's calling convention, the fields first, then the
 * message. The agent's pino {@link Logger} is one; tests pass a recorder. A part that writes
 * only some levels takes `Pick<Log, 'info' | 'warn'>`, so a fake needs only those.
 */
export interface Log {
  debug(fields: object, msg: string): void;
  info(fields: object, msg: string): void;
  warn(fields: object, msg: string): void;
  error(fields: object, msg: string): void;
}

/** The syslog level (RFC 5424 severity, sd-daemon(3)'s `<N>`) of each pino level. */
export const SYSLOG_LEVELS: Readonly<Record<Level, number>> = { fatal: 2, error: 3, warn: 4, info: 6, debug: 7, trace: 7 };

/** The prefix of each pino level label, precomputed: `{ warn: '<4>', … }`. */
const PREFIXES: ReadonlyMap<string, string> = new Map(Object.entries(SYSLOG_LEVELS).map(([label, n]) => [label, `<${n}>`]));

/** How a line of {@link createLogger} starts (its formatters put the level label first). */
const HEAD = '{"level":"';

/**
 * `line` with the `<N>` prefix of its level, for the journal. A line that does not start with
 * `{"level":"<label>"` (not this module's) is returned unchanged.
 * @param line one JSON line as pino writes it, e.g. `{"level":"warn","time":…}\n`.
 * @returns e.g. `<4>{"level":"warn","time":…}\n`.
 */
export function withSyslogPrefix(line: string): string {
  if (!line.startsWith(HEAD)) return line;
  const end = line.indexOf('"', HEAD.length);
  const prefix = end < 0 ? undefined : PREFIXES.get(line.slice(HEAD.length, end));
  return prefix === undefined ? line : prefix + line;
}

/**
 * Whether stdout is the journal: `JOURNAL_STREAM` is `<dev>:<ino>` (decimal) and fd 1 is that
 * device and inode (systemd.exec(5)). Never throws: no variable, a malformed one or an fstat
 * error (fd 1 closed) is false.
 * @param env default process.env.
 * @param stdout fstat of fd 1 with bigint numbers; default fstatSync(1, { bigint: true }).
 */
export function stdoutIsJournal(
  env: NodeJS.ProcessEnv = process.env,
  stdout: () => { dev: bigint; ino: bigint } = () => fstatSync(1, { bigint: true }),
): boolean {
  const m = /^(\d+):(\d+)$/.exec(env.JOURNAL_STREAM ?? '');
  if (!m) return false;
  try {
    const st = stdout();
    return st.dev === BigInt(m[1]!) && st.ino === BigInt(m[2]!);
  } catch {
    return false;
  }
}

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** Prefix each line with its `<N>` syslog level (default: {@link stdoutIsJournal}). */
  journal?: boolean;
  /** Where lines go (default stdout through pino's asynchronous destination); for tests. */
  destination?: pino.DestinationStream;
}

/**
 * A pino logger writing JSON lines to stdout at `level`, with `vrid` etc. added by children. Its
 * first line (whichever it is) carries `elapsedMs`: ms since the process started (Node's
 * performance.timeOrigin), the start-up's first milestone (docs/performance.md). With `journal`
 * each line starts with its syslog level (see the top of this file), added by pino's
 * `streamWrite` hook: one string concatenation per line, in the same synchronous write.
 */
export function createLogger(level: LevelWithSilent = 'info', opts: LoggerOptions = {}): Logger {
  let first = true;
  const journal = opts.journal ?? stdoutIsJournal();
  const options: pino.LoggerOptions = {
    level,
    hooks: {
      logMethod(args, method) {
        if (first) {
          first = false;
          const elapsedMs = Math.round(performance.now());
          if (typeof args[0] === 'object' && args[0] !== null) args[0] = { elapsedMs, ...(args[0] as object) };
          else args.unshift({ elapsedMs } as never);
        }
        return method.apply(this, args);
      },
      ...(journal ? { streamWrite: withSyslogPrefix } : {}),
    },
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  };
  return opts.destination ? pino(options, opts.destination) : pino(options);
}

/**
 * Resolves true once every line logged so far is written, false after `timeoutMs` (ms) if not.
 * The default destination writes asynchronously, off the main thread, so that a slow journal
 * never delays an advert; pino's exit hook then writes what is queued but not a write already
 * under way, which lands after the last line or is lost. Awaited before process.exit().
 * Mechanism: an empty write, after which the destination (sonic-boom) emits 'drain' once all
 * writes are done. A destination without 'drain' (a test's) counts as written.
 */
export function logWritten(log: Logger, timeoutMs: number): Promise<boolean> {
  const stream = (log as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] as
    Partial<NodeJS.EventEmitter & { write(s: string): unknown }> | undefined;
  if (!stream || typeof stream.once !== 'function' || typeof stream.write !== 'function') return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    stream.once!('drain', () => {
      clearTimeout(timer);
      resolve(true);
    });
    stream.write!('');
  });
}
