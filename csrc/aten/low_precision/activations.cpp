// The fused bf16/fp16 activation kernels (see low_precision/activations.h).
#include "openmtia/runtime.h"
#include "aten/fallback/fallback.h"
#include "aten/low_precision/activations.h"
#include "aten/low_precision/arithmetic.h"
#include "aten/low_precision/low_precision.h"
#include "aten/ops.h"
#include "aten/small_ops.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/stream.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/BFloat16.h>
#include <c10/util/accumulate.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_set>
#include <vector>


namespace openmtia {
namespace {

std::atomic<int64_t> g_calls{0};

// ------------------------------------------------------- the ATen side

std::optional<Activation> geluKind(c10::string_view approximate, bool backward) {
  if (approximate == "none") return backward ? Activation::kGeluBackward : Activation::kGelu;
  if (approximate == "tanh") return backward ? Activation::kGeluTanhBackward : Activation::kGeluTanh;
  return std::nullopt;  // CPU's kernel raises, through the fallback
}

c10::OperatorHandle handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
  const auto kind = geluKind(approximate, false);
  static const c10::OperatorHandle op = handle("aten::gelu");
  if (!kind || !fusedActivation(*kind, x)) {
    if (auto small = smallGelu(x, approximate)) return *small;  // (the unboxed path: small_ops.h)
    return boxedFallbackCall(op, {x, std::string(approximate)});
  }
  return fusedActivationResult(*kind, x);
}

at::Tensor& gelu_(at::Tensor& x, c10::string_view approximate) {
  const auto kind = geluKind(approximate, false);
  static const c10::OperatorHandle op = handle("aten::gelu_");
  if (!kind || !fusedActivation(*kind, x)) {
    boxedFallbackCall(op, {x, std::string(approximate)});
    return x;
  }
  launchActivation(*kind, x, at::Tensor(), x);
  return x;
}

at::Tensor geluBackward(const at::Tensor& grad, const at::Tensor& x, c10::string_view approximate) {
  const auto kind = geluKind(approximate, true);
  static const c10::OperatorHandle op = handle("aten::gelu_backward");
  if (!kind || !fusedActivation(*kind, x, grad)) {
    if (auto small = smallGeluBackward(grad, x, approximate)) return *small;
    return boxedFallbackCall(op, {grad, x, std::string(approximate)});
  }
  return fusedActivationResult(*kind, x, grad);
}

at::Tensor sigmoidBackward(const at::Tensor& grad, const at::Tensor& y) {
  static const c10::OperatorHandle op = handle("aten::sigmoid_backward");
  if (!fusedActivation(Activation::kSigmoidBackward, y, grad)) return boxedFallbackCall(op, {grad, y});
  return fusedActivationResult(Activation::kSigmoidBackward, y, grad);
}

at::Tensor tanhBackward(const at::Tensor& grad, const at::Tensor& y) {
  static const c10::OperatorHandle op = handle("aten::tanh_backward");
  if (!fusedActivation(Activation::kTanhBackward, y, grad)) return boxedFallbackCall(op, {grad, y});
  return fusedActivationResult(Activation::kTanhBackward, y, grad);
}

// A number of an activation as CPU's bf16/fp16 kernels take it (float32),
// or nothing where it is not a real number (CPU's kernel raises: the boxed
// path).
std::optional<float> param(const c10::Scalar& s) {
  if (s.isComplex() || s.isBoolean()) return std::nullopt;
  return static_cast<float>(s.toDouble());
}

// The forward of a one-operand activation `kind` with the numbers `p`:
// functional (name) and in-place (name_) forms, through the boxed path
// where the loops do not take it.
template <Activation K>
at::Tensor forward(const c10::OperatorHandle& op, const at::Tensor& x, std::vector<c10::IValue> boxed,
                   ActivationParams p = {}) {
  if (!fusedActivation(K, x)) return boxedFallbackCall(op, std::move(boxed));
  return fusedActivationResult(K, x, at::Tensor(), p);
}

template <Activation K>
at::Tensor& forwardInplace(const c10::OperatorHandle& op, at::Tensor& x, std::vector<c10::IValue> boxed,
                           ActivationParams p = {}) {
  if (!fusedActivation(K, x)) {
    boxedFallbackCall(op, std::move(boxed));
    return x;
  }
  c10::DeviceGuard guard(x.device());
  launchActivation(K, x, at::Tensor(), x, p);
  return x;
}

template <Activation K>
at::Tensor backward(const c10::OperatorHandle& op, const at::Tensor& grad, const at::Tensor& x,
                    std::vector<c10::IValue> boxed, ActivationParams p = {}) {
  if (!fusedActivation(K, x, grad)) return boxedFallbackCall(op, std::move(boxed));
  return fusedActivationResult(K, x, grad, p);
}

at::Tensor hardswish(const at::Tensor& x) {
  static const c10::OperatorHandle op = handle("aten::hardswish");
  return forward<Activation::kHardswish>(op, x, {x});
}
at::Tensor& hardswish_(at::Tensor& x) {
  static const c10::OperatorHandle op = handle("aten::hardswish_");
  return forwardInplace<Activation::kHardswish>(op, x, {x});
}
at::Tensor hardswishBackward(const at::Tensor& grad, const at::Tensor& x) {
  static const c10::OperatorHandle op = handle("aten::hardswish_backward");
  return backward<Activation::kHardswishBackward>(op, grad, x, {grad, x});
}
at::Tensor hardsigmoid(const at::Tensor& x) {
  static const c10::OperatorHandle op = handle("aten::hardsigmoid");
  return forward<Activation::kHardsigmoid>(op, x, {x});
}
at::Tensor& hardsigmoid_(at::Tensor& x) {
  static const c10::OperatorHandle op = handle("aten::hardsigmoid_");
  return forwardInplace<Activation::kHardsigmoid>(op, x, {x});
}
at::Tensor hardsigmoidBackward(const at::Tensor& grad, const at::Tensor& x) {
  static const c10::OperatorHandle op = handle("aten::hardsigmoid_backward");
  return backward<Activation::kHardsigmoidBackward>(op, grad, x, {grad, x});
}

at::Tensor leakyRelu(const at::Tensor& x, const c10::Scalar& slope) {
  static const c10::OperatorHandle op = handle("aten::leaky_relu");
  const auto a = param(slope);
  if (!a) return boxedFallbackCall(op, {x, slope});
  return forward<Activation::kLeakyRelu>(op, x, {x, slope}, {*a});
}
at::Tensor& leakyRelu_(at::Tensor& x, const c10::Scalar& slope) {
  static const c10::OperatorHandle op = handle("aten::leaky_relu_");
  const auto a = param(slope);
  if (!a) {
    boxedFallbackCall(op, {x, slope});
    return x;
  }
  return forwardInplace<Activation::kLeakyRelu>(op, x, {x, slope}, {*a});
}
at::Tensor leakyReluBackward(const at::Tensor& grad, const at::Tensor& x, const c10::Scalar& slope, bool is_result) {
  static const c10::OperatorHandle op = handle("aten::leaky_relu_backward");
  const auto a = param(slope);
  // (the in-place forward's result with a negative slope: CPU's error, at the call)
  if (!a || (is_result && *a < 0)) return boxedFallbackCall(op, {grad, x, slope, is_result});
  return backward<Activation::kLeakyReluBackward>(op, grad, x, {grad, x, slope, is_result}, {*a});
}

// elu_backward: CPU's coefficients (negcoef = alpha * scale, poscoef =
// scale, negiptcoef = input_scale) in float32; with the forward's result
// (is_result: elu_'s) its other formula.
at::Tensor eluBackward(const at::Tensor& grad, const c10::Scalar& alpha, const c10::Scalar& scale,
                       const c10::Scalar& input_scale, bool is_result, const at::Tensor& x) {
  static const c10::OperatorHandle op = handle("aten::elu_backward");
  const auto a = param(alpha), s = param(scale), i = param(input_scale);
  std::vector<c10::IValue> boxed{grad, alpha, scale, input_scale, is_result, x};
  // (the in-place forward's result with a negative alpha: CPU's error, at the call)
  if (!a || !s || !i || (is_result && *a < 0)) return boxedFallbackCall(op, std::move(boxed));
  const ActivationParams p{*a * *s, *s, *i};
  return is_result ? backward<Activation::kEluResultBackward>(op, grad, x, std::move(boxed), p)
                   : backward<Activation::kEluBackward>(op, grad, x, std::move(boxed), p);
}

at::Tensor softplusBackward(const at::Tensor& grad, const at::Tensor& x, const c10::Scalar& beta,
                            const c10::Scalar& threshold) {
  static const c10::OperatorHandle op = handle("aten::softplus_backward");
  const auto b = param(beta), t = param(threshold);
  if (!b || !t) return boxedFallbackCall(op, {grad, x, beta, threshold});
  return backward<Activation::kSoftplusBackward>(op, grad, x, {grad, x, beta, threshold}, {*b, *t});
}

at::Tensor thresholdBackward(const at::Tensor& grad, const at::Tensor& x, const c10::Scalar& threshold) {
  static const c10::OperatorHandle op = handle("aten::threshold_backward");
  const auto a = param(threshold);
  if (!a) return boxedFallbackCall(op, {grad, x, threshold});
  return backward<Activation::kThresholdBackward>(op, grad, x, {grad, x, threshold}, {*a});
}

// hardtanh (relu6's) is CPU's clamp(x, min, max): the clamp loop
// (low_precision/arithmetic.h).
at::Tensor hardtanh(const at::Tensor& x, const c10::Scalar& lo, const c10::Scalar& hi) {
  static const c10::OperatorHandle op = handle("aten::hardtanh");
  if (!fusedClamp(x, lo, hi)) return boxedFallbackCall(op, {x, lo, hi});
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDeviceLike(x);
  launchClamp(x, lo, hi, out);
  return out;
}
at::Tensor& hardtanh_(at::Tensor& x, const c10::Scalar& lo, const c10::Scalar& hi) {
  static const c10::OperatorHandle op = handle("aten::hardtanh_");
  if (!fusedClamp(x, lo, hi)) {
    boxedFallbackCall(op, {x, lo, hi});
    return x;
  }
  c10::DeviceGuard guard(x.device());
  launchClamp(x, lo, hi, x);
  return x;
}
// The largest finite value of x's dtype (bf16 or fp16).
double largestOf(const at::Tensor& x) {
  return x.scalar_type() == at::kBFloat16 ? static_cast<double>(std::numeric_limits<c10::BFloat16>::max())
                                          : static_cast<double>(std::numeric_limits<c10::Half>::max());
}

// nan_to_num: the replacements in the dtype, as CPU's kernel casts them
// (none: 0, the dtype's largest and lowest).
std::optional<ActivationParams> nanToNumParams(const at::Tensor& x, std::optional<double> nan,
                                               std::optional<double> posinf, std::optional<double> neginf) {
  if (!x.defined() || !isLowPrecision(x.scalar_type())) return std::nullopt;
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const auto largest = static_cast<float>(largestOf(x));
  return ActivationParams{inDtype(nan.value_or(0.0), bf16), posinf ? inDtype(*posinf, bf16) : largest,
                          neginf ? inDtype(*neginf, bf16) : -largest};
}

at::Tensor nanToNum(const at::Tensor& x, std::optional<double> nan, std::optional<double> posinf,
                    std::optional<double> neginf) {
  static const c10::OperatorHandle op = handle("aten::nan_to_num");
  const auto p = nanToNumParams(x, nan, posinf, neginf);
  if (!p) return boxedFallbackCall(op, {x, nan, posinf, neginf});
  return forward<Activation::kNanToNum>(op, x, {x, nan, posinf, neginf}, *p);
}
at::Tensor& nanToNum_(at::Tensor& x, std::optional<double> nan, std::optional<double> posinf,
                      std::optional<double> neginf) {
  static const c10::OperatorHandle op = handle("aten::nan_to_num_");
  const auto p = nanToNumParams(x, nan, posinf, neginf);
  if (!p) {
    boxedFallbackCall(op, {x, nan, posinf, neginf});
    return x;
  }
  return forwardInplace<Activation::kNanToNum>(op, x, {x, nan, posinf, neginf}, *p);
}

// hardshrink and softshrink (and their backward): lambd as CPU's kernels
// take it, in float32 (softshrink) or in the dtype (hardshrink and the
// backward).
std::optional<float> lambdIn(const at::Tensor& x, const c10::Scalar& lambd, bool in_dtype) {
  const auto a = param(lambd);
  if (!a || !in_dtype || !x.defined() || !isLowPrecision(x.scalar_type())) return a;
  // a finite number beyond the dtype's largest: CPU's kernel raises
  // ("value cannot be converted ... without overflow"), through the fallback
  const double v = lambd.toDouble();
  if (std::isfinite(v) && std::abs(v) > largestOf(x)) return std::nullopt;
  return inDtype(v, x.scalar_type() == at::kBFloat16);
}

template <Activation K>
at::Tensor shrink(const at::Tensor& x, const c10::Scalar& lambd) {
  static const c10::OperatorHandle op = handle(K == Activation::kHardshrink ? "aten::hardshrink" : "aten::softshrink");
  const auto a = lambdIn(x, lambd, K == Activation::kHardshrink);
  // (the softshrink loop needs a finite lambd >= 0; CPU's kernel raises
  // outside [0, the dtype's largest])
  if (!a || (K == Activation::kSoftshrink && !(lambd.toDouble() >= 0 && lambd.toDouble() <= largestOf(x))))
    return boxedFallbackCall(op, {x, lambd});
  return forward<K>(op, x, {x, lambd}, {*a});
}
template <bool kHard>
at::Tensor shrinkBackward(const at::Tensor& grad, const at::Tensor& x, const c10::Scalar& lambd) {
  static const c10::OperatorHandle op = handle(kHard ? "aten::hardshrink_backward" : "aten::softshrink_backward");
  const auto a = lambdIn(x, lambd, true);
  if (!a) return boxedFallbackCall(op, {grad, x, lambd});
  return backward<Activation::kShrinkBackward>(op, grad, x, {grad, x, lambd}, {*a});
}

at::Tensor hardtanhBackward(const at::Tensor& grad, const at::Tensor& x, const c10::Scalar& lo, const c10::Scalar& hi) {
  static const c10::OperatorHandle op = handle("aten::hardtanh_backward");
  const auto a = param(lo), b = param(hi);
  if (!a || !b) return boxedFallbackCall(op, {grad, x, lo, hi});
  return backward<Activation::kHardtanhBackward>(op, grad, x, {grad, x, lo, hi}, {*a, *b});
}

}  // namespace

