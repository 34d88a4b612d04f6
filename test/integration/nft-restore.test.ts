/**
 * Someone else removes or changes ballast's nftables table on the VIP holder (`nft flush
 * ruleset`, `nft delete table ip ballast`, a chain deleted): the agent notices through the
 * kernel's nftables events and puts the exact table back within the 1 s bound (measured from
 * the command's return, in the holder's namespace), counts it once in /status and the metric,
 * logs one warn line, and the VIP serves again. A table of someone else is left alone and its
 * changes trigger nothing; another node's namespace is not watched (its agent counts nothing);
 * an IPv6 agent on the same node restores only its own `table ip6 ballast`.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Lab, probeOnce } from '../../lab/lab.js';
import { startAgent, startAgents, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { RESTORED_MESSAGE } from '../../src/dataplane/nftwatch.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bnfw';
const SUBNET = 110;
/** The data plane's bound (docs/dataplane.md): restored within 1 s of the change. */
const BOUND_MS = 1000;

/**
 * Runs inside the node's namespace (sh): the fault command "$1", then `nft list table $2 ballast`
 * every ~5 ms until the listing (counter values aside) equals the file "$3"; prints the ms from
 * the command's return (or "timeout" after 3 s).
 */
const FAULT_SCRIPT = `
$1 >/dev/null 2>&1 || exit 3
t0=$(date +%s%N)
while :; do
  now=$(date +%s%N)
  if nft list table "$2" ballast 2>/dev/null | sed -E 's/packets [0-9]+ bytes [0-9]+/packets - bytes -/' | cmp -s - "$3"; then echo $(( (now - t0) / 1000000 )); exit 0; fi
  [ $(( now - t0 )) -gt 3000000000 ] && { echo timeout; exit 0; }
  sleep 0.005
done`;

/** GET /status and /metrics from the admin port argv[1] on 127.0.0.1; prints [status, metrics text]. */
const ADMIN_SCRIPT = `
const get = (p) => fetch('http://127.0.0.1:' + process.argv[1] + p).then((r) => r.text());
Promise.all([get('/status'), get('/metrics')]).then(([s, m]) => console.log(JSON.stringify([JSON.parse(s), m])));`;

const normalized = (s: string): string => s.replace(/packets \d+ bytes \d+/g, 'packets - bytes -');

