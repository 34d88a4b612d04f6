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
 *                                      what an operator commits (src/manifest/cli.ts)
 *
 * Exit statuses come from the error registry (src/errors.ts, docs/errors.md).
 */
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { Command, InvalidArgumentError, Option } from 'commander';
import type { Config, ConfigNote } from './config/index.js';
import { describeReadError } from './config/files.js';
import { ConfigError, createError, exitCodeOf, isBallastError } from './errors.js';
import type { Logger } from './observe/log.js';
import { LOG_LEVELS, type LogLevel } from './config/types.js';
import { formatStatus, type ReloadResult, type StatusDocument } from './observe/status.js';
import { parse as parseYaml } from 'yaml';
import { formatHostPort, tryParseHostPort, type HostPort } from './net/hostport.js';
import type { Agent } from './agent/index.js';
import { systemdRestartJob, underSystemd } from './observe/restart-job.js';
// node:http through require (observe/admin.ts says why: an ESM import loads all of undici)
const { get, request } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

const DEFAULT_ADMIN = '127.0.0.1:9641';

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

/** Longest a clean stop may take before the agent gives up on it and exits 1, ms. */
const STOP_DEADLINE_MS = 10_000;

/**
 * SIGTERM, SIGINT, SIGHUP and SIGUSR2, caught from the process's first line (cli.ts): `handle(fn)` sends
 * every one of them to `fn`, first those that arrived before it was called, in order.
 */
export interface StopSignals {
  handle(fn: (sig: NodeJS.Signals) => void): void;
}

/**
 * `ballast run`. A SIGTERM or SIGINT at any moment stops the agent cleanly, start-up included:
 * what was started is undone and the exit status is 0. A SIGHUP reloads the configuration file
 * (Agent.reloadFile): one during start-up waits for it, one during a stop is logged and ignored.
 */
