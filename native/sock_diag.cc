// sock_diag(7) for TCP: one SOCK_DIAG_BY_FAMILY dump (inet_diag_req_v2, NLM_F_DUMP), matched
// here in user space, then one SOCK_DESTROY request per match, each acknowledged. Sources:
// sock_diag(7), include/uapi/linux/inet_diag.h, net/ipv4/inet_diag.c (inet_diag_cmd_exact looks
// the socket up by the 4-tuple + interface and checks the cookie, so a destroy never hits a
// different socket that reused the tuple).
//
// Synchronous, bounded: SO_RCVTIMEO of 2 s on every receive, at most kMaxMessages dump entries.
#include "sock_diag.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "common.h"
#include "errors.h"
#include "sys_error.h"

namespace ballast {

namespace {

constexpr const char* kSubject = "NETLINK_SOCK_DIAG";
constexpr size_t kMaxMessages = 1 << 20;  // sockets in one dump; far beyond a node's
constexpr int kMaxReceives = 1 << 16;

// every state with a peer, except TIME_WAIT / SYN_RECV (not full sockets) and LISTEN / CLOSE
constexpr uint32_t kStates = (1u << TCP_ESTABLISHED) | (1u << TCP_SYN_SENT) | (1u << TCP_FIN_WAIT1) |
                             (1u << TCP_FIN_WAIT2) | (1u << TCP_CLOSE_WAIT) | (1u << TCP_LAST_ACK) |
                             (1u << TCP_CLOSING);

struct Match {
  bool set = false;
  uint32_t addr[4] = {0, 0, 0, 0};  // network order
  uint16_t port = 0;                // network order; 0 = any
};

struct Filter {
  int family = AF_INET;
  Match dst;
  Match src;
  bool byCookie = false;
  std::unordered_set<uint64_t> cookies;
};

Match ParseMatch(Napi::Env env, const Napi::Value& v, int family, const char* name) {
  Match m;
  if (v.IsUndefined()) return m;
  if (!v.IsObject()) ThrowTypeError(env, std::string(name) + " must be an object { address, port? }");
  Napi::Object o = v.As<Napi::Object>();
  Napi::Value a = o.Get("address");
  if (!a.IsString()) ThrowTypeError(env, std::string(name) + ".address must be a string");
  std::string text = a.As<Napi::String>().Utf8Value();
  if (::inet_pton(family, text.c_str(), m.addr) != 1) {
    ThrowTypeError(env, std::string(name) + ".address must be an IPv" + (family == AF_INET ? "4" : "6") +
                            " address, got \"" + text + "\"");
  }
  Napi::Value p = o.Get("port");
  if (!p.IsUndefined()) {
    if (!p.IsNumber()) ThrowTypeError(env, std::string(name) + ".port must be a number");
    double port = p.As<Napi::Number>().DoubleValue();
    if (!(port >= 1 && port <= 65535) || port != static_cast<double>(static_cast<int>(port))) {
      ThrowTypeError(env, std::string(name) + ".port must be an integer 1..65535");
    }
    m.port = htons(static_cast<uint16_t>(port));
  }
  m.set = true;
  return m;
}

Filter ParseFilter(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsObject()) ThrowTypeError(env, "filter must be an object");
  Napi::Object o = info[0].As<Napi::Object>();
  Filter f;
  Napi::Value fam = o.Get("family");
  if (!fam.IsNumber()) ThrowTypeError(env, "filter.family must be 4 or 6");
  int family = fam.As<Napi::Number>().Int32Value();
  if (family != 4 && family != 6) ThrowTypeError(env, "filter.family must be 4 or 6");
  f.family = family == 4 ? AF_INET : AF_INET6;
  f.dst = ParseMatch(env, o.Get("dst"), f.family, "filter.dst");
  f.src = ParseMatch(env, o.Get("src"), f.family, "filter.src");
  Napi::Value cookies = o.Get("cookies");
  if (!cookies.IsUndefined()) {
    if (!cookies.IsArray()) ThrowTypeError(env, "filter.cookies must be an array of bigint");
    Napi::Array list = cookies.As<Napi::Array>();
    f.byCookie = true;
    for (uint32_t i = 0; i < list.Length(); i++) {
      Napi::Value c = list.Get(i);
      if (!c.IsBigInt()) ThrowTypeError(env, "filter.cookies must be an array of bigint");
      bool lossless = false;
      f.cookies.insert(c.As<Napi::BigInt>().Uint64Value(&lossless));
    }
  }
  return f;
}

uint64_t CookieOf(const inet_diag_sockid& id) {
  // sock_diag_save_cookie: [0] low 32 bits, [1] high 32 bits
  return static_cast<uint64_t>(id.idiag_cookie[0]) | (static_cast<uint64_t>(id.idiag_cookie[1]) << 32);
}

bool Matches(const Match& m, const uint32_t* addr, uint16_t port, int family) {
  if (!m.set) return true;
  size_t len = family == AF_INET ? 4 : 16;
  if (std::memcmp(m.addr, addr, len) != 0) return false;
  return m.port == 0 || m.port == port;
}

bool Matches(const Filter& f, const inet_diag_msg& msg) {
  if (!Matches(f.dst, msg.id.idiag_dst, msg.id.idiag_dport, f.family)) return false;
  if (!Matches(f.src, msg.id.idiag_src, msg.id.idiag_sport, f.family)) return false;
  return !f.byCookie || f.cookies.count(CookieOf(msg.id)) != 0;
}

int OpenDiag(Napi::Env env) {
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) ThrowSystemErrorHint(env, errno, "socket(AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG)", kSubject, "");
  struct timeval tv = {2, 0};
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) {
    int e = errno;
    ::close(fd);
    ThrowSystemErrorHint(env, e, "setsockopt(SO_RCVTIMEO)", kSubject, "");
  }
  return fd;
}