describe.skipIf(needs('root'))('the nftables table is restored when someone else removes it (root; skipped otherwise)', () => {
  let lab: Lab;
  const agents: LabAgent[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: true, apiservers: true });
  });
  afterAll(async () => {
    await Promise.all(agents.map((a) => a.stop('SIGTERM').catch(() => undefined)));
    await lab?.teardown();
  });

  /** Runs `cmd` in `agent`'s namespace; resolves with the ms from its return until the table of `family` equals `want` again. */
  async function fault(agent: LabAgent, cmd: string, family: 'ip' | 'ip6', want: string): Promise<number> {
    const file = join(lab.dir, `nft-restore-want-${family}`);
    writeFileSync(file, want);
    const r = await lab.exec(agent.node.netns, ['sh', '-c', FAULT_SCRIPT, 'fault', cmd, family, file], { timeoutMs: 10_000 });
    const out = r.stdout.trim();
    if (!/^\d+$/.test(out)) throw new Error(`${cmd}: the ${family} table did not come back as it was within 3 s (${out}); now:\n${await table(agent, family)}`);
    return Number(out);
  }

  async function table(agent: LabAgent, family: 'ip' | 'ip6', name = 'ballast'): Promise<string> {
    return normalized((await lab.exec(agent.node.netns, ['nft', 'list', 'table', family, name], { allowFail: true })).stdout);
  }

  /** restores in /status, the metric and the warn lines (with detectedBy) of `agent` (one process reads both endpoints). */
  async function counted(agent: LabAgent, family: 4 | 6): Promise<{ status: number; metric: string | undefined; logged: string[] }> {
    const r = await lab.exec(agent.node.netns, [process.execPath, '-e', ADMIN_SCRIPT, String(agent.adminPort)], { timeoutMs: 5000 });
    const [doc, metrics] = JSON.parse(r.stdout) as [{ dataplane: { mode: string; restores?: number } }, string];
    const status = doc.dataplane.mode === 'nftables' ? (doc.dataplane.restores ?? -1) : -1;
    const metric = metrics.split('\n').find((l) => l.startsWith(`ballast_dataplane_restores_total{family="${family}"}`));
    const logged = agent
      .logLines()
      .filter((l) => l.msg === RESTORED_MESSAGE)
      .map((l) => `${String(l.family)} ${String(l.detectedBy)}`);
    return { status, metric, logged };
  }

  /** The restore warn lines of `agent` so far: `<family> <detectedBy>`. */
  const restoreLines = (agent: LabAgent): string[] =>
    agent
      .logLines()
      .filter((l) => l.msg === RESTORED_MESSAGE)
      .map((l) => `${String(l.family)} ${String(l.detectedBy)}`);

  /** Waits for the n-th restore line, then checks there are exactly n, all detected by an event. */
  async function expectLogged(agent: LabAgent, family: 4 | 6, n: number): Promise<void> {
    const lines = await waitFor(
      async () => restoreLines(agent),
      (l) => l.length >= n,
      { timeoutMs: 1000, what: `restore ${n} logged on ${agent.node.name} (IPv${family})` },
    );
    expect(lines).toEqual(Array.from({ length: n }, () => `${family} event`));
  }

  /** /status restores and the metric's line agree with the log. */
  async function expectCounted(agent: LabAgent, family: 4 | 6, n: number): Promise<void> {
    expect(await counted(agent, family)).toEqual({
      status: n,
      metric: `ballast_dataplane_restores_total{family="${family}"} ${n}`,
      logged: Array.from({ length: n }, () => `${family} event`),
    });
  }

  it('flush ruleset, delete table, delete chain: back within 1 s each, counted once, other tables untouched', async () => {
    const t0 = performance.now();
    const mark = (what: string): void => console.log(`${what} at ${Math.round(performance.now() - t0)} ms`);
    // an IPv6 agent on n1 too (its own VRID and admin port): it owns `table ip6 ballast`
    const [[a4, b4], a6] = await Promise.all([
      startAgents(
        lab,
        [
          { priority: 150, balance: true },
          { priority: 100, balance: true },
        ],
        agents,
      ),
      startAgent(lab, lab.nodes[0]!, { priority: 150, balance: true, family: 6, vrid: 52, adminPort: 9642 }).then((a) => (agents.push(a), a)),
    ]);
    mark('started');
    await waitForHolder(lab, lab.vip4, 'n1');
    await waitForHolder(lab, lab.vip6, 'n1');
    for (const a of [a4!, a6])
      await waitFor(
        () => a.status(),
        (s) => s.backends.length === 2 && s.backends.every((b) => b.healthy),
        { timeoutMs: 5000, what: `both backends up on ${a.node.name}` },
      );
    const want4 = await waitFor(
      () => table(a4!, 'ip'),
      (t) => lab.nodes.every((n) => t.includes(`dnat to ${n.ipv4}:6443`)),
      { timeoutMs: 2000, what: 'the IPv4 table with both backends' },
    );
    const want6 = await waitFor(
      () => table(a6, 'ip6'),
      (t) => lab.nodes.every((n) => t.includes(`dnat to [${n.ipv6}]:6443`)),
      { timeoutMs: 2000, what: 'the IPv6 table with both backends' },
    );
    mark('ready');

    const times: Record<string, number> = {};
    // 1. everything flushed: both of n1's agents put their table back
    times.flush = await fault(a4!, 'nft flush ruleset', 'ip', want4);
    // the IPv6 agent restores in parallel: within the bound of the same command
    await waitFor(
      () => table(a6, 'ip6'),
      (t) => t === want6,
      { timeoutMs: BOUND_MS, what: 'the IPv6 table back after the flush' },
    );
    await expectLogged(a4!, 4, 1);
    await expectLogged(a6, 6, 1);
    mark('flush');

    // 2. someone else's table, created and changed: nothing restored
    await lab.exec(a4!.node.netns, [
      'sh',
      '-c',
      'nft add table ip bnfwother && nft add chain ip bnfwother input "{ type filter hook input priority 10; policy accept; }" && nft add rule ip bnfwother input tcp dport 9 accept',
    ]);
    const other = await table(a4!, 'ip', 'bnfwother');
    expect(other).toContain('tcp dport 9 accept');
    await sleep(300);
    expect(restoreLines(a4!)).toHaveLength(1);
    mark('other');

    // 3. our table deleted; the IPv6 one and the other table stay as they are
    times.deleteTable = await fault(a4!, 'nft delete table ip ballast', 'ip', want4);
    await expectLogged(a4!, 4, 2);
    // 4. one of our chains deleted (a base chain: nothing refers to it)
    times.deleteChain = await fault(a4!, 'nft delete chain ip ballast prerouting', 'ip', want4);
    await expectLogged(a4!, 4, 3);
    expect(await table(a4!, 'ip', 'bnfwother')).toBe(other);
    // 5. the IPv6 table deleted: only the IPv6 agent restores
    times.deleteTable6 = await fault(a6, 'nft delete table ip6 ballast', 'ip6', want6);
    await expectLogged(a6, 6, 2);
    mark('faults');
    console.log(`nft restore, ms from the command's return to the exact table: ${JSON.stringify(times)}`);
    for (const ms of Object.values(times)) expect(ms).toBeLessThanOrEqual(BOUND_MS);

    // exactly those restores in /status and the metric; n2's namespace was never touched, so its agent counted nothing
    await Promise.all([expectCounted(a4!, 4, 3), expectCounted(a6, 6, 2), expectCounted(b4!, 4, 0)]);
    // served through the restored table
    expect(await probeOnce(lab, `https://${lab.vip4}:6443/version`)).toMatchObject({ ok: true });
    await lab.exec(a4!.node.netns, ['nft', 'delete', 'table', 'ip', 'bnfwother']);
    // a clean stop: exit 0, the tables gone
    expect(await Promise.all([a6.stop('SIGTERM'), a4!.stop('SIGTERM')])).toEqual([0, 0]);
    agents.splice(agents.indexOf(a4!), 1);
    agents.splice(agents.indexOf(a6), 1);
    expect([await table(a4!, 'ip'), await table(a4!, 'ip6')]).toEqual(['', '']);
    mark('stopped');
  });
});
