// The VIP's flows in conntrack, read over ctnetlink with libmnl: one IPCTNL_MSG_CT_GET dump
// (NLM_F_DUMP; nfgen_family restricts it to one L3 family in the kernel), matched here in user
// space, aggregated per DNAT target; optionally the oldest matching entries of one target are
// deleted (IPCTNL_MSG_CT_DELETE by original tuple + CTA_ID + CTA_ZONE, each acknowledged) and
// their original tuples' client address, port and VIP returned.
// Sources: include/uapi/linux/netfilter/nfnetlink_conntrack.h (attributes),
// net/netfilter/nf_conntrack_netlink.c (ctnetlink_dump_table, ctnetlink_del_conntrack: the id
// check makes a delete never hit a different flow that reused the tuple), libmnl(3).
//
// A flow counts when: TCP, original destination = one of the VIPs and the VIP port, status
// IPS_DST_NAT (ballast's DNAT picked a backend), TCP state ESTABLISHED. Its backend is the reply
// source (address:port): the DNAT target (masquerade changes the reply destination only).
//
// Synchronous, bounded: SO_RCVTIMEO of 2 s on every receive, at most kMaxEntries entries walked.
#include "conntrack_dump.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_conntrack_tcp.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "errors.h"
#include "sys_error.h"

namespace ballast {

namespace {

constexpr const char* kSubject = "ctnetlink";
constexpr size_t kMaxEntries = 1 << 21;  // conntrack entries one dump may walk (nf_conntrack_max is far lower)
constexpr int kMaxReceives = 1 << 18;

struct Addr {
  uint8_t bytes[16] = {0};
  bool operator<(const Addr& o) const { return std::memcmp(bytes, o.bytes, 16) < 0; }
  bool operator==(const Addr& o) const { return std::memcmp(bytes, o.bytes, 16) == 0; }
};

struct Tuple {
  Addr src, dst;
  uint16_t sport = 0, dport = 0;  // network order
  uint8_t proto = 0;
  bool hasIp = false;
};

struct Entry {
  Tuple orig, reply;
  uint32_t status = 0;
  uint32_t id = 0;  // network order, as the kernel sent it
  bool hasId = false;
  uint16_t zone = 0;  // network order
  bool hasZone = false;
  uint8_t tcpState = 0xff;
  uint64_t startNs = 0;  // CTA_TIMESTAMP_START; 0 = none (net.netfilter.nf_conntrack_timestamp was 0)
};

struct Query {
  int family = AF_INET;
  std::vector<Addr> vips;
  uint16_t port = 0;  // network order
  bool reset = false;
  Addr resetAddr;
  uint16_t resetPort = 0;  // network order
  uint32_t resetCount = 0;
  bool dryRun = false;   // choose the flows to reset, delete nothing
  bool hasOnly = false;  // reset only flows among `only` (client address, client port, VIP)
  std::vector<std::tuple<Addr, uint16_t, Addr>> only;  // port in network order, sorted
};

Addr ParseAddr(Napi::Env env, const Napi::Value& v, int family, const std::string& name) {
  if (!v.IsString()) ThrowTypeError(env, name + " must be a string");
  std::string text = v.As<Napi::String>().Utf8Value();
  Addr a;
  if (::inet_pton(family, text.c_str(), a.bytes) != 1) {
    ThrowTypeError(env, name + " must be an IPv" + (family == AF_INET ? "4" : "6") + " address, got \"" + text + "\"");
  }
  return a;
}

uint16_t ParsePort(Napi::Env env, const Napi::Value& v, const std::string& name) {
  if (!v.IsNumber()) ThrowTypeError(env, name + " must be a number");
  double p = v.As<Napi::Number>().DoubleValue();
  if (!(p >= 1 && p <= 65535) || p != static_cast<double>(static_cast<int>(p)))
    ThrowTypeError(env, name + " must be an integer 1..65535");
  return htons(static_cast<uint16_t>(p));
}

Query ParseQuery(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsObject()) ThrowTypeError(env, "query must be an object");
  Napi::Object o = info[0].As<Napi::Object>();
  Query q;
  Napi::Value fam = o.Get("family");
  int family = fam.IsNumber() ? fam.As<Napi::Number>().Int32Value() : 0;
  if (family != 4 && family != 6) ThrowTypeError(env, "query.family must be 4 or 6");
  q.family = family == 4 ? AF_INET : AF_INET6;
  Napi::Value vips = o.Get("vips");
  if (!vips.IsArray() || vips.As<Napi::Array>().Length() == 0)
    ThrowTypeError(env, "query.vips must be a non-empty array of addresses");
  Napi::Array list = vips.As<Napi::Array>();
  for (uint32_t i = 0; i < list.Length(); i++)
    q.vips.push_back(ParseAddr(env, list.Get(i), q.family, "query.vips[" + std::to_string(i) + "]"));
  q.port = ParsePort(env, o.Get("port"), "query.port");
  Napi::Value reset = o.Get("reset");
  if (!reset.IsUndefined()) {
    if (!reset.IsObject()) ThrowTypeError(env, "query.reset must be an object { address, port, count }");
    Napi::Object r = reset.As<Napi::Object>();
    q.reset = true;
    q.resetAddr = ParseAddr(env, r.Get("address"), q.family, "query.reset.address");
    q.resetPort = ParsePort(env, r.Get("port"), "query.reset.port");
    Napi::Value c = r.Get("count");
    double n = c.IsNumber() ? c.As<Napi::Number>().DoubleValue() : -1;
    if (!(n >= 0 && n <= 1e6) || n != static_cast<double>(static_cast<uint32_t>(n)))
      ThrowTypeError(env, "query.reset.count must be an integer 0..1000000");
    q.resetCount = static_cast<uint32_t>(n);
    Napi::Value dry = r.Get("dryRun");
    if (!dry.IsUndefined() && !dry.IsBoolean()) ThrowTypeError(env, "query.reset.dryRun must be a boolean");
    q.dryRun = dry.IsBoolean() && dry.As<Napi::Boolean>().Value();
    Napi::Value only = r.Get("only");
    if (!only.IsUndefined()) {
      if (!only.IsArray()) ThrowTypeError(env, "query.reset.only must be an array of { source, sourcePort, vip }");
      Napi::Array a = only.As<Napi::Array>();
      q.hasOnly = true;
      for (uint32_t i = 0; i < a.Length(); i++) {
        std::string at = "query.reset.only[" + std::to_string(i) + "]";
        if (!a.Get(i).IsObject()) ThrowTypeError(env, at + " must be an object { source, sourcePort, vip }");
        Napi::Object f = a.Get(i).As<Napi::Object>();
        q.only.emplace_back(ParseAddr(env, f.Get("source"), q.family, at + ".source"),
                            ParsePort(env, f.Get("sourcePort"), at + ".sourcePort"),
                            ParseAddr(env, f.Get("vip"), q.family, at + ".vip"));
      }
      std::sort(q.only.begin(), q.only.end());
    }
  }
  return q;
}

// --- parsing one entry -------------------------------------------------------------------------

// the attributes from `begin` to `end` (libmnl's mnl_attr_for_each* macros convert void* implicitly: C only)
template <typename F>
void ForEach(const void* begin, const void* end, F f) {
  const nlattr* a = static_cast<const nlattr*>(begin);
  while (mnl_attr_ok(a, static_cast<int>(static_cast<const char*>(end) - reinterpret_cast<const char*>(a)))) {
    f(a);
    a = mnl_attr_next(a);
  }
}

template <typename F>
void ForEachNested(const nlattr* nest, F f) {
  const char* p = static_cast<const char*>(mnl_attr_get_payload(nest));
  ForEach(p, p + mnl_attr_get_payload_len(nest), f);
}

void ParseIp(const nlattr* nest, Tuple& t) {
  ForEachNested(nest, [&](const nlattr* a) {
    uint16_t type = mnl_attr_get_type(a);
    uint16_t len = mnl_attr_get_payload_len(a);
    if ((type == CTA_IP_V4_SRC || type == CTA_IP_V4_DST) && len == 4) {
      std::memcpy(type == CTA_IP_V4_SRC ? t.src.bytes : t.dst.bytes, mnl_attr_get_payload(a), 4);
      t.hasIp = true;
    } else if ((type == CTA_IP_V6_SRC || type == CTA_IP_V6_DST) && len == 16) {
      std::memcpy(type == CTA_IP_V6_SRC ? t.src.bytes : t.dst.bytes, mnl_attr_get_payload(a), 16);
      t.hasIp = true;
    }
  });
}

void ParseProto(const nlattr* nest, Tuple& t) {
  ForEachNested(nest, [&](const nlattr* a) {
    uint16_t type = mnl_attr_get_type(a);
    if (type == CTA_PROTO_NUM && mnl_attr_get_payload_len(a) >= 1)
      t.proto = mnl_attr_get_u8(a);
    else if (type == CTA_PROTO_SRC_PORT && mnl_attr_get_payload_len(a) >= 2)
      t.sport = mnl_attr_get_u16(a);
    else if (type == CTA_PROTO_DST_PORT && mnl_attr_get_payload_len(a) >= 2)
      t.dport = mnl_attr_get_u16(a);
  });
}

void ParseTuple(const nlattr* nest, Tuple& t) {
  ForEachNested(nest, [&](const nlattr* a) {
    if (mnl_attr_get_type(a) == CTA_TUPLE_IP)
      ParseIp(a, t);
    else if (mnl_attr_get_type(a) == CTA_TUPLE_PROTO)
      ParseProto(a, t);
  });
}

void ParseProtoinfo(const nlattr* nest, Entry& e) {
  ForEachNested(nest, [&](const nlattr* a) {
    if (mnl_attr_get_type(a) != CTA_PROTOINFO_TCP) return;
    ForEachNested(a, [&](const nlattr* b) {
      if (mnl_attr_get_type(b) == CTA_PROTOINFO_TCP_STATE && mnl_attr_get_payload_len(b) >= 1)
        e.tcpState = mnl_attr_get_u8(b);
    });
  });
}

bool ParseEntry(const nlmsghdr* nlh, Entry& e) {
  if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(nfgenmsg))) return false;
  ForEach(mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg)), mnl_nlmsg_get_payload_tail(nlh), [&](const nlattr* a) {
    uint16_t len = mnl_attr_get_payload_len(a);
    switch (mnl_attr_get_type(a)) {
      case CTA_TUPLE_ORIG:
        ParseTuple(a, e.orig);
        break;
      case CTA_TUPLE_REPLY:
        ParseTuple(a, e.reply);
        break;
      case CTA_STATUS:
        if (len == 4) e.status = ntohl(mnl_attr_get_u32(a));
        break;
      case CTA_ID:
        if (len == 4) {
          e.id = mnl_attr_get_u32(a);
          e.hasId = true;
        }
        break;
      case CTA_ZONE:
        if (len == 2) {
          e.zone = mnl_attr_get_u16(a);
          e.hasZone = true;
        }
        break;
      case CTA_PROTOINFO:
        ParseProtoinfo(a, e);
        break;
      case CTA_TIMESTAMP: {
        ForEachNested(a, [&](const nlattr* b) {
          if (mnl_attr_get_type(b) == CTA_TIMESTAMP_START && mnl_attr_get_payload_len(b) == 8)
            e.startNs = be64toh(mnl_attr_get_u64(b));
        });
        break;
      }
      default:
        break;
    }
  });
  return e.orig.hasIp && e.reply.hasIp;
}

