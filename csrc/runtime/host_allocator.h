// Pinned host memory for mtia (pin_memory(), non_blocking copies).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

namespace openmtia {

c10::Allocator* pinnedAllocator();
// A non_blocking copy used this pinned tensor on `stream`: its block is not
// reused before the stream passes the point where it is freed.
void recordPinnedUse(const at::Tensor& host, c10::Stream stream);

}  // namespace openmtia
