/**
 * ballast's own rolling upgrade, on a 3-node lab with load balancing: the agent
 * is restarted (SIGTERM, then a new `ballast run` with the same file) on each node in turn — the
 * master first, then the new master, then the remaining backup — while a client requests
 * https://VIP:6443/version every 10 ms, each on a new connection, and a client in n3's cgroup
 * requests https://127.0.0.1:7443/version (n3's eBPF local endpoint) every 10 ms.
 *
 * Priorities: n1 = n2 = 100, n3 = 90 (n2 is master: equal priority, higher address). Asserted:
 *   - each master restart costs the VIP client one outage of at most the new master's Skew_Time
 *     (RFC 9568 §6.4.2: the resigning master sends priority 0, a backup waits Skew_Time) + one
 *     Advertisement_Interval (the resign advert and the new master's first advert and gratuitous
 *     ARP are sent at the same moment; one interval covers the timer granularity) + 2 probe
 *     intervals (a request due just before / after the switch) + a scheduling margin;
 *   - the restarted node comes back as backup with equal (n2, n1) or lower (n3) priority and the
 *     VIP does not move again: no state change to master anywhere after the takeover;
 *   - a backup restart (n3) costs the VIP client nothing;
 *   - n3's local-endpoint client gets no failed NEW connection across n3's restart: a clean stop
 *     leaves the eBPF programs attached (dataplane.keepOnStop default: localEndpoint) and the
 *     next start adopts them with their backends;
 *   - and none across the other nodes' restarts either: a booting agent starves the 2 shared
 *     cores and a stand-in apiserver answers late (measured 160-380 ms, over the 200 ms check
 *     deadline); its kernel accepted the connections, so its checks fail as `slow` (unready: new
 *     connections avoid it, in-flight ones finish), never `timeout` (dead: n3's local endpoint
 *     would destroy the in-flight requests, ECONNABORTED).
 * Adverts every 100 ms, checks every 200 ms, rise/fall 2.
 */
import { existsSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab, runProber, type ProberRun } from '../../lab/lab.js';
import { cliPath, connectFrom, startAgent, waitForHolder, type AgentSettings, type LabAgent } from '../../lab/cluster.js';
import { pinDirFor } from '../../src/dataplane/ebpf.js';
import { cgroupPrograms } from '../../src/native.js';
import { teardownFullAgentLab } from '../support/leftovers.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'brrst';
const SUBNET = 247;
const ADVERT_MS = 100;
const INTERVAL_MS = 200;
const PROBE_MS = 10;
/** Scheduling on 2 cores (the agents, nft, three probers' TLS handshakes). */
const MARGIN_MS = 150;
/** RFC 9568 §6.1 Skew_Time: ((256 − priority) × Master_Adver_Interval) / 256. */
const skewMs = (priority: number): number => ((256 - priority) * ADVERT_MS) / 256;
const PRIORITIES = [100, 100, 90];
/**
 * Each request's deadline: 1 s, not the lab's usual 250 ms. A restarting agent (Node's boot, its
 * first TLS checks) starves the 2 shared cores for a moment, and a 250 ms deadline then fails
 * requests to paths no agent touched (measured: the local endpoint's client timed out while
 * another node's agent started). What a restart may break fails at once (a reset, a refusal).
 */
const PROBE_TIMEOUT_MS = 1000;

