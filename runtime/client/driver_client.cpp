// The framework's side of the driver ABI: openmtia/runtime.h's C++ API over
// a driver's C table (openmtia/driver.h). openmtia._C links this, not the
// emulator: every device call goes through the table of the driver loaded
// here. What is policy lives here, above any driver:
// - which driver: OPENMTIA_DRIVER = emulated (default), reference, or a path
//   to a driver library; the built-in ones lie beside the library holding
//   this code (openmtia/libopenmtia_driver_<name>.so);
// - the configuration: OPENMTIA_DEVICE_COUNT, OPENMTIA_DEVICE_MEMORY,
//   OPENMTIA_LAUNCH_QUEUE_DEPTH, OPENMTIA_STRICT_MEMORY, OPENMTIA_HELP_FIRST, OPENMTIA_ONE_TEAM, OPENMTIA_INLINE_LAUNCHES,
//   passed to the driver as options, and OPENMTIA_LAUNCH_BLOCKING, applied
//   here;
// - the streams: per device, the default stream and two pools (normal and
//   high priority) of kPoolSize streams each, made on first use;
// - C++ errors: a status becomes the omr::Error of its code (OutOfMemoryError,
//   TaskError with the task's name).
// A driver that fails to load (no library, no entry point, another ABI
// major version, a failing initialize) leaves no devices: deviceCount() is
// 0, driverError() says why, and every device call raises kUnavailable.
#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "openmtia/driver.h"
#include "openmtia/runtime.h"
#include "host_waits.h"

namespace omr {

struct Event {
  OmtiaEvent handle;
};

struct Graph {
  OmtiaGraph handle;
};

namespace {

constexpr int kStreamsPerDevice = 1 + 2 * kPoolSize;
constexpr size_t kDefaultQueueDepth = 1024;

struct Driver {
  const OmtiaDriver* table = nullptr;
  std::string error;  // why there is none
  int count = 0;
  bool launch_blocking = false;
  size_t queue_depth = kDefaultQueueDepth;
  RuntimeConfig config;  // configure()'s, before the load
  bool loaded = false;
};

Driver& driver() {
  static Driver* d = new Driver();  // never destroyed: work may outlive main()
  return *d;
}
std::mutex g_load_mu;

std::string libraryDir() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&libraryDir), &info) || !info.dli_fname) return ".";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool parseCount(const char* name, long lo, long hi, long* out) {
  const char* s = std::getenv(name);
  if (!s) return false;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end != s && *end == '\0' && v >= lo && v <= hi) {
    *out = v;
    return true;
  }
  std::fprintf(stderr, "openmtia: ignoring invalid %s='%s'\n", name, s);
  return false;
}

// OPENMTIA_INLINE_LAUNCHES: "never" 0, "always" 1, "auto" 2; -1 unset (or invalid)
int parseInlineLaunches() {
  const char* s = std::getenv("OPENMTIA_INLINE_LAUNCHES");
  if (!s) return -1;
  const char* names[] = {"never", "always", "auto"};
  for (int i = 0; i < 3; ++i)
    if (!std::strcmp(s, names[i])) return i;
  std::fprintf(stderr, "openmtia: ignoring invalid OPENMTIA_INLINE_LAUNCHES='%s' (never, always or auto)\n", s);
  return -1;
}

std::string lastMessage(const OmtiaDriver* t) {
  OmtiaErrorInfo e{};
  e.struct_size = sizeof e;
  if (t->get_last_error(&e) != OMTIA_SUCCESS || !e.message) return "unknown driver error";
  return e.message;
}

// The driver's wait hook is the client's: a launch that waits for room in
// its queue counts as a host wait, then runs the framework's hook (if any).
std::atomic<WaitHook> g_wait_hook{nullptr};
void countedWait(void (*wait)(void*), void* arg) {
  detail::HostWaitScope waiting;
  if (WaitHook hook = g_wait_hook.load()) hook(wait, arg);
  else wait(arg);
}

// Whether a fault was ever armed in this process: until then no work the
// host runs itself asks the driver (hostWorkFaults), nothing being armed nor
// broken.
std::atomic<bool> g_faults_armed{false};

