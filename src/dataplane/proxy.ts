/**
 * The node-local endpoint as a user-space TCP proxy: the fallback for hosts where the cgroup BPF
 * programs (src/dataplane/ebpf.ts) cannot be used. No TLS termination: bytes pass through, so
 * the client's TLS session goes end to end to the apiserver, which verifies it as usual (the
 * lab's serving certificates carry 127.0.0.1 and ::1 as SANs, as kubeadm's should).
 *
 * One listener per endpoint (127.0.0.1:7443, [::1]:7443, …). Every accepted connection is a
 * session that goes through two phases:
 *
 *   accept ──► pick (round-robin over the endpoint family's ready set)
 *                │
 *                ▼
 *   connecting / unanswered ──(refused, timeout, reset or FIN before the backend's first byte)──┐
 *     client bytes are sent on AND kept (≤ 64 KiB; the client is paused past that)            │
 *                │ first byte from the backend                            next untried backend ◄┘
 *                ▼                                                        (none left: client RST)
 *   piped: bytes both ways with backpressure, half-close passed on, an error on either side
 *          destroys both (a RST is passed on as a RST)
 *
 * Why replay what the client sent: a backend that is stopping closes connections it accepted
 * but never answered (the lab's stand-in closes every socket at shutdown; the kernel resets the
 * connections still queued on a listener that closes), and a TLS client has sent its
 * ClientHello by then. A server that has not sent a byte has not
 * finished a TLS handshake, so it cannot have acted on any request: giving the same bytes to
 * another backend is safe for TLS. (A plaintext protocol whose server acts before it answers
 * would see a request twice; the apiserver endpoint is always TLS.)
 *
 * Backend choice is ROUND-ROBIN per address family (a cursor that advances once per accepted
 * connection, in the order of the last setBackends), not random: the spread is even and
 * predictable, and a failover continues from the failed backend to the next one in order.
 *
 * The two kinds of down map to the two inputs: an unready-but-alive backend only leaves the set
 * (setBackends), its piped connections keep flowing; a dead one is also reset (resetBackend),
 * which destroys its piped connections with a RST so their clients reconnect at once.
 */
import net from 'node:net';
import { RateLimitedLog } from '../log/ratelimit.js';
import type { LocalBackend, LocalDataplane, LocalDataplaneStatus, LocalEndpoint } from './local.js';
import { addressFamily, canonicalAddress, hostPort, type AddressFamily } from '../net/address.js';
import type { Log } from '../log/log.js';

/** Options of {@link ProxyLocalDataplane.open}. */
export interface ProxyOptions {
  /**
   * Where to listen, at least one. `port` 1..65535; 0 lets the kernel pick a free port (for
   * tests: {@link ProxyLocalDataplane.listening} and status() show the port it got).
   */
  endpoints: readonly LocalEndpoint[];
  log: Pick<Log, 'info' | 'warn' | 'error'>;
  /**
   * How long one connect() to a backend may take before the next backend is tried, in ms,
   * 1..60000; default 1000 (kubespray's nginx proxy uses `proxy_connect_timeout 1s`).
   */
  connectTimeoutMs?: number;
}

/** Counters of the proxy since start (monotonic, for metrics), and the sessions open now. */
export interface ProxyCounters {
  /** client connections accepted on any endpoint */
  accepted: number;
  /** sessions open now (accepted and not yet closed on both sides) */
  active: number;
  /** sessions that reached a backend and were piped */
  piped: number;
  /** backend attempts that failed (refused, timed out, reset or closed before the first byte) and were followed by another attempt */
  failedOver: number;
  /** clients closed with a RST because no backend of their family was ready, or every ready one failed */
  rejected: number;
}

/** status() of the proxy: the interface's fields plus its counters. */
export interface ProxyDataplaneStatus extends LocalDataplaneStatus {
  mode: 'proxy';
  proxy: ProxyCounters;
}

/** A listen() that failed; `code` is the errno name (EADDRINUSE, EADDRNOTAVAIL, EACCES, …). */
export class ProxyListenError extends Error {
  override name = 'ProxyListenError';
  /** errno name, or 'UNKNOWN' */
  readonly code: string;
  /** the endpoint that could not be bound, as host:port */
  readonly endpoint: string;

  constructor(endpoint: string, cause: unknown) {
    const code = (cause as NodeJS.ErrnoException | undefined)?.code ?? 'UNKNOWN';
    const why =
      code === 'EADDRINUSE' ? 'the address is already in use (another process listens there)' : ((cause as Error | undefined)?.message ?? String(cause));
    super(`local proxy cannot listen on ${endpoint}: ${code}: ${why}`, { cause });
    this.code = code;
    this.endpoint = endpoint;
  }
}

