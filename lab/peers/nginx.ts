/**
 * nginx as a lab peer (lab/lab.ts): the node-local apiserver proxy kubespray puts on every
 * node (its "nginx-proxy" static pod, role kubernetes/node, templates/loadbalancer/nginx.conf.j2),
 * rendered for one lab node and run in the foreground inside the node's network namespace:
 *
 *   nginx -e <lab.dir>/<node>-nginx.log -c <lab.dir>/<node>-nginx.conf -g 'daemon off;'
 *
 * What kubespray's nginx.conf says, and what this renders:
 *
 *   kubespray                                       here
 *   error_log stderr notice                         error_log <lab.dir>/<node>-nginx.log notice (and
 *                                                   -e for the messages before the config is read)
 *   worker_processes 2                              the same (option `workerProcesses`)
 *   worker_rlimit_nofile 130048,                    the same
 *     worker_shutdown_timeout 10s
 *   events: multi_accept on, use epoll,             the same
 *     worker_connections 16384
 *   stream upstream kube_apiserver: least_conn,     the same, one `server` per backend
 *     server <ip>:<port> per control-plane node     (IPv6 in brackets)
 *   stream server: listen 127.0.0.1:<port>,         listen <address>:<port> per `listen` entry
 *     proxy_pass kube_apiserver, proxy_timeout 10m, (127.0.0.1 in kubespray; the lab node's own
 *     proxy_connect_timeout 1s                      apiserver owns *:6443, so pick another port);
 *                                                   proxy_timeout / proxy_connect_timeout the same
 *   http { … }: an optional /healthz server         left out (no health port; without an http block
 *                                                   nginx needs none of its temp directories)
 *   (the container's pid file)                      pid <lab.dir>/<node>-nginx.pid
 *
 * Debian builds the stream module as a dynamic module (package libnginx-mod-stream), loaded with
 * `load_module` here because this config does not include /etc/nginx/modules-enabled. nginx's
 * defaults not written by kubespray apply to both: `proxy_next_upstream on` with unlimited tries,
 * so a refused connect moves on to the next server, and passive `max_fails=1 fail_timeout=10s`
 * per server.
 *
 * The master runs as root inside the namespace (it binds the listeners); workers drop to nginx's
 * built-in user (nobody). SIGTERM is nginx's fast shutdown; the lab stops the process group at
 * teardown if nobody did.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import type { Lab, LabNode, LabProcess } from '../lab.js';
import { sleep } from '../wait.js';

/** The nginx binary (Debian's package installs it here). */
export const NGINX_PATH = '/usr/sbin/nginx';
/** Debian's stream module (package libnginx-mod-stream). */
export const NGINX_STREAM_MODULE = '/usr/lib/nginx/modules/ngx_stream_module.so';

/** An IP literal and a port. */
export interface NginxAddress {
  /** IPv4 or IPv6 literal */
  address: string;
  /** 1..65535 */
  port: number;
}

/**
 * One nginx proxy as kubespray configures it. Only `listen` and `backends` are required; the
 * other fields default to kubespray's values. Times in ms.
 */
export interface NginxOptions {
  /** the stream server's `listen` lines (kubespray: 127.0.0.1:<loadbalancer_apiserver_port>) */
  listen: NginxAddress | NginxAddress[];
  /** the upstream's servers, in order (least_conn) */
  backends: NginxAddress[];
  /** `worker_processes`: a count 1..64 or 'auto'; default 2 (kubespray) */
  workerProcesses?: number | 'auto';
  /** `proxy_connect_timeout`, ms; default 1000 (kubespray) */
  connectTimeoutMs?: number;
  /** `proxy_timeout` (idle time in either direction before nginx closes), ms; default 600000 (kubespray: 10m) */
  proxyTimeoutMs?: number;
}

/** Paths of one node's nginx in lab.dir. */
export interface NginxPaths {
  configPath: string;
  pidPath: string;
  errorLogPath: string;
}

function checkInt(name: string, v: number, min: number, max: number): void {
  if (!Number.isInteger(v) || v < min || v > max) throw new TypeError(`${name} must be an integer ${min}..${max}, got ${v}`);
}

function checkAddress(name: string, a: NginxAddress): string {
  if (isIP(a.address) === 0) throw new TypeError(`${name}: not an IP address: ${JSON.stringify(a.address)}`);
  checkInt(`${name}.port`, a.port, 1, 65535);
  return isIP(a.address) === 6 ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
}

