/**
 * TEMPORARY (checkcert, issue 11): `ballast check --config FILE [--json]` running only the
 * backend-certificate check, so that it is testable before checknet's src/check/index.ts
 * (runChecks and the real CLI) exists. At the merge: drop this file and its few lines in
 * commands.ts; checknet's runChecks calls checkBackendCertificates.
 */
import { loadConfig } from '../config/index.js';
import { checkBackendCertificates } from './certificates.js';
import { exitStatus, type CheckReport } from './report.js';

/** Runs the certificate checks of `configPath`, prints them (JSON: a CheckReport), returns the exit status. */
export async function runCertificateCheckCli(configPath: string, json: boolean): Promise<number> {
  const config = loadConfig(configPath);
  const checks = await checkBackendCertificates(config);
  const report: CheckReport = { config: configPath, checks };
  if (json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  else for (const c of checks) process.stdout.write(`[${c.status}] ${c.title}: ${c.detail}${c.fix ? `\n       fix: ${c.fix}` : ''}\n`);
  return exitStatus(checks);
}
