/**
 * Prometheus metrics (prom-client), served at GET /metrics on the admin listener. Names follow
 * https://prometheus.io/docs/practices/naming/ (units in the name, `_total` counters, durations
 * `_duration_seconds`, `_info` = 1 with the facts as labels); docs/metrics.md lists them.
 *
 * The election's counters live in the engine; they are read from its status document at
 * scrape time, so a scrape costs nothing on the advert path. One module per part of the agent
 * (metrics/*.ts) registers its metrics and sets them from the status document.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { backendMetrics } from './metrics/backends.js';
import { bgpMetrics } from './metrics/bgp.js';
import { connectionSyncMetrics } from './metrics/connection-sync.js';
import { dataplaneMetrics } from './metrics/dataplane.js';
import { discoveryMetrics } from './metrics/discovery.js';
import { electionMetrics } from './metrics/election.js';
import { packageRoot } from '../native.js';
import type { StatusDocument } from './status.js';
import { INTERNAL_ERROR_PATHS, type InternalErrorPath } from './contain.js';

/** The version in ballast's package.json (the package root found as native.ts finds it). @throws Error when it cannot be read. */
export function ballastVersion(): string {
  const pkg = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version?: unknown };
  if (typeof pkg.version !== 'string') throw new Error('ballast: package.json has no version');
  return pkg.version;
}

/** The registry and the hook that refreshes it from a status document before each scrape. */
export interface Metrics {
  registry: Registry;
  /** Sets every election metric from `doc` (call right before serializing). */
  update(doc: StatusDocument): void;
  /** Sets `ballast_internal_errors_total{path}` from the contained failures' counts (observe/contain.ts); every path is exported, 0 until it fails. */
  internalErrors(counts: Partial<Record<InternalErrorPath, number>>): void;
}

/**
 * How often (ms) prom-client samples event-loop delay for `nodejs_eventloop_lag_*`. Its default
 * (10 ms) is a timer that wakes an idle agent's main thread 100 times a second; 100 ms keeps the
 * histogram's percentiles meaningful for a loop whose work comes in 100 ms advert ticks at most.
 */
export const EVENT_LOOP_SAMPLE_MS = 100;

/**
 * Creates ballast's metrics in a fresh registry, plus prom-client's process metrics under their
 * standard names (`process_*`, `nodejs_*`, no prefix: stock Node.js dashboards work) and
 * `ballast_build_info{version,node_version} 1`. Counters mirror the engine's cumulative
 * counters, so they only ever grow while the agent runs.
 * @param build.version default: package.json's ({@link ballastVersion}).
 */
export function createMetrics(build: { version?: string } = {}): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  new Gauge({
    name: 'ballast_build_info',
    help: 'Always 1; the labels say which ballast runs (version) on which Node.js (node_version)',
    labelNames: ['version', 'node_version'],
    registers: [registry],
  }).set({ version: build.version ?? ballastVersion(), node_version: process.version }, 1);
  const parts = [electionMetrics, backendMetrics, dataplaneMetrics, connectionSyncMetrics, discoveryMetrics, bgpMetrics].map((register) => register(registry));
  // Prometheus's own names for this (prometheus_config_last_reload_successful, …)
  const reloadOk = new Gauge({
    name: 'ballast_config_last_reload_successful',
    help: 'Whether the last configuration reload succeeded (1; also before the first reload) or failed (0)',
    registers: [registry],
  });
  const reloadAt = new Gauge({
    name: 'ballast_config_last_reload_success_timestamp_seconds',
    help: 'When the configuration was last loaded successfully (the start, or the last applied reload), seconds since the epoch',
    registers: [registry],
  });
  const internalErrors = new Counter({
    name: 'ballast_internal_errors_total',
    help: 'Failures contained in an observer path (certificate report, status, history, metrics, admin answers, log-only event listeners, memory release): a bug, logged with its stack; the election went on',
    labelNames: ['path'],
    registers: [registry],
  });
  for (const path of INTERNAL_ERROR_PATHS) internalErrors.inc({ path }, 0);
  return {
    registry,
    internalErrors(counts) {
      internalErrors.reset();
      for (const path of INTERNAL_ERROR_PATHS) internalErrors.inc({ path }, counts[path] ?? 0);
    },
    update(doc) {
      for (const update of parts) update(doc);
      if (doc.reload) {
        reloadOk.set(doc.reload.last === null || doc.reload.last.ok ? 1 : 0);
        reloadAt.set(Date.parse(doc.reload.lastSuccessAt) / 1000);
      }
    },
  };
}
