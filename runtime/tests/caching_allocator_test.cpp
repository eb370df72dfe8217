#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "openmtia/caching_allocator.h"

using omr::CacheConfig;
using omr::CachingAllocator;

namespace {
size_t deviceUsed(int dev) {
  size_t free_b = 0, total = 0;
  omr::memGetInfo(dev, &free_b, &total);
  return total - free_b;
}
}  // namespace

TEST(CachingAllocator, ReusesFreedBlocksWithoutDeviceAllocations) {
  CachingAllocator a(0, CacheConfig{});
  void* p = a.malloc(1000, 0);
  std::memset(p, 1, 1000);
  a.free(p);
  auto before = a.stats();
  for (int i = 0; i < 100; ++i) {
    void* q = a.malloc(1000, 0);
    EXPECT_EQ(q, p);  // the cached block comes back
    a.free(q);
  }
  auto after = a.stats();
  EXPECT_EQ(after.num_device_alloc, before.num_device_alloc);
  EXPECT_EQ(after.allocated_bytes[omr::kAggregatePool].current, 0);
  EXPECT_EQ(after.reserved_bytes[omr::kAggregatePool].current, 2 << 20);  // one small segment
  a.emptyCache();
  EXPECT_EQ(a.stats().reserved_bytes[omr::kAggregatePool].current, 0);
}

TEST(CachingAllocator, SplitsAndCoalesces) {
  CachingAllocator a(0, CacheConfig{});
  void* x = a.malloc(4096, 0);
  void* y = a.malloc(4096, 0);
  void* z = a.malloc(4096, 0);
  EXPECT_EQ(static_cast<char*>(y), static_cast<char*>(x) + 4096);  // carved from one segment
  EXPECT_EQ(static_cast<char*>(z), static_cast<char*>(y) + 4096);
  EXPECT_EQ(a.stats().segment[omr::kSmallPool].current, 1);
  a.free(y);
  EXPECT_EQ(a.stats().inactive_split[omr::kAggregatePool].current, 2);  // y's hole and the tail
  EXPECT_EQ(a.malloc(4096, 0), y);  // the hole is reused
  a.free(x);
  a.free(y);
  a.free(z);
  auto s = a.stats();
  EXPECT_EQ(s.inactive_split[omr::kAggregatePool].current, 0);  // all merged back into one block
  auto segs = a.snapshot();
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].blocks.size(), 1u);
  EXPECT_FALSE(segs[0].blocks[0].allocated);
  a.emptyCache();
  EXPECT_TRUE(a.snapshot().empty());
}

TEST(CachingAllocator, PoolsArePerStream) {
  CachingAllocator a(0, CacheConfig{});
  void* p = a.malloc(1 << 12, 1);
  a.free(p);
  void* q = a.malloc(1 << 12, 2);  // another stream's cache is not used
  EXPECT_NE(q, p);
  EXPECT_EQ(a.stats().segment[omr::kAggregatePool].current, 2);
  a.free(q);
  a.emptyCache();
}

TEST(CachingAllocator, LargeRequestsGetTheirOwnSegments) {
  CachingAllocator a(0, CacheConfig{});
  void* big = a.malloc(30 << 20, 0);
  auto s = a.stats();
  EXPECT_EQ(s.reserved_bytes[omr::kLargePool].current, 30 << 20);  // rounded to 2 MiB
  a.free(big);
  void* mid = a.malloc(3 << 20, 0);  // served from the cached large block, split
  EXPECT_EQ(mid, big);
  a.free(mid);
  a.emptyCache();
  EXPECT_EQ(a.stats().reserved_bytes[omr::kAggregatePool].current, 0);
}

TEST(CachingAllocator, OutOfMemoryFreesTheCacheRetriesThenReports) {
  size_t free_b = 0, total = 0;
  omr::memGetInfo(1, &free_b, &total);
  CachingAllocator a(1, CacheConfig{});
  int calls = 0;
  int64_t asked = 0;
  a.attachOomObserver([&](int dev, int64_t req, int64_t, int64_t) {
    EXPECT_EQ(dev, 1);
    ++calls;
    asked = req;
  });
  // fill the cache with a freed block, then ask for more than fits beside it
  void* p = a.malloc(free_b / 2, 0);
  a.free(p);
  void* q = a.malloc(free_b / 2 + (64 << 20), 0);  // fits only after the cache is freed
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  a.free(q);
  try {
    a.malloc(total + 1, 0);
    FAIL() << "expected OutOfMemoryError";
  } catch (const omr::OutOfMemoryError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("Tried to allocate"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is allocated by PyTorch"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reserved by PyTorch but unallocated"), std::string::npos) << msg;
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(asked, static_cast<int64_t>(total + 1));
  EXPECT_EQ(a.stats().num_ooms, 1);
  void* r = a.malloc(1 << 20, 0);  // still usable
  a.free(r);
  a.emptyCache();
  EXPECT_EQ(deviceUsed(1), total - free_b);
}

TEST(CachingAllocator, MemoryFractionCapsReservation) {
  CacheConfig c;
  c.memory_fraction = 0.01;
  CachingAllocator a(0, c);
  size_t free_b = 0, total = 0;
  omr::memGetInfo(0, &free_b, &total);
  EXPECT_THROW(a.malloc(total / 50, 0), omr::OutOfMemoryError);
  void* p = a.malloc(total / 200, 0);
  a.free(p);
  a.emptyCache();
}

