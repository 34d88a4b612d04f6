/**
 * The soak's lab: 3 control-plane nodes (agent + TLS stand-in apiserver each), a worker node
 * whose agent runs only the node-local endpoint (eBPF, in the worker's own cgroup), a client
 * probing https://VIP:6443 every 10 ms, a client on the worker's local endpoint, `watches`
 * long-lived TLS connections through the VIP, and a sampler in every node (lab/soak/sampler.ts).
 * It records what the invariants look at (lab/soak/invariants.ts), on the schedule's clock
 * (ms since `t0`).
 *
 * Every agent runs under libfaketime (its CLOCK_REALTIME only: FAKETIME_DONT_FAKE_MONOTONIC=1,
 * offset from a file per node) and with lab/block-main-thread.ts preloaded (SIGURG stalls its
 * main thread), so the clock-step and main-stall faults need no restart.
 */
import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Lab, compiledScript, onJsonLines, packageRoot, type LabNode, type LabProcess } from '../lab.js';
import { agentConfig, runAgent, type AgentSettings, type LabAgent } from '../cluster.js';
import { sleep } from '../wait.js';
import { LOCK_DIR, pinDirFor } from '../../src/dataplane/ebpf.js';
import { SockLb } from '../../src/native.js';
import type { SamplerLine } from './sampler.js';
import type { ClientFailure, ClusterSample, LeakFinding, ResourceSample, WatchEvent } from './invariants.js';
import { clockOffset, type SoakTiming } from './schedule.js';
import { WatchDrops } from './watchdrops.js';

/** libfaketime's multi-threaded preload (Debian's faketime package). */
export const LIBFAKETIME = '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1';
/** The loss table a packet-loss fault puts in a node (the soak's own; removed at heal). */
export const LOSS_TABLE = 'inet bsoak_loss';

/** The soak's compiled child scripts (dist/lab/soak/*.js). */
export function soakScript(name: 'clients' | 'sampler'): string {
  const js = join(packageRoot(), 'dist', 'lab', 'soak', `${name}.js`);
  if (!existsSync(js)) throw new Error(`${js} is missing; run \`npm run build:ts\``);
  return js;
}

/** Options of {@link SoakCluster.start}. */
export interface SoakClusterOptions {
  prefix: string;
  subnet: number;
  timing: SoakTiming;
  /** long-lived connections through the VIP */
  watches: number;
  /** upper bound of the clients' and samplers' life, ms (they are stopped earlier) */
  maxLifeMs: number;
  /** progress lines (stderr) */
  progress?: (line: string) => void;
  /** false: SIGINT / SIGTERM do not tear the lab down (the caller heals, tears down and reports; LabOptions.signals) */
  signals?: boolean;
}

/** The VIP prober's and the local prober's counts. */
export interface ProbeCounts {
  requests: number;
  ok: number;
  /** successful requests per serving node */
  nodes: Record<string, number>;
}

/** The watch-like connections' counts (from the client's last stats line). */
export interface WatchCounts {
  connections: number;
  ok: number;
  failed: number;
  reconnects: number;
  drops: number;
  connectFailures: number;
}

export class SoakCluster {
  readonly agents = new Map<string, LabAgent>();
  /** when each agent process started (epoch ms), by pid */
  readonly #startedAt = new Map<number, number>();
  readonly #configs = new Map<string, string>();
  readonly #clocks = new Map<string, string>();
  readonly #latest = new Map<string, SamplerLine>();
  readonly #procs: LabProcess[] = [];
  readonly #connected = new Set<number>();
  readonly #timers: NodeJS.Timeout[] = [];
  /** one drop per lost watch-like connection (its `closed` and `fail` lines merged) */
  readonly #drops = new WatchDrops((e) => this.watchEvents.push(e));
  /** extra processes a fault started (cpu hogs), by PID: allowed in the node's namespace */
  readonly extraPids = new Set<number>();
  /** tables a fault put in a node now (node → set), allowed by the leak check */
  readonly extraTables = new Map<string, Set<string>>();
  #baseTables = new Map<string, string[]>();
  #baseAddrs = new Map<string, string[]>();
  #suspects = new Map<string, number>();
  t0 = 0;
  readonly samples: ClusterSample[] = [];
  readonly vipFailures: ClientFailure[] = [];
  readonly localFailures: ClientFailure[] = [];
  readonly watchEvents: WatchEvent[] = [];
  readonly resources: ResourceSample[] = [];
  readonly leaks: LeakFinding[] = [];
  readonly vipCounts: ProbeCounts = { requests: 0, ok: 0, nodes: {} };
  readonly localCounts: ProbeCounts = { requests: 0, ok: 0, nodes: {} };
  readonly watchCounts: WatchCounts = { connections: 0, ok: 0, failed: 0, reconnects: 0, drops: 0, connectFailures: 0 };

