/**
 * The test lab: control-plane "nodes" as network namespaces on one machine.
 *
 *   ${prefix}-lan                       ${prefix}-n1 … ${prefix}-nN        ${prefix}-c
 *   ┌──────────────────────────────┐    ┌───────────────────────────┐      ┌──────────────────┐
 *   │ br0 (mcast_snooping 0, STP   │    │ eth0 02:78:SS:00:00:11    │      │ eth0 …:00:00:50  │
 *   │      off, IPv6 off, no       │    │ 10.78.S.11/24             │      │ 10.78.S.50/24    │
 *   │      br_netfilter hooks)     │    │ fd78:S::11/64 (no DAD)    │      │ fd78:S::50/64    │
 *   │  ├─ ${prefix}n1 ◄──veth──────┼────┤                           │      │                  │
 *   │  ├─ ${prefix}nN ◄──veth──────┼────┤  (VIP 10.78.S.100 and     │      │  runs the prober │
 *   │  └─ ${prefix}c  ◄──veth──────┼────┼──  fd78:S::100 are added ─┼──────┤                  │
 *   └──────────────────────────────┘    │   by the agent under test)│      └──────────────────┘
 *                                       └───────────────────────────┘
 *
 * Rules the lab keeps (and why):
 * - every object it makes is named with the prefix and lives inside a lab namespace: the veth
 *   pairs are created in ${prefix}-lan with their peer born directly in the node namespace, so
 *   nothing ever appears in the machine's own namespace and deleting the lab's namespaces
 *   removes everything;
 * - exec/spawn only run inside the lab's own namespaces, so lab traffic stays there;
 * - teardown() is idempotent and also runs (synchronously) from process 'exit' and on
 *   SIGINT/SIGTERM; Lab.cleanupStale(prefix) removes what a run killed with SIGKILL left;
 * - processes are stopped by PID (each spawn is its own process group, killed as a group);
 *   before a namespace is deleted the processes still inside it (`ip netns pids`) are killed,
 *   because a namespace with a live process survives `ip netns del`, invisible but holding
 *   its addresses (a VIP) and its sockets.
 *
 * Cgroups (for the cgroup BPF programs, which attach to cgroups, not namespaces): each node can
 * get its own cgroup-v2 child `<cgroup2 root>/${prefix}-${node}` (Lab.cgroup, made on first
 * use); exec/spawn with `{ cgroup }` run the command inside it (and inside the node's
 * namespace). The wrapper joins the cgroup first, in the machine's mount namespace, and then
 * execs `ip netns exec`, because `ip netns exec` remounts /sys (the cgroup2 mount disappears
 * inside). Teardown kills what is left in those cgroups and removes them. The lab never hands
 * out, and exec/spawn refuse, any cgroup but its own children: nothing attaches to the root.
 *
 * Child processes run the compiled scripts under dist/lab (see compiledScript): `npm run build:ts` first.
 *
 * This file is the door: the Lab class and the prober helpers, re-exporting what callers use of
 * processes.ts (run, spawn, the compiled scripts), namespaces.ts (namespaces, cgroups, stale
 * leftovers, crash safety), pki.ts (the lab CA and serving certificates) and apiservers.ts (the
 * stand-in apiservers, which Lab's apiserver methods hand over to).
 */
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, existsSync, rmSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { waitFor } from './wait.js';
import type { SliceChange } from './endpointslice-store.js';
import type { ProbeResult, ReachResult, Summary } from './clients/prober.js';
import { LabApiservers, type StandinNode, type StartApiserversOptions } from './apiservers.js';
import {
  checkPrefix,
  cgroupRoot,
  cleanupStale,
  dirPrefix,
  hook,
  keep,
  killNetnsPidsSync,
  listNetns,
  live,
  removeCgroup,
  removeCgroupSync,
  removeNetns,
  unhook,
  type StaleReport,
} from './namespaces.js';
import { issueServerCert, makeCa, type IssueOptions } from './pki.js';
import { compiledScript, ip, LabProcessImpl, netnsArgv, run, type ExecResult, type LabProcess, type LabRunOptions } from './processes.js';

export type { Outage, ProbeResult, ReachResult, Summary } from './clients/prober.js';
export { kubeconfigYaml, type StartApiserversOptions } from './apiservers.js';
export type { StaleReport } from './namespaces.js';
export type { IssueOptions } from './pki.js';
export { compiledScript, packageRoot, type ExecResult, type LabProcess, type LabRunOptions, type LabScript } from './processes.js';

// ---------------------------------------------------------------------------------------------
// public shapes

/** Options of Lab.create. */
export interface LabOptions {
  /** 1..5 chars, [a-z][a-z0-9]*: names every lab object (interface names are ≤ 15 chars) */
  prefix: string;
  /** 1..250: IPv4 10.78.<subnet>.0/24, IPv6 fd78:<subnet>::/64 (decimal digits used as-is) */
  subnet: number;
  /** control-plane nodes, 1..30; default 3 */
  nodes?: number;
  /** give every eth0 an IPv6 address; default true (when false IPv6 is disabled in the lab) */
  ipv6?: boolean;
  /**
   * Tear the lab down synchronously on SIGINT / SIGTERM (default true). false: the caller handles
   * those signals and calls {@link Lab.teardown} itself (the soak heals its faults and writes its
   * report first); the lab is still torn down on process exit.
   */
  signals?: boolean;
}

