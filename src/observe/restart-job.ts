/**
 * Whether systemd is restarting this service: the stop it sent (SIGTERM) is the first half of a
 * `restart` job (`systemctl restart`, `try-restart`, the package's upgrade), not a `stop` job
 * (`systemctl stop`, a shutdown, `apt remove`). systemd sends the same signal for both; the job
 * says which (systemctl(1) `list-jobs`: JOB UNIT TYPE STATE; a restart job keeps the type
 * `restart` until its stop half is done, and try-restart becomes a restart job on an active unit).
 *
 * Only asked when the process is a systemd service (INVOCATION_ID is set, systemd.exec(5)); the
 * unit's name comes from the process's cgroup (/proc/self/cgroup, cgroup v2: `0::/…/NAME.service`).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** How long the question may take, ms: the stop waits for it. */
export const RESTART_JOB_TIMEOUT_MS = 1500;

/**
 * The service unit this process runs in, from a /proc/self/cgroup text: the last path component
 * of the v2 (`0::`) line that ends in `.service`, or null.
 */
export function unitOfCgroup(text: string): string | null {
  for (const line of text.split('\n')) {
    if (!line.startsWith('0::')) continue;
    const parts = line
      .slice(3)
      .split('/')
      .filter((p) => p !== '');
    for (let i = parts.length - 1; i >= 0; i--) if (parts[i]!.endsWith('.service')) return parts[i]!;
  }
  return null;
}

/**
 * The type of `unit`'s job in a `systemctl list-jobs --no-legend` listing ("restart", "stop",
 * "start", …), or null when it has none.
 */
export function jobTypeOf(listing: string, unit: string): string | null {
  for (const line of listing.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length >= 4 && f[1] === unit) return f[2]!;
  }
  return null;
}

/** Whether this process was started by systemd as a service (systemd.exec(5): INVOCATION_ID). */
export function underSystemd(env: NodeJS.ProcessEnv = process.env): boolean {
  return typeof env.INVOCATION_ID === 'string' && env.INVOCATION_ID !== '';
}

/**
 * Asks systemd whether this service's pending job is a restart. Resolves false when not a
 * systemd service, when the unit or systemctl cannot be found, on any error or after
 * {@link RESTART_JOB_TIMEOUT_MS}: a stop that cannot tell is a stop (the VIP is handed over at once).
 * @returns `{ restart, unit, job }`: `job` is the job type seen (null: none, or not asked).
 */
export function systemdRestartJob(env: NodeJS.ProcessEnv = process.env): Promise<{ restart: boolean; unit: string | null; job: string | null }> {
  if (!underSystemd(env)) return Promise.resolve({ restart: false, unit: null, job: null });
  let unit: string | null;
  try {
    unit = unitOfCgroup(readFileSync('/proc/self/cgroup', 'utf8'));
  } catch {
    unit = null;
  }
  if (unit === null) return Promise.resolve({ restart: false, unit: null, job: null });
  const u = unit;
  return new Promise((resolve) => {
    execFile(
      'systemctl',
      ['list-jobs', '--no-legend', '--no-pager', '--full'],
      { timeout: RESTART_JOB_TIMEOUT_MS, env: { ...env, SYSTEMD_PAGER: '', SYSTEMD_COLORS: '0' } },
      (err, stdout) => {
        if (err) return resolve({ restart: false, unit: u, job: null });
        const job = jobTypeOf(stdout, u);
        resolve({ restart: job === 'restart', unit: u, job });
      },
    );
  });
}
