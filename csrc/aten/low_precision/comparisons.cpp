// bf16/fp16 comparisons (see low_precision/comparisons.h).
#include "openmtia/runtime.h"
#include "aten/low_precision/comparisons.h"
#include "aten/ops.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/stream.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>

#include <atomic>


namespace openmtia {
namespace {

std::atomic<int64_t> g_calls{0};

// Launches the loops over a's elements (and b's, if b): a task on a's
// device's current stream writing a fresh bool tensor, which it returns.
at::Tensor launch(Comparison kind, const at::Tensor& a, const uint16_t* b, float s) {
  static const char* const kNames[] = {"aten::lt", "aten::le", "aten::gt", "aten::ge", "aten::eq", "aten::ne"};
  c10::DeviceGuard guard(a.device());
  at::Tensor out = emptyDevice(a.sizes(), at::kBool);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* x = static_cast<const uint16_t*>(a.data_ptr());
  bool* o = out.data_ptr<bool>();
  const int64_t n = a.numel();
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(a.device().index(), kNames[static_cast<int>(kind)], [=] {
    const int64_t work = n * (b ? 3 : 2) / 2;  // (elements read and written, a bool counting half)
    useKernelThreads(work);
    forEachThread(n, [&](int64_t begin, int64_t end) {
      compareLoop(kind, bf16, x + begin, b ? b + begin : nullptr, s, o + begin, end - begin);
    });
  });
  return out;
}

}  // namespace

bool fusedComparison(const at::Tensor& a, const at::Tensor& b) { return loopsTake(a, b); }

at::Tensor fusedComparisonResult(Comparison kind, const at::Tensor& a, const at::Tensor& b) {
  return launch(kind, a, static_cast<const uint16_t*>(b.data_ptr()), 0.f);
}

at::Tensor fusedComparisonResult(Comparison kind, const at::Tensor& a, const c10::Scalar& b) {
  // the number in the tensor's dtype first, as type promotion makes it
  return launch(kind, a, nullptr, inDtype(b.toDouble(), a.scalar_type() == at::kBFloat16));
}

int64_t fusedComparisonCalls() { return g_calls.load(); }

}  // namespace openmtia
