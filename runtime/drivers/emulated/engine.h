// The emulation engine (engine.cpp): the "hardware" behind the emulated
// driver (driver.cpp), which is its only user besides its own tests.
// The framework never sees this API: it reaches the engine through the
// driver ABI (openmtia/driver.h) and the client (openmtia/runtime.h).
//
// Device memory is host memory with its own per-device capacity and
// accounting; every stream is an in-order queue run by its own worker
// thread, or by a host thread that waits for it (help-first waits). The
// engine reads no environment: the driver passes its options (configure()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "openmtia/runtime.h"  // the shared types: errors, properties, allocations, copy kinds, RuntimeConfig

namespace omr {
namespace engine {

using omr::Allocation;
using omr::CopyKind;
using omr::DeviceProperties;
using omr::Error;
using omr::ErrorCode;
using omr::HostWorkHook;
using omr::IdleHook;
using omr::kTaskMayBlock;
using omr::kTaskWaitsForHost;
using omr::kMaxDevices;
using omr::OutOfMemoryError;
using omr::RuntimeConfig;
using omr::StreamId;
using omr::Task;
using omr::TaskError;
using omr::WaitHook;
using omr::formatBytes;
using omr::parseByteSize;

// The settings; only before the engine's first use (else kInvalidValue).
void configure(const RuntimeConfig& config);

// A child forked after the parent used a device gets Error(kForked) from
// everything that would use one (as CUDA refuses to re-initialize).
bool inBadFork() noexcept;

// ---------------------------------------------------------------- devices
int deviceCount() noexcept;
void checkDevice(int device);  // throws Error(kInvalidDevice)
DeviceProperties deviceProperties(int device);
void memGetInfo(int device, size_t* free_bytes, size_t* total_bytes);

// ---------------------------------------------------------------- memory
// 256-byte aligned; 0 bytes -> nullptr; OutOfMemoryError past capacity.
void* deviceMalloc(int device, size_t bytes);
// Waits until every stream of the device ran the work enqueued so far, then frees.
void deviceFree(int device, void* ptr);
Allocation pointerAllocation(const void* ptr);
int pointerDevice(const void* ptr);  // -1: none
void* hostMallocPinned(size_t bytes);
void hostFreePinned(void* ptr);
bool isPinned(const void* ptr);

// ---------------------------------------------------------------- streams
// Stream ids are per device, in the order streamCreate made them (no pools,
// no default stream, no priorities: those are the client's policy; every
// stream here has a worker thread of its own, started at its first use).
void checkStream(int device, StreamId stream);
StreamId streamCreate(int device, int64_t label);  // `label`: its number in messages and records
void streamDestroy(int device, StreamId stream);   // once it ran what was launched on it

// HostTask (openmtia/runtime.h): a task as the driver ABI hands it over.
// destroy(user), if set, runs on a host thread (a later launch, query or sync
// of the stream) once the task is done with; in a graph, once the graph drops it.
using omr::HostTask;

size_t launchQueueDepth();
void setWaitHook(WaitHook hook);
void setIdleHook(IdleHook hook);
void setHostWorkHook(HostWorkHook hook);
// For the engine's tests: while held, workers claim no task (a waiting host
// thread then runs them all: help-first); released, they go on.
void holdWorkersForTesting(bool hold);
// Enqueues the task (waiting while the stream's queue is full) and returns.
// If it throws, the task was not taken: destroy is not called. A failed task
// records its error on the stream, raised (TaskError) at the next sync.
void launch(int device, StreamId stream, const char* name, HostTask task);
void launch(int device, StreamId stream, const char* name, Task task);  // boxed into a HostTask
bool launchBlocking();
bool onStreamWorker() noexcept;
// Called by a running task about to spread over several cores (an OpenMP
// team of its thread): a stream runs its tasks on its worker, whose team
// persists, until kSerialTasksBeforeHostRuns tasks in a row ran without this
// call (help-first waits and inline launches leave them to it: one team, not
// a host thread's beside the worker's). Returns whether the calling task
// runs on a host thread that claimed it from a worker (its team is then
// best ended after it).
bool workRunsParallel() noexcept;
bool streamQuery(int device, StreamId stream);
void streamSynchronize(int device, StreamId stream);
void deviceSynchronize(int device);
void deviceWaitIdle(int device);  // raises nothing, destroys no task
// Work the host runs for the device itself (a synchronous call) named
// `name`, on `stream`: whether an armed fault fails it (faults.h); if so the
// failure is the stream's error, raised at its next synchronization.
bool hostWorkFaults(int device, StreamId stream, const char* name);
// Data work of the stream received from outside the device: whether an armed
// corrupt fault flipped a bit of it (faults::corrupt, by the stream's label).
bool dataReceived(int device, StreamId stream, const char* name, void* data, size_t bytes);
void stopWorkers();               // from then on tasks run on the launching thread

// ---------------------------------------------------------------- tracing
struct TaskRecord {
  int device;
  int64_t stream;  // the stream's label
  const char* name;
  uint64_t tag;
  int64_t start_ns, end_ns;
  const char* error = nullptr;  // the task's failure, or null
};
using TagHook = uint64_t (*)();
using TraceSink = void (*)(const TaskRecord& record);  // on the worker thread
void setTracing(TagHook tag, TraceSink sink);

// ---------------------------------------------------------------- graphs
struct Graph;
Graph* graphCreate();
void graphDestroy(Graph* graph);
void streamBeginCapture(int device, StreamId stream, Graph* graph);
void streamEndCapture(int device, StreamId stream);
bool streamIsCapturing(int device, StreamId stream);
size_t graphTaskCount(const Graph* graph);
std::vector<std::string> graphTaskNames(const Graph* graph);
void graphLaunch(Graph* graph, int device, StreamId stream);
void graphClear(Graph* graph);

// ---------------------------------------------------------------- events
struct Event;
Event* eventCreate(bool enable_timing);
void eventDestroy(Event* event);
void eventRecord(Event* event, int device, StreamId stream);
void streamWaitEvent(int device, StreamId stream, Event* event);
bool eventQuery(Event* event);
void eventSynchronize(Event* event);
double eventElapsedMs(Event* start, Event* end);
int eventDevice(Event* event);

// ---------------------------------------------------------------- copies
void memcpy(void* dst, const void* src, size_t bytes, CopyKind kind);
void memcpyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, int device, StreamId stream);

}  // namespace engine
}  // namespace omr
