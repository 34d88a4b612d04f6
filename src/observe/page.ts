/**
 * The status page served at `GET /` on the admin listener: one HTML document, rendered from the
 * /status document, with no external assets (inline CSS, no script), in the manner of haproxy's
 * stats page. Pure: {@link renderStatusPage} is status → HTML; every value that comes from the
 * document is escaped ({@link escapeHtml}), since backend reasons, errors and file names are
 * not ours to trust.
 *
 *   ┌ header: ballast · VRID · interface · this node's state ───────────── auto-refresh ┐
 *   │ VIP holder (who, since when)  │ this node (state, priority configured/advertised) │
 *   │ backends: address, state, source, latency, last check, reason (+ certificate)     │
 *   │ data planes: VIP (nftables) and the node-local endpoint                           │
 *   │ recent state changes (newest first) │ last reload │ discovery                     │
 *   └───────────────────────────────────────────────────────────────────────────────────┘
 *
 * The backends' connections column is the VIP data plane's established flows per backend
 * (`dataplane.connections`: the agent counts them in conntrack every 5 s, not per page view);
 * the eBPF local endpoint balances connect() calls and keeps no per-flow state, so its
 * connections are not counted.
 */
import type { ElectionStatusDocument, StatusDocument, TransitionRecord } from './status.js';

/** Options of {@link renderStatusPage}. */
export interface PageOptions {
  /** The wall clock, ms since the epoch (ages: "12 s ago"); default Date.now(). */
  now?: number;
  /** Seconds between reloads of the page (`<meta http-equiv="refresh">`); 0 = none; default 5. */
  refreshS?: number;
}

