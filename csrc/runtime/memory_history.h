// torch.mtia.record_memory_history() and torch.mtia.snapshot(), in CUDA's format.
#pragma once

#include <Python.h>
#include <c10/core/Device.h>
#include <c10/util/ApproximateClock.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace openmtia {

void recordMemoryHistory(const std::optional<std::string>& enabled, const std::string& stacks, size_t max_entries);
// The caller's stack, when the history records stacks (else nullptr); taken
// before the allocator's lock, as gathering Python frames takes the GIL.
std::shared_ptr<c10::GatheredContext> allocationContext();
void recordAlloc(c10::DeviceIndex device, void* ptr, size_t size, int64_t stream,
                 std::shared_ptr<c10::GatheredContext> context);
void recordFree(c10::DeviceIndex device, void* ptr, size_t size, int64_t stream);
void recordOom(c10::DeviceIndex device, size_t requested, size_t device_free);
// The snapshot (torch.mtia.memory._snapshot): a dict, or written to `path`.
PyObject* memorySnapshot(const std::optional<std::string>& path);

}  // namespace openmtia
