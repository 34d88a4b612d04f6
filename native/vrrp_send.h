// The send half of the VRRP socket, shared by the JavaScript send (vrrp_socket.cc) and the
// advert pacer's thread (advert_pacer.cc): one datagram out of one interface with its source.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ballast {

// Where adverts leave from: the socket's family, interface and (optional) source address.
struct VrrpRoute {
  int family = 4;  // 4 or 6
  unsigned ifindex = 0;
  bool hasSource = false;
  in_addr source4{};
  in6_addr source6{};
};

// A parsed destination: sockaddr_in / sockaddr_in6 with the zone set where the scope needs one
// (link-local unicast and ff02::/16 multicast go out of the route's interface).
struct VrrpDestination {
  sockaddr_storage address{};
  socklen_t length = 0;
  // the address bytes (4 or 16), as the auth trailer's MAC covers them (docs/auth.md)
  uint8_t bytes[16] = {};
};

// false when `text` is not an address of the route's family (inet_pton(3))
bool ParseDestination(const VrrpRoute& route, const std::string& text, VrrpDestination* out);

// sendmsg(2) of one IP payload to `to`, the interface and source as IP_PKTINFO / IPV6_PKTINFO
// (man 7 ip, man 7 ipv6), retried on EINTR. Returns 0, or the errno of the failure. Safe to
// call from any thread (the kernel serialises sends on one socket).
int SendDatagram(int fd, const VrrpRoute& route, const VrrpDestination& to, const uint8_t* payload, size_t length);

}  // namespace ballast