/** One lab node (a network namespace with one interface, eth0, on the lab bridge). */
export interface LabNode {
  /** "n1", "n2", … */
  name: string;
  /** `${prefix}-n1` */
  netns: string;
  ifname: 'eth0';
  /** 10.78.S.11, .12, … */
  ipv4: string;
  /** fd78:S::11, … (assigned only when the lab has IPv6) */
  ipv6: string;
  /** 02:78:SS:00:00:11 (SS = subnet in hex) */
  mac: string;
  /** the fe80:: address of eth0 (rejects when the lab has no IPv6) */
  linkLocal(): Promise<string>;
}

/** An address on an interface, parsed from `ip -j addr`. */
export interface LabAddress {
  address: string;
  prefixLen: number;
  family: 'inet' | 'inet6';
  scope: string;
  secondary: boolean;
  tentative: boolean;
  dadfailed: boolean;
}

/** Options of runProber (times in ms). */
export interface RunProberOptions {
  /** e.g. `https://10.78.S.100:6443/version` (IPv6: `https://[fd78:S::100]:6443/version`) */
  url: string;
  /** default 10 ms */
  intervalMs?: number;
  /** default 10000 ms */
  durationMs?: number;
  /** per-request timeout, default 250 ms */
  timeoutMs?: number;
  /** also write the prober's output to this file (relative paths are under lab.dir) */
  logFile?: string;
  /** the prober stops scheduling once this file exists (prober `--until-file`) */
  untilFile?: string;
  /** run in this namespace (default: the client's), and in this lab cgroup (see Lab.cgroup) */
  netns?: string;
  cgroup?: string;
}

/** The prober's own summary line plus every per-request result (ordered by start time). */
export interface ProberReport extends Summary {
  results: ProbeResult[];
}

/** A prober running in the client namespace. */
export interface ProberRun {
  process: LabProcess;
  /** results received so far, in completion order */
  results(): ProbeResult[];
  /**
   * The prober's clock now (ms since its start): the start time `t` of its latest finished
   * request, 0 before the first one. A fault injected now happened after every request up to it.
   */
  now(): number;
  /** SIGTERM: stop scheduling, let requests in flight finish, resolve with the report */
  stop(): Promise<ProberReport>;
  /** resolves when the prober ends on its own bounds (or after stop()) */
  done: Promise<ProberReport>;
}

// ---------------------------------------------------------------------------------------------
// the lab

interface Endpoint {
  netns: string;
  ipv4: string;
  ipv6: string;
  mac: string;
  /** the veth end on the bridge, in the lan namespace */
  bridgePort: string;
  bridgeMac: string;
}

/** The lab: see the file comment for the topology and the rules it keeps. */
export class Lab {
  readonly prefix: string;
  readonly subnet: number;
  readonly ipv6: boolean;
  readonly nodes: LabNode[];
  readonly client: { netns: string; ipv4: string; ipv6: string; mac: string };
  /** `${prefix}-lan`: holds br0 */
  readonly lan: string;
  /** 10.78.S.100 */
  readonly vip4: string;
  /** fd78:S::100 */
  readonly vip6: string;
  /** temp dir for certs, configs and logs; removed on teardown unless BALLAST_LAB_KEEP=1 */
  readonly dir: string;
  /** the lab CA (EC P-256, valid 1 day); PEM files in `dir` */
  readonly ca: { certFile: string; keyFile: string };

  readonly #endpoints: Endpoint[];
  readonly #namespaces: string[];
  readonly #procs = new Set<LabProcessImpl>();
  /** The stand-in apiservers (apiservers.ts). */
  readonly #standins: LabApiservers;
  /** node name → cgroup dir, for the cgroups made so far */
  readonly #cgroups = new Map<string, string>();
  #down: Promise<void> | undefined;
  #gone = false;

