/**
 * The nftables applier: puts the ruleset that src/dataplane/nftables.ts renders into the kernel
 * with `nft -f -` (one transaction per apply), removes it, and reads its counters. The `nft`
 * process is injected ({@link Executor}), so the same code runs against a fake in unit tests and
 * against the real kernel (inside a network namespace) in integration tests.
 *
 * Counters and table replacement: every apply deletes and recreates the table, which would reset
 * the per-backend counter objects to zero. So before a replacement the applier reads the live
 * values and renders the new counters starting from them (`counter be_… { packets N bytes M }`):
 * the counters stay monotonic across applies and across agent restarts (the kernel holds them).
 * Connections counted between that read and the commit (a few milliseconds) are lost.
 */
import { BallastError, type ErrorCode } from '../errors.js';
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import {
  backendKey,
  evictElements,
  nftFamily,
  parseCounterName,
  renderRemoval,
  renderRuleset,
  TABLE_NAME,
  type DesiredDataplane,
  type EvictedFlow,
} from './nftables.js';

/** What a finished command returned. `code` is its exit status (-1: killed or could not run). */
export interface ExecResult {
  code: number;
  stdout: string;
  stderr: string;
  /** set when the command was killed: it ran past its time limit, or the call was aborted */
  killed?: 'timeout' | 'aborted';
}

/** Options of one {@link Executor} call. */
export interface ExecOptions {
  /** aborting it kills the command at once (the call resolves with `killed: 'aborted'`) */
  signal?: AbortSignal;
}

/**
 * Runs one command with `args` and `stdin` and resolves with its exit status and output; it
 * rejects only when the command cannot be started at all (e.g. ENOENT). The applier's executor
 * runs `nft` (nft(8)); conntrack.ts's runs `conntrack` (conntrack(8)).
 */
export type Executor = (args: string[], stdin: string, opts?: ExecOptions) => Promise<ExecResult>;

/** How long one helper command (nft, conntrack) may run before it is killed, ms. */
export const COMMAND_TIMEOUT_MS = 5000;

/** Process groups of the helper commands running now (see {@link commandExecutor}). */
const running = new Set<number>();
let exitHookInstalled = false;

/** SIGKILLs the process group of `pid` (the command and whatever it started). */
function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    /* gone already */
  }
}

/**
 * An {@link Executor} that spawns `argv[0]` with `argv.slice(1)` followed by the call's args,
 * writes stdin and closes it. `['ip', 'netns', 'exec', 'ns1', 'nft']` runs nft inside a
 * namespace.
 *
 * Every run is bounded: a command still running after `timeoutMs` (default
 * {@link COMMAND_TIMEOUT_MS}, 5 s: nft and conntrack finish in milliseconds; one that hangs —
 * a stuck netlink socket, a wedged lock — must not hold the agent's start or stop) is killed and
 * the call resolves with code -1, `killed: 'timeout'` and a note naming the command in stderr;
 * `opts.signal` aborting kills it at once (`killed: 'aborted'`). The command runs in a process
 * group of its own and the kill is SIGKILL to that whole group, so a child it started (a shell
 * script's `sleep`) dies with it; the call resolves when the command has exited, without waiting
 * for pipes such a child may still hold. When the agent's process exits, every command still
 * running is killed the same way: no helper outlives the agent.
 * @throws TypeError when `argv` is empty.
 */
