/**
 * The lab's stand-in apiservers (lab/apiserver-standin.ts), one per node: started, stopped, made
 * ready or not, slowed, their certificates reloaded; the EndpointSlice store they share; the
 * kubeconfig that points at the VIP. Lab (lab.ts) owns one and exposes its methods.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ProbeResult } from './clients/prober.js';
import { appendChange, compactStore, initStore, type SliceChange } from './endpointslice-store.js';
import type { CertPair } from './pki.js';
import { compiledScript, type LabProcess, type LabProcessImpl, type LabRunOptions } from './processes.js';
import { waitFor } from './wait.js';

/** A lab node as the stand-ins need it (a LabNode is one). */
export interface StandinNode {
  name: string;
  netns: string;
  ipv4: string;
  ipv6: string;
}
type LabNode = StandinNode;

/** Options of {@link LabApiservers.startApiservers}. */
export interface StartApiserversOptions {
  port?: number;
  store?: boolean;
  storeFamily?: 4 | 6;
  token?: string;
  shutdownDelayMs?: number;
  /** ms between BOOKMARK events on watches that allow them (the stand-in's --bookmark-ms) */
  bookmarkMs?: number;
  /** ms between the events of the stand-ins' ticking watch (default 200, see apiserver-standin.ts) */
  tickMs?: number;
  nodes?: LabNode[];
}

/** What the stand-ins need of their lab. */
export interface ApiserverLab {
  readonly dir: string;
  readonly ca: CertPair;
  readonly ipv6: boolean;
  readonly vip4: string;
  readonly vip6: string;
  readonly nodes: readonly LabNode[];
  /** throws unless `node` is one of the lab's nodes */
  checkNode(node: LabNode): void;
  /** starts a tracked process in a lab namespace (Lab.spawn) */
  spawn(netns: string, argv: string[], opts: { logFile?: string; env?: Record<string, string> } & LabRunOptions): LabProcessImpl;
  /** the node's serving certificate (Lab.serverCert) */
  serverCert(node: LabNode): Promise<CertPair>;
  /** one GET from the client namespace (probeOnce), timeout in ms */
  probe(url: string, timeoutMs: number): Promise<ProbeResult>;
}

