// DDP's step-time statistics for mtia modules (avg_forward_compute_time,
// avg_backward_comm_time, ... in DDP's logging data): like CUDA's timer,
// device events recorded on the current stream, read when DDP asks.
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <chrono>
#include <thread>

#include "openmtia/runtime.h"
#include "runtime/device.h"
#include "runtime/graphs.h"
#include "runtime/stream.h"

namespace c10d {
namespace {

class MtiaTimer : public Timer {
 public:
  explicit MtiaTimer(c10::Device device) : device_(openmtia::deviceIndexOf(device)) {
    for (auto& e : events_) e = omr::eventCreate(/*enable_timing=*/true);
  }
  ~MtiaTimer() override {
    for (auto* e : events_) omr::eventDestroy(e);
  }

  void record(Event event) override {
    Timer::record(event);  // the host time too, as DDP's CPU timer keeps it
    omr::StreamId stream = openmtia::streamId(openmtia::currentStream(device_));
    if (openmtia::isCapturing(device_)) return;
    omr::eventRecord(events_[static_cast<int>(event)], device_, stream);
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    omr::Event* a = events_[static_cast<int>(start)];
    omr::Event* b = events_[static_cast<int>(end)];
    if (omr::eventDevice(a) < 0 || omr::eventDevice(b) < 0) return std::nullopt;
    // Waits without eventSynchronize, which would take (and raise here) a
    // failed task's error that belongs to the stream's next synchronization.
    while (!omr::eventQuery(a) || !omr::eventQuery(b)) std::this_thread::sleep_for(std::chrono::microseconds(50));
    try {
      double ms = omr::eventElapsedMs(a, b);
      if (ms < 0) return std::nullopt;
      return static_cast<int64_t>(ms * 1e6);
    } catch (const omr::Error&) {
      return std::nullopt;
    }
  }

 private:
  c10::DeviceIndex device_;
  omr::Event* events_[5];
};

C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kMTIA, MtiaTimer)

}  // namespace
}  // namespace c10d
