// Shared helpers of the openmtia torch integration.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <ATen/core/stack.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "openmtia/caching_allocator.h"
#include "openmtia/runtime.h"

namespace c10 {
struct FunctionSchema;
struct IValue;
class OperatorHandle;
}  // namespace c10

namespace openmtia {

constexpr c10::DeviceType kMTIA = c10::DeviceType::MTIA;

// Runs `expr`, turning runtime errors into the c10 errors Python maps to the
// right exception types (torch.OutOfMemoryError, RuntimeError).
#define OMR_CALL(expr)                                                       \
  [&]() -> decltype(auto) {                                                  \
    try {                                                                    \
      return expr;                                                           \
    } catch (const omr::OutOfMemoryError& e_) {                              \
      TORCH_CHECK_WITH(OutOfMemoryError, false, e_.what());                  \
    } catch (const omr::Error& e_) {                                         \
      TORCH_CHECK(false, e_.what());                                         \
    }                                                                        \
  }()

// ---- current device and stream (thread local, like CUDA's)
c10::DeviceIndex currentDevice();
void setCurrentDevice(c10::DeviceIndex index);  // validates the index
c10::DeviceIndex deviceCount() noexcept;
void checkDevice(c10::DeviceIndex index);
// Resolves a possibly index-less mtia device to a concrete index.
c10::DeviceIndex deviceIndexOf(const c10::Device& device);

c10::Stream currentStream(c10::DeviceIndex index);  // -1: current device
c10::Stream defaultStream(c10::DeviceIndex index);
void setCurrentStream(const c10::Stream& stream);
c10::Stream makeStream(c10::DeviceIndex index, omr::StreamId id);
inline omr::StreamId streamId(const c10::Stream& s) { return static_cast<omr::StreamId>(s.id()); }

omr::StreamId currentStreamId(c10::DeviceIndex device);  // of the calling thread
// Enqueue `fn` (a callable that throws on failure) as a device task on the
// current stream of `device`.
template <typename F>
void launchOnCurrentStream(c10::DeviceIndex device, const char* name, F&& fn) {
  OMR_CALL(omr::launch(device, currentStreamId(device), name, std::forward<F>(fn)));
}
// Waits for the current stream of `device` (raises pending task errors).
void syncCurrentStream(c10::DeviceIndex device);
// The strided copy kernel, a task named `name` on dst's device's current
// stream: dst[...] = src[...] with broadcasting and dtype conversion. src may
// be a CPU tensor (a 0-dim value). Both are read through host views taken now.
void launchCopyKernel(const at::Tensor& dst, const at::Tensor& src, const char* name = "copy_");

// ---- allocators
c10::DeviceAllocator* deviceAllocator();
c10::Allocator* pinnedAllocator();
// A non_blocking copy used this pinned tensor on `stream`: its block is not
// reused before the stream passes the point where it is freed.
void recordPinnedUse(const at::Tensor& host, c10::Stream stream);
// An allocator that allocates device memory of `device` but labels the
// DataPtr as CPU: used to let host kernels resize device-backed storages.
c10::Allocator* hostLabelledDeviceAllocator(c10::DeviceIndex device);

// While alive, CPU allocations on this thread of exactly a slot's size are
// served from that slot (the first unused one), once each: a task lets the
// CPU kernel allocate its results in the device outputs' memory.
class ResultPlacement {
 public:
  struct Slot {
    void* ptr;
    size_t nbytes;
    bool taken = false;
  };
  explicit ResultPlacement(std::vector<Slot> slots);
  ~ResultPlacement();
  ResultPlacement(const ResultPlacement&) = delete;
  ResultPlacement& operator=(const ResultPlacement&) = delete;

