// The emulator as a driver: openmtia/driver.h's table over the emulation
// engine (emulated.cpp, openmtia/runtime.h). Built as a shared library
// (libopenmtia_driver_emulated.so) whose one exported symbol is
// openmtia_driver_get; the engine's C++ stays inside it.
#include "openmtia/driver.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "openmtia/runtime.h"
#include "recycler.h"

struct OmtiaStream_ {
  int device;
  omr::StreamId id;
  int priority;
  int64_t label;
};

struct OmtiaEvent_ {
  omr::Event* event;
};

struct OmtiaGraph_ {
  omr::Graph* graph;
  std::vector<std::string> names;  // graph_task_name's: the recorded names, refreshed once more were recorded
};

namespace {

// The calling thread's last failure (get_last_error).
struct LastError {
  OmtiaStatus code = OMTIA_SUCCESS;
  std::string message, task;
  int device = 0;
  size_t requested = 0, used = 0, capacity = 0;
};
thread_local LastError t_error;

OmtiaStatus fail(OmtiaStatus code, std::string message) {
  t_error = LastError{};
  t_error.code = code;
  t_error.message = std::move(message);
  return code;
}

OmtiaStatus statusOf(omr::ErrorCode code) {
  switch (code) {
    case omr::ErrorCode::kOutOfMemory: return OMTIA_ERROR_OUT_OF_MEMORY;
    case omr::ErrorCode::kInvalidDevice: return OMTIA_ERROR_INVALID_DEVICE;
    case omr::ErrorCode::kInvalidValue: return OMTIA_ERROR_INVALID_VALUE;
    case omr::ErrorCode::kTaskFailed: return OMTIA_ERROR_TASK_FAILED;
    case omr::ErrorCode::kCapturing: return OMTIA_ERROR_CAPTURING;
    case omr::ErrorCode::kForked: return OMTIA_ERROR_FORKED;
    case omr::ErrorCode::kNotSupported: return OMTIA_ERROR_NOT_SUPPORTED;
    case omr::ErrorCode::kUnavailable:
    case omr::ErrorCode::kInternal: return OMTIA_ERROR_INTERNAL;
  }
  return OMTIA_ERROR_INTERNAL;
}

// Runs f, turning what the engine throws into a status and the thread's last error.
template <typename F>
OmtiaStatus call(F&& f) noexcept {
  try {
    f();
    return OMTIA_SUCCESS;
  } catch (const omr::OutOfMemoryError& e) {
    OmtiaStatus s = fail(OMTIA_ERROR_OUT_OF_MEMORY, e.what());
    t_error.device = e.device;
    t_error.requested = e.requested;
    t_error.used = e.used;
    t_error.capacity = e.capacity;
    return s;
  } catch (const omr::TaskError& e) {
    OmtiaStatus s = fail(OMTIA_ERROR_TASK_FAILED, e.what());
    t_error.task = e.task;
    return s;
  } catch (const omr::Error& e) {
    return fail(statusOf(e.code()), e.what());
  } catch (const std::exception& e) {
    return fail(OMTIA_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(OMTIA_ERROR_INTERNAL, "unknown error");
  }
}

template <typename T>
T* need(T* p, const char* what) {
  if (!p) throw omr::Error(omr::ErrorCode::kInvalidValue, std::string(what) + " is null");
  return p;
}

// A caller-sized argument struct that holds at least the fields up to `last`.
#define OMTIA_NEED_FIELDS(p, type, last)                                                     \
  do {                                                                                       \
    if (!OMTIA_HAS_FIELD(need(p, #p), type, last))                                           \
      throw omr::Error(omr::ErrorCode::kInvalidValue, #p "->struct_size is too small");       \
  } while (0)

omr::CopyKind kindOf(OmtiaCopyKind kind) {
  switch (kind) {
    case OMTIA_COPY_HOST_TO_DEVICE: return omr::CopyKind::kHostToDevice;
    case OMTIA_COPY_DEVICE_TO_HOST: return omr::CopyKind::kDeviceToHost;
    case OMTIA_COPY_DEVICE_TO_DEVICE: return omr::CopyKind::kDeviceToDevice;
  }
  throw omr::Error(omr::ErrorCode::kInvalidValue, "unknown copy kind " + std::to_string(int(kind)));
}

// A launched host function: destroy(user) runs when the last reference to
// it goes (on a host thread: the engine releases tasks there). The task holds
// a WorkRef (8 bytes: std::function keeps it inline, no allocation), and the
// work itself comes from a Recycler.
struct HostWork {
  HostWork(OmtiaHostFn f, void* u, OmtiaDestroyFn d) : fn(f), user(u), destroy(d) {}
  OmtiaHostFn fn;
  void* user;
  OmtiaDestroyFn destroy;
  std::atomic<int> refs{1};
};

class WorkRef {
 public:
  explicit WorkRef(HostWork* w) : w_(w) {}
  WorkRef(const WorkRef& o) noexcept : w_(o.w_) { w_->refs.fetch_add(1, std::memory_order_relaxed); }
  WorkRef(WorkRef&& o) noexcept : w_(o.w_) { o.w_ = nullptr; }
  WorkRef& operator=(const WorkRef&) = delete;
  ~WorkRef() {
    if (!w_ || w_->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (w_->destroy) w_->destroy(w_->user);
    omr::Recycler<HostWork>::release(w_);
  }
  void operator()() const {
    if (const char* err = w_->fn(w_->user)) throw std::runtime_error(err);
  }
  HostWork* get() const { return w_; }

 private:
  HostWork* w_;
};

// Activity records: the engine's trace records, relabelled.
std::atomic<OmtiaCorrelationHook> g_correlation{nullptr};
std::atomic<OmtiaActivityCallback> g_activity{nullptr};
std::atomic<void*> g_activity_user{nullptr};
uint64_t correlationTag() {
  OmtiaCorrelationHook hook = g_correlation.load();
  return hook ? hook() : 0;
}
void traceSink(const omr::TaskRecord& r) {
  OmtiaActivityRecord rec{sizeof(OmtiaActivityRecord), r.device, r.stream, r.name->c_str(), r.tag, r.start_ns,
                          r.end_ns};
  if (OmtiaActivityCallback cb = g_activity.load()) cb(&rec, g_activity_user.load());
}

// ------------------------------------------------------------ the table's functions

OmtiaStatus getLastError(OmtiaErrorInfo* info) {
  if (!info || info->struct_size < offsetof(OmtiaErrorInfo, message) + sizeof(info->message))
    return OMTIA_ERROR_INVALID_VALUE;  // (the last error stays as it is)
  const size_t size = info->struct_size;
  const LastError& e = t_error;
  OmtiaErrorInfo full{size, e.code, e.message.c_str(), e.task.c_str(), e.device, e.requested, e.used, e.capacity};
  std::memcpy(info, &full, std::min(size, sizeof full));
  return OMTIA_SUCCESS;
}

OmtiaStatus initialize(const OmtiaInitArgs* args) {
  return call([&] {
    omr::RuntimeConfig c;
    c.launch_blocking = 0;  // (the framework's policy: it synchronizes after each launch itself)
    if (args && OMTIA_HAS_FIELD(args, OmtiaInitArgs, num_options)) {
      for (size_t i = 0; i < args->num_options; ++i) {
        const OmtiaOption& o = args->options[i];
        if (!o.name) continue;
        if (o.value < 0) throw omr::Error(omr::ErrorCode::kInvalidValue, std::string("option ") + o.name + " < 0");
        if (!std::strcmp(o.name, "device_count")) c.device_count = static_cast<int>(std::min<int64_t>(o.value, 1 << 20));
        else if (!std::strcmp(o.name, "device_memory")) c.device_memory = static_cast<size_t>(o.value);
        else if (!std::strcmp(o.name, "launch_queue_depth")) c.launch_queue_depth = static_cast<size_t>(o.value);
      }
    }
    omr::configure(c);
    omr::deviceCount();  // made now, with these settings
  });
}

OmtiaStatus shutdown() { return call([] { omr::stopWorkers(); }); }

OmtiaStatus inBadFork(int* forked) {
  return call([&] { *need(forked, "forked") = omr::inBadFork() ? 1 : 0; });
}

OmtiaStatus deviceCount(int* count) {
  return call([&] { *need(count, "count") = omr::deviceCount(); });
}

OmtiaStatus deviceProperties(int device, OmtiaDeviceProperties* props) {
  return call([&] {
    OMTIA_NEED_FIELDS(props, OmtiaDeviceProperties, flags);
    omr::DeviceProperties p = omr::deviceProperties(device);
    std::memset(props->name, 0, sizeof props->name);
    std::strncpy(props->name, p.name.c_str(), sizeof props->name - 1);
    props->total_memory = p.total_memory;
    props->major = p.major;
    props->minor = p.minor;
    props->processor_count = p.processor_count;
    props->flags = OMTIA_DEVICE_HOST_CALLBACKS | OMTIA_DEVICE_GRAPHS | OMTIA_DEVICE_ASYNC |
                   (p.host_addressable ? OMTIA_DEVICE_HOST_ADDRESSABLE : 0u);
  });
}

OmtiaStatus memGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  return call([&] { omr::memGetInfo(device, need(free_bytes, "free_bytes"), need(total_bytes, "total_bytes")); });
}

OmtiaStatus memAlloc(int device, size_t bytes, void** ptr) {
  return call([&] { *need(ptr, "ptr") = omr::deviceMalloc(device, bytes); });
}

OmtiaStatus memFree(int device, void* ptr) {
  return call([&] { omr::deviceFree(device, ptr); });
}

OmtiaStatus hostAlloc(size_t bytes, void** ptr) {
  return call([&] { *need(ptr, "ptr") = omr::hostMallocPinned(bytes); });
}

OmtiaStatus hostFree(void* ptr) {
  return call([&] { omr::hostFreePinned(ptr); });
}

OmtiaStatus pointerGetAttributes(const void* ptr, OmtiaPointerAttributes* attrs) {
  return call([&] {
    OMTIA_NEED_FIELDS(attrs, OmtiaPointerAttributes, size);
    omr::Allocation a = omr::pointerAllocation(ptr);
    attrs->type = a.device >= 0 ? OMTIA_MEMORY_DEVICE : a.base ? OMTIA_MEMORY_HOST_PINNED : OMTIA_MEMORY_UNREGISTERED;
    attrs->device = a.device;
    attrs->base = a.base;
    attrs->size = a.size;
  });
}

OmtiaStatus memcpySync(void* dst, const void* src, size_t bytes, OmtiaCopyKind kind) {
  return call([&] { omr::memcpy(dst, src, bytes, kindOf(kind)); });
}

OmtiaStatus memcpyAsync(void* dst, const void* src, size_t bytes, OmtiaCopyKind kind, OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    omr::memcpyAsync(dst, src, bytes, kindOf(kind), stream->device, stream->id);
  });
}

OmtiaStatus streamCreate(const OmtiaStreamCreateArgs* args, OmtiaStream* stream) {
  return call([&] {
    OMTIA_NEED_FIELDS(args, OmtiaStreamCreateArgs, label);
    need(stream, "stream");
    omr::checkDevice(args->device);
    auto s = std::make_unique<OmtiaStream_>();
    s->device = args->device;
    s->priority = args->priority < 0 ? -1 : 0;  // (two levels: stream_priority_range)
    s->label = args->label;
    s->id = omr::streamCreate(args->device, args->label);
    *stream = s.release();
  });
}

OmtiaStatus streamDestroy(OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    omr::streamDestroy(stream->device, stream->id);
    delete stream;
  });
}

OmtiaStatus streamPriorityRange(int* least, int* greatest) {
  return call([&] {
    *need(least, "least") = 0;
    *need(greatest, "greatest") = -1;
  });
}

OmtiaStatus launchHostFunc(OmtiaStream stream, const OmtiaLaunchArgs* args) {
  return call([&] {
    need(stream, "stream");
    OMTIA_NEED_FIELDS(args, OmtiaLaunchArgs, name);
    need(args->fn, "args->fn");
    WorkRef work(omr::Recycler<HostWork>::make(args->fn, args->user, args->destroy));
    try {
      omr::launch(stream->device, stream->id, args->name ? args->name : "", work);  // (a second reference)
    } catch (...) {
      work.get()->destroy = nullptr;  // not launched: the caller still owns user
      throw;
    }
  });
}

OmtiaStatus streamQuery(OmtiaStream stream) {
  bool idle = false;
  OmtiaStatus s = call([&] {
    need(stream, "stream");
    idle = omr::streamQuery(stream->device, stream->id);
  });
  if (s != OMTIA_SUCCESS) return s;
  return idle ? OMTIA_SUCCESS : fail(OMTIA_ERROR_NOT_READY, "the stream's work has not finished");
}

OmtiaStatus streamSynchronize(OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    omr::streamSynchronize(stream->device, stream->id);
  });
}

