/**
 * ballast agents on a lab (lab/lab.ts): writes each node's config, starts
 * `node dist/src/cli.js run` inside the node's network namespace, and reads its state from its
 * admin endpoint in the same namespace (curl; `ballast status --json` where curl is missing).
 * Used by the demo and the integration tests.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { Lab, LabNode, LabProcess } from './lab.js';
import { compiledScript, onJsonLines, packageRoot, runProber, type ProberRun } from './lab.js';
import type { WatchersReport } from './clients/watchers.js';
import { waitFor } from './wait.js';
import type { LongconnEvent, LongconnResult, LongconnSummary } from './clients/longconn.js';
import type { ElectionStatusDocument, StatusDocument } from '../src/observe/status.js';

/** What varies between agents in a test; everything else has the lab's defaults. */
export interface AgentSettings {
  priority: number;
  vrid?: number;
  /** e.g. "100ms" (default). */
  advertisementInterval?: string;
  preempt?: boolean;
  preemptDelay?: string;
  /** vrrp.realtimePriority (absent: the agent's default, 0) */
  realtimePriority?: number;
  /** vrrp.restartHold, e.g. "4s" (absent: the agent's default) */
  restartHold?: string;
  checksum?: 'rfc5798' | 'rfc9568';
  /** Unicast peers; absent = multicast. */
  peers?: string[];
  /** vrrp.acceptFrom; absent = the default (members). */
  acceptFrom?: 'members' | 'any';
  /** The admin endpoint's port on 127.0.0.1 (default 9641); two agents in one node need two. */
  adminPort?: number;
  /** IPv4 (default) or IPv6 VIP. */
  family?: 4 | 6;
  /**
   * Load balancing: every lab node's stand-in apiserver (port 6443) as a backend, checked
   * against the lab CA every `healthInterval` (default 200ms), rise/fall 2.
   */
  balance?: boolean;
  healthInterval?: string;
  /** With `balance`: apiserver.health.failOpen (absent: the default, on). */
  failOpen?: boolean;
  /** Authenticated adverts: vrrp.auth.keyFile. */
  authKeyFile?: string;
  /** Omit `interface` (the agent picks the interface whose subnet holds the VIP). */
  noInterface?: boolean;
  /** No election: no interface, vrrp or vips (a node that only serves the local endpoint). */
  noElection?: boolean;
  /** Extra top-level keys merged into the YAML. */
  extra?: Record<string, unknown>;
  /** Environment of the agent process, merged over the test's (e.g. LD_PRELOAD, NODE_OPTIONS). */
  env?: Record<string, string>;
  /**
   * Enter only the node's network namespace (nsenter --net), keeping the machine's /sys (bpffs,
   * cgroup2): what an agent with `dataplane.local: ebpf` needs. `ip netns exec` remounts /sys.
   */
  hostMounts?: boolean;
  /** Options for node itself, before the script (e.g. `--trace-baseline`: what V8 does, on stdout). */
  nodeFlags?: string[];
}

/** The YAML config for `node` (pure). */
export function agentConfig(lab: Lab, node: LabNode, s: AgentSettings): string {
  const doc: Record<string, unknown> = {
    ...(s.noInterface || s.noElection ? {} : { interface: node.ifname }),
    vrrp: {
      vrid: s.vrid ?? 51,
      priority: s.priority,
      advertisementInterval: s.advertisementInterval ?? '100ms',
      preempt: s.preempt ?? true,
      preemptDelay: s.preemptDelay ?? '0s',
      ...(s.realtimePriority === undefined ? {} : { realtimePriority: s.realtimePriority }),
      ...(s.restartHold === undefined ? {} : { restartHold: s.restartHold }),
      ...(s.peers === undefined ? {} : { peers: s.peers }),
      ...(s.acceptFrom === undefined ? {} : { acceptFrom: s.acceptFrom }),
      checksum: s.checksum ?? 'rfc5798',
      ...(s.authKeyFile === undefined ? {} : { auth: { keyFile: s.authKeyFile } }),
    },
    vips: [s.family === 6 ? lab.vip6 : lab.vip4],
    admin: { listen: `127.0.0.1:${s.adminPort ?? 9641}` },
    log: { level: 'info' },
    ...(s.balance
      ? {
          apiserver: {
            port: 6443,
            backends: lab.nodes.map((n) => (s.family === 6 ? `[${n.ipv6}]:6443` : `${n.ipv4}:6443`)),
            health: {
              caFile: lab.ca.certFile,
              interval: s.healthInterval ?? '200ms',
              timeout: s.healthInterval ?? '200ms',
              rise: 2,
              fall: 2,
              ...(s.failOpen === undefined ? {} : { failOpen: s.failOpen }),
            },
          },
        }
      : {}),
    ...s.extra,
  };
  if (s.noElection) {
    delete doc.vrrp;
    delete doc.vips;
  }
  return stringify(doc);
}

