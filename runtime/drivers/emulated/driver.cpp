// The emulator as a driver: openmtia/driver.h's table over the emulation
// engine (engine.h, openmtia/runtime.h). Built as a shared library
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

#include "engine.h"
#include "faults.h"

namespace eng = omr::engine;

struct OmtiaStream_ {
  int device;
  eng::StreamId id;
  int priority;
  int64_t label;
};

struct OmtiaEvent_ {
  eng::Event* event;
};

struct OmtiaGraph_ {
  eng::Graph* graph;
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

OmtiaStatus statusOf(eng::ErrorCode code) {
  switch (code) {
    case eng::ErrorCode::kOutOfMemory: return OMTIA_ERROR_OUT_OF_MEMORY;
    case eng::ErrorCode::kInvalidDevice: return OMTIA_ERROR_INVALID_DEVICE;
    case eng::ErrorCode::kInvalidValue: return OMTIA_ERROR_INVALID_VALUE;
    case eng::ErrorCode::kTaskFailed: return OMTIA_ERROR_TASK_FAILED;
    case eng::ErrorCode::kCapturing: return OMTIA_ERROR_CAPTURING;
    case eng::ErrorCode::kForked: return OMTIA_ERROR_FORKED;
    case eng::ErrorCode::kNotSupported: return OMTIA_ERROR_NOT_SUPPORTED;
    case eng::ErrorCode::kDeviceLost: return OMTIA_ERROR_DEVICE_LOST;
    case eng::ErrorCode::kUnavailable:
    case eng::ErrorCode::kInternal: return OMTIA_ERROR_INTERNAL;
  }
  return OMTIA_ERROR_INTERNAL;
}

// Runs f, turning what the engine throws into a status and the thread's last error.
template <typename F>
OmtiaStatus call(F&& f) noexcept {
  try {
    f();
    return OMTIA_SUCCESS;
  } catch (const eng::OutOfMemoryError& e) {
    OmtiaStatus s = fail(OMTIA_ERROR_OUT_OF_MEMORY, e.what());
    t_error.device = e.device;
    t_error.requested = e.requested;
    t_error.used = e.used;
    t_error.capacity = e.capacity;
    return s;
  } catch (const eng::TaskError& e) {
    OmtiaStatus s = fail(OMTIA_ERROR_TASK_FAILED, e.what());
    t_error.task = e.task;
    return s;
  } catch (const eng::Error& e) {
    return fail(statusOf(e.code()), e.what());
  } catch (const std::exception& e) {
    return fail(OMTIA_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(OMTIA_ERROR_INTERNAL, "unknown error");
  }
}

template <typename T>
T* need(T* p, const char* what) {
  if (!p) throw eng::Error(eng::ErrorCode::kInvalidValue, std::string(what) + " is null");
  return p;
}

// A caller-sized argument struct that holds at least the fields up to `last`.
#define OMTIA_NEED_FIELDS(p, type, last)                                                     \
  do {                                                                                       \
    if (!OMTIA_HAS_FIELD(need(p, #p), type, last))                                           \
      throw eng::Error(eng::ErrorCode::kInvalidValue, #p "->struct_size is too small");       \
  } while (0)

eng::CopyKind kindOf(OmtiaCopyKind kind) {
  switch (kind) {
    case OMTIA_COPY_HOST_TO_DEVICE: return eng::CopyKind::kHostToDevice;
    case OMTIA_COPY_DEVICE_TO_HOST: return eng::CopyKind::kDeviceToHost;
    case OMTIA_COPY_DEVICE_TO_DEVICE: return eng::CopyKind::kDeviceToDevice;
  }
  throw eng::Error(eng::ErrorCode::kInvalidValue, "unknown copy kind " + std::to_string(int(kind)));
}

// Activity records: the engine's trace records, relabelled.
std::atomic<OmtiaCorrelationHook> g_correlation{nullptr};
std::atomic<OmtiaActivityCallback> g_activity{nullptr};
std::atomic<void*> g_activity_user{nullptr};
uint64_t correlationTag() {
  OmtiaCorrelationHook hook = g_correlation.load();
  return hook ? hook() : 0;
}
void traceSink(const eng::TaskRecord& r) {
  OmtiaActivityRecord rec{sizeof(OmtiaActivityRecord), r.device, r.stream, r.name, r.tag, r.start_ns, r.end_ns, r.error};
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
    eng::RuntimeConfig c;
    c.launch_blocking = 0;  // (the framework's policy: it synchronizes after each launch itself)
    if (args && OMTIA_HAS_FIELD(args, OmtiaInitArgs, num_options)) {
      for (size_t i = 0; i < args->num_options; ++i) {
        const OmtiaOption& o = args->options[i];
        if (!o.name) continue;
        if (o.value < 0) throw eng::Error(eng::ErrorCode::kInvalidValue, std::string("option ") + o.name + " < 0");
        if (!std::strcmp(o.name, "device_count")) c.device_count = static_cast<int>(std::min<int64_t>(o.value, 1 << 20));
        else if (!std::strcmp(o.name, "device_memory")) c.device_memory = static_cast<size_t>(o.value);
        else if (!std::strcmp(o.name, "launch_queue_depth")) c.launch_queue_depth = static_cast<size_t>(o.value);
        else if (!std::strcmp(o.name, "strict_memory")) c.strict_memory = o.value ? 1 : 0;
        else if (!std::strcmp(o.name, "help_first")) c.help_first = o.value ? 1 : 0;
        else if (!std::strcmp(o.name, "one_team")) c.one_team = o.value ? 1 : 0;
        else if (!std::strcmp(o.name, "inline_launches")) {
          if (o.value > 2) throw eng::Error(eng::ErrorCode::kInvalidValue, "option inline_launches > 2");
          c.inline_launches = static_cast<int>(o.value);
        }
      }
    }
    eng::configure(c);
    eng::deviceCount();  // made now, with these settings
  });
}

OmtiaStatus shutdown() { return call([] { eng::stopWorkers(); }); }

OmtiaStatus inBadFork(int* forked) {
  return call([&] { *need(forked, "forked") = eng::inBadFork() ? 1 : 0; });
}

OmtiaStatus deviceCount(int* count) {
  return call([&] { *need(count, "count") = eng::deviceCount(); });
}

OmtiaStatus deviceProperties(int device, OmtiaDeviceProperties* props) {
  return call([&] {
    OMTIA_NEED_FIELDS(props, OmtiaDeviceProperties, flags);
    eng::DeviceProperties p = eng::deviceProperties(device);
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

// A call on a device that a sticky fault or its loss broke fails (as a real
// driver's calls do after a sticky error, or once its device is gone):
// allocations, copies, launches, synchronizations, event records and
// queries. Frees, destroys and waits for idleness do not: a program's
// teardown goes on.
void usable(int device) { eng::faults::checkUsable(device); }

// A synchronization of `device`'s work: a task's failure that broke the
// device raises the broken device's error (a lost device says so at once).
template <typename F>
void synchronizing(int device, F&& sync) {
  usable(device);
  try {
    sync();
  } catch (const eng::TaskError&) {
    usable(device);
    throw;
  }
}

OmtiaStatus memGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  return call([&] {
    usable(device);
    eng::memGetInfo(device, need(free_bytes, "free_bytes"), need(total_bytes, "total_bytes"));
  });
}

OmtiaStatus memAlloc(int device, size_t bytes, void** ptr) {
  return call([&] {
    usable(device);
    *need(ptr, "ptr") = eng::deviceMalloc(device, bytes);
  });
}

OmtiaStatus memFree(int device, void* ptr) {
  return call([&] { eng::deviceFree(device, ptr); });
}

OmtiaStatus hostAlloc(size_t bytes, void** ptr) {
  return call([&] { *need(ptr, "ptr") = eng::hostMallocPinned(bytes); });
}

OmtiaStatus hostFree(void* ptr) {
  return call([&] { eng::hostFreePinned(ptr); });
}

OmtiaStatus pointerGetAttributes(const void* ptr, OmtiaPointerAttributes* attrs) {
  return call([&] {
    OMTIA_NEED_FIELDS(attrs, OmtiaPointerAttributes, size);
    eng::Allocation a = eng::pointerAllocation(ptr);
    attrs->type = a.device >= 0 ? OMTIA_MEMORY_DEVICE : a.base ? OMTIA_MEMORY_HOST_PINNED : OMTIA_MEMORY_UNREGISTERED;
    attrs->device = a.device;
    attrs->base = a.base;
    attrs->size = a.size;
  });
}

OmtiaStatus memcpySync(void* dst, const void* src, size_t bytes, OmtiaCopyKind kind) {
  return call([&] {
    usable(eng::pointerDevice(dst));
    usable(eng::pointerDevice(src));
    eng::memcpy(dst, src, bytes, kindOf(kind));
  });
}

OmtiaStatus memcpyAsync(void* dst, const void* src, size_t bytes, OmtiaCopyKind kind, OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    usable(stream->device);
    eng::memcpyAsync(dst, src, bytes, kindOf(kind), stream->device, stream->id);
  });
}

OmtiaStatus streamCreate(const OmtiaStreamCreateArgs* args, OmtiaStream* stream) {
  return call([&] {
    OMTIA_NEED_FIELDS(args, OmtiaStreamCreateArgs, label);
    need(stream, "stream");
    eng::checkDevice(args->device);
    auto s = std::make_unique<OmtiaStream_>();
    s->device = args->device;
    s->priority = args->priority < 0 ? -1 : 0;  // (two levels: stream_priority_range)
    s->label = args->label;
    s->id = eng::streamCreate(args->device, args->label);
    *stream = s.release();
  });
}

OmtiaStatus streamDestroy(OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    eng::streamDestroy(stream->device, stream->id);
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
    usable(stream->device);
    // (if the launch throws, the engine did not take the task: destroy is not called)
    const uint32_t flags = OMTIA_HAS_FIELD(args, OmtiaLaunchArgs, flags) ? args->flags : 0;
    eng::launch(stream->device, stream->id, args->name ? args->name : "",
                eng::HostTask{args->fn, args->user, args->destroy,
                              ((flags & OMTIA_LAUNCH_WAITS_FOR_HOST) ? eng::kTaskWaitsForHost : 0u) |
                                  ((flags & OMTIA_LAUNCH_MAY_BLOCK) ? eng::kTaskMayBlock : 0u)});
  });
}

OmtiaStatus streamQuery(OmtiaStream stream) {
  bool idle = false;
  OmtiaStatus s = call([&] {
    need(stream, "stream");
    usable(stream->device);
    idle = eng::streamQuery(stream->device, stream->id);
  });
  if (s != OMTIA_SUCCESS) return s;
  return idle ? OMTIA_SUCCESS : fail(OMTIA_ERROR_NOT_READY, "the stream's work has not finished");
}

OmtiaStatus streamSynchronize(OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    synchronizing(stream->device, [&] { eng::streamSynchronize(stream->device, stream->id); });
  });
}

