// A contiguous mtia tensor's elements, taken at the call, for a task that
// runs a CPU kernel over them.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>

#include "openmtia/runtime.h"
#include "runtime/errors.h"

namespace openmtia {

// The task must not read the tensor's metadata, which later host calls may
// change (t_(), resize_, set_). Its memory stays valid until the task has
// run: a block freed (or replaced by resize_) is reused only by later work on
// its stream. Any other tensor (a Python number, a CPU wrapped number) is
// kept as it is.
struct Operand {
  explicit Operand(const at::Tensor& t)
      : ptr(t.device().type() == kMTIA ? t.data_ptr() : nullptr), n(t.numel()), dtype(t.scalar_type()),
        number(ptr ? at::Tensor() : t) {}
  void* ptr;
  int64_t n;
  at::ScalarType dtype;
  at::Tensor number;
  // on the worker: a CPU tensor over the elements (1-D: for elementwise ops,
  // fills and reductions of all elements)
  at::Tensor host() const { return ptr ? at::from_blob(ptr, {n}, at::TensorOptions().dtype(dtype)) : number; }
  // the elements in `sizes` (the tensor's own, taken at the call: for ops
  // that broadcast)
  at::Tensor host(at::IntArrayRef sizes) const {
    return ptr ? at::from_blob(ptr, sizes, at::TensorOptions().dtype(dtype)) : number;
  }
};

}  // namespace openmtia
