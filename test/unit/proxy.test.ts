/**
 * The local TCP proxy (src/dataplane/proxy.ts) on loopback only: plain TCP line-echo servers as
 * backends on 127.0.0.1 and ::1, every port ephemeral, no root. Every wait is bounded.
 */
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ProxyListenError, ProxyLocalDataplane } from '../../src/dataplane/proxy.js';
import type { Log } from '../../src/log/log.js';
import type { LocalBackend } from '../../src/dataplane/local.js';
import { waitFor } from '../support/index.js';

/** Polls `check` every 5 ms until it holds; throws after `timeoutMs`. */
const until = (what: string, check: () => boolean, timeoutMs = 2000): Promise<unknown> => waitFor(check, { timeoutMs, intervalMs: 5, what });

/** A log that records every line. */
function recordingLog(): Pick<Log, 'info' | 'warn' | 'error'> & { lines: { level: string; o: Record<string, unknown>; m: string }[] } {
  const lines: { level: string; o: Record<string, unknown>; m: string }[] = [];
  const at = (level: string) => (o: object, m: string) => void lines.push({ level, o: o as Record<string, unknown>, m });
  return { lines, info: at('info'), warn: at('warn'), error: at('error') };
}

/**
 * A line-echo backend: answers every line with `<name> <line>`; on the client's FIN it answers
 * `<name> bye` and ends its side (so a half-close passed on by the proxy is visible).
 * `mode: 'close-on-data'` destroys a connection on its first byte without answering.
 */
interface EchoServer {
  name: string;
  backend: LocalBackend;
  server: net.Server;
  sockets: Set<net.Socket>;
  /** connections accepted so far */
  accepted: number;
  close(): Promise<void>;
}

async function echoServer(name: string, host: string, mode: 'echo' | 'close-on-data' | 'raw-echo' = 'echo'): Promise<EchoServer> {
  const sockets = new Set<net.Socket>();
  const e: Partial<EchoServer> & { accepted: number } = { accepted: 0 };
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    e.accepted++;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => undefined);
    if (mode === 'close-on-data') {
      s.once('data', () => s.destroy());
      return;
    }
    if (mode === 'raw-echo') {
      s.pipe(s);
      return;
    }
    let buf = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => {
      buf += d;
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        s.write(`${name} ${buf.slice(0, i)}\n`);
        buf = buf.slice(i + 1);
      }
    });
    s.on('end', () => s.end(`${name} bye\n`));
  });
  await new Promise<void>((r) => server.listen({ host, port: 0 }, () => r()));
  const port = (server.address() as net.AddressInfo).port;
  return Object.assign(e, {
    name,
    backend: { address: host, port },
    server,
    sockets,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  }) as EchoServer;
}

/** A port that nothing listens on (bound, then closed): connects to it are refused. */
async function closedPort(host: string): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen({ host, port: 0 }, () => r()));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** A client of the proxy that records the lines it gets and how its connection ended. */
class Client {
  readonly sock: net.Socket;
  readonly lines: string[] = [];
  error: string | null = null;
  ended = false;
  closed = false;
  #buf = '';

  constructor(host: string, port: number) {
    this.sock = net.connect({ host, port, allowHalfOpen: true });
    this.sock.setEncoding('utf8');
    this.sock.on('data', (d: string) => {
      this.#buf += d;
      let i: number;
      while ((i = this.#buf.indexOf('\n')) >= 0) {
        this.lines.push(this.#buf.slice(0, i));
        this.#buf = this.#buf.slice(i + 1);
      }
    });
    this.sock.on('end', () => (this.ended = true));
    this.sock.on('error', (e: NodeJS.ErrnoException) => (this.error = e.code ?? e.message));
    this.sock.on('close', () => (this.closed = true));
  }

  /** Sends a line and resolves with the answer line (bounded by `timeoutMs`). */
  async ask(line: string, timeoutMs = 2000): Promise<string> {
    const n = this.lines.length;
    this.sock.write(`${line}\n`);
    await until(`an answer to ${line}`, () => this.lines.length > n || this.closed, timeoutMs);
    if (this.lines.length === n) throw new Error(`connection closed without an answer (${this.error ?? 'FIN'})`);
    return this.lines[n]!;
  }

  /** Resolves once the connection is closed (bounded). */
  async waitClosed(timeoutMs = 2000): Promise<void> {
    await until('the client connection to close', () => this.closed, timeoutMs);
  }
}

describe('ProxyLocalDataplane on loopback', () => {
  const cleanup: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const f of cleanup.splice(0).reverse()) await f();
  });

