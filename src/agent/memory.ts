/**
 * What start-up used and the steady state does not, given back once it is over
 * (docs/performance.md, "Where the memory goes"): RELEASE_DELAY_MS after the last phase started
 * (and after each reload that applied), native.ts releaseMemory — malloc_trim(3), and the node
 * executable's read-only pages out of the page tables (−24 MiB RSS with three backends, the VIP
 * data plane and the eBPF local endpoint; the code the steady state runs is mapped back within
 * seconds by minor faults from the page cache). One "memory released" info line says what it did.
 */
import type { InternalErrors } from '../observe/contain.js';
import { readFileSync } from 'node:fs';
import type { Logger } from '../log/log.js';
import { releaseMemory } from '../native.js';

/**
 * ms after the start-up (or a reload) before the release: the first health checks' TLS
 * handshakes and the first nft apply are over by then, so what maps back is what runs again.
 */
export const RELEASE_DELAY_MS = 5000;

/** RssAnon and RssFile of this process now, KiB (/proc/self/status); null where unreadable. */
function rssParts(): { anonKiB: number; fileKiB: number } | null {
  try {
    const s = readFileSync('/proc/self/status', 'utf8');
    const kib = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB$`, 'm').exec(s)?.[1] ?? NaN);
    const anonKiB = kib('RssAnon');
    const fileKiB = kib('RssFile');
    return Number.isFinite(anonKiB) && Number.isFinite(fileKiB) ? { anonKiB, fileKiB } : null;
  } catch {
    return null;
  }
}

/** Schedules releases; `stop` cancels the one pending. */
export class MemoryRelease {
  #timer: NodeJS.Timeout | null = null;

  /** @param internal where a failure of the release (its logging included) is contained; absent: it propagates to the timer. */
  constructor(
    private readonly log: Logger,
    private readonly delayMs = RELEASE_DELAY_MS,
    private readonly internal?: InternalErrors,
  ) {}

  /** (Re)arms the release `delayMs` from now; the timer does not keep the process alive. */
  schedule(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      if (this.internal) this.internal.run('memory-release', () => this.release());
      else this.release();
    }, this.delayMs);
    this.#timer.unref();
  }

  /** Releases now and logs what it did; an error is a warning (nothing else depends on it). */
  release(): void {
    const before = rssParts();
    const t0 = performance.now();
    try {
      const r = releaseMemory();
      if (r === null) return;
      const after = rssParts();
      this.log.info(
        {
          mallocTrimmed: r.mallocTrimmed,
          fileMappings: r.fileMappings,
          releasedFileKiB: r.fileKiB,
          ...(before && after ? { rssAnonKiB: after.anonKiB, rssFileKiBBefore: before.fileKiB, rssFileKiB: after.fileKiB } : {}),
          ms: Math.round(performance.now() - t0),
        },
        'memory released',
      );
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'memory release failed');
    }
  }

  stop(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
  }
}