describe.skipIf(needs('bpf'))('rolling restart of ballast itself (root; skipped otherwise)', () => {
  let lab: Lab;
  let cgroup: string;
  let pinDir: string;
  const agents: (LabAgent | undefined)[] = [];
  const probers: ProberRun[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false, apiservers: true });
    cgroup = await lab.cgroup(lab.nodes[2]!);
    pinDir = pinDirFor(cgroup);
  });
  afterEach(async () => {
    for (const p of probers.splice(0)) await p.stop().catch(() => undefined);
    await Promise.all(agents.splice(0).map((a) => a?.stop('SIGTERM').catch(() => undefined)));
  });
  // the pins (a failed case may leave them), their lock file and empty parent, then the lab
  afterAll(() => teardownFullAgentLab({ lab, ...(pinDir === undefined ? {} : { pinDir }) }));

  const settingsOf = (i: number): AgentSettings => ({
    priority: PRIORITIES[i]!,
    advertisementInterval: `${ADVERT_MS}ms`,
    balance: true,
    healthInterval: `${INTERVAL_MS}ms`,
    // n3 serves the local endpoint in its own cgroup (eBPF: the machine's bpffs and cgroup2)
    ...(i === 2 ? { hostMounts: true, extra: { localEndpoint: { address: '127.0.0.1:7443', cgroup } } } : {}),
  });
  const start = async (i: number): Promise<LabAgent> => {
    const a = await startAgent(lab, lab.nodes[i]!, settingsOf(i));
    agents[i] = a;
    return a;
  };
  /** Waits until the agent on node `i` is settled: every backend healthy, advertising its priority. */
  const settled = (i: number): Promise<unknown> =>
    waitFor(
      () => agents[i]!.status(),
      (s) => s.backends.length === 3 && s.backends.every((b) => b.healthy) && s.effectivePriority === PRIORITIES[i],
      {
        timeoutMs: 10_000,
        intervalMs: 50,
        what: `n${i + 1} settled`,
      },
    );
  /** The 'state change' log lines to master of every running agent, after `since` (ms epoch). */
  const masterChanges = (since: number): string[] =>
    agents.flatMap((a) =>
      a
        ? a
            .logLines()
            .filter((l) => l.msg === 'state change' && l.to === 'master' && Date.parse(String(l.time)) >= since)
            .map(() => a.node.name)
        : [],
    );

  it('restarting every agent in turn: one Skew_Time window per master restart, no VIP move when a node comes back, no failed new connection on the local endpoint', async () => {
    for (const i of [1, 0, 2]) await start(i);
    await waitForHolder(lab, lab.vip4, 'n2', 10_000);
    for (const i of [0, 1, 2]) await settled(i);
    await waitFor(
      () => agents[2]!.anyStatus(),
      (s) => s.local.mode === 'ebpf' && s.local.backends.length === 3,
      { timeoutMs: 5000, what: 'n3 local endpoint with 3 backends' },
    );

    const vip = runProber(lab, {
      url: `https://${lab.vip4}:6443/version`,
      intervalMs: PROBE_MS,
      durationMs: 120_000,
      timeoutMs: PROBE_TIMEOUT_MS,
      logFile: 'prober-vip.log',
    });
    const local = runProber(lab, {
      url: 'https://127.0.0.1:7443/version',
      intervalMs: PROBE_MS,
      durationMs: 120_000,
      timeoutMs: PROBE_TIMEOUT_MS,
      netns: lab.nodes[2]!.netns,
      cgroup,
      logFile: 'prober-local.log',
    });
    probers.push(vip, local);
    await waitFor(
      async () => vip.results().length > 20 && local.results().length > 20,
      (ok) => ok,
      { timeoutMs: 10_000, what: 'both probers running' },
    );
    // the local prober's clock as an epoch (to within one probe interval): to place agent log lines on it
    const localEpoch = Date.now() - local.now();

    /** Restarts node i's agent; returns the VIP prober's window [from, to] (its clock) around it. */
    const restart = async (i: number): Promise<{ from: number; to: number; masterChangesAfterReturn: string[] }> => {
      const from = vip.now();
      expect(await agents[i]!.stop('SIGTERM')).toBe(0);
      const a = await start(i);
      await settled(i);
      // back, settled: nothing may move from here on; give it the settle time plus a second
      const back = Date.now();
      expect((await a.status()).state).toBe('backup');
      await sleep(1500);
      return { from, to: vip.now(), masterChangesAfterReturn: masterChanges(back) };
    };

    const r2 = await restart(1);
    const holderAfter2 = (await lab.holders(lab.vip4)).map((n) => n.name);
    const r1 = await restart(0);
    const holderAfter1 = (await lab.holders(lab.vip4)).map((n) => n.name);
    const localBefore3 = local.now();
    const programsBefore = cgroupPrograms(cgroup).map((p) => [p.attachType, p.ids.length]);
    const r3 = await restart(2);
    const localAfter3 = local.now();
    const holderAfter3 = (await lab.holders(lab.vip4)).map((n) => n.name);
    const programsAfter = cgroupPrograms(cgroup).map((p) => [p.attachType, p.ids.length]);
    const [vipSum, localSum] = await Promise.all([vip.stop(), local.stop()]);
    probers.splice(0);

    const within = (w: { from: number; to: number }) => (o: { from: number }) => o.from >= w.from && o.from <= w.to;
    const out2 = vipSum.outages.filter(within(r2));
    const out1 = vipSum.outages.filter(within(r1));
    const out3 = vipSum.outages.filter(within(r3));
    const localFailed3 = localSum.results.filter((r) => !r.ok && r.t >= localBefore3 && r.t <= localAfter3);
    const bound = skewMs(100) + ADVERT_MS + 2 * PROBE_MS + MARGIN_MS;
    const fmt = (os: { ms: number; failed: number }[]): string => (os.length === 0 ? 'none' : os.map((o) => `${o.ms} ms (${o.failed} failed)`).join(', '));
    console.log(
      `rolling restart: VIP client ${vipSum.requests} requests, ${vipSum.failed} failed; outage at n2's restart (master): ${fmt(out2)}; at n1's (master): ${fmt(out1)}; at n3's (backup): ${fmt(out3)}; ` +
        `bound per master restart ${bound.toFixed(1)} ms (Skew_Time(100) ${skewMs(100).toFixed(1)} + interval ${ADVERT_MS} + 2 x ${PROBE_MS} + ${MARGIN_MS}); ` +
        `holders after each: ${holderAfter2}, ${holderAfter1}, ${holderAfter3}; master changes after each return: ${JSON.stringify([r2.masterChangesAfterReturn, r1.masterChangesAfterReturn, r3.masterChangesAfterReturn])}; ` +
        `local endpoint client on n3: ${localSum.requests} requests, ${localSum.failed} failed (${localFailed3.length} during n3's restart); cgroup programs before/after: ${JSON.stringify(programsBefore)} ${JSON.stringify(programsAfter)}`,
    );
    const failures = (sum: typeof vipSum): string =>
      sum.results
        .filter((r) => !r.ok)
        .map((r) => `${Math.round(r.t)}:${(r as { error: string }).error}:${Math.round(r.ms)}`)
        .join(' ');
    console.log(
      `windows (prober ms): n2 ${Math.round(r2.from)}-${Math.round(r2.to)}, n1 ${Math.round(r1.from)}-${Math.round(r1.to)}, n3 ${Math.round(r3.from)}-${Math.round(r3.to)}; VIP failures (t:error:ms): ${failures(vipSum)}; local failures: ${failures(localSum)}`,
    );
    if (localSum.failed > 0) {
      // what n3's agent decided about its backends (verdicts, resets, passive detection), on the local prober's clock
      // (the log file: both of n3's runs, the one stopped by its restart too)
      const lines = readFileSync(join(lab.dir, 'n3-ballast.log'), 'utf8')
        .split('\n')
        .flatMap((l) => {
          try {
            return [JSON.parse(l) as Record<string, unknown>];
          } catch {
            return [];
          }
        });
      const judged = lines.filter((l) => /dead|verdict|reset|backend health|taken out/.test(String(l.msg)));
      console.log(
        `n3 agent, health lines (local prober ms): ${judged.map((l) => `${Math.round(Date.parse(String(l.time)) - localEpoch)} ${JSON.stringify({ ...l, level: undefined, time: undefined, pid: undefined })}`).join('\n  ')}`,
      );
    }
    // each master restart: its failed requests all fall in one window no longer than the bound,
    // from the first failure's start to the last one's end (the resign resets the requests in
    // flight on the old holder while others already reach the new one, so the prober may see
    // two short outages with a success between them: still one Skew_Time window)
    const span = (os: { from: number; to: number }[]): number => (os.length === 0 ? 0 : Math.max(...os.map((o) => o.to)) - Math.min(...os.map((o) => o.from)));
    expect(span(out2)).toBeLessThanOrEqual(bound);
    expect(span(out1)).toBeLessThanOrEqual(bound);
    // a backup's restart costs the VIP client nothing
    expect(out3).toStrictEqual([]);
    // the takeovers went to the other equal-priority node, and nobody took the VIP back
    expect(holderAfter2).toStrictEqual(['n1']);
    expect(holderAfter1).toStrictEqual(['n2']);
    expect(holderAfter3).toStrictEqual(['n2']);
    expect([r2, r1, r3].map((r) => r.masterChangesAfterReturn)).toStrictEqual([[], [], []]);
    // n3's node-local clients: no failed new connection across its agent's restart
    expect(localFailed3).toStrictEqual([]);
    expect(localSum.failed).toBe(0);
    expect(programsAfter).toStrictEqual([
      ['connect4', 1],
      ['connect6', 1],
      ['getpeername4', 1],
      ['getpeername6', 1],
    ]);
  }, 180_000);

  it('a stop keeps the local endpoint serving (a switch to the proxy removes it at start); `ballast cleanup` is the uninstall: refuses what a running agent holds (exit 2), then removes pins, lock file, table and VIP', async () => {
    const n3 = lab.nodes[2]!;
    const a3 = await start(2);
    await waitFor(
      () => a3.anyStatus(),
      (s) => s.local.mode === 'ebpf' && s.local.backends.length === 3,
      { timeoutMs: 10_000, what: 'n3 local endpoint with 3 backends' },
    );
    const cleanup = (): Promise<{ code: number; stdout: string; stderr: string }> =>
      lab.exec(n3.netns, [process.execPath, cliPath(), 'cleanup', '--config', a3.configPath], { hostMounts: true, allowFail: true, timeoutMs: 30_000 });
    const lockFile = `/run/ballast/${basename(pinDir)}.lock`;

    // an agent runs: its pins, table and VIP lock are left alone
    const refused = await cleanup();
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('BALLAST_E_ALREADY_RUNNING');
    expect(refused.stderr).toContain(`eBPF pins ${pinDir}`);
    expect(existsSync(pinDir)).toBe(true);
    expect((await lab.exec(n3.netns, ['nft', 'list', 'table', 'ip', 'ballast'], { allowFail: true })).code).toBe(0);

    // a clean stop: the programs stay attached and keep serving new connections
    expect(await a3.stop('SIGTERM')).toBe(0);
    agents[2] = undefined;
    expect(cgroupPrograms(cgroup).map((p) => [p.attachType, p.ids.length])).toStrictEqual([
      ['connect4', 1],
      ['connect6', 1],
      ['getpeername4', 1],
      ['getpeername6', 1],
    ]);
    const served = await connectFrom(lab, n3, { address: '127.0.0.1', port: 7443, tls: true, count: 10, cgroup });
    expect(served).toMatchObject({ ok: 10 });
    expect((await lab.exec(n3.netns, ['nft', 'list', 'table', 'ip', 'ballast'], { allowFail: true })).code).not.toBe(0);

    // the same node now configured for the proxy: the kept programs would shadow it, so its start removes them
    const proxied = await startAgent(lab, n3, {
      ...settingsOf(2),
      extra: { localEndpoint: { address: '127.0.0.1:7443', cgroup }, dataplane: { local: 'proxy', keepOnStop: 'none' } },
    });
    agents[2] = proxied;
    expect(existsSync(pinDir)).toBe(false);
    expect(proxied.logLines().some((l) => l.msg === 'eBPF pins an earlier run left removed')).toBe(true);
    await waitFor(
      () => proxied.anyStatus(),
      (s) => s.local.mode === 'proxy' && s.local.backends.length === 3,
      { timeoutMs: 10_000, what: 'n3 proxy with 3 backends' },
    );
    expect((await connectFrom(lab, n3, { address: '127.0.0.1', port: 7443, tls: true, count: 5, cgroup })).ok).toBe(5);
    expect(await proxied.stop('SIGTERM')).toBe(0);
    agents[2] = undefined;
    // and back to ebpf, stopped: the pins are kept again, for cleanup to find
    const again3 = await start(2);
    await waitFor(
      () => again3.anyStatus(),
      (s) => s.local.mode === 'ebpf' && s.local.backends.length === 3,
      { timeoutMs: 10_000, what: 'n3 ebpf again' },
    );
    expect(await again3.stop('SIGTERM')).toBe(0);
    agents[2] = undefined;
    expect(existsSync(pinDir)).toBe(true);

    // a VIP a killed master left, for cleanup to find
    await lab.exec(n3.netns, ['ip', 'addr', 'add', `${lab.vip4}/32`, 'dev', 'eth0']);
    const done = await cleanup();
    const again = await cleanup();
    console.log(`cleanup after a stop: ${done.stdout.trim().split('\n').join(' | ')}; second run: ${again.stdout.trim()}`);
    expect(done.code).toBe(0);
    expect(done.stdout).toContain(`removed VIP ${lab.vip4}/32 on eth0`);
    expect(done.stdout).toContain(`removed eBPF pins ${pinDir}`);
    expect(existsSync(pinDir)).toBe(false);
    expect(existsSync(lockFile)).toBe(false);
    expect(cgroupPrograms(cgroup).filter((p) => p.ids.length > 0)).toStrictEqual([]);
    expect((await lab.addresses(n3)).some((a) => a.address === lab.vip4)).toBe(false);
    // nothing rewritten any more: 7443 is refused (nothing listens)
    expect((await connectFrom(lab, n3, { address: '127.0.0.1', port: 7443, count: 2, cgroup })).errors).toStrictEqual({ ECONNREFUSED: 2 });
    expect(again).toMatchObject({ code: 0, stdout: 'nothing of ballast left on this node\n' });
  }, 60_000);
});