// Arms `f` in the driver `t` (driver ABI 1.5; its flags 1.6).
OmtiaStatus injectInto(const OmtiaDriver* t, const Fault& f) {
  g_faults_armed.store(true);
  if (!OMTIA_HAS_FIELD(t, OmtiaDriver, inject_fault) || !t->inject_fault) return OMTIA_ERROR_NOT_SUPPORTED;
  OmtiaFaultArgs a{};
  a.struct_size = sizeof a;
  a.kind = static_cast<int>(f.kind);
  a.device = f.device;
  a.stream = f.stream;
  a.name = f.name.empty() ? nullptr : f.name.c_str();
  a.after = f.after;
  a.times = f.times;
  a.rate = f.rate;
  a.seed = f.seed;
  a.flags = f.sticky ? OMTIA_FAULT_STICKY : 0u;
  return t->inject_fault(&a);
}

// This process's rank (torchrun's RANK), for OPENMTIA_FAULTS's rank=R, and
// its elastic job's restart (TorchElastic's TORCHELASTIC_RESTART_COUNT) for
// restart=N.
int envInt(const char* name) {
  const char* s = std::getenv(name);
  return s && *s ? std::atoi(s) : 0;
}

// Loads and initializes the driver once (g_load_mu held).
void load(Driver& d) {
  d.loaded = true;
  const char* which = std::getenv("OPENMTIA_DRIVER");
  std::string name = which && *which ? which : "emulated";
  std::string path = name.find('/') != std::string::npos ? name : libraryDir() + "/libopenmtia_driver_" + name + ".so";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    d.error = "cannot load the mtia driver '" + name + "' (OPENMTIA_DRIVER): " + dlerror();
    return;
  }
  auto get = reinterpret_cast<OmtiaDriverGetFn>(dlsym(lib, OMTIA_DRIVER_ENTRY_POINT));
  if (!get) {
    d.error = "the mtia driver " + path + " has no entry point " OMTIA_DRIVER_ENTRY_POINT;
    return;
  }
  const OmtiaDriver* t = get(OMTIA_DRIVER_ABI_MAJOR);
  if (!t || t->abi_major != OMTIA_DRIVER_ABI_MAJOR || !OMTIA_HAS_FIELD(t, OmtiaDriver, set_activity_callback)) {
    d.error = "the mtia driver " + path + " does not implement driver ABI " + std::to_string(OMTIA_DRIVER_ABI_MAJOR) +
              "." + std::to_string(OMTIA_DRIVER_ABI_MINOR) +
              (t ? " (it has " + std::to_string(t->abi_major) + "." + std::to_string(t->abi_minor) + ")" : "");
    return;
  }
  // the configuration, as options
  std::vector<OmtiaOption> options;
  long v;
  if (d.config.device_count >= 0) options.push_back({"device_count", d.config.device_count});
  else if (parseCount("OPENMTIA_DEVICE_COUNT", 0, kMaxDevices, &v)) options.push_back({"device_count", v});
  size_t memory = d.config.device_memory;
  if (!memory) {
    if (const char* s = std::getenv("OPENMTIA_DEVICE_MEMORY")) {
      try {
        memory = parseByteSize(s);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "openmtia: ignoring OPENMTIA_DEVICE_MEMORY: %s\n", e.what());
      }
    }
  }
  if (memory) options.push_back({"device_memory", static_cast<int64_t>(memory)});
  if (d.config.launch_queue_depth) d.queue_depth = d.config.launch_queue_depth;
  else if (parseCount("OPENMTIA_LAUNCH_QUEUE_DEPTH", 1, 1L << 30, &v)) d.queue_depth = static_cast<size_t>(v);
  options.push_back({"launch_queue_depth", static_cast<int64_t>(d.queue_depth)});
  int strict = d.config.strict_memory;
  if (strict < 0 && parseCount("OPENMTIA_STRICT_MEMORY", 0, 1, &v)) strict = static_cast<int>(v);
  if (strict == 1) options.push_back({"strict_memory", 1});
  int help_first = d.config.help_first;
  if (help_first < 0 && parseCount("OPENMTIA_HELP_FIRST", 0, 1, &v)) help_first = static_cast<int>(v);
  if (help_first >= 0) options.push_back({"help_first", help_first});
  int one_team = d.config.one_team;
  if (one_team < 0 && parseCount("OPENMTIA_ONE_TEAM", 0, 1, &v)) one_team = static_cast<int>(v);
  if (one_team >= 0) options.push_back({"one_team", one_team});
  int inline_launches = d.config.inline_launches;
  if (inline_launches < 0) inline_launches = parseInlineLaunches();
  if (inline_launches >= 0) options.push_back({"inline_launches", inline_launches});
  if (d.config.launch_blocking >= 0) d.launch_blocking = d.config.launch_blocking == 1;
  else if (const char* s = std::getenv("OPENMTIA_LAUNCH_BLOCKING")) d.launch_blocking = std::string(s) == "1";
  OmtiaInitArgs args{sizeof(OmtiaInitArgs), options.data(), options.size()};
  int count = 0;
  if (t->initialize(&args) != OMTIA_SUCCESS || t->device_count(&count) != OMTIA_SUCCESS) {
    d.error = "the mtia driver " + path + " failed to start: " + lastMessage(t);
    return;
  }
  if (strict == 1 && count > 0) {  // a driver that does not know the option leaves its memory host-addressable
    OmtiaDeviceProperties p{};
    p.struct_size = sizeof p;
    if (t->device_properties(0, &p) == OMTIA_SUCCESS && (p.flags & OMTIA_DEVICE_HOST_ADDRESSABLE)) {
      d.error = "the mtia driver " + path + " has no strict memory mode (OPENMTIA_STRICT_MEMORY=1): its device "
                "memory stays host-addressable";
      return;
    }
  }
  if (const char* spec = std::getenv("OPENMTIA_FAULTS"); spec && *spec) {
    try {
      for (const Fault& f : parseFaults(spec, envInt("RANK"), envInt("TORCHELASTIC_RESTART_COUNT"))) {
        if (injectInto(t, f) != OMTIA_SUCCESS)
          throw Error(ErrorCode::kInvalidValue, "the mtia driver " + path + " cannot inject it: " + lastMessage(t));
      }
    } catch (const Error& e) {
      d.error = std::string("OPENMTIA_FAULTS: ") + e.what();
      return;
    }
  }
  d.count = count;
  d.table = t;
  t->set_wait_hook(&countedWait);  // (a launch's wait counts before the framework sets its hook)
}

