// Host threads waiting for the devices' work. The driver runs the waits; the
// client counts the calls that wait (synchronizations, synchronous copies,
// and launches into a full queue through the driver's wait hook), so that
// the framework's policy can tell whether the host needs the cores (an
// emulated device runs its work on them: csrc/aten/team_wait.h).
#include "host_waits.h"

#include <atomic>

#include "openmtia/runtime.h"

namespace omr {
namespace {

std::atomic<int> g_waiting{0};
std::atomic<HostWaitObserver> g_observer{nullptr};

void tell() {
  if (HostWaitObserver observer = g_observer.load(std::memory_order_acquire)) observer();
}

}  // namespace

int hostThreadsWaiting() noexcept { return g_waiting.load(); }

void setHostWaitObserver(HostWaitObserver observer) noexcept { g_observer.store(observer); }

namespace detail {

HostWaitScope::HostWaitScope() noexcept {
  if (g_waiting.fetch_add(1) == 0) tell();
}

HostWaitScope::~HostWaitScope() {
  if (g_waiting.fetch_sub(1) == 1) tell();
}

}  // namespace detail
}  // namespace omr
