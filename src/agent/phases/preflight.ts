/**
 * Phase 1, preflight: what must hold before anything on the system changes — capabilities, the
 * auth keys, the interface and its addresses, the addresses the config binds — and the locks
 * that keep a second agent from fighting this one. Its undo releases the locks, and first
 * removes what this config's data planes leave behind that `dataplane.keepOnStop` does not keep
 * (the nftables table unless `all`, the eBPF pins only with `none`), also when a SIGKILLed
 * earlier run left it (see leftovers.ts): a stop at any moment after preflight leaves nothing
 * of ballast's but what the setting keeps.
 *
 * Preflight is not cancelled by a stop: it is short (no waits but netlink and the locks), and it
 * is what a stop needs to remove an earlier run's leftovers safely (the locks say no other
 * running agent uses them). A stop during it takes effect right after it.
 */
import { existsSync } from 'node:fs';
import type { Config } from '../../config/index.js';
import { describeReadError, parseAuthKeys, readRegularFile } from '../../config/files.js';
import { createError } from '../../errors.js';
import { addressFamily, addressToBytes, canonicalAddress } from '../../net/address.js';
import { formatHostPort } from '../../net/hostport.js';
import { chooseInterface, primaryAddress, type InterfaceInfo } from '../../vip/netlink.js';
import { missingCapabilities } from '../../host/capabilities.js';
import { bgpInterface, listAllInterfaces } from '../../host/interfaces.js';
import { acquireEndpointLock, ElectionLocks } from '../../host/locks.js';
import { checkCgroupDir, cgroup2Root, lockPinDir, pinDirFor } from '../../dataplane/ebpf.js';
import { commandExecutor, NftablesApplier } from '../../dataplane/apply.js';
import { foreignSnippet } from '../../bgp/bird.js';
import { removeLeftoverVips, removePins, runsEbpfLocalEndpoint, runsNftables, TableRemoval } from '../leftovers.js';
import { runPhase, type AgentContext, type Change, type PhaseHandle, type PhaseSpec, type Prepared, type ResolvedInterface } from '../phase.js';
import type { LockSwap } from '../../host/locks.js';

export type { ResolvedInterface } from '../phase.js';

/** The settings that name the election's instance (its lock, interface, keys): a change of one is resolved and locked anew before the hand-over. */
const INSTANCE = ['interface', 'family', 'vrrp.vrid', 'vrrp.auth', 'vrrp.owner'];

/**
 * Preflight's settings. It applies log.level itself; for the others a reload's prepare step
 * checks the host and takes the locks the next config needs before anything changes (and its
 * commit gives up the old ones): the interface, source address, keys and instance lock of a
 * hand-over, the nftables table lock of the other family, the added VIPs' locks, the bind
 * addresses of a re-run admin or local endpoint.
 */
const SETTINGS: PhaseSpec<unknown, Preflight>['settings'] = [
  { path: 'log.level', on: 'reconfigure', does: 'log level set' },
  { path: 'dataplane.keepOnStop', on: 'restart', why: 'what a stop leaves behind' },
  ...[...INSTANCE, 'vips', 'admin.listen', 'localEndpoint.addresses'].map((path) => ({ path, on: 'reconfigure' as const })),
];

/** Phase 1, preflight (see the top of this file). */
export const preflightPhase: PhaseSpec<Record<string, never>, Preflight> = {
  name: 'preflight',
  settings: SETTINGS,
  start: (ctx, config) => preflight(ctx, config),
};

/** What preflight found, for the phases after it. */
export interface Preflight extends PhaseHandle {
  /** The shared keys of vrrp.auth.keyFile; null without auth (or without an election). */
  authKeys: Buffer[] | null;
  /** null without an election (no vrrp section). */
  resolved: ResolvedInterface | null;
  /** The election's instance, VIP and nftables table locks (a reload changes them); null without an election. */
  locks: ElectionLocks | null;
  /** The removal of ballast's nftables tables (shared with the VIP data plane's undo); null without the nftables VIP data plane. */
  tables: TableRemoval | null;
  /**
   * The eBPF local endpoint's cgroup and pin directory, whose lock preflight holds; null
   * without the eBPF local endpoint, or when no cgroup v2 hierarchy is mounted (the proxy serves it).
   */
  ebpf: { cgroup: string; pinDir: string } | null;
}

