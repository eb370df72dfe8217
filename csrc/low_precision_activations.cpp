// The fused bf16/fp16 activation kernels (see low_precision_activations.h).
#include "low_precision_activations.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/EmptyTensor.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

#include <immintrin.h>

#include <atomic>
#include <cstring>
#include <string>
#include <unordered_set>

#include "common.h"
#include "low_precision.h"

namespace openmtia {
namespace {

// ------------------------------------------------ float32 math, 8 lanes
// AVX2 + FMA + F16C (every x86-64 CPU since 2013; fusedActivation() checks):
// the code below is compiled for them, written with GCC's vector extensions
// and, for the conversions, the intrinsics.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));

#define OMTIA_INLINE inline __attribute__((always_inline))

OMTIA_INLINE v8f splat(float f) { return v8f{f, f, f, f, f, f, f, f}; }
OMTIA_INLINE v8f select(v8i mask, v8f a, v8f b) { return mask ? a : b; }

// exp(x) to 1-2 float32 ulps (oneDNN's method): x clamped to [-87.3, 88.7]
// (max and min keep a NaN, which then stays NaN), x = n ln2 + r with
// |r| <= ln2/2, exp(r) by a degree-5 polynomial, times 2^(n-1) times 2, so
// that 88.7 overflows to inf as IEEE arithmetic does. Below the range the
// result is exp(-87.3) = 1.2e-38 instead of less: what it feeds (1 + e,
// w e in gelu) rounds the same in bf16/fp16, and an infinite argument still
// gives CPU's results (sigmoid(-inf) = 0, silu(-inf) = NaN, gelu(-inf) = NaN).
OMTIA_INLINE v8f vexp(v8f x) {
  const v8f c = (v8f)_mm256_min_ps(_mm256_set1_ps(88.72283935546875f),
                                   _mm256_max_ps(_mm256_set1_ps(-87.33654022216797f), (__m256)x));
  const v8f magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const v8f t = c * splat(1.44269504088896341f) + magic;
  const v8f n = t - magic;
  const v8i ni = (v8i)t - (v8i)magic;
  const v8f r = c - n * splat(0.693147182464599609375f);
  v8f p = splat(8.28929059207439422607e-3f);  // oneDNN's coefficients (exp on [-ln2/2, ln2/2])
  p = p * r + splat(4.18978221714496612549e-2f);
  p = p * r + splat(1.66676521301269531250e-1f);
  p = p * r + splat(4.99998450279235839844e-1f);
  p = p * r + splat(9.99999701976776123047e-1f);
  p = p * r + splat(1.0f);
  return p * (v8f)((ni + 126) << 23) * splat(2.0f);
}

OMTIA_INLINE v8f vsigmoid(v8f x) { return splat(1.0f) / (splat(1.0f) + vexp(-x)); }

// 1 + erf(z) as CDF form: erfc(|z|) = t P(t) exp(-z^2), t = 1 / (1 + p|z|)
// (Abramowitz-Stegun 7.1.26, |error of erf| <= 1.5e-7, as oneDNN's gelu);
// 1 + erf(z) = 2 - erfc(z) for z >= 0, erfc(-z) for z < 0 (no cancellation
// for negative z). `e` = exp(-z^2), which the backward shares.
OMTIA_INLINE v8f onePlusErf(v8f z, v8f e) {
  const v8f az = (v8f)_mm256_andnot_ps(_mm256_set1_ps(-0.0f), (__m256)z);
  const v8f t = splat(1.0f) / (splat(1.0f) + splat(0.3275911f) * az);
  v8f p = splat(1.061405429f);
  p = p * t + splat(-1.453152027f);
  p = p * t + splat(1.421413741f);
  p = p * t + splat(-0.284496736f);
  p = p * t + splat(0.254829592f);
  const v8f w = p * t * e;
  return select(z < splat(0.0f), w, splat(2.0f) - w);
}

constexpr float kSqrtHalf = 0.70710678118654752440f;  // M_SQRT1_2
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1 / sqrt(2 pi)
constexpr float kTanhBeta = 0.79788456080286535588f;  // sqrt(2 / pi)
constexpr float kTanhKappa = 0.044715f;

// gelu(x) = x/2 (1 + erf(x / sqrt 2)); tanh form: x/2 (1 + tanh(u)) =
// x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3). Backward: ATen's formulas
// (GeluKernel.cpp, Activation.cpp) with 1 + tanh(u) = 2 s, 1 - tanh(u)^2 =
// 4 s (1 - s), s = sigmoid(2u).
template <Activation K>
OMTIA_INLINE v8f activation(v8f x, v8f g) {
  if constexpr (K == Activation::kGelu || K == Activation::kGeluBackward) {
    const v8f z = x * splat(kSqrtHalf);
    const v8f e = vexp(-(z * z));
    const v8f cdf2 = onePlusErf(z, e);  // 2 cdf(x)
    if constexpr (K == Activation::kGelu) return splat(0.5f) * x * cdf2;
    else return g * (splat(0.5f) * cdf2 + x * splat(kInvSqrt2Pi) * e);
  } else if constexpr (K == Activation::kGeluTanh || K == Activation::kGeluTanhBackward) {
    const v8f x2 = x * x;
    const v8f u = splat(kTanhBeta) * (x + splat(kTanhKappa) * x2 * x);
    const v8f s = vsigmoid(splat(2.0f) * u);
    if constexpr (K == Activation::kGeluTanh) return x * s;
    else {
      const v8f right = splat(2.0f) * x * s * (splat(1.0f) - s) * splat(kTanhBeta) *
                        (splat(1.0f) + splat(3.0f * kTanhKappa) * x2);
      return g * (s + right);
    }
  } else if constexpr (K == Activation::kSilu) {
    return x / (splat(1.0f) + vexp(-x));
  } else if constexpr (K == Activation::kSigmoid) {
    return vsigmoid(x);
  } else {  // kSigmoidBackward: x is the forward's result
    return g * (splat(1.0f) - x) * x;
  }
}

// ------------------------------------------- bf16 / fp16 <-> float32
template <bool BF16>
OMTIA_INLINE v8f load(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (BF16) return (v8f)_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
  else return (v8f)_mm256_cvtph_ps(h);
}

// Rounded to nearest even (bf16: c10::BFloat16's rounding). A NaN stays NaN:
// the NaNs the math makes (the default one, or an input's bf16/fp16 payload)
// have no bits below bit 16, so the rounding increment never carries.
template <bool BF16>
OMTIA_INLINE void store(uint16_t* p, v8f f) {
  __m128i h;
  if constexpr (BF16) {
    const v8u u = (v8u)f;
    const v8u r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const __m256i w = (__m256i)r;
    h = _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
  } else {
    h = _mm256_cvtps_ph((__m256)f, _MM_FROUND_TO_NEAREST_INT);
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
}

// 16 elements as two vectors. bf16 takes them in 128-bit-lane order (a:
// elements 0-3 and 8-11, b: 4-7 and 12-15): a bf16 is the high half of its
// float32, so interleaving zeros widens it, and packing narrows it back in
// place; the elementwise math does not mind the order.
template <bool BF16>
OMTIA_INLINE void load2(const uint16_t* p, v8f& a, v8f& b) {
  if constexpr (BF16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    a = (v8f)_mm256_unpacklo_epi16(_mm256_setzero_si256(), h);
    b = (v8f)_mm256_unpackhi_epi16(_mm256_setzero_si256(), h);
  } else {
    a = load<BF16>(p);
    b = load<BF16>(p + 8);
  }
}

template <bool BF16>
OMTIA_INLINE void store2(uint16_t* p, v8f a, v8f b) {
  if constexpr (BF16) {
    const v8u ua = (v8u)a, ub = (v8u)b;
    const v8u ra = (ua + 0x7fffu + ((ua >> 16) & 1u)) >> 16, rb = (ub + 0x7fffu + ((ub >> 16) & 1u)) >> 16;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_packus_epi32((__m256i)ra, (__m256i)rb));
  } else {
    store<BF16>(p, a);
    store<BF16>(p + 8, b);
  }
}

template <Activation K, bool BF16>
OMTIA_INLINE void loop(const uint16_t* x, const uint16_t* g, uint16_t* out, int64_t n) {
  constexpr bool backward = K >= Activation::kGeluBackward;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // two independent vectors per step: the out-of-order core overlaps them
    v8f xa, xb, ga{}, gb{};
    load2<BF16>(x + i, xa, xb);
    if (backward) load2<BF16>(g + i, ga, gb);
    store2<BF16>(out + i, activation<K>(xa, ga), activation<K>(xb, gb));
  }
  for (; i + 8 <= n; i += 8)
    store<BF16>(out + i, activation<K>(load<BF16>(x + i), backward ? load<BF16>(g + i) : v8f{}));
  if (i < n) {  // the tail, through a padded block
    uint16_t xb[8] = {}, gb[8] = {}, ob[8];
    std::memcpy(xb, x + i, (n - i) * sizeof(uint16_t));
    if (backward) std::memcpy(gb, g + i, (n - i) * sizeof(uint16_t));
    store<BF16>(ob, activation<K>(load<BF16>(xb), load<BF16>(gb)));
    std::memcpy(out + i, ob, (n - i) * sizeof(uint16_t));
  }
}

template <bool BF16>
OMTIA_INLINE void dispatch(Activation kind, const uint16_t* x, const uint16_t* g, uint16_t* out, int64_t n) {
  switch (kind) {
    case Activation::kGelu: return loop<Activation::kGelu, BF16>(x, g, out, n);
    case Activation::kGeluTanh: return loop<Activation::kGeluTanh, BF16>(x, g, out, n);
    case Activation::kSilu: return loop<Activation::kSilu, BF16>(x, g, out, n);
    case Activation::kSigmoid: return loop<Activation::kSigmoid, BF16>(x, g, out, n);
    case Activation::kGeluBackward: return loop<Activation::kGeluBackward, BF16>(x, g, out, n);
    case Activation::kGeluTanhBackward: return loop<Activation::kGeluTanhBackward, BF16>(x, g, out, n);
    case Activation::kSigmoidBackward: return loop<Activation::kSigmoidBackward, BF16>(x, g, out, n);
  }
}

void run(Activation kind, bool bf16, const uint16_t* x,
                                                                     const uint16_t* g, uint16_t* out, int64_t n) {
  if (bf16) dispatch<true>(kind, x, g, out, n);
  else dispatch<false>(kind, x, g, out, n);
}

#pragma GCC pop_options

bool hostHasIsa() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
}

