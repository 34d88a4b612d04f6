/**
 * The soak's per-node sampler (a child process inside one lab node's network namespace, so that
 * it reads that namespace's addresses, nftables and the agent's admin endpoint on loopback
 * without a process per look).
 *
 *   node dist/lab/soak/sampler.js --vip 10.78.S.100 [--admin 127.0.0.1:9641] [--every 100]
 *        [--duration 600000]
 *
 * Every `every` ms one line on stdout:
 *   {"at":…,"vip":true,"addrs":["10.78.S.11/24","10.78.S.100/32"],"status":{…}|null,"tables":["ip ballast"]|null}
 * - vip / addrs: eth0's addresses now (os.networkInterfaces: getifaddrs in this namespace);
 * - status: the agent's /status boiled down ({state, backendsUp, backendsTotal, local}), from the
 *   last answer if it came within the last second, else null (the agent is not answering);
 *   polled every 250 ms, one request at a time, 1 s timeout;
 * - tables: `nft list tables` every second (one at a time), null while it fails.
 * Bounded by `duration`; SIGTERM / SIGINT end it. Exit 0.
 */
import { execFile } from 'node:child_process';
import http from 'node:http';
import { networkInterfaces } from 'node:os';
import { parseArgs } from 'node:util';
import { runIfMain } from '../entry.js';

/** What the sampler reports of an agent's /status. */
export interface StatusDigest {
  state: string;
  backendsUp: number;
  backendsTotal: number;
  /** backends of the local endpoint (null: none configured) */
  local: number | null;
  /** each backend's state (`up`, `down`, `unknown`), by host:port */
  states: Record<string, string>;
  /** backends held out by flap damping now (`dampedUntil` set; docs/health.md bounds the hold) */
  damped: number;
}

/** One sampler line. */
export interface SamplerLine {
  at: number;
  vip: boolean;
  addrs: string[];
  status: StatusDigest | null;
  tables: string[] | null;
}

/** The digest of a /status document (pure). */
export function digest(doc: { state?: unknown; backends?: unknown; local?: unknown }): StatusDigest {
  const backends = Array.isArray(doc.backends) ? (doc.backends as { state?: unknown; address?: unknown; dampedUntil?: unknown }[]) : [];
  const local = doc.local as { mode?: unknown; backends?: unknown } | undefined;
  return {
    state: String(doc.state),
    backendsUp: backends.filter((b) => b.state === 'up').length,
    backendsTotal: backends.length,
    local: local && local.mode !== 'off' && Array.isArray(local.backends) ? local.backends.length : null,
    states: Object.fromEntries(backends.map((b) => [String(b.address), String(b.state)])),
    // held out by damping and not in the local endpoint's map (a backend the agent still reports
    // with a dampedUntil but serves again is in the map, not missing; the 30-minute seed-7 soak
    // counted it twice: "3/3 backends (1 damped)"). The agent's own wall clock may be stepped
    // (clock-step faults): count, do not compare times.
    damped: backends.filter((b) => typeof b.dampedUntil === 'string' && !(Array.isArray(local?.backends) && (local.backends as unknown[]).includes(b.address)))
      .length,
  };
}

/** `nft list tables` output → ["ip ballast", …] (pure). */
export function parseTables(text: string): string[] {
  return text
    .split('\n')
    .map((l) => /^table (\S+) (\S+)/.exec(l.trim()))
    .flatMap((m) => (m ? [`${m[1]} ${m[2]}`] : []));
}

function getStatus(admin: string): Promise<StatusDigest | null> {
  return new Promise((resolve) => {
    const req = http.get(`http://${admin}/status`, { timeout: 1000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        try {
          resolve(res.statusCode === 200 ? digest(JSON.parse(body) as object) : null);
        } catch {
          resolve(null);
        }
      });
      res.on('error', () => resolve(null));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => resolve(null));
  });
}

function listTables(): Promise<string[] | null> {
  return new Promise((resolve) => {
    execFile('nft', ['list', 'tables'], { timeout: 2000, encoding: 'utf8' }, (err, stdout) => resolve(err ? null : parseTables(stdout)));
  });
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      vip: { type: 'string' },
      admin: { type: 'string', default: '127.0.0.1:9641' },
      every: { type: 'string', default: '100' },
      duration: { type: 'string', default: '600000' },
    },
    strict: true,
  });
  if (!values.vip) throw new TypeError('--vip is required');
  const vip = values.vip;
  const every = Number(values.every);
  const duration = Number(values.duration);
  if (!Number.isInteger(every) || every < 10) throw new TypeError(`--every must be an integer >= 10, got ${values.every}`);
  if (!Number.isInteger(duration) || duration < 0) throw new TypeError(`--duration must be an integer >= 0, got ${values.duration}`);
  let status: { at: number; s: StatusDigest | null } = { at: 0, s: null };
  let tables: string[] | null = null;
  let statusBusy = false;
  let tablesBusy = false;
  const end = Date.now() + duration;
  const timers = [
    setInterval(() => {
      if (statusBusy) return;
      statusBusy = true;
      void getStatus(values.admin).then((s) => {
        statusBusy = false;
        if (s !== null) status = { at: Date.now(), s };
      });
    }, 250),
    setInterval(() => {
      if (tablesBusy) return;
      tablesBusy = true;
      void listTables().then((t) => {
        tablesBusy = false;
        tables = t;
      });
    }, 1000),
  ];
  await new Promise<void>((resolve) => {
    const tick = setInterval(() => {
      const now = Date.now();
      const eth0 = networkInterfaces().eth0 ?? [];
      const line: SamplerLine = {
        at: now,
        vip: eth0.some((a) => a.address === vip),
        addrs: eth0.filter((a) => a.family === 'IPv4' || a.scopeid === 0).map((a) => a.cidr ?? a.address),
        status: now - status.at <= 1000 ? status.s : null,
        tables,
      };
      process.stdout.write(`${JSON.stringify(line)}\n`);
      if (now >= end) stop();
    }, every);
    const stop = (): void => {
      clearInterval(tick);
      for (const t of timers) clearInterval(t);
      resolve();
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  return 0;
}

runIfMain(import.meta.url, 'soak sampler', main);
