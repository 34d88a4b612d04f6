// The kernel's nftables change events (NETLINK_NETFILTER, multicast group NFNLGRP_NFTABLES),
// read through a libuv poll handle on the caller's event loop: what `nft monitor` shows, without
// a child process. Each wake-up reports, in one JS call, which tables the changes named.
#pragma once

#include <napi.h>
#include <uv.h>

#include <cstdint>
#include <string>
#include <vector>

struct mnl_socket;

namespace ballast {

class NftWatch : public Napi::ObjectWrap<NftWatch> {
 public:
  static Napi::Function Define(Napi::Env env);

  // new NftWatch(onChange, keepAlive): onChange({ tables: string[], generation: number,
  // lost: boolean }); keepAlive false leaves the poll handle unref'd (uv_unref)
  explicit NftWatch(const Napi::CallbackInfo& info);
  ~NftWatch() override;

 private:
  struct Loop;

  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);

  // from libuv: read what is queued (bounded), then one call of onChange; never throws
  void OnReadable(int status);
  void NoteMessage(const uint8_t* data, size_t length);
  void Report(napi_env env);

  static void OnPoll(uv_poll_t* handle, int status, int events);
  static void OnEnvTeardown(napi_async_cleanup_hook_handle handle, void* arg);
  static void OnClosed(uv_handle_t* handle);
  static void Shut(Loop* loop);

  bool Open() const;

  Loop* loop_ = nullptr;  // null once the libuv handle has finished closing
  Napi::FunctionReference onChange_;
  std::vector<uint8_t> buffer_;
  // gathered during one wake-up: "ip ballast", "inet filter", … (each once)
  std::vector<std::string> tables_;
  int64_t generation_ = -1;  // NFTA_GEN_ID of the last NFT_MSG_NEWGEN seen, -1 before any
  bool lost_ = false;        // ENOBUFS: the kernel dropped events for this socket
  double messages_ = 0;
  double wakeups_ = 0;
  double overruns_ = 0;
};

}  // namespace ballast
