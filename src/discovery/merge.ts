/**
 * The backend set from three sources (pure: no I/O, no timers):
 *
 *   before the API answers:  seed ∪ last-known          (each labelled with where it came from)
 *   once it answered with a non-empty set:  that set    (`endpointslice`; the seed is replaced)
 *   an empty answer:  the set stays as it is            (counted in `emptyKept`; the caller logs it)
 *
 * A backend that leaves the set is simply no longer in it: the caller hands the new set to the
 * health checker, which stops checking it; the data planes then leave it out of new connections
 * and keep its established ones (nothing resets a backend that left, see agent/phases/discovery.ts).
 */
import { formatHostPort, type HostPort } from '../net/hostport.js';

/** Where a backend in the set comes from. */
export type BackendSource = 'seed' | 'endpointslice' | 'lastKnown';

/** One backend of the merged set. */
export interface SourcedBackend {
  readonly backend: HostPort;
  readonly source: BackendSource;
}

/** What {@link BackendSet.discovered} did with an answer of the API. */
export interface DiscoveredResult {
  /** The merged set changed (backends or their sources). */
  changed: boolean;
  /** The answer was empty and the previous set was kept. */
  keptOnEmpty: boolean;
}

/** The merge of seed, last-known and discovered backends; see the file comment for the rules. */
export class BackendSet {
  #seed: HostPort[];
  #lastKnown: HostPort[];
  /** The last non-empty discovered set; null until the API answered with one. */
  #discovered: HostPort[] | null = null;
  #current: SourcedBackend[];
  /** Empty answers that were ignored (the previous set kept), since construction. */
  emptyKept = 0;

  /**
   * @param seed the configured `apiserver.backends`.
   * @param lastKnown the set read from the last-known file ([] when there is none).
   */
  constructor(seed: readonly HostPort[], lastKnown: readonly HostPort[]) {
    this.#seed = [...seed];
    this.#lastKnown = [...lastKnown];
    this.#current = this.#compute();
  }

  /** The merged set, in order: discovered (or seed, then last-known entries not in the seed). A copy. */
  current(): SourcedBackend[] {
    return [...this.#current];
  }

  /** The backends of {@link current}. */
  backends(): HostPort[] {
    return this.#current.map((s) => s.backend);
  }

  /** Whether the API has answered with a non-empty set (the seed no longer counts). */
  get answered(): boolean {
    return this.#discovered !== null;
  }

  /** A reload's new seed. @returns whether the merged set changed (it does not once the API answered). */
  setSeed(seed: readonly HostPort[]): boolean {
    this.#seed = [...seed];
    return this.#update();
  }

  /**
   * The API answered (a list, or the set after a watch event): the ready endpoints of the
   * `kubernetes` EndpointSlices. An empty set keeps the previous one.
   */
  discovered(set: readonly HostPort[]): DiscoveredResult {
    if (set.length === 0) {
      this.emptyKept++;
      return { changed: false, keptOnEmpty: true };
    }
    this.#discovered = dedupe(set);
    return { changed: this.#update(), keptOnEmpty: false };
  }

  #update(): boolean {
    const next = this.#compute();
    const key = (l: SourcedBackend[]): string => l.map((s) => `${formatHostPort(s.backend)}=${s.source}`).join(',');
    const changed = key(next) !== key(this.#current);
    this.#current = next;
    return changed;
  }

  #compute(): SourcedBackend[] {
    if (this.#discovered !== null) return this.#discovered.map((backend) => ({ backend, source: 'endpointslice' as const }));
    const out: SourcedBackend[] = dedupe(this.#seed).map((backend) => ({ backend, source: 'seed' as const }));
    const seen = new Set(out.map((s) => formatHostPort(s.backend)));
    for (const backend of dedupe(this.#lastKnown)) if (!seen.has(formatHostPort(backend))) out.push({ backend, source: 'lastKnown' });
    return out;
  }
}

/** Drops repeated host:port entries, keeping the first; order kept. */
function dedupe(list: readonly HostPort[]): HostPort[] {
  const seen = new Set<string>();
  return list.filter((b) => {
    const k = formatHostPort(b);
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}
