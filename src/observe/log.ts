/**
 * Logging: pino JSON lines on stdout, one object per event. State changes are logged by the
 * agent as `{"msg":"state change","from":…,"to":…,"reason":…}`.
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

/**
 * A pino logger writing JSON lines to stdout at `level`, with `vrid` etc. added by children. Its
 * first line (whichever it is) carries `elapsedMs`: ms since the process started (Node's
 * performance.timeOrigin), the start-up's first milestone (docs/performance.md).
 */
export function createLogger(level: LevelWithSilent = 'info'): Logger {
  let first = true;
  return pino({
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
    },
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}
