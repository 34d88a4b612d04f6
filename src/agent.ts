/**
 * The agent: wires the parts and owns start, stop and the failure paths.
 *
 *   config ──► interface lookup (rtnetlink) ──► admin endpoint ──► election worker
 *                                                                  (VIPs, adverts, announcements)
 *
 * Nothing on the system changes before the configuration, the interface and the admin port
 * have all been checked.
 */
import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { createServer, type Server as NetServer } from 'node:net';
import type { Config } from './config/index.js';
import { createError, ERRORS, isBallastError, type BallastError } from './errors.js';
import type { Logger } from './observe/log.js';
import { startAdmin } from './observe/admin.js';
import { createMetrics } from './observe/metrics.js';
import { statusDocument, statusState, type StatusDocument } from './observe/status.js';
import { chooseInterface, delVip, listInterfaces, openRtnl, primaryAddress, type InterfaceInfo } from './vip/netlink.js';
import type { EngineEvent, EngineOptions } from './vrrp/engine.js';
import { EngineStartError, VrrpHost } from './vrrp/host.js';
import { HealthChecker } from './health/checker.js';
import { FlowTracker, watchConntrack, type ConntrackWatch } from './health/passive.js';
import { LoadBalancer, VIP_PLANE_MESSAGES, type DataplaneStatus } from './dataplane/controller.js';
import { NftablesApplier } from './dataplane/apply.js';
import { flushBackend } from './dataplane/conntrack.js';
import { Reconciler } from './dataplane/reconcile.js';
import { Policy } from './policy.js';
import { LOCAL_PLANE_MESSAGES, LocalBalancer, type LocalDataplane, type LocalEndpoint } from './dataplane/local.js';
import { formatHostPort, type HostPort } from './net/hostport.js';
import { EbpfLocalDataplane, checkCgroupDir, checkEbpf, cgroup2Root, lockPinDir, pinDirFor } from './dataplane/ebpf.js';
import { ProxyLocalDataplane } from './dataplane/proxy.js';
import { listeningOn } from './net/listening.js';
import { addressFamily, canonicalAddress, hostPort } from './net/address.js';
import { describeReadError, parseAuthKeys, readRegularFile } from './config/files.js';

/**
 * The shared keys of vrrp.auth.keyFile, read at start (loadConfig checked it already; this is the
 * read that counts, in case the file changed since).
 * @throws BallastError BALLAST_E_CONFIG_READ when it cannot be read or is no key.
 */
function readAuthKeys(path: string): Buffer[] {
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

/** A running agent. */
export interface Agent {
  /** The current /status document. */
  status(): Promise<StatusDocument>;
  /** Clean stop: priority 0 if Active, VIPs removed, admin closed. Idempotent. */
  stop(): Promise<void>;
  /** Resolves when the agent has stopped for good (by stop() or a fatal error), with the exit status. */
  readonly done: Promise<number>;
}

/**
 * Finds the interface VRRP runs on and the address adverts go out from.
 * @throws BallastError BALLAST_E_INTERFACE_NOT_FOUND, BALLAST_E_NO_INTERFACE, BALLAST_E_NO_PRIMARY_ADDRESS, BALLAST_E_NETLINK.
 */
export async function resolveInterface(config: Config): Promise<{ iface: InterfaceInfo; primary: string }> {
  const rt = openRtnl();
  let all: InterfaceInfo[];
  try {
    all = await listInterfaces(rt);
  } catch (err) {
    throw createError('BALLAST_E_NETLINK', `cannot list interfaces through rtnetlink: ${(err as Error).message}`, { cause: err });
  } finally {
    rt.close();
  }
  const vip = config.vips[0]!;
  const chosen = chooseInterface(all, vip, config.interface);
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
  }
  // the owner sends from its own address, which is the VIP; everyone else never sends from a VIP
  const primary = primaryAddress(chosen, config.family, owner ? [] : config.vips);
  if (primary === null) {
    const what = config.family === 4 ? 'primary IPv4 address' : 'IPv6 link-local address';
    throw createError('BALLAST_E_NO_PRIMARY_ADDRESS', `interface ${chosen.ifname} has no ${what} to send VRRP advertisements from`);
  }
  return { iface: chosen, primary };
}

