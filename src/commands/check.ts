/**
 * `ballast check [--config FILE] [--json]`: a kubeadm-style preflight. This file runs the checks of
 * src/check/ (one module per group) in their fixed order and prints the report. Every check says ok,
 * warn or fail, and how to fix a warn or a fail (report.ts); docs/check.md lists every check id.
 *
 *   ballast check --config /etc/ballast/ballast.yaml       the node against that configuration
 *   ballast check                                          the host check only (the eBPF local endpoint)
 *
 * Exit status: 0 all ok, 1 the worst is a warning, 2 a check failed (exitStatus in report.ts);
 * a configuration that does not validate exits 2 with `ballast validate`'s message.
 *
 * Changes nothing on the node: the probes are an ARP probe / a DAD solicitation (nobody learns
 * anything from them), the ruleset is checked with `nft -c` (parsed and validated by the kernel
 * in a batch that is never committed), the eBPF check attaches to a temporary cgroup of its own.
 *
 * The slow parts run side by side: the VRRP listen (3 × Advertisement_Interval), the VIP probe
 * (half a second, probe.ts) and the backend certificates (certificates.ts, owned by checkcert).
 */
import type { Config } from '../config/index.js';
import { ConfigError, isBallastError } from '../errors.js';
import { checkBackendCertificates } from '../check/certificates.js';
import { bgpArpResult, bgpResults } from '../check/bgp.js';
import { discoveryServerResult } from '../check/discovery.js';
import { firewallResult, foreignFirewall } from '../check/foreign-firewall.js';
import { forwardingResult, readSysctl, rulesetResult, vipPlaneBackends } from '../check/forwarding.js';
import { flowsFor } from '../check/firewall.js';
import { ebpfResult, privilegesResult, realtimeResult } from '../check/host.js';
import { interfaceResults } from '../check/interface.js';
import { membershipResult } from '../check/membership.js';
import { checkPorts } from '../check/ports.js';
import { exitStatus, fail, warn, type CheckReport, type CheckResult } from '../check/report.js';
import { unitSandbox, type Sandbox } from '../check/unit.js';
import { segmentResults } from '../check/vrrp.js';
import { commandExecutor, type Executor } from '../dataplane/apply.js';
import { checkEbpf } from '../dataplane/ebpf.js';
import { listAllInterfaces } from '../host/interfaces.js';
import { currentListeners } from '../net/listening.js';
import type { InterfaceInfo } from '../vip/netlink.js';
import { sysctlPath } from '../vip/noarp.js';

/** Options of {@link runChecks}. */
export interface CheckOptions {
  /** The configuration file's path, for the report. */
  source: string;
  /** How `nft` is run (default: `nft` on PATH, 5 s limit). */
  nft?: Executor;
  /** Listening time for VRRP adverts, ms (default 3 × Advertisement_Interval). */
  vrrpListenMs?: number;
  /** Timeout of one backend's TLS handshake, ms (passed to checkBackendCertificates). */
  certificateTimeoutMs?: number;
  /** The installed unit's sandbox (unit.ts); default {@link unitSandbox}: null under the unit or when none is installed. */
  unit?: Sandbox | null;
}

/**
 * The host checks alone (no configuration): the eBPF local endpoint, as `ballast check` did
 * before it took a configuration (exit 0 when the host can run it, 1 when not).
 */
export async function runHostChecks(opts: { unit?: Sandbox | null } = {}): Promise<{ report: CheckReport; ebpf: { ok: boolean; reasons: string[] } }> {
  const e = await checkEbpf();
  return { report: { config: '', checks: [ebpfResult(e, false, opts.unit === undefined ? unitSandbox() : opts.unit)] }, ebpf: e };
}

/**
 * Runs every check of `config` on this node (see docs/check.md), in a fixed order.
 * Resolves, never rejects: a check that cannot run reports why as a warn or a fail.
 */