export function commandExecutor(argv: readonly string[], opts: { timeoutMs?: number } = {}): Executor {
  const [file, ...pre] = argv;
  if (file === undefined) throw new TypeError('commandExecutor: argv must name a command');
  const timeoutMs = opts.timeoutMs ?? COMMAND_TIMEOUT_MS;
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', () => {
      for (const pid of running) killGroup(pid);
    });
  }
  return (args, stdin, call = {}) =>
    new Promise((resolve, reject) => {
      const command = [file, ...pre, ...args].join(' ');
      if (call.signal?.aborted) {
        resolve({ code: -1, stdout: '', stderr: `(${command}: not run, stopping)\n`, killed: 'aborted' });
        return;
      }
      const child = spawn(file, [...pre, ...args], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
      const pid = child.pid;
      if (pid !== undefined) running.add(pid);
      let stdout = '';
      let stderr = '';
      let killed: 'timeout' | 'aborted' | undefined;
      let settled = false;
      child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
      child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
      const kill = (why: 'timeout' | 'aborted'): void => {
        if (killed !== undefined || settled) return;
        killed = why;
        if (pid !== undefined) killGroup(pid);
        else child.kill('SIGKILL');
      };
      const timer = setTimeout(() => kill('timeout'), timeoutMs);
      const onAbort = (): void => kill('aborted');
      call.signal?.addEventListener('abort', onAbort, { once: true });
      const done = (): void => {
        settled = true;
        clearTimeout(timer);
        call.signal?.removeEventListener('abort', onAbort);
        if (pid !== undefined) running.delete(pid);
      };
      child.once('error', (err) => {
        if (settled) return;
        done();
        reject(err);
      });
      const finish = (code: number | null): void => {
        if (settled) return;
        done();
        if (killed === 'timeout') stderr += `(${command} did not finish within ${timeoutMs} ms; killed)\n`;
        if (killed === 'aborted') stderr += `(${command} killed: stopping)\n`;
        resolve({ code: killed !== undefined ? -1 : (code ?? -1), stdout, stderr, ...(killed !== undefined ? { killed } : {}) });
      };
      child.once('close', finish);
      // a killed command's own children may hold its pipes open (they are killed too, but not
      // necessarily before 'close' could come): once it has exited after a kill, do not wait
      child.once('exit', (code) => {
        if (killed === undefined) return;
        child.stdout.destroy();
        child.stderr.destroy();
        finish(code);
      });
      // a command that exits without reading stdin makes the write fail with EPIPE: its exit
      // status and stderr say why, so the write error itself is not interesting
      child.stdin.on('error', () => undefined);
      child.stdin.end(stdin);
    });
}

/** The default executor: `nft` from $PATH. */
export const nftExecutor: Executor = commandExecutor(['nft']);

/** The error code of a failed nft command (to be added to src/errors.ts). */
export const DATAPLANE_ERROR_CODE = 'BALLAST_E_DATAPLANE' satisfies ErrorCode;

/**
 * An nft (or conntrack) command failed. `code` is `BALLAST_E_DATAPLANE`; `stderr` is the
 * command's own message (nft names the line and column of the rendered text); `args` its
 * arguments; `status` its exit status. When thrown by
 * {@link NftablesApplier.apply} the kernel still holds the previous table: the transaction was
 * rejected as a whole.
 */
export class DataplaneError extends BallastError {
  override name = 'DataplaneError';
  readonly args: readonly string[];
  /** the command's exit status (-1: killed, or could not run) */
  readonly status: number;
  readonly stderr: string;

  /**
   * @param message operator-facing text, including the command's stderr.
   * @param args the command's arguments.
   * @param result its exit status (`code`) and stderr.
   * @param options.cause the underlying error (e.g. a spawn ENOENT), kept as `this.cause`.
   */
  constructor(message: string, args: readonly string[], result: { code: number; stderr: string }, options?: { cause?: unknown }) {
    super(DATAPLANE_ERROR_CODE, message, options);
    this.args = args;
    this.status = result.code;
    this.stderr = result.stderr;
  }
}

/** Per-backend counter values, keyed `host:port` (`[v6]:port`). */
export type BackendCounters = Record<string, { packets: number; bytes: number }>;

/** Options of {@link NftablesApplier}. */
export interface NftablesApplierOptions {
  /** Runs nft; default {@link nftExecutor}. */
  exec?: Executor;
  /**
   * Keep a reference listing of each table right after applying it (one `nft -j list table …`
   * more per apply), for {@link NftablesApplier.verify}. Default false.
   */
  track?: boolean;
}

