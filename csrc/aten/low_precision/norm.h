// bf16 and fp16 layer_norm, forward and backward, at float32 speed on every
// host.
//
// CPU PyTorch's bf16/fp16 native_layer_norm converts each vector to float32
// and back in passes of its own: on an AVX2 host 3.3x (bf16) and 1.2x
// (fp16) float32's time on 1024 rows of 1024, its backward 1.7x and 1.3x.
// Where activationPath(dtype, false) (low_precision.h) says kFloat32,
// native_layer_norm and native_layer_norm_backward of a contiguous bf16/fp16
// mtia input of more than loopMinElements() elements, with weight and bias
// of its dtype (or none) and contiguous, run low_precision/kernels.h's row
// loops instead: each row's mean and variance in float32 (two passes), then
// CPU's formulas per element, rounded once; mean and rstd of the input's
// dtype, as CPU's. Rows are shared among the threads; the backward's weight
// and bias gradients are summed per thread in float32 and rounded once.
// Every other call: the CPU kernel through the fallback.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>

namespace openmtia {

// The ops low_precision/norm.cpp registers on MTIA.
const std::unordered_set<std::string>& normOps();
// How many calls the loops ran so far (forward and backward), for tests.
int64_t fusedNormCalls();

}  // namespace openmtia
