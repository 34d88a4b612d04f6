/**
 * The `port-admin`, `port-local-endpoint` and `port-vip` checks: who listens where the agent will
 * bind or balance, found through /proc/net/tcp* and /proc/PID/fd.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import type { Config } from '../config/index.js';
import { canonicalAddress } from '../net/address.js';
import { formatHostPort } from '../net/hostport.js';
import type { Listener } from '../net/listening.js';
import { runsVipDataPlane } from './forwarding.js';
import { fail, ok, warn, type CheckResult } from './report.js';

/** The pid and command of the process holding the socket `inode`, from /proc/PID/fd (proc(5)). */
export function socketOwner(inode: number | undefined, proc = '/proc'): { pid: number; command: string; cmdline: string } | null {
  if (inode === undefined || inode === 0) return null;
  const want = `socket:[${inode}]`;
  let pids: string[];
  try {
    pids = readdirSync(proc).filter((d) => /^\d+$/.test(d));
  } catch {
    return null;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`${proc}/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`${proc}/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      if (target !== want) continue;
      const read = (f: string): string => {
        try {
          return readFileSync(`${proc}/${pid}/${f}`, 'utf8');
        } catch {
          return '';
        }
      };
      return { pid: Number(pid), command: read('comm').trim(), cmdline: read('cmdline').split('\0').filter(Boolean).join(' ') };
    }
  }
  return null;
}

/** A ballast agent's command line: `… cli.js run …` or `ballast run …`. */
function isBallastAgent(cmdline: string): boolean {
  return /(?:^|[/\s])(?:ballast|cli\.js)\s+run\b/.test(cmdline);
}

/** Listeners a connect() to address:port would reach: bound to it, or to the wildcard. */
function listenersOn(address: string, port: number, all: readonly Listener[], exact = false): Listener[] {
  const a = canonicalAddress(address);
  const v4 = !a.includes(':');
  return all.filter((l) => l.port === port && (l.address === a || (!exact && (l.address === '::' || (v4 && l.address === '0.0.0.0')))));
}

function describeOwner(l: Listener): { text: string; ballast: boolean } {
  const o = socketOwner(l.inode);
  const where = `${l.address.includes(':') ? `[${l.address}]` : l.address}:${l.port}`;
  if (!o) return { text: `a process (not found in /proc) listens on ${where}`, ballast: false };
  return { text: `${o.command} (pid ${o.pid}) listens on ${where}`, ballast: isBallastAgent(o.cmdline) };
}

/** The port checks of `config` against the sockets listening now (net/listening.ts currentListeners). */
export function checkPorts(config: Config, listeners: readonly Listener[]): CheckResult[] {
  const out: CheckResult[] = [];
  const admin = config.admin.listen;
  {
    const title = `admin.listen ${formatHostPort(admin)} is free`;
    const found = listenersOn(admin.host, admin.port, listeners).map(describeOwner);
    const others = found.filter((f) => !f.ballast);
    if (others.length > 0)
      out.push(
        fail(
          'port-admin',
          title,
          `${others.map((f) => f.text).join('; ')}: the agent cannot bind its admin endpoint (EADDRINUSE)`,
          'stop that process, or set admin.listen to a free port',
        ),
      );
    else if (found.length > 0) out.push(ok('port-admin', title, `held by a running ballast agent: ${found.map((f) => f.text).join('; ')}`));
    else out.push(ok('port-admin', title, 'nothing listens there'));
  }
  const le = config.localEndpoint;
  if (le && config.dataplane.local !== 'off') {
    for (const a of le.addresses) {
      const title = `local endpoint ${formatHostPort(a)} is free`;
      const found = listenersOn(a.host, a.port, listeners).map(describeOwner);
      const others = found.filter((f) => !f.ballast);
      const what =
        config.dataplane.local === 'ebpf'
          ? 'the eBPF connect() rewrite would shadow it (its clients would reach the apiservers instead)'
          : 'the proxy cannot bind it (EADDRINUSE)';
      if (others.length > 0 && le.force)
        out.push(
          warn(
            'port-local-endpoint',
            title,
            `${others.map((f) => f.text).join('; ')}; localEndpoint.force is set, so the agent starts anyway and ${what}`,
            'move that service or the local endpoint to another port',
          ),
        );
      else if (others.length > 0)
        out.push(
          fail(
            'port-local-endpoint',
            title,
            `${others.map((f) => f.text).join('; ')}: the agent refuses to start (${what})`,
            'stop that process, or give localEndpoint.address another port',
          ),
        );
      else if (found.length > 0) out.push(ok('port-local-endpoint', title, `held by a running ballast agent: ${found.map((f) => f.text).join('; ')}`));
      else out.push(ok('port-local-endpoint', title, 'nothing listens there'));
    }
  }
  if (runsVipDataPlane(config)) {
    for (const vip of config.vips) {
      const title = `no process is bound to the VIP ${formatHostPort({ host: vip, port: config.apiserver.port })} itself`;
      const found = listenersOn(vip, config.apiserver.port, listeners, true)
        .map(describeOwner)
        .filter((f) => !f.ballast);
      if (found.length > 0)
        out.push(
          warn(
            'port-vip',
            title,
            `${found.map((f) => f.text).join('; ')}: the nftables data plane DNATs every connection to VIP:${config.apiserver.port} to a backend, so it never gets one`,
            'bind that service to another address or port (an apiserver on the wildcard address is fine: it is a backend)',
          ),
        );
      else
        out.push(
          ok('port-vip', title, 'nothing is bound to the VIP itself (wildcard listeners such as the local apiserver are backends, reached through the DNAT)'),
        );
    }
  }
  return out;
}
