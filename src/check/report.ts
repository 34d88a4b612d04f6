/**
 * The shape of `ballast check`: a kubeadm-style preflight where every check says ok, warn or
 * fail, and what to do about a warning or a failure.
 *
 * Exit status of `ballast check` (see exitStatus): 0 when every check is ok, 1 when the worst is a
 * warning, 2 when any check fails.
 */

/** One check's verdict: `fail` stops a node from serving, `warn` is worth fixing. */
export type CheckStatus = 'ok' | 'warn' | 'fail';

/** The result of one check, as `ballast check` prints it and `--json` emits it. */
export interface CheckResult {
  /** Stable identifier, kebab-case, e.g. `vip-in-use`, `backend-certificate` (for scripts and docs/errors.md). */
  id: string;
  /** What was checked, short: "VIP 10.0.0.100 not in use on eth0". */
  title: string;
  status: CheckStatus;
  /** What was found, one or more sentences (names the backend, the missing SAN, the MAC, the rule). */
  detail: string;
  /** How to fix a warn / fail; absent for ok. */
  fix?: string;
}

/** The whole report: every check run, in the order they ran. */
export interface CheckReport {
  /** The configuration file checked. */
  config: string;
  checks: CheckResult[];
}

/**
 * Exit status of a report: 2 if any check failed, 1 if any warned, else 0.
 * @param checks the results
 */
export function exitStatus(checks: readonly CheckResult[]): 0 | 1 | 2 {
  if (checks.some((c) => c.status === 'fail')) return 2;
  if (checks.some((c) => c.status === 'warn')) return 1;
  return 0;
}

/** An ok result. */
export const ok = (id: string, title: string, detail: string): CheckResult => ({ id, title, status: 'ok', detail });
/** A warn result, with how to fix it. */
export const warn = (id: string, title: string, detail: string, fix: string): CheckResult => ({ id, title, status: 'warn', detail, fix });
/** A fail result, with how to fix it. */
export const fail = (id: string, title: string, detail: string, fix: string): CheckResult => ({ id, title, status: 'fail', detail, fix });
