#include "errors.h"

#include <errno.h>
#include <string.h>

namespace ballast {

namespace {

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
// glibc >= 2.32: both names and descriptions, thread-safe and locale-independent
const char* NameOf(int err) {
  return strerrorname_np(err);
}
const char* DescriptionOf(int err) {
  return strerrordesc_np(err);
}
#else
// other C libraries (musl in Alpine images): the errors this addon can meet
const char* NameOf(int err) {
  switch (err) {
// one case per errno, laid out as a table (clang-format would stair-step the macro calls)
// clang-format off
#define BALLAST_ERRNO(e) \
  case e:                \
    return #e;
    BALLAST_ERRNO(EPERM) BALLAST_ERRNO(ENOENT) BALLAST_ERRNO(EINTR) BALLAST_ERRNO(EBADF)
    BALLAST_ERRNO(EAGAIN) BALLAST_ERRNO(ENOMEM) BALLAST_ERRNO(EACCES) BALLAST_ERRNO(EFAULT)
    BALLAST_ERRNO(EBUSY) BALLAST_ERRNO(ENODEV) BALLAST_ERRNO(EINVAL) BALLAST_ERRNO(ENFILE)
    BALLAST_ERRNO(EMFILE) BALLAST_ERRNO(ENXIO) BALLAST_ERRNO(EMSGSIZE) BALLAST_ERRNO(ENOPROTOOPT)
    BALLAST_ERRNO(EPROTONOSUPPORT) BALLAST_ERRNO(EOPNOTSUPP) BALLAST_ERRNO(EAFNOSUPPORT)
    BALLAST_ERRNO(EADDRINUSE) BALLAST_ERRNO(EADDRNOTAVAIL) BALLAST_ERRNO(ENETDOWN)
    BALLAST_ERRNO(ENETUNREACH) BALLAST_ERRNO(ENOBUFS) BALLAST_ERRNO(EHOSTUNREACH)
    BALLAST_ERRNO(ECONNREFUSED) BALLAST_ERRNO(ENOTSOCK) BALLAST_ERRNO(EDESTADDRREQ)
#undef BALLAST_ERRNO
        // clang-format on
        default : return nullptr;
  }
}
const char* DescriptionOf(int err) {
  return strerror(err);
}
#endif

}  // namespace

std::string ErrnoName(int err) {
  const char* name = NameOf(err);
  return name != nullptr ? std::string(name) : "E" + std::to_string(err);
}

bool CreateSystemError(napi_env env, int err, const std::string& syscall, const std::string& ifname,
                       napi_value* result) {
  const std::string name = ErrnoName(err);
  const char* description = DescriptionOf(err);
  std::string text = syscall + " failed on " + ifname + ": " + name;
  if (description != nullptr) text += std::string(" (") + description + ")";
  napi_value message, code, number, call, error;
  if (napi_create_string_utf8(env, text.data(), text.size(), &message) != napi_ok ||
      napi_create_string_utf8(env, name.data(), name.size(), &code) != napi_ok ||
      napi_create_int32(env, err, &number) != napi_ok ||
      napi_create_string_utf8(env, syscall.data(), syscall.size(), &call) != napi_ok ||
      napi_create_error(env, nullptr, message, &error) != napi_ok ||
      napi_set_named_property(env, error, "code", code) != napi_ok ||
      napi_set_named_property(env, error, "errno", number) != napi_ok ||
      napi_set_named_property(env, error, "syscall", call) != napi_ok) {
    return false;
  }
  *result = error;
  return true;
}

Napi::Error SystemError(Napi::Env env, int err, const std::string& syscall, const std::string& ifname) {
  napi_value error;
  if (!CreateSystemError(env, err, syscall, ifname, &error)) throw Napi::Error::New(env);
  return Napi::Error(env, error);
}

void ThrowTypeError(Napi::Env env, const std::string& message) {
  throw Napi::TypeError::New(env, message);
}

bool CallFromLoop(napi_env env, napi_value recv, napi_value fn, size_t argc, const napi_value* argv) {
  napi_value result;
  // make_callback (not call_function): runs the microtask and nextTick queues afterwards,
  // as node does for its own I/O callbacks
  napi_status status = napi_make_callback(env, nullptr, recv, fn, argc, argv, &result);
  if (status == napi_ok) return true;
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
    napi_value exception;
    if (napi_get_and_clear_last_exception(env, &exception) == napi_ok) {
      napi_fatal_exception(env, exception);
    }
  }
  return false;
}

}  // namespace ballast