OmtiaStatus streamWaitEvent(OmtiaStream stream, OmtiaEvent event) {
  return call([&] {
    need(stream, "stream");
    omr::streamWaitEvent(stream->device, stream->id, need(event, "event")->event);
  });
}

OmtiaStatus deviceSynchronize(int device) {
  return call([&] { omr::deviceSynchronize(device); });
}

OmtiaStatus deviceWaitIdle(int device) {
  return call([&] { omr::deviceWaitIdle(device); });
}

OmtiaStatus onDriverThread(int* yes) {
  return call([&] { *need(yes, "yes") = omr::onStreamWorker() ? 1 : 0; });
}

OmtiaStatus eventCreate(uint32_t flags, OmtiaEvent* event) {
  return call([&] {
    need(event, "event");
    if (flags & ~uint32_t(OMTIA_EVENT_TIMING))
      throw omr::Error(omr::ErrorCode::kInvalidValue, "unknown event flags " + std::to_string(flags));
    *event = new OmtiaEvent_{omr::eventCreate(flags & OMTIA_EVENT_TIMING)};
  });
}

OmtiaStatus eventDestroy(OmtiaEvent event) {
  return call([&] {
    omr::eventDestroy(need(event, "event")->event);
    delete event;
  });
}

OmtiaStatus eventRecord(OmtiaEvent event, OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    omr::eventRecord(need(event, "event")->event, stream->device, stream->id);
  });
}

