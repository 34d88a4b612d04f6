/**
 * The sd_notify(3) side of the agent (src/observe/notify.ts): the environment systemd sets, the
 * message text, the state line, and when each message goes (fake send, fake clock). The real
 * datagrams on a real socket from a lab agent: test/integration/notify.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Logger } from '../../src/log/log.js';
import {
  createNotifier,
  monotonicUsec,
  notifyMessage,
  serviceManagerFromEnv,
  statusLine,
  STATUS_REFRESH_MS,
  type NotifierDeps,
} from '../../src/observe/notify.js';
import type { ElectionStatusDocument, EndpointOnlyStatusDocument, StatusDocument } from '../../src/observe/status.js';
import type { BackendHealth } from '../../src/health/checker.js';

const backend = (address: string, healthy: boolean): BackendHealth => ({
  address,
  state: healthy ? 'up' : 'down',
  healthy,
  lastCheck: null,
  lastLatencyMs: null,
  reason: null,
  consecutive: 1,
});

function election(over: Partial<ElectionStatusDocument> = {}): ElectionStatusDocument {
  return {
    state: 'master',
    vrid: 51,
    priority: 150,
    effectivePriority: 150,
    masterAddress: '10.0.0.1',
    masterPriority: 150,
    vips: ['10.0.0.100'],
    vipsHeld: true,
    since: '2026-01-01T00:00:00.000Z',
    interface: 'eth0',
    family: 4,
    primaryAddress: '10.0.0.1',
    mode: 'multicast',
    peers: [],
    auth: false,
    advertisementIntervalMs: 1000,
    masterAdverIntervalMs: 1000,
    masterDownIntervalMs: 3414,
    skewTimeMs: 414,
    counters: { advertsSent: 0, advertsReceived: 0, sendErrors: 0, dropped: {}, transitions: 1, announcementsSent: 0, foreign: 0 },
    backends: [backend('10.0.0.1:6443', true), backend('10.0.0.2:6443', true), backend('10.0.0.3:6443', true)],
    dataplane: { mode: 'none' },
    local: { mode: 'off', reason: 'no localEndpoint configured' },
    ...over,
  };
}

describe('serviceManagerFromEnv (systemd.exec(5), sd_watchdog_enabled(3))', () => {
  it('null without NOTIFY_SOCKET (or with an empty one), and the variables are gone afterwards', () => {
    const env: NodeJS.ProcessEnv = { WATCHDOG_USEC: '10000000', WATCHDOG_PID: '7', PATH: '/bin' };
    expect(serviceManagerFromEnv(env, 7)).toBeNull();
    expect(env).toEqual({ PATH: '/bin' });
    expect(serviceManagerFromEnv({ NOTIFY_SOCKET: '' }, 7)).toBeNull();
  });
  it('the socket and the watchdog; all three removed from the environment (unset_environment)', () => {
    const env: NodeJS.ProcessEnv = { NOTIFY_SOCKET: '/run/systemd/notify', WATCHDOG_USEC: '10000000', WATCHDOG_PID: '4242', HOME: '/root' };
    expect(serviceManagerFromEnv(env, 4242)).toEqual({ socket: '/run/systemd/notify', watchdogUsec: 10_000_000 });
    expect(env).toEqual({ HOME: '/root' });
  });
  it('WATCHDOG_PID absent: the watchdog is ours; naming another process: not ours', () => {
    expect(serviceManagerFromEnv({ NOTIFY_SOCKET: '@abstract', WATCHDOG_USEC: '3000000' }, 1)).toEqual({ socket: '@abstract', watchdogUsec: 3_000_000 });
    expect(serviceManagerFromEnv({ NOTIFY_SOCKET: '/s', WATCHDOG_USEC: '3000000', WATCHDOG_PID: '99' }, 1)).toEqual({ socket: '/s', watchdogUsec: null });
  });
  it('a WATCHDOG_USEC that is not a positive integer: no watchdog, and the problem said once', () => {
    for (const bad of ['0', '-5', '1.5', '10s', '', '99999999999999999999']) {
      const m = serviceManagerFromEnv({ NOTIFY_SOCKET: '/s', WATCHDOG_USEC: bad }, 1);
      expect(m?.watchdogUsec).toBeNull();
      expect(m?.problem).toContain(`WATCHDOG_USEC=${JSON.stringify(bad)}`);
    }
  });
});

describe('notifyMessage and statusLine', () => {
  it('KEY=value lines in order; a newline inside a value cannot start a new assignment', () => {
    expect(
      notifyMessage([
        ['READY', 1],
        ['STATUS', 'a\nSTOPPING=1'],
        ['MAINPID', 42],
        ['MONOTONIC_USEC', 12n],
      ]),
    ).toBe('READY=1\nSTATUS=a STOPPING=1\nMAINPID=42\nMONOTONIC_USEC=12');
  });
  it('the election state, the VIPs, the master when it is another node, and the ready backends', () => {
    expect(statusLine(election())).toBe('MASTER for 10.0.0.100, 3 of 3 backends ready');
    expect(statusLine(election({ state: 'backup', masterAddress: '10.0.0.2', backends: [backend('a:1', true), backend('b:1', false)] }))).toBe(
      'BACKUP for 10.0.0.100 (master 10.0.0.2), 1 of 2 backends ready',
    );
    expect(
      statusLine(election({ state: 'backup', masterAddress: null, standby: true, vips: ['10.0.0.100', 'fd00::100'], backends: [backend('a:1', false)] })),
    ).toBe('BACKUP for 10.0.0.100, fd00::100 (standby: not a member yet), 0 of 1 backend ready');
    expect(statusLine(election({ state: 'fault', masterAddress: null, backends: [] }))).toBe('FAULT for 10.0.0.100');
  });
  it('without an election: the local endpoint and the backends', () => {
    const doc: EndpointOnlyStatusDocument = {
      state: 'none',
      backends: [backend('a:1', true), backend('b:1', false), backend('c:1', false)],
      dataplane: { mode: 'off', reason: 'no election' },
      local: { mode: 'ebpf', endpoints: ['127.0.0.1:7443'], backends: ['a:1'], updates: 1, socketsReset: 0, failures: 0, lastError: null },
    };
    expect(statusLine(doc)).toBe('no election; local endpoint 127.0.0.1:7443 (ebpf), 1 of 3 backends ready');
    expect(statusLine({ ...doc, local: { mode: 'off', reason: 'x' }, backends: [] })).toBe('no election; local endpoint off');
  });
  it('monotonicUsec is CLOCK_MONOTONIC in µs (process.hrtime)', () => {
    const a = process.hrtime.bigint() / 1000n;
    const m = monotonicUsec();
    const b = process.hrtime.bigint() / 1000n;
    expect(m >= a && m <= b).toBe(true);
  });
});

describe('createNotifier: what goes when', () => {
  let sent: string[];
  let logs: string[];
  let doc: StatusDocument;
  let alive: 'yes' | 'no';
  const log = {
    info: (o: unknown, m?: string) => logs.push(`INFO ${m ?? o}`),
    warn: (o: unknown, m?: string) => logs.push(`WARN ${m ?? o}`),
  } as unknown as Logger;
  const deps = (over: Partial<NotifierDeps> = {}): NotifierDeps => ({
    log,
    status: () => Promise.resolve(doc),
    alive: () => (alive === 'yes' ? Promise.resolve() : Promise.reject(new Error("the election's timer is 1500 ms past its deadline"))),
    send: (socket, m) => sent.push(`${socket} ${m}`),
    monotonicUsec: () => 123_456_789n,
    pid: 4242,
    ...over,
  });
  const messages = (): string[] => sent.map((s) => s.slice(s.indexOf(' ') + 1));
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    sent = [];
    logs = [];
    doc = election();
    alive = 'yes';
  });
  afterEach(() => vi.useRealTimers());

  it('without a manager nothing is sent and nothing is logged', async () => {
    const n = createNotifier(null, deps());
    expect(n.enabled).toBe(false);
    await n.ready();
    n.reloading();
    n.stopping();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(sent).toEqual([]);
    expect(logs).toEqual([]);
  });

  it('READY=1 with STATUS and MAINPID, then WATCHDOG=1 every WATCHDOG_USEC/2 while the worker answers', async () => {
    const n = createNotifier({ socket: '/run/test.sock', watchdogUsec: 4_000_000 }, deps());
    expect(logs).toEqual(['INFO service manager: notifying it (sd_notify)']);
    expect(sent).toEqual([]);
    await n.ready();
    expect(sent[0]).toBe('/run/test.sock READY=1\nSTATUS=MASTER for 10.0.0.100, 3 of 3 backends ready\nMAINPID=4242');
    // the first ping with READY, then one per 2 s
    expect(messages().filter((m) => m === 'WATCHDOG=1')).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(messages().filter((m) => m === 'WATCHDOG=1')).toHaveLength(6);
    // the state line unchanged: no STATUS= beyond READY's
    expect(messages().filter((m) => m.startsWith('STATUS='))).toEqual([]);
  });

  it('an election that does not answer gets no pings (one warning), and pings resume when it answers', async () => {
    const n = createNotifier({ socket: '/s', watchdogUsec: 2_000_000 }, deps());
    await n.ready();
    alive = 'no';
    sent = [];
    await vi.advanceTimersByTimeAsync(10_000);
    expect(messages().filter((m) => m === 'WATCHDOG=1')).toEqual([]);
    expect(logs.filter((l) => l.startsWith('WARN'))).toEqual([
      'WARN the election is not running on time: the watchdog is not pinged (systemd restarts the agent after WatchdogSec)',
    ]);
    alive = 'yes';
    await vi.advanceTimersByTimeAsync(1000);
    expect(messages()).toEqual(['WATCHDOG=1']);
    expect(logs.at(-1)).toBe('INFO the election runs on time again: watchdog pings resumed');
  });

  it('no WATCHDOG_USEC: no pings; STATUS= follows the state within the refresh period, only when it changed', async () => {
    const n = createNotifier({ socket: '/s', watchdogUsec: null }, deps());
    await n.ready();
    await vi.advanceTimersByTimeAsync(5 * STATUS_REFRESH_MS);
    expect(messages()).toEqual(['READY=1\nSTATUS=MASTER for 10.0.0.100, 3 of 3 backends ready\nMAINPID=4242']);
    doc = election({ state: 'backup', masterAddress: '10.0.0.2' });
    await vi.advanceTimersByTimeAsync(STATUS_REFRESH_MS);
    expect(messages().at(-1)).toBe('STATUS=BACKUP for 10.0.0.100 (master 10.0.0.2), 3 of 3 backends ready');
    expect(messages()).toHaveLength(2);
  });

  it('a reload: RELOADING=1 with MONOTONIC_USEC, no STATUS refresh until READY=1', async () => {
    const n = createNotifier({ socket: '/s', watchdogUsec: null }, deps());
    await n.ready();
    n.reloading();
    doc = election({ state: 'backup', masterAddress: '10.0.0.2' });
    await vi.advanceTimersByTimeAsync(3 * STATUS_REFRESH_MS);
    expect(messages().slice(1)).toEqual(['RELOADING=1\nMONOTONIC_USEC=123456789\nSTATUS=reloading the configuration']);
    await n.ready();
    expect(messages().slice(2)).toEqual(['READY=1\nSTATUS=BACKUP for 10.0.0.100 (master 10.0.0.2), 3 of 3 backends ready\nMAINPID=4242']);
  });

  it('STOPPING=1 once; afterwards no ping, no status, no READY', async () => {
    const n = createNotifier({ socket: '/s', watchdogUsec: 1_000_000 }, deps());
    await n.ready();
    n.stopping();
    n.stopping();
    const at = sent.length;
    expect(messages().at(-1)).toBe('STOPPING=1\nSTATUS=stopping');
    doc = election({ state: 'backup' });
    await n.ready();
    n.reloading();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(sent).toHaveLength(at);
  });

  it('a failed send is logged once per error until one succeeds again', async () => {
    let fail: string | null = 'ECONNREFUSED';
    const n = createNotifier(
      { socket: '/s', watchdogUsec: 1_000_000 },
      deps({
        send: (_s, m) => {
          if (fail) throw Object.assign(new Error(`sendto failed on /s: ${fail}`), { code: fail });
          sent.push(`/s ${m}`);
        },
      }),
    );
    await n.ready();
    await vi.advanceTimersByTimeAsync(5000);
    fail = 'EAGAIN';
    await vi.advanceTimersByTimeAsync(5000);
    fail = null;
    await vi.advanceTimersByTimeAsync(500);
    expect(logs.filter((l) => l.startsWith('WARN'))).toHaveLength(2);
    expect(logs.at(-1)).toBe('INFO service manager: notifications are delivered again');
    expect(messages()).toEqual(['WATCHDOG=1']);
  });

  it('an invalid WATCHDOG_USEC is logged once at creation', () => {
    createNotifier({ socket: '/s', watchdogUsec: null, problem: 'WATCHDOG_USEC="x" is not a positive integer of microseconds; no watchdog pings' }, deps());
    expect(logs[0]).toBe('WARN WATCHDOG_USEC="x" is not a positive integer of microseconds; no watchdog pings');
  });
});
