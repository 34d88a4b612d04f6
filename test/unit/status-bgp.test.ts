/** `ballast status` without --json in BGP mode (formatStatus, src/observe/status.ts): the /status `bgp` facts as lines. */
import { describe, expect, it } from 'vitest';
import { formatStatus, type StatusDocument } from '../../src/observe/status.js';

const bgp: NonNullable<StatusDocument['bgp']> = {
  daemon: 'bird',
  socket: '/run/bird/bird.ctl',
  configFile: '/etc/bird/ballast.conf',
  daemonUp: true,
  daemonSince: '2026-12-02T06:00:00.000Z',
  version: '2.0.12',
  routerId: '10.0.1.2',
  announce: 'backends',
  balance: 'all',
  wanted: true,
  reason: 'the data plane serves 2 backends',
  announced: true,
  since: '2026-12-02T06:00:01.000Z',
  lastChangeMs: 4,
  pushes: 1,
  daemonLosses: 0,
  lastError: null,
  peers: [
    { address: '10.0.1.1', asn: 64500, protocol: 'ballast_peer4_1', state: 'up', session: 'Established', bfd: true },
    { address: '10.0.2.1', asn: 64501, protocol: 'ballast_peer4_2', state: 'start', session: 'Active', bfd: false },
  ],
  localBackend: '10.0.1.2:6443',
};
const doc = (b: typeof bgp): StatusDocument => ({
  state: 'none',
  backends: [],
  dataplane: { mode: 'none' },
  local: { mode: 'off', reason: 'no localEndpoint configured' },
  bgp: b,
});
const rows = (text: string): string[] => text.split('\n').filter((l) => l.startsWith('bgp'));

describe('formatStatus: mode bgp', () => {
  it('prints the announcement, why, the daemon, each peer, the local backend', () => {
    const text = formatStatus(doc(bgp));
    expect(text.split('\n')[0]).toMatch(/^state: +none \(mode: bgp: no election/);
    expect(rows(text)).toStrictEqual([
      'bgp:        announced since 2026-12-02T06:00:01.000Z, last change took 4 ms',
      'bgp wanted: yes: the data plane serves 2 backends (announce: backends, balance: all)',
      'bgp daemon: bird 2.0.12 up since 2026-12-02T06:00:00.000Z, router ID 10.0.1.2 (socket /run/bird/bird.ctl, 1 configuration push, lost 0 times)',
      'bgp peer:   10.0.1.1 AS 64500 (ballast_peer4_1): Established, protocol up, BFD',
      'bgp peer:   10.0.2.1 AS 64501 (ballast_peer4_2): Active, protocol start',
      'bgp local:  10.0.1.2:6443',
    ]);
    expect(text).toContain('dataplane:  none (VIP only)');
  });

  it('daemon down: not answering, peers unknown, no local backend, the last error', () => {
    const down = {
      ...bgp,
      daemonUp: false,
      version: null,
      routerId: null,
      wanted: false,
      reason: 'no ready backend',
      announced: false,
      lastChangeMs: null,
      daemonLosses: 1,
      localBackend: null,
      lastError: 'bird control socket /run/bird/bird.ctl: ENOENT',
      peers: [{ ...bgp.peers[0]!, state: null, session: null }],
    };
    expect(rows(formatStatus(doc(down)))).toStrictEqual([
      'bgp:        not announced since 2026-12-02T06:00:01.000Z',
      'bgp wanted: no: no ready backend (announce: backends, balance: all)',
      'bgp daemon: bird not answering since 2026-12-02T06:00:00.000Z (socket /run/bird/bird.ctl; waiting for it, lost 1 time)',
      'bgp peer:   10.0.1.1 AS 64500 (ballast_peer4_1): unknown, BFD',
      'bgp local:  none (no backend on this node)',
      'bgp error:  bird control socket /run/bird/bird.ctl: ENOENT',
    ]);
  });
});
