/**
 * The election runs on the agent's main thread; what keeps it punctual while that thread is
 * stalled is the VRRP socket's native advert pacer (native/advert_pacer.h) on the Active and the
 * socket drain before a late Master_Down_Timer acts on a Backup (engine.ts onTimer). Real agents
 * on the lab, their main thread blocked by lab/block-main-thread.ts (SIGURG: busy for
 * BALLAST_TEST_BLOCK_MS), adverts every 100 ms, captured with tcpdump where the Backup receives
 * them. Bounds come from the protocol: the pacer's first advert Advertisement_Interval plus its
 * slack (5 %, at least 3 ms: native/advert_pacer.h CoverSlackNs) after the engine's last, Master_Down_Interval (RFC 9568 §6.1) = 3 × 100 ms + Skew_Time, the
 * hold (engine.ts PACER_HOLD_MS).
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Lab, compiledScript } from '../../lab/lab.js';
import { waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { masterDownIntervalMs, skewTimeMs } from '../../src/vrrp/state.js';
import { PACER_HOLD_MS } from '../../src/vrrp/engine.js';
import { needs, sleep, useElectionLab, waitFor } from '../support/index.js';

const PREFIX = 'bpac';
const SUBNET = 157;
const INTERVAL_MS = 100;
/** The pacer's first advert after the engine's last, ms (native/advert_pacer.h CoverSlackNs). */
const FIRST_COVER_MS = INTERVAL_MS + Math.max(3, INTERVAL_MS / 20);
/** Slack for scheduling on 2 shared cores and tcpdump's timestamps. */
const SLACK_MS = 40;

