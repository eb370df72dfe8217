// bf16/fp16 embedding's backward (see low_precision_indexed.h).
#include "low_precision_indexed.h"

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "common.h"
#include "low_precision_kernels.h"

namespace openmtia {
namespace {

std::atomic<int64_t> g_calls{0};

// The fewest elements of a row the loops take (a shorter row is a call per
// few elements).
constexpr int64_t kMinRow = 64;

bool plainIndex(const at::Tensor& index, const at::Tensor& like) {
  return index.defined() && index.device() == like.device() && index.is_contiguous() &&
         (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt);
}

// A copy of the index on the host side of the task, as int64.
std::vector<int64_t> indices(const void* data, bool int64, int64_t n) {
  std::vector<int64_t> out(n);
  if (int64) {
    std::memcpy(out.data(), data, n * sizeof(int64_t));
  } else {
    const auto* p = static_cast<const int32_t*>(data);
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  }
  return out;
}

void checkIndices(const std::vector<int64_t>& index, int64_t rows) {
  for (int64_t k : index)
    TORCH_CHECK_INDEX(k >= 0 && k < rows, "index ", k, " is out of bounds for dimension 0 with size ", rows);
}

// How many ranges of columns of `row` elements the threads take.
int64_t columnRanges(int64_t row) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), row / kMinRow));
}

// dst[k] += src[i] for each i with k = index[i]
// (but `skip`, padding_idx), in index order, each add rounded to the dtype
// (CPU's add kernel per row), ranges of columns on the threads.
void addRowsRounding(bool bf16, uint16_t* dst, const uint16_t* src, const std::vector<int64_t>& index, int64_t row,
                     int64_t skip) {
  const int64_t n = static_cast<int64_t>(index.size()), ranges = columnRanges(row);
  forEachThread(ranges, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t c0 = row * t / ranges, c1 = row * (t + 1) / ranges;
      for (int64_t i = 0; i < n; ++i) {
        if (index[i] == skip) continue;
        uint16_t* d = dst + index[i] * row + c0;
        arithmeticLoop(Arithmetic::kAdd, bf16, d, src + i * row + c0, 0.0f, 1.0f, d, c1 - c0);
      }
    }
  });
}

at::Tensor embeddingDenseBackward(const at::Tensor& grad, const at::Tensor& index, c10::SymInt num_weights,
                                  c10::SymInt padding_idx, bool scale_grad_by_freq) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::embedding_dense_backward", "");
  const int64_t weights = num_weights.guard_int(__FILE__, __LINE__);
  const int64_t row = grad.dim() >= 1 ? grad.size(-1) : 0;
  const bool taken = !scale_grad_by_freq && loopsTake(grad) && row >= kMinRow && plainIndex(index, grad) &&
                     grad.numel() == index.numel() * row && weights > 0;
  if (!taken) return boxedFallbackCall(op, {grad, index, num_weights, padding_idx, scale_grad_by_freq});
  c10::DeviceGuard guard(grad.device());
  at::Tensor out = emptyDevice({weights, row}, grad.scalar_type());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = grad.scalar_type() == at::kBFloat16, int64 = index.scalar_type() == at::kLong;
  auto* dst = static_cast<uint16_t*>(out.data_ptr());
  const auto* src = static_cast<const uint16_t*>(grad.const_data_ptr());
  const void* ip = index.const_data_ptr();
  const int64_t n = index.numel(), pad = padding_idx.guard_int(__FILE__, __LINE__);
  launchOnCurrentStream(grad.device().index(), "aten::embedding_dense_backward", [=] {
    const std::vector<int64_t> index = indices(ip, int64, n);
    checkIndices(index, weights);  // (CPU's kernel skips such an index silently)
    std::memset(dst, 0, weights * row * sizeof(uint16_t));  // (+0 in bf16 and fp16)
    useKernelThreads(n * row * 3);
    addRowsRounding(bf16, dst, src, index, row, pad);
  });
  return out;
}

}  // namespace

const std::unordered_set<std::string>& indexedOps() {
  static const std::unordered_set<std::string> ops = {"embedding_dense_backward"};
  return ops;
}

int64_t fusedIndexedCalls() { return g_calls.load(); }

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("embedding_dense_backward", &embeddingDenseBackward);
}

}  // namespace openmtia
