// TCP probes through a raw socket (raw(7), IPPROTO_RAW: the caller writes the whole IP packet;
// IPv4 sets IP_HDRINCL by itself, and IPv6 too since Linux 4.5). Such a socket receives nothing,
// so no copy of the node's TCP traffic queues up on it, and any source address can be written,
// which is how a probe leaves from VIP:port.
//
// Two probes per client, sequence numbers 2^31 apart: a receive window is below 2^30 (RFC 7323
// §2.3), so at least one of the two lies outside it, and the client answers that one with an ACK
// (RFC 9293 §3.10.7.4; Linux tcp_validate_incoming → tcp_send_dupack, at most one per
// net.ipv4.tcp_invalid_ratelimit per socket: the second probe's answer is usually suppressed).
// The one that may fall inside the window carries no data and an acknowledgement number the
// client did not send, which it ignores or answers with a challenge ACK (RFC 5961 §5.2), which
// reveals the same numbers.
//
// The socket is opened on the calling thread, so it belongs to that thread's network namespace
// (the agent's); the packets are built and sent from a libuv worker thread, paced to
// packetsPerSecond, so that a burst takes no time from the event loop and cannot flood the
// link in one go. Each packet carries SO_MARK `mark`, which ballast's table matches to leave the
// probe untracked (src/dataplane/nftables.ts).
#include "tcp_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "errors.h"
#include "sys_error.h"

namespace ballast {

namespace {

constexpr uint32_t kMaxClients = 20000;  // per call: 40,000 packets
constexpr double kMinRate = 1000;        // packets per second: 20,000 clients within 40 s
constexpr double kMaxRate = 1000000;
constexpr size_t kBatch = 64;        // packets per sendmmsg
constexpr int kNoBufferRetries = 3;  // ENOBUFS (a full device queue): wait 1 ms, try again
constexpr uint16_t kWindow = 1024;

struct Client {
  uint8_t address[16] = {0};
  uint16_t port = 0;  // host order
};

struct Batch {
  int family = AF_INET;
  uint8_t source[16] = {0};
  uint16_t sourcePort = 0;  // host order
  uint32_t mark = 0;
  double rate = 0;
  std::vector<Client> clients;
};

uint32_t Sum16(const uint8_t* p, size_t n, uint32_t sum) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  if (n % 2 == 1) sum += static_cast<uint32_t>(p[n - 1] << 8);
  return sum;
}

uint16_t Fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum & 0xffff);
}

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

void Put32(uint8_t* p, uint32_t v) {
  Put16(p, static_cast<uint16_t>(v >> 16));
  Put16(p + 2, static_cast<uint16_t>(v));
}

std::string FamilyName(int family) {
  return family == AF_INET ? "IPv4" : "IPv6";
}

void ParseAddress(Napi::Env env, const Napi::Value& v, int family, const std::string& name, uint8_t* out) {
  if (!v.IsString()) ThrowTypeError(env, name + " must be a string");
  std::string text = v.As<Napi::String>().Utf8Value();
  if (::inet_pton(family, text.c_str(), out) != 1)
    ThrowTypeError(env, name + " must be an " + FamilyName(family) + " address, got \"" + text + "\"");
}

uint16_t ParsePort(Napi::Env env, const Napi::Value& v, const std::string& name) {
  double p = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  if (!(p >= 1 && p <= 65535) || p != static_cast<double>(static_cast<int>(p)))
    ThrowTypeError(env, name + " must be an integer 1..65535");
  return static_cast<uint16_t>(p);
}

uint32_t ParseU32(Napi::Env env, const Napi::Value& v, const std::string& name) {
  double n = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  if (!(n >= 0 && n <= 4294967295.0) || n != static_cast<double>(static_cast<uint32_t>(n)))
    ThrowTypeError(env, name + " must be an integer 0..4294967295");
  return static_cast<uint32_t>(n);
}

