// VRRP raw socket (IP protocol 112), IPv4 or IPv6, bound to one interface, read through a
// libuv poll handle on the caller's event loop (main thread or worker).
#pragma once

#include <napi.h>
#include <netinet/in.h>
#include <uv.h>

#include <cstdint>
#include <string>
#include <vector>

#include "advert_pacer.h"
#include "vrrp_send.h"

namespace ballast {

class VrrpSocket : public Napi::ObjectWrap<VrrpSocket> {
 public:
  static Napi::Function Define(Napi::Env env);

  // new VrrpSocket(family: 4|6, ifname, sourceAddress: string|undefined, onPacket, onError)
  explicit VrrpSocket(const Napi::CallbackInfo& info);
  ~VrrpSocket() override;

 private:
  struct Core;

  Napi::Value JoinGroup(const Napi::CallbackInfo& info);
  Napi::Value LeaveGroup(const Napi::CallbackInfo& info);
  Napi::Value Send(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  // named apart from ObjectWrap::Ref/Unref, which pin the JS object (a different thing)
  Napi::Value RefLoop(const Napi::CallbackInfo& info);
  Napi::Value UnrefLoop(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  // receivePending(): reads the datagrams already waiting in the socket now, as a poll
  // callback would (onPacket for each), instead of at the loop's next poll phase
  Napi::Value ReceivePending(const Napi::CallbackInfo& info);
  Napi::Value GetIfindex(const Napi::CallbackInfo& info);
  // the advert pacer (advert_pacer.h): startPacer(rtPriority) → 0 or the errno that refused
  // SCHED_FIFO; pace([[message, destination], ...] | null, intervalMs, holdMs);
  // setAuth(key, firstSequence: bigint); takeSequence() → bigint
  Napi::Value StartPacer(const Napi::CallbackInfo& info);
  Napi::Value Pace(const Napi::CallbackInfo& info);
  Napi::Value SetAuth(const Napi::CallbackInfo& info);
  Napi::Value TakeSequence(const Napi::CallbackInfo& info);

  void Membership(bool join);
  // The receive path runs from a libuv callback with no JS below it, so it uses plain napi
  // calls and gives up on the first failure (a terminating worker fails them all) instead of
  // throwing C++ exceptions, which would have nowhere to go.
  void Drain(int status);
  // false: stop draining (socket closed by the callback, or JS cannot run any more)
  bool ReceiveOne(napi_env env, napi_value self, bool* again);
  bool Deliver(napi_env env, napi_value self, const uint8_t* payload, size_t length, const char* source,
               const char* destination, int ttl, unsigned ifindex);
  void EmitError(napi_env env, napi_value self, int err, const char* syscall);
  [[noreturn]] void ThrowClosed(Napi::Env env, const std::string& syscall) const;

  static void OnPoll(uv_poll_t* handle, int status, int events);
  static void OnEnvTeardown(napi_async_cleanup_hook_handle handle, void* arg);
  static void OnClosed(uv_handle_t* handle);
  static void BeginClose(Core* core);

  bool IsOpen() const;
  VrrpDestination Destination(Napi::Env env, const Napi::Value& value) const;

  Core* core_ = nullptr;  // null once the libuv handle has finished closing
  int family_;
  unsigned ifindex_ = 0;
  std::string ifname_;
  VrrpRoute route_;
  Napi::FunctionReference onPacket_;
  Napi::FunctionReference onError_;
  std::vector<uint8_t> buffer_;
  double received_ = 0;
  double malformed_ = 0;
  double sent_ = 0;
  PacerStats pacer_;  // the pacer's counters as last read (still readable after close)
};

}  // namespace ballast
