// Device work in traces (see tracing.h).
#include "runtime/tracing.h"

#include <atomic>
#include <chrono>

#include "runtime/stream.h"

namespace openmtia {
namespace {

std::atomic<omr::TagHook> g_tag{nullptr};
std::atomic<omr::TraceSink> g_sink{nullptr};

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void setTracing(omr::TagHook tag, omr::TraceSink sink, omr::SubmitHook submitted) {
  g_tag.store(tag);
  g_sink.store(sink);
  omr::setTracing(tag, sink, submitted);
}

HostWorkTrace::HostWorkTrace(c10::DeviceIndex device, const char* name)
    : sink_(g_sink.load(std::memory_order_relaxed)) {
  if (!sink_) return;
  omr::TagHook tag = g_tag.load(std::memory_order_relaxed);
  record_.device = device;
  record_.stream = currentStreamId(device);
  record_.name = name;
  record_.tag = tag ? tag() : 0;
  record_.start_ns = nowNs();
}

HostWorkTrace::~HostWorkTrace() {
  if (!sink_) return;
  record_.end_ns = nowNs();
  sink_(record_);
}

}  // namespace openmtia
