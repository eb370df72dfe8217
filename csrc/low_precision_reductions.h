// bf16 and fp16 reductions of all elements (sum, mean, amax, amin) at
// float32 speed on every host.
//
// CPU PyTorch's bf16/fp16 mean is a float32 sum of the upcast tensor, a
// division and a rounding: 2.3x float32 mean's time on an AVX-512 host, 6.9x
// on AVX2 (1M elements); its amax/amin convert every vector, 2.2-3.4x. Where
// activationPath(dtype, false) (low_precision.h) says kFloat32, a reduction
// of all the elements of a contiguous bf16/fp16 mtia tensor of more than
// GRAIN_SIZE elements runs low_precision_kernels.h's loops instead: float32
// accumulation (blocks of 64 vectors added in double, as accurate as CPU's
// cascade sum), one rounding of the result to the dtype; mean =
// float32(sum) / n, as CPU's; amax/amin exact, NaN if any element is NaN.
// Ranges of elements run on every thread from kParallelWork elements
// (partials combined in thread order: the same result for a thread count).
// Smaller tensors keep the small-op path, CPU's kernels bit for bit
// (pointwise.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace openmtia {

enum class Reduction { kSum, kMean, kMax, kMin };

// Whether the loops reduce `x` (see above; not while a graph is captured).
bool fusedReduction(const at::Tensor& x);
// The reduction of every element of x into a fresh tensor on x's device of
// x's dtype: 0-dim, or with keepdim x's number of dims, each of size 1.
// Call only where fusedReduction(x).
at::Tensor fusedReductionResult(Reduction kind, const at::Tensor& x, bool keepdim);
// How many reductions the loops ran so far (for tests).
int64_t fusedReductionCalls();

}  // namespace openmtia