bool fusedActivation(Activation kind, const at::Tensor& x, const at::Tensor& grad) {
  return loopsTake(x, grad, /*onednn=*/kind == Activation::kGelu || kind == Activation::kGeluBackward);
}

void launchActivation(Activation kind, const at::Tensor& x, const at::Tensor& grad, const at::Tensor& out,
                      ActivationParams p) {
  static const char* const kNames[] = {"aten::gelu",          "aten::gelu",          "aten::silu",
                                       "aten::sigmoid",       "aten::gelu_backward", "aten::gelu_backward",
                                       "aten::sigmoid_backward", "aten::tanh_backward", "aten::glu", "aten::atan2", "aten::pow", "aten::xlogy", "aten::pow",
                                       "aten::relu", "aten::log", "aten::reciprocal", "aten::hardswish",
                                       "aten::hardsigmoid", "aten::leaky_relu", "aten::hardswish_backward",
                                       "aten::hardsigmoid_backward", "aten::leaky_relu_backward",
                                       "aten::threshold_backward", "aten::hardtanh_backward", "aten::floor",
                                       "aten::ceil", "aten::round", "aten::trunc", "aten::frac", "aten::sign",
                                       "aten::maximum", "aten::minimum", "aten::hypot", "aten::nan_to_num", "aten::hardshrink",
                                       "aten::softshrink", "aten::softshrink_backward", "aten::elu_backward",
                                       "aten::elu_backward", "aten::softplus_backward", "aten::native_group_norm",
                                       "aten::native_group_norm_backward"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Activation::kNumActivations),
                "a task name for each kind");
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  const auto* gp = grad.defined() ? static_cast<const uint16_t*>(grad.data_ptr()) : nullptr;
  auto* op = static_cast<uint16_t*>(out.data_ptr());
  const int64_t n = x.numel();
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(x.device().index(), kNames[static_cast<int>(kind)], [=] {
    // transcendental work: an element counts as kDenseWorkScale / 4 (a
    // square's as one: it is memory-bound)
    const bool memory_bound = kind >= Activation::kSquare && kind != Activation::kLog;
    const int64_t work = memory_bound ? n : n * (kDenseWorkScale / 4);
    useKernelThreads(work);
    forEachThread(n, [&](int64_t begin, int64_t end) {
      activationLoop(kind, bf16, xp + begin, gp ? gp + begin : nullptr, op + begin, end - begin, p);
    });
  });
}