/** Linux capability numbers (capabilities(7)). */
const CAP_NET_ADMIN = 12;
const CAP_NET_RAW = 13;

/**
 * The capabilities ballast needs that this process lacks, read from CapEff in
 * /proc/self/status (proc(5)): CAP_NET_RAW for raw and packet sockets, CAP_NET_ADMIN for
 * addresses and multicast membership.
 * @returns e.g. ['CAP_NET_RAW']; empty when everything is there (or /proc cannot be read).
 */
export function missingCapabilities(status = '/proc/self/status'): string[] {
  let text: string;
  try {
    text = readFileSync(status, 'utf8');
  } catch {
    return [];
  }
  const hex = /^CapEff:\s*([0-9a-f]+)$/m.exec(text)?.[1];
  if (!hex) return [];
  const eff = BigInt(`0x${hex}`);
  const out: string[] = [];
  if (!(eff & (1n << BigInt(CAP_NET_ADMIN)))) out.push('CAP_NET_ADMIN');
  if (!(eff & (1n << BigInt(CAP_NET_RAW)))) out.push('CAP_NET_RAW');
  return out;
}

/**
 * One agent per VRID, interface and family in a network namespace: two would delete each
 * other's VIP. The lock is an abstract UNIX socket (unix(7)), which belongs to the network
 * namespace and vanishes with the process, so a crash never leaves a stale lock.
 * @throws BallastError BALLAST_E_ALREADY_RUNNING when another agent holds it.
 */
export function acquireInstanceLock(ifname: string, family: 4 | 6, vrid: number): Promise<NetServer> {
  return abstractLock(`ballast:${ifname}:ipv${family}:vrid${vrid}`, `runs VRID ${vrid} (IPv${family}) on ${ifname}`);
}

/**
 * One agent without an election per network namespace (two would fight over the local endpoint).
 * @throws BallastError BALLAST_E_ALREADY_RUNNING when another agent holds it.
 */
export function acquireEndpointLock(): Promise<NetServer> {
  return abstractLock('ballast:local-endpoint', 'serves a local endpoint without an election');
}

async function abstractLock(name: string, what: string): Promise<NetServer> {
  const server = createServer((c) => c.destroy());
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ path: `\0${name}` }, () => resolve());
    });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE') {
      throw createError('BALLAST_E_ALREADY_RUNNING', `another ballast agent already ${what} in this network namespace (lock @${name})`);
    }
    throw createError('BALLAST_E_SOCKET', `cannot take the instance lock @${name}: ${(err as Error).message}`, { cause: err });
  }
  server.unref();
  return server;
}

/** Turns an engine start failure (errno from the addon or netlink) into an operator-facing error. */
function engineError(err: unknown): BallastError {
  if (isBallastError(err)) return err;
  const e = err as EngineStartError;
  const detail = e.message;
  if (e.code === 'EPERM' || e.code === 'EACCES') {
    return createError('BALLAST_E_PERMISSION', `${detail}: run as root, or with CAP_NET_RAW and CAP_NET_ADMIN`, { cause: err });
  }
  if (e.code === 'BALLAST_E_ADDON_MISSING') return createError('BALLAST_E_ADDON_MISSING', detail, { cause: err });
  if (e.syscall) return createError('BALLAST_E_SOCKET', detail, { cause: err });
  return createError('BALLAST_E_NETLINK', detail, { cause: err });
}

/**
 * Starts the agent: checks the interface, binds the admin endpoint, starts the health checks,
 * the node-local endpoint (`localEndpoint`) and the election (`vrrp`), whichever are configured.
 * @throws BallastError (see errors.ts) — in that case nothing on the system was changed, except
 *   that VIPs left by an earlier run may have been removed.
 */