/** A running agent in a lab node. */
export class LabAgent {
  constructor(
    readonly lab: Lab,
    readonly node: LabNode,
    readonly proc: LabProcess,
    readonly configPath: string,
    readonly adminPort = 9641,
  ) {}

  /** The agent's /status inside the node's namespace, which must run an election. @throws when the agent does not answer. */
  async status(): Promise<ElectionStatusDocument> {
    const doc = await this.anyStatus();
    if (doc.state === 'none') throw new Error(`the agent on ${this.node.name} runs no election`);
    return doc;
  }

  /**
   * The agent's /status document, whatever the agent runs (state 'none' without an election):
   * GET /status with curl, the same JSON `ballast status --json` prints as is. Not the CLI: a
   * Node.js start is 0.3 s of CPU, and tests poll this every 100 ms on 2 cores that also run the
   * agents they measure (the CLI itself is tested in cli, image, package, reload, prometheus).
   * @throws when the agent does not answer 200 with JSON.
   */
  async anyStatus(): Promise<StatusDocument> {
    if (!hasCurl()) {
      const r = await this.lab.exec(this.node.netns, [process.execPath, cliPath(), 'status', '--json', '--admin', `127.0.0.1:${this.adminPort}`], {
        timeoutMs: 5000,
        allowFail: true,
      });
      if (r.code !== 0) throw new Error(`ballast status on ${this.node.name} exited ${r.code}: ${r.stderr.trim()}`);
      return JSON.parse(r.stdout) as StatusDocument;
    }
    return JSON.parse(await this.admin('/status')) as StatusDocument;
  }

  /** GET `path` from the agent's admin endpoint inside the node's namespace; returns the body. @throws unless it answers 200. */
  async admin(path: string): Promise<string> {
    const url = `http://127.0.0.1:${this.adminPort}${path}`;
    if (hasCurl()) {
      // the body, then the HTTP status on a line of its own (000: no answer)
      const r = await this.lab.exec(this.node.netns, ['curl', '-sS', '--max-time', '4', '-w', '\n%{http_code}', url], { timeoutMs: 5000, allowFail: true });
      const cut = r.stdout.lastIndexOf('\n');
      const [body, http] = [r.stdout.slice(0, cut), r.stdout.slice(cut + 1)];
      if (r.code !== 0 || http !== '200')
        throw new Error(`GET ${path} on ${this.node.name} failed (curl ${r.code}, HTTP ${http}): ${r.stderr.trim()}${body.trim()}`);
      return body;
    }
    const js = `require('http').get('${url}', (r) => { let b = ''; r.on('data', (c) => (b += c)); r.on('end', () => { process.stdout.write(b); process.exit(r.statusCode === 200 ? 0 : 1); }); }).on('error', (e) => { console.error(e.message); process.exit(2); });`;
    const r = await this.lab.exec(this.node.netns, [process.execPath, '-e', js], { timeoutMs: 5000, allowFail: true });
    if (r.code !== 0) throw new Error(`GET ${path} on ${this.node.name} failed (${r.code}): ${r.stderr.trim()}${r.stdout.trim()}`);
    return r.stdout;
  }

  /** The agent's JSON log lines so far, parsed (non-JSON lines skipped). */
  logLines(): Record<string, unknown>[] {
    return this.proc
      .output()
      .split('\n')
      .flatMap((l) => {
        try {
          return [JSON.parse(l) as Record<string, unknown>];
        } catch {
          return [];
        }
      });
  }

  /** Stops the agent with `signal` and returns its exit status (null if killed by a signal). */
  stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    return this.proc.stop(signal, 5000);
  }
}