  private constructor(opts: Required<Omit<LabOptions, 'signals'>>, dir: string) {
    const { prefix, subnet } = opts;
    this.prefix = prefix;
    this.subnet = subnet;
    this.ipv6 = opts.ipv6;
    this.dir = dir;
    this.lan = `${prefix}-lan`;
    this.vip4 = `10.78.${subnet}.100`;
    this.vip6 = `fd78:${subnet}::100`;
    this.ca = { certFile: join(dir, 'pki', 'ca.crt'), keyFile: join(dir, 'pki', 'ca.key') };
    const ss = subnet.toString(16).padStart(2, '0');
    const endpoint = (ns: string, host: number, port: string): Endpoint => ({
      netns: ns,
      ipv4: `10.78.${subnet}.${host}`,
      ipv6: `fd78:${subnet}::${host}`,
      // the decimal host number's digits double as the last MAC byte: …:11 for .11
      mac: `02:78:${ss}:00:00:${host}`,
      bridgePort: port,
      bridgeMac: `02:78:${ss}:01:00:${host}`,
    });
    this.#endpoints = [];
    this.nodes = [];
    for (let i = 1; i <= opts.nodes; i++) {
      const name = `n${i}`;
      const ep = endpoint(`${prefix}-${name}`, 10 + i, `${prefix}${name}`);
      this.#endpoints.push(ep);
      const ns = ep.netns;
      this.nodes.push({
        name,
        netns: ns,
        ifname: 'eth0',
        ipv4: ep.ipv4,
        ipv6: ep.ipv6,
        mac: ep.mac,
        linkLocal: async () => {
          const ll = (await this.#addressesIn(ns)).find((a) => a.family === 'inet6' && a.scope === 'link');
          if (!ll) throw new Error(`ballast lab: ${ns} eth0 has no link-local address${this.ipv6 ? '' : ' (the lab has no IPv6)'}`);
          return ll.address;
        },
      });
    }
    const c = endpoint(`${prefix}-c`, 50, `${prefix}c`);
    this.#endpoints.push(c);
    this.client = { netns: c.netns, ipv4: c.ipv4, ipv6: c.ipv6, mac: c.mac };
    this.#namespaces = [...this.#endpoints.map((e) => e.netns), this.lan];
    this.#standins = new LabApiservers({
      dir: this.dir,
      ca: this.ca,
      ipv6: this.ipv6,
      vip4: this.vip4,
      vip6: this.vip6,
      nodes: this.nodes,
      checkNode: (node) => void this.#endpointOf(node),
      spawn: (netns, argv, opts) => this.#spawn(netns, argv, opts),
      serverCert: (node) => this.serverCert(node),
      probe: (url, timeoutMs) => probeOnce(this, url, { timeoutMs }),
    });
  }

  /**
   * Builds a lab (needs root): removes leftovers of an earlier run with the same prefix
   * (Lab.cleanupStale), creates the namespaces, bridge and veths, addresses every eth0 and
   * waits until every link is up and every bridge port forwards. Makes the lab CA. On failure
   * it tears down what it built and rethrows.
   */
  static async create(opts: LabOptions): Promise<Lab> {
    checkPrefix(opts.prefix);
    if (!Number.isInteger(opts.subnet) || opts.subnet < 1 || opts.subnet > 250) {
      throw new TypeError(`subnet must be an integer 1..250, got ${opts.subnet}`);
    }
    const nodes = opts.nodes ?? 3;
    if (!Number.isInteger(nodes) || nodes < 1 || nodes > 30) throw new TypeError(`nodes must be an integer 1..30, got ${nodes}`);
    if (process.getuid?.() !== 0) throw new Error('ballast lab: needs root (network namespaces, veth, bridge)');
    for (const lab of live.keys()) {
      if (lab.prefix === opts.prefix) throw new Error(`ballast lab: prefix ${opts.prefix} is in use by a live lab in this process`);
    }
    await Lab.cleanupStale(opts.prefix);
    const dir = await mkdtemp(join(tmpdir(), dirPrefix(opts.prefix)));
    const lab = new Lab({ prefix: opts.prefix, subnet: opts.subnet, nodes, ipv6: opts.ipv6 ?? true }, dir);
    live.set(lab, { teardownSync: () => lab.#teardownSync(), signals: opts.signals ?? true });
    hook();
    try {
      await lab.#build();
      await makeCa(lab.dir, lab.ca, `ballast lab CA ${lab.prefix}`);
    } catch (e) {
      await lab.teardown().catch(() => undefined);
      throw e;
    }
    return lab;
  }

  async #build(): Promise<void> {
    const sysctl = (ns: string, ...kv: string[]): Promise<ExecResult> =>
      // -e: the bridge-nf keys exist only while br_netfilter is loaded
      run('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-e', '-w', ...kv]);
    for (const ns of this.#namespaces) await ip(['netns', 'add', ns]);
    for (const ns of this.#namespaces) await ip(['-n', ns, 'link', 'set', 'lo', 'up']);

    // the switch: no IPv6 of its own (no RS/MLD chatter from the bridge), and when
    // br_netfilter is loaded on the machine, bridged frames must not go through
    // iptables/conntrack of this namespace: the bridge is a plain L2 switch
    await sysctl(
      this.lan,
      'net.ipv6.conf.all.disable_ipv6=1',
      'net.ipv6.conf.default.disable_ipv6=1',
      'net.bridge.bridge-nf-call-iptables=0',
      'net.bridge.bridge-nf-call-ip6tables=0',
      'net.bridge.bridge-nf-call-arptables=0',
    );
    const ss = this.subnet.toString(16).padStart(2, '0');
    // multicast snooping off: VRRP adverts (224.0.0.18, ff02::12) must flood to every port
    // whether or not anyone sent an IGMP/MLD report; STP off: ports forward at once
    await ip(['-n', this.lan, 'link', 'add', 'br0', 'address', `02:78:${ss}:01:00:01`, 'type', 'bridge', 'mcast_snooping', '0', 'stp_state', '0']);
    await ip(['-n', this.lan, 'link', 'set', 'br0', 'up']);

    for (const ep of this.#endpoints) {
      // DAD off before eth0 exists: a device registered in a namespace takes its IPv6 settings
      // from that namespace's `default`, so the link-local and global addresses are usable at
      // once (no "tentative" window in which bind() fails and adverts go unsent)
      await sysctl(
        ep.netns,
        ...(this.ipv6
          ? ['net.ipv6.conf.default.accept_dad=0', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_ra=0']
          : ['net.ipv6.conf.all.disable_ipv6=1', 'net.ipv6.conf.default.disable_ipv6=1']),
      );
      // the peer is born inside the node namespace as eth0: nothing touches the root namespace
      await ip([
        '-n',
        this.lan,
        'link',
        'add',
        ep.bridgePort,
        'address',
        ep.bridgeMac,
        'type',
        'veth',
        'peer',
        'name',
        'eth0',
        'address',
        ep.mac,
        'netns',
        ep.netns,
      ]);
      await ip(['-n', this.lan, 'link', 'set', ep.bridgePort, 'master', 'br0']);
      await ip(['-n', this.lan, 'link', 'set', ep.bridgePort, 'up']);
      if (this.ipv6) await sysctl(ep.netns, 'net.ipv6.conf.eth0.accept_dad=0');
      await ip(['-n', ep.netns, 'link', 'set', 'eth0', 'up']);
      await ip(['-n', ep.netns, 'addr', 'add', `${ep.ipv4}/24`, 'dev', 'eth0']);
      if (this.ipv6) await ip(['-n', ep.netns, 'addr', 'add', `${ep.ipv6}/64`, 'dev', 'eth0', 'nodad']);
      // control-plane nodes forward, as kubeadm's preflight requires: a VIP DNATed to another
      // node's apiserver is forwarded traffic
      if (ep.netns !== this.client.netns) {
        await sysctl(ep.netns, 'net.ipv4.ip_forward=1', ...(this.ipv6 ? ['net.ipv6.conf.all.forwarding=1'] : []));
      }
    }

    for (const ep of this.#endpoints) await this.#waitCarrier(ep, true);
    await waitFor(
      async () => {
        const ports = JSON.parse((await run('bridge', ['-n', this.lan, '-j', 'link'])).stdout) as { ifname?: string; state?: string }[];
        const fwd = new Set(ports.filter((p) => p.state === 'forwarding').map((p) => p.ifname));
        return this.#endpoints.every((e) => fwd.has(e.bridgePort));
      },
      { timeoutMs: 5000, intervalMs: 25, what: 'bridge ports forwarding' },
    );
    if (this.ipv6) {
      await waitFor(
        async () => {
          for (const ep of this.#endpoints) {
            const a = await this.#addressesIn(ep.netns);
            if (!a.some((x) => x.family === 'inet6' && x.scope === 'link') || a.some((x) => x.tentative)) return false;
          }
          return true;
        },
        { timeoutMs: 5000, intervalMs: 25, what: 'IPv6 addresses usable (not tentative)' },
      );
    }
  }

  /**
   * The serving certificate of `node` (made on first use, signed by the lab CA): SANs are the
   * node's IPv4 and IPv6, both VIPs, 127.0.0.1, ::1, kubernetes, kubernetes.default.svc and
   * localhost. PEM file paths in `dir`.
   */
  async serverCert(node: StandinNode): Promise<{ certFile: string; keyFile: string }> {
    const certFile = join(this.dir, 'pki', `${node.name}.crt`);
    if (existsSync(certFile)) return { certFile, keyFile: join(this.dir, 'pki', `${node.name}.key`) };
    return this.issueServerCert(node);
  }

  /**
   * The SANs {@link serverCert} gives `node`: `DNS:name` and `IP:address` entries.
   */
  defaultSans(node: StandinNode): string[] {
    return [
      'DNS:kubernetes',
      'DNS:kubernetes.default.svc',
      'DNS:localhost',
      `IP:${node.ipv4}`,
      `IP:${node.ipv6}`,
      `IP:${this.vip4}`,
      `IP:${this.vip6}`,
      'IP:127.0.0.1',
      'IP:::1',
    ];
  }

  /**
   * (Re)issues `node`'s serving certificate and key (new key, new serial) where
   * {@link serverCert} keeps them, replacing what is there: a running stand-in serves it after
   * {@link reloadApiserverCert}, a started one at once.
   * @param opts.sans the SubjectAltNames (`DNS:x`, `IP:a`; default {@link defaultSans}); `[]` = none (a CN-only certificate)
   * @param opts.omit entries of the default SANs to leave out (e.g. `IP:${lab.vip4}`)
   * @param opts.days validity from now in days (default 1)
   * @param opts.otherCa sign with a second CA (made on first use) that nothing trusts
   */
  async issueServerCert(node: StandinNode, opts: IssueOptions = {}): Promise<{ certFile: string; keyFile: string }> {
    this.#endpointOf(node);
    return issueServerCert(this, node, this.defaultSans(node), opts);
  }

  /** See {@link LabApiservers.reloadApiserverCert}. */
  reloadApiserverCert(node: LabNode): Promise<void> {
    return this.#standins.reloadApiserverCert(node);
  }

  #checkNetns(netns: string): void {
    if (this.#gone || this.#down) throw new Error('ballast lab: the lab was torn down');
    if (!this.#namespaces.includes(netns)) {
      throw new Error(`ballast lab: ${netns} is not one of this lab's namespaces (${this.#namespaces.join(', ')})`);
    }
  }

  /**
   * Runs `argv` inside a lab namespace (`ip netns exec`) and resolves with its output.
   * Rejects on a non-zero exit or after `timeoutMs` (default 10000 ms; the command is
   * SIGKILLed) unless `allowFail`, which resolves with the code instead (124: timed out).
   */
  exec(netns: string, argv: string[], opts: { timeoutMs?: number; allowFail?: boolean } & LabRunOptions = {}): Promise<ExecResult> {
    this.#checkNetns(netns);
    this.#checkCgroup(opts.cgroup);
    const [file, args] = netnsArgv(netns, argv, opts);
    return run(file, args, opts);
  }

  /**
   * Starts `argv` inside a lab namespace in its own process group, tracked for teardown.
   * stdout+stderr are captured (see LabProcess.output) and, with `logFile`, appended to that
   * file (relative paths are under `dir`). `env` is merged over this process's environment.
   */
  spawn(netns: string, argv: string[], opts: { logFile?: string; env?: Record<string, string> } & LabRunOptions = {}): LabProcess {
    return this.#spawn(netns, argv, opts);
  }

  #spawn(netns: string, argv: string[], opts: { logFile?: string; env?: Record<string, string> } & LabRunOptions = {}): LabProcessImpl {
    this.#checkNetns(netns);
    this.#checkCgroup(opts.cgroup);
    // `ip netns exec` (and nsenter, and the cgroup wrapper) exec the command in place, so the
    // PID we get is the command's own
    const [file, args] = netnsArgv(netns, argv, opts);
    const child = spawn(file, args, {
      detached: true,
      stdio: [opts.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...opts.env },
    });
    const log =
      opts.logFile === undefined ? undefined : createWriteStream(isAbsolute(opts.logFile) ? opts.logFile : join(this.dir, opts.logFile), { flags: 'a' });
    const p = new LabProcessImpl(child, log);
    this.#procs.add(p);
    void p.exited.then(() => this.#procs.delete(p));
    return p;
  }

  /**
   * The cgroup-v2 child of `node`: `<cgroup2 root>/${prefix}-${node.name}` (e.g.
   * /sys/fs/cgroup/unified/bebp-n1 on a hybrid host), created on first use and removed by
   * teardown (its processes are killed first). Pass it as `{ cgroup }` to exec / spawn.
   */
  async cgroup(node: LabNode): Promise<string> {
    this.#endpointOf(node);
    if (this.#gone || this.#down) throw new Error('ballast lab: the lab was torn down');
    const known = this.#cgroups.get(node.name);
    if (known !== undefined) return known;
    const dir = join(cgroupRoot(), `${this.prefix}-${node.name}`);
    await mkdir(dir, { recursive: true });
    this.#cgroups.set(node.name, dir);
    return dir;
  }

  /** The PIDs in `node`'s cgroup now (empty when it was never made). */
  async cgroupPids(node: LabNode): Promise<number[]> {
    this.#endpointOf(node);
    const dir = this.#cgroups.get(node.name);
    if (dir === undefined) return [];
    return (await readFile(join(dir, 'cgroup.procs'), 'utf8')).split('\n').filter(Boolean).map(Number);
  }

  #checkCgroup(cgroup: string | undefined): void {
    if (cgroup === undefined) return;
    if (![...this.#cgroups.values()].includes(cgroup)) {
      throw new Error(`ballast lab: ${cgroup} is not a cgroup of this lab (make one with lab.cgroup(node))`);
    }
  }

  async #waitCarrier(ep: Endpoint, up: boolean): Promise<void> {
    await waitFor(
      async () => {
        const [l] = JSON.parse((await ip(['-n', ep.netns, '-j', 'link', 'show', 'dev', 'eth0'])).stdout) as { flags?: string[] }[];
        const hasCarrier = l?.flags?.includes('LOWER_UP') ?? false;
        return hasCarrier === up;
      },
      { timeoutMs: 5000, intervalMs: 25, what: `${ep.netns} eth0 carrier ${up ? 'up' : 'down'}` },
    );
  }

  #endpointOf(node: Pick<LabNode, 'name' | 'netns'>): Endpoint {
    const ep = this.#endpoints.find((e) => e.netns === node.netns);
    if (!ep || !this.nodes.some((n) => n.netns === node.netns)) throw new Error(`ballast lab: ${node.name} is not a node of this lab`);
    return ep;
  }

  /**
   * Unplugs `node`: the veth end on the bridge side goes down. To the other nodes and the
   * client the node falls silent at once (no frame in or out), which is what a dead node looks
   * like to them. The node itself sees its eth0 lose carrier (LOWER_UP cleared, addresses
   * kept), like a pulled cable. Resolves once eth0 reports no carrier.
   */
  async linkDown(node: LabNode): Promise<void> {
    const ep = this.#endpointOf(node);
    await ip(['-n', this.lan, 'link', 'set', ep.bridgePort, 'down']);
    await this.#waitCarrier(ep, false);
  }

  /** Plugs `node` back in; resolves once its eth0 has carrier and its bridge port forwards. */
  async linkUp(node: LabNode): Promise<void> {
    const ep = this.#endpointOf(node);
    await ip(['-n', this.lan, 'link', 'set', ep.bridgePort, 'up']);
    await this.#waitCarrier(ep, true);
    await waitFor(
      async () => {
        const [p] = JSON.parse((await run('bridge', ['-n', this.lan, '-j', 'link', 'show', 'dev', ep.bridgePort])).stdout) as { state?: string }[];
        return p?.state === 'forwarding';
      },
      { timeoutMs: 5000, intervalMs: 25, what: `${ep.bridgePort} forwarding` },
    );
  }

  async #addressesIn(netns: string): Promise<LabAddress[]> {
    const [link] = JSON.parse((await ip(['-n', netns, '-j', 'addr', 'show', 'dev', 'eth0'])).stdout) as {
      addr_info?: { family?: string; local?: string; prefixlen?: number; scope?: string; secondary?: boolean; tentative?: boolean; dadfailed?: boolean }[];
    }[];
    return (link?.addr_info ?? [])
      .filter((a) => (a.family === 'inet' || a.family === 'inet6') && typeof a.local === 'string')
      .map((a) => ({
        address: a.local as string,
        prefixLen: a.prefixlen ?? 0,
        family: a.family as 'inet' | 'inet6',
        scope: a.scope ?? 'global',
        secondary: a.secondary === true,
        tentative: a.tentative === true,
        dadfailed: a.dadfailed === true,
      }));
  }

  /** The addresses on `node`'s eth0 (`ip -j addr show dev eth0`), IPv4 and IPv6. */
  addresses(node: LabNode): Promise<LabAddress[]> {
    this.#endpointOf(node);
    return this.#addressesIn(node.netns);
  }

  /** The nodes that have `vip` on eth0 right now (0, 1, or more during a split brain). */
  async holders(vip: string): Promise<LabNode[]> {
    const want = vip.toLowerCase();
    const has = await Promise.all(this.nodes.map(async (n) => (await this.#addressesIn(n.netns)).some((a) => a.address.toLowerCase() === want)));
    return this.nodes.filter((_, i) => has[i]);
  }

  /**
   * The MAC that `netns`'s neighbour table holds for `address` on eth0 (lowercase), or null
   * when there is no entry or it is unresolved (INCOMPLETE / FAILED).
   */
  async neighbor(netns: string, address: string): Promise<string | null> {
    this.#checkNetns(netns);
    const entries = JSON.parse((await ip(['-n', netns, '-j', 'neigh', 'show', 'to', address, 'dev', 'eth0'])).stdout) as {
      lladdr?: string;
      state?: string[];
    }[];
    const e = entries.find((x) => typeof x.lladdr === 'string' && !(x.state ?? []).some((s) => s === 'FAILED' || s === 'INCOMPLETE'));
    return e?.lladdr?.toLowerCase() ?? null;
  }

  /**
   * One bounded reachability check from `netns` to `address` (timeoutMs default 1000 ms).
   * Uses `ping -c 1 -W 1` when iputils ping is installed; otherwise a TCP SYN to port 9 whose
   * RST proves the round trip (see prober.ts `--reach`). Never rejects for unreachable.
   */
  async ping(netns: string, address: string, opts: { timeoutMs?: number } = {}): Promise<{ ok: boolean; via: 'icmp' | 'tcp'; detail: string }> {
    const timeoutMs = opts.timeoutMs ?? 1000;
    if (hasPing()) {
      const r = await this.exec(netns, ['ping', '-n', '-c', '1', '-W', String(Math.max(1, Math.ceil(timeoutMs / 1000))), address], {
        allowFail: true,
        timeoutMs: timeoutMs + 3000,
      });
      return { ok: r.code === 0, via: 'icmp', detail: (r.stdout + r.stderr).trim().split('\n').slice(-2).join(' ') };
    }
    const r = await this.exec(netns, [process.execPath, compiledScript('prober'), '--reach', address, '--timeout', String(timeoutMs)], {
      allowFail: true,
      timeoutMs: timeoutMs + 5000,
    });
    const line = r.stdout.trim().split('\n').pop() ?? '';
    try {
      const rr = JSON.parse(line) as ReachResult;
      return { ok: rr.ok, via: 'tcp', detail: `${rr.how} in ${rr.ms} ms` };
    } catch {
      return { ok: false, via: 'tcp', detail: `prober failed (${r.code}): ${r.stderr.trim()}` };
    }
  }

  /**
   * Gives the client namespace's eth0 `count` (1..100) more addresses, for a client that spreads
   * its connections over source addresses (each connection binds one): 10.78.S.150, .151, …
   * /24 and, in an IPv6 lab, fd78:S::150, … /64 (nodad: usable at once). Idempotent (`ip addr
   * replace`); they go with the namespace at teardown.
   * @returns the addresses, in order.
   */
  async addClientSources(count: number): Promise<{ ipv4: string[]; ipv6: string[] }> {
    if (!Number.isInteger(count) || count < 1 || count > 100) throw new RangeError(`count must be an integer 1..100, got ${count}`);
    const hosts = Array.from({ length: count }, (_, i) => 150 + i);
    const ipv4 = hosts.map((h) => `10.78.${this.subnet}.${h}`);
    const ipv6 = this.ipv6 ? hosts.map((h) => `fd78:${this.subnet}::${h}`) : [];
    const batch = join(this.dir, 'client-sources.batch');
    await writeFile(batch, [...ipv4.map((a) => `addr replace ${a}/24 dev eth0`), ...ipv6.map((a) => `addr replace ${a}/64 dev eth0 nodad`), ''].join('\n'));
    await ip(['-n', this.client.netns, '-batch', batch]);
    return { ipv4, ipv6 };
  }

  // -------------------------------------------------------------------------------------------
  // stand-in apiservers
  // (apiservers.ts holds them and documents each method)

  /** See {@link LabApiservers.startApiservers}. */
  startApiservers(opts: StartApiserversOptions = {}): Promise<void> {
    return this.#standins.startApiservers(opts);
  }

  /** See {@link LabApiservers.sliceStore}. */
  sliceStore(): string {
    return this.#standins.sliceStore();
  }

  /** See {@link LabApiservers.sliceChange}. */
  sliceChange(change: SliceChange): void {
    this.#standins.sliceChange(change);
  }

  /** See {@link LabApiservers.compactSlices}. */
  compactSlices(): number {
    return this.#standins.compactSlices();
  }

  /** See {@link LabApiservers.writeKubeconfig}. */
  writeKubeconfig(node: LabNode, opts: { token: string; family?: 4 | 6; port?: number; path?: string }): Promise<string> {
    return this.#standins.writeKubeconfig(node, opts);
  }

  /** See {@link LabApiservers.startApiserver}. */
  startApiserver(node: LabNode): Promise<void> {
    return this.#standins.startApiserver(node);
  }

  /** See {@link LabApiservers.stopApiserver}. */
  stopApiserver(node: LabNode): Promise<void> {
    return this.#standins.stopApiserver(node);
  }

  /** See {@link LabApiservers.setReady}. */
  setReady(node: LabNode, ready: boolean): Promise<void> {
    return this.#standins.setReady(node, ready);
  }

  /** See {@link LabApiservers.setReadyzDelay}. */
  setReadyzDelay(node: LabNode, ms: number): Promise<void> {
    return this.#standins.setReadyzDelay(node, ms);
  }

  /** See {@link LabApiservers.apiserver}. */
  apiserver(node: LabNode): LabProcess | undefined {
    return this.#standins.apiserver(node);
  }

  // -------------------------------------------------------------------------------------------
  // teardown

  /**
   * Stops every process the lab started (SIGTERM, SIGKILL after 2000 ms), kills whatever else
   * still runs inside the lab's namespaces, deletes the namespaces (which removes the veths and
   * the bridge with them) and the temp dir (kept with BALLAST_LAB_KEEP=1). Idempotent: later
   * calls return the first call's promise (a failed teardown may be retried).
   */
  teardown(): Promise<void> {
    if (!this.#down) {
      this.#down = this.#teardown().catch((e: unknown) => {
        this.#down = undefined;
        throw e;
      });
    }
    return this.#down;
  }

  async #teardown(): Promise<void> {
    if (!this.#gone) {
      await Promise.all([...this.#procs].map((p) => p.stop('SIGTERM', 2000)));
      this.#standins.clear();
      for (const dir of this.#cgroups.values()) await removeCgroup(dir);
      this.#cgroups.clear();
      for (const ns of this.#namespaces) await removeNetns(ns);
      const left = (await listNetns()).filter((n) => this.#namespaces.includes(n));
      if (left.length > 0) throw new Error(`ballast lab: namespaces left after teardown: ${left.join(', ')}`);
      if (!keep()) await rm(this.dir, { recursive: true, force: true });
      this.#gone = true;
    }
    live.delete(this);
    unhook();
  }

  /** Synchronous teardown for process 'exit' and signals: SIGKILL, delete, remove. */
  #teardownSync(): void {
    if (this.#gone) return;
    for (const p of this.#procs) p.killSync();
    for (const dir of this.#cgroups.values()) removeCgroupSync(dir);
    for (const ns of this.#namespaces) {
      killNetnsPidsSync(ns);
      spawnSync('ip', ['netns', 'del', ns], { timeout: 5000, stdio: 'ignore' });
    }
    if (!keep()) rmSync(this.dir, { recursive: true, force: true });
    this.#gone = true;
    live.delete(this);
  }

  /**
   * Removes what a crashed earlier run with `prefix` left behind: kills the processes inside
   * its namespaces and deletes them (`${prefix}-lan`, `${prefix}-c`, `${prefix}-n<k>`), deletes
   * links named `${prefix}c` / `${prefix}n<k>` in this namespace, and removes its temp dirs
   * (unless BALLAST_LAB_KEEP=1). Names of other prefixes never match. Refuses a prefix that a
   * live lab in this process uses. Resolves with what it removed.
   */
  static cleanupStale(prefix: string): Promise<StaleReport> {
    return cleanupStale(prefix);
  }
}

let pingPresent: boolean | undefined;
function hasPing(): boolean {
  pingPresent ??= spawnSync('sh', ['-c', 'command -v ping'], { stdio: 'ignore' }).status === 0;
  return pingPresent;
}

// ---------------------------------------------------------------------------------------------
// the prober, from the client namespace

/**
 * One HTTPS GET from the client namespace on a new connection, verified against the lab CA;
 * resolves with its ProbeResult (never rejects for an HTTP or network failure).
 * timeoutMs default 2000 ms.
 */
export async function probeOnce(lab: Lab, url: string, opts: { timeoutMs?: number } = {}): Promise<ProbeResult> {
  const timeoutMs = opts.timeoutMs ?? 2000;
  const r = await lab.exec(
    lab.client.netns,
    // duration 0 → exactly one request
    [
      process.execPath,
      compiledScript('prober'),
      '--url',
      url,
      '--ca',
      lab.ca.certFile,
      '--interval',
      '1000',
      '--duration',
      '0',
      '--timeout',
      String(timeoutMs),
    ],
    { timeoutMs: timeoutMs + 10_000 },
  );
  const first = r.stdout.split('\n').find((l) => l.startsWith('{') && !l.includes('"summary"'));
  if (first === undefined) throw new Error(`ballast lab: prober printed no result: ${r.stdout}${r.stderr}`);
  return JSON.parse(first) as ProbeResult;
}

/**
 * Calls `onObject` for every line of a lab process's stdout that is a JSON object (the
 * prober's and the test clients' protocol); other lines and unparsable ones are skipped.
 */
export function onJsonLines<T>(proc: LabProcess, onObject: (o: T) => void): void {
  let partial = '';
  proc.child.stdout?.on('data', (buf: Buffer) => {
    partial += buf.toString('utf8');
    const lines = partial.split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('{')) continue;
      let o: T;
      try {
        o = JSON.parse(line) as T;
      } catch {
        continue; // not ours
      }
      onObject(o);
    }
  });
}

/**
 * Starts the prober (lab/clients/prober.ts) in the client namespace against `opts.url` with the
 * lab CA. `done` resolves with the prober's summary plus every result when it ends on its own
 * bounds; `stop()` ends it early (SIGTERM) and resolves the same way. A prober that ends
 * without a summary rejects `done`. A watchdog SIGKILLs it 15 s past its duration.
 */
export function runProber(lab: Lab, opts: RunProberOptions): ProberRun {
  const intervalMs = opts.intervalMs ?? 10;
  const durationMs = opts.durationMs ?? 10_000;
  const timeoutMs = opts.timeoutMs ?? 250;
  const proc = lab.spawn(
    opts.netns ?? lab.client.netns,
    [
      process.execPath,
      compiledScript('prober'),
      '--url',
      opts.url,
      '--ca',
      lab.ca.certFile,
      '--interval',
      String(intervalMs),
      '--duration',
      String(durationMs),
      '--timeout',
      String(timeoutMs),
      ...(opts.untilFile === undefined ? [] : ['--until-file', opts.untilFile]),
    ],
    { ...(opts.logFile === undefined ? {} : { logFile: opts.logFile }), ...(opts.cgroup === undefined ? {} : { cgroup: opts.cgroup }) },
  );
  const results: ProbeResult[] = [];
  let summary: Summary | undefined;
  onJsonLines<ProbeResult | Summary>(proc, (o) => {
    if ('summary' in o) summary = o;
    else results.push(o);
  });
  const watchdog = setTimeout(() => proc.kill('SIGKILL'), durationMs + timeoutMs + 15_000);
  const done = proc.exited.then((code) => {
    clearTimeout(watchdog);
    if (!summary) throw new Error(`ballast lab: prober ended (code ${code}) without a summary; output:\n${proc.output().slice(-2000)}`);
    return { ...summary, results: [...results].sort((a, b) => a.t - b.t) };
  });
  // a caller that only uses stop() must not see an unhandled rejection
  done.catch(() => undefined);
  return {
    process: proc,
    results: () => [...results],
    now: () => results.reduce((t, r) => Math.max(t, r.t), 0),
    stop: () => {
      proc.kill('SIGTERM');
      return done;
    },
    done,
  };
}