export async function startAgent(config: Config, log: Logger): Promise<Agent> {
  const v = config.vrrp;
  // the election needs raw sockets and addresses; a node with only a local endpoint needs
  // nothing up front (ebpf says what it lacks, and falls back to the proxy, which needs nothing)
  const missing = v ? missingCapabilities() : [];
  if (missing.length > 0) {
    throw createError('BALLAST_E_PERMISSION', `this process lacks ${missing.join(' and ')}: run as root, or grant CAP_NET_RAW and CAP_NET_ADMIN`);
  }
  // before anything is opened: a key that went missing since validation changes nothing
  const authKeys = v?.auth ? readAuthKeys(v.auth.keyFile) : null;
  const resolved = v ? await resolveInterface(config) : null;
  const lock = v && resolved ? await acquireInstanceLock(resolved.iface.ifname, config.family, v.vrid) : await acquireEndpointLock();
  const fixed = resolved && v
    ? {
        vips: [...config.vips],
        interface: resolved.iface.ifname,
        family: config.family,
        primaryAddress: resolved.primary,
        unicast: v.unicast,
        peers: v.peers,
        auth: v.auth !== null,
        advertisementIntervalMs: v.advertisementIntervalMs,
      }
    : null;
  let host: VrrpHost | null = null;
  let localLb: Reconciler<LocalBalancer> | null = null;
  let unfollowLocal: (() => void) | null = null;
  let local: LocalDataplane | null = null;
  let localOff = config.localEndpoint === null ? 'no localEndpoint configured' : 'dataplane.local: off';
  const checker = config.apiserver.backends.length > 0 ? new HealthChecker({ health: config.apiserver.health, backends: config.apiserver.backends, logger: log }) : null;
  let balancing: Balancing | null = null;
  let watch: ConntrackWatch | null = null;
  const status = async (): Promise<StatusDocument> => {
    const common = {
      backends: checker?.snapshot() ?? [],
      dataplane: dataplaneStatus(config, balancing?.dataplane() ?? null),
      local: localLb ? { ...localLb.plane.status(), ...localLb.status() } : { mode: 'off' as const, reason: localOff },
    };
    if (!fixed) return { state: 'none', ...common };
    if (!host) throw new Error('the election engine is not running');
    return statusDocument(await host.status(), fixed, common);
  };

  let admin: Server;
  try {
    const metrics = createMetrics();
    admin = await startAdmin(config.admin.listen.host, config.admin.listen.port, {
      status,
      metrics: async () => {
        metrics.update(await status());
        return { contentType: metrics.registry.contentType, body: await metrics.registry.metrics() };
      },
    });
  } catch (err) {
    lock.close();
    throw createError(
      'BALLAST_E_ADMIN_LISTEN',
      `cannot listen on ${config.admin.listen.host}:${config.admin.listen.port} for the admin endpoint: ${(err as Error).message}`,
      { cause: err },
    );
  }

  // the node-local endpoint first: it needs nothing from the election, and a failure here must
  // leave the VIPs untouched
  if (config.localEndpoint && config.dataplane.local !== 'off' && checker) {
    try {
      local = await startLocalDataplane(config, log);
    } catch (err) {
      admin.close();
      lock.close();
      throw err;
    }
    // the local plane follows the verdicts: one subscription
    localLb = new Reconciler(new LocalBalancer(local, log), checker, { log, ...LOCAL_PLANE_MESSAGES });
    unfollowLocal = localLb.follow();
    localOff = '';
  }
  const keep = config.dataplane.keepOnStop;

  let finish!: (code: number) => void;
  const done = new Promise<number>((r) => (finish = r));
  let stopping: Promise<void> | null = null;
  const closeAll = async (): Promise<void> => {
    watch?.stop();
    unfollowLocal?.();
    await balancing?.stop();
    await checker?.stop();
    await local?.close({ keep }).catch((err: unknown) => log.error({ err: (err as Error).message }, 'cannot remove the local endpoint data plane'));
    // close() waits for open connections; a status client must not hold up the exit
    const closed = new Promise<void>((r) => admin.close(() => r()));
    admin.closeAllConnections();
    await closed;
    lock.close();
  };

  if (v && resolved && fixed) {
    const { iface, primary } = resolved;
    const opts: EngineOptions = {
      vrid: v.vrid,
      priority: v.priority,
      advertisementIntervalCs: v.advertisementIntervalCs,
      preempt: v.preempt,
      preemptDelayMs: v.preemptDelayMs,
      checksum: v.checksum,
      unicast: v.unicast,
      peers: [...v.peers],
      authKeys,
      vips: [...config.vips],
      family: config.family,
      ifname: iface.ifname,
      ifindex: iface.ifindex,
      mac: iface.mac,
      primaryAddress: primary,
      announce: { ...config.announce },
      vipLifetimeMs: config.vipLifetimeMs,
      // with backends, no preemption until the policy says this node can serve (first verdicts, data plane)
      preemptHoldAtStart: config.apiserver.backends.length > 0,
      linkRunning: iface.running,
      owner: v.owner,
    };
    const onEvent = (ev: EngineEvent | { type: 'crash'; error: Error }): void => {
      if (ev.type === 'transition') {
        const extra = { ...(ev.detail ? { detail: ev.detail } : {}), ...(ev.previousMaster ? { previousMaster: ev.previousMaster } : {}) };
        log.info({ from: statusState(ev.from), to: statusState(ev.to), reason: ev.reason, ...extra, vrid: v.vrid, at: ev.at }, 'state change');
        if (ev.previousMaster && ev.reason === 'masterDown' && checker) {
          // the old master went silent: its node, and so its apiserver, is most likely gone
          // (a resign is a clean agent stop: its apiserver may well still serve)
          // (the planes follow the resulting dead verdicts themselves)
          for (const b of backendsOfNode(checker.backends(), ev.previousMaster)) {
            if (checker.markDead(b, { kind: 'nodeDown', node: ev.previousMaster }, 'node down (VRRP Master_Down)')) log.warn({ backend: formatHostPort(b) }, 'backend of the silent master taken out');
          }
        }
      } else if (ev.type === 'log') {
        log[ev.level]({ vrid: v.vrid, ...ev.fields }, ev.msg);
      } else if (ev.type === 'interfaceGone') {
        log.error({ code: 'BALLAST_E_INTERFACE_GONE', interface: ev.ifname }, 'the interface was deleted; exiting so that the supervisor restarts the agent');
        void (async () => {
          await host?.stop();
          await closeAll();
          finish(ERRORS.BALLAST_E_INTERFACE_GONE.exitCode);
        })();
      } else {
        log.fatal({ err: ev.error.message }, 'election worker died; removing the VIPs and exiting');
        void (async () => {
          if (!opts.owner) await removeVips(iface.ifindex, config.vips, log);
          await closeAll();
          finish(1);
        })();
      }
    };

    log.info(
      { interface: iface.ifname, family: config.family, source: primary, vips: config.vips, vrid: v.vrid, priority: v.priority, advertisementIntervalMs: v.advertisementIntervalMs, mode: v.unicast ? 'unicast' : 'multicast', auth: v.auth !== null, localEndpoint: local?.status().endpoints ?? [], admin: `${config.admin.listen.host}:${config.admin.listen.port}` },
      'starting',
    );
    try {
      host = await VrrpHost.start(opts, onEvent);
    } catch (err) {
      await local?.close({ keep }).catch(() => undefined);
      admin.close();
      lock.close();
      throw engineError(err);
    }
    if (checker) {
      try {
        balancing = await startBalancing(config, iface, log, host, checker);
      } catch (err) {
        // nothing may stay behind: resign and remove the VIPs, close what is open
        await host.stop();
        await local?.close({ keep }).catch(() => undefined);
        admin.close();
        lock.close();
        throw err;
      }
    }
  } else {
    log.info({ localEndpoint: local?.status().endpoints ?? [], mode: local?.mode ?? 'off', backends: config.apiserver.backends.length, admin: `${config.admin.listen.host}:${config.admin.listen.port}` }, 'starting (no election: local endpoint only)');
  }

  if (checker) {
    // the planes follow verdicts (their own subscriptions); here: the log and the policy
    checker.on('change', (c) => {
      log.info({ backend: formatHostPort(c.backend), from: c.from, to: c.to, reason: c.reason, ...(c.cause ? { cause: c.cause.kind } : {}) }, 'backend health');
      balancing?.evaluate();
    });
    checker.on('verdict', (v) => {
      if (v.state !== 'up') log.info({ backend: formatHostPort(v.backend), verdict: v.state, cause: v.cause.kind, reason: v.message }, 'backend verdict');
    });
    watch = startPassiveDetection(config, checker, log, local !== null && local.mode === 'ebpf');
    if (local?.mode === 'ebpf' && !(config.vrrp !== null && config.dataplane.vip === 'nftables')) {
      log.info(
        {},
        'dead backends of the local endpoint are seen at once from conntrack events only where connection tracking is active in this network namespace (kube-proxy or an nftables NAT rule turn it on); otherwise they leave after fall × interval of failed checks',
      );
    }
    // the endpoint exists (with no backend yet: connect()s untouched) before the first check
    await localLb?.sync();
    checker.start();
    balancing?.evaluate();
  }

  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      log.info(host ? 'stopping: resigning (priority 0) if master, removing the VIPs' : 'stopping');
      await host?.stop();
      await closeAll();
      log.info('stopped');
      finish(0);
    })();
    return stopping;
  };
  return { status, stop, done };
}

