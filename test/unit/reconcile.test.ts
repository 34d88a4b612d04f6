/**
 * The one reconcile of both planes, against a recording plane and a fake verdict source: the
 * apply comes first, each newly dead backend is reset once after an apply that succeeded, never
 * one still in the applied set; and the reset decision follows the cause's kind, not its text.
 */
import { describe, expect, it } from 'vitest';
import { HealthChecker, type Clock } from '../../src/health/checker.js';
import type { ProbeResult } from '../../src/health/probe.js';
import type { Verdict } from '../../src/health/verdict.js';
import { Reconciler, type Plane, type ReadySet } from '../../src/dataplane/reconcile.js';
import { formatHostPort, type HostPort } from '../../src/net/hostport.js';
import { CAUSES, FakeSource, recordingLog, settle, verdict } from './verdict-fakes.js';

const B1 = '10.0.0.11:6443';
const B2 = '10.0.0.12:6443';
const B3 = '[fd00::13]:6443';
const names = (l: readonly HostPort[]): string => l.map(formatHostPort).join(',') || '-';

/** Records applies and resets in one ordered log; `failApply` makes applies throw, `hold` makes them wait. */
class RecordingPlane implements Plane {
  log: string[] = [];
  failApply: Error | null = null;
  held: (() => void)[] = [];
  hold = false;
  /** what apply says it serves: by default the ready set */
  serves: ((set: ReadySet) => HostPort[]) | null = null;
  async apply(set: ReadySet): Promise<readonly HostPort[]> {
    this.log.push(`apply ready=${names(set.ready)} draining=${names(set.draining)} unknown=${names(set.unknown)}`);
    if (this.hold) await new Promise<void>((r) => this.held.push(r));
    if (this.failApply) throw this.failApply;
    return this.serves ? this.serves(set) : set.ready;
  }
  async reset(v: Verdict): Promise<number> {
    this.log.push(`reset ${formatHostPort(v.backend)} ${v.cause.kind}`);
    return 1;
  }
}

function setup(addresses = [B1, B2, B3]) {
  const source = new FakeSource(addresses);
  const plane = new RecordingPlane();
  const { log, logs } = recordingLog();
  const r = new Reconciler(plane, source, { log, applyFailed: 'apply failed', resetFailed: 'reset failed' });
  const unfollow = r.follow();
  return { source, plane, r, logs, unfollow };
}

