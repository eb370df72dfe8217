// bf16/fp16 reductions of all elements (see low_precision_reductions.h).
#include "low_precision_reductions.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <atomic>
#include <vector>

#include "common.h"
#include "low_precision_kernels.h"

namespace openmtia {
namespace {

std::atomic<int64_t> g_calls{0};

}  // namespace

bool fusedReduction(const at::Tensor& x) { return loopsTake(x); }

at::Tensor fusedReductionResult(Reduction kind, const at::Tensor& x, bool keepdim) {
  static const char* const kNames[] = {"aten::sum", "aten::mean", "aten::amax", "aten::amin"};
  c10::DeviceGuard guard(x.device());
  const std::vector<int64_t> sizes(keepdim ? x.dim() : 0, 1);
  at::Tensor out = at::detail::empty_generic(sizes, deviceAllocator(), c10::DispatchKeySet(c10::DispatchKey::MTIA),
                                             x.scalar_type(), std::nullopt);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  void* op = out.data_ptr();
  const int64_t n = x.numel();
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(x.device().index(), kNames[static_cast<int>(kind)], [=] {
    useKernelThreads(n);
    const bool sum = kind == Reduction::kSum || kind == Reduction::kMean, max = kind == Reduction::kMax;
    // each thread's partial, combined in thread order (one thread below
    // kParallelWork: useKernelThreads)
    const int64_t threads = at::get_num_threads();
    std::vector<double> sums(threads);
    std::vector<float> extrema(threads);
    auto range = [&](int64_t slot, int64_t begin, int64_t end) {
      if (sum) sums[slot] = sumLoop(bf16, xp + begin, end - begin);
      else extrema[slot] = extremumLoop(bf16, max, xp + begin, end - begin);
    };
    forEachThread(threads, [&](int64_t first, int64_t last) {
      for (int64_t t = first; t < last; ++t) range(t, n * t / threads, n * (t + 1) / threads);
    });
    float r;
    if (sum) {
      double total = 0;
      for (double s : sums) total += s;
      r = static_cast<float>(total);
      if (kind == Reduction::kMean) r /= static_cast<float>(n);  // (CPU's: float32 sum, then the division)
    } else {
      r = extrema[0];
      for (float e : extrema) r = (e != e || r != r) ? __builtin_nanf("") : max ? std::max(r, e) : std::min(r, e);
    }
    if (bf16) *static_cast<c10::BFloat16*>(op) = c10::BFloat16(r);
    else *static_cast<c10::Half*>(op) = c10::Half(r);
  });
  return out;
}

int64_t fusedReductionCalls() { return g_calls.load(); }

}  // namespace openmtia