/** Last-resort cleanup from the main thread when the worker died holding the VIPs. */
async function removeVips(ifindex: number, vips: readonly string[], log: Logger): Promise<void> {
  const rt = openRtnl();
  try {
    for (const vip of vips) await delVip(rt, ifindex, vip);
  } catch (err) {
    log.error({ err: (err as Error).message }, 'could not remove the VIPs');
  } finally {
    rt.close();
  }
}

/** The VIP's load balancing and the election policy that follows backend health. */
interface Balancing {
  /** The nftables plane's /status part; null with `dataplane.vip: none`. */
  dataplane(): DataplaneStatus | null;
  /** Re-evaluates the policy (priority, preempt hold) from the current health. */
  evaluate(): void;
  stop(): Promise<void>;
}

/** The data-plane part of /status. */
function dataplaneStatus(config: Config, lb: DataplaneStatus | null): StatusDocument['dataplane'] {
  if (config.vrrp === null) return { mode: 'off', reason: 'no election (vrrp absent)' };
  if (config.dataplane.vip === 'none') return { mode: 'none' };
  if (lb === null) return { mode: 'off', reason: 'no apiserver.backends configured' };
  return lb;
}

/**
 * Starts the nftables data plane for the VIPs, fed by `checker` (unless `dataplane.vip: none`),
 * and the election policy.
 * @throws BallastError BALLAST_E_DATAPLANE when the first apply fails (nothing else changed).
 */
