/**
 * The local proxy (src/dataplane/proxy.ts) as a process of its own, so a test can run it inside
 * a lab node's network namespace and drive it the way the agent would.
 *
 *   node dist/lab/proxy-endpoint.js --endpoint 127.0.0.1:7443 [--endpoint [::1]:7443]
 *        [--connect-timeout 1000] [--commands PATH]
 *
 * Commands arrive as JSON lines on stdin, or from PATH (a FIFO: lab.spawn gives its processes
 * no stdin). One object per line, `id` echoed in the answer:
 *   {"id":1,"op":"setBackends","backends":[{"address":"10.78.S.11","port":6443},…]}
 *   {"id":2,"op":"resetBackend","backend":{"address":"10.78.S.12","port":6443}}
 *   {"id":3,"op":"status"}
 *   {"id":4,"op":"close"}                       closes the proxy, acks, exits 0
 *
 * stdout, one JSON object per line:
 *   {"event":"listening","status":{…}}            once every endpoint is bound
 *   {"ack":1,"ok":true,"status":{…}}              setBackends / status / close
 *   {"ack":2,"ok":true,"reset":1,"status":{…}}    resetBackend: connections reset
 *   {"ack":5,"ok":false,"error":"…"}              a bad command (the proxy keeps running)
 * `status` is ProxyLocalDataplane.status(). The proxy's log lines go to stderr, as JSON.
 * End of input, SIGTERM or SIGINT close the proxy and exit 0; a failed open() prints the error
 * on stderr and exits 1.
 */
import { createReadStream, open as fsOpen, statSync } from 'node:fs';
import net from 'node:net';
import type { Readable } from 'node:stream';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { ProxyLocalDataplane } from '../src/dataplane/proxy.js';
import type { Log } from '../src/log/log.js';
import type { LocalBackend, LocalEndpoint } from '../src/dataplane/local.js';
import { runIfMain } from './entry.js';

/** One command line. */
export type ProxyCommand =
  | { id: number; op: 'setBackends'; backends: LocalBackend[] }
  | { id: number; op: 'resetBackend'; backend: LocalBackend }
  | { id: number; op: 'status' }
  | { id: number; op: 'close' };

/** `host:port` or `[v6]:port` → an endpoint. @throws TypeError when it is neither. */
export function parseEndpoint(text: string): LocalEndpoint {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text);
  if (!m) throw new TypeError(`--endpoint must be host:port or [v6]:port, got ${JSON.stringify(text)}`);
  return { address: (m[1] ?? m[2])!, port: Number(m[3]) };
}

/**
 * The command input at `path`. A FIFO is read through a libuv pipe (epoll), not the thread
 * pool: a thread-pool read blocked on an idle FIFO would hold the process at exit. The open
 * waits for a writer (a FIFO opened for reading blocks until one exists); reading ends when
 * the last writer closes it.
 */
async function openCommands(path: string): Promise<Readable> {
  if (!statSync(path).isFIFO()) return createReadStream(path);
  // a plain fd, not a FileHandle: a FileHandle closes its fd when collected, and the socket
  // would then read whatever the kernel numbers that fd next (an accepted connection)
  const fd = await new Promise<number>((resolve, reject) => fsOpen(path, 'r', (e, n) => (e ? reject(e) : resolve(n))));
  return new net.Socket({ fd, readable: true, writable: false });
}

const out = (o: object): void => void process.stdout.write(`${JSON.stringify(o)}\n`);

function stderrLog(): Pick<Log, 'info' | 'warn' | 'error'> {
  const line = (level: string) => (o: object, msg: string) =>
    void process.stderr.write(`${JSON.stringify({ level, time: new Date().toISOString(), ...o, msg })}\n`);
  return { info: line('info'), warn: line('warn'), error: line('error') };
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      endpoint: { type: 'string', multiple: true },
      'connect-timeout': { type: 'string', default: '1000' },
      commands: { type: 'string' },
    },
    strict: true,
  });
  const endpoints = (values.endpoint ?? []).map(parseEndpoint);
  const proxy = await ProxyLocalDataplane.open({ endpoints, log: stderrLog(), connectTimeoutMs: Number(values['connect-timeout']) });
  out({ event: 'listening', status: proxy.status() });

  let closing: Promise<void> | null = null;
  const close = (): Promise<void> => (closing ??= proxy.close({ keep: false }));
  const input = values.commands === undefined ? process.stdin : await openCommands(values.commands);
  const lines = createInterface({ input, crlfDelay: Infinity });
  const finished = new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
    lines.once('close', resolve);
  });

  // commands run one at a time, in order
  let queue = Promise.resolve();
  lines.on('line', (line) => {
    if (line.trim() === '') return;
    queue = queue.then(async () => {
      let id: unknown = null;
      try {
        const cmd = JSON.parse(line) as ProxyCommand;
        id = cmd.id;
        switch (cmd.op) {
          case 'setBackends':
            await proxy.setBackends(cmd.backends);
            return out({ ack: id, ok: true, status: proxy.status() });
          case 'resetBackend': {
            const reset = await proxy.resetBackend(cmd.backend);
            return out({ ack: id, ok: true, reset, status: proxy.status() });
          }
          case 'status':
            return out({ ack: id, ok: true, status: proxy.status() });
          case 'close':
            await close();
            out({ ack: id, ok: true, status: proxy.status() });
            return lines.close();
          default:
            throw new TypeError(`unknown op ${JSON.stringify((cmd as { op?: unknown }).op)}`);
        }
      } catch (e) {
        out({ ack: id, ok: false, error: e instanceof Error ? e.message : String(e) });
      }
    });
  });
  await finished;
  await queue;
  await close();
  return 0;
}

runIfMain(import.meta.url, 'proxy-endpoint', main);
