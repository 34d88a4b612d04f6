// VRRP advertisements over a raw IP socket, protocol 112 (RFC 9568 §5.1).
//
// The kernel builds the IP header on send (no IP_HDRINCL); the TypeScript codec builds the
// VRRP header and, for IPv6, its checksum over the pseudo-header (IPV6_CHECKSUM stays off).
//
//   receive, IPv4 (man 7 raw): the datagram starts with the IP header
//     | ver|ihl | tos | total length | ... | ttl | proto | csum | source | destination | VRRP
//     the payload is [ihl*4, total length): whatever follows total length is not ours
//   receive, IPv6 (man 7 ipv6): the datagram is the VRRP packet alone; hop limit, destination
//     and ifindex come as ancillary data (IPV6_RECVHOPLIMIT, IPV6_RECVPKTINFO)
//
// Lifetime: the libuv handle lives in a Core that outlives the JS object until uv_close
// completes (uv_close is asynchronous). An async cleanup hook closes it when the environment
// (a worker, or the main thread at exit) is torn down, and node waits for the close callback
// before it closes the loop; a synchronous hook could only start the close.
#include "vrrp_socket.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>

#include "advert_pacer.h"
#include "common.h"
#include "errors.h"

namespace ballast {

namespace {

constexpr int kVrrpProtocol = 112;        // RFC 9568 §5.1.1.4 / §5.1.2.4 (IANA protocol number)
constexpr int kHopLimit = 255;            // RFC 9568 §5.1.1.3, §5.1.2.3: sent with TTL/hop limit 255
constexpr int kTrafficClass = 0xc0;       // DSCP CS6 (network control), RFC 4594
constexpr size_t kMaxPayload = 1500;      // the same limit the TypeScript wrapper checks
constexpr int kMaxPerWakeup = 64;         // bounded drain: other handles on the loop get their turn
constexpr size_t kReceiveBuffer = 65536;  // any IP datagram fits, so nothing is truncated

const char* const kGroup4 = "224.0.0.18";  // RFC 9568 §5.1.1.2
const char* const kGroup6 = "ff02::12";    // RFC 9568 §5.1.2.2

}  // namespace

struct VrrpSocket::Core {
  uv_poll_t poll;
  int fd = -1;
  // created with the fd, stopped (its thread joined) before the fd closes
  std::unique_ptr<AdvertPacer> pacer;
  bool closing = false;
  VrrpSocket* wrap = nullptr;  // cleared by the wrap's destructor
  napi_async_cleanup_hook_handle hook = nullptr;
};

Napi::Function VrrpSocket::Define(Napi::Env env) {
  return DefineClass(env, "VrrpSocket",
                     {
                         InstanceMethod<&VrrpSocket::JoinGroup>("joinGroup"),
                         InstanceMethod<&VrrpSocket::LeaveGroup>("leaveGroup"),
                         InstanceMethod<&VrrpSocket::Send>("send"),
                         InstanceMethod<&VrrpSocket::Stats>("stats"),
                         InstanceMethod<&VrrpSocket::RefLoop>("ref"),
                         InstanceMethod<&VrrpSocket::UnrefLoop>("unref"),
                         InstanceMethod<&VrrpSocket::Close>("close"),
                         InstanceMethod<&VrrpSocket::ReceivePending>("receivePending"),
                         InstanceMethod<&VrrpSocket::StartPacer>("startPacer"),
                         InstanceMethod<&VrrpSocket::Pace>("pace"),
                         InstanceMethod<&VrrpSocket::SetAuth>("setAuth"),
                         InstanceMethod<&VrrpSocket::TakeSequence>("takeSequence"),
                         InstanceAccessor<&VrrpSocket::GetIfindex>("ifindex"),
                     });
}

VrrpSocket::VrrpSocket(const Napi::CallbackInfo& info) : Napi::ObjectWrap<VrrpSocket>(info) {
  Napi::Env env = info.Env();

  // --- arguments (the TypeScript wrapper has checked them already) --------------------------
  if (!info[0].IsNumber()) ThrowTypeError(env, "family must be 4 or 6");
  family_ = info[0].As<Napi::Number>().Int32Value();
  if (family_ != 4 && family_ != 6) ThrowTypeError(env, "family must be 4 or 6");
  ifname_ = InterfaceName(info, 1);
  if (!info[2].IsUndefined() && !info[2].IsNull()) {
    if (!info[2].IsString()) ThrowTypeError(env, "sourceAddress must be a string");
    const std::string text = info[2].As<Napi::String>().Utf8Value();
    if (family_ == 4 && inet_pton(AF_INET, text.c_str(), &route_.source4) != 1) {
      ThrowTypeError(env, "sourceAddress must be an IPv4 address, got \"" + text + "\"");
    }
    if (family_ == 6 &&
        (inet_pton(AF_INET6, text.c_str(), &route_.source6) != 1 || !IN6_IS_ADDR_LINKLOCAL(&route_.source6))) {
      ThrowTypeError(env, "sourceAddress must be an IPv6 link-local address, got \"" + text + "\"");
    }
    route_.hasSource = true;
  }
  route_.family = family_;
  if (!info[3].IsFunction()) ThrowTypeError(env, "onPacket must be a function");
  if (!info[4].IsFunction()) ThrowTypeError(env, "onError must be a function");

  // --- socket --------------------------------------------------------------------------------
  const int domain = family_ == 4 ? AF_INET : AF_INET6;
  UniqueFd fd(::socket(domain, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, kVrrpProtocol));
  if (fd.get() < 0) {
    ThrowSystemError(env, errno, family_ == 4 ? "socket(AF_INET, SOCK_RAW, 112)" : "socket(AF_INET6, SOCK_RAW, 112)",
                     ifname_);
  }
  const int s = fd.get();
  // receive only from, and send only through, this interface (man 7 socket)
  SetOption(env, s, SOL_SOCKET, SO_BINDTODEVICE, ifname_.data(), static_cast<socklen_t>(ifname_.size()),
            "setsockopt(SO_BINDTODEVICE)", ifname_);
  ifindex_ = InterfaceIndex(env, s, ifname_);
  route_.ifindex = ifindex_;

  if (family_ == 4) {
    // man 7 ip
    SetIntOption(env, s, IPPROTO_IP, IP_TTL, kHopLimit, "setsockopt(IP_TTL)", ifname_);
    SetIntOption(env, s, IPPROTO_IP, IP_MULTICAST_TTL, kHopLimit, "setsockopt(IP_MULTICAST_TTL)", ifname_);
    SetIntOption(env, s, IPPROTO_IP, IP_MULTICAST_LOOP, 0, "setsockopt(IP_MULTICAST_LOOP)", ifname_);
    struct ip_mreqn outgoing;
    std::memset(&outgoing, 0, sizeof outgoing);
    outgoing.imr_ifindex = static_cast<int>(ifindex_);
    SetOption(env, s, IPPROTO_IP, IP_MULTICAST_IF, &outgoing, sizeof outgoing, "setsockopt(IP_MULTICAST_IF)", ifname_);
    SetIntOption(env, s, IPPROTO_IP, IP_TOS, kTrafficClass, "setsockopt(IP_TOS)", ifname_);
    SetIntOption(env, s, IPPROTO_IP, IP_PKTINFO, 1, "setsockopt(IP_PKTINFO)", ifname_);
    // only groups this socket joined: a unicast-mode socket must not see 224.0.0.18 just
    // because another socket on the host joined it (the default, IP_MULTICAST_ALL = 1)
    SetIntOption(env, s, IPPROTO_IP, IP_MULTICAST_ALL, 0, "setsockopt(IP_MULTICAST_ALL)", ifname_);
  } else {
    // man 7 ipv6
    SetIntOption(env, s, IPPROTO_IPV6, IPV6_UNICAST_HOPS, kHopLimit, "setsockopt(IPV6_UNICAST_HOPS)", ifname_);
    SetIntOption(env, s, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, kHopLimit, "setsockopt(IPV6_MULTICAST_HOPS)", ifname_);
    SetIntOption(env, s, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, 0, "setsockopt(IPV6_MULTICAST_LOOP)", ifname_);
    SetIntOption(env, s, IPPROTO_IPV6, IPV6_MULTICAST_IF, static_cast<int>(ifindex_), "setsockopt(IPV6_MULTICAST_IF)",
                 ifname_);
    SetIntOption(env, s, IPPROTO_IPV6, IPV6_TCLASS, kTrafficClass, "setsockopt(IPV6_TCLASS)", ifname_);
    SetIntOption(env, s, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1, "setsockopt(IPV6_RECVPKTINFO)", ifname_);
    SetIntOption(env, s, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1, "setsockopt(IPV6_RECVHOPLIMIT)", ifname_);
  }

  // The source address is NOT bound: a raw socket bound to an address only receives datagrams
  // whose destination is that address (raw_v4_match in net/ipv4/raw.c), so an IPv4 socket bound
  // to its primary address never sees 224.0.0.18, and an IPv6 one bound to its link-local never
  // sees unicast sent to its global address. The source goes on each send as IP_PKTINFO /
  // IPV6_PKTINFO instead. bind() here only checks the address is local (EADDRNOTAVAIL if not;
  // for IPv6 also while it is tentative), then the socket is bound back to the wildcard.
  if (route_.hasSource) {
    if (family_ == 4) {
      struct sockaddr_in address;
      std::memset(&address, 0, sizeof address);
      address.sin_family = AF_INET;
      address.sin_addr = route_.source4;
      if (::bind(s, reinterpret_cast<sockaddr*>(&address), sizeof address) < 0) {
        ThrowSystemError(env, errno, "bind", ifname_);
      }
      address.sin_addr.s_addr = htonl(INADDR_ANY);
      if (::bind(s, reinterpret_cast<sockaddr*>(&address), sizeof address) < 0) {
        ThrowSystemError(env, errno, "bind", ifname_);
      }
    } else {
      struct sockaddr_in6 address;
      std::memset(&address, 0, sizeof address);
      address.sin6_family = AF_INET6;
      address.sin6_addr = route_.source6;
      address.sin6_scope_id = ifindex_;
      if (::bind(s, reinterpret_cast<sockaddr*>(&address), sizeof address) < 0) {
        ThrowSystemError(env, errno, "bind", ifname_);
      }
      address.sin6_addr = in6addr_any;
      address.sin6_scope_id = 0;
      if (::bind(s, reinterpret_cast<sockaddr*>(&address), sizeof address) < 0) {
        ThrowSystemError(env, errno, "bind", ifname_);
      }
    }
  }

  // --- libuv: poll the non-blocking fd on this environment's loop ----------------------------
  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || loop == nullptr) {
    throw Napi::Error::New(env, "napi_get_uv_event_loop failed");
  }
  Core* core = new Core();
  int rc = uv_poll_init(loop, &core->poll, s);
  if (rc < 0) {
    delete core;  // an uninitialised handle needs no uv_close
    ThrowSystemError(env, -rc, "uv_poll_init", ifname_);
  }
  core->poll.data = core;
  core->fd = fd.release();
  core->pacer = std::make_unique<AdvertPacer>(core->fd, route_);
  rc = uv_poll_start(&core->poll, UV_READABLE, OnPoll);
  if (rc < 0) {
    BeginClose(core);
    ThrowSystemError(env, -rc, "uv_poll_start", ifname_);
  }
  if (napi_add_async_cleanup_hook(env, OnEnvTeardown, core, &core->hook) != napi_ok) {
    BeginClose(core);
    throw Napi::Error::New(env, "napi_add_async_cleanup_hook failed");
  }
  core->wrap = this;
  core_ = core;

