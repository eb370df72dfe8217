// Faults on demand (driver ABI 1.5, inject_fault): the emulated device fails
// as a real one would, when a test asks it to. Each armed fault counts the
// events it matches (device allocations, pinned allocations, or pieces of
// work of a device, stream and name) and fails the ones it was armed for:
// from the `after`-th on, `times` of them (0: every one), or each with a
// seeded probability. Off (nothing armed), a check costs one relaxed load.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace omr {
namespace engine {
namespace faults {

enum class Kind { kDeviceOutOfMemory = 1, kPinnedOutOfMemory = 2, kKernel = 3 };

struct Fault {
  Kind kind = Kind::kKernel;
  int device = -1;       // -1: any
  int64_t stream = -1;   // kKernel: the stream's label (-1: any)
  std::string name;      // kKernel: the work's name ("": any)
  uint64_t after = 1;    // the first matching event that fails (1: the next)
  uint64_t times = 1;    // how many fail from there on (0: all)
  double rate = 0;       // > 0: each matching event fails with this probability instead
  uint64_t seed = 0;
};

void inject(const Fault& fault);  // throws Error(kInvalidValue) for a bad one
void clear();

extern std::atomic<bool> g_armed;
bool hitSlow(Kind kind, int device, int64_t stream, const char* name);
// Whether this event fails (and counts it against every armed fault it matches).
inline bool hit(Kind kind, int device, int64_t stream = -1, const char* name = nullptr) {
  return g_armed.load(std::memory_order_relaxed) && hitSlow(kind, device, stream, name);
}

}  // namespace faults
}  // namespace engine
}  // namespace omr