at::Tensor fusedActivationResult(Activation kind, const at::Tensor& x, const at::Tensor& grad, ActivationParams p) {
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDeviceLike(x);
  launchActivation(kind, x, grad, out, p);
  return out;
}

int64_t fusedActivationCalls() { return g_calls.load(); }

namespace {

// glu(x, dim) = a * sigmoid(b), a and b x's halves along dim: rows of the
// dims before dim, each row's a and b runs of h elements (the halves times
// the dims after dim), the kGlu loop over each row's runs, ranges of the
// result's elements on the threads. An odd or absent dim: CPU's kernel
// (which raises).
at::Tensor glu(const at::Tensor& x, int64_t dim) {
  static const c10::OperatorHandle op = handle("aten::glu");
  if (x.dim() == 0 || !fusedActivation(Activation::kGlu, x)) return boxedFallbackCall(op, {x, dim});
  const int64_t d = c10::maybe_wrap_dim(dim, x.dim());
  if (x.size(d) % 2 != 0) return boxedFallbackCall(op, {x, dim});
  c10::DeviceGuard guard(x.device());
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes[d] /= 2;
  at::Tensor out = emptyDevice(sizes, x.scalar_type());
  const int64_t h = out.numel() / c10::multiply_integers(x.sizes().begin(), x.sizes().begin() + d);
  const int64_t n = out.numel();
  if (n == 0) return out;
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  auto* yp = static_cast<uint16_t*>(out.data_ptr());
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  launchOnCurrentStream(x.device().index(), "aten::glu", [=] {
    useKernelThreads(n * (kDenseWorkScale / 4));
    forEachThread(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end;) {  // (output element i: row i / h, offset i % h)
        const int64_t row = i / h, at = i % h, len = std::min(end - i, h - at);
        const uint16_t* a = xp + row * 2 * h + at;
        activationLoop(Activation::kGlu, bf16, a + h, a, yp + i, len, {});
        i += len;
      }
    });
  });
  return out;
}

}  // namespace