bool IsVipFlow(const Query& q, const Entry& e) {
  if (e.orig.proto != IPPROTO_TCP || e.orig.dport != q.port) return false;
  if ((e.status & IPS_DST_NAT) == 0 || e.tcpState != TCP_CONNTRACK_ESTABLISHED) return false;
  return std::find(q.vips.begin(), q.vips.end(), e.orig.dst) != q.vips.end();
}

// --- the socket ----------------------------------------------------------------------------------

struct MnlClose {
  void operator()(mnl_socket* s) const { mnl_socket_close(s); }
};
using MnlSocket = std::unique_ptr<mnl_socket, MnlClose>;

MnlSocket Open(Napi::Env env) {
  MnlSocket nl(mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC));
  if (!nl) ThrowSystemErrorHint(env, errno, "socket(AF_NETLINK, NETLINK_NETFILTER)", kSubject, "");
  if (mnl_socket_bind(nl.get(), 0, MNL_SOCKET_AUTOPID) < 0)
    ThrowSystemErrorHint(env, errno, "bind(NETLINK_NETFILTER)", kSubject, "");
  struct timeval tv = {2, 0};
  if (::setsockopt(mnl_socket_get_fd(nl.get()), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) {
    ThrowSystemErrorHint(env, errno, "setsockopt(SO_RCVTIMEO)", kSubject, "");
  }
  return nl;
}