/**
 * Runs the checks, then takes the locks: with an election the VRID lock and one lock per VIP,
 * without one the local-endpoint lock; with the eBPF local endpoint the lock of its cgroup's pin
 * directory. Then registers the removal of the nftables tables (with the nftables VIP data
 * plane, unless dataplane.keepOnStop is `all`) and of the pins (with the eBPF local endpoint,
 * only when it is `none`), so that a stop removes them even when the data-plane phases never
 * ran (a killed earlier run left them).
 * @throws BallastError BALLAST_E_PERMISSION, BALLAST_E_CONFIG_READ, the interface errors of
 *   {@link resolveInterface} (with mode: bgp, of {@link bgpInterface}), BALLAST_E_BGP_CONFIG_FILE, BALLAST_E_LOCAL_ENDPOINT_ADDRESS, BALLAST_E_ADMIN_ADDRESS,
 *   BALLAST_E_ALREADY_RUNNING, BALLAST_E_NETLINK, BALLAST_E_SOCKET, BALLAST_E_CGROUP (a wrong
 *   localEndpoint.cgroup), BALLAST_E_LOCAL_ENDPOINT_IN_USE (another agent holds the pin
 *   directory), BALLAST_E_DATAPLANE (its lock cannot be made).
 */
export function preflight(ctx: AgentContext, config: Config): Promise<Preflight> {
  return runPhase(ctx, 'preflight', async (own) => {
    const v = config.vrrp;
    // the election needs raw sockets and addresses; a node with only a local endpoint needs
    // nothing up front (ebpf says what it lacks, and falls back to the proxy, which needs nothing)
    const missing = v ? missingCapabilities() : [];
    if (missing.length > 0) {
      throw createError('BALLAST_E_PERMISSION', `this process lacks ${missing.join(' and ')}: run as root, or grant CAP_NET_RAW and CAP_NET_ADMIN`);
    }
    // before anything is opened: a key that went missing since validation changes nothing
    const authKeys = v?.auth ? readAuthKeys(v.auth.keyFile) : null;
    const all = await listAllInterfaces();
    checkBindAddresses(config, all);
    if (config.bgp) {
      bgpInterface(config, all);
      checkBgpConfigFile(config.bgp.configFile);
    }
    const resolved = v ? resolveInterface(config, all) : null;
    let locks: ElectionLocks | null = null;
    if (v && resolved) {
      const l = (locks = new ElectionLocks());
      own.defer('election locks', () => l.close());
      (await l.instance(resolved.iface.ifname, config.family, v.vrid)).commit();
      await l.addVips(config.vips);
      if (config.dataplane.vip === 'nftables' && config.apiserver.backends.length > 0) (await l.table(config.family)).commit();
      // a stop before the election ran: the VIPs a killed master left go too (the owner's are its own addresses)
      if (!v.owner) {
        const { ifindex } = resolved.iface;
        // the VIPs locked now, not the start-up ones: a reload may have given some up to another agent
        own.defer("VIPs (an earlier run's)", async () => {
          // a restart in place leaves them to the next process (the election handed off)
          if (!ctx.restarting?.()) await removeLeftoverVips(ifindex, l.vips(), ctx.log);
        });
      }
    } else if (config.bgp === null) {
      // (mode: bgp takes its family's nftables table lock instead, agent/phases/bgp.ts: one agent per family)
      const lock = await acquireEndpointLock();
      own.defer('local endpoint lock', () => lock.close());
    }
    let ebpf: Preflight['ebpf'] = null;
    if (runsEbpfLocalEndpoint(config)) {
      // a configured cgroup that is wrong is the operator's typo, not a host without eBPF
      const cgroup = config.localEndpoint!.cgroup !== undefined ? await checkCgroupDir(config.localEndpoint!.cgroup) : await cgroup2Root().catch(() => null);
      if (cgroup !== null) {
        const pinDir = pinDirFor(cgroup);
        const lock = lockPinDir(pinDir, cgroup);
        own.defer('eBPF pin directory lock', () => lock.release());
        ebpf = { cgroup, pinDir };
      }
    }
    if (config.localEndpoint !== null && config.dataplane.local !== 'ebpf' && config.apiserver.backends.length > 0) {
      // a stop keeps the eBPF programs (keepOnStop): a config that now serves the endpoint
      // another way would be shadowed by them, so they go, unless another agent holds them
      await removeKeptPins(config.localEndpoint.cgroup, ctx.log);
    }
    const keep = config.dataplane.keepOnStop;
    const tables = runsNftables(config)
      ? new TableRemoval(ctx.log, config.family, new NftablesApplier({ exec: commandExecutor(['nft'], { timeoutMs: config.dataplane.commandTimeoutMs }) }))
      : null;
    if (tables && keep !== 'all') {
      own.defer("nftables tables (also an earlier run's)", async () => {
        if (!ctx.restarting?.()) await tables.remove();
      });
    }
    if (ebpf && keep === 'none') {
      const { pinDir } = ebpf;
      own.defer("eBPF pins (also an earlier run's)", () => {
        if (!ctx.restarting?.()) removePins(pinDir, ctx.log);
      });
    }
    const out: Omit<Preflight, 'phase' | 'undo'> = {
      authKeys,
      resolved,
      locks,
      tables,
      ebpf,
      prepare: (change) => prepareReload(out, change),
      reconfigure: async ({ has, next }) => {
        if (has('log.level')) ctx.log.level = ctx.logLevel ?? next.log.level;
      },
    };
    return out;
  });
}

