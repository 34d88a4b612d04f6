/**
 * mode: bgp's metrics (`ballast_bgp_*`: the routing daemon, the announcement, the sessions;
 * src/bgp/speaker.ts). docs/metrics.md.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { StatusDocument } from '../status.js';
import { mirror } from './count.js';

/** Registers BGP mode's metrics in `r`. @returns what sets them from a status document (nothing outside mode: bgp). */
export function bgpMetrics(r: Registry): (doc: StatusDocument) => void {
  const bgpDaemonUp = new Gauge({
    name: 'ballast_bgp_daemon_up',
    help: '1 when the routing daemon (BIRD) answers on its control socket (mode: bgp)',
    registers: [r],
  });
  const bgpAnnounced = new Gauge({
    name: 'ballast_bgp_announced',
    help: '1 when this node offers the VIPs to its BGP peers (mode: bgp)',
    registers: [r],
  });
  const bgpPeer = new Gauge({
    name: 'ballast_bgp_peer_established',
    help: '1 when the BGP session with the peer is Established (mode: bgp)',
    labelNames: ['peer'],
    registers: [r],
  });
  const bgpLosses = new Counter({
    name: 'ballast_bgp_daemon_losses_total',
    help: 'Times the routing daemon was found gone or restarted (mode: bgp)',
    registers: [r],
  });
  return (doc) => {
    if (!doc.bgp) return;
    bgpDaemonUp.set(doc.bgp.daemonUp ? 1 : 0);
    bgpAnnounced.set(doc.bgp.announced ? 1 : 0);
    bgpPeer.reset();
    for (const p of doc.bgp.peers) bgpPeer.set({ peer: p.address }, p.session === 'Established' ? 1 : 0);
    mirror(bgpLosses, doc.bgp.daemonLosses);
  };
}
