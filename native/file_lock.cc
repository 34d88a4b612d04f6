#include "file_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "sys_error.h"

namespace ballast {

namespace {

// a file replaced this often while we tried to lock it is not a race but a fight
constexpr int kLockAttempts = 64;

// true when `fd` and `path` name the same inode
bool SameFile(int fd, const std::string& path, int* err) {
  struct stat held {
  }, named{};
  if (::fstat(fd, &held) < 0) {
    *err = errno;
    return false;
  }
  if (::stat(path.c_str(), &named) < 0) {
    *err = errno;
    return false;
  }
  *err = 0;
  return held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

}  // namespace

Napi::Value LockFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) ThrowTypeError(env, "path must be a string");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  for (int attempt = 0; attempt < kLockAttempts; attempt++) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) ThrowSystemErrorHint(env, errno, "open", path, "");
    if (::flock(fd, LOCK_EX | LOCK_NB) < 0) {
      int err = errno;
      ::close(fd);
      ThrowSystemErrorHint(env, err, "flock", path, err == EWOULDBLOCK ? "another process holds the lock" : "");
    }
    int err = 0;
    if (SameFile(fd, path, &err)) return Napi::Number::New(env, fd);
    ::close(fd);
    // ENOENT: the previous holder unlinked the file between our open and our flock; a
    // different inode: someone created the next one already. Either way, start over.
    if (err != 0 && err != ENOENT) ThrowSystemErrorHint(env, err, "stat", path, "");
  }
  ThrowSystemErrorHint(env, ESTALE, "stat", path, "the lock file was replaced on every attempt");
}

Napi::Value UnlockFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) ThrowTypeError(env, "fd must be a number");
  if (info.Length() >= 2 && !info[1].IsUndefined() && !info[1].IsString()) ThrowTypeError(env, "path must be a string");
  int fd = info[0].As<Napi::Number>().Int32Value();
  if (fd < 0) return env.Undefined();
  if (info.Length() >= 2 && info[1].IsString()) {
    const std::string path = info[1].As<Napi::String>().Utf8Value();
    int err = 0;
    // still holding the lock: whoever opens the name after this gets a new inode
    if (SameFile(fd, path, &err)) ::unlink(path.c_str());
  }
  ::close(fd);
  return env.Undefined();
}

}  // namespace ballast