const std::unordered_set<std::string>& activationOps() {
  static const std::unordered_set<std::string> ops = {
      "gelu",        "gelu_",        "gelu_backward",        "sigmoid_backward",    "tanh_backward",
      "hardswish",   "hardswish_",   "hardswish_backward",   "hardsigmoid",         "hardsigmoid_",
      "hardsigmoid_backward", "leaky_relu", "leaky_relu_",   "leaky_relu_backward", "threshold_backward",
      "hardtanh",    "hardtanh_",    "hardtanh_backward", "nan_to_num", "nan_to_num_", "hardshrink",
      "softshrink",  "softshrink_backward", "hardshrink_backward", "elu_backward", "softplus_backward", "glu"};
  return ops;
}

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("gelu", &gelu);
  m.impl("gelu_", &gelu_);
  m.impl("gelu_backward", &geluBackward);
  m.impl("sigmoid_backward", &sigmoidBackward);
  m.impl("tanh_backward", &tanhBackward);
  m.impl("glu", &glu);
  m.impl("hardswish", &hardswish);
  m.impl("hardswish_", &hardswish_);
  m.impl("hardswish_backward", &hardswishBackward);
  m.impl("hardsigmoid", &hardsigmoid);
  m.impl("hardsigmoid_", &hardsigmoid_);
  m.impl("hardsigmoid_backward", &hardsigmoidBackward);
  m.impl("leaky_relu", &leakyRelu);
  m.impl("leaky_relu_", &leakyRelu_);
  m.impl("leaky_relu_backward", &leakyReluBackward);
  m.impl("threshold_backward", &thresholdBackward);
  m.impl("elu_backward", &eluBackward);
  m.impl("softplus_backward", &softplusBackward);
  m.impl("hardtanh", &hardtanh);
  m.impl("hardtanh_", &hardtanh_);
  m.impl("hardtanh_backward", &hardtanhBackward);
  m.impl("nan_to_num", &nanToNum);
  m.impl("nan_to_num_", &nanToNum_);
  m.impl("hardshrink", &shrink<Activation::kHardshrink>);
  m.impl("softshrink", &shrink<Activation::kSoftshrink>);
  m.impl("softshrink_backward", &shrinkBackward<false>);
  m.impl("hardshrink_backward", &shrinkBackward<true>);
}

}  // namespace openmtia
