// The calling thread's scheduling policy (sched(7)): the election worker raises itself to
// SCHED_FIFO when vrrp.realtimePriority asks for it, so that its adverts go out on time on a
// CPU-starved machine. Per thread: sched_setscheduler(2) with pid 0 changes the calling thread
// only, not the process's other threads.
#pragma once

#include <napi.h>

namespace ballast {

// setThreadRealtime(priority: number): undefined — priority 1..99: SCHED_FIFO at that priority
// (with SCHED_RESET_ON_FORK, so nothing it spawns inherits it); 0: back to SCHED_OTHER.
// Throws TypeError for a priority outside 0..99; SystemError "sched_setscheduler" with the errno
// otherwise (EPERM without CAP_SYS_NICE, or in a cgroup without a real-time budget when the
// kernel has CONFIG_RT_GROUP_SCHED).
Napi::Value SetThreadRealtime(const Napi::CallbackInfo& info);

}  // namespace ballast
