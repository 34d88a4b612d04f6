/**
 * The logger's journal priorities (log/log.ts): with stdout the journal, each line starts with
 * the `<N>` syslog level of its pino level (fatal 2, error 3, warn 4, info 6, debug and trace 7);
 * otherwise lines are plain JSON. Whether stdout is the journal: JOURNAL_STREAM = dev:ino of fd 1.
 */
import { describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventEmitter } from 'node:events';
import pino from 'pino';
import { createLogger, logWritten, stdoutIsJournal, SYSLOG_LEVELS, withSyslogPrefix } from '../../src/log/log.js';

/** A logger at trace writing into an array of lines. */
function capture(journal: boolean): { lines: string[]; log: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  // pino's destination contract: write(line) with one whole line
  const destination = { write: (s: string) => void lines.push(s.replace(/\n$/, '')) };
  return { lines, log: createLogger('trace', { journal, destination }) };
}

describe('journal priorities', () => {
  it('maps every pino level to its syslog level', () => {
    expect(SYSLOG_LEVELS).toStrictEqual({ fatal: 2, error: 3, warn: 4, info: 6, debug: 7, trace: 7 });
  });

  it('with journal: each line starts with <N> of its level, children too, then the unchanged JSON', () => {
    const { lines, log } = capture(true);
    log.fatal('f');
    log.error('e');
    log.warn({ x: 1 }, 'w');
    log.child({ vrid: 51 }).info('i');
    log.debug('d');
    log.trace('t');
    expect(lines.map((l) => l.slice(0, l.indexOf('{')))).toStrictEqual(['<2>', '<3>', '<4>', '<6>', '<7>', '<7>']);
    const parsed = lines.map((l) => JSON.parse(l.slice(3)) as { level: string; msg: string });
    expect(parsed.map((p) => [p.level, p.msg])).toStrictEqual([
      ['fatal', 'f'],
      ['error', 'e'],
      ['warn', 'w'],
      ['info', 'i'],
      ['debug', 'd'],
      ['trace', 't'],
    ]);
  });

  it('without journal: lines are plain JSON', () => {
    const { lines, log } = capture(false);
    log.warn('w');
    log.info('i');
    expect(lines).toHaveLength(2);
    for (const l of lines) expect(l.startsWith('{"level":"')).toBe(true);
  });

  it('withSyslogPrefix leaves a line that is not a level-first JSON object alone', () => {
    expect(withSyslogPrefix('{"level":"warn","msg":"x"}\n')).toBe('<4>{"level":"warn","msg":"x"}\n');
    expect(withSyslogPrefix('{"msg":"x","level":"warn"}\n')).toBe('{"msg":"x","level":"warn"}\n');
    expect(withSyslogPrefix('{"level":"custom","msg":"x"}\n')).toBe('{"level":"custom","msg":"x"}\n');
    expect(withSyslogPrefix('{"level":"warn')).toBe('{"level":"warn');
  });

  it('stdout is the journal only when JOURNAL_STREAM is exactly dev:ino of fd 1', () => {
    const st = () => ({ dev: 64771n, ino: 18446744073709551557n });
    expect(stdoutIsJournal({ JOURNAL_STREAM: '64771:18446744073709551557' }, st)).toBe(true);
    expect(stdoutIsJournal({ JOURNAL_STREAM: '64771:18446744073709551556' }, st)).toBe(false);
    expect(stdoutIsJournal({ JOURNAL_STREAM: '64772:18446744073709551557' }, st)).toBe(false);
    expect(stdoutIsJournal({ JOURNAL_STREAM: '64771:' }, st)).toBe(false);
    expect(stdoutIsJournal({ JOURNAL_STREAM: ' 64771:18446744073709551557' }, st)).toBe(false);
    expect(stdoutIsJournal({}, st)).toBe(false);
    expect(
      stdoutIsJournal({ JOURNAL_STREAM: '1:2' }, () => {
        throw Object.assign(new Error('EBADF'), { code: 'EBADF' });
      }),
    ).toBe(false);
  });
});

describe('logWritten: every line is written before the exit', () => {
  it('with the asynchronous destination, resolves true once the file holds every line, in order', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ballast-log-'));
    try {
      const file = join(dir, 'out.log');
      const destination = pino.destination({ dest: file, sync: false, mkdir: true });
      await new Promise((r) => destination.once('ready', r));
      const log = createLogger('info', { journal: false, destination });
      for (let i = 0; i < 2000; i++) log.info({ i }, 'line');
      expect(await logWritten(log, 5000)).toBe(true);
      const seen = readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { i: number }).i);
      expect(seen).toEqual(Array.from({ length: 2000 }, (_, i) => i));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a destination that never drains: false after the timeout', async () => {
    const stuck = Object.assign(new EventEmitter(), { write: () => true });
    const log = createLogger('info', { journal: false, destination: stuck });
    const t0 = performance.now();
    expect(await logWritten(log, 100)).toBe(false);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(95);
  });

  it('a destination without drain events (a plain writer) counts as written', async () => {
    const { log } = capture(false);
    expect(await logWritten(log, 100)).toBe(true);
  });
});
