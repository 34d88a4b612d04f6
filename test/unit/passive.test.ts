/**
 * Passive detection: ctnetlink events parsed from real bytes (captured from Linux 6.18, see
 * golden/ctnetlink-events.json), the pure FlowTracker's verdicts, and the watcher over an
 * injected socket (no child process: the events are read in the agent).
 */
import { createSocket } from 'node:dgram';
import { EventEmitter, once } from 'node:events';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CONNTRACK_GROUPS, FlowTracker, parseCtEvents, watchConntrack, type CtSocket, type FlowEvent, type PassiveVerdict } from '../../src/health/passive.js';
import { formatHostPort } from '../../src/net/hostport.js';

const golden = JSON.parse(readFileSync(new URL('./golden/ctnetlink-events.json', import.meta.url), 'utf8')) as {
  captures: Record<'v4refused' | 'v4ok' | 'v6refused', string[]>;
};
const events = (name: keyof typeof golden.captures): FlowEvent[] => golden.captures[name].flatMap((hex) => parseCtEvents(Buffer.from(hex, 'hex')));
const text = (vs: readonly PassiveVerdict[]): string[] => vs.map((v) => `${formatHostPort(v.backend)} ${v.alive ? 'alive' : 'dead'} ${v.signal} ${v.reason}`);

describe('parseCtEvents (real ctnetlink datagrams)', () => {
  it('a DNATed connection refused by the backend: NEW SYN_SENT, then DESTROY', () => {
    const flow = { origDst: '10.9.9.9', origDport: 6443, replySrc: '10.9.9.12', replySport: 6443 };
    expect(events('v4refused')).toStrictEqual([
      { type: 'NEW', id: '2542988099', state: 'SYN_SENT', ...flow },
      { type: 'DESTROY', id: '2542988099', state: 'CLOSE', ...flow },
    ]);
  });
  it('an answered connection: NEW, then UPDATEs through the TCP states', () => {
    const e = events('v4ok');
    expect(e.map((x) => `${x.type} ${x.state}`)).toStrictEqual([
      'NEW SYN_SENT',
      'UPDATE SYN_RECV',
      'UPDATE ESTABLISHED',
      'UPDATE FIN_WAIT',
      'UPDATE LAST_ACK',
      'UPDATE TIME_WAIT',
    ]);
    expect(new Set(e.map((x) => `${x.id} ${x.origDst}:${x.origDport} ${x.replySrc}:${x.replySport}`))).toStrictEqual(
      new Set(['1096384297 10.9.9.9:6443 10.9.9.11:6443']),
    );
  });
  it('IPv6 tuples in canonical text', () => {
    expect(events('v6refused').map((x) => [x.type, x.origDst, x.replySrc, x.replySport])).toStrictEqual([
      ['NEW', 'fd00::100', 'fd00::12', 6443],
      ['DESTROY', 'fd00::100', 'fd00::12', 6443],
    ]);
  });
  it('skips what it cannot use, never throws: truncated, other subsystems, non-TCP, garbage', () => {
    const real = Buffer.from(golden.captures.v4refused[0]!, 'hex');
    expect(parseCtEvents(Buffer.alloc(0))).toStrictEqual([]);
    expect(parseCtEvents(real.subarray(0, 40))).toStrictEqual([]);
    // nlmsg_len larger than the datagram
    const long = Buffer.from(real);
    long.writeUInt32LE(real.length + 4, 0);
    expect(parseCtEvents(long)).toStrictEqual([]);
    // another nfnetlink subsystem (NFNL_SUBSYS_CTNETLINK_EXP = 2)
    const exp = Buffer.from(real);
    exp.writeUInt16LE((2 << 8) | 0, 4);
    expect(parseCtEvents(exp)).toStrictEqual([]);
    // UDP: CTA_PROTO_NUM 17 instead of 6 (the first CTA_PROTO_NUM's value byte)
    const udp = Buffer.from(real);
    const at = udp.indexOf(Buffer.from([0x05, 0x00, 0x01, 0x00, 0x06]));
    udp[at + 4] = 17;
    expect(parseCtEvents(udp)).toStrictEqual([]);
    for (let i = 0; i < 200; i++) {
      const junk = Buffer.from(real);
      const k = (i * 7919) % junk.length;
      junk[k] = (junk[k] ?? 0) ^ 0xff;
      expect(() => parseCtEvents(junk)).not.toThrow();
    }
  });
  it('two messages in one datagram are both read', () => {
    const [a, b] = golden.captures.v4refused.map((h) => Buffer.from(h, 'hex'));
    expect(parseCtEvents(Buffer.concat([a!, b!])).map((e) => e.type)).toStrictEqual(['NEW', 'DESTROY']);
  });
});

