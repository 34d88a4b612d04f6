/**
 * Load balancing on the lab, part two: what happens to connections that already exist when a
 * backend dies or drains, the election policy driven by health (nftables mode and
 * `dataplane.vip: none`), and a first apply that fails. Real nftables, real conntrack, real
 * TLS checks against the stand-ins; adverts every 100 ms, checks every 200 ms, rise/fall 2.
 *
 * The long-lived client (lab/clients/longconn.ts) keeps ONE TLS connection through the VIP, pinned
 * to a chosen backend, and sends a request on it every 100 ms; the prober (lab/clients/prober.ts)
 * opens a new connection per request. Every bound below is derived from the config and printed
 * with the measured figure.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab, compiledScript, onJsonLines, probeOnce, runProber, type LabNode, type LabProcess } from '../../lab/lab.js';
import { agentConfig, cliPath, restoreNodes, startAgent, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import type { LongconnEvent, LongconnResult, LongconnSummary } from '../../lab/clients/longconn.js';
import type { ElectionStatusDocument as StatusDocument } from '../../src/observe/status.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bbl2';
const SUBNET = 214;
const INTERVAL_MS = 200;
const TIMEOUT_MS = 200;
const FALL = 2;
const RISE = 2;
const ADVERT_MS = 100;
/** the checker jitters each gap by ±10% */
const JITTER = 1.1;
/** RFC 9568 §6.1: 3 x Advertisement_Interval + Skew_Time, Skew_Time = (256 - priority) x interval / 256 */
const masterDownMs = (priority: number): number => 3 * ADVERT_MS + ((256 - priority) * ADVERT_MS) / 256;
/** what the agent allows for the first verdicts: (max(rise, fall) + 1) x interval + timeout */
const SETTLE_MS = (Math.max(RISE, FALL) + 1) * INTERVAL_MS + TIMEOUT_MS;

/** A longconn run in the client namespace: its lines as they arrive. */
interface LongconnRun {
  process: LabProcess;
  results(): LongconnResult[];
  events(): LongconnEvent[];
  /** resolves with the pinned event (rejects when the client exits or after timeoutMs) */
  pinned(timeoutMs: number): Promise<Extract<LongconnEvent, { event: 'pinned' }>>;
  /** SIGTERM; resolves with the summary (null when the client printed none) */
  stop(): Promise<LongconnSummary | null>;
}

