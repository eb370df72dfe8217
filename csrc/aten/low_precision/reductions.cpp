// bf16/fp16 reductions of all elements (see low_precision/reductions.h).
#include "openmtia/runtime.h"
#include "aten/fallback/fallback.h"
#include "aten/low_precision/kernels.h"
#include "aten/low_precision/reductions.h"
#include "aten/ops.h"
#include "aten/small_ops.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/stream.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/accumulate.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <vector>


namespace openmtia {
namespace {

std::atomic<int64_t> g_calls{0};

}  // namespace

bool fusedReduction(const at::Tensor& x) { return loopsTake(x); }

namespace {

// A float32 sum (of squares for kNorm2) finished: mean = sum / n (CPU's:
// float32 sum, then the division), the norm its square root.
float finish(Reduction kind, double sum, int64_t n) {
  const auto r = static_cast<float>(sum);
  if (kind == Reduction::kMean) return r / static_cast<float>(n);
  return kind == Reduction::kNorm2 ? std::sqrt(r) : r;
}

// The float32-accumulated sum of a sum-like reduction over n elements.
double partialSum(Reduction kind, bool bf16, const uint16_t* xp, int64_t n) {
  return kind == Reduction::kNanSum ? nanSumLoop(bf16, xp, n) : sumLoop(bf16, xp, n, kind == Reduction::kNorm2);
}

// The reduction of n elements at xp by one thread, in float32.
float reduceRun(Reduction kind, bool bf16, const uint16_t* xp, int64_t n) {
  if (kind == Reduction::kMax || kind == Reduction::kMin) return extremumLoop(bf16, kind == Reduction::kMax, xp, n);
  return finish(kind, partialSum(kind, bf16, xp, n), n);
}

// All n elements on every thread: each thread's partial, combined in thread
// order (one thread below kParallelWork: useKernelThreads).
float reduceAll(Reduction kind, bool bf16, const uint16_t* xp, int64_t n) {
  const bool max = kind == Reduction::kMax, sum = !max && kind != Reduction::kMin;
  const int64_t threads = at::get_num_threads();
  std::vector<double> sums(threads);
  std::vector<float> extrema(threads);
  forEachThread(threads, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
      if (sum) sums[t] = partialSum(kind, bf16, xp + begin, end - begin);
      else extrema[t] = extremumLoop(bf16, max, xp + begin, end - begin);
    }
  });
  if (sum) {
    double total = 0;
    for (double s : sums) total += s;
    return finish(kind, total, n);
  }
  float r = extrema[0];
  for (float e : extrema) r = (e != e || r != r) ? __builtin_nanf("") : max ? std::max(r, e) : std::min(r, e);
  return r;
}

// The sizes of x reduced over its last `trailing` dims (keepdim: each kept
// as 1), and in `rows` how many rows of the reduced dims' elements x holds.
std::vector<int64_t> reducedSizes(const at::Tensor& x, int64_t trailing, bool keepdim, int64_t& rows) {
  TORCH_INTERNAL_ASSERT(trailing >= 0 && trailing <= x.dim());
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end() - trailing);
  rows = c10::multiply_integers(sizes);
  if (keepdim) sizes.resize(x.dim(), 1);
  return sizes;
}

// A reduction's task name (what traces and profiles show).
const char* taskName(Reduction kind) {
  static const char* const kNames[] = {"aten::sum", "aten::mean", "aten::amax", "aten::amin",
                                       "aten::linalg_vector_norm", "aten::nansum"};
  return kNames[static_cast<int>(kind)];
}

void store(bool bf16, void* out, int64_t i, float r) {
  if (bf16) static_cast<c10::BFloat16*>(out)[i] = c10::BFloat16(r);
  else static_cast<c10::Half*>(out)[i] = c10::Half(r);
}

}  // namespace

at::Tensor fusedReductionResult(Reduction kind, const at::Tensor& x, int64_t trailing, bool keepdim) {
  c10::DeviceGuard guard(x.device());
  int64_t rows;
  at::Tensor out = emptyDevice(reducedSizes(x, trailing, keepdim, rows), x.scalar_type());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  void* op = out.data_ptr();
  const int64_t n = x.numel(), cols = n / rows;
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(x.device().index(), taskName(kind), [=] {
    useKernelThreads(n);
    if (rows == 1) return store(bf16, op, 0, reduceAll(kind, bf16, xp, n));
    // one row on one thread, the rows shared among the threads
    forEachThread(rows, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) store(bf16, op, r, reduceRun(kind, bf16, xp + r * cols, cols));
    });
  });
  return out;
}

