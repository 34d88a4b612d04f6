/**
 * A cluster's lifecycle on a lab: one configuration file per node, written once
 * before anything exists, carries the API endpoint from before `kubeadm init` through the
 * replacement of every control-plane node. Used by test/integration/lifecycle.test.ts and by
 * `npm run demo:lifecycle` (lab/demo-lifecycle.ts).
 *
 *   nodes n1..n6: control plane (10.78.S.11 … .16), n7: a worker (.17), the client namespace (.50)
 *
 *   step 1  n1 alone, no CA, no apiserver: ballast starts with the final file; the VIP is up within
 *           Master_Down_Interval of the election's start; VIP:6443 refuses or resets, never hangs
 *   step 2  the CA, n1's apiserver and its kubeconfig appear (what `kubeadm init` does); the
 *           worker n7 joins (CA and kubeconfig appear there too): the VIP client and the worker's
 *           local-endpoint client are served
 *   step 3  n2 and n3 join: their apiservers enter every pool through discovery, nothing is edited
 *           on n1. A node that is not in the seed (n4..n6, step 4) joins in the natural order,
 *           ballast first, then kubeadm join (CA, kubeconfig, apiserver): until its apiserver is
 *           in the `kubernetes` EndpointSlice it is no member (the others drop its adverts;
 *           unicast `peers: discovered` does not even send to it), so it stays Backup and
 *           listens (vrrp.acceptFrom, docs/auth.md) instead of taking the VIP as a second master.
 *           n2 and n3 are in the seed (`apiserver.backends`) and join in the same order: n1
 *           keeps hearing (and, unicast, sending to) a seed host the EndpointSlices have not
 *           listed yet — it is joining — so they hear n1 and stay Backup (membership.ts)
 *   step 4  n4, n5, n6 replace n1, n2, n3 one at a time: the new node joins, then the old one
 *           leaves (ballast stopped, apiserver stopped gracefully: it takes itself out of the
 *           `kubernetes` EndpointSlice); unicast peers follow
 *   step 5  ballast restarted on every remaining node in turn (n4, n5, n6, then the worker)
 *   step 6  a reload with a bad file (nothing changes, `ballast reload` exits 2), then one that
 *           adds a second VIP and doubles the advertisement interval
 *
 * Each node has its own "/etc/kubernetes" and "/var/lib/ballast" under lab.dir/nodes/<name>/:
 * etc/kubernetes/pki/ca.crt, etc/kubernetes/admin.conf (kubelet.conf on the worker),
 * var/lib/ballast/backends.json — all absent until the step that creates them; the directories
 * etc/kubernetes and var/lib/ballast exist from the start (the kubelet package and ballast's
 * unit make them on a real host), etc/kubernetes/pki does not.
 *
 * Accounting. Two clients run from step 1 (VIP) and step 2 (local endpoint) to the end, one
 * request every 10 ms, each on a new TLS connection (lab/clients/prober.ts). Every action that
 * may cost requests registers a *cause*: a name, the protocol bound it is held to and the
 * moment it was taken. A failed request is explained when it started inside
 * [cause − request timeout, cause + bound + margin] of a cause of its step (the request timeout
 * covers requests already in flight at the cause). A step passes when every failed request of
 * both clients is explained and every check of the step holds. The prober's clock is mapped to
 * this process's clock by the results themselves: a result that arrives here at R with start t
 * and duration ms was finished by R, so offset = min(R − t − ms) over all results.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { stringify } from 'yaml';
import { Lab, compiledScript, onJsonLines, runProber, type LabNode, type ProberRun, type ProbeResult, type ReachResult } from './lab.js';
import { cliPath, hasCurl, runAgent, type LabAgent } from './cluster.js';
import { summarize } from './clients/prober.js';
import { sleep, waitFor } from './wait.js';
import { masterDownIntervalMs, skewTimeMs } from '../src/vrrp/state.js';
import { pinDirFor } from '../src/dataplane/ebpf.js';
import { SockLb, cgroupPrograms } from '../src/native.js';
import type { ElectionStatusDocument, StatusDocument } from '../src/observe/status.js';

// ---------------------------------------------------------------------------------------------
// timing (kept short so the whole test runs in about a minute)

/** Advertisement interval, ms (10 cs); doubled by the reload of step 6. */
export const ADVERT_MS = 100;
/**
 * Health checks: interval and timeout ms, rise and fall in checks. 500 ms, not 200: with 7
 * agents, 6 stand-ins and 2 clients on 2 shared cores (load average 10 while other work ran),
 * 200 ms checks timed out twice in a row in bursts — every backend of an agent "dead" at once,
 * its connections reset — which is the lab's CPU, not the protocol under test.
 */
export const HEALTH = { intervalMs: 500, timeoutMs: 500, rise: 2, fall: 2 } as const;
/** The clients: one request every PROBE_INTERVAL_MS, each bounded by PROBE_TIMEOUT_MS (a hang shows as `timeout`). */
export const PROBE_INTERVAL_MS = 10;
export const PROBE_TIMEOUT_MS = 1000;
/**
 * Slack on top of each protocol bound: what is not protocol time on 2 shared cores running 7
 * agents, 6 stand-ins and 2 clients (process scheduling, a netlink address add, the client's
 * ARP update from the gratuitous ARP, the prober's own timer).
 */
export const MARGIN_MS = 250;
/** Step 1: a connection to VIP:6443 while nothing listens must be refused or reset within this (ms). */
export const REFUSE_WITHIN_MS = 1000;
/**
 * Control-plane priorities in join order (n1 highest): who takes over is always known; preempt is
 * off. 30 apart: after a priority-0 advert every Backup waits its own Skew_Time, and Skew_Times
 * 11.7 ms apart (at 100 ms adverts) keep a second Backup from also becoming master before the
 * first one's advert reaches it (10 apart, 3.9 ms, let two of them flip, one for a millisecond).
 */
export const PRIORITIES = [250, 220, 190, 160, 130, 100] as const;
/** The local endpoint on the worker. */
export const LOCAL_ENDPOINT = '127.0.0.1:7443';

const VRID = 51;
/** The bearer token the stand-ins' /apis paths require (in every kubeconfig). */
const TOKEN = 'ballast-lifecycle-token';
const ADMIN_PORT = 9641;

// ---------------------------------------------------------------------------------------------
// shapes

/** Options of {@link Lifecycle.create}. */
export interface LifecycleOptions {
  /** lab prefix (≤ 5 chars) and subnet (see LabOptions) */
  prefix: string;
  subnet: number;
  /**
   * `unicast`: `vrrp.peers: discovered` (peers follow the discovered apiservers);
   * `multicast`: no peers (acceptFrom members guards the group). Default unicast.
   */
  vrrp?: 'unicast' | 'multicast';
  /** progress lines (the demo prints them); default: none */
  log?: (line: string) => void;
  /**
   * false: no `discovery` section (the seed only) and multicast VRRP — what an agent without
   * discovery accepts; only steps 1 and 2 can hold then. Default true.
   */
  discovery?: boolean;
}

/** A protocol bound a cause is held to. */
export interface Bound {
  /** what the bound is, e.g. `Skew_Time(190) + margin` */
  name: string;
  /** its value in ms, margin included; 0: no request may fail */
  ms: number;
}

