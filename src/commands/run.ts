/**
 * `ballast run`: the agent in the foreground, stopped cleanly by a signal at any moment.
 */
import type { ConfigNote } from '../config/index.js';
import type { LogLevel } from '../config/types.js';
import type { Agent } from '../agent/index.js';
import type { Logger } from '../log/log.js';
import { systemdRestartJob, underSystemd } from '../observe/restart-job.js';

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
export async function run(opts: { config: string; logLevel?: LogLevel }, stops: StopSignals): Promise<number> {
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
      log?.info(
        { unit: r.unit, job: r.job },
        r.restart ? 'systemd is restarting this service: stopping for a restart in place' : 'systemd is stopping this service',
      );
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
    import('../config/index.js'),
    import('../log/log.js'),
    import('../agent/index.js'),
    import('../observe/notify.js'),
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
  // the last lines ('stopped') are written before the exit, in order (log/log.ts)
  if (!(await logWritten(log, 1000))) process.stderr.write('ballast: the log was not fully written within 1 s of the stop\n');
  // a second signal that arrived during a stop is written to libuv's signal pipe, and read only
  // when the loop next polls; the stop's last step may resolve first (its fd can come before
  // the pipe in the same poll), so poll once more before the exit: the signal is then logged
  // ('already stopping') instead of dropped unseen. Two immediates: a poll lies between them.
  await new Promise<void>((resolve) => setImmediate(() => setImmediate(resolve)));
  return code;
}
