// bf16 and fp16 embedding backward, index_add_ and scatter_add_ at float32 speed on every host.
//
// CPU PyTorch's bf16/fp16 embedding_dense_backward adds each indexed row of
// the gradient with its add kernel in index order (grad_weight[k] +=
// grad[i], padding_idx skipped), each add rounded to the dtype, converting
// each vector on its own: 1.2x float32's time (1024 indices into 1024 rows
// of 1024, AVX2 host). Where activationPath() (low_precision.h) says
// kFloat32, the task runs the same adds through the arithmetic loop
// (low_precision/kernels.h), each thread over its own range of columns:
// CPU's results bit for bit, 0.7-0.8x. Taken: a contiguous bf16/fp16
// gradient of more than loopMinElements() elements with rows of at least
// 64, an int64 or int32 index contiguous on the device, no
// scale_grad_by_freq. An index out of range raises at the next synchronize
// (the device's data; CPU's kernel does not check). Every other call: CPU's
// kernel through the fallback. index_add_ of dim 0 with alpha 1 likewise,
// with CPU's results: an int32 index adds row by row, each add rounded (the
// same loop); an int64 one sums each indexed row in float32 in index order
// and rounds once (fp16: CPU's kernel runs that as a scalar loop, 2.1-2.7x
// float32's time, 1.0-1.2 in the loops; bf16 keeps CPU's kernel, as fast).
// scatter_add_ along the last dim (int64 index of src's sizes) likewise:
// each self row in float32, the source added at each index in order,
// rounded once, as CPU's kernel (1.3-2.0 -> 0.8-1.0x float32's time); an
// index out of range raises at the next synchronize.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>

namespace openmtia {

// The ops low_precision/indexed.cpp registers on MTIA.
const std::unordered_set<std::string>& indexedOps();
// How many calls the loops ran so far (for tests).
int64_t fusedIndexedCalls();

}  // namespace openmtia