Driver& loadedDriver() {
  Driver& d = driver();
  if (!d.loaded) {
    std::lock_guard<std::mutex> lk(g_load_mu);
    if (!d.loaded) load(d);
  }
  return d;
}

// The driver's table, or kUnavailable.
const OmtiaDriver& T() {
  Driver& d = loadedDriver();
  if (!d.table) throw Error(ErrorCode::kUnavailable, "openmtia: " + d.error);
  return *d.table;
}

ErrorCode codeOf(OmtiaStatus s) {
  switch (s) {
    case OMTIA_ERROR_OUT_OF_MEMORY: return ErrorCode::kOutOfMemory;
    case OMTIA_ERROR_INVALID_DEVICE: return ErrorCode::kInvalidDevice;
    case OMTIA_ERROR_INVALID_VALUE: return ErrorCode::kInvalidValue;
    case OMTIA_ERROR_TASK_FAILED: return ErrorCode::kTaskFailed;
    case OMTIA_ERROR_CAPTURING: return ErrorCode::kCapturing;
    case OMTIA_ERROR_FORKED: return ErrorCode::kForked;
    case OMTIA_ERROR_NOT_SUPPORTED: return ErrorCode::kNotSupported;
    case OMTIA_ERROR_DEVICE_LOST: return ErrorCode::kDeviceLost;
    default: return ErrorCode::kInternal;
  }
}

