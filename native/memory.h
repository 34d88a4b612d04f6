// The process's memory upkeep after start-up (docs/performance.md, "Where the memory goes"):
// malloc's free pages, and the start-up-only pages of the node executable's
// read-only mappings (its code and read-only data) out of the process's page tables.
#pragma once

#include <napi.h>

namespace ballast {

// trimMalloc(): boolean — malloc_trim(3) with pad 0: glibc returns the free memory of every
// malloc arena (the main one and the per-thread ones) to the kernel (MADV_DONTNEED on whole free
// pages). true when some memory was released. glibc only; elsewhere false.
Napi::Value TrimMalloc(const Napi::CallbackInfo& info);

// releaseFilePages(): { mappings: number, kib: number } — for every mapping of the executable
// (/proc/self/exe) in /proc/self/smaps that is private and read-only (r--p: read-only data,
// r-xp: code) and holds no anonymous (copied-on-write) page, madvise(2) MADV_DONTNEED over it:
// its resident pages leave this process's page tables (its RSS) and stay in the page cache, so
// the next touch is a minor fault that maps them again (with the kernel's fault-around). Private
// copies are never discarded (a mapping with any anonymous page is skipped), nor is anything
// writable, shared or anonymous, nor any other file (libraries, the addon: a file rewritten in
// place would map back changed pages; the kernel refuses writes to a running executable).
// Returns how many mappings were released and their resident size before, KiB. Throws
// SystemError "readlink" / "open" when /proc/self/exe or /proc/self/smaps cannot be read; a
// refused madvise skips that mapping.
Napi::Value ReleaseFilePages(const Napi::CallbackInfo& info);

}  // namespace ballast
