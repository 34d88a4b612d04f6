/**
 * Prometheus metrics (prom-client), served at GET /metrics on the admin listener. Names follow
 * https://prometheus.io/docs/practices/naming/ (units in the name, `_total` counters, durations
 * `_duration_seconds`, `_info` = 1 with the facts as labels); docs/metrics.md lists them.
 *
 * The election's counters live in the engine; they are read from its status document at
 * scrape time, so a scrape costs nothing on the advert path.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { packageRoot } from '../native.js';
import type { StatusDocument } from './status.js';
import { INTERNAL_ERROR_PATHS, type InternalErrorPath } from './contain.js';

const STATES = ['init', 'backup', 'master', 'fault'] as const;
/** A backend's health states (health/hysteresis.ts BackendState), one ballast_backend_state series each. */
const BACKEND_STATES = ['unknown', 'up', 'down'] as const;

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
  const labels = ['vrid'] as const;
  const state = new Gauge({
    name: 'ballast_vrrp_state',
    help: 'VRRP state of this node: 1 for the current state, 0 for the others',
    labelNames: ['vrid', 'state'],
    registers: [registry],
  });
  const priority = new Gauge({ name: 'ballast_vrrp_priority', help: 'Configured VRRP priority', labelNames: labels, registers: [registry] });
  const effective = new Gauge({
    name: 'ballast_vrrp_effective_priority',
    help: 'Priority this node advertises now (policy may lower it)',
    labelNames: labels,
    registers: [registry],
  });
  const held = new Gauge({ name: 'ballast_vip_held', help: '1 when this node holds the VIPs', labelNames: labels, registers: [registry] });
  const masterDown = new Gauge({
    name: 'ballast_vrrp_master_down_interval_seconds',
    help: 'Master_Down_Interval (RFC 9568 §6.1)',
    labelNames: labels,
    registers: [registry],
  });
  const counters = {
    transitions: new Counter({ name: 'ballast_vrrp_transitions_total', help: 'State changes since start', labelNames: labels, registers: [registry] }),
    advertsSent: new Counter({ name: 'ballast_vrrp_adverts_sent_total', help: 'VRRP advertisements sent', labelNames: labels, registers: [registry] }),
    advertsReceived: new Counter({
      name: 'ballast_vrrp_adverts_received_total',
      help: 'Valid VRRP advertisements received for our VRID',
      labelNames: labels,
      registers: [registry],
    }),
    sendErrors: new Counter({
      name: 'ballast_vrrp_send_errors_total',
      help: 'Advertisements the kernel refused to send',
      labelNames: labels,
      registers: [registry],
    }),
    announcementsSent: new Counter({
      name: 'ballast_announcements_sent_total',
      help: 'Gratuitous ARP / unsolicited NA frames sent',
      labelNames: labels,
      registers: [registry],
    }),
    foreign: new Counter({
      name: 'ballast_vrrp_foreign_adverts_total',
      help: 'Adverts for our VRID listing other addresses than our VIPs (another group or a misconfigured peer)',
      labelNames: labels,
      registers: [registry],
    }),
  };
  // engine.ts EngineOtherMasters: what this node heard of a second master while it was master
  const otherHeard = new Gauge({
    name: 'ballast_vrrp_other_master_heard',
    help: 'Other VRRP routers heard advertising as master while this node was master, in the last minute (0: none); nothing is heard while a partition lasts, only once it heals',
    labelNames: labels,
    registers: [registry],
  });
  const otherAdverts = new Counter({
    name: 'ballast_vrrp_other_master_adverts_total',
    help: 'Adverts of another master heard while this node was master, by outcome: kept (this node won: two nodes held the VIPs), yielded (it lost: a preemption or a healed partition), handover (the last advert of the router it had just preempted)',
    labelNames: ['vrid', 'outcome'],
    registers: [registry],
  });
  const otherAge = new Gauge({
    name: 'ballast_vrrp_other_master_last_heard_age_seconds',
    help: 'How long ago the last advert of another master was heard while this node was master (absent before any)',
    labelNames: labels,
    registers: [registry],
  });
  const pacerAdverts = new Counter({
    name: 'ballast_vrrp_pacer_adverts_total',
    help: 'Adverts the native pacer sent while the election thread was stalled (native/advert_pacer.h); counted in ballast_vrrp_adverts_sent_total too',
    labelNames: labels,
    registers: [registry],
  });
  const pacerHolds = new Counter({
    name: 'ballast_vrrp_pacer_holds_total',
    help: "Times the election thread stayed silent past the pacer's hold, so the pacer stopped sending (a Backup may take over)",
    labelNames: labels,
    registers: [registry],
  });
  const backendUp = new Gauge({
    name: 'ballast_backend_up',
    help: '1 when the apiserver backend is healthy (in the data plane), 0 when not',
    labelNames: ['backend'],
    registers: [registry],
  });
  const backendState = new Gauge({
    name: 'ballast_backend_state',
    help: 'Health state of the backend: 1 for the current state (unknown before its first verdict, up, down), 0 for the others',
    labelNames: ['backend', 'state'],
    registers: [registry],
  });
  const backendWaiting = new Gauge({
    name: 'ballast_backend_waiting_for_file',
    help: '1 while the checks of the backend wait for a file that does not exist yet (setting, path: the CA before kubeadm init)',
    labelNames: ['backend', 'setting', 'path'],
    registers: [registry],
  });
  const failOpen = new Gauge({
    name: 'ballast_backends_fail_open',
    help: 'Fail open: 1 while every backend turned unready together and the last ready set is kept in the data planes (docs/health.md), 0 otherwise',
    registers: [registry],
  });
  const backendListed = new Gauge({
    name: 'ballast_backend_listed',
    help: '1 for a backend in the set (seed, EndpointSlices, last-known), 0 for one that left it and is remembered for a while (its other series then hold its state when it left)',
    labelNames: ['backend'],
    registers: [registry],
  });
  const backendDamped = new Gauge({
    name: 'ballast_backend_damped',
    help: '1 while flap damping holds the backend out of the data planes (docs/health.md), 0 otherwise',
    labelNames: ['backend'],
    registers: [registry],
  });
  const backendLatency = new Gauge({
    name: 'ballast_backend_check_duration_seconds',
    help: 'How long the last /readyz check of the backend took',
    labelNames: ['backend'],
    registers: [registry],
  });
  const dpApplies = new Counter({
    name: 'ballast_dataplane_applies_total',
    help: 'nftables transactions applied (nft -f runs; an unchanged ruleset runs none)',
    registers: [registry],
  });
  const dpFailures = new Counter({
    name: 'ballast_dataplane_apply_failures_total',
    help: 'nftables transactions the kernel refused (the previous rules stayed)',
    registers: [registry],
  });
  const dpDuration = new Gauge({ name: 'ballast_dataplane_last_apply_duration_seconds', help: 'How long the last nftables apply took', registers: [registry] });
  const dpRestores = new Counter({
    name: 'ballast_dataplane_restores_total',
    help: 'Times the nftables table ballast was found removed or changed by someone else and applied again',
    labelNames: ['family'],
    registers: [registry],
  });
  const dpFlushed = new Counter({
    name: 'ballast_dataplane_flushed_connections_total',
    help: 'Conntrack entries deleted for dead backends (their clients got a reset)',
    registers: [registry],
  });
  const dpProbes = new Counter({
    name: 'ballast_dataplane_reset_probes_total',
    help: "TCP probes sent to the clients of a dead backend's flows, so that each answers and gets a RST (result: sent, or failed: refused by the kernel)",
    labelNames: ['result'],
    registers: [registry],
  });
  const connections = new Gauge({
    name: 'ballast_backend_connections',
    help: 'Established connections through the VIP data plane to the backend (conntrack, counted every 5 s)',
    labelNames: ['backend'],
    registers: [registry],
  });
  const rebalanceResets = new Counter({
    name: 'ballast_rebalance_resets_total',
    help: 'Connections of an overloaded backend reset by the rebalancer (dataplane.rebalance)',
    labelNames: ['backend'],
    registers: [registry],
  });
  // dataplane.connectionSync (src/agent/phases/connection-sync.ts): conntrackd's caches and the age of the peers' last message
  const syncUp = new Gauge({
    name: 'ballast_connection_sync_up',
    help: '1 while conntrackd runs (dataplane.connectionSync), 0 while it is (re)starting or cannot run',
    registers: [registry],
  });
  const syncEntries = new Gauge({
    name: 'ballast_connection_sync_entries',
    help: "Conntrack entries conntrackd holds: cache=internal (this node's, replicated to the peers), cache=external (the peers', committed on a takeover)",
    labelNames: ['cache'],
    registers: [registry],
  });
  const syncAge = new Gauge({
    name: 'ballast_connection_sync_last_message_age_seconds',
    help: "Seconds since the last message from a peer's conntrackd arrived (updates, acknowledgements, or FTFW alive messages once a second): how stale this node's copy may be",
    registers: [registry],
  });
  const syncCommit = new Gauge({
    name: 'ballast_connection_sync_last_commit_duration_seconds',
    help: 'How long the last commit of the replicated entries into the kernel took (becoming master, before the VIP is added)',
    registers: [registry],
  });
  const syncCommitFailures = new Gauge({
    name: 'ballast_connection_sync_last_commit_failed',
    help: '1 when the last commit failed or was skipped (the VIP was added without the replicated connections), 0 otherwise',
    registers: [registry],
  });
  const syncRestarts = new Counter({
    name: 'ballast_connection_sync_restarts_total',
    help: 'Times conntrackd exited and was started again',
    registers: [registry],
  });
  const localBackends = new Gauge({
    name: 'ballast_local_endpoint_backend',
    help: '1 for each backend new connections to the node-local endpoint go to now',
    labelNames: ['mode', 'backend'],
    registers: [registry],
  });
  const localReset = new Counter({
    name: 'ballast_local_endpoint_sockets_reset_total',
    help: 'Local endpoint connections destroyed because their backend died',
    registers: [registry],
  });
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
  const dropped = new Counter({
    name: 'ballast_vrrp_packets_dropped_total',
    help: 'Received VRRP packets dropped, by reason (RFC 9568 §7.1 checks, other VRIDs, non-peers, non-members)',
    labelNames: ['vrid', 'reason'],
    registers: [registry],
  });
  const backendInfo = new Gauge({
    name: 'ballast_backend_info',
    help: '1 for each backend checked, with where it came from (source: seed, endpointslice or lastKnown)',
    labelNames: ['backend', 'source'],
    registers: [registry],
  });
  const discEmpty = new Counter({
    name: 'ballast_discovery_empty_kept_total',
    help: 'Empty discovered backend sets ignored (the last non-empty set kept)',
    registers: [registry],
  });
  const discErrors = new Counter({
    name: 'ballast_discovery_errors_total',
    help: 'EndpointSlice watch errors that restarted the watch (on another ready apiserver)',
    registers: [registry],
  });
  const certMissing = new Gauge({
    name: 'ballast_backend_certificate_san_missing',
    help: "1 when the backend's serving certificate lacks a SAN clients use (a VIP, a local endpoint address, the health checks' server name), 0 when it covers them",
    labelNames: ['backend'],
    registers: [registry],
  });
  const certExpiry = new Gauge({
    name: 'ballast_backend_certificate_expiry_timestamp_seconds',
    help: "notAfter of the backend's serving certificate, seconds since the epoch",
    labelNames: ['backend'],
    registers: [registry],
  });
  const foreignFirewall = new Gauge({
    name: 'ballast_foreign_firewall_rules',
    help: 'Base chains of other firewalls on the node (nftables tables not ours, iptables-legacy) that drop or may drop traffic to the VIP or the backends (docs/check.md, foreign-firewall)',
    registers: [registry],
  });
  const discDenied = new Gauge({
    name: 'ballast_discovery_denied',
    help: "1 while the API refuses discovery's credentials (reason unauthorized: 401) or permission (forbidden: 403); the seed and last-known backends serve meanwhile",
    labelNames: ['reason'],
    registers: [registry],
  });
  const discRefusals = new Counter({
    name: 'ballast_discovery_refusals_total',
    help: 'EndpointSlice lists and watches the API refused, by reason (unauthorized: 401, forbidden: 403); each is also one of ballast_discovery_errors_total',
    labelNames: ['reason'],
    registers: [registry],
  });
  const discLists = new Counter({
    name: 'ballast_discovery_lists_total',
    help: 'EndpointSlice lists (the first, and each relist after a 410 or an error)',
    registers: [registry],
  });
  // mode: bgp (src/bgp/speaker.ts)
  const bgpDaemonUp = new Gauge({
    name: 'ballast_bgp_daemon_up',
    help: '1 when the routing daemon (BIRD) answers on its control socket (mode: bgp)',
    registers: [registry],
  });
  const bgpAnnounced = new Gauge({
    name: 'ballast_bgp_announced',
    help: '1 when this node offers the VIPs to its BGP peers (mode: bgp)',
    registers: [registry],
  });
  const bgpPeer = new Gauge({
    name: 'ballast_bgp_peer_established',
    help: '1 when the BGP session with the peer is Established (mode: bgp)',
    labelNames: ['peer'],
    registers: [registry],
  });
  const internalErrors = new Counter({
    name: 'ballast_internal_errors_total',
    help: 'Failures contained in an observer path (certificate report, status, history, metrics, admin answers, log-only event listeners, memory release): a bug, logged with its stack; the election went on',
    labelNames: ['path'],
    registers: [registry],
  });
  for (const path of INTERNAL_ERROR_PATHS) internalErrors.inc({ path }, 0);
  const bgpLosses = new Counter({
    name: 'ballast_bgp_daemon_losses_total',
    help: 'Times the routing daemon was found gone or restarted (mode: bgp)',
    registers: [registry],
  });

  return {
    registry,
    internalErrors(counts) {
      internalErrors.reset();
      for (const path of INTERNAL_ERROR_PATHS) internalErrors.inc({ path }, counts[path] ?? 0);
    },
    update(doc) {
      if (doc.bgp) {
        bgpDaemonUp.set(doc.bgp.daemonUp ? 1 : 0);
        bgpAnnounced.set(doc.bgp.announced ? 1 : 0);
        bgpPeer.reset();
        for (const p of doc.bgp.peers) bgpPeer.set({ peer: p.address }, p.session === 'Established' ? 1 : 0);
        bgpLosses.reset();
        bgpLosses.inc(doc.bgp.daemonLosses);
      }
      if (doc.state !== 'none') {
        const vrid = String(doc.vrid);
        for (const s of STATES) state.set({ vrid, state: s }, doc.state === s ? 1 : 0);
        priority.set({ vrid }, doc.priority);
        effective.set({ vrid }, doc.effectivePriority);
        held.set({ vrid }, doc.vipsHeld ? 1 : 0);
        masterDown.set({ vrid }, doc.masterDownIntervalMs / 1000);
        for (const [key, counter] of Object.entries(counters)) {
          counter.reset();
          counter.inc({ vrid }, doc.counters[key as keyof typeof counters]);
        }
        dropped.reset();
        for (const [reason, n] of Object.entries(doc.counters.dropped)) dropped.inc({ vrid, reason }, n);
        const om = doc.otherMasters;
        if (om) {
          otherHeard.set({ vrid }, om.heard);
          otherAdverts.reset();
          // every outcome from the start (0), so that increase() sees the first one
          for (const outcome of ['kept', 'yielded', 'handover'] as const) otherAdverts.inc({ vrid, outcome }, om.adverts[outcome]);
          otherAge.reset();
          if (om.last !== null) otherAge.set({ vrid }, om.last.ageMs / 1000);
        }
        const pacer = doc.timing?.pacer;
        if (pacer) {
          pacerAdverts.reset();
          pacerAdverts.inc({ vrid }, pacer.sent);
          pacerHolds.reset();
          pacerHolds.inc({ vrid }, pacer.holds);
        }
      }
      if (doc.reload) {
        reloadOk.set(doc.reload.last === null || doc.reload.last.ok ? 1 : 0);
        reloadAt.set(Date.parse(doc.reload.lastSuccessAt) / 1000);
      }
      localBackends.reset();
      if (doc.local.mode !== 'off') {
        for (const b of doc.local.backends) localBackends.set({ mode: doc.local.mode, backend: b }, 1);
        localReset.reset();
        localReset.inc(doc.local.socketsReset);
      }
      if (doc.foreignFirewall) foreignFirewall.set(doc.foreignFirewall.rules.length);
      backendInfo.reset();
      for (const b of doc.backends) backendInfo.set({ backend: b.address, source: b.source ?? 'seed' }, 1);
      if (doc.discovery !== undefined) {
        for (const [c, n] of [
          [discEmpty, doc.discovery.emptyKept],
          [discErrors, doc.discovery.errors],
          [discLists, doc.discovery.lists],
        ] as const) {
          c.reset();
          c.inc(n);
        }
        discRefusals.reset();
        for (const reason of ['unauthorized', 'forbidden'] as const) {
          discDenied.set({ reason }, doc.discovery.denied === reason ? 1 : 0);
          discRefusals.inc({ reason }, doc.discovery.refusals?.[reason] ?? 0);
        }
      }
      backendUp.reset();
      backendState.reset();
      backendLatency.reset();
      backendWaiting.reset();
      backendDamped.reset();
      backendListed.reset();
      if (doc.health) failOpen.set(doc.health.failOpen.active ? 1 : 0);
      // a backend that left the set keeps its series while it is remembered, with its state when it
      // left (up: 1, so that one gone for good raises no BallastBackendDown; down: 0, so that one
      // that keeps coming and going while down does)
      for (const b of doc.departedBackends ?? []) {
        backendListed.set({ backend: b.address }, 0);
        backendUp.set({ backend: b.address }, b.state === 'up' ? 1 : 0);
        backendDamped.set({ backend: b.address }, b.dampedUntil ? 1 : 0);
        for (const s of BACKEND_STATES) backendState.set({ backend: b.address, state: s }, b.state === s ? 1 : 0);
        if (b.lastLatencyMs !== null) backendLatency.set({ backend: b.address }, b.lastLatencyMs / 1000);
      }
      for (const b of doc.backends) {
        backendListed.set({ backend: b.address }, 1);
        backendUp.set({ backend: b.address }, b.healthy ? 1 : 0);
        backendDamped.set({ backend: b.address }, b.dampedUntil ? 1 : 0);
        for (const s of BACKEND_STATES) backendState.set({ backend: b.address, state: s }, b.state === s ? 1 : 0);
        if (b.waitingFor) backendWaiting.set({ backend: b.address, setting: b.waitingFor.setting, path: b.waitingFor.path }, 1);
        if (b.lastLatencyMs !== null) backendLatency.set({ backend: b.address }, b.lastLatencyMs / 1000);
      }
      // the backends' serving certificates (src/health/certificates.ts), once a check saw one
      certMissing.reset();
      certExpiry.reset();
      for (const b of doc.backends) {
        if (!b.certificate) continue;
        certMissing.set({ backend: b.address }, b.certificate.missing.length > 0 ? 1 : 0);
        certExpiry.set({ backend: b.address }, Date.parse(b.certificate.notAfter) / 1000);
      }
      if (doc.dataplane.mode === 'nftables') {
        dpApplies.reset();
        dpApplies.inc(doc.dataplane.applies);
        dpFailures.reset();
        dpFailures.inc(doc.dataplane.failures);
        dpFlushed.reset();
        dpFlushed.inc(doc.dataplane.flushedEntries);
        dpProbes.reset();
        dpProbes.inc({ result: 'sent' }, doc.dataplane.probesSent);
        dpProbes.inc({ result: 'failed' }, doc.dataplane.probesFailed);
        dpRestores.reset();
        dpRestores.inc({ family: String('family' in doc ? doc.family : 4) }, doc.dataplane.restores);
        if (doc.dataplane.lastApplyMs !== null) dpDuration.set(doc.dataplane.lastApplyMs / 1000);
        connections.reset();
        for (const [b, n] of Object.entries(doc.dataplane.connections ?? {})) connections.set({ backend: b }, n);
        rebalanceResets.reset();
        for (const [b, n] of Object.entries(doc.dataplane.rebalance?.resets ?? {})) rebalanceResets.inc({ backend: b }, n);
      }
      const sync = doc.connectionSync;
      if (sync && sync.state !== 'off') {
        syncUp.set(sync.state === 'running' ? 1 : 0);
        if (sync.internalEntries !== null) syncEntries.set({ cache: 'internal' }, sync.internalEntries);
        if (sync.externalEntries !== null) syncEntries.set({ cache: 'external' }, sync.externalEntries);
        if (sync.lastMessageAgeMs !== null) syncAge.set(sync.lastMessageAgeMs / 1000);
        if (sync.lastCommit) {
          syncCommit.set(sync.lastCommit.durationMs / 1000);
          syncCommitFailures.set(sync.lastCommit.ok ? 0 : 1);
        }
        syncRestarts.reset();
        syncRestarts.inc(sync.restarts);
      }
    },
  };
}
