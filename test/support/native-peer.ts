/**
 * Test-side driver of native-peer.mjs / native-worker.mjs: child node processes that use the
 * addon inside a network namespace (`ip netns exec <ns> node …`), since the test process cannot
 * enter one itself.
 *
 * Children import src/native.ts transpiled to JavaScript by {@link transpileNative} (typescript's
 * transpileModule, no type check) into build/integration-native/, so they run the same wrapper
 * as the agent and do not depend on a `tsc` build of the whole tree being current.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { sleep } from '../../lab/wait.js';

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root. */
export const ROOT = resolve(here, '..', '..');
/** Where {@link transpileNative} writes (under build/, which git ignores), one directory per run. */
export const TRANSPILED_DIR = join(ROOT, 'build', 'integration-native', String(process.pid));
export const PEER_SCRIPT = join(here, 'native-peer.mjs');
export const WORKER_SCRIPT = join(here, 'native-worker.mjs');

/**
 * Takes the lab lock, a directory holding the owner's PID: the namespace names are fixed, so
 * two runs of this suite on one machine (two people, or `vitest run` beside a single-file run)
 * must take turns. A lock whose owner is gone is taken over.
 * @returns a function that releases it.
 * @throws Error when another live run holds it for longer than `waitMs`.
 */
export async function takeLabLock(name: string, waitMs: number): Promise<() => void> {
  const dir = join(tmpdir(), `${name}.lock`);
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      mkdirSync(dir);
      writeFileSync(join(dir, 'pid'), String(process.pid));
      return () => rmSync(dir, { recursive: true, force: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    let owner = NaN;
    try {
      owner = Number(readFileSync(join(dir, 'pid'), 'utf8'));
    } catch {
      // being written or removed: look again
    }
    if (Number.isInteger(owner) && owner > 0 && !isAlive(owner)) {
      rmSync(dir, { recursive: true, force: true });
      continue;
    }
    if (Date.now() > deadline) throw new Error(`${dir} is held by PID ${owner} (another run of this suite)`);
    await sleep(200);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Transpiles src/native.ts and the local modules it imports (transitively) to
 * build/integration-native/<pid>/src/*.js, keeping their layout so that native.js finds the package
 * root (and build/Release/ballast.node) by walking up, as dist/src/native.js does.
 * @returns the absolute path of the transpiled native.js.
 */
export function transpileNative(): string {
  rmSync(TRANSPILED_DIR, { recursive: true, force: true });
  const pending = [join(ROOT, 'src', 'native.ts')];
  const done = new Set<string>();
  while (pending.length > 0) {
    const source = pending.pop()!;
    if (done.has(source)) continue;
    done.add(source);
    const text = readFileSync(source, 'utf8');
    const out = ts.transpileModule(text, {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
      fileName: source,
    });
    const target = join(TRANSPILED_DIR, relative(ROOT, source)).replace(/\.ts$/, '.js');
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, out.outputText);
    // relative value imports ('./errors.js'); type-only ones are gone from the output already
    for (const m of out.outputText.matchAll(/from\s+['"](\.{1,2}\/[^'"]+)\.js['"]/g)) {
      pending.push(resolve(dirname(source), `${m[1]}.ts`));
    }
  }
  return join(TRANSPILED_DIR, 'src', 'native.js');
}

/** An error as serialized by native-peer.mjs. */
export interface PeerError {
  name?: string;
  message?: string;
  code?: string;
  errno?: number;
  syscall?: string;
  isTypeError: boolean;
  isNativeError: boolean;
}

/** A packet as reported by native-peer.mjs (payload in hex). */
export interface PeerPacket {
  event: 'packet';
  handle: number;
  payload: string;
  source: string;
  destination: string;
  ttl: number;
  ifindex: number;
}

type Reply = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: PeerError };
type PeerEvent = PeerPacket | { event: 'error'; handle: number; error: PeerError } | { event: 'ready'; pid: number };

/** Thrown by {@link NativePeer.call} when the peer's operation threw. */
export class PeerCallError extends Error {
  constructor(
    readonly op: string,
    readonly error: PeerError,
  ) {
    super(`${op}: ${error.message ?? 'error'}`);
  }
}

/** One native-peer.mjs child in a namespace. */
export class NativePeer {
  readonly events: PeerEvent[] = [];
  private readonly child: ChildProcess;
  private readonly waiting = new Map<number, (r: Reply) => void>();
  private readonly watchers = new Set<() => void>();
  private nextId = 1;
  private stderr = '';
  private exited = false;

  private constructor(child: ChildProcess) {
    this.child = child;
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (this.stderr += d));
    child.on('exit', () => {
      this.exited = true;
      for (const w of this.watchers) w();
    });
    createInterface({ input: child.stdout! }).on('line', (line) => {
      let message: Reply | PeerEvent;
      try {
        message = JSON.parse(line) as Reply | PeerEvent;
      } catch {
        return;
      }
      if ('id' in message) {
        this.waiting.get(message.id)?.(message);
        this.waiting.delete(message.id);
      } else {
        this.events.push(message);
        for (const w of this.watchers) w();
      }
    });
  }

  /** Starts a peer in namespace `ns` and waits (at most 10 s) until it has loaded the addon. */
  static async start(ns: string, nativeJs: string): Promise<NativePeer> {
    const child = spawn('ip', ['netns', 'exec', ns, process.execPath, PEER_SCRIPT, nativeJs], { stdio: ['pipe', 'pipe', 'pipe'] });
    const peer = new NativePeer(child);
    await peer.waitFor((e) => e.event === 'ready', 10_000, `peer in ${ns} did not start`);
    return peer;
  }

  /** The child's PID (ip netns exec execs node, so this is the node process). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /**
   * Runs one operation in the peer.
   * @throws PeerCallError when the operation threw there; Error on timeout (5 s).
   */
  call<T = unknown>(op: string, args: Record<string, unknown> = {}): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolvePromise, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new Error(`peer ${op} timed out; stderr: ${this.stderr}`));
      }, 5_000);
      this.waiting.set(id, (reply) => {
        clearTimeout(timer);
        if (reply.ok) resolvePromise(reply.result as T);
        else reject(new PeerCallError(op, reply.error));
      });
      this.child.stdin!.write(`${JSON.stringify({ id, op, ...args })}\n`);
    });
  }

  /** Runs `op` and returns the error it threw; fails if it did not throw. */
  async callError(op: string, args: Record<string, unknown> = {}): Promise<PeerError> {
    try {
      await this.call(op, args);
    } catch (e) {
      if (e instanceof PeerCallError) return e.error;
      throw e;
    }
    throw new Error(`${op} did not throw`);
  }

  /** Resolves with the first event (already seen or future) matching `pred`; rejects after `ms`. */
  waitFor(pred: (e: PeerEvent) => boolean, ms: number, what = 'event'): Promise<PeerEvent> {
    return new Promise((resolvePromise, reject) => {
      const check = (): boolean => {
        const found = this.events.find(pred);
        if (found !== undefined) {
          done();
          resolvePromise(found);
          return true;
        }
        if (this.exited) {
          done();
          reject(new Error(`${what}: peer exited; stderr: ${this.stderr}`));
          return true;
        }
        return false;
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`${what}: not within ${ms} ms; stderr: ${this.stderr}`));
      }, ms);
      const done = (): void => {
        clearTimeout(timer);
        this.watchers.delete(watcher);
      };
      const watcher = (): void => void check();
      this.watchers.add(watcher);
      check();
    });
  }

  /** Packets received so far on `handle`. */
  packets(handle: number): PeerPacket[] {
    return this.events.filter((e): e is PeerPacket => e.event === 'packet' && e.handle === handle);
  }

  /** Ends the peer: closes stdin (it closes its sockets and exits), then SIGKILLs it after 2 s. */
  async stop(): Promise<void> {
    if (this.exited) return;
    const exited = new Promise<void>((r) => this.child.once('exit', () => r()));
    this.child.stdin!.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 2_000);
    await exited;
    clearTimeout(timer);
  }
}

/** Outcome of a finished child process. */
export interface ChildResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** True if the test killed it at `killAfterMs`. */
  killed: boolean;
}

/**
 * Runs `ip netns exec <ns> node <script> …args` to completion, SIGKILLing it after
 * `killAfterMs` (only this child, by its PID).
 */
export function runInNamespace(ns: string, script: string, args: string[], killAfterMs: number): Promise<ChildResult> {
  return new Promise((resolvePromise) => {
    const child = spawn('ip', ['netns', 'exec', ns, process.execPath, script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let killed = false;
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => {
      killed = true;
      child.kill('SIGKILL');
    }, killAfterMs);
    // 'close', not 'exit': after the output has been read to its end
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolvePromise({ code, signal, stdout, stderr, killed });
    });
  });
}
