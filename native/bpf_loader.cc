// libbpf(7)-based loader for bpf/sock_lb.bpf.c. Sources: libbpf API (libbpf.h, bpf.h),
// bpf(2), include/uapi/linux/bpf.h (bpf_link_info, BPF_LINK_UPDATE), statfs(2) magic numbers
// (linux/magic.h), socket(7) SO_NETNS_COOKIE (Linux >= 5.14).
//
// Restart without a gap (the reason maps and links are pinned):
//
//   first start                     restart (pins present)              stop for good
//   maps: create, pin               maps: reuse the pinned ones         unpin links (detaches)
//   links: attach_cgroup, pin       links: open pin, update_program     unpin maps, rmdir
//
// A pinned link keeps its program attached while no process runs, and BPF_LINK_UPDATE swaps
// the program in place (no moment with nothing attached); the new program is loaded against
// the pinned maps, so the endpoints and the getpeername() memory carry over.
#include "bpf_loader.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "common.h"
#include "errors.h"
#include "sock_lb.h"
#include "sys_error.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71  // asm-generic/socket.h, Linux 5.14
#endif

namespace ballast {

namespace {

constexpr const char* kBpffsRoot = "/sys/fs/bpf";
constexpr const char* kEndpointsMap = "ballast_lb_ep";
constexpr const char* kReverseMap = "ballast_lb_rev";
constexpr const char* kConfigMap = "ballast_lb_cfg";
constexpr const char* kLinkPrefix = "link_";
constexpr const char* kCapsHint =
    "loading and attaching BPF needs root, or CAP_BPF + CAP_NET_ADMIN (+ CAP_PERFMON on "
    "some kernels), or CAP_SYS_ADMIN before Linux 5.8";

// --- libbpf's log: captured while a load runs, to name the verifier's complaint -------------

std::mutex logMutex;
std::string* logCapture = nullptr;  // guarded by logMutex

int OnLibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  char line[1024];
  int n = std::vsnprintf(line, sizeof line, format, args);
  std::lock_guard<std::mutex> lock(logMutex);
  // outside a load nothing is printed: the addon reports errors as exceptions, not on stderr
  if (logCapture != nullptr && n > 0) {
    logCapture->append(line);
    constexpr size_t kKeep = 3000;
    if (logCapture->size() > 2 * kKeep) logCapture->erase(0, logCapture->size() - kKeep);
  }
  return 0;
}

std::once_flag printOnce;

// captures libbpf's messages for the lifetime of the object (one load at a time per process)
class LogCapture {
 public:
  LogCapture() {
    std::call_once(printOnce, [] { libbpf_set_print(OnLibbpfPrint); });
    std::lock_guard<std::mutex> lock(logMutex);
    logCapture = &text_;
  }
  ~LogCapture() {
    std::lock_guard<std::mutex> lock(logMutex);
    if (logCapture == &text_) logCapture = nullptr;
  }
  // the last lines, for an error message
  std::string Tail() {
    std::lock_guard<std::mutex> lock(logMutex);
    constexpr size_t kTail = 1500;
    std::string t = text_.size() > kTail ? "…" + text_.substr(text_.size() - kTail) : text_;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    return t;
  }

 private:
  std::string text_;
};

// --- small owners ----------------------------------------------------------------------------

struct ObjectCloser {
  void operator()(bpf_object* o) const { bpf_object__close(o); }
};
using ObjectPtr = std::unique_ptr<bpf_object, ObjectCloser>;

struct LinkCloser {
  // closes the fd only: a pinned link stays attached
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using LinkPtr = std::unique_ptr<bpf_link, LinkCloser>;

std::string StringArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  if (info.Length() <= index || !info[index].IsString()) {
    ThrowTypeError(info.Env(), std::string(name) + " must be a string");
  }
  std::string s = info[index].As<Napi::String>().Utf8Value();
  if (s.empty() || s[0] != '/' || s.find('\0') != std::string::npos) {
    ThrowTypeError(info.Env(), std::string(name) + " must be an absolute path, got \"" + s + "\"");
  }
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

bool IsFsType(const std::string& path, long magic, int* err) {
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) < 0) {
    *err = errno;
    return false;
  }
  *err = 0;
  return static_cast<long>(fs.f_type) == magic;
}