namespace {

// The variance of n elements with `correction` (n - correction > 0), in
// double from float32 partials: each thread's sum (sumLoop), the mean, each
// thread's sum of squared deviations from it (deviationsLoop). Where that
// is not finite (a float32 square or block sum overflowed: values near the
// dtype's largest), it is computed again in double element by element, as
// CPU's kernel accumulates (NaN and inf inputs then give CPU's NaN).
double varianceAll(bool bf16, const uint16_t* xp, int64_t n, double correction) {
  const double mean =
      sumOverThreads(n, [&](int64_t b, int64_t e) { return sumLoop(bf16, xp + b, e - b); }) / static_cast<double>(n);
  const auto m = static_cast<float>(mean);
  const double m2 = sumOverThreads(n, [&](int64_t b, int64_t e) { return deviationsLoop(bf16, xp + b, m, e - b); });
  const double var = m2 / (static_cast<double>(n) - correction);
  if (std::isfinite(var)) return var;
  auto value = [&](int64_t i) -> double { return widenedOne(bf16, xp[i]); };
  double sum = 0, dev = 0;
  for (int64_t i = 0; i < n; ++i) sum += value(i);
  const double exact_mean = sum / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) dev += (value(i) - exact_mean) * (value(i) - exact_mean);
  return dev / (static_cast<double>(n) - correction);
}

}  // namespace

at::Tensor fusedVarianceResult(const at::Tensor& x, double correction, bool take_sqrt, bool keepdim) {
  TORCH_INTERNAL_ASSERT(static_cast<double>(x.numel()) - correction > 0);
  c10::DeviceGuard guard(x.device());
  int64_t rows;
  at::Tensor out = emptyDevice(reducedSizes(x, x.dim(), keepdim, rows), x.scalar_type());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  void* op = out.data_ptr();
  const int64_t n = x.numel();
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(x.device().index(), take_sqrt ? "aten::std" : "aten::var", [=] {
    useKernelThreads(2 * n);
    const double var = varianceAll(bf16, xp, n, correction);
    store(bf16, op, 0, static_cast<float>(take_sqrt ? std::sqrt(var) : var));
  });
  return out;
}

at::Tensor fusedLeadingReductionResult(Reduction kind, const at::Tensor& x, int64_t leading, bool keepdim) {
  TORCH_INTERNAL_ASSERT(kind != Reduction::kNorm2 && kind != Reduction::kNanSum && leading >= 1 && leading < x.dim());
  c10::DeviceGuard guard(x.device());
  std::vector<int64_t> sizes(keepdim ? leading : 0, 1);
  sizes.insert(sizes.end(), x.sizes().begin() + leading, x.sizes().end());
  at::Tensor out = emptyDevice(sizes, x.scalar_type());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  auto* op = static_cast<uint16_t*>(out.data_ptr());
  const int64_t n = x.numel(), cols = out.numel(), rows = n / cols;
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const int code = kind == Reduction::kMax ? 1 : kind == Reduction::kMin ? 2 : 0;
  launchOnCurrentStream(x.device().index(), taskName(kind), [=] {
    useKernelThreads(n);
    // ranges of columns (64 at least) on the threads, each over every row
    const int64_t ranges = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), cols / 64));
    forEachThread(ranges, [&](int64_t first, int64_t last) {
      for (int64_t t = first; t < last; ++t) {
        const int64_t c0 = cols * t / ranges, c1 = cols * (t + 1) / ranges;
        std::vector<float> result(c1 - c0), scratch(c1 - c0);
        columnsLoop(bf16, code, xp, rows, cols, c0, c1, result.data(), scratch.data());
        if (kind == Reduction::kMean)
          for (float& v : result) v /= static_cast<float>(rows);
        narrowLoop(bf16, result.data(), op + c0, c1 - c0);
      }
    });
  });
  return out;
}