  buffer_.resize(kReceiveBuffer);
  onPacket_ = Napi::Persistent(info[3].As<Napi::Function>());
  onError_ = Napi::Persistent(info[4].As<Napi::Function>());
  // an open socket is reachable from the loop, like node's own handles: pin the JS object
  // until close() so its callbacks cannot be collected while packets can still arrive
  Napi::ObjectWrap<VrrpSocket>::Ref();
}

VrrpSocket::~VrrpSocket() {
  // reached at environment teardown (the cleanup hook has closed the handle by then), or after
  // close() once the object was collected; both leave nothing open, but be safe
  if (core_ != nullptr) {
    core_->wrap = nullptr;
    BeginClose(core_);
    core_ = nullptr;
  }
}

bool VrrpSocket::IsOpen() const {
  return core_ != nullptr && !core_->closing;
}

void VrrpSocket::ThrowClosed(Napi::Env env, const std::string& syscall) const {
  ThrowSystemError(env, EBADF, syscall, ifname_);
}

// Stops polling, closes the fd, and starts closing the handle; the Core is freed in OnClosed.
void VrrpSocket::BeginClose(Core* core) {
  if (core->closing) return;
  core->closing = true;
  // the pacer's thread sends on the fd: it ends before the fd closes
  if (core->pacer) core->pacer->Stop();
  uv_poll_stop(&core->poll);
  uv_close(reinterpret_cast<uv_handle_t*>(&core->poll), OnClosed);
  // after uv_close the fd is no longer watched, so closing it cannot confuse the loop
  ::close(core->fd);
  core->fd = -1;
}