async function startBalancing(config: Config, iface: InterfaceInfo, log: Logger, host: VrrpHost, checker: HealthChecker): Promise<Balancing> {
  const api = config.apiserver;
  const local = new Set(iface.addresses.map((a) => a.address));
  const localBackend = config.policy.localBackend
    ? formatHostPort(config.policy.localBackend)
    : (api.backends.filter((b) => local.has(b.host)).map(formatHostPort)[0] ?? null);
  let lb: Reconciler<LoadBalancer> | null = null;
  let unfollow: (() => void) | null = null;
  let applier: NftablesApplier | null = null;
  let dataplaneReady = config.dataplane.vip === 'none';

  if (config.dataplane.vip === 'nftables') {
    applier = new NftablesApplier();
    const a = applier;
    const plane = new LoadBalancer(
      { apply: (d) => a.apply(d), flush: (vip, port, backend) => flushBackend(vip, port, backend), log },
      { family: config.family, vips: config.vips, port: api.port, local },
    );
    // the VIP plane follows the verdicts: one subscription
    lb = new Reconciler(plane, checker, { log, ...VIP_PLANE_MESSAGES });
    unfollow = lb.follow();
    // the table exists (with no DNAT rule while nothing is healthy) before the first check
    await lb.sync();
    if (lb.status().failures > 0) {
      throw createError('BALLAST_E_DATAPLANE', `cannot program nftables: ${lb.status().lastError ?? 'unknown error'}`);
    }
    dataplaneReady = true;
    if (readForwarding(config.family) === false) {
      log.warn({ family: config.family }, 'IP forwarding is off: connections DNATed to apiservers on other nodes will fail (kubeadm requires net.ipv4.ip_forward=1)');
    }
  }

  // the settle time starts now: the first checks start now, after the first apply
  const policy = new Policy(
    {
      priority: config.vrrp!.priority,
      weight: config.policy.unhealthyPriorityWeight,
      mode: config.dataplane.vip,
      localBackend,
      settleMs: api.health.settleMs,
    },
    host,
    performance.now(),
  );
  const evaluate = (): void => {
    // only the VIP's family can serve the VIP (other backends serve a local endpoint of theirs)
    const ours = checker.snapshot({ family: config.family });
    const r = policy.update(ours, dataplaneReady, performance.now());
    log.debug({ priority: r.priority, preemptHold: r.hold }, 'policy');
  };
  // the settle deadline passes without an event: look again then
  const settleTimer = setTimeout(evaluate, api.health.settleMs + 10);
  settleTimer.unref();

  const vip = lb;
  return {
    dataplane: () => (vip ? { ...vip.plane.status(), ...vip.status() } : null),
    evaluate,
    async stop() {
      clearTimeout(settleTimer);
      unfollow?.();
      if (applier && !config.dataplane.keepOnStop) {
        await applier.remove().catch((err: unknown) => log.error({ err: (err as Error).message }, 'cannot remove the nftables table'));
      }
    },
  };
}