at::Tensor fusedArgResult(bool max, const at::Tensor& x, int64_t trailing, bool keepdim, at::Tensor* values) {
  TORCH_INTERNAL_ASSERT(trailing == 1 || trailing == x.dim());
  c10::DeviceGuard guard(x.device());
  int64_t rows;
  const std::vector<int64_t> sizes = reducedSizes(x, trailing, keepdim, rows);
  at::Tensor out = emptyDevice(sizes, at::kLong);
  if (values) *values = emptyDevice(sizes, x.scalar_type());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  auto* op = static_cast<int64_t*>(out.data_ptr());
  auto* vp = values ? static_cast<uint16_t*>(values->data_ptr()) : nullptr;  // (the element itself, its bits)
  const int64_t n = x.numel(), cols = n / rows;
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(x.device().index(), max ? "aten::argmax" : "aten::argmin", [=] {
    useKernelThreads(n);
    if (rows == 1) {
      *op = argExtremumLoop(bf16, max, xp, n, /*threads=*/true);
      if (vp) *vp = xp[*op];
      return;
    }
    forEachThread(rows, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        op[r] = argExtremumLoop(bf16, max, xp + r * cols, cols);
        if (vp) vp[r] = xp[r * cols + op[r]];
      }
    });
  });
  return out;
}

int64_t fusedReductionCalls() { return g_calls.load(); }

namespace {

// Whether the loops take a 2-norm of x over `dim` (none or []: all dims,
// as CPU's): ord 2, x's dtype; k the number of trailing dims.
bool fusedNorm(const at::Tensor& x, const c10::Scalar& ord, at::OptionalIntArrayRef dim,
               std::optional<at::ScalarType> dtype, int64_t& k) {
  k = dim ? trailingDims(x, *dim) : x.dim();
  const bool two = !ord.isComplex() && !ord.isBoolean() && ord.toDouble() == 2.0;
  return two && k >= 0 && (!dtype || *dtype == x.scalar_type()) && fusedReduction(x);
}

// linalg_vector_norm and norm.ScalarOpt_dim (Tensor.norm(), torch.norm on
// mtia): a 2-norm through the loops; every other call the boxed fallback
// (CPU's kernel and its argument errors).
at::Tensor vectorNorm(const at::Tensor& x, const c10::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                      std::optional<at::ScalarType> dtype) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::linalg_vector_norm", "");
  int64_t k;
  if (fusedNorm(x, ord, dim, dtype, k)) return fusedReductionResult(Reduction::kNorm2, x, k, keepdim);
  if (auto small = smallVectorNorm(x, ord, dim, keepdim, dtype)) return *small;
  return boxedFallbackCall(op, {x, ord, dim, keepdim, dtype});
}

at::Tensor norm(const at::Tensor& x, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::norm", "ScalarOpt_dim");
  int64_t k;
  if (fusedNorm(x, p.value_or(2.0), dim, std::nullopt, k)) return fusedReductionResult(Reduction::kNorm2, x, k, keepdim);
  return boxedFallbackCall(op, {x, p, dim, keepdim});
}

// argmax/argmin over all elements or the last dim through the loops; every
// other call the boxed fallback.
template <bool kMax>
at::Tensor argExtremum(const at::Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(kMax ? "aten::argmax" : "aten::argmin", "");
  // (dim: the last one; none: every element)
  if ((!dim || trailingDims(x, *dim) == 1) && fusedReduction(x))
    return fusedArgResult(kMax, x, dim ? 1 : x.dim(), keepdim);
  if (auto small = smallArgExtremum(kMax, x, dim, keepdim)) return *small;
  return boxedFallbackCall(op, {x, dim, keepdim});
}

// max.dim/min.dim over the last dim: values and indices of argmax/argmin's
// rule (CPU's); every other call the boxed fallback.
template <bool kMax>
std::tuple<at::Tensor, at::Tensor> extremumDim(const at::Tensor& x, int64_t dim, bool keepdim) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(kMax ? "aten::max" : "aten::min", "dim");
  if (trailingDims(x, dim) == 1 && fusedReduction(x)) {
    at::Tensor values;
    at::Tensor indices = fusedArgResult(kMax, x, 1, keepdim, &values);
    return {values, indices};
  }
  if (auto small = smallExtremumDim(kMax, x, dim, keepdim)) return *small;
  torch::jit::Stack stack{x, dim, keepdim};
  boxedFallback(op, &stack);
  return {stack[0].toTensor(), stack[1].toTensor()};
}

