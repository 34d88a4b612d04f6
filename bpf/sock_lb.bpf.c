/*
 * ballast's socket load balancer: cgroup sock_addr programs that turn a connect() to a
 * node-local endpoint (127.0.0.1:7443, [::1]:7443, VIP:6443) into a connect() to one ready
 * apiserver, before the first packet exists, and translate getpeername() back.
 *
 *   hook                    program         does
 *   cgroup/connect4         ballast_conn4   endpoint -> backend, remembers cookie -> endpoint
 *   cgroup/connect6         ballast_conn6   (same, IPv6; ::ffff:a.b.c.d is the IPv4 endpoint a.b.c.d)
 *   cgroup/getpeername4     ballast_peer4   backend -> endpoint for a remembered cookie
 *   cgroup/getpeername6     ballast_peer6   (same, IPv6; v4-mapped back to ::ffff:<endpoint>)
 *
 * Only TCP sockets (SOCK_STREAM, IPPROTO_TCP) of the host network namespace are rewritten: a
 * cgroup holds processes, not namespaces, and a pod in the same cgroup subtree has its own
 * 127.0.0.1. The host namespace is named by its cookie in ballast_lb_cfg (0: rewrite nothing).
 * An endpoint with no entry or with count 0 is left alone, so the connect() reaches whatever
 * listens there or gets a RST: never a silent drop.
 *
 * Entry points only turn a helper's result into "proceed" (cilium's bpf_sock.c split): they never
 * reject a connect(), so a bug here can misroute at worst, never cut a node off.
 * Helpers: bpf-helpers(7); context fields: struct bpf_sock_addr in include/uapi/linux/bpf.h.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "sock_lb.h"

/* sys/socket.h and netinet/in.h are not usable with -target bpf */
#define BALLAST_SOCK_STREAM 1
#define BALLAST_IPPROTO_TCP 6
/* the verdict of a sock_addr program: 1 proceeds; getpeername hooks must return exactly 1 */
#define BALLAST_SYS_PROCEED 1

/*
 * endpoint -> ready backends. Not preallocated (BPF_F_NO_PREALLOC): user space replaces a
 * value whole, and in a preallocated hash the replaced element goes back to the free list at
 * once, where the next update may reuse it while a program on another CPU still reads it (a
 * torn backend list). Without preallocation the old element is freed after an RCU grace
 * period, so a program always sees one whole value, old or new.
 */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, BALLAST_LB_MAX_ENDPOINTS);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, ballast_lb_key);
  __type(value, struct ballast_lb_endpoint);
} ballast_lb_ep SEC(".maps");

/*
 * socket cookie -> (endpoint, backend), for getpeername(). An LRU hash rather than sk_storage:
 * user space can look a cookie up here (resetBackend destroys only the sockets sock_diag reports
 * with a cookie found in this map, i.e. the ones balanced through an endpoint), which it cannot
 * do with sk_storage without holding the socket. Cookies are never reused (a 64-bit counter),
 * so an entry left behind by a closed socket is harmless until the LRU evicts it.
 */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, BALLAST_LB_MAX_REVERSE);
  __type(key, __u64);
  __type(value, struct ballast_lb_reverse);
} ballast_lb_rev SEC(".maps");

/* [BALLAST_LB_CONFIG_NETNS_COOKIE]: the host netns cookie (SO_NETNS_COOKIE); 0 = unset */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} ballast_lb_cfg SEC(".maps");

static __always_inline int ballast_is_tcp(const struct bpf_sock_addr *ctx) {
  return ctx->type == BALLAST_SOCK_STREAM && ctx->protocol == BALLAST_IPPROTO_TCP;
}

static __always_inline int ballast_in_host_netns(struct bpf_sock_addr *ctx) {
  __u32 slot = BALLAST_LB_CONFIG_NETNS_COOKIE;
  const __u64 *host = bpf_map_lookup_elem(&ballast_lb_cfg, &slot);
  if (!host || *host == 0) return 0;
  return bpf_get_netns_cookie(ctx) == *host;
}