/** A failed request no cause of its step explains. */
export interface Unexplained {
  /** request start, ms since the step began */
  t: number;
  error: string;
  ms: number;
}

/** What one client saw during one step. */
export interface ClientFigures {
  requests: number;
  failed: number;
  /** the longest run of failed requests (last success before it to first success after), ms */
  maxOutageMs: number;
  unexplained: Unexplained[];
}

/** One assertion of a step, with what was measured. */
export interface Check {
  what: string;
  ok: boolean;
  detail: string;
}

/** The figures of one step. */
export interface StepFigures {
  step: number;
  title: string;
  /** the causes of the step, when each was taken (ms since the step began) and the bound it was held to */
  causes: { name: string; atMs: number; bound: Bound }[];
  vip: ClientFigures;
  /** null before the local-endpoint client runs (step 1) */
  local: ClientFigures | null;
  /** state changes to master during the step, over all agents, without the brief ones (see Lifecycle #mastersSince) */
  vipMoves: number;
  checks: Check[];
  pass: boolean;
  /** wall time of the step, ms */
  wallMs: number;
}

// ---------------------------------------------------------------------------------------------
// the clients

/** A prober whose clock is mapped onto this process's performance.now(). */
class Client {
  readonly run: ProberRun;
  #offset = Number.POSITIVE_INFINITY;
  #first: Promise<void>;

  constructor(
    readonly name: 'vip' | 'local',
    lab: Lab,
    opts: Parameters<typeof runProber>[1],
  ) {
    this.run = runProber(lab, opts);
    let seen: () => void = () => undefined;
    this.#first = new Promise<void>((r) => (seen = r));
    onJsonLines<ProbeResult | { summary: true }>(this.run.process, (o) => {
      if ('summary' in o) return;
      const c = performance.now() - (o.t + o.ms);
      if (c < this.#offset) this.#offset = c;
      seen();
    });
  }

  /**
   * Resolves once the first result arrived (the clock is known from then on). Then lowers the
   * client's CPU priority (nice 10, every thread): the clients are the measuring instrument, 200
   * new TLS connections a second on the same 2 cores as the 7 agents and the apiservers they
   * measure; at equal priority their load made 200 ms health checks time out (a false "dead"
   * that resets connections), which no real control plane with its clients elsewhere sees.
   */
  async started(): Promise<void> {
    await Promise.race([
      this.#first,
      sleep(10_000).then(() => {
        throw new Error(`the ${this.name} client printed no result within 10 s:\n${this.run.process.output().slice(-1000)}`);
      }),
    ]);
    const pid = this.run.process.pid;
    let tids: string[];
    try {
      tids = readdirSync(`/proc/${pid}/task`);
    } catch {
      return; // already gone: its results say why
    }
    spawnSync('renice', ['-n', '10', '-p', ...tids], { stdio: 'ignore' });
  }

  /** This process's performance.now() `ms` on the prober's clock. */
  at(ms: number): number {
    return ms - this.#offset;
  }

  /** Every result so far, by start time. */
  results(): ProbeResult[] {
    return this.run.results().sort((a, b) => a.t - b.t);
  }

  /** Resolves once every request that started before `ms` (our clock) has finished. */
  async settled(ms: number): Promise<void> {
    const until = this.at(ms) + PROBE_TIMEOUT_MS + 2 * PROBE_INTERVAL_MS;
    await waitFor(() => this.run.now() >= until || this.run.process.child.exitCode !== null, {
      timeoutMs: PROBE_TIMEOUT_MS + 5000,
      intervalMs: 20,
      what: `the ${this.name} client to pass ${until.toFixed(0)} ms`,
    });
  }
}

// ---------------------------------------------------------------------------------------------
// steps

interface Cause {
  name: string;
  bound: Bound;
  clients: ReadonlySet<'vip' | 'local'>;
  /** our clock, ms: the window in which failures are explained */
  from: number;
  to: number;
  /** what a failure must look like to be explained by this cause (default: any) */
  accepts?: (r: Extract<ProbeResult, { ok: false }>) => boolean;
  /**
   * A master's takeover (epoch ms of the action): its window grows by the commit of the
   * replicated connections the new master logged, which runs before it adds the VIP
   * (docs/connection-sync.md), bounded by dataplane.connectionSync.commitTimeout.
   */
  takeoverAt?: number;
}

/** One step's bookkeeping: causes, checks, its window on both clocks. */
class Step {
  readonly causes: Cause[] = [];
  readonly checks: Check[] = [];
  readonly t0 = performance.now();
  readonly epoch0 = Date.now();

  constructor(
    readonly n: number,
    readonly title: string,
  ) {}

  /**
   * An action that may cost requests, taken now: failures of `clients` that start from one
   * request timeout before now to `bound.ms` after now are explained by it.
   */
  cause(name: string, bound: Bound, clients: ('vip' | 'local')[], accepts?: Cause['accepts'], takeover = false): Cause {
    const now = performance.now();
    const c: Cause = {
      name,
      bound,
      clients: new Set(clients),
      from: now - PROBE_TIMEOUT_MS,
      to: now + bound.ms,
      ...(accepts ? { accepts } : {}),
      ...(takeover ? { takeoverAt: Date.now() } : {}),
    };
    this.causes.push(c);
    return c;
  }

  /** Records a check. @returns ok */
  check(what: string, ok: boolean, detail: string): boolean {
    this.checks.push({ what, ok, detail });
    return ok;
  }
}

/** A failed result as the step sees it. */
type Failed = Extract<ProbeResult, { ok: false }>;

/** Pure: the figures of `client`'s results that started in [from, to) (its clock), given the causes mapped to its clock. */
export function clientFigures(
  results: readonly ProbeResult[],
  from: number,
  to: number,
  causes: readonly { from: number; to: number; accepts?: (r: Failed) => boolean }[],
): ClientFigures {
  const inStep = results.filter((r) => r.t >= from && r.t < to);
  const sum = summarize(inStep);
  const unexplained = inStep
    .filter((r): r is Failed => !r.ok)
    .filter((r) => !causes.some((c) => r.t >= c.from && r.t <= c.to && (c.accepts?.(r) ?? true)))
    .map((r) => ({ t: Math.round(r.t - from), error: r.error, ms: r.ms }));
  return { requests: sum.requests, failed: sum.failed, maxOutageMs: sum.maxOutageMs, unexplained };
}

// ---------------------------------------------------------------------------------------------
// nodes

/** A lab node as the lifecycle uses it. */
interface Member {
  node: LabNode;
  role: 'control-plane' | 'worker';
  /** control plane only */
  priority: number;
  root: string;
  configPath: string;
  caFile: string;
  kubeconfig: string;
  lastKnownFile: string;
  logFile: string;
  agent: LabAgent | null;
  /** every agent process this node ran (for the leftovers check) */
  pgids: number[];
  agents: LabAgent[];
  apiserverPgids: number[];
  state: 'new' | 'member' | 'retired';
  cgroup: string;
}

const hp = (address: string, port = 6443): string => `${address}:${port}`;

/** The lifecycle scenario: a 7-node lab and its steps. */
export class Lifecycle {
  readonly lab: Lab;
  readonly vrrpMode: 'unicast' | 'multicast';
  readonly discovery: boolean;
  readonly members: Member[];
  /** the second VIP, added by step 6's reload */
  readonly vip2: string;
  readonly figures: StepFigures[] = [];
  #vipClient: Client | null = null;
  #localClient: Client | null = null;
  readonly #log: (line: string) => void;
  #advertMs = ADVERT_MS;
  #vips: string[];
  #workerCgroup: string;

