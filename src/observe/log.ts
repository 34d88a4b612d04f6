/**
 * Logging: pino JSON lines on stdout, one object per event. State changes are logged by the
 * agent as `{"msg":"state change","from":…,"to":…,"reason":…}`.
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

/** A pino logger writing JSON lines to stdout at `level`, with `vrid` etc. added by children. */
export function createLogger(level: LevelWithSilent = 'info'): Logger {
  return pino({
    level,
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}