describe.skipIf(needs('root'))('load balancing on the lab, established connections and policy (root; skipped otherwise)', () => {
  let lab: Lab;
  let agents: LabAgent[] = [];
  const clients: LabProcess[] = [];

  beforeAll(async () => {
    for (const s of ['longconn', 'prober'] as const) compiledScript(s); // refuses a missing or stale build
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false, apiservers: true });
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.stop('SIGKILL', 2000)));
    await Promise.all(agents.map((a) => a.stop('SIGTERM').catch(() => undefined)));
    agents = [];
    // an agent whose start timed out (startAgent threw) was never recorded: stop it by its PID,
    // or it holds its node's instance lock for the next test
    for (const n of lab.nodes) {
      for (const pid of agentPids(n)) {
        try {
          process.kill(pid, 'SIGTERM');
        } catch {
          // already gone
        }
      }
      await waitFor(
        async () => agentPids(n).length,
        (k) => k === 0,
        { timeoutMs: 10_000, intervalMs: 100, what: `no agent left in ${n.netns}` },
      );
    }
    await restoreNodes(lab);
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  /**
   * `ballast status --json` with up to 3 tries: the CLI is a fresh node process, and on a loaded
   * 2-core machine one can take longer than the 5 s the helper allows.
   */
  async function statusOf(agent: LabAgent): Promise<StatusDocument> {
    for (let i = 1; ; i++) {
      try {
        return await agent.status();
      } catch (err) {
        if (i >= 3) throw err;
      }
    }
  }

  /** PIDs of `ballast run` processes inside `node`'s namespace (all started by this file). */
  function agentPids(node: LabNode): number[] {
    const r = spawnSync('ip', ['netns', 'pids', node.netns], { encoding: 'utf8', timeout: 5000 });
    return (r.stdout ?? '')
      .split(/\s+/)
      .filter(Boolean)
      .map(Number)
      .filter((pid) => {
        try {
          const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
          return argv.some((a) => a.endsWith('/dist/src/cli.js')) && argv.includes('run');
        } catch {
          return false;
        }
      });
  }

  const vipUrl = (): string => `https://${lab.vip4}:6443/version`;

  /**
   * Three agents with load balancing (priorities 150, 100, 50), `extra(i)` merged into node i's
   * config; waits for n1 to hold the VIP and, unless told otherwise, every backend to be up on n1.
   */
  async function cluster(extra: (i: number) => Record<string, unknown> | undefined = () => undefined, o: { waitHealthy?: boolean } = {}): Promise<LabAgent[]> {
    // one after another: three node processes starting at once on 2 cores (with other labs
    // running) can miss the helper's 10 s start deadline
    const started: LabAgent[] = [];
    for (const [i, priority] of [150, 100, 50].entries()) {
      const x = extra(i);
      const a = await startAgent(lab, lab.nodes[i]!, { priority, balance: true, healthInterval: `${INTERVAL_MS}ms`, ...(x ? { extra: x } : {}) });
      started.push(a);
      agents.push(a);
    }
    if (o.waitHealthy !== false) {
      await waitForHolder(lab, lab.vip4, 'n1');
      await waitFor(
        () => statusOf(started[0]!),
        (s) => s.backends.length === 3 && s.backends.every((b) => b.healthy),
        { timeoutMs: 10_000, what: 'all backends up on n1' },
      );
    }
    return started;
  }

  /** Starts longconn in the client namespace (see lab/clients/longconn.ts). */
  function runLongconn(o: { node?: string; durationMs: number; timeoutMs: number; reconnect?: boolean }): LongconnRun {
    const proc = lab.spawn(
      lab.client.netns,
      [
        process.execPath,
        compiledScript('longconn'),
        '--url',
        vipUrl(),
        '--ca',
        lab.ca.certFile,
        '--interval',
        '100',
        '--duration',
        String(o.durationMs),
        '--timeout',
        String(o.timeoutMs),
        ...(o.node === undefined ? [] : ['--node', o.node, '--attempts', '60']),
        ...(o.reconnect ? ['--reconnect', '--max-connections', '3'] : []),
      ],
      { logFile: 'longconn.log' },
    );
    clients.push(proc);
    const results: LongconnResult[] = [];
    const events: LongconnEvent[] = [];
    let summary: LongconnSummary | null = null;
    onJsonLines<LongconnResult | LongconnEvent | LongconnSummary>(proc, (x) => {
      if ('summary' in x) summary = x;
      else if ('event' in x) events.push(x);
      else results.push(x);
    });
    return {
      process: proc,
      results: () => [...results],
      events: () => [...events],
      async pinned(timeoutMs) {
        await proc.waitForOutput(/"event":"pinned"/, { timeoutMs, includeExisting: true });
        await sleep(20);
        const p = events.find((e): e is Extract<LongconnEvent, { event: 'pinned' }> => e.event === 'pinned');
        if (!p) throw new Error(`longconn printed pinned but it was not parsed:\n${proc.output().slice(-2000)}`);
        return p;
      },
      async stop() {
        await proc.stop('SIGTERM', 8000);
        return summary;
      },
    };
  }

  /** The prober's clock now (ms since its start): the start time of its latest request. */
  /** Date.now() of the first JSON log line of `lines` matching `pred` (at or after `since`), or null. */
  function logTime(lines: Record<string, unknown>[], pred: (l: Record<string, unknown>) => boolean, since = 0): number | null {
    const l = lines.find((x) => typeof x.time === 'string' && Date.parse(x.time) >= since && pred(x));
    return l ? Date.parse(String(l.time)) : null;
  }

  async function ruleset(node: number): Promise<string> {
    return (await lab.exec(lab.nodes[node]!.netns, ['nft', 'list', 'table', 'ip', 'ballast'], { allowFail: true })).stdout;
  }

  /** Conntrack entries in `node` whose original destination is the VIP:6443, one line each. */
  async function vipFlows(node: number): Promise<string[]> {
    const r = await lab.exec(lab.nodes[node]!.netns, ['conntrack', '-L', '-p', 'tcp', '--orig-dst', lab.vip4, '--orig-port-dst', '6443'], { allowFail: true });
    return r.stdout.split('\n').filter((l) => l.includes('dport=6443'));
  }

  it('a backend node dies under an established connection: the client is reset within fall x interval + 1 s and reconnects to a live backend', async () => {
    const [a1] = await cluster();
    // n3: not the VIP holder, so the election does not move; only the data plane can save the client
    const victim = lab.nodes[2]!;
    const lc = runLongconn({ node: 'n3', durationMs: 12_000, timeoutMs: 5000, reconnect: true });
    const pinned = await lc.pinned(15_000);
    await sleep(600);
    const before = lc.results().filter((r) => r.conn === pinned.conn);
    expect(before.length).toBeGreaterThanOrEqual(4);
    expect(before.every((r) => r.ok && r.node === 'n3')).toBe(true);
    const flowsBefore = (await vipFlows(0)).filter((l) => l.includes(`src=${victim.ipv4}`));
    expect(flowsBefore.length).toBeGreaterThanOrEqual(1);

    // unplugged: to the client the connection just goes silent (no FIN, no RST from n3)
    const t0 = Date.now();
    await lab.linkDown(victim);
    const bound = FALL * INTERVAL_MS + 1000;
    const closed = await waitFor(
      async () => lc.events().find((e): e is Extract<LongconnEvent, { event: 'closed' }> => e.event === 'closed' && e.conn === pinned.conn),
      (e) => e !== undefined,
      { timeoutMs: 8000, intervalMs: 20, what: 'the pinned connection to end' },
    );
    const resetMs = closed!.at - t0;
    // the next connection, through the VIP, lands on a live backend
    const next = await waitFor(
      async () => lc.results().find((r) => r.conn > pinned.conn && r.ok),
      (r) => r !== undefined,
      {
        timeoutMs: 5000,
        intervalMs: 20,
        what: 'a request on a new connection to succeed',
      },
    );
    const reconnectMs = next!.at + next!.ms - t0;
    const failed = lc.results().find((r) => r.conn === pinned.conn && !r.ok);
    const st = await statusOf(a1!);
    const n3 = st.backends.find((b) => b.address === `${victim.ipv4}:6443`);
    const summary = await lc.stop();
    const flowsAfter = (await vipFlows(0)).filter((l) => l.includes(`src=${victim.ipv4}`));
    const log1 = a1!.logLines();
    const downAt = logTime(log1, (l) => l.msg === 'backend health' && l.backend === `${victim.ipv4}:6443` && l.to === 'down', t0);
    const flushAt = logTime(log1, (l) => l.msg === 'dead backend: its connections were reset' && l.backend === `${victim.ipv4}:6443`, t0);
    console.log(
      `dead backend under a live connection: n1 judged n3 down ${downAt === null ? '?' : downAt - t0} ms and reset its flows ${flushAt === null ? '?' : flushAt - t0} ms after the fault; ` +
        `client saw ${closed!.error ?? 'FIN'} ${resetMs} ms after the link went down (bound ${bound} ms); ` +
        `in-flight request failed with ${failed && !failed.ok ? failed.error : 'none'} after ${failed?.ms ?? '-'} ms; ` +
        `reconnect served by ${next!.node} ${reconnectMs} ms after the fault; n3 on n1: ${n3?.state} (${n3?.reason}); ` +
        `flushed entries ${st.dataplane.mode === 'nftables' ? st.dataplane.flushedEntries : '-'}; conntrack flows to n3 before ${flowsBefore.length}, after ${flowsAfter.length}; ` +
        `client summary ${JSON.stringify(summary)}`,
    );
    // a reset (or another error), not a clean close and not our own 5 s request timeout
    expect(closed!.error).not.toBeNull();
    expect(closed!.error).not.toBe('timeout');
    expect(resetMs).toBeLessThanOrEqual(bound);
    expect(next!.node).not.toBe('n3');
    expect(['n1', 'n2']).toContain(next!.node);
    expect(n3).toMatchObject({ state: 'down', healthy: false });
    expect(st.dataplane).toMatchObject({ mode: 'nftables', backends: [`${lab.nodes[0]!.ipv4}:6443`, `${lab.nodes[1]!.ipv4}:6443`] });
    if (st.dataplane.mode === 'nftables') expect(st.dataplane.flushedEntries).toBeGreaterThanOrEqual(1);
    expect(flowsAfter).toEqual([]);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
  });

  it('graceful shutdown: an unready backend gets no new connection within fall x interval, and an established one keeps working', async () => {
    const [a1] = await cluster();
    const victim = lab.nodes[2]!;
    const lc = runLongconn({ node: 'n3', durationMs: 15_000, timeoutMs: 2000 });
    const pinned = await lc.pinned(15_000);
    const prober = runProber(lab, { url: vipUrl(), intervalMs: 20, durationMs: 8000, timeoutMs: 500 });
    await sleep(800);
    // the last good check can have started just before the flip: the first failing one is up to
    // one jittered interval away, `fall` of them take fall x interval x 1.1; plus one check's
    // latency and one nft transaction (150 ms)
    const bound = FALL * INTERVAL_MS * JITTER + 150;
    const faultT = prober.now();
    const faultAt = Date.now();
    await lab.setReady(victim, false);
    await sleep(4000);
    const sum = await prober.stop();
    const heldFor = Date.now() - faultAt;
    const lcResults = lc.results();
    const lcEvents = lc.events();
    const lcSummary = await lc.stop();

    const servedByVictim = sum.results.filter((r) => r.ok && r.node === 'n3');
    const lastNew = servedByVictim.length ? Math.max(...servedByVictim.map((r) => r.t)) - faultT : null;
    const late = sum.results.filter((r) => r.t > faultT + bound);
    const lateOnVictim = late.filter((r) => r.ok && r.node === 'n3');
    const onPinned = lcResults.filter((r) => r.conn === pinned.conn && r.at > faultAt);
    const lastOnPinned = onPinned.length ? Math.max(...onPinned.map((r) => r.at)) - faultAt : 0;
    const st = await statusOf(a1!);
    console.log(
      `drain: last NEW connection served by n3 started ${lastNew === null ? 'never' : `${Math.round(lastNew)} ms`} after /readyz turned 500 (bound ${Math.round(bound)} ms); ` +
        `${late.length} new-connection requests after the bound, ${lateOnVictim.length} of them on n3, ${sum.failed} failed in all, nodes ${JSON.stringify(sum.nodes)}; ` +
        `established connection: ${onPinned.filter((r) => r.ok && r.node === 'n3').length}/${onPinned.length} requests ok on n3 over ${lastOnPinned} ms after the flip (watched ${heldFor} ms); ` +
        `client summary ${JSON.stringify(lcSummary)}`,
    );
    expect(sum.failed).toBe(0);
    expect(late.length).toBeGreaterThan(100);
    expect(lateOnVictim).toEqual([]);
    expect(late.filter((r) => r.ok && (r.node === 'n1' || r.node === 'n2')).length).toBe(late.length);
    // the established connection drained: every request on it answered by n3, for seconds
    expect(onPinned.length).toBeGreaterThanOrEqual(30);
    expect(onPinned.every((r) => r.ok && r.node === 'n3')).toBe(true);
    expect(lastOnPinned).toBeGreaterThanOrEqual(3500);
    expect(lcEvents.filter((e) => e.event === 'closed' && e.conn === pinned.conn)).toEqual([]);
    expect(st.backends.find((b) => b.address === `${victim.ipv4}:6443`)).toMatchObject({ state: 'down', healthy: false, reason: 'http 500' });
    expect(st.dataplane).toMatchObject({ mode: 'nftables', flushedEntries: 0 });
    expect(await ruleset(0)).not.toContain(`dnat to ${victim.ipv4}:6443`);
  });

  it('a draining backend whose node then dies: its drained connection is reset too, within fall x interval + 1 s', async () => {
    const [a1] = await cluster();
    const victim = lab.nodes[2]!;
    const lc = runLongconn({ node: 'n3', durationMs: 15_000, timeoutMs: 5000 });
    const pinned = await lc.pinned(15_000);
    await lab.setReady(victim, false);
    await waitFor(
      () => ruleset(0),
      (r) => !r.includes(`dnat to ${victim.ipv4}:6443`),
      { timeoutMs: 3000, what: 'n3 out of the ruleset' },
    );
    await sleep(500);
    const draining = lc.results().filter((r) => r.conn === pinned.conn);
    expect(draining.slice(-3).every((r) => r.ok && r.node === 'n3')).toBe(true);

    const t0 = Date.now();
    await lab.linkDown(victim);
    const bound = FALL * INTERVAL_MS + 1000;
    // bounded wait, past the bound, short of the client's own 5 s request timeout
    const closed = await waitFor(
      async () => lc.events().find((e): e is Extract<LongconnEvent, { event: 'closed' }> => e.event === 'closed' && e.conn === pinned.conn),
      (e) => e !== undefined || Date.now() - t0 > bound + 2000,
      { timeoutMs: bound + 3000, intervalMs: 20, what: 'the drained connection to end' },
    );
    const st = await statusOf(a1!);
    const n3 = st.backends.find((b) => b.address === `${victim.ipv4}:6443`);
    const flows = (await vipFlows(0)).filter((l) => l.includes(`src=${victim.ipv4}`));
    await lc.stop();
    console.log(
      `draining then dead: client ${closed ? `saw ${closed.error ?? 'FIN'} ${closed.at - t0} ms after the link went down` : `saw nothing within ${bound + 2000} ms`} (bound ${bound} ms); ` +
        `n3 on n1: ${n3?.state} (${n3?.reason}); flushed entries ${st.dataplane.mode === 'nftables' ? st.dataplane.flushedEntries : '-'}; conntrack flows to n3 left: ${flows.length}`,
    );
    // n1 does know n3 is gone now (its checks time out), not merely unready
    expect(n3?.reason).not.toBe('http 500');
    expect(closed).toBeDefined();
    expect(closed!.error).not.toBeNull();
    expect(closed!.at - t0).toBeLessThanOrEqual(bound);
    expect(flows).toEqual([]);
  });

  it('policy: a node whose checks all fail (a CA that signed none of them) advertises priority - weight and gives the VIP up', async () => {
    const pki = join(lab.dir, 'pki-other');
    mkdirSync(pki, { recursive: true, mode: 0o700 });
    const otherCa = join(pki, 'ca.crt');
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:P-256',
        '-nodes',
        '-keyout',
        join(pki, 'ca.key'),
        '-out',
        otherCa,
        '-days',
        '1',
        '-subj',
        '/CN=ballast lab other CA',
        '-addext',
        'basicConstraints=critical,CA:TRUE',
        '-addext',
        'keyUsage=critical,keyCertSign,cRLSign',
      ],
      { stdio: 'ignore', timeout: 10_000 },
    );
    const WEIGHT = 100;
    const t0 = Date.now();
    const [a1, a2] = await cluster(
      (i) =>
        i === 0
          ? {
              apiserver: {
                port: 6443,
                backends: lab.nodes.map((n) => `${n.ipv4}:6443`),
                health: { caFile: otherCa, interval: `${INTERVAL_MS}ms`, timeout: `${TIMEOUT_MS}ms`, rise: RISE, fall: FALL },
              },
              policy: { unhealthyPriorityWeight: WEIGHT },
            }
          : undefined,
      { waitHealthy: false },
    );
    const up = Date.now();
    await waitForHolder(lab, lab.vip4, 'n2', 10_000);
    const s1 = await waitFor(
      () => statusOf(a1!),
      (s) => s.effectivePriority === 150 - WEIGHT,
      { timeoutMs: 5000, what: 'n1 at priority 50' },
    );
    const s2 = await statusOf(a2!);
    // it stays there
    const holders: string[] = [];
    for (let i = 0; i < 10; i++) {
      holders.push((await lab.holders(lab.vip4)).map((n) => n.name).join(','));
      await sleep(200);
    }
    const via = await probeOnce(lab, vipUrl());
    // the agents' own clocks: when n1 started, when its verdicts were in, when n2 became master
    const log1 = a1!.logLines();
    const log2 = a2!.logLines();
    // the checks start right after the first apply (its log line)
    const started1 = logTime(log1, (l) => l.msg === 'data plane applied');
    const downs = lab.nodes.map((n) => logTime(log1, (l) => l.msg === 'backend health' && l.backend === `${n.ipv4}:6443` && l.to === 'down'));
    const verdicts1 = downs.every((d) => d !== null) ? Math.max(...(downs as number[])) : null;
    // n2 preempts only once its own verdicts are in (its policy holds preemption until then)
    const ups2 = lab.nodes.map((n) => logTime(log2, (l) => l.msg === 'backend health' && l.backend === `${n.ipv4}:6443` && l.to === 'up'));
    const ready2 = ups2.every((d) => d !== null) ? Math.max(...(ups2 as number[])) : null;
    const masters2 = log2.filter((l) => l.msg === 'state change' && l.to === 'master').map((l) => Date.parse(String(l.time)));
    const master2 = masters2.length ? Math.max(...masters2) : null;
    const states1 = log1
      .filter((l) => l.msg === 'state change')
      .map((l) => `${String(l.to)} (${String(l.reason)})${started1 === null ? '' : ` @${Date.parse(String(l.time)) - started1}`}`);
    // the verdicts: the first check within one interval of the checker's start, `fall` failures,
    // each a TLS handshake (SETTLE_MS covers it: the agent's own deadline); then, once n2's own
    // verdicts are in too, n2's down timer, plus 300 ms
    const boundVerdicts = SETTLE_MS;
    const boundTakeover = masterDownMs(100) + 300;
    console.log(
      `policy: (${up - t0} ms to start the three agents) n1 states ${states1.join(' → ')} (ms after its checks started); ` +
        `n1's verdicts all in ${verdicts1 === null || started1 === null ? '?' : verdicts1 - started1} ms after its checks started (bound ${boundVerdicts} ms); ` +
        `n2's own verdicts ${ready2 === null || verdicts1 === null ? '?' : ready2 - verdicts1} ms after n1's; ` +
        `n2 master ${master2 === null || verdicts1 === null || ready2 === null ? '?' : master2 - Math.max(verdicts1, ready2)} ms after both were in (bound ${Math.round(boundTakeover)} ms); ` +
        `n1 ${s1.state} at effectivePriority ${s1.effectivePriority}, reasons ${JSON.stringify([...new Set(s1.backends.map((b) => b.reason))])}; ` +
        `n2 ${s2.state} at ${s2.effectivePriority}; holders over 2 s: ${[...new Set(holders)].join(' ')}; via the VIP: ${via.ok ? via.node : (via as { error: string }).error}`,
    );
    expect(started1).not.toBeNull();
    expect(verdicts1).not.toBeNull();
    expect(master2).not.toBeNull();
    expect(ready2).not.toBeNull();
    expect(verdicts1! - started1!).toBeLessThanOrEqual(boundVerdicts);
    expect(master2! - Math.max(verdicts1!, ready2!)).toBeLessThanOrEqual(boundTakeover);
    expect(states1[states1.length - 1]).toMatch(/^backup /);
    expect(s1).toMatchObject({ state: 'backup', priority: 150, effectivePriority: 50, masterAddress: lab.nodes[1]!.ipv4 });
    expect(s1.backends).toHaveLength(3);
    for (const b of s1.backends) {
      expect(b).toMatchObject({ state: 'down', healthy: false });
      expect(b.reason).toMatch(/^tls: /);
    }
    // unready-but-alive (a TLS failure is an answer): drained, nothing flushed
    expect(s1.dataplane).toMatchObject({ mode: 'nftables', backends: [], flushedEntries: 0 });
    expect(s2).toMatchObject({ state: 'master', effectivePriority: 100 });
    expect(s2.backends.every((b) => b.healthy)).toBe(true);
    expect(new Set(holders)).toEqual(new Set(['n2']));
    expect(via).toMatchObject({ ok: true });
  });

  it('dataplane.vip none: no nftables table; the holder’s own apiserver stops and the VIP moves within (fall + 1) x interval + Master_Down_Interval', async () => {
    const WEIGHT = 100;
    const [a1, a2] = await cluster(() => ({ dataplane: { vip: 'none' }, policy: { unhealthyPriorityWeight: WEIGHT } }));
    const tables = await Promise.all(lab.nodes.map(async (n) => (await lab.exec(n.netns, ['nft', 'list', 'tables'])).stdout));
    const s1 = await statusOf(a1!);
    const before = await probeOnce(lab, vipUrl());
    expect(tables.every((t) => !/\bballast\b/.test(t))).toBe(true);
    expect(s1.dataplane).toEqual({ mode: 'none' });
    expect(s1.effectivePriority).toBe(150);
    // no DNAT: the holder's own apiserver answers on the VIP
    expect(before).toMatchObject({ ok: true, node: 'n1' });

    const mdi2 = masterDownMs(100);
    // `fall` failed checks (ECONNREFUSED is immediate) within (fall + 1) jittered intervals, then n2's down timer
    const bound = (FALL + 1) * INTERVAL_MS + mdi2 + 500;
    const t0 = Date.now();
    await lab.stopApiserver(lab.nodes[0]!);
    await waitForHolder(lab, lab.vip4, 'n2', 10_000);
    const movedMs = Date.now() - t0;
    const s1after = await statusOf(a1!);
    const s2after = await statusOf(a2!);
    const after = await probeOnce(lab, vipUrl());

    // the local apiserver back: n1 preempts again
    await lab.startApiserver(lab.nodes[0]!);
    const t1 = Date.now();
    const backBound = (RISE + 1) * INTERVAL_MS + masterDownMs(150) + 1000;
    await waitForHolder(lab, lab.vip4, 'n1', 10_000);
    const backMs = Date.now() - t1;
    const tablesAfter = await Promise.all(lab.nodes.map(async (n) => (await lab.exec(n.netns, ['nft', 'list', 'tables'])).stdout));
    console.log(
      `mode none: VIP moved to n2 ${movedMs} ms after n1's apiserver stopped (bound ${Math.round(bound)} ms; n2 Master_Down_Interval ${s2after.masterDownIntervalMs} ms); ` +
        `n1 then ${s1after.state} at ${s1after.effectivePriority}; via the VIP: ${after.ok ? after.node : (after as { error: string }).error}; ` +
        `back on n1 ${backMs} ms after its apiserver answered again (bound ${Math.round(backBound)} ms); tables: ${JSON.stringify(tablesAfter)}`,
    );
    expect(movedMs).toBeLessThanOrEqual(bound);
    expect(s1after).toMatchObject({ state: 'backup', effectivePriority: 150 - WEIGHT });
    expect(s1after.backends.find((b) => b.address === `${lab.nodes[0]!.ipv4}:6443`)).toMatchObject({ state: 'down', healthy: false });
    expect(s2after).toMatchObject({ state: 'master', effectivePriority: 100 });
    expect(after).toMatchObject({ ok: true, node: 'n2' });
    expect(backMs).toBeLessThanOrEqual(backBound);
    expect(tablesAfter.every((t) => !/\bballast\b/.test(t))).toBe(true);
  });

  describe('a first nftables apply that fails', () => {
    /** Runs `ballast run` on n1 with PATH = a directory holding `ip` and, optionally, a fake `nft`. */
    async function brokenRun(
      name: string,
      fakeNft: string | null,
    ): Promise<{ code: number | null; output: string; heldVip: boolean; ms: number; lockBefore: boolean; masterMs: number | null }> {
      const n1 = lab.nodes[0]!;
      const bin = join(lab.dir, `bin-${name}`);
      mkdirSync(bin, { recursive: true });
      // `ip netns exec` is looked up through the child's PATH; the agent then runs nft by name
      if (!existsSync(join(bin, 'ip'))) symlinkSync('/usr/sbin/ip', join(bin, 'ip'));
      if (fakeNft !== null) {
        writeFileSync(join(bin, 'nft'), fakeNft);
        chmodSync(join(bin, 'nft'), 0o755);
      }
      const configPath = join(lab.dir, `n1-broken-${name}.yaml`);
      writeFileSync(configPath, agentConfig(lab, n1, { priority: 150, balance: true, healthInterval: `${INTERVAL_MS}ms` }));
      const t0 = Date.now();
      const proc = lab.spawn(n1.netns, [process.execPath, cliPath(), 'run', '--config', configPath], { env: { PATH: bin }, logFile: `n1-broken-${name}.log` });
      clients.push(proc);
      let heldVip = false;
      let lockBefore = false;
      let exited = false;
      void proc.exited.then(() => (exited = true));
      // watch the VIP while it runs (bounded: 200 x ~50 ms, or until it exits)
      for (let i = 0; i < 200 && !exited; i++) {
        if ((await lab.holders(lab.vip4)).some((n) => n.name === 'n1')) heldVip = true;
        if (!lockBefore && (await lab.exec(n1.netns, ['cat', '/proc/net/unix'])).stdout.includes('@ballast:eth0:ipv4:vrid51')) lockBefore = true;
        await sleep(30);
      }
      const code = await Promise.race([proc.exited, sleep(12_000).then(() => 'hung' as const)]);
      if (code === 'hung') throw new Error(`ballast run did not exit within 12 s of a failed apply:\n${proc.output()}`);
      const lines = proc
        .output()
        .split('\n')
        .flatMap((l) => {
          try {
            return [JSON.parse(l) as Record<string, unknown>];
          } catch {
            return [];
          }
        });
      const start = logTime(lines, (l) => l.msg === 'starting');
      const master = logTime(lines, (l) => l.msg === 'state change' && l.to === 'master');
      const masterMs = start === null || master === null ? null : master - start;
      return { code, output: proc.output(), heldVip, ms: Date.now() - t0, lockBefore, masterMs };
    }

    /** n2 (100) and n3 (50) with load balancing, n2 holding the VIP; n1 has no agent. */
    async function othersOnly(): Promise<void> {
      for (const [i, priority] of [100, 50].entries())
        agents.push(await startAgent(lab, lab.nodes[i + 1]!, { priority, balance: true, healthInterval: `${INTERVAL_MS}ms` }));
      await waitForHolder(lab, lab.vip4, 'n2');
    }

    /** What a failed start must not leave in n1: the VIP, the lock, a table, a process. */
    async function leftovers(): Promise<{ vip: boolean; lock: boolean; table: boolean; procs: string[] }> {
      const n1 = lab.nodes[0]!;
      const vip = (await lab.addresses(n1)).some((a) => a.address === lab.vip4);
      const lock = (await lab.exec(n1.netns, ['cat', '/proc/net/unix'])).stdout.includes('@ballast:eth0:ipv4:vrid51');
      const table = /\bballast\b/.test((await lab.exec(n1.netns, ['nft', 'list', 'tables'])).stdout);
      const standin = lab.apiserver(n1)?.pid;
      const pids = execFileSync('ip', ['netns', 'pids', n1.netns], { encoding: 'utf8', timeout: 5000 }).split(/\s+/).filter(Boolean).map(Number);
      const procs: string[] = [];
      for (const pid of pids) {
        if (pid === standin) continue;
        try {
          procs.push(readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim());
        } catch {
          // gone meanwhile
        }
      }
      return { vip, lock, table, procs };
    }

    it('nft not on PATH: exits with BALLAST_E_DATAPLANE and status 1, no VIP, no lock, no table behind', async () => {
      await othersOnly();
      const r = await brokenRun('nonft', null);
      const left = await leftovers();
      console.log(
        `no nft: exit ${r.code} after ${r.ms} ms; held the VIP meanwhile: ${r.heldVip} (master ${r.masterMs ?? 'never'} ms after its start); lock seen while running: ${r.lockBefore}; left: ${JSON.stringify(left)}; stderr: ${r.output
          .split('\n')
          .filter((l) => l.includes('BALLAST_E_'))
          .join(' | ')}`,
      );
      expect(r.code).toBe(1);
      expect(r.output).toMatch(/ballast: cannot program nftables: .*\(BALLAST_E_DATAPLANE\)/);
      expect(left).toEqual({ vip: false, lock: false, table: false, procs: [] });
      expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n2']);
      // nothing stale: a normal agent starts in the same namespace and takes the VIP back
      agents.push(await startAgent(lab, lab.nodes[0]!, { priority: 150, balance: true, healthInterval: `${INTERVAL_MS}ms` }));
      await waitForHolder(lab, lab.vip4, 'n1');
    });

    it('nft fails after 1 s (the election would have run meanwhile): exits with BALLAST_E_DATAPLANE, never took the VIP, leaves nothing behind', async () => {
      await othersOnly();
      const fake = '#!/bin/sh\n/usr/bin/sleep 1\necho "Error: simulated nft failure (ballast test)" >&2\nexit 1\n';
      const r = await brokenRun('slownft', fake);
      const left = await leftovers();
      const holders = (await lab.holders(lab.vip4)).map((n) => n.name);
      console.log(
        `slow failing nft: exit ${r.code} after ${r.ms} ms (n1 Master_Down_Interval ${masterDownMs(150).toFixed(1)} ms); held the VIP meanwhile: ${r.heldVip} (master ${r.masterMs ?? 'never'} ms after its start); ` +
          `lock seen while running: ${r.lockBefore}; left: ${JSON.stringify(left)}; holders after: ${holders.join(',')}; ` +
          `stderr: ${r.output
            .split('\n')
            .filter((l) => l.includes('BALLAST_E_'))
            .join(' | ')}`,
      );
      expect(r.code).toBe(1);
      expect(r.lockBefore).toBe(true);
      expect(r.output).toMatch(/ballast: cannot program nftables: .*simulated nft failure.*\(BALLAST_E_DATAPLANE\)/);
      expect(left).toEqual({ vip: false, lock: false, table: false, procs: [] });
      expect(holders).toEqual(['n2']);
      // "until its data plane is programmed, a node does not preempt" (src/policy.ts)
      expect(r.heldVip).toBe(false);
    });
  });
});
