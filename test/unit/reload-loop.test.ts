/**
 * The generic reload loop (src/agent/reload.ts runReload) and the phase list
 * (src/agent/phase-list.ts) over made-up phases: prepare / reconfigure / commit in order, a
 * re-run taking the phases that use it along, a failed re-run rolled back to the running config,
 * an essential phase that cannot come back ending the agent.
 */
import { describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/index.js';
import type { Logger } from '../../src/log/log.js';
import type { AgentContext, PhaseHandle, PhaseSpec, Setting } from '../../src/agent/phase.js';
import { phase, PhaseList, step } from '../../src/agent/phase-list.js';
import { StartAborted } from '../../src/agent/phase.js';
import { runReload } from '../../src/agent/reload.js';

/** What the phases did, in order. */
type Trace = string[];

const log = { info: () => undefined, warn: () => undefined, error: () => undefined, fatal: () => undefined, debug: () => undefined } as unknown as Logger;

/** A made-up config: settings a, b, c (numbers). */
const cfg = (a: number, b: number, c = 0): Config => ({ a, b, c }) as unknown as Config;

/** A phase named `name` that records its start, undo, prepare, reconfigure, commit and abort; `fail(config)` makes its start throw. */
function fake(
  name: string,
  trace: Trace,
  settings: Setting[],
  opts: { fail?: (c: Config) => boolean; failPrepare?: boolean; essential?: boolean } = {},
): PhaseSpec<unknown, PhaseHandle> {
  return {
    name,
    settings,
    ...(opts.essential ? { essential: true } : {}),
    rerun: { rolledBack: (_h, { cur }) => `${name} back on a=${(cur as unknown as { a: number }).a}` },
    start: async (_ctx, config) => {
      const a = (config as unknown as { a: number }).a;
      if (opts.fail?.(config)) throw new Error(`${name} cannot start on a=${a}`);
      trace.push(`start ${name} a=${a}`);
      return {
        phase: name,
        undo: async () => void trace.push(`undo ${name} a=${a}`),
        prepare: async () => {
          if (opts.failPrepare) throw new Error(`${name} cannot prepare`);
          trace.push(`prepare ${name}`);
          return { commit: () => void trace.push(`commit ${name}`), abort: () => void trace.push(`abort ${name}`) };
        },
        reconfigure: async () => void trace.push(`reconfigure ${name}`),
      };
    },
  };
}

function agent(specs: { spec: PhaseSpec<unknown, PhaseHandle>; uses?: string[] }[]) {
  let failed: number | null = null;
  const ctx: AgentContext = { log, signal: new AbortController().signal, fail: (code) => void (failed = code) };
  const list = new PhaseList<Record<string, PhaseHandle>>(
    specs.map(({ spec, uses }) => phase({ key: spec.name, spec, when: () => true, ...(uses ? { uses } : {}), inputs: () => ({}) })),
    log,
  );
  return { ctx, list, failed: () => failed };
}

const reload = (a: ReturnType<typeof agent>, cur: Config, next: Config) => runReload(a.ctx, cur, () => next, a.list, { trigger: 'api', source: undefined });

describe('runReload over a phase list', () => {
  it('reconfigure: prepare in order, reconfigure in order, commit in order; phases that read nothing changed are left alone', async () => {
    const trace: Trace = [];
    const a = agent([
      { spec: fake('p1', trace, [{ path: 'a', on: 'reconfigure', does: 'p1 took a' }]) },
      { spec: fake('p2', trace, [{ path: 'b', on: 'reconfigure' }]) },
      { spec: fake('p3', trace, [{ path: 'a', on: 'reconfigure', does: 'p3 took a' }]) },
    ]);
    await a.list.start(a.ctx, cfg(1, 1));
    trace.length = 0;
    const r = await reload(a, cfg(1, 1), cfg(2, 1));
    expect(r.result).toMatchObject({ ok: true, changed: ['a'], actions: ['p1 took a', 'p3 took a'], handover: false });
    expect(trace).toStrictEqual(['prepare p1', 'prepare p3', 'reconfigure p1', 'reconfigure p3', 'commit p1', 'commit p3']);
  });

  it('a re-run takes the phases that use it along (undone last first, started first first) and keeps the stop order', async () => {
    const trace: Trace = [];
    const a = agent([
      { spec: fake('base', trace, []) },
      { spec: fake('engine', trace, [{ path: 'a', on: 'rerun' }]) },
      { spec: fake('policy', trace, [{ path: 'a', on: 'reconfigure' }]), uses: ['engine'] },
      { spec: fake('tail', trace, [{ path: 'a', on: 'reconfigure' }]) },
    ]);
    await a.list.start(a.ctx, cfg(1, 1));
    trace.length = 0;
    const r = await reload(a, cfg(1, 1), cfg(2, 1));
    expect(r.ok).toBe(true);
    expect(trace).toStrictEqual([
      'prepare tail',
      'undo policy a=1',
      'undo engine a=1',
      'start engine a=2',
      'start policy a=2',
      'reconfigure tail',
      'commit tail',
    ]);
    trace.length = 0;
    await a.list.unwind();
    expect(trace).toStrictEqual(['undo tail a=1', 'undo policy a=2', 'undo engine a=2', 'undo base a=1']);
  });

  it('a failed re-run: what started is undone, the prepared steps given back, the running config started again; the reload says so', async () => {
    const trace: Trace = [];
    const a = agent([
      { spec: fake('locks', trace, [{ path: 'a', on: 'reconfigure' }]) },
      { spec: fake('engine', trace, [{ path: 'a', on: 'rerun' }], { fail: (c) => (c as unknown as { a: number }).a === 2 }) },
    ]);
    await a.list.start(a.ctx, cfg(1, 1));
    trace.length = 0;
    const r = await reload(a, cfg(1, 1), cfg(2, 1));
    expect(r.ok).toBe(false);
    expect(r.result.problems).toStrictEqual(['engine cannot start on a=2', 'engine back on a=1']);
    expect(trace).toStrictEqual(['prepare locks', 'reconfigure locks', 'undo engine a=1', 'abort locks', 'start engine a=1']);
    expect(a.failed()).toBeNull();
  });

  it('an essential phase that does not come back on the running config either: the agent exits (ctx.fail(1))', async () => {
    const trace: Trace = [];
    let starts = 0;
    const a = agent([{ spec: fake('engine', trace, [{ path: 'a', on: 'rerun' }], { essential: true, fail: () => starts++ > 0 }) }]);
    await a.list.start(a.ctx, cfg(1, 1));
    const r = await reload(a, cfg(1, 1), cfg(2, 1));
    expect(r.ok).toBe(false);
    expect(r.result.problems[1]).toMatch(
      /^re-run of engine failed; starting the running configuration again failed too \(engine cannot start on a=1\): the agent exits$/,
    );
    expect(a.failed()).toBe(1);
  });

  it('a prepare that fails gives back the earlier ones; nothing is reconfigured', async () => {
    const trace: Trace = [];
    const a = agent([
      { spec: fake('p1', trace, [{ path: 'a', on: 'reconfigure' }]) },
      { spec: fake('p2', trace, [{ path: 'a', on: 'reconfigure' }], { failPrepare: true }) },
    ]);
    await a.list.start(a.ctx, cfg(1, 1));
    trace.length = 0;
    const r = await reload(a, cfg(1, 1), cfg(2, 1));
    expect(r.result).toMatchObject({ ok: false, problems: ['p2 cannot prepare'] });
    expect(trace).toStrictEqual(['prepare p1', 'abort p1']);
  });

  it('a restart anywhere, or a setting no phase reads, refuses the whole reload before anything runs', async () => {
    const trace: Trace = [];
    const a = agent([
      { spec: fake('p1', trace, [{ path: 'a', on: 'reconfigure' }]) },
      { spec: fake('p2', trace, [{ path: 'b', on: 'restart', why: 'the b of p2' }]) },
    ]);
    await a.list.start(a.ctx, cfg(1, 1));
    trace.length = 0;
    const r = await reload(a, cfg(1, 1), cfg(2, 2, 3));
    expect(r.result).toMatchObject({
      ok: false,
      changed: ['a', 'b', 'c'],
      problems: [
        'b: a reload cannot change the b of p2; restart the agent to apply it',
        'c: a reload cannot change this setting; restart the agent to apply it',
      ],
    });
    expect(trace).toStrictEqual([]);
  });
});

describe('PhaseList.start', () => {
  it('in order, with the start steps between; a phase whose `when` fails is skipped', async () => {
    const trace: Trace = [];
    const ctx: AgentContext = { log, signal: new AbortController().signal, fail: () => undefined };
    const list = new PhaseList<Record<string, PhaseHandle>>(
      [
        phase({ key: 'p1', spec: fake('p1', trace, []), when: () => true, inputs: () => ({}) }),
        step({ step: 'note', when: (_c, h) => h.p1 !== undefined, run: () => void trace.push('step after p1') }),
        phase({ key: 'p2', spec: fake('p2', trace, []), when: () => false, inputs: () => ({}) }),
        phase({ key: 'p3', spec: fake('p3', trace, []), when: () => true, inputs: () => ({}) }),
      ],
      log,
    );
    await list.start(ctx, cfg(1, 1));
    expect(trace).toStrictEqual(['start p1 a=1', 'step after p1', 'start p3 a=1']);
    expect(Object.keys(list.handles)).toStrictEqual(['p1', 'p3']);
  });

  it('a stop asked before the start: only a phase that runs when stopping starts (its undo cleans up), then StartAborted', async () => {
    const trace: Trace = [];
    const stop = new AbortController();
    stop.abort();
    const ctx: AgentContext = { log, signal: stop.signal, fail: () => undefined };
    const list = new PhaseList<Record<string, PhaseHandle>>(
      [
        phase({ key: 'pre', spec: fake('pre', trace, []), when: () => true, runsWhenStopping: true, inputs: () => ({}) }),
        phase({ key: 'p2', spec: fake('p2', trace, []), when: () => true, inputs: () => ({}) }),
      ],
      log,
    );
    await expect(list.start(ctx, cfg(1, 1))).rejects.toBeInstanceOf(StartAborted);
    await list.unwind();
    expect(trace).toStrictEqual(['start pre a=1', 'undo pre a=1']);
  });
});