let curlPresent: boolean | undefined;
/** Whether curl is on PATH (a fork and an exec per admin request, instead of a Node.js start). */
export function hasCurl(): boolean {
  curlPresent ??= spawnSync('sh', ['-c', 'command -v curl'], { stdio: 'ignore' }).status === 0;
  return curlPresent;
}

/** The compiled CLI. */
export function cliPath(): string {
  return join(packageRoot(), 'dist', 'src', 'cli.js');
}

/** Writes the config and starts `ballast run` in `node`; resolves once its admin endpoint answers. */
export async function startAgent(lab: Lab, node: LabNode, s: AgentSettings): Promise<LabAgent> {
  const configPath = join(lab.dir, `${node.name}-ballast${s.adminPort === undefined ? '' : `-${s.adminPort}`}.yaml`);
  writeFileSync(configPath, agentConfig(lab, node, s));
  return runAgent(lab, node, configPath, {
    logFile: join(lab.dir, `${node.name}-ballast${s.adminPort === undefined ? '' : `-${s.adminPort}`}.log`),
    ...(s.adminPort === undefined ? {} : { adminPort: s.adminPort }),
    ...(s.env ? { env: s.env } : {}),
    ...(s.hostMounts ? { hostMounts: true } : {}),
    ...(s.nodeFlags ? { nodeFlags: s.nodeFlags } : {}),
  });
}

/** How {@link runAgent} starts `ballast run` (see AgentSettings for env and hostMounts). */
export interface RunAgentOptions {
  /** the agent's output is appended here (relative paths are under lab.dir) */
  logFile: string;
  /** the admin port the config's `admin.listen` names (default 9641) */
  adminPort?: number;
  env?: Record<string, string>;
  hostMounts?: boolean;
  /** options for node itself, before the script (AgentSettings.nodeFlags) */
  nodeFlags?: string[];
  /** how long the admin endpoint may take to answer, ms (default 10000) */
  timeoutMs?: number;
  /** resolves true once the agent answers (default: its /status answers, {@link LabAgent.anyStatus}) */
  answers?: (agent: LabAgent) => Promise<boolean>;
}

/**
 * Starts `ballast run --config configPath` in `node` with a config file the caller wrote;
 * resolves once its admin endpoint answers.
 * @throws Error when the agent exits during start or does not answer within `timeoutMs` (it is SIGKILLed then).
 */
export async function runAgent(lab: Lab, node: LabNode, configPath: string, o: RunAgentOptions): Promise<LabAgent> {
  const proc = lab.spawn(node.netns, [process.execPath, ...(o.nodeFlags ?? []), cliPath(), 'run', '--config', configPath], {
    logFile: o.logFile,
    ...(o.env ? { env: o.env } : {}),
    ...(o.hostMounts ? { hostMounts: true } : {}),
  });
  const agent = new LabAgent(lab, node, proc, configPath, o.adminPort);
  let exited: number | null | undefined;
  void proc.exited.then((c) => (exited = c));
  try {
    await waitFor(
      async () => {
        if (exited !== undefined) throw new Error(`agent on ${node.name} exited (${exited}) during start:\n${proc.output()}`);
        return o.answers
          ? o.answers(agent).catch(() => false)
          : agent.anyStatus().then(
              () => true,
              () => false,
            );
      },
      (ok) => ok,
      { timeoutMs: o.timeoutMs ?? 10_000, intervalMs: 100, what: `agent on ${node.name} to answer` },
    );
  } catch (err) {
    // a half-started agent would hold the instance lock and break whatever runs next
    await proc.stop('SIGKILL', 1000).catch(() => undefined);
    throw err;
  }
  return agent;
}

/** Waits until exactly one node holds `vip` and returns it. */
export async function waitForSingleHolder(lab: Lab, vip: string, timeoutMs = 10_000): Promise<LabNode> {
  const h = await waitFor(
    () => lab.holders(vip),
    (hs) => hs.length === 1,
    { timeoutMs, what: `exactly one holder of ${vip}` },
  );
  return h[0]!;
}

/**
 * Partitions the lab for VRRP only: a bridge-family nftables table in the LAN namespace drops
 * IP protocol 112 between the nodes (everything else still flows), or removes that table.
 */