std::atomic<int64_t> g_calls{0};

// ------------------------------------------------------- the ATen side
bool lowPrecision(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

bool plain(const at::Tensor& t) {
  return t.defined() && t.device().type() == kMTIA && lowPrecision(t.scalar_type()) && t.numel() > 0 &&
         t.is_contiguous() && !t.is_neg() && !t.is_conj();
}

std::optional<Activation> geluKind(c10::string_view approximate, bool backward) {
  if (approximate == "none") return backward ? Activation::kGeluBackward : Activation::kGelu;
  if (approximate == "tanh") return backward ? Activation::kGeluTanhBackward : Activation::kGeluTanh;
  return std::nullopt;  // CPU's kernel raises, through the fallback
}

at::Tensor boxed(const char* name, std::vector<c10::IValue> args) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  torch::jit::Stack stack(std::move(args));
  boxedFallback(op, &stack);
  return stack.back().toTensor();
}

at::Tensor emptyLike(const at::Tensor& a) {
  return at::detail::empty_generic(a.sizes(), deviceAllocator(), c10::DispatchKeySet(c10::DispatchKey::MTIA),
                                   a.scalar_type(), std::nullopt);
}

at::Tensor fused(Activation kind, const at::Tensor& x, const at::Tensor& grad = at::Tensor()) {
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyLike(x);
  launchActivation(kind, x, grad, out);
  return out;
}