/**
 * A reload's first step, before anything changes: the interfaces and bind addresses the next
 * config needs, and the locks it takes — a hand-over's instance lock (and its interface and
 * keys, which `pre` shows from now on), the other family's table lock, the added VIPs'.
 * @returns commit (the old locks and the removed VIPs' go) and abort (the new ones go, `pre`
 *   shows the old interface and keys again).
 * @throws BallastError (BALLAST_E_ALREADY_RUNNING, an interface or address problem): then
 *   nothing is held that was not held before.
 */
async function prepareReload(pre: Omit<Preflight, 'phase' | 'undo'>, change: Change): Promise<Prepared> {
  const { cur, next, has } = change;
  const { locks } = pre;
  const instance = cur.vrrp !== null && next.vrrp !== null && INSTANCE.some(has);
  const swaps: LockSwap[] = [];
  const before = { resolved: pre.resolved, authKeys: pre.authKeys };
  let after = before;
  if (instance || has('admin.listen') || has('localEndpoint')) {
    const all = await listAllInterfaces();
    checkBindAddresses(next, all);
    if (instance) {
      const resolved = resolveInterface(next, all);
      after = { resolved, authKeys: next.vrrp!.auth ? readAuthKeys(next.vrrp!.auth.keyFile) : null };
      if (locks) swaps.push(await locks.instance(resolved.iface.ifname, next.family, next.vrrp!.vrid));
    }
  }
  const added = next.vips.filter((v) => !cur.vips.includes(v));
  const removed = cur.vips.filter((v) => !next.vips.includes(v));
  try {
    // the VIP data plane moves to the other family: its table lock (another ballast may program that table)
    if (locks && cur.family !== next.family && runsNftables(cur) && runsNftables(next)) swaps.push(await locks.table(next.family));
    if (locks && added.length > 0) await locks.addVips(added);
  } catch (err) {
    // addVips took none of the VIPs when it throws; the new instance / table locks go
    for (const s of swaps) s.abort();
    throw err;
  }
  Object.assign(pre, after);
  return {
    commit: () => {
      for (const s of swaps) s.commit();
      if (locks && removed.length > 0) locks.releaseVips(removed);
    },
    abort: () => {
      for (const s of swaps) s.abort();
      if (locks && added.length > 0) locks.releaseVips(added);
      Object.assign(pre, before);
    },
  };
}