  async function setup(o: { endpoints?: { address: string; port: number }[]; connectTimeoutMs?: number } = {}) {
    const log = recordingLog();
    const proxy = await ProxyLocalDataplane.open({
      endpoints: o.endpoints ?? [{ address: '127.0.0.1', port: 0 }],
      log,
      ...(o.connectTimeoutMs === undefined ? {} : { connectTimeoutMs: o.connectTimeoutMs }),
    });
    cleanup.push(() => proxy.close({ keep: false }));
    const client = (i = 0): Client => {
      const ep = proxy.listening()[i]!;
      const c = new Client(ep.address, ep.port);
      cleanup.push(() => void c.sock.destroy());
      return c;
    };
    return { proxy, log, client };
  }

  async function echo(name: string, host = '127.0.0.1', mode?: 'echo' | 'close-on-data' | 'raw-echo'): Promise<EchoServer> {
    const e = await echoServer(name, host, mode);
    cleanup.push(() => e.close());
    return e;
  }

  it('spreads connections round-robin over the ready set, in setBackends order', async () => {
    const { proxy, client } = await setup();
    const backends = [await echo('a'), await echo('b'), await echo('c')];
    await proxy.setBackends(backends.map((b) => b.backend));
    const served: string[] = [];
    for (let i = 0; i < 6; i++) {
      const c = client();
      served.push((await c.ask('hi')).split(' ')[0]!);
      c.sock.destroy();
    }
    expect(served).toEqual(['a', 'b', 'c', 'a', 'b', 'c']);
    expect(backends.map((b) => b.accepted)).toEqual([2, 2, 2]);
    await until('every session to be forgotten', () => proxy.status().proxy.active === 0);
    expect(proxy.status()).toEqual({
      mode: 'proxy',
      endpoints: [`127.0.0.1:${proxy.listening()[0]!.port}`],
      backends: backends.map((b) => `127.0.0.1:${b.backend.port}`),
      updates: 1,
      socketsReset: 0,
      proxy: { accepted: 6, active: 0, piped: 6, failedOver: 0, rejected: 0 },
    });
  });

  it('serves [::1] from the IPv6 backends and 127.0.0.1 from the IPv4 ones only', async () => {
    const { proxy, client } = await setup({
      endpoints: [
        { address: '127.0.0.1', port: 0 },
        { address: '::1', port: 0 },
      ],
    });
    const v4 = await echo('four', '127.0.0.1');
    const v6 = await echo('six', '::1');
    await proxy.setBackends([v6.backend, v4.backend]);
    expect(proxy.status().endpoints).toEqual([`127.0.0.1:${proxy.listening()[0]!.port}`, `[::1]:${proxy.listening()[1]!.port}`]);
    expect(proxy.status().backends).toEqual([`[::1]:${v6.backend.port}`, `127.0.0.1:${v4.backend.port}`]);
    for (let i = 0; i < 3; i++) {
      expect(await client(0).ask('x')).toBe('four x');
      expect(await client(1).ask('y')).toBe('six y');
    }
    // no IPv6 backend left: [::1] clients are reset, 127.0.0.1 ones still served
    await proxy.setBackends([v4.backend]);
    const c6 = client(1);
    await c6.waitClosed();
    expect(c6.error).toBe('ECONNRESET');
    expect(await client(0).ask('z')).toBe('four z');
    expect(v6.accepted).toBe(3);
  });

