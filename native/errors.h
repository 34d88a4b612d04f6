// Errors cross into JavaScript as data: every failed system call becomes an Error carrying
// `code` (errno name), `errno` (positive errno(3) value), and `syscall` (the call that failed),
// the way node's own fs errors do, so TypeScript branches on err.code rather than on text.
#pragma once

#include <napi.h>

#include <string>

namespace ballast {

// "EADDRINUSE" for EADDRINUSE; "E<n>" for a value the C library cannot name.
std::string ErrnoName(int err);

// Error("<syscall> failed on <ifname>: <NAME> (<description>)") with code, errno and syscall set.
Napi::Error SystemError(Napi::Env env, int err, const std::string& syscall, const std::string& ifname);

// The same error built with plain napi calls that report failure instead of throwing C++
// exceptions: for libuv callbacks, where nothing may throw (and where a terminating worker makes
// every napi call fail). Returns false if it could not be built.
bool CreateSystemError(napi_env env, int err, const std::string& syscall, const std::string& ifname,
                       napi_value* result);

// argument errors are TypeErrors (checked again here after the TypeScript wrapper checked them)
[[noreturn]] void ThrowTypeError(Napi::Env env, const std::string& message);

[[noreturn]] inline void ThrowSystemError(Napi::Env env, int err, const std::string& syscall,
                                          const std::string& ifname) {
  throw SystemError(env, err, syscall, ifname);
}

// Calls a JS callback from a libuv callback (no JS frame below us). An exception thrown by the
// callback is reported as uncaught (process 'uncaughtException', or the worker's 'error'), as
// for any event handler; when the environment can no longer run JS (a worker being terminated)
// the call is silently skipped. Returns false if the caller should stop delivering for now.
bool CallFromLoop(napi_env env, napi_value recv, napi_value fn, size_t argc, const napi_value* argv);

}  // namespace ballast