at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
  const auto kind = geluKind(approximate, false);
  if (!kind || !fusedActivation(x)) return boxed("aten::gelu", {x, std::string(approximate)});
  return fused(*kind, x);
}

at::Tensor& gelu_(at::Tensor& x, c10::string_view approximate) {
  const auto kind = geluKind(approximate, false);
  if (!kind || !fusedActivation(x)) {
    boxed("aten::gelu_", {x, std::string(approximate)});
    return x;
  }
  launchActivation(*kind, x, at::Tensor(), x);
  return x;
}

at::Tensor geluBackward(const at::Tensor& grad, const at::Tensor& x, c10::string_view approximate) {
  const auto kind = geluKind(approximate, true);
  if (!kind || !fusedActivation(x, grad)) return boxed("aten::gelu_backward", {grad, x, std::string(approximate)});
  return fused(*kind, x, grad);
}

at::Tensor sigmoidBackward(const at::Tensor& grad, const at::Tensor& y) {
  if (!fusedActivation(y, grad)) return boxed("aten::sigmoid_backward", {grad, y});
  return fused(Activation::kSigmoidBackward, y, grad);
}

}  // namespace

bool fusedActivation(const at::Tensor& x, const at::Tensor& grad) {
  if (!hostHasIsa() || !plain(x)) return false;
  if (grad.defined() && (!plain(grad) || grad.scalar_type() != x.scalar_type() ||
                         grad.device() != x.device() || !grad.sizes().equals(x.sizes())))
    return false;
  return activationPath(x.scalar_type()) == LowPrecisionPath::kFloat32 && !isCapturing(x.device().index());
}

