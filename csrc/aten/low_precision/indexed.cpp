// bf16/fp16 embedding backward, index_add_ and scatter_add_ (see low_precision/indexed.h).
#include "openmtia/runtime.h"
#include "aten/fallback/fallback.h"
#include "aten/low_precision/indexed.h"
#include "aten/low_precision/kernels.h"
#include "aten/ops.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/stream.h"

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>


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

// dst[k] += src[i] for each i with k = index[i], as CPU's scatter-add with
// an int64 index does it (index_add_ of dim 0 and alpha 1): for each row k
// indexed, its float32 value plus the indexed source rows in index order, in
// float32, rounded once; the rows k on the threads.
void accumulateRows(bool bf16, uint16_t* dst, const uint16_t* src, const std::vector<int64_t>& index, int64_t row) {
  const int64_t n = static_cast<int64_t>(index.size());
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return index[a] < index[b]; });
  std::vector<int64_t> starts;  // where each row k's run of `order` starts
  for (int64_t j = 0; j < n; ++j)
    if (j == 0 || index[order[j]] != index[order[j - 1]]) starts.push_back(j);
  starts.push_back(n);
  const int64_t runs = static_cast<int64_t>(starts.size()) - 1;
  forEachThread(runs, [&](int64_t first, int64_t last) {
    std::vector<float> acc(row);
    for (int64_t r = first; r < last; ++r) {
      uint16_t* d = dst + index[order[starts[r]]] * row;
      widenLoop(bf16, d, acc.data(), row);
      for (int64_t j = starts[r]; j < starts[r + 1]; ++j) accumulateLoop(bf16, src + order[j] * row, acc.data(), row);
      narrowLoop(bf16, acc.data(), d, row);
    }
  });
}

bool isOne(const c10::Scalar& s) {
  return !s.isComplex() && !s.isBoolean() && s.toDouble() == 1.0;
}

// index_add_(self, 0, index, source) with alpha 1 of contiguous bf16/fp16
// self and source alike but in dim 0, rows of at least kMinRow: CPU's
// results (an int64 index: float32 sums per row, fp16 only; int32: each add
// rounded). CPU's fp16 kernel with an int64 index runs a scalar loop,
// 2.1-2.7x float32's time (1.0-1.2 here); with an int32 index both dtypes'
// kernels add row by row converting each vector.
at::Tensor& indexAdd_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                      const c10::Scalar& alpha) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::index_add_", "");
  const bool shaped = self.dim() >= 1 && source.dim() == self.dim() && c10::maybe_wrap_dim(dim, self.dim()) == 0 &&
                      self.size(0) > 0 && source.sizes().slice(1).equals(self.sizes().slice(1));
  const int64_t row = shaped ? self.numel() / self.size(0) : 0;
  // (bf16 with an int64 index: CPU's kernel, whose float32 sums per row are
  // as fast as the loops': 1.02-1.15x float32's time against 1.17-1.23)
  const bool int64_bf16 = index.defined() && index.scalar_type() == at::kLong && self.scalar_type() == at::kBFloat16;
  const bool taken = shaped && isOne(alpha) && !int64_bf16 && loopsTake(self) && source.scalar_type() == self.scalar_type() &&
                     source.device() == self.device() && source.is_contiguous() && !source.is_neg() &&
                     row >= kMinRow && plainIndex(index, self) && index.dim() <= 1 &&
                     index.numel() == source.size(0) && !self.storage().is_alias_of(source.storage()) &&
                     !self.storage().is_alias_of(index.storage());
  if (!taken) {
    torch::jit::Stack stack{self, dim, index, source, alpha};
    boxedFallback(op, &stack);
    return self;
  }
  c10::DeviceGuard guard(self.device());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = self.scalar_type() == at::kBFloat16, int64 = index.scalar_type() == at::kLong;
  auto* dst = static_cast<uint16_t*>(self.data_ptr());
  const auto* src = static_cast<const uint16_t*>(source.const_data_ptr());
  const void* ip = index.const_data_ptr();
  const int64_t n = index.numel(), rows = self.size(0);
  launchOnCurrentStream(self.device().index(), "aten::index_add_", [=] {
    const std::vector<int64_t> index = indices(ip, int64, n);
    checkIndices(index, rows);
    useKernelThreads(n * row * 3);
    if (int64) accumulateRows(bf16, dst, src, index, row);
    else addRowsRounding(bf16, dst, src, index, row, /*skip=*/-1);
  });
  return self;
}

// scatter_add_(self, dim, index, src) along self's last dim, bf16/fp16 self
// and src contiguous, index (int64, contiguous, on the device) of src's
// sizes, self's but in dim: CPU's float32 sums per row (scatterAddLoop),
// ranges of rows on the threads. CPU's bf16/fp16 kernel converts element by
// element: 1.3-2.0x float32's time (1024 rows of 1024). Every other call:
// CPU's kernel through the fallback.
at::Tensor& scatterAdd_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::scatter_add_", "");
  const int64_t d = self.dim() > 0 ? c10::maybe_wrap_dim(dim, self.dim()) : -1;
  const bool taken = d >= 0 && d == self.dim() - 1 && loopsTake(self) && index.defined() && src.defined() &&
                     index.dim() == self.dim() && src.sizes().equals(index.sizes()) &&
                     index.sizes().slice(0, d).equals(self.sizes().slice(0, d)) && index.size(d) > 0 &&
                     index.scalar_type() == at::kLong && index.is_contiguous() && index.device() == self.device() &&
                     src.scalar_type() == self.scalar_type() && src.is_contiguous() && !src.is_neg() &&
                     src.device() == self.device() && !self.storage().is_alias_of(src.storage()) &&
                     !self.storage().is_alias_of(index.storage());
  if (!taken) {
    torch::jit::Stack stack{self, dim, index, src};
    boxedFallback(op, &stack);
    return self;
  }
  c10::DeviceGuard guard(self.device());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = self.scalar_type() == at::kBFloat16;
  auto* dst = static_cast<uint16_t*>(self.data_ptr());
  const auto* sp = static_cast<const uint16_t*>(src.const_data_ptr());
  const int64_t* ip = index.const_data_ptr<int64_t>();
  const int64_t n = index.size(d), m = self.size(d), rows = index.numel() / n;
  launchOnCurrentStream(self.device().index(), "aten::scatter_add_", [=] {
    useKernelThreads(rows * n * 4);
    // (an index out of range stops its thread's rows and raises, naming an
    // index found out of range; self's contents are then unspecified, as
    // after a device kernel's failed check)
    std::atomic<int64_t> bad{-1};
    forEachThread(rows, [&](int64_t first, int64_t last) {
      std::vector<float> scratch(m);
      const int64_t at =
          scatterAddLoop(bf16, dst + first * m, sp + first * n, ip + first * n, last - first, n, m, scratch.data());
      if (at >= 0) bad.store(first * n + at);
    });
    const int64_t at = bad.load();
    TORCH_CHECK_INDEX(at < 0, "index ", at < 0 ? 0 : ip[at], " is out of bounds for dimension ", d, " with size ", m);
  });
  return self;
}

}  // namespace

const std::unordered_set<std::string>& indexedOps() {
  static const std::unordered_set<std::string> ops = {"embedding_dense_backward", "index_add_", "scatter_add_"};
  return ops;
}

int64_t fusedIndexedCalls() { return g_calls.load(); }

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("embedding_dense_backward", &embeddingDenseBackward);
  m.impl("index_add_", &indexAdd_);
  m.impl("scatter_add_", &scatterAdd_);
}

}  // namespace openmtia