void VrrpSocket::OnClosed(uv_handle_t* handle) {
  Core* core = static_cast<Core*>(handle->data);
  if (core->wrap != nullptr) core->wrap->core_ = nullptr;
  // also tells node an environment teardown waiting on this hook may go on
  if (core->hook != nullptr) napi_remove_async_cleanup_hook(core->hook);
  delete core;
}

void VrrpSocket::OnEnvTeardown(napi_async_cleanup_hook_handle /*handle*/, void* arg) {
  // no JS may run here: only libuv and the fd
  BeginClose(static_cast<Core*>(arg));
}

Napi::Value VrrpSocket::Close(const Napi::CallbackInfo& info) {
  if (IsOpen()) {
    BeginClose(core_);
    Napi::ObjectWrap<VrrpSocket>::Unref();
  }
  return info.Env().Undefined();
}

Napi::Value VrrpSocket::ReceivePending(const Napi::CallbackInfo& info) {
  // the same bounded drain as a readable poll event; the socket is non-blocking, so an empty
  // queue costs one recvmsg returning EAGAIN
  if (IsOpen()) Drain(0);
  return info.Env().Undefined();
}

Napi::Value VrrpSocket::RefLoop(const Napi::CallbackInfo& info) {
  if (IsOpen()) uv_ref(reinterpret_cast<uv_handle_t*>(&core_->poll));
  return info.Env().Undefined();
}