// Throws the omr error of a failed call.
[[noreturn]] void raise(OmtiaStatus s) {
  OmtiaErrorInfo e{};
  e.struct_size = sizeof e;
  T().get_last_error(&e);
  std::string msg = e.message ? e.message : "";
  if (s == OMTIA_ERROR_OUT_OF_MEMORY) throw OutOfMemoryError(e.device, e.requested, e.used, e.capacity, msg);
  if (s == OMTIA_ERROR_TASK_FAILED) throw TaskError(e.task ? e.task : "", msg);
  throw Error(codeOf(s), msg);
}

inline void check(OmtiaStatus s) {
  if (s != OMTIA_SUCCESS) raise(s);
}

// ------------------------------------------------------------ streams: the pools

struct DeviceStreams {
  std::mutex mu;  // making a stream
  std::atomic<OmtiaStream> streams[kStreamsPerDevice] = {};
  std::atomic<unsigned> next_pool[2] = {0, 0};
};

DeviceStreams& streamsOf(int device) {
  static DeviceStreams* all = new DeviceStreams[kMaxDevices];
  return all[device];
}

// The driver's stream for a pool id, made on first use.
OmtiaStream handle(int device, StreamId id) {
  checkStream(device, id);
  DeviceStreams& ds = streamsOf(device);
  if (OmtiaStream s = ds.streams[id].load(std::memory_order_acquire)) return s;
  std::lock_guard<std::mutex> lk(ds.mu);
  OmtiaStream s = ds.streams[id].load();
  if (!s) {
    OmtiaStreamCreateArgs a{};
    a.struct_size = sizeof a;
    a.device = device;
    a.priority = streamPriority(id);
    a.label = id;
    check(T().stream_create(&a, &s));
    ds.streams[id].store(s, std::memory_order_release);
  }
  return s;
}

std::atomic<SubmitHook> g_submitted{nullptr};

// Around a submission to a stream, accepted or not (a profiler's launch
// event spans it; setTracing). An untraced one (kTaskUntraced) is tagged
// kUntraced and its record dropped.
thread_local bool t_untraced = false;
struct SubmitScope {
  SubmitHook hook;
  bool was_untraced = t_untraced;
  explicit SubmitScope(bool untraced = false) : hook(untraced ? nullptr : g_submitted.load(std::memory_order_relaxed)) {
    t_untraced = untraced;
    if (hook) hook(1);
  }
  ~SubmitScope() {
    t_untraced = was_untraced;
    if (hook) hook(0);
  }
  SubmitScope(const SubmitScope&) = delete;
  SubmitScope& operator=(const SubmitScope&) = delete;
};

// Tracing: the driver tags each submission through tagSubmission and
// reports the driver's activity records as TaskRecords.
constexpr uint64_t kUntraced = ~uint64_t{0};
std::atomic<TagHook> g_tag{nullptr};
uint64_t tagSubmission() {
  if (t_untraced) return kUntraced;
  TagHook tag = g_tag.load(std::memory_order_relaxed);
  return tag ? tag() : 0;
}
std::atomic<TraceSink> g_sink{nullptr};
void activity(const OmtiaActivityRecord* r, void*) {
  TraceSink sink = g_sink.load();
  if (!sink || r->correlation == kUntraced) return;
  sink(TaskRecord{r->device, static_cast<StreamId>(r->stream_label), r->name ? r->name : "", r->correlation, r->start_ns,
                  r->end_ns, OMTIA_HAS_FIELD(r, OmtiaActivityRecord, error) ? r->error : nullptr});
}

}  // namespace

std::string driverError() {
  Driver& d = loadedDriver();
  return d.table ? "" : d.error;
}

std::string driverName() {
  Driver& d = loadedDriver();
  return d.table ? d.table->name : "";
}

// ------------------------------------------------------------ devices

bool inBadFork() noexcept {
  Driver& d = driver();
  if (!d.table) return false;
  int forked = 0;
  return d.table->in_bad_fork(&forked) == OMTIA_SUCCESS && forked;
}

int deviceCount() noexcept {
  try {
    return loadedDriver().count;
  } catch (...) {
    return 0;
  }
}

