// Inline launches (inline_policy.h). A launch hands its task to the stream's
// worker: the worker wakes (a futex wake, a context switch) and runs it while
// the launching thread goes on. That overlap is the device's asynchrony, and
// it is worth its cost only while the worker finds a core. When every core is
// busy (two ranks on two cores, a host thread that never waits, other
// processes), the woken worker waits for a core the launching thread must
// give up, and the process pays two switches per task for no overlap. Then
// (auto mode) a task launched onto an idle stream runs on the launching
// thread, as the help-first waits run queued tasks on a waiting one: in
// launch order (the stream was idle: nothing of it runs or waits), with its
// errors recorded for the next synchronization as on a worker.
//
// Whether cores are busy is measured, never assumed: each thread of the
// device (the launching threads and the workers) reads its own run-queue
// delay from the scheduler (/proc/thread-self/schedstat: time run, time
// waited to run) at most every kSampleNs, and CoreContention decides from
// the share of the time these threads wanted a core that they waited for
// one. Without schedstat (a kernel without CONFIG_SCHED_INFO) nothing is
// measured and auto mode keeps the workers.
#include "inline_policy.h"

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>

namespace omr {
namespace engine {

namespace {

constexpr int64_t kSampleNs = 2'000'000;    // a thread samples its counters at most this often
constexpr int64_t kMinWantedNs = 200'000;   // a window in which the thread wanted a core less says nothing

std::atomic<int> g_mode{static_cast<int>(InlineMode::kNever)};
std::mutex g_mu;
CoreContention g_contention;  // under g_mu
std::atomic<bool> g_inline{false};  // g_contention.inlineNow()

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The calling thread's scheduler counters, read from one descriptor (pread:
// no open per sample). Reopened in a forked child (the inherited descriptor
// names the parent's thread).
struct ThreadCounters {
  int fd = -1;
  pid_t pid = 0;
  bool unavailable = false;
  int64_t last_ns = 0;
  unsigned long long run = 0, wait = 0;
  ~ThreadCounters() {
    if (fd >= 0) close(fd);
  }
  void sample() {
    if (unavailable) return;
    const int64_t now = nowNs();
    if (now - last_ns < kSampleNs) return;
    const pid_t self = getpid();
    if (fd < 0 || pid != self) {
      if (fd >= 0) close(fd);
      fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
      pid = self;
      last_ns = 0;
      if (fd < 0) {
        unavailable = true;
        return;
      }
    }
    char buf[128];
    const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    unsigned long long r = 0, w = 0;
    if (n <= 0 || (buf[n] = '\0', std::sscanf(buf, "%llu %llu", &r, &w)) != 2) {
      unavailable = true;
      return;
    }
    if (last_ns && r >= run && w >= wait) {
      const int64_t waited = static_cast<int64_t>(w - wait), wanted = static_cast<int64_t>(r - run) + waited;
      if (wanted >= kMinWantedNs) {
        std::lock_guard<std::mutex> lk(g_mu);
        g_contention.feed(waited, wanted, now);
        g_inline.store(g_contention.inlineNow(), std::memory_order_relaxed);
      }
    }
    run = r;
    wait = w;
    last_ns = now;
  }
};
thread_local ThreadCounters t_counters;

}  // namespace

void CoreContention::feed(int64_t waited_ns, int64_t wanted_ns, int64_t now_ns) {
  if (wanted_ns <= 0) return;
  const double fraction = std::min(1.0, static_cast<double>(waited_ns) / static_cast<double>(wanted_ns));
  smoothed_ = (1 - kWeight) * smoothed_ + kWeight * fraction;
  if (!inline_) {
    if (smoothed_ >= kEnter) {
      // a probe of the workers that met contention again soon: stay inline longer
      dwell_ns_ = probed_ && now_ns - since_ns_ < kSettledNs ? std::min(2 * dwell_ns_, kMaxDwellNs) : kMinDwellNs;
      inline_ = true;
      since_ns_ = now_ns;
    } else if (now_ns - since_ns_ >= kSettledNs) {
      probed_ = false;  // the workers kept their cores: the next contention is news
      dwell_ns_ = kMinDwellNs;
    }
  } else if (smoothed_ < kLeave && now_ns - since_ns_ >= dwell_ns_) {
    inline_ = false;
    probed_ = true;
    since_ns_ = now_ns;
  }
}

void setInlineMode(InlineMode mode) { g_mode.store(static_cast<int>(mode)); }

InlineMode inlineMode() { return static_cast<InlineMode>(g_mode.load(std::memory_order_relaxed)); }

bool runLaunchHere() {
  switch (inlineMode()) {
    case InlineMode::kNever:
      return false;
    case InlineMode::kAlways:
      return true;
    case InlineMode::kAuto:
      break;
  }
  t_counters.sample();
  return g_inline.load(std::memory_order_relaxed);
}

void sampleWorkerThread() {
  if (inlineMode() == InlineMode::kAuto) t_counters.sample();
}

double coreContentionSmoothed() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_contention.smoothed();
}

bool coreContentionInline() { return g_inline.load(); }

}  // namespace engine
}  // namespace omr