export async function blockVrrp(lab: Lab, block: boolean): Promise<void> {
  const lan = lab.lan;
  await lab.exec(lan, ['nft', 'delete', 'table', 'bridge', 'ballast_lab'], { allowFail: true });
  if (!block) return;
  const rules = [
    'add table bridge ballast_lab',
    'add chain bridge ballast_lab forward { type filter hook forward priority 0; policy accept; }',
    'add rule bridge ballast_lab forward ether type ip ip protocol 112 drop',
    'add rule bridge ballast_lab forward ether type ip6 meta l4proto 112 drop',
  ];
  await lab.exec(lan, ['sh', '-c', `printf '%s\\n' ${rules.map((r) => `'${r}'`).join(' ')} | nft -f -`]);
}

/** Waits until `name` is the one and only holder of `vip`. @throws after `timeoutMs` (ms). */
export async function waitForHolder(lab: Lab, vip: string, name: string, timeoutMs = 10_000): Promise<void> {
  await waitFor(
    () => lab.holders(vip),
    (hs) => hs.length === 1 && hs[0]!.name === name,
    { timeoutMs, what: `${name} to be the only holder of ${vip}` },
  );
}

/**
 * Waits until no agent holds its preemption for the replicated connections any more
 * (`/status connectionSync.preemptHold` false, or no connection sync): until then a started
 * agent takes a lower priority's adverts as its master's (docs/connection-sync.md), so a test
 * that needs the priorities to decide must wait for this after starting its agents.
 * @throws after `timeoutMs` (ms; default 10 s).
 */
export async function waitForSettled(agents: readonly LabAgent[], timeoutMs = 10_000): Promise<void> {
  for (const a of agents)
    await waitFor(
      () => a.status(),
      (s) => s.connectionSync?.preemptHold !== true,
      { timeoutMs, what: `${a.node.name} to hold no preemption for the replicated state` },
    );
}

/**
 * Undoes what a test did to the lab's nodes: every link up, every stand-in apiserver running
 * and ready. (Agents, VIPs and nftables tables are the test's own to clean.)
 */
export async function restoreNodes(lab: Lab): Promise<void> {
  for (const n of lab.nodes) {
    await lab.linkUp(n);
    if (!lab.apiserver(n)) await lab.startApiserver(n);
    await lab.setReady(n, true);
  }
}

/** What `ebpf-endpoint.js connect` reports after its connections. */
export interface ConnectSummary {
  summary: true;
  count: number;
  ok: number;
  /** served connections by node name (TLS: from /version; "self": a listener of the caller's own) */
  nodes: Record<string, number>;
  /** getpeername() of each connection, host:port */
  peers: Record<string, number>;
  /** failures by error code (ECONNREFUSED, …) */
  errors: Record<string, number>;
}

/**
 * Opens `count` connections (one after another) from `node`'s namespace, inside `cgroup` when
 * given, with lab/ebpf-endpoint.ts `connect`: TLS with the lab CA when `tls`, else a plain
 * TCP connect; `listen` first listens on the address itself (a connection that is not rewritten
 * lands there, as node "self").
 */
export async function connectFrom(
  lab: Lab,
  node: LabNode,
  o: { address: string; port: number; tls?: boolean; count?: number; listen?: boolean; cgroup?: string },
): Promise<ConnectSummary> {
  const argv = [
    process.execPath,
    compiledScript('ebpf-endpoint'),
    'connect',
    '--address',
    o.address,
    '--port',
    String(o.port),
    '--count',
    String(o.count ?? 1),
    '--timeout',
    '2000',
    ...(o.tls ? ['--ca', lab.ca.certFile] : []),
    ...(o.listen ? ['--listen'] : []),
  ];
  const r = await lab.exec(node.netns, argv, { timeoutMs: 60_000, ...(o.cgroup === undefined ? {} : { cgroup: o.cgroup }) });
  return JSON.parse(r.stdout.trim().split('\n').pop() ?? '') as ConnectSummary;
}

/** A running lab/clients/longconn.ts and what it reported so far. */
export interface Longconn {
  proc: LabProcess;
  events: LongconnEvent[];
  results: LongconnResult[];
  summary(): LongconnSummary | undefined;
}

/**
 * Starts lab/clients/longconn.ts against `url` from `node`'s namespace (inside `cgroup` when given)
 * and resolves once its output matches `until` (default: its first answered request).
 */
