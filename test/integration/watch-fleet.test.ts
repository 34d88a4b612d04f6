/**
 * The watch fleet (lab/clients/watch-fleet.ts) against one stand-in apiserver, IPv4 and IPv6
 * (prefix bhb6, 10.78.165.0/24 and fd78:165::/64): each way a connection can end is produced for
 * real and must be reported as such, for every connection open at the mark.
 *
 *   quiet     nothing happens: every connection kept, events flowing (a tick every 200 ms)
 *   reset     the server's sockets destroyed (`ss -K`: tcp_abort sends a RST): every one `reset`
 *   fin       the stand-in stopped (it closes its connections): every one `fin`
 *   hung      the server's link down: nothing arrives, nothing is refused: every one `hung`
 *             once the window ends (it is longer than the hang threshold)
 *
 * Between windows the lost connections are reopened (the fleet's `reopen`): the next window's
 * population is the whole fleet again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { startWatchFleet, type FleetWindowResult, type WatchFleet } from '../../lab/fleet.js';
import { needs, startLab } from '../support/index.js';

const PREFIX = 'bhb6';
const SUBNET = 165;
const COUNT = 60;
const SOURCES = 4;
const TICK_MS = 200;
const HANG_MS = 1000;
/** longer than the hang threshold, so that a silent connection is `hung` at the close */
const WINDOW_MS = 2500;

describe.skipIf(needs('root', 'ip'))('watch fleet: kept, reset, FIN and hung, as they happen (root)', () => {
  let lab: Lab;
  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 1, apiservers: true });
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  /** Every connection of the window ended `how`, all served by n1, the whole fleet in it. */
  function expectAll(w: FleetWindowResult, how: string): void {
    expect(w.mark.open).toBe(COUNT);
    expect(w.conns).toHaveLength(COUNT);
    expect(w.window.all.ended[how as 'kept']).toBe(COUNT);
    expect(Object.keys(w.window.byNode)).toStrictEqual(['n1']);
    // each source address carries COUNT / SOURCES connections
    const bySrc = new Map<string, number>();
    for (const c of w.conns) bySrc.set(c.src, (bySrc.get(c.src) ?? 0) + 1);
    expect([...bySrc.values()]).toStrictEqual(Array(SOURCES).fill(COUNT / SOURCES));
  }

  for (const family of [4, 6] as const) {
    it(`IPv${family}: quiet → kept, ss -K → reset, stand-in stopped → fin, link down → hung`, async () => {
      const n1 = lab.nodes[0]!;
      const url = family === 4 ? `https://${n1.ipv4}:6443` : `https://[${n1.ipv6}]:6443`;
      let fleet: WatchFleet | undefined;
      try {
        fleet = await startWatchFleet(lab, {
          url,
          count: COUNT,
          sources: SOURCES,
          openRate: 200,
          windowMs: WINDOW_MS,
          hangMs: HANG_MS,
          durationMs: 120_000,
          logFile: `fleet-v${family}.log`,
        });
        await fleet.waitOpen({ timeoutMs: 20_000 });
        const quiet = await (await fleet.mark('quiet', 1500)).done;
        expectAll(quiet, 'kept');
        expect(quiet.window.all.keptShare).toBe(1);
        for (const c of quiet.conns) {
          // 1.5 s of 200 ms ticks: several events; a gap is never shorter than a tick (timers are
          // never early), and a kept connection's stall stays under the hang threshold
          expect(c.events).toBeGreaterThanOrEqual(3);
          expect(c.stallMs).toBeGreaterThanOrEqual(TICK_MS - 1);
          expect(c.stallMs).toBeLessThan(HANG_MS);
          expect(c.endedMs).toBeNull();
        }

        const reset = await fleet.mark('reset');
        await lab.exec(n1.netns, ['ss', '-K', '-tn', 'state', 'established', '( sport = :6443 )']);
        const r = await reset.done;
        expectAll(r, 'reset');
        for (const c of r.conns) expect(c.endedMs).toBeLessThan(WINDOW_MS);
        await fleet.waitOpen({ timeoutMs: 20_000 });

        const fin = await fleet.mark('fin');
        await lab.stopApiserver(n1);
        const f = await fin.done;
        expectAll(f, 'fin');
        await lab.startApiserver(n1);
        await fleet.waitOpen({ timeoutMs: 30_000 });

        const hung = await fleet.mark('hung');
        await lab.linkDown(n1);
        const h = await hung.done;
        await lab.linkUp(n1);
        expectAll(h, 'hung');
        for (const c of h.conns) {
          // silent from the link's loss to the close: the stall is at least the hang threshold
          expect(c.stallMs).toBeGreaterThan(HANG_MS);
          expect(c.endedMs).toBeGreaterThanOrEqual(WINDOW_MS - 1);
        }
        await fleet.waitOpen({ timeoutMs: 30_000 });
        const last = await fleet.stop();
        expect(last?.final).toBe(true);
        expect(last?.gaveUp).toBe(0);
        fleet = undefined;
      } finally {
        await fleet?.stop();
        await lab.linkUp(n1);
        if (!lab.apiserver(n1)) await lab.startApiserver(n1);
      }
    }, 120_000);
  }
});