OmtiaStatus streamWaitEvent(OmtiaStream stream, OmtiaEvent event) {
  return call([&] {
    need(stream, "stream");
    usable(stream->device);
    eng::streamWaitEvent(stream->device, stream->id, need(event, "event")->event);
  });
}

OmtiaStatus deviceSynchronize(int device) {
  return call([&] {
    synchronizing(device, [&] { eng::deviceSynchronize(device); });
  });
}

OmtiaStatus deviceWaitIdle(int device) {
  return call([&] { eng::deviceWaitIdle(device); });
}

OmtiaStatus onDriverThread(int* yes) {
  return call([&] { *need(yes, "yes") = eng::onStreamWorker() ? 1 : 0; });
}

OmtiaStatus eventCreate(uint32_t flags, OmtiaEvent* event) {
  return call([&] {
    need(event, "event");
    if (flags & ~uint32_t(OMTIA_EVENT_TIMING))
      throw eng::Error(eng::ErrorCode::kInvalidValue, "unknown event flags " + std::to_string(flags));
    *event = new OmtiaEvent_{eng::eventCreate(flags & OMTIA_EVENT_TIMING)};
  });
}

OmtiaStatus eventDestroy(OmtiaEvent event) {
  return call([&] {
    eng::eventDestroy(need(event, "event")->event);
    delete event;
  });
}

