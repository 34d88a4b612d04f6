// man 7 packet: SOCK_RAW packet socket, protocol 0, so that it receives nothing; bound to the
// interface, a send() puts the frame on the wire exactly as given.
// No libuv handle here (nothing to read), so a synchronous env cleanup hook can close the fd.
#include "packet_socket.h"

#include <net/if.h>
#include <netpacket/packet.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common.h"
#include "errors.h"

namespace ballast {

namespace {
constexpr size_t kMinFrame = 14;    // destination, source, EtherType
constexpr size_t kMaxFrame = 1518;  // 1500-byte MTU + Ethernet header + one 802.1Q tag, no FCS
}  // namespace

Napi::Function PacketSocket::Define(Napi::Env env) {
  return DefineClass(env, "PacketSocket",
                     {
                         InstanceMethod<&PacketSocket::Send>("send"),
                         InstanceMethod<&PacketSocket::Close>("close"),
                         InstanceAccessor<&PacketSocket::GetIfindex>("ifindex"),
                         InstanceAccessor<&PacketSocket::GetHardwareAddress>("hardwareAddress"),
                     });
}

PacketSocket::PacketSocket(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<PacketSocket>(info) {
  Napi::Env env = info.Env();
  ifname_ = InterfaceName(info, 0);

  // protocol 0: no packet type is delivered to this socket (man 7 packet)
  UniqueFd fd(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) ThrowSystemError(env, errno, "socket(AF_PACKET, SOCK_RAW, 0)", ifname_);
  ifindex_ = InterfaceIndex(env, fd.get(), ifname_);

  struct ifreq request;
  std::memset(&request, 0, sizeof request);
  std::memcpy(request.ifr_name, ifname_.data(), ifname_.size());
  if (::ioctl(fd.get(), SIOCGIFHWADDR, &request) < 0) {
    ThrowSystemError(env, errno, "ioctl(SIOCGIFHWADDR)", ifname_);
  }
  std::memcpy(hardwareAddress_, request.ifr_hwaddr.sa_data, sizeof hardwareAddress_);

  struct sockaddr_ll address;
  std::memset(&address, 0, sizeof address);
  address.sll_family = AF_PACKET;
  address.sll_protocol = 0;
  address.sll_ifindex = static_cast<int>(ifindex_);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) < 0) {
    ThrowSystemError(env, errno, "bind", ifname_);
  }

  if (napi_add_env_cleanup_hook(env, OnEnvTeardown, this) != napi_ok) {
    throw Napi::Error::New(env, "napi_add_env_cleanup_hook failed");
  }
  env_ = env;
  hooked_ = true;
  fd_ = fd.release();
}

PacketSocket::~PacketSocket() { CloseFd(); }

void PacketSocket::OnEnvTeardown(void* arg) {
  PacketSocket* self = static_cast<PacketSocket*>(arg);
  self->hooked_ = false;  // node drops a hook once it has run
  self->CloseFd();
}

void PacketSocket::CloseFd() {
  if (hooked_) {
    napi_remove_env_cleanup_hook(env_, OnEnvTeardown, this);
    hooked_ = false;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

Napi::Value PacketSocket::Close(const Napi::CallbackInfo& info) {
  CloseFd();
  return info.Env().Undefined();
}

Napi::Value PacketSocket::Send(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsBuffer()) ThrowTypeError(env, "frame must be a Buffer");
  Napi::Buffer<uint8_t> frame = info[0].As<Napi::Buffer<uint8_t>>();
  if (frame.Length() < kMinFrame || frame.Length() > kMaxFrame) {
    ThrowTypeError(env, "frame must be 14 to 1518 bytes long, got " +
                            std::to_string(frame.Length()));
  }
  if (fd_ < 0) ThrowSystemError(env, EBADF, "send", ifname_);
  ssize_t n;
  do {
    n = ::send(fd_, frame.Data(), frame.Length(), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) ThrowSystemError(env, errno, "send", ifname_);
  return env.Undefined();
}

Napi::Value PacketSocket::GetIfindex(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), ifindex_);
}

Napi::Value PacketSocket::GetHardwareAddress(const Napi::CallbackInfo& info) {
  return Napi::Buffer<uint8_t>::Copy(info.Env(), hardwareAddress_, sizeof hardwareAddress_);
}

}  // namespace ballast
