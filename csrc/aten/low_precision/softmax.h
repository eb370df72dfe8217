// bf16 and fp16 softmax and log_softmax backward over the last dim at
// float32 speed on every host.
//
// CPU PyTorch's bf16/fp16 _softmax_backward_data and
// _log_softmax_backward_data widen each row to float32 in passes of their
// own: on an AVX2 host 1.2-1.5x float32's time (1024 rows of 1024). Where
// activationPath(dtype, false) (low_precision.h) says kFloat32, the backward
// over the last dim of contiguous bf16/fp16 mtia tensors of more than
// GRAIN_SIZE elements (the gradient and the forward's output alike, the
// input dtype theirs) runs low_precision/kernels.h's row loop instead: the
// row's sum in float32, then CPU's formula per element (softmax: y * (g -
// sum(g * y)); log_softmax: g - exp(y) * sum(g)), rounded once. Rows are
// shared among the threads. Every other call: the boxed fallback.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>

namespace openmtia {

// The ops low_precision/softmax.cpp registers on MTIA (the fallback's
// structured-op list leaves them to it).
const std::unordered_set<std::string>& softmaxOps();
// How many calls the loops ran so far (for tests).
int64_t fusedSoftmaxCalls();

}  // namespace openmtia
