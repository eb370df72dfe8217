// Device allocator (a c10::DeviceAllocator over the runtime's caching allocator),
// pinned host allocator, result placement for tasks, and device-memory helpers.
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "common.h"
#include "openmtia/caching_allocator.h"

namespace openmtia {
namespace {

// One caching allocator per device (runtime/caching_allocator.h), configured
// by OPENMTIA_ALLOC_CONF; created on first use.
omr::CachingAllocator& cacheOf(c10::DeviceIndex device) {
  // never destroyed: blocks may be freed during interpreter shutdown, and OOM
  // observers hold Python objects that must not be released without the GIL
  static omr::CachingAllocator* caches[omr::kMaxDevices];
  static std::once_flag once;
  static omr::CacheConfig config;
  static std::string config_error;
  std::call_once(once, [] {
    const char* env = std::getenv("OPENMTIA_ALLOC_CONF");
    try {
      if (env) config = omr::CacheConfig::parse(env);
    } catch (const omr::Error& e) {
      config_error = e.what();
    }
    for (c10::DeviceIndex i = 0; i < deviceCount(); ++i) caches[i] = new omr::CachingAllocator(i, config);
  });
  TORCH_CHECK(config_error.empty(), config_error);
  checkDevice(device);
  return *caches[device];
}

// Context of one device allocation; freed (back to the cache) with it.
struct Allocation {
  void* ptr;
  size_t size;
  omr::StreamId stream;
  c10::DeviceIndex device;
};

// torch.profiler(profile_memory=True): memory events of mtia allocations,
// with the device's allocated and reserved totals, as CUDA's allocator reports.
void reportToProfiler(c10::DeviceIndex device, void* ptr, int64_t delta) {
  if (!c10::memoryProfilingEnabled()) return;
  omr::CacheStats m = cacheOf(device).stats();
  c10::reportMemoryUsageToProfiler(ptr, delta, static_cast<size_t>(m.allocated_bytes[omr::kAggregatePool].current),
                                   static_cast<size_t>(m.reserved_bytes[omr::kAggregatePool].current), c10::Device(kMTIA, device));
}

void freeAllocation(void* ctx) {
  auto* a = static_cast<Allocation*>(ctx);
  if (omr::inBadFork()) {  // the parent's memory: not this process's to give back
    delete a;
    return;
  }
  recordFree(a->device, a->ptr, a->size, a->stream);
  cacheOf(a->device).free(a->ptr);  // never throws for a pointer we allocated
  reportToProfiler(a->device, a->ptr, -static_cast<int64_t>(a->size));
  delete a;
}

c10::DataPtr allocateOn(c10::DeviceIndex device, size_t n) {
  c10::Device dev(kMTIA, device);
  if (n == 0) return c10::DataPtr(nullptr, dev);
  // blocks are cached per stream: the current one, where the memory is first used
  omr::StreamId stream = streamId(currentStream(device));
  auto context = allocationContext();  // stack frames, when memory history records them
  void* p;
  try {
    p = cacheOf(device).malloc(n, allocationPoolKey(device, stream));
  } catch (const omr::OutOfMemoryError& e) {
    size_t free_b = 0, total = 0;
    omr::memGetInfo(device, &free_b, &total);
    recordOom(device, n, free_b);
    TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
  }
  size_t size = omr::CachingAllocator::roundSize(n);
  recordAlloc(device, p, size, stream, std::move(context));
  reportToProfiler(device, p, static_cast<int64_t>(size));
  return c10::DataPtr(p, new Allocation{p, size, stream, device}, &freeAllocation, dev);
}

void fill(c10::CachingDeviceAllocator::StatArray& out, const omr::Stat (&in)[omr::kNumStatPools]) {
  for (int p = 0; p < omr::kNumStatPools; ++p) {
    out[p].current = in[p].current;
    out[p].peak = in[p].peak;
    out[p].allocated = in[p].allocated;
    out[p].freed = in[p].freed;
  }
}

struct MTIAAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t n) override { return allocateOn(currentDevice(), n); }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dst, const void* src, std::size_t count) const override {
    OMR_CALL(omr::memcpy(dst, src, count, omr::CopyKind::kDeviceToDevice));
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {
    // waits for queued work (which may use freed blocks): other Python threads run meanwhile
    withoutGil([] {
      for (c10::DeviceIndex i = 0; i < deviceCount(); ++i) cacheOf(i).emptyCache();
    });
  }
  // Tasks hold no device memory: a block freed by the host returns to its
  // stream's pool at once (work on that stream is ordered after what used
  // it). Other streams that use it must be recorded, as with CUDA's caching
  // allocator: the block then waits for them.
  void recordStream(const c10::DataPtr& dp, c10::Stream stream) override {
    if (!dp.get() || dp.get_deleter() != &freeAllocation) return;  // no memory, or not a block of ours
    auto* a = static_cast<Allocation*>(dp.get_context());
    TORCH_CHECK(stream.device_type() == kMTIA, "record_stream: expected an mtia stream, got a ", stream.device_type(),
                " stream");
    TORCH_CHECK(stream.device_index() == a->device, "record_stream: the stream belongs to mtia:",
                static_cast<int>(stream.device_index()), " but the tensor's memory is on mtia:",
                static_cast<int>(a->device));
    OMR_CALL(cacheOf(a->device).recordStream(a->ptr, streamId(stream)));
  }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    omr::CacheStats m = cacheOf(device).stats();
    c10::CachingDeviceAllocator::DeviceStats s;
    fill(s.allocation, m.allocation);
    fill(s.segment, m.segment);
    fill(s.active, m.active);
    fill(s.inactive_split, m.inactive_split);
    fill(s.allocated_bytes, m.allocated_bytes);
    fill(s.reserved_bytes, m.reserved_bytes);
    fill(s.active_bytes, m.active_bytes);
    fill(s.inactive_split_bytes, m.inactive_split_bytes);
    fill(s.requested_bytes, m.requested_bytes);
    s.num_alloc_retries = m.num_alloc_retries;
    s.num_ooms = m.num_ooms;
    s.num_sync_all_streams = m.num_sync_all_streams;
    s.num_device_alloc = m.num_device_alloc;
    s.num_device_free = m.num_device_free;
    s.max_split_size = m.max_split_size;
    return s;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { cacheOf(device).resetAccumulatedStats(); }
  void resetPeakStats(c10::DeviceIndex device) override { cacheOf(device).resetPeakStats(); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    size_t free_b = 0, total = 0;
    OMR_CALL(omr::memGetInfo(device, &free_b, &total));
    return {free_b, total};
  }
};