/** The stand-in apiservers of one lab, by node name. */
export class LabApiservers {
  readonly #procs = new Map<string, LabProcessImpl>();
  #port = 6443;
  #opts: { store: boolean; storeFamily: 4 | 6; token?: string; shutdownDelayMs: number; bookmarkMs?: number; tickMs?: number } = {
    store: false,
    storeFamily: 4,
    shutdownDelayMs: 0,
  };

  constructor(private readonly ctx: ApiserverLab) {}

  /**
   * Starts one TLS stand-in apiserver per node (port default 6443, dual-stack) and resolves
   * once each one answers /readyz 200 from the client namespace over IPv4 with the lab CA.
   * @param opts.store the stand-ins share one EndpointSlice store ({@link sliceStore}), each adds
   *   its node's IPv4 address (IPv6 in an IPv6 lab with `storeFamily: 6`) to the `kubernetes`
   *   slice when it starts and removes it on SIGTERM, as kube-apiservers do;
   * @param opts.token the bearer token the /apis paths require (see {@link writeKubeconfig});
   * @param opts.shutdownDelayMs how long a stopped stand-in keeps serving after it left the slice.
   */
  async startApiservers(opts: StartApiserversOptions = {}): Promise<void> {
    this.#port = opts.port ?? 6443;
    this.#opts = {
      store: opts.store ?? false,
      storeFamily: opts.storeFamily ?? 4,
      ...(opts.token === undefined ? {} : { token: opts.token }),
      shutdownDelayMs: opts.shutdownDelayMs ?? 0,
      ...(opts.bookmarkMs === undefined ? {} : { bookmarkMs: opts.bookmarkMs }),
      ...(opts.tickMs === undefined ? {} : { tickMs: opts.tickMs }),
    };
    compiledScript('apiserver-standin');
    compiledScript('prober');
    await Promise.all((opts.nodes ?? this.ctx.nodes).map((n) => this.startApiserver(n)));
  }

  /** The shared EndpointSlice store's directory (lab/endpointslice-store.ts), created on first use. */
  sliceStore(): string {
    const dir = join(this.ctx.dir, 'endpointslices');
    initStore(dir);
    return dir;
  }

  /** Writes one change to the shared store, as if an apiserver had (e.g. removes an address whose stand-in still runs). */
  sliceChange(change: SliceChange): void {
    appendChange(this.sliceStore(), change);
  }

  /** Compacts the shared store: watches and lists from an older resourceVersion get 410. @returns the floor. */
  compactSlices(): number {
    return compactStore(this.sliceStore());
  }

  /**
   * Writes a kubeconfig for `node` like kubeadm's admin.conf: server = https://VIP:port (the
   * lab's vip4, or vip6 with family 6), the lab CA inline, a bearer token user.
   * @returns its path (in the lab directory).
   */
  async writeKubeconfig(node: LabNode, opts: { token: string; family?: 4 | 6; port?: number; path?: string }): Promise<string> {
    const vip = opts.family === 6 ? `[${this.ctx.vip6}]` : this.ctx.vip4;
    const path = opts.path ?? join(this.ctx.dir, `kubeconfig-${node.name}.yaml`);
    const text = kubeconfigYaml(`https://${vip}:${opts.port ?? this.#port}`, await readFile(this.ctx.ca.certFile), opts.token);
    await writeFile(path, text, { mode: 0o600 });
    return path;
  }

  /**
   * (Re)starts `node`'s stand-in (ready), on the port of the last startApiservers (6443 by
   * default); resolves once it serves /readyz 200 to the client. No-op while it runs.
   */
  async startApiserver(node: LabNode): Promise<void> {
    this.ctx.checkNode(node);
    const running = this.#procs.get(node.name);
    if (running?.running) return;
    const script = compiledScript('apiserver-standin');
    const { certFile, keyFile } = await this.ctx.serverCert(node);
    const o = this.#opts;
    const p = this.ctx.spawn(
      node.netns,
      [
        process.execPath,
        script,
        '--name',
        node.name,
        '--cert',
        certFile,
        '--key',
        keyFile,
        '--port',
        String(this.#port),
        '--host',
        this.ctx.ipv6 ? '::' : '0.0.0.0',
        ...(o.store ? ['--store', this.sliceStore(), '--address', o.storeFamily === 6 ? node.ipv6 : node.ipv4] : []),
        ...(o.token === undefined ? [] : ['--token', o.token]),
        ...(o.shutdownDelayMs > 0 ? ['--shutdown-delay', String(o.shutdownDelayMs)] : []),
        ...(o.tickMs === undefined ? [] : ['--tick', String(o.tickMs)]),
        ...(o.bookmarkMs === undefined ? [] : ['--bookmark-ms', String(o.bookmarkMs)]),
        '--readyz-delay-file',
        this.#readyzDelayFile(node),
      ],
      { logFile: `apiserver-${node.name}.log` },
    );
    this.#procs.set(node.name, p);
    await p.waitForOutput(/listening on/, { timeoutMs: 10_000, includeExisting: true });
    const url = `https://${node.ipv4}:${this.#port}/readyz`;
    await waitFor(async () => (await this.ctx.probe(url, 2000)).ok, { timeoutMs: 10_000, intervalMs: 100, what: `${url} to answer 200` });
  }

  /** Stops `node`'s stand-in (SIGTERM, SIGKILL after 3000 ms); no-op when it is not running. */
  async stopApiserver(node: LabNode): Promise<void> {
    this.ctx.checkNode(node);
    const p = this.#procs.get(node.name);
    this.#procs.delete(node.name);
    if (p) await p.stop('SIGTERM', 3000);
  }

  /**
   * Makes `node`'s stand-in answer /readyz 200 (ready) or 500 (not ready); resolves once the
   * stand-in acknowledged the signal (SIGUSR2 / SIGUSR1).
   */
  async setReady(node: LabNode, ready: boolean): Promise<void> {
    this.ctx.checkNode(node);
    const p = this.#procs.get(node.name);
    if (!p?.running) throw new Error(`ballast lab: no stand-in apiserver runs on ${node.name}`);
    const ack = p.waitForOutput(new RegExp(`ready=${ready}`), { timeoutMs: 5000 });
    p.kill(ready ? 'SIGUSR2' : 'SIGUSR1');
    await ack;
  }

  /** The file the stand-in of `node` reads its /readyz delay from. */
  #readyzDelayFile(node: LabNode): string {
    return join(this.ctx.dir, `readyz-delay-${node.name}`);
  }

  /**
   * Makes `node`'s stand-in answer each /readyz `ms` milliseconds late (0: at once again), as an
   * apiserver under load does; takes effect from the next request (the stand-in reads the file
   * per /readyz).
   */
  async setReadyzDelay(node: LabNode, ms: number): Promise<void> {
    this.ctx.checkNode(node);
    if (!Number.isInteger(ms) || ms < 0 || ms > 60_000) throw new RangeError(`ms must be an integer 0..60000, got ${ms}`);
    await writeFile(this.#readyzDelayFile(node), ms === 0 ? '' : String(ms));
  }

  /** The stand-in apiserver process of `node`, if one runs. */
  apiserver(node: LabNode): LabProcess | undefined {
    const p = this.#procs.get(node.name);
    return p?.running ? p : undefined;
  }

  /**
   * Makes `node`'s running stand-in re-read its certificate and key (SIGHUP; new connections get
   * the new pair); resolves once it acknowledged.
   * @throws when no stand-in runs on `node`, or it could not load the files.
   */
  async reloadApiserverCert(node: LabNode): Promise<void> {
    this.ctx.checkNode(node);
    const p = this.#procs.get(node.name);
    if (!p?.running) throw new Error(`ballast lab: no stand-in apiserver runs on ${node.name}`);
    const ack = p.waitForOutput(/certificate (reloaded|reload failed.*)/, { timeoutMs: 5000 });
    p.kill('SIGHUP');
    const m = await ack;
    if (m[1] !== 'reloaded') throw new Error(`ballast lab: the stand-in on ${node.name}: ${m[0]}`);
  }

  /** Forgets every stand-in (teardown stops their processes with the lab's others). */
  clear(): void {
    this.#procs.clear();
  }
}

/**
 * A kubeconfig (YAML text) like kubeadm's admin.conf: one cluster at `server` with the CA (PEM)
 * inline, one user with a bearer token, one current context.
 */
export function kubeconfigYaml(server: string, caPem: Buffer, token: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: lab',
    '  cluster:',
    `    server: ${server}`,
    `    certificate-authority-data: ${caPem.toString('base64')}`,
    'users:',
    '- name: admin',
    '  user:',
    `    token: ${token}`,
    'contexts:',
    '- name: admin@lab',
    '  context:',
    '    cluster: lab',
    '    user: admin',
    'current-context: admin@lab',
    '',
  ].join('\n');
}
