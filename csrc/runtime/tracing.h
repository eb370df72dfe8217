// Device work in traces (torch.profiler's device kernels): the driver
// reports each task it ran to the sink set here (omr::setTracing). Work the
// host runs for the device itself, after waiting for the stream (the
// fallback's synchronous calls), is reported to the same sink, as a task of
// that stream.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

#include "openmtia/runtime.h"

namespace openmtia {

// Sets (or, with nullptrs, clears) the trace sink, the tag hook and the
// submission hook: the runtime's (omr::setTracing) and HostWorkTrace's.
void setTracing(omr::TagHook tag, omr::TraceSink sink, omr::SubmitHook submitted);

// Reports its scope, while a trace records, as a task `name` of the current
// stream of `device` (its tag: the tag hook's on this thread).
class HostWorkTrace {
 public:
  HostWorkTrace(c10::DeviceIndex device, const char* name);
  ~HostWorkTrace();
  HostWorkTrace(const HostWorkTrace&) = delete;
  HostWorkTrace& operator=(const HostWorkTrace&) = delete;

 private:
  omr::TraceSink sink_;
  omr::TaskRecord record_{};
};

}  // namespace openmtia
