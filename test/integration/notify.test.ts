/**
 * The sd_notify(3) protocol for real: a unix datagram listener (socat, as scripts/setup.sh
 * installs it) plays systemd's notify socket, and the compiled agent runs in a lab node with
 * NOTIFY_SOCKET and WATCHDOG_USEC set as systemd sets them for `Type=notify` + `WatchdogSec=1s`.
 *
 *   READY=1 comes once the election has its first state (its STATUS names the state; the
 *     "state change" log line was written before it arrived), with MAINPID = the agent's PID;
 *   WATCHDOG=1 every WATCHDOG_USEC/2 = 500 ms: no gap over 500 + 250 ms;
 *   STATUS= follows the state ("MASTER for <vip>, 1 of 1 backend ready");
 *   `ballast reload` and SIGHUP: RELOADING=1 with MONOTONIC_USEC (CLOCK_MONOTONIC µs, between the
 *     request and the datagram's arrival), then READY=1;
 *   a stuck main thread, where the election runs (lab/block-main-thread.ts keeps it busy for
 *     1.5 s): no ping while it is stuck, pings again within one period after;
 *   SIGTERM: STOPPING=1, exit 0, nothing after it.
 * And the addon's notify() alone: a path and an abstract name, errors with code and syscall.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { compiledScript } from '../../lab/lab.js';
import { agentConfig, cliPath, runAgent, type LabAgent } from '../../lab/cluster.js';
import { notify, isNativeError } from '../../src/native.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bntf';
const SUBNET = 103;
/** What systemd would set for WatchdogSec=1s; the agent pings every half of it. */
const WATCHDOG_USEC = 1_000_000;
const PING_MS = WATCHDOG_USEC / 2000;
/** Timer and scheduling slack on a loaded 2-core machine, on both ends of the socket. */
const MARGIN_MS = 250;
const STALL_MS = 1500;

/** One datagram as the listener got it: its text and when it arrived in this process. */
interface Datagram {
  text: string;
  fields: Record<string, string>;
  /** performance.now() at arrival, ms */
  at: number;
  /** Date.now() at arrival */
  wall: number;
  /** CLOCK_MONOTONIC at arrival, µs */
  mono: bigint;
}

/** A socat listener on a unix datagram socket (path, or `abstract` name): each datagram, parsed from socat's -x dump. */
function listen(address: string, abstract = false): { got: Datagram[]; proc: ChildProcess; stop(): Promise<void> } {
  const got: Datagram[] = [];
  const proc = spawn('socat', ['-u', '-x', abstract ? `ABSTRACT-RECV:${address}` : `UNIX-RECV:${address},unlink-early`, 'OPEN:/dev/null'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let buf = '';
  let want = -1;
  let bytes: number[] = [];
  proc.stderr!.setEncoding('utf8');
  proc.stderr!.on('data', (chunk: string) => {
    buf += chunk;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      const head = /^> .* length=(\d+) /.exec(line);
      if (head) {
        want = Number(head[1]);
        bytes = [];
      } else if (want > 0) {
        bytes.push(
          ...line
            .trim()
            .split(/\s+/)
            .filter(Boolean)
            .map((h) => parseInt(h, 16)),
        );
      }
      if (want > 0 && bytes.length >= want) {
        const text = Buffer.from(bytes.slice(0, want)).toString('utf8');
        const fields = Object.fromEntries(text.split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
        got.push({ text, fields, at: performance.now(), wall: Date.now(), mono: process.hrtime.bigint() / 1000n });
        want = -1;
      }
    }
  });
  return {
    got,
    proc,
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await exited;
      }
    },
  };
}

/** Whether a datagram to `address` is accepted (the listener is up); the probe's text is `PROBE=1`. */
function accepts(address: string): boolean {
  try {
    return notify('PROBE=1', address);
  } catch {
    return false;
  }
}

