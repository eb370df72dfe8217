// bf16 and fp16 reductions (sum, mean, amax, amin, the 2-norm) of all
// elements or over the last dims at float32 speed on every host.
//
// CPU PyTorch's bf16/fp16 mean is a float32 sum of the upcast tensor, a
// division and a rounding: 2.3x float32 mean's time on an AVX-512 host, 6.9x
// on AVX2 (1M elements); its amax/amin convert every vector, 2.2-3.4x. Where
// activationPath(dtype, false) (low_precision.h) says kFloat32, a reduction
// of all the elements of a contiguous bf16/fp16 mtia tensor of more than
// GRAIN_SIZE elements, or over its last dims (rows: softmax's and norms'
// amax(-1), sum(-1); CPU's bf16 amax(-1) is 3.3-3.9x float32's time), runs
// low_precision/kernels.h's loops instead: float32
// accumulation (blocks of 64 vectors added in double, as accurate as CPU's
// cascade sum), one rounding of the result to the dtype; mean =
// float32(sum) / n, as CPU's; amax/amin exact, NaN if any element is NaN.
// Ranges of elements run on every thread from kParallelWork elements
// (partials combined in thread order: the same result for a thread count);
// rows, one per thread at a time.
// Smaller tensors keep the small-op path, CPU's kernels bit for bit
// (pointwise.cpp). cumsum and cumprod over the last dim (no dtype
// argument) run CPU's scan order in the loops: CPU's results bit for bit
// (cumulativeLoop).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <unordered_set>

namespace openmtia {

// kNorm2: linalg_vector_norm(x, 2): the square root of the float32 sum of
// squares, rounded once (CPU's fp16 norm is a scalar loop: 9x float32's time).
// kNanSum: the sum with NaNs as 0 (nansum; CPU's bf16 nansum 1.2-1.3x
// float32's time on the AVX2 host).
enum class Reduction { kSum, kMean, kMax, kMin, kNorm2, kNanSum };


// Whether the loops reduce `x` (see above; not while a graph is captured).
bool fusedReduction(const at::Tensor& x);
// The reduction of x over its last `trailing` dims (all of them: every
// element) into a fresh tensor on x's device of x's dtype: x's other dims,
// then (keepdim) one of size 1 for each reduced one. Call only where
// fusedReduction(x).
at::Tensor fusedReductionResult(Reduction kind, const at::Tensor& x, int64_t trailing, bool keepdim);
// The same over x's first `leading` dims (sum, mean, max, min; 1 <=
// leading < x.dim()): x's other dims, after (keepdim) one of size 1 for
// each reduced one. Each column in float32 (sums: blocks of 64 rows), one
// rounding; mean = float32(sum) / rows, as CPU's. CPU's bf16/fp16 mean over
// dim 0 casts the whole tensor to float32 first: 1.2-2.9x float32's time on
// 1024x1024 on the AVX2 host; its amax over dim 0 1.2-1.3x (bf16). Call
// only where fusedReduction(x).
at::Tensor fusedLeadingReductionResult(Reduction kind, const at::Tensor& x, int64_t leading, bool keepdim);
// var (take_sqrt: std) of every element of x with `correction` (x.numel()
// - correction > 0), a 0-dim tensor (keepdim: x.dim() dims of size 1) of
// x's dtype: the mean and the squared deviations summed in float32 blocks
// and double (as sumLoop), the result rounded once; where float32 overflows
// (values near the dtype's largest), in double element by element. CPU's
// bf16/fp16 var of every element accumulates in double: 7.7x float32's
// time on 1024x1024 (AVX2 host). Call only where fusedReduction(x).
at::Tensor fusedVarianceResult(const at::Tensor& x, double correction, bool take_sqrt, bool keepdim);
// argmax (max) or argmin of x's elements (trailing x.dim(): flattened, a
// 0-dim result, or with keepdim x's number of dims of size 1) or over its
// last dim (trailing 1), an int64
// tensor: the first extremum's index, the first NaN's if any; with
// `values`, also the elements at those indices (max.dim/min.dim). Call only
// where fusedReduction(x).
at::Tensor fusedArgResult(bool max, const at::Tensor& x, int64_t trailing, bool keepdim,
                          at::Tensor* values = nullptr);
// prod over x's last dim (dim, of more than one row; no dtype argument or
// x's own) in CPU's order and roundings (prodLoop: its bf16/fp16 bits,
// 1.3-1.5x float32's time against its kernel's 2.7-3.4 on the AVX2 host), or nothing where the loops do
// not take the call (one row: CPU reduces it in two passes).
std::optional<at::Tensor> fusedProd(const at::Tensor& x, int64_t dim, bool keepdim,
                                    std::optional<at::ScalarType> dtype);
// The ops this file registers on MTIA (the fallback's structured-op list
// leaves them to it): linalg_vector_norm, norm.ScalarOpt_dim, argmax, argmin,
// max.dim, min.dim.
const std::unordered_set<std::string>& reductionOps();
// How many reductions the loops ran so far (for tests).
int64_t fusedReductionCalls();

}  // namespace openmtia
