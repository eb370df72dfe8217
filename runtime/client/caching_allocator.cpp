#include "openmtia/caching_allocator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <unordered_map>

namespace omr {

namespace {
constexpr size_t kMinBlockSize = 512;          // every request is rounded up to a multiple
constexpr size_t kSmallSize = 1 << 20;         // requests up to this go to the small pool
constexpr size_t kSmallBuffer = 2 << 20;       // small pool segments
constexpr size_t kLargeBuffer = 20 << 20;      // large pool segments for requests below kMinLargeAlloc
constexpr size_t kMinLargeAlloc = 10 << 20;
constexpr size_t kRoundLarge = 2 << 20;        // larger requests: segments rounded up to this

}  // namespace

CacheConfig CacheConfig::parse(const std::string& conf) {
  CacheConfig c;
  std::stringstream ss(conf);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto colon = item.find(':');
    std::string key = item.substr(0, colon), value = colon == std::string::npos ? "" : item.substr(colon + 1);
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    bool number = !value.empty() && end && *end == '\0';
    if (key == "max_split_size_mb" && number && v > kSmallSize / double(1 << 20)) {
      c.max_split_size = static_cast<size_t>(v * (1 << 20));
    } else if (key == "garbage_collection_threshold" && number && v > 0 && v < 1) {
      c.gc_threshold = v;
    } else if (key == "per_process_memory_fraction" && number && v > 0 && v <= 1) {
      c.memory_fraction = v;
    } else {
      throw Error(ErrorCode::kInvalidValue,
                  "OPENMTIA_ALLOC_CONF: bad entry '" + item +
                      "' (known: max_split_size_mb:<MiB, over 1>, garbage_collection_threshold:<0..1>, "
                      "per_process_memory_fraction:<0..1]>)");
    }
  }
  return c;
}

struct CachingAllocator::Block {
  void* ptr;
  size_t size;
  size_t requested = 0;
  StreamId stream;
  bool small;
  bool allocated = false;
  Block* prev = nullptr;  // neighbours within the segment
  Block* next = nullptr;
  std::vector<StreamId> stream_uses;  // other streams that use it (recordStream)
  Block(void* p, size_t s, StreamId st, bool sm) : ptr(p), size(s), stream(st), small(sm) {}
  bool split() const { return prev || next; }
};

namespace {
struct BlockLess {
  template <typename B>
  bool operator()(const B* a, const B* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};
}  // namespace

struct CachingAllocator::Impl {
  int device;
  std::mutex mu;
  std::set<Block*, BlockLess> small_free, large_free;
  std::unordered_map<void*, Block*> allocated;
  std::vector<Block*> segments;  // first block of every segment
  CacheStats stats;
  std::vector<OomObserver> observers;
  SegmentObserver segment_observer;
  double fraction = 1.0;
  // freed blocks waiting for the streams that used them: (block, events)
  std::vector<std::pair<Block*, std::vector<Event*>>> pending;

  std::set<Block*, BlockLess>& poolOf(bool small) { return small ? small_free : large_free; }

  void update(Stat (&s)[kNumStatPools], bool small, int64_t n) {
    for (int p : {int(kAggregatePool), small ? int(kSmallPool) : int(kLargePool)}) {
      if (n >= 0) s[p].add(n);
      else s[p].sub(-n);
    }
  }
  // a free block's contribution to the "inactive split" stats
  void inactive(const Block* b, int sign) {
    if (b->allocated || !b->split()) return;
    update(stats.inactive_split, b->small, sign);
    update(stats.inactive_split_bytes, b->small, sign * static_cast<int64_t>(b->size));
  }

  size_t limit() const {
    DeviceProperties p = deviceProperties(device);
    return static_cast<size_t>(std::floor(p.total_memory * fraction));
  }
  size_t reserved() const { return static_cast<size_t>(stats.reserved_bytes[kAggregatePool].current); }

  Block* findFree(size_t size, StreamId stream, bool small, size_t max_split) {
    auto& pool = poolOf(small);
    Block key(nullptr, size, stream, small);
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    // oversize blocks serve only oversize requests, and not much smaller ones
    if (size < max_split && b->size >= max_split) return nullptr;
    if (size >= max_split && b->size >= size + kLargeBuffer) return nullptr;
    pool.erase(it);
    return b;
  }

  // Returns to their pools the freed blocks whose streams passed their events.
  void processEvents() {
    for (auto it = pending.begin(); it != pending.end();) {
      auto& events = it->second;
      if (!std::all_of(events.begin(), events.end(), [](Event* e) { return eventQuery(e); })) {
        ++it;
        continue;
      }
      for (Event* e : events) eventDestroy(e);
      Block* b = it->first;
      it = pending.erase(it);
      release(b);
    }
  }