export async function startLongconn(lab: Lab, node: LabNode, url: string, args: string[], o: { cgroup?: string; until?: RegExp } = {}): Promise<Longconn> {
  const proc = lab.spawn(
    node.netns,
    [process.execPath, compiledScript('longconn'), '--url', url, '--ca', lab.ca.certFile, ...args],
    o.cgroup === undefined ? {} : { cgroup: o.cgroup },
  );
  const events: LongconnEvent[] = [];
  const results: LongconnResult[] = [];
  let summary: LongconnSummary | undefined;
  onJsonLines<LongconnEvent | LongconnResult | LongconnSummary>(proc, (x) => {
    if ('summary' in x) summary = x;
    else if ('event' in x) events.push(x);
    else results.push(x);
  });
  await proc.waitForOutput(o.until ?? /"ok":true/, { timeoutMs: 10_000, includeExisting: true });
  return { proc, events, results, summary: () => summary };
}

/**
 * What an election test undoes after each case: SIGKILLs `agents`, lifts a VRRP partition, brings
 * every link up and removes both VIPs from every node (a killed agent leaves them behind).
 */
export async function resetElectionLab(lab: Lab, agents: readonly LabAgent[]): Promise<void> {
  await Promise.all(agents.map((a) => a.stop('SIGKILL').catch(() => undefined)));
  await blockVrrp(lab, false);
  for (const n of lab.nodes) {
    await lab.linkUp(n);
    await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip4}/32`, 'dev', 'eth0'], { allowFail: true });
    await lab.exec(n.netns, ['ip', 'addr', 'del', `${lab.vip6}/128`, 'dev', 'eth0'], { allowFail: true });
  }
}

/** Starts one agent per entry of `settings` on lab.nodes[0], [1], … at once; adds each to `into` once it runs. @throws the first start failure. */
export async function startAgents(lab: Lab, settings: readonly AgentSettings[], into: LabAgent[]): Promise<LabAgent[]> {
  const settled = await Promise.allSettled(settings.map((s, i) => startAgent(lab, lab.nodes[i]!, s)));
  const started = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  // the ones that run join `into` (in settings order) even when another failed to start: the
  // test's after-each stops them (else they hold the instance lock for the next test)
  into.push(...started);
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  return started;
}

/** Clients through a URL of the lab: watch-like connections and a prober on new connections (see {@link startClients}). */
export interface LabClients {
  watchers: LabProcess;
  prober: ProberRun;
  /** The watchers' latest report. */
  report(): WatchersReport;
  /** Stops both (bounded by their own durations); never rejects. */
  stop(): Promise<void>;
}

/**
 * Starts, in the lab's client namespace, `watches` watch-like TLS connections to `url` (a request
 * on each every ~200 ms, no reconnect attempt after a loss: lab/clients/watchers.ts) and a prober
 * making a new TLS request every `probeEveryMs` (lab/clients/prober.ts), both for at most
 * `durationMs`; resolves once every watch is open and the prober has 20 results.
 * @throws Error when they are not running within 10 s.
 */
export async function startClients(lab: Lab, o: { url: string; watches: number; probeEveryMs: number; durationMs: number }): Promise<LabClients> {
  let last: WatchersReport | undefined;
  const watchers = lab.spawn(
    lab.client.netns,
    [
      process.execPath,
      compiledScript('watchers'),
      '--url',
      o.url,
      '--ca',
      lab.ca.certFile,
      '--count',
      String(o.watches),
      '--interval',
      '200',
      '--duration',
      String(o.durationMs),
      '--report',
      '100',
      '--attempts',
      '1',
    ],
    { logFile: 'watchers.log' },
  );
  onJsonLines<WatchersReport>(watchers, (r) => void (last = r));
  const prober = runProber(lab, { url: o.url, intervalMs: o.probeEveryMs, durationMs: o.durationMs, timeoutMs: 1000, logFile: 'prober.log' });
  const stop = async (): Promise<void> => {
    await prober.stop().catch(() => undefined);
    await watchers.stop('SIGTERM').catch(() => undefined);
  };
  try {
    await waitFor(
      async () => last,
      (r) => r !== undefined && r.open === o.watches,
      { timeoutMs: 10_000, intervalMs: 100, what: `${o.watches} watchers connected` },
    );
    await waitFor(
      async () => prober.results().length,
      (n) => n > 20,
      { timeoutMs: 10_000, what: 'the prober running' },
    );
  } catch (err) {
    await stop();
    throw err;
  }
  return { watchers, prober, report: () => last!, stop };
}
