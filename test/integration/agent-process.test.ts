/**
 * The agent as a process, the compiled CLI in lab node n1:
 *
 *   its name: `ballast` (the main thread's comm), so `pgrep -x ballast` finds it;
 *   its log as the journal reads it: stdout a file whose dev:ino is JOURNAL_STREAM, each line
 *     starts with the `<N>` syslog level of its pino level; without the match, plain JSON;
 *   a reporting path that throws (X509Certificate as on Node 20, lab/node20-x509.ts) is contained:
 *     the agent stays master, holds the VIP, keeps advertising, counts it in
 *     ballast_internal_errors_total{path="certificates"} and logs it once;
 *   the eBPF local endpoint on a read-only bpffs (a private mount namespace, as systemd's
 *     ProtectKernelTunables=yes leaves it): the fallback warning, at warn, names EROFS, the unit
 *     options (ProtectKernelTunables, ReadWritePaths=/sys/fs/bpf) and `systemctl edit ballast`,
 *     and the proxy serves the endpoint.
 *
 * Node 20's refusal is in cli.test.ts (no root needed).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, fstatSync, openSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { compiledScript } from '../../lab/lab.js';
import { agentConfig, cliPath, LabAgent, runAgent } from '../../lab/cluster.js';
import { SYSLOG_LEVELS } from '../../src/log/log.js';
import { INTERNAL_ERROR_MSG } from '../../src/observe/contain.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bfix';
const SUBNET = 170;

/** An agent started here with its stdout a file (not the lab's pipe). */
interface FileAgent {
  proc: ChildProcess;
  file: string;
  exited: Promise<number | null>;
  lines(): string[];
}

