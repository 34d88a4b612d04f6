/**
 * The counting of the CPU-stress benchmark (bench/stress.ts), pure: false failovers seen three
 * ways (the daemons' state-transition logs, the adverts on the wire, the VIP's address events),
 * the holder's advert gaps on the wire, per-hour rates and the aggregation over rounds.
 *
 * A false failover is a node other than the expected holder taking over although no fault was
 * injected. Each source counts it its own way:
 * - log: entries into master state by the other nodes (ballast's `state change` lines with
 *   `to: "master"`, keepalived's `(VI_n) Entering MASTER STATE`);
 * - wire: episodes of adverts with priority > 0 from another source than the holder (one
 *   episode = such adverts from one source with less than {@link EPISODE_GAP_MS} between them);
 * - address: the VIP added on another node (`ip -o monitor address` in its namespace).
 * The benchmark's figure is the largest of the three (the most any witness saw).
 */
import type { WirePacket } from './failover-run.js';
import { quantile } from './stats.js';

/** Adverts of one non-holder source less than this far apart (ms) belong to one takeover episode. */
export const EPISODE_GAP_MS = 1000;

/** ballast's JSON log lines entering master state (`state change`, `to: "master"`) in `text`. */
export function ballastMasterEntries(text: string): number {
  let n = 0;
  for (const line of text.split('\n')) {
    if (!line.includes('"state change"')) continue;
    try {
      const o = JSON.parse(line) as { msg?: unknown; to?: unknown };
      if (o.msg === 'state change' && o.to === 'master') n++;
    } catch {
      // not a JSON line
    }
  }
  return n;
}

/** keepalived's log lines `(<instance>) Entering MASTER STATE` in `text`. */
export function keepalivedMasterEntries(text: string, instance: string): number {
  let n = 0;
  const want = `(${instance}) Entering MASTER STATE`;
  for (const line of text.split('\n')) if (line.includes(want)) n++;
  return n;
}

/** Counts of `ip -o monitor address` lines for `vip` in `text`: additions (new or renewed) and deletions. */
export function vipAddressEvents(text: string, vip: string): { added: number; deleted: number } {
  const re = new RegExp(`\\sinet6?\\s+${vip.replace(/[.:]/g, (c) => `\\${c}`)}/\\d+\\s`);
  let added = 0;
  let deleted = 0;
  for (const line of text.split('\n')) {
    if (!re.test(`${line} `)) continue;
    if (/^\s*Deleted\b/.test(line)) deleted++;
    else added++;
  }
  return { added, deleted };
}

/**
 * Takeover episodes on the wire (see the file comment): adverts with priority > 0 from a source
 * other than `holder` (its IPv4 address), per source, split where a source was silent for
 * {@link EPISODE_GAP_MS} or more. `pkts` in capture order.
 */
export function takeoverEpisodes(pkts: readonly WirePacket[], holder: string): number {
  const last = new Map<string, number>();
  let episodes = 0;
  for (const p of pkts) {
    if (p.kind !== 'advert' || p.src === holder || (p.priority ?? 0) === 0) continue;
    const prev = last.get(p.src);
    if (prev === undefined || p.t - prev >= EPISODE_GAP_MS) episodes++;
    last.set(p.src, p.t);
  }
  return episodes;
}

/** The holder's advert gaps on the wire (ms): how late its adverts came, against the interval. */
export interface GapStats {
  /** adverts of the holder seen */
  adverts: number;
  p50Ms: number | null;
  p99Ms: number | null;
  p999Ms: number | null;
  maxMs: number | null;
  /** gaps longer than 1.5, 2 and 3 intervals, and than the backup's Master_Down_Interval */
  over1_5: number;
  over2: number;
  over3: number;
  overMasterDown: number;
}

/**
 * Gaps between consecutive adverts (priority > 0) from `holder` in `pkts` (capture order),
 * against `intervalMs` and `masterDownMs` (the highest backup's Master_Down_Interval, ms).
 */
export function holderGaps(pkts: readonly WirePacket[], holder: string, intervalMs: number, masterDownMs: number): GapStats {
  const ts = pkts.filter((p) => p.kind === 'advert' && p.src === holder && (p.priority ?? 0) > 0).map((p) => p.t);
  const gaps: number[] = [];
  for (let i = 1; i < ts.length; i++) gaps.push(ts[i]! - ts[i - 1]!);
  const r3 = (x: number | null): number | null => (x === null ? null : Math.round(x * 1000) / 1000);
  return {
    adverts: ts.length,
    p50Ms: r3(quantile(gaps, 0.5)),
    p99Ms: r3(quantile(gaps, 0.99)),
    p999Ms: r3(quantile(gaps, 0.999)),
    maxMs: r3(gaps.length === 0 ? null : Math.max(...gaps)),
    over1_5: gaps.filter((g) => g > 1.5 * intervalMs).length,
    over2: gaps.filter((g) => g > 2 * intervalMs).length,
    over3: gaps.filter((g) => g > 3 * intervalMs).length,
    overMasterDown: gaps.filter((g) => g > masterDownMs).length,
  };
}

/** What one configuration saw in one round's window. */
export interface WindowCounts {
  /** master entries of the non-holders, from the daemons' logs */
  log: number;
  /** takeover episodes on the wire */
  wire: number;
  /** VIP additions on the non-holders */
  address: number;
}

/** The false failovers of a window: the most any of the three witnesses saw. */
export const falseFailovers = (c: WindowCounts): number => Math.max(c.log, c.wire, c.address);

/** `count` events in `minutes` extrapolated to one hour; null for an empty window. */
export const perHour = (count: number, minutes: number): number | null => (minutes > 0 ? Math.round((count * 60 * 100) / minutes) / 100 : null);

/** One configuration's rounds summed up: medians of the per-round rates and the pooled rate. */
export interface RateSummary {
  rounds: number;
  minutes: number;
  falseFailovers: number;
  /** median over the rounds of each round's per-hour rate */
  medianPerHour: number | null;
  /** all false failovers over all observed minutes, per hour */
  pooledPerHour: number | null;
}

/** Sums `rounds` (false failovers and window minutes of each round) into a {@link RateSummary}. */
export function summarizeRates(rounds: readonly { falseFailovers: number; minutes: number }[]): RateSummary {
  const minutes = rounds.reduce((s, r) => s + r.minutes, 0);
  const total = rounds.reduce((s, r) => s + r.falseFailovers, 0);
  const rates = rounds.flatMap((r) => {
    const h = perHour(r.falseFailovers, r.minutes);
    return h === null ? [] : [h];
  });
  return {
    rounds: rounds.length,
    minutes: Math.round(minutes * 100) / 100,
    falseFailovers: total,
    medianPerHour: quantileMedian(rates),
    pooledPerHour: perHour(total, minutes),
  };
}

function quantileMedian(xs: readonly number[]): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/**
 * ballast / keepalived for false-failover rates: a number when keepalived's is not 0, "0/0"
 * when both are 0 (equal), null when only keepalived's is 0 or either is missing.
 */
export function rateRatio(b: number | null, k: number | null): number | '0/0' | null {
  if (b === null || k === null) return null;
  if (k === 0) return b === 0 ? '0/0' : null;
  return Math.round((b / k) * 100) / 100;
}