// mse_loss(self, target, reduction) reduced (mean or sum) over two alike
// tensors the loops take: the sum of squared differences in float32 on
// every thread (each thread's range, combined in thread order), divided by
// n for the mean, rounded once. CPU rounds each squared difference to the
// dtype before its sum; mtia's is the more accurate. reduction none, and
// every other call: CPU's kernel.
// The mean or sum over two alike tensors of an elementwise loss (lossLoop),
// one pass, each thread's partial sum in double; a 0-dim result of their
// dtype. Every other call: CPU's kernel through the fallback (`boxed`).
at::Tensor lossOf(Loss kind, const char* name, const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                  double beta, const c10::OperatorHandle& op, std::vector<c10::IValue> boxed) {
  constexpr int64_t kSum = 2, kMean = 1;  // (at::Reduction)
  if ((reduction != kSum && reduction != kMean) || !loopsTake(self, target))
    return boxedFallbackCall(op, std::move(boxed));
  c10::DeviceGuard guard(self.device());
  at::Tensor out = emptyDevice({}, self.scalar_type());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(self.data_ptr());
  const auto* yp = static_cast<const uint16_t*>(target.data_ptr());
  void* op_out = out.data_ptr();
  const int64_t n = self.numel();
  const bool bf16 = self.scalar_type() == at::kBFloat16, mean = reduction == kMean;
  const auto b = static_cast<float>(beta);
  launchOnCurrentStream(self.device().index(), name, [=] {
    useKernelThreads(2 * n);
    const double total = sumOverThreads(n, [&](int64_t s, int64_t e) { return lossLoop(kind, bf16, xp + s, yp + s, b, e - s); });
    store(bf16, op_out, 0, finish(mean ? Reduction::kMean : Reduction::kSum, total, n));
  });
  return out;
}

at::Tensor mseLoss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mse_loss", "");
  return lossOf(Loss::kSquared, "aten::mse_loss", self, target, reduction, 0.0, op, {self, target, reduction});
}

// smooth_l1_loss and huber_loss: beta (delta) > 0, else (CPU's l1_loss for
// beta 0, its error for a negative one) CPU's kernel.
at::Tensor smoothL1Loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::smooth_l1_loss", "");
  if (!(beta > 0)) return boxedFallbackCall(op, {self, target, reduction, beta});
  return lossOf(Loss::kSmoothL1, "aten::smooth_l1_loss", self, target, reduction, beta, op,
                {self, target, reduction, beta});
}

at::Tensor huberLoss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::huber_loss", "");
  if (!(delta > 0)) return boxedFallbackCall(op, {self, target, reduction, delta});
  return lossOf(Loss::kHuber, "aten::huber_loss", self, target, reduction, delta, op, {self, target, reduction, delta});
}

// nansum of every element or over the last dims, no dtype or its own.
at::Tensor nansum(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::nansum", "");
  const int64_t k = !dim ? x.dim() : trailingDims(x, *dim);
  if ((dtype && *dtype != x.scalar_type()) || k < 0 || !fusedReduction(x))
    return boxedFallbackCall(op, {x, dim, keepdim, dtype});
  return fusedReductionResult(Reduction::kNanSum, x, k, keepdim);
}

// cumsum/cumprod over the last dim of a bf16/fp16 tensor the loops take
// (no dtype argument, or its own): rows of CPU's scan, kCumulativeRows at a
// time, ranges of rows on the threads. Every other call: the fallback.
template <bool kProd>
at::Tensor cumulative(const at::Tensor& x, int64_t dim, std::optional<at::ScalarType> dtype) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(kProd ? "aten::cumprod" : "aten::cumsum", "");
  if ((dtype && *dtype != x.scalar_type()) || x.dim() == 0 || trailingDims(x, dim) != 1 || x.numel() == 0 ||
      !fusedReduction(x)) {
    if (auto small = smallCumulative(kProd, x, dim, dtype)) return *small;
    return boxedFallbackCall(op, {x, dim, dtype});
  }
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDeviceLike(x);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const int64_t n = x.size(-1), rows = x.numel() / n;
  const auto* xp = static_cast<const uint16_t*>(x.const_data_ptr());
  auto* yp = static_cast<uint16_t*>(out.data_ptr());
  launchOnCurrentStream(x.device().index(), kProd ? "aten::cumprod" : "aten::cumsum", [=] {
    useKernelThreads(rows * n * 2);
    const int64_t blocks = (rows + kCumulativeRows - 1) / kCumulativeRows;
    forEachThread(blocks, [&](int64_t first, int64_t last) {
      std::vector<float> scratch(2 * kCumulativeRows * n);
      const int64_t r0 = first * kCumulativeRows, r1 = std::min(rows, last * kCumulativeRows);
      cumulativeLoop(bf16, kProd, xp + r0 * n, yp + r0 * n, r1 - r0, n, scratch.data());
    });
  });
  return out;
}

