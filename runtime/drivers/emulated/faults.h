// Faults on demand (driver ABI 1.5 and 1.6, inject_fault): the emulated device fails
// as a real one would, when a test asks it to. Each armed fault counts the
// events it matches (device allocations, pinned allocations, or pieces of
// work of a device, stream and name) and fails the ones it was armed for:
// from the `after`-th on, `times` of them (0: every one), or each with a
// seeded probability. Off (nothing armed), a check costs one relaxed load.
// A sticky kernel fault or a lost device breaks its device for the rest of
// the process: its queued work never runs, and every later call on it
// fails (checkUsable); the other devices go on.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace omr {
namespace engine {
namespace faults {

enum class Kind { kDeviceOutOfMemory = 1, kPinnedOutOfMemory = 2, kKernel = 3, kDeviceLost = 4, kHang = 5, kCorrupt = 6 };

struct Fault {
  Kind kind = Kind::kKernel;
  int device = -1;       // -1: any
  int64_t stream = -1;   // faults of work: the stream's label (-1: any)
  std::string name;      // faults of work: the work's name ("": any)
  uint64_t after = 1;    // the first matching event that fails (1: the next)
  uint64_t times = 1;    // how many fail from there on (0: all)
  double rate = 0;       // > 0: each matching event fails with this probability instead
  uint64_t seed = 0;
  bool sticky = false;  // kKernel: it breaks its device
};

void inject(const Fault& fault);  // throws Error(kInvalidValue) for a bad one
void clear();

extern std::atomic<bool> g_armed;
bool hitSlow(Kind kind, int device, int64_t stream, const char* name);
// Whether this event fails (and counts it against every armed fault it matches).
inline bool hit(Kind kind, int device, int64_t stream = -1, const char* name = nullptr) {
  return g_armed.load(std::memory_order_relaxed) && hitSlow(kind, device, stream, name);
}

// What happens to a piece of work about to run: nothing, a fault (sticky or
// not), or its device is lost. It counts against every armed kernel and
// lost-device fault it matches.
enum class WorkFault { kNone, kFault, kStickyFault, kHang, kLost };
WorkFault workHitSlow(int device, int64_t stream, const char* name);
inline WorkFault workHit(int device, int64_t stream, const char* name) {
  return g_armed.load(std::memory_order_relaxed) ? workHitSlow(device, stream, name) : WorkFault::kNone;
}

// Data a piece of work received (a collective's payload): an armed corrupt
// fault that matches flips one bit of it, chosen by its seed and count, and
// returns true.
bool corruptSlow(int device, int64_t stream, const char* name, void* data, size_t bytes);
inline bool corrupt(int device, int64_t stream, const char* name, void* data, size_t bytes) {
  return g_armed.load(std::memory_order_relaxed) && corruptSlow(device, stream, name, data, bytes);
}

// A hung piece of work: blocks the calling thread until the hangs are
// released: by clear(), or for good by releaseHangs() (the process's end).
void hang();
void releaseHangs();

// Breaks `device` for the rest of the process (the first break's message
// stays): lost (Error kDeviceLost) or poisoned by a sticky fault (kTaskFailed).
void breakDevice(int device, bool lost, const std::string& message);
extern std::atomic<bool> g_any_broken;
// The message every call on a broken device fails with ("" if it works).
std::string brokenMessage(int device);
inline bool broken(int device) {
  return g_any_broken.load(std::memory_order_relaxed) && !brokenMessage(device).empty();
}
void checkUsableSlow(int device);
// Throws the broken device's error (at a call on it).
inline void checkUsable(int device) {
  if (g_any_broken.load(std::memory_order_relaxed)) checkUsableSlow(device);
}

}  // namespace faults
}  // namespace engine
}  // namespace omr