/* copies one backend for `key` into *out; 0 when the endpoint is unknown or has none ready */
static __always_inline int ballast_pick(const ballast_lb_key *key, __u8 family, struct ballast_lb_addr *out) {
  const struct ballast_lb_endpoint *ep = bpf_map_lookup_elem(&ballast_lb_ep, key);
  if (!ep) return 0;
  __u32 count = ep->count;
  if (count == 0 || count > BALLAST_LB_MAX_BACKENDS) return 0;
  __u32 i = bpf_get_prandom_u32() % count;
  /*
   * for the verifier: clang knows i < count <= 64 and would drop a plain bounds check, but the
   * verifier cannot follow the division, so hide i from the optimiser and check it again
   */
  asm volatile("" : "+r"(i));
  if (i >= BALLAST_LB_MAX_BACKENDS) return 0;
  *out = ep->backends[i];
  return out->family == family;
}

static __always_inline void ballast_remember(struct bpf_sock_addr *ctx, const ballast_lb_key *endpoint,
                                             const struct ballast_lb_addr *backend) {
  struct ballast_lb_reverse rev = {.endpoint = *endpoint, .backend = *backend};
  __u64 cookie = bpf_get_socket_cookie(ctx);
  /* a failed update only costs getpeername() its translation */
  bpf_map_update_elem(&ballast_lb_rev, &cookie, &rev, BPF_ANY);
}

/* connect4: 1 when the destination was rewritten */
static __always_inline int ballast_sock4_fwd(struct bpf_sock_addr *ctx) {
  if (!ballast_is_tcp(ctx) || !ballast_in_host_netns(ctx)) return 0;
  ballast_lb_key key = {};
  key.family = BALLAST_AF_INET;
  key.addr[0] = ctx->user_ip4;      /* network order, as is */
  key.port = (__u16)ctx->user_port; /* the __be16 sin_port, held in the low 16 bits */
  struct ballast_lb_addr backend;
  if (!ballast_pick(&key, BALLAST_AF_INET, &backend)) return 0;
  ballast_remember(ctx, &key, &backend);
  ctx->user_ip4 = backend.addr[0];
  ctx->user_port = backend.port;
  return 1;
}

/*
 * ::ffff:a.b.c.d, an IPv4-mapped IPv6 address (RFC 4291 §2.5.5.2): what an AF_INET6 socket of
 * a dual-stack runtime (Java by default, anything that resolves "localhost" through
 * getaddrinfo(AI_V4MAPPED)) dials for an IPv4 peer. The kernel carries such a connect() out
 * as IPv4 (tcp_v6_connect -> tcp_v4_connect), and cgroup/connect4 never runs for it: this is
 * the only hook that sees it.
 */
static __always_inline int ballast_is_v4mapped(const __u32 ip6[4]) {
  return ip6[0] == 0 && ip6[1] == 0 && ip6[2] == bpf_htonl(0x0000ffff);
}

static __always_inline void ballast_set_ip6(struct bpf_sock_addr *ctx, __u32 a0, __u32 a1, __u32 a2, __u32 a3) {
  ctx->user_ip6[0] = a0;
  ctx->user_ip6[1] = a1;
  ctx->user_ip6[2] = a2;
  ctx->user_ip6[3] = a3;
}

/*
 * connect6 to ::ffff:a.b.c.d:port: the IPv4 endpoint a.b.c.d:port of the IPv4 map, rewritten
 * to the v4-mapped form of an IPv4 backend (the socket stays AF_INET6). Remembered as IPv4
 * endpoint and backend, as a connect4 would be: user space finds the socket's backend the same
 * way whichever family the socket has. 1 when rewritten.
 */
static __always_inline int ballast_sock6_fwd_v4mapped(struct bpf_sock_addr *ctx, __u32 ip4) {
  ballast_lb_key key = {};
  key.family = BALLAST_AF_INET;
  key.addr[0] = ip4;
  key.port = (__u16)ctx->user_port;
  struct ballast_lb_addr backend;
  if (!ballast_pick(&key, BALLAST_AF_INET, &backend)) return 0;
  ballast_remember(ctx, &key, &backend);
  ballast_set_ip6(ctx, 0, 0, bpf_htonl(0x0000ffff), backend.addr[0]);
  ctx->user_port = backend.port;
  return 1;
}

