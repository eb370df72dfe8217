// Copies between mtia and CPU tensors, and the strided copy kernel.
#pragma once

#include <ATen/core/Tensor.h>

namespace openmtia {

// The strided copy kernel, a task named `name` on dst's device's current
// stream: dst[...] = src[...] with broadcasting and dtype conversion. src may
// be a CPU tensor (a 0-dim value). Both are read through host views taken now.
void launchCopyKernel(const at::Tensor& dst, const at::Tensor& src, const char* name = "aten::copy_");

}  // namespace openmtia