/** What {@link NftablesApplier.verify} found. */
export type TableCheck =
  /** the table is as this applier left it (handles and counter values aside) */
  | 'intact'
  /** there is no such table (`nft flush ruleset`, `nft delete table …`) */
  | 'missing'
  /** the table is there but differs: a chain, rule, set or element was added, changed or deleted */
  | 'altered'
  /** nothing to compare with: this applier has not applied (or tracked) that family */
  | 'untracked';

const MAX_MESSAGE_STDERR = 4000;
const NO_TABLE = /No such file or directory|Address family not supported/;

/**
 * Reconciles ballast's nftables tables (`table ip ballast`, `table ip6 ballast`) with a desired
 * state. Calls are serialized (one nft transaction at a time, in call order). Holds the text it
 * last applied per family, to skip an apply that would change nothing.
 */
export class NftablesApplier {
  readonly #exec: Executor;
  readonly #track: boolean;
  readonly #last = new Map<4 | 6, string>();
  /** per family: the normalized listing right after the last apply (track only) */
  readonly #reference = new Map<4 | 6, string>();
  /** families whose table the last verify found missing: the next apply has no counters to read */
  readonly #missing = new Set<4 | 6>();
  /** last values seen per backend key, also for backends no longer in a table */
  readonly #known = new Map<string, { packets: number; bytes: number }>();
  #queue: Promise<unknown> = Promise.resolve();