  private constructor(lab: Lab, o: LifecycleOptions, cgroups: string[]) {
    this.lab = lab;
    this.discovery = o.discovery ?? true;
    this.vrrpMode = this.discovery ? (o.vrrp ?? 'unicast') : 'multicast';
    this.#log = o.log ?? (() => undefined);
    this.vip2 = `10.78.${lab.subnet}.101`;
    this.#vips = [lab.vip4];
    this.#workerCgroup = cgroups[6]!;
    this.members = lab.nodes.map((node, i) => {
      const root = join(lab.dir, 'nodes', node.name);
      const worker = i === 6;
      return {
        node,
        role: worker ? 'worker' : 'control-plane',
        priority: worker ? 0 : PRIORITIES[i]!,
        root,
        configPath: join(root, 'etc', 'ballast', 'ballast.yaml'),
        caFile: join(root, 'etc', 'kubernetes', 'pki', 'ca.crt'),
        kubeconfig: join(root, 'etc', 'kubernetes', worker ? 'kubelet.conf' : 'admin.conf'),
        lastKnownFile: join(root, 'var', 'lib', 'ballast', 'backends.json'),
        logFile: join(lab.dir, `${node.name}-ballast.log`),
        agent: null,
        pgids: [],
        agents: [],
        apiserverPgids: [],
        state: 'new',
        cgroup: cgroups[i]!,
      };
    });
  }

  /**
   * Builds the lab (7 nodes, IPv4 only; needs root and the BPF object) and writes every node's
   * final config file. Nothing runs yet.
   */
  static async create(o: LifecycleOptions): Promise<Lifecycle> {
    compiledScript('prober');
    compiledScript('apiserver-standin');
    const lab = await Lab.create({ prefix: o.prefix, subnet: o.subnet, nodes: 7, ipv6: false });
    try {
      const cgroups = await Promise.all(lab.nodes.map((n) => lab.cgroup(n)));
      // every stand-in started later shares one EndpointSlice store and requires the token;
      // none starts now (nodes: [])
      await lab.startApiservers({ store: true, token: TOKEN, nodes: [] });
      const lc = new Lifecycle(lab, o, cgroups);
      for (const m of lc.members) {
        mkdirSync(dirname(m.configPath), { recursive: true });
        mkdirSync(dirname(dirname(m.caFile)), { recursive: true });
        mkdirSync(dirname(m.lastKnownFile), { recursive: true });
        writeFileSync(m.configPath, lc.configText(m));
        rmSync(pinLock(pinDirFor(m.cgroup)), { force: true });
      }
      return lc;
    } catch (e) {
      await lab.teardown().catch(() => undefined);
      throw e;
    }
  }

  /** The seed of every file: the three nodes planned before `kubeadm init`. */
  seed(): string[] {
    return this.lab.nodes.slice(0, 3).map((n) => hp(n.ipv4));
  }

  /** The config of `m` as written to its file (pure but for the instance's VIPs and interval). */
  configDoc(m: Member, o: { vips?: string[]; advertMs?: number } = {}): Record<string, unknown> {
    const common = {
      apiserver: {
        port: 6443,
        backends: this.seed(),
        health: {
          caFile: m.caFile,
          interval: `${HEALTH.intervalMs}ms`,
          timeout: `${HEALTH.timeoutMs}ms`,
          rise: HEALTH.rise,
          fall: HEALTH.fall,
        },
      },
      ...(this.discovery ? { discovery: { kubeconfig: m.kubeconfig, lastKnownFile: m.lastKnownFile } } : {}),
      admin: { listen: `127.0.0.1:${ADMIN_PORT}` },
      log: { level: 'info' },
    };
    if (m.role === 'worker') {
      return {
        localEndpoint: { address: LOCAL_ENDPOINT, cgroup: m.cgroup },
        // keepOnStop: the default (localEndpoint): a stop is a restart, the programs keep serving
        dataplane: { local: 'ebpf' },
        ...common,
      };
    }
    return {
      interface: m.node.ifname,
      vrrp: {
        vrid: VRID,
        priority: m.priority,
        advertisementInterval: `${o.advertMs ?? this.#advertMs}ms`,
        preempt: false,
        ...(this.vrrpMode === 'unicast' ? { peers: 'discovered' } : {}),
      },
      vips: o.vips ?? this.#vips,
      dataplane: { vip: 'nftables' },
      ...common,
    };
  }

  configText(m: Member, o: { vips?: string[]; advertMs?: number } = {}): string {
    return stringify(this.configDoc(m, o));
  }

  member(name: string): Member {
    const m = this.members.find((x) => x.node.name === name);
    if (!m) throw new Error(`lifecycle: no node ${name}`);
    return m;
  }

  /** Control-plane members whose agent runs. */
  #runningControlPlane(): Member[] {
    return this.members.filter((m) => m.role === 'control-plane' && m.agent !== null);
  }

