/**
 * A restart in place of the master's agent moves nothing (docs/operations.md): SIGUSR2 (what a
 * systemd restart job's SIGTERM becomes, observe/restart-job.ts) makes the Active router send its
 * last adverts announcing Max Adver Int = restartHold / 4 (RFC 9568 §6.4.2: the Backup adopts it
 * and waits 3 × that + Skew_Time), keep the VIP, the nftables table and its conntrack NAT, and
 * leave a hand-off note; the next process resumes Active at once and serves the table's backends
 * until its own checks conclude. Two nodes (n1 priority 150 holds the VIP, n2 100), adverts every
 * 100 ms, checks every 200 ms, rise/fall 2; a client makes a new TLS request through the VIP
 * every 20 ms and 20 watch-like connections send a request every ~200 ms.
 *   - restart: 0 VIP moves (no 'state change' to master on n2; n1 holds the VIP throughout), 0
 *     failed requests, 0 watch connections lost or failed requests on them; n2 adopted the long
 *     interval and then our own again;
 *   - the next process never comes (an upgrade killed half-way): n2 takes over no earlier than
 *     the Master_Down_Interval the last adverts announced (less a margin) and no later than it
 *     plus a margin, and n1's VIP expires by itself within its hand-off lifetime.
 * Lab prefix brip, subnet 180. Needs root.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { startAgent, startClients, waitForHolder, type AgentSettings, type LabAgent, type LabClients } from '../../lab/cluster.js';
import { handOffIntervalCs } from '../../src/vrrp/engine.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'brip';
const SUBNET = 180;
const ADVERT_CS = 10;
const WATCHERS = 20;
/** Timer and scheduling jitter on 2 busy cores (two agents, a prober, 20 watches). */
const MARGIN_MS = 400;