/* connect6: 1 when rewritten; a v4-mapped destination is the IPv4 endpoint it maps */
static __always_inline int ballast_sock6_fwd(struct bpf_sock_addr *ctx) {
  if (!ballast_is_tcp(ctx) || !ballast_in_host_netns(ctx)) return 0;
  const __u32 dst[4] = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]};
  if (ballast_is_v4mapped(dst)) return ballast_sock6_fwd_v4mapped(ctx, dst[3]);
  ballast_lb_key key = {};
  key.family = BALLAST_AF_INET6;
  key.addr[0] = dst[0];
  key.addr[1] = dst[1];
  key.addr[2] = dst[2];
  key.addr[3] = dst[3];
  key.port = (__u16)ctx->user_port;
  struct ballast_lb_addr backend;
  if (!ballast_pick(&key, BALLAST_AF_INET6, &backend)) return 0;
  ballast_remember(ctx, &key, &backend);
  ballast_set_ip6(ctx, backend.addr[0], backend.addr[1], backend.addr[2], backend.addr[3]);
  ctx->user_port = backend.port;
  return 1;
}

/*
 * getpeername4: the peer is reported as the endpoint when this socket was balanced AND its peer
 * is still the backend it was given (a socket that later connected elsewhere is not touched).
 */
static __always_inline int ballast_sock4_rev(struct bpf_sock_addr *ctx) {
  if (!ballast_is_tcp(ctx)) return 0;
  __u64 cookie = bpf_get_socket_cookie(ctx);
  const struct ballast_lb_reverse *rev = bpf_map_lookup_elem(&ballast_lb_rev, &cookie);
  if (!rev || rev->backend.family != BALLAST_AF_INET) return 0;
  if (rev->backend.addr[0] != ctx->user_ip4 || rev->backend.port != (__u16)ctx->user_port) return 0;
  ctx->user_ip4 = rev->endpoint.addr[0];
  ctx->user_port = rev->endpoint.port;
  return 1;
}

/*
 * getpeername6, as getpeername4; a socket balanced through ballast_sock6_fwd_v4mapped has an
 * IPv4 entry and its peer in the v4-mapped form, and is reported as ::ffff:<endpoint>.
 */
static __always_inline int ballast_sock6_rev(struct bpf_sock_addr *ctx) {
  if (!ballast_is_tcp(ctx)) return 0;
  __u64 cookie = bpf_get_socket_cookie(ctx);
  const struct ballast_lb_reverse *rev = bpf_map_lookup_elem(&ballast_lb_rev, &cookie);
  if (!rev || rev->backend.port != (__u16)ctx->user_port) return 0;
  const __u32 peer[4] = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]};
  if (rev->backend.family == BALLAST_AF_INET) {
    if (!ballast_is_v4mapped(peer) || peer[3] != rev->backend.addr[0]) return 0;
    ballast_set_ip6(ctx, 0, 0, bpf_htonl(0x0000ffff), rev->endpoint.addr[0]);
  } else if (rev->backend.family == BALLAST_AF_INET6) {
    if (rev->backend.addr[0] != peer[0] || rev->backend.addr[1] != peer[1] || rev->backend.addr[2] != peer[2] ||
        rev->backend.addr[3] != peer[3])
      return 0;
    ballast_set_ip6(ctx, rev->endpoint.addr[0], rev->endpoint.addr[1], rev->endpoint.addr[2], rev->endpoint.addr[3]);
  } else {
    return 0;
  }
  ctx->user_port = rev->endpoint.port;
  return 1;
}

SEC("cgroup/connect4")
int ballast_conn4(struct bpf_sock_addr *ctx) {
  ballast_sock4_fwd(ctx);
  return BALLAST_SYS_PROCEED;
}

SEC("cgroup/connect6")
int ballast_conn6(struct bpf_sock_addr *ctx) {
  ballast_sock6_fwd(ctx);
  return BALLAST_SYS_PROCEED;
}

SEC("cgroup/getpeername4")
int ballast_peer4(struct bpf_sock_addr *ctx) {
  ballast_sock4_rev(ctx);
  return BALLAST_SYS_PROCEED;
}

SEC("cgroup/getpeername6")
int ballast_peer6(struct bpf_sock_addr *ctx) {
  ballast_sock6_rev(ctx);
  return BALLAST_SYS_PROCEED;
}

/*
 * No GPL-only helper is called (map ops, prandom, socket and netns cookies are all open to any
 * license), so the project's own license is declared.
 */
char LICENSE[] SEC("license") = "Apache-2.0";