  it('fails over from a refused backend: the client gets a working connection', async () => {
    const { proxy, log, client } = await setup();
    const dead = { address: '127.0.0.1', port: await closedPort('127.0.0.1') };
    const live = await echo('live');
    await proxy.setBackends([dead, live.backend]);
    const answers: string[] = [];
    for (let i = 0; i < 4; i++) {
      const c = client();
      answers.push(await c.ask(`r${i}`));
      expect(c.error).toBeNull();
    }
    expect(answers).toEqual(['live r0', 'live r1', 'live r2', 'live r3']);
    // round-robin starts at the dead backend for connections 1 and 3
    expect(proxy.status().proxy).toMatchObject({ accepted: 4, piped: 4, failedOver: 2, rejected: 0 });
    expect(live.accepted).toBe(4);
    // one line per backend per second: the second failure (moments later) is counted, not logged
    const warns = log.lines.filter((l) => l.level === 'warn');
    expect(warns.length).toBeLessThanOrEqual(2); // 2 only if the machine stalled for a second
    expect(warns[0]).toEqual({
      level: 'warn',
      o: {
        endpoint: `127.0.0.1:${proxy.listening()[0]!.port}`,
        backend: `127.0.0.1:${dead.port}`,
        err: 'ECONNREFUSED',
        next: `127.0.0.1:${live.backend.port}`,
      },
      m: 'local proxy: backend failed before answering; trying the next one',
    });
  });

  it('replays what the client sent to the next backend when one closes before answering', async () => {
    const { proxy, client } = await setup();
    const closer = await echo('closer', '127.0.0.1', 'close-on-data');
    const live = await echo('live');
    await proxy.setBackends([closer.backend, live.backend]);
    const c = client();
    expect(await c.ask('hello')).toBe('live hello');
    expect(closer.accepted).toBe(1);
    expect(live.accepted).toBe(1);
    expect(proxy.status().proxy).toMatchObject({ accepted: 1, piped: 1, failedOver: 1, rejected: 0 });
  });

  it('every ready backend refuses: each is tried once, then the client is reset', async () => {
    const { proxy, log, client } = await setup();
    const dead = [await closedPort('127.0.0.1'), await closedPort('127.0.0.1')].map((port) => ({ address: '127.0.0.1', port }));
    await proxy.setBackends(dead);
    const c = client();
    c.sock.write('hello\n');
    await c.waitClosed();
    expect(c.lines).toEqual([]);
    expect(c.error).toBe('ECONNRESET');
    expect(proxy.status().proxy).toMatchObject({ accepted: 1, piped: 0, failedOver: 1, rejected: 1 });
    expect(log.lines.filter((l) => l.level === 'warn').map((l) => l.m)).toEqual([
      'local proxy: backend failed before answering; trying the next one',
      'local proxy: backend failed before answering; none left to try',
      'local proxy: every ready backend failed; client reset',
    ]);
  });

  it('an empty ready set: new clients are reset at once', async () => {
    const { proxy, log, client } = await setup();
    const c = client();
    await c.waitClosed();
    expect(c.error).toBe('ECONNRESET');
    expect(c.lines).toEqual([]);
    const a = await echo('a');
    await proxy.setBackends([a.backend]);
    expect(await client().ask('q')).toBe('a q');
    await proxy.setBackends([]);
    const c2 = client();
    await c2.waitClosed();
    expect(c2.error).toBe('ECONNRESET');
    expect(a.accepted).toBe(1);
    expect(proxy.status()).toMatchObject({ backends: [], updates: 2, proxy: { accepted: 3, piped: 1, failedOver: 0, rejected: 2 } });
    // one line per endpoint per second: the second reset (moments later) is counted, not logged
    const warns = log.lines.filter((l) => l.level === 'warn');
    expect(warns.length).toBeLessThanOrEqual(2); // 2 only if the machine stalled for a second
    expect(warns[0]).toEqual({
      level: 'warn',
      o: { endpoint: `127.0.0.1:${proxy.listening()[0]!.port}`, tried: 0 },
      m: 'local proxy: no ready backend for this endpoint; client reset',
    });
  });

