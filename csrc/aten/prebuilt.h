// Prebuilt kernels for graph replays: a structured op's set-up done once.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace c10 {
struct FunctionSchema;
struct IValue;
}  // namespace c10

namespace openmtia {

// A kernel whose set-up was done once: run() executes the CPU loop.
class PrebuiltKernel {
 public:
  virtual ~PrebuiltKernel() = default;
  virtual void run() = 0;
};
// For a structured TensorIterator op (and relu) captured into a graph: its
// ATen CPU kernel with the iterator built now, over host views `args` and
// the outputs `outs` (for an in-place op, self), whose addresses stay fixed
// across replays. `constants` are arguments whose values never change (the
// task's copies of CPU scalars). nullptr if the op has no such kernel, or a
// replay could not reuse the iterator (see prebuilt.cpp).
std::shared_ptr<PrebuiltKernel> prebuildKernel(const c10::FunctionSchema& schema, std::vector<c10::IValue> args,
                                               std::vector<at::Tensor> outs, const std::vector<at::Tensor>& constants);
int64_t prebuiltKernelCount();  // made so far (for tests)

}  // namespace openmtia
