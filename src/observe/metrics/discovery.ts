/**
 * Discovery's metrics (`ballast_discovery_*`: the EndpointSlice lists, errors, refusals, the
 * empty sets ignored and the failures of its thread). docs/metrics.md.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { StatusDocument } from '../status.js';
import { mirror } from './count.js';

/** Registers discovery's metrics in `r`. @returns what sets them from a status document (nothing without discovery). */
export function discoveryMetrics(r: Registry): (doc: StatusDocument) => void {
  const discLists = new Counter({
    name: 'ballast_discovery_lists_total',
    help: 'EndpointSlice lists (the first, and each relist after a 410 or an error)',
    registers: [r],
  });
  const discEmpty = new Counter({
    name: 'ballast_discovery_empty_kept_total',
    help: 'Empty discovered backend sets ignored (the last non-empty set kept)',
    registers: [r],
  });
  const discErrors = new Counter({
    name: 'ballast_discovery_errors_total',
    help: 'EndpointSlice watch errors that restarted the watch (on another ready apiserver)',
    registers: [r],
  });
  const discDenied = new Gauge({
    name: 'ballast_discovery_denied',
    help: "1 while the API refuses discovery's credentials (reason unauthorized: 401) or permission (forbidden: 403); the seed and last-known backends serve meanwhile",
    labelNames: ['reason'],
    registers: [r],
  });
  const discRefusals = new Counter({
    name: 'ballast_discovery_refusals_total',
    help: 'EndpointSlice lists and watches the API refused, by reason (unauthorized: 401, forbidden: 403); each is also one of ballast_discovery_errors_total',
    labelNames: ['reason'],
    registers: [r],
  });
  const discThreadFailures = new Counter({
    name: 'ballast_discovery_thread_failures_total',
    help: "Times discovery's own thread failed (an uncaught error, its heap limit, an exit) and was started again; each is also one of ballast_discovery_errors_total",
    registers: [r],
  });
  return (doc) => {
    const d = doc.discovery;
    if (d === undefined) return;
    mirror(discEmpty, d.emptyKept);
    mirror(discErrors, d.errors);
    mirror(discLists, d.lists);
    mirror(discThreadFailures, d.thread?.failures ?? 0);
    discRefusals.reset();
    for (const reason of ['unauthorized', 'forbidden'] as const) {
      discDenied.set({ reason }, d.denied === reason ? 1 : 0);
      discRefusals.inc({ reason }, d.refusals?.[reason] ?? 0);
    }
  };
}
