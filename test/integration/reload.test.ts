/**
 * Reload without a failover, on the lab: two real agents (n1 priority 200,
 * n2 priority 100), adverts every 100 ms, the nftables VIP data plane over both nodes' stand-in
 * apiservers. Each case rewrites the agents' files and sends SIGHUP (or runs `ballast reload`),
 * and watches what must not happen: a transition, an advert gap, a VIP that stays going missing,
 * an established connection dropped.
 *
 * Adverts are captured with tcpdump in n2's namespace (n1's adverts as the backup receives them);
 * gaps are bounded by the interval in force + MARGIN_MS (the faults test's bound for a 100 ms
 * rhythm on 2 cores). The VIP that stays is watched with `ip monitor address` in n1's namespace:
 * every deletion of an address is an event there, however short.
 */
import { writeFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab, LabNode, LabProcess } from '../../lab/lab.js';
import {
  agentConfig,
  cliPath,
  resetElectionLab,
  startAgent,
  startAgents,
  startLongconn,
  waitForHolder,
  type AgentSettings,
  type LabAgent,
} from '../../lab/cluster.js';
import type { ElectionStatusDocument } from '../../src/observe/status.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'brld';
const SUBNET = 244;
/** Slack on an advert gap: the worker's timer, tcpdump's timestamps, 2 shared cores. */
const MARGIN_MS = 60;

const skip = needs('root', 'tcpdump');

