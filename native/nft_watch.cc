// nftables change events: a NETLINK_NETFILTER socket (libmnl) bound to the multicast group
// NFNLGRP_NFTABLES. The kernel sends one notification per object a committed transaction
// touched (NFT_MSG_NEWTABLE, NFT_MSG_DELCHAIN, NFT_MSG_NEWRULE, …: include/uapi/linux/netfilter/
// nf_tables.h), then NFT_MSG_NEWGEN with the ruleset's new generation id (NFTA_GEN_ID). Every
// object message has the table's name as its attribute 1 (NFTA_TABLE_NAME, NFTA_CHAIN_TABLE,
// NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE, NFTA_OBJ_TABLE,
// NFTA_FLOWTABLE_TABLE all equal 1) and the family in the nfgenmsg header.
//
// Netlink sockets belong to the network namespace they were created in, so only that
// namespace's changes arrive. Subscribing needs CAP_NET_ADMIN (nfnetlink does not allow
// unprivileged receivers). A receive queue that overflows makes recv fail with ENOBUFS: those
// events are lost, which is reported as `lost` so that the caller looks at the ruleset itself.
//
// Cost: nothing runs while nothing changes (a poll handle on the loop, no timer). On a change
// the wake-up drains at most kMaxPerWakeup datagrams and makes ONE call into JS naming the
// tables touched; a longer burst (a big `nft flush ruleset`) continues on the next loop turn.
//
// Lifetime: as native/vrrp_socket.cc explains, the uv handle lives in a struct that outlives
// the JS object until uv_close completes, and an async cleanup hook closes it at environment
// teardown.
#include "nft_watch.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "errors.h"

namespace ballast {

namespace {

constexpr int kMaxPerWakeup = 256;        // datagrams read before yielding to the loop
constexpr size_t kReceiveBuffer = 65536;  // any netlink datagram the kernel builds fits
constexpr int kQueueBytes = 1 << 20;      // SO_RCVBUF(FORCE): room for a large flush
constexpr uint16_t kTableAttribute = 1;   // see the file comment
const char* const kSubject = "nftables events";

// the attributes after the nfgenmsg header (mnl_attr_for_each, whose void* casts C++ refuses)
const struct nlattr* FirstAttribute(const struct nlmsghdr* nlh) {
  return static_cast<const struct nlattr*>(mnl_nlmsg_get_payload_offset(nlh, sizeof(struct nfgenmsg)));
}

bool AttributeOk(const struct nlmsghdr* nlh, const struct nlattr* attr) {
  const char* tail = static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh));
  return mnl_attr_ok(attr, static_cast<int>(tail - reinterpret_cast<const char*>(attr)));
}

const char* FamilyName(uint8_t family) {
  switch (family) {
    case NFPROTO_INET:
      return "inet";
    case NFPROTO_IPV4:
      return "ip";
    case NFPROTO_ARP:
      return "arp";
    case NFPROTO_NETDEV:
      return "netdev";
    case NFPROTO_BRIDGE:
      return "bridge";
    case NFPROTO_IPV6:
      return "ip6";
    default:
      return nullptr;
  }
}

}  // namespace

struct NftWatch::Loop {
  uv_poll_t poll;
  struct mnl_socket* nl = nullptr;
  bool closing = false;
  NftWatch* owner = nullptr;  // cleared by the owner's destructor
  napi_async_cleanup_hook_handle hook = nullptr;
};

Napi::Function NftWatch::Define(Napi::Env env) {
  return DefineClass(env, "NftWatch",
                     {
                         InstanceMethod<&NftWatch::Close>("close"),
                         InstanceMethod<&NftWatch::Stats>("stats"),
                     });
}