export async function runChecks(config: Config, opts: CheckOptions): Promise<CheckReport> {
  const nft = opts.nft ?? commandExecutor(['nft']);
  const unit = opts.unit === undefined ? unitSandbox() : opts.unit;
  const checks: CheckResult[] = [];
  const priv = privilegesResult();
  checks.push(priv);
  let all: InterfaceInfo[] = [];
  try {
    all = await listAllInterfaces();
  } catch (err) {
    checks.push(fail('interface', 'the interface', (err as Error).message, 'run the check as root on the node'));
  }
  const nodeAddresses = new Set(all.flatMap((i) => i.addresses.map((a) => a.address)));
  const v = config.vrrp;
  let iface: InterfaceInfo | null = null;
  const certificates = checkBackendCertificates(config, opts.certificateTimeoutMs === undefined ? {} : { timeoutMs: opts.certificateTimeoutMs }).catch(
    (err: Error): CheckResult[] => [warn('backend-certificate', 'backend certificates', `the certificate checks did not run: ${err.message}`, 'see the error')],
  );

  if (v && all.length > 0) {
    const r = interfaceResults(config, all);
    checks.push(...r.checks);
    iface = r.iface;
  }

  // the slow listens side by side: VRRP adverts, the VIP probes, the certificates
  if (v && iface && priv.status === 'ok' && iface.running) {
    checks.push(...(await segmentResults(config, iface, nodeAddresses, opts.vrrpListenMs ?? 3 * v.advertisementIntervalMs)));
  }

  if (v && iface)
    checks.push(
      membershipResult(
        config,
        iface.ifname,
        iface.addresses.map((a) => a.address),
      ),
    );

  checks.push(forwardingResult(config, nodeAddresses));
  if (vipPlaneBackends(config, nodeAddresses).length > 0) checks.push(await rulesetResult(config, nodeAddresses, nft));
  if (config.bgp && all.length > 0) checks.push(...(await bgpResults(config, all)));
  const arp = bgpArpResult(config, (key) => readSysctl(sysctlPath(key)), unit);
  if (arp) checks.push(arp);
  const server = discoveryServerResult(config);
  if (server) checks.push(server);
  if (config.localEndpoint && config.dataplane.local === 'ebpf') checks.push(ebpfResult(await checkEbpf(), true, unit));
  if (v && v.realtimePriority > 0 && unit) checks.push(realtimeResult(v, unit));
  checks.push(...checkPorts(config, currentListeners()));
  if (v || config.apiserver.backends.length > 0) {
    const hooks = flowsFor({
      family: config.family,
      vips: config.vips,
      port: config.apiserver.port,
      backends: config.apiserver.backends,
      nodeAddresses,
      ...(iface ? { ifname: iface.ifname } : {}),
    });
    checks.push(firewallResult(await foreignFirewall(hooks, config.family, nft)));
  }
  checks.push(...(await certificates));
  return { config: opts.source, checks };
}

/** The report as kubeadm prints its preflight: `[ok] title: detail`, with `fix:` under a warn or fail. */
export function formatReport(report: CheckReport): string {
  const lines: string[] = [];
  for (const c of report.checks) {
    lines.push(`[${c.status}] ${c.id}: ${c.title}`);
    lines.push(`       ${c.detail}`);
    if (c.fix) lines.push(`       fix: ${c.fix}`);
  }
  const n = (s: CheckResult['status']): number => report.checks.filter((c) => c.status === s).length;
  const code = exitStatus(report.checks);
  lines.push(
    `${report.config ? `${report.config}: ` : ''}${n('ok')} ok, ${n('warn')} warning${n('warn') === 1 ? '' : 's'}, ${n('fail')} failed${code === 2 ? ': this node is not ready to run ballast' : code === 1 ? '' : ': ready'}`,
  );
  return `${lines.join('\n')}\n`;
}

/**
 * `ballast check`: with `config`, {@link runChecks} on that file; without, the host check only.
 * Prints the report as text (formatReport) or, with `json`, the CheckReport. Without a
 * configuration `--json` keeps the shape it had before the preflight: `{ ok, reasons }` of the
 * eBPF check (docs/check.md).
 * @returns the exit status: 0 / 1 / 2 (exitStatus).
 * @throws ConfigError (exit 2) when the file does not validate.
 */
export async function checkCommand(o: { config?: string; json?: boolean }, load: (path: string) => Config): Promise<number> {
  if (o.config === undefined) {
    const h = await runHostChecks();
    process.stdout.write(o.json ? `${JSON.stringify(h.ebpf)}\n` : formatReport(h.report));
    return exitStatus(h.report.checks);
  }
  let config: Config;
  try {
    config = load(o.config);
  } catch (err) {
    // --json: a script still gets a report (one failed `config` check), and the message on stderr
    if (o.json && (err instanceof ConfigError || isBallastError(err))) {
      const bad: CheckReport = {
        config: o.config,
        checks: [fail('config', `${o.config} is a valid configuration`, (err as Error).message, `ballast validate --config ${o.config} lists every problem`)],
      };
      process.stdout.write(`${JSON.stringify(bad, null, 2)}\n`);
    }
    throw err;
  }
  const report = await runChecks(config, { source: o.config });
  process.stdout.write(o.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
  return exitStatus(report.checks);
}