  constructor(opts: NftablesApplierOptions = {}) {
    this.#exec = opts.exec ?? nftExecutor;
    this.#track = opts.track ?? false;
  }

  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #run(args: string[], stdin: string, what: string, signal?: AbortSignal): Promise<ExecResult> {
    let r: ExecResult;
    try {
      r = await this.#exec(args, stdin, signal ? { signal } : {});
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      throw new DataplaneError(`${what}: could not run nft: ${why}`, args, { code: -1, stderr: '' }, { cause: err });
    }
    return r;
  }

  #fail(what: string, args: string[], r: ExecResult): never {
    const text = r.stderr.trim();
    const shown = text.length > MAX_MESSAGE_STDERR ? `${text.slice(0, MAX_MESSAGE_STDERR)}…` : text;
    if (r.killed === 'timeout') throw new DataplaneError(`${what}: nft ${args.join(' ')} hung and was killed: ${shown || '(no message)'}`, args, r);
    if (r.killed === 'aborted') throw new DataplaneError(`${what}: nft ${args.join(' ')} was killed because the agent is stopping`, args, r);
    throw new DataplaneError(`${what}: nft ${args.join(' ')} exited with ${r.code}: ${shown || '(no message)'}`, args, r);
  }

  /**
   * Makes ballast's table of `d.family` equal to `renderRuleset(d)`, in one `nft -f -`
   * transaction (nft(8): the whole file is committed atomically, or nothing is). When the
   * rendered text equals the one this applier last applied for that family, nothing runs
   * (`changed: false`) unless `opts.force` (use it periodically to repair a table someone
   * else flushed, e.g. `nft flush ruleset`). Before a replacement it reads the live counters
   * (`nft -j list counters table …`) so the new ones start from them.
   *
   * Each nft run is bounded (the executor's time limit, {@link COMMAND_TIMEOUT_MS} for the
   * default one): a hung nft is killed and the apply fails like any other. `opts.signal`
   * aborting kills the nft under way (a stop does not wait for it) and fails the apply.
   *
   * @returns `changed`: whether nft ran; `durationMs`: wall time of this call (monotonic clock, ms).
   * @throws TypeError when `d` is malformed (from renderRuleset; nothing ran).
   * @throws DataplaneError (code BALLAST_E_DATAPLANE) carrying nft's stderr when nft fails;
   *   the kernel keeps the previous table unchanged.
   */
  async apply(d: DesiredDataplane, opts: { force?: boolean; signal?: AbortSignal } = {}): Promise<{ changed: boolean; durationMs: number }> {
    const t0 = performance.now();
    // render before queueing: a malformed desired state rejects at once, and nothing runs
    const text = renderRuleset(d);
    return this.#serial(async () => {
      if (!opts.force && this.#last.get(d.family) === text) return { changed: false, durationMs: performance.now() - t0 };
      // a table just found missing has no live counters: the ones already read seed the new one
      if (!this.#missing.delete(d.family)) await this.#readCounters(d.family, opts.signal);
      const seeded = renderRuleset(d, { counters: Object.fromEntries(this.#known) });
      const args = ['-f', '-'];
      const r = await this.#run(args, seeded, `applying the ${nftFamily(d.family)} ${TABLE_NAME} table`, opts.signal);
      if (r.code !== 0) this.#fail(`applying the ${nftFamily(d.family)} ${TABLE_NAME} table`, args, r);
      this.#last.set(d.family, text);
      if (this.#track) {
        // the commit stands either way: without a reference, verify says 'untracked'
        const listed = await this.#listTable(d.family, opts.signal).catch(() => null);
        if (listed === null) this.#reference.delete(d.family);
        else this.#reference.set(d.family, listed);
      }
      return { changed: true, durationMs: performance.now() - t0 };
    });
  }

  /**
   * Whether ballast's table of `family` is still what this applier (created with `track`) put
   * there: one `nft -j list table <family> ballast`, compared with the listing taken right
   * after the last apply, rule and object handles and counter values left out (libnftables-
   * json(5)). Serialized with the applies, so it never sees one half done.
   * A change someone makes in the few milliseconds between an apply's commit and its reference
   * listing becomes part of the reference and is not reported.
   * @returns see {@link TableCheck}.
   * @throws DataplaneError (code BALLAST_E_DATAPLANE) when nft fails (other than a missing
   *   table) or prints unparsable JSON.
   */
  verify(family: 4 | 6, opts: { signal?: AbortSignal } = {}): Promise<TableCheck> {
    return this.#serial(async () => {
      const reference = this.#reference.get(family);
      if (reference === undefined) return 'untracked';
      const listed = await this.#listTable(family, opts.signal);
      if (listed === null) {
        this.#missing.add(family);
        return 'missing';
      }
      this.#missing.delete(family);
      return listed === reference ? 'intact' : 'altered';
    });
  }

  /**
   * Adds `flows` to the `evict` set of ballast's table of `family` (one `nft -f -` transaction,
   * serialized with the applies; nftables.ts {@link evictElements}): their next mid-stream
   * segment without a conntrack entry gets a TCP RST (the rebalancer's reset, rebalance.ts).
   * The elements expire by themselves; a table replacement drops them. They are not part of what
   * {@link verify} compares. Nothing runs for no flows.
   * @returns how many flows were added.
   * @throws TypeError for a malformed flow (nothing ran).
   * @throws DataplaneError (code BALLAST_E_DATAPLANE) when nft fails (e.g. the table is missing).
   */
  evict(family: 4 | 6, flows: readonly EvictedFlow[], opts: { signal?: AbortSignal } = {}): Promise<number> {
    const text = evictElements(family, flows);
    if (text === '') return Promise.resolve(0);
    return this.#serial(async () => {
      const args = ['-f', '-'];
      const what = `adding ${flows.length} flow(s) to the ${nftFamily(family)} ${TABLE_NAME} evict set`;
      const r = await this.#run(args, text, what, opts.signal);
      if (r.code !== 0) this.#fail(what, args, r);
      return flows.length;
    });
  }

  /**
   * Forgets what was applied for `family`, so that the next {@link apply} of it runs nft even
   * when its text is unchanged (to put back a table someone else removed or changed).
   */
  forget(family: 4 | 6): void {
    this.#last.delete(family);
  }

  /**
   * The backends ballast's table of `family` DNATs new connections to now (`nft -j list table`,
   * the `dnat` statements of its rules, libnftables-json(5)), keyed `host:port` / `[v6]:port`
   * as {@link backendKey}: what a previous process of the agent left (a restart, a crash), for
   * the next one to serve until its own checks have a verdict. [] when there is no such table.
   * @throws DataplaneError (code BALLAST_E_DATAPLANE) when nft fails otherwise, or prints unparsable JSON.
   */
  dnatTargets(family: 4 | 6, opts: { signal?: AbortSignal } = {}): Promise<string[]> {
    return this.#serial(async () => {
      const doc = await this.#listJson(
        ['-j', 'list', 'table', nftFamily(family), TABLE_NAME],
        `listing the ${nftFamily(family)} ${TABLE_NAME} table`,
        opts.signal,
      );
      return doc === null ? [] : parseDnatTargets(doc);
    });
  }

  /**
   * One `nft -j list …` of ballast's table, parsed; null when there is no such table.
   * @throws DataplaneError when nft fails otherwise, or prints unparsable JSON.
   */
  async #listJson(args: string[], what: string, signal?: AbortSignal): Promise<unknown> {
    const r = await this.#run(args, '', what, signal);
    if (r.code !== 0) {
      if (r.killed === undefined && NO_TABLE.test(r.stderr)) return null;
      this.#fail(what, args, r);
    }
    try {
      return JSON.parse(r.stdout) as unknown;
    } catch (err) {
      throw new DataplaneError(`${what}: nft printed no JSON: ${r.stdout.slice(0, 200)}`, args, r, { cause: err });
    }
  }

  /** The table of `family` as {@link normalizedTable} of its JSON listing; null when there is no such table. */
  async #listTable(family: 4 | 6, signal?: AbortSignal): Promise<string | null> {
    const doc = await this.#listJson(['-j', 'list', 'table', nftFamily(family), TABLE_NAME], `listing the ${nftFamily(family)} ${TABLE_NAME} table`, signal);
    return doc === null ? null : normalizedTable(doc);
  }

  /**
   * Deletes ballast's tables of `families` (default both: `table ip ballast`, `table ip6
   * ballast`), one transaction per family; a table that does not exist is not an error (idempotent), nor is
   * an IPv6 table on a kernel without IPv6. Touches no other table. Counter values already
   * read stay in {@link counters}.
   * @throws DataplaneError (code BALLAST_E_DATAPLANE) when nft fails otherwise.
   */
  remove(families: readonly (4 | 6)[] = [4, 6]): Promise<void> {
    for (const family of families) this.#reference.delete(family);
    return this.#serial(async () => {
      for (const family of families) {
        const args = ['-f', '-'];
        const what = `removing the ${nftFamily(family)} ${TABLE_NAME} table`;
        const r = await this.#run(args, renderRemoval(family), what);
        if (r.code !== 0 && !(family === 6 && /Address family not supported/.test(r.stderr))) this.#fail(what, args, r);
        this.#last.delete(family);
      }
    });
  }

  /**
   * The per-backend counters of ballast's tables (`nft -j list counters table ip ballast`, and
   * the same for ip6), keyed `host:port` / `[v6]:port`: `packets` is the number of connections
   * DNATed to that backend (each connection's first packet), `bytes` the size of those first
   * packets. Monotonic while this applier lives (values survive table replacements); backends
   * no longer in a table keep their last value. A missing table contributes nothing.
   * @throws DataplaneError (code BALLAST_E_DATAPLANE) when nft fails, or prints unparsable JSON.
   */
  counters(): Promise<BackendCounters> {
    return this.#serial(async () => {
      await this.#readCounters(4);
      await this.#readCounters(6);
      return Object.fromEntries([...this.#known].map(([k, v]) => [k, { ...v }]));
    });
  }

  async #readCounters(family: 4 | 6, signal?: AbortSignal): Promise<void> {
    const doc = await this.#listJson(
      ['-j', 'list', 'counters', 'table', nftFamily(family), TABLE_NAME],
      `reading the ${nftFamily(family)} ${TABLE_NAME} counters`,
      signal,
    );
    if (doc === null) return;
    for (const [key, value] of parseCountersJson(doc, family)) this.#known.set(key, value);
  }
}