/** Client bytes kept for a replay while no backend has answered; past this the client is paused. */
const REPLAY_LIMIT = 64 * 1024;
/** At most one failover log line per backend (and one "no backend" line per endpoint) per this many ms. */
const LOG_EVERY_MS = 1000;

const keyOf = (b: LocalBackend): string => hostPort(b.address, b.port);

/** RST when the socket is connected (SO_LINGER 0, `resetAndDestroy`), a plain destroy while it connects; idempotent. */
function reset(sock: net.Socket): void {
  if (sock.destroyed) return;
  if (sock.connecting) {
    sock.destroy();
    return;
  }
  try {
    sock.resetAndDestroy();
  } catch {
    sock.destroy();
  }
}

function checkPort(what: string, port: number, min: number): void {
  if (!Number.isInteger(port) || port < min || port > 65535) throw new TypeError(`${what}: port must be an integer ${min}..65535, got ${port}`);
}

/** One listener. */
interface Listener {
  server: net.Server;
  family: AddressFamily;
  /** host:port as bound (the real port when 0 was asked for) */
  name: string;
  address: string;
  port: number;
}

/** What a session needs from its proxy (kept off the proxy's public surface). */
interface SessionHooks {
  readonly connectTimeoutMs: number;
  /** the next backend for `s`: round-robin for the first pick, then the next untried one in order */
  pick(s: Session): LocalBackend | null;
  failure(s: Session, backend: LocalBackend, error: string, next: LocalBackend | null): void;
  rejected(s: Session, afterFailures: boolean): void;
  piped(s: Session): void;
  forget(s: Session): void;
}

/** One accepted client and its backend side. */
class Session {
  backend: net.Socket | null = null;
  target: LocalBackend | null = null;
  /** keys of the backends tried so far (each at most once) */
  readonly tried = new Set<string>();
  /** index in the family's list of the last pick (round-robin continues from it) */
  cursor = -1;
  /** client bytes no backend has answered yet, for a replay */
  replay: Buffer[] = [];
  replayBytes = 0;
  clientEnded = false;
  /** the backend sent its first byte: bytes now flow both ways */
  piped = false;
  done = false;
  #clientWaitsForDrain = false;
  #backendWaitsForDrain = false;
  #connectTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly proxy: SessionHooks,
    readonly client: net.Socket,
    readonly listener: Listener,
  ) {}

  start(): void {
    const c = this.client;
    c.setNoDelay(true);
    c.on('data', (chunk: Buffer) => this.#fromClient(chunk));
    c.on('end', () => {
      this.clientEnded = true;
      const b = this.backend;
      if (b && !b.connecting && !b.destroyed) b.end();
    });
    c.on('error', () => this.teardown('client'));
    c.on('close', () => this.#maybeDone());
    this.#next(null);
  }

  #fromClient(chunk: Buffer): void {
    const b = this.backend;
    if (!this.piped) {
      this.replay.push(chunk);
      this.replayBytes += chunk.length;
      if (this.replayBytes > REPLAY_LIMIT) this.client.pause();
      if (b && !b.connecting && !b.destroyed) b.write(chunk);
      return;
    }
    if (!b || b.destroyed) return;
    if (!b.write(chunk) && !this.#clientWaitsForDrain) {
      this.#clientWaitsForDrain = true;
      this.client.pause();
      b.once('drain', () => {
        this.#clientWaitsForDrain = false;
        this.client.resume();
      });
    }
  }

  #fromBackend(b: net.Socket, chunk: Buffer): void {
    if (b !== this.backend) return;
    if (!this.piped) {
      this.piped = true;
      this.replay = [];
      this.replayBytes = 0;
      this.proxy.piped(this);
      if (this.client.isPaused() && !this.#clientWaitsForDrain) this.client.resume();
    }
    if (this.client.destroyed) return;
    if (!this.client.write(chunk) && !this.#backendWaitsForDrain) {
      this.#backendWaitsForDrain = true;
      b.pause();
      this.client.once('drain', () => {
        this.#backendWaitsForDrain = false;
        b.resume();
      });
    }
  }

  /** Connects to the next untried ready backend; with none left, the client gets a RST. */
  #next(failed: { backend: LocalBackend; error: string } | null): void {
    if (this.done) return;
    const pick = this.proxy.pick(this);
    if (failed) this.proxy.failure(this, failed.backend, failed.error, pick);
    if (!pick) {
      this.proxy.rejected(this, failed !== null);
      this.teardown('no-backend');
      return;
    }
    this.target = pick;
    this.tried.add(keyOf(pick));
    const b = net.connect({ host: pick.address, port: pick.port, allowHalfOpen: true, noDelay: true });
    this.backend = b;
    let answered = false;
    const fail = (error: string): void => {
      if (b !== this.backend || this.piped || this.done) return;
      clearTimeout(this.#connectTimer);
      this.backend = null;
      b.removeAllListeners('data');
      reset(b);
      this.#next({ backend: pick, error });
    };
    this.#connectTimer = setTimeout(() => fail('connect timeout'), this.proxy.connectTimeoutMs);
    b.once('connect', () => {
      clearTimeout(this.#connectTimer);
      if (b !== this.backend || this.done) return;
      for (const chunk of this.replay) b.write(chunk);
      if (this.clientEnded) b.end();
    });
    b.on('data', (chunk: Buffer) => {
      answered = true;
      this.#fromBackend(b, chunk);
    });
    b.on('end', () => {
      if (b !== this.backend) return;
      if (!answered && !this.clientEnded) return fail('closed before answering');
      // the backend finished its side: pass the FIN on (half-close)
      if (!answered) this.piped = true;
      if (!this.client.destroyed) this.client.end();
    });
    b.on('error', (e: NodeJS.ErrnoException) => {
      if (b !== this.backend) return;
      if (!answered) return fail(e.code ?? e.message);
      this.teardown('backend');
    });
    b.on('close', () => {
      if (b !== this.backend) return;
      if (!answered && !this.piped) return fail('closed before answering');
      this.#maybeDone();
    });
  }

  /** Both sides closed on their own (FIN both ways): forget the session. */
  #maybeDone(): void {
    if (this.done) return;
    const b = this.backend;
    if (this.client.destroyed && (!b || b.destroyed)) {
      this.done = true;
      this.proxy.forget(this);
    } else if (this.client.destroyed && !this.piped) {
      // the client left before any backend answered
      this.teardown('client');
    }
  }

  /**
   * Ends the session now. `client`: the client side failed (its error is passed on as a RST to
   * the backend); `backend`: the backend failed after answering (RST to the client); `reset`: the
   * backend is dead (RST both ways); `no-backend`: RST to the client; `close`: the proxy stops
   * (both sockets destroyed).
   */
  teardown(why: 'client' | 'backend' | 'reset' | 'no-backend' | 'close'): void {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.#connectTimer);
    const b = this.backend;
    if (why === 'close') {
      this.client.destroy();
      b?.destroy();
    } else {
      reset(this.client);
      if (b) reset(b);
    }
    this.proxy.forget(this);
  }
}

