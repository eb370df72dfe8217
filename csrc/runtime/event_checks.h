// Checks carried by events: an event recorded while an EventCheckScope is
// alive on the thread carries the scope's check, and a stream made to wait
// for that event (the guard's block(): torch's device-aware futures, Event.wait)
// runs the check as a task after its wait. A check throws to fail that task,
// so a failure of the work the event marks becomes the waiting stream's error,
// raised at its next synchronization: a stream that waits for failed work
// fails, as a stream that ran it does.
//
// The collectives' futures use it (distributed/backend.cpp): a future of a
// collective of mtia tensors completes when the collective is issued, with an
// event after the collective's task, as NCCL's do; whoever waits for the
// future waits on the device, and the collective's failure reaches them.
#pragma once

#include <functional>
#include <memory>

namespace openmtia {

using EventCheck = std::shared_ptr<const std::function<void()>>;

class EventCheckScope {
 public:
  explicit EventCheckScope(EventCheck check);
  ~EventCheckScope();
  EventCheckScope(const EventCheckScope&) = delete;
  EventCheckScope& operator=(const EventCheckScope&) = delete;

 private:
  EventCheck previous_;
};

// For the device guard: an event (re)recorded on this thread takes the current
// scope's check or none; the check of an event, if any; an event destroyed.
void noteEventRecorded(void* event);
EventCheck eventCheck(void* event);
void forgetEvent(void* event) noexcept;

}  // namespace openmtia
