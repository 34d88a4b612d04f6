/**
 * Warnings about dropped adverts, once per key (a kind of drop and its source), with a cap: a
 * flood of forged sources cannot grow memory or the log.
 */
import { LOGGED_SOURCES_MAX } from './engine-api.js';
import { FILTER_WARNINGS, type FilterDropReason } from './filters.js';
import type { EngineLogLine } from './pacing.js';

/** Logs each key's warning once, for at most {@link LOGGED_SOURCES_MAX} keys. */
export class OnceWarnings {
  /** Keys already logged, at most {@link LOGGED_SOURCES_MAX}; `unlogged` counts the warnings left out past the cap. */
  private readonly warned = new Set<string>();
  private unlogged = 0;

  constructor(private readonly log: EngineLogLine) {}

  /**
   * A dropped advert (filters.ts `reason`, with its `detail`) from `source`: its warning
   * (FILTER_WARNINGS), once per reason and source (VRRPv2: once in all), with the peers or the
   * members that did not list the source. Reasons without a warning are only counted.
   */
  dropped(
    reason: FilterDropReason,
    detail: string | undefined,
    source: string,
    listed: { peers: readonly string[]; members: ReadonlySet<string> | null },
  ): void {
    const text = FILTER_WARNINGS[reason];
    if (text === undefined) return;
    if (reason === 'vrrpv2') this.warnOnce('vrrpv2', text, { source, detail });
    else
      this.warnOnce(
        `${reason}:${source}`,
        text,
        reason === 'notPeer' ? { source, peers: listed.peers } : reason === 'notMember' ? { source, members: [...(listed.members ?? [])] } : { source },
      );
  }

  /** Logs `msg` with `fields` the first time `key` comes, while fewer than LOGGED_SOURCES_MAX keys were logged. */
  warnOnce(key: string, msg: string, fields: Record<string, unknown>): void {
    if (this.warned.has(key)) return;
    if (this.warned.size >= LOGGED_SOURCES_MAX) {
      // a flood of forged sources: one line says so, then the drop counters carry the rest
      if (this.unlogged++ === 0)
        this.log('warn', `more than ${LOGGED_SOURCES_MAX} sources to warn about: further ones are only counted (see the dropped counters)`, { first: fields });
      return;
    }
    this.warned.add(key);
    this.log('warn', msg, fields);
  }
}