  #running(): Member[] {
    return this.members.filter((m) => m.agent !== null);
  }

  // -------------------------------------------------------------------------------------------
  // node actions

  async #startAgent(m: Member): Promise<LabAgent> {
    const a = await runAgent(this.lab, m.node, m.configPath, {
      logFile: m.logFile,
      adminPort: ADMIN_PORT,
      // a Node.js start with @kubernetes/client-node is 1.5 s of CPU on an idle machine
      timeoutMs: 30_000,
      ...(m.role === 'worker' ? { hostMounts: true } : {}),
      ...(hasCurl() ? { answers: (x: LabAgent) => this.#get(x.node, '/status').then((r) => r.code === 0) } : {}),
    });
    m.agent = a;
    m.agents.push(a);
    m.pgids.push(a.proc.pid);
    return a;
  }

  async #stopAgent(m: Member): Promise<number | null> {
    const a = m.agent;
    if (!a) return null;
    m.agent = null;
    return a.stop('SIGTERM');
  }

  /**
   * The CA file, then the kubeconfig (what kubeadm writes before the control plane starts): the
   * lab's kubeadm-like admin.conf (server https://VIP:6443, the CA inline, the stand-ins' bearer
   * token), which discovery must not use as its address (it talks to ready apiservers directly).
   */
  async #writeCredentials(m: Member): Promise<void> {
    mkdirSync(dirname(m.caFile), { recursive: true });
    copyFileSync(this.lab.ca.certFile, m.caFile);
    await this.lab.writeKubeconfig(m.node, { token: TOKEN, path: m.kubeconfig });
  }

  async #startApiserver(m: Member): Promise<void> {
    await this.lab.startApiserver(m.node);
    const p = this.lab.apiserver(m.node);
    if (p) m.apiserverPgids.push(p.pid);
  }

  /**
   * GET /status of `m`'s agent. With curl (a fork and an exec) rather than `ballast status`
   * (a Node.js start, 100–300 ms of CPU): the steps poll often, on 2 cores that also run
   * everything measured.
   */
  async #status(m: Member): Promise<StatusDocument> {
    const a = m.agent;
    if (!a) throw new Error(`lifecycle: no agent runs on ${m.node.name}`);
    if (!hasCurl()) return a.anyStatus();
    const r = await this.#get(m.node, '/status');
    if (r.code !== 0) throw new Error(`GET /status on ${m.node.name} failed (${r.code}): ${r.stderr.trim()}`);
    return JSON.parse(r.stdout) as StatusDocument;
  }

  /** GET `path` from the admin endpoint in `node` with curl (never rejects for HTTP or network failures). */
  #get(node: LabNode, path: string): Promise<{ code: number; stdout: string; stderr: string }> {
    return this.lab.exec(node.netns, ['curl', '-sS', '--fail', '--max-time', '3', `http://127.0.0.1:${ADMIN_PORT}${path}`], {
      allowFail: true,
      timeoutMs: 5000,
    });
  }

  async #election(m: Member): Promise<ElectionStatusDocument> {
    const d = await this.#status(m);
    if (d.state === 'none') throw new Error(`the agent on ${m.node.name} runs no election`);
    return d;
  }

  /** Backends of `m`'s pool that are up (host:port). */
  async #upBackends(m: Member): Promise<string[]> {
    return (await this.#status(m)).backends.filter((b) => b.healthy).map((b) => b.address);
  }

  /** Waits until every running agent has `want` (host:port) up, or not up when `up` is false. */
  async #poolsHave(want: string, up: boolean, timeoutMs = 8000): Promise<number> {
    const t0 = performance.now();
    await waitFor(
      async () => {
        for (const m of this.#running()) if ((await this.#upBackends(m)).includes(want) !== up) return `${m.node.name}`;
        return null;
      },
      (left) => left === null,
      { timeoutMs, intervalMs: 100, what: `${want} ${up ? 'up' : 'out'} in every pool` },
    );
    return performance.now() - t0;
  }

  /** Waits until every running control-plane agent's unicast peers are exactly the other members. */
  async #peersFollow(timeoutMs = 8000): Promise<string> {
    if (this.vrrpMode !== 'unicast') return 'multicast: no peers';
    const cp = this.#runningControlPlane();
    const want = (m: Member): string[] => cp.filter((x) => x !== m).map((x) => x.node.ipv4);
    const show = (all: { name: string; peers: string[] }[]): string => all.map((x) => `${x.name}:[${x.peers.join(' ')}]`).join(' ');
    let last: { name: string; peers: string[] }[] = [];
    const ok = await waitFor(
      async () => {
        last = await Promise.all(cp.map(async (m) => ({ name: m.node.name, peers: [...(await this.#election(m)).peers].sort() })));
        return last.every((x, i) => sameSet(x.peers, want(cp[i]!)));
      },
      { timeoutMs, intervalMs: 100, what: 'unicast peers to be the other members' },
    ).then(
      () => true,
      () => false,
    );
    if (!ok) throw new Error(`not the other members after ${timeoutMs} ms: ${show(last)}`);
    return show(last);
  }

  async #holders(vip = this.lab.vip4): Promise<string[]> {
    return (await this.lab.holders(vip)).map((n) => n.name);
  }

  /** What a retired node still has: a VIP, `table ip ballast`, pins, programs, a process. */
  async #leftovers(m: Member): Promise<string[]> {
    const found: string[] = [];
    const addrs = (await this.lab.addresses(m.node)).map((a) => a.address);
    for (const v of [this.lab.vip4, this.vip2]) if (addrs.includes(v)) found.push(`VIP ${v}`);
    if ((await this.lab.exec(m.node.netns, ['nft', 'list', 'table', 'ip', 'ballast'], { allowFail: true })).code === 0) found.push('table ip ballast');
    const pinDir = pinDirFor(m.cgroup);
    if (existsSync(pinDir)) found.push(`BPF pins ${pinDir}`);
    if (cgroupPrograms(m.cgroup).some((p) => p.ids.length > 0)) found.push('programs on its cgroup');
    const pids = (await this.lab.exec(m.node.netns, ['ip', 'netns', 'pids', m.node.netns], { allowFail: true })).stdout.split(/\s+/).filter(Boolean);
    // the `ip netns pids` process itself runs inside the namespace
    const others = pids.filter((p) => Number(p) !== 0 && existsSync(`/proc/${p}`) && !/ip\s+netns\s+pids/.test(readCmdline(Number(p))));
    if (others.length > 0) found.push(`processes ${others.map((p) => `${p} ${readCmdline(Number(p))}`).join('; ')}`);
    return found;
  }

  /** The retired-node check every step ends with. */
  async #retiredClean(s: Step): Promise<void> {
    for (const m of this.members.filter((x) => x.state === 'retired')) {
      const left = await this.#leftovers(m);
      s.check(`${m.node.name} (retired) keeps nothing`, left.length === 0, left.join(', ') || 'nothing');
    }
  }

  /** The one-holder check: exactly one member holds the VIP and it is a running control-plane member. */
  async #oneHolder(s: Step, vip = this.lab.vip4): Promise<string | null> {
    const h = await waitFor(
      () => this.#holders(vip),
      (x) => x.length === 1,
      { timeoutMs: 3000, what: `one holder of ${vip}` },
    ).catch(async () => this.#holders(vip));
    const ok = h.length === 1 && this.#runningControlPlane().some((m) => m.node.name === h[0]);
    s.check(`exactly one running member holds ${vip}`, ok, h.join(',') || 'nobody');
    return ok ? h[0]! : null;
  }

  /** The running control-plane member with the highest priority other than `except`. */
  #next(except: Member): Member {
    const cands = this.#runningControlPlane()
      .filter((m) => m !== except)
      .sort((a, b) => b.priority - a.priority);
    if (!cands[0]) throw new Error(`lifecycle: nobody takes over from ${except.node.name}`);
    return cands[0];
  }

  #skewBound(taker: Member): Bound {
    const cs = this.#advertMs / 10;
    return { name: `Skew_Time(${taker.priority}) + ${MARGIN_MS} ms`, ms: skewTimeMs(taker.priority, cs) + MARGIN_MS };
  }

  /**
   * Widens a takeover's window by the commit of the replicated connections that the first new
   * master after it logged (its durationMs), which the takeover runs before it adds the VIP.
   */
  #addCommit(c: Cause, until: number): void {
    if (c.takeoverAt === undefined) return;
    const first = this.#mastersSince(c.takeoverAt, until).sort((a, b) => a.time - b.time)[0];
    if (!first) return;
    const commit = this.member(first.node)
      .agents.flatMap((a) => a.logLines())
      .find((l) => /^connection sync: .*commit/.test(String(l.msg)) && typeof l.durationMs === 'number' && logTime(l) >= first.time && logTime(l) <= until);
    const ms = Math.ceil(Number(commit?.durationMs ?? 0));
    if (ms <= 0) return;
    c.to += ms;
    c.bound = { name: `${c.bound.name} + ${first.node}'s commit ${ms} ms`, ms: c.bound.ms + ms };
  }

  #leavingBackendBound(): Bound {
    return { name: `fall × interval + interval + ${MARGIN_MS} ms`, ms: HEALTH.fall * HEALTH.intervalMs + HEALTH.intervalMs + MARGIN_MS };
  }

  #riseBound(): Bound {
    return {
      name: `rise × interval + interval + timeout + ${MARGIN_MS} ms`,
      ms: HEALTH.rise * HEALTH.intervalMs + HEALTH.intervalMs + HEALTH.timeoutMs + MARGIN_MS,
    };
  }

  /**
   * Every agent's 'state change' to master at or after `epoch` (ms), each with how long it stayed
   * master (null: still is) and why it stopped. `brief`: it gave way to a higher priority within
   * one advertisement interval + MARGIN_MS — after a priority-0 advert every Backup runs its own
   * Skew_Time, and one whose timer fires before the new master's first advert reaches it (the
   * Skew_Times of priorities 30 apart differ by 12 ms; loaded cores delay the advert more)
   * becomes master for that long: RFC 9568's own resolution, not a move of the VIP.
   */
  #mastersSince(epoch: number, until = Date.now()): { node: string; time: number; reason: string; heldMs: number | null; brief: boolean }[] {
    return this.members.flatMap((m) =>
      m.agents.flatMap((a) => {
        const changes = a.logLines().filter((l) => l.msg === 'state change');
        return changes.flatMap((l, i) => {
          if (l.to !== 'master') return [];
          const time = logTime(l);
          if (!(time >= epoch && time <= until)) return [];
          const end = changes[i + 1];
          const heldMs = end === undefined ? null : logTime(end) - time;
          const brief = end !== undefined && end.reason === 'higherPriority' && heldMs !== null && heldMs <= this.#advertMs + MARGIN_MS;
          return [{ node: m.node.name, time, reason: String(l.reason), heldMs, brief }];
        });
      }),
    );
  }

  /** The check of a step's VIP moves: `expected` settled ones, the brief ones named in the detail. */
  #movesCheck(s: Step, what: string, expected: number): void {
    const all = this.#mastersSince(s.epoch0);
    const settled = all.filter((x) => !x.brief);
    const brief = all.filter((x) => x.brief);
    s.check(
      `${what} (${expected}), none extra`,
      settled.length === expected,
      `${settled.map((x) => `${x.node} (${x.reason})`).join(', ') || 'none'}${brief.length ? `; brief (gave way within ${this.#advertMs + MARGIN_MS} ms): ${brief.map((x) => `${x.node} ${x.heldMs} ms`).join(', ')}` : ''}`,
    );
  }

  // -------------------------------------------------------------------------------------------
  // step bookkeeping

  #begin(n: number, title: string): Step {
    this.#log(`step ${n}: ${title}`);
    return new Step(n, title);
  }

  async #finish(s: Step): Promise<StepFigures> {
    const t1 = performance.now();
    const epoch1 = Date.now();
    await this.#retiredClean(s);
    const clients = [this.#vipClient, this.#localClient].filter((c): c is Client => c !== null);
    await Promise.all(clients.map((c) => c.settled(t1)));
    for (const c of s.causes) this.#addCommit(c, epoch1);
    const figuresOf = (c: Client | null): ClientFigures | null => {
      if (!c) return null;
      const causes = s.causes
        .filter((x) => x.clients.has(c.name))
        .map((x) => ({ from: c.at(x.from), to: c.at(x.to), ...(x.accepts ? { accepts: x.accepts } : {}) }));
      return clientFigures(c.results(), c.at(s.t0), c.at(t1), causes);
    };
    const vip = figuresOf(this.#vipClient) ?? { requests: 0, failed: 0, maxOutageMs: 0, unexplained: [] };
    const local = figuresOf(this.#localClient);
    const f: StepFigures = {
      step: s.n,
      title: s.title,
      causes: s.causes.map((c) => ({ name: c.name, atMs: Number.isFinite(c.from) ? Math.round(c.from + PROBE_TIMEOUT_MS - s.t0) : 0, bound: c.bound })),
      vip,
      local,
      vipMoves: this.#mastersSince(s.epoch0, epoch1).filter((x) => !x.brief).length,
      checks: s.checks,
      pass: s.checks.every((c) => c.ok) && vip.unexplained.length === 0 && (local?.unexplained.length ?? 0) === 0,
      wallMs: Math.round(t1 - s.t0),
    };
    this.figures.push(f);
    this.#log(formatStep(f));
    return f;
  }

  // -------------------------------------------------------------------------------------------
  // the steps

  /** Step 1: n1 alone, no CA, no apiserver; the worker's agent starts too (it has not joined). */
  async step1(): Promise<StepFigures> {
    const s = this.#begin(1, 'n1 alone, no CA, no apiserver: ballast starts with the final config');
    const n1 = this.member('n1');
    const spawnedAt = Date.now();
    // watch n1's eth0 from the spawn on: the VIP's first appearance, at 10 ms resolution
    let vipSeenAt: number | null = null;
    let watching = true;
    const watch = (async () => {
      const until = Date.now() + 15_000;
      while (watching && vipSeenAt === null && Date.now() < until) {
        if ((await this.lab.addresses(n1.node)).some((a) => a.address === this.lab.vip4)) vipSeenAt = Date.now();
        else await sleep(10);
      }
    })();
    try {
      await this.#startAgent(n1);
      await waitFor(() => vipSeenAt, { timeoutMs: 10_000, intervalMs: 10, what: `${this.lab.vip4} on n1` });
    } finally {
      watching = false;
      await watch;
    }
    n1.state = 'member';
    const lines = n1.agent!.logLines();
    const first = lines.find((l) => l.msg === 'state change' && l.from === 'init');
    const electionStart = first === undefined ? undefined : logTime(first);
    const mdi = masterDownIntervalMs(n1.priority, ADVERT_MS / 10);
    const upMs = electionStart === undefined || vipSeenAt === null ? Number.NaN : vipSeenAt - electionStart;
    s.check(
      `VIP up within Master_Down_Interval(${n1.priority}) = ${mdi.toFixed(1)} ms (+ ${MARGIN_MS} ms) of the election's start`,
      upMs >= 0 && upMs <= mdi + MARGIN_MS,
      `${Number.isNaN(upMs) ? 'no election start logged' : `${upMs} ms`} (${vipSeenAt === null ? '?' : vipSeenAt - spawnedAt} ms after the spawn)`,
    );
    // the first check reports the wait (before it the state is `unknown`)
    const st = await waitFor(
      () => this.#election(n1),
      (d) => d.backends.length > 0 && d.backends.every((b) => b.waitingFor !== undefined),
      { timeoutMs: 3 * HEALTH.intervalMs + 2000, intervalMs: 50, what: "n1's backends waiting for the CA" },
    ).catch(() => this.#election(n1));
    s.check(
      'n1 is master, runs (no exit), its backends wait for the CA',
      st.state === 'master' &&
        n1.agent!.proc.child.exitCode === null &&
        st.backends.length > 0 &&
        st.backends.every((b) => !b.healthy && b.waitingFor?.setting === 'apiserver.health.caFile' && b.waitingFor.path === n1.caFile),
      st.backends.map((b) => `${b.address} ${b.state} (${b.reason})`).join(', '),
    );

    // the worker's ballast starts before it joins (no CA, no kubeconfig)
    await this.#startAgent(this.member('n7'));

    // connections to VIP:6443: refused or reset within 1 s, never a hang
    this.#vipClient = new Client('vip', this.lab, {
      url: `https://${this.lab.vip4}:6443/version`,
      intervalMs: PROBE_INTERVAL_MS,
      durationMs: 600_000,
      timeoutMs: PROBE_TIMEOUT_MS,
      logFile: 'client-vip.log',
    });
    await this.#vipClient.started();
    const quick = (r: Failed): boolean => (r.error === 'ECONNREFUSED' || r.error === 'ECONNRESET') && r.ms <= REFUSE_WITHIN_MS;
    const c = s.cause(
      'no apiserver yet: refused or reset within 1 s',
      { name: `each failure ECONNREFUSED/ECONNRESET within ${REFUSE_WITHIN_MS} ms`, ms: Number.POSITIVE_INFINITY },
      ['vip'],
      quick,
    );
    c.from = Number.NEGATIVE_INFINITY;
    await sleep(1000 + PROBE_TIMEOUT_MS);
    const seen = this.#vipClient.results();
    s.check(
      'every request to VIP:6443 refused or reset within 1 s',
      seen.length > 50 && seen.every((r) => !r.ok && quick(r)),
      `${seen.length} requests: ${tally(seen)}`,
    );
    await this.#oneHolder(s);
    return this.#finish(s);
  }

  /** Step 2: `kubeadm init` on n1 (CA, kubeconfig, apiserver), then the worker joins. */
  async step2(): Promise<StepFigures> {
    const s = this.#begin(2, 'the CA and the apiserver appear on n1 (kubeadm init); the worker joins');
    const n1 = this.member('n1');
    const n7 = this.member('n7');
    const quick = (r: Failed): boolean => (r.error === 'ECONNREFUSED' || r.error === 'ECONNRESET') && r.ms <= REFUSE_WITHIN_MS;
    const down = s.cause(
      'no apiserver yet: refused or reset within 1 s',
      { name: `each failure ECONNREFUSED/ECONNRESET within ${REFUSE_WITHIN_MS} ms`, ms: Number.POSITIVE_INFINITY },
      ['vip'],
      quick,
    );
    await this.#writeCredentials(n1);
    await this.#startApiserver(n1);
    down.to = performance.now();
    s.cause("n1's apiserver is up: its check rises", this.#riseBound(), ['vip']);
    const t0 = performance.now();
    await waitFor(
      () => this.#upBackends(n1),
      (up) => up.includes(hp(n1.node.ipv4)),
      { timeoutMs: 5000, intervalMs: 50, what: "n1's backend up on n1" },
    ).catch(() => []);
    const riseMs = performance.now() - t0;
    const st = await this.#status(n1);
    const b1 = st.backends.find((b) => b.address === hp(n1.node.ipv4));
    s.check(
      `n1's backend up within ${this.#riseBound().ms} ms of its apiserver`,
      b1?.healthy === true && riseMs <= this.#riseBound().ms,
      `${b1?.address} ${b1?.state}, ${riseMs.toFixed(0)} ms`,
    );
    await waitFor(() => this.#vipClient!.results().filter((r) => r.ok).length > 5, { timeoutMs: 5000, what: 'the VIP client served' }).catch(() => false);
    s.check(
      'the VIP client is served',
      this.#vipClient!.results().some((r) => r.ok),
      tally(this.#vipClient!.results().slice(-50)),
    );

    // the worker joins: its CA and kubelet.conf appear; the local-endpoint client starts
    this.#localClient = new Client('local', this.lab, {
      url: `https://${LOCAL_ENDPOINT}/version`,
      netns: n7.node.netns,
      cgroup: this.#workerCgroup,
      intervalMs: PROBE_INTERVAL_MS,
      durationMs: 600_000,
      timeoutMs: PROBE_TIMEOUT_MS,
      logFile: 'client-local.log',
    });
    await this.#localClient.started();
    const ldown = s.cause(
      'the worker has not joined: refused',
      { name: `each failure ECONNREFUSED/ECONNRESET within ${REFUSE_WITHIN_MS} ms`, ms: Number.POSITIVE_INFINITY },
      ['local'],
      quick,
    );
    ldown.from = Number.NEGATIVE_INFINITY;
    await this.#writeCredentials(n7);
    ldown.to = performance.now();
    s.cause("the worker's CA appears: its check rises", this.#riseBound(), ['local']);
    n7.state = 'member';
    const l0 = performance.now();
    await waitFor(() => this.#localClient!.results().filter((r) => r.ok).length > 5, { timeoutMs: 5000, what: 'the local client served' }).catch(() => false);
    s.check(
      `the local-endpoint client is served (${(performance.now() - l0).toFixed(0)} ms after the CA)`,
      this.#localClient!.results().some((r) => r.ok),
      tally(this.#localClient!.results().slice(-50)),
    );
    await this.#sources(s, n1);
    await this.#oneHolder(s);
    return this.#finish(s);
  }

  /** Checks that every backend in `m`'s pool came from the EndpointSlices, and the pool is the running apiservers. */
  async #sources(s: Step, m: Member): Promise<void> {
    const want = this.members.filter((x) => x.role === 'control-plane' && this.lab.apiserver(x.node)).map((x) => hp(x.node.ipv4));
    const st = await waitFor(
      () => this.#status(m),
      (d) =>
        sameSet(
          d.backends.filter((b) => b.healthy).map((b) => b.address),
          want,
        ),
      { timeoutMs: 5000, intervalMs: 100, what: `${m.node.name}'s pool to be ${want.join(' ')}` },
    ).catch(() => this.#status(m));
    const rows = st.backends.map((b) => `${b.address} ${b.state} ${(b as { source?: string }).source ?? '?'}`);
    const up = st.backends.filter((b) => b.healthy);
    s.check(
      `${m.node.name}'s pool is ${want.join(' ')}, each from the EndpointSlices`,
      sameSet(
        up.map((b) => b.address),
        want,
      ) && up.every((b) => (b as { source?: string }).source === 'endpointslice'),
      rows.join(', '),
    );
  }

  /**
   * A control-plane node joins: its ballast first, then (kubeadm join) CA, kubeconfig,
   * apiserver. Until discovery lists its apiserver a node outside the seed is no member and
   * stays Backup; a seed node is heard as one still joining (see the file comment). The step's
   * master count shows any second master.
   */
  async #join(s: Step, m: Member): Promise<void> {
    this.#log(`  ${m.node.name} joins (priority ${m.priority}, ballast, then kubeadm join)`);
    await this.#startAgent(m);
    await this.#writeCredentials(m);
    await this.#startApiserver(m);
    m.state = 'member';
    const ms = await this.#poolsHave(hp(m.node.ipv4), true).catch(() => Number.NaN);
    s.check(
      `${m.node.name}'s apiserver is in every running pool through discovery`,
      !Number.isNaN(ms),
      Number.isNaN(ms) ? 'not within 8 s' : `${ms.toFixed(0)} ms after it was ready`,
    );
    const st = await this.#election(m);
    s.check(`${m.node.name} joined as backup`, st.state === 'backup', `${st.state}, master ${st.masterAddress}`);
  }

  /** Step 3: n2 and n3 join with the same file; nothing is edited on n1. */
  async step3(): Promise<StepFigures> {
    const s = this.#begin(3, 'n2 and n3 join: their apiservers enter the pool through discovery, no edit on n1');
    const n1 = this.member('n1');
    for (const name of ['n2', 'n3']) await this.#join(s, this.member(name));
    await this.#sources(s, n1);
    const peers = await this.#peersFollow().then(
      (p) => ({ ok: true, p }),
      (e: Error) => ({ ok: false, p: e.message }),
    );
    s.check('unicast peers are the other members', peers.ok, peers.p);
    await this.#oneHolder(s);
    // a joining node is no member until discovery lists it: it must not become master meanwhile
    this.#movesCheck(s, 'no master while n2 and n3 join', 0);
    return this.#finish(s);
  }

  /** A node leaves: ballast stopped (priority 0 if master), then its apiserver stopped gracefully. */
  async #leave(s: Step, m: Member): Promise<boolean> {
    const holder = (await this.#holders())[0];
    const wasMaster = holder === m.node.name;
    this.#log(`  ${m.node.name} leaves${wasMaster ? ' (master)' : ''}`);
    let taker: Member | null = null;
    if (wasMaster) {
      taker = this.#next(m);
      s.cause(`${m.node.name} leaves as master: ${taker.node.name} takes over`, this.#skewBound(taker), ['vip'], undefined, true);
    }
    const code = await this.#stopAgent(m);
    s.check(`${m.node.name}'s ballast exits 0`, code === 0, String(code));
    if (taker) {
      // the highest Backup normally wins (shortest Skew_Time); on loaded cores another one's
      // timer may fire first, which the protocol allows (preempt is off, so it keeps the VIP)
      const running = this.#runningControlPlane().map((x) => x.node.name);
      const h = await waitFor(
        () => this.#holders(),
        (x) => x.length === 1 && running.includes(x[0]!),
        { timeoutMs: 3000, what: 'a running member to hold the VIP' },
      ).catch(() => this.#holders());
      s.check(
        `a running member holds the VIP after ${m.node.name} left`,
        h.length === 1 && running.includes(h[0]!),
        `${h.join(',') || 'nobody'}${h[0] === taker.node.name ? '' : ` (not ${taker.node.name}, the highest Backup)`}`,
      );
    }
    s.cause(`${m.node.name}'s apiserver leaves (graceful: out of the EndpointSlice first)`, this.#leavingBackendBound(), ['vip', 'local']);
    await this.lab.stopApiserver(m.node);
    m.state = 'retired';
    const ms = await this.#poolsHave(hp(m.node.ipv4), false).catch(() => Number.NaN);
    s.check(`${m.node.name}'s apiserver is out of every pool`, !Number.isNaN(ms), Number.isNaN(ms) ? 'still in a pool after 8 s' : `${ms.toFixed(0)} ms`);
    return wasMaster;
  }

  /** Step 4: n4, n5, n6 at new addresses replace n1, n2, n3 one at a time. */
  async step4(): Promise<StepFigures> {
    const s = this.#begin(4, 'n4, n5, n6 replace n1, n2, n3 one at a time (join, then the old one leaves)');
    let mastersLeft = 0;
    for (const [nu, old] of [
      ['n4', 'n1'],
      ['n5', 'n2'],
      ['n6', 'n3'],
    ] as const) {
      await this.#join(s, this.member(nu));
      if (await this.#leave(s, this.member(old))) mastersLeft++;
      const peers = await this.#peersFollow().then(
        (p) => ({ ok: true, p }),
        (e: Error) => ({ ok: false, p: e.message }),
      );
      s.check(`after ${old} left, unicast peers are the other members`, peers.ok, peers.p);
    }
    this.#movesCheck(s, 'one VIP move per leaving master', mastersLeft);
    await this.#sources(s, this.member('n4'));
    await this.#oneHolder(s);
    return this.#finish(s);
  }

  /** Step 5: ballast restarted on every remaining node in turn. */
  async step5(): Promise<StepFigures> {
    const s = this.#begin(5, 'ballast restarted on every remaining node in turn');
    let mastersRestarted = 0;
    for (const m of this.#running()) {
      const holder = (await this.#holders())[0];
      const wasMaster = holder === m.node.name;
      this.#log(`  restarting ${m.node.name}${wasMaster ? ' (master)' : ''}`);
      if (wasMaster) {
        mastersRestarted++;
        s.cause(`${m.node.name} restarts as master: ${this.#next(m).node.name} takes over`, this.#skewBound(this.#next(m)), ['vip'], undefined, true);
      } else if (m.role === 'worker') {
        // the local endpoint keeps serving new connections across the restart: no bound to spend
        s.cause(`${m.node.name} restarts (worker): the local endpoint keeps serving`, { name: 'no failure', ms: 0 }, []);
      }
      const code = await this.#stopAgent(m);
      s.check(`${m.node.name}'s ballast exits 0`, code === 0, String(code));
      await this.#startAgent(m);
      if (m.role === 'control-plane') {
        const st = await waitFor(
          () => this.#election(m),
          (d) => d.state === 'backup',
          { timeoutMs: 3000, what: `${m.node.name} backup` },
        ).catch(() => this.#election(m));
        s.check(`${m.node.name} comes back as backup`, st.state === 'backup', `${st.state}`);
      }
      // its pool is whole again before the next restart
      const want = this.members.filter((x) => x.state === 'member' && x.role === 'control-plane').map((x) => hp(x.node.ipv4));
      const ok = await waitFor(
        () => this.#upBackends(m),
        (up) => sameSet(up, want),
        { timeoutMs: 5000, intervalMs: 100, what: `${m.node.name}'s pool whole` },
      ).then(
        () => true,
        () => false,
      );
      s.check(`${m.node.name}'s pool is whole again`, ok, (await this.#upBackends(m)).join(' '));
    }
    this.#movesCheck(s, 'one VIP move per restarted master', mastersRestarted);
    await this.#oneHolder(s);
    return this.#finish(s);
  }

  /** `ballast reload` in `m`'s namespace: exit status and output. */
  async #reload(m: Member): Promise<{ code: number; out: string }> {
    const r = await this.lab.exec(m.node.netns, [process.execPath, cliPath(), 'reload', '--admin', `127.0.0.1:${ADMIN_PORT}`], {
      allowFail: true,
      timeoutMs: 15_000,
    });
    return { code: r.code, out: (r.stdout + r.stderr).trim() };
  }

  /** Step 6: a reload with a bad file, then one that adds a second VIP and doubles the interval. */
  async step6(): Promise<StepFigures> {
    const s = this.#begin(6, 'reload: a bad file changes nothing; then a second VIP and a new interval, no failover');
    // no cause: a reload may cost no request
    const cp = this.#runningControlPlane();
    const before = await Promise.all(cp.map((m) => this.#election(m)));
    for (const m of cp) {
      const good = this.configDoc(m);
      writeFileSync(m.configPath, stringify({ ...good, vrrp: { ...(good.vrrp as object), priority: 300 } }));
      const r = await this.#reload(m);
      s.check(`${m.node.name}: \`ballast reload\` of a bad file exits 2`, r.code === 2, `${r.code}: ${r.out.split('\n').slice(0, 2).join(' | ')}`);
    }
    await sleep(3 * ADVERT_MS);
    const after = await Promise.all(cp.map((m) => this.#election(m)));
    s.check(
      'after the bad file nothing changed (state, master, VIPs, interval)',
      after.every(
        (a, i) =>
          a.state === before[i]!.state &&
          a.masterAddress === before[i]!.masterAddress &&
          sameSet(a.vips, before[i]!.vips) &&
          a.advertisementIntervalMs === before[i]!.advertisementIntervalMs,
      ),
      after.map((a, i) => `${cp[i]!.node.name} ${a.state} ${a.vips.join(',')} ${a.advertisementIntervalMs}ms`).join('; '),
    );

    // the good file: backups first, the master last
    this.#vips = [this.lab.vip4, this.vip2];
    this.#advertMs = 2 * ADVERT_MS;
    const holder = (await this.#holders())[0];
    const order = [...cp.filter((m) => m.node.name !== holder), ...cp.filter((m) => m.node.name === holder)];
    for (const m of order) {
      writeFileSync(m.configPath, this.configText(m));
      const r = await this.#reload(m);
      s.check(`${m.node.name}: reload of the new file exits 0`, r.code === 0, `${r.code}: ${r.out.split('\n').slice(0, 2).join(' | ')}`);
    }
    const v2 = await waitFor(
      () => this.#holders(this.vip2),
      (h) => h.length === 1,
      { timeoutMs: 3000, what: `one holder of ${this.vip2}` },
    ).catch(() => this.#holders(this.vip2));
    s.check(`the second VIP ${this.vip2} is up on the master (${holder})`, v2.length === 1 && v2[0] === holder, v2.join(',') || 'nobody');
    const reach = await this.lab.exec(
      this.lab.client.netns,
      [process.execPath, compiledScript('prober'), '--reach', this.vip2, '--port', '6443', '--timeout', '1000'],
      { allowFail: true },
    );
    const rr = parseLast<ReachResult>(reach.stdout);
    s.check(`${this.vip2}:6443 accepts a connection from the client`, rr?.how === 'connect', rr ? `${rr.how} in ${rr.ms} ms` : reach.stderr.trim());
    await sleep(3 * this.#advertMs);
    const now = await Promise.all(cp.map((m) => this.#election(m)));
    s.check(
      `every node advertises every ${this.#advertMs} ms, the backups follow the master's interval`,
      now.every((d) => d.advertisementIntervalMs === this.#advertMs && (d.state === 'master' || d.masterAdverIntervalMs === this.#advertMs)),
      now.map((d, i) => `${cp[i]!.node.name} ${d.state} advert ${d.advertisementIntervalMs} master ${d.masterAdverIntervalMs}`).join('; '),
    );
    this.#movesCheck(s, 'no VIP move during the reloads', 0);
    await this.#oneHolder(s);
    return this.#finish(s);
  }

  /** Runs steps 1..6 in order; stops at the first step that throws (its error is rethrown). */
  async run(): Promise<StepFigures[]> {
    await this.step1();
    await this.step2();
    await this.step3();
    await this.step4();
    await this.step5();
    await this.step6();
    return this.figures;
  }

  /** Stops the clients and every agent, removes the worker's pins, tears the lab down. */
  async teardown(): Promise<void> {
    try {
      await Promise.all([this.#vipClient?.run.stop(), this.#localClient?.run.stop()].map((p) => p?.catch(() => undefined)));
      await Promise.all(this.#running().map((m) => this.#stopAgent(m).catch(() => undefined)));
      for (const m of this.members) {
        const pinDir = pinDirFor(m.cgroup);
        if (existsSync(pinDir)) SockLb.detach(pinDir);
        rmSync(pinLock(pinDir), { force: true });
        try {
          rmdirSync(dirname(pinDir));
        } catch {
          /* not empty (another agent's pins), or already gone */
        }
      }
    } finally {
      await this.lab.teardown();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// helpers

/** The host-wide lock file of a pin directory (dataplane/ebpf.ts lockPinDir). */
const pinLock = (pinDir: string): string => `/run/ballast/${basename(pinDir)}.lock`;

function readCmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
  } catch {
    return '?';
  }
}

/** A pino line's `time` (ISO 8601 in ballast's logs, or epoch ms) as epoch ms; NaN when absent. */
function logTime(l: Record<string, unknown>): number {
  return typeof l.time === 'number' ? l.time : Date.parse(String(l.time));
}

function sameSet(a: readonly string[], b: readonly string[]): boolean {
  const x = [...new Set(a)].sort();
  const y = [...new Set(b)].sort();
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

/** "ok×120 ECONNREFUSED×3" (pure). */
export function tally(results: readonly ProbeResult[]): string {
  const by: Record<string, number> = {};
  for (const r of results) {
    const k = r.ok ? 'ok' : r.error;
    by[k] = (by[k] ?? 0) + 1;
  }
  return (
    Object.entries(by)
      .map(([k, v]) => `${k}×${v}`)
      .join(' ') || 'no request'
  );
}

function parseLast<T>(stdout: string): T | null {
  try {
    return JSON.parse(stdout.trim().split('\n').pop() ?? '') as T;
  } catch {
    return null;
  }
}

const fmtBound = (b: Bound): string => (Number.isFinite(b.ms) ? `${b.name} = ${b.ms.toFixed(0)} ms` : b.name);

/** One step's figures as the demo prints them (pure). */
export function formatStep(f: StepFigures): string {
  const client = (name: string, c: ClientFigures | null): string =>
    c === null
      ? `${name}: not running`
      : `${name}: longest outage ${c.maxOutageMs} ms, ${c.failed} of ${c.requests} failed${c.unexplained.length ? `, ${c.unexplained.length} OUTSIDE every bound (first at +${c.unexplained[0]!.t} ms: ${c.unexplained[0]!.error})` : ''}`;
  const lines = [
    `step ${f.step} ${f.pass ? 'held' : 'FAILED'} (${(f.wallMs / 1000).toFixed(1)} s): ${f.title}`,
    `  ${client('VIP client', f.vip)}`,
    `  ${client('local-endpoint client', f.local)}`,
    `  bounds: ${f.causes.length ? f.causes.map((c) => `(+${c.atMs} ms) ${c.name} → ${fmtBound(c.bound)}`).join('; ') : 'none spent: no request may fail'}`,
    `  VIP moves: ${f.vipMoves}`,
    ...f.checks.map((c) => `  ${c.ok ? 'ok  ' : 'FAIL'} ${c.what}: ${c.detail}`),
  ];
  return lines.join('\n');
}