int ParseFamily(Napi::Env env, const Napi::Object& o, const std::string& name) {
  Napi::Value f = o.Get("family");
  int family = f.IsNumber() ? f.As<Napi::Number>().Int32Value() : 0;
  if (family != 4 && family != 6) ThrowTypeError(env, name + ".family must be 4 or 6");
  return family == 4 ? AF_INET : AF_INET6;
}

Batch ParseBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsObject()) ThrowTypeError(env, "batch must be an object");
  Napi::Object o = info[0].As<Napi::Object>();
  Batch b;
  b.family = ParseFamily(env, o, "batch");
  ParseAddress(env, o.Get("source"), b.family, "batch.source", b.source);
  b.sourcePort = ParsePort(env, o.Get("sourcePort"), "batch.sourcePort");
  b.mark = ParseU32(env, o.Get("mark"), "batch.mark");
  Napi::Value rate = o.Get("packetsPerSecond");
  b.rate = rate.IsNumber() ? rate.As<Napi::Number>().DoubleValue() : 0;
  if (!(b.rate >= kMinRate && b.rate <= kMaxRate))
    ThrowTypeError(env, "batch.packetsPerSecond must be from 1000 to 1000000");
  Napi::Value clients = o.Get("clients");
  if (!clients.IsArray()) ThrowTypeError(env, "batch.clients must be an array of { address, port }");
  Napi::Array list = clients.As<Napi::Array>();
  if (list.Length() > kMaxClients)
    ThrowTypeError(env, "batch.clients must hold at most " + std::to_string(kMaxClients) + " clients, got " +
                            std::to_string(list.Length()));
  b.clients.resize(list.Length());
  for (uint32_t i = 0; i < list.Length(); i++) {
    std::string at = "batch.clients[" + std::to_string(i) + "]";
    if (!list.Get(i).IsObject()) ThrowTypeError(env, at + " must be an object { address, port }");
    Napi::Object c = list.Get(i).As<Napi::Object>();
    ParseAddress(env, c.Get("address"), b.family, at + ".address", b.clients[i].address);
    b.clients[i].port = ParsePort(env, c.Get("port"), at + ".port");
  }
  return b;
}

const char* Hint(int err) {
  switch (err) {
    case EPERM:
      return "an output rule (nftables, iptables) dropped the probe";
    case ENETUNREACH:
    case EHOSTUNREACH:
      return "no route to the client";
    case EAGAIN:
      return "the socket's send buffer stayed full for 1 s";
    default:
      return "";
  }
}

void SleepUntil(const timespec& at) {
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) == EINTR) {
  }
}

