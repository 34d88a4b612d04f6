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
  const detail = e.syscall ? `${e.message}` : e.message;
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
  const status = async (): Promise<StatusDocument> => {
    if (!host) throw new Error('the election engine is not running');
    return statusDocument(await host.status(), fixed);
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
    peers: [...v.peers],
    vips: [...config.vips],
    family: config.family,
    ifname: iface.ifname,
    ifindex: iface.ifindex,
    mac: iface.mac,
    primaryAddress: primary,
    announce: { ...config.announce },
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
    } else if (ev.type === 'log') {
      log[ev.level]({ vrid: v.vrid, ...ev.fields }, ev.msg);
    } else if (ev.type === 'interfaceGone') {
      log.error({ code: 'BALLAST_E_INTERFACE_GONE', interface: ev.ifname }, 'the interface was deleted; exiting so that the supervisor restarts the agent');
      void (async () => {
        await host?.stop();
        admin.close();
        lock.close();
        finish(ERRORS.BALLAST_E_INTERFACE_GONE.exitCode);
      })();
    } else {
      log.fatal({ err: ev.error.message }, 'election worker died; removing the VIPs and exiting');
      void (async () => {
        if (!opts.owner) await removeVips(iface.ifindex, config.vips, log);
        admin.close();
        lock.close();
        finish(1);
      })();
    }
  };

  log.info(
    { interface: iface.ifname, family: config.family, source: primary, vips: config.vips, vrid: v.vrid, priority: v.priority, advertisementIntervalMs: v.advertisementIntervalMs, mode: v.peers.length ? 'unicast' : 'multicast', admin: `${config.admin.listen.host}:${config.admin.listen.port}` },
    'starting',
  );
  try {
    host = await VrrpHost.start(opts, onEvent);
  } catch (err) {
    admin.close();
    lock.close();
    throw engineError(err);
  }

  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      log.info('stopping: resigning (priority 0) if master, removing the VIPs');
      await host?.stop();
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
