/**
 * ballast agents in the routed lab (lab/bgp-lab.ts): one per node and family, each driving that
 * node's BIRD (mode: bgp), for the integration tests and the benchmark.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { runAgent, type LabAgent } from './cluster.js';
import { NODE_ASN, ROUTER_ASN, type BgpLab, type BgpLabNode } from './bgp-lab.js';

/** What differs between the lab's BGP agents. */
export interface BgpAgentSettings {
  family?: 4 | 6;
  balance?: 'all' | 'local';
  announce?: 'backends' | 'local';
  /** Health check interval (default 200ms), fall (default 2), rise (default 1). */
  intervalMs?: number;
  fall?: number;
  rise?: number;
  /** apiserver.health.damping (default: the agent's, on) */
  damping?: boolean;
  bfdIntervalMs?: number;
  bfdMultiplier?: number;
  /** default 9641 (family 4), 9642 (family 6) */
  adminPort?: number;
  /** merged over the bgp section as written */
  bgp?: Record<string, unknown>;
}

/** The configuration file of `n`'s agent, as YAML. */
export function bgpAgentConfig(b: BgpLab, n: BgpLabNode, s: BgpAgentSettings = {}): string {
  const family = s.family ?? 4;
  const v6 = family === 6;
  const adminPort = s.adminPort ?? (v6 ? 9642 : 9641);
  return stringify({
    mode: 'bgp',
    vips: [v6 ? b.vip6 : b.vip4],
    apiserver: {
      backends: b.nodes.map((x) => (v6 ? `[${x.node.ipv6}]:6443` : `${x.node.ipv4}:6443`)),
      health: {
        caFile: b.lab.ca.certFile,
        interval: `${s.intervalMs ?? 200}ms`,
        rise: s.rise ?? 1,
        fall: s.fall ?? 2,
        ...(s.damping === undefined ? {} : { damping: s.damping }),
      },
    },
    admin: { listen: `127.0.0.1:${adminPort}` },
    bgp: {
      socket: n.socket,
      configFile: v6 ? n.snippet6 : n.snippet4,
      localAsn: NODE_ASN,
      routerId: n.link4.node,
      balance: s.balance ?? 'local',
      announce: s.announce ?? 'backends',
      bfd: { interval: `${s.bfdIntervalMs ?? 100}ms`, multiplier: s.bfdMultiplier ?? 3 },
      peers: [{ address: v6 ? n.link6.router : n.link4.router, asn: ROUTER_ASN }],
      ...s.bgp,
    },
  });
}

/**
 * Writes `n`'s config and starts its agent; resolves once /status answers (within 30 s: on a loaded
 * 2-core machine an agent's start plus a `ballast status` CLI run took over 10 s).
 */
export async function startBgpAgent(b: BgpLab, n: BgpLabNode, s: BgpAgentSettings = {}): Promise<LabAgent> {
  const family = s.family ?? 4;
  const adminPort = s.adminPort ?? (family === 6 ? 9642 : 9641);
  const path = join(b.lab.dir, `${n.node.name}-bgp${family}.yaml`);
  writeFileSync(path, bgpAgentConfig(b, n, s));
  return runAgent(b.lab, n.node, path, { logFile: join(b.lab.dir, `${n.node.name}-bgp${family}.log`), adminPort, timeoutMs: 30_000 });
}