async function run(opts: { config: string; logLevel?: LogLevel }, stops: StopSignals): Promise<number> {
  const cancel = new AbortController();
  // set once they exist; a signal before then is logged when the logger exists
  let log: Logger | null = null;
  let agent: Agent | null = null;
  let firstSignal: NodeJS.Signals | null = null;
  let hupBeforeStart = false;
  const onHup = (): void => {
    if (firstSignal !== null) {
      log?.warn({ signal: 'SIGHUP' }, 'SIGHUP during the stop: the configuration is not reloaded');
      return;
    }
    if (!agent) {
      // a reload during start-up waits for it
      hupBeforeStart = true;
      log?.info({ signal: 'SIGHUP' }, 'SIGHUP during start-up: the configuration is reloaded once the agent runs');
      return;
    }
    log?.info({ signal: 'SIGHUP', config: opts.config }, 'SIGHUP: reloading the configuration');
    // the result is logged by the agent (one line, and each problem); only a refusal to start one is left
    agent.reloadFile('signal').catch((err: Error) => log?.warn({ err: err.message }, 'SIGHUP: the configuration is not reloaded'));
  };
  // a restart in place (SIGUSR2, or SIGTERM of a systemd restart job) keeps the VIP for the next process
  let restart = false;
  const onStop = (sig: NodeJS.Signals): void => {
    if (firstSignal !== null) {
      // double delivery is common (timeout(1), a signal to the process group): never skip the cleanup
      log?.info({ signal: sig }, 'already stopping');
      return;
    }
    firstSignal = sig;
    log?.info({ signal: sig }, 'signal received');
    setTimeout(() => {
      log?.error({ deadlineMs: STOP_DEADLINE_MS }, 'clean stop did not finish in time; exiting');
      process.exit(1);
    }, STOP_DEADLINE_MS).unref();
    if (sig === 'SIGUSR2') {
      restart = true;
      log?.info({ signal: sig }, 'SIGUSR2: stopping for a restart in place');
      cancel.abort();
      return;
    }
    if (sig !== 'SIGTERM' || !underSystemd()) {
      cancel.abort();
      return;
    }
    // systemd sends SIGTERM for a stop and for a restart alike: its job says which
    void systemdRestartJob().then((r) => {
      restart = r.restart;
      log?.info({ unit: r.unit, job: r.job }, r.restart ? 'systemd is restarting this service: stopping for a restart in place' : 'systemd is stopping this service');
      cancel.abort();
    });
  };
  stops.handle((sig) => {
    // keepalived's (and most daemons') reload signal
    if (sig === 'SIGHUP') onHup();
    else onStop(sig);
  });
  // SIGUSR1 would otherwise open Node's inspector on 127.0.0.1:9229 in a root process; like
  // keepalived, answer it with a dump of the state instead
  process.on('SIGUSR1', () => {
    if (!agent) {
      log?.info('status (SIGUSR1): still starting');
      return;
    }
    agent
      .status()
      .then(
        (doc) => log?.info({ status: doc }, 'status (SIGUSR1)'),
        (err: Error) => log?.warn({ err: err.message }, 'status (SIGUSR1) unavailable'),
      )
      // a failure of the dump itself (its serialization) must not become an unhandled rejection,
      // which would end the process and its VIP
      .catch((err: unknown) => process.stderr.write(`ballast: status (SIGUSR1) could not be written: ${String(err)}\n`));
  });
  // the agent's modules load here, not with this file: `ballast status` and `reload` (run by
  // operators and probes, often) start in a fraction of the time without them
  const [{ loadConfig }, { createLogger, logWritten }, { startAgent }, { serviceManagerFromEnv }] = await Promise.all([
    import('./config/index.js'),
    import('./observe/log.js'),
    import('./agent/index.js'),
    import('./observe/notify.js'),
  ]);
  // read (and removed from the environment the agent's children get) before anything runs
  const serviceManager = serviceManagerFromEnv();
  const notes: ConfigNote[] = [];
  const config = loadConfig(opts.config, { notes });
  log = createLogger(opts.logLevel ?? config.log.level);
  if (firstSignal !== null) log.info({ signal: firstSignal }, 'signal received before start-up');
  // a file that does not exist yet (the CA before kubeadm init) is waited for, not an error
  const logNotes = (ns: readonly ConfigNote[]): void => {
    for (const n of ns) log?.warn({ setting: n.path, file: n.file }, `${n.path}: ${n.message}`);
  };
  logNotes(notes);
  agent = await startAgent(config, log, {
    signal: cancel.signal,
    load: () => {
      const again: ConfigNote[] = [];
      const next = loadConfig(opts.config, { notes: again });
      logNotes(again);
      return next;
    },
    source: opts.config,
    ...(opts.logLevel ? { logLevel: opts.logLevel } : {}),
    serviceManager,
    restartOnAbort: () => restart,
  });
  if (hupBeforeStart && firstSignal === null) onHup();
  const code = await agent.done;
  // the last lines ('stopped') are written before the exit, in order (observe/log.ts)
  if (!(await logWritten(log, 1000))) process.stderr.write('ballast: the log was not fully written within 1 s of the stop\n');
  // a second signal that arrived during a stop is written to libuv's signal pipe, and read only
  // when the loop next polls; the stop's last step may resolve first (its fd can come before
  // the pipe in the same poll), so poll once more before the exit: the signal is then logged
  // ('already stopping') instead of dropped unseen. Two immediates: a poll lies between them.
  await new Promise<void>((resolve) => setImmediate(() => setImmediate(resolve)));
  return code;
}

/** A signal ends a command other than `run` the way the default action would be reported by a shell. */
function exitOnSignal(sig: NodeJS.Signals): void {
  process.exit(128 + constants.signals[sig]);
}

