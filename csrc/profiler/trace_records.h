// What a trace records of device work while torch.profiler records with
// MTIA's activities (kineto_plugin.cpp turns it into Kineto's events): each
// submission's launch on its thread, and each piece of work the driver ran
// (runtime/tracing.h's hooks). Every thread records into a buffer of its
// own, so that the launching thread and the device's threads never wait for
// each other's records (a launch and a task report cost them a contended
// lock each, and the task's name an allocation, before: 1.1-1.4 us a launch,
// now 0.2); a session's end takes the buffers' records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace openmtia::profiler {

struct Record {  // a piece of device work, as the driver reported it
  int device;
  int stream;
  const std::string* name;  // interned (internName)
  uint64_t correlation;
  int64_t start_ns, end_ns;
  std::string error;  // its failure's message ("" if it ran)
};

struct Launch {  // a submission's launch event
  uint64_t correlation;
  uint64_t external;  // the launching host op's correlation (Kineto's), or 0
  int32_t tid;
  int64_t start_ns, end_ns;
};

// Starts recording (the runtime's tracing hooks set): the session's id.
uint64_t beginRecording();
// Stops session `id`'s recording (the hooks cleared); nothing if it was not
// recording (0).
void endRecording(uint64_t id);
// Appends session `id`'s records and launches, taken from the threads'
// buffers, in time order.
void takeRecords(uint64_t id, std::vector<Record>& records, std::vector<Launch>& launches);
// The host op Kineto's correlation id belongs to, on the calling thread
// (a launch's "External id"), pushed and popped around each op.
void pushHostCorrelation(uint64_t id);
void popHostCorrelation();

}  // namespace openmtia::profiler
