// ballast.node: the raw VRRP socket and the packet socket (see src/native.ts, the only
// module that loads this). Context-aware: every environment (main thread, each worker) gets
// its own class constructors as instance data, and nothing global holds a napi value.
#include <napi.h>

#include "packet_socket.h"
#include "vrrp_socket.h"

namespace ballast {

class Addon : public Napi::Addon<Addon> {
 public:
  Addon(Napi::Env env, Napi::Object exports) {
    vrrpSocket_ = Napi::Persistent(VrrpSocket::Define(env));
    packetSocket_ = Napi::Persistent(PacketSocket::Define(env));
    DefineAddon(exports, {
                             InstanceValue("VrrpSocket", vrrpSocket_.Value(), napi_enumerable),
                             InstanceValue("PacketSocket", packetSocket_.Value(), napi_enumerable),
                         });
  }

 private:
  Napi::FunctionReference vrrpSocket_;
  Napi::FunctionReference packetSocket_;
};

}  // namespace ballast

// the macro pastes the class name into an identifier, so it needs an unqualified one
using BallastAddon = ballast::Addon;
NODE_API_NAMED_ADDON(ballast, BallastAddon)
