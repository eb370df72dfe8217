// Result placement: the process's CPU allocator, wrapped once at load, so
// that a CPU kernel run by a task allocates its results in the device
// outputs' memory (see result_placement.h).
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "runtime/result_placement.h"

namespace openmtia {
namespace {

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

}  // namespace openmtia
