/**
 * The data planes' metrics: the VIP's nftables plane (`ballast_dataplane_*`, connection counts,
 * the rebalancer), the node-local endpoint (`ballast_local_endpoint_*`) and other firewalls'
 * rules in the way. docs/metrics.md.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { StatusDocument } from '../status.js';
import { mirror } from './count.js';

/** Registers the data planes' metrics in `r`. @returns what sets them from a status document. */
export function dataplaneMetrics(r: Registry): (doc: StatusDocument) => void {
  const dpApplies = new Counter({
    name: 'ballast_dataplane_applies_total',
    help: 'nftables transactions applied (nft -f runs; an unchanged ruleset runs none)',
    registers: [r],
  });
  const dpFailures = new Counter({
    name: 'ballast_dataplane_apply_failures_total',
    help: 'nftables transactions the kernel refused (the previous rules stayed)',
    registers: [r],
  });
  const dpDuration = new Gauge({ name: 'ballast_dataplane_last_apply_duration_seconds', help: 'How long the last nftables apply took', registers: [r] });
  const dpRestores = new Counter({
    name: 'ballast_dataplane_restores_total',
    help: 'Times the nftables table ballast was found removed or changed by someone else and applied again',
    labelNames: ['family'],
    registers: [r],
  });
  const dpFlushed = new Counter({
    name: 'ballast_dataplane_flushed_connections_total',
    help: 'Conntrack entries deleted for dead backends (their clients got a reset)',
    registers: [r],
  });
  const dpProbes = new Counter({
    name: 'ballast_dataplane_reset_probes_total',
    help: "TCP probes sent to the clients of a dead backend's flows, so that each answers and gets a RST (result: sent, or failed: refused by the kernel)",
    labelNames: ['result'],
    registers: [r],
  });
  const connections = new Gauge({
    name: 'ballast_backend_connections',
    help: 'Established connections through the VIP data plane to the backend (conntrack, counted every 5 s)',
    labelNames: ['backend'],
    registers: [r],
  });
  const rebalanceResets = new Counter({
    name: 'ballast_rebalance_resets_total',
    help: 'Connections of an overloaded backend reset by the rebalancer (dataplane.rebalance)',
    labelNames: ['backend'],
    registers: [r],
  });
  const foreignFirewall = new Gauge({
    name: 'ballast_foreign_firewall_rules',
    help: 'Base chains of other firewalls on the node (nftables tables not ours, iptables-legacy) that drop or may drop traffic to the VIP or the backends (docs/check.md, foreign-firewall)',
    registers: [r],
  });
  const localBackends = new Gauge({
    name: 'ballast_local_endpoint_backend',
    help: '1 for each backend new connections to the node-local endpoint go to now',
    labelNames: ['mode', 'backend'],
    registers: [r],
  });
  const localReset = new Counter({
    name: 'ballast_local_endpoint_sockets_reset_total',
    help: 'Local endpoint connections destroyed because their backend died',
    registers: [r],
  });
  return (doc) => {
    localBackends.reset();
    if (doc.local.mode !== 'off') {
      for (const b of doc.local.backends) localBackends.set({ mode: doc.local.mode, backend: b }, 1);
      mirror(localReset, doc.local.socketsReset);
    }
    if (doc.foreignFirewall) foreignFirewall.set(doc.foreignFirewall.rules.length);
    const dp = doc.dataplane;
    if (dp.mode !== 'nftables') return;
    mirror(dpApplies, dp.applies);
    mirror(dpFailures, dp.failures);
    mirror(dpFlushed, dp.flushedEntries);
    dpProbes.reset();
    dpProbes.inc({ result: 'sent' }, dp.probesSent);
    dpProbes.inc({ result: 'failed' }, dp.probesFailed);
    mirror(dpRestores, dp.restores, { family: String('family' in doc ? doc.family : 4) });
    if (dp.lastApplyMs !== null) dpDuration.set(dp.lastApplyMs / 1000);
    connections.reset();
    for (const [b, n] of Object.entries(dp.connections ?? {})) connections.set({ backend: b }, n);
    rebalanceResets.reset();
    for (const [b, n] of Object.entries(dp.rebalance?.resets ?? {})) rebalanceResets.inc({ backend: b }, n);
  };
}
