/**
 * The figures of one watch-fleet window (lab/clients/watch-fleet.ts), from its per-connection
 * lines (pure): how many of the connections open at the mark were kept, how the others ended,
 * and the stall (the longest gap between two events of one connection in the window) at
 * p50 / p99 / max over the kept ones. Grouped by serving node, or over the connections whose
 * node is in a given set ("whose backend survived" the event).
 */
import { quantile } from '../bench/stats.js';

/**
 * How a connection of a window ended (at the window's close):
 * - `kept`: still open, at least one event after the mark, and the last one less than the
 *   fleet's hang threshold before the close;
 * - `reset`: the socket failed with ECONNRESET (a RST);
 * - `fin`: the server closed it (a FIN, or the end of the chunked body);
 * - `hung`: still open but silent for longer than the hang threshold (no RST, no FIN: a client
 *   waits for its own read timeout), closed by the fleet at the window's end;
 * - `error`: any other socket or TLS error (its code in `code`).
 */
export type FleetEnd = 'kept' | 'reset' | 'fin' | 'hung' | 'error';

export const FLEET_ENDS: readonly FleetEnd[] = ['kept', 'reset', 'fin', 'hung', 'error'];

/** One connection's line of a window (watch-fleet's `{"kind":"conn",…}`). Times in ms. */
export interface FleetConn {
  kind: 'conn';
  /** the window's number (1, 2, … per fleet) */
  window: number;
  /** the connection's index, 0..count-1 */
  conn: number;
  /** its local (source) address */
  src: string;
  /** the node that serves it (the stand-in's x-ballast-lab-node header) */
  node: string;
  ended: FleetEnd;
  /** with `error`: the error's code (EPIPE, ETIMEDOUT, ERR_SSL_…) */
  code?: string;
  /**
   * the longest gap between two consecutive events in the window, the one that spans the mark
   * included; for a connection not kept, also the silence from its last event to its end (or
   * to the window's close), ms
   */
  stallMs: number;
  /** events received after the mark */
  events: number;
  /** mark → first event after it, ms; null when none came */
  firstEventMs: number | null;
  /** mark → the end of a connection not kept (the close, or the window's end for `hung`), ms */
  endedMs: number | null;
}

/** Quantiles of a time over a set of connections, ms (nearest rank, 0.1 ms); null without connections. */
export interface StallFigures {
  p50: number | null;
  p99: number | null;
  max: number | null;
}

/** The figures of a set of connections of one window. */
export interface FleetSummary {
  /** connections open at the mark */
  connections: number;
  kept: number;
  /** kept / connections, 0..1; null without connections */
  keptShare: number | null;
  /** how each connection ended (every FleetEnd present, 0 when none) */
  ended: Record<FleetEnd, number>;
  /** `error` ends by code */
  errors: Record<string, number>;
  /** over the kept connections */
  stall: StallFigures;
  /** over every connection, kept or not (a lost one's stall runs to its end) */
  stallAll: StallFigures;
  /** mark → the end of the connections not kept (`endedMs`), ms */
  lostAt: StallFigures;
}

const round1 = (x: number): number => Math.round(x * 10) / 10;

function stallOf(xs: readonly number[]): StallFigures {
  if (xs.length === 0) return { p50: null, p99: null, max: null };
  const r = (v: number | null): number | null => (v === null ? null : round1(v));
  return { p50: r(quantile(xs, 0.5)), p99: r(quantile(xs, 0.99)), max: r(Math.max(...xs)) };
}

/**
 * The figures of `conns` (pure); with `nodes`, of those whose serving node is in it (e.g. the
 * nodes whose apiserver survived the event).
 */
export function summarizeFleet(conns: readonly FleetConn[], nodes?: Iterable<string>): FleetSummary {
  const only = nodes === undefined ? undefined : new Set(nodes);
  const set = only === undefined ? conns : conns.filter((c) => only.has(c.node));
  const ended = Object.fromEntries(FLEET_ENDS.map((e) => [e, 0])) as Record<FleetEnd, number>;
  const errors: Record<string, number> = {};
  for (const c of set) {
    ended[c.ended]++;
    if (c.ended === 'error') errors[c.code ?? 'unknown'] = (errors[c.code ?? 'unknown'] ?? 0) + 1;
  }
  const kept = set.filter((c) => c.ended === 'kept');
  return {
    connections: set.length,
    kept: kept.length,
    keptShare: set.length === 0 ? null : kept.length / set.length,
    ended,
    errors,
    stall: stallOf(kept.map((c) => c.stallMs)),
    stallAll: stallOf(set.map((c) => c.stallMs)),
    lostAt: stallOf(set.flatMap((c) => (c.ended === 'kept' || c.endedMs === null ? [] : [c.endedMs]))),
  };
}

/** {@link summarizeFleet} per serving node (pure), nodes in name order. */
export function summarizeByNode(conns: readonly FleetConn[]): Record<string, FleetSummary> {
  const names = [...new Set(conns.map((c) => c.node))].sort();
  return Object.fromEntries(names.map((n) => [n, summarizeFleet(conns, [n])]));
}