OmtiaStatus eventQuery(OmtiaEvent event) {
  bool done = false;
  OmtiaStatus s = call([&] { done = omr::eventQuery(need(event, "event")->event); });
  if (s != OMTIA_SUCCESS) return s;
  return done ? OMTIA_SUCCESS : fail(OMTIA_ERROR_NOT_READY, "the event's record has not been reached");
}

OmtiaStatus eventSynchronize(OmtiaEvent event) {
  return call([&] { omr::eventSynchronize(need(event, "event")->event); });
}

OmtiaStatus eventElapsedMs(OmtiaEvent start, OmtiaEvent end, double* ms) {
  return call([&] {
    *need(ms, "ms") = omr::eventElapsedMs(need(start, "start")->event, need(end, "end")->event);
  });
}

OmtiaStatus eventDevice(OmtiaEvent event, int* device) {
  return call([&] { *need(device, "device") = omr::eventDevice(need(event, "event")->event); });
}

OmtiaStatus graphCreate(OmtiaGraph* graph) {
  return call([&] { *need(graph, "graph") = new OmtiaGraph_{omr::graphCreate(), {}}; });
}

OmtiaStatus graphDestroy(OmtiaGraph graph) {
  return call([&] {
    omr::graphDestroy(need(graph, "graph")->graph);
    delete graph;
  });
}