describe.skipIf(needs('root'))('restart in place of the master agent (root; skipped otherwise)', () => {
  let lab: Lab;
  const agents: (LabAgent | undefined)[] = [];
  let clients: LabClients | undefined;

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: true, apiservers: true });
  });
  afterEach(async () => {
    await clients?.stop();
    clients = undefined;
    await Promise.all(agents.splice(0).map((a) => a?.stop('SIGTERM').catch(() => undefined)));
    // a hand-off left on purpose: its VIP and table go with the next test's agents or the lab
    for (const t of ['ip', 'ip6']) await lab.exec(lab.nodes[0]!.netns, ['nft', 'delete', 'table', t, 'ballast'], { allowFail: true });
    await lab.exec(lab.nodes[0]!.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', lab.nodes[0]!.ifname], { allowFail: true });
    await lab.exec(lab.nodes[0]!.netns, ['ip', 'addr', 'del', `${lab.vip6}/128`, 'dev', lab.nodes[0]!.ifname], { allowFail: true });
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  const settings = (priority: number, restartHold: string, family: 4 | 6): AgentSettings => ({
    priority,
    advertisementInterval: `${ADVERT_CS * 10}ms`,
    balance: true,
    healthInterval: '200ms',
    restartHold,
    family,
  });
  const start = async (i: number, restartHold: string, family: 4 | 6 = 4): Promise<LabAgent> =>
    (agents[i] = await startAgent(lab, lab.nodes[i]!, settings(i === 0 ? 150 : 100, restartHold, family)));
  const settled = (i: number): Promise<unknown> =>
    waitFor(
      () => agents[i]!.status(),
      (s) => s.backends.length === 2 && s.backends.every((b) => b.healthy),
      { timeoutMs: 10_000, intervalMs: 50, what: `n${i + 1} settled` },
    );
  const linesOf = (a: LabAgent, msg: string): Record<string, unknown>[] => a.logLines().filter((l) => l.msg === msg);

  it.each([4, 6] as const)('IPv%i: SIGUSR2, then a new process: 0 VIP moves, 0 failed requests, 0 watch connections lost', async (family) => {
    const hold = '4s';
    const vip = family === 4 ? lab.vip4 : lab.vip6;
    const url = family === 4 ? `https://${vip}:6443/version` : `https://[${vip}]:6443/version`;
    await start(0, hold, family);
    await start(1, hold, family);
    await waitForHolder(lab, vip, 'n1');
    await settled(0);
    await settled(1);
    const c = (clients = await startClients(lab, { url, watches: WATCHERS, probeEveryMs: 20, durationMs: 30_000 }));
    const before = { ...c.report() };

    const old = agents[0]!;
    const t0 = Date.now();
    expect(await old.stop('SIGUSR2')).toBe(0);
    expect(linesOf(old, 'handed off for a restart in place: the VIPs stay, the Backups wait for the next process')).toHaveLength(1);
    expect((await lab.holders(vip)).map((h) => h.name)).toStrictEqual(['n1']);
    const next = await start(0, hold, family);
    await waitFor(
      async () => linesOf(next, 'state change'),
      (ls) => ls.some((l) => l.to === 'master' && l.reason === 'resumed'),
      { timeoutMs: 3000, intervalMs: 50, what: 'n1 resumed as master' },
    );
    const resumedAt = Date.parse(String(linesOf(next, 'state change').find((l) => l.reason === 'resumed')!.time));
    await settled(0);
    // the Backup is back on our interval: the resumed adverts reached it
    await waitFor(
      async () => linesOf(agents[1]!, 'the master advertises our advertisement interval again').length,
      (n) => n >= 1,
      { timeoutMs: 3000, what: 'n2 back on the 10 cs interval' },
    );
    await sleep(1000);
    const p = await c.prober.stop();
    const w = c.report();

    // 0 VIP moves: n2 never became master, n1 was master again at once, one holder now
    expect(agents[1]!.logLines().filter((l) => l.msg === 'state change' && l.to === 'master')).toStrictEqual([]);
    expect((await lab.holders(vip)).map((h) => h.name)).toStrictEqual(['n1']);
    // n2 adopted the hand-off's interval (RFC 9568 §6.4.2)
    const adopted = agents[1]!.logLines().find((l) => typeof l.msg === 'string' && l.msg.startsWith("adopted the master's advertisement interval"));
    expect(adopted?.masterAdverIntervalCs).toBe(handOffIntervalCs(4000, ADVERT_CS));
    // the client: every request answered, across the whole restart
    expect(p.failed, JSON.stringify(p.outages)).toBe(0);
    expect(p.ok).toBeGreaterThan(50);
    // the watches: none lost, none failed, all still open
    expect({ reconnects: w.reconnects - before.reconnects, failedRequests: w.failedRequests - before.failedRequests, open: w.open }).toStrictEqual({
      reconnects: 0,
      failedRequests: 0,
      open: WATCHERS,
    });
    expect(w.requests - before.requests).toBeGreaterThan(WATCHERS * 5);
    console.info(
      `IPv${family} restart in place: SIGUSR2 to resumed ${resumedAt - t0} ms; requests ${p.requests} (failed ${p.failed}); watch requests ${w.requests - before.requests} (failed ${w.failedRequests - before.failedRequests}, reconnects ${w.reconnects - before.reconnects})`,
    );
  });

  it('SIGUSR2 and no new process: the Backup takes over within the announced bound, the VIP expires on the old node', async () => {
    const holdMs = 2000;
    await start(0, `${holdMs}ms`);
    await start(1, `${holdMs}ms`);
    await waitForHolder(lab, lab.vip4, 'n1');
    await settled(1);
    const old = agents[0]!;
    expect(await old.stop('SIGUSR2')).toBe(0);
    agents[0] = undefined;
    const handOff = linesOf(old, 'handed off for a restart in place: the VIPs stay, the Backups wait for the next process')[0]!;
    const sentAt = Date.parse(String(handOff.time));
    const intervalCs = handOffIntervalCs(holdMs, ADVERT_CS);
    expect(handOff.advertisedIntervalCs).toBe(intervalCs);
    // n2 (priority 100) waits 3 × the announced interval + its Skew_Time (RFC 9568 §6.1)
    const bound = masterDownIntervalMs(100, intervalCs);
    const taken = await waitFor(
      async () => linesOf(agents[1]!, 'state change').find((l) => l.to === 'master'),
      (l) => l !== undefined,
      { timeoutMs: bound + 3000, intervalMs: 20, what: 'n2 master' },
    );
    const after = Date.parse(String(taken!.time)) - sentAt;
    expect(after).toBeGreaterThan(bound - MARGIN_MS);
    expect(after).toBeLessThan(bound + MARGIN_MS);
    console.info(`no new process: n2 master ${after} ms after the hand-off (announced ${intervalCs} cs: its Master_Down_Interval ${bound.toFixed(1)} ms)`);
    // the old node's copy had the hand-off's lifetime: gone by itself (whole seconds, rounded up)
    const lifetimeMs = Number(handOff.vipLifetimeMs);
    await waitFor(
      () => lab.holders(lab.vip4),
      (hs) => hs.length === 1 && hs[0]!.name === 'n2',
      { timeoutMs: Math.max(0, sentAt + lifetimeMs + 1000 + MARGIN_MS - Date.now()) + 100, intervalMs: 50, what: 'n2 the only holder' },
    );
  });
});
