/**
 * The chaos soak's report (lab/soak/report.ts): bands folded from samples, the Markdown tables,
 * and the SVG timeline (vega, headless) with a row per lane and the verdict in its title.
 */
import { describe, expect, it } from 'vitest';
import { bands, buildReport, renderMarkdown, renderSvg } from '../../lab/soak/report.js';
import type { ClusterSample, Timeline } from '../../lab/soak/invariants.js';
import { DEFAULT_TIMING } from '../../lab/soak/schedule.js';

const agents = (up2 = 3): ClusterSample['agents'] => {
  const states = (n2: string): Record<string, string> => ({ '10.0.0.11:6443': 'up', '10.0.0.12:6443': n2, '10.0.0.13:6443': 'up' });
  const cp = (state: string) => ({ up: true, state, backendsUp: up2, backendsTotal: 3, table: true, states: states(up2 === 3 ? 'up' : 'down') });
  return { n1: cp('master'), n2: cp('backup'), n3: cp('backup'), n4: { up: true, state: 'none', local: up2 } };
};

function timeline(): Timeline {
  const samples: ClusterSample[] = [];
  for (let t = 0; t <= 20_000; t += 100)
    samples.push({ t, holders: t >= 5000 && t < 5400 ? [] : t >= 5400 && t < 8000 ? ['n2'] : ['n1'], agents: agents(t >= 9000 && t < 10_000 ? 2 : 3) });
  return {
    timing: DEFAULT_TIMING,
    controlPlane: ['n1', 'n2', 'n3'],
    worker: 'n4',
    expectedHolder: 'n1',
    backends: 3,
    endMs: 20_000,
    faults: [
      { id: 1, group: 1, kind: 'link-down', target: 'n1', atMs: 5000, durationMs: 3000, startMs: 5000, healMs: 8000, note: 'holder' },
      { id: 2, group: 2, kind: 'apiserver-stop', target: 'n2', atMs: 9000, durationMs: 1000, startMs: 9000, healMs: 10_000, note: 'backup' },
    ],
    samples,
    vipFailures: [
      { t: 5100, ms: 500, error: 'timeout' },
      { t: 19_000, ms: 3, error: 'ECONNREFUSED' },
    ],
    localFailures: [],
    watchEvents: [],
    resources: [],
    leaks: [],
  };
}
const counts = {
  vip: { requests: 2000, ok: 1998, nodes: { n1: 1500, n2: 498 } },
  local: { requests: 400, ok: 400, nodes: { n1: 133 } },
  watch: { connections: 300, ok: 900, failed: 3, reconnects: 3, drops: 3, connectFailures: 0 },
};

describe('soak report', () => {
  it('folds samples into bands: who holds the VIP, each backend, the local endpoint, failures, faults', () => {
    const b = bands(timeline());
    expect(b.filter((x) => x.row === 'VIP holder').map((x) => [x.value, x.from, x.to])).toStrictEqual([
      ['n1', 0, 5000],
      ['none', 5000, 5400],
      ['n2', 5400, 8000],
      ['n1', 8000, 20_000],
    ]);
    expect(b.filter((x) => x.row === 'backend n2').map((x) => x.value)).toStrictEqual(['up', 'down', 'up']);
    expect(b.filter((x) => x.row === 'local endpoint (n4)').map((x) => x.value)).toStrictEqual(['up', 'partly', 'up']);
    expect(b.filter((x) => x.row === 'VIP failures')).toHaveLength(2);
    expect(b.filter((x) => x.row.startsWith('fault ')).map((x) => [x.row, x.label])).toStrictEqual([
      ['fault link-down', '#1 n1'],
      ['fault apiserver-stop', '#2 n2'],
    ]);
  });

  it('the Markdown names the verdict, the kinds with their longest outage and bound, and each violation', () => {
    const r = buildReport(timeline(), { seed: 9, minutes: 0.5, startedAt: '2026-12-01T18:00:00.000Z', counts, leftovers: [] });
    expect(r.ok).toBe(false);
    expect(r.violations.map((v) => [v.invariant, v.t])).toStrictEqual([['b', 19_000]]);
    const md = renderMarkdown(r);
    expect(md).toContain('# ballast chaos soak — seed 9, 0.5 min');
    expect(md).toContain('**FAIL: 1 violation(s)**, 2 faults injected');
    expect(md).toContain('![timeline](soak-report.svg)');
    expect(md).toMatch(/\| link-down \| 1 \| 500 ms \| 0 ms \| max\(MDI, D\) \+ M = 2500 ms/);
    expect(md).toContain("| (b) | 19.0 | 19.0 | VIP request failed (ECONNREFUSED) outside every fault's bound | none |");
    expect(md).toContain('| VIP prober (10 ms) | 2000 | 1998 (99.900 %) | 2 | n1 1500, n2 498 |');
    expect(md).toContain('Teardown left: nothing.');
  });

  it('a leftover after teardown is a (d) violation', () => {
    const tl = timeline();
    tl.vipFailures.pop();
    const r = buildReport(tl, { seed: 9, minutes: 0.5, startedAt: 'x', counts, leftovers: ['BPF pins /sys/fs/bpf/ballast/local-bsoak-n4'] });
    expect(r.violations).toStrictEqual([
      { invariant: 'd', t: 20_000, untilMs: 20_000, what: 'left after teardown: BPF pins /sys/fs/bpf/ballast/local-bsoak-n4', active: [], count: 1 },
    ]);
  });

  it('renders an SVG timeline with every lane and the verdict', async () => {
    const tl = timeline();
    tl.vipFailures.pop();
    const r = buildReport(tl, { seed: 9, minutes: 0.5, startedAt: 'x', counts, leftovers: [] });
    const svg = await renderSvg(r, tl);
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.trimEnd().endsWith('</svg>')).toBe(true);
    for (const lane of [
      'VIP holder',
      'backend n1',
      'backend n3',
      'local endpoint (n4)',
      'VIP failures',
      'fault link-down',
      'fault apiserver-stop',
      'violations',
    ])
      expect(svg).toContain(`>${lane}<`);
    expect(svg).toContain('seed 9, 0.5 min — PASS: 0 violation(s), 2 faults');
    // one rect per band (and the legend's symbols are paths)
    expect((svg.match(/<path[^>]*fill="#b07aa1"/g) ?? []).length).toBeGreaterThanOrEqual(2);
  });
});
