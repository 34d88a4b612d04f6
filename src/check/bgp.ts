/**
 * The checks of `mode: bgp`: `bgp-interface`, `bgp-socket` (BIRD's control socket), `bgp-config-file`
 * (the snippet ballast writes), and `bgp-arp` (no interface answers ARP for a VIP announced by BGP).
 */
import { accessSync, constants as fsConstants, existsSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Config } from '../config/index.js';
import { BirdControl, BirdError, foreignSnippet, parseStatus } from '../bgp/bird.js';
import type { InterfaceInfo } from '../vip/netlink.js';
import { ARP_SYSCTL_FIX, ARP_SYSCTLS, sysctlPath } from '../vip/noarp.js';
import { fail, ok, warn, type CheckResult } from './report.js';
import { UNIT_NAME, type Sandbox } from './unit.js';

/**
 * Whether `path` can be written under `unit`'s sandbox: not with ProtectKernelTunables=yes under
 * /proc/sys, else the longest of ReadWritePaths= / ReadOnlyPaths= holding it decides (systemd.exec(5);
 * a leading `-` only makes a missing path no error). Pure.
 */
export function writableUnder(unit: Sandbox, path: string): boolean {
  if (unit.protectKernelTunables && path.startsWith('/proc/sys/')) return false;
  const holds = (p: string): boolean => {
    const q = p.replace(/^[-+]/, '').replace(/\/+$/, '');
    return path === q || path.startsWith(`${q}/`);
  };
  const rw = Math.max(-1, ...unit.readWritePaths.filter(holds).map((p) => p.length));
  const ro = Math.max(-1, ...unit.readOnlyPaths.filter(holds).map((p) => p.length));
  return rw >= ro;
}

/**
 * `bgp-arp` (mode: bgp): the node must never answer ARP (NDP) for a VIP it announces by BGP
 * (src/vip/noarp.ts). IPv4: ok when `net.ipv4.conf.all.arp_ignore` ≥ 1 and `arp_announce` ≥ 2
 * already; when lower, ok if the agent can raise them at start (it does, and restores them on
 * stop), warn when it cannot (the installed unit's /proc/sys is read-only). IPv6: ok, nothing to
 * set (NDP answers only for an address on the receiving interface).
 * @param read a sysctl's value by name (null: unreadable)
 * @param unit the installed unit's sandbox, null when the agent does not run under one
 * @returns one result; null without a bgp section.
 */
export function bgpArpResult(config: Config, read: (key: string) => string | null, unit: Sandbox | null): CheckResult | null {
  const bgp = config.bgp;
  if (!bgp) return null;
  const title = `no interface answers ${config.family === 4 ? 'ARP' : 'NDP'} for the VIPs on ${bgp.interface}`;
  if (config.family === 6) {
    return ok(
      'bgp-arp',
      title,
      `nothing to set: the kernel answers a Neighbor Solicitation only for an address on the interface it arrived on (RFC 4861 §7.2.3; no proxy NDP), so ${config.vips.join(', ')} on ${bgp.interface} is answered by no other interface`,
    );
  }
  const now = ARP_SYSCTLS.map((s) => ({ ...s, value: read(s.key) }));
  const shown = now.map((s) => `${s.key} = ${s.value ?? '(unreadable)'}`).join(', ');
  const low = now.filter((s) => s.value === null || Number(s.value) < s.want);
  if (low.length === 0)
    return ok(
      'bgp-arp',
      title,
      `${shown}: an ARP request for ${config.vips.join(', ')} is answered only where the VIP is configured (${bgp.interface}, which speaks no ARP), and the node's ARP requests never carry a VIP as the sender (ip-sysctl.rst)`,
    );
  const blocked = unit === null ? [] : low.filter((s) => !writableUnder(unit, sysctlPath(s.key)));
  if (blocked.length === 0) {
    return ok(
      'bgp-arp',
      title,
      `${shown} now: the agent raises ${low.map((s) => `${s.key.split('.').pop()} to ${s.want}`).join(' and ')} at start (before the VIPs are on ${bgp.interface}) and restores ${low.length === 1 ? 'it' : 'them'} on stop; with 0 every interface would answer ARP for ${config.vips.join(', ')}`,
    );
  }
  return warn(
    'bgp-arp',
    title,
    `${shown}, and the agent cannot raise ${blocked.map((s) => s.key).join(', ')} under ${UNIT_NAME} (/proc/sys is read-only there): every interface of this node answers ARP for ${config.vips.join(', ')}, so on a shared segment hosts reach the VIP on-link instead of through the routers`,
    ARP_SYSCTL_FIX,
  );
}

/** Options of {@link bgpResults}. */
export interface BgpCheckOptions {
  /** How long BIRD's control socket may take to greet and answer `show status`, ms (default 3000). */
  timeoutMs?: number;
  /**
   * access(2) on bgp.configFile's directory (default fs.accessSync); throws an errno error
   * (EACCES, EROFS, …) when it may not be written. Tests replace it: root passes every mode check.
   */
  access?: (path: string, mode: number) => void;
}

