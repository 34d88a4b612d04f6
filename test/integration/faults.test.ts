/**
 * The networks operators really have: partitions that heal, strangers on the VRID,
 * wall clocks that jump, multi-homed nodes, IPv6 handover (a blocked main thread: pacer.test.ts). Real agents
 * on the lab, real packets; adverts every 100 ms, so Master_Down_Interval (RFC 9568 §6.1) is
 * 3 × 100 ms + Skew_Time.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Lab, compiledScript } from '../../lab/lab.js';
import { blockVrrp, startAgent, startLongconn, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import { needs, sleep, useElectionLab, waitFor } from '../support/index.js';

const PREFIX = 'bflt';
const SUBNET = 216;
const INTERVAL_CS = 10;
/** Slack for the observer: polling period, `ip` invocations, scheduling on 2 cores. */
const MARGIN_MS = 250;
const LIBFAKETIME = '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1';

describe.skipIf(needs('root'))('faults on the lab (root; skipped otherwise)', () => {
  let lab!: Lab;
  const { agents, start } = useElectionLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3 }, (l) => (lab = l));

  const transitions = async (a: LabAgent): Promise<number> => (await a.status()).counters.transitions;
  const dropped = async (a: LabAgent, reason: string): Promise<number> => (await a.status()).counters.dropped[reason] ?? 0;

  /** Distinct MACs that answer ARP for `address` from the client namespace (arping: 2 requests, 1 s apart). */
  async function arpAnswers(address: string): Promise<string[]> {
    const r = await lab.exec(lab.client.netns, ['arping', '-c', '2', '-w', '2', '-I', 'eth0', address], { allowFail: true, timeoutMs: 4000 });
    return [...new Set([...r.stdout.matchAll(/reply from \S+ \[([0-9A-Fa-f:]+)\]/g)].map((m) => m[1]!.toLowerCase()))];
  }

  it("a healed partition: within 1 s exactly one node answers ARP, and the client's neighbour entry is the final holder's MAC", async () => {
    const [a1, a2] = await start([{ priority: 150 }, { priority: 100 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    expect(await arpAnswers(lab.vip4)).toStrictEqual([lab.nodes[0]!.mac]);
    // the client talks to the VIP, so it has a neighbour entry that announcements must move
    expect((await lab.ping(lab.client.netns, lab.vip4)).ok).toBe(true);
    expect(await lab.neighbor(lab.client.netns, lab.vip4)).toBe(lab.nodes[0]!.mac);
    await blockVrrp(lab, true);
    // the backup no longer hears the master: it takes over (two holders while the partition lasts)
    await waitFor(
      () => a2!.status(),
      (s) => s.state === 'master',
      { timeoutMs: masterDownIntervalMs(100, INTERVAL_CS) + 1000, what: 'n2 to become master' },
    );
    await waitFor(
      () => lab.neighbor(lab.client.netns, lab.vip4),
      (m) => m === lab.nodes[1]!.mac,
      { timeoutMs: 2000, what: "the client's entry to follow n2's gratuitous ARP" },
    );
    await sleep(5000 - 500);
    await blockVrrp(lab, false);
    const healed = Date.now();
    await waitForHolder(lab, lab.vip4, 'n1', 1000);
    // the first ARP request goes out now, within 1 s of the heal
    const asked = Date.now() - healed;
    expect(asked).toBeLessThanOrEqual(1000);
    const answers = await arpAnswers(lab.vip4);
    expect(answers).toStrictEqual([lab.nodes[0]!.mac]);
    expect(await lab.neighbor(lab.client.netns, lab.vip4)).toBe(lab.nodes[0]!.mac);
    expect((await a2!.status()).state).toBe('backup');
    expect(a1!.logLines().some((l) => l.msg === 'heard a lower-priority master: announcing the VIPs again')).toBe(true);
    console.log(`partition healed: n1 alone holds the VIP and answers ARP ${asked} ms after the heal`);
  });

  it('unicast: a non-peer injecting priority-254 adverts changes nothing and is counted as notPeer', async () => {
    const [n1, n2, n3] = lab.nodes;
    const [a1, a2] = await start([
      { priority: 150, peers: [n2!.ipv4] },
      { priority: 100, peers: [n1!.ipv4] },
    ]);
    await waitForHolder(lab, lab.vip4, 'n1');
    const before = [await transitions(a1!), await transitions(a2!)];
    const r = await lab.exec(n3!.netns, [
      process.execPath,
      compiledScript('inject-vrrp'),
      '--source',
      n3!.ipv4,
      '--dest',
      n1!.ipv4,
      '--dest',
      n2!.ipv4,
      '--vip',
      lab.vip4,
      '--priority',
      '254',
      '--count',
      '20',
      '--interval',
      '50',
    ]);
    expect(JSON.parse(r.stdout)).toStrictEqual({ sent: 20 });
    await sleep(masterDownIntervalMs(100, INTERVAL_CS));
    expect([await transitions(a1!), await transitions(a2!)]).toStrictEqual(before);
    expect(await dropped(a1!, 'notPeer')).toBeGreaterThanOrEqual(20);
    expect(await dropped(a2!, 'notPeer')).toBeGreaterThanOrEqual(20);
    expect(a1!.logLines().filter((l) => l.source === n3!.ipv4 && /not in vrrp\.peers/.test(String(l.msg)))).toHaveLength(1);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
  });

  it('auth: the group elects with signed adverts; a wrong key or no trailer changes nothing (counted); the right key would', async () => {
    const [, , n3] = lab.nodes;
    const key = join(lab.dir, 'vrrp.key');
    const wrong = join(lab.dir, 'wrong.key');
    writeFileSync(key, 'a shared key for the faults lab, 32+ bytes long\n', { mode: 0o600 });
    writeFileSync(wrong, 'another key, also long enough to be accepted\n', { mode: 0o600 });
    const [a1, a2] = await start([
      { priority: 150, authKeyFile: key },
      { priority: 100, authKeyFile: key },
    ]);
    await waitForHolder(lab, lab.vip4, 'n1');
    expect((await a2!.status()).masterAddress).toBe(lab.nodes[0]!.ipv4);
    const inject = (extra: string[]) =>
      lab.exec(n3!.netns, [
        process.execPath,
        compiledScript('inject-vrrp'),
        '--source',
        n3!.ipv4,
        '--dest',
        '224.0.0.18',
        '--vip',
        lab.vip4,
        '--priority',
        '254',
        '--count',
        '20',
        '--interval',
        '50',
        ...extra,
      ]);
    const before = [await transitions(a1!), await transitions(a2!)];
    await inject(['--key-file', wrong]);
    await inject([]);
    await sleep(masterDownIntervalMs(100, INTERVAL_CS));
    expect([await transitions(a1!), await transitions(a2!)]).toStrictEqual(before);
    for (const a of [a1!, a2!]) {
      expect(await dropped(a, 'authFailed')).toBeGreaterThanOrEqual(20);
      expect(await dropped(a, 'authMissing')).toBeGreaterThanOrEqual(20);
    }
    expect(a1!.logLines().some((l) => l.source === n3!.ipv4 && /wrong HMAC/.test(String(l.msg)))).toBe(true);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
    // control: the same injection with the group's key is obeyed (n1 steps down to a higher priority)
    const signed = inject(['--key-file', key, '--count', '30']);
    await waitFor(
      () => a1!.status(),
      (s) => s.state === 'backup',
      { timeoutMs: 2000, what: 'n1 to yield to the signed priority-254 adverts' },
    );
    await signed;
    // and after the injector falls silent, n1 is master again
    await waitForHolder(lab, lab.vip4, 'n1', 3000);
  });

  it('auth key rotation: a node signing with the old key and one signing with the new key (both listing both) elect one holder', async () => {
    const oldKey = 'the old key of the faults lab, long enough';
    const newKey = 'the new key of the faults lab, long enough';
    const k1 = join(lab.dir, 'rot-1.key');
    const k2 = join(lab.dir, 'rot-2.key');
    writeFileSync(k1, `${oldKey}\n${newKey}\n`, { mode: 0o600 });
    writeFileSync(k2, `${newKey}\n${oldKey}\n`, { mode: 0o600 });
    const [a1, a2] = await start([
      { priority: 150, authKeyFile: k1 },
      { priority: 100, authKeyFile: k2 },
    ]);
    await waitForHolder(lab, lab.vip4, 'n1');
    await sleep(500);
    expect((await a2!.status()).masterAddress).toBe(lab.nodes[0]!.ipv4);
    for (const a of [a1!, a2!]) expect((await a.status()).counters.dropped).not.toHaveProperty('authFailed');
    expect((await a1!.status()).auth).toBe(true);
  });

  it('the wall clock the agents see jumps +1 h and -1 h on the holder and on a backup: zero transitions', async () => {
    const clock = [join(lab.dir, 'clock-n1'), join(lab.dir, 'clock-n2')];
    for (const f of clock) writeFileSync(f, '+0\n');
    const faked = (file: string): Record<string, string> => ({
      LD_PRELOAD: LIBFAKETIME,
      FAKETIME_TIMESTAMP_FILE: file,
      FAKETIME_NO_CACHE: '1',
      // a real clock step moves CLOCK_REALTIME only; CLOCK_MONOTONIC never jumps
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
    });
    const [a1, a2] = await start([
      { priority: 150, env: faked(clock[0]!) },
      { priority: 100, env: faked(clock[1]!) },
    ]);
    await waitForHolder(lab, lab.vip4, 'n1');
    await sleep(500);
    const before = [await transitions(a1!), await transitions(a2!)];
    for (const step of ['+1h', '-1h']) {
      for (const f of clock) writeFileSync(f, `${step}\n`);
      await sleep(1500);
      // the agents really see the step: their log timestamps moved by about an hour
      for (const a of [a1!, a2!]) {
        const n = a.logLines().length;
        a.proc.kill('SIGUSR1');
        const line = await waitFor(
          async () =>
            a
              .logLines()
              .slice(n)
              .find((l) => l.msg === 'status (SIGUSR1)'),
          (l) => l !== undefined,
          { timeoutMs: 2000, what: 'the status log line' },
        );
        const skew = Date.parse(String(line!.time)) - Date.now();
        expect(Math.abs(skew - (step === '+1h' ? 3_600_000 : -3_600_000))).toBeLessThan(60_000);
      }
    }
    for (const f of clock) writeFileSync(f, '+0\n');
    await sleep(1000);
    expect([await transitions(a1!), await transitions(a2!)]).toStrictEqual(before);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual(['n1']);
  });

  it('link down → fault (VIP dropped, priority 0 would not reach anyone); link up → rejoins and preempts; the VIP never becomes the source address', async () => {
    const [n1, n2] = lab.nodes;
    const [a1] = await start([{ priority: 150 }, { priority: 100 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    await lab.linkDown(n1!);
    await waitFor(
      () => a1!.status(),
      (s) => s.state === 'fault',
      { timeoutMs: 2000, what: 'n1 to enter fault' },
    );
    await waitForHolder(lab, lab.vip4, 'n2', masterDownIntervalMs(100, INTERVAL_CS) + 1000);
    expect((await a1!.status()).vipsHeld).toBe(false);
    await lab.linkUp(n1!);
    await waitForHolder(lab, lab.vip4, 'n1', 3000);
    expect((await a1!.status()).state).toBe('master');
    expect(
      a1!
        .logLines()
        .filter((l) => l.msg === 'state change')
        .map((l) => `${String(l.from)}>${String(l.to)}`),
    ).toStrictEqual(['init>backup', 'backup>master', 'master>fault', 'fault>init', 'init>backup', 'backup>master']);
    // after the flap the node's own address is still what it speaks from, not the VIP
    const route = await lab.exec(n1!.netns, ['ip', '-4', '-o', 'route', 'get', n2!.ipv4]);
    expect(route.stdout).toMatch(new RegExp(`src ${n1!.ipv4.replace(/\./g, '\\.')} `));
    const addrs = (await lab.addresses(n1!)).filter((a) => a.family === 'inet' && a.scope === 'global').map((a) => a.address);
    expect(addrs[0]).toBe(n1!.ipv4);
  });

  it('the VIP is released: connections on it are destroyed, so a client on the old holder reconnects at once, to the new holder', async () => {
    await lab.startApiservers();
    const [a1] = await start([{ priority: 150 }, { priority: 100 }]);
    await waitForHolder(lab, lab.vip4, 'n1');
    // a client on the holder itself: its socket and the apiserver's both have the VIP as local address
    const l = await startLongconn(lab, lab.nodes[0]!, `https://${lab.vip4}:6443/version`, [
      '--interval',
      '100',
      '--duration',
      '8000',
      '--reconnect',
      '--max-connections',
      '3',
    ]);
    try {
      expect(l.results.at(-1)).toMatchObject({ ok: true, node: 'n1' });
      const t0 = Date.now();
      expect(await a1!.stop('SIGTERM')).toBe(0);
      agents.shift();
      const closed = await waitFor(
        async () => l.events.find((e) => e.event === 'closed'),
        (e) => e !== undefined,
        { timeoutMs: 3000, intervalMs: 20, what: 'the connection on the VIP to be closed' },
      );
      const after = Number(closed!.at) - t0;
      expect(after).toBeLessThanOrEqual(1000);
      expect(a1!.logLines().some((x) => /connections on a released VIP destroyed/.test(String(x.msg)) && Number(x.sockets) >= 1)).toBe(true);
      await waitFor(
        async () => l.results.filter((r) => r.ok && r.node === 'n2').length,
        (n) => n >= 2,
        { timeoutMs: 3000, intervalMs: 50, what: 'the reconnected client to be served by n2' },
      );
      console.log(`VIP released: the local client's connection closed ${after} ms after SIGTERM, then served by n2`);
    } finally {
      await l.proc.stop('SIGTERM', 3000);
    }
  });

  it('dual stack: an IPv4 group and an IPv6 group on the same nodes are independent', async () => {
    const [n1, n2] = lab.nodes;
    const v4 = await Promise.all([startAgent(lab, n1!, { priority: 150 }), startAgent(lab, n2!, { priority: 100 })]);
    const v6 = await Promise.all([
      startAgent(lab, n1!, { priority: 100, family: 6, vrid: 52, adminPort: 9642 }),
      startAgent(lab, n2!, { priority: 150, family: 6, vrid: 52, adminPort: 9642 }),
    ]);
    agents.push(...v4, ...v6);
    await waitForHolder(lab, lab.vip4, 'n1');
    await waitForHolder(lab, lab.vip6, 'n2');
    const before = await Promise.all(v6.map(transitions));
    // the IPv4 holder's agent stops: the IPv4 VIP moves, the IPv6 group does not notice
    expect(await v4[0]!.stop('SIGTERM')).toBe(0);
    agents.splice(agents.indexOf(v4[0]!), 1);
    await waitForHolder(lab, lab.vip4, 'n2', 2000);
    await sleep(500);
    expect(await Promise.all(v6.map(transitions))).toStrictEqual(before);
    expect((await lab.holders(lab.vip6)).map((n) => n.name)).toStrictEqual(['n2']);
    expect((await v6[1]!.status()).vrid).toBe(52);
  });

  it('multi-homed node, default route on the other interface: the VIP lands on the interface of its subnet', async () => {
    const n1 = lab.nodes[0]!;
    const other = `10.79.${SUBNET}`;
    await lab.exec(n1.netns, ['ip', 'link', 'add', 'eth1', 'type', 'veth', 'peer', 'name', 'eth1p']);
    try {
      await lab.exec(n1.netns, ['ip', 'addr', 'add', `${other}.1/24`, 'dev', 'eth1']);
      await lab.exec(n1.netns, ['ip', 'link', 'set', 'eth1', 'up']);
      await lab.exec(n1.netns, ['ip', 'link', 'set', 'eth1p', 'up']);
      await lab.exec(n1.netns, ['ip', 'route', 'replace', 'default', 'via', `${other}.254`, 'dev', 'eth1', 'onlink']);
      const route = await lab.exec(n1.netns, ['ip', 'route', 'show', 'default']);
      expect(route.stdout).toMatch(/dev eth1/);
      const [a1] = await start([{ priority: 150, noInterface: true }]);
      await waitForHolder(lab, lab.vip4, 'n1');
      expect((await a1!.status()).interface).toBe('eth0');
      const on = async (dev: string): Promise<string> => (await lab.exec(n1.netns, ['ip', '-4', '-o', 'addr', 'show', 'dev', dev])).stdout;
      expect(await on('eth0')).toContain(`${lab.vip4}/32`);
      expect(await on('eth1')).not.toContain(lab.vip4);
    } finally {
      await lab.exec(n1.netns, ['ip', 'link', 'del', 'eth1'], { allowFail: true });
    }
  });

  it("IPv6 handover on link loss: the new holder's VIP is usable within Master_Down_Interval + 250 ms and the client's neighbour entry follows", async () => {
    const [, a2] = await start([
      { priority: 150, family: 6 },
      { priority: 100, family: 6 },
    ]);
    await waitForHolder(lab, lab.vip6, 'n1');
    expect((await lab.ping(lab.client.netns, lab.vip6)).ok).toBe(true);
    expect(await lab.neighbor(lab.client.netns, lab.vip6)).toBe(lab.nodes[0]!.mac);
    const t0 = Date.now();
    await lab.linkDown(lab.nodes[0]!);
    const usable = await waitFor(
      async () => (await lab.addresses(lab.nodes[1]!)).find((a) => a.address === lab.vip6),
      (a) => a !== undefined && !a.tentative && !a.dadfailed,
      { timeoutMs: 3000, intervalMs: 10, what: "n2's VIP to be usable" },
    );
    const took = Date.now() - t0;
    expect(usable).toMatchObject({ prefixLen: 128, tentative: false, dadfailed: false });
    expect(took).toBeLessThanOrEqual(masterDownIntervalMs(100, INTERVAL_CS) + MARGIN_MS);
    // the unsolicited NA (Override) moved the client's existing entry without a new solicitation
    await waitFor(
      () => lab.neighbor(lab.client.netns, lab.vip6),
      (m) => m === lab.nodes[1]!.mac,
      { timeoutMs: 1000, what: "the client's entry to follow n2's NA" },
    );
    expect((await a2!.status()).state).toBe('master');
    console.log(`IPv6 handover: n2's VIP usable ${took} ms after n1's link went down`);
  });
});