// mkdir -p inside bpffs (mode 0700); the bpffs root itself is mounted when it is not one yet
void EnsurePinDir(Napi::Env env, const std::string& pinDir) {
  int err = 0;
  const std::string root = kBpffsRoot;
  if (pinDir.compare(0, root.size() + 1, root + "/") == 0 && !IsFsType(root, BPF_FS_MAGIC, &err)) {
    if (err != 0) ThrowSystemErrorHint(env, err, "statfs", root, "");
    if (::mount("bpf", kBpffsRoot, "bpf", 0, "mode=0700") < 0) {
      ThrowSystemErrorHint(env, errno, "mount(bpf)", root,
                           "the BPF filesystem is not mounted there and could not be (needs CAP_SYS_ADMIN)");
    }
  }
  for (size_t i = 1; i <= pinDir.size(); i++) {
    if (i != pinDir.size() && pinDir[i] != '/') continue;
    std::string part = pinDir.substr(0, i);
    if (::mkdir(part.c_str(), 0700) < 0 && errno != EEXIST) ThrowSystemErrorHint(env, errno, "mkdir", part, "");
  }
  if (!IsFsType(pinDir, BPF_FS_MAGIC, &err)) {
    if (err != 0) ThrowSystemErrorHint(env, err, "statfs", pinDir, "");
    ThrowSystemErrorHint(env, EINVAL, "statfs", pinDir,
                         "the pin directory is not on a BPF filesystem (mount -t bpf bpf /sys/fs/bpf)");
  }
}

int OpenCgroup(Napi::Env env, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) ThrowSystemErrorHint(env, errno, "open", path, "the cgroup directory must exist");
  struct statfs fs;
  if (::fstatfs(fd, &fs) < 0) {
    int e = errno;
    ::close(fd);
    ThrowSystemErrorHint(env, e, "fstatfs", path, "");
  }
  if (static_cast<long>(fs.f_type) != CGROUP2_SUPER_MAGIC) {
    ::close(fd);
    ThrowSystemErrorHint(env, EINVAL, "fstatfs", path,
                         "not a cgroup v2 directory (BPF programs attach to the unified hierarchy: "
                         "/sys/fs/cgroup on a unified host, /sys/fs/cgroup/unified on a hybrid one)");
  }
  return fd;
}

// the cgroup's id (what bpf_link_info reports): its file handle on cgroup2 (kernfs node id)
uint64_t CgroupId(Napi::Env env, const std::string& path) {
  struct {
    struct file_handle fh;
    uint64_t id;
  } handle;
  handle.fh.handle_bytes = sizeof handle.id;
  int mount_id;
  if (::name_to_handle_at(AT_FDCWD, path.c_str(), &handle.fh, &mount_id, 0) < 0) {
    ThrowSystemErrorHint(env, errno, "name_to_handle_at", path, "");
  }
  uint64_t id;
  std::memcpy(&id, handle.fh.f_handle, sizeof id);
  return id;
}

// "<cgroup> (<program>)", the subject of an attach error
std::string AttachSubject(const std::string& cgroup, const char* prog) {
  return cgroup + " (" + prog + ")";
}