// _cummax_helper/_cummin_helper (cummax/cummin's kernel) over the last dim
// of a bf16/fp16 tensor the loops take, into values of its dtype and int64
// indices of its sizes, contiguous, on its device (cummax's own outputs):
// CPU's scan (cumExtremumLoop), ranges of rows on the threads. CPU's
// kernel converts each element (1.2-1.3x float32's time, both hosts); every
// other call: the fallback.
template <bool kMax>
void cumExtremum(const at::Tensor& x, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(kMax ? "aten::_cummax_helper" : "aten::_cummin_helper", "");
  const auto alike = [&](const at::Tensor& t, at::ScalarType dtype) {
    return t.defined() && t.scalar_type() == dtype && t.device() == x.device() && t.sizes().equals(x.sizes()) &&
           t.is_contiguous() && !t.storage().is_alias_of(x.storage());
  };
  if (x.dim() == 0 || trailingDims(x, dim) != 1 || x.numel() == 0 || !fusedReduction(x) ||
      !alike(values, x.scalar_type()) || !alike(indices, at::kLong) || values.storage().is_alias_of(indices.storage())) {
    torch::jit::Stack stack{x, values, indices, dim};
    boxedFallback(op, &stack);
    return;
  }
  c10::DeviceGuard guard(x.device());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const int64_t n = x.size(-1), rows = x.numel() / n;
  const auto* xp = static_cast<const uint16_t*>(x.const_data_ptr());
  auto* vp = static_cast<uint16_t*>(values.data_ptr());
  auto* ip = indices.data_ptr<int64_t>();
  launchOnCurrentStream(x.device().index(), kMax ? "aten::_cummax_helper" : "aten::_cummin_helper", [=] {
    useKernelThreads(rows * n * 2);
    forEachThread(rows, [&](int64_t first, int64_t last) {
      cumExtremumLoop(bf16, kMax, xp + first * n, vp + first * n, ip + first * n, last - first, n);
    });
  });
}

}  // namespace

std::optional<at::Tensor> fusedProd(const at::Tensor& x, int64_t dim, bool keepdim,
                                    std::optional<at::ScalarType> dtype) {
  if ((dtype && *dtype != x.scalar_type()) || x.dim() == 0 || trailingDims(x, dim) != 1 || x.numel() == 0 ||
      x.numel() == x.size(-1) || !fusedReduction(x))
    return std::nullopt;
  c10::DeviceGuard guard(x.device());
  int64_t rows;
  at::Tensor out = emptyDevice(reducedSizes(x, 1, keepdim, rows), x.scalar_type());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(x.const_data_ptr());
  void* op_out = out.data_ptr();
  const int64_t n = x.size(-1);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(x.device().index(), "aten::prod", [=] {
    useKernelThreads(rows * n * 2);
    forEachThread(rows, [&](int64_t first, int64_t last) {
      std::vector<float> r(last - first);
      prodLoop(bf16, xp + first * n, last - first, n, r.data());
      for (int64_t i = first; i < last; ++i) store(bf16, op_out, i, r[i - first]);
    });
  });
  return out;
}

const std::unordered_set<std::string>& reductionOps() {
  static const std::unordered_set<std::string> ops = {"linalg_vector_norm", "norm.ScalarOpt_dim", "argmax",
                                                      "argmin",           "max.dim",            "min.dim",
                                                      "mse_loss",           "cumsum",             "cumprod",
                                                      "smooth_l1_loss",     "huber_loss",         "nansum",
                                                      "_cummax_helper",     "_cummin_helper"};
  return ops;
}

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("linalg_vector_norm", &vectorNorm);
  m.impl("norm.ScalarOpt_dim", &norm);
  m.impl("argmax", &argExtremum<true>);
  m.impl("argmin", &argExtremum<false>);
  m.impl("max.dim", &extremumDim<true>);
  m.impl("min.dim", &extremumDim<false>);
  m.impl("mse_loss", &mseLoss);
  m.impl("smooth_l1_loss", &smoothL1Loss);
  m.impl("huber_loss", &huberLoss);
  m.impl("nansum", &nansum);
  m.impl("cumsum", &cumulative<false>);
  m.impl("cumprod", &cumulative<true>);
  m.impl("_cummax_helper", &cumExtremum<true>);
  m.impl("_cummin_helper", &cumExtremum<false>);
}

}  // namespace openmtia
