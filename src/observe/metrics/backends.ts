/**
 * The backends' metrics (`ballast_backend*`): health, where each came from, flap damping, the
 * last check's latency, the serving certificate; a backend that left the set keeps its series
 * while it is remembered (apiserver.health.rememberDeparted). docs/metrics.md.
 */
import { Gauge, type Registry } from 'prom-client';
import type { StatusDocument } from '../status.js';

/** A backend's health states (health/hysteresis.ts BackendState), one ballast_backend_state series each. */
const BACKEND_STATES = ['unknown', 'up', 'down'] as const;

/** Registers the backends' metrics in `r`. @returns what sets them from a status document. */
export function backendMetrics(r: Registry): (doc: StatusDocument) => void {
  const backendInfo = new Gauge({
    name: 'ballast_backend_info',
    help: '1 for each backend checked, with where it came from (source: seed, endpointslice or lastKnown)',
    labelNames: ['backend', 'source'],
    registers: [r],
  });
  const backendUp = new Gauge({
    name: 'ballast_backend_up',
    help: '1 when the apiserver backend is healthy (in the data plane), 0 when not',
    labelNames: ['backend'],
    registers: [r],
  });
  const backendState = new Gauge({
    name: 'ballast_backend_state',
    help: 'Health state of the backend: 1 for the current state (unknown before its first verdict, up, down), 0 for the others',
    labelNames: ['backend', 'state'],
    registers: [r],
  });
  const backendWaiting = new Gauge({
    name: 'ballast_backend_waiting_for_file',
    help: '1 while the checks of the backend wait for a file that does not exist yet (setting, path: the CA before kubeadm init)',
    labelNames: ['backend', 'setting', 'path'],
    registers: [r],
  });
  const failOpen = new Gauge({
    name: 'ballast_backends_fail_open',
    help: 'Fail open: 1 while every backend turned unready together and the last ready set is kept in the data planes (docs/health.md), 0 otherwise',
    registers: [r],
  });
  const backendListed = new Gauge({
    name: 'ballast_backend_listed',
    help: '1 for a backend in the set (seed, EndpointSlices, last-known), 0 for one that left it and is remembered for a while (its other series then hold its state when it left)',
    labelNames: ['backend'],
    registers: [r],
  });
  const backendDamped = new Gauge({
    name: 'ballast_backend_damped',
    help: '1 while flap damping holds the backend out of the data planes (docs/health.md), 0 otherwise',
    labelNames: ['backend'],
    registers: [r],
  });
  const backendLatency = new Gauge({
    name: 'ballast_backend_check_duration_seconds',
    help: 'How long the last /readyz check of the backend took',
    labelNames: ['backend'],
    registers: [r],
  });
  const certMissing = new Gauge({
    name: 'ballast_backend_certificate_san_missing',
    help: "1 when the backend's serving certificate lacks a SAN clients use (a VIP, a local endpoint address, the health checks' server name), 0 when it covers them",
    labelNames: ['backend'],
    registers: [r],
  });
  const certExpiry = new Gauge({
    name: 'ballast_backend_certificate_expiry_timestamp_seconds',
    help: "notAfter of the backend's serving certificate, seconds since the epoch",
    labelNames: ['backend'],
    registers: [r],
  });
  return (doc) => {
    backendInfo.reset();
    for (const b of doc.backends) backendInfo.set({ backend: b.address, source: b.source ?? 'seed' }, 1);
    for (const g of [backendUp, backendState, backendLatency, backendWaiting, backendDamped, backendListed]) g.reset();
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
  };
}
