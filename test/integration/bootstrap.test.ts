/**
 * Bootstrap before the CA exists, on a 2-node lab: the final configuration —
 * backends and `apiserver.health.caFile` — started on a node where the CA file (and its
 * directory) does not exist yet and no apiserver runs, as before `kubeadm init`:
 *
 *   - `ballast validate` exits 0 with a note naming the file;
 *   - `ballast run` keeps running, the VIP comes up within Master_Down_Interval of the start
 *     (+ margin), /status, `ballast status` and /metrics show the backend waiting for the CA,
 *     the ruleset has no DNAT, and a connection to VIP:6443 is refused within 1 s (never a hang);
 *   - the stand-in starts: VIP:6443 reaches it at once (no DNAT, the holder's own address);
 *   - the CA appears (copied from the lab CA, what kubeadm init writes): the backend is up within (rise + 1) × interval × 1.1 (jitter) + timeout + margin, and
 *     clients via the VIP are served;
 *   - a CA file that exists but holds no certificate: exit 2 naming apiserver.health.caFile, and
 *     nothing on the node changed (no VIP, no table);
 *   - a joining worker (local endpoint, no election, eBPF) with the CA missing: starts, its
 *     endpoint has no backend (connect() untouched: refused, nothing listens on 7443), and serves
 *     through the backend once the CA appears.
 * Adverts every 100 ms, checks every 200 ms, rise/fall 2.
 */
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Lab, probeOnce, runProber } from '../../lab/lab.js';
import { agentConfig, cliPath, connectFrom, startAgent, waitForHolder, type AgentSettings, type LabAgent } from '../../lab/cluster.js';
import { pinDirFor } from '../../src/dataplane/ebpf.js';
import { formatStatus } from '../../src/observe/status.js';
import { teardownFullAgentLab } from '../support/leftovers.js';
import { needs, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bboot';
const SUBNET = 241;
const ADVERT_MS = 100;
const INTERVAL_MS = 200;
const TIMEOUT_MS = 200;
const RISE = 2;
/** Scheduling on 2 cores, the status round trip. */
const MARGIN_MS = 300;
/** RFC 9568 §6.1: 3 × Advertisement_Interval + Skew_Time. */
const masterDownMs = (priority: number): number => 3 * ADVERT_MS + ((256 - priority) * ADVERT_MS) / 256;

describe.skipIf(needs('root'))('bootstrap before the CA exists (root; skipped otherwise)', () => {
  let lab: Lab;
  let agents: LabAgent[] = [];
  let pinDir: string | undefined;

  beforeAll(async () => {
    // no stand-in apiserver yet: nothing exists before kubeadm init
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: false });
  });
  afterEach(async () => {
    await Promise.all(agents.map((a) => a.stop('SIGTERM').catch(() => undefined)));
    agents = [];
    for (const n of lab.nodes) {
      await lab.exec(n.netns, ['nft', 'delete', 'table', 'ip', 'ballast'], { allowFail: true });
      await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
    }
  });
  // the pins (a failed case may leave them), their lock file and empty parent, then the lab
  afterAll(() => teardownFullAgentLab({ lab, ...(pinDir === undefined ? {} : { pinDir }) }));

  /** n1's settings: the final config, with its backends and its CA at `caFile`. */
  const settings = (caFile: string, backends: string[], over: Partial<AgentSettings> = {}, extra: Record<string, unknown> = {}): AgentSettings => ({
    priority: 150,
    advertisementInterval: `${ADVERT_MS}ms`,
    ...over,
    extra: {
      apiserver: { port: 6443, backends, health: { caFile, interval: `${INTERVAL_MS}ms`, timeout: `${TIMEOUT_MS}ms`, rise: RISE, fall: 2 } },
      ...extra,
    },
  });
  const logTime = (a: LabAgent, pred: (l: Record<string, unknown>) => boolean): number | null => {
    const l = a.logLines().find((x) => typeof x.time === 'string' && pred(x));
    return l ? Date.parse(String(l.time)) : null;
  };
  const tableOf = async (i: number): Promise<{ code: number; text: string }> => {
    const r = await lab.exec(lab.nodes[i]!.netns, ['nft', 'list', 'table', 'ip', 'ballast'], { allowFail: true });
    return { code: r.code, text: r.stdout };
  };

  it('a CA file that exists but holds no certificate: exit 2 naming apiserver.health.caFile; no VIP, no table', async () => {
    const n1 = lab.nodes[0]!;
    const caFile = join(lab.dir, 'bad-ca.crt');
    writeFileSync(caFile, 'not a certificate\n');
    const configPath = join(lab.dir, 'n1-bad-ca.yaml');
    writeFileSync(configPath, agentConfig(lab, n1, settings(caFile, [`${n1.ipv4}:6443`])));
    const proc = lab.spawn(n1.netns, [process.execPath, cliPath(), 'run', '--config', configPath], { logFile: 'n1-bad-ca.log' });
    const code = await proc.exited;
    expect(code).toBe(2);
    expect(proc.output()).toContain(`apiserver.health.caFile: ${caFile} holds no PEM certificate`);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual([]);
    expect((await tableOf(0)).code).not.toBe(0);
  });

  it('starts with the CA missing: VIP up, backends waiting for the CA, VIP:6443 refused at once; the CA and the apiserver appear: up within (rise + 1) × interval + timeout, served via the VIP', async () => {
    const n1 = lab.nodes[0]!;
    const pki = join(lab.dir, 'n1-pki');
    const caFile = join(pki, 'ca.crt');
    const backend = `${n1.ipv4}:6443`;
    const s = settings(caFile, [backend]);

    // validate: ok, with a note
    const configPath = join(lab.dir, 'n1-validate.yaml');
    writeFileSync(configPath, agentConfig(lab, n1, s));
    const v = await lab.exec(n1.netns, [process.execPath, cliPath(), 'validate', '--config', configPath], { allowFail: true });
    expect(v.code).toBe(0);
    expect(v.stdout).toContain(`apiserver.health.caFile: note: ${caFile} does not exist yet: the health checks wait for it`);
    expect(v.stdout).toContain(`${configPath}: ok (1 file to wait for)`);

    const a1 = await startAgent(lab, n1, s);
    agents.push(a1);
    await waitForHolder(lab, lab.vip4, 'n1', 10_000);
    // a lone node: Master_Down_Interval after the election started (Initialize → Backup, RFC 9568 §6.4.1)
    const started = logTime(a1, (l) => l.msg === 'starting');
    const backup = logTime(a1, (l) => l.msg === 'state change' && l.to === 'backup');
    const master = logTime(a1, (l) => l.msg === 'state change' && l.to === 'master');
    expect(started).not.toBeNull();
    expect(backup).not.toBeNull();
    expect(master).not.toBeNull();
    const vipMs = master! - backup!;
    const startMs = master! - started!;
    expect(vipMs).toBeLessThanOrEqual(masterDownMs(150) + MARGIN_MS);

    // the backend waits for its CA: /status, ballast status, /metrics; no DNAT
    const st = await waitFor(
      () => a1.status(),
      (d) => d.backends[0]?.state === 'down',
      { timeoutMs: 5000, intervalMs: 50, what: 'the backend judged' },
    );
    expect(st.backends).toStrictEqual([
      expect.objectContaining({
        address: backend,
        state: 'down',
        healthy: false,
        waitingFor: { setting: 'apiserver.health.caFile', path: caFile },
        reason: `waiting for apiserver.health.caFile ${caFile} (it does not exist yet)`,
      }),
    ]);
    expect(st.dataplane).toMatchObject({ mode: 'nftables', backends: [] });
    expect(formatStatus(st)).toContain(`backend:   ${backend} waiting for apiserver.health.caFile ${caFile}`);
    const metrics = await a1.admin('/metrics');
    expect(metrics).toContain(`ballast_backend_waiting_for_file{backend="${backend}",setting="apiserver.health.caFile",path="${caFile}"} 1`);
    const table = await tableOf(0);
    expect(table.code).toBe(0);
    expect(table.text).not.toContain('dnat to');
    // nothing listens on the VIP holder: refused at once, never a hang
    const refused = await probeOnce(lab, `https://${lab.vip4}:6443/version`, { timeoutMs: 1000 });
    expect(refused).toMatchObject({ ok: false });
    expect((refused as { error: string }).error).toMatch(/ECONNREFUSED|ECONNRESET/);
    expect(refused.ms).toBeLessThan(1000);
    const waitingPriority = (await a1.status()).effectivePriority;

    // kubeadm init starts the apiserver before ballast can check it (no CA yet): no DNAT, so
    // VIP:6443 is the holder's own address and reaches that apiserver the moment it listens
    await lab.startApiservers();
    const direct = await probeOnce(lab, `https://${lab.vip4}:6443/version`, { timeoutMs: 1000 });
    expect(direct).toMatchObject({ ok: true, node: 'n1' });
    expect((await a1.status()).backends[0]).toMatchObject({ healthy: false, waitingFor: { path: caFile } });
    expect((await tableOf(0)).text).not.toContain('dnat to');
    // then the CA, in a directory created now
    mkdirSync(pki);
    copyFileSync(lab.ca.certFile, caFile);
    const t0 = Date.now();
    const up = await waitFor(
      () => a1.status(),
      (d) => d.backends[0]?.healthy === true,
      { timeoutMs: 10_000, intervalMs: 20, what: 'the backend up' },
    );
    // timed by the agent's own log line (each `ballast status` poll is a new Node process)
    const upMs = logTime(a1, (l) => l.msg === 'backend health' && l.to === 'up')! - t0;
    const bound = (RISE + 1) * INTERVAL_MS * 1.1 + TIMEOUT_MS + MARGIN_MS;
    expect('waitingFor' in up.backends[0]!).toBe(false);
    const served = await runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 20, durationMs: 600, timeoutMs: 500 }).done;
    console.log(
      `bootstrap: VIP master ${vipMs} ms after the election started, ${startMs} ms after the 'starting' line (Master_Down_Interval ${masterDownMs(150).toFixed(1)} ms); while waiting: effective priority ${waitingPriority}, ` +
        `VIP:6443 ${(refused as { error: string }).error} in ${refused.ms} ms; VIP:6443 served by n1's own apiserver before the CA (${direct.ok}); backend up ${upMs} ms after the CA appeared (bound ${Math.round(bound)} ms); ` +
        `then via the VIP ${served.ok}/${served.requests} ok`,
    );
    expect(upMs).toBeLessThanOrEqual(bound);
    expect(served.failed).toBe(0);
    expect(served.nodes).toStrictEqual({ n1: served.requests });
    // the process never exited
    expect(a1.proc.child.exitCode).toBeNull();
  }, 60_000);

  it.skipIf(needs('bpf'))(
    'a joining worker (local endpoint, eBPF, no election) with the CA missing starts, leaves connect() untouched, and serves once the CA appears',
    async () => {
      const n1 = lab.nodes[0]!;
      const n2 = lab.nodes[1]!;
      const cgroup = await lab.cgroup(n1);
      pinDir = pinDirFor(cgroup);
      const pki = join(lab.dir, 'worker-pki');
      const caFile = join(pki, 'ca.crt');
      await lab.startApiservers();
      await lab.stopApiserver(n1);
      const s = settings(
        caFile,
        [`${n2.ipv4}:6443`],
        { noElection: true, hostMounts: true },
        {
          localEndpoint: { address: '127.0.0.1:7443', cgroup },
          dataplane: { local: 'ebpf', keepOnStop: false },
        },
      );
      const a = await startAgent(lab, n1, s);
      agents.push(a);
      const st = await waitFor(
        () => a.anyStatus(),
        (d) => d.backends[0]?.state === 'down',
        { timeoutMs: 5000, intervalMs: 50, what: 'the backend judged' },
      );
      expect(st.backends[0]).toMatchObject({ waitingFor: { setting: 'apiserver.health.caFile', path: caFile } });
      expect(st.local).toMatchObject({ mode: 'ebpf', backends: [] });
      // no backend: the connect() is left alone, and nothing listens on 127.0.0.1:7443
      expect((await connectFrom(lab, n1, { address: '127.0.0.1', port: 7443, count: 3, cgroup })).errors).toStrictEqual({ ECONNREFUSED: 3 });

      mkdirSync(pki);
      copyFileSync(lab.ca.certFile, caFile);
      const t0 = Date.now();
      await waitFor(
        () => a.anyStatus(),
        (d) => d.local.mode === 'ebpf' && d.local.backends.length === 1,
        { timeoutMs: 10_000, intervalMs: 20, what: 'the local endpoint with its backend' },
      );
      const upMs = logTime(a, (l) => l.msg === 'backend health' && l.to === 'up')! - t0;
      const bound = (RISE + 1) * INTERVAL_MS * 1.1 + TIMEOUT_MS + MARGIN_MS;
      const c = await connectFrom(lab, n1, { address: '127.0.0.1', port: 7443, tls: true, count: 10, cgroup });
      console.log(
        `bootstrap worker: local endpoint served ${upMs} ms after the CA appeared (bound ${Math.round(bound)} ms); ${c.ok}/10 connections via 127.0.0.1:7443 to ${JSON.stringify(c.nodes)}`,
      );
      expect(upMs).toBeLessThanOrEqual(bound);
      expect(c).toMatchObject({ ok: 10, nodes: { n2: 10 } });
    },
    60_000,
  );
});