OmtiaStatus eventRecord(OmtiaEvent event, OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    usable(stream->device);
    eng::eventRecord(need(event, "event")->event, stream->device, stream->id);
  });
}

OmtiaStatus eventQuery(OmtiaEvent event) {
  bool done = false;
  OmtiaStatus s = call([&] {
    usable(eng::eventDevice(need(event, "event")->event));
    done = eng::eventQuery(event->event);
  });
  if (s != OMTIA_SUCCESS) return s;
  return done ? OMTIA_SUCCESS : fail(OMTIA_ERROR_NOT_READY, "the event's record has not been reached");
}

OmtiaStatus eventSynchronize(OmtiaEvent event) {
  return call([&] {
    synchronizing(eng::eventDevice(need(event, "event")->event), [&] { eng::eventSynchronize(event->event); });
  });
}

OmtiaStatus eventElapsedMs(OmtiaEvent start, OmtiaEvent end, double* ms) {
  return call([&] {
    *need(ms, "ms") = eng::eventElapsedMs(need(start, "start")->event, need(end, "end")->event);
  });
}

OmtiaStatus eventDevice(OmtiaEvent event, int* device) {
  return call([&] { *need(device, "device") = eng::eventDevice(need(event, "event")->event); });
}

OmtiaStatus graphCreate(OmtiaGraph* graph) {
  return call([&] { *need(graph, "graph") = new OmtiaGraph_{eng::graphCreate(), {}}; });
}

OmtiaStatus graphDestroy(OmtiaGraph graph) {
  return call([&] {
    eng::graphDestroy(need(graph, "graph")->graph);
    delete graph;
  });
}

OmtiaStatus streamBeginCapture(OmtiaStream stream, OmtiaGraph graph) {
  return call([&] {
    need(stream, "stream");
    eng::streamBeginCapture(stream->device, stream->id, need(graph, "graph")->graph);
  });
}

