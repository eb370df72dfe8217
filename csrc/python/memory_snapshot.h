// torch.mtia.memory._snapshot(): the memory history (runtime/memory_history.h)
// and the allocator's segments as the dict torch.cuda.memory._snapshot()
// returns, so torch.cuda._memory_viz reads and renders it.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>

namespace openmtia {

// A new reference to the dict; also pickled to `path` when given.
PyObject* memorySnapshot(const std::optional<std::string>& path);

}  // namespace openmtia
