// torch.mtia.memory_stats() as C++ data (the Python module makes the dict).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace openmtia {

// In order: the "dram.<key>" section torch/mtia/memory.py reads, then the
// CUDA-style breakdown under the keys torch.cuda.memory_stats() uses
// ("allocated_bytes.all.current", "num_ooms", ...), then host memory
// ("host.pinned.*", and what the layers above register: host_memory_stats.h).
std::vector<std::pair<std::string, int64_t>> memoryStats(c10::DeviceIndex index);

}  // namespace openmtia