nlmsghdr* PutHeader(char* buf, uint16_t msg, uint16_t flags, uint32_t seq, int family) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | msg;
  nlh->nlmsg_flags = NLM_F_REQUEST | flags;
  nlh->nlmsg_seq = seq;
  nfgenmsg* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  nfg->nfgen_family = static_cast<uint8_t>(family);
  nfg->version = NFNETLINK_V0;
  nfg->res_id = 0;
  return nlh;
}

void Send(Napi::Env env, mnl_socket* nl, const nlmsghdr* nlh, const char* what) {
  if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) ThrowSystemErrorHint(env, errno, what, kSubject, "");
}

ssize_t Receive(Napi::Env env, mnl_socket* nl, std::vector<char>& buf) {
  ssize_t n;
  do {
    n = mnl_socket_recvfrom(nl, buf.data(), buf.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    int e = errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
    ThrowSystemErrorHint(env, e, "recv", kSubject, e == ETIMEDOUT ? "no answer from the kernel within 2 s" : "");
  }
  return n;
}

struct DumpState {
  const Query* q;
  std::vector<Entry>* matched;
  size_t scanned = 0;
};

int OnEntry(const nlmsghdr* nlh, void* data) {
  DumpState* s = static_cast<DumpState*>(data);
  if (++s->scanned > kMaxEntries) {
    errno = E2BIG;
    return MNL_CB_ERROR;
  }
  Entry e;
  if (ParseEntry(nlh, e) && IsVipFlow(*s->q, e)) s->matched->push_back(e);
  return MNL_CB_OK;
}

size_t Dump(Napi::Env env, mnl_socket* nl, const Query& q, std::vector<Entry>& matched) {
  std::vector<char> buf(std::max<size_t>(MNL_SOCKET_BUFFER_SIZE, 64 * 1024));
  uint32_t seq = 1;
  nlmsghdr* nlh = PutHeader(buf.data(), IPCTNL_MSG_CT_GET, NLM_F_DUMP, seq, q.family);
  Send(env, nl, nlh, "sendto(IPCTNL_MSG_CT_GET)");
  uint32_t portid = mnl_socket_get_portid(nl);
  DumpState s{&q, &matched};
  for (int r = 0; r < kMaxReceives; r++) {
    ssize_t n = Receive(env, nl, buf);
    int rc = mnl_cb_run(buf.data(), static_cast<size_t>(n), seq, portid, OnEntry, &s);
    if (rc == MNL_CB_STOP) return s.scanned;
    if (rc == MNL_CB_ERROR) {
      int e = errno;
      ThrowSystemErrorHint(env, e, "IPCTNL_MSG_CT_GET", kSubject,
                           e == E2BIG   ? "more conntrack entries than one dump may walk"
                           : e == EPERM ? "reading conntrack needs CAP_NET_ADMIN"
                                        : "");
    }
  }
  ThrowSystemErrorHint(env, E2BIG, "IPCTNL_MSG_CT_GET", kSubject, "the dump did not end");
}

void PutTuple(nlmsghdr* nlh, const Tuple& t, int family) {
  nlattr* tuple = mnl_attr_nest_start(nlh, CTA_TUPLE_ORIG);
  nlattr* ip = mnl_attr_nest_start(nlh, CTA_TUPLE_IP);
  if (family == AF_INET) {
    mnl_attr_put(nlh, CTA_IP_V4_SRC, 4, t.src.bytes);
    mnl_attr_put(nlh, CTA_IP_V4_DST, 4, t.dst.bytes);
  } else {
    mnl_attr_put(nlh, CTA_IP_V6_SRC, 16, t.src.bytes);
    mnl_attr_put(nlh, CTA_IP_V6_DST, 16, t.dst.bytes);
  }
  mnl_attr_nest_end(nlh, ip);
  nlattr* proto = mnl_attr_nest_start(nlh, CTA_TUPLE_PROTO);
  mnl_attr_put_u8(nlh, CTA_PROTO_NUM, t.proto);
  mnl_attr_put_u16(nlh, CTA_PROTO_SRC_PORT, t.sport);
  mnl_attr_put_u16(nlh, CTA_PROTO_DST_PORT, t.dport);
  mnl_attr_nest_end(nlh, proto);
  mnl_attr_nest_end(nlh, tuple);
}

int OnAck(const nlmsghdr*, void*) {
  return MNL_CB_OK;
}

// one IPCTNL_MSG_CT_DELETE; true when deleted, false when the entry was gone already
bool Delete(Napi::Env env, mnl_socket* nl, const Entry& e, int family, uint32_t seq) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = PutHeader(buf.data(), IPCTNL_MSG_CT_DELETE, NLM_F_ACK, seq, family);
  PutTuple(nlh, e.orig, family);
  if (e.hasId) mnl_attr_put_u32(nlh, CTA_ID, e.id);
  if (e.hasZone) mnl_attr_put_u16(nlh, CTA_ZONE, e.zone);
  Send(env, nl, nlh, "sendto(IPCTNL_MSG_CT_DELETE)");
  uint32_t portid = mnl_socket_get_portid(nl);
  for (int r = 0; r < 16; r++) {
    ssize_t n = Receive(env, nl, buf);
    int rc = mnl_cb_run(buf.data(), static_cast<size_t>(n), seq, portid, OnAck, nullptr);
    if (rc == MNL_CB_STOP) return true;  // the ack with error 0
    if (rc == MNL_CB_ERROR) {
      if (errno == ENOENT) return false;
      if (errno == ESRCH) continue;  // a message of an earlier sequence number
      ThrowSystemErrorHint(env, errno, "IPCTNL_MSG_CT_DELETE", kSubject,
                           errno == EPERM ? "deleting conntrack entries needs CAP_NET_ADMIN" : "");
    }
  }
  ThrowSystemErrorHint(env, ETIMEDOUT, "IPCTNL_MSG_CT_DELETE", kSubject, "no acknowledgement");
}

