/**
 * The soak's report (pure but for the SVG renderer, which is vega's): the timeline folded into
 * bands, the summary by fault kind, the violations; rendered as Markdown, JSON and an SVG
 * timeline (vega, headless: rows for the VIP holder, each backend, the local endpoint, the
 * clients' failures, one row per fault kind, and the violations; time in seconds on x).
 */
import * as vega from 'vega';
import { checkInvariants, summarizeKinds, RESOURCE_BAND, BASELINE_AFTER_MS, type KindSummary, type Timeline, type Violation } from './invariants.js';
import { boundOf, derived, FAULT_KINDS } from './schedule.js';
import type { StalledHandshake, SynFate } from './capture.js';

/** A band on one row of the timeline: [from, to] ms, a value that colours it, a label. */
export interface Band {
  row: string;
  from: number;
  to: number;
  value: string;
  label?: string;
}

/** The counts the clients reported. */
export interface ClientCounts {
  vip: { requests: number; ok: number; nodes: Record<string, number> };
  local: { requests: number; ok: number; nodes: Record<string, number> };
  watch: { connections: number; ok: number; failed: number; reconnects: number; drops: number; connectFailures: number };
}

/** Per agent process: fds and RSS (MiB) min..max over the run. */
export interface ResourceBand {
  node: string;
  pid: number;
  samples: number;
  fds: [number, number];
  rssMiB: [number, number];
}

/** Everything the report shows. */
export interface SoakReport {
  seed: number;
  minutes: number;
  startedAt: string;
  timing: Timeline['timing'];
  derived: ReturnType<typeof derived>;
  /** the named bound per kind (control plane; the worker's where it differs) */
  bounds: { kind: string; controlPlane: string; worker: string }[];
  faults: Timeline['faults'];
  kinds: KindSummary[];
  counts: ClientCounts;
  resources: ResourceBand[];
  violations: Violation[];
  /** what teardown left (empty: nothing) */
  leftovers: string[];
  bands: Band[];
  ok: boolean;
  /** with --capture: the handshakes to VIP:6443 that stalled, times in ms since the soak's start */
  capture?: CaptureSummary;
  /** where the lab's files (agent logs, configs) were copied when the run failed, relative to the report */
  labFiles?: string;
}

/** The capture's stalled handshakes: how many per fate, and those near each VIP-request violation. */
export interface CaptureSummary {
  file: string;
  stalled: number;
  byFate: Partial<Record<SynFate, number>>;
  /** every one of them, in time order, without its trace */
  list: Omit<StalledHandshake, 'trace'>[];
  /** per violation of (b) by the VIP prober (index into `violations`): the SYNs first sent from T + 100 ms before it to 100 ms after it */
  nearViolations: { violation: number; syns: StalledHandshake[] }[];
}

/**
 * The capture's part of the report (pure): counts by fate, and the stalled handshakes around
 * each failed-VIP-request violation. `syns` times are ms since the soak's start.
 */
export function captureSummary(file: string, syns: readonly StalledHandshake[], violations: readonly Violation[], requestTimeoutMs: number): CaptureSummary {
  const byFate: Partial<Record<SynFate, number>> = {};
  for (const x of syns) byFate[x.fate] = (byFate[x.fate] ?? 0) + 1;
  const nearViolations = violations.flatMap((v, i) => {
    if (v.invariant !== 'b' || !v.what.startsWith('VIP')) return [];
    return [{ violation: i, syns: syns.filter((x) => x.t >= v.t - requestTimeoutMs - 100 && x.t <= v.untilMs + 100) }];
  });
  const list = syns.map(({ trace: _, ...rest }) => rest);
  return { file, stalled: syns.length, byFate, list, nearViolations };
}

