// Whether the device's OpenMP teams busy-wait between parallel regions.
//
// The emulated device's kernels run on the host's cores, in OpenMP teams of
// the stream workers (kernel_threads.cpp). libgomp lets a team's idle threads spin
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
// threads wait for the device (omr::hostWaitedNs: synchronizes, synchronous
// copies, launches into a full queue). While that share is low
// (a host-bound program: the host needs its core) it keeps an idle OpenMP
// team of two of its own: libgomp then counts more threads than cores, and
// every team's idle threads spin briefly and sleep. While it is high (a
// device-bound program) it ends that team, and the device's teams spin.
// Time in which the host neither launched nor waited does not count. A
// thread's count of threads (and so a kernel's result) never depends on
// this: only how its idle threads wait.
#include "aten/threads/team_wait.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
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
constexpr auto kPoll = std::chrono::milliseconds(5);
// Below this share, with the teams asleep, the control waits for the next
// host wait instead of polling (a program that is done with the device
// costs no wake-ups).
constexpr double kIdleShare = 0.05;
// A poll in which no host thread launched or waited does not count: the
// share is that of the time the host used the device, so a program that
// pauses between bursts of work (a data loader's wait, a bench's turns)
// finds its teams as its last burst left them. After this many such polls
// in a row, the control waits for the host's next launch or wait.
constexpr int kIdlePollsToPark = 20;

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
  std::atomic<bool> parked{false};  // the control waits for a host wait (the observer wakes it)
  bool stop = false;                // under mu: stopTeamWait() asks the control to end
  pid_t running_in = 0;             // under mu: the process whose control thread runs (0: none)
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
    std::unique_lock<std::mutex> lk(mu);
    if (adaptive) adapt(lk);
    else cv.wait(lk, [this] { return stop; });
    lk.unlock();
    pause_all(1);  // (its team's thread ends with it)
    state = kOff;
    lk.lock();
    running_in = 0;
    cv.notify_all();
  }
  // The share of recent time (an exponential average over kWindow) in which
  // host threads waited, from the client's total every kPoll (polls in
  // which the host neither launched nor waited do not count); while the
  // teams sleep and the host has not waited for a while, the control itself
  // sleeps until a host thread waits; once the host has not used the device
  // for kIdlePollsToPark polls, until it launches or waits. Returns once
  // asked to stop.
  void adapt(std::unique_lock<std::mutex>& lk) {
    using Clock = std::chrono::steady_clock;
    double share = 0;
    int64_t waited = omr::hostWaitedNs();
    int64_t launches = omr::hostLaunches();
    int idle_polls = 0;
    auto last = Clock::now();
    while (!stop) {
      const bool idle = idle_polls >= kIdlePollsToPark;
      if (((state == kSleeping && share < kIdleShare) || idle) && !waiting()) {
        parked = true;  // (seq_cst: a thread that starts waiting now sees it, or we see its count)
        // after a pause, a host that comes back to launch without waiting
        // (a host-bound loop) must find the teams asleep: its next launch
        // wakes the control too
        const int64_t before = omr::hostLaunches();
        if (idle) omr::observeNextLaunch();
        cv.wait(lk, [&] { return stop || waiting() || (idle && omr::hostLaunches() != before); });
        parked = false;
        // (the time parked does not count: the host did not wait in it, or
        // used the device without waiting while the share was below kIdleShare)
        last = Clock::now();
        waited = omr::hostWaitedNs();
        launches = omr::hostLaunches();
        idle_polls = 0;
        continue;
      }
      cv.wait_for(lk, kPoll, [this] { return stop; });
      if (stop) return;
      const auto now = Clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      last = now;
      const int64_t total = omr::hostWaitedNs();
      const int64_t launched = omr::hostLaunches();
      const bool used = total != waited || launched != launches || waiting();
      const double recent = dt > 0 ? std::min(1.0, double(total - waited) * 1e-9 / dt) : 0;
      waited = total;
      launches = launched;
      if (!used) {  // the host did not use the device: the share stays
        ++idle_polls;
        continue;
      }
      idle_polls = 0;
      const double decay = std::exp(-dt / kWindow);
      share = share * decay + recent * (1 - decay);
      if (state == kSleeping && share >= kSpinShare) {
        lk.unlock();
        spinTeams();
        lk.lock();
      } else if (state == kSpinning && share <= kSleepShare) {
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
      if (!c.parked.load()) return;  // (polling: nothing to do on the waiting thread)
      std::lock_guard<std::mutex> lk(c.mu);
      c.cv.notify_all();
    });
    const bool adaptive = teamWaitMode() == TeamWait::kAdaptive;
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.stop) return;  // (the process is exiting)
    c.running_in = getpid();
    std::thread([adaptive] { control().run(adaptive); }).detach();
  });
}

void stopTeamWait() {
  Control& c = control();
  std::unique_lock<std::mutex> lk(c.mu);
  c.stop = true;
  if (c.running_in != getpid()) return;  // none started (or a forked child's copy: its thread is not here)
  c.cv.notify_all();
  c.cv.wait(lk, [&c] { return c.running_in == 0; });
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
