// Whether the device's OpenMP teams busy-wait between parallel regions.
//
// The emulated device's kernels run on the host's cores, in OpenMP teams of
// the stream workers (threads.cpp). libgomp lets a team's idle threads spin
// for their next region (~300K pauses, ~15 ms here) while the process has no
// more OpenMP threads than cores, and only ~100 pauses otherwise (they sleep,
// and the next region wakes them). It does not count the host thread, the
// stream workers and the communication threads: a worker's team of two
// spinning on a 2-core host beside a busy host thread left one of its threads
// without a core at each barrier, until a scheduler tick. A DLRM train step
// (TorchRec, one process) took 11-14 ms so, 3.8 ms with the spinning short,
// CPU PyTorch 3.5 ms. But a device that runs while the host waits is best
// left spinning: the small GPT's step took 31 ms spinning, 35-45 ms not (a
// wake-up per parallel region).
//
// So the control thread (`mtia-teams`) watches how much of the time host
// threads wait for the device (omr::hostThreadsWaiting: synchronizes,
// synchronous copies, launches into a full queue). While that share is low
// (a host-bound program: the host needs its core) it keeps an idle OpenMP
// team of two of its own: libgomp then counts more threads than cores, and
// every team's idle threads spin briefly and sleep. While it is high (a
// device-bound program) it ends that team, and the device's teams spin. A
// thread's count of threads (and so a kernel's result) never depends on
// this: only how its idle threads wait.
#include "aten/team_wait.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "openmtia/runtime.h"

namespace openmtia {
namespace {

// The device's teams spin while host threads have waited for the device at
// least kSpinShare of the recent time (an exponential average over kWindow
// seconds), and sleep again below kSleepShare: a host-bound loop (a DLRM
// train step: its host thread busy launching, waiting briefly in a few
// .tolist()) stays below; a device-bound one (the GPT's step, a loop of
// table-batched lookups) above, through its host thread's launches.
constexpr double kWindow = 0.02;
constexpr double kSpinShare = 0.6;
constexpr double kSleepShare = 0.4;

TeamWait readMode() {
  const char* s = std::getenv("OPENMTIA_TEAM_WAIT");
  if (!s || !*s || std::strcmp(s, "adaptive") == 0) return TeamWait::kAdaptive;
  if (std::strcmp(s, "spin") == 0) return TeamWait::kSpin;
  if (std::strcmp(s, "sleep") == 0) return TeamWait::kSleep;
  std::fprintf(stderr, "openmtia: ignoring OPENMTIA_TEAM_WAIT=%s (adaptive, spin or sleep)\n", s);
  return TeamWait::kAdaptive;
}

enum State { kOff, kSpinning, kSleeping };

// The control thread and its state (never destroyed: the thread outlives
// static destruction, and waiting threads call the observer until exit).
struct Control {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> state{kOff};
  void (*parallel)(void (*)(void*), void*, unsigned, unsigned) = nullptr;  // GOMP_parallel
  int (*pause_all)(int) = nullptr;                                        // omp_pause_resource_all

  bool waiting() { return omr::hostThreadsWaiting() > 0; }
  // An idle team of two on this thread: libgomp's count of its threads
  // exceeds the cores from now on.
  void sleepTeams() {
    parallel([](void*) {}, nullptr, 2, 0);
    state = kSleeping;
  }
  void spinTeams() {
    pause_all(1);  // omp_pause_soft: this thread's idle team ends
    state = kSpinning;
  }
  void run(bool adaptive) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);  // (signals go to the program's threads)
    pthread_setname_np(pthread_self(), "mtia-teams");
    sleepTeams();
    if (!adaptive) {
      for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
    }
    // The share of recent time (an average over kWindow) in which a host
    // thread waited: the teams spin from kSpinShare, sleep again below
    // kSleepShare. Between two changes of the host's state the share moves
    // along a known curve: the control sleeps until it would cross the
    // threshold, or the state changes.
    using Clock = std::chrono::steady_clock;
    double share = 0;
    bool was_waiting = waiting();
    auto last = Clock::now();
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      const bool spinning = state == kSpinning;
      double cross = -1;  // seconds until the share crosses the next threshold (-1: it does not)
      if (spinning && !was_waiting) cross = kWindow * std::log(share / kSleepShare);
      if (!spinning && was_waiting) cross = kWindow * std::log((1 - share) / (1 - kSpinShare));
      auto changed = [&] { return waiting() != was_waiting; };
      if (cross < 0) {
        cv.wait(lk, changed);
      } else {
        cv.wait_for(lk, std::chrono::duration<double>(cross), changed);
      }
      const auto now = Clock::now();
      const double decay = std::exp(-std::chrono::duration<double>(now - last).count() / kWindow);
      last = now;
      share = share * decay + (was_waiting ? 1 - decay : 0);
      was_waiting = waiting();
      if (!spinning && share >= kSpinShare - 1e-9) {
        lk.unlock();
        spinTeams();
        lk.lock();
      } else if (spinning && share <= kSleepShare + 1e-9) {
        lk.unlock();
        sleepTeams();
        lk.lock();
      }
    }
  }
};

Control& control() {
  static Control* c = new Control;
  return *c;
}

}  // namespace

TeamWait teamWaitMode() {
  static const TeamWait mode = readMode();
  return mode;
}

void beforeParallelKernel(int threads) {
  static std::atomic<bool> started{false};
  if (started.load(std::memory_order_relaxed) || threads <= 1 || teamWaitMode() == TeamWait::kSpin) return;
  // a synchronous driver runs its tasks on the launching host thread:
  // nothing then competes with the kernel's threads
  if (!omr::onStreamWorker()) return;
  static std::once_flag once;
  std::call_once(once, [] {
    started = true;
    Control& c = control();
    c.parallel = reinterpret_cast<void (*)(void (*)(void*), void*, unsigned, unsigned)>(
        dlsym(RTLD_DEFAULT, "GOMP_parallel"));
    c.pause_all = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "omp_pause_resource_all"));
    if (!c.parallel || !c.pause_all) return;  // not libgomp: its own waits stay
    omr::setHostWaitObserver([] {
      Control& c = control();
      std::lock_guard<std::mutex> lk(c.mu);
      c.cv.notify_all();
    });
    const bool adaptive = teamWaitMode() == TeamWait::kAdaptive;
    std::thread([adaptive] { control().run(adaptive); }).detach();
  });
}

bool teamsSleep() { return control().state.load(std::memory_order_relaxed) == kSleeping; }

const char* teamWaitState() {
  switch (control().state.load()) {
    case kSpinning: return "spin";
    case kSleeping: return "sleep";
    default: return "off";
  }
}

}  // namespace openmtia