describe('Reconciler', () => {
  it('a burst of verdicts in one tick makes one apply, of the latest verdicts', async () => {
    const { source, plane, r } = setup();
    source.judge(verdict(B1, 'up'));
    source.judge(verdict(B2, CAUSES.http500));
    source.judge(verdict(B3, 'up'));
    await r.sync();
    expect(plane.log).toStrictEqual([`apply ready=${B1},${B3} draining=${B2} unknown=-`]);
  });

  it('verdicts during an apply make exactly one more apply, after it', async () => {
    const { source, plane, r } = setup();
    plane.hold = true;
    const first = r.sync();
    await settle();
    const later: Promise<void>[] = [];
    for (let i = 0; i < 10; i++) {
      source.judge(verdict(B1, i % 2 ? 'up' : CAUSES.http500));
      later.push(r.sync());
    }
    await settle();
    expect(plane.log).toHaveLength(1);
    plane.held.shift()!();
    await first;
    await settle();
    expect(plane.log).toHaveLength(2);
    plane.held.shift()!();
    await Promise.all(later);
    expect(plane.log).toStrictEqual([`apply ready=- draining=- unknown=${B1},${B2},${B3}`, `apply ready=${B1} draining=- unknown=${B2},${B3}`]);
  });

  it('a dead backend is reset after the apply without it succeeded, once', async () => {
    const { source, plane, r } = setup();
    for (const b of [B1, B2, B3]) source.judge(verdict(b, 'up'));
    await r.sync();
    plane.hold = true;
    source.judge(verdict(B2, CAUSES.refused));
    const done = r.sync();
    await settle();
    // the plane has not answered: a reset client would be sent straight back to the dead backend
    expect(plane.log.filter((l) => l.startsWith('reset'))).toStrictEqual([]);
    plane.hold = false;
    plane.held.shift()!();
    await done;
    expect(plane.log.slice(1)).toStrictEqual([`apply ready=${B1},${B3} draining=- unknown=-`, `reset ${B2} refused`]);
    // later applies do not repeat it
    source.judge(verdict(B1, CAUSES.http500));
    await r.sync();
    expect(plane.log.filter((l) => l.startsWith('reset'))).toHaveLength(1);
  });

  it('resetDeadAgain resets every backend dead now once more, after an apply; up and unready ones not', async () => {
    const { source, plane, r } = setup();
    source.judge(verdict(B1, 'up'));
    source.judge(verdict(B2, CAUSES.refused));
    source.judge(verdict(B3, CAUSES.http500));
    await r.sync();
    expect(plane.log.filter((l) => l.startsWith('reset'))).toStrictEqual([`reset ${B2} refused`]);
    plane.log.length = 0;
    await r.resetDeadAgain();
    expect(plane.log).toStrictEqual([`apply ready=${B1} draining=${B3} unknown=-`, `reset ${B2} refused`]);
    // and only then: the next applies do not repeat it
    source.judge(verdict(B3, 'up'));
    await r.sync();
    expect(plane.log.filter((l) => l.startsWith('reset'))).toHaveLength(1);
  });

  it('an unready backend drains and is never reset; up verdicts never reset', async () => {
    const { source, plane, r } = setup();
    source.judge(verdict(B1, 'up'));
    source.judge(verdict(B2, { kind: 'tls', code: 'CERT_HAS_EXPIRED' }));
    source.judge(verdict(B3, { kind: 'localFile', setting: 'caFile' }));
    await r.sync();
    expect(plane.log).toStrictEqual([`apply ready=${B1} draining=${B2},${B3} unknown=-`]);
  });

  it('a dead backend that is back up by the time of the apply is never reset, nor later when it drains', async () => {
    const { source, plane, r } = setup();
    source.judge(verdict(B1, CAUSES.refused));
    source.judge(verdict(B1, 'up'));
    await r.sync();
    source.judge(verdict(B1, CAUSES.http500));
    await r.sync();
    expect(plane.log.filter((l) => l.startsWith('reset'))).toStrictEqual([]);
  });

  it('never resets a backend the plane still serves', async () => {
    const { source, plane, r } = setup();
    // e.g. the local plane keeping an inherited backend: it says what it serves
    plane.serves = (set) => [...set.ready, ...set.unknown];
    source.judge(verdict(B1, CAUSES.refused));
    plane.serves = () => [verdict(B1, 'up').backend];
    await r.sync();
    expect(plane.log.filter((l) => l.startsWith('reset'))).toStrictEqual([]);
  });

  it('a failed apply counts, resets nothing; the next good apply resets', async () => {
    const { source, plane, r, logs } = setup();
    plane.failApply = new Error('nft: simulated failure');
    source.judge(verdict(B2, CAUSES.refused));
    await r.sync();
    await r.sync();
    expect(r.status()).toStrictEqual({ failures: 2, lastError: 'nft: simulated failure' });
    expect(logs.error).toStrictEqual(['apply failed', 'apply failed']);
    expect(plane.log.filter((l) => l.startsWith('reset'))).toStrictEqual([]);
    plane.failApply = null;
    await r.sync();
    expect(plane.log.at(-1)).toBe(`reset ${B2} refused`);
    expect(r.status()).toStrictEqual({ failures: 2, lastError: null });
  });

  it('a failed apply followed by the backend’s return: nothing is ever reset', async () => {
    const { source, plane, r } = setup();
    plane.failApply = new Error('x');
    source.judge(verdict(B2, { kind: 'timeout' }));
    await r.sync();
    plane.failApply = null;
    source.judge(verdict(B2, 'up'));
    await r.sync();
    expect(plane.log.filter((l) => l.startsWith('reset'))).toStrictEqual([]);
  });

  it('a draining backend that dies later is reset once; back up and dead again: reset again', async () => {
    const { source, plane, r } = setup();
    source.judge(verdict(B2, CAUSES.http500));
    await r.sync();
    source.judge(verdict(B2, { kind: 'nodeDown', node: '10.0.0.12' }));
    await r.sync();
    await r.sync();
    source.judge(verdict(B2, 'up'));
    source.judge(verdict(B2, { kind: 'passive', signal: 'unanswered' }));
    await r.sync();
    expect(plane.log.filter((l) => l.startsWith('reset'))).toStrictEqual([`reset ${B2} nodeDown`, `reset ${B2} passive`]);
  });

  it('a death during an apply is reset by the apply after it, not by the one running', async () => {
    const { source, plane, r } = setup();
    source.judge(verdict(B2, 'up'));
    await r.sync();
    plane.hold = true;
    const running = r.sync();
    await settle();
    source.judge(verdict(B2, CAUSES.refused));
    plane.held.shift()!();
    await running;
    await settle();
    // the running apply still had B2 in its set: no reset after it
    expect(plane.log.slice(1)).toStrictEqual([`apply ready=${B2} draining=- unknown=${B1},${B3}`, `apply ready=- draining=- unknown=${B1},${B3}`]);
    plane.hold = false;
    plane.held.shift()!();
    await r.sync();
    // right after the apply without it
    expect(plane.log.slice(2, 4)).toStrictEqual([`apply ready=- draining=- unknown=${B1},${B3}`, `reset ${B2} refused`]);
  });

  it('follow() queues backends already dead; its undo unsubscribes', async () => {
    const source = new FakeSource([B1, B2]);
    source.set(verdict(B1, CAUSES.refused));
    const plane = new RecordingPlane();
    const r = new Reconciler(plane, source, { log: recordingLog().log, applyFailed: 'a', resetFailed: 'r' });
    const unfollow = r.follow();
    expect(source.listenerCount('verdict')).toBe(1);
    await r.sync();
    expect(plane.log).toStrictEqual([`apply ready=- draining=- unknown=${B2}`, `reset ${B1} refused`]);
    await unfollow();
    expect(source.listenerCount('verdict')).toBe(0);
    source.judge(verdict(B2, 'up'));
    await settle();
    expect(plane.log).toHaveLength(2);
  });

  it("follow()'s undo resolves only after the apply in flight is done: the caller may remove the table next", async () => {
    const { source, plane, unfollow } = setup([B1]);
    plane.hold = true;
    source.judge(verdict(B1, 'up'));
    await settle();
    expect(plane.log).toStrictEqual([`apply ready=${B1} draining=- unknown=-`]);
    let undone = false;
    const undo = unfollow().then(() => (undone = true));
    await settle();
    expect([undone, source.listenerCount('verdict')]).toStrictEqual([false, 0]);
    plane.held.splice(0).forEach((r) => r());
    await undo;
    expect(undone).toBe(true);
  });

  it('a reset that fails is logged and the others still run', async () => {
    const { source, plane, r, logs } = setup();
    plane.reset = async (v) => {
      plane.log.push(`reset ${formatHostPort(v.backend)}`);
      if (v.backend.host === '10.0.0.11') throw new Error('boom');
      return 1;
    };
    source.judge(verdict(B1, CAUSES.refused));
    source.judge(verdict(B2, CAUSES.refused));
    await r.sync();
    expect(plane.log.slice(1)).toStrictEqual([`reset ${B1}`, `reset ${B2}`]);
    expect(logs.warn).toStrictEqual(['reset failed']);
  });
});

