/**
 * The routed lab of BGP mode (docs/bgp.md): no shared L2 segment. lab.ts builds its usual
 * namespaces; this turns its switch namespace into a router and every node's link into a routed
 * subnet of its own:
 *
 *                        router (the lab's `lan` namespace, BIRD 2: BGP + BFD, ECMP into the kernel)
 *        10.78.S+1.1/24 ──┼── 10.78.S+2.1/24 ──┼── 10.78.S+3.1/24 ──┼── 10.78.S+4.1/24
 *                 │                    │                    │                    │
 *   n1 10.78.S+1.2/24           n2 10.78.S+2.2       n3 10.78.S+3.2          client 10.78.S+4.2
 *      10.78.S.11/32 (its          10.78.S.12/32        10.78.S.13/32           10.78.S.50/32
 *      routed node address)
 *
 * (IPv6 the same in fd78:S+k::/64, node addresses fd78:S::1k/128.) The router routes each node's
 * /32 to its link; the nodes and the client have a default route to it. Every node runs its own
 * BIRD (control socket and config in the lab directory) whose bird.conf includes the snippets
 * ballast writes (`ballast*.conf`: none yet is fine). The router peers with every node (AS 64500
 * ↔ 64512), BFD 100 ms × 3, `merge paths` so equal routes become one ECMP route, and L4 hashing
 * (fib_multipath_hash_policy=1: else every connection of one client takes the same path).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Lab, runProber, type LabNode, type LabProcess } from './lab.js';
import { waitFor } from './wait.js';

/** What {@link ecmpSpread} measured. */
export interface EcmpSpread {
  /** Connections counted: the first `connections` requests by start time. */
  connections: number;
  /** Of those, how many each node served (node name → count; a node that served none is absent). */
  nodes: Record<string, number>;
  /** Of those, how many failed. */
  failed: number;
}

/**
 * The lower bound every one of `k` equal ECMP paths must reach for `n` connections: n/k − 5σ,
 * σ = √(n · 1/k · (1 − 1/k)) (binomial; each connection's path is a fair k-sided draw of the
 * router's L4 hash). For n = 1000, k = 3: 333.3 − 5 × 14.9 = 258.8. A share below it is a
 * 1-in-3.5-million event for a fair hash.
 */
export function spreadBound(n: number, k: number): number {
  return n / k - 5 * Math.sqrt((n * (k - 1)) / (k * k));
}

/**
 * Opens `connections` new TLS connections (one request each, a new source port each) from the
 * client behind the router to https://VIP:6443/version and counts which node served each (with
 * `balance: local` a node serves its own apiserver, so the node is the ECMP path taken). The
 * prober schedules one every 4 ms and is stopped once `connections` have finished (at most 60 s:
 * the cap only costs time on a machine too loaded to finish, where the client managed from ~120
 * down to ~35 handshakes/s); the first `connections` by start time are counted.
 * @throws Error when fewer than `connections` requests were made within 60 s.
 */
export async function ecmpSpread(b: BgpLab, connections: number, logFile = 'prober-spread.log'): Promise<EcmpSpread> {
  const p = runProber(b.lab, { url: `https://${b.vip4}:6443/version`, intervalMs: 4, timeoutMs: 1000, durationMs: 60_000, logFile });
  let ended = false;
  void p.done.finally(() => (ended = true)).catch(() => undefined);
  while (!ended && p.results().length < connections) await new Promise((r) => setTimeout(r, 50));
  const rep = await p.stop();
  if (rep.results.length < connections) throw new Error(`ecmpSpread: only ${rep.results.length} of ${connections} requests were made`);
  const first = rep.results.slice(0, connections);
  const nodes: Record<string, number> = {};
  for (const r of first) if (r.ok) nodes[r.node ?? '?'] = (nodes[r.node ?? '?'] ?? 0) + 1;
  return { connections, nodes, failed: first.filter((r) => !r.ok).length };
}

/** The router's ASN and the nodes'. */
export const ROUTER_ASN = 64500;
export const NODE_ASN = 64512;

/** One node of the routed lab. */
export interface BgpLabNode {
  node: LabNode;
  /** The link subnet's third octet (S+k). */
  linkSubnet: number;
  /** The node's and the router's address on the link. */
  link4: { node: string; router: string };
  link6: { node: string; router: string };
  /** This node's BIRD: directory, control socket, bird.conf, and where ballast's snippets go. */
  birdDir: string;
  socket: string;
  snippet4: string;
  snippet6: string;
  bird: LabProcess | null;
}

/** The routed lab. */
export class BgpLab {
  readonly lab: Lab;
  readonly nodes: BgpLabNode[];
  /** The router's namespace (lab.lan). */
  readonly router: string;
  readonly client: { netns: string; ipv4: string; ipv6: string };
  readonly vip4: string;
  readonly vip6: string;
  routerBird: LabProcess | null = null;
  readonly #routerDir: string;

