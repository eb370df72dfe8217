// The boxed fallback: every aten op without an mtia kernel (see fallback.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>

#include <string>
#include <vector>

namespace c10 {
class OperatorHandle;
}  // namespace c10

namespace openmtia {

// For kernels that take the fallback for the calls they do not handle
// themselves.
void boxedFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The same for an op with one tensor result: `op(args...)` through the
// boxed fallback.
at::Tensor boxedFallbackCall(const c10::OperatorHandle& op, std::vector<c10::IValue> args);
// OPENMTIA_DEBUG_FALLBACK=1: each fallback call's path, on stderr.
bool debugFallback();
// The boxed kernel itself (for registrations of particular ops).
void mtiaFallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack);
// What the fallback registers (for `python -m openmtia.ops`).
std::vector<std::string> cpuKernelOverCompositeOps();
std::vector<std::string> structuredOps();
// How many results tasks have copied into their outputs since the start
// (kernels that did not allocate their results in the outputs' memory).
int64_t stagedResultCount();

}  // namespace openmtia
