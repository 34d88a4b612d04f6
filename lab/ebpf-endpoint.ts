/**
 * The lab's driver for the eBPF node-local endpoint, and a client that reports what getpeername()
 * says. Both run inside a node's network namespace (the BPF programs rewrite only sockets of the
 * namespace that attached them; the test process is in the machine's own).
 *
 *   node dist/lab/ebpf-endpoint.js serve --cgroup DIR --pin-dir DIR
 *        --endpoint 127.0.0.1:7443 [--endpoint [::1]:7443 …] [--object FILE]
 *
 *     Opens EbpfLocalDataplane (src/dataplane/ebpf.ts) in this namespace, then reads commands
 *     from stdin, one JSON object per line, and answers each on stdout with the same `id`:
 *       {"id":1,"op":"set","backends":[{"address":"10.78.S.11","port":6443},…]}
 *                                           → {"id":1,"ok":true,"status":{…LocalDataplaneStatus}}
 *       {"id":2,"op":"reset","backend":{"address":…,"port":…}}
 *                                           → {"id":2,"ok":true,"destroyed":1}
 *       {"id":3,"op":"status"}              → {"id":3,"ok":true,"status":{…},"map":[{endpoint,backends}]}
 *       {"id":4,"op":"close","keep":true}   → {"id":4,"ok":true}, then exit 0
 *       a failure                           → {"id":n,"ok":false,"error":"message","code":"EPERM"}
 *     First line: {"event":"ready","reused":{"maps":[…],"links":[…]},"cgroup":…,"pinDir":…}
 *     (or {"event":"error",…} and exit 1). stdin closing, SIGTERM or SIGINT: close({keep: true})
 *     (an agent that stops without deciding keeps the data plane), exit 0. Logs go to stderr.
 *
 *   node dist/lab/ebpf-endpoint.js connect --address 127.0.0.1 --port 7443
 *        [--ca FILE] [--count 1] [--timeout 2000] [--listen]
 *
 *     Opens --count connections one after another (bounded, each by --timeout). With --ca: TLS
 *     verified against the CA, GET /version, the serving node read from the body. Without: a
 *     plain TCP connect, closed at once. --listen first listens on --address:--port itself, so a
 *     connection that is NOT rewritten lands here (reported as node "self").
 *     One line per connection, then a summary:
 *       {"ok":true,"node":"n2","peer":"127.0.0.1:7443"}      peer = getpeername() of the socket
 *       {"ok":false,"error":"ECONNREFUSED"}
 *       {"summary":true,"count":N,"ok":N,"nodes":{"n1":…},"peers":{"127.0.0.1:7443":…},"errors":{…}}
 */
import { readFileSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { EbpfLocalDataplane } from '../src/dataplane/ebpf.js';
import type { LocalBackend, LocalEndpoint } from '../src/dataplane/local.js';

const out = (o: object): void => void process.stdout.write(`${JSON.stringify(o, (_, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}\n`);
const errText = (e: unknown): { error: string; code?: string } => {
  const err = e as { message?: string; code?: unknown; cause?: { code?: unknown } };
  const code = typeof err.cause?.code === 'string' ? err.cause.code : typeof err.code === 'string' ? err.code : undefined;
  return { error: err.message ?? String(e), ...(code === undefined ? {} : { code }) };
};

/** "127.0.0.1:7443" / "[::1]:7443" → endpoint. */
export function parseEndpoint(text: string): LocalEndpoint {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(text) ?? /^([^:]+):(\d+)$/.exec(text);
  if (!m) throw new TypeError(`an endpoint is host:port or [v6]:port, got ${JSON.stringify(text)}`);
  return { address: m[1]!, port: Number(m[2]) };
}

// ---------------------------------------------------------------------------------------------
// serve

interface Command {
  id?: number;
  op?: string;
  backends?: LocalBackend[];
  backend?: LocalBackend;
  keep?: boolean;
}

async function serve(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      cgroup: { type: 'string' },
      'pin-dir': { type: 'string' },
      endpoint: { type: 'string', multiple: true },
      object: { type: 'string' },
    },
  });
  if (!values.cgroup || !values['pin-dir'] || !values.endpoint?.length) {
    process.stderr.write('serve needs --cgroup, --pin-dir and at least one --endpoint\n');
    return 2;
  }
  const log = {
    info: (o: object, m: string): void => void process.stderr.write(`[ebpf-endpoint] ${m} ${JSON.stringify(o)}\n`),
    warn: (o: object, m: string): void => void process.stderr.write(`[ebpf-endpoint] WARN ${m} ${JSON.stringify(o)}\n`),
  };
  let dp: EbpfLocalDataplane;
  try {
    dp = await EbpfLocalDataplane.open({
      endpoints: values.endpoint.map(parseEndpoint),
      cgroup: values.cgroup,
      pinDir: values['pin-dir'],
      ...(values.object === undefined ? {} : { object: values.object }),
      log,
    });
  } catch (e) {
    out({ event: 'error', ...errText(e) });
    return 1;
  }
  out({ event: 'ready', reused: dp.reused, cgroup: dp.cgroup, pinDir: dp.pinDir, pid: process.pid });

  let closing: Promise<void> | undefined;
  const closeOnce = (keep: boolean): Promise<void> => (closing ??= dp.close({ keep }));
  const onSignal = (): void => void closeOnce(true).finally(() => process.exit(0));
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line.trim().startsWith('{')) continue;
    let cmd: Command;
    try {
      cmd = JSON.parse(line) as Command;
    } catch (e) {
      out({ ok: false, ...errText(e) });
      continue;
    }
    const id = cmd.id;
    try {
      switch (cmd.op) {
        case 'set':
          await dp.setBackends(cmd.backends ?? []);
          out({ id, ok: true, status: dp.status() });
          break;
        case 'reset':
          if (!cmd.backend) throw new TypeError('reset needs a backend');
          out({ id, ok: true, destroyed: await dp.resetBackend(cmd.backend) });
          break;
        case 'status':
          out({ id, ok: true, status: dp.status(), map: dp.readEndpoints() });
          break;
        case 'close':
          await closeOnce(cmd.keep !== false);
          out({ id, ok: true });
          return 0;
        default:
          throw new TypeError(`unknown op ${JSON.stringify(cmd.op)}`);
      }
    } catch (e) {
      out({ id, ok: false, ...errText(e) });
    }
  }
  await closeOnce(true);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// connect