ballast_lb_addr ParseAddr(Napi::Env env, const Napi::Value& value, const std::string& what) {
  if (!value.IsObject()) ThrowTypeError(env, what + " must be an object { address, port }");
  Napi::Object o = value.As<Napi::Object>();
  Napi::Value a = o.Get("address");
  Napi::Value p = o.Get("port");
  if (!a.IsString()) ThrowTypeError(env, what + ".address must be a string");
  if (!p.IsNumber()) ThrowTypeError(env, what + ".port must be a number");
  double port = p.As<Napi::Number>().DoubleValue();
  if (!(port >= 1 && port <= 65535) || port != static_cast<double>(static_cast<int>(port))) {
    ThrowTypeError(env, what + ".port must be an integer 1..65535");
  }
  std::string text = a.As<Napi::String>().Utf8Value();
  ballast_lb_addr out;
  std::memset(&out, 0, sizeof out);  // keys are compared bytewise, pad included
  if (::inet_pton(AF_INET, text.c_str(), &out.addr[0]) == 1) {
    out.family = BALLAST_AF_INET;
  } else if (::inet_pton(AF_INET6, text.c_str(), out.addr) == 1) {
    out.family = BALLAST_AF_INET6;
  } else {
    ThrowTypeError(env, what + ".address must be an IPv4 or IPv6 address, got \"" + text + "\"");
  }
  out.port = htons(static_cast<uint16_t>(port));
  return out;
}

Napi::Object AddrToJs(Napi::Env env, const ballast_lb_addr& a) {
  char text[INET6_ADDRSTRLEN] = "";
  if (a.family == BALLAST_AF_INET) {
    ::inet_ntop(AF_INET, &a.addr[0], text, sizeof text);
  } else {
    ::inet_ntop(AF_INET6, a.addr, text, sizeof text);
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("address", Napi::String::New(env, text));
  o.Set("port", Napi::Number::New(env, ntohs(a.port)));
  return o;
}

uint64_t BigIntArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  if (info.Length() <= index || !info[index].IsBigInt())
    ThrowTypeError(info.Env(), std::string(name) + " must be a bigint");
  bool lossless = false;
  uint64_t v = info[index].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) ThrowTypeError(info.Env(), std::string(name) + " must be a bigint in 0..2^64-1");
  return v;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SockLb

Napi::Function SockLb::Define(Napi::Env env) {
  return DefineClass(env, "SockLb",
                     {
                         InstanceMethod<&SockLb::SetEndpoint>("setEndpoint"),
                         InstanceMethod<&SockLb::DeleteEndpoint>("deleteEndpoint"),
                         InstanceMethod<&SockLb::ReadEndpoints>("readEndpoints"),
                         InstanceMethod<&SockLb::SetNetnsCookie>("setNetnsCookie"),
                         InstanceMethod<&SockLb::GetNetnsCookie>("getNetnsCookie"),
                         InstanceMethod<&SockLb::Reverse>("reverse"),
                         InstanceMethod<&SockLb::Close>("close"),
                         InstanceAccessor<&SockLb::GetReused>("reused"),
                     });
}

