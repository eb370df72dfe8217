// openmtia device runtime: the framework's C++ view of the loaded driver.
//
// This header has no torch dependency. Its implementation is the client
// (client/driver_client.cpp): it loads a driver (openmtia/driver.h, chosen by
// OPENMTIA_DRIVER) and calls it only through the driver's table, with the
// policy above the driver: the stream pools, the OPENMTIA_* configuration,
// launch blocking, and driver statuses turned back into these exceptions.
// The emulator's own API is drivers/emulated/engine.h, behind the emulated driver.
#pragma once

#include <cxxabi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "openmtia/recycler.h"

namespace omr {

enum class ErrorCode {
  kOutOfMemory,    // device allocation past capacity
  kInvalidDevice,  // device index out of range
  kInvalidValue,   // bad argument (unknown stream, pointer not owned, ...)
  kTaskFailed,     // an asynchronous task failed; reported at a sync point
  kCapturing,      // not permitted while the stream is being captured into a graph
  kForked,         // the device was used by the parent of this forked process
  kUnavailable,    // no driver: it failed to load (the message says why)
  kNotSupported,   // the driver lacks the capability
  kInternal,       // anything else the driver reports
  kDeviceLost,     // the device is lost: every later call on it fails
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(int device, size_t requested, size_t used, size_t capacity);
  OutOfMemoryError(int device, size_t requested, size_t used, size_t capacity, std::string message);
  int device;
  size_t requested, used, capacity;
};

class TaskError : public Error {
 public:
  TaskError(std::string task, const std::string& msg)
      : Error(ErrorCode::kTaskFailed, msg), task(std::move(task)) {}
  std::string task;  // name of the failed task
};

// "1.50 MiB" and the like.
std::string formatBytes(size_t bytes);

// ---------------------------------------------------------------- devices
struct DeviceProperties {
  std::string name;
  size_t total_memory = 0;
  int major = 0, minor = 0;   // compute capability
  int processor_count = 0;
  bool host_addressable = false;  // device pointers may be dereferenced on the host
  bool asynchronous = false;      // tasks run on the device while the host goes on (OMTIA_DEVICE_ASYNC)
};

constexpr int kMaxDevices = 64;  // OPENMTIA_DEVICE_COUNT may not exceed it

// A child created by fork() after the parent used a device (started a stream
// or allocated device memory) has no stream workers and shares no device with
// its parent: every entry that would use a device raises Error(kForked), as
// CUDA refuses to re-initialize in a forked subprocess. Device count and
// properties stay readable.
bool inBadFork() noexcept;

// The runtime's settings; -1 / 0: the default (2 devices of 8 GiB, queues of
// 1024 tasks, no launch blocking). The client reads them from
// OPENMTIA_DEVICE_COUNT, OPENMTIA_DEVICE_MEMORY, OPENMTIA_LAUNCH_QUEUE_DEPTH
// and OPENMTIA_LAUNCH_BLOCKING and passes the first three to the driver as
// initialize() options. Only before the runtime's first use (else
// kInvalidValue).
struct RuntimeConfig {
  int device_count = -1;
  size_t device_memory = 0;
  size_t launch_queue_depth = 0;
  int launch_blocking = -1;  // 0 / 1: OPENMTIA_LAUNCH_BLOCKING's
  int strict_memory = -1;    // 1: host threads cannot touch device memory (OPENMTIA_STRICT_MEMORY)
  int help_first = -1;       // 0 / 1: a waiting host thread runs the stream's queued tasks (OPENMTIA_HELP_FIRST, default 1)
  // 0 / 1: a task with parallel kernels keeps its stream's next tasks on the
  // worker, whose thread team persists (OPENMTIA_ONE_TEAM, default 1)
  int one_team = -1;
  // where a task launched onto an idle stream runs (OPENMTIA_INLINE_LAUNCHES):
  // 0 "never" on the launching thread (the default), 1 "always" there, 2
  // "auto": there while the process's threads wait for cores
  int inline_launches = -1;
};
void configure(const RuntimeConfig& config);

// The loaded driver's name ("emulated", "reference", ...), or why none
// could be loaded ("" if one was).
std::string driverName();
std::string driverError();

// Number of devices (RuntimeConfig; default 2). Never throws.
int deviceCount() noexcept;
void checkDevice(int device);  // throws Error(kInvalidDevice)
DeviceProperties deviceProperties(int device);
// Bytes currently allocated on the device and its capacity
// (OPENMTIA_DEVICE_MEMORY, default 8G; accepts 512M, 4G, 1.5G, 1024 ...).
void memGetInfo(int device, size_t* free_bytes, size_t* total_bytes);
// Parses a byte size such as "512M", "4G", "4GiB", "1024". Throws on bad text.
size_t parseByteSize(const std::string& text);

// ---------------------------------------------------------------- memory
// Allocates device memory (256-byte aligned). 0 bytes -> nullptr.
// Throws OutOfMemoryError past capacity; never aborts.
void* deviceMalloc(int device, size_t bytes);
// Like cudaFree, waits until every stream of the device has run the work
// enqueued so far (which may still use the memory), then frees.
void deviceFree(int device, void* ptr);
// Device that owns ptr (anywhere inside an allocation), or -1.
int pointerDevice(const void* ptr);
// The device or pinned allocation holding ptr: its device (-1: pinned host
// memory or none), start and size (nullptr, 0: none).
struct Allocation {
  int device = -1;
  void* base = nullptr;
  size_t size = 0;
};
Allocation pointerAllocation(const void* ptr);

void* hostMallocPinned(size_t bytes);
void hostFreePinned(void* ptr);
bool isPinned(const void* ptr);  // anywhere inside a pinned allocation

// ---------------------------------------------------------------- streams
// Stream ids are per device: 0 is the default stream, 1..kPoolSize the normal
// priority pool, kPoolSize+1..2*kPoolSize the high priority pool.
using StreamId = int;
constexpr int kPoolSize = 8;
constexpr StreamId kDefaultStream = 0;
int streamPriority(StreamId stream);  // 0 normal, -1 high
// Next stream of the pool (round robin). priority < 0 selects the high pool.
StreamId streamFromPool(int device, int priority);
void checkStream(int device, StreamId stream);

using Task = std::function<void()>;
// Each stream queues at most launchQueueDepth() pending tasks
// (OPENMTIA_LAUNCH_QUEUE_DEPTH, default 1024), like a GPU's launch queue: a
// launch into a full queue waits until the worker has made room.
size_t launchQueueDepth();
// Every wait of the runtime for room in a launch queue runs through this hook,
// if set: e.g. to release an interpreter lock while waiting.
using WaitHook = void (*)(void (*wait)(void*), void* arg);
void setWaitHook(WaitHook hook);
// Called on a stream worker that ran every task queued to it, woke a host
// thread that slept waiting for one of them (in a synchronize of the stream
// or its device, or for room in its queue) and polled briefly for more,
// before it sleeps: e.g. to end the threads its kernels keep spinning for
// their next parallel region, which would hold the core the woken host
// thread needs.
using IdleHook = void (*)();
void setIdleHook(IdleHook hook);
// A task as the driver takes it (OmtiaLaunchArgs): fn(user) runs it and
// returns null, or the failure's message (valid until the thread's next
// task); destroy(user) runs on a host thread once the task is done with.
struct HostTask {
  const char* (*fn)(void* user) = nullptr;
  void* user = nullptr;
  void (*destroy)(void* user) = nullptr;
  uint32_t flags = 0;  // kTaskWaitsForHost, kTaskMayBlock, kTaskUntraced
};
// The task may block until a host thread acts (a test's gate; a callback that
// waits for the program): only a driver thread runs it, never a host thread
// that waits for its stream (setHostWorkHook) or launches it.
constexpr uint32_t kTaskWaitsForHost = 1u << 0;
// The task may wait for something outside its stream (another stream's work,
// another process: a collective, a wait for one): never run by the thread
// that launches it (the launch would block), though a host thread that waits
// for its stream may run it.
constexpr uint32_t kTaskMayBlock = 1u << 1;
// The task is the host's bookkeeping, not device work (it keeps a host
// buffer alive until a copy ran, checks a collective's outcome): a profiler
// sees neither its launch nor it (setTracing), as a real device's traces
// have no such task. It still runs in its stream's order.
constexpr uint32_t kTaskUntraced = 1u << 2;
// Called on a host thread around the device work it runs itself (begin 1,
// then 0): in a wait for a stream (help-first: it runs the stream's queued
// tasks instead of sleeping), or because the driver runs tasks on the
// launching thread. E.g. to give the thread back the kernel thread counts
// that the tasks set.
using HostWorkHook = void (*)(int begin);
void setHostWorkHook(HostWorkHook hook);
// Called by a running task about to spread over several cores (its thread's
// OpenMP team): the driver leaves the stream's next tasks to its own thread,
// whose team persists, rather than to host threads (help-first waits, inline
// launches), until tasks run without this call again. Returns whether this
// task runs on such a host thread (its team is best ended after the host
// work: setHostWorkHook's end). A driver of ABI < 1.3: false.
bool workRunsParallel();
// Enqueue a task; returns at once (or once its queue has room). The task runs
// on the stream's worker; what it captured is destroyed later on a host thread
// (at the next launch, query or synchronization of that stream), never on the
// worker. A task that fails records its error on the stream; the error is
// raised (as TaskError) at the next synchronization of that stream, its
// device, or an event recorded after it. The stream keeps running. The launch
// owns the task from the call on: if it throws, destroy has run (or will).
void launch(int device, StreamId stream, const char* name, HostTask task);
namespace detail {
// Runs f() as a task body: null, or what it throws as the failure's message
// (valid until the thread's next failure). A thread being ended
// (pthread_exit's unwinding) passes through.
template <typename F>
const char* runCatching(F&& f) {
  thread_local std::string message;
  try {
    f();
    return nullptr;
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  return message.c_str();
}
const char* runGuarded(void (*call)(void*), void* box);  // runCatching(call(box)), out of line
template <typename F>
struct TaskBox {
  F fn;
  static void call(void* box) { static_cast<TaskBox*>(box)->fn(); }
  static const char* run(void* box) { return runGuarded(&call, box); }
  static void destroy(void* box) { Recycler<TaskBox>::release(static_cast<TaskBox*>(box)); }
};
}  // namespace detail
// Any callable (a lambda, a Task) that throws on failure: moved into one box
// (from a per-thread free list: no std::function, no malloc per launch).
template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, HostTask>>>
void launch(int device, StreamId stream, const char* name, F&& fn, uint32_t flags = 0) {
  using Box = detail::TaskBox<std::decay_t<F>>;
  Box* box = Recycler<Box>::make(Box{std::forward<F>(fn)});
  launch(device, stream, name, HostTask{&Box::run, box, &Box::destroy, flags});
}
// With OPENMTIA_LAUNCH_BLOCKING=1 every launch waits for its task and raises
// its error at once (like CUDA_LAUNCH_BLOCKING).
bool launchBlocking();
// Whether the calling thread is a stream worker (it runs tasks), not a host
// thread that launches them.
bool onStreamWorker() noexcept;
bool streamQuery(int device, StreamId stream);
void streamSynchronize(int device, StreamId stream);
void deviceSynchronize(int device);  // all streams of the device
// Waits until every stream of the device ran the work enqueued so far; raises
// nothing and destroys no finished task (safe under the caller's locks).
void deviceWaitIdle(int device);
// Host threads waiting for the devices' work now: in a synchronize (of a
// stream, a device or an event), a synchronous copy, or a launch into a full
// queue. The observer, if set, is called by such a thread whenever the count
// goes from zero to non-zero or back (it reads the count: calls from two
// threads may arrive out of order); it should return at once. An emulated device runs its work on the
// host's cores: a waiting host thread leaves them to it (csrc/aten/threads/team_wait.h).
int hostThreadsWaiting() noexcept;
// The total time, in nanoseconds, during which at least one host thread
// waited so (it only grows).
int64_t hostWaitedNs() noexcept;
// The number of launches so far (it only grows): with hostWaitedNs, tells a
// host that uses the devices from one that does neither (between bursts of
// work, or done with them).
int64_t hostLaunches() noexcept;
using HostWaitObserver = void (*)();
void setHostWaitObserver(HostWaitObserver observer) noexcept;
// The observer is also called at the next launch (once, by the launching
// thread): a policy that stopped polling hears of a host that uses the
// devices again without waiting for them.
void observeNextLaunch() noexcept;
// Before the process tears down what tasks use (at exit, before static
// destructors run): waits until every stream has run the work launched so
// far, then ends the stream workers. From then on a launch runs its task on
// the launching thread before it returns; errors are still raised at the next
// synchronization. Irreversible; a no-op in a forked child.
void stopWorkers();

// ---------------------------------------------------------------- tracing
// What a profiler sees of the device (like CUPTI's activity records): with a
// sink set, every task reports its stream, name, start and end once it ran,
// with the tag the tag hook returned on the thread that launched it (e.g. the
// launching host op's correlation id). Times: nanoseconds since the Unix
// epoch (the system clock). Off (both nullptr) by default: then tracing
// costs one relaxed load per launch and per task.
struct TaskRecord {
  int device;
  StreamId stream;
  const char* name;  // valid during the sink's call
  uint64_t tag;
  int64_t start_ns, end_ns;
  const char* error = nullptr;  // the task's failure message, or null (valid during the call)
};
using TagHook = uint64_t (*)();
using TraceSink = void (*)(const TaskRecord& record);  // called on the worker thread
// Called on the submitting thread around each submission (a launch, a graph
// launch, an event record or wait, an asynchronous copy): with 1 before it,
// 0 once it was accepted or refused. The tag hook, if the driver calls it,
// runs in between: a profiler's launch event spans the two.
using SubmitHook = void (*)(int begin);
void setTracing(TagHook tag, TraceSink sink, SubmitHook submitted = nullptr);

// ---------------------------------------------------------------- faults
// Faults on demand, for tests of error paths (driver ABI 1.5-1.7; docs/faults.md):
// the driver fails as a real device would, when asked. A fault counts the
// events it matches (a device's allocations, pinned allocations, or the
// pieces of work of a device, stream and name) and fails from the `after`-th
// on `times` of them (0: every one), or each with a seeded probability.
enum class FaultKind {
  kDeviceOutOfMemory = 1,  // a device allocation: out of memory
  kPinnedOutOfMemory = 2,  // a pinned host allocation: out of memory
  kKernel = 3,             // a piece of work faults instead of running (its stream's error)
  kDeviceLost = 4,         // at a piece of work the device is lost (kDeviceLost from then on)
  kHang = 5,               // a piece of work hangs its stream until clearFaults() (or the process's end)
  kCorrupt = 6,            // data a piece of work received (a collective's payload) has a bit flipped
};
struct Fault {
  FaultKind kind = FaultKind::kKernel;
  int device = -1;      // -1: any
  StreamId stream = -1;  // kKernel: -1: any
  std::string name;      // kKernel: the work's name, e.g. "aten::mm" ("": any)
  uint64_t after = 1;
  uint64_t times = 1;
  double rate = 0;
  uint64_t seed = 0;
  bool sticky = false;  // kKernel: the fault poisons its device (every later call on it fails)
};
// A fault list as OPENMTIA_FAULTS gives it: faults separated by ";", each
// a kind (oom, pinned_oom, kernel, lost, hang, corrupt) and settings after ":" separated
// by "," (device=D, stream=S, op=NAME, sticky=1, after=N, times=N, rate=P,
// seed=N, rank=R, restart=N):
// "kernel:op=aten::mm,after=3;oom:device=1,times=0". A fault for another
// rank than `rank`, or another restart of an elastic job than `restart`
// (TorchElastic's count, 0 for its first run), is left out. Throws
// Error(kInvalidValue) saying what is wrong.
std::vector<Fault> parseFaults(const std::string& spec, int rank, int restart = 0);
// Arms a fault (kNotSupported: the driver injects none), or disarms them all.
// OPENMTIA_FAULTS's are armed when the driver loads (an unreadable list
// makes the devices unavailable, saying why).
void injectFault(const Fault& fault);
void clearFaults();
// Work the host runs for the device itself (a synchronous call, after
// waiting for `stream`) named `name`, about to run: whether an armed fault
// fails it; then the failure is the stream's error, raised at its next
// synchronization. False with a driver before ABI 1.6.
bool hostWorkFaults(int device, StreamId stream, const char* name);
// Work of `stream` named `name` received `bytes` at `data` (device memory,
// or host memory staged for it) from outside the device (a collective's
// payload): whether an armed corrupt fault flipped a bit of it. False with a
// driver before ABI 1.7, and with no fault ever armed (then no driver call).
bool dataReceived(int device, StreamId stream, const char* name, void* data, size_t bytes);

// ---------------------------------------------------------------- graphs
// While a stream is captured, tasks launched on it are recorded into a graph
// instead of running; synchronizing or querying it, or recording an event on
// it, raises kCapturing. A launched graph runs its tasks in order, as one task
// of the stream it is launched on; its tasks must be re-runnable.
struct Graph;  // opaque
Graph* graphCreate();
void graphDestroy(Graph* graph);  // destroys the recorded tasks on the calling thread
void streamBeginCapture(int device, StreamId stream, Graph* graph);
void streamEndCapture(int device, StreamId stream);
bool streamIsCapturing(int device, StreamId stream);
size_t graphTaskCount(const Graph* graph);
std::vector<std::string> graphTaskNames(const Graph* graph);  // in order
void graphLaunch(Graph* graph, int device, StreamId stream);
void graphClear(Graph* graph);  // drops the recorded tasks

// ---------------------------------------------------------------- events
struct Event;  // opaque
Event* eventCreate(bool enable_timing);
void eventDestroy(Event* event);
// Raises kInvalidValue when the event was recorded on another device before
// (an event belongs to the device it was first recorded on, as CUDA's do).
void eventRecord(Event* event, int device, StreamId stream);
// Work enqueued on `stream` after this call waits for the event's last record.
// A never-recorded event is ignored.
void streamWaitEvent(int device, StreamId stream, Event* event);
bool eventQuery(Event* event);  // true if never recorded or completed
void eventSynchronize(Event* event);
// Milliseconds between two completed timing events.
double eventElapsedMs(Event* start, Event* end);
int eventDevice(Event* event);  // -1 if never recorded

// ---------------------------------------------------------------- copies
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
// Synchronous copy: ordered after all work on the device's default stream is
// NOT implied; it copies now. For device-to-device, dst may be on another device.
void memcpy(void* dst, const void* src, size_t bytes, CopyKind kind);
// Asynchronous copy on (device, stream). `device` is the source device for
// device-to-device and device-to-host, the destination for host-to-device.
void memcpyAsync(void* dst, const void* src, size_t bytes, CopyKind kind,
                 int device, StreamId stream);

}  // namespace omr
