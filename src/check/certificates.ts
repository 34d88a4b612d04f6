/**
 * Backend serving certificates (`ballast check`): owned by the `checkcert` helper.
 * TODO(checkcert): this is a stub until the checkcert branch is merged; it checks nothing.
 */
import type { Config } from '../config/index.js';
import type { CheckResult } from './report.js';

/**
 * Each backend's serving certificate against `apiserver.health.caFile` and the SANs the VIP and
 * the local endpoint need. STUB: resolves with no results.
 */
export async function checkBackendCertificates(config: Config, opts: { timeoutMs?: number } = {}): Promise<CheckResult[]> {
  void config;
  void opts;
  return [];
}
