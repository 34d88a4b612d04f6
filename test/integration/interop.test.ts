/**
 * ballast and keepalived 2.2.7 in one VRRPv3 group (RFC 9568), on a lab of network namespaces:
 * the mixed fleet an operator runs while migrating one node at a time. VRID 51, adverts every
 * 100 ms on both sides (keepalived `advert_int 0.1`).
 *
 * The holder is read from the interfaces (lab.holders), not from either daemon's opinion, and
 * once a group has converged it is sampled every 50 ms for 1.5 s: exactly one holder, always.
 *
 * Bounds (RFC 9568 §6.1), with the Backup's priority p and 10 cs intervals:
 *   Skew_Time            = (256 - p) * 100 ms / 256         (p = 100: 60.9 ms)
 *   Master_Down_Interval = 3 * 100 ms + Skew_Time           (p = 100: 360.9 ms)
 * A resigning holder (priority 0) is replaced after Skew_Time, a silent one after
 * Master_Down_Interval; a returning higher priority preempts after its own Master_Down_Interval.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab, type LabNode } from '../../lab/lab.js';
import { startAgent, waitForHolder, type AgentSettings, type LabAgent } from '../../lab/cluster.js';
import type { ElectionStatusDocument } from '../../src/observe/status.js';
import { KEEPALIVED_PATH, keepalivedVersion, startKeepalived, type KeepalivedOptions, type KeepalivedPeer } from '../../lab/peers/keepalived.js';
import { masterDownIntervalMs, skewTimeMs } from '../../src/vrrp/state.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const why = needs('root', 'keepalived');
const PREFIX = 'bkai';
const SUBNET = 215;
const VRID = 51;
const INTERVAL_CS = 10;
/**
 * Slack on top of Skew_Time for a priority-0 hand-over, measured from the SIGTERM we send to the
 * first lab.holders sample that shows the new holder. It covers what is not protocol time:
 * the resigning daemon's shutdown path up to its priority-0 advert (keepalived's parent relays
 * SIGTERM to its VRRP child; ballast's main thread tells its VRRP worker), the new holder's
 * netlink address add, and the observer itself (10 ms between samples plus one sample, which
 * runs `ip -j addr` in each node: 5–30 ms on 2 loaded cores). 150 ms keeps the bound
 * (211 ms for a priority-100 Backup) well under the 261 ms minimum a Backup that missed the
 * priority-0 advert would need (Master_Down_Interval less one advert interval already elapsed),
 * so the bound also proves the priority-0 path was taken.
 */
const HANDOVER_MARGIN_MS = 150;
/** Slack for preemption: process start, socket open and scheduling before the returning node's own Master_Down_Interval runs. */
const PREEMPT_MARGIN_MS = 1000;
/**
 * How late (ms) a sender's Adver_Timer may fire, each time. The timer restarts at each send
 * (RFC 9568 §6.4.3), so lateness adds up over a window. Measured with tcpdump on the lab, a
 * 30-minute soak beside it, with and without stress-ng on both cores: keepalived's gaps 100.1–
 * 100.3 ms on average, 103 ms at most; ballast's at most 108 ms.
 */
const SEND_LATENESS_MS = 5;
/**
 * The fewest adverts an Active router that sends one every Advertisement_Interval gets counted
 * in `ms` of counting: floor(ms / (interval + lateness)) sends fall inside any window that long,
 * less one still in flight at the second read.
 */
const minAdverts = (ms: number): number => Math.floor(ms / (INTERVAL_CS * 10 + SEND_LATENESS_MS)) - 1;

const kaVersion = why === null ? (keepalivedVersion()?.join('.') ?? 'unknown version') : 'not run';