void configure(const RuntimeConfig& config) {
  std::lock_guard<std::mutex> lk(g_load_mu);
  Driver& d = driver();
  if (d.loaded) throw Error(ErrorCode::kInvalidValue, "the runtime is configured before its first use, and once");
  d.config = config;
}

void checkDevice(int device) {
  T();  // (no driver: kUnavailable, not "device count is 0")
  int n = deviceCount();
  if (device < 0 || device >= n)
    throw Error(ErrorCode::kInvalidDevice, "invalid mtia device index " + std::to_string(device) +
                                               " (device count is " + std::to_string(n) + ")");
}

// (Device indices are checked here, so every driver's bad index gives the same message.)
DeviceProperties deviceProperties(int device) {
  checkDevice(device);
  OmtiaDeviceProperties p{};
  p.struct_size = sizeof p;
  check(T().device_properties(device, &p));
  DeviceProperties out;
  out.name = p.name;
  out.total_memory = p.total_memory;
  out.major = p.major;
  out.minor = p.minor;
  out.processor_count = p.processor_count;
  out.host_addressable = (p.flags & OMTIA_DEVICE_HOST_ADDRESSABLE) != 0;
  out.asynchronous = (p.flags & OMTIA_DEVICE_ASYNC) != 0;
  return out;
}

void memGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  checkDevice(device);
  size_t f = 0, t = 0;
  check(T().mem_get_info(device, &f, &t));
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
}

// ------------------------------------------------------------ memory

void* deviceMalloc(int device, size_t bytes) {
  checkDevice(device);
  void* p = nullptr;
  check(T().mem_alloc(device, bytes, &p));
  return p;
}

void deviceFree(int device, void* ptr) { check(T().mem_free(device, ptr)); }

Allocation pointerAllocation(const void* ptr) {
  Driver& d = loadedDriver();
  if (!d.table || !ptr) return {};
  OmtiaPointerAttributes a{};
  a.struct_size = sizeof a;
  check(d.table->pointer_get_attributes(ptr, &a));
  if (a.type == OMTIA_MEMORY_UNREGISTERED) return {};
  return {a.type == OMTIA_MEMORY_DEVICE ? a.device : -1, a.base, a.size};
}

int pointerDevice(const void* ptr) { return pointerAllocation(ptr).device; }

void* hostMallocPinned(size_t bytes) {
  void* p = nullptr;
  check(T().host_alloc(bytes, &p));
  return p;
}

void hostFreePinned(void* ptr) { check(T().host_free(ptr)); }

bool isPinned(const void* ptr) {
  Allocation a = pointerAllocation(ptr);
  return a.base && a.device < 0;
}

// ------------------------------------------------------------ streams

int streamPriority(StreamId stream) { return stream > kPoolSize ? -1 : 0; }

void checkStream(int device, StreamId stream) {
  checkDevice(device);
  if (stream < 0 || stream >= kStreamsPerDevice)
    throw Error(ErrorCode::kInvalidValue, "invalid mtia stream id " + std::to_string(stream));
}

StreamId streamFromPool(int device, int priority) {
  checkDevice(device);
  int high = priority < 0 ? 1 : 0;
  unsigned k = streamsOf(device).next_pool[high].fetch_add(1) % kPoolSize;
  return 1 + high * kPoolSize + static_cast<int>(k);
}

size_t launchQueueDepth() { return loadedDriver().queue_depth; }

void setWaitHook(WaitHook hook) {
  g_wait_hook.store(hook);
  check(T().set_wait_hook(&countedWait));
}

void setIdleHook(IdleHook hook) { check(T().set_idle_hook(hook)); }

void setHostWorkHook(HostWorkHook hook) {
  // (a driver of ABI 1.0 runs no work on host threads but its synchronous launches, and has no hook)
  if (OMTIA_HAS_FIELD(&T(), OmtiaDriver, set_host_work_hook)) check(T().set_host_work_hook(hook));
}

bool workRunsParallel() {
  if (!OMTIA_HAS_FIELD(&T(), OmtiaDriver, work_runs_parallel)) return false;
  int on_host = 0;
  check(T().work_runs_parallel(&on_host));
  return on_host != 0;
}

