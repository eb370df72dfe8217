// bf16/fp16 add, sub, mul, div, clamp, rsub and lerp (see
// low_precision/arithmetic.h).
#include "openmtia/runtime.h"
#include "aten/low_precision/arithmetic.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/stream.h"

#include <ATen/MemoryOverlap.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>


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

// The spacing of b's elements in memory when they are evenly spaced in the
// row-major order of its dims but the last (a column: `x.mean(-1,
// keepdim=True)` is contiguous, `x[:, :1]` spaced by a row); else nothing.
std::optional<int64_t> columnSpacing(const at::Tensor& b) {
  std::optional<int64_t> s;
  int64_t span = 1;
  for (int64_t i = b.dim() - 2; i >= 0; --i) {
    if (b.size(i) == 1) continue;
    if (!s) s = b.stride(i);
    else if (b.stride(i) != *s * span) return std::nullopt;
    span *= b.size(i);
  }
  return s.value_or(1);
}

// Where b is a column of a, the spacing of its elements (else nothing): of
// a's dtype and device, a's sizes but the last, which is 1, its elements
// evenly spaced (columnSpacing), with rows of a of at least kMinPeriod
// elements (x * rsqrt(mean), a row's scale); out[r, j] = a[r, j] kind b[r]
// then: each row the number loop with b[r] as its number (b[r] widened
// exactly, as CPU's broadcast takes it).
std::optional<int64_t> columnOf(const at::Tensor& a, const at::Tensor& b) {
  if (!b.defined() || b.device() != a.device() || b.scalar_type() != a.scalar_type() || b.is_neg() || b.is_conj() ||
      a.dim() == 0 || b.dim() != a.dim() || b.size(-1) != 1 || a.size(-1) < kMinPeriod ||
      !a.sizes().slice(0, a.dim() - 1).equals(b.sizes().slice(0, b.dim() - 1)))
    return std::nullopt;
  return columnSpacing(b);
}

// A bound CPU's clamp converts to the dtype (Scalar::to, which raises where
// it overflows): real, not NaN (CPU's vector and scalar loops disagree on a
// NaN bound), and within the dtype's range.
bool plainBound(const std::optional<c10::Scalar>& v, bool bf16) {
  if (!v) return true;
  if (v->isComplex()) return false;
  const double d = v->toDouble();
  const double max = bf16 ? static_cast<double>(std::numeric_limits<c10::BFloat16>::max())
                          : static_cast<double>(std::numeric_limits<c10::Half>::max());
  return d == d && (std::isinf(d) || std::abs(d) <= max);
}

// out = a kind b (or s) with the loops' own s and alpha (arithmeticLoop).
void launchLoops(Arithmetic kind, const at::Tensor& a, const at::Tensor& b, float s, float f, const at::Tensor& out) {
  static const char* const kNames[] = {"aten::add", "aten::sub", "aten::mul", "aten::div", "aten::clamp",
                                       "aten::rsub", "aten::lerp"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Arithmetic::kLerp) + 1,
                "a task name for each kind");
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* x = static_cast<const uint16_t*>(a.data_ptr());
  const auto* y = b.defined() ? static_cast<const uint16_t*>(b.data_ptr()) : nullptr;
  auto* o = static_cast<uint16_t*>(out.data_ptr());
  const int64_t n = a.numel();
  const std::optional<int64_t> spacing = y ? columnOf(a, b) : std::nullopt;
  const bool column = spacing.has_value();
  const int64_t period = y && !column && b.numel() < n ? b.numel() : 0;  // b a row of a (rowOf)
  const int64_t row = column ? a.size(-1) : 0;
  launchOnCurrentStream(a.device().index(), kNames[static_cast<int>(kind)], [=] {
    const int64_t work = n * (y ? 3 : 2);
    useKernelThreads(work);
    if (column) {  // each row a kind its number
      forEachThread(n / row, [&](int64_t first, int64_t last) {
        for (int64_t r = first; r < last; ++r)
          arithmeticLoop(kind, bf16, x + r * row, nullptr, widenedOne(bf16, y[r * *spacing]), f, o + r * row, row);
      });
      return;
    }
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

}  // namespace

bool fusedArithmetic(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  if (alpha.isComplex()) return false;
  return rowOf(a, b) || columnOf(a, b).has_value() ? loopsTake(a) : loopsTake(a, b);
}

void launchArithmetic(Arithmetic kind, const at::Tensor& a, const at::Tensor& b, double number,
                      const c10::Scalar& alpha, const at::Tensor& out) {
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  // as CPU's kernels take them: alpha, and the number of add and sub, rounded
  // to the dtype (mul and div: the number in float32)
  const bool additive = kind == Arithmetic::kAdd || kind == Arithmetic::kSub || kind == Arithmetic::kRsub;
  const float s = !b.defined() && additive ? inDtype(number, bf16) : static_cast<float>(number);
  launchLoops(kind, a, b, s, inDtype(alpha.toDouble(), bf16), out);
}

bool fusedClamp(const at::Tensor& a, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi) {
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  return (lo || hi) && loopsTake(a) && plainBound(lo, bf16) && plainBound(hi, bf16);
}

void launchClamp(const at::Tensor& a, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi,
                 const at::Tensor& out) {
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  const float inf = std::numeric_limits<float>::infinity();
  launchLoops(Arithmetic::kClamp, a, at::Tensor(), lo ? inDtype(lo->toDouble(), bf16) : -inf,
              hi ? inDtype(hi->toDouble(), bf16) : inf, out);
}

bool fusedLerp(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight) {
  return !weight.isComplex() && loopsTake(self, end);
}

void launchLerp(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight, const at::Tensor& out) {
  launchLoops(Arithmetic::kLerp, self, end, 0.0f, static_cast<float>(weight.toDouble()), out);  // (CPU: in float32)
}

bool fusedTernary(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2) {
  return loopsTake(self, t1) && loopsTake(self, t2) &&
         at::get_overlap_status(self, t1) != at::MemOverlapStatus::Partial &&
         at::get_overlap_status(self, t2) != at::MemOverlapStatus::Partial;
}

void launchTernary(Ternary kind, const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, float value,
                   const at::Tensor& out) {
  static const char* const kNames[] = {"aten::addcmul", "aten::addcdiv", "aten::lerp", "aten::clamp"};
  const bool bf16 = self.scalar_type() == at::kBFloat16;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* s = static_cast<const uint16_t*>(self.data_ptr());
  const auto* a = static_cast<const uint16_t*>(t1.data_ptr());
  const auto* b = static_cast<const uint16_t*>(t2.data_ptr());
  auto* o = static_cast<uint16_t*>(out.data_ptr());
  const int64_t n = self.numel();
  launchOnCurrentStream(self.device().index(), kNames[static_cast<int>(kind)], [=] {
    useKernelThreads(n * 4);
    forEachThread(n, [&](int64_t begin, int64_t end) {
      ternaryLoop(kind, bf16, s + begin, a + begin, b + begin, value, o + begin, end - begin);
    });
  });
}

int64_t fusedArithmeticCalls() { return g_calls.load(); }

}  // namespace openmtia
