// Small pieces both sockets share: an owning fd, interface-name checks, SIOCGIFINDEX.
#pragma once

#include <napi.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "errors.h"

namespace ballast {

// closes the descriptor unless ownership was released (constructor failure paths)
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// interface names are at most IFNAMSIZ - 1 = 15 bytes (man 7 netdevice)
inline std::string InterfaceName(const Napi::CallbackInfo& info, size_t index) {
  Napi::Env env = info.Env();
  if (info.Length() <= index || !info[index].IsString()) {
    ThrowTypeError(env, "ifname must be a string");
  }
  std::string name = info[index].As<Napi::String>().Utf8Value();
  if (name.empty() || name.size() >= IFNAMSIZ || name.find('\0') != std::string::npos) {
    ThrowTypeError(env, "ifname must be 1 to 15 bytes long, got \"" + name + "\"");
  }
  return name;
}

// ifindex of ifname; ENODEV if there is no such interface (man 7 netdevice)
inline unsigned InterfaceIndex(Napi::Env env, int fd, const std::string& ifname) {
  struct ifreq request;
  std::memset(&request, 0, sizeof request);
  std::memcpy(request.ifr_name, ifname.data(), ifname.size());
  if (::ioctl(fd, SIOCGIFINDEX, &request) < 0) {
    ThrowSystemError(env, errno, "ioctl(SIOCGIFINDEX)", ifname);
  }
  return static_cast<unsigned>(request.ifr_ifindex);
}

inline void SetOption(Napi::Env env, int fd, int level, int name, const void* value, socklen_t length,
                      const char* syscall, const std::string& ifname) {
  if (::setsockopt(fd, level, name, value, length) < 0) {
    ThrowSystemError(env, errno, syscall, ifname);
  }
}

inline void SetIntOption(Napi::Env env, int fd, int level, int name, int value, const char* syscall,
                         const std::string& ifname) {
  SetOption(env, fd, level, name, &value, sizeof value, syscall, ifname);
}

}  // namespace ballast