/** Escapes text for HTML element content and double-quoted attribute values. */
export function escapeHtml(value: unknown): string {
  return String(value ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const e = escapeHtml;

/** "12 s ago", "3 min ago", "2 h ago"; '' for a missing or unparsable time. */
function ago(iso: string | null | undefined, now: number): string {
  if (!iso) return '';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  if (s < 172800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** A time with its age: `2026-…Z (12 s ago)`, escaped. */
function when(iso: string | null | undefined, now: number): string {
  if (!iso) return '<span class="dim">—</span>';
  const a = ago(iso, now);
  return `<time datetime="${e(iso)}">${e(iso)}</time>${a ? ` <span class="dim">(${e(a)})</span>` : ''}`;
}

/** A state badge: class from a fixed list only (never from the document). */
function badge(text: string, kind: 'ok' | 'warn' | 'bad' | 'off'): string {
  return `<span class="badge ${kind}">${e(text)}</span>`;
}

function stateBadge(state: string): string {
  const kind = state === 'master' ? 'ok' : state === 'backup' ? 'off' : state === 'fault' ? 'bad' : 'warn';
  return badge(state, kind);
}

function backendBadge(state: string, healthy: boolean): string {
  return badge(state, healthy ? 'ok' : state === 'unknown' ? 'warn' : 'bad');
}

function rows(pairs: [string, string][]): string {
  return pairs.map(([k, v]) => `<tr><th scope="row">${e(k)}</th><td>${v}</td></tr>`).join('');
}

function table(head: string[], body: string[][], empty: string): string {
  if (body.length === 0) return `<p class="dim">${e(empty)}</p>`;
  return `<table class="grid"><thead><tr>${head.map((h) => `<th scope="col">${e(h)}</th>`).join('')}</tr></thead><tbody>${body.map((r) => `<tr>${r.map((c) => `<td>${c}</td>`).join('')}</tr>`).join('')}</tbody></table>`;
}

function holder(d: ElectionStatusDocument, now: number): string {
  if (d.state === 'master') {
    return rows([
      ['VIP holder', `<strong>this node</strong> (${e(d.primaryAddress)}) ${badge('held here', 'ok')}`],
      ['since', when(d.since, now)],
      ['VIPs', e(d.vips.join(', '))],
    ]);
  }
  const who =
    d.masterAddress === null
      ? '<span class="dim">unknown (no master heard)</span>'
      : `<strong>${e(d.masterAddress)}</strong>${d.masterPriority === null ? '' : ` (priority ${e(d.masterPriority)})`}`;
  return rows([
    ['VIP holder', who],
    ['heard since', when(d.masterSince ?? null, now)],
    ['VIPs', `${e(d.vips.join(', '))} ${d.vipsHeld ? badge('held here', 'warn') : badge('not held here', 'off')}`],
  ]);
}

function thisNode(d: ElectionStatusDocument, now: number): string {
  const cut = d.effectivePriority !== d.priority;
  const priority = cut
    ? `${e(d.priority)} configured, <strong>${e(d.effectivePriority)} advertised</strong>${d.priorityReason ? ` ${badge('lowered', 'warn')} <span class="reason">${e(d.priorityReason)}</span>` : ''}`
    : `${e(d.priority)} (advertised as configured)`;
  const dropped =
    Object.entries(d.counters.dropped)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ') || 'none';
  return rows([
    ['state', `${stateBadge(d.state)} since ${when(d.since, now)}${d.standby ? ` ${badge('standby: not a member yet', 'warn')}` : ''}`],
    ['priority', priority],
    [
      'group',
      e(
        `VRID ${d.vrid} on ${d.interface}, IPv${d.family}, ${d.mode}${d.mode === 'unicast' ? ` (peers: ${d.peers.join(' ') || 'none'})` : ''}${d.auth ? ', authenticated' : ''}, source ${d.primaryAddress}`,
      ),
    ],
    ['timers', e(`advert ${d.advertisementIntervalMs} ms, master advert ${d.masterAdverIntervalMs} ms, master down ${d.masterDownIntervalMs} ms`)],
    [
      'adverts',
      e(`sent ${d.counters.advertsSent}, received ${d.counters.advertsReceived}, send errors ${d.counters.sendErrors}, foreign ${d.counters.foreign}`),
    ],
    ['dropped', e(dropped)],
  ]);
}

function backends(d: StatusDocument, now: number): string {
  const counts = d.dataplane.mode === 'nftables' ? d.dataplane.connections : undefined;
  const connections = (address: string): string => {
    const n = counts?.[address];
    return n === undefined ? '<span class="dim">—</span>' : e(n);
  };
  const body = d.backends.map((b) => [
    `<code>${e(b.address)}</code>`,
    backendBadge(b.state, b.healthy),
    e(b.source ?? 'seed'),
    connections(b.address),
    b.lastLatencyMs === null ? '<span class="dim">—</span>' : `${e(Math.round(b.lastLatencyMs * 10) / 10)} ms`,
    when(b.lastCheck, now),
    [
      b.waitingFor
        ? `waiting for ${e(b.waitingFor.setting)} <code>${e(b.waitingFor.path)}</code>`
        : b.reason
          ? `<span class="reason">${e(b.reason)}</span>`
          : '',
      b.certificate && b.certificate.lacks.length > 0 ? `${badge('certificate', 'warn')} <span class="reason">${e(b.certificate.lacks.join('; '))}</span>` : '',
    ]
      .filter((x) => x !== '')
      .join('<br>'),
  ]);
  return table(['backend', 'state', 'source', 'connections', 'latency', 'last check', 'reason'], body, 'no apiserver backends configured');
}

/** `; rebalancer on (factor 1.2): 12 connections reset` for the VIP table's line; '' without a tracker. */
function rebalanceText(r: { enabled: boolean; factor: number; state: string | null; resets: Record<string, number> } | undefined): string {
  if (!r) return '';
  if (!r.enabled) return '; rebalancer off';
  const n = Object.values(r.resets).reduce((a, b) => a + b, 0);
  return `; rebalancer on (factor ${r.factor}, ${r.state ?? 'not counted yet'}): ${n} connections reset`;
}

function planes(d: StatusDocument): string {
  const dp = d.dataplane;
  const vip =
    dp.mode === 'nftables'
      ? `nftables: ${dp.backends.length ? dp.backends.map((b) => `<code>${e(b)}</code>`).join(' ') : '<span class="dim">no backend in the ruleset</span>'}<br><span class="dim">${e(`${dp.applies} applies, ${dp.failures} failed, last apply ${dp.lastApplyMs === null ? '—' : `${Math.round(dp.lastApplyMs * 10) / 10} ms`}, ${dp.flushedEntries} conntrack entries flushed, ${dp.probesSent} probes sent${rebalanceText(dp.rebalance)}`)}</span>${dp.lastError ? `<br>${badge('error', 'bad')} <span class="reason">${e(dp.lastError)}</span>` : ''}`
      : dp.mode === 'none'
        ? 'none (the VIP only; the apiserver listens on it)'
        : `off: ${e(dp.reason)}`;
  const l = d.local;
  const local =
    l.mode === 'off'
      ? `off: ${e(l.reason)}`
      : `${e(l.mode)}${l.mode === 'proxy' ? ' (user-space proxy: the slower path)' : ''}: ${l.endpoints.map((x) => `<code>${e(x)}</code>`).join(' ')} → ${l.backends.length ? l.backends.map((b) => `<code>${e(b)}</code>`).join(' ') : '<span class="dim">no ready backend</span>'}<br><span class="dim">${e(`${l.updates} updates, ${l.socketsReset} sockets reset, ${l.failures} failures`)}</span>${l.lastError ? `<br>${badge('error', 'bad')} <span class="reason">${e(l.lastError)}</span>` : ''}`;
  return `<table class="kv">${rows([
    ['VIP table', vip],
    ['local endpoint', local],
  ])}</table>`;
}

function transitions(list: readonly TransitionRecord[], now: number): string {
  const body = [...list]
    .reverse()
    .map((t) => [
      when(t.at, now),
      `${stateBadge(t.from)} → ${stateBadge(t.to)}`,
      `<code>${e(t.reason)}</code>${t.detail ? ` <span class="reason">${e(t.detail)}</span>` : ''}`,
    ]);
  return table(['when', 'change', 'reason'], body, 'no state change recorded');
}

function reload(d: StatusDocument, now: number): string {
  const r = d.reload;
  if (!r) return '<p class="dim">not known</p>';
  const last = r.last;
  const result =
    last === null
      ? '<span class="dim">no reload since the start</span>'
      : last.ok
        ? `${badge('applied', 'ok')} ${when(last.at, now)} <span class="dim">${e(`(${last.trigger}; ${last.changed.length ? `changed: ${last.changed.join(', ')}` : 'nothing changed'}; ${Math.round(last.durationMs)} ms)`)}</span>`
        : `${badge('failed', 'bad')} ${when(last.at, now)} <span class="dim">(${e(last.trigger)})</span><ul>${last.problems.map((p) => `<li class="reason">${e(p)}</li>`).join('')}</ul>`;
  return `<table class="kv">${rows([
    ['last reload', result],
    ['configuration loaded', when(r.lastSuccessAt, now)],
  ])}</table>`;
}

function discovery(d: StatusDocument, now: number): string {
  const s = d.discovery;
  if (!s) return '';
  return `<section><h2>Discovery</h2><table class="kv">${rows([
    ['state', `${e(s.state)}${s.server ? ` via <code>${e(s.server)}</code>` : ''}`],
    // a 401 / 403 (src/discovery/watch.ts): the fix is in the log line and docs/kubeadm.md
    ...(s.denied
      ? ([['refused', `${badge(s.denied === 'forbidden' ? '403 forbidden' : '401 unauthorized', 'bad')} since ${when(s.deniedSince, now)}`]] as [
          string,
          string,
        ][])
      : []),
    [
      'counters',
      e(
        `${s.lists} lists, ${s.errors} errors${s.refusals ? ` (${s.refusals.forbidden} forbidden, ${s.refusals.unauthorized} unauthorized)` : ''}, ${s.emptyKept} empty sets ignored`,
      ),
    ],
    ['last change', when(s.lastChange, now)],
    ...(s.lastError ? ([['last error', `<span class="reason">${e(s.lastError)}</span>`]] as [string, string][]) : []),
  ])}</table></section>`;
}

const CSS = `
:root{color-scheme:light;--fg:#1d2330;--dim:#6b7280;--line:#d9dee7;--head:#26324a;--ok:#1f7a3a;--warn:#9a6700;--bad:#b42318;--off:#4b5563}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:#f5f7fa}
header{background:var(--head);color:#fff;padding:10px 18px;display:flex;gap:16px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:18px;margin:0}header .meta{opacity:.85}header .dim{color:#c8d0dd}
main{padding:14px 18px;display:grid;grid-template-columns:1fr 1fr;gap:14px}
section{background:#fff;border:1px solid var(--line);border-radius:6px;padding:10px 12px;min-width:0}
section.wide{grid-column:1/-1}h2{font-size:14px;margin:0 0 8px;text-transform:uppercase;letter-spacing:.04em;color:var(--head)}
table{border-collapse:collapse;width:100%}th,td{text-align:left;vertical-align:top;padding:4px 8px;border-bottom:1px solid var(--line)}
table.kv th{width:11em;color:var(--dim);font-weight:600}table.grid thead th{background:#eef1f6}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,monospace}.dim{color:var(--dim)}.reason{color:#3b4252;overflow-wrap:anywhere}
.badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;font-weight:600;color:#fff}
.badge.ok{background:var(--ok)}.badge.warn{background:var(--warn)}.badge.bad{background:var(--bad)}.badge.off{background:var(--off)}
ul{margin:4px 0;padding-left:18px}footer{padding:0 18px 14px;color:var(--dim);font-size:12px}
@media (max-width:800px){main{grid-template-columns:1fr}}
`;

/**
 * The status page for `doc` (a /status document): a complete HTML5 document, UTF-8, with its
 * CSS inline and no script, every value escaped.
 */
export function renderStatusPage(doc: StatusDocument, opts: PageOptions = {}): string {
  const now = opts.now ?? Date.now();
  const refresh = opts.refreshS ?? 5;
  const election = doc.state === 'none' ? null : doc;
  const title = election ? `ballast · VRID ${election.vrid} · ${election.interface} · ${election.state}` : 'ballast · local endpoint only';
  const top = election
    ? `<section><h2>VIP</h2><table class="kv">${holder(election, now)}</table></section><section><h2>This node</h2><table class="kv">${thisNode(election, now)}</table></section>`
    : `<section class="wide"><h2>This node</h2><p>${badge('no election', 'off')} vrrp is not configured: this node serves the local endpoint only.</p></section>`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
${refresh > 0 ? `<meta http-equiv="refresh" content="${e(refresh)}">` : ''}<title>${e(title)}</title><style>${CSS}</style></head>
<body><header><h1>ballast</h1><span class="meta">${election ? `VRID ${e(election.vrid)} on ${e(election.interface)} · ${stateBadge(election.state)}` : 'local endpoint only'}</span><span class="meta dim">${e(new Date(now).toISOString())}</span></header>
<main>${top}
<section class="wide" id="backends"><h2>Backends</h2>${backends(doc, now)}</section>
<section class="wide" id="dataplanes"><h2>Data planes</h2>${planes(doc)}</section>
${election ? `<section id="transitions"><h2>Recent state changes</h2>${transitions(election.transitions ?? (election.lastTransition ? [election.lastTransition] : []), now)}</section>` : ''}
<section id="reload"><h2>Configuration</h2>${reload(doc, now)}</section>
${discovery(doc, now)}
</main><footer>Also: <a href="/status">/status</a> (JSON) · <a href="/metrics">/metrics</a> · <a href="/healthz">/healthz</a>${refresh > 0 ? ` · refreshes every ${e(refresh)} s` : ''}. Connections: established flows through the VIP, counted in conntrack every 5 s.</footer></body></html>
`;
}
