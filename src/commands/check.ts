/**
 * `ballast check`: runs the preflight of src/check/ and prints its report, kubeadm-style.
 */
import type { Config } from '../config/index.js';
import { ConfigError, isBallastError } from '../errors.js';
import { exitStatus, fail, runChecks, runHostChecks, type CheckReport, type CheckResult } from '../check/index.js';

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
  lines.push(`${report.config ? `${report.config}: ` : ''}${n('ok')} ok, ${n('warn')} warning${n('warn') === 1 ? '' : 's'}, ${n('fail')} failed${code === 2 ? ': this node is not ready to run ballast' : code === 1 ? '' : ': ready'}`);
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
      const bad: CheckReport = { config: o.config, checks: [fail('config', `${o.config} is a valid configuration`, (err as Error).message, `ballast validate --config ${o.config} lists every problem`)] };
      process.stdout.write(`${JSON.stringify(bad, null, 2)}\n`);
    }
    throw err;
  }
  const report = await runChecks(config, { source: o.config });
  process.stdout.write(o.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
  return exitStatus(report.checks);
}
