/**
 * The one visible-skip helper. A test that needs something of the machine asks for it:
 *
 *   const why = needs('root', 'keepalived');
 *   describe.skipIf(why)('ballast ⇄ keepalived', () => { … });
 *
 * `needs` returns null when everything is there, else the reason of the first thing missing
 * (a sentence naming it and how to get it), and prints that reason once on stderr, so a skip is
 * never silent: vitest shows the line under the test file's name, and the suite is marked skipped.
 */
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { release } from 'node:os';
import { findCgroup2Root, kernelAtLeast } from '../../src/dataplane/ebpf.js';
import { sockLbObjectPath } from '../../src/native.js';
import { KEEPALIVED_PATH } from '../../lab/peers/keepalived.js';
import { HAPROXY_PATH } from '../../lab/peers/haproxy.js';
import { NGINX_PATH, NGINX_STREAM_MODULE } from '../../lab/peers/nginx.js';

/** What a test can need of the machine. */
export type Need =
  /** uid 0: network namespaces, raw sockets, nftables, cgroups */
  | 'root'
  /** root, kernel ≥ 5.14, a cgroup v2 hierarchy and the BPF object built (the cgroup socket programs) */
  | 'bpf'
  /** an executable; the Debian package scripts/setup.sh installs */
  | 'ip'
  | 'bridge'
  | 'nft'
  | 'conntrack'
  | 'conntrackd'
  | 'tcpdump'
  | 'prometheus'
  | 'promtool'
  | 'bird'
  | 'birdc'
  /** ARP requests (iputils-arping) and Neighbor Solicitations (ndisc6) sent from a lab namespace */
  | 'arping'
  | 'ndisc6'
  /** CPU and IO load beside what a test measures */
  | 'stress-ng'
  /** a peer daemon of the lab (lab/peers/) */
  | 'keepalived'
  | 'haproxy'
  | 'nginx'
  /** Debian's Chromium, for the status page in a real headless browser */
  | 'chromium';

const PACKAGE: Record<string, string> = {
  bird: 'bird2',
  birdc: 'bird2',
  ip: 'iproute2',
  bridge: 'iproute2',
  nft: 'nftables',
  conntrack: 'conntrack',
  conntrackd: 'conntrackd',
  tcpdump: 'tcpdump',
  prometheus: 'prometheus',
  promtool: 'prometheus',
  chromium: 'chromium',
  arping: 'iputils-arping',
  ndisc6: 'ndisc6',
  'stress-ng': 'stress-ng',
};

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

const onPath = (cmd: string): boolean => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;

const isRoot = (): boolean => process.getuid?.() === 0;

/** The reason `need` is not met here, or null. */
function missing(need: Need): string | null {
  switch (need) {
    case 'root':
      return isRoot() ? null : `not root (uid ${process.getuid?.() ?? '?'}): network namespaces, raw sockets and nftables need it`;
    case 'bpf': {
      if (!isRoot()) return missing('root');
      const kernel = release();
      if (!kernelAtLeast(kernel, 5, 14)) return `kernel ${kernel} is older than 5.14 (SO_NETNS_COOKIE, cgroup getpeername hooks)`;
      if (findCgroup2Root(readFileSync('/proc/self/mountinfo', 'utf8')) === undefined) return 'no cgroup v2 hierarchy is mounted';
      const object = sockLbObjectPath();
      return existsSync(object) ? null : `the BPF object ${object} is not built (npm run build:native)`;
    }
    case 'ip':
    case 'bridge':
    case 'nft':
    case 'conntrack':
    case 'conntrackd':
    case 'tcpdump':
    case 'prometheus':
    case 'promtool':
    case 'chromium':
    case 'bird':
    case 'birdc':
    case 'arping':
    case 'ndisc6':
    case 'stress-ng':
      return onPath(need) ? null : `no ${need} on PATH (apt-get install ${PACKAGE[need]})`;
    case 'keepalived':
      return executable(KEEPALIVED_PATH) ? null : `no ${KEEPALIVED_PATH} (apt-get install keepalived)`;
    case 'haproxy':
      return executable(HAPROXY_PATH) ? null : `no ${HAPROXY_PATH} (apt-get install haproxy)`;
    case 'nginx':
      if (!executable(NGINX_PATH)) return `no ${NGINX_PATH} (apt-get install nginx)`;
      return existsSync(NGINX_STREAM_MODULE) ? null : `no ${NGINX_STREAM_MODULE} (apt-get install libnginx-mod-stream)`;
  }
}

const told = new Set<string>();

/**
 * Checks `what` in order; returns the reason of the first one missing (printed once on stderr
 * as `SKIPPED: <reason>`), or null when all are there. For `describe.skipIf` / `it.skipIf`.
 */
export function needs(...what: Need[]): string | null {
  for (const need of what) {
    const why = missing(need);
    if (why === null) continue;
    if (!told.has(why)) {
      told.add(why);
      console.warn(`SKIPPED: ${why}`);
    }
    return why;
  }
  return null;
}