struct Request {
  nlmsghdr header;
  inet_diag_req_v2 body;
};

void SendRequest(Napi::Env env, int fd, const Request& request, const char* syscall) {
  sockaddr_nl kernel;
  std::memset(&kernel, 0, sizeof kernel);
  kernel.nl_family = AF_NETLINK;
  ssize_t n;
  do {
    n = ::sendto(fd, &request, sizeof request, 0, reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel);
  } while (n < 0 && errno == EINTR);
  if (n < 0) ThrowSystemErrorHint(env, errno, syscall, kSubject, "");
}

ssize_t Receive(Napi::Env env, int fd, std::vector<char>& buffer) {
  ssize_t n;
  do {
    n = ::recv(fd, buffer.data(), buffer.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    int e = errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
    ThrowSystemErrorHint(env, e, "recv", kSubject, e == ETIMEDOUT ? "no answer from the kernel within 2 s" : "");
  }
  return n;
}

// the dump, filtered
std::vector<inet_diag_msg> Dump(Napi::Env env, int fd, const Filter& f) {
  Request request;
  std::memset(&request, 0, sizeof request);
  request.header.nlmsg_len = sizeof request;
  request.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  request.header.nlmsg_seq = 1;
  request.body.sdiag_family = static_cast<uint8_t>(f.family);
  request.body.sdiag_protocol = IPPROTO_TCP;
  request.body.idiag_states = kStates;
  SendRequest(env, fd, request, "sendto(SOCK_DIAG_BY_FAMILY)");

  std::vector<inet_diag_msg> out;
  std::vector<char> buffer(64 * 1024);
  size_t seen = 0;
  for (int r = 0; r < kMaxReceives; r++) {
    ssize_t n = Receive(env, fd, buffer);
    size_t left = static_cast<size_t>(n);
    for (nlmsghdr* h = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return out;
      if (h->nlmsg_type == NLMSG_ERROR) {
        const nlmsgerr* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        ThrowSystemErrorHint(env, -e->error, "SOCK_DIAG_BY_FAMILY", kSubject, "");
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
      if (++seen > kMaxMessages) {
        ThrowSystemErrorHint(env, E2BIG, "SOCK_DIAG_BY_FAMILY", kSubject, "more sockets than one dump may walk");
      }
      const inet_diag_msg* msg = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (Matches(f, *msg)) out.push_back(*msg);
    }
  }
  ThrowSystemErrorHint(env, E2BIG, "SOCK_DIAG_BY_FAMILY", kSubject, "the dump did not end");
}

// one SOCK_DESTROY; true when destroyed, false when the socket was already gone
bool Destroy(Napi::Env env, int fd, const inet_diag_msg& msg, uint32_t seq) {
  Request request;
  std::memset(&request, 0, sizeof request);
  request.header.nlmsg_len = sizeof request;
  request.header.nlmsg_type = SOCK_DESTROY;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  request.header.nlmsg_seq = seq;
  request.body.sdiag_family = msg.idiag_family;
  request.body.sdiag_protocol = IPPROTO_TCP;
  request.body.idiag_states = ~0u;
  request.body.id = msg.id;  // the 4-tuple, the interface and the cookie
  SendRequest(env, fd, request, "sendto(SOCK_DESTROY)");
  std::vector<char> buffer(8192);
  for (int r = 0; r < 16; r++) {
    ssize_t n = Receive(env, fd, buffer);
    size_t left = static_cast<size_t>(n);
    for (nlmsghdr* h = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq != seq || h->nlmsg_type != NLMSG_ERROR) continue;
      int err = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
      if (err == 0) return true;
      if (err == ENOENT) return false;
      ThrowSystemErrorHint(env, err, "SOCK_DESTROY", kSubject,
                           err == EOPNOTSUPP ? "this kernel lacks CONFIG_INET_DIAG_DESTROY"
                           : err == EPERM    ? "destroying sockets needs CAP_NET_ADMIN"
                                             : "");
    }
  }
  ThrowSystemErrorHint(env, ETIMEDOUT, "SOCK_DESTROY", kSubject, "no acknowledgement");
}

Napi::Object AddrToJs(Napi::Env env, int family, const uint32_t* addr, uint16_t port) {
  char text[INET6_ADDRSTRLEN] = "";
  ::inet_ntop(family, addr, text, sizeof text);
  Napi::Object o = Napi::Object::New(env);
  o.Set("address", Napi::String::New(env, text));
  o.Set("port", Napi::Number::New(env, ntohs(port)));
  return o;
}

}  // namespace