describe.skipIf(needs('root', 'nft'))('sd_notify: what the agent tells systemd (root; skipped otherwise)', () => {
  let lab: Lab;
  let sock: ReturnType<typeof listen>;
  let agent: LabAgent;
  const pings = (from = 0, to = Infinity): Datagram[] => sock.got.filter((d) => d.text === 'WATCHDOG=1' && d.at >= from && d.at <= to);

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 1, apiservers: true });
    const path = join(lab.dir, 'notify.sock');
    sock = listen(path);
    await waitFor(() => accepts(path), { timeoutMs: 3000, what: 'the socat listener' });
    const hook = pathToFileURL(compiledScript('block-main-thread')).href;
    const config = join(lab.dir, 'n1-notify.yaml');
    writeFileSync(config, agentConfig(lab, lab.nodes[0]!, { priority: 150, balance: true }));
    // up when it says so: READY=1 (the next test checks what it says)
    agent = await runAgent(lab, lab.nodes[0]!, config, {
      logFile: 'n1-notify.log',
      env: { NOTIFY_SOCKET: path, WATCHDOG_USEC: String(WATCHDOG_USEC), NODE_OPTIONS: `--import ${hook}`, BALLAST_TEST_BLOCK_MS: String(STALL_MS) },
      answers: () => Promise.resolve(sock.got.some((d) => d.fields.READY === '1')),
    });
  });
  afterAll(async () => {
    await agent?.stop('SIGKILL').catch(() => undefined);
    await sock?.stop();
    await lab?.teardown();
  });

  it("the addon: one datagram to a path and to an abstract name; a missing socket is ENOENT 'sendto'", async () => {
    const abstract = listen(`${PREFIX}-notify-${process.pid}`, true);
    try {
      await waitFor(() => accepts(`@${PREFIX}-notify-${process.pid}`), { timeoutMs: 3000, what: 'the abstract listener' });
      expect(notify('A=1\nB=two words', `@${PREFIX}-notify-${process.pid}`)).toBe(true);
      await waitFor(() => abstract.got.length >= 2, { timeoutMs: 2000, what: 'the datagram' });
      expect(abstract.got.at(-1)!.text).toBe('A=1\nB=two words');
    } finally {
      await abstract.stop();
    }
    expect(notify('READY=1', undefined)).toBe(false);
    expect(notify('READY=1', '')).toBe(false);
    let err: unknown;
    try {
      notify('READY=1', join(lab.dir, 'nothing-here.sock'));
    } catch (e) {
      err = e;
    }
    expect(isNativeError(err) && { code: err.code, syscall: err.syscall }).toEqual({ code: 'ENOENT', syscall: 'sendto' });
    expect(() => notify('READY=1', 'vsock:2:1234')).toThrow(expect.objectContaining({ code: 'EAFNOSUPPORT' }) as unknown as Error);
    expect(() => notify('', '/x')).toThrow(TypeError);
  });

  it('READY=1 once the election has its first state, with STATUS= and MAINPID=', async () => {
    const ready = await waitFor(() => sock.got.find((d) => d.fields.READY === '1'), { timeoutMs: 5000, what: 'READY=1' });
    expect(ready.fields.MAINPID).toBe(String(agent.proc.pid));
    expect(ready.fields.STATUS).toMatch(new RegExp(`^(BACKUP|MASTER) for ${lab.vip4.replace(/\./g, '\\.')}(,| \\()`));
    // the first state was logged (pino writes synchronously) before READY=1 was sent
    const first = await waitFor(() => agent.logLines().find((l) => l.msg === 'state change'), { timeoutMs: 2000, what: 'the state change line' });
    expect(first.from).toBe('init');
    expect(Date.parse(first.time as string)).toBeLessThanOrEqual(ready.wall);
    // the first message of all is READY (nothing before the election had a state)
    expect(sock.got.filter((d) => d.text !== 'PROBE=1')[0]).toBe(ready);
  });

  it(`WATCHDOG=1 every WATCHDOG_USEC/2 = ${PING_MS} ms (gaps ≤ ${PING_MS} + ${MARGIN_MS} ms); STATUS= follows the state`, async () => {
    await waitFor(() => sock.got.some((d) => d.fields.STATUS === `MASTER for ${lab.vip4}, 1 of 1 backend ready`), {
      timeoutMs: 5000,
      what: 'STATUS= MASTER, backend ready',
    });
    // 2.5 s of pings since READY=1
    const ps = await waitFor(
      () => pings(),
      (p) => p.length >= 6,
      { timeoutMs: 6 * PING_MS + 2000, what: '6 pings' },
    );
    const gaps = ps.slice(1).map((p, i) => p.at - ps[i]!.at);
    expect(ps.length).toBeGreaterThanOrEqual(6);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(PING_MS + MARGIN_MS);
    // no more often than the half-period either (one ping per tick)
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(PING_MS - MARGIN_MS);
  });

  it('`ballast reload` and SIGHUP: RELOADING=1 with MONOTONIC_USEC, then READY=1', async () => {
    for (const how of ['reload', 'SIGHUP'] as const) {
      const n = sock.got.length;
      const t0 = process.hrtime.bigint() / 1000n;
      if (how === 'reload') await lab.exec(lab.nodes[0]!.netns, [process.execPath, cliPath(), 'reload', '--admin', '127.0.0.1:9641']);
      else process.kill(agent.proc.pid, 'SIGHUP');
      const after = await waitFor(
        () => sock.got.slice(n).filter((d) => d.text !== 'WATCHDOG=1' && !d.text.startsWith('STATUS=')),
        (ds) => ds.length >= 2,
        { timeoutMs: 5000, what: `RELOADING=1 and READY=1 after ${how}` },
      );
      const [reloading, ready] = after;
      expect(reloading!.fields).toMatchObject({ RELOADING: '1', STATUS: 'reloading the configuration' });
      const mono = BigInt(reloading!.fields.MONOTONIC_USEC!);
      expect(mono >= t0 && mono <= reloading!.mono).toBe(true);
      expect(ready!.fields).toMatchObject({ READY: '1', STATUS: `MASTER for ${lab.vip4}, 1 of 1 backend ready`, MAINPID: String(agent.proc.pid) });
    }
  });

  it(`a stuck main thread (${STALL_MS} ms): no ping while it is stuck, then pings again`, async () => {
    const t0 = performance.now();
    const blocked = agent.proc.waitForOutput(/"hook":"blocked","ms":(\d+)/, { timeoutMs: STALL_MS + 3000 });
    agent.proc.kill('SIGURG');
    expect(Number((await blocked)[1])).toBeGreaterThanOrEqual(STALL_MS);
    const t1 = performance.now();
    // a ping already on its way at the signal may still arrive; none from then on until the thread is back
    expect(pings(t0 + MARGIN_MS, t0 + STALL_MS - 100)).toEqual([]);
    await waitFor(() => pings(t1).length > 0, { timeoutMs: PING_MS + MARGIN_MS + 500, what: 'a ping after the stall' });
    expect(pings(t1)[0]!.at - t1).toBeLessThanOrEqual(PING_MS + MARGIN_MS);
    // the election's timers, late by the stall, ran before the gate looked: no failed gate
    expect(agent.logLines().filter((l) => String(l.msg).startsWith('the election is not running on time'))).toEqual([]);
  });

  it('SIGTERM: STOPPING=1, exit 0, and nothing after it', async () => {
    const n = sock.got.length;
    process.kill(agent.proc.pid, 'SIGTERM');
    expect(await agent.proc.exited).toBe(0);
    await waitFor(() => sock.got.slice(n).some((d) => d.fields.STOPPING === '1'), { timeoutMs: 2000, what: 'STOPPING=1' });
    // anything the agent sent before it exited has arrived by now
    await sleep(200);
    const rest = sock.got.slice(n);
    const i = rest.findIndex((d) => d.fields.STOPPING === '1');
    expect(rest[i]!.fields.STATUS).toBe('stopping');
    expect(rest.slice(i + 1)).toEqual([]);
  });
});