NftWatch::NftWatch(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NftWatch>(info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsFunction()) ThrowTypeError(env, "onChange must be a function");
  if (info.Length() < 2 || !info[1].IsBoolean()) ThrowTypeError(env, "keepAlive must be a boolean");
  const bool keepAlive = info[1].As<Napi::Boolean>().Value();

  struct mnl_socket* nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (nl == nullptr) ThrowSystemError(env, errno, "socket(AF_NETLINK, NETLINK_NETFILTER)", kSubject);
  const int fd = mnl_socket_get_fd(nl);
  // a bigger queue than the default ~200 KiB: FORCE passes rmem_max with CAP_NET_ADMIN; when
  // it is refused the plain option (capped at rmem_max) is the best there is
  int bytes = kQueueBytes;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) < 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
  if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
    const int err = errno;
    mnl_socket_close(nl);
    ThrowSystemError(env, err, "bind(AF_NETLINK)", kSubject);
  }
  int group = NFNLGRP_NFTABLES;
  if (mnl_socket_setsockopt(nl, NETLINK_ADD_MEMBERSHIP, &group, sizeof group) < 0) {
    const int err = errno;
    mnl_socket_close(nl);
    ThrowSystemError(env, err, "setsockopt(NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES)", kSubject);
  }

  uv_loop_t* uv = nullptr;
  if (napi_get_uv_event_loop(env, &uv) != napi_ok || uv == nullptr) {
    mnl_socket_close(nl);
    throw Napi::Error::New(env, "napi_get_uv_event_loop failed");
  }
  Loop* loop = new Loop();
  int rc = uv_poll_init(uv, &loop->poll, fd);
  if (rc < 0) {
    mnl_socket_close(nl);
    delete loop;  // an uninitialised handle needs no uv_close
    ThrowSystemError(env, -rc, "uv_poll_init", kSubject);
  }
  loop->poll.data = loop;
  loop->nl = nl;
  rc = uv_poll_start(&loop->poll, UV_READABLE, OnPoll);
  if (rc < 0) {
    Shut(loop);
    ThrowSystemError(env, -rc, "uv_poll_start", kSubject);
  }
  if (napi_add_async_cleanup_hook(env, OnEnvTeardown, loop, &loop->hook) != napi_ok) {
    Shut(loop);
    throw Napi::Error::New(env, "napi_add_async_cleanup_hook failed");
  }
  // keepAlive false: like an unref'd node handle, the watch alone does not keep the loop running
  if (!keepAlive) uv_unref(reinterpret_cast<uv_handle_t*>(&loop->poll));
  loop->owner = this;
  loop_ = loop;
  buffer_.resize(kReceiveBuffer);
  onChange_ = Napi::Persistent(info[0].As<Napi::Function>());
  // reachable from the loop while open: its callback must not be collected
  Napi::ObjectWrap<NftWatch>::Ref();
}

NftWatch::~NftWatch() {
  if (loop_ != nullptr) {
    loop_->owner = nullptr;
    Shut(loop_);
    loop_ = nullptr;
  }
}

bool NftWatch::Open() const {
  return loop_ != nullptr && !loop_->closing;
}

// stops polling, closes the socket, starts closing the handle; OnClosed frees the struct
void NftWatch::Shut(Loop* loop) {
  if (loop->closing) return;
  loop->closing = true;
  uv_poll_stop(&loop->poll);
  uv_close(reinterpret_cast<uv_handle_t*>(&loop->poll), OnClosed);
  // no longer watched after uv_close: closing the fd cannot confuse the loop
  mnl_socket_close(loop->nl);
  loop->nl = nullptr;
}

void NftWatch::OnClosed(uv_handle_t* handle) {
  Loop* loop = static_cast<Loop*>(handle->data);
  if (loop->owner != nullptr) loop->owner->loop_ = nullptr;
  if (loop->hook != nullptr) napi_remove_async_cleanup_hook(loop->hook);
  delete loop;
}

void NftWatch::OnEnvTeardown(napi_async_cleanup_hook_handle /*handle*/, void* arg) {
  Shut(static_cast<Loop*>(arg));
}

Napi::Value NftWatch::Close(const Napi::CallbackInfo& info) {
  if (Open()) {
    Shut(loop_);
    Napi::ObjectWrap<NftWatch>::Unref();
  }
  return info.Env().Undefined();
}

Napi::Value NftWatch::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object stats = Napi::Object::New(env);
  stats.Set("messages", Napi::Number::New(env, messages_));
  stats.Set("wakeups", Napi::Number::New(env, wakeups_));
  stats.Set("overruns", Napi::Number::New(env, overruns_));
  return stats;
}

void NftWatch::OnPoll(uv_poll_t* handle, int status, int /*events*/) {
  Loop* loop = static_cast<Loop*>(handle->data);
  if (loop->closing || loop->owner == nullptr) return;
  try {
    loop->owner->OnReadable(status);
  } catch (...) {
    // nothing may unwind into libuv
  }
}

