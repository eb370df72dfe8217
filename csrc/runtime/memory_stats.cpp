// torch.mtia.memory_stats() (see memory_stats.h).
#include <ATen/core/CachingHostAllocator.h>

#include "openmtia/runtime.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/host_memory_stats.h"
#include "runtime/memory_stats.h"

namespace openmtia {

std::vector<std::pair<std::string, int64_t>> memoryStats(c10::DeviceIndex index) {
  if (index < 0) index = currentDevice();
  omr::CacheStats m = deviceCache(index).stats();
  std::vector<std::pair<std::string, int64_t>> out = {
      {"dram.allocated_bytes", m.allocated_bytes[omr::kAggregatePool].current},
      {"dram.peak_bytes", m.allocated_bytes[omr::kAggregatePool].peak},
      {"dram.reserved_bytes", m.reserved_bytes[omr::kAggregatePool].current},
      {"dram.peak_reserved_bytes", m.reserved_bytes[omr::kAggregatePool].peak},
      {"dram.num_allocs", m.allocation[omr::kAggregatePool].allocated},
      {"dram.num_frees", m.allocation[omr::kAggregatePool].freed},
      {"dram.num_ooms", m.num_ooms},
  };
  const char* pools[] = {"all", "small_pool", "large_pool"};
  omr::forEachStatArray(m, [&](const char* name, const omr::Stat(&arr)[omr::kNumStatPools]) {
    for (int p = 0; p < omr::kNumStatPools; ++p) {
      std::string key = std::string(name) + "." + pools[p] + ".";
      out.emplace_back(key + "current", arr[p].current);
      out.emplace_back(key + "peak", arr[p].peak);
      out.emplace_back(key + "allocated", arr[p].allocated);
      out.emplace_back(key + "freed", arr[p].freed);
    }
  });
  out.emplace_back("num_alloc_retries", m.num_alloc_retries);
  out.emplace_back("num_ooms", m.num_ooms);
  out.emplace_back("num_device_alloc", m.num_device_alloc);
  out.emplace_back("num_device_free", m.num_device_free);
  out.emplace_back("num_sync_all_streams", m.num_sync_all_streams);
  out.emplace_back("oversize_allocations.current", m.oversize_allocations);
  out.emplace_back("max_split_size", m.max_split_size);
  // pinned host memory (process-wide; PyTorch's caching host allocator):
  // held (in use and cached) and in use
  at::HostStats pinned = at::getHostAllocator(kMTIA)->get_stats();
  out.emplace_back("host.pinned.allocated_bytes", pinned.allocated_bytes.current);
  out.emplace_back("host.pinned.active_bytes", pinned.active_bytes.current);
  // host memory the layers above keep (process-wide; the fallback's plans:
  // docs/memory.md), registered by them
  for (const auto& [name, value] : hostMemoryStats()) out.emplace_back("host." + name, value);
  return out;
}

}  // namespace openmtia
