/**
 * The systemd unit of the packaged agent (owner: helper `pkg`).
 *
 * TODO(pkg): this file is a placeholder for the interface agreed in CONTRACTS.md so that
 * `ballast manifest systemd` can call it; pkg's systemd.ts replaces it whole.
 */

/** What the unit is generated from. */
export interface SystemdUnitOptions {
  /** The configuration file the unit runs the agent with (default /etc/ballast/ballast.yaml). */
  configPath: string;
  /** The `ballast` executable (default /usr/bin/ballast). */
  binPath?: string;
}

/**
 * The unit file text (ballast.service).
 * @throws Error always, in this placeholder: the unit comes with pkg's implementation.
 */
export function systemdUnit(opts: SystemdUnitOptions): string {
  throw new Error(`the systemd unit is not part of this build yet (systemdUnit for ${opts.configPath}: src/manifest/systemd.ts is a placeholder)`);
}