  it('resetBackend resets exactly the connections piped to that backend', async () => {
    const { proxy, log, client } = await setup();
    const a = await echo('a');
    const b = await echo('b');
    await proxy.setBackends([a.backend, b.backend]);
    const cs = [client(), client(), client(), client()];
    const names: string[] = [];
    for (const c of cs) names.push((await c.ask('hi')).split(' ')[0]!);
    expect(names).toEqual(['a', 'b', 'a', 'b']);
    expect(await proxy.resetBackend(a.backend)).toBe(2);
    await cs[0]!.waitClosed();
    await cs[2]!.waitClosed();
    expect([cs[0]!.error, cs[2]!.error]).toEqual(['ECONNRESET', 'ECONNRESET']);
    await until('backend a to see its connections go', () => a.sockets.size === 0);
    expect(await cs[1]!.ask('still')).toBe('b still');
    expect(await cs[3]!.ask('still')).toBe('b still');
    expect([cs[1]!.closed, cs[3]!.closed]).toEqual([false, false]);
    // nothing left for a, and b's connections are b's
    expect(await proxy.resetBackend(a.backend)).toBe(0);
    expect(proxy.status().socketsReset).toBe(2);
    expect(log.lines.filter((l) => l.m.includes('dead backend'))).toEqual([
      { level: 'info', o: { backend: `127.0.0.1:${a.backend.port}`, connections: 2 }, m: 'local proxy: dead backend, its connections were reset' },
    ]);
  });

  it('a backend leaving the set keeps its established connection working (unready but alive)', async () => {
    const { proxy, client } = await setup();
    const a = await echo('a');
    const b = await echo('b');
    await proxy.setBackends([a.backend, b.backend]);
    const onA = client();
    expect(await onA.ask('1')).toBe('a 1');
    await proxy.setBackends([b.backend]);
    expect(await onA.ask('2')).toBe('a 2');
    for (let i = 0; i < 3; i++) expect(await client().ask(`n${i}`)).toBe(`b n${i}`);
    expect(await onA.ask('3')).toBe('a 3');
    expect(a.accepted).toBe(1);
    expect(proxy.status()).toMatchObject({ backends: [`127.0.0.1:${b.backend.port}`], updates: 2, socketsReset: 0 });
  });

  it('passes a half-close on: the client FIN reaches the backend, which can still answer', async () => {
    const { proxy, client } = await setup();
    const a = await echo('a');
    await proxy.setBackends([a.backend]);
    const c = client();
    expect(await c.ask('x')).toBe('a x');
    c.sock.end();
    await until('the backend FIN', () => c.ended);
    expect(c.lines).toEqual(['a x', 'a bye']);
    await c.waitClosed();
    expect(c.error).toBeNull();
    await until('the session to be forgotten', () => proxy.status().proxy.active === 0);
  });

  it('moves 8 MiB each way intact through a slow reader (backpressure)', async () => {
    const { proxy } = await setup();
    const a = await echo('a', '127.0.0.1', 'raw-echo');
    await proxy.setBackends([a.backend]);
    const payload = randomBytes(8 << 20);
    const ep = proxy.listening()[0]!;
    const sock = net.connect({ host: ep.address, port: ep.port });
    cleanup.push(() => void sock.destroy());
    const got: Buffer[] = [];
    let size = 0;
    sock.on('data', (d: Buffer) => {
      got.push(d);
      size += d.length;
      // a slow reader: pause now and then so the proxy's buffers fill up
      if (got.length % 16 === 0) {
        sock.pause();
        setTimeout(() => sock.resume(), 2);
      }
    });
    sock.end(payload);
    await until('the whole echo', () => size >= payload.length, 20_000);
    const hash = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
    expect(size).toBe(payload.length);
    expect(hash(Buffer.concat(got))).toBe(hash(payload));
  }, 30_000);