describe('FlowTracker', () => {
  const t = () => new FlowTracker(['10.9.9.9'], 6443, 250);
  it('a RST to the SYN (DESTROY before any answer) judges the backend dead at once', () => {
    const tr = t();
    const [syn, rst] = events('v4refused');
    expect(tr.onEvent(syn!, 0)).toStrictEqual([]);
    expect(text(tr.onEvent(rst!, 1))).toStrictEqual(['10.9.9.12:6443 dead refused refused']);
    expect(tr.pendingCount).toBe(0);
  });
  it('an answered SYN is a sign of life, and later updates of the flow say nothing', () => {
    const tr = t();
    const [syn, recv, ...rest] = events('v4ok');
    tr.onEvent(syn!, 0);
    expect(text(tr.onEvent(recv!, 1))).toStrictEqual(['10.9.9.11:6443 alive answered answered']);
    for (const e of rest) expect(tr.onEvent(e, 2)).toStrictEqual([]);
    expect(tr.tick(10_000)).toStrictEqual([]);
  });
  it('a SYN unanswered for synTimeoutMs judges the backend dead, once', () => {
    const tr = t();
    tr.onEvent(events('v4ok')[0]!, 100);
    expect(tr.tick(349)).toStrictEqual([]);
    expect(text(tr.tick(350))).toStrictEqual(['10.9.9.11:6443 dead unanswered unanswered SYN']);
    expect(tr.tick(1000)).toStrictEqual([]);
  });
  it('a SYN to a VIP is held against its backend only when seen synTimeoutMs after this node took the VIPs; never while it does not hold them', () => {
    let held: number | null = null;
    const tr = new FlowTracker(['10.9.9.9'], 6443, 250, [], () => held);
    const [syn] = events('v4ok');
    // not the holder: the backend's answer goes to the VIP, which is not here
    tr.onEvent({ ...syn!, id: 'a' }, 0);
    expect(tr.tick(300)).toStrictEqual([]);
    expect(tr.pendingCount).toBe(0);
    // the VIPs added at 1000: a SYN at 1100 (the backends may still send to the previous holder) gives nothing
    held = 1000;
    tr.onEvent({ ...syn!, id: 'b' }, 1100);
    expect(tr.tick(1400)).toStrictEqual([]);
    // one at 1250 (synTimeoutMs after the VIPs) is judged as ever
    tr.onEvent({ ...syn!, id: 'c' }, 1250);
    expect(tr.tick(1499)).toStrictEqual([]);
    expect(text(tr.tick(1500))).toStrictEqual(['10.9.9.11:6443 dead unanswered unanswered SYN']);
    // the VIPs gone again: nothing
    held = null;
    tr.onEvent({ ...syn!, id: 'd' }, 2000);
    expect(tr.tick(3000)).toStrictEqual([]);
  });
  it('the VIPs not held: a refused SYN still judges (the RST came back), and direct flows are judged as ever', () => {
    const tr = new FlowTracker(['10.9.9.9'], 6443, 250, [{ host: '10.9.9.12', port: 6443 }], () => null);
    const [syn, destroy] = events('v4refused');
    tr.onEvent(syn!, 0);
    expect(text(tr.onEvent(destroy!, 1))).toHaveLength(1);
    tr.onEvent({ type: 'NEW', id: '11', state: 'SYN_SENT', origDst: '10.9.9.12', origDport: 6443, replySrc: '10.9.9.12', replySport: 6443 }, 10);
    expect(text(tr.tick(300))).toStrictEqual(['10.9.9.12:6443 dead unanswered unanswered SYN']);
  });
  it('an UPDATE without a TCP state says nothing; the flow stays pending', () => {
    const tr = t();
    const [syn, recv] = events('v4ok');
    tr.onEvent(syn!, 0);
    const { seenReply: _, ...markOnly } = recv!;
    expect(tr.onEvent({ ...markOnly, state: null }, 1)).toStrictEqual([]);
    expect(tr.pendingCount).toBe(1);
  });
  it('ignores other destinations, other ports and flows that were not DNATed', () => {
    const tr = t();
    const syn = events('v4ok')[0]!;
    expect(tr.onEvent({ ...syn, origDst: '10.9.9.8' }, 0)).toStrictEqual([]);
    expect(tr.onEvent({ ...syn, id: '2', origDport: 443 }, 0)).toStrictEqual([]);
    expect(tr.onEvent({ ...syn, id: '3', replySrc: '10.9.9.9' }, 0)).toStrictEqual([]);
    expect(tr.pendingCount).toBe(0);
  });
  it('an UPDATE or DESTROY for a flow it never saw begin says nothing', () => {
    expect(t().onEvent(events('v4refused')[1]!, 0)).toStrictEqual([]);
    expect(t().onEvent(events('v4ok')[2]!, 0)).toStrictEqual([]);
  });
  it('IPv6 VIP flows', () => {
    const tr = new FlowTracker(['fd00:0::100'], 6443, 250);
    const [syn, rst] = events('v6refused');
    tr.onEvent(syn!, 0);
    expect(text(tr.onEvent(rst!, 1))).toStrictEqual(['[fd00::12]:6443 dead refused refused']);
  });
});

