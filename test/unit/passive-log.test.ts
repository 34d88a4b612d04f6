/**
 * Passive detection's "backend judged dead from its connections" (agent/phases/health.ts): a backend that
 * is down keeps refusing the connections still sent to it, one verdict a second with an active
 * client; the line is written once, then once per 10 s window with the count (ratelimit.ts), per
 * backend, not once per verdict (which would be 18 lines in 18 s).
 */
import { describe, expect, it } from 'vitest';
import { passiveVerdictHandler, PASSIVE_DEAD_MESSAGE } from '../../src/agent/phases/health.js';
import type { PassiveVerdict } from '../../src/health/passive.js';
import { LOG_REPEAT_WINDOW_MS, RateLimitedLog } from '../../src/log/ratelimit.js';
import type { HostPort } from '../../src/net/hostport.js';

const n2: HostPort = { host: '10.78.170.12', port: 6443, family: 4 };
const n3: HostPort = { host: '10.78.170.13', port: 6443, family: 4 };
const refused = (backend: HostPort): PassiveVerdict => ({ backend, alive: false, signal: 'refused', reason: 'refused' });

function setup() {
  let now = 0;
  const lines: { level: string; fields: Record<string, unknown>; msg: string }[] = [];
  const limited = new RateLimitedLog((level, fields, msg) => lines.push({ level, fields, msg }), { now: () => now, timer: false });
  const dead: string[] = [];
  const answered: string[] = [];
  const checker = {
    markDead: (b: Pick<HostPort, 'host' | 'port'>) => (dead.push(b.host), true),
    noteAnswered: (b: Pick<HostPort, 'host' | 'port'>) => void answered.push(b.host),
  };
  return { lines, dead, answered, handle: passiveVerdictHandler(checker, limited), advance: (ms: number) => (now += ms), limited };
}

describe('passive detection: the dead line', () => {
  it('18 refusals of a down backend, one a second: every one takes it down, 2 lines in 18 s (the first and one summary), not 18', () => {
    const t = setup();
    for (let s = 0; s < 18; s++) {
      t.handle(refused(n2));
      t.advance(1000);
    }
    expect(t.dead).toHaveLength(18);
    expect(t.lines.map((l) => l.msg)).toStrictEqual([PASSIVE_DEAD_MESSAGE, `${PASSIVE_DEAD_MESSAGE} (repeated 10 times in the last 10 s)`]);
    expect(t.lines.map((l) => l.level)).toStrictEqual(['warn', 'warn']);
    expect(t.lines[0]!.fields).toStrictEqual({ backend: '10.78.170.12:6443', reason: 'refused' });
    expect(t.lines[1]!.fields).toMatchObject({ backend: '10.78.170.12:6443', repeated: 10, repeatedOverS: 10 });
    // the rest of the burst is reported when the watch's log closes (a stop)
    t.limited.close();
    expect(t.lines).toHaveLength(3);
    expect(t.lines[2]!.fields).toMatchObject({ repeated: 7 });
  });

  it('per backend: a second backend dying is its own first line', () => {
    const t = setup();
    t.handle(refused(n2));
    t.advance(100);
    t.handle(refused(n3));
    t.handle(refused(n2));
    expect(t.lines.map((l) => l.fields.backend)).toStrictEqual(['10.78.170.12:6443', '10.78.170.13:6443']);
    expect(LOG_REPEAT_WINDOW_MS).toBe(10_000);
  });

  it('an answered SYN is noted, not logged; an unknown backend (markDead false) writes nothing', () => {
    const t = setup();
    t.handle({ backend: n2, alive: true, signal: 'answered', reason: 'answered' });
    expect(t.answered).toStrictEqual(['10.78.170.12']);
    const quiet = passiveVerdictHandler(
      { markDead: () => false, noteAnswered: () => undefined },
      new RateLimitedLog(() => t.lines.push({ level: 'x', fields: {}, msg: 'x' })),
    );
    quiet(refused(n3));
    expect(t.lines).toHaveLength(0);
  });
});