OmtiaStatus streamEndCapture(OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    eng::streamEndCapture(stream->device, stream->id);
  });
}

OmtiaStatus streamIsCapturing(OmtiaStream stream, int* capturing) {
  return call([&] {
    need(stream, "stream");
    *need(capturing, "capturing") = eng::streamIsCapturing(stream->device, stream->id) ? 1 : 0;
  });
}

OmtiaStatus graphTaskCount(OmtiaGraph graph, size_t* count) {
  return call([&] { *need(count, "count") = eng::graphTaskCount(need(graph, "graph")->graph); });
}

OmtiaStatus graphTaskName(OmtiaGraph graph, size_t index, const char** name) {
  return call([&] {
    need(name, "name");
    need(graph, "graph");
    if (graph->names.size() != eng::graphTaskCount(graph->graph)) graph->names = eng::graphTaskNames(graph->graph);
    if (index >= graph->names.size())
      throw eng::Error(eng::ErrorCode::kInvalidValue, "graph task " + std::to_string(index) + " of " +
                                                          std::to_string(graph->names.size()));
    *name = graph->names[index].c_str();
  });
}

OmtiaStatus graphLaunch(OmtiaGraph graph, OmtiaStream stream) {
  return call([&] {
    need(stream, "stream");
    usable(stream->device);
    eng::graphLaunch(need(graph, "graph")->graph, stream->device, stream->id);
  });
}

OmtiaStatus graphClear(OmtiaGraph graph) {
  return call([&] {
    eng::graphClear(need(graph, "graph")->graph);
    graph->names.clear();
  });
}

OmtiaStatus setWaitHook(OmtiaWaitHook hook) {
  return call([&] { eng::setWaitHook(hook); });
}

OmtiaStatus setIdleHook(OmtiaIdleHook hook) {
  return call([&] { eng::setIdleHook(hook); });
}

OmtiaStatus setHostWorkHook(OmtiaHostWorkHook hook) {
  return call([&] { eng::setHostWorkHook(hook); });
}

OmtiaStatus workRunsParallel(int* on_host) {
  return call([&] { *need(on_host, "on_host") = eng::workRunsParallel() ? 1 : 0; });
}

OmtiaStatus setActivityCallback(OmtiaCorrelationHook correlation, OmtiaActivityCallback callback, void* user) {
  return call([&] {
    g_correlation = correlation;
    g_activity_user = user;
    g_activity = callback;
    if (callback) eng::setTracing(&correlationTag, &traceSink);
    else eng::setTracing(nullptr, nullptr);
  });
}

OmtiaStatus injectFault(const OmtiaFaultArgs* args) {
  return call([&] {
    if (!args || args->struct_size < offsetof(OmtiaFaultArgs, seed) + sizeof args->seed)
      throw eng::Error(eng::ErrorCode::kInvalidValue, "inject_fault: null or short OmtiaFaultArgs");
    eng::faults::Fault f;
    f.kind = static_cast<eng::faults::Kind>(args->kind);
    f.device = args->device;
    f.stream = args->stream;
    f.name = args->name ? args->name : "";
    f.after = args->after;
    f.times = args->times;
    f.rate = args->rate;
    f.seed = args->seed;
    f.sticky = OMTIA_HAS_FIELD(args, OmtiaFaultArgs, flags) && (args->flags & OMTIA_FAULT_STICKY);
    eng::faults::inject(f);
  });
}

OmtiaStatus clearFaults() {
  return call([] { eng::faults::clear(); });
}

OmtiaStatus hostWorkFault(OmtiaStream stream, const char* name, int* faulted) {
  return call([&] {
    need(stream, "stream");
    need(faulted, "faulted");
    usable(stream->device);
    *faulted = eng::hostWorkFaults(stream->device, stream->id, name ? name : "") ? 1 : 0;
  });
}

OmtiaStatus dataReceived(OmtiaStream stream, const char* name, void* data, size_t bytes, int* corrupted) {
  return call([&] {
    need(stream, "stream");
    need(corrupted, "corrupted");
    if (bytes) need(data, "data");
    usable(stream->device);
    *corrupted = eng::dataReceived(stream->device, stream->id, name ? name : "", data, bytes) ? 1 : 0;
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
    &setHostWorkHook,
    &workRunsParallel,
    &injectFault,
    &clearFaults,
    &hostWorkFault,
    &dataReceived,
};

}  // namespace

extern "C" OMTIA_DRIVER_EXPORT const OmtiaDriver* openmtia_driver_get(uint32_t caller_abi_major) {
  return caller_abi_major == OMTIA_DRIVER_ABI_MAJOR ? &kDriver : nullptr;
}
