/**
 * Shared settings of the property-based tests (fast-check), test/unit/properties-*.test.ts.
 *
 * `npm test` runs each property BALLAST_FUZZ_RUNS times (default 1000: a few hundred ms per
 * property); `npm run fuzz` sets 1,000,000 and lifts the test timeout. A counterexample that a run
 * finds is printed with its seed and path (fast-check's report): replay it with
 * BALLAST_FUZZ_SEED and BALLAST_FUZZ_PATH, then keep it as a fixed unit test next to the property.
 */
import type { Parameters } from 'fast-check';

/** Cases per property: BALLAST_FUZZ_RUNS, default 1000. */
export const FUZZ_RUNS = Number(process.env.BALLAST_FUZZ_RUNS ?? 1000);

/** The test timeout for a property, ms: 30 s for the default runs, none worth having for a fuzz run. */
export const FUZZ_TIMEOUT_MS = FUZZ_RUNS > 10_000 ? 24 * 3600_000 : 30_000;

/** fast-check parameters for one property: the runs, and a seed/path to replay when given. */
export function fuzzParameters<T>(extra: Parameters<T> = {}): Parameters<T> {
  const seed = process.env.BALLAST_FUZZ_SEED;
  const path = process.env.BALLAST_FUZZ_PATH;
  return { numRuns: FUZZ_RUNS, ...(seed ? { seed: Number(seed) } : {}), ...(path ? { path } : {}), ...extra };
}
