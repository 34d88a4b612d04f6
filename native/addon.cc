// ballast.node: the raw VRRP socket, the packet socket, the BPF socket load balancer,
// sock_diag, the nftables change events, the sd_notify(3) datagram and the TCP probes (see
// src/native.ts, the only module that loads this). Context-aware: every environment (main thread, each worker) gets
// its own class constructors as instance data, and nothing global holds a napi value.
#include <napi.h>

#include "bpf_loader.h"
#include "conntrack_dump.h"
#include "file_lock.h"
#include "memory.h"
#include "nft_watch.h"
#include "notify.h"
#include "packet_socket.h"
#include "sock_diag.h"
#include "tcp_probe.h"
#include "vrrp_socket.h"

namespace ballast {

class Addon : public Napi::Addon<Addon> {
 public:
  Addon(Napi::Env env, Napi::Object exports) {
    vrrpSocket_ = Napi::Persistent(VrrpSocket::Define(env));
    packetSocket_ = Napi::Persistent(PacketSocket::Define(env));
    sockLb_ = Napi::Persistent(SockLb::Define(env));
    nftWatch_ = Napi::Persistent(NftWatch::Define(env));
    DefineAddon(exports, {
                             InstanceValue("VrrpSocket", vrrpSocket_.Value(), napi_enumerable),
                             InstanceValue("PacketSocket", packetSocket_.Value(), napi_enumerable),
                             InstanceValue("SockLb", sockLb_.Value(), napi_enumerable),
                             InstanceValue("NftWatch", nftWatch_.Value(), napi_enumerable),
                         });
    // plain functions: no per-environment state
    exports.Set("bpfDetach", Napi::Function::New<BpfDetach>(env, "bpfDetach"));
    exports.Set("netnsCookie", Napi::Function::New<NetnsCookie>(env, "netnsCookie"));
    exports.Set("cgroupPrograms", Napi::Function::New<CgroupPrograms>(env, "cgroupPrograms"));
    exports.Set("listSockets", Napi::Function::New<ListSockets>(env, "listSockets"));
    exports.Set("destroySockets", Napi::Function::New<DestroySockets>(env, "destroySockets"));
    exports.Set("lockFile", Napi::Function::New<LockFile>(env, "lockFile"));
    exports.Set("unlockFile", Napi::Function::New<UnlockFile>(env, "unlockFile"));
    exports.Set("notify", Napi::Function::New<Notify>(env, "notify"));
    exports.Set("trimMalloc", Napi::Function::New<TrimMalloc>(env, "trimMalloc"));
    exports.Set("releaseFilePages", Napi::Function::New<ReleaseFilePages>(env, "releaseFilePages"));
    exports.Set("conntrackVipFlows", Napi::Function::New<ConntrackVipFlows>(env, "conntrackVipFlows"));
    exports.Set("tcpProbePacket", Napi::Function::New<TcpProbePacket>(env, "tcpProbePacket"));
    exports.Set("sendTcpProbes", Napi::Function::New<SendTcpProbes>(env, "sendTcpProbes"));
  }

 private:
  Napi::FunctionReference vrrpSocket_;
  Napi::FunctionReference packetSocket_;
  Napi::FunctionReference sockLb_;
  Napi::FunctionReference nftWatch_;
};

}  // namespace ballast

// the macro pastes the class name into an identifier, so it needs an unqualified one
using BallastAddon = ballast::Addon;
NODE_API_NAMED_ADDON(ballast, BallastAddon)