/**
 * The DNAT targets in a table listing (`nft -j list table …`, libnftables-json(5)): every
 * `{"dnat": {"addr": A, "port": P}}` statement of a rule, as {@link backendKey} of (A, P), each
 * once, in listing order. Anything else (no `nftables` array, other statements) is skipped.
 */
export function parseDnatTargets(doc: unknown): string[] {
  const items = (doc as { nftables?: unknown } | null)?.nftables;
  if (!Array.isArray(items)) return [];
  const out = new Set<string>();
  for (const item of items) {
    const exprs = (item as { rule?: { expr?: unknown } } | null)?.rule?.expr;
    if (!Array.isArray(exprs)) continue;
    for (const e of exprs) {
      const d = (e as { dnat?: { addr?: unknown; port?: unknown } } | null)?.dnat;
      if (d && typeof d.addr === 'string' && typeof d.port === 'number') out.add(backendKey({ address: d.addr, port: d.port }));
    }
  }
  return [...out];
}

/**
 * The backend counters in the output of `nft -j list counters …` (libnftables-json(5)):
 * `{"nftables": [{"metainfo": …}, {"counter": {"family", "name", "table", "packets", "bytes", …}}]}`.
 * Only counters of ballast's table of `family` whose name is a backend counter name count.
 * @returns [backend key, values] pairs.
 */