  // A free block goes back to its pool, coalesced with free neighbours.
  void release(Block* b) {
    update(stats.active, b->small, -1);
    update(stats.active_bytes, b->small, -static_cast<int64_t>(b->size));
    auto& pool = poolOf(b->small);
    for (Block* n : {b->prev, b->next}) {
      if (!n || n->allocated || !pool.count(n)) continue;  // (a neighbour still waiting for events is not free)
      inactive(n, -1);
      pool.erase(n);
      if (n == b->prev) {
        n->size += b->size;
        n->next = b->next;
        if (b->next) b->next->prev = n;
        delete b;
        b = n;
      } else {
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        delete n;
      }
    }
    inactive(b, +1);
    pool.insert(b);
  }

  // Frees every cached segment that is entirely unused (after the work
  // queued so far, which may use blocks freed by the host, has run).
  void releaseCached() {
    deviceWaitIdle(device);
    processEvents();
    for (auto* pool : {&small_free, &large_free}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->split()) {
          ++it;
          continue;
        }
        it = pool->erase(it);
        releaseSegment(b);
      }
    }
  }
  void releaseSegment(Block* b) {
    if (segment_observer) segment_observer(false, reinterpret_cast<uintptr_t>(b->ptr), b->size, b->stream);
    deviceFree(device, b->ptr);
    ++stats.num_device_free;
    update(stats.segment, b->small, -1);
    update(stats.reserved_bytes, b->small, -static_cast<int64_t>(b->size));
    segments.erase(std::find(segments.begin(), segments.end(), b));
    delete b;
  }

  Block* newSegment(size_t size, StreamId stream, bool small) {
    size_t alloc = small ? kSmallBuffer : size < kMinLargeAlloc ? kLargeBuffer
                                                                : (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
    void* p = nullptr;
    // the usual segment size, or else (a nearly full or small device) just the request
    for (size_t n : {alloc, size}) {
      if (p || reserved() + n > limit()) continue;
      try {
        p = deviceMalloc(device, n);
        alloc = n;
      } catch (const OutOfMemoryError&) {
      }
    }
    if (!p) return nullptr;
    ++stats.num_device_alloc;
    update(stats.segment, small, 1);
    update(stats.reserved_bytes, small, static_cast<int64_t>(alloc));
    auto* b = new Block(p, alloc, stream, small);
    segments.push_back(b);
    if (segment_observer) segment_observer(true, reinterpret_cast<uintptr_t>(p), alloc, stream);
    return b;
  }
};

CachingAllocator::CachingAllocator(int device, CacheConfig config) : impl_(new Impl), config_(config) {
  impl_->device = device;
  impl_->fraction = config.memory_fraction;
  impl_->stats.max_split_size = config.max_split_size == SIZE_MAX ? -1 : static_cast<int64_t>(config.max_split_size);
}