describe('FlowTracker: direct flows (the ebpf local endpoint rewrites connect(), so no NAT)', () => {
  // a connect() rewritten to 10.9.9.12:6443 before the first packet: conntrack sees the backend itself
  const flow = { origDst: '10.9.9.12', origDport: 6443, replySrc: '10.9.9.12', replySport: 6443 };
  const directNew: FlowEvent = { type: 'NEW', id: '11', state: 'SYN_SENT', ...flow };
  const directDestroy: FlowEvent = { type: 'DESTROY', id: '11', state: 'CLOSE', ...flow };
  const v6 = { origDst: 'fd00::12', origDport: 6443, replySrc: 'fd00::12', replySport: 6443 };
  const v6New: FlowEvent = { type: 'NEW', id: '12', state: 'SYN_SENT', ...v6 };
  const v6Recv: FlowEvent = { type: 'UPDATE', id: '12', state: 'SYN_RECV', ...v6 };
  const direct = [
    { host: '10.9.9.12', port: 6443 },
    { host: 'fd00::12', port: 6443 },
  ];

  it('a refused direct connection judges that backend dead', () => {
    const tr = new FlowTracker([], 6443, 250, direct);
    expect(tr.onEvent(directNew, 0)).toStrictEqual([]);
    expect(text(tr.onEvent(directDestroy, 1))).toStrictEqual(['10.9.9.12:6443 dead refused refused']);
    tr.onEvent(v6New, 2);
    expect(text(tr.onEvent(v6Recv, 3))).toStrictEqual(['[fd00::12]:6443 alive answered answered']);
  });
  it('without the backend in the direct list, the same flow is ignored (it is not to a VIP)', () => {
    const tr = new FlowTracker(['10.9.9.9'], 6443, 250);
    expect(tr.onEvent(directNew, 0)).toStrictEqual([]);
    expect(tr.pendingCount).toBe(0);
  });
  it('VIP flows and direct flows side by side; another port of the backend is ignored', () => {
    const tr = new FlowTracker(['10.9.9.9'], 6443, 250, [direct[0]!]);
    tr.onEvent(events('v4refused')[0]!, 0);
    tr.onEvent(directNew, 0);
    expect(tr.onEvent({ ...directNew, id: '99', origDport: 10250, replySport: 10250 }, 0)).toStrictEqual([]);
    expect(tr.pendingCount).toBe(2);
    // both flows go to one backend: one verdict for it per tick
    expect(tr.tick(250).map((v) => formatHostPort(v.backend))).toStrictEqual(['10.9.9.12:6443']);
    expect(tr.pendingCount).toBe(0);
  });
});

/** A socket the test feeds. */
class FakeCtSocket extends EventEmitter implements CtSocket {
  groups: number[] = [];
  closed = false;
  refuse: (Error & { code?: string }) | null = null;
  addMembership(g: number): void {
    if (this.refuse) throw this.refuse;
    this.groups.push(g);
  }
  setRecvBufferSize(): void {}
  unref(): void {}
  close(): void {
    this.closed = true;
  }
}

describe('a backend that answers is not silent (a full accept queue drops SYNs)', () => {
  const flow = { origDst: '10.9.9.9', origDport: 6443, replySrc: '10.9.9.12', replySport: 6443 };
  it('a SYN dropped by a full accept queue, while later SYNs to the same backend are answered, gives no verdict', () => {
    const t = new FlowTracker(['10.9.9.9'], 6443, 250);
    t.onEvent({ type: 'NEW', id: '1', state: 'SYN_SENT', ...flow }, 0); // dropped: never answered
    t.onEvent({ type: 'NEW', id: '2', state: 'SYN_SENT', ...flow }, 10);
    expect(text(t.onEvent({ type: 'UPDATE', id: '2', state: 'SYN_RECV', ...flow }, 11))).toStrictEqual(['10.9.9.12:6443 alive answered answered']);
    expect(t.tick(300)).toStrictEqual([]);
    expect(t.pendingCount).toBe(0);
  });
  it('a SYN sent after the last answer still counts: a backend that dies after answering is judged, once per tick', () => {
    const t = new FlowTracker(['10.9.9.9'], 6443, 250);
    t.onEvent({ type: 'NEW', id: '1', state: 'SYN_SENT', ...flow }, 0);
    t.onEvent({ type: 'UPDATE', id: '1', state: 'ESTABLISHED', ...flow }, 1);
    t.onEvent({ type: 'NEW', id: '2', state: 'SYN_SENT', ...flow }, 5); // after the death
    t.onEvent({ type: 'NEW', id: '3', state: 'SYN_SENT', ...flow }, 6);
    expect(t.tick(254)).toStrictEqual([]);
    expect(text(t.tick(256))).toStrictEqual(['10.9.9.12:6443 dead unanswered unanswered SYN']);
    expect(t.pendingCount).toBe(0);
  });
});

