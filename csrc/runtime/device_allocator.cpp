// The device allocator: a c10::DeviceAllocator over the client's caching
// allocator (one per device, OPENMTIA_ALLOC_CONF), with memory history and
// profiler reports of each allocation.
#include <c10/core/CachingDeviceAllocator.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "openmtia/caching_allocator.h"
#include "runtime/gil.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/graphs.h"
#include "runtime/memory_history.h"
#include "runtime/stream.h"

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
  } catch (const omr::Error& e) {  // e.g. a broken device: torch.AcceleratorError, as at any other call
    throwDriverError(e);
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

struct HostLabelledDeviceAllocator final : public c10::Allocator {
  c10::DeviceIndex device = 0;
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr dp = allocateOn(device, n);
    dp.unsafe_set_device(c10::Device(c10::kCPU));
    return dp;
  }
  void copy_data(void* dst, const void* src, std::size_t count) const override { std::memcpy(dst, src, count); }
};

}  // namespace

c10::DeviceAllocator* deviceAllocator() { return &g_device_allocator; }

c10::Allocator* hostLabelledDeviceAllocator(c10::DeviceIndex device) {
  static HostLabelledDeviceAllocator allocators[omr::kMaxDevices];
  static std::once_flag once;
  std::call_once(once, [] {
    for (int i = 0; i < omr::kMaxDevices; ++i) allocators[i].device = static_cast<c10::DeviceIndex>(i);
  });
  return &allocators[device];
}

omr::CachingAllocator& deviceCache(c10::DeviceIndex index) { return cacheOf(index); }

REGISTER_ALLOCATOR(c10::DeviceType::MTIA, &g_device_allocator);

}  // namespace openmtia
