#include "thread_sched.h"

#include <errno.h>
#include <sched.h>

#include "sys_error.h"

namespace ballast {

Napi::Value SetThreadRealtime(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "setThreadRealtime: priority must be a number");
  const double wanted = info[0].As<Napi::Number>().DoubleValue();
  if (!(wanted >= 0 && wanted <= 99) || wanted != static_cast<int>(wanted)) {
    throw Napi::TypeError::New(env, "setThreadRealtime: priority must be an integer 0..99");
  }
  struct sched_param param = {};
  param.sched_priority = static_cast<int>(wanted);
  const int policy = param.sched_priority > 0 ? (SCHED_FIFO | SCHED_RESET_ON_FORK) : SCHED_OTHER;
  if (::sched_setscheduler(0, policy, &param) != 0) {
    ThrowSystemErrorHint(env, errno, "sched_setscheduler", "the election thread",
                         errno == EPERM ? "SCHED_FIFO needs CAP_SYS_NICE (and a real-time budget in the cgroup where CONFIG_RT_GROUP_SCHED is on)" : "");
  }
  return env.Undefined();
}

}  // namespace ballast
