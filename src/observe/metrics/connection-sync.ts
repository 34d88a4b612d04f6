/**
 * Connection sync's metrics (`ballast_connection_sync_*`, dataplane.connectionSync: conntrackd's
 * caches, the age of the peers' last message, the last commit). docs/metrics.md.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { StatusDocument } from '../status.js';
import { mirror } from './count.js';

/** Registers connection sync's metrics in `r`. @returns what sets them from a status document (nothing while it is off). */
export function connectionSyncMetrics(r: Registry): (doc: StatusDocument) => void {
  const syncUp = new Gauge({
    name: 'ballast_connection_sync_up',
    help: '1 while conntrackd runs (dataplane.connectionSync), 0 while it is (re)starting or cannot run',
    registers: [r],
  });
  const syncEntries = new Gauge({
    name: 'ballast_connection_sync_entries',
    help: "Conntrack entries conntrackd holds: cache=internal (this node's, replicated to the peers), cache=external (the peers', committed on a takeover)",
    labelNames: ['cache'],
    registers: [r],
  });
  const syncAge = new Gauge({
    name: 'ballast_connection_sync_last_message_age_seconds',
    help: "Seconds since the last message from a peer's conntrackd arrived (updates, acknowledgements, or FTFW alive messages once a second): how stale this node's copy may be",
    registers: [r],
  });
  const syncCommit = new Gauge({
    name: 'ballast_connection_sync_last_commit_duration_seconds',
    help: 'How long the last commit of the replicated entries into the kernel took (becoming master, before the VIP is added)',
    registers: [r],
  });
  const syncCommitFailures = new Gauge({
    name: 'ballast_connection_sync_last_commit_failed',
    help: '1 when the last commit failed or was skipped (the VIP was added without the replicated connections), 0 otherwise',
    registers: [r],
  });
  const syncRestarts = new Counter({
    name: 'ballast_connection_sync_restarts_total',
    help: 'Times conntrackd exited and was started again',
    registers: [r],
  });
  return (doc) => {
    const sync = doc.connectionSync;
    if (!sync || sync.state === 'off') return;
    syncUp.set(sync.state === 'running' ? 1 : 0);
    if (sync.internalEntries !== null) syncEntries.set({ cache: 'internal' }, sync.internalEntries);
    if (sync.externalEntries !== null) syncEntries.set({ cache: 'external' }, sync.externalEntries);
    if (sync.lastMessageAgeMs !== null) syncAge.set(sync.lastMessageAgeMs / 1000);
    if (sync.lastCommit) {
      syncCommit.set(sync.lastCommit.durationMs / 1000);
      syncCommitFailures.set(sync.lastCommit.ok ? 0 : 1);
    }
    mirror(syncRestarts, sync.restarts);
  };
}