export function parseCountersJson(doc: unknown, family: 4 | 6): [string, { packets: number; bytes: number }][] {
  const list = (doc as { nftables?: unknown } | null)?.nftables;
  if (!Array.isArray(list)) return [];
  const out: [string, { packets: number; bytes: number }][] = [];
  for (const entry of list as unknown[]) {
    const c = (entry as { counter?: Record<string, unknown> } | null)?.counter;
    if (!c || c.table !== TABLE_NAME || c.family !== nftFamily(family) || typeof c.name !== 'string') continue;
    const be = parseCounterName(c.name);
    if (!be) continue;
    const packets = typeof c.packets === 'number' ? c.packets : 0;
    const bytes = typeof c.bytes === 'number' ? c.bytes : 0;
    out.push([backendKey(be), { packets, bytes }]);
  }
  return out;
}

/** Keys of a libnftables-json(5) listing that change without anyone changing the ruleset. */
const VOLATILE_KEYS = new Set(['handle', 'packets', 'bytes']);

/** The set whose elements the agent adds at run time (nftables.ts `evict`): its `elem` is not compared. */
const DYNAMIC_SET = 'evict';

/**
 * A table listing (`nft -j list table …`, libnftables-json(5)) as a canonical string: the
 * `metainfo` entry (nft's version) dropped, the elements of the `evict` set (added by the
 * rebalancer at run time, expiring by themselves) dropped, and every `handle` (renumbered by each
 * replacement) and counter value (`packets`, `bytes`: traffic) left out, in any object. Two
 * listings give the same string exactly when they have the same chains, rules, sets, other sets'
 * elements and objects in the same order.
 */
export function normalizedTable(doc: unknown): string {
  const list = (doc as { nftables?: unknown } | null)?.nftables;
  if (!Array.isArray(list)) throw new TypeError('not an nft -j listing: no "nftables" array');
  const entries = (list as unknown[])
    .filter((e) => !(typeof e === 'object' && e !== null && 'metainfo' in e))
    .map((e) => {
      const set = (e as { set?: Record<string, unknown> } | null)?.set;
      if (!set || set.name !== DYNAMIC_SET || !('elem' in set)) return e;
      const { elem: _dropped, ...rest } = set;
      return { set: rest };
    });
  return JSON.stringify(entries, (key, value: unknown) => (VOLATILE_KEYS.has(key) ? undefined : value));
}
