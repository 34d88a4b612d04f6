#include "memory.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <string>
#include <vector>

#include "errors.h"

namespace ballast {

Napi::Value TrimMalloc(const Napi::CallbackInfo& info) {
#if defined(__GLIBC__)
  return Napi::Boolean::New(info.Env(), ::malloc_trim(0) != 0);
#else
  return Napi::Boolean::New(info.Env(), false);
#endif
}

namespace {

struct Mapping {
  unsigned long start = 0;
  unsigned long end = 0;
  bool candidate = false;
  unsigned long rssKiB = 0;
  unsigned long anonKiB = 0;
};

// "start-end perms offset dev inode path": a candidate is r--p or r-xp of the executable `exe`
bool ParseHeader(const char* line, const std::string& exe, Mapping* m) {
  char perms[8] = {};
  unsigned long inode = 0;
  int pathAt = 0;
  if (sscanf(line, "%lx-%lx %7s %*s %*s %lu %n", &m->start, &m->end, perms, &inode, &pathAt) < 4) return false;
  std::string path(line + pathAt);
  while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
  m->candidate = inode != 0 && path == exe && (strcmp(perms, "r--p") == 0 || strcmp(perms, "r-xp") == 0);
  return true;
}

}  // namespace

Napi::Value ReleaseFilePages(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  char exeBuf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exeBuf, sizeof exeBuf - 1);
  if (n <= 0) throw SystemError(env, errno, "readlink", "/proc/self/exe");
  // a replaced executable reads "<path> (deleted)" here and in smaps alike: nothing matches then
  const std::string exe(exeBuf, static_cast<size_t>(n));
  FILE* f = ::fopen("/proc/self/smaps", "re");
  if (f == nullptr) throw SystemError(env, errno, "open", "/proc/self/smaps");
  std::vector<Mapping> maps;
  char line[4096];
  while (::fgets(line, sizeof line, f) != nullptr) {
    Mapping m;
    // a mapping's header starts with its address (lower-case hex); its fields with a capital
    const bool header = (line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f');
    if (header && ParseHeader(line, exe, &m)) {
      maps.push_back(m);
      continue;
    }
    if (maps.empty()) continue;
    unsigned long kib = 0;
    if (sscanf(line, "Rss: %lu kB", &kib) == 1)
      maps.back().rssKiB = kib;
    else if (sscanf(line, "Anonymous: %lu kB", &kib) == 1)
      maps.back().anonKiB = kib;
  }
  ::fclose(f);
  double released = 0;
  double kibs = 0;
  for (const Mapping& m : maps) {
    if (!m.candidate || m.anonKiB != 0 || m.rssKiB == 0) continue;
    if (::madvise(reinterpret_cast<void*>(m.start), m.end - m.start, MADV_DONTNEED) != 0) continue;
    released += 1;
    kibs += static_cast<double>(m.rssKiB);
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("mappings", Napi::Number::New(env, released));
  out.Set("kib", Napi::Number::New(env, kibs));
  return out;
}

}  // namespace ballast