namespace detail {
const char* runGuarded(void (*call)(void*), void* box) {
  return runCatching([&] { call(box); });
}
}  // namespace detail

void launch(int device, StreamId stream, const char* name, HostTask task) {
  OmtiaStream s;
  try {
    s = handle(device, stream);
  } catch (...) {
    if (task.destroy) task.destroy(task.user);
    throw;
  }
  SubmitScope submit((task.flags & kTaskUntraced) != 0);
  OmtiaLaunchArgs a{};
  a.struct_size = sizeof a;
  a.fn = task.fn;
  a.user = task.user;
  a.destroy = task.destroy;
  a.name = name;
  a.flags = ((task.flags & kTaskWaitsForHost) ? OMTIA_LAUNCH_WAITS_FOR_HOST : 0u) |
            ((task.flags & kTaskMayBlock) ? OMTIA_LAUNCH_MAY_BLOCK : 0u);
  detail::countLaunch();
  OmtiaStatus st = T().launch_host_func(s, &a);
  if (st != OMTIA_SUCCESS) {  // not launched: still ours
    std::exception_ptr error;
    try {
      raise(st);  // (reads the driver's last error before destroy can make another)
    } catch (...) {
      error = std::current_exception();
    }
    if (task.destroy) task.destroy(task.user);
    std::rethrow_exception(error);
  }
  if (loadedDriver().launch_blocking) {
    int capturing = 0;
    check(T().stream_is_capturing(s, &capturing));
    if (!capturing) {
      detail::HostWaitScope waiting;
      check(T().stream_synchronize(s));  // raise at the failing task
    }
  }
}

bool launchBlocking() { return loadedDriver().launch_blocking; }

bool onStreamWorker() noexcept {
  Driver& d = driver();
  int yes = 0;
  return d.table && d.table->on_driver_thread(&yes) == OMTIA_SUCCESS && yes;
}

bool streamQuery(int device, StreamId stream) {
  OmtiaStatus s = T().stream_query(handle(device, stream));
  if (s == OMTIA_ERROR_NOT_READY) return false;
  check(s);
  return true;
}

void streamSynchronize(int device, StreamId stream) {
  OmtiaStream s = handle(device, stream);
  detail::HostWaitScope waiting;
  check(T().stream_synchronize(s));
}

void deviceSynchronize(int device) {
  checkDevice(device);
  detail::HostWaitScope waiting;
  check(T().device_synchronize(device));
}

void deviceWaitIdle(int device) {
  checkDevice(device);
  detail::HostWaitScope waiting;
  check(T().device_wait_idle(device));
}

void stopWorkers() {
  Driver& d = driver();
  if (d.table) d.table->shutdown();
}

void setTracing(TagHook tag, TraceSink sink, SubmitHook submitted) {
  g_submitted.store(sink ? submitted : nullptr);
  g_tag.store(sink ? tag : nullptr);
  g_sink.store(sink);
  check(T().set_activity_callback(sink ? &tagSubmission : nullptr, sink ? &activity : nullptr, nullptr));
}

// ------------------------------------------------------------ faults

void injectFault(const Fault& fault) {
  const OmtiaDriver& t = T();
  if (!OMTIA_HAS_FIELD(&t, OmtiaDriver, inject_fault) || !t.inject_fault)
    throw Error(ErrorCode::kNotSupported, std::string("the mtia driver '") + t.name + "' injects no faults");
  check(injectInto(&t, fault));
}

void clearFaults() {
  const OmtiaDriver& t = T();
  if (OMTIA_HAS_FIELD(&t, OmtiaDriver, clear_faults) && t.clear_faults) check(t.clear_faults());
}

bool hostWorkFaults(int device, StreamId stream, const char* name) {
  if (!g_faults_armed.load(std::memory_order_relaxed)) return false;
  const OmtiaDriver& t = T();
  if (!OMTIA_HAS_FIELD(&t, OmtiaDriver, host_work_fault) || !t.host_work_fault) return false;
  int faulted = 0;
  check(t.host_work_fault(handle(device, stream), name, &faulted));
  return faulted != 0;
}

