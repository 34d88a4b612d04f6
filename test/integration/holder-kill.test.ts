/**
 * The holder's agent killed (SIGKILL) and started again, ten times, on a 3-node lab with load
 * balancing (prefix b27b, 10.78.184.0/24; n1 150, n2 100, n3 50; adverts every 100 ms, checks
 * every 200 ms, rise/fall 2; node and apiserver fine all along). Each time n2 takes over after
 * its Master_Down_Interval and the restarted n1 preempts back.
 *
 *   - A silent master is a stopped agent, not a dead apiserver: n2 never takes n1's healthy
 *     apiserver out (no "backend of the silent master taken out", no health change of it, no
 *     damping), and every takeover says the backend still accepts connections.
 *   - The preemption back: in the WATCH_MS after n1 becomes Active again, the
 *     gap between its adverts on the wire (tcpdump in n3) stays within 1.5 × interval + margin
 *     and no Backup takes over.
 *   - Nothing holds n1's election thread meanwhile: every node runs discovery,
 *     which starts after the election's first outcome — for n1, right after it preempts — and
 *     no Adver_Timer tick of n1 runs an Advertisement_Interval late (/status
 *     timing.sendLateMaxMs, since its start). With the Kubernetes client imported on that thread
 *     the ticks were 210-283 ms late in 10 of 10 restarts, the pacer covering; on discovery's own
 *     thread, 1-10 ms.
 *   - A node that is gone still leaves at once: n1's link down, n2 takes n1's backend out within
 *     the connect's deadline (one Advertisement_Interval, health/confirm.ts) + margin of its
 *     takeover.
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab } from '../../lab/lab.js';
import { restoreNodes, runAgent, startAgent, waitForHolder, waitForSettled, type AgentSettings, type LabAgent } from '../../lab/cluster.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'b27b';
const SUBNET = 184;
const ADVERT_MS = 100;
const INTERVAL_MS = 200;
const RESTARTS = 10;
/** Scheduling slack on 2 shared cores (the agents, nft, the checks' TLS). */
const MARGIN_MS = 150;
/** Slack on the pacer's 1.5 intervals: its thread runs with normal scheduling on 2 shared cores. */
const GAP_MARGIN_MS = 100;
/** How long after each preemption the Backups are watched (a takeover caused by the preemption comes within ~1 s), ms. */
const WATCH_MS = 1200;
const TOKEN = 'lab-holder-kill-token-0123456789';

