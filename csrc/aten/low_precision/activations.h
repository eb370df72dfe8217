// bf16 and fp16 activations (gelu, silu, sigmoid and their backward, relu)
// and pow(x, 2) at float32 speed on every host.
//
// CPU PyTorch's float32 gelu runs oneDNN's JIT kernel; its bf16 and fp16
// activations run ATen's vectorized loops (oneDNN's only for bf16 gelu on a
// host with native bf16), which convert each vector to float32 and compute
// there with slower math: on an AVX2 host bf16 gelu costs 1.7x float32's
// time, gelu_backward 1.9x, silu and sigmoid 1.5x, sigmoid_backward
// 1.2-1.7x; on an AVX-512 host without native fp16, fp16 gelu 1.9x.
// Where activationPath() (low_precision.h) says kFloat32, activations of
// contiguous bf16/fp16 tensors run a fused kernel instead: two vectors at a
// time are widened to float32 in registers, computed in float32 and rounded
// once to the dtype (to nearest even), the numerics of CPU's kernels. The
// math (oneDNN's exp; erfc of Abramowitz-Stegun 7.1.26, as oneDNN's gelu) is
// accurate to a few float32 ulps, so results agree with CPU's within
// torch.testing's bf16/fp16 tolerances; NaN and infinities give CPU's
// results (gelu(+inf) = inf: CPU's float32 and bf16 kernels give NaN there,
// its fp16 kernel and CUDA inf). The loops are low_precision/kernels.h's
// (AVX-512 or AVX2, per host); a host with neither keeps CPU's kernels. On an AVX2 host (1M elements, 2
// threads) the kernel takes 0.9-1.07x float32 gelu's time (oneDNN's),
// 0.2-0.9x for the others.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <unordered_set>

#include "aten/low_precision/kernels.h"

namespace openmtia {

// Whether the fused kernel runs `kind` over these operands: bf16/fp16 mtia
// tensors of one dtype, device and sizes, contiguous, no neg/conj bit, more
// than GRAIN_SIZE (32768) elements (smaller ones are the small-op path's,
// which keeps CPU's bits: pointwise.cpp), not being captured into a graph,
// activationPath() kFloat32 for the dtype and kind, and a kernelIsa().
// `grad`: the backward's first operand (undefined for a forward).
bool fusedActivation(Activation kind, const at::Tensor& x, const at::Tensor& grad = at::Tensor());

// Launches the fused kernel as a task on x's device's current stream:
// out = kind(x) (or kind(grad, x)); out is x's size and dtype, contiguous,
// and may be x itself (an in-place op). Call only where fusedActivation().
void launchActivation(Activation kind, const at::Tensor& x, const at::Tensor& grad, const at::Tensor& out,
                      ActivationParams p = {});
// The same into a fresh contiguous tensor of x's sizes and dtype on x's
// device, which it returns.
at::Tensor fusedActivationResult(Activation kind, const at::Tensor& x, const at::Tensor& grad = at::Tensor(),
                                 ActivationParams p = {});

// How many fused activation tasks were launched so far (for tests).
int64_t fusedActivationCalls();


// The ops this file registers ("name.overload" without "aten::"): gelu,
// gelu_, gelu_backward, sigmoid_backward, tanh_backward, hardswish,
// hardsigmoid, leaky_relu (and their in-place forms and backward),
// threshold_backward (relu's), hardtanh, hardtanh_ (relu6: the clamp loop),
// hardtanh_backward, nan_to_num(_), hardshrink, softshrink and their
// backward (silu, sigmoid, reciprocal, the roundings, sign, maximum,
// minimum and their in-place
// forms are pointwise.cpp's, which call launchActivation). Every other call
// of them goes through the boxed fallback. (silu_backward has none: on mtia,
// as on CUDA, autograd runs its composite, whose sigmoid is fused.)
const std::unordered_set<std::string>& activationOps();


}  // namespace openmtia