describe.skipIf(why)(`ballast ⇄ keepalived (${kaVersion}) on the lab (root and ${KEEPALIVED_PATH}; skipped otherwise)`, () => {
  let lab: Lab;
  let agents: LabAgent[] = [];
  let kas: KeepalivedPeer[] = [];
  /** measured take-over times (priority 0 and preemption), printed at the end */
  const handovers: string[] = [];
  /** adverts counted in a measured window against their bound, printed at the end */
  const counted: string[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2 });
  });
  afterEach(async () => {
    // SIGKILL for both: keepalived's own SIGTERM path takes about a second, and the VIPs
    // either leaves behind are deleted below
    await Promise.all([...agents, ...kas].map((d) => d.stop('SIGKILL').catch(() => undefined)));
    agents = [];
    kas = [];
    for (const n of lab.nodes) {
      await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
      await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip6}/128`, 'dev', 'eth0'], { allowFail: true });
    }
  });
  afterAll(async () => {
    if (handovers.length > 0) console.log(`measured take-overs:\n  ${handovers.join('\n  ')}`);
    if (counted.length > 0) console.log(`adverts counted:\n  ${counted.join('\n  ')}`);
    await lab?.teardown();
  });

  const n1 = (): LabNode => lab.nodes[0]!;
  const n2 = (): LabNode => lab.nodes[1]!;

  async function ballast(node: LabNode, s: AgentSettings): Promise<LabAgent> {
    const a = await startAgent(lab, node, { vrid: VRID, advertisementInterval: '100ms', ...s });
    agents.push(a);
    return a;
  }

  async function keepalived(node: LabNode, opts: Omit<KeepalivedOptions, 'vips'> & { vips?: string[] }): Promise<KeepalivedPeer> {
    const k = await startKeepalived(lab, node, { vrid: VRID, advertIntervalS: INTERVAL_CS / 100, vrrpVersion: 3, vips: [`${lab.vip4}/32`], ...opts });
    kas.push(k);
    return k;
  }

  /** Samples the holders of `vip` every 50 ms for `ms`: `name` must be the one and only holder in every sample. */
  async function expectSoleHolder(vip: string, name: string, ms = 1500): Promise<void> {
    const t0 = performance.now();
    const bad: string[] = [];
    let samples = 0;
    while (performance.now() - t0 < ms) {
      const h = (await lab.holders(vip)).map((n) => n.name);
      samples++;
      if (h.length !== 1 || h[0] !== name) bad.push(`+${Math.round(performance.now() - t0)} ms: [${h.join(', ')}]`);
      await sleep(50);
    }
    // one sample runs `ip -j addr` in every node; on 2 busy cores that alone can take 100 ms
    expect(samples, `only ${samples} samples of ${vip} in ${ms} ms`).toBeGreaterThanOrEqual(5);
    expect(bad, `holders of ${vip} other than [${name}] while converged (${samples} samples)`).toEqual([]);
  }

  /**
   * Calls `resign` (which sends the SIGTERM) and polls lab.holders every 10 ms until `to` is the
   * one and only holder. Returns the time from just before the signal to the end of the first
   * sample showing it (an upper bound: the address appeared at some point during that sample).
   */
  async function timeTakeover(vip: string, to: string, resign: () => Promise<unknown>, timeoutMs = 3000): Promise<number> {
    const t0 = performance.now();
    const resigned = resign();
    const trail: string[] = [];
    for (;;) {
      const h = (await lab.holders(vip)).map((n) => n.name);
      const t = performance.now() - t0;
      if (trail.at(-1)?.endsWith(`[${h.join(', ')}]`) !== true) trail.push(`+${t.toFixed(1)} ms: [${h.join(', ')}]`);
      if (h.length === 1 && h[0] === to) {
        await resigned;
        return t;
      }
      if (t > timeoutMs) throw new Error(`${to} did not take ${vip} over within ${timeoutMs} ms; holders seen: ${trail.join(', ')}`);
      await sleep(10);
    }
  }

  /** The lines keepalived logged so far that match `text`. */
  const kaLines = (k: KeepalivedPeer, text: RegExp): string[] =>
    k.proc
      .output()
      .split('\n')
      .filter((l) => text.test(l));

  /**
   * Reads an agent's /status, runs `during`, and reads it again. `ms` is the time the counters
   * surely counted for: from the end of the first read to the start of the second (a read runs
   * curl in the node, 10–300 ms on 2 loaded cores, and the agent answers at some point in it).
   */
  async function statusAround(
    a: LabAgent,
    during: () => Promise<unknown>,
  ): Promise<{ first: ElectionStatusDocument; last: ElectionStatusDocument; ms: number }> {
    const first = await a.status();
    const t0 = performance.now();
    await during();
    const t1 = performance.now();
    const last = await a.status();
    return { first, last, ms: t1 - t0 };
  }

  /** Expects at least {@link minAdverts} more `counter` in the second read than in the first, and notes the figures for the end. Returns the increase. */
  function expectAdverts(
    what: string,
    w: { first: ElectionStatusDocument; last: ElectionStatusDocument; ms: number },
    counter: 'advertsReceived' | 'advertsSent',
  ): number {
    const n = w.last.counters[counter] - w.first.counters[counter];
    const bound = minAdverts(w.ms);
    counted.push(`${what}: ${counter} ${n} in ${w.ms.toFixed(0)} ms (bound ≥ ${bound})`);
    expect(n, `${counter} in ${w.ms.toFixed(0)} ms`).toBeGreaterThanOrEqual(bound);
    return n;
  }

  // -------------------------------------------------------------------------------------------
  describe('IPv4 multicast (224.0.0.18)', () => {
    it('ballast 150 + keepalived 100: ballast holds, keepalived follows it', async () => {
      const [a1, k2] = await Promise.all([ballast(n1(), { priority: 150 }), keepalived(n2(), { priority: 100 })]);
      // started together, keepalived may time out first; ballast then preempts it
      await waitForHolder(lab, lab.vip4, 'n1', 5000);
      await k2.waitForState('BACKUP');
      await expectSoleHolder(lab.vip4, 'n1');
      expect(k2.state()).toBe('BACKUP');
      const s1 = await a1.status();
      expect(s1).toMatchObject({ state: 'master', vrid: VRID, masterAddress: n1().ipv4, vipsHeld: true, mode: 'multicast' });
      // keepalived's adverts reach ballast and pass every check (checksum included)
      expect(s1.counters.dropped.checksum ?? 0).toBe(0);
      expect(kaLines(k2, /checksum/i)).toEqual([]);
    });

    it('keepalived 150 + ballast 100: keepalived holds, ballast follows it', async () => {
      const [k1, a2] = await Promise.all([keepalived(n1(), { priority: 150 }), ballast(n2(), { priority: 100 })]);
      await waitForHolder(lab, lab.vip4, 'n1', 5000);
      await k1.waitForState('MASTER');
      // ballast counts keepalived's adverts over the 1.5 s of samples
      const w = await statusAround(a2, () => expectSoleHolder(lab.vip4, 'n1'));
      const s2 = w.last;
      expect(k1.state()).toBe('MASTER');
      expect(s2).toMatchObject({ state: 'backup', masterAddress: n1().ipv4, masterPriority: 150, masterAdverIntervalMs: 100, vipsHeld: false });
      expectAdverts('multicast, ballast backup', w, 'advertsReceived');
      expect(s2.counters.dropped.checksum ?? 0).toBe(0);
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('hand-over on priority 0 (SIGTERM of the holder)', () => {
    const bound = skewTimeMs(100, INTERVAL_CS) + HANDOVER_MARGIN_MS;

    it(`ballast holder resigns: keepalived takes over within Skew_Time + ${HANDOVER_MARGIN_MS} ms`, async () => {
      const [a1, k2] = await Promise.all([ballast(n1(), { priority: 150 }), keepalived(n2(), { priority: 100 })]);
      await waitForHolder(lab, lab.vip4, 'n1', 5000);
      await k2.waitForState('BACKUP');
      await sleep(500);
      let code: number | null = null;
      const ms = await timeTakeover(lab.vip4, 'n2', async () => {
        code = await a1.stop('SIGTERM');
      });
      handovers.push(`priority 0, ballast → keepalived: SIGTERM to new holder seen ${ms.toFixed(1)} ms (bound ${bound.toFixed(1)} ms)`);
      expect(code).toBe(0);
      expect(ms).toBeLessThanOrEqual(bound);
      // keepalived says why it took over
      expect(kaLines(k2, /Backup received priority 0 advertisement/)).toHaveLength(1);
      await k2.waitForState('MASTER');
      await expectSoleHolder(lab.vip4, 'n2');
    });

    it(`keepalived holder resigns: ballast takes over within Skew_Time + ${HANDOVER_MARGIN_MS} ms`, async () => {
      const [k1, a2] = await Promise.all([keepalived(n1(), { priority: 150 }), ballast(n2(), { priority: 100 })]);
      await waitForHolder(lab, lab.vip4, 'n1', 5000);
      await sleep(500);
      let code: number | null = null;
      const ms = await timeTakeover(lab.vip4, 'n2', async () => {
        code = await k1.stop('SIGTERM');
      });
      handovers.push(`priority 0, keepalived → ballast: SIGTERM to new holder seen ${ms.toFixed(1)} ms (bound ${bound.toFixed(1)} ms)`);
      expect(code).toBe(0);
      expect(ms).toBeLessThanOrEqual(bound);
      const taker = a2
        .logLines()
        .filter((l) => l.msg === 'state change')
        .pop();
      expect(taker).toMatchObject({ from: 'backup', to: 'master', reason: 'resigned' });
      await expectSoleHolder(lab.vip4, 'n2');
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('restart in place of the ballast holder (SIGUSR2): keepalived as Backup waits', () => {
    it('keepalived adopts the announced interval, never takes over, and follows the resumed holder', async () => {
      const [a1, k2] = await Promise.all([ballast(n1(), { priority: 150, restartHold: '4s' }), keepalived(n2(), { priority: 100 })]);
      await waitForHolder(lab, lab.vip4, 'n1', 5000);
      await k2.waitForState('BACKUP');
      await sleep(500);
      // started together, keepalived may have been master for a moment before ballast preempted it
      const mastersBefore = kaLines(k2, /Entering MASTER STATE/).length;
      expect(await a1.stop('SIGUSR2')).toBe(0);
      agents = agents.filter((a) => a !== a1);
      // the next process 1 s later: far past keepalived's own Master_Down_Interval (~361 ms) but
      // within the one the last adverts announced (RFC 9568 §6.4.2: 3 × 1 s + Skew_Time)
      await sleep(1000);
      await expectSoleHolder(lab.vip4, 'n1', 500);
      const a1b = await ballast(n1(), { priority: 150, restartHold: '4s' });
      await waitFor(
        async () => a1b.logLines().filter((l) => l.msg === 'state change'),
        (ls) => ls.some((l) => l.to === 'master' && l.reason === 'resumed'),
        { timeoutMs: 3000, intervalMs: 50, what: 'ballast resumed as master' },
      );
      await expectSoleHolder(lab.vip4, 'n1', 1500);
      // keepalived never left BACKUP
      expect(kaLines(k2, /Entering MASTER STATE/)).toHaveLength(mastersBefore);
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('preemption: the higher priority comes back and takes the VIP back', () => {
    const bound = masterDownIntervalMs(150, INTERVAL_CS) + PREEMPT_MARGIN_MS;

    it('ballast 150 restarts next to keepalived 100', async () => {
      const [a1, k2] = await Promise.all([ballast(n1(), { priority: 150 }), keepalived(n2(), { priority: 100 })]);
      await waitForHolder(lab, lab.vip4, 'n1', 5000);
      expect(await a1.stop('SIGTERM')).toBe(0);
      agents = agents.filter((a) => a !== a1);
      await waitForHolder(lab, lab.vip4, 'n2', 2000);
      await k2.waitForState('MASTER');
      const back = await ballast(n1(), { priority: 150 });
      await waitFor(
        () => lab.holders(lab.vip4),
        (h) => h.length === 1 && h[0]!.name === 'n1',
        { timeoutMs: 3000, intervalMs: 10, what: 'n1 to take the VIP back' },
      );
      // from the agent's own startup (its log's wall clock), not from the process spawn
      const changes = back.logLines().filter((l) => l.msg === 'state change');
      expect(changes.map((l) => [l.from, l.to, l.reason])).toEqual([
        ['init', 'backup', 'startup'],
        ['backup', 'master', 'preempt'],
      ]);
      const tookMs = Date.now() - Date.parse(String(changes[0]!.time));
      handovers.push(`ballast 150 preempts keepalived 100: VIP back ${tookMs} ms after the agent's startup (bound ${bound.toFixed(1)} ms)`);
      expect(tookMs).toBeLessThan(bound);
      await k2.waitForState('BACKUP');
      await expectSoleHolder(lab.vip4, 'n1');
      expect((await back.status()).state).toBe('master');
    });

    it('keepalived 150 restarts next to ballast 100', async () => {
      const [k1, a2] = await Promise.all([keepalived(n1(), { priority: 150 }), ballast(n2(), { priority: 100 })]);
      await waitForHolder(lab, lab.vip4, 'n1', 5000);
      expect(await k1.stop('SIGTERM')).toBe(0);
      kas = kas.filter((k) => k !== k1);
      await waitForHolder(lab, lab.vip4, 'n2', 2000);
      // startKeepalived resolves once it is in BACKUP; from there its own Master_Down_Interval runs
      const back = await keepalived(n1(), { priority: 150 });
      const t0 = performance.now();
      await waitFor(
        () => lab.holders(lab.vip4),
        (h) => h.length === 1 && h[0]!.name === 'n1',
        { timeoutMs: 3000, intervalMs: 10, what: 'n1 to take the VIP back' },
      );
      const tookMs = performance.now() - t0;
      handovers.push(`keepalived 150 preempts ballast 100: VIP back ${tookMs.toFixed(0)} ms after keepalived entered BACKUP (bound ${bound.toFixed(1)} ms)`);
      expect(tookMs).toBeLessThan(bound);
      await back.waitForState('MASTER');
      await expectSoleHolder(lab.vip4, 'n1');
      const s2 = await a2.status();
      expect(s2).toMatchObject({ state: 'backup', masterAddress: n1().ipv4, masterPriority: 150 });
      expect(
        a2
          .logLines()
          .filter((l) => l.msg === 'state change')
          .pop(),
      ).toMatchObject({ from: 'master', to: 'backup', reason: 'higherPriority' });
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('IPv4 unicast (ballast peers, keepalived unicast_peer + unicast_src_ip)', () => {
    it('ballast 150 + keepalived 100: ballast holds', async () => {
      const [a1, k2] = await Promise.all([
        ballast(n1(), { priority: 150, peers: [n2().ipv4] }),
        keepalived(n2(), { priority: 100, unicastPeers: [n1().ipv4], unicastSrcIp: n2().ipv4 }),
      ]);
      await waitForHolder(lab, lab.vip4, 'n1', 5000);
      await k2.waitForState('BACKUP');
      await expectSoleHolder(lab.vip4, 'n1');
      const s1 = await a1.status();
      expect(s1).toMatchObject({ state: 'master', mode: 'unicast' });
      expect(s1.counters.dropped.checksum ?? 0).toBe(0);
      expect(s1.counters.dropped.notPeer ?? 0).toBe(0);
      expect(k2.state()).toBe('BACKUP');
      // keepalived really runs unicast (its socket is bound for the peer, not joined to 224.0.0.18)
      expect(kaLines(k2, /VRRP sockpool: .*unicast, address\(10\./)).toHaveLength(1);
      expect(kaLines(k2, /VRRP sockpool: .*multicast/)).toEqual([]);
    });

    it('keepalived 150 + ballast 100: keepalived holds', async () => {
      const [k1, a2] = await Promise.all([
        keepalived(n1(), { priority: 150, unicastPeers: [n2().ipv4], unicastSrcIp: n1().ipv4 }),
        ballast(n2(), { priority: 100, peers: [n1().ipv4] }),
      ]);
      await waitForHolder(lab, lab.vip4, 'n1', 5000);
      await k1.waitForState('MASTER');
      const w = await statusAround(a2, () => expectSoleHolder(lab.vip4, 'n1'));
      const s2 = w.last;
      expect(s2).toMatchObject({ state: 'backup', mode: 'unicast', masterAddress: n1().ipv4, masterPriority: 150 });
      expect(kaLines(k1, /VRRP sockpool: .*unicast, address\(10\./)).toHaveLength(1);
      expectAdverts('unicast, ballast backup', w, 'advertsReceived');
      expect(s2.counters.dropped.checksum ?? 0).toBe(0);
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('IPv6 (ff02::12 from link-local)', () => {
    it('ballast 150 + keepalived 100: ballast holds the IPv6 VIP', async () => {
      const [a1, k2] = await Promise.all([ballast(n1(), { priority: 150, family: 6 }), keepalived(n2(), { priority: 100, vips: [`${lab.vip6}/128`] })]);
      await waitForHolder(lab, lab.vip6, 'n1', 5000);
      await k2.waitForState('BACKUP');
      await expectSoleHolder(lab.vip6, 'n1');
      expect(await a1.status()).toMatchObject({ state: 'master', family: 6, primaryAddress: await n1().linkLocal() });
      expect(k2.state()).toBe('BACKUP');
    });

    it('keepalived 150 + ballast 100: keepalived holds the IPv6 VIP', async () => {
      const [k1, a2] = await Promise.all([keepalived(n1(), { priority: 150, vips: [`${lab.vip6}/128`] }), ballast(n2(), { priority: 100, family: 6 })]);
      await waitForHolder(lab, lab.vip6, 'n1', 5000);
      await k1.waitForState('MASTER');
      const w = await statusAround(a2, () => expectSoleHolder(lab.vip6, 'n1'));
      const s2 = w.last;
      expect(s2).toMatchObject({ state: 'backup', family: 6, masterAddress: await n1().linkLocal(), masterPriority: 150 });
      expectAdverts('IPv6, ballast backup', w, 'advertsReceived');
      expect(s2.counters.dropped.checksum ?? 0).toBe(0);
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('IPv4 checksum conventions (keepalived 2.2.7 includes the IPv4 pseudo-header)', () => {
    it('checksum: rfc5798 — both sides verify each other: one holder, no checksum drops', async () => {
      const [a1, k2] = await Promise.all([ballast(n1(), { priority: 150, checksum: 'rfc5798' }), keepalived(n2(), { priority: 100 })]);
      await waitForHolder(lab, lab.vip4, 'n1', 5000);
      await k2.waitForState('BACKUP');
      await expectSoleHolder(lab.vip4, 'n1');
      // ballast's adverts pass keepalived's checks: it stays BACKUP and logs no checksum complaint
      expect(k2.state()).toBe('BACKUP');
      expect(kaLines(k2, /checksum/i)).toEqual([]);
      expect((await a1.status()).counters.dropped.checksum ?? 0).toBe(0);
    });

    it("checksum: rfc9568 — keepalived 2.2.7 discards ballast's adverts (two holders); ballast still hears keepalived", async () => {
      /*
       * lower_prio_no_advert: without it keepalived restarts a MASTER's advert timer on every
       * packet it reads for its VRID, even one it then discards for its checksum (2.2.7,
       * vrrp_scheduler.c vrrp_dispatcher_read). With ballast's adverts arriving every 100 ms
       * (and one more answering each lower-priority advert) keepalived's own then go out only
       * when its timer beats ballast's next advert: 4 to 9 in 3 s instead of 30 (tcpdump on the
       * lab), and this test, which counted from ballast's start and then slept 1 s, saw 4 to 6
       * (fails in 3 of 4 runs beside the soak; one in a full suite run). With it keepalived
       * advertises every interval whatever it hears, and the count has a bound.
       */
      const [a1, k2] = await Promise.all([
        ballast(n1(), { priority: 150, checksum: 'rfc9568' }),
        keepalived(n2(), { priority: 100, extraInstance: ['lower_prio_no_advert'] }),
      ]);
      // keepalived never hears the higher priority, so its Master_Down_Timer fires; ballast
      // hears keepalived's lower priority and, as Active, discards it (RFC 9568 §6.4.3)
      await waitFor(
        () => lab.holders(lab.vip4),
        (h) => h.length === 2,
        { timeoutMs: 5000, what: 'both nodes to hold the VIP' },
      );
      await k2.waitForState('MASTER');
      const invalid = /\(VI_51\) Invalid VRRPv3 checksum/;
      // before the first read: every line after it is for an advert counted in advertsSent after it
      const logged0 = kaLines(k2, invalid).length;
      const w = await statusAround(a1, () => sleep(1000));
      const s1 = w.last;
      expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1', 'n2']);
      expect(s1.state).toBe('master');
      // keepalived's adverts (pseudo-header convention) are received, one per interval, and pass the checksum
      expectAdverts('checksum rfc9568, two holders', w, 'advertsReceived');
      expect(s1.counters.dropped.checksum ?? 0).toBe(0);
      // and keepalived says why it does not hear ballast: once for every advert ballast sent
      const sent = expectAdverts('checksum rfc9568, two holders', w, 'advertsSent');
      // its log reaches us through a pipe: wait for the lines to arrive
      await waitFor(
        () => kaLines(k2, invalid).length - logged0,
        (n) => n >= sent,
        { timeoutMs: 2000, what: `keepalived to log ${sent} invalid checksums` },
      );
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('a VRRPv2 keepalived on the same VRID', () => {
    it('ballast drops its packets as vrrpv2, counts them, and warns once', async () => {
      const [a1, k2] = await Promise.all([
        ballast(n1(), { priority: 150 }),
        /*
         * VRRPv2 intervals are whole seconds: it turns MASTER after ~3.6 s and advertises every
         * second. lower_prio_no_advert: see the rfc9568 checksum test. Without it ballast's
         * VRRPv3 adverts (which keepalived logs as "wrong version") restart its advert timer
         * every 100 ms: it sends the one advert of its MASTER entry and then nothing (ballast
         * counted 1 VRRPv2 drop in 3.5 s without it, 4 with it), and one run under load here
         * saw no drop at all in 3 s.
         */
        keepalived(n2(), { priority: 100, vrrpVersion: 2, advertIntervalS: 1, extraInstance: ['lower_prio_no_advert'] }),
      ]);
      // neither hears the other: both hold the VIP, which is why ballast must say so loudly
      await k2.waitForState('MASTER', { timeoutMs: 8000 });
      // two VRRPv2 adverts, to show the warning is logged once and not per packet: two intervals
      // (the first advert may come before ballast listens) and one more for the reads
      const s = await waitFor(
        () => a1.status(),
        (st) => (st.counters.dropped.vrrpv2 ?? 0) >= 2,
        { timeoutMs: 3000, intervalMs: 200, what: 'two VRRPv2 drops' },
      );
      expect(s.state).toBe('master');
      expect(s.counters.advertsReceived).toBe(0);
      expect(kaLines(k2, /wrong version\. Received 3 and expect 2/).length).toBeGreaterThan(0);
      const warnings = a1.logLines().filter((l) => typeof l.msg === 'string' && /VRRPv2/.test(l.msg));
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatchObject({ level: 'warn', source: n2().ipv4 });
    });
  });
});
