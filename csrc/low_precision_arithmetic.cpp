// bf16/fp16 add, sub, mul and div (see low_precision_arithmetic.h).
#include "low_precision_arithmetic.h"

#include <atomic>

#include "common.h"

namespace openmtia {
namespace {

std::atomic<int64_t> g_calls{0};

// Whether b is a row of a: contiguous, of a's dtype and device, its sizes
// (leading 1s aside) a's last ones, fewer elements than a and at least
// kMinPeriod; out[i] = a[i] kind b[i % b.numel()] then.
bool rowOf(const at::Tensor& a, const at::Tensor& b) {
  if (!b.defined() || b.device() != a.device() || b.scalar_type() != a.scalar_type() || !b.is_contiguous() ||
      b.is_neg() || b.is_conj() || b.numel() < kMinPeriod || b.numel() >= a.numel())
    return false;
  auto sizes = b.sizes();
  while (!sizes.empty() && sizes.front() == 1) sizes = sizes.slice(1);
  return sizes.size() <= a.sizes().size() && a.sizes().slice(a.dim() - sizes.size()).equals(sizes);
}

}  // namespace

bool fusedArithmetic(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  if (alpha.isComplex()) return false;
  return rowOf(a, b) ? loopsTake(a) : loopsTake(a, b);
}

void launchArithmetic(Arithmetic kind, const at::Tensor& a, const at::Tensor& b, double number,
                      const c10::Scalar& alpha, const at::Tensor& out) {
  static const char* const kNames[] = {"aten::add", "aten::sub", "aten::mul", "aten::div"};
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  // as CPU's kernels take them: alpha, and the number of add and sub, rounded
  // to the dtype (mul and div: the number in float32)
  const bool additive = kind == Arithmetic::kAdd || kind == Arithmetic::kSub;
  const float s = !b.defined() && additive ? inDtype(number, bf16) : static_cast<float>(number);
  const float f = inDtype(alpha.toDouble(), bf16);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* x = static_cast<const uint16_t*>(a.data_ptr());
  const auto* y = b.defined() ? static_cast<const uint16_t*>(b.data_ptr()) : nullptr;
  auto* o = static_cast<uint16_t*>(out.data_ptr());
  const int64_t n = a.numel();
  const int64_t period = y && b.numel() < n ? b.numel() : 0;  // b a row of a (rowOf)
  launchOnCurrentStream(a.device().index(), kNames[static_cast<int>(kind)], [=] {
    const int64_t work = n * (y ? 3 : 2);
    useKernelThreads(work);
    if (period) {  // the rows shared among the threads
      forEachThread(n / period, [&](int64_t first, int64_t last) {
        for (int64_t r = first; r < last; ++r)
          arithmeticLoop(kind, bf16, x + r * period, y, s, f, o + r * period, period);
      });
      return;
    }
    forEachThread(n, [&](int64_t begin, int64_t end) {
      arithmeticLoop(kind, bf16, x + begin, y ? y + begin : nullptr, s, f, o + begin, end - begin);
    });
  });
}

int64_t fusedArithmeticCalls() { return g_calls.load(); }

}  // namespace openmtia