timespec After(const timespec& start, double ns) {
  timespec t = start;
  auto whole = static_cast<long long>(ns);
  t.tv_sec += static_cast<time_t>(whole / 1000000000LL);
  t.tv_nsec += static_cast<long>(whole % 1000000000LL);
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

class ProbeWorker : public Napi::AsyncWorker {
 public:
  ProbeWorker(Napi::Env env, int fd, Batch batch)
      : Napi::AsyncWorker(env, "ballast:tcpProbes"),
        deferred_(Napi::Promise::Deferred::New(env)),
        fd_(fd),
        batch_(std::move(batch)) {}
  ~ProbeWorker() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Napi::Promise Promise() const { return deferred_.Promise(); }

  // the worker thread: no napi call here
  void Execute() override {
    const Batch& b = batch_;
    size_t n = b.clients.size() * 2;
    if (n == 0) return;
    uint32_t random[2] = {0, 0};
    if (::getrandom(random, sizeof random, 0) != sizeof random) {
      random[0] = static_cast<uint32_t>(::time(nullptr));
      random[1] = ~random[0];
    }
    std::vector<uint8_t> packets(n * kTcpProbeMax);
    std::vector<iovec> iov(n);
    std::vector<mmsghdr> msgs(n);
    std::vector<sockaddr_storage> to(b.clients.size());
    for (size_t i = 0; i < b.clients.size(); i++) {
      const Client& c = b.clients[i];
      std::memset(&to[i], 0, sizeof to[i]);
      socklen_t toLen;
      if (b.family == AF_INET) {
        auto* sin = reinterpret_cast<sockaddr_in*>(&to[i]);
        sin->sin_family = AF_INET;
        std::memcpy(&sin->sin_addr, c.address, 4);
        toLen = sizeof(sockaddr_in);
      } else {
        auto* sin6 = reinterpret_cast<sockaddr_in6*>(&to[i]);
        sin6->sin6_family = AF_INET6;
        std::memcpy(&sin6->sin6_addr, c.address, 16);
        toLen = sizeof(sockaddr_in6);
      }
      for (size_t k = 0; k < 2; k++) {
        size_t j = 2 * i + k;
        uint8_t* p = packets.data() + j * kTcpProbeMax;
        uint32_t half = k == 0 ? 0 : 0x80000000u;
        size_t len =
            BuildTcpProbe(p, b.family, b.source, b.sourcePort, c.address, c.port, random[0] + half, random[1] + half);
        iov[j] = {p, len};
        std::memset(&msgs[j], 0, sizeof msgs[j]);
        msgs[j].msg_hdr.msg_name = &to[i];
        msgs[j].msg_hdr.msg_namelen = toLen;
        msgs[j].msg_hdr.msg_iov = &iov[j];
        msgs[j].msg_hdr.msg_iovlen = 1;
      }
    }
    size_t batch = std::min<size_t>(kBatch, std::max<size_t>(1, static_cast<size_t>(b.rate / 1000)));
    timespec start;
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    size_t i = 0;
    int retries = 0;
    while (i < n) {
      unsigned want = static_cast<unsigned>(std::min(batch, n - i));
      int r = ::sendmmsg(fd_, &msgs[i], want, 0);
      if (r < 0) {
        int err = errno;
        if (err == EINTR) continue;
        if (err == ENOBUFS && retries < kNoBufferRetries) {
          retries++;
          SleepUntil(After(Now(), 1e6));
          continue;
        }
        // this packet failed; the others are still tried
        if (error_ == 0) error_ = err;
        failed_++;
        i++;
      } else {
        sent_ += static_cast<uint32_t>(r);
        i += static_cast<size_t>(r);
      }
      retries = 0;
      // paced: packet i goes out no earlier than start + i / rate
      if (i < n) SleepUntil(After(start, static_cast<double>(i) * 1e9 / b.rate));
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object out = Napi::Object::New(env);
    out.Set("sent", Napi::Number::New(env, sent_));
    out.Set("failed", Napi::Number::New(env, failed_));
    if (error_ != 0)
      out.Set("error",
              SystemErrorHint(env, error_, "sendmmsg", "a raw " + FamilyName(batch_.family) + " socket", Hint(error_))
                  .Value());
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  static timespec Now() {
    timespec t;
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    return t;
  }

  Napi::Promise::Deferred deferred_;
  int fd_;
  Batch batch_;
  uint32_t sent_ = 0;
  uint32_t failed_ = 0;
  int error_ = 0;
};

}  // namespace

size_t BuildTcpProbe(uint8_t* out, int family, const uint8_t* source, uint16_t sourcePort, const uint8_t* destination,
                     uint16_t destinationPort, uint32_t seq, uint32_t ack) {
  constexpr size_t kTcp = 20;
  size_t addrLen = family == AF_INET ? 4 : 16;
  size_t ipLen = family == AF_INET ? 20 : 40;
  std::memset(out, 0, ipLen + kTcp);
  if (family == AF_INET) {
    // RFC 791 §3.1: version 4, IHL 5; total length; id 0 and checksum 0 (the kernel fills both)
    out[0] = 0x45;
    Put16(out + 2, static_cast<uint16_t>(ipLen + kTcp));
    out[6] = 0x40;  // DF
    out[8] = 64;    // TTL
    out[9] = IPPROTO_TCP;
    std::memcpy(out + 12, source, 4);
    std::memcpy(out + 16, destination, 4);
  } else {
    // RFC 8200 §3: version 6, traffic class and flow label 0; payload length; next header; hop limit
    out[0] = 0x60;
    Put16(out + 4, kTcp);
    out[6] = IPPROTO_TCP;
    out[7] = 64;
    std::memcpy(out + 8, source, 16);
    std::memcpy(out + 24, destination, 16);
  }
  // RFC 9293 §3.1: ports, sequence and acknowledgment numbers, data offset 5 (no options), ACK
  uint8_t* tcp = out + ipLen;
  Put16(tcp, sourcePort);
  Put16(tcp + 2, destinationPort);
  Put32(tcp + 4, seq);
  Put32(tcp + 8, ack);
  tcp[12] = 5 << 4;
  tcp[13] = 0x10;  // ACK
  Put16(tcp + 14, kWindow);
  // the checksum covers a pseudo-header: source, destination, protocol and TCP length (IPv4:
  // RFC 9293 §3.1; IPv6: RFC 8200 §8.1, the same fields as 32-bit quantities), then the segment
  uint32_t sum = Sum16(source, addrLen, 0);
  sum = Sum16(destination, addrLen, sum);
  sum += IPPROTO_TCP + kTcp;
  sum = Sum16(tcp, kTcp, sum);
  Put16(tcp + 16, Fold(sum));
  return ipLen + kTcp;
}

Napi::Value TcpProbePacket(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsObject()) ThrowTypeError(env, "segment must be an object");
  Napi::Object o = info[0].As<Napi::Object>();
  int family = ParseFamily(env, o, "segment");
  uint8_t source[16], destination[16];
  ParseAddress(env, o.Get("source"), family, "segment.source", source);
  ParseAddress(env, o.Get("destination"), family, "segment.destination", destination);
  uint16_t sourcePort = ParsePort(env, o.Get("sourcePort"), "segment.sourcePort");
  uint16_t destinationPort = ParsePort(env, o.Get("destinationPort"), "segment.destinationPort");
  uint32_t seq = ParseU32(env, o.Get("seq"), "segment.seq");
  uint32_t ack = ParseU32(env, o.Get("ack"), "segment.ack");
  uint8_t packet[kTcpProbeMax];
  size_t len = BuildTcpProbe(packet, family, source, sourcePort, destination, destinationPort, seq, ack);
  return Napi::Buffer<uint8_t>::Copy(env, packet, len);
}

Napi::Value SendTcpProbes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Batch b = ParseBatch(info);
  std::string subject = "a raw " + FamilyName(b.family) + " socket";
  UniqueFd fd(::socket(b.family, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW));
  if (fd.get() < 0)
    ThrowSystemErrorHint(
        env, errno,
        b.family == AF_INET ? "socket(AF_INET, SOCK_RAW, IPPROTO_RAW)" : "socket(AF_INET6, SOCK_RAW, IPPROTO_RAW)",
        subject, errno == EPERM ? "sending TCP probes needs CAP_NET_RAW" : "");
  if (b.mark != 0 && ::setsockopt(fd.get(), SOL_SOCKET, SO_MARK, &b.mark, sizeof b.mark) < 0)
    ThrowSystemErrorHint(env, errno, "setsockopt(SO_MARK)", subject,
                         errno == EPERM ? "SO_MARK needs CAP_NET_ADMIN" : "");
  // a send blocked on a full send buffer fails after 1 s instead of holding the worker thread
  timeval tv = {1, 0};
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
    ThrowSystemErrorHint(env, errno, "setsockopt(SO_SNDTIMEO)", subject, "");
  auto* worker = new ProbeWorker(env, fd.release(), std::move(b));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace ballast