describe("deletions are not refusals (conntrack -F, a reset of a dead backend's flows)", () => {
  it("a flow deleted while still in SYN_SENT (conntrack -F, an agent's reset) gives no verdict; one refused (CLOSE) still does", () => {
    const t = new FlowTracker(['10.9.9.9'], 6443, 250);
    const flow = { origDst: '10.9.9.9', origDport: 6443, replySrc: '10.9.9.12', replySport: 6443 };
    expect(t.onEvent({ type: 'NEW', id: '1', state: 'SYN_SENT', ...flow }, 0)).toStrictEqual([]);
    expect(t.onEvent({ type: 'DESTROY', id: '1', state: 'SYN_SENT', ...flow }, 10)).toStrictEqual([]);
    expect(t.pendingCount).toBe(0);
    expect(t.tick(1000)).toStrictEqual([]);
    t.onEvent({ type: 'NEW', id: '2', state: 'SYN_SENT', ...flow }, 0);
    expect(text(t.onEvent({ type: 'DESTROY', id: '2', state: 'CLOSE', ...flow }, 10))).toStrictEqual(['10.9.9.12:6443 dead refused refused']);
  });
});

describe('a live socket on the same tuple answers the SYN with an ACK: no refusal', () => {
  // after `conntrack -F` (or an agent's reset of a backend's flows) the server side of a flow
  // keeps its socket; a client reusing the port gets its SYN answered with a plain ACK, which
  // conntrack ignores in SYN_SENT but marks as a reply (IPS_SEEN_REPLY, no state in the event),
  // and the client's RST to it moves the flow to CLOSE. Seen with conntrack -E on Linux 6.18:
  //   [NEW] SYN_SENT [UNREPLIED] · [UPDATE] (no state, UNREPLIED gone) · [UPDATE] CLOSE · [DESTROY] CLOSE
  // while a refused SYN is [NEW] SYN_SENT · [DESTROY] CLOSE [UNREPLIED]
  it('the answered bit comes from CTA_STATUS: set on the real SYN_RECV update, not on the NEW', () => {
    const [syn, recv] = events('v4ok');
    expect(syn!.seenReply).toBeUndefined();
    expect(recv!.seenReply).toBe(true);
  });
  it('NEW SYN_SENT, an UPDATE with no state but the reply seen, then CLOSE: the backend is alive, never refused', () => {
    const t = new FlowTracker(['10.9.9.9'], 6443, 250);
    const [syn, recv] = events('v4ok');
    t.onEvent(syn!, 0);
    expect(text(t.onEvent({ ...recv!, state: null }, 1))).toStrictEqual(['10.9.9.11:6443 alive answered answered']);
    expect(t.onEvent({ ...recv!, state: 'CLOSE' }, 2)).toStrictEqual([]);
    expect(t.onEvent({ ...recv!, type: 'DESTROY', state: 'CLOSE' }, 3)).toStrictEqual([]);
    expect(t.tick(10_000)).toStrictEqual([]);
    // the same backend refusing a later SYN outright is still judged at once
    t.onEvent({ ...syn!, id: '7' }, 20);
    expect(text(t.onEvent({ ...syn!, id: '7', type: 'DESTROY', state: 'CLOSE' }, 21))).toStrictEqual(['10.9.9.11:6443 dead refused refused']);
  });
});

