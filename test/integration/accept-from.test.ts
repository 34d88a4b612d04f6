/**
 * Membership guards the election, on the lab: three agents with load
 * balancing, so the backends' nodes are the members, and a stranger on the LAN (the client
 * namespace) sending adverts with a higher priority and Max Adver Int 4095 cs. With the default
 * `vrrp.acceptFrom: members` the stranger changes nothing (dropped, counted, logged once); with
 * `any` one advert takes the VIP off the master (the behaviour before, which the filter
 * prevents). Then, at the engine level (lab/vrrp-host.ts: one VrrpHost in a namespace), the
 * unicast peers and the members follow a reconfigure: a removed peer gets no more adverts, an
 * added one within one interval (tcpdump in each namespace). Adverts every 100 ms.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab, compiledScript, type LabProcess } from '../../lab/lab.js';
import { resetElectionLab, startAgents, waitForHolder, waitForSettled, type AgentSettings, type LabAgent } from '../../lab/cluster.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bacpt';
const SUBNET = 243;
const INTERVAL_MS = 100;
/** Slack for an observer on 2 shared cores (polling, `ip` and tcpdump scheduling). */
const MARGIN_MS = 60;
const NOT_MEMBER = /is not a member/;

describe.skipIf(needs('root') ?? needs('tcpdump'))('vrrp.acceptFrom and peers that follow membership on the lab (root, tcpdump; skipped otherwise)', () => {
  let lab: Lab;
  let agents: LabAgent[] = [];
  const procs: LabProcess[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false, apiservers: true });
  });
  afterEach(async () => {
    await Promise.all(procs.splice(0).map((p) => p.stop('SIGTERM', 3000).catch(() => undefined)));
    await resetElectionLab(lab, agents);
    agents = [];
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  /**
   * n1 150, n2 100, n3 50, balancing over the three stand-ins; waits for n1 to hold the VIP and
   * for every agent's preemption to be its own (no hold for the replicated state: a held n1 would
   * take n2's adverts as its master's).
   */
  async function cluster(extra: Partial<AgentSettings> = {}): Promise<LabAgent[]> {
    const started = await startAgents(
      lab,
      [150, 100, 50].map((priority) => ({ priority, balance: true, ...extra })),
      agents,
    );
    await waitForHolder(lab, lab.vip4, 'n1');
    await waitForSettled(started);
    return started;
  }

  /** The stranger: `count` adverts from the client namespace, priority 254, Max Adver Int 4095 cs. */
  const stranger = (count: number) =>
    lab.exec(lab.client.netns, [
      process.execPath,
      compiledScript('inject-vrrp'),
      '--ifname',
      'eth0',
      '--source',
      lab.client.ipv4,
      '--dest',
      '224.0.0.18',
      '--vip',
      lab.vip4,
      '--priority',
      '254',
      '--max-adver-int',
      '4095',
      '--count',
      String(count),
      '--interval',
      '100',
    ]);

  it("acceptFrom members (default): the stranger's adverts are dropped as notMember, counted in /status and /metrics, logged once per agent; no transition, the VIP stays, its interval is never adopted", async () => {
    const [a1, a2, a3] = await cluster();
    const [n1, n2, n3] = lab.nodes;
    // the start-up line names the members: the other backends' nodes
    expect(a1!.logLines().find((l) => l.msg === 'adverts are heard from the members only (vrrp.acceptFrom: members)')).toMatchObject({
      members: [n2!.ipv4, n3!.ipv4],
    });
    expect((await a1!.status()).members).toStrictEqual([n2!.ipv4, n3!.ipv4]);
    const before = await Promise.all([a1!, a2!, a3!].map(async (a) => (await a.status()).counters.transitions));
    // watch the holder all along: one advert obeyed would remove the VIP from n1 at once
    const seen = new Set<string>();
    let watching = true;
    const watch = (async () => {
      while (watching) {
        seen.add((await lab.holders(lab.vip4)).map((n) => n.name).join(',') || 'none');
        await sleep(20);
      }
    })();
    const r = await stranger(10);
    expect(JSON.parse(r.stdout)).toStrictEqual({ sent: 10 });
    await sleep(masterDownIntervalMs(50, INTERVAL_MS / 10) + MARGIN_MS);
    watching = false;
    await watch;
    expect([...seen]).toStrictEqual(['n1']);
    const after = await Promise.all([a1!, a2!, a3!].map((a) => a.status()));
    expect(after.map((s) => s.counters.transitions)).toStrictEqual(before);
    expect(after.map((s) => s.counters.dropped.notMember)).toStrictEqual([10, 10, 10]);
    expect(after.map((s) => s.state)).toStrictEqual(['master', 'backup', 'backup']);
    // the Backups still follow n1 and its 100 ms, not the stranger's 40950 ms
    for (const s of after.slice(1)) expect(s).toMatchObject({ masterAddress: n1!.ipv4, masterAdverIntervalMs: INTERVAL_MS });
    for (const a of [a1!, a2!, a3!]) {
      const lines = a.logLines().filter((l) => NOT_MEMBER.test(String(l.msg)));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatchObject({ level: 'warn', source: lab.client.ipv4 });
    }
    expect((await a1!.admin('/metrics')).split('\n')).toContain('ballast_vrrp_packets_dropped_total{vrid="51",reason="notMember"} 10');
    console.log(
      `acceptFrom members: 10 stranger adverts (priority 254, Max Adver Int 4095 cs) dropped on each node, holders seen ${[...seen].join(' ')}, transitions unchanged`,
    );
  });

  it("acceptFrom any: one advert of the same stranger takes the VIP off the master, which adopts the stranger's 4095 cs and stays Backup for its Master_Down_Interval (~140 s) while a lower node holds the VIP (what the filter prevents)", async () => {
    const [a1] = await cluster({ acceptFrom: 'any' });
    expect(a1!.logLines().some((l) => l.msg === 'adverts are heard from the members only (vrrp.acceptFrom: members)')).toBe(false);
    const before = (await a1!.status()).counters.transitions;
    await stranger(1);
    // the advert went out before the injector exited: n1 has yielded by now, or within a poll
    await waitFor(
      () => a1!.status(),
      (s) => s.state === 'backup',
      { timeoutMs: 1000, what: 'n1 to yield to the stranger' },
    );
    // what an operator is told: a master none of the known nodes, and its interval adopted
    expect(a1!.logLines().filter((l) => String(l.msg).startsWith('the new master is not one of the known members'))).toMatchObject([
      { level: 'warn', master: lab.client.ipv4, priority: 254 },
    ]);
    expect(a1!.logLines().filter((l) => String(l.msg).startsWith("adopted the master's advertisement interval"))).toMatchObject([
      { level: 'warn', master: lab.client.ipv4, masterAdverIntervalCs: 4095, advertisementIntervalCs: INTERVAL_MS / 10 },
    ]);
    // n1's last advert makes n2 follow n1, which is silent now: n2 takes over after its Master_Down_Interval
    await waitForHolder(lab, lab.vip4, 'n2', masterDownIntervalMs(100, INTERVAL_MS / 10) + 1000);
    const s1 = await a1!.status();
    expect(s1).toMatchObject({ state: 'backup', masterAdverIntervalMs: 40950 });
    expect(s1.masterDownIntervalMs).toBeCloseTo(masterDownIntervalMs(150, 4095), 0);
    expect(s1.counters.transitions).toBe(before + 1);
    expect(s1.counters.dropped.notMember).toBeUndefined();
    console.log(`acceptFrom any: one stranger advert took the VIP off n1; n1 stays backup for ${Math.round(s1.masterDownIntervalMs)} ms (n2 holds the VIP)`);
  });

  /** tcpdump in `netns`, printing each VRRP packet from `source` with its epoch time; resolves once listening. */
  async function capture(netns: string, source: string): Promise<{ times: () => number[]; stop: () => Promise<void> }> {
    const p = lab.spawn(netns, ['tcpdump', '-i', 'eth0', '-n', '-l', '--immediate-mode', '-tt', 'ip proto 112 and src host', source]);
    procs.push(p);
    await p.waitForOutput(/listening on/, { timeoutMs: 5000, includeExisting: true });
    return {
      times: () => [...p.output().matchAll(/^(\d+\.\d+) IP /gm)].map((m) => Number(m[1]) * 1000),
      stop: async () => void (await p.stop('SIGINT', 3000)),
    };
  }

  /** One engine (lab/vrrp-host.ts) in `netns`, driven over stdin. */
  async function engine(netns: string, args: string[]) {
    const p = lab.spawn(netns, [process.execPath, compiledScript('vrrp-host'), '--ifname', 'eth0', '--vip', lab.vip4, ...args], { stdin: true });
    procs.push(p);
    await p.waitForOutput(/"event":"started"/, { timeoutMs: 5000, includeExisting: true });
    let id = 0;
    const ask = async (m: Record<string, unknown>): Promise<Record<string, unknown>> => {
      const n = ++id;
      const answer = p.waitForOutput(new RegExp(`^\\{"id":${n},.*$`, 'm'), { timeoutMs: 5000 });
      p.child.stdin!.write(`${JSON.stringify({ id: n, ...m })}\n`);
      return JSON.parse((await answer)[0]) as Record<string, unknown>;
    };
    return {
      reconfigure: (patch: Record<string, unknown>) => ask({ op: 'reconfigure', patch }),
      status: async () =>
        (await ask({ op: 'status' })).status as { state: string; masterAddress: string | null; counters: { dropped: Record<string, number> } },
    };
  }

  it('engine level, unicast: a reconfigure of the peers stops the adverts to a removed peer at once and reaches an added one within one interval; the kept peer sees no gap longer than one interval', async () => {
    const [n1, n2, n3] = lab.nodes;
    const caps = await Promise.all([capture(n2!.netns, n1!.ipv4), capture(n3!.netns, n1!.ipv4), capture(lab.client.netns, n1!.ipv4)]);
    const e = await engine(n1!.netns, ['--priority', '200', '--interval-cs', String(INTERVAL_MS / 10), '--peer', n2!.ipv4, '--peer', n3!.ipv4]);
    await waitFor(
      () => e.status(),
      (s) => s.state === 'active',
      { timeoutMs: masterDownIntervalMs(200, INTERVAL_MS / 10) + 1000, what: 'the engine to become Active' },
    );
    await sleep(500);
    const r = await e.reconfigure({ peers: [n3!.ipv4, lab.client.ipv4] });
    expect(r).toMatchObject({ ok: true });
    const sentAt = r.sentAt as number;
    const appliedAt = r.at as number;
    await sleep(600);
    await Promise.all(caps.map((c) => c.stop()));
    const [toN2, toN3, toClient] = caps.map((c) => c.times());
    // the removed peer: adverts up to the reconfigure, none after it was applied
    expect(toN2!.filter((t) => t < sentAt).length).toBeGreaterThanOrEqual(4);
    expect(toN2!.filter((t) => t > appliedAt)).toStrictEqual([]);
    // the added peer: nothing before, the first within one interval, then every interval
    expect(toClient!.filter((t) => t < sentAt)).toStrictEqual([]);
    expect(toClient!.length).toBeGreaterThanOrEqual(5);
    const firstMs = toClient![0]! - sentAt;
    expect(firstMs).toBeLessThanOrEqual(INTERVAL_MS + MARGIN_MS);
    // the kept peer: the rhythm goes on across the reconfigure
    const gaps = toN3!.slice(1).map((t, i) => t - toN3![i]!);
    const maxGap = Math.max(...gaps);
    expect(maxGap).toBeLessThanOrEqual(INTERVAL_MS + MARGIN_MS);
    console.log(
      `peers reconfigured: removed peer's last advert ${(Math.max(...toN2!) - sentAt).toFixed(1)} ms after the request (applied after ${appliedAt - sentAt} ms), added peer's first after ${firstMs.toFixed(1)} ms, kept peer's largest gap ${maxGap.toFixed(1)} ms`,
    );
  });

  it('engine level, VIPs: removing one of two VIPs never removes the other from the interface, adverts keep their rhythm and list one address from the next one; an added VIP is added and announced', async () => {
    const [n1, n2] = lab.nodes;
    const base = lab.vip4.slice(0, lab.vip4.lastIndexOf('.') + 1);
    const [second, third] = [`${base}101`, `${base}102`];
    const e = await engine(n1!.netns, ['--vip', second, '--priority', '200', '--interval-cs', String(INTERVAL_MS / 10)]);
    await waitFor(
      () => lab.holders(second),
      (h) => h.length === 1 && h[0]!.name === 'n1',
      { timeoutMs: masterDownIntervalMs(200, INTERVAL_MS / 10) + 1000, what: 'n1 to hold both VIPs' },
    );
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
    const monitor = lab.spawn(n1!.netns, ['ip', '-o', 'monitor', 'address']);
    procs.push(monitor);
    const adverts = lab.spawn(n2!.netns, ['tcpdump', '-i', 'eth0', '-n', '-l', '-v', '--immediate-mode', '-tt', 'ip proto 112 and src host', n1!.ipv4]);
    procs.push(adverts);
    const garp = lab.spawn(n2!.netns, ['tcpdump', '-i', 'eth0', '-n', '-l', '--immediate-mode', 'arp and src host', third]);
    procs.push(garp);
    await adverts.waitForOutput(/listening on/, { timeoutMs: 5000, includeExisting: true });
    await garp.waitForOutput(/listening on/, { timeoutMs: 5000, includeExisting: true });
    await sleep(300);
    const removed = await e.reconfigure({ vips: [lab.vip4] });
    expect(removed).toMatchObject({ ok: true });
    await sleep(400);
    const added = await e.reconfigure({ vips: [lab.vip4, third] });
    expect(added).toMatchObject({ ok: true });
    await sleep(400);
    await Promise.all([monitor.stop('SIGINT', 3000), adverts.stop('SIGINT', 3000), garp.stop('SIGINT', 3000)]);
    const deleted = monitor
      .output()
      .split('\n')
      .filter((l) => l.startsWith('Deleted'));
    expect(deleted.filter((l) => l.includes(` ${lab.vip4}/`))).toStrictEqual([]);
    expect(deleted.filter((l) => l.includes(` ${second}/`))).toHaveLength(1);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
    expect((await lab.holders(third)).map((n) => n.name)).toStrictEqual(['n1']);
    expect(await lab.holders(second)).toStrictEqual([]);
    // each advert: its time and how many addresses it lists
    const text = adverts.output();
    // tcpdump -v: "addrs: A" for one address, "addrs(2): A,B" for more
    const sent = [...text.matchAll(/^(\d+\.\d+) IP [^\n]*\n[^\n]*? addrs(?:\((\d+)\))?: /gm)].map((m) => ({
      at: Number(m[1]) * 1000,
      n: m[2] === undefined ? 1 : Number(m[2]),
    }));
    expect(sent.length).toBeGreaterThanOrEqual(10);
    const gaps = sent.slice(1).map((x, i) => x.at - sent[i]!.at);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(INTERVAL_MS + MARGIN_MS);
    const at = (t: unknown) => t as number;
    expect(sent.filter((x) => x.at < at(removed.sentAt)).every((x) => x.n === 2)).toBe(true);
    expect(
      sent
        .filter((x) => x.at > at(removed.at) && x.at < at(added.sentAt))
        .map((x) => x.n)
        .every((n) => n === 1),
    ).toBe(true);
    expect(
      sent
        .filter((x) => x.at > at(added.at))
        .map((x) => x.n)
        .every((n) => n === 2),
    ).toBe(true);
    // the added VIP was announced: one gratuitous ARP (announce count 1 in vrrp-host), from the new address
    expect([
      ...garp
        .output()
        .matchAll(new RegExp(`ARP, Request who-has ${third.replace(/\./g, '\\.')} \\(ff:ff:ff:ff:ff:ff\\) tell ${third.replace(/\./g, '\\.')},`, 'g')),
    ]).toHaveLength(1);
    console.log(`VIPs reconfigured: the kept VIP never deleted, ${sent.length} adverts with the largest gap ${Math.max(...gaps).toFixed(1)} ms`);
  });

  it('engine level, multicast: a stranger outside the members is dropped; a reconfigure that makes it a member lets it take over (discovery adding a node)', async () => {
    const [n1, n2] = lab.nodes;
    const e = await engine(n1!.netns, ['--priority', '200', '--interval-cs', String(INTERVAL_MS / 10), '--member', n2!.ipv4]);
    await waitFor(
      () => e.status(),
      (s) => s.state === 'active',
      { timeoutMs: masterDownIntervalMs(200, INTERVAL_MS / 10) + 1000, what: 'the engine to become Active' },
    );
    await stranger(3);
    expect(await e.status()).toMatchObject({ state: 'active', counters: { dropped: { notMember: 3 } } });
    expect(await e.reconfigure({ members: 'nonsense' })).toMatchObject({ error: 'cannot reconfigure the election: members must be a list of addresses' });
    expect(await e.reconfigure({ members: [n2!.ipv4, lab.client.ipv4] })).toMatchObject({ ok: true });
    await stranger(1);
    await waitFor(
      () => e.status(),
      (s) => s.state === 'backup',
      { timeoutMs: 1000, what: 'the engine to yield to the new member' },
    );
    expect(await e.status()).toMatchObject({ masterAddress: lab.client.ipv4, counters: { dropped: { notMember: 3 } } });
  });
});