  private constructor(lab: Lab) {
    this.lab = lab;
    this.router = lab.lan;
    this.client = lab.client;
    this.vip4 = lab.vip4;
    this.vip6 = lab.vip6;
    this.#routerDir = join(lab.dir, 'router');
    this.nodes = lab.nodes.map((node, i) => {
      const s = lab.subnet + 1 + i;
      const birdDir = join(lab.dir, `bird-${node.name}`);
      return {
        node,
        linkSubnet: s,
        link4: { node: `10.78.${s}.2`, router: `10.78.${s}.1` },
        link6: { node: `fd78:${s}::2`, router: `fd78:${s}::1` },
        birdDir,
        socket: join(birdDir, 'bird.ctl'),
        snippet4: join(birdDir, 'ballast4.conf'),
        snippet6: join(birdDir, 'ballast6.conf'),
        bird: null,
      };
    });
  }

  /**
   * Builds the lab (lab.ts's, re-wired as above), starts the router's BIRD and every node's.
   * @param opts.prefix, opts.subnet as for Lab.create; subnet S uses S..S+4 (S+1..S+3 the nodes' links, S+4 the client's).
   */
  static async create(opts: { prefix: string; subnet: number; bfdIntervalMs?: number; bfdMultiplier?: number }): Promise<BgpLab> {
    const lab = await Lab.create({ prefix: opts.prefix, subnet: opts.subnet, nodes: 3, ipv6: true });
    const b = new BgpLab(lab);
    try {
      await b.#route();
      await b.#startRouterBird(opts.bfdIntervalMs ?? 100, opts.bfdMultiplier ?? 3);
      for (const n of b.nodes) await b.startNodeBird(n);
    } catch (err) {
      await lab.teardown().catch(() => undefined);
      throw err;
    }
    return b;
  }