/** Parses `--admin`: an IP literal and a port, "127.0.0.1:9641" or "[::1]:9641" (net/hostport.ts). */
function parseAdmin(s: string): HostPort {
  const hp = tryParseHostPort(s);
  if (typeof hp === 'string') throw new InvalidArgumentError(`expected host:port with an IP address, e.g. 127.0.0.1:9641 or [::1]:9641 (${JSON.stringify(s)} ${hp})`);
  return hp;
}

function fetchStatus(addr: { host: string; port: number }, timeoutMs = 2000): Promise<StatusDocument> {
  return new Promise((resolve, reject) => {
    const req = get({ host: addr.host, port: addr.port, path: '/status', timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}: ${body.trim()}`));
        let doc: unknown;
        try {
          doc = JSON.parse(body);
        } catch {
          return reject(new Error(`the answer is not JSON, so not a ballast agent's /status (${body.length} bytes)`));
        }
        if (!looksLikeStatus(doc)) return reject(new Error("the answer is JSON but not a ballast agent's /status (another service on that port, or another version?)"));
        resolve(doc);
      });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
  });
}

/**
 * Whether `v` has the parts of a /status document that `formatStatus` reads (observe/status.ts):
 * a state, the backends and the local endpoint, and with an election its counters and times.
 */
function looksLikeStatus(v: unknown): v is StatusDocument {
  const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);
  if (!isObject(v) || !Array.isArray(v.backends) || !isObject(v.local) || !isObject(v.dataplane)) return false;
  if (v.state === 'none') return true;
  if (!['init', 'backup', 'master', 'fault'].includes(v.state as string)) return false;
  return typeof v.since === 'string' && isObject(v.counters) && isObject(v.counters.dropped) && Array.isArray(v.vips) && Array.isArray(v.peers);
}

async function status(opts: { admin: { host: string; port: number }; json?: boolean }): Promise<number> {
  let doc: StatusDocument;
  try {
    doc = await fetchStatus(opts.admin);
  } catch (err) {
    const where = formatHostPort(opts.admin);
    throw createError('BALLAST_E_STATUS_UNREACHABLE', `no agent answers at ${where}: ${(err as Error).message}`, { cause: err });
  }
  process.stdout.write(opts.json ? `${JSON.stringify(doc, null, 2)}\n` : `${formatStatus(doc)}\n`);
  return 0;
}

/**
 * `ballast cleanup`: what an uninstall runs after the agent stopped (a stop is a restart and
 * keeps the eBPF local endpoint serving). A configuration that cannot be read only costs its VIPs.
 */
async function cleanup(o: { config?: string }): Promise<number> {
  const [{ parseConfig }, { cleanupNode }] = await Promise.all([import('./config/index.js'), import('./agent/cleanup.js')]);
  let config: Config | null = null;
  if (o.config !== undefined) {
    try {
      // its files are not looked at: a missing CA or key must not stop an uninstall
      config = parseConfig(readFileSync(o.config, 'utf8'), o.config);
    } catch (err) {
      process.stderr.write(`ballast cleanup: cannot use ${o.config} (${(err as Error).message.split('\n')[0]}); its VIPs are not removed\n`);
    }
  }
  const r = await cleanupNode(config);
  for (const line of r.removed) process.stdout.write(`removed ${line}\n`);
  for (const line of r.notes) process.stderr.write(`ballast cleanup: ${line}\n`);
  if (r.removed.length === 0 && r.inUse.length === 0 && r.failed.length === 0) process.stdout.write('nothing of ballast left on this node\n');
  if (r.inUse.length > 0) {
    throw createError('BALLAST_E_ALREADY_RUNNING', `a running ballast agent holds ${r.inUse.join(', ')}: left alone; stop the agent first`);
  }
  if (r.failed.length > 0) throw createError('BALLAST_E_BGP', `${r.failed.join('; ')} (the rest was removed)`);
  return 0;
}