/**
 * Passive detection from conntrack events: flows DNATed from the VIPs (nftables data plane) and,
 * with the ebpf local endpoint, flows straight to the backends (the connect() rewrite leaves
 * no NAT to see). Needs connection tracking active in this network namespace (it is wherever
 * an nftables NAT rule or kube-proxy runs).
 */
function startPassiveDetection(config: Config, checker: HealthChecker, log: Logger, direct: boolean): ConntrackWatch | null {
  const vipPath = config.vrrp !== null && config.dataplane.vip === 'nftables';
  if (!vipPath && !direct) return null;
  const api = config.apiserver;
  const tracker = new FlowTracker(
    vipPath ? config.vips : [],
    api.port,
    Math.max(200, Math.min(1000, api.health.timeoutMs)),
    direct ? api.backends : [],
  );
  let lostLogged = -Infinity;
  return watchConntrack(
    tracker,
    (v) => {
      if (v.alive) return;
      // a dead verdict follows (also for a backend already draining); the planes reset it
      if (checker.markDead(v.backend, { kind: 'passive', signal: v.signal }, v.reason)) log.warn({ backend: formatHostPort(v.backend), reason: v.reason }, 'backend judged dead from its connections');
    },
    {
      onExit: (code, err) => log.warn({ code, err }, 'conntrack event watch ended: passive detection is off (it needs CAP_NET_ADMIN and ctnetlink, module nf_conntrack_netlink)'),
      // a burst overflowed the socket buffer: some flows are not followed; active checks still are
      onLost: () => {
        const now = performance.now();
        if (now - lostLogged < 10_000) return;
        lostLogged = now;
        log.warn({}, 'conntrack events were lost (receive buffer full); passive detection missed some connections');
      },
    },
  );
}

/**
 * Opens the node-local endpoint's data plane: `ebpf` (falling back to `proxy`, logged, when this
 * host cannot run it) or `proxy`. With `ebpf` on a node with VIPs, VIP:apiserver.port is an
 * endpoint too, so this node's own clients of the VIP are balanced without the DNAT hairpin.
 * @throws BallastError BALLAST_E_LOCAL_ENDPOINT_IN_USE when something already listens on an
 *   endpoint's port (unless localEndpoint.force), BALLAST_E_DATAPLANE when neither mode starts.
 */
