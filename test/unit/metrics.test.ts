import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { ballastVersion, createMetrics } from '../../src/observe/metrics.js';
import { STATUS_DOC as doc } from '../support/status-doc.js';

describe('metrics', () => {
  it('exposes the election state and counters from the status document', async () => {
    const m = createMetrics();
    m.update(doc);
    const text = await m.registry.metrics();
    for (const line of [
      'ballast_vrrp_state{vrid="51",state="master"} 1',
      'ballast_vrrp_state{vrid="51",state="backup"} 0',
      'ballast_vrrp_priority{vrid="51"} 150',
      'ballast_vrrp_effective_priority{vrid="51"} 100',
      'ballast_vip_held{vrid="51"} 1',
      'ballast_vrrp_master_down_interval_seconds{vrid="51"} 0.341406',
      'ballast_vrrp_transitions_total{vrid="51"} 2',
      'ballast_vrrp_adverts_sent_total{vrid="51"} 12',
      'ballast_vrrp_adverts_received_total{vrid="51"} 3',
      'ballast_vrrp_send_errors_total{vrid="51"} 1',
      'ballast_announcements_sent_total{vrid="51"} 5',
      'ballast_vrrp_foreign_adverts_total{vrid="51"} 4',
      'ballast_vrrp_packets_dropped_total{vrid="51",reason="checksum"} 2',
      'ballast_vrrp_packets_dropped_total{vrid="51",reason="vrid"} 7',
    ]) {
      expect(text.split('\n')).toContain(line);
    }
    for (const line of [
      'ballast_backend_up{backend="10.0.0.11:6443"} 1',
      'ballast_backend_up{backend="10.0.0.12:6443"} 0',
      'ballast_backend_state{backend="10.0.0.11:6443",state="up"} 1',
      'ballast_backend_state{backend="10.0.0.11:6443",state="down"} 0',
      'ballast_backend_state{backend="10.0.0.11:6443",state="unknown"} 0',
      'ballast_backend_state{backend="10.0.0.12:6443",state="down"} 1',
      'ballast_backend_state{backend="10.0.0.12:6443",state="up"} 0',
      'ballast_backend_check_duration_seconds{backend="10.0.0.11:6443"} 0.012',
      'ballast_dataplane_applies_total 3',
      'ballast_dataplane_apply_failures_total 1',
      'ballast_dataplane_last_apply_duration_seconds 0.0045',
      'ballast_dataplane_flushed_connections_total 7',
    ]) {
      expect(text.split('\n')).toContain(line);
    }
    expect(text.split('\n')).toContain('ballast_local_endpoint_backend{mode="ebpf",backend="10.0.0.11:6443"} 1');
    expect(text.split('\n')).toContain('ballast_local_endpoint_sockets_reset_total 2');
    expect(text).toContain('# TYPE ballast_vrrp_adverts_sent_total counter');
  });
  it('a backend that left the set keeps its series while remembered, with its state when it left; a listed one reads listed 1', async () => {
    const m = createMetrics();
    const gone = (address: string, state: 'up' | 'down') => ({
      address,
      state,
      dampedUntil: null,
      lastCheck: null,
      lastLatencyMs: 2,
      reason: state === 'down' ? 'ECONNREFUSED' : null,
      consecutive: 2,
      left: 3,
      returned: 2,
      leftAt: '2026-11-29T20:00:00.000Z',
      keptUntil: '2026-11-29T20:05:00.000Z',
    });
    m.update({ ...doc, departedBackends: [gone('10.0.0.13:6443', 'down'), gone('10.0.0.14:6443', 'up')] });
    const lines = (await m.registry.metrics()).split('\n');
    for (const line of [
      'ballast_backend_listed{backend="10.0.0.11:6443"} 1',
      'ballast_backend_listed{backend="10.0.0.13:6443"} 0',
      'ballast_backend_up{backend="10.0.0.13:6443"} 0',
      'ballast_backend_state{backend="10.0.0.13:6443",state="down"} 1',
      'ballast_backend_check_duration_seconds{backend="10.0.0.13:6443"} 0.002',
      // left while up: no BallastBackendDown for a backend gone for good
      'ballast_backend_up{backend="10.0.0.14:6443"} 1',
    ]) {
      expect(lines).toContain(line);
    }
    // forgotten: the series go
    m.update(doc);
    expect((await m.registry.metrics()).split('\n').filter((l) => l.includes('10.0.0.13'))).toStrictEqual([]);
  });

  it('process metrics under their standard names, and ballast_build_info', async () => {
    const text = await createMetrics({ version: '1.2.3' }).registry.metrics();
    const lines = text.split('\n');
    expect(lines).toContain('# TYPE process_cpu_user_seconds_total counter');
    expect(lines).toContain('# TYPE nodejs_eventloop_lag_seconds gauge');
    expect(lines).toContain('# TYPE process_resident_memory_bytes gauge');
    expect(text).not.toMatch(/^ballast_(process|nodejs)_/m);
    expect(lines).toContain(`ballast_build_info{version="1.2.3",node_version="${process.version}"} 1`);
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(ballastVersion()).toBe(pkg.version);
    expect((await createMetrics().registry.metrics()).split('\n')).toContain(
      `ballast_build_info{version="${pkg.version}",node_version="${process.version}"} 1`,
    );
  });
  it('counters follow the worker across scrapes instead of adding up', async () => {
    const m = createMetrics();
    m.update(doc);
    m.update({ ...doc, state: 'backup' as const, counters: { ...doc.counters, advertsSent: 20, dropped: { checksum: 3 } } });
    const lines = (await m.registry.metrics()).split('\n');
    expect(lines).toContain('ballast_vrrp_adverts_sent_total{vrid="51"} 20');
    expect(lines).toContain('ballast_vrrp_packets_dropped_total{vrid="51",reason="checksum"} 3');
    expect(lines).toContain('ballast_vrrp_state{vrid="51",state="master"} 0');
    expect(lines).toContain('ballast_vrrp_state{vrid="51",state="backup"} 1');
  });
});