Napi::Value VrrpSocket::UnrefLoop(const Napi::CallbackInfo& info) {
  if (IsOpen()) uv_unref(reinterpret_cast<uv_handle_t*>(&core_->poll));
  return info.Env().Undefined();
}

Napi::Value VrrpSocket::GetIfindex(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), ifindex_);
}

Napi::Value VrrpSocket::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object stats = Napi::Object::New(env);
  stats.Set("received", Napi::Number::New(env, received_));
  stats.Set("malformedIpHeader", Napi::Number::New(env, malformed_));
  stats.Set("sent", Napi::Number::New(env, sent_));
  if (core_ != nullptr && core_->pacer) pacer_ = core_->pacer->Stats();
  Napi::Object pacer = Napi::Object::New(env);
  pacer.Set("sent", Napi::Number::New(env, static_cast<double>(pacer_.sent)));
  pacer.Set("sendErrors", Napi::Number::New(env, static_cast<double>(pacer_.sendErrors)));
  pacer.Set("lastErrno", Napi::Number::New(env, pacer_.lastErrno));
  pacer.Set("covers", Napi::Number::New(env, static_cast<double>(pacer_.covers)));
  pacer.Set("holds", Napi::Number::New(env, static_cast<double>(pacer_.holds)));
  pacer.Set("longestSilenceMs", Napi::Number::New(env, pacer_.longestSilenceMs));
  stats.Set("pacer", pacer);
  return stats;
}

Napi::Value VrrpSocket::JoinGroup(const Napi::CallbackInfo& info) {
  Membership(true);
  return info.Env().Undefined();
}

Napi::Value VrrpSocket::LeaveGroup(const Napi::CallbackInfo& info) {
  Membership(false);
  return info.Env().Undefined();
}

