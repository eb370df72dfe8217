// A caching device allocator over the runtime's deviceMalloc/deviceFree, in
// the manner of PyTorch's CUDA caching allocator: freed blocks are kept per
// device and per stream in a small pool (requests up to 1 MiB, carved from
// 2 MiB segments) and a large pool, split to fit a request and coalesced with
// free neighbours when freed, so a steady loop makes no device allocation
// after warm-up. No torch dependency.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "openmtia/runtime.h"

namespace omr {

// OPENMTIA_ALLOC_CONF, e.g. "max_split_size_mb:64,garbage_collection_threshold:0.8".
struct CacheConfig {
  size_t max_split_size = SIZE_MAX;  // blocks this large are never split (nor used for smaller requests)
  double gc_threshold = 0;           // > 0: before growing past this share of the limit, free cached blocks
  double memory_fraction = 1.0;      // share of the device capacity this process may reserve
  static CacheConfig parse(const std::string& conf);  // throws Error on a bad entry
};

struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void add(int64_t n) {  // (inline: a few of each per allocation)
    current += n;
    peak = current > peak ? current : peak;
    allocated += n;
  }
  void sub(int64_t n) {
    current -= n;
    freed += n;
  }
};

enum StatPool { kAggregatePool = 0, kSmallPool = 1, kLargePool = 2, kNumStatPools = 3 };

struct CacheStats {
  // counts
  Stat allocation[kNumStatPools], segment[kNumStatPools], active[kNumStatPools], inactive_split[kNumStatPools];
  // bytes
  Stat allocated_bytes[kNumStatPools], reserved_bytes[kNumStatPools], active_bytes[kNumStatPools],
      inactive_split_bytes[kNumStatPools], requested_bytes[kNumStatPools];
  int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
  int64_t num_sync_all_streams = 0, oversize_allocations = 0, oversize_segments = 0;
  int64_t max_split_size = 0;
};

// Calls f(name, stats array) for every Stat array of a CacheStats, named as
// torch.cuda.memory_stats() names them.
template <typename Stats, typename F>
void forEachStatArray(Stats& s, F&& f) {
  f("allocation", s.allocation);
  f("segment", s.segment);
  f("active", s.active);
  f("inactive_split", s.inactive_split);
  f("allocated_bytes", s.allocated_bytes);
  f("reserved_bytes", s.reserved_bytes);
  f("active_bytes", s.active_bytes);
  f("inactive_split_bytes", s.inactive_split_bytes);
  f("requested_bytes", s.requested_bytes);
}

// One block of a segment, for snapshots.
struct BlockInfo {
  uintptr_t address = 0;
  size_t size = 0, requested = 0;
  bool allocated = false;
};
struct SegmentInfo {
  uintptr_t address = 0;
  size_t total_size = 0, allocated_size = 0, active_size = 0, requested_size = 0;
  StreamId stream = 0;
  bool large = false;
  std::vector<BlockInfo> blocks;
};

class CachingAllocator {
 public:
  CachingAllocator(int device, CacheConfig config);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Throws OutOfMemoryError (after freeing cached blocks and retrying once)
  // with a message giving the request and the device's allocated, reserved
  // and free memory. The returned block's size is at least `size`.
  void* malloc(size_t size, StreamId stream);
  // The block returns to its stream's pool at once: later work on that stream
  // may reuse it (stream order makes that safe). If other streams use it
  // (recordStream), only after each of them has passed an event recorded now.
  void free(void* ptr);
  // Marks the block at ptr as used by `stream` too (a stream of the same
  // device; the allocation's own stream is ignored), as CUDA's record_stream.
  void recordStream(void* ptr, StreamId stream);
  void emptyCache();  // returns unused cached segments to the device
  CacheStats stats();
  void resetPeakStats();
  void resetAccumulatedStats();
  std::vector<SegmentInfo> snapshot();
  void setMemoryFraction(double fraction);
  const CacheConfig& config() const { return config_; }
  // Called (outside the allocator's lock) before an OutOfMemoryError is thrown:
  // (device, requested bytes, bytes allocated, bytes free on the device).
  using OomObserver = std::function<void(int, int64_t, int64_t, int64_t)>;
  void attachOomObserver(OomObserver observer);

  // Called, under the allocator's lock, when a segment is taken from or
  // returned to the device: (true = allocated, address, size, stream).
  using SegmentObserver = std::function<void(bool, uintptr_t, size_t, StreamId)>;
  void setSegmentObserver(SegmentObserver observer);

  static size_t roundSize(size_t size);

 private:
  struct Block;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  CacheConfig config_;
};

}  // namespace omr
