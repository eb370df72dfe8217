#include "faults.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "openmtia/runtime.h"

namespace omr {
namespace engine {
namespace faults {

std::atomic<bool> g_armed{false};
std::atomic<bool> g_any_broken{false};

namespace {

struct Armed {
  Fault fault;
  uint64_t seen = 0;   // matching events so far
  uint64_t draws = 0;  // the rate's state
};

std::mutex g_mu;
std::vector<Armed> g_faults;

struct Broken {
  bool lost = false;
  std::string message;  // "" while it works
};
std::mutex g_broken_mu;
Broken g_broken[kMaxDevices];

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
  if (fault.kind != Kind::kDeviceOutOfMemory && fault.kind != Kind::kPinnedOutOfMemory && fault.kind != Kind::kKernel &&
      fault.kind != Kind::kDeviceLost && fault.kind != Kind::kHang && fault.kind != Kind::kCorrupt)
    throw Error(ErrorCode::kInvalidValue, "inject_fault: unknown fault kind " + std::to_string(int(fault.kind)));
  if (fault.after == 0) throw Error(ErrorCode::kInvalidValue, "inject_fault: after counts from 1 (the next event)");
  if (!(fault.rate >= 0 && fault.rate <= 1)) throw Error(ErrorCode::kInvalidValue, "inject_fault: rate not in [0, 1]");
  if (fault.sticky && fault.kind != Kind::kKernel)
    throw Error(ErrorCode::kInvalidValue, "inject_fault: only a kernel fault is sticky");
  std::lock_guard<std::mutex> lk(g_mu);
  g_faults.push_back({fault});
  g_armed.store(true, std::memory_order_relaxed);
}

namespace {
std::mutex g_hang_mu;
std::condition_variable g_hang_cv;
uint64_t g_hang_epoch = 0;     // (under g_hang_mu) bumped by each release
bool g_hangs_released = false;  // for good: the process ends
}  // namespace

void hang() {
  std::unique_lock<std::mutex> lk(g_hang_mu);
  const uint64_t epoch = g_hang_epoch;
  g_hang_cv.wait(lk, [&] { return g_hangs_released || g_hang_epoch != epoch; });
}

void releaseHangs() {
  std::lock_guard<std::mutex> lk(g_hang_mu);
  g_hangs_released = true;
  g_hang_cv.notify_all();
}

void clear() {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_faults.clear();
    g_armed.store(false, std::memory_order_relaxed);
  }
  std::lock_guard<std::mutex> lk(g_hang_mu);
  ++g_hang_epoch;
  g_hang_cv.notify_all();
}

namespace {
// Whether armed fault `a`, matching the event, fails it (with g_mu held).
bool fails(Armed& a) {
  const uint64_t n = ++a.seen;
  const Fault& f = a.fault;
  if (f.rate > 0) return draw(f.seed, a.draws++) < f.rate;
  return n >= f.after && (f.times == 0 || n < f.after + f.times);
}
}  // namespace

bool hitSlow(Kind kind, int device, int64_t stream, const char* name) {
  std::lock_guard<std::mutex> lk(g_mu);
  bool failed = false;
  for (Armed& a : g_faults)
    if (matches(a.fault, kind, device, stream, name)) failed |= fails(a);
  return failed;
}

WorkFault workHitSlow(int device, int64_t stream, const char* name) {
  std::lock_guard<std::mutex> lk(g_mu);
  WorkFault out = WorkFault::kNone;
  for (Armed& a : g_faults) {
    const Kind k = a.fault.kind;
    if ((k != Kind::kKernel && k != Kind::kDeviceLost && k != Kind::kHang) || !matches(a.fault, k, device, stream, name))
      continue;
    if (!fails(a)) continue;
    const WorkFault w = k == Kind::kDeviceLost ? WorkFault::kLost
                        : k == Kind::kHang     ? WorkFault::kHang
                        : a.fault.sticky       ? WorkFault::kStickyFault
                                               : WorkFault::kFault;
    out = std::max(out, w);
  }
  return out;
}

bool corruptSlow(int device, int64_t stream, const char* name, void* data, size_t bytes) {
  std::lock_guard<std::mutex> lk(g_mu);
  uint64_t seed = 0, n = 0;
  bool hit = false;
  for (Armed& a : g_faults) {
    if (!matches(a.fault, Kind::kCorrupt, device, stream, name) || !fails(a)) continue;
    hit = true;
    seed = a.fault.seed;
    n = a.seen;
  }
  if (!hit || bytes == 0 || data == nullptr) return hit;
  // one bit of the payload, the same for the same seed and count
  const uint64_t bit = static_cast<uint64_t>(draw(seed ^ 0x636f7272757074ull, n) * static_cast<double>(bytes * 8));
  static_cast<unsigned char*>(data)[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  return true;
}

void breakDevice(int device, bool lost, const std::string& message) {
  if (device < 0 || device >= kMaxDevices) return;
  std::lock_guard<std::mutex> lk(g_broken_mu);
  Broken& b = g_broken[device];
  if (!b.message.empty()) return;
  b.lost = lost;
  b.message = message;
  g_any_broken.store(true);
}

std::string brokenMessage(int device) {
  if (device < 0 || device >= kMaxDevices) return "";
  std::lock_guard<std::mutex> lk(g_broken_mu);
  return g_broken[device].message;
}

void checkUsableSlow(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  std::lock_guard<std::mutex> lk(g_broken_mu);
  const Broken& b = g_broken[device];
  if (b.message.empty()) return;
  if (b.lost) throw Error(ErrorCode::kDeviceLost, b.message);
  throw TaskError("", b.message);
}

}  // namespace faults
}  // namespace engine
}  // namespace omr