/**
 * Where `ballast reload` finds the agent: `--admin`, else `admin.listen` of `--config`'s file
 * (read leniently: the file may be the invalid one being reloaded), else the default. An
 * unspecified listen address (0.0.0.0, ::) is reached on loopback.
 * @param note called with a line for the operator when `--config`'s file gives no usable
 *   `admin.listen` and the default is asked instead.
 * @throws BallastError BALLAST_E_CONFIG_READ (exit 2) when `--config`'s file cannot be read: a
 *   mistyped path must not send the reload to whichever agent listens on the default address.
 */
export function reloadAddress(
  o: { admin?: HostPort; config?: string },
  read: (path: string) => string = (p) => readFileSync(p, 'utf8'),
  note: (line: string) => void = () => undefined,
): HostPort {
  if (o.admin) return o.admin;
  if (o.config === undefined) return parseAdmin(DEFAULT_ADMIN);
  let text: string;
  try {
    text = read(o.config);
  } catch (err) {
    throw createError('BALLAST_E_CONFIG_READ', `cannot read ${o.config}: ${describeReadError(err)}; give the agent's file, or --admin ADDR`, { cause: err });
  }
  let listen: unknown;
  try {
    const doc = parseYaml(text) as { admin?: { listen?: unknown } } | null;
    listen = doc?.admin?.listen;
  } catch {
    listen = undefined;
  }
  const hp = typeof listen === 'string' ? tryParseHostPort(listen) : null;
  if (hp === null || typeof hp === 'string') {
    if (listen !== undefined) note(`${o.config}: admin.listen is not a host:port; asking the default ${DEFAULT_ADMIN}`);
    return parseAdmin(DEFAULT_ADMIN);
  }
  if (hp.host === '0.0.0.0') return { ...hp, host: '127.0.0.1' };
  if (hp.host === '::') return { ...hp, host: '::1' };
  return hp;
}

/** What POST /reload answered: the HTTP status and the parsed result. */
export interface ReloadAnswer {
  statusCode: number;
  result: ReloadResult | { ok: false; problems: string[] };
}

/** POST /reload to the admin endpoint. @throws Error when nothing answers, or the answer is not a reload result. */
export function postReload(addr: HostPort, timeoutMs = 30_000): Promise<ReloadAnswer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: addr.host, port: addr.port, path: '/reload', method: 'POST', timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        let doc: unknown;
        try {
          doc = JSON.parse(body);
        } catch {
          return reject(new Error(`HTTP ${res.statusCode}: the answer is not a ballast agent's reload result: ${body.trim().slice(0, 200)}`));
        }
        const d = doc as { ok?: unknown; problems?: unknown };
        if (typeof d.ok !== 'boolean' || !Array.isArray(d.problems)) return reject(new Error(`HTTP ${res.statusCode}: the answer is JSON but not a ballast agent's reload result`));
        resolve({ statusCode: res.statusCode ?? 0, result: doc as ReloadAnswer['result'] });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

/**
 * The text `ballast reload` prints for an answer, and its exit status: 0 applied, 2 refused (the
 * problems, one per line as `ballast validate` prints them), 1 when the agent could not reload now.
 */
export function formatReload(a: ReloadAnswer, where: string): { code: number; stdout: string; stderr: string } {
  const r = a.result;
  if (r.ok && 'changed' in r) {
    const what = r.changed.length === 0 ? 'nothing changed' : `changed: ${r.changed.join(', ')}\n${r.actions.map((x) => `  - ${x}`).join('\n')}`;
    return { code: 0, stdout: `reloaded (${Math.round(r.durationMs)} ms): ${what}\n`, stderr: '' };
  }
  if (a.statusCode === 422) {
    const n = r.problems.length;
    const source = 'source' in r && r.source ? ` from ${r.source}` : '';
    const lines = [`ballast: configuration not reloaded${source} (${n} ${n === 1 ? 'problem' : 'problems'}); the agent keeps running as before:`, ...r.problems.map((p) => `  ${p}`)];
    return { code: 2, stdout: '', stderr: `${lines.join('\n')}\n` };
  }
  return { code: 1, stdout: '', stderr: `ballast: the agent at ${where} did not reload: ${r.problems.join('; ')} (BALLAST_E_RELOAD_UNREACHABLE)\n` };
}

