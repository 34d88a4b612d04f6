/**
 * Fakes shared by the reconcile, controller and local tests: a verdict source the test drives,
 * and verdicts built from host:port text.
 */
import { EventEmitter } from 'node:events';
import type { BackendVerdict, Cause, Verdict } from '../../src/health/verdict.js';
import { failureState } from '../../src/health/verdict.js';
import { parseHostPort } from '../../src/net/hostport.js';
import type { VerdictSource } from '../../src/dataplane/reconcile.js';

export const CAUSES = {
  ok: { kind: 'http', status: 200 },
  http500: { kind: 'http', status: 500 },
  refused: { kind: 'refused' },
} as const satisfies Record<string, Cause>;

/** A verdict for `address` (`host:port`): `up`, or down for `cause` (its state from the cause's kind). */
export function verdict(address: string, cause: Cause | 'up', message = cause === 'up' ? 'http 200' : cause.kind): Verdict {
  const backend = parseHostPort(address);
  if (cause === 'up') return { backend, state: 'up', cause: CAUSES.ok, message };
  return { backend, state: failureState(cause), cause, message };
}

/** A source whose verdicts the test sets; `emit` sets one and tells the listeners. */
export class FakeSource extends EventEmitter<{ verdict: [Verdict] }> implements VerdictSource {
  list: BackendVerdict[];
  constructor(addresses: readonly string[]) {
    super();
    this.list = addresses.map((a) => ({ backend: parseHostPort(a), state: 'unknown' }));
  }
  verdicts(): BackendVerdict[] {
    return this.list.map((v) => ({ ...v }));
  }
  /** Replaces the backend's entry without telling anyone (what the checker holds). */
  set(v: Verdict): void {
    const i = this.list.findIndex((b) => b.backend.host === v.backend.host && b.backend.port === v.backend.port);
    if (i < 0) throw new Error(`no such backend in the fake source: ${v.backend.host}`);
    this.list[i] = v;
  }
  /** The checker's verdict event: set, then emit. */
  judge(v: Verdict): void {
    this.set(v);
    this.emit('verdict', v);
  }
}

/** Lets every pending promise callback run. */
export const settle = (): Promise<void> => new Promise((r) => setImmediate(r));

/** A logger that records messages by level. */
export function recordingLog() {
  const logs = { info: [] as string[], warn: [] as string[], error: [] as string[] };
  return {
    logs,
    log: {
      info: (_o: object, m: string) => void logs.info.push(m),
      warn: (_o: object, m: string) => void logs.warn.push(m),
      error: (_o: object, m: string) => void logs.error.push(m),
    },
  };
}