// Returns every segment to the device, in use or not. (The framework's
// allocators live for the whole process and never get here; an allocator of
// shorter life, as in the runtime's tests, must not leak device memory.)
CachingAllocator::~CachingAllocator() {
  Impl& m = *impl_;
  try {
    deviceWaitIdle(m.device);  // queued work may still use the memory
  } catch (const Error&) {
    // a failed task's error belongs to its stream's next sync, not here
  }
  for (auto& [b, events] : m.pending)
    for (Event* e : events) eventDestroy(e);
  for (Block* head : m.segments) {
    void* p = head->ptr;
    for (Block* b = head; b;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    deviceFree(m.device, p);
  }
}

size_t CachingAllocator::roundSize(size_t size) {
  return size < kMinBlockSize ? kMinBlockSize : (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

void* CachingAllocator::malloc(size_t requested, StreamId stream) {
  Impl& m = *impl_;
  size_t size = roundSize(requested);
  bool small = size <= kSmallSize;
  std::unique_lock<std::mutex> lk(m.mu);
  if (!m.pending.empty()) m.processEvents();
  Block* b = m.findFree(size, stream, small, config_.max_split_size);
  if (b) {
    m.inactive(b, -1);
  } else {
    if (config_.gc_threshold > 0 && m.reserved() + size > config_.gc_threshold * m.limit()) m.releaseCached();
    b = m.newSegment(size, stream, small);
    if (!b) {  // free the cache and retry once
      ++m.stats.num_alloc_retries;
      m.releaseCached();
      b = m.newSegment(size, stream, small);
    }
    if (!b) {
      ++m.stats.num_ooms;
      size_t free_b = 0, total = 0;
      memGetInfo(m.device, &free_b, &total);
      size_t limit = m.limit();
      size_t allocated = static_cast<size_t>(m.stats.allocated_bytes[kAggregatePool].current);
      size_t reserved = m.reserved();
      auto observers = m.observers;
      lk.unlock();
      for (auto& o : observers)
        o(m.device, static_cast<int64_t>(requested), static_cast<int64_t>(allocated), static_cast<int64_t>(free_b));
      std::string msg = "mtia out of memory. Tried to allocate " + formatBytes(requested) + ". mtia:" +
                        std::to_string(m.device) + " has a total capacity of " + formatBytes(total) + " of which " +
                        formatBytes(free_b) + " is free.";
      if (limit < total) msg += " This process may use " + formatBytes(limit) + " (its memory fraction).";
      msg += " Of the allocated memory " + formatBytes(allocated) + " is allocated by PyTorch, and " +
             formatBytes(reserved - allocated) +
             " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large, try setting "
             "OPENMTIA_ALLOC_CONF=max_split_size_mb:<MiB> to avoid fragmentation.";
      throw OutOfMemoryError(m.device, requested, total - free_b, total, msg);
    }
  }
  // split off what the request does not need
  size_t rest = b->size - size;
  bool split = b->small ? rest >= kMinBlockSize : (rest > kSmallSize && b->size < config_.max_split_size);
  if (split) {
    auto* r = new Block(static_cast<char*>(b->ptr) + size, rest, stream, b->small);
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    m.inactive(r, +1);
    m.poolOf(r->small).insert(r);
  }
  b->allocated = true;
  b->requested = requested;
  m.allocated.emplace(b->ptr, b);
  m.update(m.stats.allocation, b->small, 1);
  m.update(m.stats.active, b->small, 1);
  m.update(m.stats.allocated_bytes, b->small, static_cast<int64_t>(b->size));
  m.update(m.stats.active_bytes, b->small, static_cast<int64_t>(b->size));
  m.update(m.stats.requested_bytes, b->small, static_cast<int64_t>(requested));
  if (b->size >= config_.max_split_size) ++m.stats.oversize_allocations;
  return b->ptr;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lk(m.mu);
  auto it = m.allocated.find(ptr);
  if (it == m.allocated.end())
    throw Error(ErrorCode::kInvalidValue, "caching allocator: pointer not allocated on mtia:" + std::to_string(m.device));
  Block* b = it->second;
  m.allocated.erase(it);
  m.update(m.stats.allocation, b->small, -1);
  m.update(m.stats.allocated_bytes, b->small, -static_cast<int64_t>(b->size));
  m.update(m.stats.requested_bytes, b->small, -static_cast<int64_t>(b->requested));
  if (b->size >= config_.max_split_size) --m.stats.oversize_allocations;
  b->allocated = false;
  b->requested = 0;
  if (b->stream_uses.empty()) return m.release(b);
  // Other streams used it: events on them, recorded without the lock (a
  // launch may destroy finished tasks, which may free memory).
  std::vector<StreamId> uses;
  uses.swap(b->stream_uses);
  lk.unlock();
  std::vector<Event*> events;
  try {
    for (StreamId s : uses) {
      events.push_back(eventCreate(false));
      eventRecord(events.back(), m.device, s);
    }
  } catch (const Error&) {  // (e.g. a forked child): wait for the device instead
    for (Event* e : events) eventDestroy(e);
    events.clear();
    try {
      deviceWaitIdle(m.device);
    } catch (const Error&) {
    }
  }
  lk.lock();
  if (events.empty()) return m.release(b);
  m.pending.emplace_back(b, std::move(events));
}

void CachingAllocator::recordStream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto it = impl_->allocated.find(ptr);
  if (it == impl_->allocated.end())
    throw Error(ErrorCode::kInvalidValue, "recordStream: pointer not allocated on mtia:" + std::to_string(impl_->device));
  Block* b = it->second;
  if (stream == b->stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
}

void CachingAllocator::emptyCache() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->releaseCached();
}

CacheStats CachingAllocator::stats() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->stats;
}

void CachingAllocator::resetPeakStats() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  forEachStatArray(impl_->stats, [](const char*, Stat(&arr)[kNumStatPools]) {
    for (Stat& st : arr) st.peak = st.current;
  });
}

void CachingAllocator::resetAccumulatedStats() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto& s = impl_->stats;
  forEachStatArray(s, [](const char*, Stat(&arr)[kNumStatPools]) {
    for (Stat& st : arr) st.allocated = st.freed = 0;
  });
  s.num_alloc_retries = s.num_ooms = s.num_device_alloc = s.num_device_free = 0;
}

std::vector<SegmentInfo> CachingAllocator::snapshot() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  std::vector<SegmentInfo> out;
  for (Block* head : impl_->segments) {
    SegmentInfo s;
    s.address = reinterpret_cast<uintptr_t>(head->ptr);
    s.stream = head->stream;
    s.large = !head->small;
    for (Block* b = head; b; b = b->next) {
      s.total_size += b->size;
      if (b->allocated) {
        s.allocated_size += b->size;
        s.active_size += b->size;
        s.requested_size += b->requested;
      }
      s.blocks.push_back({reinterpret_cast<uintptr_t>(b->ptr), b->size, b->requested, b->allocated});
    }
    out.push_back(std::move(s));
  }
  return out;
}

void CachingAllocator::setMemoryFraction(double fraction) {
  if (!(fraction > 0 && fraction <= 1))
    throw Error(ErrorCode::kInvalidValue, "memory fraction must be in (0, 1], got " + std::to_string(fraction));
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->fraction = fraction;
}

void CachingAllocator::setSegmentObserver(SegmentObserver observer) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->segment_observer = std::move(observer);
}

void CachingAllocator::attachOomObserver(OomObserver observer) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->observers.push_back(std::move(observer));
}

}  // namespace omr
