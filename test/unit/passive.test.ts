import { describe, expect, it } from 'vitest';
import { FlowTracker, parseConntrackLine, type FlowEvent } from '../../src/health/passive.js';
import { hostPort } from '../../src/net/address.js';

// real lines from `conntrack -E -p tcp -o timestamp,id` (conntrack-tools 1.4.7), a DNAT to a closed and an open port
const refusedNew = '[1795986894.449245]\t    [NEW] tcp      6 120 SYN_SENT src=10.9.9.1 dst=10.9.9.9 sport=42394 dport=6443 [UNREPLIED] src=10.9.9.12 dst=10.9.9.1 sport=6443 dport=42394 id=2624420075';
const refusedDestroy = '[1795986894.449380]\t[DESTROY] tcp      6 120 CLOSE src=10.9.9.1 dst=10.9.9.9 sport=42394 dport=6443 [UNREPLIED] src=10.9.9.12 dst=10.9.9.1 sport=6443 dport=42394 id=2624420075';
const okNew = '    [NEW] tcp      6 120 SYN_SENT src=10.9.9.1 dst=10.9.9.9 sport=42400 dport=6443 [UNREPLIED] src=10.9.9.11 dst=10.9.9.1 sport=6443 dport=42400 id=1444969298';
const okRecv = ' [UPDATE] tcp      6 60 SYN_RECV src=10.9.9.1 dst=10.9.9.9 sport=42400 dport=6443 src=10.9.9.11 dst=10.9.9.1 sport=6443 dport=42400 id=1444969298';
const okEst = ' [UPDATE] tcp      6 432000 ESTABLISHED src=10.9.9.1 dst=10.9.9.9 sport=42400 dport=6443 src=10.9.9.11 dst=10.9.9.1 sport=6443 dport=42400 [ASSURED] id=1444969298';

function ev(line: string): FlowEvent {
  const e = parseConntrackLine(line);
  if (!e) throw new Error(`did not parse: ${line}`);
  return e;
}

describe('parseConntrackLine', () => {
  it('takes the original destination and the reply source', () => {
    expect(ev(refusedNew)).toEqual({ type: 'NEW', id: '2624420075', state: 'SYN_SENT', origDst: '10.9.9.9', origDport: 6443, replySrc: '10.9.9.12', replySport: 6443 });
    expect(ev(okEst)).toMatchObject({ type: 'UPDATE', state: 'ESTABLISHED', replySrc: '10.9.9.11' });
    expect(ev(refusedDestroy)).toMatchObject({ type: 'DESTROY', state: 'CLOSE' });
  });
  it('IPv6 tuples', () => {
    const l = '[NEW] tcp      6 120 SYN_SENT src=fd00::50 dst=fd00::100 sport=1 dport=6443 [UNREPLIED] src=fd00::12 dst=fd00::50 sport=6443 dport=1 id=7';
    expect(ev(l)).toMatchObject({ origDst: 'fd00::100', replySrc: 'fd00::12', replySport: 6443 });
  });
  it.each(['', 'conntrack v1.4.7 (conntrack-tools): 8 flow events have been shown.', '[NEW] udp 17 30 src=1.1.1.1 dst=2.2.2.2 sport=1 dport=53 src=2.2.2.2 dst=1.1.1.1 sport=53 dport=1 id=1', '[NEW] tcp 6 120 SYN_SENT src=1.1.1.1'])('ignores %j', (l) => {
    expect(parseConntrackLine(l)).toBeNull();
  });
});

