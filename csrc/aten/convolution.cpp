// Convolutions on mtia: the CPU kernel, with contiguous operands.
//
// convolution is CompositeExplicitAutograd: on a device other than CPU/CUDA it
// would go to an unimplemented *_overrideable op, so mtia runs the CPU kernel
// (through the boxed fallback). But torch's own description of an mtia
// convolution (torch._C._select_conv_backend gives Overrideable, whose memory
// format is contiguous; FakeTensor and so torch.compile use it) is a
// contiguous-format result, while the CPU kernel gives channels_last results
// for channels_last operands. So the operands are made contiguous first (a
// device copy, only when they are not): the results then have the format
// torch expects of mtia, and compiled code's stride checks hold.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "openmtia/runtime.h"
#include "aten/convolution.h"
#include "aten/fallback/fallback.h"

namespace openmtia {

const char* const kConvolutionOps[3] = {"convolution", "_convolution", "convolution_backward"};

namespace {

void convolution(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  for (size_t i = stack->size() - n; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().dim() >= 3 && !v.toTensor().is_contiguous())
      v = v.toTensor().contiguous();
  }
  boxedFallback(op, stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  for (const char* name : kConvolutionOps) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&convolution>());
}

}  // namespace openmtia