/**
 * The node-local endpoint as a TCP proxy (mode 'proxy'); see the file comment for the session
 * life cycle and why client bytes may be replayed to another backend.
 */
export class ProxyLocalDataplane implements LocalDataplane {
  readonly mode = 'proxy' as const;
  /** connect timeout per backend attempt, ms */
  readonly connectTimeoutMs: number;
  readonly #log: Pick<Log, 'info' | 'warn' | 'error'>;
  readonly #listeners: Listener[];
  /** the ready set in setBackends order, and per family */
  #ready: LocalBackend[] = [];
  #byFamily: Record<AddressFamily, LocalBackend[]> = { 4: [], 6: [] };
  /** round-robin cursor per family */
  readonly #rr: Record<AddressFamily, number> = { 4: 0, 6: 0 };
  readonly #sessions = new Set<Session>();
  readonly #counters: ProxyCounters = { accepted: 0, active: 0, piped: 0, failedOver: 0, rejected: 0 };
  #updates = 0;
  #socketsReset = 0;
  #closed: Promise<void> | null = null;
  /** per-connection failures: the first, then one line per second with the count (log/ratelimit.ts) */
  readonly #limited: RateLimitedLog;
  readonly #hooks: SessionHooks;

  private constructor(listeners: Listener[], log: Pick<Log, 'info' | 'warn' | 'error'>, connectTimeoutMs: number) {
    this.#listeners = listeners;
    this.#log = log;
    this.#limited = new RateLimitedLog(
      (level, fields, msg) => (level === 'error' ? log.error(fields, msg) : level === 'warn' ? log.warn(fields, msg) : log.info(fields, msg)),
      { windowMs: LOG_EVERY_MS },
    );
    this.connectTimeoutMs = connectTimeoutMs;
    this.#hooks = {
      connectTimeoutMs,
      pick: (s) => this.#pick(s),
      failure: (s, backend, error, next) => {
        if (next) this.#counters.failedOver++;
        this.#limited.log(
          'warn',
          `fail ${keyOf(backend)}`,
          { endpoint: s.listener.name, backend: keyOf(backend), err: error, next: next ? keyOf(next) : null },
          next ? 'local proxy: backend failed before answering; trying the next one' : 'local proxy: backend failed before answering; none left to try',
        );
      },
      rejected: (s, afterFailures) => {
        this.#counters.rejected++;
        this.#limited.log(
          'warn',
          `none ${s.listener.name}`,
          { endpoint: s.listener.name, tried: s.tried.size },
          afterFailures ? 'local proxy: every ready backend failed; client reset' : 'local proxy: no ready backend for this endpoint; client reset',
        );
      },
      piped: () => void this.#counters.piped++,
      forget: (s) => void this.#sessions.delete(s),
    };
    for (const l of listeners) l.server.on('connection', (sock: net.Socket) => this.#accept(l, sock));
  }

  /**
   * Listens on every endpoint and resolves once all are bound. The ready set starts empty:
   * until the first setBackends, clients are closed with a RST.
   * @throws TypeError when `endpoints` is empty, holds a non-IP address, a port outside
   *   0..65535 or the same endpoint twice, or when `connectTimeoutMs` is not an integer 1..60000.
   * @throws ProxyListenError naming the endpoint (`code` EADDRINUSE, EADDRNOTAVAIL, …) when one
   *   cannot be bound; the listeners already bound are closed first.
   */
  static async open(opts: ProxyOptions): Promise<ProxyLocalDataplane> {
    const connectTimeoutMs = opts.connectTimeoutMs ?? 1000;
    if (!Number.isInteger(connectTimeoutMs) || connectTimeoutMs < 1 || connectTimeoutMs > 60_000) {
      throw new TypeError(`connectTimeoutMs must be an integer 1..60000 (ms), got ${connectTimeoutMs}`);
    }
    if (opts.endpoints.length === 0) throw new TypeError('endpoints: at least one endpoint is required');
    const wanted = opts.endpoints.map((e, i) => {
      const family = addressFamily(e.address);
      if (family === null) throw new TypeError(`endpoints[${i}]: not an IP address: ${JSON.stringify(e.address)}`);
      checkPort(`endpoints[${i}]`, e.port, 0);
      return { address: canonicalAddress(e.address), port: e.port, family };
    });
    const names = wanted.map((w) => hostPort(w.address, w.port));
    const dup = names.find((n, i) => !n.endsWith(':0') && names.indexOf(n) !== i);
    if (dup !== undefined) throw new TypeError(`endpoints: ${dup} is listed twice`);

    const listeners: Listener[] = [];
    try {
      for (const w of wanted) {
        const server = net.createServer({ allowHalfOpen: true, noDelay: true });
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject);
          // ipv6Only: an IPv6 wildcard must not also take IPv4 (those are endpoints of their own)
          server.listen({ host: w.address, port: w.port, ipv6Only: w.family === 6 }, () => {
            server.off('error', reject);
            resolve();
          });
        }).catch((e: unknown) => {
          throw new ProxyListenError(hostPort(w.address, w.port), e);
        });
        const port = (server.address() as net.AddressInfo).port;
        listeners.push({ server, family: w.family, address: w.address, port, name: hostPort(w.address, port) });
      }
    } catch (e) {
      await Promise.all(listeners.map((l) => new Promise<void>((r) => l.server.close(() => r()))));
      throw e;
    }
    const p = new ProxyLocalDataplane(listeners, opts.log, connectTimeoutMs);
    for (const l of listeners) {
      // after listen(): an accept error (EMFILE, …) is logged; the listener keeps serving
      l.server.on('error', (e: NodeJS.ErrnoException) => opts.log.error({ endpoint: l.name, err: e.message, code: e.code }, 'local proxy: listener error'));
    }
    opts.log.info({ endpoints: listeners.map((l) => l.name), connectTimeoutMs }, 'local proxy listening');
    return p;
  }

  /** The endpoints as bound (the kernel's port where 0 was asked for), in open() order. */
  listening(): LocalEndpoint[] {
    return this.#listeners.map((l) => ({ address: l.address, port: l.port }));
  }

  /**
   * Replaces the ready set (whole replacement). New connections to an IPv4 endpoint go to the
   * IPv4 backends, IPv6 to IPv6; an empty family means its clients get a RST at once. Backends
   * that leave the set keep their piped connections (unready but alive: they drain). Addresses
   * are canonicalized and duplicates dropped (the first kept). A no-op after close().
   * @throws TypeError when an address is not an IP address or a port is not 1..65535 (the set
   *   is then left as it was).
   */
  async setBackends(ready: readonly LocalBackend[]): Promise<void> {
    const next: LocalBackend[] = [];
    const seen = new Set<string>();
    ready.forEach((b, i) => {
      if (addressFamily(b.address) === null) throw new TypeError(`backends[${i}]: not an IP address: ${JSON.stringify(b.address)}`);
      checkPort(`backends[${i}]`, b.port, 1);
      const c = { address: canonicalAddress(b.address), port: b.port };
      if (seen.has(keyOf(c))) return;
      seen.add(keyOf(c));
      next.push(c);
    });
    if (this.#closed) return;
    const before = this.#ready.map(keyOf).join(',');
    this.#ready = next;
    this.#byFamily = { 4: next.filter((b) => addressFamily(b.address) === 4), 6: next.filter((b) => addressFamily(b.address) === 6) };
    this.#updates++;
    if (next.map(keyOf).join(',') !== before) this.#log.info({ backends: next.map(keyOf) }, 'local proxy: ready set replaced');
  }

  /**
   * The backend is dead: destroys every piped session to it with a RST on both sides, so its
   * clients reconnect at once (to the ready set, which should no longer hold it). Sessions still
   * waiting for its first byte move on to the next ready backend instead (not counted).
   * @returns how many client connections were reset (one per piped session).
   * @throws TypeError when the address is not an IP address.
   */
  async resetBackend(backend: LocalBackend): Promise<number> {
    if (addressFamily(backend.address) === null) throw new TypeError(`not an IP address: ${JSON.stringify(backend.address)}`);
    const k = keyOf(backend);
    let n = 0;
    for (const s of [...this.#sessions]) {
      if (!s.target || keyOf(s.target) !== k) continue;
      if (s.piped) {
        s.teardown('reset');
        n++;
      } else if (s.backend) {
        // not answered yet: its 'error' handler moves it on to the next backend
        s.backend.destroy(Object.assign(new Error('backend reset by the agent'), { code: 'ERESET' }));
      }
    }
    this.#socketsReset += n;
    if (n > 0) this.#log.info({ backend: k, connections: n }, 'local proxy: dead backend, its connections were reset');
    return n;
  }

  /** The interface's status plus the proxy's counters (a copy). */
  status(): ProxyDataplaneStatus {
    return {
      mode: 'proxy',
      endpoints: this.#listeners.map((l) => l.name),
      backends: this.#ready.map(keyOf),
      updates: this.#updates,
      socketsReset: this.#socketsReset,
      proxy: { ...this.#counters, active: this.#sessions.size },
    };
  }

  /**
   * Stops listening and destroys every session (client and backend sockets); resolves once
   * every listener is closed. `keep` has no meaning for the proxy: a connection through a user-
   * space proxy cannot outlive its process, so there is nothing to keep and nothing is left
   * behind either way. Idempotent; setBackends is a no-op afterwards.
   */
  close(_opts: { keep: boolean } = { keep: false }): Promise<void> {
    this.#closed ??= (async () => {
      const closing = this.#listeners.map((l) => new Promise<void>((r) => l.server.close(() => r())));
      for (const s of [...this.#sessions]) s.teardown('close');
      await Promise.all(closing);
      this.#limited.close();
      this.#log.info({ endpoints: this.#listeners.map((l) => l.name) }, 'local proxy closed');
    })();
    return this.#closed;
  }

  #pick(s: Session): LocalBackend | null {
    const family = s.listener.family;
    const list = this.#byFamily[family];
    if (list.length === 0) return null;
    let start: number;
    if (s.cursor < 0) {
      start = this.#rr[family] % list.length;
      this.#rr[family] = (start + 1) % list.length;
    } else {
      start = (s.cursor + 1) % list.length;
    }
    for (let i = 0; i < list.length; i++) {
      const idx = (start + i) % list.length;
      const b = list[idx]!;
      if (!s.tried.has(keyOf(b))) {
        s.cursor = idx;
        return b;
      }
    }
    return null;
  }

  #accept(l: Listener, sock: net.Socket): void {
    this.#counters.accepted++;
    // a socket error before the session's listeners are attached must not crash the process
    sock.on('error', () => undefined);
    if (this.#closed) {
      sock.destroy();
      return;
    }
    const s = new Session(this.#hooks, sock, l);
    this.#sessions.add(s);
    s.start();
  }
}