SockLb::SockLb(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SockLb>(info) {
  Napi::Env env = info.Env();
  const std::string objectPath = StringArg(info, 0, "object");
  const std::string cgroupPath = StringArg(info, 1, "cgroup");
  pinDir_ = StringArg(info, 2, "pinDir");

  UniqueFd cgroup(OpenCgroup(env, cgroupPath));
  const uint64_t cgroupId = CgroupId(env, cgroupPath);
  EnsurePinDir(env, pinDir_);

  LogCapture log;
  ObjectPtr object(bpf_object__open_file(objectPath.c_str(), nullptr));
  if (!object) {
    ThrowSystemErrorHint(env, errno, "bpf_object__open_file", objectPath,
                         errno == ENOENT ? "build it with `npm run build:native`" : log.Tail());
  }

  // maps: reuse what is pinned (libbpf checks type, sizes and flags match), pin the rest
  bpf_map* map;
  bpf_object__for_each_map(map, object.get()) {
    std::string path = pinDir_ + "/" + bpf_map__name(map);
    if (Exists(path)) reusedMaps_.push_back(bpf_map__name(map));
    if (bpf_map__set_pin_path(map, path.c_str()) < 0) {
      ThrowSystemErrorHint(env, errno, "bpf_map__set_pin_path", path, "");
    }
  }
  if (bpf_object__load(object.get()) < 0) {
    int err = errno;
    std::string hint = log.Tail();
    if (err == EPERM || err == EACCES)
      hint = std::string(kCapsHint) + (hint.empty() ? "" : "; libbpf: " + hint);
    else if (err == ENOSYS)
      hint = "this kernel has no bpf(2) (CONFIG_BPF_SYSCALL)";
    else if (!hint.empty())
      hint = "libbpf: " + hint;
    ThrowSystemErrorHint(env, err, "bpf_object__load", objectPath, hint);
  }

  // programs: update the pinned link in place, or attach and pin a new one
  std::vector<std::string> pinnedHere;
  auto rollback = [&pinnedHere]() {
    for (const std::string& p : pinnedHere) ::unlink(p.c_str());
  };
  bpf_program* prog;
  bpf_object__for_each_program(prog, object.get()) {
    const char* name = bpf_program__name(prog);
    const std::string linkPath = pinDir_ + "/" + kLinkPrefix + name;
    if (Exists(linkPath)) {
      LinkPtr link(bpf_link__open(linkPath.c_str()));
      if (!link) {
        int err = errno;
        rollback();
        ThrowSystemErrorHint(env, err, "bpf_link__open", linkPath, "");
      }
      bpf_link_info linkInfo;
      std::memset(&linkInfo, 0, sizeof linkInfo);
      uint32_t len = sizeof linkInfo;
      if (bpf_obj_get_info_by_fd(bpf_link__fd(link.get()), &linkInfo, &len) < 0) {
        int err = errno;
        rollback();
        ThrowSystemErrorHint(env, err, "bpf_obj_get_info_by_fd", linkPath, "");
      }
      if (linkInfo.type == BPF_LINK_TYPE_CGROUP && linkInfo.cgroup.cgroup_id == cgroupId) {
        if (bpf_link__update_program(link.get(), prog) < 0) {
          int err = errno;
          rollback();
          ThrowSystemErrorHint(env, err, "bpf_link__update_program", linkPath, log.Tail());
        }
        updatedLinks_.push_back(name);
        continue;
      }
      if (linkInfo.type == BPF_LINK_TYPE_CGROUP && linkInfo.cgroup.cgroup_id != 0) {
        rollback();
        ThrowSystemErrorHint(env, EEXIST, "bpf_link__open", linkPath,
                             "this pin directory holds a link attached to another cgroup (id " +
                                 std::to_string(linkInfo.cgroup.cgroup_id) + ", not " + cgroupPath +
                                 "): use another pinDir or detach it first");
      }
      // a link whose cgroup was removed (id 0) or a foreign object: replace the pin
      if (::unlink(linkPath.c_str()) < 0) {
        int err = errno;
        rollback();
        ThrowSystemErrorHint(env, err, "unlink", linkPath, "");
      }
    }
    LinkPtr link(bpf_program__attach_cgroup(prog, cgroup.get()));
    if (!link) {
      int err = errno;
      rollback();
      ThrowSystemErrorHint(env, err, "bpf_program__attach_cgroup", AttachSubject(cgroupPath, name),
                           err == EPERM ? kCapsHint : log.Tail());
    }
    if (bpf_link__pin(link.get(), linkPath.c_str()) < 0) {
      int err = errno;
      rollback();  // the unpinned link detaches when `link` is destroyed
      ThrowSystemErrorHint(env, err, "bpf_link__pin", linkPath, "");
    }
    pinnedHere.push_back(linkPath);
  }

  // keep only the map fds: the programs live on through their links
  auto dupMap = [&](const char* mapName) {
    bpf_map* m = bpf_object__find_map_by_name(object.get(), mapName);
    int fd = m == nullptr ? -1 : ::fcntl(bpf_map__fd(m), F_DUPFD_CLOEXEC, 3);
    if (fd < 0) {
      int err = m == nullptr ? ENOENT : errno;
      rollback();
      ThrowSystemErrorHint(env, err, "bpf_object__find_map_by_name", std::string(mapName) + " in " + objectPath,
                           m == nullptr ? "the object is not ballast's sock_lb" : "");
    }
    return fd;
  };
  UniqueFd endpoints(dupMap(kEndpointsMap));
  UniqueFd reverse(dupMap(kReverseMap));
  UniqueFd config(dupMap(kConfigMap));

  if (napi_add_env_cleanup_hook(env, OnEnvTeardown, this) != napi_ok) {
    throw Napi::Error::New(env, "napi_add_env_cleanup_hook failed");
  }
  env_ = env;
  hooked_ = true;
  endpointsFd_ = endpoints.release();
  reverseFd_ = reverse.release();
  configFd_ = config.release();
}

SockLb::~SockLb() {
  CloseFds();
}

void SockLb::OnEnvTeardown(void* arg) {
  SockLb* self = static_cast<SockLb*>(arg);
  self->hooked_ = false;
  self->CloseFds();
}

void SockLb::CloseFds() {
  if (hooked_) {
    napi_remove_env_cleanup_hook(env_, OnEnvTeardown, this);
    hooked_ = false;
  }
  for (int* fd : {&endpointsFd_, &reverseFd_, &configFd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void SockLb::CheckOpen(Napi::Env env, const char* call) const {
  if (endpointsFd_ < 0) ThrowSystemErrorHint(env, EBADF, call, pinDir_, "the SockLb handle is closed");
}

Napi::Value SockLb::Close(const Napi::CallbackInfo& info) {
  CloseFds();
  return info.Env().Undefined();
}

Napi::Value SockLb::SetEndpoint(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ballast_lb_addr key = ParseAddr(env, info[0], "endpoint");
  if (info.Length() < 2 || !info[1].IsArray()) ThrowTypeError(env, "backends must be an array");
  Napi::Array list = info[1].As<Napi::Array>();
  if (list.Length() > BALLAST_LB_MAX_BACKENDS) {
    ThrowTypeError(env, "backends must hold at most " + std::to_string(BALLAST_LB_MAX_BACKENDS) + " entries");
  }
  ballast_lb_endpoint value;
  std::memset(&value, 0, sizeof value);
  for (uint32_t i = 0; i < list.Length(); i++) {
    value.backends[i] = ParseAddr(env, list.Get(i), "backends[" + std::to_string(i) + "]");
    if (value.backends[i].family != key.family) {
      ThrowTypeError(env, "backends[" + std::to_string(i) + "] is not of the endpoint's address family");
    }
  }
  value.count = list.Length();
  CheckOpen(env, "bpf(BPF_MAP_UPDATE_ELEM)");
  if (bpf_map_update_elem(endpointsFd_, &key, &value, BPF_ANY) < 0) {
    ThrowSystemErrorHint(env, errno, "bpf(BPF_MAP_UPDATE_ELEM)", pinDir_ + "/" + kEndpointsMap,
                         errno == E2BIG ? "the endpoints map is full" : "");
  }
  return env.Undefined();
}

Napi::Value SockLb::DeleteEndpoint(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ballast_lb_addr key = ParseAddr(env, info[0], "endpoint");
  CheckOpen(env, "bpf(BPF_MAP_DELETE_ELEM)");
  if (bpf_map_delete_elem(endpointsFd_, &key) < 0) {
    if (errno == ENOENT) return Napi::Boolean::New(env, false);
    ThrowSystemErrorHint(env, errno, "bpf(BPF_MAP_DELETE_ELEM)", pinDir_ + "/" + kEndpointsMap, "");
  }
  return Napi::Boolean::New(env, true);
}

Napi::Value SockLb::ReadEndpoints(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env, "bpf(BPF_MAP_GET_NEXT_KEY)");
  Napi::Array out = Napi::Array::New(env);
  ballast_lb_addr key, next;
  const void* prev = nullptr;
  uint32_t n = 0;
  // bounded: the map holds at most BALLAST_LB_MAX_ENDPOINTS keys (twice that tolerates a
  // concurrent writer restarting the walk)
  for (int i = 0; i < 2 * BALLAST_LB_MAX_ENDPOINTS; i++) {
    if (bpf_map_get_next_key(endpointsFd_, prev, &next) < 0) {
      if (errno == ENOENT) break;
      ThrowSystemErrorHint(env, errno, "bpf(BPF_MAP_GET_NEXT_KEY)", pinDir_ + "/" + kEndpointsMap, "");
    }
    key = next;
    prev = &key;
    ballast_lb_endpoint value;
    if (bpf_map_lookup_elem(endpointsFd_, &key, &value) < 0) {
      if (errno == ENOENT) continue;  // deleted meanwhile
      ThrowSystemErrorHint(env, errno, "bpf(BPF_MAP_LOOKUP_ELEM)", pinDir_ + "/" + kEndpointsMap, "");
    }
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("endpoint", AddrToJs(env, key));
    Napi::Array backends = Napi::Array::New(env);
    uint32_t count = value.count > BALLAST_LB_MAX_BACKENDS ? BALLAST_LB_MAX_BACKENDS : value.count;
    for (uint32_t b = 0; b < count; b++) backends.Set(b, AddrToJs(env, value.backends[b]));
    entry.Set("backends", backends);
    out.Set(n++, entry);
  }
  return out;
}

Napi::Value SockLb::SetNetnsCookie(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t cookie = BigIntArg(info, 0, "cookie");
  CheckOpen(env, "bpf(BPF_MAP_UPDATE_ELEM)");
  uint32_t slot = BALLAST_LB_CONFIG_NETNS_COOKIE;
  if (bpf_map_update_elem(configFd_, &slot, &cookie, BPF_ANY) < 0) {
    ThrowSystemErrorHint(env, errno, "bpf(BPF_MAP_UPDATE_ELEM)", pinDir_ + "/" + kConfigMap, "");
  }
  return env.Undefined();
}

Napi::Value SockLb::GetNetnsCookie(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env, "bpf(BPF_MAP_LOOKUP_ELEM)");
  uint32_t slot = BALLAST_LB_CONFIG_NETNS_COOKIE;
  uint64_t cookie = 0;
  if (bpf_map_lookup_elem(configFd_, &slot, &cookie) < 0) {
    ThrowSystemErrorHint(env, errno, "bpf(BPF_MAP_LOOKUP_ELEM)", pinDir_ + "/" + kConfigMap, "");
  }
  return Napi::BigInt::New(env, cookie);
}

Napi::Value SockLb::Reverse(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t cookie = BigIntArg(info, 0, "cookie");
  CheckOpen(env, "bpf(BPF_MAP_LOOKUP_ELEM)");
  ballast_lb_reverse value;
  if (bpf_map_lookup_elem(reverseFd_, &cookie, &value) < 0) {
    if (errno == ENOENT) return env.Null();
    ThrowSystemErrorHint(env, errno, "bpf(BPF_MAP_LOOKUP_ELEM)", pinDir_ + "/" + kReverseMap, "");
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("endpoint", AddrToJs(env, value.endpoint));
  o.Set("backend", AddrToJs(env, value.backend));
  return o;
}

Napi::Value SockLb::GetReused(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  Napi::Array maps = Napi::Array::New(env, reusedMaps_.size());
  for (uint32_t i = 0; i < reusedMaps_.size(); i++) maps.Set(i, reusedMaps_[i]);
  Napi::Array links = Napi::Array::New(env, updatedLinks_.size());
  for (uint32_t i = 0; i < updatedLinks_.size(); i++) links.Set(i, updatedLinks_[i]);
  o.Set("maps", maps);
  o.Set("links", links);
  return o;
}

// ---------------------------------------------------------------------------------------------
// functions

Napi::Value BpfDetach(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string pinDir = StringArg(info, 0, "pinDir");
  int err = 0;
  if (!IsFsType(pinDir, BPF_FS_MAGIC, &err)) {
    if (err == ENOENT) return Napi::Number::New(env, 0);  // nothing pinned: already detached
    if (err != 0) ThrowSystemErrorHint(env, err, "statfs", pinDir, "");
    // never unlink files outside bpffs
    ThrowSystemErrorHint(env, EINVAL, "statfs", pinDir, "not on a BPF filesystem: refusing to remove anything");
  }
  std::vector<std::string> links, others;
  DIR* dir = ::opendir(pinDir.c_str());
  if (dir == nullptr) ThrowSystemErrorHint(env, errno, "opendir", pinDir, "");
  // bounded by what the directory holds; our own pins are 3 maps + 4 links
  for (int i = 0; i < 4096; i++) {
    errno = 0;
    dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    (name.rfind(kLinkPrefix, 0) == 0 ? links : others).push_back(pinDir + "/" + name);
  }
  ::closedir(dir);
  int removed = 0;
  // links first, detached explicitly (BPF_LINK_DETACH, Linux 5.9): unpinning alone frees the
  // link only after an RCU grace period, so the programs would still run for a moment after
  // this returns; and the programs stop before the maps they read go away
  for (const std::string& path : links) {
    LinkPtr link(bpf_link__open(path.c_str()));
    if (link && bpf_link__detach(link.get()) < 0 && errno != EINVAL && errno != ENOLINK) {
      ThrowSystemErrorHint(env, errno, "bpf(BPF_LINK_DETACH)", path, "");
    }
  }
  for (const auto* group : {&links, &others}) {
    for (const std::string& path : *group) {
      if (::unlink(path.c_str()) < 0) {
        if (errno == ENOENT) continue;
        ThrowSystemErrorHint(env, errno, "unlink", path, "");
      }
      removed++;
    }
  }
  if (::rmdir(pinDir.c_str()) < 0 && errno != ENOENT) ThrowSystemErrorHint(env, errno, "rmdir", pinDir, "");
  return Napi::Number::New(env, removed);
}

Napi::Value NetnsCookie(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) ThrowSystemErrorHint(env, errno, "socket(AF_UNIX, SOCK_DGRAM, 0)", "this network namespace", "");
  uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) < 0) {
    ThrowSystemErrorHint(env, errno, "getsockopt(SO_NETNS_COOKIE)", "this network namespace",
                         errno == ENOPROTOOPT ? "needs Linux 5.14 or later" : "");
  }
  return Napi::BigInt::New(env, cookie);
}

