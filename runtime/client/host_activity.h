// Which host threads are using a core now (runtime.h: activeHostThreads):
// the driver client notes each host thread's launches and the waits it
// spends blocked on the device.
#pragma once

namespace omr {
namespace host_activity {

// The calling thread launched work (nothing on a stream worker).
void noteLaunch() noexcept;

// While one lives, the calling thread is waiting for the device (a
// synchronize, a blocking copy, room in a launch queue): it uses no core.
class WaitScope {
 public:
  WaitScope() noexcept;
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  struct Slot* slot_;
};

}  // namespace host_activity
}  // namespace omr