Napi::String AddrText(Napi::Env env, int family, const Addr& a) {
  char text[INET6_ADDRSTRLEN] = "";
  ::inet_ntop(family, a.bytes, text, sizeof text);
  return Napi::String::New(env, text);
}

}  // namespace

Napi::Value ConntrackVipFlows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Query q = ParseQuery(info);
  MnlSocket nl = Open(env);
  std::vector<Entry> matched;
  size_t scanned = Dump(env, nl.get(), q, matched);

  // per backend: established flows (before any reset below)
  std::map<std::pair<Addr, uint16_t>, uint32_t> counts;
  uint32_t stamped = 0;
  for (const Entry& e : matched) {
    counts[{e.reply.src, e.reply.sport}]++;
    if (e.startNs != 0) stamped++;
  }
  Napi::Object out = Napi::Object::New(env);
  Napi::Array backends = Napi::Array::New(env, counts.size());
  uint32_t i = 0;
  for (const auto& [key, n] : counts) {
    Napi::Object b = Napi::Object::New(env);
    b.Set("address", AddrText(env, q.family, key.first));
    b.Set("port", Napi::Number::New(env, ntohs(key.second)));
    b.Set("established", Napi::Number::New(env, n));
    backends.Set(i++, b);
  }
  out.Set("backends", backends);
  out.Set("scanned", Napi::Number::New(env, static_cast<double>(scanned)));
  out.Set("matched", Napi::Number::New(env, static_cast<double>(matched.size())));
  out.Set("timestamped", Napi::Number::New(env, stamped));

  if (q.reset) {
    // the oldest first: by start time (entries without one are older than any stamped entry:
    // they predate nf_conntrack_timestamp=1), ties by id
    std::vector<const Entry*> mine;
    for (const Entry& e : matched) {
      if (!(e.reply.src == q.resetAddr && e.reply.sport == q.resetPort)) continue;
      if (q.hasOnly &&
          !std::binary_search(q.only.begin(), q.only.end(), std::make_tuple(e.orig.src, e.orig.sport, e.orig.dst)))
        continue;
      mine.push_back(&e);
    }
    std::sort(mine.begin(), mine.end(),
              [](const Entry* a, const Entry* b) { return std::tie(a->startNs, a->id) < std::tie(b->startNs, b->id); });
    uint32_t deleted = 0;
    double newestNs = 0;
    uint32_t seq = 2;
    // the original tuple's client side and VIP of every entry deleted (dryRun: chosen): the agent
    // puts them into the table's evict set, so that the flow's next segment gets a RST (nftables.ts)
    Napi::Array flows = Napi::Array::New(env);
    auto flow = [&](const Entry& e) {
      Napi::Object f = Napi::Object::New(env);
      f.Set("source", AddrText(env, q.family, e.orig.src));
      f.Set("sourcePort", Napi::Number::New(env, ntohs(e.orig.sport)));
      f.Set("vip", AddrText(env, q.family, e.orig.dst));
      flows.Set(flows.Length(), f);
    };
    for (const Entry* e : mine) {
      if (flows.Length() >= q.resetCount) break;
      if (q.dryRun) {
        flow(*e);
      } else if (Delete(env, nl.get(), *e, q.family, seq++)) {
        flow(*e);
        deleted++;
        newestNs = static_cast<double>(e->startNs);
      }
    }
    Napi::Object r = Napi::Object::New(env);
    r.Set("deleted", Napi::Number::New(env, deleted));
    r.Set("flows", flows);
    // the start time of the youngest entry deleted (CLOCK_REALTIME ns, ±256 ns as a double); 0 = unknown
    r.Set("youngestStartNs", Napi::Number::New(env, newestNs));
    out.Set("reset", r);
  }
  return out;
}

}  // namespace ballast
