/**
 * What the tests of deploy/prometheus and deploy/grafana share: the rules and the dashboard's
 * PromQL expressions read from the real files, the metric names an expression selects (parsed
 * with Prometheus's own PromQL grammar, @prometheus-io/lezer-promql), and the names an agent
 * exports (from a registry or a scraped exposition).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parser } from '@prometheus-io/lezer-promql';
import { parse } from 'yaml';
import { packageRoot } from '../../lab/lab.js';

/** deploy/prometheus/ballast.rules.yaml */
export const RULES_FILE = join(packageRoot(), 'deploy', 'prometheus', 'ballast.rules.yaml');
/** deploy/grafana/ballast.json */
export const DASHBOARD_FILE = join(packageRoot(), 'deploy', 'grafana', 'ballast.json');

/** One alerting rule as the file has it. */
export interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** The rules file, parsed: its groups and their rules. */
export interface RulesFile {
  groups: { name: string; rules: AlertRule[] }[];
}

/** Every alerting rule of the rules file `text` (default: the real file). */
export function alertRules(text = readFileSync(RULES_FILE, 'utf8')): AlertRule[] {
  return (parse(text) as RulesFile).groups.flatMap((g) => g.rules);
}

/** A PromQL expression of the dashboard, with where it is. */
export interface DashboardExpr {
  /** `panel 3 "VIP holders now" A`, or `variable cluster` */
  where: string;
  /** the expression with Grafana's variables replaced by valid PromQL (see {@link grafanaToPromql}) */
  expr: string;
}

/** A Grafana panel, as far as the tests look. */
export interface GrafanaPanel {
  id: number;
  type: string;
  title: string;
  gridPos: { x: number; y: number; w: number; h: number };
  datasource?: { type: string; uid: string };
  targets?: { refId: string; expr: string; legendFormat?: string; datasource?: { type: string; uid: string } }[];
  panels?: GrafanaPanel[];
}

/** The dashboard, as far as the tests look. */
export interface GrafanaDashboard {
  title: string;
  uid: string;
  schemaVersion: number;
  panels: GrafanaPanel[];
  templating: { list: { name: string; type: string; query: string | { query: string }; datasource?: { type: string; uid: string } }[] };
  time: { from: string; to: string };
}

/** The dashboard file, parsed. @throws SyntaxError when it is not JSON. */
export function dashboard(): GrafanaDashboard {
  return JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8')) as GrafanaDashboard;
}

/**
 * Grafana's variables as Prometheus would see them once Grafana has substituted them:
 * `$__rate_interval` / `$__interval` / `$__range` → `1m`, any other `$name` / `${name}` → `.*`
 * (the dashboard only uses its variables inside `=~"…"` matchers, where "All" is `.*`).
 */
export function grafanaToPromql(expr: string): string {
  return expr.replace(/\$__(rate_interval|interval|range)\b/g, '1m').replace(/\$\{?[A-Za-z_]\w*\}?/g, '.*');
}

/** Every target expression of the dashboard's panels, and the selector inside each query variable's `label_values(…)`. */
export function dashboardExprs(d: GrafanaDashboard = dashboard()): DashboardExpr[] {
  const out: DashboardExpr[] = [];
  const walk = (ps: GrafanaPanel[]): void => {
    for (const p of ps) {
      for (const t of p.targets ?? []) out.push({ where: `panel ${p.id} "${p.title}" ${t.refId}`, expr: grafanaToPromql(t.expr) });
      walk(p.panels ?? []);
    }
  };
  walk(d.panels);
  for (const v of d.templating.list) {
    if (v.type !== 'query') continue;
    const q = typeof v.query === 'string' ? v.query : v.query.query;
    const m = /^label_values\((.+),\s*\w+\)$/.exec(q);
    if (!m) throw new Error(`variable ${v.name}: not label_values(selector, label): ${q}`);
    out.push({ where: `variable ${v.name}`, expr: grafanaToPromql(m[1]!) });
  }
  return out;
}

/**
 * The metric names `expr` selects (each vector selector's name), parsed with the PromQL grammar.
 * @throws Error naming the position when the expression does not parse.
 */
export function metricNames(expr: string): string[] {
  const names = new Set<string>();
  const tree = parser.parse(expr);
  tree.iterate({
    enter(n) {
      if (n.type.isError) throw new Error(`PromQL does not parse at ${n.from}: ${expr}`);
      if (n.name === 'Identifier' && n.node.parent?.name === 'VectorSelector') names.add(expr.slice(n.from, n.to));
    },
  });
  return [...names];
}

/**
 * The sample names an exposition text (Prometheus text format) declares: each `# TYPE` family,
 * with `_bucket` / `_sum` / `_count` for histograms and `_sum` / `_count` for summaries.
 */
export function exposedNames(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    const [, name, type] = m as unknown as [string, string, string];
    out.add(name);
    if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) out.add(name + s);
    if (type === 'summary') for (const s of ['_sum', '_count']) out.add(name + s);
  }
  return out;
}

/** Every metric name the rules and the dashboard select, with the first place each is used. */
export function namesInUse(): Map<string, string> {
  const used = new Map<string, string>();
  const add = (where: string, expr: string): void => {
    for (const n of metricNames(expr)) if (!used.has(n)) used.set(n, where);
  };
  for (const r of alertRules()) add(`alert ${r.alert}`, r.expr);
  for (const e of dashboardExprs()) add(e.where, e.expr);
  return used;
}
