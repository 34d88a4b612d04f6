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
import { formatAddress, HealthChecker, type BackendHealth } from './health/checker.js';
import { FlowTracker, watchConntrack, type ConntrackWatch } from './health/passive.js';
import { LoadBalancer, type DataplaneStatus } from './dataplane/controller.js';
import { NftablesApplier } from './dataplane/apply.js';
import { flushBackend } from './dataplane/conntrack.js';
import { Policy } from './policy.js';
import { describeReadError, parseAuthKey } from './config/files.js';

/**
 * The shared key of vrrp.auth.keyFile, read at start (loadConfig checked it already; this is the
 * read that counts, in case the file changed since).
 * @throws BallastError BALLAST_E_CONFIG_READ when it cannot be read or is no key.
 */
function readAuthKey(path: string): Buffer {
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
  } catch (err) {
    throw createError('BALLAST_E_CONFIG_READ', `vrrp.auth.keyFile: cannot read ${path}: ${describeReadError(err)}`, { cause: err });
  }
  const key = parseAuthKey(bytes);
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
  const owner = config.vrrp.priority === 255;
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
export async function acquireInstanceLock(ifname: string, family: 4 | 6, vrid: number): Promise<NetServer> {
  const name = `ballast:${ifname}:ipv${family}:vrid${vrid}`;
  const server = createServer((c) => c.destroy());
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ path: `\0${name}` }, () => resolve());
    });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE') {
      throw createError('BALLAST_E_ALREADY_RUNNING', `another ballast agent already runs VRID ${vrid} (IPv${family}) on ${ifname} in this network namespace (lock @${name})`);
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
 * Starts the agent: checks the interface, binds the admin endpoint, then starts the election.
 * @throws BallastError (see errors.ts) — in that case nothing on the system was changed, except
 *   that VIPs left by an earlier run may have been removed.
 */
