// torch.mtia.record_memory_history(): the allocator's events, in CUDA's format
// (the snapshot, a Python object, is built by python/memory_snapshot.cpp).
#pragma once

#include <c10/core/Device.h>
#include <c10/util/ApproximateClock.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace openmtia {

void recordMemoryHistory(const std::optional<std::string>& enabled, const std::string& stacks, size_t max_entries);
// The caller's stack, when the history records stacks (else nullptr); taken
// before the allocator's lock, as gathering Python frames takes the GIL.
std::shared_ptr<c10::GatheredContext> allocationContext();
void recordAlloc(c10::DeviceIndex device, void* ptr, size_t size, int64_t stream,
                 std::shared_ptr<c10::GatheredContext> context);
void recordFree(c10::DeviceIndex device, void* ptr, size_t size, int64_t stream);
void recordOom(c10::DeviceIndex device, size_t requested, size_t device_free);

// One recorded event ("alloc", "free_requested", "free_completed",
// "segment_alloc", "segment_free", "oom").
struct MemoryHistoryEntry {
  const char* action;
  uintptr_t addr;
  size_t size;
  int64_t stream;
  int64_t time_us;
  std::shared_ptr<c10::GatheredContext> context;
  size_t device_free = 0;
};
using MemoryHistoryTraces = std::vector<std::deque<MemoryHistoryEntry>>;  // per device
using MemoryHistoryBlockContexts = std::unordered_map<uintptr_t, std::shared_ptr<c10::GatheredContext>>;
// Reads the history under its lock (the snapshot, python/memory_snapshot.cpp):
// each device's entries and the stack of each live block.
void visitMemoryHistory(const std::function<void(const MemoryHistoryTraces&, const MemoryHistoryBlockContexts&)>& fn);

}  // namespace openmtia
