// The advert pacer: a native thread that keeps an Active router's adverts on the wire while the
// JavaScript thread that runs the election cannot (a GC pause, a long synchronous task, a CPU
// starved by other processes). The engine sends every advert itself; the pacer only watches the
// time of its last send, and when none came for Advertisement_Interval plus a slack (5 %, at
// least 3 ms, at most half the interval: CoverSlackNs) it sends the current adverts in its
// place, every Advertisement_Interval, until the engine sends again, or
// until the engine has been silent for the hold time (src/vrrp/engine.ts pacerHoldMs): then it
// stops, so that a wedged agent loses the VIP (RFC 9568 §6.4.2: a Backup takes over
// Master_Down_Interval after the last advert).
//
// With authenticated adverts (docs/auth.md) it signs what it sends (HMAC-SHA256 from the
// OpenSSL that node carries), taking sequence numbers from the counter the engine's own sends
// take theirs from (TakeSequence), so no number is used twice.
#pragma once

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "vrrp_send.h"

namespace ballast {

struct PacedAdvert {
  std::vector<uint8_t> message;  // the VRRP message (header and addresses), without a trailer
  VrrpDestination to;
};

struct PacerStats {
  uint64_t sent = 0;        // adverts the pacer sent
  uint64_t sendErrors = 0;  // sends that failed (lastErrno: the last one's errno)
  int lastErrno = 0;
  uint64_t covers = 0;          // times it began sending for a silent engine
  uint64_t holds = 0;           // times it stopped because the engine stayed silent for the hold time
  double longestSilenceMs = 0;  // the engine's longest silence while Active that the pacer saw, ms
};

class AdvertPacer {
 public:
  AdvertPacer(int fd, const VrrpRoute& route);
  ~AdvertPacer();
  AdvertPacer(const AdvertPacer&) = delete;
  AdvertPacer& operator=(const AdvertPacer&) = delete;

  // Starts the thread, at SCHED_FIFO `rtPriority` when it is > 0. Returns 0, or the errno that
  // refused the real-time policy (the thread then runs with normal scheduling); -1 when already
  // started or stopped; throws std::system_error when no thread can be created.
  int Start(int rtPriority);
  // Ends the thread (joins it). Idempotent. After it, nothing is sent.
  void Stop();
  // The adverts to repeat (in order, each once per round), Advertisement_Interval and the hold
  // time (ns); an empty list: not Active, send nothing. Counts as a send of the engine.
  void Pace(std::vector<PacedAdvert> adverts, int64_t intervalNs, int64_t holdNs);
  // The engine sent an advert now.
  void NoteSend();
  // Signs from now on with `key` (HMAC-SHA256); `firstSequence` is the next sequence number.
  void SetAuth(std::vector<uint8_t> key, uint64_t firstSequence);
  // The next sequence number, taken (the engine's sends and the pacer's share one counter).
  uint64_t TakeSequence();
  PacerStats Stats();
  // How late past Advertisement_Interval the engine's send may be before the pacer sends in its
  // place, ns. It was half the interval; a main thread kept busy by other work (20 scrapers of
  // the admin endpoint and a loaded CPU, issue 27) then put adverts up to 1.5 intervals apart,
  // where 1.1 is the bound. An engine that is a little late and then sends too puts two adverts
  // a few ms apart on the wire: harmless (RFC 9568 §6.4.3 Backups only restart their timer).
  static int64_t CoverSlackNs(int64_t intervalNs);

 private:
  static void* Main(void* self);
  void Run();
  void SendRound();
  static int64_t Now();

  const int fd_;
  const VrrpRoute route_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool started_ = false;
  pthread_t thread_{};
  // under mutex_
  std::vector<PacedAdvert> adverts_;
  int64_t intervalNs_ = 0;
  int64_t holdNs_ = 0;
  std::vector<uint8_t> key_;
  int64_t lastPacerSend_ = 0;
  bool holding_ = false;
  PacerStats stats_;
  // lock-free: the engine's thread writes, the pacer reads
  std::atomic<int64_t> lastEngineSend_{0};
  std::atomic<uint64_t> sequence_{0};
};

}  // namespace ballast