describe.skipIf(needs('root'))('the holder agent killed and restarted (root; skipped otherwise)', () => {
  let lab: Lab;
  let agents: LabAgent[] = [];

  /** each node's discovery section (its kubeconfig reaches the stand-ins, which list themselves in the slice) */
  const discovery: Record<string, unknown>[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false });
    await lab.startApiservers({ store: true, token: TOKEN });
    for (const n of lab.nodes)
      discovery.push({ kubeconfig: await lab.writeKubeconfig(n, { token: TOKEN }), lastKnownFile: join(lab.dir, `${n.name}-backends.json`) });
  });
  afterEach(async () => {
    await Promise.all(agents.map((a) => a.stop('SIGTERM').catch(() => undefined)));
    agents = [];
    await restoreNodes(lab);
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  const settings = (priority: number, i: number): AgentSettings => ({
    priority,
    advertisementInterval: `${ADVERT_MS}ms`,
    balance: true,
    healthInterval: `${INTERVAL_MS}ms`,
    extra: { discovery: discovery[i] },
  });

  async function cluster(): Promise<LabAgent[]> {
    const started = await Promise.all([150, 100, 50].map((p, i) => startAgent(lab, lab.nodes[i]!, settings(p, i))));
    agents.push(...started);
    await waitForHolder(lab, lab.vip4, 'n1');
    for (const a of started)
      await waitFor(
        () => a.status(),
        (s) => s.backends.length === 3 && s.backends.every((b) => b.healthy) && s.discovery?.state === 'watching',
        { timeoutMs: 10_000, what: `all backends up and discovery watching on ${a.node.name}` },
      );
    // a node still holding for the replicated state lets another Backup take over first
    await waitForSettled(started);
    return started;
  }

  const n1Backend = (): string => `${lab.nodes[0]!.ipv4}:6443`;
  const linesAbout = (a: LabAgent, backend: string): Record<string, unknown>[] => a.logLines().filter((l) => l.backend === backend);

  it(`${RESTARTS} SIGKILL restarts of the holder's agent: its healthy apiserver is never taken out or damped on the new holder`, async () => {
    const t0 = Date.now();
    const [first, a2, a3] = await cluster();
    let a1 = first!;
    // n1's adverts as n3 receives them (wall clock, µs)
    const dump = lab.spawn(
      lab.nodes[2]!.netns,
      ['tcpdump', '-i', 'eth0', '-n', '-l', '--immediate-mode', '-tt', 'ip proto 112 and src host', lab.nodes[0]!.ipv4],
      { logFile: 'n1-adverts.txt' },
    );
    await dump.waitForOutput(/listening on/, { timeoutMs: 5000, includeExisting: true });
    const preempts: number[] = [];
    const phases: number[][] = [];
    /** per restart: n1's longest silence the pacer covered, and its latest Adver_Timer tick, ms */
    const silences: { pacerMs: number; sendLateMs: number }[] = [];
    for (let i = 0; i < RESTARTS; i++) {
      const c0 = Date.now();
      await a1.stop('SIGKILL');
      agents = agents.filter((a) => a !== a1);
      // (n1 keeps its copy of the VIP until its lifetime ends or the next agent removes it)
      const before = a2!.logLines().filter((l) => l.msg === 'state change' && l.to === 'master').length;
      await waitFor(
        async () => a2!.logLines().filter((l) => l.msg === 'state change' && l.to === 'master').length,
        (n) => n > before,
        { timeoutMs: 5000, intervalMs: 20, what: 'n2 to take over' },
      );
      const c1 = Date.now();
      a1 = await runAgent(lab, lab.nodes[0]!, a1.configPath, { logFile: `n1-ballast.log` });
      agents.push(a1);
      const c2 = Date.now();
      await waitForHolder(lab, lab.vip4, 'n1');
      phases.push([c1 - c0, c2 - c1, Date.now() - c2]);
      const became = a1.logLines().find((l) => l.msg === 'state change' && l.to === 'master');
      if (became) preempts.push(Date.parse(String(became.at)));
      // the second after a preemption: where the issue saw a Backup take over
      await sleep(WATCH_MS);
      // its thread since it started: the start, the preemption, discovery's start after it
      const t = (await a1.status()).timing;
      silences.push({ pacerMs: Math.round(t?.pacer?.longestSilenceMs ?? 0), sendLateMs: Math.round(t?.sendLateMaxMs ?? 0) });
    }
    await dump.stop('SIGINT', 3000);
    const adverts = [...dump.output().matchAll(/^(\d+\.\d+) IP .*prio (\d+)/gm)].filter((m) => m[2] !== '0').map((m) => Number(m[1]) * 1000);
    const gaps = preempts.map((p) => {
      const seq = [p, ...adverts.filter((t) => t >= p - 5 && t <= p + 2000)];
      return Math.round(Math.max(...seq.slice(1).map((t, k) => t - seq[k]!)));
    });
    const moves = (a: LabAgent): string =>
      JSON.stringify(
        a
          .logLines()
          .filter((l) => l.msg === 'state change')
          .map((l) => `${String(l.at).slice(11)} ${String(l.from)}>${String(l.to)} ${String(l.reason)}`),
      );
    console.log(`[holder-kill] n1 preempts ${JSON.stringify(preempts.map((p) => new Date(p).toISOString().slice(11)))}\nn2 ${moves(a2!)}\nn3 ${moves(a3!)}`);
    const takeovers = [a2!, a3!].flatMap((a) =>
      a
        .logLines()
        .filter((l) => l.msg === 'state change' && l.to === 'master' && l.reason === 'masterDown' && l.previousMaster !== undefined)
        .map((l) => {
          const at = Date.parse(String(l.at));
          const last = Math.max(...adverts.filter((t) => t <= at));
          return `${a.node.name} ${Math.round(at - last)}`;
        }),
    );
    const silent = [a1, a2!, a3!].flatMap((a) =>
      a
        .logLines()
        .filter((l) => /election thread was silent/.test(String(l.msg)))
        .map((l) => `${a.node.name} ${String(l.time).slice(11)} ${String(l.silentMs)}`),
    );
    const timing = async (a: LabAgent): Promise<string> =>
      JSON.stringify(
        (({ gc, rescued, receiveGapMaxMs, sendLateMaxMs }) => ({ gc, rescued, receiveGapMaxMs, sendLateMaxMs }))((await a.status()).timing ?? ({} as never)),
      );
    console.log(`[holder-kill] election thread timing: n2 ${await timing(a2!)}; n3 ${await timing(a3!)}`);
    console.log(`[holder-kill] pacer covers: ${JSON.stringify(silent)}`);
    console.log(`[holder-kill] Master_Down takeovers, ms after n1's last advert: ${JSON.stringify(takeovers)}`);
    console.log(
      `[holder-kill] largest gap between n1's adverts in the 2 s after each preemption, ms: ${JSON.stringify(gaps)}; n2 master ${a2!.logLines().filter((l) => l.msg === 'state change' && l.to === 'master').length} times, n3 ${a3!.logLines().filter((l) => l.msg === 'state change' && l.to === 'master').length}`,
    );
    console.log(`[holder-kill] per restart (takeover, agent answers, preempted back), ms: ${JSON.stringify(phases)}`);
    console.log(`[holder-kill] per restart, n1's longest silence the pacer covered / latest Adver_Timer tick, ms: ${JSON.stringify(silences)}`);
    // the last takeover's confirmation has long ended (it takes at most one interval)
    const backend = n1Backend();
    const about = linesAbout(a2!, backend);
    const takenOut = about.filter((l) => l.msg === 'backend of the silent master taken out').length;
    const alive = about.filter((l) => /accepts connections: its agent stopped/.test(String(l.msg))).length;
    // (its first verdict, unknown → up, came before the first kill)
    const changes = about.filter((l) => (l.msg === 'backend health' && l.from !== 'unknown') || /damp/.test(String(l.msg)) || l.msg === 'backend verdict');
    const st2 = await a2!.status();
    const mine = st2.backends.find((b) => b.address === backend);
    console.log(
      `[holder-kill] ${RESTARTS} restarts in ${Date.now() - t0} ms: on n2, taken out ${takenOut}, confirmed alive ${alive}, health/damping lines ${changes.length}; n1's backend now ${JSON.stringify(mine)}`,
    );
    // the preemptions back: n1's adverts keep their pace from its first one
    // (the pacer covers a silent thread at 1.5 intervals; a gap within it can fire no Backup,
    // whose Master_Down_Interval is 3 intervals + Skew_Time), and no Backup takes over meanwhile
    expect(gaps).toHaveLength(RESTARTS);
    for (const g of gaps) expect(g).toBeLessThanOrEqual(1.5 * ADVERT_MS + GAP_MARGIN_MS);
    // ... and n1's own thread sent them: none of its Adver_Timer ticks missed a whole interval
    expect(silences.filter((x) => x.sendLateMs >= ADVERT_MS)).toStrictEqual([]);
    const becameMaster = (a: LabAgent): number[] =>
      a
        .logLines()
        .filter((l) => l.msg === 'state change' && l.to === 'master')
        .map((l) => Date.parse(String(l.at)));
    const falseFailovers = [a2!, a3!].flatMap((a) => becameMaster(a).filter((t) => preempts.some((p) => t > p && t <= p + WATCH_MS)));
    expect(falseFailovers).toEqual([]);
    // every Master_Down takeover of n2 asked, and heard n1's apiserver answer (a takeover may be a
    // preemption of n3 instead, when n3's Master_Down fired first: see the gaps line above)
    const masterDowns = a2!
      .logLines()
      .filter((l) => l.msg === 'state change' && l.to === 'master' && l.reason === 'masterDown' && l.previousMaster === lab.nodes[0]!.ipv4).length;
    expect(masterDowns).toBeGreaterThan(0);
    expect(takenOut).toBe(0);
    expect(changes).toEqual([]);
    expect(alive).toBe(masterDowns);
    expect(linesAbout(a3!, backend).filter((l) => l.msg === 'backend of the silent master taken out')).toEqual([]);
    expect(mine).toMatchObject({ healthy: true, state: 'up', dampedUntil: null });
    // n3 never took over, and never changed its mind about n1 either
    expect(linesAbout(a3!, backend).filter((l) => l.msg === 'backend health' && l.from !== 'unknown')).toEqual([]);
  }, 120_000);

  it("a holder node that is gone (link down): its backend leaves within the connect's deadline of the takeover", async () => {
    const [, a2] = await cluster();
    await lab.linkDown(lab.nodes[0]!);
    await waitForHolder(lab, lab.vip4, 'n2');
    const backend = n1Backend();
    const out = await waitFor(
      async () => linesAbout(a2!, backend).find((l) => l.msg === 'backend of the silent master taken out'),
      (l) => l !== undefined,
      { timeoutMs: 3000, what: "n2 to take n1's backend out" },
    );
    const master = a2!
      .logLines()
      .find((l) => l.msg === 'state change' && l.to === 'master' && l.reason === 'masterDown' && l.previousMaster === lab.nodes[0]!.ipv4);
    expect(master).toBeDefined();
    const afterMs = Date.parse(String(out!.time)) - Date.parse(String(master!.at));
    console.log(`[holder-kill] link down: n1's backend out ${afterMs} ms after n2's takeover (${String(out!.reason)})`);
    // one Advertisement_Interval of connect deadline (health/confirm.ts confirmDeadlineMs) + margin
    expect(afterMs).toBeLessThanOrEqual(ADVERT_MS + MARGIN_MS);
    await sleep(100);
    expect((await a2!.status()).backends.find((b) => b.address === backend)).toMatchObject({ healthy: false });
  }, 60_000);
});