/**
 * The checks of `mode: bgp` (docs/check.md): `bgp-interface` (bgp.interface exists), `bgp-socket`
 * (BIRD's control socket answers `show status`; a warn when it does not, since the agent waits
 * for BIRD), `bgp-config-file` (bgp.configFile's directory is writable and the file, when there,
 * is ballast's to write: bird.ts's foreignSnippet, the rule the agent applies at start).
 * Whether BIRD's own configuration includes the snippet is not knowable from here and not checked.
 * @param interfaces every interface of the node (listAllInterfaces).
 * @returns three results; [] when `config` is not in BGP mode.
 */
export async function bgpResults(config: Config, interfaces: readonly InterfaceInfo[], opts: BgpCheckOptions = {}): Promise<CheckResult[]> {
  const bgp = config.bgp;
  if (!bgp) return [];
  const out: CheckResult[] = [];
  {
    const title = `bgp.interface ${bgp.interface} exists`;
    const found = interfaces.find((i) => i.ifname === bgp.interface);
    if (found) out.push(ok('bgp-interface', title, `${bgp.interface} (ifindex ${found.ifindex}) is where the agent binds ${config.vips.join(', ')}`));
    else
      out.push(
        fail(
          'bgp-interface',
          title,
          `there is no interface ${bgp.interface} (${interfaces.map((i) => i.ifname).join(', ') || 'none'} exist): the agent refuses to start`,
          `set bgp.interface to lo, or create it (ip link add ${bgp.interface} type dummy && ip link set ${bgp.interface} up)`,
        ),
      );
  }
  {
    const title = `BIRD answers on its control socket ${bgp.socket}`;
    const bird = new BirdControl(bgp.socket, opts.timeoutMs ?? 3000);
    try {
      const s = parseStatus(await bird.command('show status'));
      out.push(
        ok('bgp-socket', title, `BIRD ${s.version ?? '(version not given)'}${s.routerId ? `, router ID ${s.routerId}` : ''}${s.up ? ', up and running' : ''}`),
      );
    } catch (err) {
      const why =
        err instanceof BirdError && err.errno === 'ENOENT' ? 'no socket there (BIRD is not running, or bgp.socket names another path)' : (err as Error).message;
      out.push(
        warn(
          'bgp-socket',
          title,
          `${why}; the agent starts anyway and waits for BIRD, announcing nothing until it answers`,
          `start BIRD 2 (systemctl start bird), or set bgp.socket to the path of its control socket (bird -s)`,
        ),
      );
    } finally {
      bird.close();
    }
  }
  {
    const path = bgp.configFile;
    const dir = dirname(path);
    const title = `bgp.configFile ${path} can be written by ballast`;
    // the agent creates a missing directory (mkdir -p, bird.ts writeSnippet): the nearest existing one must be writable
    let existing = dir;
    while (!existsSync(existing) && dirname(existing) !== existing) existing = dirname(existing);
    const creates = existing !== dir;
    let dirProblem: string | null = null;
    try {
      if (!statSync(existing).isDirectory()) dirProblem = `${existing} is not a directory`;
      else (opts.access ?? accessSync)(existing, fsConstants.W_OK | fsConstants.X_OK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      dirProblem =
        code === 'EACCES'
          ? `the directory ${existing} is not writable by this user${creates ? ` (the agent would create ${dir} in it)` : ''}`
          : `${existing}: ${(err as Error).message}`;
    }
    // whose the file is: the agent's own rule (bird.ts foreignSnippet, BALLAST_E_BGP_CONFIG_FILE at start)
    const foreign = foreignSnippet(path);
    const present = existsSync(path);
    if (dirProblem)
      out.push(
        fail(
          'bgp-config-file',
          title,
          `${dirProblem}: the agent cannot write the snippet`,
          `run the agent (and the check) as root, or set bgp.configFile to a path in a directory it can write`,
        ),
      );
    else if (foreign !== null)
      out.push(
        fail(
          'bgp-config-file',
          title,
          `${path} ${foreign}: the agent refuses to start (BALLAST_E_BGP_CONFIG_FILE)`,
          `set bgp.configFile to a file of ballast's own (e.g. /etc/bird/ballast4.conf, one per family) and include it from bird.conf, or move that file away`,
        ),
      );
    else
      out.push(
        ok(
          'bgp-config-file',
          title,
          `${!present ? `${path} does not exist yet; the agent writes it${creates ? `, creating ${dir} in ${existing}` : ` in ${dir}`}` : `${path} is ballast's to write (its snippet, or empty)`} (whether BIRD's configuration includes it is not checked: docs/bgp.md gives the include line)`,
        ),
      );
  }
  return out;
}
