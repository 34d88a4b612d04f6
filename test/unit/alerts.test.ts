/**
 * deploy/prometheus (the alerting rules and their promtool unit tests) and deploy/grafana (the
 * dashboard): checked with Debian's promtool, and every metric name they use checked against
 * what the agent's registry really exports. The lab test (test/integration/prometheus.test.ts)
 * runs the same rules in a real Prometheus against real agents.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { createMetrics } from '../../src/observe/metrics.js';
import { STATUS_DOC } from '../support/status-doc.js';
import { RULES_FILE, alertRules, dashboard, dashboardExprs, exposedNames, metricNames, namesInUse } from '../support/monitoring.js';
import { packageRoot } from '../../lab/lab.js';
import { needs } from '../support/index.js';

const run = promisify(execFile);
const TESTS_DIR = join(packageRoot(), 'deploy', 'prometheus', 'tests');
const testFiles = readdirSync(TESTS_DIR)
  .filter((f) => f.endsWith('.yaml'))
  .map((f) => join(TESTS_DIR, f));
const tmp = mkdtempSync(join(tmpdir(), 'ballast-alerts-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** `promtool ARGS`: its exit status and output (never rejects). */
async function promtool(args: string[]): Promise<{ code: number; out: string }> {
  try {
    const r = await run('promtool', args, { timeout: 20_000 });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === 'number' ? err.code : -1, out: `${err.stdout ?? ''}${err.stderr ?? ''}` };
  }
}

interface PromtoolTests {
  rule_files: string[];
  tests: { alert_rule_test?: { alertname: string; eval_time: string; exp_alerts: unknown[] }[] }[];
}

describe.skipIf(needs('promtool'))('alerting rules (promtool; skipped otherwise)', () => {
  const rules = alertRules();
  // every promtool run starts at once (they take most of this file's time), each test awaits its own
  const runs = new Map<string, Promise<{ code: number; out: string }>>();
  beforeAll(() => {
    runs.set('check', promtool(['check', 'rules', RULES_FILE]));
    for (const f of testFiles) runs.set(f, promtool(['test', 'rules', f]));
    // the no-holder alert made to need 10 minutes, against its own test group only: that test must fail
    const original = readFileSync(RULES_FILE, 'utf8');
    const broken = original.replace(/(- alert: BallastNoVipHolder\n\s+expr: .*\n\s+for: )30s/, '$110m');
    const rulesCopy = join(tmp, 'broken.rules.yaml');
    writeFileSync(rulesCopy, broken);
    const doc = parse(readFileSync(join(TESTS_DIR, 'vrrp.test.yaml'), 'utf8')) as PromtoolTests;
    const group = doc.tests.find((t) => t.alert_rule_test?.some((a) => a.alertname === 'BallastNoVipHolder' && a.exp_alerts.length > 0));
    writeFileSync(join(tmp, 'vrrp.test.yaml'), stringify({ ...doc, rule_files: [rulesCopy], tests: [group] }));
    runs.set(
      'changed',
      broken === original
        ? Promise.resolve({ code: -2, out: 'the replacement did not change the rules' })
        : promtool(['test', 'rules', join(tmp, 'vrrp.test.yaml')]),
    );
  });

  it('promtool check rules accepts the file, and promtool test rules passes every unit test', async () => {
    const check = await runs.get('check')!;
    expect(check.out).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(check.code).toBe(0);
    expect(testFiles.length).toBeGreaterThanOrEqual(1);
    for (const f of testFiles) {
      const t = await runs.get(f)!;
      expect(t.out, f).toContain('SUCCESS');
      expect(t.code, f).toBe(0);
    }
  });

  it('promtool test rules fails when an alert does not fire as a test expects (the tests can fail)', async () => {
    const r = await runs.get('changed')!;
    expect(r.out).toContain('alertname: BallastNoVipHolder, time: 1m');
    expect(r.code).toBe(1);
  });

  it('the alerts the issue asks for are all there, each with severity, summary, description and a runbook anchor in docs/alerts.md', () => {
    const names = rules.map((r) => r.alert);
    expect(names).toEqual(
      expect.arrayContaining([
        'BallastNoVipHolder',
        'BallastMultipleVipHolders',
        'BallastVrrpFlapping',
        'BallastBackendDown',
        'BallastNoReadyBackend',
        'BallastConfigReloadFailed',
        'BallastForeignAdverts',
        'BallastForeignVrrpSender',
        'BallastVrrpSendErrors',
        'BallastBackendCertificateSanMissing',
        'BallastBackendCertificateExpiresSoon',
        'BallastForeignFirewallRules',
        'BallastOtherMasterHeard',
      ]),
    );
    expect(new Set(names).size).toBe(names.length);
    const doc = readFileSync(join(packageRoot(), 'docs', 'alerts.md'), 'utf8');
    const anchors = new Set([...doc.matchAll(/^### (\w+)$/gm)].map((m) => m[1]!.toLowerCase()));
    for (const r of rules) {
      expect(r.labels?.severity, r.alert).toMatch(/^(critical|warning)$/);
      expect(r.annotations?.summary, r.alert).toBeTruthy();
      expect(r.annotations?.description, r.alert).toBeTruthy();
      expect(r.annotations?.runbook_url, r.alert).toBe(`docs/alerts.md#${r.alert.toLowerCase()}`);
      expect(anchors.has(r.alert.toLowerCase()), `docs/alerts.md has no "### ${r.alert}"`).toBe(true);
    }
  });

  it('every alert has a promtool test where it fires and one where it stays quiet', () => {
    const fires = new Set<string>();
    const quiet = new Set<string>();
    for (const f of testFiles) {
      const doc = parse(readFileSync(f, 'utf8')) as PromtoolTests;
      expect(doc.rule_files).toEqual(['../ballast.rules.yaml']);
      for (const t of doc.tests) for (const a of t.alert_rule_test ?? []) (a.exp_alerts.length > 0 ? fires : quiet).add(a.alertname);
    }
    const names = rules.map((r) => r.alert).sort();
    expect([...fires].sort()).toEqual(names);
    expect([...quiet].sort()).toEqual(names);
  });
});

describe('Grafana dashboard', () => {
  it('is a dashboard: title, uid, schemaVersion, a Prometheus datasource variable, panels with unique ids inside the 24-column grid, each target with refId and expr', () => {
    const d = dashboard();
    expect(d.title).toBe('ballast');
    expect(d.uid).toMatch(/^[a-zA-Z0-9_-]{1,40}$/);
    expect(d.schemaVersion).toBeGreaterThanOrEqual(36);
    expect(d.time).toEqual({ from: 'now-1h', to: 'now' });
    expect(d.templating.list.find((v) => v.name === 'datasource')).toMatchObject({ type: 'datasource', query: 'prometheus' });
    const ids = new Set<number>();
    for (const p of d.panels) {
      expect(ids.has(p.id), `panel id ${p.id} twice`).toBe(false);
      ids.add(p.id);
      expect(['row', 'stat', 'timeseries', 'state-timeline', 'table']).toContain(p.type);
      expect(p.title).toBeTruthy();
      expect(p.gridPos.x + p.gridPos.w).toBeLessThanOrEqual(24);
      expect(p.gridPos.h).toBeGreaterThan(0);
      if (p.type === 'row') continue;
      expect(p.datasource).toEqual({ type: 'prometheus', uid: '${datasource}' });
      expect(p.targets!.length).toBeGreaterThan(0);
      const refs = p.targets!.map((t) => t.refId);
      expect(new Set(refs).size).toBe(refs.length);
      for (const t of p.targets!) expect(t.expr.trim()).not.toBe('');
    }
    // what the issue lists
    const titles = d.panels.map((p) => p.title);
    for (const t of [
      'VIP holder over time',
      'VRRP state',
      'Priorities',
      'Backends up',
      'Backend check duration',
      'State transitions',
      'Adverts sent / received',
      'Packets dropped by reason',
      'Configuration reloads',
      'nftables applies',
    ]) {
      expect(titles).toContain(t);
    }
  });

  it.skipIf(needs('promtool'))('promtool check rules accepts every dashboard expression (written as recording rules into a temp file)', async () => {
    const exprs = dashboardExprs();
    expect(exprs.length).toBeGreaterThan(30);
    const file = join(tmp, 'dashboard.rules.yaml');
    writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules: exprs.map((e, i) => ({ record: `dashboard:expr_${i}`, expr: e.expr })) }] }));
    const r = await promtool(['check', 'rules', file]);
    expect(r.out).toContain(`SUCCESS: ${exprs.length} rules found`);
    expect(r.code).toBe(0);
  });
});

