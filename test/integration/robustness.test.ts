/**
 * What operators do to a running agent, on the lab: start a second one, remove or add the VIP
 * by hand, send the signals keepalived users send out of habit, delete the interface.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab } from '../../lab/lab.js';
import { cliPath, startAgent, startAgents, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'brob';
const SUBNET = 212;
/** vipLifetime of the SIGKILL case, ms */
const VIP_LIFETIME_MS = 2000;

describe.skipIf(needs('root'))('robustness on the lab (root; skipped otherwise)', () => {
  let lab: Lab;
  let agents: LabAgent[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: false });
  });
  afterEach(async () => {
    await Promise.all(agents.map((a) => a.stop('SIGKILL').catch(() => undefined)));
    agents = [];
    for (const n of lab.nodes) await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  /**
   * n1 (150) and n2 (100) started at once, `extra` merged into both configs; waits for n1 to hold
   * the VIP (if n2's timer fires first, n1 preempts it).
   */
  async function pair(extra?: Record<string, unknown>): Promise<[LabAgent, LabAgent]> {
    const s = { ...(extra ? { extra } : {}) };
    const [a1, a2] = await startAgents(
      lab,
      [
        { priority: 150, ...s },
        { priority: 100, ...s },
      ],
      agents,
    );
    await waitForHolder(lab, lab.vip4, 'n1');
    return [a1!, a2!];
  }

  it('a second agent for the same VRID and interface refuses to start and changes nothing', async () => {
    const [a1] = await pair();
    const other = `${lab.dir}/second.yaml`;
    writeFileSync(other, readFileSync(a1.configPath, 'utf8').replace('127.0.0.1:9641', '127.0.0.1:9650'));
    const r = await lab.exec(lab.nodes[0]!.netns, [process.execPath, cliPath(), 'run', '--config', other], { allowFail: true, timeoutMs: 10_000 });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('BALLAST_E_ALREADY_RUNNING');
    // the master kept its VIP the whole time
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n1']);
    expect((await a1.status()).vipsHeld).toBe(true);
  });

  it('a master whose VIP is removed by hand puts it back; a backup removes a VIP added by hand', async () => {
    const [a1, a2] = await pair();
    await lab.exec(lab.nodes[0]!.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0']);
    await waitForHolder(lab, lab.vip4, 'n1', 2000);
    expect(a1.logLines().some((l) => l.msg === 'a VIP was removed from the interface by something else; restoring it')).toBe(true);
    await lab.exec(lab.nodes[1]!.netns, ['ip', 'addr', 'add', `${lab.vip4}/32`, 'dev', 'eth0']);
    await waitForHolder(lab, lab.vip4, 'n1', 2000);
    expect(a2.logLines().some((l) => l.msg === 'a VIP was added to the interface while this node is not master; removing it')).toBe(true);
  });

  it('SIGUSR1 logs the status and opens no inspector; SIGHUP does not stop the agent', async () => {
    const [a1] = await pair();
    a1.proc.kill('SIGUSR1');
    await waitFor(
      async () => a1.logLines().some((l) => l.msg === 'status (SIGUSR1)'),
      (x) => x,
      { timeoutMs: 3000, what: 'the SIGUSR1 status line' },
    );
    const ss = await lab.exec(lab.nodes[0]!.netns, ['ss', '-ltnH', 'sport = :9229']);
    expect(ss.stdout.trim()).toBe('');
    a1.proc.kill('SIGHUP');
    await sleep(500);
    expect((await a1.status()).state).toBe('master');
    expect(a1.logLines().some((l) => typeof l.msg === 'string' && l.msg.startsWith('SIGHUP'))).toBe(true);
  });

  it('two signals in a row still resign and clean up, exit 0', async () => {
    const [a1] = await pair();
    // both pending at once, as a signal to the process group and one from timeout(1) arrive: the
    // agent is stopped while they are sent, so a preempted test cannot send the second one after
    // the agent's exit. Either may be read in the stop's last poll (run() polls once more for it)
    a1.proc.kill('SIGSTOP');
    a1.proc.kill('SIGTERM');
    a1.proc.kill('SIGINT');
    a1.proc.kill('SIGCONT');
    expect(await a1.proc.exited).toBe(0);
    await waitForHolder(lab, lab.vip4, 'n2', 2000);
    const signals = a1.logLines().filter((l) => l.msg === 'signal received' || l.msg === 'already stopping');
    // the kernel delivers the lower-numbered one first, but either thread may run its handler
    expect(signals.map((l) => l.msg)).toEqual(['signal received', 'already stopping']);
    expect(signals.map((l) => l.signal).sort()).toEqual(['SIGINT', 'SIGTERM']);
  });

  it('SIGKILL of the master: the backup takes over within Master_Down_Interval + 250 ms, and the VIP leaves the killed node by itself within vipLifetime', async () => {
    // the shortest vipLifetime allowed (2 s; default 5 s): what is under test is that the killed
    // node's copy ages out by itself within the configured lifetime, not the default's length
    const [a1] = await pair({ vipLifetime: `${VIP_LIFETIME_MS / 1000}s` });
    a1.proc.kill('SIGKILL');
    const t0 = Date.now();
    // both hold it for a while: the killed node's copy only ages out
    await waitFor(
      () => lab.holders(lab.vip4),
      (h) => h.some((n) => n.name === 'n2'),
      { timeoutMs: 2000, intervalMs: 10, what: 'n2 to take the VIP' },
    );
    const takeover = Date.now() - t0;
    expect(takeover).toBeLessThanOrEqual(masterDownIntervalMs(100, 10) + 250);
    await waitForHolder(lab, lab.vip4, 'n2', VIP_LIFETIME_MS + 1000 + 1000);
    const gone = Date.now() - t0;
    // renewed every third of vipLifetime: the last renewal was at most ~0.7 s before the kill; the
    // kernel ages addresses in whole seconds (up to 1 s more)
    expect(gone).toBeLessThanOrEqual(VIP_LIFETIME_MS + 1000);
    console.log(`SIGKILL: takeover ${takeover} ms, VIP gone from the killed node after ${gone} ms`);
    agents.shift();
    // a restarted agent comes back as backup, without a second copy of the address
    const back = await startAgent(lab, lab.nodes[0]!, { priority: 150, preempt: false });
    agents.push(back);
    expect((await back.status()).state).toBe('backup');
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toEqual(['n2']);
  });

  it('the interface is deleted: the agent exits 1 with BALLAST_E_INTERFACE_GONE', async () => {
    const [, a2] = await pair();
    // n2's eth0 is one end of a veth pair; deleting it is what a NIC vanishing looks like
    await lab.exec(lab.nodes[1]!.netns, ['ip', 'link', 'del', 'eth0']);
    expect(await a2.proc.exited).toBe(1);
    expect(a2.logLines().some((l) => l.code === 'BALLAST_E_INTERFACE_GONE')).toBe(true);
    agents.pop();
  });
});