MTIAAllocator g_device_allocator;

// Pinned host memory: PyTorch's caching host allocator (the one CUDA's builds
// on) over the runtime's pinned allocations. A freed block is reused only
// after every stream that used it (record_event, called by non_blocking
// copies) has passed an event recorded at the free.
struct PinnedEvent {
  std::unique_ptr<omr::Event, void (*)(omr::Event*)> event{nullptr, &omr::eventDestroy};
};

struct MTIAHostAllocatorImpl final : public at::CachingHostAllocatorImpl<c10::Stream, PinnedEvent> {
 private:
  void allocate_host_memory(size_t size, void** ptr) override { *ptr = OMR_CALL(omr::hostMallocPinned(size)); }
  void free_block(at::HostBlock<c10::Stream>* block) override { omr::hostFreePinned(block->ptr_); }
  void record_stream(std::optional<std::vector<PinnedEvent>>& events, c10::Stream stream) override {
    PinnedEvent e;
    e.event.reset(OMR_CALL(omr::eventCreate(false)));
    OMR_CALL(omr::eventRecord(e.event.get(), stream.device_index(), streamId(stream)));
    events->push_back(std::move(e));
  }
  bool query_event(PinnedEvent& e) override { return OMR_CALL(omr::eventQuery(e.event.get())); }
  c10::Stream get_current_stream() const override { return currentStream(currentDevice()); }
  bool stream_is_capturing(c10::Stream) const override { return false; }
};

void freePinnedBlock(void* ctx);
struct MTIAHostAllocator final : public at::CachingHostAllocatorInterface<MTIAHostAllocatorImpl, freePinnedBlock> {};
MTIAHostAllocator& pinnedHost() {  // never destroyed: pinned tensors may outlive static destructors
  static auto* a = new MTIAHostAllocator();
  return *a;
}
void freePinnedBlock(void* ctx) { pinnedHost().free(ctx); }

struct HostLabelledDeviceAllocator final : public c10::Allocator {
  c10::DeviceIndex device = 0;
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr dp = allocateOn(device, n);
    dp.unsafe_set_device(c10::Device(c10::kCPU));
    return dp;
  }
  void copy_data(void* dst, const void* src, std::size_t count) const override { std::memcpy(dst, src, count); }
};

// The CPU allocator, wrapped once at load: while a task runs a CPU kernel
// under a ResultPlacement, the kernel's allocations of exactly an expected
// result's size get that result's device memory (first unused slot of that
// size), so the kernel computes straight into the device output. Everything
// else goes to the wrapped allocator unchanged.
// Slot memory belongs to the device output; some kernels take memory through
// raw_allocate/raw_deallocate (oneDNN scratchpads), so the raw deleter must
// tell slot pointers (not freed) from the wrapped allocator's.
thread_local std::vector<ResultPlacement::Slot>* t_slots = nullptr;
std::mutex g_served_mu;
std::unordered_set<void*> g_served;  // slot pointers handed out and not yet released
std::atomic<int> g_num_served{0};
c10::DeleterFnPtr g_base_raw_deleter = nullptr;