describe('watchConntrack (an injected socket)', () => {
  it('after an event-loop stall, an answer already queued is read before unanswered SYNs are judged', async () => {
    const sock = new FakeCtSocket();
    const out: PassiveVerdict[] = [];
    const w = watchConntrack(new FlowTracker(['10.9.9.9'], 6443, 100), (v) => out.push(v), { open: () => sock, tickMs: 10 });
    // the answer arrives through a real socket (its read is an I/O callback of the poll phase)
    const rx = createSocket('udp4');
    const tx = createSocket('udp4');
    try {
      rx.on('message', (m: Buffer) => sock.emit('message', m));
      rx.bind(0, '127.0.0.1');
      await once(rx, 'listening');
      const [syn, recv] = golden.captures.v4ok.map((h) => Buffer.from(h, 'hex'));
      sock.emit('message', syn!);
      await new Promise<void>((r, j) => tx.send(recv!, rx.address().port, '127.0.0.1', (e) => (e ? j(e) : r())));
      // the main thread stalls past the SYN timeout with the answer in the socket buffer
      const t0 = performance.now();
      while (performance.now() - t0 < 300) {
        /* busy */
      }
      await new Promise((r) => setTimeout(r, 50));
      expect(text(out)).toStrictEqual(['10.9.9.11:6443 alive answered answered']);
    } finally {
      w.stop();
      rx.close();
      tx.close();
    }
  });

  it('the unanswered-SYN timer runs only while a SYN waits: armed by a SYN, disarmed once it is answered or judged', async () => {
    const sock = new FakeCtSocket();
    const out: PassiveVerdict[] = [];
    let clock = 0;
    const w = watchConntrack(new FlowTracker(['10.9.9.9'], 6443, 100), (v) => out.push(v), { open: () => sock, tickMs: 5, now: () => clock });
    const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 30));
    try {
      expect(w.ticking).toBe(false);
      const [syn, recv] = golden.captures.v4ok.map((h) => Buffer.from(h, 'hex'));
      sock.emit('message', syn!);
      expect(w.ticking).toBe(true);
      sock.emit('message', recv!);
      await settle();
      expect(w.ticking).toBe(false);
      expect(text(out)).toStrictEqual(['10.9.9.11:6443 alive answered answered']);
      // a later SYN nobody answers: judged after the SYN timeout, then the timer stops again
      clock = 10;
      sock.emit('message', syn!);
      expect(w.ticking).toBe(true);
      await settle();
      expect(w.ticking).toBe(true);
      clock = 1000;
      await settle();
      expect(w.ticking).toBe(false);
      expect(text(out)).toStrictEqual(['10.9.9.11:6443 alive answered answered', '10.9.9.11:6443 dead unanswered unanswered SYN']);
    } finally {
      w.stop();
    }
    expect(w.ticking).toBe(false);
  });
  it('joins the three conntrack groups and turns datagrams into verdicts; stop() closes the socket', () => {
    const sock = new FakeCtSocket();
    const out: PassiveVerdict[] = [];
    const w = watchConntrack(new FlowTracker(['10.9.9.9'], 6443, 250), (v) => out.push(v), { open: () => sock, now: () => 0 });
    expect(sock.groups).toStrictEqual([...CONNTRACK_GROUPS]);
    for (const hex of golden.captures.v4refused) sock.emit('message', Buffer.from(hex, 'hex'));
    expect(text(out)).toStrictEqual(['10.9.9.12:6443 dead refused refused']);
    w.stop();
    expect(sock.closed).toBe(true);
    for (const hex of golden.captures.v4refused) sock.emit('message', Buffer.from(hex, 'hex'));
    expect(out).toHaveLength(1);
  });
  it('lost events (ENOBUFS) are reported and the watch goes on; another socket error ends it', () => {
    const sock = new FakeCtSocket();
    const seen: string[] = [];
    watchConntrack(new FlowTracker(['10.9.9.9'], 6443, 250), () => undefined, {
      open: () => sock,
      onLost: () => seen.push('lost'),
      onExit: (code) => seen.push(`exit ${code}`),
    });
    sock.emit('error', Object.assign(new Error('recv ENOBUFS'), { code: 'ENOBUFS' }));
    expect(sock.closed).toBe(false);
    sock.emit('error', Object.assign(new Error('recv EBADF'), { code: 'EBADF' }));
    expect(seen).toStrictEqual(['lost', 'exit EBADF']);
    expect(sock.closed).toBe(true);
  });
  it('a socket that cannot join the groups (EPERM without CAP_NET_ADMIN) is reported with its errno', () => {
    const sock = new FakeCtSocket();
    sock.refuse = Object.assign(new Error('setsockopt EPERM'), { code: 'EPERM' });
    const seen: string[] = [];
    const w = watchConntrack(new FlowTracker([], 6443, 250), () => undefined, { open: () => sock, onExit: (code, m) => seen.push(`${code} ${m}`) });
    expect(seen).toStrictEqual(['EPERM setsockopt EPERM']);
    expect(sock.closed).toBe(true);
    w.stop();
  });
});
