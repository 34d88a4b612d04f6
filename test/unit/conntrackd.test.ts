/**
 * Connection sync's pure parts: the conntrackd.conf(5) it renders, the multicast port per VRID,
 * the parse of `conntrackd -s` (conntrack-tools 1.4.7's text, captured from a running daemon),
 * and passive detection ignoring committed entries. The daemon itself, the commit and the
 * failovers are in test/integration/hitless.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { conntrackdPaths, parseConntrackdStats, renderConntrackdConfig, SYNC_GROUP_V4, SYNC_GROUP_V6, syncPort } from '../../src/dataplane/conntrackd.js';
import { FlowTracker, type FlowEvent } from '../../src/health/passive.js';
import { flushBackendSides, flushVip } from '../../src/dataplane/conntrack.js';

// `conntrackd -s` of conntrack-tools 1.4.7 (Debian bookworm), whitespace as printed
const STATS = `cache internal:
current active connections:	         498
connections created:		         520	failed:	           0
connections updated:		          31	failed:	           0
connections destroyed:		          22	failed:	           0

cache external:
current active connections:	         390
connections created:		         401	failed:	           0
connections updated:		          12	failed:	           0
connections destroyed:		          11	failed:	           0

traffic processed:
                   0 Bytes                         0 Pckts

multicast traffic (active device=eth0):
              160544 Bytes sent                 93312 Bytes recv
                1377 Pckts sent                   957 Pckts recv
                   0 Error send                    0 Error recv

message tracking:
                   0 Malformed msgs                    0 Lost msgs
`;

describe('renderConntrackdConfig', () => {
  const dir = '/run/ballast/conntrackd-4026531840-eth0-vrid51';
  const text = renderConntrackdConfig({ dir, ifname: 'eth0', ipv4: '10.0.0.11', port: syncPort(51) });
  const lines = text.split('\n').map((l) => l.trim());

  it('runs FTFW with a start-up resync, over multicast on the VRRP interface, its port per VRID', () => {
    expect(syncPort(51)).toBe(3831);
    expect(lines).toContain('Mode FTFW {');
    expect(lines).toContain('StartupResync yes');
    expect(lines.slice(lines.indexOf('Multicast Default {'), lines.indexOf('Multicast Default {') + 5)).toStrictEqual([
      'Multicast Default {',
      `IPv4_address ${SYNC_GROUP_V4}`,
      'Group 3831',
      'IPv4_interface 10.0.0.11',
      'Interface eth0',
    ]);
  });

  it('keeps its lock file, UNIX socket and log in its own directory (several instances on one machine)', () => {
    const p = conntrackdPaths(dir);
    expect(lines).toContain(`LockFile ${p.lock}`);
    expect(lines).toContain(`Path ${p.socket}`);
    expect(lines).toContain(`LogFile ${p.log}`);
    expect(lines).toContain('Systemd no');
    // lost kernel events (an overrun) are made good by a dump of the kernel table within a second
    expect(lines).toContain('NetlinkOverrunResync 1');
  });

  it('replicates established TCP entries only, loopback excluded', () => {
    const filter = lines.slice(lines.indexOf('Filter From Userspace {'));
    expect(filter).toContain('TCP');
    expect(filter).toContain('IPv4_address 127.0.0.0/8');
    expect(filter).toContain('ESTABLISHED FIN_WAIT CLOSE_WAIT LAST_ACK TIME_WAIT CLOSED for TCP');
    expect(filter.join('\n')).not.toMatch(/SYN_SENT|SYN_RECV/);
  });

  it('uses IPv6 multicast when the interface has no IPv4 address', () => {
    const v6 = renderConntrackdConfig({ dir, ifname: 'eth1', ipv4: null, port: 3900 });
    expect(v6).toContain(`IPv6_address ${SYNC_GROUP_V6}`);
    expect(v6).toContain('Interface eth1');
    expect(v6).not.toMatch(/IPv[46]_interface/);
    expect(v6).not.toContain('IPv4_interface');
  });

  it('refuses what conntrackd would misread, naming the field', () => {
    expect(() => renderConntrackdConfig({ dir: 'run/x', ifname: 'eth0', ipv4: null, port: 3831 })).toThrow(/^dir must be an absolute path/);
    expect(() => renderConntrackdConfig({ dir, ifname: 'eth0', ipv4: null, port: 80 })).toThrow(/^port must be an integer from 1024 to 65535/);
    expect(() => renderConntrackdConfig({ dir, ifname: 'eth0', ipv4: 'fd00::1', port: 3831 })).toThrow(/^ipv4: not an IPv4 address/);
    expect(() => syncPort(0)).toThrow(/^vrid must be an integer from 1 to 255/);
    expect(() => syncPort(256)).toThrow(TypeError);
  });
});

describe('flushVip', () => {
  it('deletes the flows to VIP:port, or only those in one TCP state; IPv6 canonical', async () => {
    const calls: string[][] = [];
    const exec = async (args: string[]) => {
      calls.push(args);
      return { code: 0, stdout: '', stderr: 'conntrack v1.4.7 (conntrack-tools): 3 flow entries have been deleted.\n' };
    };
    expect(await flushVip('10.0.0.100', 6443, { exec })).toBe(3);
    await flushVip('fd00:0::100', 6443, { exec, state: 'TIME_WAIT' });
    expect(calls).toStrictEqual([
      ['-D', '-f', 'ipv4', '-p', 'tcp', '--orig-dst', '10.0.0.100', '--orig-port-dst', '6443'],
      ['-D', '-f', 'ipv6', '-p', 'tcp', '--orig-dst', 'fd00::100', '--orig-port-dst', '6443', '--state', 'TIME_WAIT'],
    ]);
    await expect(flushVip('10.0.0.100', 0, { exec })).rejects.toThrow(/^port must be an integer from 1 to 65535/);
  });
});

describe('flushBackendSides', () => {
  it('deletes the backend sides of flows through the VIP, begun by either end; IPv6 canonical', async () => {
    const calls: string[][] = [];
    const exec = async (args: string[]) => {
      calls.push(args);
      return { code: 0, stdout: '', stderr: 'conntrack v1.4.7 (conntrack-tools): 2 flow entries have been deleted.\n' };
    };
    expect(await flushBackendSides('10.0.0.100', [6443, 6443], { exec })).toBe(4);
    await flushBackendSides('fd00:0::100', [6443], { exec });
    expect(calls).toStrictEqual([
      ['-D', '-f', 'ipv4', '-p', 'tcp', '--orig-src', '10.0.0.100'],
      ['-D', '-f', 'ipv4', '-p', 'tcp', '--orig-dst', '10.0.0.100', '--orig-port-src', '6443'],
      ['-D', '-f', 'ipv6', '-p', 'tcp', '--orig-src', 'fd00::100'],
      ['-D', '-f', 'ipv6', '-p', 'tcp', '--orig-dst', 'fd00::100', '--orig-port-src', '6443'],
    ]);
    await expect(flushBackendSides('not-an-ip', [6443], { exec })).rejects.toThrow(/^vip: not an IP address/);
    await expect(flushBackendSides('10.0.0.100', [0], { exec })).rejects.toThrow(/^port must be an integer from 1 to 65535/);
  });
});

describe('parseConntrackdStats', () => {
  it('reads both caches and the multicast packet counters', () => {
    expect(parseConntrackdStats(STATS)).toStrictEqual({ internal: 498, external: 390, packetsSent: 1377, packetsReceived: 957 });
  });

  it('is null for text that is not conntrackd statistics (an error message)', () => {
    expect(parseConntrackdStats('ERROR: cannot connect to the UNIX socket /run/ballast/x/ctl\n')).toBeNull();
  });
});

describe('passive detection and committed entries', () => {
  // what a commit makes on the new holder: NEW events of entries already ESTABLISHED (the filter
  // replicates no SYN_SENT), then, for a flow that ended meanwhile, their end
  const entry = (type: FlowEvent['type'], state: string | null): FlowEvent => ({
    type,
    id: '77',
    state,
    origDst: '10.0.0.100',
    origDport: 6443,
    replySrc: '10.0.0.12',
    replySport: 6443,
  });

  it('takes no committed entry for a connection attempt: no verdict on its creation or its end', () => {
    const tr = new FlowTracker(['10.0.0.100'], 6443, 250);
    expect(tr.onEvent(entry('NEW', 'ESTABLISHED'), 0)).toStrictEqual([]);
    expect(tr.onEvent(entry('UPDATE', 'CLOSE'), 1)).toStrictEqual([]);
    expect(tr.onEvent(entry('DESTROY', 'CLOSE'), 2)).toStrictEqual([]);
    expect(tr.tick(10_000)).toStrictEqual([]);
  });
});
