/**
 * Durations as operators write them: a sequence of `<number><unit>` with units h, m, s, ms,
 * largest first, each at most once: "100ms", "1s", "0.5s", "2m", "1h", "1m30s".
 * Decimals are exact (decimal arithmetic, no binary floating point): "0.29s" is 290 ms.
 * The result is always a whole number of milliseconds; "0.5ms" is an error.
 */

const UNIT_MS = { h: 3_600_000, m: 60_000, s: 1_000, ms: 1 } as const;
type Unit = keyof typeof UNIT_MS;
const UNIT_ORDER: readonly Unit[] = ['h', 'm', 's', 'ms'];

// "ms" before "m" so that "100ms" is not read as 100 minutes followed by garbage
const TERM = /(\d+)(?:\.(\d+))?(ms|h|m|s)/y;

const EXPECTED = 'expected a number followed by a unit (ms, s, m or h), e.g. "100ms", "1s", "0.5s" or "1m30s"';

/**
 * Parses a duration into milliseconds.
 *
 * - string: `"100ms"`, `"1s"`, `"0.5s"`, `"2m"`, `"1h"`, `"1m30s"`; also `"0"` (zero needs no unit).
 *   Surrounding whitespace is ignored; units are lowercase; no sign.
 * - number: taken as milliseconds already (for callers that hold a number); it must be a
 *   non-negative integer. The config schema does not pass YAML numbers here: a bare number
 *   in the file (other than 0) is rejected there with a message asking for a unit.
 *
 * @returns a non-negative integer number of milliseconds (at most Number.MAX_SAFE_INTEGER).
 * @throws RangeError whose message quotes the input and says what was expected: not a
 *   duration, negative, not a whole number of milliseconds, units out of order, too large.
 */
export function parseDuration(input: string | number): number {
  if (typeof input === 'number') {
    if (!Number.isFinite(input)) throw new RangeError(`invalid duration ${input}: not a finite number`);
    if (input < 0) throw new RangeError(`negative duration ${input}ms: must be zero or more`);
    if (!Number.isSafeInteger(input)) {
      throw new RangeError(`invalid duration ${input}ms: not a whole number of milliseconds`);
    }
    return input;
  }
  if (typeof input !== 'string') {
    throw new RangeError(`invalid duration ${String(input)}: ${EXPECTED}`);
  }
  const text = input.trim();
  const quoted = JSON.stringify(input);
  if (text === '') throw new RangeError(`invalid duration ${quoted}: empty; ${EXPECTED}`);
  if (text === '0') return 0;
  if (text.startsWith('-')) throw new RangeError(`negative duration ${quoted}: must be zero or more`);

  let total = 0n;
  let pos = 0;
  let lastUnit = -1;
  while (pos < text.length) {
    TERM.lastIndex = pos;
    const m = TERM.exec(text);
    if (m === null) {
      const hint = /[A-Z]/.test(text) ? ' (units are lowercase)' : '';
      throw new RangeError(`invalid duration ${quoted}: ${EXPECTED}${hint}`);
    }
    const [, whole = '', frac = '', unit = 'ms'] = m;
    const rank = UNIT_ORDER.indexOf(unit as Unit);
    if (rank <= lastUnit) {
      throw new RangeError(`invalid duration ${quoted}: units must go from largest to smallest, each at most once (e.g. "1m30s")`);
    }
    lastUnit = rank;
    // exact decimal: (whole.frac) * unit = (whole frac as an integer) * unit / 10^len(frac)
    const scaled = BigInt(whole + frac) * BigInt(UNIT_MS[unit as Unit]);
    const divisor = 10n ** BigInt(frac.length);
    if (scaled % divisor !== 0n) {
      throw new RangeError(`invalid duration ${quoted}: not a whole number of milliseconds`);
    }
    total += scaled / divisor;
    pos = TERM.lastIndex;
  }
  if (total > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new RangeError(`invalid duration ${quoted}: too large`);
  }
  return Number(total);
}

/**
 * Formats milliseconds as the shortest duration string that {@link parseDuration} reads back
 * to the same value: 0 → "0s", 100 → "100ms", 1000 → "1s", 1500 → "1.5s", 90000 → "1m30s",
 * 3600000 → "1h", 60100 → "1m0.1s". Negative values get a leading "-" (for logs; parseDuration
 * does not accept them).
 * @param ms an integer number of milliseconds.
 * @throws RangeError if `ms` is not a safe integer.
 */
export function formatDuration(ms: number): string {
  if (!Number.isSafeInteger(ms)) throw new RangeError(`formatDuration: not an integer number of milliseconds: ${ms}`);
  if (ms < 0) return `-${formatDuration(-ms)}`;
  if (ms === 0) return '0s';
  if (ms < 1000) return `${ms}ms`;
  const h = Math.floor(ms / UNIT_MS.h);
  const m = Math.floor((ms % UNIT_MS.h) / UNIT_MS.m);
  const s = Math.floor((ms % UNIT_MS.m) / UNIT_MS.s);
  const rest = ms % UNIT_MS.s;
  let out = '';
  if (h > 0) out += `${h}h`;
  if (m > 0) out += `${m}m`;
  if (s > 0 || rest > 0) {
    out += rest === 0 ? `${s}s` : `${s}.${String(rest).padStart(3, '0').replace(/0+$/, '')}s`;
  }
  return out;
}
