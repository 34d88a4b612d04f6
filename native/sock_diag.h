// TCP sockets of the caller's network namespace through NETLINK_SOCK_DIAG (sock_diag(7)):
// list the ones matching a filter, and destroy them (SOCK_DESTROY, CONFIG_INET_DIAG_DESTROY)
// so their owners see ECONNABORTED / a reset at once instead of waiting on a dead peer.
#pragma once

#include <napi.h>

namespace ballast {

// listSockets({ family: 4|6, dst?: {address, port?}, src?: {address, port?}, cookies?: bigint[] })
//   -> [{ cookie: bigint, state, src: {address, port}, dst: {address, port}, ifindex, inode }]
Napi::Value ListSockets(const Napi::CallbackInfo& info);
// destroySockets(same filter) -> number of sockets destroyed
Napi::Value DestroySockets(const Napi::CallbackInfo& info);

}  // namespace ballast
