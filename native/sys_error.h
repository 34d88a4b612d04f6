// Errors with an operator hint appended: the same data as SystemError (code, errno, syscall),
// for the BPF and sock_diag paths, where a bare errno ("EPERM") does not say what to fix.
#pragma once

#include <napi.h>
#include <string.h>

#include <string>

#include "errors.h"

namespace ballast {

// Error("<syscall> failed on <subject>: <NAME> (<description>)[; <hint>]")
inline Napi::Error SystemErrorHint(Napi::Env env, int err, const std::string& syscall, const std::string& subject,
                                   const std::string& hint) {
  std::string text = syscall + " failed on " + subject + ": " + ErrnoName(err);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  const char* description = strerrordesc_np(err);
#else
  const char* description = strerror(err);
#endif
  if (description != nullptr) text += std::string(" (") + description + ")";
  if (!hint.empty()) text += "; " + hint;
  Napi::Error error = Napi::Error::New(env, text);
  error.Set("code", Napi::String::New(env, ErrnoName(err)));
  error.Set("errno", Napi::Number::New(env, err));
  error.Set("syscall", Napi::String::New(env, syscall));
  return error;
}

[[noreturn]] inline void ThrowSystemErrorHint(Napi::Env env, int err, const std::string& syscall,
                                              const std::string& subject, const std::string& hint) {
  throw SystemErrorHint(env, err, syscall, subject, hint);
}

}  // namespace ballast
