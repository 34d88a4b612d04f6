/**
 * haproxy as a lab peer (lab/lab.ts): the load balancer of the Kubernetes kubeadm HA guide
 * ("High Availability Considerations" → "Options for Software Load Balancing" → keepalived and
 * haproxy, kubernetes/kubeadm docs/ha-considerations.md), rendered for one lab node and run in the
 * foreground inside the node's network namespace:
 *
 *   haproxy -db -f <lab.dir>/<node>-haproxy.cfg
 *
 * What the guide's haproxy.cfg says, and what this renders:
 *
 *   guide                                         here
 *   global: log /dev/log local0, daemon           log stdout … notice (state changes, never per
 *                                                 connection; nothing reaches the machine's syslog);
 *                                                 no daemon (-db); an admin stats socket in lab.dir
 *   defaults: mode http + httplog, http-server-   mode tcp; the HTTP-only options are inert for a TCP
 *     close, forwardfor, timeout http-request,    frontend and backend (haproxy only warns about
 *     timeout http-keep-alive                     them), so they are left out
 *   option redispatch, retries 1                  the same (options `redispatch`, `retries`)
 *   timeout queue 20s, connect 5s, client 20s,    the same (options, in ms)
 *     server 20s, check 10s
 *   frontend: bind *:${APISERVER_DEST_PORT},      bind *:<port> (the guide's example port is 8443:
 *     mode tcp, option tcplog                     the local apiserver already owns 6443)
 *   backend: option httpchk GET /healthz,         option httpchk GET <checkPath>, expect status 200,
 *     http-check expect status 200, mode tcp,     mode tcp, balance roundrobin
 *     balance roundrobin
 *   backend: option ssl-hello-chk; server … check default-server check check-ssl verify none
 *                                                 inter/fall/rise: the HTTP check goes over TLS.
 *                                                 In the guide, ssl-hello-chk comes after httpchk
 *                                                 and the last check type wins: haproxy sends a
 *                                                 TLS hello and never GET /healthz (tried in the
 *                                                 lab: the stand-in passes it as L6OK; with the
 *                                                 two lines swapped, plain HTTP to a TLS port fails
 *                                                 L7RSP). The guide sets no inter/fall/rise, so
 *                                                 haproxy's defaults apply: inter 2s, fall 3,
 *                                                 rise 2 — written out here, and options
 *
 * The check path defaults to the guide's /healthz; the lab's stand-in apiserver serves only
 * /readyz, /livez and /version (404 otherwise), so lab callers pass `/readyz`.
 *
 * Several haproxy run side by side (one per lab node) without clashing: `ip netns exec` puts each
 * in its node's namespace; config, stats socket and log are per node in lab.dir. SIGTERM is
 * haproxy's hard stop (listeners closed, connections dropped at once); the lab stops the process
 * group at teardown if nobody did.
 */
import { spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import net, { isIP } from 'node:net';
import { join } from 'node:path';
import type { Lab, LabNode, LabProcess } from '../lab.js';
import { sleep } from '../wait.js';

/** The haproxy binary (Debian's package installs it here). */
export const HAPROXY_PATH = '/usr/sbin/haproxy';

/** One `server` line of the backend. */
export interface HaproxyServer {
  /** server name, [A-Za-z0-9_.-]: e.g. the lab node's name "n1" */
  name: string;
  /** IPv4 or IPv6 literal */
  address: string;
  /** 1..65535 (the apiserver's port, the guide's APISERVER_SRC_PORT) */
  port: number;
}

/**
 * One haproxy, as the kubeadm guide configures it. Only `port` and `servers` are required; every
 * other field defaults to the guide's value (or to haproxy's default where the guide sets none).
 * Times in milliseconds.
 */
export interface HaproxyOptions {
  /** frontend port, bound on every address (`bind *:<port>`); the guide's APISERVER_DEST_PORT */
  port: number;
  /** the apiservers, in order (roundrobin follows it) */
  servers: HaproxyServer[];
  /** `option httpchk GET <path>`; default "/healthz" (the guide) */
  checkPath?: string;
  /** `inter`: time between two checks of one server, ms; default 2000 (haproxy's default) */
  interMs?: number;
  /** `fall`: consecutive failed checks that take a server down; default 3 (haproxy's default) */
  fall?: number;
  /** `rise`: consecutive passed checks that bring it back; default 2 (haproxy's default) */
  rise?: number;
  /** `retries`: connection attempts after the first fails; default 1 (the guide) */
  retries?: number;
  /** `option redispatch`: the last retry may go to another server; default true (the guide) */
  redispatch?: boolean;
  /** `timeout connect`, ms; default 5000 (the guide) */
  timeoutConnectMs?: number;
  /** `timeout client`, ms; default 20000 (the guide) */
  timeoutClientMs?: number;
  /** `timeout server`, ms; default 20000 (the guide) */
  timeoutServerMs?: number;
  /** `timeout check`, ms; default 10000 (the guide) */
  timeoutCheckMs?: number;
  /** `timeout queue`, ms; default 20000 (the guide) */
  timeoutQueueMs?: number;
  /** `stats socket <path> mode 600 level admin`; absent: no stats socket */
  statsSocket?: string;
}

const NAME_RE = /^[A-Za-z0-9_.-]{1,32}$/;
const PATH_RE = /^\/[A-Za-z0-9_.~\-/?=&%]*$/;

function checkInt(name: string, v: number, min: number, max: number): void {
  if (!Number.isInteger(v) || v < min || v > max) throw new TypeError(`${name} must be an integer ${min}..${max}, got ${v}`);
}

/** ms as haproxy time text: "2s" when whole seconds, else "250ms". */
const time = (ms: number): string => (ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`);

/**
 * Renders haproxy.cfg for one node (pure): the kubeadm guide's configuration in TCP mode, see
 * the file comment for each line's origin. Validates every option and throws a TypeError naming
 * the bad one.
 */
export function haproxyConfig(opts: HaproxyOptions): string {
  checkInt('port', opts.port, 1, 65535);
  if (opts.servers.length === 0) throw new TypeError('servers: at least one server is required');
  const names = new Set<string>();
  for (const s of opts.servers) {
    if (!NAME_RE.test(s.name)) throw new TypeError(`servers: name must match ${NAME_RE}, got ${JSON.stringify(s.name)}`);
    if (names.has(s.name)) throw new TypeError(`servers: duplicate name ${JSON.stringify(s.name)}`);
    names.add(s.name);
    if (isIP(s.address) === 0) throw new TypeError(`servers: not an IP address: ${JSON.stringify(s.address)}`);
    checkInt(`servers[${s.name}].port`, s.port, 1, 65535);
  }
  const checkPath = opts.checkPath ?? '/healthz';
  if (!PATH_RE.test(checkPath)) throw new TypeError(`checkPath must start with "/" and hold no spaces, got ${JSON.stringify(checkPath)}`);
  const interMs = opts.interMs ?? 2000;
  const fall = opts.fall ?? 3;
  const rise = opts.rise ?? 2;
  const retries = opts.retries ?? 1;
  checkInt('interMs', interMs, 10, 3_600_000);
  checkInt('fall', fall, 1, 100);
  checkInt('rise', rise, 1, 100);
  checkInt('retries', retries, 0, 100);
  const timeouts = {
    queue: opts.timeoutQueueMs ?? 20_000,
    connect: opts.timeoutConnectMs ?? 5000,
    client: opts.timeoutClientMs ?? 20_000,
    server: opts.timeoutServerMs ?? 20_000,
    check: opts.timeoutCheckMs ?? 10_000,
  };
  for (const [k, v] of Object.entries(timeouts)) checkInt(`timeout${k[0]!.toUpperCase()}${k.slice(1)}Ms`, v, 1, 3_600_000);
  if (opts.statsSocket !== undefined && (!opts.statsSocket.startsWith('/') || /\s/.test(opts.statsSocket) || opts.statsSocket.length > 100)) {
    throw new TypeError(`statsSocket must be an absolute path without spaces, ≤ 100 chars, got ${JSON.stringify(opts.statsSocket)}`);
  }
  const ip = (a: string): string => (isIP(a) === 6 ? `[${a}]` : a);
  const lines = [
    "# rendered by ballast lab/peers/haproxy.ts: the kubeadm HA guide's haproxy.cfg, TCP mode",
    'global',
    // notice: server state changes are logged, per-connection lines (info) are not
    '    log stdout format raw local0 notice',
    ...(opts.statsSocket === undefined ? [] : [`    stats socket ${opts.statsSocket} mode 600 level admin`]),
    '',
    'defaults',
    '    mode                    tcp',
    '    log                     global',
    '    option                  dontlognull',
    ...((opts.redispatch ?? true) ? ['    option                  redispatch'] : []),
    `    retries                 ${retries}`,
    `    timeout queue           ${time(timeouts.queue)}`,
    `    timeout connect         ${time(timeouts.connect)}`,
    `    timeout client          ${time(timeouts.client)}`,
    `    timeout server          ${time(timeouts.server)}`,
    `    timeout check           ${time(timeouts.check)}`,
    '',
    'frontend apiserver',
    `    bind *:${opts.port}`,
    '    mode tcp',
    '    option tcplog',
    '    default_backend apiserverbackend',
    '',
    'backend apiserverbackend',
    `    option httpchk GET ${checkPath}`,
    '    http-check expect status 200',
    '    mode tcp',
    '    balance roundrobin',
    `    default-server check check-ssl verify none inter ${time(interMs)} fall ${fall} rise ${rise}`,
    ...opts.servers.map((s) => `    server ${s.name} ${ip(s.address)}:${s.port}`),
    '',
  ];
  return lines.join('\n');
}

/** One server's line of `show stat`. */
export interface HaproxyServerStat {
  name: string;
  /** "UP", "DOWN", "UP 1/3" (going down), "DOWN 1/2" (going up), "MAINT", "no check" */
  status: string;
  /** the last check's result, e.g. "L7OK", "L4CON" (refused), "L4TOUT", "L7STS" (bad status); "" before the first */
  checkStatus: string;
}

/** A haproxy running in a lab node (see startHaproxy). */
export interface HaproxyPeer {
  node: LabNode;
  proc: LabProcess;
  configPath: string;
  /** the admin stats socket (a filesystem path: reachable from any network namespace) */
  socketPath: string;
  /** The backend's servers as `show stat` reports them now. @throws when the socket does not answer within 2 s. */
  servers(): Promise<HaproxyServerStat[]>;
  /**
   * Polls servers() every 50 ms until `done` holds; resolves with that answer. Rejects after
   * `timeoutMs` (default 10000 ms) with the last answer, or when haproxy exits.
   */
  waitForServers(done: (s: HaproxyServerStat[]) => boolean, opts?: { timeoutMs?: number; what?: string }): Promise<HaproxyServerStat[]>;
  /** SIGTERM (hard stop), SIGKILL after `timeoutMs` (default 3000 ms); resolves with the exit code. */
  stop(timeoutMs?: number): Promise<number | null>;
}

/** `haproxy -v` → [major, minor, patch], or undefined when it cannot tell. */
export function haproxyVersion(): [number, number, number] | undefined {
  const r = spawnSync(HAPROXY_PATH, ['-v'], { encoding: 'utf8', timeout: 5000 });
  const m = /HAProxy version (\d+)\.(\d+)\.(\d+)/.exec(`${r.stdout ?? ''}${r.stderr ?? ''}`);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/** Sends one command to a stats socket and resolves with the whole answer (bounded by `timeoutMs`). */
export function statsCommand(socketPath: string, command: string, timeoutMs = 2000): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ path: socketPath });
    let out = '';
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`haproxy stats socket ${socketPath}: no answer to "${command}" within ${timeoutMs} ms`));
    }, timeoutMs);
    sock.setEncoding('utf8');
    sock.on('connect', () => sock.end(`${command}\n`));
    sock.on('data', (d: string) => (out += d));
    sock.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    sock.on('close', () => {
      clearTimeout(timer);
      resolve(out);
    });
  });
}

/** Parses `show stat` CSV into the servers of `backend` (pure; other rows skipped). */
export function parseShowStat(csv: string, backend = 'apiserverbackend'): HaproxyServerStat[] {
  const lines = csv.split('\n').filter((l) => l.trim() !== '');
  const header = lines[0]?.replace(/^#\s*/, '').split(',') ?? [];
  const col = (name: string): number => header.indexOf(name);
  const [px, sv, st, cs] = [col('pxname'), col('svname'), col('status'), col('check_status')];
  if (px < 0 || sv < 0 || st < 0) return [];
  return lines.slice(1).flatMap((l) => {
    const f = l.split(',');
    if (f[px] !== backend || f[sv] === 'BACKEND' || f[sv] === 'FRONTEND') return [];
    return [{ name: f[sv] ?? '', status: f[st] ?? '', checkStatus: cs < 0 ? '' : (f[cs] ?? '') }];
  });
}

/** haproxy processes this module started, per lab and node name: one per node at a time. */
const running = new WeakMap<Lab, Set<string>>();

/**
 * Writes `<lab.dir>/<node>-haproxy.cfg` from `opts` (with a stats socket in lab.dir unless one
 * is given), checks it with `haproxy -c` (rejects with haproxy's complaint before anything runs),
 * and starts `haproxy -db -f <cfg>` inside `node`'s namespace. Resolves once the stats socket
 * answers (the listeners are bound by then). Rejects when haproxy exits or does not answer within
 * `timeoutMs` (default 10000 ms), or when a haproxy this module started still runs on that node.
 */
export async function startHaproxy(lab: Lab, node: LabNode, opts: HaproxyOptions, start: { timeoutMs?: number } = {}): Promise<HaproxyPeer> {
  const timeoutMs = start.timeoutMs ?? 10_000;
  let perLab = running.get(lab);
  if (!perLab) running.set(lab, (perLab = new Set()));
  if (perLab.has(node.name)) throw new Error(`haproxy already runs on ${node.name}; stop it first`);
  const socketPath = opts.statsSocket ?? join(lab.dir, `${node.name}-haproxy.sock`);
  const config = haproxyConfig({ ...opts, statsSocket: socketPath });
  const configPath = join(lab.dir, `${node.name}-haproxy.cfg`);
  writeFileSync(configPath, config);
  rmSync(socketPath, { force: true });
  perLab.add(node.name);
  const release = (): void => void perLab.delete(node.name);

  const test = await lab.exec(node.netns, [HAPROXY_PATH, '-c', '-q', '-f', configPath], { allowFail: true, timeoutMs: 10_000 }).catch((e: unknown) => {
    release();
    throw e;
  });
  if (test.code !== 0) {
    release();
    throw new Error(`haproxy -c rejected ${configPath} (exit ${test.code}):\n${(test.stdout + test.stderr).trim()}\n--- config ---\n${config}`);
  }

  const proc = lab.spawn(node.netns, [HAPROXY_PATH, '-db', '-f', configPath], { logFile: join(lab.dir, `${node.name}-haproxy.log`) });
  let exited = false;
  void proc.exited.then(() => {
    exited = true;
    release();
  });
  const servers = async (): Promise<HaproxyServerStat[]> => parseShowStat(await statsCommand(socketPath, 'show stat'));
  const peer: HaproxyPeer = {
    node,
    proc,
    configPath,
    socketPath,
    servers,
    async waitForServers(done, o = {}) {
      const deadline = Date.now() + (o.timeoutMs ?? 10_000);
      let last: HaproxyServerStat[] | string;
      for (;;) {
        if (exited) throw new Error(`haproxy on ${node.name} exited; output:\n${proc.output().slice(-2000)}`);
        try {
          const s = await servers();
          last = s;
          if (done(s)) return s;
        } catch (e) {
          last = e instanceof Error ? e.message : String(e);
        }
        if (Date.now() > deadline) {
          throw new Error(`haproxy on ${node.name}: timed out waiting for ${o.what ?? 'its servers'}; last: ${JSON.stringify(last)}`);
        }
        await sleep(50);
      }
    },
    stop: (stopTimeoutMs = 3000) => proc.stop('SIGTERM', stopTimeoutMs),
  };
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited) throw new Error(`haproxy on ${node.name} exited during start; output:\n${proc.output().slice(-2000)}`);
    const ok = await statsCommand(socketPath, 'show info', 1000).then(
      (s) => /^Name: HAProxy/m.test(s),
      () => false,
    );
    if (ok) return peer;
    if (Date.now() > deadline) {
      await proc.stop('SIGKILL', 2000);
      throw new Error(`haproxy on ${node.name} did not answer on ${socketPath} within ${timeoutMs} ms; output:\n${proc.output().slice(-2000)}`);
    }
    await sleep(50);
  }
}