  async #ip(netns: string, ...args: string[]): Promise<void> {
    await this.lab.exec(netns, ['ip', ...args]);
  }

  async #sysctl(netns: string, ...kv: string[]): Promise<void> {
    await this.lab.exec(netns, ['sysctl', '-q', '-w', ...kv]);
  }

  /** The switch becomes a router: ports off the bridge, a subnet per link, host routes to the node addresses. */
  async #route(): Promise<void> {
    const { lab } = this;
    const r = this.router;
    await this.#sysctl(
      r,
      'net.ipv6.conf.all.disable_ipv6=0',
      'net.ipv6.conf.default.disable_ipv6=0',
      'net.ipv4.ip_forward=1',
      'net.ipv6.conf.all.forwarding=1',
      'net.ipv4.fib_multipath_hash_policy=1',
      'net.ipv6.fib_multipath_hash_policy=1',
    );
    const ends = [
      ...this.nodes.map((n) => ({ netns: n.node.netns, port: `${lab.prefix}${n.node.name}`, s: n.linkSubnet, ipv4: n.node.ipv4, ipv6: n.node.ipv6 })),
      { netns: this.client.netns, port: `${lab.prefix}c`, s: lab.subnet + 4, ipv4: this.client.ipv4, ipv6: this.client.ipv6 },
    ];
    for (const e of ends) {
      await this.#ip(r, 'link', 'set', e.port, 'nomaster');
      await this.#sysctl(r, `net.ipv6.conf.${e.port}.disable_ipv6=0`, `net.ipv6.conf.${e.port}.accept_dad=0`);
      await this.#ip(r, 'addr', 'add', `10.78.${e.s}.1/24`, 'dev', e.port);
      await this.#ip(r, '-6', 'addr', 'add', `fd78:${e.s}::1/64`, 'dev', e.port, 'nodad');
      // the node's lab address becomes a routed /32 (/128): nothing is on-link but its own link
      await this.#ip(e.netns, 'addr', 'del', `${e.ipv4}/24`, 'dev', 'eth0');
      await this.#ip(e.netns, '-6', 'addr', 'del', `${e.ipv6}/64`, 'dev', 'eth0');
      await this.#ip(e.netns, 'addr', 'add', `${e.ipv4}/32`, 'dev', 'eth0');
      await this.#ip(e.netns, '-6', 'addr', 'add', `${e.ipv6}/128`, 'dev', 'eth0', 'nodad');
      await this.#ip(e.netns, 'addr', 'add', `10.78.${e.s}.2/24`, 'dev', 'eth0');
      await this.#ip(e.netns, '-6', 'addr', 'add', `fd78:${e.s}::2/64`, 'dev', 'eth0', 'nodad');
      // Linux's ARP defaults, whatever the host has: a new namespace copies the host's IPv4
      // conf/all (net.core.devconf_inherit_init_net 0), and BGP mode's agent raises these
      if (e.netns !== this.client.netns) await this.#sysctl(e.netns, 'net.ipv4.conf.all.arp_ignore=0', 'net.ipv4.conf.all.arp_announce=0');
      await this.#ip(e.netns, 'route', 'add', 'default', 'via', `10.78.${e.s}.1`);
      await this.#ip(e.netns, '-6', 'route', 'add', 'default', 'via', `fd78:${e.s}::1`);
      await this.#ip(r, 'route', 'add', `${e.ipv4}/32`, 'via', `10.78.${e.s}.2`);
      await this.#ip(r, '-6', 'route', 'add', `${e.ipv6}/128`, 'via', `fd78:${e.s}::2`);
    }
    // every node reaches every other node and the client through the router
    await waitFor(
      async () => {
        for (const n of this.nodes) {
          for (const a of [n.node.ipv4, n.node.ipv6]) if (!(await lab.ping(this.client.netns, a)).ok) return false;
        }
        return true;
      },
      { timeoutMs: 5000, intervalMs: 50, what: 'the client reaching every node through the router' },
    );
  }

  async #startRouterBird(intervalMs: number, multiplier: number): Promise<void> {
    const d = this.#routerDir;
    mkdirSync(d, { recursive: true });
    const peers = this.nodes.flatMap((n) => [
      `protocol bgp ${n.node.name}_4 from node4 { neighbor ${n.link4.node} as ${NODE_ASN}; }`,
      `protocol bgp ${n.node.name}_6 from node6 { neighbor ${n.link6.node} as ${NODE_ASN}; }`,
    ]);
    const tmpl = (ch: 'ipv4' | 'ipv6') => [
      `template bgp node${ch.slice(3)} {`,
      `  local as ${ROUTER_ASN};`,
      '  hold time 9;',
      '  connect delay time 1;',
      '  connect retry time 1;',
      '  error wait time 1, 5;',
      '  graceful restart on;',
      '  bfd on;',
      `  ${ch} { import all; export none; };`,
      '}',
    ];
    const conf = [
      `router id 10.78.${this.lab.subnet + 4}.1;`,
      `log "${join(d, 'bird.log')}" all;`,
      'protocol device { }',
      // ECMP: equal routes from several nodes merged into one multipath kernel route
      'protocol kernel { ipv4 { import none; export all; }; merge paths on; }',
      'protocol kernel { ipv6 { import none; export all; }; merge paths on; }',
      `protocol bfd { interface "*" { min rx interval ${intervalMs} ms; min tx interval ${intervalMs} ms; multiplier ${multiplier}; }; }`,
      ...tmpl('ipv4'),
      ...tmpl('ipv6'),
      ...peers,
      '',
    ].join('\n');
    writeFileSync(join(d, 'bird.conf'), conf);
    this.routerBird = this.lab.spawn(this.router, ['bird', '-f', '-c', join(d, 'bird.conf'), '-s', join(d, 'bird.ctl'), '-P', join(d, 'bird.pid')], {
      logFile: 'router-bird.out',
    });
    await waitFor(async () => (await this.birdc(this.router, join(d, 'bird.ctl'), 'show status')).includes('Daemon is up'), {
      timeoutMs: 5000,
      intervalMs: 50,
      what: "the router's BIRD",
    });
  }

  /** (Re)starts `n`'s BIRD (its bird.conf includes ballast's snippets); resolves once it answers. */
  async startNodeBird(n: BgpLabNode): Promise<void> {
    mkdirSync(n.birdDir, { recursive: true });
    const conf = join(n.birdDir, 'bird.conf');
    // the operator's one line: a glob, so that BIRD starts before ballast first wrote its snippet
    // (BIRD refuses a configuration without any protocol; an operator's has at least its device protocol)
    writeFileSync(
      conf,
      [
        `router id ${n.link4.node};`,
        `log "${join(n.birdDir, 'bird.log')}" all;`,
        'protocol device { }',
        `include "${join(n.birdDir, 'ballast*.conf')}";`,
        '',
      ].join('\n'),
    );
    n.bird = this.lab.spawn(n.node.netns, ['bird', '-f', '-c', conf, '-s', n.socket, '-P', join(n.birdDir, 'bird.pid')], {
      logFile: `bird-${n.node.name}.out`,
    });
    await waitFor(async () => (await this.birdc(n.node.netns, n.socket, 'show status')).includes('Daemon is up'), {
      timeoutMs: 5000,
      intervalMs: 50,
      what: `${n.node.name}'s BIRD`,
    });
  }

  /**
   * The replies to ARP requests for `ip` that the router sends on `n`'s link (arping(8): `count`
   * requests 1 s apart, from the router's link address, waiting at most `count` s).
   * @returns how many replies came back (arping's "Received N response(s)").
   */
  async arpReplies(n: BgpLabNode, ip: string, count = 2): Promise<number> {
    const port = `${this.lab.prefix}${n.node.name}`;
    const r = await this.lab.exec(this.router, ['arping', '-c', String(count), '-w', String(count), '-I', port, '-s', n.link4.router, ip], {
      allowFail: true,
      timeoutMs: 10_000,
    });
    const m = /Received (\d+) response/.exec(r.stdout);
    if (!m) throw new Error(`arping on ${port} for ${ip}: no summary (exit ${r.code}): ${r.stdout} ${r.stderr}`);
    return Number(m[1]);
  }

  /**
   * The Neighbor Advertisements for `ip` that answer the router's Neighbor Solicitations on `n`'s
   * link (ndisc6(8): `tries` solicitations, 300 ms wait each, every reply shown).
   * @returns how many came back (ndisc6's "Target link-layer address" lines).
   */
  async ndpReplies(n: BgpLabNode, ip: string, tries = 3): Promise<number> {
    const port = `${this.lab.prefix}${n.node.name}`;
    const r = await this.lab.exec(this.router, ['ndisc6', '-m', '-n', '-r', String(tries), '-w', '300', '-s', n.link6.router, ip, port], {
      allowFail: true,
      timeoutMs: 10_000,
    });
    return (r.stdout.match(/Target link-layer address/g) ?? []).length;
  }

  /** `birdc -s socket <command>` in `netns`; its output ('' when it failed). */
  async birdc(netns: string, socket: string, command: string): Promise<string> {
    const r = await this.lab.exec(netns, ['birdc', '-s', socket, ...command.split(' ')], { allowFail: true, timeoutMs: 5000 });
    return r.code === 0 ? r.stdout : '';
  }

  /** The router's BIRD's view, for failure messages: `show protocols`, `show bfd sessions`, `show route all` (BIRD docs, "Remote control"). */
  async routerReport(): Promise<string> {
    const sock = join(this.#routerDir, 'bird.ctl');
    const out: string[] = [];
    for (const c of ['show protocols', 'show bfd sessions', 'show route all']) out.push(`$ birdc ${c}`, await this.birdc(this.router, sock, c));
    return out.join('\n');
  }

  /**
   * The router's kernel route for `vip` (`ip route show VIP`): the next hops (gateway addresses),
   * one per ECMP path; [] when there is no route.
   */
  async nexthops(vip: string): Promise<string[]> {
    const v6 = vip.includes(':');
    const r = await this.lab.exec(this.router, ['ip', ...(v6 ? ['-6'] : []), '-j', 'route', 'show', vip], { allowFail: true });
    if (r.code !== 0 || r.stdout.trim() === '') return [];
    const routes = JSON.parse(r.stdout) as { dst?: string; gateway?: string; nexthops?: { gateway?: string }[] }[];
    const route = routes.find((x) => x.dst === vip || x.dst === `${vip}/${v6 ? 128 : 32}`);
    if (!route) return [];
    if (route.nexthops) return route.nexthops.map((h) => h.gateway ?? '?').sort();
    return route.gateway ? [route.gateway] : [];
  }

  /**
   * Kills `n`: `linkDown` takes its eth0 down (the router's end loses carrier: the router's kernel
   * and BIRD see that at once), `silent` drops everything in and out of it with nftables, a hung
   * machine whose link stays up (only BFD or the hold timer can tell); then its agent (`agent`,
   * if given) and its BIRD get SIGKILL.
   */
  async killNode(n: BgpLabNode, agent?: LabProcess, how: 'linkDown' | 'silent' = 'linkDown'): Promise<void> {
    if (how === 'linkDown') await this.#ip(n.node.netns, 'link', 'set', 'eth0', 'down');
    // a hung machine: nothing in or out, the link stays up (only BFD, or the hold timer, can tell)
    else {
      const rules =
        'add table inet bbgpdead; add chain inet bbgpdead in { type filter hook input priority -400; policy drop; }; add chain inet bbgpdead out { type filter hook output priority -400; policy drop; }';
      await this.lab.exec(n.node.netns, ['nft', rules]);
    }
    agent?.kill('SIGKILL');
    n.bird?.kill('SIGKILL');
    await Promise.all([agent?.exited, n.bird?.exited]);
    n.bird = null;
  }

  /** Brings `n`'s link back (addresses and routes as #route made them). */
  async reviveLink(n: BgpLabNode): Promise<void> {
    await this.lab.exec(n.node.netns, ['nft', 'delete', 'table', 'inet', 'bbgpdead'], { allowFail: true });
    await this.#ip(n.node.netns, 'link', 'set', 'eth0', 'up');
    await this.#ip(n.node.netns, 'route', 'replace', 'default', 'via', n.link4.router);
    await this.#ip(n.node.netns, '-6', 'route', 'replace', 'default', 'via', n.link6.router);
  }

  teardown(): Promise<void> {
    return this.lab.teardown();
  }
}
