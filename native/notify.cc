#include "notify.h"

#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common.h"
#include "errors.h"

namespace ballast {

namespace {

std::string StringArgument(const Napi::CallbackInfo& info, size_t index, const char* name) {
  if (info.Length() <= index || !info[index].IsString())
    ThrowTypeError(info.Env(), std::string(name) + " must be a string");
  std::string s = info[index].As<Napi::String>().Utf8Value();
  if (s.empty()) ThrowTypeError(info.Env(), std::string(name) + " must not be empty");
  return s;
}

}  // namespace

Napi::Value Notify(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string path = StringArgument(info, 0, "socketPath");
  const std::string message = StringArgument(info, 1, "message");

  struct sockaddr_un addr;
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  // sd_notify(3) accepts an absolute path or an abstract name written with a leading '@'
  if (path[0] != '/' && path[0] != '@') ThrowSystemError(env, EAFNOSUPPORT, "sendto", path);
  // a path needs its NUL inside sun_path; an abstract name is counted by the length instead
  if (path.size() > sizeof addr.sun_path - (path[0] == '/' ? 1 : 0))
    ThrowSystemError(env, ENAMETOOLONG, "sendto", path);
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (path[0] == '@') addr.sun_path[0] = '\0';
  const socklen_t length =
      static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + path.size() + (path[0] == '/' ? 1 : 0));

  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) ThrowSystemError(env, errno, "socket(AF_UNIX, SOCK_DGRAM)", path);
  // the kernel attaches our credentials itself (the manager sets SO_PASSCRED), which is what
  // NotifyAccess=main checks the sender's PID with
  ssize_t n;
  do {
    n = ::sendto(fd.get(), message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                 reinterpret_cast<const struct sockaddr*>(&addr), length);
  } while (n < 0 && errno == EINTR);
  if (n < 0) ThrowSystemError(env, errno, "sendto", path);
  return env.Undefined();
}

}  // namespace ballast