OmtiaStatus streamBeginCapture(OmtiaStream stream, OmtiaGraph graph) {
  return call([&] {
    need(stream, "stream");
    omr::streamBeginCapture(stream->device, stream->id, need(graph, "graph")->graph);
  });
}

OmtiaStatus streamEndCapture(OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    omr::streamEndCapture(stream->device, stream->id);
  });
}

OmtiaStatus streamIsCapturing(OmtiaStream stream, int* capturing) {
  return call([&] {
    need(stream, "stream");
    *need(capturing, "capturing") = omr::streamIsCapturing(stream->device, stream->id) ? 1 : 0;
  });
}

OmtiaStatus graphTaskCount(OmtiaGraph graph, size_t* count) {
  return call([&] { *need(count, "count") = omr::graphTaskCount(need(graph, "graph")->graph); });
}

OmtiaStatus graphTaskName(OmtiaGraph graph, size_t index, const char** name) {
  return call([&] {
    need(name, "name");
    need(graph, "graph");
    if (graph->names.size() != omr::graphTaskCount(graph->graph)) graph->names = omr::graphTaskNames(graph->graph);
    if (index >= graph->names.size())
      throw omr::Error(omr::ErrorCode::kInvalidValue, "graph task " + std::to_string(index) + " of " +
                                                          std::to_string(graph->names.size()));
    *name = graph->names[index].c_str();
  });
}

