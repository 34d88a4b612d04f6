/**
 * The lab's shared EndpointSlice store: what etcd is to several kube-apiservers, for the
 * stand-ins (apiserver-standin.ts). One directory per lab:
 *
 *   DIR/events.log   append-only, one JSON change per line; a line's number (1-based) is its
 *                    resourceVersion, so the sequence is global without a lock: every writer
 *                    opens with O_APPEND and writes one whole line (< PIPE_BUF bytes, atomic)
 *   DIR/floor        the compaction floor (an integer, written by rename): a watch or list asked
 *                    for a resourceVersion below it gets 410 Expired
 *
 * Changes (`op`): `add` an address to the `kubernetes` slice (creates the slice when it does not
 * exist), `remove` one, `delete` the slice object. A change that changes nothing (adding an
 * address already there) still takes a resourceVersion, as an etcd write would, but no event.
 *
 *   DIR/denial       absent or empty: the API authorizes every request with the right token; `401`
 *                    or `403`: every stand-in answers the /apis paths with that Status (credentials
 *                    not accepted, permission missing), as RBAC kept in etcd would for all of them
 *
 * Every stand-in replays the log into {@link SliceState} and tails it (fs.watch plus a 100 ms poll
 * as the fallback) to feed its watches.
 */
import { closeSync, openSync, readFileSync, readSync, renameSync, statSync, watch, writeFileSync, writeSync, mkdirSync, type FSWatcher } from 'node:fs';
import { join } from 'node:path';

/** One line of events.log. */
export type SliceChange = { op: 'add' | 'remove'; address: string; by?: string } | { op: 'delete'; by?: string };

/** The EndpointSlice's address type, from the address's spelling. */
export type AddressType = 'IPv4' | 'IPv6';

/** The `kubernetes` slice as the store holds it; null while it does not exist. */
export interface SliceObject {
  addresses: string[];
  /** resourceVersion of the last change that changed it. */
  resourceVersion: number;
  /** resourceVersion that created it (creationTimestamp and uid derive from it). */
  createdAt: number;
}

/** A watch event before it is rendered. */
export interface StoreEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  /** the slice after the change (for DELETED: the last state before it, at the new version) */
  slice: SliceObject;
}

const LOG = 'events.log';
const FLOOR = 'floor';
const DENIAL = 'denial';

/** What every stand-in of the store answers on /apis: 401, 403, or null (authorized). Written by rename. */
export function setDenial(dir: string, status: 401 | 403 | null): void {
  writeFileSync(join(dir, `${DENIAL}.tmp`), status === null ? '' : String(status));
  renameSync(join(dir, `${DENIAL}.tmp`), join(dir, DENIAL));
}

/** The store's denial (see {@link setDenial}); null when absent, empty or anything else. */
export function readDenial(dir: string): 401 | 403 | null {
  let text: string;
  try {
    text = readFileSync(join(dir, DENIAL), 'utf8').trim();
  } catch {
    return null;
  }
  return text === '401' ? 401 : text === '403' ? 403 : null;
}

/** Creates `dir` (and the empty log) when missing. */
export function initStore(dir: string): void {
  mkdirSync(dir, { recursive: true });
  closeSync(openSync(join(dir, LOG), 'a'));
}

/** Appends one change (one write of one line, O_APPEND). @throws when the line would exceed PIPE_BUF (4096 bytes). */
export function appendChange(dir: string, change: SliceChange): void {
  const line = `${JSON.stringify(change)}\n`;
  if (Buffer.byteLength(line) > 4096) throw new RangeError('a store line must stay below PIPE_BUF (4096 bytes)');
  const fd = openSync(join(dir, LOG), 'a');
  try {
    writeSync(fd, line);
  } finally {
    closeSync(fd);
  }
}

/** The compaction floor: resourceVersions below it are gone (0 when never compacted). */
export function readFloor(dir: string): number {
  try {
    const n = Number(readFileSync(join(dir, FLOOR), 'utf8').trim());
    return Number.isInteger(n) && n > 0 ? n : 0;
  } catch {
    return 0;
  }
}

/**
 * Compacts: raises the floor to the log's current last resourceVersion (or `to`), so a watch or
 * list from an older version gets 410. @returns the new floor.
 */