bool dataReceived(int device, StreamId stream, const char* name, void* data, size_t bytes) {
  if (!g_faults_armed.load(std::memory_order_relaxed)) return false;
  const OmtiaDriver& t = T();
  if (!OMTIA_HAS_FIELD(&t, OmtiaDriver, data_received) || !t.data_received) return false;
  int corrupted = 0;
  check(t.data_received(handle(device, stream), name, data, bytes, &corrupted));
  return corrupted != 0;
}

// ------------------------------------------------------------ graphs

Graph* graphCreate() {
  OmtiaGraph g = nullptr;
  check(T().graph_create(&g));
  return new Graph{g};
}

void graphDestroy(Graph* graph) {
  check(T().graph_destroy(graph->handle));
  delete graph;
}

void streamBeginCapture(int device, StreamId stream, Graph* graph) {
  check(T().stream_begin_capture(handle(device, stream), graph->handle));
}

void streamEndCapture(int device, StreamId stream) { check(T().stream_end_capture(handle(device, stream))); }

bool streamIsCapturing(int device, StreamId stream) {
  int capturing = 0;
  check(T().stream_is_capturing(handle(device, stream), &capturing));
  return capturing != 0;
}

size_t graphTaskCount(const Graph* graph) {
  size_t n = 0;
  check(T().graph_task_count(graph->handle, &n));
  return n;
}

std::vector<std::string> graphTaskNames(const Graph* graph) {
  std::vector<std::string> names;
  for (size_t i = 0, n = graphTaskCount(graph); i < n; ++i) {
    const char* name = nullptr;
    check(T().graph_task_name(graph->handle, i, &name));
    names.emplace_back(name ? name : "");
  }
  return names;
}

void graphLaunch(Graph* graph, int device, StreamId stream) {
  detail::countLaunch();
  SubmitScope submit;
  check(T().graph_launch(graph->handle, handle(device, stream)));
}

void graphClear(Graph* graph) { check(T().graph_clear(graph->handle)); }

// ------------------------------------------------------------ events

Event* eventCreate(bool enable_timing) {
  OmtiaEvent e = nullptr;
  check(T().event_create(enable_timing ? OMTIA_EVENT_TIMING : 0u, &e));
  return new Event{e};
}

void eventDestroy(Event* event) {
  if (!event) return;
  check(T().event_destroy(event->handle));
  delete event;
}

void eventRecord(Event* event, int device, StreamId stream) {
  SubmitScope submit;
  check(T().event_record(event->handle, handle(device, stream)));
}

void streamWaitEvent(int device, StreamId stream, Event* event) {
  SubmitScope submit;
  check(T().stream_wait_event(handle(device, stream), event->handle));
}

bool eventQuery(Event* event) {
  OmtiaStatus s = T().event_query(event->handle);
  if (s == OMTIA_ERROR_NOT_READY) return false;
  check(s);
  return true;
}

void eventSynchronize(Event* event) {
  detail::HostWaitScope waiting;
  check(T().event_synchronize(event->handle));
}

double eventElapsedMs(Event* start, Event* end) {
  double ms = 0;
  check(T().event_elapsed_ms(start->handle, end->handle, &ms));
  return ms;
}

int eventDevice(Event* event) {
  int device = -1;
  check(T().event_device(event->handle, &device));
  return device;
}

// ------------------------------------------------------------ copies

namespace {
OmtiaCopyKind kindOf(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice: return OMTIA_COPY_HOST_TO_DEVICE;
    case CopyKind::kDeviceToHost: return OMTIA_COPY_DEVICE_TO_HOST;
    case CopyKind::kDeviceToDevice: return OMTIA_COPY_DEVICE_TO_DEVICE;
  }
  return OMTIA_COPY_DEVICE_TO_DEVICE;
}
}  // namespace

void memcpy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  SubmitScope submit;
  detail::HostWaitScope waiting;
  check(T().memcpy(dst, src, bytes, kindOf(kind)));
}

void memcpyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, int device, StreamId stream) {
  SubmitScope submit;
  check(T().memcpy_async(dst, src, bytes, kindOf(kind), handle(device, stream)));
}

}  // namespace omr