const ROW_ORDER = (tl: Timeline): string[] => [
  'VIP holder',
  ...tl.controlPlane.map((n) => `backend ${n}`),
  `local endpoint (${tl.worker})`,
  'VIP failures',
  'watch drops',
  'local failures',
  ...FAULT_KINDS.filter((k) => tl.faults.some((f) => f.kind === k)).map((k) => `fault ${k}`),
  'violations',
];

/** Folds a value per sample into bands of equal value (pure). */
function runs(row: string, points: { t: number; v: string }[], endMs: number): Band[] {
  const out: Band[] = [];
  for (const p of points) {
    const last = out.at(-1);
    if (last && last.value === p.v) last.to = p.t;
    else {
      if (last) last.to = p.t;
      out.push({ row, from: p.t, to: p.t, value: p.v });
    }
  }
  const last = out.at(-1);
  if (last) last.to = Math.max(last.to, Math.min(endMs, last.to + 100));
  return out;
}

/** The timeline's bands (pure). Backends: `up` where every control-plane agent has it up, `partly`, `down`. */
export function bands(tl: Timeline): Band[] {
  const s = [...tl.samples].sort((a, b) => a.t - b.t);
  const out: Band[] = [];
  out.push(
    ...runs(
      'VIP holder',
      s.map((x) => ({ t: x.t, v: x.holders.length === 0 ? 'none' : x.holders.length > 1 ? 'several' : x.holders[0]! })),
      tl.endMs,
    ),
  );
  tl.controlPlane.forEach((n, i) => {
    out.push(
      ...runs(
        `backend ${n}`,
        s.map((x) => {
          const views = tl.controlPlane.map((m) => x.agents[m]).filter((a) => a?.up && a.states);
          const key = Object.keys(views[0]?.states ?? {}).sort()[i];
          const up = views.filter((a) => key !== undefined && a!.states![key] === 'up').length;
          return { t: x.t, v: views.length === 0 ? 'unknown' : up === views.length ? 'up' : up === 0 ? 'down' : 'partly' };
        }),
        tl.endMs,
      ),
    );
  });
  out.push(
    ...runs(
      `local endpoint (${tl.worker})`,
      s.map((x) => {
        const w = x.agents[tl.worker];
        return { t: x.t, v: !w?.up ? 'agent down' : w.local === tl.backends ? 'up' : w.local === 0 ? 'down' : 'partly' };
      }),
      tl.endMs,
    ),
  );
  const ticks = (row: string, ts: { t: number; ms: number }[]): Band[] => ts.map((f) => ({ row, from: f.t, to: f.t + Math.max(f.ms, 50), value: 'failure' }));
  out.push(
    ...ticks('VIP failures', tl.vipFailures),
    ...ticks('local failures', tl.localFailures),
    ...ticks(
      'watch drops',
      tl.watchEvents.map((e) => ({ t: e.t, ms: 50 })),
    ),
  );
  for (const f of tl.faults)
    out.push({ row: `fault ${f.kind}`, from: f.startMs, to: Math.max(f.healMs, f.startMs + 150), value: 'fault', label: `#${f.id} ${f.target}` });
  return out.filter((b) => b.to >= 0);
}

