/**
 * A 24-second smoke of the chaos soak (bench/soak.ts) on its own lab (prefix
 * bsok2, 10.78.121.0/24): the full cluster (3 control-plane agents and stand-ins, a worker with
 * the eBPF local endpoint, the 10 ms VIP prober, the local prober, 100 watch-like connections),
 * seed 5's schedule (n3's /readyz 500; then n2's link down while n3 gets a bad reload), every
 * invariant checked, the report written, the bridge captured (`--capture`). The full soak is
 * `npm run soak`.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runSoak } from '../../bench/soak.js';
import type { SoakReport } from '../../lab/soak/report.js';
import { needs } from '../support/index.js';

const out = mkdtempSync(join(tmpdir(), 'ballast-soak-smoke-'));

describe.skipIf(needs('bpf'))('chaos soak smoke, 24 s (root; skipped otherwise)', () => {
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it('seed 5: 3 faults (2 at once), 0 violations, a well-formed report (md, json, svg), nothing left behind', async () => {
    const r = await runSoak({ minutes: 0.4, seed: 5, out, watches: 100, maxConcurrent: 2, prefix: 'bsok2', subnet: 121, capture: true, log: () => undefined });
    const problems = r.violations.map((v) => `(${v.invariant}) ${v.t} ms ${v.what}`);
    expect(problems).toStrictEqual([]);
    expect(r.ok).toBe(true);
    expect(r.faults.map((f) => `${f.kind}@${f.target}`)).toStrictEqual(['apiserver-unready@n3', 'link-down@n2', 'reload-bad@n3']);
    expect(r.faults.every((f) => f.failed === undefined)).toBe(true);
    expect(r.faults[2]!.note).toMatch(/refused/);
    expect(r.faults[1]!.group).toBe(r.faults[2]!.group);
    expect(r.leftovers).toStrictEqual([]);
    // the clients ran the whole time: the 10 ms prober about 100 requests a second
    expect(r.counts.vip.requests).toBeGreaterThan(1200);
    expect(r.counts.local.requests).toBeGreaterThan(150);
    expect(r.counts.watch.connections).toBe(100);
    expect(r.counts.watch.ok).toBeGreaterThan(300);
    const json = JSON.parse(readFileSync(join(out, 'soak-report.json'), 'utf8')) as SoakReport;
    expect(json).toMatchObject({ seed: 5, minutes: 0.4, ok: true, violations: [] });
    expect(json.kinds.map((k) => k.kind)).toStrictEqual(['apiserver-unready', 'link-down', 'reload-bad']);
    const md = readFileSync(join(out, 'soak-report.md'), 'utf8');
    expect(md).toContain('**PASS: 0 violation(s)**, 3 faults injected');
    const svg = readFileSync(join(out, 'soak-report.svg'), 'utf8');
    expect(svg).toMatch(/^<svg[\s\S]*<\/svg>\s*$/);
    expect(svg).toContain('>fault link-down<');
    expect(existsSync('/run/netns/bsok2-n1')).toBe(false);
    // the capture (tcpdump on the bridge): while n2's link is down and n1 still DNATs to it (until
    // its health check takes n2 out), the handshakes hashed to n2 go out on the backend leg and
    // get no answer, and only those (the prober opens ~100 connections a second)
    const c = r.capture!;
    expect(statSync(join(out, 'soak-capture.pcap')).size).toBeGreaterThan(100_000);
    const down = r.faults[1]!;
    const silent = c.list.filter((x) => x.fate === 'backend silent');
    expect(silent.length).toBeGreaterThan(0);
    for (const x of silent) {
      expect(x).toMatchObject({ holder: 'n1', backend: 'n2' });
      expect(x.t).toBeGreaterThanOrEqual(down.startMs - 50);
      expect(x.t).toBeLessThanOrEqual(down.healMs + 50);
    }
    expect(c.nearViolations).toStrictEqual([]);
    expect(md).toContain('## Stalled handshakes (packet capture)');
  }, 90_000);
});
