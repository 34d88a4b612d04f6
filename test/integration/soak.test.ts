/**
 * A 30-second smoke of the chaos soak (bench/soak.ts, issue 12 item 1) on its own lab (prefix
 * bsok2, 10.78.121.0/24): the full cluster (3 control-plane agents and stand-ins, a worker with
 * the eBPF local endpoint, the 10 ms VIP prober, the local prober, 100 watch-like connections),
 * seed 8's schedule (a bad reload on n2; then n3's /readyz 500 while n2's agent is SIGKILLed and
 * restarted), every invariant checked, the report written. The full soak is `npm run soak`.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runSoak } from '../../bench/soak.js';
import type { SoakReport } from '../../lab/soak/report.js';
import { needs } from '../support/index.js';

const out = mkdtempSync(join(tmpdir(), 'ballast-soak-smoke-'));

describe.skipIf(needs('bpf'))('chaos soak smoke, 30 s (root; skipped otherwise)', () => {
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it('seed 8: 3 faults, 0 violations, a well-formed report (md, json, svg), nothing left behind', async () => {
    const r = await runSoak({ minutes: 0.5, seed: 8, out, watches: 100, maxConcurrent: 2, prefix: 'bsok2', subnet: 121, log: () => undefined });
    const problems = r.violations.map((v) => `(${v.invariant}) ${v.t} ms ${v.what}`);
    expect(problems).toStrictEqual([]);
    expect(r.ok).toBe(true);
    expect(r.faults.map((f) => `${f.kind}@${f.target}`)).toStrictEqual(['reload-bad@n2', 'apiserver-unready@n3', 'agent-sigkill@n2']);
    expect(r.faults.every((f) => f.failed === undefined)).toBe(true);
    expect(r.faults[0]!.note).toMatch(/refused/);
    expect(r.leftovers).toStrictEqual([]);
    // the clients ran the whole time: the 10 ms prober about 100 requests a second
    expect(r.counts.vip.requests).toBeGreaterThan(1500);
    expect(r.counts.local.requests).toBeGreaterThan(200);
    expect(r.counts.watch.connections).toBe(100);
    expect(r.counts.watch.ok).toBeGreaterThan(300);
    const json = JSON.parse(readFileSync(join(out, 'soak-report.json'), 'utf8')) as SoakReport;
    expect(json).toMatchObject({ seed: 8, minutes: 0.5, ok: true, violations: [] });
    expect(json.kinds.map((k) => k.kind)).toStrictEqual(['agent-sigkill', 'apiserver-unready', 'reload-bad']);
    const md = readFileSync(join(out, 'soak-report.md'), 'utf8');
    expect(md).toContain('**PASS: 0 violation(s)**, 3 faults injected');
    const svg = readFileSync(join(out, 'soak-report.svg'), 'utf8');
    expect(svg).toMatch(/^<svg[\s\S]*<\/svg>\s*$/);
    expect(svg).toContain('>fault agent-sigkill<');
    expect(existsSync('/run/netns/bsok2-n1')).toBe(false);
  }, 60_000);
});