describe.skipIf(needs('root', 'nft', 'bpf'))('the agent process (root; skipped otherwise)', () => {
  let lab: Lab;
  const started: (ChildProcess | LabAgent)[] = [];

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 1, apiservers: true });
  });
  afterEach(async () => {
    for (const a of started.splice(0)) {
      if ('proc' in a) await a.stop('SIGKILL').catch(() => undefined);
      else if (a.exitCode === null && a.signalCode === null) {
        const gone = new Promise((r) => a.once('exit', r));
        a.kill('SIGKILL');
        await gone;
      }
    }
    await lab.exec(lab.nodes[0]!.netns, ['ip', 'addr', 'flush', 'dev', lab.nodes[0]!.ifname, 'to', `${lab.vip4}/32`], { allowFail: true });
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  /** `ballast run` in n1 with stdout the file `name`; JOURNAL_STREAM that file's dev:ino when `journal`, another's otherwise. */
  function runToFile(name: string, configPath: string, journal: boolean): FileAgent {
    const file = join(lab.dir, name);
    const out = openSync(file, 'w');
    const st = fstatSync(out, { bigint: true });
    const other = statSync(lab.dir, { bigint: true });
    const stream = journal ? `${st.dev}:${st.ino}` : `${other.dev}:${other.ino}`;
    const proc = spawn('ip', ['netns', 'exec', lab.nodes[0]!.netns, process.execPath, cliPath(), 'run', '--config', configPath], {
      stdio: ['ignore', out, 'inherit'],
      env: { ...process.env, JOURNAL_STREAM: stream },
    });
    closeSync(out);
    started.push(proc);
    const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
    return { proc, file, exited, lines: () => readFileSync(file, 'utf8').split('\n').filter(Boolean) };
  }

  const masterLine = (l: string): boolean => l.includes('"msg":"state change"') && l.includes('"to":"master"');

  it('named ballast: pgrep -x ballast finds the agent, ps says ballast; with JOURNAL_STREAM = its stdout, every line has the <N> of its level', async () => {
    const n1 = lab.nodes[0]!;
    const configPath = join(lab.dir, 'n1-journal.yaml');
    // a CA file that does not exist yet: a warning at the start (the checks wait for it)
    writeFileSync(
      configPath,
      agentConfig(lab, n1, {
        priority: 150,
        balance: true,
        extra: { apiserver: { port: 6443, backends: [`${n1.ipv4}:6443`], health: { caFile: join(lab.dir, 'no-ca-yet.pem') } } },
      }),
    );
    const a = runToFile('n1-journal.out', configPath, true);
    await waitFor(
      () => a.lines().some((l) => masterLine(l.replace(/^<\d>/, ''))),
      (ok) => ok,
      { timeoutMs: 10_000, what: 'n1 master' },
    );
    const pgrep = spawnSync('pgrep', ['-x', 'ballast'], { encoding: 'utf8' });
    expect(pgrep.stdout.trim().split('\n').map(Number)).toContain(a.proc.pid);
    expect(readFileSync(`/proc/${a.proc.pid}/comm`, 'utf8')).toBe('ballast\n');
    expect(spawnSync('ps', ['-o', 'comm=', '-p', String(a.proc.pid)], { encoding: 'utf8' }).stdout.trim()).toBe('ballast');
    // the command line stays what was run (tests and operators find the agent by it)
    expect(readFileSync(`/proc/${a.proc.pid}/cmdline`, 'utf8').split('\0')).toContain('run');
    // an invalid file: the reload fails, logged at error
    writeFileSync(configPath, 'vrrp: [not, a, map]\n');
    a.proc.kill('SIGHUP');
    await waitFor(
      () => a.lines().some((l) => l.includes('configuration reload failed')),
      (ok) => ok,
      { timeoutMs: 5000, what: 'the failed reload' },
    );
    a.proc.kill('SIGTERM');
    expect(await a.exited).toBe(0);
    const lines = a.lines();
    const seen = new Set<number>();
    for (const l of lines) {
      const m = /^<(\d)>(\{.*\})$/.exec(l);
      expect(m, l).not.toBeNull();
      const level = (JSON.parse(m![2]!) as { level: keyof typeof SYSLOG_LEVELS }).level;
      expect(Number(m![1]), l).toBe(SYSLOG_LEVELS[level]);
      seen.add(Number(m![1]));
    }
    expect([...seen].sort()).toStrictEqual([3, 4, 6]);
    console.log(`journal prefixes: ${lines.length} lines, levels ${[...seen].sort().join(', ')}`);
  });

  it('JOURNAL_STREAM naming another file: plain JSON lines, no prefix', async () => {
    const n1 = lab.nodes[0]!;
    const configPath = join(lab.dir, 'n1-plain.yaml');
    writeFileSync(configPath, agentConfig(lab, n1, { priority: 150 }));
    const a = runToFile('n1-plain.out', configPath, false);
    await waitFor(
      () => a.lines().some(masterLine),
      (ok) => ok,
      { timeoutMs: 10_000, what: 'n1 master' },
    );
    a.proc.kill('SIGTERM');
    expect(await a.exited).toBe(0);
    const lines = a.lines();
    expect(lines.length).toBeGreaterThan(3);
    for (const l of lines) expect(l.startsWith('{"level":"'), l).toBe(true);
  });

  it('a reporting path that throws (X509Certificate without validToDate, as on Node 20) is contained: master, VIP held, adverts go on, counted, logged once', async () => {
    const n1 = lab.nodes[0]!;
    const configPath = join(lab.dir, 'n1-node20x509.yaml');
    writeFileSync(configPath, agentConfig(lab, n1, { priority: 150, balance: true }));
    const hook = compiledScript('node20-x509');
    const agent = await runAgent(lab, n1, configPath, { logFile: 'n1-node20x509.log', env: { NODE_OPTIONS: `--import ${hook}` } });
    started.push(agent);
    await waitFor(
      () => agent.status(),
      (s) => s.state === 'master',
      { timeoutMs: 10_000, what: 'n1 master' },
    );
    // the checks run every 200 ms; each handshake hands its certificate to the report, which throws
    await waitFor(
      () => agent.admin('/metrics'),
      (m) => /ballast_internal_errors_total\{path="certificates"\} [1-9]/.test(m),
      { timeoutMs: 5000, what: 'the contained failure counted' },
    );
    const before = await agent.status();
    await sleep(2000);
    const after = await agent.status();
    expect(after.state).toBe('master');
    expect(after.vipsHeld).toBe(true);
    expect((await lab.holders(lab.vip4)).map((n) => n.name)).toStrictEqual([n1.name]);
    // 100 ms adverts: about 20 in 2 s; at least half of them, whatever the scheduling
    expect(after.counters.advertsSent - before.counters.advertsSent).toBeGreaterThanOrEqual(10);
    const contained = agent.logLines().filter((l) => l.msg === INTERNAL_ERROR_MSG);
    // the first failure, then at most one line per 10 s window: one within these seconds
    expect(contained).toHaveLength(1);
    expect(contained[0]).toMatchObject({ level: 'error', path: 'certificates' });
    expect(String(contained[0]!.err)).toMatch(/getTime/);
    // the backend's entry in /status has no certificate, and /status still answers
    expect(after.backends.map((b) => b.certificate)).toStrictEqual([undefined]);
    expect(after.backends[0]!.healthy).toBe(true);
    const metrics = await agent.admin('/metrics');
    console.log(
      `contained: ${/ballast_internal_errors_total\{path="certificates"\} (\d+)/.exec(metrics)![1]} certificate report failures, adverts sent ${before.counters.advertsSent} -> ${after.counters.advertsSent} in 2 s, VIP held`,
    );
  });

  it('eBPF local endpoint on a read-only bpffs (as under ProtectKernelTunables=yes): the warning names EROFS and the unit options; the proxy serves', async () => {
    const n1 = lab.nodes[0]!;
    const cgroup = await lab.cgroup(n1);
    const configPath = join(lab.dir, 'n1-robpf.yaml');
    writeFileSync(
      configPath,
      agentConfig(lab, n1, {
        priority: 150,
        balance: true,
        noElection: true,
        extra: { localEndpoint: { address: '127.0.0.1:7443', cgroup }, dataplane: { vip: 'nftables', local: 'ebpf', keepOnStop: false } },
      }),
    );
    // the agent's own mount namespace: a fresh bpffs mounted read-only over /sys/fs/bpf (mkdir: EROFS)
    const proc = lab.spawn(
      n1.netns,
      [
        'unshare',
        '-m',
        '--propagation',
        'private',
        'sh',
        '-c',
        'mount -t bpf -o ro bpf /sys/fs/bpf && exec "$@"',
        'ro-bpffs',
        process.execPath,
        cliPath(),
        'run',
        '--config',
        configPath,
      ],
      {
        hostMounts: true,
        logFile: 'n1-robpf.log',
      },
    );
    const agent = new LabAgent(lab, n1, proc, configPath);
    started.push(agent);
    const local = await waitFor(
      () =>
        agent.anyStatus().then(
          (d) => d.local,
          () => null,
        ),
      (l) => l !== null && l.mode !== 'off',
      { timeoutMs: 10_000, what: 'the local endpoint' },
    );
    expect(local!.mode).toBe('proxy');
    const warning = agent.logLines().find((l) => typeof l.msg === 'string' && l.msg.startsWith('eBPF local endpoint unavailable'));
    expect(warning).toBeDefined();
    expect(warning).toMatchObject({ level: 'warn', code: 'EROFS' });
    const msg = String(warning!.msg);
    expect(msg).toMatch(
      /^eBPF local endpoint unavailable: bpffs \(\/sys\/fs\/bpf\) is read-only in this process's mount namespace \(mkdir failed on \/sys\/fs\/bpf\/ballast[^:]*: EROFS/,
    );
    for (const part of [
      'ProtectKernelTunables=yes',
      'ReadWritePaths=/sys/fs/bpf',
      '`systemctl edit ballast`',
      '`ProtectKernelTunables=no`',
      'serving it with the user-space proxy instead',
    ])
      expect(msg).toContain(part);
    // the temporary-cgroup probe is a detail now, not the message
    expect(msg).not.toContain('temporary cgroup');
    expect(await agent.stop()).toBe(0);
    console.log(`read-only bpffs: ${msg.slice(0, 160)}…`);
  });
});