TEST(CachingAllocator, ParsesItsConfiguration) {
  auto c = CacheConfig::parse("max_split_size_mb:64,garbage_collection_threshold:0.6,per_process_memory_fraction:0.5");
  EXPECT_EQ(c.max_split_size, size_t(64) << 20);
  EXPECT_DOUBLE_EQ(c.gc_threshold, 0.6);
  EXPECT_DOUBLE_EQ(c.memory_fraction, 0.5);
  EXPECT_EQ(CacheConfig::parse("").max_split_size, SIZE_MAX);
  EXPECT_THROW(CacheConfig::parse("max_split_size_mb:abc"), omr::Error);
  EXPECT_THROW(CacheConfig::parse("unknown:1"), omr::Error);
  EXPECT_THROW(CacheConfig::parse("garbage_collection_threshold:1.5"), omr::Error);
}

TEST(CachingAllocator, OversizeBlocksAreNotSplit) {
  CacheConfig c = CacheConfig::parse("max_split_size_mb:20");
  CachingAllocator a(0, c);
  void* big = a.malloc(40 << 20, 0);
  a.free(big);
  void* small = a.malloc(12 << 20, 0);  // below max_split: the 40 MiB block is not used
  EXPECT_NE(small, big);
  a.free(small);
  a.emptyCache();
}

TEST(CachingAllocator, GarbageCollectionFreesCachedBlocksBeforeGrowing) {
  size_t free_b = 0, total = 0;
  omr::memGetInfo(0, &free_b, &total);
  CacheConfig c;
  c.memory_fraction = double(100 << 20) / total;  // a 100 MiB budget
  c.gc_threshold = 0.5;                            // keep reservations under 50 MiB when possible
  CachingAllocator a(0, c);
  void* p = a.malloc(30 << 20, 0);
  a.free(p);  // cached: 30 MiB reserved
  void* q = a.malloc(40 << 20, 0);  // a new segment, and 30 + 40 > 50: the cached block goes first
  EXPECT_EQ(a.stats().reserved_bytes[omr::kAggregatePool].current, 40 << 20);
  EXPECT_EQ(a.stats().num_device_free, 1);
  a.free(q);
  a.emptyCache();
}

namespace {
// A task that holds its stream busy until *release.
omr::Task busyUntil(std::shared_ptr<std::atomic<bool>> release) {
  return [release] {
    while (!*release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
}
}  // namespace

TEST(CachingAllocator, AFreedBlockIsReusedAtOnceOnItsStream) {
  CachingAllocator cache(0, CacheConfig{});
  auto release = std::make_shared<std::atomic<bool>>(false);
  omr::launch(0, 1, "busy", busyUntil(release));  // stream 1 is busy
  void* a = cache.malloc(4096, 1);
  cache.free(a);                       // queued work on stream 1 may still use it:
  EXPECT_EQ(cache.malloc(4096, 1), a);  // stream order makes reuse safe, no wait
  *release = true;
  omr::streamSynchronize(0, 1);
}

TEST(CachingAllocator, RecordStreamDefersReuseUntilTheOtherStreamPassedTheFree) {
  CachingAllocator cache(0, CacheConfig{});
  auto release = std::make_shared<std::atomic<bool>>(false);
  void* a = cache.malloc(4096, 1);
  omr::launch(0, 2, "busy", busyUntil(release));  // stream 2 uses a, and is busy
  cache.recordStream(a, 2);
  cache.recordStream(a, 1);  // its own stream: ignored
  cache.free(a);
  void* b = cache.malloc(4096, 1);
  EXPECT_NE(b, a);  // stream 2 has not passed the free
  *release = true;
  omr::streamSynchronize(0, 2);
  EXPECT_EQ(cache.malloc(4096, 1), a);
  cache.free(b);
}

TEST(Streams, ALaunchIntoAFullQueueWaitsForRoom) {
  size_t depth = omr::launchQueueDepth();
  auto release = std::make_shared<std::atomic<bool>>(false);
  std::atomic<size_t> launched{0};
  omr::launch(0, 3, "busy", busyUntil(release));
  std::thread host([&] {
    for (size_t i = 0; i < depth + 10; ++i) {
      omr::launch(0, 3, "noop", [] {});
      ++launched;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(launched.load(), depth - 1);  // the busy task and depth - 1 more are pending
  *release = true;
  host.join();
  EXPECT_EQ(launched.load(), depth + 10);
  omr::streamSynchronize(0, 3);
}

TEST(Streams, AFullQueueResumesTheHostWhenHalfEmptyNotAtEachTask) {
  // The host thread sleeps until half the queue has run: woken once per
  // finished task, it took a core from the kernels' own threads.
  size_t depth = omr::launchQueueDepth();
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto done = std::make_shared<std::atomic<size_t>>(0);
  omr::launch(0, 3, "busy", busyUntil(release));
  for (size_t i = 0; i + 1 < depth; ++i)
    omr::launch(0, 3, "slow", [done] {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      ++*done;
    });
  size_t seen = 0;
  std::thread host([&] {
    omr::launch(0, 3, "noop", [] {});  // the queue is full: waits
    seen = done->load();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  *release = true;
  host.join();
  EXPECT_GE(seen + 1, depth / 2);  // (the busy task counts as run)
  EXPECT_LT(seen, depth);
  omr::streamSynchronize(0, 3);
}

TEST(Streams, ConcurrentSynchronizesOnOneStreamAllWake) {
  // Threads wait for different tasks of one stream at once: each must wake
  // when its own task is done (a missed wake-up hangs here).
  auto s = omr::streamFromPool(0, 0);
  std::atomic<long> sum{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        omr::launch(0, s, "add", [&sum, i, t] {
          if ((i + t) % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
          sum += 1;
        });
        if (i % (t + 1) == 0) omr::streamSynchronize(0, s);
      }
      omr::streamSynchronize(0, s);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(sum.load(), 8000);
}
