/**
 * Memory upkeep (native/memory.cc): malloc_trim(3) and the executable's read-only pages.
 */
import { native, type Addon } from './addon.js';

/** What {@link releaseMemory} did. */
export interface MemoryRelease {
  /** malloc_trim(3) returned memory to the kernel */
  mallocTrimmed: boolean;
  /** read-only file mappings whose pages left the process's page tables */
  fileMappings: number;
  /** their resident size before, KiB */
  fileKiB: number;
}

/**
 * Gives back what start-up used and the steady state does not (docs/performance.md, "Where the
 * memory goes"): malloc_trim(3) of every malloc arena, and the resident pages of the node
 * executable's read-only mappings (its code and read-only data: module compilation, the config
 * schema, preflight and the first nft apply touch tens of MiB of it once) out of the process's
 * page tables — they stay in the page cache, so what runs again is mapped back by a minor fault.
 * Only private read-only mappings of the executable without a copied-on-write page are touched
 * (never data); the kernel refuses writes to a running executable, so what is mapped back is
 * what was there. Synchronous: it reads /proc/self/smaps (~20–40 ms on the main thread).
 * @returns null without the addon or with one built before these functions.
 * @throws NativeError "open" when /proc/self/smaps cannot be read.
 */
export function releaseMemory(): MemoryRelease | null {
  let a: Addon;
  try {
    a = native();
  } catch {
    return null;
  }
  if (!a.trimMalloc || !a.releaseFilePages) return null;
  const mallocTrimmed = a.trimMalloc();
  const r = a.releaseFilePages();
  return { mallocTrimmed, fileMappings: r.mappings, fileKiB: r.kib };
}
