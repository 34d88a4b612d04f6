#include "file_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <string>

#include "sys_error.h"

namespace ballast {

Napi::Value LockFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) ThrowTypeError(env, "path must be a string");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) ThrowSystemErrorHint(env, errno, "open", path, "");
  if (::flock(fd, LOCK_EX | LOCK_NB) < 0) {
    int err = errno;
    ::close(fd);
    ThrowSystemErrorHint(env, err, "flock", path, err == EWOULDBLOCK ? "another process holds the lock" : "");
  }
  return Napi::Number::New(env, fd);
}

Napi::Value UnlockFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) ThrowTypeError(env, "fd must be a number");
  int fd = info[0].As<Napi::Number>().Int32Value();
  if (fd >= 0) ::close(fd);
  return env.Undefined();
}

}  // namespace ballast
