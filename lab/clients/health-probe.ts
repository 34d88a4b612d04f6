/**
 * Runs one HealthChecker and prints what it sees, one JSON object per line: for the lab, where
 * the checker must run inside a namespace (the client's) to reach the nodes.
 *
 *   node dist/lab/clients/health-probe.js '<json>'
 *
 * <json>: { "backends": ["10.78.S.11:6443", "[fd78:S::11]:6443", …],
 *           "health": { "path"?, "caFile"?, "serverName"?, "insecureSkipVerify"?, "clientCertFile"?,
 *                       "clientKeyFile"?, "tokenFile"?, "intervalMs"?, "timeoutMs"?, "rise"?, "fall"? },
 *           "checks"?: true }          (health fields as in the normalized config; defaults as there)
 *
 * stdout:
 *   {"event":"start","at":ISO,"backends":[…]}
 *   {"event":"change","backend":"10.78.S.11:6443","from":"unknown","to":"up","reason":"http 200","at":ISO,"healthy":true}
 *   {"event":"check","address":…,"ok":…,"status"?,"error"?,"latencyMs":…,"at":ISO}      (only with "checks": true)
 *   {"event":"warn",…,"msg":…}                                                          (logger warnings)
 *   {"event":"snapshot","backends":[…]}    on SIGUSR2, and once more on exit
 * SIGTERM / SIGINT: stop the checker, print the final snapshot, exit 0. Bad input: exit 2.
 */
import { pathToFileURL } from 'node:url';
import { HealthChecker, type CheckerSettings } from '../../src/health/checker.js';
import { formatHostPort, parseHostPort } from '../../src/net/hostport.js';

/** The JSON argument, after defaults. */
export interface HealthProbeInput {
  backends: { host: string; port: number }[];
  health: CheckerSettings;
  checks: boolean;
}

const DEFAULT_INTERVAL_MS = 1000;

/**
 * Reads the JSON argument.
 * @throws TypeError naming the field that is wrong.
 */
export function parseInput(text: string): HealthProbeInput {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new TypeError(`the argument is not JSON: ${(err as Error).message}`, { cause: err });
  }
  const obj = (v: unknown, what: string): Record<string, unknown> => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new TypeError(`${what} must be an object`);
    return v as Record<string, unknown>;
  };
  const root = obj(raw, 'the argument');
  if (!Array.isArray(root.backends)) throw new TypeError('backends must be a list of "host:port"');
  const backends = root.backends.map((b, i) => {
    if (typeof b !== 'string') throw new TypeError(`backends[${i}] must be "host:port"`);
    const { host, port } = parseHostPort(b);
    return { host, port };
  });
  const h = obj(root.health ?? {}, 'health');
  const str = (k: string): string | undefined => {
    const v = h[k];
    if (v === undefined || v === '') return undefined;
    if (typeof v !== 'string') throw new TypeError(`health.${k} must be a string`);
    return v;
  };
  const num = (k: string, dflt: number): number => {
    const v = h[k] ?? dflt;
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new TypeError(`health.${k} must be a positive number`);
    return v;
  };
  const intervalMs = num('intervalMs', DEFAULT_INTERVAL_MS);
  const health: CheckerSettings = {
    path: str('path') ?? '/readyz',
    caFile: str('caFile'),
    serverName: str('serverName'),
    insecureSkipVerify: h.insecureSkipVerify === true,
    clientCertFile: str('clientCertFile'),
    clientKeyFile: str('clientKeyFile'),
    tokenFile: str('tokenFile'),
    intervalMs,
    timeoutMs: num('timeoutMs', Math.min(1000, intervalMs)),
    rise: num('rise', 2),
    fall: num('fall', 2),
  };
  return { backends, health, checks: root.checks === true };
}

function main(argv: string[]): void {
  const print = (o: object): void => {
    process.stdout.write(`${JSON.stringify(o)}\n`);
  };
  const iso = (ms: number): string => new Date(ms).toISOString();
  let input: HealthProbeInput;
  try {
    if (argv.length !== 1 || argv[0] === undefined) throw new TypeError('usage: health-probe.js <json>');
    input = parseInput(argv[0]);
  } catch (err) {
    process.stderr.write(`health-probe: ${(err as Error).message}\n`);
    process.exit(2);
  }
  let checker: HealthChecker;
  try {
    checker = new HealthChecker({
      health: input.health,
      backends: input.backends,
      logger: { warn: (obj, msg) => print({ event: 'warn', ...obj, msg }) },
    });
  } catch (err) {
    process.stderr.write(`health-probe: ${(err as Error).message}\n`);
    process.exit(2);
  }
  checker.on('change', (c) => print({ event: 'change', ...c, backend: formatHostPort(c.backend), at: iso(c.at) }));
  if (input.checks) {
    // the certificate's DER would be a kilobyte of JSON per check: its fingerprint says which it was
    checker.on('check', (c) => {
      const { peerCertificate, ...result } = c.result;
      print({
        event: 'check',
        address: formatHostPort(c.backend),
        ...result,
        ...(peerCertificate ? { peerFingerprint256: peerCertificate.fingerprint256 } : {}),
        at: iso(c.at),
      });
    });
  }
  const snapshot = (): void => print({ event: 'snapshot', backends: checker.snapshot() });
  print({ event: 'start', at: iso(Date.now()), backends: checker.snapshot().map((b) => b.address) });
  checker.start();
  process.on('SIGUSR2', snapshot);
  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    // bounded: the aborted checks end at once, but never hang the exit on them
    setTimeout(() => process.exit(0), 2000).unref();
    void checker.stop().then(() => {
      snapshot();
      process.exit(0);
    });
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2));
}
