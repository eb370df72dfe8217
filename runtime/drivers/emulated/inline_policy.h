// Inline launches: whether a task launched onto an idle stream runs on the
// launching thread instead of being handed to the stream's worker
// (RuntimeConfig::inline_launches; see inline_policy.cpp).
#pragma once

#include <cstdint>
#include <mutex>

namespace omr {
namespace engine {

// 0 never (the default: every task goes to its worker), 1 always (a task
// launched onto an idle stream runs on the launching thread), 2 auto: there
// while the process's own threads wait for a core (CoreContention). Auto is
// not the default yet: measured, it cost more than it saved (inline tasks
// run their parallel kernels on the launching thread's own OpenMP team,
// beside the workers' teams: docs/benchmarks.md).
enum class InlineMode { kNever = 0, kAlways = 1, kAuto = 2 };
void setInlineMode(InlineMode mode);
InlineMode inlineMode();

// Whether a task launched now onto an idle stream runs on the calling
// (launching) thread. In auto mode it samples the calling thread's
// scheduler counters first (at most every few milliseconds).
bool runLaunchHere();
// A stream worker, after running tasks: samples its scheduler counters (at
// most every few milliseconds).
void sampleWorkerThread();

// The auto mode's decision from measurements, kept apart for tests: fed with
// the fraction of the time a thread of the device wanted a core that it
// spent waiting for one (its run-queue delay over its run time plus delay,
// from /proc/thread-self/schedstat), it says whether the process has a core
// to spare for a worker. With cores to spare, a woken worker starts at once
// and the launch overlaps its task; without, the worker waits for a core the
// launching thread then gives up, and the hand-off costs both threads'
// switches for nothing: the task runs where it was launched.
//
// Inline from a smoothed wait fraction of kEnter up; back to workers below
// kLeave after the inline period has lasted `dwell`, which doubles (up to
// kMaxDwellNs) each time the workers' period ends in contention again within
// kSettledNs (as with two ranks on two cores: while both launch inline no
// thread waits, and each probe of the workers brings the wait back), and
// returns to kMinDwellNs once the workers keep their cores that long.
class CoreContention {
 public:
  static constexpr double kEnter = 0.20;
  static constexpr double kLeave = 0.05;
  static constexpr double kWeight = 0.3;  // of a new sample in the smoothed fraction
  static constexpr int64_t kMinDwellNs = 20'000'000;
  static constexpr int64_t kMaxDwellNs = 2'000'000'000;
  static constexpr int64_t kSettledNs = 1'000'000'000;

  // A sample: `waited_ns` of `wanted_ns` (run time plus run-queue delay) at `now_ns`.
  void feed(int64_t waited_ns, int64_t wanted_ns, int64_t now_ns);
  bool inlineNow() const { return inline_; }
  double smoothed() const { return smoothed_; }
  int64_t dwellNs() const { return dwell_ns_; }

 private:
  double smoothed_ = 0;
  bool inline_ = false;
  bool probed_ = false;   // the current workers' period began by leaving an inline one
  int64_t since_ns_ = 0;  // when the current period (inline or workers) began
  int64_t dwell_ns_ = kMinDwellNs;
};

// The process's CoreContention (auto mode), for tests and benchmarks.
double coreContentionSmoothed();
bool coreContentionInline();

}  // namespace engine
}  // namespace omr