describe.skipIf(skip)(`reload on the lab${skip ? `: SKIPPED, ${skip}` : ''}`, () => {
  let lab: Lab;
  let agents: LabAgent[] = [];
  const extraVips = (): string[] => [`10.78.${SUBNET}.101`, `10.78.${SUBNET}.102`];
  const figures: string[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, apiservers: true });
  });
  afterEach(async () => {
    await resetElectionLab(lab, agents);
    agents = [];
    for (const n of lab.nodes) for (const v of extraVips()) await lab.exec(n.netns, ['ip', 'addr', 'del', `${v}/32`, 'dev', 'eth0'], { allowFail: true });
  });
  afterAll(async () => {
    if (figures.length > 0) console.log(`reload figures:\n  ${figures.join('\n  ')}`);
    await lab?.teardown();
  });

  /** n1 (200) and n2 (100), balancing over both stand-ins, `over` merged into both. */
  const settings = (over: Partial<AgentSettings> & { vips?: string[] } = {}): AgentSettings[] => {
    const { vips, ...rest } = over;
    const extra = { ...(vips ? { vips } : {}), ...rest.extra };
    return [
      { priority: 200, balance: true, ...rest, extra },
      { priority: 100, balance: true, ...rest, extra },
    ];
  };

  /** Rewrites each agent's file with `s[i]` and sends it SIGHUP; resolves once every agent logged the reload's result. */
  async function reloadAll(list: readonly LabAgent[], s: readonly AgentSettings[]): Promise<Record<string, unknown>[]> {
    const before = list.map((a) => results(a).length);
    list.forEach((a, i) => writeFileSync(a.configPath, agentConfig(lab, a.node, s[i]!)));
    for (const a of list) a.proc.kill('SIGHUP');
    return Promise.all(
      list.map((a, i) => waitFor(() => results(a)[before[i]!], { timeoutMs: 10_000, intervalMs: 20, what: `${a.node.name} to log its reload` })),
    );
  }
  /** The reload result lines an agent logged so far. */
  const results = (a: LabAgent): Record<string, unknown>[] =>
    a.logLines().filter((l) => typeof l.msg === 'string' && /^configuration reload(ed| failed| refused)/.test(l.msg));
  const transitions = async (a: LabAgent): Promise<number> => (await a.status()).counters.transitions;

  /** tcpdump in n2's namespace: n1's VRRP adverts, with their wall-clock time (ms) and Max Adver Int (cs). */
  async function captureAdverts(): Promise<{ proc: LabProcess; adverts: () => { t: number; intervalCs: number | null }[] }> {
    const proc = lab.spawn(lab.nodes[1]!.netns, [
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
    await proc.waitForOutput(/listening on/, { timeoutMs: 5000, includeExisting: true });
    const adverts = () =>
      [...proc.output().matchAll(/^(\d+\.\d+) IP .*$/gm)].map((m) => {
        const cs = /intvl (\d+)cs/.exec(m[0])?.[1];
        return { t: Number(m[1]) * 1000, intervalCs: cs === undefined ? null : Number(cs) };
      });
    return { proc, adverts };
  }
  const gapsOf = (ts: readonly number[]): number[] => ts.slice(1).map((t, i) => t - ts[i]!);

  /** `ip -o monitor address` in `node`'s namespace: every address event as a line. */
  async function monitorAddresses(node: LabNode): Promise<LabProcess> {
    const proc = lab.spawn(node.netns, ['ip', '-o', '-ts', 'monitor', 'address']);
    // ip monitor prints nothing until an event: give it time to subscribe
    await sleep(300);
    return proc;
  }

  /**
   * Starts n1 and n2 with `s`, waits for n1 to hold the VIP, then watches: n1's address events
   * and its adverts (as n2 receives them). `before`: both transition counters; `t0`: when watching began (+500 ms).
   */
  async function watchedPair(s: AgentSettings[]) {
    const [a1, a2] = await startAgents(lab, s, agents);
    await waitForHolder(lab, lab.vip4, 'n1');
    await sleep(500);
    const before = [await transitions(a1!), await transitions(a2!)];
    const mon = await monitorAddresses(lab.nodes[0]!);
    const cap = await captureAdverts();
    await sleep(500);
    return { a1: a1!, a2: a2!, before, mon, cap, t0: Date.now() };
  }

  /** `ballast reload --config FILE` in the agent's namespace. */
  const ballastReload = (a: LabAgent) =>
    lab.exec(a.node.netns, [process.execPath, cliPath(), 'reload', '--config', a.configPath], { allowFail: true, timeoutMs: 30_000 });

  it('(a) an invalid file changes nothing: same master and VIPs, adverts at the old interval, `ballast reload` exits 2 with the problems, metric 0, /status says so', async () => {
    const [a1, a2] = await startAgents(lab, settings(), agents);
    await waitForHolder(lab, lab.vip4, 'n1');
    await sleep(500);
    const before = [await transitions(a1!), await transitions(a2!)];
    const cap = await captureAdverts();
    await sleep(500);
    // vrid 0 and a misspelt key: two problems; the interval it asks for (1 s) must never be used
    writeFileSync(a1!.configPath, agentConfig(lab, a1!.node, { priority: 200, balance: true, vrid: 0, advertisementInterval: '1s', extra: { vipz: [] } }));
    const t0 = Date.now();
    a1!.proc.kill('SIGHUP');
    const logged = await waitFor(() => results(a1!)[0], { timeoutMs: 5000, intervalMs: 20, what: 'the failed reload to be logged' });
    expect(logged.msg).toBe('configuration reload failed: the file is invalid; nothing changed');
    const problems = logged.problems as string[];
    expect(problems).toHaveLength(2);
    expect(problems.some((p) => /^line \d+: vrrp\.vrid: /.test(p))).toBe(true);
    expect(problems.some((p) => /vipz/.test(p))).toBe(true);
    // each problem on its own line, in validate's words
    const validate = await lab.exec(a1!.node.netns, [process.execPath, cliPath(), 'validate', '--config', a1!.configPath], { allowFail: true });
    expect(validate.code).toBe(2);
    for (const p of problems) {
      expect(validate.stderr).toContain(`  ${p}\n`);
      expect(a1!.logLines().some((l) => l.msg === `reload: ${p}`)).toBe(true);
    }
    // `ballast reload`: exit 2, the same problems
    // three at once: each answered (exit 2 with the problems), run one after another
    const tR = Date.now();
    const rs = await Promise.all([ballastReload(a1!), ballastReload(a1!), ballastReload(a1!)]);
    const tR2 = Date.now();
    for (const r of rs) {
      expect(r.code).toBe(2);
      for (const p of problems) expect(r.stderr).toContain(`  ${p}\n`);
    }
    // the answer can come before the agent's log line is on disk
    await waitFor(
      () => results(a1!).length >= 4,
      (ok) => ok,
      { timeoutMs: 2000, intervalMs: 20, what: 'the four failed reloads to be logged' },
    );
    expect(results(a1!)).toHaveLength(4);
    await sleep(1500);
    await cap.proc.stop('SIGINT', 3000);
    const metrics = await a1!.admin('/metrics');
    expect(metrics.split('\n')).toContain('ballast_config_last_reload_successful 0');
    const st = await a1!.status();
    expect(st.reload?.last).toMatchObject({ ok: false, trigger: 'admin', problems });
    expect(st.vrid).toBe(51);
    expect(st.advertisementIntervalMs).toBe(100);
    expect(st.state).toBe('master');
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
    expect([await transitions(a1!), await transitions(a2!)]).toStrictEqual(before);
    const adverts = cap.adverts().filter((x) => x.t >= t0 - 500);
    expect(adverts.length).toBeGreaterThanOrEqual(20);
    const gaps = gapsOf(adverts.map((x) => x.t));
    const maxGap = Math.max(...gaps);
    const at = adverts[gaps.indexOf(maxGap)]!.t;
    expect(
      maxGap,
      `largest gap after the advert at t0+${(at - t0).toFixed(0)} ms; the three CLI reloads ran t0+${tR - t0}..${tR2 - t0} ms`,
    ).toBeLessThanOrEqual(100 + MARGIN_MS);
    // tcpdump prints Max Adver Int ("intvl 10cs"): the old interval, in every advert
    expect(adverts.map((x) => x.intervalCs).filter((c) => c !== 10)).toStrictEqual([]);
    figures.push(`(a) invalid file: ${adverts.length} adverts, largest gap ${maxGap.toFixed(1)} ms (interval 100 ms)`);
  });

  it('(b) a reload that removes one of two VIPs: the other is never absent from the interface; adverts keep their rhythm; no transition', async () => {
    const [vipB] = extraVips();
    const { a1, a2, before, mon, cap, t0 } = await watchedPair(settings({ vips: [lab.vip4, vipB!] }));
    await waitForHolder(lab, vipB!, 'n1');
    const logged = await reloadAll([a2!, a1!], settings({ vips: [lab.vip4] }).reverse());
    for (const l of logged) expect(l).toMatchObject({ msg: 'configuration reloaded', changed: ['vips'], handover: false });
    await waitFor(
      () => lab.holders(vipB!),
      (h) => h.length === 0,
      { timeoutMs: 2000, intervalMs: 10, what: `${vipB} to be gone` },
    );
    await sleep(1000);
    await cap.proc.stop('SIGINT', 3000);
    await mon.stop('SIGTERM', 2000);
    const events = mon
      .output()
      .split('\n')
      .filter((l) => l.includes('inet '));
    // the monitor saw the removed VIP go (it watches), and never the one that stays
    expect(events.some((l) => /Deleted/.test(l) && l.includes(` ${vipB}/`))).toBe(true);
    expect(events.filter((l) => /Deleted/.test(l) && l.includes(` ${lab.vip4}/`))).toStrictEqual([]);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
    expect([await transitions(a1!), await transitions(a2!)]).toStrictEqual(before);
    expect((await a1!.status()).vips).toStrictEqual([lab.vip4]);
    const ts = cap
      .adverts()
      .map((x) => x.t)
      .filter((t) => t >= t0 - 500);
    const maxGap = Math.max(...gapsOf(ts));
    expect(ts.length).toBeGreaterThanOrEqual(15);
    expect(maxGap).toBeLessThanOrEqual(100 + MARGIN_MS);
    figures.push(`(b) VIP removed: ${ts.length} adverts, largest gap ${maxGap.toFixed(1)} ms (interval 100 ms); ${lab.vip4} deletions seen: 0`);
  });

  it('(c) a reload that adds a VIP and changes the interval to 200 ms: added and announced, adverts at 200 ms from the next one, no failover', async () => {
    const [, vipC] = extraVips();
    const { a1, a2, before, mon, cap, t0 } = await watchedPair(settings());
    const logged = await reloadAll([a2!, a1!], settings({ vips: [lab.vip4, vipC!], advertisementInterval: '200ms' }).reverse());
    const t1 = Date.now();
    for (const l of logged) expect(l).toMatchObject({ msg: 'configuration reloaded', handover: false });
    expect(logged[1]!.changed).toStrictEqual(['vips', 'vrrp.advertisementIntervalCs', 'vrrp.advertisementIntervalMs']);
    await waitForHolder(lab, vipC!, 'n1', 2000);
    // announced: the client resolves the new VIP to n1 (and it answers)
    expect((await lab.ping(lab.client.netns, vipC!)).ok).toBe(true);
    expect(await lab.neighbor(lab.client.netns, vipC!)).toBe(lab.nodes[0]!.mac);
    await sleep(2000);
    await cap.proc.stop('SIGINT', 3000);
    await mon.stop('SIGTERM', 2000);
    expect(
      mon
        .output()
        .split('\n')
        .filter((l) => /Deleted/.test(l) && l.includes(` ${lab.vip4}/`)),
    ).toStrictEqual([]);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
    expect([await transitions(a1!), await transitions(a2!)]).toStrictEqual(before);
    const st = await a1!.status();
    expect([st.state, st.advertisementIntervalMs, st.vips]).toStrictEqual(['master', 200, [lab.vip4, vipC!]]);
    expect((await a2!.status()).masterAdverIntervalMs).toBe(200);
    const all = cap.adverts().filter((x) => x.t >= t0 - 500);
    const oldGaps = gapsOf(all.filter((x) => x.t <= t0).map((x) => x.t));
    // from the first advert sent after n1 logged its reload, every gap is the new interval
    const after = all.filter((x) => x.t > t1 + 5);
    const newGaps = gapsOf(after.map((x) => x.t));
    expect(after.length).toBeGreaterThanOrEqual(8);
    expect(Math.min(...newGaps)).toBeGreaterThanOrEqual(200 - 20);
    expect(Math.max(...newGaps)).toBeLessThanOrEqual(200 + MARGIN_MS);
    expect(after.map((x) => x.intervalCs).filter((c) => c !== 20)).toStrictEqual([]);
    const maxGap = Math.max(...gapsOf(all.map((x) => x.t)));
    expect(maxGap).toBeLessThanOrEqual(200 + MARGIN_MS);
    figures.push(
      `(c) VIP added + 100→200 ms: largest gap before ${Math.max(...oldGaps).toFixed(1)} ms, after ${Math.max(...newGaps).toFixed(1)} ms (min ${Math.min(...newGaps).toFixed(1)}), overall ${maxGap.toFixed(1)} ms`,
    );
  });

  it('(d) a new VRID: each agent logs a hand-over, the group re-forms on VRID 52, exactly one holder afterwards', async () => {
    const [a1, a2] = await startAgents(lab, settings(), agents);
    await waitForHolder(lab, lab.vip4, 'n1');
    await sleep(500);
    // who holds the VIP, every 20 ms, through the hand-over
    const samples: { t: number; holders: string[] }[] = [];
    let sampling = true;
    const sampler = (async () => {
      for (let i = 0; sampling && i < 1000; i++) {
        samples.push({ t: Date.now(), holders: (await lab.holders(lab.vip4)).map((n) => n.name) });
        await sleep(20);
      }
    })();
    const logged = await reloadAll([a1!, a2!], settings({ vrid: 52 }));
    for (const l of logged) expect(l).toMatchObject({ msg: 'configuration reloaded', changed: ['vrrp.vrid'], handover: true });
    for (const a of [a1!, a2!]) {
      expect(a.logLines().some((l) => l.msg === 'reload: hand-over: leaving the group (priority 0 if master, VIPs removed) and joining the new one')).toBe(
        true,
      );
      expect(a.logLines().some((l) => l.msg === 'reload: hand-over: joined the group' && l.vrid === 52)).toBe(true);
    }
    await waitForHolder(lab, lab.vip4, 'n1', 3000);
    await sleep(1000);
    sampling = false;
    await sampler;
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
    // the longest stretch with no holder: bounded by the new group's Master_Down_Interval
    // (3 × 100 ms + Skew_Time) + the sampling and start-up slack
    const stretch = (pred: (h: string[]) => boolean): number => {
      let longest = 0;
      let from: number | null = null;
      for (const x of samples) {
        if (pred(x.holders)) from ??= x.t;
        else if (from !== null) {
          longest = Math.max(longest, x.t - from);
          from = null;
        }
      }
      return longest;
    };
    const none = stretch((h) => h.length === 0);
    const two = stretch((h) => h.length > 1);
    const period = (samples.at(-1)!.t - samples[0]!.t) / (samples.length - 1);
    expect(samples.length).toBeGreaterThan(20);
    // n1's hand-over: from leaving VRID 51 (priority 0, VIPs removed) to the new engine running
    const at = (a: LabAgent, msg: string): number => Date.parse(String(a.logLines().find((x) => x.msg === msg)?.time));
    const restartMs =
      at(a1!, 'reload: hand-over: joined the group') -
      at(a1!, 'reload: hand-over: leaving the group (priority 0 if master, VIPs removed) and joining the new one');
    expect(restartMs).toBeGreaterThan(0);
    // no holder for at most: n1's engine restart + its Master_Down_Interval in the new group
    // (nobody else is there yet) + two sampling periods + MARGIN_MS
    const bound = restartMs + masterDownIntervalMs(200, 10) + 2 * period + MARGIN_MS;
    expect(none).toBeLessThanOrEqual(bound);
    figures.push(
      `(d) VRID hand-over: longest time with no holder ${none} ms, with two holders ${two} ms (bound ${bound.toFixed(0)} ms: engine restart ${restartMs} ms + Master_Down_Interval ${masterDownIntervalMs(200, 10).toFixed(0)} ms + 2 × ${period.toFixed(0)} ms sampling + ${MARGIN_MS}; reloads sent to n1 then n2 at once)`,
    );
    const [s1, s2] = [await a1!.status(), await a2!.status()];
    expect([s1.vrid, s1.state, s2.vrid, s2.state, s2.masterAddress]).toStrictEqual([52, 'master', 52, 'backup', lab.nodes[0]!.ipv4]);
    // the VRID 51 instance lock was given back: a third agent could take it (ballast's abstract socket name)
    const freed = await lab.exec(
      lab.nodes[0]!.netns,
      [
        process.execPath,
        '-e',
        "const s=require('net').createServer();s.on('error',e=>{console.log(e.code);process.exit(1)});s.listen({path:'\\0ballast:eth0:ipv4:vrid51'},()=>{console.log('free');s.close()})",
      ],
      { allowFail: true },
    );
    expect(freed.stdout.trim()).toBe('free');
  });

  it('(e) a backends and health change keeps an established connection through the VIP (to the backend that left), and the kept backend stays up', async () => {
    const [a1, a2] = await startAgents(lab, settings(), agents);
    await waitForHolder(lab, lab.vip4, 'n1');
    await waitFor(
      () => a1!.status(),
      (s: ElectionStatusDocument) => s.backends.every((b) => b.state === 'up'),
      { timeoutMs: 5000, what: 'both backends up on n1' },
    );
    const l = await startLongconn(lab, { ...lab.nodes[0]!, netns: lab.client.netns }, `https://${lab.vip4}:6443/version`, [
      '--node',
      'n2',
      '--interval',
      '50',
      '--duration',
      '6000',
    ]);
    try {
      await waitFor(() => l.events.find((e) => e.event === 'pinned'), { timeoutMs: 5000, what: 'a connection served by n2' });
      const before = (await a1!.status()).backends.find((b) => b.address === `${lab.nodes[0]!.ipv4}:6443`)!;
      const seqAtReload = l.results.length;
      // n2's apiserver leaves the seed list; the checks get slower with a higher rise
      const next = settings({
        healthInterval: '300ms',
        extra: {
          apiserver: {
            port: 6443,
            backends: [`${lab.nodes[0]!.ipv4}:6443`],
            health: { caFile: lab.ca.certFile, interval: '300ms', timeout: '300ms', rise: 3, fall: 2 },
          },
        },
      });
      const logged = await reloadAll([a1!, a2!], next);
      for (const x of logged) expect(x).toMatchObject({ msg: 'configuration reloaded', handover: false });
      expect(logged[0]!.changed).toStrictEqual([
        'apiserver.backends',
        'apiserver.health.intervalMs',
        'apiserver.health.rise',
        'apiserver.health.settleMs',
        'apiserver.health.timeoutMs',
      ]);
      const after = (await a1!.status()).backends;
      expect(after.map((b) => [b.address, b.state])).toStrictEqual([[`${lab.nodes[0]!.ipv4}:6443`, 'up']]);
      expect(after[0]!.consecutive).toBeGreaterThanOrEqual(before.consecutive);
      // the table has only n1 now; the connection to n2 goes on (its conntrack NAT stays)
      await waitFor(
        () => a1!.status(),
        (s: ElectionStatusDocument) =>
          s.dataplane.mode === 'nftables' && JSON.stringify(s.dataplane.backends) === JSON.stringify([`${lab.nodes[0]!.ipv4}:6443`]),
        { timeoutMs: 2000, what: 'the table without n2' },
      );
      await sleep(2000);
      const later = l.results.slice(seqAtReload);
      expect(later.length).toBeGreaterThanOrEqual(20);
      expect(later.filter((x) => !x.ok)).toStrictEqual([]);
      expect(new Set(later.map((x) => `${x.conn}:${x.node}`))).toStrictEqual(new Set([`${later[0]!.conn}:n2`]));
      expect(l.events.filter((e) => e.event === 'closed')).toStrictEqual([]);
      figures.push(`(e) backends/health change: ${later.length} requests on the connection to the removed backend after the reload, 0 failed`);
    } finally {
      await l.proc.stop('SIGTERM', 3000);
    }
  });

  it('(f) `ballast reload` of a new admin.listen and log level: exit 0; the answer comes on the old address, the agent then answers on the new one only; debug lines appear', async () => {
    const [a1] = await startAgents(lab, settings(), agents);
    await waitForHolder(lab, lab.vip4, 'n1');
    const before = await transitions(a1!);
    writeFileSync(a1!.configPath, agentConfig(lab, a1!.node, { priority: 200, balance: true, adminPort: 9651, extra: { log: { level: 'debug' } } }));
    // --config would read the NEW admin.listen, where nothing listens yet: the old address is given
    const r = await lab.exec(a1!.node.netns, [process.execPath, cliPath(), 'reload', '--admin', '127.0.0.1:9641'], { allowFail: true, timeoutMs: 30_000 });
    expect([r.code, r.stderr]).toStrictEqual([0, '']);
    expect(r.stdout).toMatch(/^reloaded \(\d+ ms\): changed: admin\.listen\.port, log\.level\n  - log level set\n  - admin endpoint re-run\n$/);
    const get = (port: number) =>
      lab.exec(a1!.node.netns, [process.execPath, cliPath(), 'status', '--json', '--admin', `127.0.0.1:${port}`], { allowFail: true, timeoutMs: 5000 });
    const now = await get(9651);
    expect(now.code).toBe(0);
    expect(JSON.parse(now.stdout)).toMatchObject({
      state: 'master',
      reload: { last: { ok: true, trigger: 'admin', changed: ['admin.listen.port', 'log.level'] } },
    });
    expect((await get(9641)).code).toBe(3);
    // a health change makes the policy evaluate, which it logs at debug (a slow check on a loaded
    // machine can make it evaluate before: count the lines from here on)
    const debugBefore = a1!.logLines().filter((l) => l.level === 'debug' && l.msg === 'policy').length;
    await lab.setReady(lab.nodes[1]!, false);
    try {
      await waitFor(
        () => a1!.logLines().filter((l) => l.level === 'debug' && l.msg === 'policy').length > debugBefore,
        (ok) => ok,
        { timeoutMs: 5000, what: 'a debug line (the policy logs one per evaluation)' },
      );
    } finally {
      await lab.setReady(lab.nodes[1]!, true);
    }
    expect((JSON.parse((await get(9651)).stdout) as ElectionStatusDocument).counters.transitions).toBe(before);
  });

  it('(g) a reload adding a VIP that another ballast on this host manages is refused whole: exit 2 naming it, nothing changed', async () => {
    const [, vipX] = extraVips();
    const [a1] = await startAgents(lab, settings(), agents);
    await waitForHolder(lab, lab.vip4, 'n1');
    // a second agent in n1's namespace: another VRID, VIP X, no data plane
    const other = await startAgent(lab, lab.nodes[0]!, {
      priority: 100,
      vrid: 60,
      adminPort: 9652,
      extra: { vips: [vipX], dataplane: { vip: 'none', local: 'off' } },
    });
    agents.push(other);
    await waitForHolder(lab, vipX!, 'n1');
    const before = await transitions(a1!);
    // the new file also changes the priority: that must not be applied either
    writeFileSync(a1!.configPath, agentConfig(lab, a1!.node, { priority: 180, balance: true, extra: { vips: [lab.vip4, vipX!] } }));
    const r = await ballastReload(a1!);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`another ballast agent already manages the VIP ${vipX} (vips) in this network namespace`);
    expect(r.stderr).toContain('(BALLAST_E_ALREADY_RUNNING)');
    const st = await a1!.status();
    expect([st.vips, st.priority, st.state, st.counters.transitions]).toStrictEqual([[lab.vip4], 200, 'master', before]);
    expect(st.reload?.last).toMatchObject({ ok: false, changed: ['vips', 'vrrp.priority'] });
    // the other agent still holds its VIP
    expect((await other.status()).vipsHeld).toBe(true);
    expect((await lab.holders(vipX!)).map((n) => n.name)).toStrictEqual(['n1']);
  });
});