async function startLocalDataplane(config: Config, log: Logger): Promise<LocalDataplane> {
  const le = config.localEndpoint!;
  const endpoints: LocalEndpoint[] = le.addresses.map((a) => ({ address: a.host, port: a.port }));
  const busy = endpoints.filter((e) => listeningOn(e.address, e.port));
  if (busy.length > 0 && !le.force) {
    throw createError(
      'BALLAST_E_LOCAL_ENDPOINT_IN_USE',
      `localEndpoint.address: something on this node already listens on ${busy.map((e) => hostPort(e.address, e.port)).join(', ')}; its clients would be taken over. Pick another port (7443 is the convention), or set localEndpoint.force: true`,
    );
  }
  if (busy.length > 0) log.warn({ endpoints: busy.map((e) => hostPort(e.address, e.port)) }, 'localEndpoint.force: taking over an address something already listens on; its clients are balanced from now on');
  if (config.dataplane.local === 'ebpf') {
    const vipEndpoints = config.vrrp !== null ? config.vips.map((vip) => ({ address: vip, port: config.apiserver.port })) : [];
    let cgroup: string | null = null;
    if (le.cgroup !== undefined) {
      // a configured cgroup that is wrong is the operator's typo, not a host without eBPF
      cgroup = await checkCgroupDir(le.cgroup);
    } else {
      cgroup = await cgroup2Root().catch(() => null);
    }
    if (cgroup !== null) {
      const pinDir = pinDirFor(cgroup);
      const lock = lockPinDir(pinDir, cgroup);
      try {
        const dp = await EbpfLocalDataplane.open({ endpoints: [...endpoints, ...vipEndpoints], cgroup, pinDir, log });
        return withRelease(dp, () => lock.release());
      } catch (err) {
        lock.release();
        const check = await checkEbpf().catch(() => ({ ok: false, reasons: ['ballast check itself failed'] }));
        // the host can run eBPF (check attached to a test cgroup): this failure is ours to report
        if (check.ok) throw createError('BALLAST_E_DATAPLANE', `cannot start the eBPF local endpoint: ${(err as Error).message}`, { cause: err });
        log.warn(
          { err: (err as Error).message, reasons: check.reasons },
          'eBPF local endpoint unavailable on this host; serving it with the user-space proxy instead (the slower path: every byte is copied through the agent). `ballast check` explains why',
        );
      }
    } else {
      log.warn({ reasons: ['no cgroup v2 hierarchy is mounted'] }, 'eBPF local endpoint unavailable on this host; serving it with the user-space proxy instead (the slower path)');
    }
  }
  try {
    const dp = await ProxyLocalDataplane.open({ endpoints, log });
    log.info({ endpoints: endpoints.map((e) => hostPort(e.address, e.port)) }, 'local endpoint served by the user-space proxy (slower path than ebpf)');
    return dp;
  } catch (err) {
    throw createError('BALLAST_E_DATAPLANE', `cannot serve the local endpoint: ${(err as Error).message}`, { cause: err });
  }
}

/** `dp` whose close() also runs `release` (after the data plane is closed). */
function withRelease(dp: LocalDataplane, release: () => void): LocalDataplane {
  const close = dp.close.bind(dp);
  dp.close = async (o) => {
    try {
      await close(o);
    } finally {
      release();
    }
  };
  return dp;
}

/** net.ipv4.ip_forward / net.ipv6.conf.all.forwarding, or null when unreadable. */
function readForwarding(family: 4 | 6): boolean | null {
  try {
    const p = family === 4 ? '/proc/sys/net/ipv4/ip_forward' : '/proc/sys/net/ipv6/conf/all/forwarding';
    return readFileSync(p, 'utf8').trim() === '1';
  } catch {
    return null;
  }
}

/** The election knows when the Active router went silent: its node's apiserver is gone too. The backends on `nodeAddress` (any spelling). */
export function backendsOfNode(backends: readonly HostPort[], nodeAddress: string): HostPort[] {
  const family = addressFamily(nodeAddress);
  if (family === null) return [];
  const node = canonicalAddress(nodeAddress);
  return backends.filter((b) => b.family === family && b.host === node);
}
