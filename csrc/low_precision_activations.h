// bf16 and fp16 activations (gelu, silu, sigmoid and their backward) at
// float32 speed on hosts without native low precision.
//
// CPU PyTorch's float32 gelu runs oneDNN's JIT kernel; its bf16 and fp16
// activations run ATen's vectorized loops, which convert each vector to
// float32 and compute there with slower math: on an AVX2 host bf16 gelu costs
// 1.7x float32's time, gelu_backward 1.9x, silu and sigmoid 1.5x,
// sigmoid_backward 1.2-1.7x. Where activationPath() (low_precision.h) says
// kFloat32 (mode auto: a host without native low precision whose ATen
// kernels are below AVX512; mode float32: any host), these activations of
// contiguous bf16/fp16 tensors run a fused kernel instead: 16 elements at a
// time are widened to float32 in registers, computed in float32 and rounded
// once to the dtype (to nearest even), the numerics of CPU's kernels. The
// math (oneDNN's exp; erfc of Abramowitz-Stegun 7.1.26, as oneDNN's gelu)
// is accurate to a few float32 ulps, so results agree with CPU's within
// torch.testing's bf16/fp16 tolerances; NaN and infinities give CPU's
// results (gelu(+inf) = inf: CPU's float32 and bf16 kernels give NaN there,
// its fp16 kernel and CUDA inf). The kernel is written for AVX2+FMA+F16C
// (8 float32 lanes); a host without them keeps CPU's kernels. Measured on
// an AVX2 host (1M elements, 2 threads) it takes 0.97-1.07x float32 gelu's
// time (oneDNN's), 0.2-0.9x for the others.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <unordered_set>

namespace openmtia {

enum class Activation {
  kGelu,             // gelu(x), approximate="none"
  kGeluTanh,         // gelu(x), approximate="tanh"
  kSilu,             // silu(x)
  kSigmoid,          // sigmoid(x)
  kGeluBackward,     // gelu_backward(grad, x), approximate="none"
  kGeluTanhBackward, // gelu_backward(grad, x), approximate="tanh"
  kSigmoidBackward,  // sigmoid_backward(grad, y): y the forward's result
};

// Whether the fused kernel runs `kind` over these operands: bf16/fp16 mtia
// tensors of one dtype, device and sizes, contiguous, no neg/conj bit, not
// empty, not being captured into a graph, the dtype's activationPath()
// kFloat32 and the host has AVX2, FMA and F16C.
// `grad`: the backward's first operand (undefined for a forward).
bool fusedActivation(const at::Tensor& x, const at::Tensor& grad = at::Tensor());

// Launches the fused kernel as a task on x's device's current stream:
// out = kind(x) (or kind(grad, x)); out is x's size and dtype, contiguous,
// and may be x itself (an in-place op). Call only where fusedActivation().
void launchActivation(Activation kind, const at::Tensor& x, const at::Tensor& grad, const at::Tensor& out);

// How many fused activation tasks were launched so far (for tests).
int64_t fusedActivationCalls();

// The ops this file registers ("name.overload" without "aten::"): gelu,
// gelu_, gelu_backward, sigmoid_backward (silu, sigmoid and their in-place
// forms are pointwise.cpp's, which call launchActivation). Every other call
// of them goes through the boxed fallback. (silu_backward has none: on mtia,
// as on CUDA, autograd runs its composite, whose sigmoid is fused.)
const std::unordered_set<std::string>& activationOps();

}  // namespace openmtia
