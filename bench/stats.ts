/**
 * Summary statistics for the benchmark scripts (pure).
 */

/** Median, min and max of a set of measurements (ms, Gbit/s, …: the caller's unit). */
export interface Stats {
  n: number;
  median: number | null;
  min: number | null;
  max: number | null;
}

/**
 * Median (mean of the middle two for an even count), min and max of `xs`; the median is
 * rounded to `digits` decimals (default 1).
 */
export function stats(xs: readonly number[], digits = 1): Stats {
  if (xs.length === 0) return { n: 0, median: null, min: null, max: null };
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median = s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
  const f = 10 ** digits;
  return { n: s.length, median: Math.round(median * f) / f, min: s[0]!, max: s[s.length - 1]! };
}

/** The q-quantile (0..1) of `xs` by nearest rank; null for no values. */
export function quantile(xs: readonly number[], q: number): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}
