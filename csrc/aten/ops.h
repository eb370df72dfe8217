// The ops every backend needs (allocation, views, resize, set_, fill), and results of unboxed kernels.
#pragma once

#include <ATen/core/Tensor.h>

namespace openmtia {

// Grows t's storage (contents kept, ordered on the stream) so t fits in it.
void ensureStorageFits(const at::Tensor& t);  // non-overlapping and dense, no conj/neg bit
// A contiguous mtia tensor of these sizes and dtype on the current device:
// the result of an unboxed kernel; emptyDeviceLike(a): a's sizes and dtype.
at::Tensor emptyDevice(at::IntArrayRef sizes, at::ScalarType dtype);
at::Tensor emptyDeviceLike(const at::Tensor& a);

}  // namespace openmtia