describe.skipIf(needs('root'))('the advert pacer and the late-timer drain (root; skipped otherwise)', () => {
  let lab!: Lab;
  const { start } = useElectionLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2 }, (l) => (lab = l));
  const hook = (ms: number): Record<string, string> => ({
    NODE_OPTIONS: `--import ${pathToFileURL(compiledScript('block-main-thread')).href}`,
    BALLAST_TEST_BLOCK_MS: String(ms),
  });

  const transitions = async (a: LabAgent): Promise<number> => (await a.status()).counters.transitions;

  /** Blocks `a`'s main thread (its hook's BALLAST_TEST_BLOCK_MS); resolves with the ms it measured. */
  async function block(a: LabAgent): Promise<number> {
    const blocked = a.proc.waitForOutput(/"hook":"blocked","ms":(\d+)/, { timeoutMs: 10_000 });
    a.proc.kill('SIGURG');
    return Number((await blocked)[1]);
  }

  /** The times (ms) of n1's adverts as n2 receives them, over `during`. */
  async function captureAdverts(during: () => Promise<void>): Promise<number[]> {
    const cap = lab.spawn(lab.nodes[1]!.netns, [
      'tcpdump',
      '-i',
      'eth0',
      '-n',
      '-l',
      '--immediate-mode',
      '-tt',
      'ip proto 112 and src host',
      lab.nodes[0]!.ipv4,
    ]);
    await cap.waitForOutput(/listening on/, { timeoutMs: 5000, includeExisting: true });
    await sleep(300);
    await during();
    await sleep(300);
    await cap.stop('SIGINT', 3000);
    return [...cap.output().matchAll(/^(\d+\.\d+) IP /gm)].map((m) => Number(m[1]) * 1000);
  }
  const largestGap = (times: number[]): number => Math.max(...times.slice(1).map((t, i) => t - times[i]!));

  it("the holder's main thread blocked 500 ms: the pacer keeps adverts within the interval and its slack, zero transitions, and the agent says so", async () => {
    const [a1, a2] = await start([{ priority: 150, env: hook(500) }, { priority: 100 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    await sleep(300);
    const before = [await transitions(a1!), await transitions(a2!)];
    let ms = 0;
    const times = await captureAdverts(async () => {
      ms = await block(a1!);
    });
    expect(ms).toBeGreaterThanOrEqual(500);
    expect(times.length).toBeGreaterThanOrEqual(10);
    const gap = largestGap(times);
    // without the pacer the gap would be the stall, 500 ms, past the Backup's Master_Down_Interval
    expect(gap).toBeLessThanOrEqual(FIRST_COVER_MS + SLACK_MS);
    expect([await transitions(a1!), await transitions(a2!)]).toStrictEqual(before);
    const pacer = (await a1!.status()).timing!.pacer!;
    // the block's cover, and maybe one for a tick a few ms late on 2 shared cores
    expect(pacer.covers).toBeGreaterThanOrEqual(1);
    expect(pacer.covers).toBeLessThanOrEqual(3);
    // 500 ms of silence: the first cover at 105 ms, then one per 100 ms until the engine sends again
    expect(pacer.sent).toBeGreaterThanOrEqual(4);
    expect(pacer.sent).toBeLessThanOrEqual(8);
    expect(pacer.holds).toBe(0);
    expect(pacer.longestSilenceMs).toBeGreaterThanOrEqual(500);
    const said = a1!.logLines().filter((l) => l.msg === 'the election thread was silent; the advert pacer sent its adverts meanwhile');
    expect(said).toHaveLength(1);
    expect(Number(said[0]!.silentMs)).toBeGreaterThanOrEqual(500);
    console.log(`holder blocked ${ms} ms: ${times.length} adverts captured, largest gap ${gap.toFixed(1)} ms; the pacer sent ${pacer.sent}`);
  });

  it('with signed adverts (vrrp.auth) the pacer signs what it sends: the Backup accepts every one, zero transitions', async () => {
    const key = join(lab.dir, 'vrrp.key');
    writeFileSync(key, 'a shared key for the pacer lab, 32 or more bytes\n', { mode: 0o600 });
    const [a1, a2] = await start([
      { priority: 150, authKeyFile: key, env: hook(800) },
      { priority: 100, authKeyFile: key },
    ]);
    await waitForHolder(lab, lab.vip4, 'n1');
    await sleep(300);
    const before = [await transitions(a1!), await transitions(a2!)];
    const received = (await a2!.status()).counters.advertsReceived;
    const times = await captureAdverts(async () => {
      await block(a1!);
    });
    expect(largestGap(times)).toBeLessThanOrEqual(FIRST_COVER_MS + SLACK_MS);
    expect([await transitions(a1!), await transitions(a2!)]).toStrictEqual(before);
    const pacer = (await a1!.status()).timing!.pacer!;
    expect(pacer.sent).toBeGreaterThanOrEqual(5);
    const s2 = await a2!.status();
    // the pacer's HMAC is the one auth.ts verifies, its sequence numbers continue the engine's
    expect(s2.counters.dropped).not.toHaveProperty('authFailed');
    // one sequence counter for both senders: at most an advert taken just before the other's is late
    expect(s2.counters.dropped.replayed ?? 0).toBeLessThanOrEqual(1);
    expect(s2.counters.advertsReceived - received).toBeGreaterThanOrEqual(times.length - 1);
  });

  it("the holder's main thread blocked longer than the hold: the pacer stops, the Backup takes over within hold + Master_Down_Interval, the holder preempts back after", async () => {
    const stallMs = PACER_HOLD_MS + 1500;
    const [a1, a2] = await start([{ priority: 150, env: hook(stallMs) }, { priority: 100 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    await sleep(300);
    const t0 = Date.now();
    const blocked = block(a1!);
    await waitFor(
      () => a2!.status(),
      (s) => s.state === 'master',
      { timeoutMs: stallMs, intervalMs: 20, what: 'n2 to take over' },
    );
    const tookOverMs = Date.now() - t0;
    // the pacer covered the first PACER_HOLD_MS, then stopped: n2's Master_Down_Timer ran out after that
    const mdi = masterDownIntervalMs(100, INTERVAL_MS / 10);
    expect(tookOverMs).toBeGreaterThanOrEqual(PACER_HOLD_MS);
    expect(tookOverMs).toBeLessThanOrEqual(PACER_HOLD_MS + mdi + 250);
    expect(await blocked).toBeGreaterThanOrEqual(stallMs);
    // n1 wakes as Active, hears the lower-priority master and stays; n2 hears n1 and steps down
    await waitForHolder(lab, lab.vip4, 'n1', 2000);
    await waitFor(
      () => a2!.status(),
      (s) => s.state === 'backup',
      { timeoutMs: 2000, what: 'n2 to step down' },
    );
    expect((await a1!.status()).timing!.pacer!.holds).toBe(1);
    expect(a1!.logLines().filter((l) => String(l.msg).startsWith("the election thread was silent longer than the advert pacer's hold"))).toHaveLength(1);
    console.log(
      `holder blocked ${stallMs} ms: n2 took over ${tookOverMs} ms after the block began (hold ${PACER_HOLD_MS} ms + Master_Down_Interval ${mdi} ms, Skew_Time ${skewTimeMs(100, INTERVAL_MS / 10)} ms)`,
    );
  });

  it('vrrp.realtimePriority: the pacer thread (vrrp-pacer) runs SCHED_FIFO at that priority, the main thread stays SCHED_OTHER', async () => {
    const [a1] = await start([{ priority: 150, realtimePriority: 20 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    const pid = a1!.proc.pid;
    const tasks = readdirSync(`/proc/${pid}/task`);
    const named = tasks.filter((t) => readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').trim() === 'vrrp-pacer');
    expect(named).toHaveLength(1);
    const sched = (tid: string): { policy: number; prio: number } => {
      const text = readFileSync(`/proc/${pid}/task/${tid}/sched`, 'utf8');
      return { policy: Number(/^policy\s*:\s*(\d+)/m.exec(text)![1]), prio: Number(/^prio\s*:\s*(\d+)/m.exec(text)![1]) };
    };
    // SCHED_FIFO = 1 (sched(7)); the kernel's prio for real-time priority p is 99 − p
    expect(sched(named[0]!)).toStrictEqual({ policy: 1, prio: 99 - 20 });
    expect(sched(String(pid)).policy).toBe(0);
    expect(a1!.logLines().some((l) => l.msg === 'the advert pacer thread runs SCHED_FIFO (vrrp.realtimePriority)')).toBe(true);
  });

  it("a Backup's main thread blocked 500 ms (past its Master_Down_Interval): it reads the waiting adverts first, zero transitions", async () => {
    const [a1, a2] = await start([{ priority: 150 }, { priority: 100, env: hook(500) }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    await sleep(300);
    const before = [await transitions(a1!), await transitions(a2!)];
    const rescued = (await a2!.status()).timing!.rescued;
    expect(await block(a2!)).toBeGreaterThanOrEqual(500);
    await sleep(500);
    expect([await transitions(a1!), await transitions(a2!)]).toStrictEqual(before);
    // the timer that expired during the block found n1's adverts in the socket
    expect((await a2!.status()).timing!.rescued).toBe(rescued + 1);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
  });
});
