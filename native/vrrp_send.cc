#include "vrrp_send.h"

#include <arpa/inet.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace ballast {

bool ParseDestination(const VrrpRoute& route, const std::string& text, VrrpDestination* out) {
  *out = VrrpDestination{};
  if (route.family == 4) {
    auto* to = reinterpret_cast<sockaddr_in*>(&out->address);
    to->sin_family = AF_INET;
    if (inet_pton(AF_INET, text.c_str(), &to->sin_addr) != 1) return false;
    std::memcpy(out->bytes, &to->sin_addr, 4);
    out->length = sizeof(sockaddr_in);
    return true;
  }
  auto* to = reinterpret_cast<sockaddr_in6*>(&out->address);
  to->sin6_family = AF_INET6;
  if (inet_pton(AF_INET6, text.c_str(), &to->sin6_addr) != 1) return false;
  // link-local unicast and link-scope multicast (ff02::12) need the zone
  if (IN6_IS_ADDR_LINKLOCAL(&to->sin6_addr) || IN6_IS_ADDR_MC_LINKLOCAL(&to->sin6_addr)) {
    to->sin6_scope_id = route.ifindex;
  }
  std::memcpy(out->bytes, &to->sin6_addr, 16);
  out->length = sizeof(sockaddr_in6);
  return true;
}

int SendDatagram(int fd, const VrrpRoute& route, const VrrpDestination& to, const uint8_t* payload, size_t length) {
  struct iovec iov;
  iov.iov_base = const_cast<uint8_t*>(payload);
  iov.iov_len = length;
  struct msghdr message;
  std::memset(&message, 0, sizeof message);
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_name = const_cast<sockaddr_storage*>(&to.address);
  message.msg_namelen = to.length;

  // the source address (if configured) and the interface travel with each datagram
  alignas(struct cmsghdr) unsigned char control[CMSG_SPACE(sizeof(struct in6_pktinfo))];
  std::memset(control, 0, sizeof control);
  message.msg_control = control;
  if (route.family == 4) {
    message.msg_controllen = CMSG_SPACE(sizeof(struct in_pktinfo));
    struct cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = IPPROTO_IP;
    header->cmsg_type = IP_PKTINFO;
    header->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
    struct in_pktinfo info;
    std::memset(&info, 0, sizeof info);
    info.ipi_ifindex = static_cast<int>(route.ifindex);
    if (route.hasSource) info.ipi_spec_dst = route.source4;
    std::memcpy(CMSG_DATA(header), &info, sizeof info);
  } else {
    message.msg_controllen = CMSG_SPACE(sizeof(struct in6_pktinfo));
    struct cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = IPPROTO_IPV6;
    header->cmsg_type = IPV6_PKTINFO;
    header->cmsg_len = CMSG_LEN(sizeof(struct in6_pktinfo));
    struct in6_pktinfo info;
    std::memset(&info, 0, sizeof info);
    info.ipi6_ifindex = route.ifindex;
    if (route.hasSource) info.ipi6_addr = route.source6;
    std::memcpy(CMSG_DATA(header), &info, sizeof info);
  }
  ssize_t n;
  do {
    n = ::sendmsg(fd, &message, 0);
  } while (n < 0 && errno == EINTR);
  return n < 0 ? errno : 0;
}

}  // namespace ballast