describe('metric names', () => {
  it('metricNames() finds every selector and rejects what does not parse', () => {
    expect(
      metricNames('sum by (cluster, vrid) (rate(ballast_vip_held{job="x"}[5m])) == 0 or histogram_quantile(0.9, nodejs_gc_duration_seconds_bucket)').sort(),
    ).toEqual(['ballast_vip_held', 'nodejs_gc_duration_seconds_bucket']);
    expect(() => metricNames('sum by (vrid (ballast_vip_held)')).toThrow(/does not parse/);
  });

  it('every name the rules and the dashboard use is one the agent exports (or one another part adds)', async () => {
    const m = createMetrics();
    m.update(STATUS_DOC);
    const exported = exposedNames(await m.registry.metrics());
    const used = namesInUse();
    expect(used.size).toBeGreaterThan(25);
    const unknown = [...used].filter(([n]) => !exported.has(n));
    expect(unknown, 'names no agent exports').toEqual([]);
    // the process metrics the dashboard shows, under their standard names
    for (const n of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_p99_seconds']) expect(exported.has(n)).toBe(true);
  });

  it('docs/metrics.md has a row for every ballast_ metric the agent exports and every one added elsewhere, and names only real process metrics', async () => {
    const text = await createMetrics().registry.metrics();
    const exported = exposedNames(text);
    const doc = readFileSync(join(packageRoot(), 'docs', 'metrics.md'), 'utf8');
    const table = doc.slice(doc.indexOf("## ballast's metrics"), doc.indexOf('## Process metrics'));
    const rows = new Set([...table.matchAll(/^\| `(ballast_\w+)` \|/gm)].map((m) => m[1]!));
    const ours = [...exported].filter((n) => n.startsWith('ballast_'));
    expect(ours.filter((n) => !rows.has(n))).toEqual([]);
    expect([...rows].filter((n) => !exported.has(n))).toEqual([]);
    const processSection = doc.slice(doc.indexOf('## Process metrics'), doc.indexOf('## Renamed'));
    const named = [...processSection.matchAll(/`((?:process|nodejs)_[a-z_]+?)(?:\{\w+\})?`/g)].map((m) => m[1]!).filter((n) => !n.endsWith('_'));
    expect(named.length).toBeGreaterThan(10);
    expect(named.filter((n) => !exported.has(n))).toEqual([]);
  });
});