bool releaseServed(void* p) {
  if (g_num_served.load() == 0) return false;
  std::lock_guard<std::mutex> lk(g_served_mu);
  if (!g_served.erase(p)) return false;
  --g_num_served;
  return true;
}

void releaseSlot(void* p) { releaseServed(p); }

void placingRawDelete(void* p) {
  if (!releaseServed(p)) g_base_raw_deleter(p);
}

struct PlacingCPUAllocator final : public c10::Allocator {
  c10::Allocator* base = nullptr;
  c10::DataPtr allocate(size_t n) override {
    if (t_slots) {
      for (auto& s : *t_slots) {
        if (!s.taken && s.nbytes == n) {
          s.taken = true;
          std::lock_guard<std::mutex> lk(g_served_mu);
          if (g_served.insert(s.ptr).second) ++g_num_served;
          return c10::DataPtr(s.ptr, s.ptr, &releaseSlot, c10::Device(c10::kCPU));
        }
      }
    }
    return base->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return g_base_raw_deleter ? &placingRawDelete : nullptr; }
  void copy_data(void* dst, const void* src, std::size_t count) const override { base->copy_data(dst, src, count); }
};

PlacingCPUAllocator g_placing_cpu_allocator;

const bool g_placing_installed = [] {
  g_placing_cpu_allocator.base = c10::GetCPUAllocator();
  g_base_raw_deleter = g_placing_cpu_allocator.base->raw_deleter();
  c10::SetCPUAllocator(&g_placing_cpu_allocator, /*priority=*/0);
  return true;
}();

}  // namespace

ResultPlacement::ResultPlacement(std::vector<Slot> slots) : slots_(std::move(slots)), saved_(t_slots) {
  t_slots = &slots_;
}
ResultPlacement::~ResultPlacement() { t_slots = saved_; }

c10::DeviceAllocator* deviceAllocator() { return &g_device_allocator; }
c10::Allocator* pinnedAllocator() { return &pinnedHost(); }

c10::Allocator* hostLabelledDeviceAllocator(c10::DeviceIndex device) {
  static HostLabelledDeviceAllocator allocators[omr::kMaxDevices];
  static std::once_flag once;
  std::call_once(once, [] {
    for (int i = 0; i < omr::kMaxDevices; ++i) allocators[i].device = static_cast<c10::DeviceIndex>(i);
  });
  return &allocators[device];
}

omr::CachingAllocator& deviceCache(c10::DeviceIndex index) { return cacheOf(index); }

void releaseStorageRef(void* ctx) { c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx)); }

c10::Storage hostStorageOf(const c10::Storage& storage, c10::Allocator* resize_allocator) {
  // A host view neither frees nor keeps device memory: the host frees a block
  // when its last tensor goes, and the caching allocator makes that safe for
  // the tasks still queued (stream-ordered reuse, record_stream). It holds
  // the storage only when that is host memory (which tasks read later), or
  // while its device's current stream is captured: the graph keeps what its
  // tasks use for as long as it holds them (replays run at any later time).
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  c10::DataPtr dp(storage.mutable_data(), c10::Device(c10::kCPU));
  if (storage.device_type() != kMTIA || isCapturing(storage.device().index())) {
    c10::raw::intrusive_ptr::incref(impl);
    dp = c10::DataPtr(storage.mutable_data(), impl, &releaseStorageRef, c10::Device(c10::kCPU));
  }
  return c10::Storage(c10::Storage::use_byte_size_t(), storage.nbytes(), std::move(dp), resize_allocator,
                      /*resizable=*/resize_allocator != nullptr);
}

at::Tensor hostViewOn(c10::Storage host_storage, const at::Tensor& t) {
  return viewOn(std::move(host_storage), t, c10::DispatchKey::CPU);
}

at::Tensor viewOn(c10::Storage storage, const at::Tensor& t, c10::DispatchKey key) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  at::Tensor v(std::move(impl));
  v._set_conj(t.is_conj());
  v._set_neg(t.is_neg());
  return v;
}

at::Tensor hostView(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == c10::kStrided, "openmtia supports strided tensors only, got ", t.layout());
  return hostViewOn(hostStorageOf(t.storage(), nullptr), t);
}

bool isDense(const at::Tensor& t) { return t.is_non_overlapping_and_dense() && !t.is_conj() && !t.is_neg(); }

REGISTER_ALLOCATOR(c10::DeviceType::MTIA, &g_device_allocator);
REGISTER_HOST_ALLOCATOR(c10::DeviceType::MTIA, &pinnedHost());

void recordPinnedUse(const at::Tensor& host, c10::Stream stream) {
  const c10::DataPtr& dp = host.storage().data_ptr();
  pinnedHost().record_event(dp.get(), dp.get_context(), stream);
}

}  // namespace openmtia
