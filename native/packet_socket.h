// AF_PACKET socket bound to one interface, for sending whole link-layer frames (gratuitous
// ARP, unsolicited neighbour advertisements) built by the TypeScript side, and, when opened with
// an EtherType, for reading frames of that type without blocking (`ballast check`'s probes).
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

namespace ballast {

class PacketSocket : public Napi::ObjectWrap<PacketSocket> {
 public:
  static Napi::Function Define(Napi::Env env);

  // new PacketSocket(ifname[, protocol[, filter]])
  explicit PacketSocket(const Napi::CallbackInfo& info);
  ~PacketSocket() override;

 private:
  Napi::Value Send(const Napi::CallbackInfo& info);
  Napi::Value Receive(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value GetIfindex(const Napi::CallbackInfo& info);
  Napi::Value GetHardwareAddress(const Napi::CallbackInfo& info);

  void CloseFd();
  static void OnEnvTeardown(void* arg);

  int fd_ = -1;
  napi_env env_ = nullptr;
  bool hooked_ = false;
  unsigned ifindex_ = 0;
  uint8_t hardwareAddress_[6] = {};
  std::string ifname_;
};

}  // namespace ballast
