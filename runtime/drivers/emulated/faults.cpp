#include "faults.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "openmtia/runtime.h"

namespace omr {
namespace engine {
namespace faults {

std::atomic<bool> g_armed{false};

namespace {

struct Armed {
  Fault fault;
  uint64_t seen = 0;   // matching events so far
  uint64_t draws = 0;  // the rate's state
};

std::mutex g_mu;
std::vector<Armed> g_faults;

// A uniform draw in [0, 1) from (seed, n): splitmix64, so that a seed fails
// the same events whatever else ran.
double draw(uint64_t seed, uint64_t n) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (n + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(1ull << 53);
}

bool matches(const Fault& f, Kind kind, int device, int64_t stream, const char* name) {
  if (f.kind != kind) return false;
  if (f.device >= 0 && f.device != device) return false;
  if (f.stream >= 0 && f.stream != stream) return false;
  return f.name.empty() || (name && f.name == name);
}

}  // namespace

void inject(const Fault& fault) {
  if (fault.kind != Kind::kDeviceOutOfMemory && fault.kind != Kind::kPinnedOutOfMemory && fault.kind != Kind::kKernel)
    throw Error(ErrorCode::kInvalidValue, "inject_fault: unknown fault kind " + std::to_string(int(fault.kind)));
  if (fault.after == 0) throw Error(ErrorCode::kInvalidValue, "inject_fault: after counts from 1 (the next event)");
  if (!(fault.rate >= 0 && fault.rate <= 1)) throw Error(ErrorCode::kInvalidValue, "inject_fault: rate not in [0, 1]");
  std::lock_guard<std::mutex> lk(g_mu);
  g_faults.push_back({fault});
  g_armed.store(true, std::memory_order_relaxed);
}

void clear() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_faults.clear();
  g_armed.store(false, std::memory_order_relaxed);
}

bool hitSlow(Kind kind, int device, int64_t stream, const char* name) {
  std::lock_guard<std::mutex> lk(g_mu);
  bool failed = false;
  for (Armed& a : g_faults) {
    if (!matches(a.fault, kind, device, stream, name)) continue;
    const uint64_t n = ++a.seen;
    const Fault& f = a.fault;
    if (f.rate > 0) failed |= draw(f.seed, a.draws++) < f.rate;
    else failed |= n >= f.after && (f.times == 0 || n < f.after + f.times);
  }
  return failed;
}

}  // namespace faults
}  // namespace engine
}  // namespace omr