 private:
  std::vector<Slot> slots_;
  std::vector<Slot>* saved_;
};

// ---- tensors
// A CPU tensor that views the same (host-addressable) memory as an mtia tensor.
// It does not keep a device block allocated (hostStorageOf): stream-ordered
// reuse makes that safe for a task on the stream, but two buffers that one
// task uses together must be held as device tensors until it has run. Only for
// use after the stream that writes it has been waited for, or inside a task on
// that stream.
at::Tensor hostView(const at::Tensor& t);
// A CPU storage over the same bytes as a device storage; resizable through
// `resize_allocator` when given.
c10::Storage hostStorageOf(const c10::Storage& storage, c10::Allocator* resize_allocator);
at::Tensor hostViewOn(c10::Storage host_storage, const at::Tensor& t);
// A tensor of dispatch key `key` with t's metadata over `storage`.
at::Tensor viewOn(c10::Storage storage, const at::Tensor& t, c10::DispatchKey key);
bool isDense(const at::Tensor& t);
// Grows t's storage (contents kept, ordered on the stream) so t fits in it.
void ensureStorageFits(const at::Tensor& t);  // non-overlapping and dense, no conj/neg bit

// ---- generators
const at::Generator& defaultGenerator(c10::DeviceIndex index);
at::Generator newGenerator(c10::DeviceIndex index);
// The random draws of a captured graph: per generator, how many offsets one
// replay takes, and (set by a task at each replay) where they start.
struct GraphRng {
  std::vector<at::Generator> generators;
  std::vector<uint64_t> counts;
  std::vector<uint64_t> seeds, bases;
};
// One random op's share of an mtia generator: drawn on the host when the op
// is issued (in program order), turned into a private host engine by its task.
// Captured in a graph, its offset is relative to the replay's base.
struct RandomDraw {
  uint64_t seed = 0, offset = 0;
  std::shared_ptr<GraphRng> graph;
  size_t slot = 0;
  at::Generator engine() const;  // a CPU generator for the CPU kernel
};
// Draws from an mtia generator (raises for a generator of another device type).
RandomDraw drawRandom(const at::Generator& mtia_gen);
// Advances an mtia generator by n offsets; returns the first.
uint64_t reserveRandomOffsets(const at::Generator& mtia_gen, uint64_t n);

// ---- graphs (graphs.cpp)
int64_t graphCreate(bool keep_graph);
void graphDestroy(int64_t handle);
void graphCaptureBegin(int64_t handle, c10::MempoolId_t pool);
void graphCaptureEnd(int64_t handle);
void graphInstantiate(int64_t handle);
void graphReplay(int64_t handle);
void graphReset(int64_t handle);
c10::MempoolId_t graphPool(int64_t handle);
std::vector<std::string> graphTaskNames(int64_t handle);
c10::MempoolId_t graphPoolHandle();
// Whether device's current stream is being captured into a graph.
bool isCapturing(c10::DeviceIndex device);
// The random draws of the graph capturing on device's current stream, if any.
std::shared_ptr<GraphRng> capturingRng(c10::DeviceIndex device);
// The caching allocator's pool for an allocation on `stream`: the stream's
// own, or the pool of the graph capturing on it.
omr::StreamId allocationPoolKey(c10::DeviceIndex device, omr::StreamId stream);

// Runs fn with the GIL released if this thread holds it (python.cpp).
void withoutGil(const std::function<void()>& fn);
// Runs fn with Python's warnings recorded instead of shown (a Python meta
// kernel's, while the fallback plans a call); returns how many there were.
int withPythonWarningsRecorded(const std::function<void()>& fn);
// Whether e is a Python KeyboardInterrupt or SystemExit (raised by Python
// code the op called): never swallowed by a fallback path.
bool isInterrupt(const std::exception& e);

// ---- per-op properties
// A property of an op (`key`: its schema's address) that `compute` gives,
// computed once per op and thread (no lock): for what the fallback asks of an
// op at every call. Each call site (its own `compute` type) has its own cache.
template <typename Compute>
auto perOp(const void* key, Compute compute) -> decltype(compute()) {
  thread_local std::unordered_map<const void*, decltype(compute())> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, compute()).first;
  return it->second;
}

// ---- kernel threads (threads.cpp)
// Kernels over less work than this run on one thread (see threads.cpp).
constexpr int64_t kParallelWork = int64_t{1} << 16;
// A matrix op's elements count this many times (its work grows faster).
constexpr int64_t kDenseWorkScale = 16;
// The elements of the tensors (and tensor lists) among `values`.
int64_t workElements(const std::vector<c10::IValue>& values);
// The work of a kernel of `op` over `elements` elements (for useKernelThreads).
int64_t kernelWork(const c10::OperatorHandle& op, int64_t elements);
// Sets how many threads the OpenMP and MKL parallel regions of the calling
// (worker) thread use for a kernel over `work_elements` elements: one below
// kParallelWork, all of them otherwise. Every kernel task calls it first.
// (Elements count as work, except where kernelWork() says more.)
void useKernelThreads(int64_t work_elements);
// Ends the calling thread's OpenMP team, if it has one (its threads exit;
// its next parallel region makes a new team). A stream worker's idle hook.
void endThreadTeam();
// Around a CPU kernel a host thread runs itself (a synchronous call) over
// `work` elements (as useKernelThreads counts them): below kParallelWork the
// kernel runs on one thread, as on a worker (the thread's OpenMP and MKL
// thread counts are restored after: they are the program's), so it makes no
// OpenMP team; above, on all threads, and the host thread's team ends after
// it, so the device's team is the only one and spins between its kernels'
// regions (threads.cpp). Nothing on a stream worker.
class HostKernelScope {
 public:
  explicit HostKernelScope(int64_t work);
  ~HostKernelScope();
  HostKernelScope(const HostKernelScope&) = delete;
  HostKernelScope& operator=(const HostKernelScope&) = delete;