/** A clock whose timers run on the event loop at once (delay 0), for a checker driven to its verdicts. */
const immediateClock: Clock = { now: () => 0, setTimeout: (fn) => setImmediate(fn), clearTimeout: (h) => clearImmediate(h as NodeJS.Immediate) };

describe('the reset decision follows the cause kind, not the message', () => {
  // rewording a message must never change whether clients get reset: here each failure carries
  // the other kind's text
  it('a refusal worded "http 500" is reset; an HTTP 500 worded "ECONNREFUSED" only drains', async () => {
    const results: Record<string, ProbeResult> = {
      '10.0.0.11:6443': { ok: false, latencyMs: 1, cause: { kind: 'refused' }, error: 'http 500' },
      '10.0.0.12:6443': { ok: false, latencyMs: 1, status: 500, cause: { kind: 'http', status: 500 }, error: 'ECONNREFUSED' },
    };
    const checker = new HealthChecker({
      health: { path: '/readyz', timeoutMs: 100, insecureSkipVerify: false, intervalMs: 10, rise: 1, fall: 1 },
      backends: [
        { host: '10.0.0.11', port: 6443 },
        { host: '10.0.0.12', port: 6443 },
      ],
      probe: async (t) => results[formatHostPort(t)]!,
      clock: immediateClock,
      random: () => 0,
    });
    const plane = new RecordingPlane();
    const r = new Reconciler(plane, checker, { log: recordingLog().log, applyFailed: 'a', resetFailed: 'r' });
    r.follow();
    checker.start();
    for (let i = 0; i < 100 && checker.verdicts().some((v) => v.state === 'unknown'); i++) await settle();
    await checker.stop();
    await r.sync();
    expect(checker.snapshot().map((b) => b.reason)).toStrictEqual(['http 500', 'ECONNREFUSED']);
    expect(plane.log.filter((l) => l.startsWith('reset'))).toStrictEqual(['reset 10.0.0.11:6443 refused']);
    expect(plane.log.at(-2) ?? plane.log.at(-1)).toContain('draining=10.0.0.12:6443');
  });
});