void VrrpSocket::Membership(bool join) {
  Napi::Env env = Env();
  if (family_ == 4) {
    const char* syscall = join ? "setsockopt(IP_ADD_MEMBERSHIP)" : "setsockopt(IP_DROP_MEMBERSHIP)";
    if (!IsOpen()) ThrowClosed(env, syscall);
    struct ip_mreqn request;
    std::memset(&request, 0, sizeof request);
    inet_pton(AF_INET, kGroup4, &request.imr_multiaddr);
    request.imr_ifindex = static_cast<int>(ifindex_);
    SetOption(env, core_->fd, IPPROTO_IP, join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, &request, sizeof request,
              syscall, ifname_);
  } else {
    const char* syscall = join ? "setsockopt(IPV6_JOIN_GROUP)" : "setsockopt(IPV6_LEAVE_GROUP)";
    if (!IsOpen()) ThrowClosed(env, syscall);
    struct ipv6_mreq request;
    std::memset(&request, 0, sizeof request);
    inet_pton(AF_INET6, kGroup6, &request.ipv6mr_multiaddr);
    request.ipv6mr_interface = ifindex_;
    SetOption(env, core_->fd, IPPROTO_IPV6, join ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP, &request, sizeof request,
              syscall, ifname_);
  }
}

Napi::Value VrrpSocket::Send(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsBuffer()) ThrowTypeError(env, "payload must be a Buffer");
  Napi::Buffer<uint8_t> payload = info[0].As<Napi::Buffer<uint8_t>>();
  if (payload.Length() == 0 || payload.Length() > kMaxPayload) {
    ThrowTypeError(env, "payload must be 1 to 1500 bytes long, got " + std::to_string(payload.Length()));
  }
  const VrrpDestination to = Destination(env, info[1]);
  if (!IsOpen()) ThrowClosed(env, "sendmsg");
  const int err = SendDatagram(core_->fd, route_, to, payload.Data(), payload.Length());
  // a failed send is still the engine at work: the pacer covers silence, not errors
  core_->pacer->NoteSend();
  if (err != 0) ThrowSystemError(env, err, "sendmsg", ifname_);
  sent_ += 1;
  return env.Undefined();
}

VrrpDestination VrrpSocket::Destination(Napi::Env env, const Napi::Value& value) const {
  if (!value.IsString()) ThrowTypeError(env, "destination must be a string");
  const std::string text = value.As<Napi::String>().Utf8Value();
  VrrpDestination to;
  if (!ParseDestination(route_, text, &to)) {
    ThrowTypeError(
        env, std::string("destination must be an IPv") + (family_ == 4 ? "4" : "6") + " address, got \"" + text + "\"");
  }
  return to;
}

Napi::Value VrrpSocket::StartPacer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber()) ThrowTypeError(env, "rtPriority must be a number");
  const int priority = info[0].As<Napi::Number>().Int32Value();
  if (priority < 0 || priority > 99) ThrowTypeError(env, "rtPriority must be 0..99");
  if (!IsOpen()) ThrowClosed(env, "pthread_create");
  int refused;
  try {
    refused = core_->pacer->Start(priority);
  } catch (const std::system_error& e) {
    ThrowSystemError(env, e.code().value(), "pthread_create", ifname_);
  }
  if (refused < 0) ThrowSystemError(env, EALREADY, "pthread_create", ifname_);
  return Napi::Number::New(env, refused);
}

Napi::Value VrrpSocket::Pace(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!IsOpen()) return env.Undefined();
  std::vector<PacedAdvert> adverts;
  if (!info[0].IsNull() && !info[0].IsUndefined()) {
    if (!info[0].IsArray()) ThrowTypeError(env, "adverts must be an array or null");
    Napi::Array list = info[0].As<Napi::Array>();
    for (uint32_t i = 0; i < list.Length(); i++) {
      Napi::Value item = list.Get(i);
      if (!item.IsArray() || item.As<Napi::Array>().Length() != 2) {
        ThrowTypeError(env, "each advert must be [message, destination]");
      }
      Napi::Array pair = item.As<Napi::Array>();
      Napi::Value message = pair.Get(0u);
      if (!message.IsBuffer()) ThrowTypeError(env, "an advert's message must be a Buffer");
      Napi::Buffer<uint8_t> bytes = message.As<Napi::Buffer<uint8_t>>();
      if (bytes.Length() == 0 || bytes.Length() > kMaxPayload)
        ThrowTypeError(env, "an advert's message must be 1 to 1500 bytes long");
      PacedAdvert a;
      a.message.assign(bytes.Data(), bytes.Data() + bytes.Length());
      a.to = Destination(env, pair.Get(1u));
      adverts.push_back(std::move(a));
    }
  }
  if (!info[1].IsNumber() || !info[2].IsNumber()) ThrowTypeError(env, "intervalMs and holdMs must be numbers");
  const double interval = info[1].As<Napi::Number>().DoubleValue();
  const double hold = info[2].As<Napi::Number>().DoubleValue();
  // Advertisement_Interval is 10 ms to 40.95 s (RFC 9568 §5.2.7, 12 bits of centiseconds); the
  // hold at most a day: bounded, so the nanoseconds fit and no wait is zero
  if (!(interval >= 1 && interval <= 1e7) || !(hold >= 1 && hold <= 8.64e7)) {
    ThrowTypeError(env, "intervalMs must be 1..1e7 and holdMs 1..8.64e7");
  }
  core_->pacer->Pace(std::move(adverts), static_cast<int64_t>(interval * 1e6), static_cast<int64_t>(hold * 1e6));
  return env.Undefined();
}