 private:
  bool active_ = false;   // a host thread
  int omp_threads_ = 0;   // its OpenMP thread count while the kernel runs on one thread
  int mkl_threads_ = 0;   // its MKL thread-local count then (0: MKL's global one)
};
// Splits [0, n) into one contiguous range per thread of ATen's team (as
// many as the calling thread's parallel regions use, at most n) and runs
// f(begin, end) on each, in one parallel region (one call on the calling
// thread if that is one thread). Inside, ATen's kernels run on the thread
// that calls them.
void forEachThread(int64_t n, const std::function<void(int64_t, int64_t)>& f);

// ---- prebuilt kernels for graph replays (prebuilt.cpp)
// A kernel whose set-up was done once: run() executes the CPU loop.
class PrebuiltKernel {
 public:
  virtual ~PrebuiltKernel() = default;
  virtual void run() = 0;
};
// For a structured TensorIterator op (and relu) captured into a graph: its
// ATen CPU kernel with the iterator built now, over host views `args` and
// the outputs `outs` (for an in-place op, self), whose addresses stay fixed
// across replays. `constants` are arguments whose values never change (the
// task's copies of CPU scalars). nullptr if the op has no such kernel, or a
// replay could not reuse the iterator (see prebuilt.cpp).
std::shared_ptr<PrebuiltKernel> prebuildKernel(const c10::FunctionSchema& schema, std::vector<c10::IValue> args,
                                               std::vector<at::Tensor> outs, const std::vector<at::Tensor>& constants);
int64_t prebuiltKernelCount();  // made so far (for tests)
// ---- the boxed fallback (fallback.cpp), for kernels that take it for the
// calls they do not handle themselves
void boxedFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The same for an op with one tensor result: `op(args...)` through the
// boxed fallback.
at::Tensor boxedFallbackCall(const c10::OperatorHandle& op, std::vector<c10::IValue> args);
// A contiguous mtia tensor of these sizes and dtype on the current device
// (ops.cpp): the result of an unboxed kernel; emptyDeviceLike(a): a's sizes
// and dtype.
at::Tensor emptyDevice(at::IntArrayRef sizes, at::ScalarType dtype);
at::Tensor emptyDeviceLike(const at::Tensor& a);
// Ops with an unboxed kernel for their common case (pointwise.cpp and
// low_precision_activations.cpp), as "name.overload" without "aten::".
const std::unordered_set<std::string>& unboxedOps();
// ---- what the fallback registers (for `python -m openmtia.ops`)
extern const char* const kConvolutionOps[3];  // convolution.cpp
std::vector<std::string> cpuKernelOverCompositeOps();
std::vector<std::string> structuredOps();
// How many results tasks have copied into their outputs since the start
// (kernels that did not allocate their results in the outputs' memory).
int64_t stagedResultCount();

// ---- the device's caching allocator (statistics, empty_cache, snapshots)
omr::CachingAllocator& deviceCache(c10::DeviceIndex index);

// ---- memory history (memory_history.cpp): torch.mtia.record_memory_history
void recordMemoryHistory(const std::optional<std::string>& enabled, const std::string& stacks, size_t max_entries);
// The caller's stack, when the history records stacks (else nullptr); taken
// before the allocator's lock, as gathering Python frames takes the GIL.
std::shared_ptr<c10::GatheredContext> allocationContext();
void recordAlloc(c10::DeviceIndex device, void* ptr, size_t size, int64_t stream,
                 std::shared_ptr<c10::GatheredContext> context);
void recordFree(c10::DeviceIndex device, void* ptr, size_t size, int64_t stream);
void recordOom(c10::DeviceIndex device, size_t requested, size_t device_free);

}  // namespace openmtia