/**
 * Removes the pins an earlier run kept for `cgroup` (default: the hierarchy's root) when no
 * running agent holds their lock; a failure is logged, never fatal (the endpoint then still
 * rewrites to the kept backends, and `ballast cleanup` removes them).
 */
async function removeKeptPins(cgroup: string | undefined, log: AgentContext['log']): Promise<void> {
  try {
    const dir = cgroup ?? (await cgroup2Root());
    const pinDir = pinDirFor(dir);
    if (!existsSync(pinDir)) return;
    const lock = lockPinDir(pinDir, dir);
    try {
      removePins(pinDir, log);
    } finally {
      lock.release();
    }
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'cannot remove the eBPF local endpoint an earlier run kept; `ballast cleanup` removes it');
  }
}

/**
 * The shared keys of vrrp.auth.keyFile, read at start (loadConfig checked it already; this is the
 * read that counts, in case the file changed since).
 * @throws BallastError BALLAST_E_CONFIG_READ when it cannot be read or is no key.
 */
export function readAuthKeys(path: string): Buffer[] {
  let bytes: Buffer;
  try {
    bytes = readRegularFile(path);
  } catch (err) {
    throw createError('BALLAST_E_CONFIG_READ', `vrrp.auth.keyFile: cannot read ${path}: ${describeReadError(err)}`, { cause: err });
  }
  const key = parseAuthKeys(bytes);
  if (typeof key === 'string') throw createError('BALLAST_E_CONFIG_READ', `vrrp.auth.keyFile: ${path} ${key}`);
  return key;
}

/**
 * bgp.configFile must be ballast's to rewrite: absent, empty, or a snippet ballast wrote
 * ({@link foreignSnippet}); never the operator's bird.conf or another file of theirs.
 * @throws BallastError BALLAST_E_BGP_CONFIG_FILE (exit 2) naming the file and why.
 */
export function checkBgpConfigFile(path: string): void {
  const why = foreignSnippet(path);
  if (why !== null) {
    throw createError(
      'BALLAST_E_BGP_CONFIG_FILE',
      `bgp.configFile: ${path} ${why}; ballast left it alone. Point bgp.configFile at a file of ballast's own (e.g. /etc/bird/ballast4.conf) and include it from bird.conf`,
    );
  }
}

/** 127.0.0.0/8 and ::1: always this node's, whatever `lo` lists. */
function isLoopback(address: string): boolean {
  const b = addressToBytes(address);
  return b.length === 4 ? b[0] === 127 : b.subarray(0, 15).every((x) => x === 0) && b[15] === 1;
}

/** True when `address` is the unspecified address (0.0.0.0, ::): every address of the node. */
function isUnspecified(address: string): boolean {
  return addressToBytes(address).every((x) => x === 0);
}

/** True when some interface has `address` (or it is loopback). */
function isNodeAddress(all: readonly InterfaceInfo[], address: string): boolean {
  if (isLoopback(address)) return true;
  const a = canonicalAddress(address);
  return all.some((i) => i.addresses.some((x) => x.address === a));
}

/**
 * The addresses this agent binds must be this node's: a local endpoint or admin.listen elsewhere
 * fails to bind (EADDRNOTAVAIL), which no restart fixes.
 * @throws BallastError BALLAST_E_LOCAL_ENDPOINT_ADDRESS, BALLAST_E_ADMIN_ADDRESS (exit 2).
 */
export function checkBindAddresses(config: Config, all: readonly InterfaceInfo[]): void {
  const le = config.localEndpoint;
  if (le && config.dataplane.local !== 'off') {
    const foreign = le.addresses.filter((a) => !isNodeAddress(all, a.host));
    if (foreign.length > 0) {
      throw createError(
        'BALLAST_E_LOCAL_ENDPOINT_ADDRESS',
        `localEndpoint.address: ${foreign.map(formatHostPort).join(', ')} ${foreign.length === 1 ? 'is not an address' : 'are not addresses'} of this node (binding fails with EADDRNOTAVAIL); use a loopback address such as 127.0.0.1:7443, or one of this node's own`,
      );
    }
  }
  const admin = config.admin.listen;
  if (!isUnspecified(admin.host) && !isNodeAddress(all, admin.host)) {
    throw createError(
      'BALLAST_E_ADMIN_ADDRESS',
      `admin.listen: ${formatHostPort(admin)} is not an address of this node (binding fails with EADDRNOTAVAIL); use a loopback address such as 127.0.0.1:9641, one of this node's own, or 0.0.0.0`,
    );
  }
}