Napi::Value VrrpSocket::SetAuth(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsBuffer()) ThrowTypeError(env, "key must be a Buffer");
  if (!info[1].IsBigInt()) ThrowTypeError(env, "firstSequence must be a bigint");
  if (!route_.hasSource) ThrowTypeError(env, "signed adverts need the socket's sourceAddress");
  Napi::Buffer<uint8_t> key = info[0].As<Napi::Buffer<uint8_t>>();
  bool lossless = false;
  const uint64_t first = info[1].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) ThrowTypeError(env, "firstSequence must fit in 64 bits");
  if (!IsOpen()) ThrowClosed(env, "setAuth");
  core_->pacer->SetAuth(std::vector<uint8_t>(key.Data(), key.Data() + key.Length()), first);
  return env.Undefined();
}

Napi::Value VrrpSocket::TakeSequence(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!IsOpen()) ThrowClosed(env, "takeSequence");
  return Napi::BigInt::New(env, static_cast<uint64_t>(core_->pacer->TakeSequence()));
}

void VrrpSocket::OnPoll(uv_poll_t* handle, int status, int /*events*/) {
  Core* core = static_cast<Core*>(handle->data);
  if (core->closing || core->wrap == nullptr) return;
  try {
    core->wrap->Drain(status);
  } catch (...) {
    // nothing may unwind into libuv; Drain does not throw, this is the last guard
  }
}

void VrrpSocket::Drain(int status) {
  napi_env env = Env();
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  // a local handle keeps the object (and so `this`) alive even if a callback closes it
  napi_value self = nullptr;
  napi_ref self_ref = *static_cast<Napi::Reference<Napi::Object>*>(this);
  if (napi_get_reference_value(env, self_ref, &self) == napi_ok && self != nullptr) {
    if (status < 0) {
      EmitError(env, self, -status, "uv_poll");
    } else {
      for (int i = 0; i < kMaxPerWakeup && IsOpen(); ++i) {
        napi_handle_scope packet_scope;
        if (napi_open_handle_scope(env, &packet_scope) != napi_ok) break;
        bool again = false;
        const bool go_on = ReceiveOne(env, self, &again);
        napi_close_handle_scope(env, packet_scope);
        if (!go_on || !again) break;
      }
      // more may be pending: the poll is level-triggered, so the next loop turn comes back
    }
  }
  napi_close_handle_scope(env, scope);
}