/** Builds the report from a recorded timeline (pure). */
export function buildReport(tl: Timeline, o: { seed: number; minutes: number; startedAt: string; counts: ClientCounts; leftovers: string[] }): SoakReport {
  const violations = checkInvariants(tl);
  for (const l of o.leftovers) violations.push({ invariant: 'd', t: tl.endMs, untilMs: tl.endMs, what: `left after teardown: ${l}`, active: [], count: 1 });
  const res = new Map<string, ResourceBand>();
  for (const r of tl.resources) {
    const k = `${r.node}/${r.pid}`;
    const b = res.get(k) ?? { node: r.node, pid: r.pid, samples: 0, fds: [r.fds, r.fds], rssMiB: [r.rssKiB / 1024, r.rssKiB / 1024] };
    b.samples++;
    b.fds = [Math.min(b.fds[0], r.fds), Math.max(b.fds[1], r.fds)];
    b.rssMiB = [Math.min(b.rssMiB[0], r.rssKiB / 1024), Math.max(b.rssMiB[1], r.rssKiB / 1024)];
    res.set(k, b);
  }
  const round1 = (x: number): number => Math.round(x * 10) / 10;
  return {
    seed: o.seed,
    minutes: o.minutes,
    startedAt: o.startedAt,
    timing: tl.timing,
    derived: derived(tl.timing),
    bounds: FAULT_KINDS.map((k) => ({ kind: k, controlPlane: boundOf(k, false, tl.timing).name, worker: boundOf(k, true, tl.timing).name })),
    faults: tl.faults,
    kinds: summarizeKinds(tl),
    counts: o.counts,
    resources: [...res.values()].map((b) => ({ ...b, rssMiB: [round1(b.rssMiB[0]), round1(b.rssMiB[1])] as [number, number] })),
    violations,
    leftovers: o.leftovers,
    bands: bands(tl),
    ok: violations.length === 0,
  };
}

const s1 = (ms: number): string => (ms / 1000).toFixed(1);