  private constructor(
    readonly lab: Lab,
    readonly o: SoakClusterOptions,
    readonly cgroup: string,
    readonly pinDir: string,
  ) {}

  get controlPlane(): LabNode[] {
    return this.lab.nodes.slice(0, 3);
  }
  get worker(): LabNode {
    return this.lab.nodes[3]!;
  }
  node(name: string): LabNode {
    const n = this.lab.nodes.find((x) => x.name === name);
    if (!n) throw new Error(`soak: no node ${name}`);
    return n;
  }
  /** ms on the schedule's clock */
  now(): number {
    return Date.now() - this.t0;
  }

  /**
   * Builds the lab, starts the stand-ins, the agents, the samplers and the clients, and resolves
   * once the cluster is healthy (n1 holds the VIP, every backend up everywhere). On failure
   * everything started is torn down before the error is rethrown.
   */
  static async start(o: SoakClusterOptions): Promise<SoakCluster> {
    const say = o.progress ?? (() => undefined);
    const lab = await Lab.create({ prefix: o.prefix, subnet: o.subnet, nodes: 4, ipv6: false, signals: o.signals ?? true });
    let c: SoakCluster | undefined;
    try {
      const cgroup = await lab.cgroup(lab.nodes[3]!);
      const pinDir = pinDirFor(cgroup);
      // a lock file an interrupted earlier run left would be blamed on this one
      rmSync(`${LOCK_DIR}/${basename(pinDir)}.lock`, { force: true });
      c = new SoakCluster(lab, o, cgroup, pinDir);
      say('lab built; starting the stand-in apiservers');
      await lab.startApiservers({ nodes: c.controlPlane });
      say('starting the agents');
      await Promise.all(lab.nodes.map((n) => c!.startAgent(n.name)));
      for (const n of lab.nodes) c.#startSampler(n);
      await c.#waitHealthy(30_000);
      c.#snapshotBaselines();
      say(`healthy; starting the clients (${o.watches} watch-like connections)`);
      c.#startClients();
      await c.#waitWatches(60_000);
      c.#timers.push(
        setInterval(() => c!.#record(), 100),
        setInterval(() => c!.#sampleResources(), 2000),
        setInterval(() => void c!.#checkLeaks(), 5000),
      );
      await sleep(1000);
      return c;
    } catch (e) {
      await (c ? c.teardown() : lab.teardown()).catch(() => undefined);
      throw e;
    }
  }

  /** The settings of `name`'s agent (pure but for the lab's paths). */
  settings(name: string): AgentSettings {
    const t = this.o.timing;
    const backends = this.controlPlane.map((n) => `${n.ipv4}:6443`);
    const health = {
      caFile: this.lab.ca.certFile,
      interval: `${t.health.intervalMs}ms`,
      timeout: `${t.health.timeoutMs}ms`,
      rise: t.health.rise,
      fall: t.health.fall,
    };
    const clock = this.#clocks.get(name) ?? join(this.lab.dir, `clock-${name}`);
    if (!this.#clocks.has(name)) {
      writeFileSync(clock, `${clockOffset('+0m')}\n`);
      this.#clocks.set(name, clock);
    }
    const env = {
      LD_PRELOAD: LIBFAKETIME,
      FAKETIME_TIMESTAMP_FILE: clock,
      // re-read the offset once a second (FAKETIME_NO_CACHE would stat the file on every clock read)
      FAKETIME_CACHE_DURATION: '1',
      // a real clock step moves CLOCK_REALTIME only; CLOCK_MONOTONIC never jumps
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
      NODE_OPTIONS: `--import ${pathToFileURL(compiledScript('block-main-thread')).href}`,
      BALLAST_TEST_BLOCK_MS: String(t.stallMs),
    };
    if (name === this.worker.name) {
      return {
        priority: 100,
        noElection: true,
        hostMounts: true,
        env,
        extra: {
          apiserver: { port: 6443, backends, health },
          localEndpoint: { address: '127.0.0.1:7443', cgroup: this.cgroup },
          dataplane: { local: 'ebpf', keepOnStop: 'localEndpoint' },
        },
      };
    }
    return {
      priority: t.priorities[name] ?? 100,
      advertisementInterval: `${t.advertIntervalMs}ms`,
      env,
      extra: { apiserver: { port: 6443, backends, health }, dataplane: { vip: 'nftables' } },
    };
  }

  /** The config file of `name`'s agent (written on its first start). */
  configPath(name: string): string {
    return join(this.lab.dir, `${name}-ballast.yaml`);
  }
  /** The text of the good config of `name`. */
  goodConfig(name: string): string {
    return agentConfig(this.lab, this.node(name), this.settings(name));
  }
  /** The faketime offset file of `name`'s agent. */
  clockFile(name: string): string {
    return this.#clocks.get(name)!;
  }

  /** (Re)starts `name`'s agent with its good config; resolves once it answers (`startMs`: how long that took). */
  async startAgent(name: string): Promise<LabAgent & { startMs?: number }> {
    const t = Date.now();
    const node = this.node(name);
    const s = this.settings(name);
    const path = this.configPath(name);
    writeFileSync(path, this.goodConfig(name));
    this.#configs.set(name, path);
    const a = await runAgent(this.lab, node, path, {
      logFile: join(this.lab.dir, `${name}-ballast.log`),
      env: s.env!,
      ...(s.hostMounts ? { hostMounts: true } : {}),
      timeoutMs: 15_000,
    });
    this.agents.set(name, a);
    this.#startedAt.set(a.proc.pid, Date.now());
    return Object.assign(a, { startMs: Date.now() - t });
  }

  /** Stops `name`'s agent with `signal` (SIGKILL after 5 s); resolves with its exit code. */
  async stopAgent(name: string, signal: NodeJS.Signals): Promise<number | null> {
    const a = this.agents.get(name);
    if (!a) return null;
    this.agents.delete(name);
    return a.proc.stop(signal, 5000);
  }

  #startSampler(n: LabNode): void {
    const p = this.lab.spawn(n.netns, [
      process.execPath,
      soakScript('sampler'),
      '--vip',
      this.lab.vip4,
      '--every',
      '100',
      '--duration',
      String(this.o.maxLifeMs),
    ]);
    this.#procs.push(p);
    onJsonLines<SamplerLine>(p, (l) => this.#latest.set(n.name, l));
  }

  #view(name: string): ClusterSample['agents'][string] {
    const l = this.#latest.get(name);
    const fresh = l !== undefined && Date.now() - l.at <= 1000;
    const s = fresh ? l.status : null;
    if (!s || !this.agents.has(name)) return { up: false };
    if (name === this.worker.name) return { up: true, state: s.state, local: s.local ?? 0, damped: s.damped };
    const tables = l!.tables;
    return {
      up: true,
      state: s.state,
      backendsUp: s.backendsUp,
      backendsTotal: s.backendsTotal,
      states: s.states,
      ...(tables === null ? {} : { table: tables.includes('ip ballast') }),
    };
  }

  /** The cluster now, from the samplers' latest lines. */
  snapshot(): ClusterSample {
    const holders = this.controlPlane.filter((n) => this.#latest.get(n.name)?.vip === true).map((n) => n.name);
    const agents: ClusterSample['agents'] = {};
    for (const n of this.lab.nodes) agents[n.name] = this.#view(n.name);
    return { t: this.now(), holders, agents };
  }

  #record(): void {
    if (this.t0 === 0) return;
    this.samples.push(this.snapshot());
  }

  async #waitHealthy(timeoutMs: number): Promise<void> {
    const until = Date.now() + timeoutMs;
    let since = 0;
    for (;;) {
      const s = this.snapshot();
      const ok =
        s.holders.length === 1 &&
        s.holders[0] === 'n1' &&
        this.controlPlane.every((n) => s.agents[n.name]?.backendsUp === 3 && s.agents[n.name]?.table === true) &&
        s.agents[this.worker.name]?.local === 3;
      if (ok) {
        since ||= Date.now();
        if (Date.now() - since >= 1000) return;
      } else since = 0;
      if (Date.now() > until) throw new Error(`soak: the cluster did not become healthy within ${timeoutMs} ms: ${JSON.stringify(s)}`);
      await sleep(100);
    }
  }

