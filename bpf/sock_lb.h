/*
 * Shapes shared by the kernel side (sock_lb.bpf.c) and the user side (native/bpf_loader.cc) of
 * ballast's socket load balancer. Plain C with fixed-width types and explicit padding, so that
 * both compilers (clang -target bpf, g++ for the addon) lay the structs out identically; user
 * space zeroes every pad before writing a key (hash keys are compared bytewise).
 *
 * Byte order: every address and port in these structs is in NETWORK order, exactly as the
 * kernel hands them to a cgroup sock_addr program (struct bpf_sock_addr user_ip4, user_ip6[],
 * user_port: include/uapi/linux/bpf.h), so the program copies them without conversion.
 *
 *   ballast_lb_key / ballast_lb_backend (20 bytes)
 *   0               4               8               12              16      18  19  20
 *   +---------------+---------------+---------------+---------------+-------+---+---+
 *   | addr[0]       | addr[1]       | addr[2]       | addr[3]       | port  |fam|pad|
 *   +---------------+---------------+---------------+---------------+-------+---+---+
 *   IPv4: addr[0] only, addr[1..3] = 0.  fam: BALLAST_AF_INET / BALLAST_AF_INET6.
 */
#ifndef BALLAST_SOCK_LB_H
#define BALLAST_SOCK_LB_H

#include <linux/types.h> /* __u8 … __u64, for both compilers (linux-libc-dev) */

/* ready backends per endpoint: 64 apiservers is far beyond any control plane */
#define BALLAST_LB_MAX_BACKENDS 64
/* endpoints: 127.0.0.1:7443, [::1]:7443, VIP:6443 per family, with room to spare */
#define BALLAST_LB_MAX_ENDPOINTS 64
/*
 * connections whose getpeername() must be translated back: an LRU map, so a node with more
 * live rewritten connections than this loses the oldest entries (their getpeername() then
 * shows the backend instead of the endpoint: cosmetic, the connection itself is unaffected)
 */
#define BALLAST_LB_MAX_REVERSE 65536

/* the address families as the kernel numbers them (AF_INET, AF_INET6 in linux/socket.h) */
#define BALLAST_AF_INET 2
#define BALLAST_AF_INET6 10

/* the one slot of the config array */
#define BALLAST_LB_CONFIG_NETNS_COOKIE 0

struct ballast_lb_addr {
  __u32 addr[4]; /* network order */
  __u16 port;    /* network order */
  __u8 family;   /* BALLAST_AF_INET, BALLAST_AF_INET6 */
  __u8 pad;      /* zero */
};

/* key of the endpoints map: the address:port a client connect()s to */
typedef struct ballast_lb_addr ballast_lb_key;

/* value of the endpoints map; replaced whole by user space */
struct ballast_lb_endpoint {
  __u32 count; /* ready backends in backends[0 .. count-1]; 0: connect() is left untouched */
  __u32 pad;
  struct ballast_lb_addr backends[BALLAST_LB_MAX_BACKENDS];
};

/* value of the reverse map (key: socket cookie, bpf_get_socket_cookie) */
struct ballast_lb_reverse {
  struct ballast_lb_addr endpoint; /* what the client asked for */
  struct ballast_lb_addr backend;  /* what it was given */
};

#endif /* BALLAST_SOCK_LB_H */
