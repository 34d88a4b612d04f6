#include "advert_pacer.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

// HMAC-SHA256 from the OpenSSL inside node (its symbols are exported for addons, like libuv's;
// OpenSSL 3's one-shot HMAC(3), not deprecated), declared here so that building needs no
// OpenSSL headers and loading links no second libcrypto.
extern "C" {
typedef struct evp_md_st EVP_MD;
const EVP_MD* EVP_sha256(void);
unsigned char* HMAC(const EVP_MD* md, const void* key, int key_len, const unsigned char* data, size_t data_len,
                    unsigned char* out, unsigned int* out_len);
}

namespace ballast {

namespace {

// the trailer of docs/auth.md (src/vrrp/auth.ts verifies it): magic, version, 2 reserved bytes,
// the sequence (u64, big-endian), then HMAC-SHA256 over family | source | destination |
// message | the trailer's first 12 bytes
constexpr uint8_t kAuthMagic = 0xba;
constexpr uint8_t kAuthVersion = 1;
constexpr size_t kAuthHead = 12;
constexpr size_t kMacLength = 32;

}  // namespace

AdvertPacer::AdvertPacer(int fd, const VrrpRoute& route) : fd_(fd), route_(route) {}

AdvertPacer::~AdvertPacer() {
  Stop();
}

int64_t AdvertPacer::Now() {
  // steady_clock is CLOCK_MONOTONIC on Linux, the clock condition_variable waits on
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t AdvertPacer::CoverSlackNs(int64_t intervalNs) {
  // 5 % of the interval, at least 3 ms (libuv's timers run up to ~2 ms late on an idle loop),
  // at most half of it (what it was before issue 27)
  const int64_t slack = std::max<int64_t>(intervalNs / 20, 3'000'000);
  return std::min<int64_t>(slack, intervalNs / 2);
}

int AdvertPacer::Start(int rtPriority) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (started_ || stop_) return -1;
  int refused = 0;
  if (rtPriority > 0) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
    pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
    struct sched_param param = {};
    param.sched_priority = rtPriority;
    pthread_attr_setschedparam(&attr, &param);
    refused = pthread_create(&thread_, &attr, Main, this);
    pthread_attr_destroy(&attr);
    if (refused == 0) {
      started_ = true;
      return 0;
    }
  }
  const int rc = pthread_create(&thread_, nullptr, Main, this);
  if (rc != 0) throw std::system_error(rc, std::generic_category(), "pthread_create");
  started_ = true;
  return refused;
}

void AdvertPacer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool running = started_ && !stop_;
    // also before Start: nothing may run after a Stop
    stop_ = true;
    adverts_.clear();
    if (!running) return;
  }
  wake_.notify_all();
  pthread_join(thread_, nullptr);
}

void AdvertPacer::Pace(std::vector<PacedAdvert> adverts, int64_t intervalNs, int64_t holdNs) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    adverts_ = std::move(adverts);
    intervalNs_ = intervalNs;
    holdNs_ = holdNs;
    holding_ = false;
    lastEngineSend_.store(Now());
  }
  wake_.notify_all();
}

void AdvertPacer::NoteSend() {
  const int64_t now = Now();
  const int64_t before = lastEngineSend_.exchange(now);
  std::lock_guard<std::mutex> lock(mutex_);
  if (adverts_.empty()) return;
  const double silence = static_cast<double>(now - before) / 1e6;
  if (silence > stats_.longestSilenceMs) stats_.longestSilenceMs = silence;
}

void AdvertPacer::SetAuth(std::vector<uint8_t> key, uint64_t firstSequence) {
  std::lock_guard<std::mutex> lock(mutex_);
  key_ = std::move(key);
  sequence_.store(firstSequence);
}

uint64_t AdvertPacer::TakeSequence() {
  return sequence_.fetch_add(1);
}

PacerStats AdvertPacer::Stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void* AdvertPacer::Main(void* self) {
  // the name `top -H` and /proc/PID/task/*/comm show (15 bytes at most)
  pthread_setname_np(pthread_self(), "vrrp-pacer");
  static_cast<AdvertPacer*>(self)->Run();
  return nullptr;
}

void AdvertPacer::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (adverts_.empty()) {
      wake_.wait(lock);
      continue;
    }
    const int64_t now = Now();
    const int64_t engine = lastEngineSend_.load();
    if (now - engine >= holdNs_) {
      // the engine has been silent for the hold time: let the VIP go (look again each interval)
      if (!holding_) {
        holding_ = true;
        stats_.holds++;
      }
      wake_.wait_for(lock, std::chrono::nanoseconds(intervalNs_));
      continue;
    }
    holding_ = false;
    const bool covering = lastPacerSend_ > engine;
    const int64_t due = covering ? lastPacerSend_ + intervalNs_ : engine + intervalNs_ + CoverSlackNs(intervalNs_);
    if (now < due) {
      wake_.wait_for(lock, std::chrono::nanoseconds(due - now));
      continue;
    }
    if (!covering) stats_.covers++;
    SendRound();
    lastPacerSend_ = now;
  }
}

void AdvertPacer::SendRound() {
  // no allocation on this thread: a message is at most 1500 bytes (the socket's limit)
  uint8_t input[1 + 2 * 16 + 1500 + kAuthHead];
  uint8_t payload[1500 + kAuthHead + kMacLength];
  for (const PacedAdvert& a : adverts_) {
    const uint8_t* data = a.message.data();
    size_t length = a.message.size();
    if (!key_.empty()) {
      // the signed payload: message | trailer head | HMAC (docs/auth.md)
      const uint64_t sequence = TakeSequence();
      uint8_t head[kAuthHead] = {kAuthMagic, kAuthVersion, 0, 0};
      for (int i = 0; i < 8; i++) head[4 + i] = static_cast<uint8_t>(sequence >> (56 - 8 * i));
      const size_t addressLength = route_.family == 4 ? 4 : 16;
      const void* source =
          route_.family == 4 ? static_cast<const void*>(&route_.source4) : static_cast<const void*>(&route_.source6);
      size_t n = 0;
      input[n++] = static_cast<uint8_t>(route_.family);
      std::memcpy(input + n, source, addressLength);
      n += addressLength;
      std::memcpy(input + n, a.to.bytes, addressLength);
      n += addressLength;
      std::memcpy(input + n, data, length);
      n += length;
      std::memcpy(input + n, head, kAuthHead);
      n += kAuthHead;
      unsigned int macLength = 0;
      std::memcpy(payload, data, length);
      std::memcpy(payload + length, head, kAuthHead);
      if (HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), input, n, payload + length + kAuthHead,
               &macLength) == nullptr ||
          macLength != kMacLength) {
        stats_.sendErrors++;
        stats_.lastErrno = EINVAL;
        continue;
      }
      data = payload;
      length += kAuthHead + kMacLength;
    }
    const int err = SendDatagram(fd_, route_, a.to, data, length);
    if (err == 0) {
      stats_.sent++;
    } else {
      stats_.sendErrors++;
      stats_.lastErrno = err;
    }
  }
}

}  // namespace ballast
