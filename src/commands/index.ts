/**
 * The `ballast` command (entered through cli.ts, which catches the stop signals first).
 *
 *   ballast run --config FILE          run the agent (foreground; SIGTERM/SIGINT stop it cleanly)
 *   ballast validate --config FILE     check a configuration file and exit (0 ok, 2 invalid)
 *   ballast status [--admin ADDR] [--json]
 *   ballast check [--config FILE] [--json]
 *                                      preflight: ok / warn / fail per check (src/check/, docs/check.md)
 *   ballast cleanup [--config FILE]    remove what ballast left on this node (the uninstall)
 *   ballast reload [--admin ADDR | --config FILE] [--json]
 *                                      ask the running agent to re-read its file (SIGHUP does the same)
 *   ballast manifest static-pod | daemonset | rbac | systemd [--config FILE] [--image REF] [--output FILE]
 *                                      what an operator commits (commands/manifest.ts)
 *
 * One file per command; this folder is imported by nothing but cli.ts (the ladder in
 * .dependency-cruiser.cjs). Exit statuses come from the error registry (src/errors.ts, docs/errors.md).
 */
import { readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { Command, Option } from 'commander';
import { LOG_LEVELS, type LogLevel } from '../config/types.js';
import { ConfigError, exitCodeOf, isBallastError } from '../errors.js';
import type { HostPort } from '../net/hostport.js';
import { DEFAULT_ADMIN, parseAdmin } from './admin-address.js';
import { reload } from './reload.js';
import { run, type StopSignals } from './run.js';
import { status } from './status.js';
import { validate } from './validate.js';

export type { StopSignals } from './run.js';

/** The version in package.json. */
function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

/** Prints an error the way operators should see it and returns the exit status. */
function report(err: unknown): number {
  if (err instanceof ConfigError) {
    process.stderr.write(err.format());
  } else if (isBallastError(err)) {
    process.stderr.write(`ballast: ${err.message} (${err.code})\n`);
  } else {
    process.stderr.write(`ballast: unexpected error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  }
  return exitCodeOf(err);
}

/** A signal ends a command other than `run` the way the default action would be reported by a shell. */
function exitOnSignal(sig: NodeJS.Signals): void {
  process.exit(128 + constants.signals[sig]);
}

async function main(argv: string[], stops: StopSignals): Promise<number> {
  const program = new Command()
    .name('ballast')
    .description(
      'One stable, highly available Kubernetes API endpoint on bare metal: a VRRPv3 (RFC 9568) virtual IP balanced in the kernel, and a node-local endpoint (eBPF connect() rewrite) on every node.',
    )
    .version(packageVersion(), '-V, --version')
    .showHelpAfterError()
    .exitOverride();
  let result: Promise<number> = Promise.resolve(0);
  let ran = false;
  program
    .command('run')
    .description('run the agent in the foreground')
    .requiredOption('-c, --config <file>', 'YAML configuration file (see docs/config.md)')
    .addOption(new Option('--log-level <level>', 'override log.level').choices(LOG_LEVELS))
    .action((o: { config: string; logLevel?: LogLevel }) => {
      ran = true;
      result = run(o, stops);
    });
  program
    .command('validate')
    .description('check a configuration file; exit 0 if valid, 2 if not')
    .requiredOption('-c, --config <file>', 'YAML configuration file')
    .action((o: { config: string }) => {
      result = validate(o);
    });
  program
    .command('check')
    .description(
      'preflight, kubeadm-style: is this node ready to run ballast with --config (interface, VIP probe, VRRP on the VRID, forwarding, nftables, eBPF, ports, other firewalls, backend certificates)? Without --config, the host checks only. Exit 0 all ok, 1 warnings, 2 failures (docs/check.md)',
    )
    .option('-c, --config <file>', 'YAML configuration file to check the node against')
    .option(
      '--json',
      'print the report as JSON: with --config the CheckReport { config, checks: [{ id, title, status, detail, fix? }] }, without it { ok, reasons } of the eBPF check',
    )
    .action((o: { config?: string; json?: boolean }) => {
      result = Promise.all([import('./check.js'), import('../config/index.js')]).then(([{ checkCommand }, { loadConfig }]) =>
        checkCommand(o, (path) => loadConfig(path)),
      );
    });
  program
    .command('cleanup')
    .description(
      "remove everything ballast left on this node (the uninstall): the VIPs of --config, the nftables tables, every eBPF pin and lock file; a running agent's are left alone (exit 2)",
    )
    .option('-c, --config <file>', 'also remove the VIPs this configuration names')
    .action((o: { config?: string }) => {
      result = import('./cleanup.js').then(({ cleanup }) => cleanup(o));
    });
  program
    .command('status')
    .description("print the agent's election state, backends and local endpoint")
    .option('-a, --admin <host:port>', `the admin endpoint of the agent (default: ${DEFAULT_ADMIN})`, parseAdmin)
    .option('--json', 'print the /status JSON as is')
    .action((o: { admin?: { host: string; port: number }; json?: boolean }) => {
      result = status({ admin: o.admin ?? parseAdmin(DEFAULT_ADMIN), ...(o.json ? { json: true } : {}) });
    });
  program
    .command('reload')
    .description(
      'ask the running agent to re-read its configuration file and apply what changed (as SIGHUP does); exit 0 if applied, 2 if refused (the problems are printed, nothing changed), 1 if no agent answers',
    )
    .option('-a, --admin <host:port>', `the admin endpoint of the agent (default: admin.listen of --config, else ${DEFAULT_ADMIN})`, parseAdmin)
    .option('-c, --config <file>', 'the configuration file the agent runs with: its admin.listen says where the agent listens')
    .option('--json', 'print the reload result as JSON')
    .action((o: { admin?: HostPort; config?: string; json?: boolean }) => {
      result = reload(o);
    });
  // `ballast run` leaves the manifest commands' modules unloaded (the agent's memory, docs/performance.md)
  if (argv[2] !== 'run')
    (await import('./manifest.js')).addManifestCommand(
      program,
      (r) => {
        result = r;
      },
      packageVersion(),
    );
  try {
    await program.parseAsync(argv);
  } catch (err) {
    stops.handle(exitOnSignal);
    // commander has printed its own message (unknown option, --help, --version)
    const code = (err as { exitCode?: number }).exitCode;
    return code === 0 ? 0 : 2;
  }
  if (!ran) stops.handle(exitOnSignal);
  return result;
}

/** Runs the command line `argv` (process.argv) and exits with its status. */
export function cli(argv: string[], stops: StopSignals): void {
  main(argv, stops).then(
    (code) => process.exit(code),
    (err: unknown) => process.exit(report(err)),
  );
}
