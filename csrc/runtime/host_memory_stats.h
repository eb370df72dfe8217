// Host memory that layers above the runtime keep (the fallback's plans, ...),
// reported in torch.mtia.memory_stats() under "host.<name>". A layer
// registers its reporter from above (at load); the hooks read them all,
// so the runtime layer includes nothing of the layers that register.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace openmtia {

using HostMemoryStats = std::vector<std::pair<std::string, int64_t>>;

// fn returns its stats, named without the "host." prefix (e.g.
// "plan_cache.bytes"); it is called on every memory_stats() and must be
// cheap and thread-safe. Returns true (for a static initializer).
bool registerHostMemoryStats(std::function<HostMemoryStats()> fn);

// Every registered reporter's stats, in registration order.
HostMemoryStats hostMemoryStats();

}  // namespace openmtia
