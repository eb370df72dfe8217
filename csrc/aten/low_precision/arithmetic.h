// bf16 and fp16 add, sub, mul, div, clamp, rsub, lerp, addcmul and addcdiv at float32 speed
// on every host.
//
// CPU PyTorch's bf16/fp16 binary arithmetic widens each vector to float32,
// computes and rounds back: on mtia an in-place bf16 add cost 1.18-1.22x
// float32's time and a bf16 multiply by a number 1.11-1.14x (1M elements),
// where half the bytes should make it faster. Where activationPath(dtype,
// false) (low_precision.h) says kFloat32, add, sub, mul and div (functional
// and in place) of a contiguous bf16/fp16 mtia tensor of more than GRAIN_SIZE
// elements with another such tensor (same dtype and sizes), a contiguous
// one that broadcasts along its leading dims (rows: a bias, an attention
// mask; at least kMinPeriod elements), a column (a's sizes but a last dim
// of 1, its elements evenly spaced: a scale per row, as RMSNorm's x *
// rsqrt(mean), or x[:, :1]; rows of at least kMinPeriod elements), or a
// real number run
// low_precision/kernels.h's loops: computed in float32 and rounded once,
// as CPU's vectorized loop does (add: x + alpha * y in one fused
// multiply-add; alpha 1: CPU's results bit for bit). alpha and a number are
// taken as CPU's kernels take them: alpha rounded to the dtype, a number
// rounded to the dtype for add and sub, in float32 for mul and div. (CPU's
// scalar tail loop computes add with alpha != 1 with another rounding, so
// its own results for that case change with its thread count; these are its
// vectorized loop's.) Smaller tensors keep the small-op
// path, CPU's kernels (pointwise.cpp); every other call the boxed fallback.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <cstdint>

#include "aten/low_precision/kernels.h"

namespace openmtia {

// The fewest elements of a broadcast row the loops take (a shorter row is a
// call per few elements: CPU's kernel then).
constexpr int64_t kMinPeriod = 64;
// Whether the loops run `a kind b`: b a tensor as above, or undefined (a
// number), alpha real.
bool fusedArithmetic(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha);
// Launches out = a kind b (b undefined: a kind number; b with fewer
// elements than a: a row repeated along a's leading dims, or a column, one
// element per row of a), out a fresh
// contiguous tensor like a or a itself (in place), as a task on a's device's
// current stream. Call only where fusedArithmetic(a, b, alpha).
void launchArithmetic(Arithmetic kind, const at::Tensor& a, const at::Tensor& b, double number,
                      const c10::Scalar& alpha, const at::Tensor& out);
// clamp(a, lo, hi) (clamp_min, clamp_max: one bound) through the loops:
// whether they take it (a as above; the bounds real, not NaN, within the
// dtype's range), and the launch (out as above). The bounds are rounded to
// the dtype, as CPU's kernel takes them; the result is one of a's values or a
// bound, CPU's bit for bit.
bool fusedClamp(const at::Tensor& a, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi);
void launchClamp(const at::Tensor& a, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi,
                 const at::Tensor& out);
// lerp(self, end, weight) = self + weight * (end - self) through the loops
// (CPU's vector formula, the weight in float32): whether they take it
// (self and end alike, as for fusedArithmetic; a real weight), and the
// launch (out as above).
bool fusedLerp(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight);
void launchLerp(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight, const at::Tensor& out);
// Three operands through ternaryLoop (low_precision/kernels.h): addcmul,
// addcdiv (functional and in place: an optimizer's step; value taken in
// float32, as CPU's kernel takes it), lerp with a tensor weight, clamp with
// tensor bounds. Whether the loops take self, t1 and t2 (each alike, as for
// fusedArithmetic, none partly overlapping self), and the launch: out a
// fresh tensor like self, or self itself.
bool fusedTernary(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2);
void launchTernary(Ternary kind, const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, float value,
                   const at::Tensor& out);
// How many calls the loops ran so far (for tests).
int64_t fusedArithmeticCalls();

}  // namespace openmtia
