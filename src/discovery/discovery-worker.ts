/**
 * The discovery thread's entry (a worker_threads Worker; thread.ts starts it and documents the
 * messages): runs {@link Discovery} off the election's thread and reports to the agent's thread
 * its set (`change`), its counters (`stats`, whenever they changed, checked every
 * {@link STATS_EVERY_MS}) and its log lines (`log`).
 */
import { existsSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import type { HostPort } from '../net/hostport.js';
import { loadCredentials } from './credentials.js';
import type { FromThread, ThreadInit, ToThread } from './thread.js';
import { Discovery } from './watch.js';

/** How often the counters are compared with what was last sent, ms. */
const STATS_EVERY_MS = 200;
/**
 * How much nicer than the agent's thread this one runs (setpriority(2): on Linux the nice value
 * is a thread's, and `os.setPriority()` without a pid sets the calling thread's). Discovery is
 * background work; the election's thread is the agent's heartbeat and wins the CPU from it.
 */
const NICER = 10;

const port = parentPort;
if (port === null) throw new Error('discovery-worker.js runs as a worker thread (src/discovery/thread.ts)');
const init = workerData as ThreadInit;
const send = (m: FromThread): void => port.postMessage(m);
const log = {
  info: (fields: object, msg: string) => send({ type: 'log', level: 'info', fields, msg }),
  warn: (fields: object, msg: string) => send({ type: 'log', level: 'warn', fields, msg }),
  error: (fields: object, msg: string) => send({ type: 'log', level: 'error', fields, msg }),
};
let ready: HostPort[] = init.ready;
let discovery: Discovery | null = null;
let stopping = false;
let statsTimer: ReturnType<typeof setInterval> | null = null;
let lastStats = '';
/** the set was sent as the API's answer (after the first list) */
let answeredSent = false;

const pushStats = (): void => {
  if (discovery === null) return;
  const stats = discovery.stats();
  // the first answer, whether or not it changed the set: the agent's thread takes it then (thread.ts)
  if (!answeredSent && stats.lists > 0) {
    answeredSent = true;
    send({ type: 'change', set: discovery.current(), answered: true });
  }
  const key = JSON.stringify(stats);
  if (key === lastStats) return;
  lastStats = key;
  send({ type: 'stats', stats });
};

port.on('message', (m: ToThread) => {
  switch (m.type) {
    case 'start':
      return discovery?.start();
    case 'ready':
      ready = m.backends;
      return discovery?.readinessChanged();
    case 'seed':
      return discovery?.setSeed(m.seed);
    case 'stop':
      stopping = true;
      if (statsTimer !== null) clearInterval(statsTimer);
      void (discovery?.stop() ?? Promise.resolve()).finally(() => {
        pushStats();
        send({ type: 'stopped' });
        port.close();
      });
      return;
  }
});

async function main(): Promise<void> {
  try {
    setPriority(Math.min(19, getPriority() + NICER));
  } catch {
    // a thread that may not change its nice value runs at the agent's
  }
  const c = init.credentials;
  if (init.validate && c.kind === 'kubeconfig' && existsSync(c.path)) {
    const loaded = await loadCredentials(c);
    if (loaded.kind === 'invalid') return send({ type: 'invalid', reason: loaded.reason });
  }
  if (stopping) return;
  const d = new Discovery({
    credentials: c,
    lastKnownFile: init.lastKnownFile,
    seed: init.seed,
    readyBackends: () => ready,
    defaultPort: init.defaultPort,
    log,
    ...init.timing,
  });
  discovery = d;
  d.on('change', (set) => {
    const answered = d.stats().lists > 0;
    answeredSent ||= answered;
    send({ type: 'change', set, answered });
    pushStats();
  });
  lastStats = JSON.stringify(d.stats());
  send({ type: 'init', set: d.current(), stats: d.stats() });
  statsTimer = setInterval(pushStats, STATS_EVERY_MS);
}

// an error escapes as the Worker's 'error' event: thread.ts logs it and starts a new thread
void main();