async function reload(o: { admin?: HostPort; config?: string; json?: boolean }): Promise<number> {
  const addr = reloadAddress(o, undefined, (line) => process.stderr.write(`ballast reload: ${line}\n`));
  const where = formatHostPort(addr);
  let a: ReloadAnswer;
  try {
    a = await postReload(addr);
  } catch (err) {
    throw createError('BALLAST_E_RELOAD_UNREACHABLE', `no agent answers at ${where}: ${(err as Error).message}`, { cause: err });
  }
  const out = formatReload(a, where);
  if (o.json) process.stdout.write(`${JSON.stringify(a.result, null, 2)}\n`);
  else {
    process.stdout.write(out.stdout);
    process.stderr.write(out.stderr);
  }
  return out.code;
}

async function main(argv: string[], stops: StopSignals): Promise<number> {
  const program = new Command()
    .name('ballast')
    .description('One stable, highly available Kubernetes API endpoint on bare metal: a VRRPv3 (RFC 9568) virtual IP balanced in the kernel, and a node-local endpoint (eBPF connect() rewrite) on every node.')
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
      result = import('./config/index.js').then(({ loadConfig, formatNote }) => {
        const notes: ConfigNote[] = [];
        loadConfig(o.config, { notes });
        for (const n of notes) process.stdout.write(`${o.config}: ${formatNote(n)}\n`);
        process.stdout.write(`${o.config}: ok${notes.length > 0 ? ` (${notes.length} ${notes.length === 1 ? 'file' : 'files'} to wait for)` : ''}\n`);
        return 0;
      });
    });
  program
    .command('check')
    .description('preflight, kubeadm-style: is this node ready to run ballast with --config (interface, VIP probe, VRRP on the VRID, forwarding, nftables, eBPF, ports, other firewalls, backend certificates)? Without --config, the host checks only. Exit 0 all ok, 1 warnings, 2 failures (docs/check.md)')
    .option('-c, --config <file>', 'YAML configuration file to check the node against')
    .option('--json', 'print the report as JSON: with --config the CheckReport { config, checks: [{ id, title, status, detail, fix? }] }, without it { ok, reasons } of the eBPF check')
    .action((o: { config?: string; json?: boolean }) => {
      result = Promise.all([import('./check/index.js'), import('./config/index.js')]).then(([{ checkCommand }, { loadConfig }]) => checkCommand(o, (path) => loadConfig(path)));
    });
  program
    .command('cleanup')
    .description('remove everything ballast left on this node (the uninstall): the VIPs of --config, the nftables tables, every eBPF pin and lock file; a running agent\'s are left alone (exit 2)')
    .option('-c, --config <file>', 'also remove the VIPs this configuration names')
    .action((o: { config?: string }) => {
      result = cleanup(o);
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
    .description("ask the running agent to re-read its configuration file and apply what changed (as SIGHUP does); exit 0 if applied, 2 if refused (the problems are printed, nothing changed), 1 if no agent answers")
    .option('-a, --admin <host:port>', `the admin endpoint of the agent (default: admin.listen of --config, else ${DEFAULT_ADMIN})`, parseAdmin)
    .option('-c, --config <file>', 'the configuration file the agent runs with: its admin.listen says where the agent listens')
    .option('--json', 'print the reload result as JSON')
    .action((o: { admin?: HostPort; config?: string; json?: boolean }) => {
      result = reload(o);
    });
  // `ballast run` leaves the manifest commands' modules unloaded (the agent's memory, docs/performance.md)
  if (argv[2] !== 'run') (await import('./manifest/cli.js')).addManifestCommand(program, (r) => (result = r), packageVersion());
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