/** ms as nginx time text: "10m", "1s" or "250ms". */
const time = (ms: number): string => (ms % 60_000 === 0 ? `${ms / 60_000}m` : ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`);

/**
 * Renders nginx.conf for one node (pure): kubespray's node-local apiserver proxy, see the file
 * comment for each line's origin. Paths must be absolute and hold no whitespace or `;`.
 * @throws TypeError naming the bad option.
 */
export function nginxConfig(opts: NginxOptions, paths: NginxPaths): string {
  const listen = Array.isArray(opts.listen) ? opts.listen : [opts.listen];
  if (listen.length === 0) throw new TypeError('listen: at least one address is required');
  if (opts.backends.length === 0) throw new TypeError('backends: at least one backend is required');
  const listenLines = listen.map((l, i) => checkAddress(`listen[${i}]`, l));
  const servers = opts.backends.map((b, i) => checkAddress(`backends[${i}]`, b));
  const workers = opts.workerProcesses ?? 2;
  if (workers !== 'auto') checkInt('workerProcesses', workers, 1, 64);
  const connectTimeoutMs = opts.connectTimeoutMs ?? 1000;
  const proxyTimeoutMs = opts.proxyTimeoutMs ?? 600_000;
  checkInt('connectTimeoutMs', connectTimeoutMs, 1, 3_600_000);
  checkInt('proxyTimeoutMs', proxyTimeoutMs, 1, 86_400_000);
  for (const [k, p] of Object.entries(paths)) {
    if (!p.startsWith('/') || /[\s;'"{}]/.test(p))
      throw new TypeError(`${k} must be an absolute path without spaces, quotes, braces or ";", got ${JSON.stringify(p)}`);
  }
  return [
    "# rendered by ballast lab/peers/nginx.ts: kubespray's node-local apiserver proxy (nginx-proxy)",
    `load_module ${NGINX_STREAM_MODULE};`,
    `pid ${paths.pidPath};`,
    `error_log ${paths.errorLogPath} notice;`,
    '',
    `worker_processes ${workers};`,
    'worker_rlimit_nofile 130048;',
    'worker_shutdown_timeout 10s;',
    '',
    'events {',
    '  multi_accept on;',
    '  use epoll;',
    '  worker_connections 16384;',
    '}',
    '',
    'stream {',
    '  upstream kube_apiserver {',
    '    least_conn;',
    ...servers.map((s) => `    server ${s};`),
    '  }',
    '',
    '  server {',
    ...listenLines.map((l) => `    listen ${l};`),
    '    proxy_pass kube_apiserver;',
    `    proxy_timeout ${time(proxyTimeoutMs)};`,
    `    proxy_connect_timeout ${time(connectTimeoutMs)};`,
    '  }',
    '}',
    '',
  ].join('\n');
}

/** An nginx running in a lab node (see startNginx). */
export interface NginxPeer extends NginxPaths {
  node: LabNode;
  proc: LabProcess;
  /** SIGTERM (nginx's fast shutdown), SIGKILL after `timeoutMs` (default 3000 ms); resolves with the exit code. */
  stop(timeoutMs?: number): Promise<number | null>;
}

/** nginx processes this module started, per lab and node name: one per node at a time. */
const running = new WeakMap<Lab, Set<string>>();

/** The listening TCP ports of a namespace (`ss -ltnH`), as "address:port" text. */
async function listeningIn(lab: Lab, netns: string): Promise<string> {
  return (await lab.exec(netns, ['ss', '-ltnH'], { allowFail: true, timeoutMs: 5000 })).stdout;
}

/**
 * Writes `<lab.dir>/<node>-nginx.conf` from `opts`, checks it with `nginx -t` (rejects with
 * nginx's complaint before anything runs), and starts nginx in the foreground (`daemon off`)
 * inside `node`'s namespace, pid file and error log in lab.dir. Resolves once every `listen`
 * address is listening in the namespace. Rejects when nginx exits or does not listen within
 * `timeoutMs` (default 10000 ms), or when an nginx this module started still runs on that node.
 */
export async function startNginx(lab: Lab, node: LabNode, opts: NginxOptions, start: { timeoutMs?: number } = {}): Promise<NginxPeer> {
  const timeoutMs = start.timeoutMs ?? 10_000;
  let perLab = running.get(lab);
  if (!perLab) running.set(lab, (perLab = new Set()));
  if (perLab.has(node.name)) throw new Error(`nginx already runs on ${node.name}; stop it first`);
  const paths: NginxPaths = {
    configPath: join(lab.dir, `${node.name}-nginx.conf`),
    pidPath: join(lab.dir, `${node.name}-nginx.pid`),
    errorLogPath: join(lab.dir, `${node.name}-nginx.log`),
  };
  const config = nginxConfig(opts, paths);
  writeFileSync(paths.configPath, config);
  rmSync(paths.pidPath, { force: true });
  perLab.add(node.name);
  const release = (): void => void perLab.delete(node.name);
  // -e: the log for messages before the config's error_log applies (Debian's default is stderr)
  const base = [NGINX_PATH, '-e', paths.errorLogPath, '-c', paths.configPath];

  const test = await lab.exec(node.netns, [...base, '-t', '-q'], { allowFail: true, timeoutMs: 10_000 }).catch((e: unknown) => {
    release();
    throw e;
  });
  if (test.code !== 0) {
    release();
    throw new Error(`nginx -t rejected ${paths.configPath} (exit ${test.code}):\n${(test.stdout + test.stderr).trim()}\n--- config ---\n${config}`);
  }

  const proc = lab.spawn(node.netns, [...base, '-g', 'daemon off;'], { logFile: join(lab.dir, `${node.name}-nginx.out`) });
  let exited = false;
  void proc.exited.then(() => {
    exited = true;
    release();
  });
  const peer: NginxPeer = { node, proc, ...paths, stop: (stopTimeoutMs = 3000) => proc.stop('SIGTERM', stopTimeoutMs) };
  const want = (Array.isArray(opts.listen) ? opts.listen : [opts.listen]).map((l) =>
    isIP(l.address) === 6 ? `[${l.address}]:${l.port}` : `${l.address}:${l.port}`,
  );
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited) throw new Error(`nginx on ${node.name} exited during start; output:\n${proc.output().slice(-2000)}`);
    const ss = (await listeningIn(lab, node.netns)).split('\n').map((l) => l.trim().split(/\s+/)[3] ?? '');
    if (want.every((w) => ss.includes(w))) return peer;
    if (Date.now() > deadline) {
      await proc.stop('SIGKILL', 2000);
      throw new Error(`nginx on ${node.name} did not listen on ${want.join(', ')} within ${timeoutMs} ms; output:\n${proc.output().slice(-2000)}`);
    }
    await sleep(50);
  }
}