void launchActivation(Activation kind, const at::Tensor& x, const at::Tensor& grad, const at::Tensor& out) {
  static const char* const kNames[] = {"aten::gelu",          "aten::gelu",          "aten::silu",
                                       "aten::sigmoid",       "aten::gelu_backward", "aten::gelu_backward",
                                       "aten::sigmoid_backward"};
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  const auto* gp = grad.defined() ? static_cast<const uint16_t*>(grad.data_ptr()) : nullptr;
  auto* op = static_cast<uint16_t*>(out.data_ptr());
  const int64_t n = x.numel();
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(x.device().index(), kNames[static_cast<int>(kind)], [=] {
    // transcendental work: an element counts as kDenseWorkScale / 4
    const int64_t work = n * (kDenseWorkScale / 4);
    useKernelThreads(work);
    if (work < kParallelWork) return run(kind, bf16, xp, gp, op, n);
    // In parallel through ATen's OpenMP team (at::parallel_for is inline,
    // and this file is not built with OpenMP): a TensorIterator's for_each
    // over the 1-D operands hands out contiguous ranges.
    const auto opts = at::TensorOptions().dtype(bf16 ? at::kBFloat16 : at::kHalf);
    const at::Tensor ho = at::from_blob(op, {n}, opts), hx = at::from_blob(const_cast<uint16_t*>(xp), {n}, opts);
    at::TensorIteratorConfig config;
    config.add_output(ho).add_const_input(hx);
    const at::Tensor hg = gp ? at::from_blob(const_cast<uint16_t*>(gp), {n}, opts) : at::Tensor();
    if (gp) config.add_const_input(hg);
    at::TensorIterator iter = config.resize_outputs(false).build();
    iter.for_each(
        [&](char** data, const int64_t*, int64_t size) {
          run(kind, bf16, reinterpret_cast<const uint16_t*>(data[1]),
              gp ? reinterpret_cast<const uint16_t*>(data[2]) : nullptr, reinterpret_cast<uint16_t*>(data[0]), size);
        },
        4096);
  });
}

int64_t fusedActivationCalls() { return g_calls.load(); }

const std::unordered_set<std::string>& activationOps() {
  static const std::unordered_set<std::string> ops = {"gelu", "gelu_", "gelu_backward", "sigmoid_backward"};
  return ops;
}

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("gelu", &gelu);
  m.impl("gelu_", &gelu_);
  m.impl("gelu_backward", &geluBackward);
  m.impl("sigmoid_backward", &sigmoidBackward);
}

}  // namespace openmtia