bool VrrpSocket::ReceiveOne(napi_env env, napi_value self, bool* again) {
  struct sockaddr_in6 from;  // large enough for either family
  std::memset(&from, 0, sizeof from);
  struct iovec iov;
  iov.iov_base = buffer_.data();
  iov.iov_len = buffer_.size();
  alignas(struct cmsghdr) unsigned char control[CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(int)) + 64];
  struct msghdr message;
  std::memset(&message, 0, sizeof message);
  message.msg_name = &from;
  message.msg_namelen = sizeof from;
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;

  ssize_t n = ::recvmsg(core_->fd, &message, 0);
  if (n < 0) {
    if (errno == EINTR) {
      *again = true;
      return true;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    EmitError(env, self, errno, "recvmsg");
    return false;
  }
  *again = true;

  const uint8_t* data = buffer_.data();
  const size_t length = static_cast<size_t>(n);
  char source[INET6_ADDRSTRLEN] = "";
  char destination[INET6_ADDRSTRLEN] = "";
  unsigned ifindex = 0;

  if (family_ == 4) {
    // man 7 raw: IPv4 raw sockets receive the datagram with its IP header
    if ((message.msg_flags & MSG_TRUNC) != 0 || length < 20 || (data[0] >> 4) != 4) {
      malformed_ += 1;
      return true;
    }
    const size_t header_length = static_cast<size_t>(data[0] & 0x0f) * 4;
    const size_t total_length = (static_cast<size_t>(data[2]) << 8) | data[3];
    if (header_length < 20 || total_length < header_length || total_length > length) {
      malformed_ += 1;
      return true;
    }
    inet_ntop(AF_INET, data + 12, source, sizeof source);
    inet_ntop(AF_INET, data + 16, destination, sizeof destination);
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
        struct in_pktinfo packet_info;
        std::memcpy(&packet_info, CMSG_DATA(c), sizeof packet_info);
        ifindex = static_cast<unsigned>(packet_info.ipi_ifindex);
      }
    }
    received_ += 1;
    // the payload ends at total length: link-layer padding is not ours
    return Deliver(env, self, data + header_length, total_length - header_length, source, destination, data[8],
                   ifindex != 0 ? ifindex : ifindex_);
  }

  // man 7 ipv6: no header; hop limit and destination come as ancillary data
  int hop_limit = -1;
  if ((message.msg_flags & MSG_TRUNC) != 0) {
    malformed_ += 1;
    return true;
  }
  inet_ntop(AF_INET6, &from.sin6_addr, source, sizeof source);
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level != IPPROTO_IPV6) continue;
    if (c->cmsg_type == IPV6_HOPLIMIT) {
      std::memcpy(&hop_limit, CMSG_DATA(c), sizeof hop_limit);
    } else if (c->cmsg_type == IPV6_PKTINFO) {
      struct in6_pktinfo packet_info;
      std::memcpy(&packet_info, CMSG_DATA(c), sizeof packet_info);
      ifindex = packet_info.ipi6_ifindex;
      inet_ntop(AF_INET6, &packet_info.ipi6_addr, destination, sizeof destination);
    }
  }
  if (hop_limit < 0 || destination[0] == '\0') {
    malformed_ += 1;
    return true;
  }
  received_ += 1;
  return Deliver(env, self, data, length, source, destination, hop_limit, ifindex != 0 ? ifindex : ifindex_);
}

bool VrrpSocket::Deliver(napi_env env, napi_value self, const uint8_t* payload, size_t length, const char* source,
                         const char* destination, int ttl, unsigned ifindex) {
  napi_value packet, buffer, from, to, hops, index, callback;
  void* copy = nullptr;
  if (napi_create_object(env, &packet) != napi_ok ||
      napi_create_buffer_copy(env, length, payload, &copy, &buffer) != napi_ok ||
      napi_create_string_utf8(env, source, NAPI_AUTO_LENGTH, &from) != napi_ok ||
      napi_create_string_utf8(env, destination, NAPI_AUTO_LENGTH, &to) != napi_ok ||
      napi_create_int32(env, ttl, &hops) != napi_ok || napi_create_uint32(env, ifindex, &index) != napi_ok ||
      napi_set_named_property(env, packet, "payload", buffer) != napi_ok ||
      napi_set_named_property(env, packet, "source", from) != napi_ok ||
      napi_set_named_property(env, packet, "destination", to) != napi_ok ||
      napi_set_named_property(env, packet, "ttl", hops) != napi_ok ||
      napi_set_named_property(env, packet, "ifindex", index) != napi_ok ||
      napi_get_reference_value(env, onPacket_, &callback) != napi_ok || callback == nullptr) {
    return false;
  }
  napi_value argv[] = {packet};
  return CallFromLoop(env, self, callback, 1, argv);
}

void VrrpSocket::EmitError(napi_env env, napi_value self, int err, const char* syscall) {
  napi_value error, callback;
  if (!CreateSystemError(env, err, syscall, ifname_, &error)) return;
  if (napi_get_reference_value(env, onError_, &callback) != napi_ok || callback == nullptr) return;
  napi_value argv[] = {error};
  CallFromLoop(env, self, callback, 1, argv);
}

}  // namespace ballast