/** The Markdown report (pure). */
export function renderMarkdown(r: SoakReport, svgFile = 'soak-report.svg'): string {
  const d = r.derived;
  const L: string[] = [];
  L.push(`# ballast chaos soak — seed ${r.seed}, ${r.minutes} min`, '');
  L.push(`**${r.ok ? 'PASS' : 'FAIL'}: ${r.violations.length} violation(s)**, ${r.faults.length} faults injected; started ${r.startedAt}.`, '');
  L.push(`![timeline](${svgFile})`, '');
  L.push('## Faults by kind, longest outage against its bound', '');
  L.push('| kind | injected | longest VIP outage | longest local outage | bound |', '|---|---:|---:|---:|---|');
  for (const k of r.kinds) L.push(`| ${k.kind} | ${k.injected} | ${k.longestVipOutageMs} ms | ${k.longestLocalOutageMs} ms | ${k.bound} |`);
  L.push('', '## Clients', '');
  const pct = (ok: number, n: number): string => (n === 0 ? '—' : `${((100 * ok) / n).toFixed(3)} %`);
  L.push('| client | requests | ok | failed | served by |', '|---|---:|---:|---:|---|');
  for (const [name, c] of [
    ['VIP prober (10 ms)', r.counts.vip],
    ['local endpoint prober (10 ms)', r.counts.local],
  ] as const) {
    L.push(
      `| ${name} | ${c.requests} | ${c.ok} (${pct(c.ok, c.requests)}) | ${c.requests - c.ok} | ${Object.entries(c.nodes)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')} |`,
    );
  }
  const w = r.counts.watch;
  L.push(
    '',
    `Watch-like connections: ${w.connections} open at most, ${w.ok} requests answered, ${w.drops} drops, ${w.reconnects} reconnects, ${w.connectFailures} failed connects.`,
    '',
  );
  L.push('## Violations', '');
  if (r.violations.length === 0) L.push('None.');
  else {
    L.push('| invariant | from (s) | until (s) | what | faults active |', '|---|---:|---:|---|---|');
    for (const v of r.violations)
      L.push(
        `| (${v.invariant}) | ${s1(v.t)} | ${s1(v.untilMs)} | ${v.what}${v.count > 1 ? ` (×${v.count})` : ''} | ${v.active.map((id) => `#${id} ${r.faults.find((f) => f.id === id)?.kind ?? ''}`).join(', ') || 'none'} |`,
      );
  }
  if (r.labFiles) L.push('', `The lab's files (agent logs, configurations) are in \`${r.labFiles}\`.`);
  if (r.capture) {
    const c = r.capture;
    L.push('', '## Stalled handshakes (packet capture)', '');
    L.push(
      `\`${c.file}\`: ${c.stalled} client SYNs to the VIP got no SYN-ACK within 500 ms or were sent again (each costs the client its initial RTO, 1 s, or its request). Where the handshake was lost: ${
        Object.entries(c.byFate)
          .map(([k, n]) => `${k} ${n}`)
          .join(', ') || 'nowhere'
      }.`,
    );
    for (const nv of c.nearViolations) {
      const v = r.violations[nv.violation]!;
      L.push('', `Around the violation at ${s1(v.t)} s: ${nv.syns.length === 0 ? 'no stalled handshake in the capture' : ''}`);
      for (const x of nv.syns) {
        L.push(
          `- ${s1(x.t)} s ${x.client} → holder ${x.holder}${x.backend ? `, backend ${x.backend}` : ''}: **${x.fate}**, ${x.retransmitAfterMs === null ? 'not sent again' : `sent again after ${x.retransmitAfterMs} ms`}`,
        );
        for (const line of x.trace.slice(0, 12)) L.push(`  - \`${line}\``);
      }
    }
  }
  L.push('', '## Invariants', '');
  L.push('(a) at most one node holds the VIP except while a fault is active or within its recovery bound after the heal;');
  L.push("(b) every failed request (VIP prober, watches, local prober) starts inside the window of an active or just-healed fault's bound;");
  L.push(
    '(c) once every fault healed and its recovery bound passed: n1 alone holds the VIP, every agent answers, every backend is up on every control-plane agent, `table ip ballast` is present, the local endpoint balances over every backend; a bad reload must be refused, a good one applied;',
  );
  L.push(
    `(d) no address, table, BPF pin or process that nothing explains (seen twice, 5 s apart), nothing left after teardown; each agent's fds ≤ baseline + ${RESOURCE_BAND.fds} and RSS ≤ baseline + ${RESOURCE_BAND.rssMiB} MiB (baseline: its first sample ≥ ${BASELINE_AFTER_MS / 1000} s after its start).`,
  );
  L.push('', '## Bounds', '');
  L.push(
    `Adverts every ${r.timing.advertIntervalMs} ms, priorities ${Object.entries(r.timing.priorities)
      .map(([k, v]) => `${k} ${v}`)
      .join(
        ', ',
      )}; checks every ${r.timing.health.intervalMs} ms (timeout ${r.timing.health.timeoutMs} ms, rise ${r.timing.health.rise}, fall ${r.timing.health.fall}).`,
  );
  L.push(
    `MDI = ${d.mdi} ms (3 × interval + Skew_Time of the lowest priority), Skew_Time = ${d.skew} ms (best Backup), D = fall × interval + interval + timeout = ${d.detect} ms, R = (rise + 1) × interval + timeout = ${d.back} ms, S (start-up) = ${r.timing.startupMs} ms, M (margin) = ${r.timing.marginMs} ms, T (request timeout) = ${r.timing.requestTimeoutMs} ms.`,
    '',
  );
  L.push('| kind | control plane | worker |', '|---|---|---|');
  for (const b of r.bounds) L.push(`| ${b.kind} | ${b.controlPlane} | ${b.worker} |`);
  L.push('', '## Agent resources', '');
  L.push('| node | pid | samples | fds min–max | RSS MiB min–max |', '|---|---:|---:|---|---|');
  for (const b of r.resources) L.push(`| ${b.node} | ${b.pid} | ${b.samples} | ${b.fds[0]}–${b.fds[1]} | ${b.rssMiB[0]}–${b.rssMiB[1]} |`);
  L.push('', '## Faults', '');
  L.push('| # | group | kind | target | start (s) | heal (s) | note |', '|---:|---:|---|---|---:|---:|---|');
  for (const f of r.faults)
    L.push(`| ${f.id} | ${f.group} | ${f.kind} | ${f.target} | ${s1(f.startMs)} | ${s1(f.healMs)} | ${[f.note, f.failed].filter(Boolean).join('; ')} |`);
  L.push('', `Teardown left: ${r.leftovers.length === 0 ? 'nothing' : r.leftovers.join('; ')}.`, '');
  return `${L.join('\n')}\n`;
}

