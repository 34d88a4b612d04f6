/**
 * A status document with every part an agent reports filled in (an election, two backends, the
 * nftables data plane, the eBPF local endpoint, a reload, discovery): what the metrics tests feed
 * createMetrics().update() so every metric has a sample.
 */
import type { ElectionStatusDocument } from '../../src/observe/status.js';

export const STATUS_DOC: ElectionStatusDocument = {
  state: 'master',
  vrid: 51,
  priority: 150,
  effectivePriority: 100,
  masterAddress: '10.0.0.11',
  masterPriority: 100,
  vips: ['10.0.0.100'],
  vipsHeld: true,
  since: '2026-11-29T20:00:00.000Z',
  interface: 'eth0',
  family: 4,
  primaryAddress: '10.0.0.11',
  mode: 'multicast',
  peers: [],
  auth: false,
  advertisementIntervalMs: 100,
  masterAdverIntervalMs: 100,
  masterDownIntervalMs: 341.406,
  skewTimeMs: 41.406,
  counters: { advertsSent: 12, advertsReceived: 3, sendErrors: 1, dropped: { checksum: 2, vrid: 7 }, transitions: 2, announcementsSent: 5, foreign: 4 },
  otherMasters: {
    heard: 1,
    windowMs: 60_000,
    adverts: { kept: 2, yielded: 1, handover: 0 },
    last: { source: '10.0.0.12', priority: 100, outcome: 'kept', ageMs: 1500 },
  },
  lastAdvertAgeMs: 1500,
  backends: [
    { address: '10.0.0.11:6443', state: 'up', healthy: true, lastCheck: '2026-11-29T20:00:00.000Z', lastLatencyMs: 12, reason: null, consecutive: 4 },
    {
      address: '10.0.0.12:6443',
      state: 'down',
      healthy: false,
      lastCheck: '2026-11-29T20:00:00.000Z',
      lastLatencyMs: 3,
      reason: 'ECONNREFUSED',
      consecutive: 2,
    },
  ],
  dataplane: {
    mode: 'nftables',
    backends: ['10.0.0.11:6443'],
    applies: 3,
    failures: 1,
    lastApplyMs: 4.5,
    lastError: null,
    flushedEntries: 7,
    probesSent: 8,
    probesFailed: 0,
    restores: 2,
    lastRestore: '2026-11-29T19:59:00.000Z',
  },
  local: {
    mode: 'ebpf',
    endpoints: ['127.0.0.1:7443', '10.0.0.100:6443'],
    backends: ['10.0.0.11:6443'],
    updates: 4,
    socketsReset: 2,
    failures: 0,
    lastError: null,
  },
};