void NftWatch::OnReadable(int status) {
  wakeups_ += 1;
  // a poll error: say "lost" so that the caller looks for itself
  if (status < 0) lost_ = true;
  for (int i = 0; status >= 0 && i < kMaxPerWakeup && Open(); ++i) {
    const ssize_t n = mnl_socket_recvfrom(loop_->nl, buffer_.data(), buffer_.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {  // dropped events; the socket goes on working
        lost_ = true;
        overruns_ += 1;
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) lost_ = true;
      break;
    }
    NoteMessage(buffer_.data(), static_cast<size_t>(n));
  }
  if (tables_.empty() && !lost_) return;  // only generation notices, or nothing
  napi_env env = Env();
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  Report(env);
  napi_close_handle_scope(env, scope);
}

// one datagram: several netlink messages; each object message adds its table
void NftWatch::NoteMessage(const uint8_t* data, size_t length) {
  const struct nlmsghdr* nlh = reinterpret_cast<const struct nlmsghdr*>(data);
  int remaining = static_cast<int>(length);
  for (; mnl_nlmsg_ok(nlh, remaining); nlh = mnl_nlmsg_next(nlh, &remaining)) {
    if (NFNL_SUBSYS_ID(nlh->nlmsg_type) != NFNL_SUBSYS_NFTABLES) continue;
    if (nlh->nlmsg_len < MNL_NLMSG_HDRLEN + sizeof(struct nfgenmsg)) continue;
    messages_ += 1;
    const uint16_t message = NFNL_MSG_TYPE(nlh->nlmsg_type);
    const struct nlattr* attr;
    if (message == NFT_MSG_NEWGEN) {
      for (attr = FirstAttribute(nlh); AttributeOk(nlh, attr); attr = mnl_attr_next(attr)) {
        if (mnl_attr_get_type(attr) == NFTA_GEN_ID && mnl_attr_validate(attr, MNL_TYPE_U32) == 0) {
          generation_ = ntohl(mnl_attr_get_u32(attr));
        }
      }
      continue;
    }
    const struct nfgenmsg* header = static_cast<const struct nfgenmsg*>(mnl_nlmsg_get_payload(nlh));
    const char* family = FamilyName(header->nfgen_family);
    if (family == nullptr) continue;
    for (attr = FirstAttribute(nlh); AttributeOk(nlh, attr); attr = mnl_attr_next(attr)) {
      if (mnl_attr_get_type(attr) != kTableAttribute) continue;
      if (mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) != 0) break;
      std::string key = std::string(family) + " " + mnl_attr_get_str(attr);
      bool seen = false;
      for (const std::string& t : tables_) seen = seen || t == key;
      if (!seen) tables_.push_back(std::move(key));
      break;
    }
  }
}

// onChange({ tables, generation, lost }) with plain napi calls (no JS frame below: nothing may
// throw), then the gathered state is cleared
void NftWatch::Report(napi_env env) {
  std::vector<std::string> tables;
  tables.swap(tables_);
  const bool lost = lost_;
  lost_ = false;
  napi_value self = nullptr;
  napi_ref self_ref = *static_cast<Napi::Reference<Napi::Object>*>(this);
  napi_value batch, list, generation, dropped, callback;
  if (napi_get_reference_value(env, self_ref, &self) != napi_ok || self == nullptr ||
      napi_create_object(env, &batch) != napi_ok ||
      napi_create_array_with_length(env, tables.size(), &list) != napi_ok ||
      napi_create_double(env, static_cast<double>(generation_), &generation) != napi_ok ||
      napi_get_boolean(env, lost, &dropped) != napi_ok) {
    return;
  }
  for (size_t i = 0; i < tables.size(); ++i) {
    napi_value name;
    if (napi_create_string_utf8(env, tables[i].data(), tables[i].size(), &name) != napi_ok ||
        napi_set_element(env, list, static_cast<uint32_t>(i), name) != napi_ok) {
      return;
    }
  }
  if (napi_set_named_property(env, batch, "tables", list) != napi_ok ||
      napi_set_named_property(env, batch, "generation", generation) != napi_ok ||
      napi_set_named_property(env, batch, "lost", dropped) != napi_ok ||
      napi_get_reference_value(env, onChange_, &callback) != napi_ok || callback == nullptr) {
    return;
  }
  napi_value argv[] = {batch};
  CallFromLoop(env, self, callback, 1, argv);
}

}  // namespace ballast
