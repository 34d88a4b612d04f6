/**
 * The election's metrics (`ballast_vrrp_*`, `ballast_vip_held`, `ballast_announcements_sent_total`),
 * read from the engine's part of the status document: its counters live in the engine and are
 * mirrored here at scrape time. docs/metrics.md.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { StatusDocument } from '../status.js';
import { mirror } from './count.js';

const STATES = ['init', 'backup', 'master', 'fault'] as const;

/** Registers the election's metrics in `r`. @returns what sets them from a status document (nothing without an election). */
export function electionMetrics(r: Registry): (doc: StatusDocument) => void {
  const labels = ['vrid'] as const;
  const state = new Gauge({
    name: 'ballast_vrrp_state',
    help: 'VRRP state of this node: 1 for the current state, 0 for the others',
    labelNames: ['vrid', 'state'],
    registers: [r],
  });
  const priority = new Gauge({ name: 'ballast_vrrp_priority', help: 'Configured VRRP priority', labelNames: labels, registers: [r] });
  const effective = new Gauge({
    name: 'ballast_vrrp_effective_priority',
    help: 'Priority this node advertises now (policy may lower it)',
    labelNames: labels,
    registers: [r],
  });
  const held = new Gauge({ name: 'ballast_vip_held', help: '1 when this node holds the VIPs', labelNames: labels, registers: [r] });
  const masterDown = new Gauge({
    name: 'ballast_vrrp_master_down_interval_seconds',
    help: 'Master_Down_Interval (RFC 9568 §6.1)',
    labelNames: labels,
    registers: [r],
  });
  const counters = {
    transitions: new Counter({ name: 'ballast_vrrp_transitions_total', help: 'State changes since start', labelNames: labels, registers: [r] }),
    advertsSent: new Counter({ name: 'ballast_vrrp_adverts_sent_total', help: 'VRRP advertisements sent', labelNames: labels, registers: [r] }),
    advertsReceived: new Counter({
      name: 'ballast_vrrp_adverts_received_total',
      help: 'Valid VRRP advertisements received for our VRID',
      labelNames: labels,
      registers: [r],
    }),
    sendErrors: new Counter({
      name: 'ballast_vrrp_send_errors_total',
      help: 'Advertisements the kernel refused to send',
      labelNames: labels,
      registers: [r],
    }),
    announcementsSent: new Counter({
      name: 'ballast_announcements_sent_total',
      help: 'Gratuitous ARP / unsolicited NA frames sent',
      labelNames: labels,
      registers: [r],
    }),
    foreign: new Counter({
      name: 'ballast_vrrp_foreign_adverts_total',
      help: 'Adverts for our VRID listing other addresses than our VIPs (another group or a misconfigured peer)',
      labelNames: labels,
      registers: [r],
    }),
  };
  const dropped = new Counter({
    name: 'ballast_vrrp_packets_dropped_total',
    help: 'Received VRRP packets dropped, by reason (RFC 9568 §7.1 checks, other VRIDs, non-peers, non-members)',
    labelNames: ['vrid', 'reason'],
    registers: [r],
  });
  const otherHeard = new Gauge({
    name: 'ballast_vrrp_other_master_heard',
    help: 'Other VRRP routers heard advertising as master while this node was master, in the last minute (0: none); nothing is heard while a partition lasts, only once it heals',
    labelNames: labels,
    registers: [r],
  });
  const otherAdverts = new Counter({
    name: 'ballast_vrrp_other_master_adverts_total',
    help: 'Adverts of another master heard while this node was master, by outcome: kept (this node won: two nodes held the VIPs), yielded (it lost: a preemption or a healed partition), handover (the last advert of the router it had just preempted)',
    labelNames: ['vrid', 'outcome'],
    registers: [r],
  });
  const otherAge = new Gauge({
    name: 'ballast_vrrp_other_master_last_heard_age_seconds',
    help: 'How long ago the last advert of another master was heard while this node was master (absent before any)',
    labelNames: labels,
    registers: [r],
  });
  const pacerAdverts = new Counter({
    name: 'ballast_vrrp_pacer_adverts_total',
    help: 'Adverts the native pacer sent while the election thread was stalled (native/advert_pacer.h); counted in ballast_vrrp_adverts_sent_total too',
    labelNames: labels,
    registers: [r],
  });
  const pacerHolds = new Counter({
    name: 'ballast_vrrp_pacer_holds_total',
    help: "Times the election thread stayed silent past the pacer's hold, so the pacer stopped sending (a Backup may take over)",
    labelNames: labels,
    registers: [r],
  });
  return (doc) => {
    if (doc.state === 'none') return;
    const vrid = String(doc.vrid);
    for (const s of STATES) state.set({ vrid, state: s }, doc.state === s ? 1 : 0);
    priority.set({ vrid }, doc.priority);
    effective.set({ vrid }, doc.effectivePriority);
    held.set({ vrid }, doc.vipsHeld ? 1 : 0);
    masterDown.set({ vrid }, doc.masterDownIntervalMs / 1000);
    for (const [key, counter] of Object.entries(counters)) mirror(counter, doc.counters[key as keyof typeof counters], { vrid });
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
      mirror(pacerAdverts, pacer.sent, { vrid });
      mirror(pacerHolds, pacer.holds, { vrid });
    }
  };
}
