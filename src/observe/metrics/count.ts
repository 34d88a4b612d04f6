/**
 * prom-client Counters that mirror a cumulative count kept elsewhere (the engine's, the data
 * plane's, conntrackd's): a Counter cannot be set, so each scrape resets it and adds the count.
 */
import type { Counter } from 'prom-client';

/** Sets `counter` (the series of `labels`, or the unlabelled one) to `n`; every other series of it goes. */
export function mirror<T extends string>(counter: Counter<T>, n: number, labels?: Partial<Record<T, string | number>>): void {
  counter.reset();
  if (labels) counter.inc(labels, n);
  else counter.inc(n);
}