interface ConnectResult {
  ok: boolean;
  node?: string;
  peer?: string;
  error?: string;
}

const peerOf = (s: net.Socket): string | undefined =>
  s.remoteAddress === undefined ? undefined : s.remoteFamily === 'IPv6' ? `[${s.remoteAddress}]:${s.remotePort}` : `${s.remoteAddress}:${s.remotePort}`;

function connectTls(address: string, port: number, ca: Buffer, timeoutMs: number): Promise<ConnectResult> {
  return new Promise((resolve) => {
    let peer: string | undefined;
    const req = https.get({ host: address, port, path: '/version', ca, agent: false, timeout: timeoutMs }, (res) => {
      peer ??= peerOf(res.socket);
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        let node: string | undefined;
        try {
          node = (JSON.parse(body) as { node?: string }).node;
        } catch {
          node = undefined;
        }
        resolve({ ok: res.statusCode === 200, ...(node === undefined ? {} : { node }), ...(peer === undefined ? {} : { peer }) });
      });
      res.on('error', (e: NodeJS.ErrnoException) => resolve({ ok: false, error: e.code ?? e.message }));
    });
    req.on('socket', (s) => s.once('secureConnect', () => (peer = peerOf(s))));
    req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'timeout' })));
    req.on('error', (e: NodeJS.ErrnoException) => resolve({ ok: false, error: e.code ?? e.message }));
  });
}

function connectTcp(address: string, port: number, timeoutMs: number, accepted: Set<number>): Promise<ConnectResult> {
  return new Promise((resolve) => {
    const s = net.connect({ host: address, port });
    const timer = setTimeout(() => {
      s.destroy();
      resolve({ ok: false, error: 'timeout' });
    }, timeoutMs);
    s.once('connect', () => {
      const peer = peerOf(s);
      const local = s.localPort;
      // give our own listener (--listen) a moment to see the connection
      setTimeout(() => {
        clearTimeout(timer);
        s.destroy();
        resolve({ ok: true, ...(local !== undefined && accepted.has(local) ? { node: 'self' } : {}), ...(peer === undefined ? {} : { peer }) });
      }, 20);
    });
    s.once('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      resolve({ ok: false, error: e.code ?? e.message });
    });
  });
}

async function connect(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      address: { type: 'string' },
      port: { type: 'string' },
      ca: { type: 'string' },
      count: { type: 'string', default: '1' },
      timeout: { type: 'string', default: '2000' },
      listen: { type: 'boolean', default: false },
    },
  });
  const port = Number(values.port);
  const count = Number(values.count);
  const timeoutMs = Number(values.timeout);
  if (!values.address || !Number.isInteger(port) || !Number.isInteger(count) || count < 1 || count > 10_000 || !(timeoutMs > 0)) {
    process.stderr.write('connect needs --address, --port, and a --count 1..10000\n');
    return 2;
  }
  const address = values.address;
  const ca = values.ca === undefined ? undefined : readFileSync(values.ca);
  const accepted = new Set<number>();
  let server: net.Server | undefined;
  if (values.listen) {
    server = net.createServer((s) => {
      if (s.remotePort !== undefined) accepted.add(s.remotePort);
      s.on('error', () => undefined);
      s.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      server!.once('error', reject);
      server!.listen(port, address, () => resolve());
    });
  }
  const summary = {
    summary: true,
    count,
    ok: 0,
    nodes: {} as Record<string, number>,
    peers: {} as Record<string, number>,
    errors: {} as Record<string, number>,
  };
  for (let i = 0; i < count; i++) {
    const r = ca === undefined ? await connectTcp(address, port, timeoutMs, accepted) : await connectTls(address, port, ca, timeoutMs);
    out(r);
    if (r.ok) summary.ok++;
    if (r.node !== undefined) summary.nodes[r.node] = (summary.nodes[r.node] ?? 0) + 1;
    if (r.peer !== undefined) summary.peers[r.peer] = (summary.peers[r.peer] ?? 0) + 1;
    if (r.error !== undefined) summary.errors[r.error] = (summary.errors[r.error] ?? 0) + 1;
  }
  server?.close();
  out(summary);
  return 0;
}

async function main(argv: string[]): Promise<number> {
  const [mode, ...rest] = argv;
  if (mode === 'serve') return serve(rest);
  if (mode === 'connect') return connect(rest);
  process.stderr.write('usage: ebpf-endpoint.js serve … | connect … (see the file comment)\n');
  return 2;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e: unknown) => {
      process.stderr.write(`ebpf-endpoint: ${(e as Error).stack ?? String(e)}\n`);
      process.exit(1);
    },
  );
}