export async function startAgent(config: Config, log: Logger): Promise<Agent> {
  const missing = missingCapabilities();
  if (missing.length > 0) {
    throw createError('BALLAST_E_PERMISSION', `this process lacks ${missing.join(' and ')}: run as root, or grant CAP_NET_RAW and CAP_NET_ADMIN`);
  }
  // before anything is opened: a key that went missing since validation changes nothing
  const authKey = config.vrrp.auth ? readAuthKey(config.vrrp.auth.keyFile) : null;
  const { iface, primary } = await resolveInterface(config);
  const lock = await acquireInstanceLock(iface.ifname, config.family, config.vrrp.vrid);
  const v = config.vrrp;
  const fixed = {
    vips: [...config.vips],
    interface: iface.ifname,
    family: config.family,
    primaryAddress: primary,
    peers: v.peers,
    advertisementIntervalMs: v.advertisementIntervalMs,
  };
  let host: VrrpHost | null = null;
  let lb: LoadBalancer | null = null;
  let checker: HealthChecker | null = null;
  let balancing: Balancing | null = null;
  const status = async (): Promise<StatusDocument> => {
    if (!host) throw new Error('the election engine is not running');
    return statusDocument(await host.status(), fixed, {
      backends: checker?.snapshot() ?? [],
      dataplane: dataplaneStatus(config, lb?.status() ?? null),
    });
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

  const opts: EngineOptions = {
    vrid: v.vrid,
    priority: v.priority,
    advertisementIntervalCs: v.advertisementIntervalCs,
    preempt: v.preempt,
    preemptDelayMs: v.preemptDelayMs,
    checksum: v.checksum,
    unicast: v.unicast,
    peers: [...v.peers],
    authKey,
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
    owner: v.priority === 255,
  };

  let finish!: (code: number) => void;
  const done = new Promise<number>((r) => (finish = r));
  let stopping: Promise<void> | null = null;

  const onEvent = (ev: EngineEvent | { type: 'crash'; error: Error }): void => {
    if (ev.type === 'transition') {
      const extra = { ...(ev.detail ? { detail: ev.detail } : {}), ...(ev.previousMaster ? { previousMaster: ev.previousMaster } : {}) };
      log.info({ from: statusState(ev.from), to: statusState(ev.to), reason: ev.reason, ...extra, vrid: v.vrid, at: ev.at }, 'state change');
      if (ev.previousMaster && ev.reason === 'masterDown' && checker) {
        // the old master went silent: its node, and so its apiserver, is most likely gone
        // (a resign is a clean agent stop: its apiserver may well still serve)
        for (const b of backendsOfNode(checker.snapshot(), ev.previousMaster)) {
          if (checker.markDead(b, 'node down (VRRP Master_Down)')) log.warn({ backend: b }, 'backend of the silent master taken out');
        }
        lb?.noteHealth();
      }
    } else if (ev.type === 'log') {
      log[ev.level]({ vrid: v.vrid, ...ev.fields }, ev.msg);
    } else if (ev.type === 'interfaceGone') {
      log.error({ code: 'BALLAST_E_INTERFACE_GONE', interface: ev.ifname }, 'the interface was deleted; exiting so that the supervisor restarts the agent');
      void (async () => {
        await host?.stop();
        await balancing?.stop();
        admin.close();
        lock.close();
        finish(ERRORS.BALLAST_E_INTERFACE_GONE.exitCode);
      })();
    } else {
      log.fatal({ err: ev.error.message }, 'election worker died; removing the VIPs and exiting');
      void (async () => {
        if (!opts.owner) await removeVips(iface.ifindex, config.vips, log);
        await balancing?.stop();
        admin.close();
        lock.close();
        finish(1);
      })();
    }
  };

  log.info(
    { interface: iface.ifname, family: config.family, source: primary, vips: config.vips, vrid: v.vrid, priority: v.priority, advertisementIntervalMs: v.advertisementIntervalMs, mode: v.unicast ? 'unicast' : 'multicast', auth: v.auth !== null, admin: `${config.admin.listen.host}:${config.admin.listen.port}` },
    'starting',
  );
  try {
    host = await VrrpHost.start(opts, onEvent);
  } catch (err) {
    admin.close();
    lock.close();
    throw engineError(err);
  }

  try {
    balancing = await startBalancing(config, iface, log, host);
  } catch (err) {
    // nothing may stay behind: resign and remove the VIPs, close what is open
    await host.stop();
    admin.close();
    lock.close();
    throw err;
  }
  lb = balancing?.lb ?? null;
  checker = balancing?.checker ?? null;

  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      log.info('stopping: resigning (priority 0) if master, removing the VIPs');
      await host?.stop();
      await balancing?.stop();
      // close() waits for open connections; a status client must not hold up the exit
      const closed = new Promise<void>((r) => admin.close(() => r()));
      admin.closeAllConnections();
      await closed;
      lock.close();
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

/** Everything load balancing runs: health checks, passive detection, the data plane, the policy. */
interface Balancing {
  lb: LoadBalancer | null;
  checker: HealthChecker;
  stop(): Promise<void>;
}

/** The data-plane part of /status. */
function dataplaneStatus(config: Config, lb: DataplaneStatus | null): StatusDocument['dataplane'] {
  if (config.dataplane.vip === 'none') return { mode: 'none' };
  if (lb === null) return { mode: 'off', reason: 'no apiserver.backends configured' };
  return lb;
}

/**
 * Starts health checks of `apiserver.backends`, the nftables data plane fed by them (unless
 * `dataplane.vip: none`), passive detection from conntrack events, and the election policy.
 * Returns null when no backends are configured (VIP only).
 * @throws BallastError BALLAST_E_DATAPLANE when the first apply fails (nothing else changed).
 */
async function startBalancing(config: Config, iface: InterfaceInfo, log: Logger, host: VrrpHost): Promise<Balancing | null> {
  const api = config.apiserver;
  if (api.backends.length === 0) return null;
  const local = new Set(iface.addresses.map((a) => a.address));
  const checker = new HealthChecker({ health: api.health, backends: api.backends, logger: log });
  const localBackend = config.policy.localBackend
    ? formatAddress(config.policy.localBackend)
    : (api.backends.filter((b) => local.has(b.host)).map(formatAddress)[0] ?? null);
  let lb: LoadBalancer | null = null;
  let applier: NftablesApplier | null = null;
  let watch: ConntrackWatch | null = null;
  let dataplaneReady = config.dataplane.vip === 'none';
  const evaluate = (): void => {
    const r = policy.update(checker.snapshot(), dataplaneReady, performance.now());
    log.debug({ priority: r.priority, preemptHold: r.hold }, 'policy');
  };

  if (config.dataplane.vip === 'nftables') {
    applier = new NftablesApplier();
    const a = applier;
    lb = new LoadBalancer(
      {
        apply: (d) => a.apply(d),
        flush: (vip, port, backend) => flushBackend(vip, port, backend),
        snapshot: () => checker.snapshot(),
        log,
      },
      { family: config.family, vips: config.vips, port: api.port, local },
    );
    // the table exists (with no DNAT rule while nothing is healthy) before the first check
    await lb.sync();
    if (lb.status().failures > 0) {
      throw createError('BALLAST_E_DATAPLANE', `cannot program nftables: ${lb.status().lastError ?? 'unknown error'}`);
    }
    dataplaneReady = true;
    if (readForwarding(config.family) === false) {
      log.warn({ family: config.family }, 'IP forwarding is off: connections DNATed to apiservers on other nodes will fail (kubeadm requires net.ipv4.ip_forward=1)');
    }
    const tracker = new FlowTracker(config.vips, api.port, Math.max(200, Math.min(1000, api.health.timeoutMs)));
    watch = watchConntrack(
      tracker,
      (v) => {
        if (v.alive) return;
        if (checker.markDead(v.backend, v.reason)) log.warn({ backend: v.backend, reason: v.reason }, 'backend judged dead from its connections');
        lb?.noteHealth();
      },
      { onExit: (code, stderr) => log.warn({ code, stderr }, 'conntrack event watcher ended: passive detection is off (is the conntrack package installed?)') },
    );
  }

  // the settle time starts now: the first checks start now, after the first apply
  const policy = new Policy(
    {
      priority: config.vrrp.priority,
      weight: config.policy.unhealthyPriorityWeight,
      mode: config.dataplane.vip,
      localBackend,
      // every backend checked `rise` (or `fall`) times, plus one interval of jitter and a timeout
      settleMs: (Math.max(api.health.rise, api.health.fall) + 1) * api.health.intervalMs + api.health.timeoutMs,
    },
    host,
    performance.now(),
  );
  checker.on('change', (c) => {
    log.info({ backend: c.backend, from: c.from, to: c.to, reason: c.reason }, 'backend health');
    lb?.onChange(c);
    evaluate();
  });
  checker.on('check', () => lb?.noteHealth());
  checker.start();
  evaluate();
  // the settle deadline passes without an event: look again then
  const settleTimer = setTimeout(evaluate, (Math.max(api.health.rise, api.health.fall) + 1) * api.health.intervalMs + api.health.timeoutMs + 10);
  settleTimer.unref();

  return {
    lb,
    checker,
    async stop() {
      clearTimeout(settleTimer);
      watch?.stop();
      await checker.stop();
      if (applier && !config.dataplane.keepOnStop) {
        await applier.remove().catch((err: unknown) => log.error({ err: (err as Error).message }, 'cannot remove the nftables table'));
      }
    },
  };
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

/** The election knows when the Active router went silent: its node's apiserver is gone too. */
export function backendsOfNode(snapshot: readonly BackendHealth[], nodeAddress: string): string[] {
  return snapshot.filter((b) => b.address.startsWith(`${nodeAddress}:`) || b.address.startsWith(`[${nodeAddress}]:`)).map((b) => b.address);
}
