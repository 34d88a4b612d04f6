// The VIP data plane's flows in conntrack (ctnetlink over libmnl): established flows per DNAT
// target, and deleting the oldest flows of one target (the rebalancer, src/dataplane/rebalance.ts).
#pragma once

#include <napi.h>

namespace ballast {

// conntrackVipFlows({ family: 4|6, vips: string[], port, reset?: { address, port, count } })
//   -> { backends: [{ address, port, established }], scanned, matched, timestamped,
//        reset?: { deleted, youngestStartNs } }
Napi::Value ConntrackVipFlows(const Napi::CallbackInfo& info);

}  // namespace ballast
