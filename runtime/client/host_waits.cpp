// Host threads waiting for the devices' work, and the launches. The driver
// runs the waits; the client counts the calls that wait (synchronizations,
// synchronous copies, and launches into a full queue through the driver's
// wait hook) and the launches, so that the framework's policy can tell
// whether the host needs the cores (an emulated device runs its work on
// them: csrc/aten/threads/team_wait.h).
#include "host_waits.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "openmtia/runtime.h"

namespace omr {
namespace {

std::atomic<int> g_waiting{0};
std::atomic<int64_t> g_since_ns{0};   // when the count last went from zero to one
std::atomic<int64_t> g_waited_ns{0};  // the time it was above zero, before that
std::atomic<HostWaitObserver> g_observer{nullptr};
std::atomic<int64_t> g_launches{0};
std::atomic<bool> g_observe_launch{false};  // observeNextLaunch()

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void tell() {
  if (HostWaitObserver observer = g_observer.load(std::memory_order_acquire)) observer();
}

}  // namespace

int hostThreadsWaiting() noexcept { return g_waiting.load(); }

int64_t hostWaitedNs() noexcept {
  const int64_t waited = g_waited_ns.load();
  return g_waiting.load() > 0 ? waited + std::max<int64_t>(0, nowNs() - g_since_ns.load()) : waited;
}

void setHostWaitObserver(HostWaitObserver observer) noexcept { g_observer.store(observer); }

int64_t hostLaunches() noexcept { return g_launches.load(std::memory_order_relaxed); }

void observeNextLaunch() noexcept { g_observe_launch.store(true); }

namespace detail {
void countLaunch() noexcept {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (g_observe_launch.load(std::memory_order_relaxed) && g_observe_launch.exchange(false)) tell();
}
}  // namespace detail

namespace detail {

HostWaitScope::HostWaitScope() noexcept {
  if (g_waiting.fetch_add(1) == 0) {
    g_since_ns.store(nowNs());
    tell();
  }
}

HostWaitScope::~HostWaitScope() {
  const int64_t since = g_since_ns.load();  // (set before this thread's count was added)
  if (g_waiting.fetch_sub(1) == 1) {
    g_waited_ns.fetch_add(std::max<int64_t>(0, nowNs() - since));
    tell();
  }
}

}  // namespace detail
}  // namespace omr
