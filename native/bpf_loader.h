// The socket load balancer's BPF side, from user space: load bpf/sock_lb.bpf.c's object with
// libbpf, reuse or pin its maps in a bpffs directory, attach its four programs to a cgroup v2
// through bpf_links pinned next to the maps (updated in place on a restart), and read / write
// the maps. Everything here is synchronous: each call is a handful of bpf(2) syscalls.
#pragma once

#include <napi.h>

#include <string>
#include <vector>

namespace ballast {

class SockLb : public Napi::ObjectWrap<SockLb> {
 public:
  static Napi::Function Define(Napi::Env env);

  // new SockLb(objectPath, cgroupPath, pinDir): load, pin, attach (see src/native.ts)
  explicit SockLb(const Napi::CallbackInfo& info);
  ~SockLb() override;

 private:
  Napi::Value SetEndpoint(const Napi::CallbackInfo& info);
  Napi::Value DeleteEndpoint(const Napi::CallbackInfo& info);
  Napi::Value ReadEndpoints(const Napi::CallbackInfo& info);
  Napi::Value SetNetnsCookie(const Napi::CallbackInfo& info);
  Napi::Value GetNetnsCookie(const Napi::CallbackInfo& info);
  Napi::Value Reverse(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value GetReused(const Napi::CallbackInfo& info);

  void CheckOpen(Napi::Env env, const char* call) const;
  void CloseFds();
  static void OnEnvTeardown(void* arg);

  int endpointsFd_ = -1;
  int reverseFd_ = -1;
  int configFd_ = -1;
  napi_env env_ = nullptr;
  bool hooked_ = false;
  std::string pinDir_;
  std::vector<std::string> reusedMaps_;
  std::vector<std::string> updatedLinks_;
};

// bpfDetach(pinDir) -> number of pins removed (links first: unpinning detaches them)
Napi::Value BpfDetach(const Napi::CallbackInfo& info);
// netnsCookie() -> bigint: SO_NETNS_COOKIE of the calling thread's network namespace
Napi::Value NetnsCookie(const Napi::CallbackInfo& info);
// cgroupPrograms(cgroupPath) -> [{ attachType, ids }] for the four sock_addr hooks used here
Napi::Value CgroupPrograms(const Napi::CallbackInfo& info);

}  // namespace ballast
