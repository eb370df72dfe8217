// The client's count of host threads waiting for the devices' work, and of launches
// (omr::hostThreadsWaiting, omr::hostLaunches in openmtia/runtime.h).
#pragma once

namespace omr {
namespace detail {

// Counts the calling thread as waiting for the devices' work while it
// lives; tells the observer (setHostWaitObserver) when the count goes from
// zero to one and back.
class HostWaitScope {
 public:
  HostWaitScope() noexcept;
  ~HostWaitScope();
  HostWaitScope(const HostWaitScope&) = delete;
  HostWaitScope& operator=(const HostWaitScope&) = delete;
};

// Counts a launch (omr::hostLaunches).
void countLaunch() noexcept;

}  // namespace detail
}  // namespace omr