  #snapshotBaselines(): void {
    for (const n of this.lab.nodes) {
      const l = this.#latest.get(n.name);
      this.#baseTables.set(n.name, l?.tables ?? []);
      this.#baseAddrs.set(
        n.name,
        (l?.addrs ?? []).filter((a) => !a.startsWith(`${this.lab.vip4}/`)),
      );
    }
  }

  #startClients(): void {
    const life = String(this.o.maxLifeMs);
    const t = this.o.timing;
    const probeArgs = ['--ca', this.lab.ca.certFile, '--duration', life, '--timeout', String(t.requestTimeoutMs)];
    const vip = this.lab.spawn(
      this.lab.client.netns,
      [process.execPath, soakScript('clients'), 'probe', '--url', `https://${this.lab.vip4}:6443/version`, '--interval', '10', ...probeArgs],
      { logFile: 'probe-vip.log' },
    );
    const local = this.lab.spawn(
      this.worker.netns,
      [process.execPath, soakScript('clients'), 'probe', '--url', 'https://127.0.0.1:7443/version', '--interval', String(t.localIntervalMs), ...probeArgs],
      { cgroup: this.cgroup, logFile: 'probe-local.log' },
    );
    const watches = this.lab.spawn(
      this.lab.client.netns,
      [
        process.execPath,
        soakScript('clients'),
        'watch',
        '--url',
        `https://${this.lab.vip4}:6443/version`,
        '--ca',
        this.lab.ca.certFile,
        '--count',
        String(this.o.watches),
        '--interval',
        String(t.watchIntervalMs),
        '--duration',
        life,
        '--timeout',
        '2000',
      ],
      { logFile: 'watches.log' },
    );
    this.#procs.push(vip, local, watches);
    type ProbeLine = { at: number; ok: boolean; ms: number; node?: string; error?: string };
    const onProbe = (counts: ProbeCounts, failures: ClientFailure[]) => (l: ProbeLine) => {
      if (this.t0 === 0 || l.at < this.t0) return;
      counts.requests++;
      if (l.ok) {
        counts.ok++;
        if (l.node) counts.nodes[l.node] = (counts.nodes[l.node] ?? 0) + 1;
      } else failures.push({ t: l.at - this.t0, ms: l.ms, error: l.error ?? '?' });
    };
    onJsonLines<ProbeLine>(vip, onProbe(this.vipCounts, this.vipFailures));
    onJsonLines<ProbeLine>(local, onProbe(this.localCounts, this.localFailures));
    type WatchLine = {
      w?: string;
      event?: string;
      conn: number;
      at: number;
      error?: string | null;
      open?: number;
      ok?: number;
      failed?: number;
      reconnects?: number;
    };
    onJsonLines<WatchLine>(watches, (l) => {
      if (l.w === 'stats') {
        this.watchCounts.ok = l.ok ?? 0;
        this.watchCounts.failed = l.failed ?? 0;
        this.watchCounts.reconnects = l.reconnects ?? 0;
        this.watchCounts.connections = Math.max(this.watchCounts.connections, l.open ?? 0);
        return;
      }
      if (l.event === 'connected') {
        this.#connected.add(l.conn);
        this.#drops.connected(l.conn);
      }
      if (this.t0 === 0 || l.at < this.t0) return;
      const t = l.at - this.t0;
      if (l.w === 'fail') {
        this.watchCounts.drops++;
        this.#drops.failed(l.conn, t, l.error ?? '?');
      } else if (l.w === 'connect-failed') {
        this.watchCounts.connectFailures++;
        this.watchEvents.push({ t, kind: 'connect-failed', error: l.error ?? '?', conn: l.conn });
      } else if (l.event === 'closed') {
        this.#drops.closed(l.conn, t, l.error ?? null);
      }
    });
  }

  /** Waits until every watch-like connection has connected once (bounded). */
  async #waitWatches(timeoutMs: number): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (this.#connected.size < this.o.watches) {
      if (Date.now() > until)
        throw new Error(`soak: only ${this.#connected.size} of ${this.o.watches} watch-like connections connected within ${timeoutMs} ms`);
      await sleep(100);
    }
  }

  #sampleResources(): void {
    if (this.t0 === 0) return;
    for (const [name, a] of this.agents) {
      const pid = a.proc.pid;
      try {
        const fds = readdirSync(`/proc/${pid}/fd`).length;
        const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
        if (!rss) continue;
        this.resources.push({ t: this.now(), node: name, pid, fds, rssKiB: Number(rss[1]), ageMs: Date.now() - (this.#startedAt.get(pid) ?? Date.now()) });
      } catch {
        // exited meanwhile (a fault)
      }
    }
  }

  /** A finding must be seen twice in a row (5 s apart): a short-lived helper is not a leak. */
  #suspect(key: string, finding: LeakFinding, seen: Set<string>): void {
    seen.add(key);
    const n = (this.#suspects.get(key) ?? 0) + 1;
    this.#suspects.set(key, n);
    if (n === 2) this.leaks.push(finding);
  }

  async #checkLeaks(): Promise<void> {
    if (this.t0 === 0) return;
    const seen = new Set<string>();
    const t = this.now();
    for (const n of this.lab.nodes) {
      const l = this.#latest.get(n.name);
      if (!l) continue;
      const addrs = this.#baseAddrs.get(n.name) ?? [];
      for (const a of l.addrs) {
        if (!addrs.includes(a) && !a.startsWith(`${this.lab.vip4}/`))
          this.#suspect(`${n.name} addr ${a}`, { t, node: n.name, what: `address ${a} on eth0` }, seen);
      }
      const tables = [...(this.#baseTables.get(n.name) ?? []), ...(this.extraTables.get(n.name) ?? [])];
      for (const tb of l.tables ?? []) if (!tables.includes(tb)) this.#suspect(`${n.name} table ${tb}`, { t, node: n.name, what: `table ${tb}` }, seen);
    }
    // processes in the lab's namespaces that none of ours explains
    const ours = new Set<number>([...this.#procs.map((p) => p.pid), ...[...this.agents.values()].map((a) => a.proc.pid), ...this.extraPids]);
    for (const n of this.controlPlane) {
      const p = this.lab.apiserver(n);
      if (p) ours.add(p.pid);
    }
    for (const n of this.lab.nodes) {
      const pids = await pidsIn(n.netns);
      // the harness's own helpers (lab.exec: a fault's `ballast reload`, nft, conntrack) and the
      // children of a fault's processes (stress-ng's workers) are ours too: under load a reload
      // ran 6–8 s and was reported as a leak (the 30-minute seed-7 soak, run9)
      // a running agent's children too: its conntrackd (connection sync) lives as long as it does
      const parents = new Set<number>([process.pid, ...this.extraPids, ...[...this.agents.values()].map((a) => a.proc.pid)]);
      for (const pid of pids) {
        if (ours.has(pid)) continue;
        const ppid = parentPid(pid);
        if (ppid !== null && parents.has(ppid)) continue;
        // an agent being (re)started is ours before it answers
        if (!this.agents.has(n.name) && cmdline(pid).includes(`run --config ${this.configPath(n.name)}`)) continue;
        // short-lived helpers of the agent and of the faults (nft, ip, conntrack, the CLI) are
        // gone by the next look
        this.#suspect(`${n.name} pid ${pid}`, { t, node: n.name, what: `process ${pid} ${cmdline(pid)}` }, seen);
      }
    }
    // BPF pins of this lab other than the worker's endpoint
    const pinRoot = dirname(this.pinDir);
    if (existsSync(pinRoot)) {
      for (const e of readdirSync(pinRoot)) {
        if (e.includes(this.lab.prefix) && e !== basename(this.pinDir))
          this.#suspect(`pin ${e}`, { t, node: this.worker.name, what: `BPF pin ${join(pinRoot, e)}` }, seen);
      }
    }
    for (const k of [...this.#suspects.keys()]) if (!seen.has(k)) this.#suspects.delete(k);
  }

  /** Stops the clients and samplers (the recording ends). */
  async stopClients(): Promise<void> {
    for (const t of this.#timers.splice(0)) clearInterval(t);
    await Promise.all(this.#procs.map((p) => p.stop('SIGTERM', 5000)));
    this.#drops.end();
  }

  /**
   * Tears everything down: clients, agents, the lab (namespaces, cgroup), the worker's BPF pins
   * and their lock. Resolves with what was left after it (empty: nothing).
   */
  async teardown(): Promise<string[]> {
    for (const t of this.#timers.splice(0)) clearInterval(t);
    await Promise.all([...this.agents.keys()].map((n) => this.stopAgent(n, 'SIGTERM').catch(() => undefined)));
    try {
      if (existsSync(this.pinDir)) SockLb.detach(this.pinDir);
      rmSync(`${LOCK_DIR}/${basename(this.pinDir)}.lock`, { force: true });
      try {
        rmdirSync(dirname(this.pinDir));
      } catch {
        /* not empty (someone else's pins), or gone */
      }
    } finally {
      await this.lab.teardown();
    }
    return leftovers(this.lab.prefix, this.pinDir);
  }
}

/** PIDs inside a namespace (`ip netns pids`). */
async function pidsIn(netns: string): Promise<number[]> {
  const { execFile } = await import('node:child_process');
  return new Promise((resolve) => {
    execFile('ip', ['netns', 'pids', netns], { timeout: 5000, encoding: 'utf8' }, (err, stdout) =>
      resolve(err ? [] : stdout.split(/\s+/).filter(Boolean).map(Number)),
    );
  });
}

/** The parent PID in /proc/PID/stat text (proc(5): the field after the state; `comm` may hold spaces and parentheses), null when malformed. Pure. */
export function statParentPid(stat: string): number | null {
  const m = /\)\s+\S+\s+(\d+)/.exec(stat.slice(stat.lastIndexOf(')')));
  return m ? Number(m[1]) : null;
}

/** The parent PID of `pid`, null when it is gone. */
function parentPid(pid: number): number | null {
  try {
    return statParentPid(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return null;
  }
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim().slice(0, 160);
  } catch {
    return '?';
  }
}

/** What a torn-down soak lab left: namespaces, cgroups, pins, lock files with its prefix. */
export function leftovers(prefix: string, pinDir: string): string[] {
  const out: string[] = [];
  const ns = existsSync('/run/netns') ? readdirSync('/run/netns').filter((n) => n.startsWith(`${prefix}-`)) : [];
  if (ns.length > 0) out.push(`namespaces ${ns.join(', ')}`);
  if (existsSync(pinDir)) out.push(`BPF pins ${pinDir}`);
  if (existsSync(`${LOCK_DIR}/${basename(pinDir)}.lock`)) out.push(`lock file ${LOCK_DIR}/${basename(pinDir)}.lock`);
  for (const root of ['/sys/fs/cgroup', '/sys/fs/cgroup/unified']) {
    if (existsSync(join(root, `${prefix}-n4`))) out.push(`cgroup ${join(root, `${prefix}-n4`)}`);
  }
  return out;
}
