// bf16 and fp16 comparisons (lt, le, gt, ge, eq, ne) at float32 speed on
// every host.
//
// CPU PyTorch's bf16/fp16 comparisons convert each vector to float32 and
// back to a mask: `x > y` of bf16 costs 2.2x float32's time, fp16 1.5x (1M
// elements, AVX2 and AVX-512 hosts alike). Where activationPath(dtype,
// false) (low_precision.h) says kFloat32, comparisons of a contiguous
// bf16/fp16 mtia tensor of more than GRAIN_SIZE elements with another such
// tensor (same dtype and sizes) or a real number run low_precision/kernels.h's
// loops: widened exactly, compared in float32 (the results are CPU's, bit for
// bit; NaN compares false except under ne). A number is first rounded to the
// tensor's dtype, as CPU's type promotion does (a bf16 tensor and 0.1
// compare against bf16(0.1)). Smaller tensors keep the small-op path, CPU's
// kernels (pointwise.cpp); every other call the boxed fallback.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <cstdint>

#include "aten/low_precision/kernels.h"

namespace openmtia {

// Whether the loops compare `a` with `b` (b undefined: with a number).
bool fusedComparison(const at::Tensor& a, const at::Tensor& b = at::Tensor());
// The bool result of a `kind` b on a's device (a's sizes, contiguous). Call
// only where fusedComparison(a, b) (or fusedComparison(a) for a number b that
// is not complex).
at::Tensor fusedComparisonResult(Comparison kind, const at::Tensor& a, const at::Tensor& b);
at::Tensor fusedComparisonResult(Comparison kind, const at::Tensor& a, const c10::Scalar& b);
// How many comparisons the loops ran so far (for tests).
int64_t fusedComparisonCalls();

}  // namespace openmtia
