// The registry of host-memory stats (see host_memory_stats.h).
#include "runtime/host_memory_stats.h"

#include <mutex>

namespace openmtia {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::function<HostMemoryStats()>> reporters;
};

Registry& registry() {
  static Registry* r = new Registry();  // reporters register at load: never destroyed
  return *r;
}

}  // namespace

bool registerHostMemoryStats(std::function<HostMemoryStats()> fn) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.reporters.push_back(std::move(fn));
  return true;
}

HostMemoryStats hostMemoryStats() {
  std::vector<std::function<HostMemoryStats()>> reporters;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    reporters = r.reporters;
  }
  HostMemoryStats out;
  for (const auto& fn : reporters) {
    HostMemoryStats s = fn();
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

}  // namespace openmtia
