// Host threads that use a core, for the device's kernels to leave them one.
//
// The emulated device runs its kernels on the host's cores: a kernel on
// every core while the host thread is launching the next ones puts three
// runnable threads on two cores, and a parallel region's threads then wait
// for each other at its barriers, spinning, while the one they wait for has
// no core. So a kernel counts the host threads at work (activeHostThreads)
// and leaves them their cores (csrc/aten/threads.cpp).
//
// A host thread is at work when it launched in the last kActiveWindowNs
// and is not waiting for the device now. (Its work between launches, in
// Python or elsewhere, is invisible here: a thread that launched recently
// is taken to be still at it; one that has not launched for a while, e.g.
// the autograd engine's device thread between backward passes, is not.)
// Each thread has a slot of a fixed table (taken at its first launch, freed
// when it ends; a thread beyond the table's size is not counted).
#include "host_activity.h"

#include <atomic>
#include <chrono>
#include <cstdint>

#include "openmtia/runtime.h"

namespace omr {
namespace host_activity {

struct Slot {
  std::atomic<bool> taken{false};
  std::atomic<int64_t> last_launch_ns{0};
  std::atomic<int> waiting{0};  // nested waits
};

namespace {

constexpr int kSlots = 64;
constexpr int64_t kActiveWindowNs = 500'000;
Slot g_slots[kSlots];

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct ThreadSlot {
  Slot* slot = nullptr;
  bool looked = false;  // a slot was looked for (a stream worker gets none)
  ~ThreadSlot() {
    if (!slot) return;
    slot->last_launch_ns.store(0, std::memory_order_relaxed);
    slot->waiting.store(0, std::memory_order_relaxed);
    slot->taken.store(false, std::memory_order_release);
  }
};
thread_local ThreadSlot t_slot;

Slot* mySlot() noexcept {
  if (t_slot.looked) return t_slot.slot;
  t_slot.looked = true;
  if (onStreamWorker()) return nullptr;
  for (Slot& s : g_slots) {
    bool free = false;
    if (s.taken.compare_exchange_strong(free, true, std::memory_order_acquire)) return t_slot.slot = &s;
  }
  return nullptr;
}

}  // namespace

void noteLaunch() noexcept {
  if (Slot* s = mySlot()) s->last_launch_ns.store(nowNs(), std::memory_order_relaxed);
}

WaitScope::WaitScope() noexcept : slot_(t_slot.slot) {
  if (slot_) slot_->waiting.fetch_add(1, std::memory_order_relaxed);
}

WaitScope::~WaitScope() {
  if (!slot_) return;
  slot_->waiting.fetch_sub(1, std::memory_order_relaxed);
  slot_->last_launch_ns.store(nowNs(), std::memory_order_relaxed);  // back at work
}

}  // namespace host_activity

int activeHostThreads() noexcept {
  using namespace host_activity;
  const int64_t since = nowNs() - kActiveWindowNs;
  int n = 0;
  for (const Slot& s : g_slots)
    n += s.taken.load(std::memory_order_relaxed) && s.waiting.load(std::memory_order_relaxed) == 0 &&
         s.last_launch_ns.load(std::memory_order_relaxed) > since;
  return n;
}

}  // namespace omr
