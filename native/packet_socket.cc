// man 7 packet: SOCK_RAW packet socket bound to one interface; a send() puts the frame on the
// wire exactly as given.
//
// Receiving is off by default (protocol 0: no packet type is delivered). `ballast check` opens
// one with an EtherType (ETH_P_ARP, ETH_P_IP, ETH_P_IPV6) and optionally a classic BPF socket
// filter (man 7 socket, SO_ATTACH_FILTER; Documentation/networking/filter.rst), and reads it with
// receive(): a NON-BLOCKING recvfrom() that returns one frame or null. The filter is attached
// before bind() gives the socket its protocol, so no frame is queued unfiltered.
// The caller polls receive() from a timer: no libuv handle here, so the synchronous env cleanup
// hook can still close the fd (a uv_poll handle would need the async close dance of
// vrrp_socket.cc; a preflight listening for a second does not need wake-ups faster than a timer).
#include "packet_socket.h"

#include <arpa/inet.h>
#include <linux/filter.h>

#include <net/if.h>
#include <netpacket/packet.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common.h"
#include "errors.h"

namespace ballast {

namespace {
constexpr size_t kMinFrame = 14;         // destination, source, EtherType
constexpr size_t kMaxFrame = 1518;       // 1500-byte MTU + Ethernet header + one 802.1Q tag, no FCS
constexpr size_t kReceiveBuffer = 2048;  // a whole frame of a 1500-byte MTU; longer ones are cut
constexpr size_t kMaxFilter = 256;       // instructions; BPF_MAXINSNS is 4096, ours are ~10
}  // namespace

Napi::Function PacketSocket::Define(Napi::Env env) {
  return DefineClass(env, "PacketSocket",
                     {
                         InstanceMethod<&PacketSocket::Send>("send"),
                         InstanceMethod<&PacketSocket::Receive>("receive"),
                         InstanceMethod<&PacketSocket::Close>("close"),
                         InstanceAccessor<&PacketSocket::GetIfindex>("ifindex"),
                         InstanceAccessor<&PacketSocket::GetHardwareAddress>("hardwareAddress"),
                     });
}

PacketSocket::PacketSocket(const Napi::CallbackInfo& info) : Napi::ObjectWrap<PacketSocket>(info) {
  Napi::Env env = info.Env();
  ifname_ = InterfaceName(info, 0);
  // new PacketSocket(ifname[, protocol[, filter]]): protocol is an EtherType in host order
  // (0: receive nothing), filter a Buffer of struct sock_filter (8 bytes each)
  uint32_t protocol = 0;
  if (info.Length() > 1 && !info[1].IsUndefined()) {
    if (!info[1].IsNumber()) ThrowTypeError(env, "protocol must be a number");
    protocol = info[1].As<Napi::Number>().Uint32Value();
    if (protocol > 0xffff) ThrowTypeError(env, "protocol must be an EtherType 0..65535");
  }
  std::vector<struct sock_filter> filter;
  if (info.Length() > 2 && !info[2].IsUndefined()) {
    if (!info[2].IsBuffer()) ThrowTypeError(env, "filter must be a Buffer");
    Napi::Buffer<uint8_t> program = info[2].As<Napi::Buffer<uint8_t>>();
    const size_t count = program.Length() / sizeof(struct sock_filter);
    if (program.Length() % sizeof(struct sock_filter) != 0 || count == 0 || count > kMaxFilter) {
      ThrowTypeError(env, "filter must hold 1 to 256 8-byte instructions");
    }
    filter.resize(count);
    std::memcpy(filter.data(), program.Data(), program.Length());
  }

  // protocol 0 until bind: no packet type is delivered to this socket (man 7 packet)
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

  if (!filter.empty()) {
    struct sock_fprog fprog;
    fprog.len = static_cast<unsigned short>(filter.size());
    fprog.filter = filter.data();
    SetOption(env, fd.get(), SOL_SOCKET, SO_ATTACH_FILTER, &fprog, sizeof fprog, "setsockopt(SO_ATTACH_FILTER)",
              ifname_);
  }

  struct sockaddr_ll address;
  std::memset(&address, 0, sizeof address);
  address.sll_family = AF_PACKET;
  address.sll_protocol = htons(static_cast<uint16_t>(protocol));
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

PacketSocket::~PacketSocket() {
  CloseFd();
}

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
    ThrowTypeError(env, "frame must be 14 to 1518 bytes long, got " + std::to_string(frame.Length()));
  }
  if (fd_ < 0) ThrowSystemError(env, EBADF, "send", ifname_);
  ssize_t n;
  do {
    n = ::send(fd_, frame.Data(), frame.Length(), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) ThrowSystemError(env, errno, "send", ifname_);
  return env.Undefined();
}

// One frame if one is queued, else null (EAGAIN): { frame, outgoing }. `outgoing` is true for a
// frame this host sent (PACKET_OUTGOING: a packet socket also sees the host's own transmissions).
Napi::Value PacketSocket::Receive(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (fd_ < 0) ThrowSystemError(env, EBADF, "recvfrom", ifname_);
  uint8_t buffer[kReceiveBuffer];
  struct sockaddr_ll from;
  socklen_t fromLength = sizeof from;
  ssize_t n;
  do {
    fromLength = sizeof from;
    n = ::recvfrom(fd_, buffer, sizeof buffer, 0, reinterpret_cast<sockaddr*>(&from), &fromLength);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return env.Null();
    ThrowSystemError(env, errno, "recvfrom", ifname_);
  }
  Napi::Object result = Napi::Object::New(env);
  result.Set("frame", Napi::Buffer<uint8_t>::Copy(env, buffer, static_cast<size_t>(n)));
  result.Set("outgoing", Napi::Boolean::New(env, from.sll_pkttype == PACKET_OUTGOING));
  return result;
}

Napi::Value PacketSocket::GetIfindex(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), ifindex_);
}

Napi::Value PacketSocket::GetHardwareAddress(const Napi::CallbackInfo& info) {
  return Napi::Buffer<uint8_t>::Copy(info.Env(), hardwareAddress_, sizeof hardwareAddress_);
}

}  // namespace ballast