export function compactStore(dir: string, to?: number): number {
  const floor = to ?? readAll(dir).length;
  const tmp = join(dir, `${FLOOR}.tmp`);
  writeFileSync(tmp, `${floor}\n`);
  renameSync(tmp, join(dir, FLOOR));
  return floor;
}

function readAll(dir: string): SliceChange[] {
  const text = readFileSync(join(dir, LOG), 'utf8');
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as SliceChange);
}

/** The slice's state after replaying changes; apply() gives the event a change causes, if any. */
export class SliceState {
  slice: SliceObject | null = null;
  /** resourceVersion of the last line applied. */
  version = 0;

  /** Applies the next line (its resourceVersion is version + 1). @returns the watch event, or null when nothing changed. */
  apply(c: SliceChange): StoreEvent | null {
    const rv = ++this.version;
    const s = this.slice;
    if (c.op === 'delete') {
      if (s === null) return null;
      this.slice = null;
      return { type: 'DELETED', slice: { ...s, resourceVersion: rv } };
    }
    if (s === null) {
      if (c.op === 'remove') return null;
      this.slice = { addresses: [c.address], resourceVersion: rv, createdAt: rv };
      return { type: 'ADDED', slice: this.slice };
    }
    const has = s.addresses.includes(c.address);
    if (c.op === 'add' ? has : !has) return null;
    const addresses = c.op === 'add' ? [...s.addresses, c.address].sort() : s.addresses.filter((a) => a !== c.address);
    this.slice = { addresses, resourceVersion: rv, createdAt: s.createdAt };
    return { type: 'MODIFIED', slice: this.slice };
  }
}

/**
 * Tails a store: replays the log, then reads what others append (fs.watch, and a poll every
 * `pollMs` in case an event is missed). `onEvent` receives each change's event with the
 * resourceVersion it happened at (changes that changed nothing are skipped).
 */
export class StoreTail {
  readonly state = new SliceState();
  /** Every event since the start of the log, for watches that resume from a version. */
  readonly history: { rv: number; event: StoreEvent }[] = [];
  readonly #dir: string;
  #offset = 0;
  #partial = '';
  #watcher: FSWatcher | null = null;
  #timer: ReturnType<typeof setInterval> | null = null;
  readonly #listeners = new Set<(rv: number, e: StoreEvent | null) => void>();

  constructor(dir: string, opts: { pollMs?: number } = {}) {
    this.#dir = dir;
    initStore(dir);
    this.read();
    try {
      this.#watcher = watch(join(dir, LOG), () => this.read());
    } catch {
      this.#watcher = null;
    }
    this.#timer = setInterval(() => this.read(), opts.pollMs ?? 100);
    this.#timer.unref();
  }

  /** The compaction floor now. */
  floor(): number {
    return readFloor(this.#dir);
  }

  /** Subscribes to every applied line (event null: the line changed nothing). @returns the unsubscribe. */
  subscribe(fn: (rv: number, e: StoreEvent | null) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /** Reads what was appended since the last read and applies it. */
  read(): void {
    const path = join(this.#dir, LOG);
    let size: number;
    try {
      size = statSync(path).size;
    } catch {
      return;
    }
    if (size <= this.#offset) return;
    const fd = openSync(path, 'r');
    let chunk: Buffer;
    try {
      chunk = Buffer.alloc(size - this.#offset);
      let got = 0;
      while (got < chunk.length) {
        const n = readSyncAt(fd, chunk, got, this.#offset + got);
        if (n === 0) break;
        got += n;
      }
      chunk = chunk.subarray(0, got);
    } finally {
      closeSync(fd);
    }
    this.#offset += chunk.length;
    const text = this.#partial + chunk.toString('utf8');
    const lines = text.split('\n');
    this.#partial = lines.pop() ?? '';
    for (const line of lines) {
      if (line === '') continue;
      const e = this.state.apply(JSON.parse(line) as SliceChange);
      const rv = this.state.version;
      if (e !== null) this.history.push({ rv, event: e });
      for (const fn of this.#listeners) fn(rv, e);
    }
  }

  close(): void {
    this.#watcher?.close();
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#listeners.clear();
  }
}

function readSyncAt(fd: number, buf: Buffer, off: number, pos: number): number {
  return readSync(fd, buf, off, buf.length - off, pos);
}

/** The address type of an address literal. */
export function addressTypeOf(address: string): AddressType {
  return address.includes(':') ? 'IPv6' : 'IPv4';
}