Napi::Value ListSockets(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Filter f = ParseFilter(info);
  UniqueFd fd(OpenDiag(env));
  std::vector<inet_diag_msg> found = Dump(env, fd.get(), f);
  Napi::Array out = Napi::Array::New(env, found.size());
  for (uint32_t i = 0; i < found.size(); i++) {
    const inet_diag_msg& m = found[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("cookie", Napi::BigInt::New(env, CookieOf(m.id)));
    o.Set("state", Napi::Number::New(env, m.idiag_state));
    o.Set("src", AddrToJs(env, m.idiag_family, m.id.idiag_src, m.id.idiag_sport));
    o.Set("dst", AddrToJs(env, m.idiag_family, m.id.idiag_dst, m.id.idiag_dport));
    o.Set("ifindex", Napi::Number::New(env, m.id.idiag_if));
    o.Set("inode", Napi::Number::New(env, m.idiag_inode));
    out.Set(i, o);
  }
  return out;
}

Napi::Value DestroySockets(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Filter f = ParseFilter(info);
  UniqueFd fd(OpenDiag(env));
  std::vector<inet_diag_msg> found = Dump(env, fd.get(), f);
  int destroyed = 0;
  uint32_t seq = 2;
  for (const inet_diag_msg& m : found) {
    if (Destroy(env, fd.get(), m, seq++)) destroyed++;
  }
  return Napi::Number::New(env, destroyed);
}

}  // namespace ballast