  it('close() stops listening, closes every connection and leaves nothing behind', async () => {
    const { proxy, log, client } = await setup({
      endpoints: [
        { address: '127.0.0.1', port: 0 },
        { address: '::1', port: 0 },
      ],
    });
    const a = await echo('a');
    await proxy.setBackends([a.backend]);
    const c = client();
    expect(await c.ask('x')).toBe('a x');
    const eps = proxy.listening();
    await proxy.close({ keep: true });
    // the proxy's FIN (the client is half-open: allowHalfOpen)
    await until('the client to see the end', () => c.ended || c.closed);
    expect(c.lines).toEqual(['a x']);
    await until('the backend side to close', () => a.sockets.size === 0);
    for (const ep of eps) {
      const after = new Client(ep.address, ep.port);
      await after.waitClosed();
      expect(after.error).toBe('ECONNREFUSED');
    }
    expect(proxy.status().proxy.active).toBe(0);
    // idempotent, and updates after close change nothing
    await proxy.close({ keep: false });
    await proxy.setBackends([]);
    expect(proxy.status().backends).toEqual([`127.0.0.1:${a.backend.port}`]);
    expect(log.lines.filter((l) => l.m === 'local proxy closed')).toHaveLength(1);
  });

  it('a busy endpoint fails open() with an error naming it, and closes what it had bound', async () => {
    const busy = net.createServer();
    await new Promise<void>((r) => busy.listen({ host: '127.0.0.1', port: 0 }, () => r()));
    cleanup.push(() => new Promise<void>((r) => busy.close(() => r())));
    const busyPort = (busy.address() as net.AddressInfo).port;
    const firstPort = await closedPort('::1');
    const err = await ProxyLocalDataplane.open({
      endpoints: [
        { address: '::1', port: firstPort },
        { address: '127.0.0.1', port: busyPort },
      ],
      log: recordingLog(),
    }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ProxyListenError);
    expect((err as ProxyListenError).code).toBe('EADDRINUSE');
    expect((err as ProxyListenError).endpoint).toBe(`127.0.0.1:${busyPort}`);
    expect((err as Error).message).toBe(
      `local proxy cannot listen on 127.0.0.1:${busyPort}: EADDRINUSE: the address is already in use (another process listens there)`,
    );
    // the [::1] listener bound first was closed again
    const c = new Client('::1', firstPort);
    await c.waitClosed();
    expect(c.error).toBe('ECONNREFUSED');
  });

  it('rejects bad arguments with a TypeError naming them', async () => {
    const log = recordingLog();
    await expect(ProxyLocalDataplane.open({ endpoints: [], log })).rejects.toThrow(new TypeError('endpoints: at least one endpoint is required'));
    await expect(ProxyLocalDataplane.open({ endpoints: [{ address: 'localhost', port: 1 }], log })).rejects.toThrow(
      new TypeError('endpoints[0]: not an IP address: "localhost"'),
    );
    await expect(ProxyLocalDataplane.open({ endpoints: [{ address: '127.0.0.1', port: 70000 }], log })).rejects.toThrow(
      new TypeError('endpoints[0]: port must be an integer 0..65535, got 70000'),
    );
    await expect(ProxyLocalDataplane.open({ endpoints: [{ address: '127.0.0.1', port: 0 }], log, connectTimeoutMs: 0 })).rejects.toThrow(
      new TypeError('connectTimeoutMs must be an integer 1..60000 (ms), got 0'),
    );
    const { proxy } = await setup();
    await expect(proxy.setBackends([{ address: '10.0.0.1', port: 0 }])).rejects.toThrow(new TypeError('backends[0]: port must be an integer 1..65535, got 0'));
    await expect(proxy.setBackends([{ address: 'fd00::1%eth0', port: 6443 }])).rejects.toThrow(TypeError);
    expect(proxy.status()).toMatchObject({ backends: [], updates: 0 });
    // canonical text, duplicates dropped
    await proxy.setBackends([
      { address: 'FD00:0::11', port: 6443 },
      { address: 'fd00::11', port: 6443 },
      { address: '10.0.0.1', port: 6443 },
    ]);
    expect(proxy.status().backends).toEqual(['[fd00::11]:6443', '10.0.0.1:6443']);
  });
});