describe('FlowTracker', () => {
  const t = () => new FlowTracker(['10.9.9.9'], 6443, 250);
  it('a RST to the SYN (DESTROY before any answer) judges the backend dead at once', () => {
    const tr = t();
    expect(tr.onEvent(ev(refusedNew), 0)).toEqual([]);
    expect(tr.onEvent(ev(refusedDestroy), 1)).toEqual([{ backend: '10.9.9.12:6443', alive: false, reason: 'refused' }]);
    expect(tr.pendingCount).toBe(0);
  });
  it('an answered SYN is a sign of life, and later updates of the flow say nothing', () => {
    const tr = t();
    tr.onEvent(ev(okNew), 0);
    expect(tr.onEvent(ev(okRecv), 1)).toEqual([{ backend: '10.9.9.11:6443', alive: true, reason: 'answered' }]);
    expect(tr.onEvent(ev(okEst), 2)).toEqual([]);
    expect(tr.tick(10_000)).toEqual([]);
  });
  it('a SYN unanswered for synTimeoutMs judges the backend dead, once', () => {
    const tr = t();
    tr.onEvent(ev(okNew), 100);
    expect(tr.tick(349)).toEqual([]);
    expect(tr.tick(350)).toEqual([{ backend: '10.9.9.11:6443', alive: false, reason: 'unanswered SYN' }]);
    expect(tr.tick(1000)).toEqual([]);
  });
  it('ignores other destinations, other ports and flows that were not DNATed', () => {
    const tr = t();
    expect(tr.onEvent({ ...ev(okNew), origDst: '10.9.9.8' }, 0)).toEqual([]);
    expect(tr.onEvent({ ...ev(okNew), id: '2', origDport: 443 }, 0)).toEqual([]);
    expect(tr.onEvent({ ...ev(okNew), id: '3', replySrc: '10.9.9.9' }, 0)).toEqual([]);
    expect(tr.pendingCount).toBe(0);
    expect(tr.tick(10_000)).toEqual([]);
  });
  it('an UPDATE or DESTROY for a flow it never saw begin says nothing', () => {
    expect(t().onEvent(ev(refusedDestroy), 0)).toEqual([]);
    expect(t().onEvent(ev(okEst), 0)).toEqual([]);
  });
  it('names IPv6 backends in brackets', () => {
    expect(hostPort('FD00::12', 6443)).toBe('[fd00::12]:6443');
    expect(hostPort('10.0.0.1', 6443)).toBe('10.0.0.1:6443');
  });
});

describe('FlowTracker: direct flows (the ebpf local endpoint rewrites connect(), so no NAT)', () => {
  // a connect() rewritten to 10.9.9.12:6443 before the first packet: conntrack sees the backend itself
  const directNew = '[NEW] tcp 6 120 SYN_SENT src=10.9.9.1 dst=10.9.9.12 sport=40000 dport=6443 [UNREPLIED] src=10.9.9.12 dst=10.9.9.1 sport=6443 dport=40000 id=11';
  const directDestroy = '[DESTROY] tcp 6 120 CLOSE src=10.9.9.1 dst=10.9.9.12 sport=40000 dport=6443 [UNREPLIED] src=10.9.9.12 dst=10.9.9.1 sport=6443 dport=40000 id=11';
  const v6New = '[NEW] tcp 6 120 SYN_SENT src=fd00::1 dst=fd00::12 sport=1 dport=6443 [UNREPLIED] src=fd00::12 dst=fd00::1 sport=6443 dport=1 id=12';
  const v6Recv = '[UPDATE] tcp 6 60 SYN_RECV src=fd00::1 dst=fd00::12 sport=1 dport=6443 src=fd00::12 dst=fd00::1 sport=6443 dport=1 id=12';

  it('a refused direct connection judges that backend dead', () => {
    const tr = new FlowTracker([], 6443, 250, ['10.9.9.12:6443', '[fd00::12]:6443']);
    expect(tr.onEvent(ev(directNew), 0)).toEqual([]);
    expect(tr.onEvent(ev(directDestroy), 1)).toEqual([{ backend: '10.9.9.12:6443', alive: false, reason: 'refused' }]);
    tr.onEvent(ev(v6New), 2);
    expect(tr.onEvent(ev(v6Recv), 3)).toEqual([{ backend: '[fd00::12]:6443', alive: true, reason: 'answered' }]);
  });
  it('without the backend in the direct list, the same flow is ignored (it is not to a VIP)', () => {
    const tr = new FlowTracker(['10.9.9.9'], 6443, 250);
    expect(tr.onEvent(ev(directNew), 0)).toEqual([]);
    expect(tr.pendingCount).toBe(0);
  });
  it('VIP flows and direct flows side by side; another port of the backend is ignored', () => {
    const tr = new FlowTracker(['10.9.9.9'], 6443, 250, ['10.9.9.12:6443']);
    tr.onEvent(ev(refusedNew), 0);
    tr.onEvent(ev(directNew), 0);
    expect(tr.onEvent({ ...ev(directNew), id: '99', origDport: 10250, replySport: 10250 }, 0)).toEqual([]);
    expect(tr.pendingCount).toBe(2);
    expect(tr.tick(250).map((v) => v.backend)).toEqual(['10.9.9.12:6443', '10.9.9.12:6443']);
  });
});