/**
 * Finds the interface VRRP runs on and the address adverts go out from.
 * @param all every interface of the namespace (rtnetlink).
 * @throws BallastError BALLAST_E_INTERFACE_NOT_FOUND, BALLAST_E_NO_INTERFACE,
 *   BALLAST_E_VIP_IS_NODE_ADDRESS, BALLAST_E_NOT_OWNER, BALLAST_E_NO_PRIMARY_ADDRESS.
 */
export function resolveInterface(config: Config, all: readonly InterfaceInfo[]): ResolvedInterface {
  const vip = config.vips[0]!;
  const chosen = chooseInterface([...all], vip, config.interface);
  if (typeof chosen === 'string') {
    throw createError(config.interface === undefined ? 'BALLAST_E_NO_INTERFACE' : 'BALLAST_E_INTERFACE_NOT_FOUND', chosen);
  }
  const owner = config.vrrp?.owner === true;
  if (owner) {
    const missing = config.vips.filter((vip) => !chosen.addresses.some((a) => a.address === vip));
    if (missing.length > 0) {
      throw createError(
        'BALLAST_E_NOT_OWNER',
        `vrrp.priority 255 means this node owns the VIPs as its own addresses (RFC 9568 §1.6), but ${chosen.ifname} does not have ${missing.join(', ')}; use a priority of 254 or less`,
      );
    }
  } else {
    checkVipsAreNotNodeAddresses(config.vips, all);
  }
  // the owner sends from its own address, which is the VIP; everyone else never sends from a VIP
  const primary = primaryAddress(chosen, config.family, owner ? [] : config.vips);
  if (primary === null) {
    const what = config.family === 4 ? 'primary IPv4 address' : 'IPv6 link-local address';
    throw createError('BALLAST_E_NO_PRIMARY_ADDRESS', `interface ${chosen.ifname} has no ${what} to send VRRP advertisements from`);
  }
  return { iface: chosen, primary };
}

/**
 * A VIP that is a node's own address (its interface's only global address of that family, with
 * a subnet prefix, as DHCP or the network configuration gives it) is no virtual IP: the agent
 * would remove it as a backup. A VIP beside the node's own address — as ballast or keepalived
 * add it (/32, /128), or by hand with a subnet prefix (a secondary IPv4 address, or a second
 * IPv6 address in the /64) — is a leftover, which the election's start-up cleanup removes.
 * @throws BallastError BALLAST_E_VIP_IS_NODE_ADDRESS naming the `vips[i]` field.
 */
function checkVipsAreNotNodeAddresses(vips: readonly string[], all: readonly InterfaceInfo[]): void {
  vips.forEach((vip, i) => {
    const family = addressFamily(vip);
    const full = family === 4 ? 32 : 128;
    for (const iface of all) {
      // scope 0 is RT_SCOPE_UNIVERSE (rtnetlink(7)): link-local and host addresses do not count
      const others = iface.addresses.filter((a) => a.family === family && a.scope === 0 && !vips.includes(a.address));
      const own = others.length === 0 ? iface.addresses.find((a) => a.address === vip && a.prefixLen < full && !a.secondary) : undefined;
      if (own) {
        throw createError(
          'BALLAST_E_VIP_IS_NODE_ADDRESS',
          `vips[${i}]: ${vip} is this node's own address (${iface.ifname} has ${vip}/${own.prefixLen}), not a virtual IP; a VIP must be an address that no node has (priority 255 is for a router that owns the VIPs, RFC 9568 §1.6)`,
        );
      }
    }
  });
}