const COLORS: Record<string, string> = {
  n1: '#4e79a7',
  n2: '#f28e2b',
  n3: '#59a14f',
  none: '#bab0ac',
  several: '#e15759',
  up: '#59a14f',
  partly: '#edc948',
  down: '#e15759',
  unknown: '#bab0ac',
  'agent down': '#9c755f',
  failure: '#e15759',
  fault: '#b07aa1',
  violation: '#d62728',
};

/** The timeline as SVG text (vega, rendered headless). */
export async function renderSvg(r: SoakReport, tl: Pick<Timeline, 'controlPlane' | 'worker' | 'faults' | 'endMs'>): Promise<string> {
  const rows = ROW_ORDER(tl as Timeline);
  const data = [
    ...r.bands.map((b) => ({ ...b, s0: b.from / 1000, s1: b.to / 1000 })),
    ...r.violations.map((v) => ({
      row: 'violations',
      from: v.t,
      to: Math.max(v.untilMs, v.t + 300),
      value: 'violation',
      label: `(${v.invariant})`,
      s0: v.t / 1000,
      s1: Math.max(v.untilMs, v.t + 300) / 1000,
    })),
  ];
  const domain = Object.keys(COLORS);
  const spec: vega.Spec = {
    $schema: 'https://vega.github.io/schema/vega/v6.json',
    width: 1400,
    height: rows.length * 22,
    padding: 10,
    title: {
      text: `ballast chaos soak — seed ${r.seed}, ${r.minutes} min — ${r.ok ? 'PASS' : 'FAIL'}: ${r.violations.length} violation(s), ${r.faults.length} faults`,
      anchor: 'start',
      fontSize: 14,
    },
    data: [{ name: 'bands', values: data }],
    scales: [
      { name: 'x', type: 'linear', domain: [0, tl.endMs / 1000], range: 'width', zero: true, nice: false },
      { name: 'y', type: 'band', domain: rows, range: 'height', padding: 0.15 },
      { name: 'color', type: 'ordinal', domain, range: domain.map((k) => COLORS[k]!) },
    ],
    axes: [
      { orient: 'bottom', scale: 'x', title: 'seconds since the schedule started', grid: true, tickCount: 20 },
      { orient: 'left', scale: 'y', labelFontSize: 11 },
    ],
    legends: [{ fill: 'color', orient: 'right', title: 'state', symbolType: 'square' }],
    marks: [
      {
        type: 'rect',
        from: { data: 'bands' },
        encode: {
          enter: {
            x: { scale: 'x', field: 's0' },
            x2: { scale: 'x', signal: 'max(datum.s1, datum.s0 + 0.15)' },
            y: { scale: 'y', field: 'row' },
            height: { scale: 'y', band: 1 },
            fill: { scale: 'color', field: 'value' },
            tooltip: {
              signal:
                "datum.row + ': ' + datum.value + (datum.label ? ' ' + datum.label : '') + ' ' + format(datum.s0, '.1f') + '–' + format(datum.s1, '.1f') + ' s'",
            },
          },
        },
      },
      {
        type: 'text',
        from: { data: 'bands' },
        encode: {
          enter: {
            x: { scale: 'x', field: 's0', offset: 2 },
            y: { scale: 'y', field: 'row', band: 0.5 },
            baseline: { value: 'middle' },
            fontSize: { value: 9 },
            fill: { value: '#222' },
            text: {
              signal:
                "datum.label ? datum.label : (indexof(['n1','n2','n3','none','several'], datum.value) >= 0 && datum.s1 - datum.s0 > 2 ? datum.value : '')",
            },
          },
        },
      },
    ],
  };
  const view = new vega.View(vega.parse(spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