Napi::Value CgroupPrograms(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string path = StringArg(info, 0, "cgroup");
  UniqueFd cgroup(OpenCgroup(env, path));
  struct Hook {
    bpf_attach_type type;
    const char* name;
  };
  const Hook hooks[] = {{BPF_CGROUP_INET4_CONNECT, "connect4"},
                        {BPF_CGROUP_INET6_CONNECT, "connect6"},
                        {BPF_CGROUP_INET4_GETPEERNAME, "getpeername4"},
                        {BPF_CGROUP_INET6_GETPEERNAME, "getpeername6"}};
  Napi::Array out = Napi::Array::New(env);
  uint32_t n = 0;
  for (const Hook& hook : hooks) {
    uint32_t ids[64];
    uint32_t count = 64;
    uint32_t flags = 0;
    if (bpf_prog_query(cgroup.get(), hook.type, 0, &flags, ids, &count) < 0) {
      ThrowSystemErrorHint(env, errno, std::string("bpf(BPF_PROG_QUERY, ") + hook.name + ")", path,
                           errno == EPERM ? kCapsHint : "");
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("attachType", hook.name);
    Napi::Array list = Napi::Array::New(env, count);
    for (uint32_t i = 0; i < count && i < 64; i++) list.Set(i, Napi::Number::New(env, ids[i]));
    o.Set("ids", list);
    out.Set(n++, o);
  }
  return out;
}

}  // namespace ballast