OmtiaStatus graphLaunch(OmtiaGraph graph, OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    omr::graphLaunch(need(graph, "graph")->graph, stream->device, stream->id);
  });
}

OmtiaStatus graphClear(OmtiaGraph graph) {
  return call([&] {
    omr::graphClear(need(graph, "graph")->graph);
    graph->names.clear();
  });
}

OmtiaStatus setWaitHook(OmtiaWaitHook hook) {
  return call([&] { omr::setWaitHook(hook); });
}

OmtiaStatus setIdleHook(OmtiaIdleHook hook) {
  return call([&] { omr::setIdleHook(hook); });
}

OmtiaStatus setActivityCallback(OmtiaCorrelationHook correlation, OmtiaActivityCallback callback, void* user) {
  return call([&] {
    g_correlation = correlation;
    g_activity_user = user;
    g_activity = callback;
    if (callback) omr::setTracing(&correlationTag, &traceSink);
    else omr::setTracing(nullptr, nullptr);
  });
}

const OmtiaDriver kDriver = {
    sizeof(OmtiaDriver),
    OMTIA_DRIVER_ABI_MAJOR,
    OMTIA_DRIVER_ABI_MINOR,
    "emulated",
    &getLastError,
    &initialize,
    &shutdown,
    &inBadFork,
    &deviceCount,
    &deviceProperties,
    &memGetInfo,
    &memAlloc,
    &memFree,
    &hostAlloc,
    &hostFree,
    &pointerGetAttributes,
    &memcpySync,
    &memcpyAsync,
    &streamCreate,
    &streamDestroy,
    &streamPriorityRange,
    &launchHostFunc,
    &streamQuery,
    &streamSynchronize,
    &streamWaitEvent,
    &deviceSynchronize,
    &deviceWaitIdle,
    &onDriverThread,
    &eventCreate,
    &eventDestroy,
    &eventRecord,
    &eventQuery,
    &eventSynchronize,
    &eventElapsedMs,
    &eventDevice,
    &graphCreate,
    &graphDestroy,
    &streamBeginCapture,
    &streamEndCapture,
    &streamIsCapturing,
    &graphTaskCount,
    &graphTaskName,
    &graphLaunch,
    &graphClear,
    &setWaitHook,
    &setIdleHook,
    &setActivityCallback,
};

}  // namespace

extern "C" OMTIA_DRIVER_EXPORT const OmtiaDriver* openmtia_driver_get(uint32_t caller_abi_major) {
  return caller_abi_major == OMTIA_DRIVER_ABI_MAJOR ? &kDriver : nullptr;
}
