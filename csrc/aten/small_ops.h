// Small calls of ops whose kernels live in other files (the loops' softmax,
// gelu, scans, norms, max/min over a dim and argmax: low_precision_*.cpp),
// on the unboxed launch path (pointwise.cpp): where the call is the plain
// case (its operands mtia tensors, contiguous, 1 to GRAIN_SIZE elements, no
// neg/conj bit, no graph being captured; its numbers and dims in range), the
// result is allocated as CPU's kernel makes it and a task runs CPU's out=
// kernel over the operands' memory (CPU's bits); else nothing (the caller's
// boxed path then raises CPU's errors at the call).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <optional>
#include <tuple>

namespace openmtia {

// _softmax / _log_softmax (log) of a floating tensor, half_to_float false.
std::optional<at::Tensor> smallSoftmax(bool log, const at::Tensor& x, int64_t dim, bool half_to_float);
// _softmax_backward_data / _log_softmax_backward_data: grad and output
// alike, input_dtype theirs.
std::optional<at::Tensor> smallSoftmaxBackward(bool log, const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                               at::ScalarType input_dtype);
// cumsum / cumprod (prod): a floating tensor (dtype none or its own), or an
// integer or bool one (dtype none or int64: an int64 result).
std::optional<at::Tensor> smallCumulative(bool prod, const at::Tensor& x, int64_t dim,
                                          std::optional<at::ScalarType> dtype);
// gelu of a floating tensor (approximate "none" or "tanh"), and its
// backward (grad and self alike).
std::optional<at::Tensor> smallGelu(const at::Tensor& x, c10::string_view approximate);
std::optional<at::Tensor> smallGeluBackward(const at::Tensor& grad, const at::Tensor& x, c10::string_view approximate);
// linalg_vector_norm of a floating tensor (ord real, dtype none or its own).
std::optional<at::Tensor> smallVectorNorm(const at::Tensor& x, const c10::Scalar& ord, at::OptionalIntArrayRef dim,
                                          bool keepdim, std::optional<at::ScalarType> dtype);
// max.dim / min.dim (max false) of a floating or integer tensor: values and
// int64 indices.
std::optional<std::tuple<at::Tensor, at::Tensor>> smallExtremumDim(bool max, const at::Tensor& x, int64_t dim,
                                                                  bool keepdim);
// argmax / argmin (max false) of a floating or integer tensor: an int64
// result.
std::optional<at::Tensor> smallArgExtremum(bool max, const at::Tensor& x, std::optional<int64_t> dim, bool keepdim);

}  // namespace openmtia
