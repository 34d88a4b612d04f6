import { describe, expect, it } from 'vitest';
import type { WatchEvent } from '../../lab/soak/invariants.js';
import { WatchDrops } from '../../lab/soak/watchdrops.js';

function merger(): { d: WatchDrops; out: WatchEvent[] } {
  const out: WatchEvent[] = [];
  return { d: new WatchDrops((e) => out.push(e)), out };
}

describe('WatchDrops: one drop per lost watch-like connection', () => {
  it('a reset of a request in flight is one drop at the request, however late the client processed the close', () => {
    // run9 at 1004.9 s: sent at 1004.868, the close processed 1.8 s later by a stalled client
    const { d, out } = merger();
    d.closed(33, 1_006_649, 'ECONNRESET');
    d.failed(33, 1_004_868, 'ECONNRESET');
    d.connected(33);
    d.end();
    expect(out).toStrictEqual([{ t: 1_004_868, kind: 'drop', error: 'ECONNRESET', conn: 33 }]);
  });

  it("an idle connection closed by the server is one drop at the close, with the close's cause", () => {
    const { d, out } = merger();
    d.closed(7, 10_000, null);
    d.failed(7, 12_500, 'closed');
    d.connected(7);
    expect(out).toStrictEqual([{ t: 10_000, kind: 'drop', error: 'FIN', conn: 7 }]);
  });

  it('a failure reported before the close (a request timeout) is not counted again by the close', () => {
    const { d, out } = merger();
    d.failed(5, 20_000, 'timeout');
    d.closed(5, 22_000, 'timeout');
    d.connected(5);
    d.end();
    expect(out).toStrictEqual([{ t: 20_000, kind: 'drop', error: 'timeout', conn: 5 }]);
  });

  it('each connection of the same watch counts on its own; a close no request noticed is reported at the reconnect or the end', () => {
    const { d, out } = merger();
    d.closed(1, 1_000, 'ECONNRESET');
    d.failed(1, 900, 'ECONNRESET');
    d.connected(1);
    d.closed(1, 5_000, 'ECONNRESET');
    d.connected(1);
    d.closed(1, 9_000, null);
    d.closed(2, 9_100, 'ECONNRESET');
    d.end();
    expect(out.map((e) => [e.conn, e.t, e.error])).toStrictEqual([
      [1, 900, 'ECONNRESET'],
      [1, 5_000, 'ECONNRESET'],
      [1, 9_000, 'FIN'],
      [2, 9_100, 'ECONNRESET'],
    ]);
  });
});

describe('statParentPid (the leak check: a helper of the harness or of a fault is not a leak)', () => {
  it('reads the parent PID after the command name, whatever the name holds', async () => {
    const { statParentPid } = await import('../../lab/soak/cluster.js');
    expect(statParentPid('9411 (stress-ng-cpu) R 9409 9409 1 0 -1 4194624 0 0')).toBe(9409);
    expect(statParentPid('25181 (node) S 1200 25181 1200 0 -1')).toBe(1200);
    // comm may hold spaces and parentheses (proc(5)): the last ')' ends it
    expect(statParentPid('77 (a) b (c) S 42 77 1 0')).toBe(42);
    expect(statParentPid('garbage')).toBeNull();
  });
});
