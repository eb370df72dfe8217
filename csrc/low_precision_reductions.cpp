// bf16/fp16 reductions of all elements (see low_precision_reductions.h).
#include "low_precision_reductions.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/accumulate.h>

#include <atomic>
#include <vector>

#include "common.h"
#include "low_precision_kernels.h"

namespace openmtia {
namespace {

std::atomic<int64_t> g_calls{0};

}  // namespace

bool fusedReduction(const at::Tensor& x) { return loopsTake(x); }

namespace {

// The reduction of n elements at xp by one thread, in float32.
float reduceRun(Reduction kind, bool bf16, const uint16_t* xp, int64_t n) {
  if (kind == Reduction::kMax || kind == Reduction::kMin) return extremumLoop(bf16, kind == Reduction::kMax, xp, n);
  const auto r = static_cast<float>(sumLoop(bf16, xp, n));
  return kind == Reduction::kMean ? r / static_cast<float>(n) : r;  // (CPU's: float32 sum, then the division)
}

// All n elements on every thread: each thread's partial, combined in thread
// order (one thread below kParallelWork: useKernelThreads).
float reduceAll(Reduction kind, bool bf16, const uint16_t* xp, int64_t n) {
  const bool sum = kind == Reduction::kSum || kind == Reduction::kMean, max = kind == Reduction::kMax;
  const int64_t threads = at::get_num_threads();
  std::vector<double> sums(threads);
  std::vector<float> extrema(threads);
  forEachThread(threads, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
      if (sum) sums[t] = sumLoop(bf16, xp + begin, end - begin);
      else extrema[t] = extremumLoop(bf16, max, xp + begin, end - begin);
    }
  });
  if (sum) {
    double total = 0;
    for (double s : sums) total += s;
    const auto r = static_cast<float>(total);
    return kind == Reduction::kMean ? r / static_cast<float>(n) : r;
  }
  float r = extrema[0];
  for (float e : extrema) r = (e != e || r != r) ? __builtin_nanf("") : max ? std::max(r, e) : std::min(r, e);
  return r;
}

void store(bool bf16, void* out, int64_t i, float r) {
  if (bf16) static_cast<c10::BFloat16*>(out)[i] = c10::BFloat16(r);
  else static_cast<c10::Half*>(out)[i] = c10::Half(r);
}

}  // namespace

at::Tensor fusedReductionResult(Reduction kind, const at::Tensor& x, int64_t trailing, bool keepdim) {
  static const char* const kNames[] = {"aten::sum", "aten::mean", "aten::amax", "aten::amin"};
  TORCH_INTERNAL_ASSERT(trailing >= 0 && trailing <= x.dim());
  c10::DeviceGuard guard(x.device());
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end() - trailing);
  const int64_t rows = c10::multiply_integers(sizes);
  if (keepdim) sizes.resize(x.dim(), 1);
  at::Tensor out = at::detail::empty_generic(sizes, deviceAllocator(), c10::DispatchKeySet(c10::DispatchKey::MTIA),
                                             x.scalar_type(), std::nullopt);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  void* op = out.data_ptr();
  const int64_t n = x.numel(), cols = n / rows;
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(x.device().index(), kNames[static_cast<int>(kind)], [=] {
    useKernelThreads(n);
    if (rows == 1) return store(bf16, op, 0, reduceAll(kind, bf16, xp, n));
    // one row on one thread, the rows shared among the threads
    forEachThread(rows, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) store(bf16, op, r, reduceRun(kind, bf16, xp + r * cols, cols));
    });
  });
  return out;
}

int64_t fusedReductionCalls() { return g_calls.load(); }

}  // namespace openmtia
