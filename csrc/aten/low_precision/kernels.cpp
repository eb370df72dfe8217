// The bf16/fp16 vector loops, once per instruction set (see
// low_precision/kernels.h).
#include "aten/low_precision/kernels.h"

#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <ATen/Version.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "aten/threads/kernel_threads.h"
#include "runtime/errors.h"
#include "runtime/graphs.h"
#include "aten/low_precision/low_precision.h"

namespace openmtia {
namespace {

// ------------------------------------------- the loops, once per ISA
// (low_precision/kernels.inc: the same source at 8 and 16 lanes)
namespace avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define OMTIA_LANES 8
#include "aten/low_precision/kernels.inc"
#undef OMTIA_LANES
#pragma GCC pop_options
}  // namespace avx2

namespace avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#define OMTIA_LANES 16
#include "aten/low_precision/kernels.inc"
#undef OMTIA_LANES
#pragma GCC pop_options
}  // namespace avx512

// What the host can run: AVX-512 F and BW, else AVX2 + FMA + F16C, else
// neither (CPU's kernels then).
KernelIsa hostIsa() {
  static const KernelIsa isa = [] {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c"))
      return KernelIsa::kNone;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return KernelIsa::kAvx512;
    return KernelIsa::kAvx2;
  }();
  return isa;
}

// The loops' ISA: 16 lanes where the host has them and ATen's own kernels
// use AVX-512 (ATEN_CPU_CAPABILITY=avx2 makes a host like an AVX2 one).
std::atomic<KernelIsa>& isa() {
  static std::atomic<KernelIsa> i{[] {
    const bool aten512 = at::get_cpu_capability().rfind("AVX512", 0) == 0;
    if (hostIsa() == KernelIsa::kAvx512 && !aten512) return KernelIsa::kAvx2;
    return hostIsa();
  }()};
  return i;
}

bool wide() { return isa().load(std::memory_order_relaxed) == KernelIsa::kAvx512; }

}  // namespace

KernelIsa kernelIsa() { return isa().load(); }

void setKernelIsa(KernelIsa want) {
  TORCH_CHECK(want <= hostIsa(), "this host cannot run the ", want == KernelIsa::kAvx512 ? "AVX-512" : "AVX2",
              " kernels");
  isa() = want;
}

namespace {

std::atomic<int64_t>& loopMin() {
  static std::atomic<int64_t> v{[]() -> int64_t {
    const char* s = std::getenv("OPENMTIA_LOOP_MIN_ELEMENTS");
    if (!s || !*s) return at::internal::GRAIN_SIZE;
    char* end = nullptr;
    const long long n = std::strtoll(s, &end, 10);
    if (*end || n < 0) {
      TORCH_WARN("ignoring OPENMTIA_LOOP_MIN_ELEMENTS='", s, "' (a number of elements >= 0)");
      return at::internal::GRAIN_SIZE;
    }
    return n;
  }()};
  return v;
}

}  // namespace

int64_t loopMinElements() { return loopMin().load(); }

void setLoopMinElements(int64_t n) {
  TORCH_CHECK(n >= 0, "the loops' minimum must be >= 0, not ", n);
  loopMin() = n;
}

bool loopOperand(const at::Tensor& t) {
  return t.defined() && t.device().type() == kMTIA && isLowPrecision(t.scalar_type()) && t.numel() > 0 &&
         t.numel() > loopMin().load(std::memory_order_relaxed) && t.is_contiguous() && !t.is_neg() && !t.is_conj();
}

int64_t leadingDims(const at::Tensor& x, at::IntArrayRef dim) {
  const int64_t ndim = x.dim();
  const auto k = static_cast<int64_t>(dim.size());
  if (k < 1 || k >= ndim) return -1;
  std::vector<bool> seen(ndim, false);
  for (int64_t d : dim) {
    if (d < -ndim || d >= ndim) return -1;
    const int64_t i = d < 0 ? d + ndim : d;
    if (seen[i] || i >= k) return -1;
    seen[i] = true;
  }
  return k;
}

bool loopsTake(const at::Tensor& a, const at::Tensor& b, bool onednn) {
  if (kernelIsa() == KernelIsa::kNone || !loopOperand(a)) return false;
  if (b.defined() && (!loopOperand(b) || b.scalar_type() != a.scalar_type() || b.device() != a.device() ||
                      !b.sizes().equals(a.sizes())))
    return false;
  return activationPath(a.scalar_type(), onednn) == LowPrecisionPath::kFloat32 && !isCapturing(a.device().index());
}

int64_t trailingDims(const at::Tensor& x, at::IntArrayRef dim) {
  const int64_t ndim = x.dim();
  if (dim.empty()) return ndim;
  const auto k = static_cast<int64_t>(dim.size());
  if (k > ndim) return -1;
  std::vector<bool> seen(ndim, false);
  for (int64_t d : dim) {
    if (d < -ndim || d >= ndim) return -1;
    const int64_t i = d < 0 ? d + ndim : d;
    if (seen[i] || i < ndim - k) return -1;
    seen[i] = true;
  }
  return k;
}

float inDtype(double v, bool bf16) {
  const auto f = static_cast<float>(v);
  return bf16 ? static_cast<float>(c10::BFloat16(f)) : static_cast<float>(c10::Half(f));
}

void activationLoop(Activation kind, bool bf16, const uint16_t* x, const uint16_t* g, uint16_t* out, int64_t n,
                    ActivationParams p) {
  if (wide()) avx512::run(kind, bf16, x, g, out, n, p);
  else avx2::run(kind, bf16, x, g, out, n, p);
}

void widenLoop(bool bf16, const uint16_t* x, float* out, int64_t n) {
  if (wide()) avx512::widen(bf16, x, out, n);
  else avx2::widen(bf16, x, out, n);
}

void accumulateLoop(bool bf16, const uint16_t* x, float* acc, int64_t n) {
  if (wide()) avx512::accumulate(bf16, x, acc, n);
  else avx2::accumulate(bf16, x, acc, n);
}

int64_t scatterAddLoop(bool bf16, uint16_t* self, const uint16_t* src, const int64_t* index, int64_t rows, int64_t n,
                       int64_t m, float* scratch) {
  return wide() ? avx512::scatterAddRows(bf16, self, src, index, rows, n, m, scratch)
                : avx2::scatterAddRows(bf16, self, src, index, rows, n, m, scratch);
}

void narrowLoop(bool bf16, const float* x, uint16_t* out, int64_t n) {
  if (wide()) avx512::narrow(bf16, x, out, n);
  else avx2::narrow(bf16, x, out, n);
}

bool sameDenseLayout(const at::Tensor& a, const at::Tensor& b) {
  if (!a.sizes().equals(b.sizes()) || !a.is_non_overlapping_and_dense() || !b.is_non_overlapping_and_dense())
    return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

bool convertLowPrecision(const at::Tensor& dst, const at::Tensor& src, bool threads) {
  if (kernelIsa() == KernelIsa::kNone || !sameDenseLayout(dst, src)) return false;
  const int64_t n = src.numel();
  const bool to_float = dst.scalar_type() == at::kFloat && isLowPrecision(src.scalar_type());
  if (!to_float && !(src.scalar_type() == at::kFloat && isLowPrecision(dst.scalar_type()))) return false;
  const bool bf16 = (to_float ? src : dst).scalar_type() == at::kBFloat16;
  const void* x = src.data_ptr();
  void* out = dst.data_ptr();
  auto range = [&](int64_t begin, int64_t end) {
    if (to_float) widenLoop(bf16, static_cast<const uint16_t*>(x) + begin, static_cast<float*>(out) + begin, end - begin);
    else narrowLoop(bf16, static_cast<const float*>(x) + begin, static_cast<uint16_t*>(out) + begin, end - begin);
  };
  if (threads) forEachThread(n, range);
  else range(0, n);
  return true;
}

float widenedOne(bool bf16, uint16_t bits) {
  return bf16 ? static_cast<float>(c10::BFloat16(bits, c10::BFloat16::from_bits()))
              : static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

uint16_t roundedOne(bool bf16, float v) { return bf16 ? c10::BFloat16(v).x : c10::Half(v).x; }

double sumOverThreads(int64_t n, const std::function<double(int64_t, int64_t)>& f) {
  const int64_t threads = at::get_num_threads();
  std::vector<double> part(threads);
  forEachThread(threads, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) part[t] = f(n * t / threads, n * (t + 1) / threads);
  });
  double total = 0;
  for (double p : part) total += p;
  return total;
}

void convertOrCopy(const at::Tensor& dst, const at::Tensor& src, bool threads) {
  if (!convertLowPrecision(dst, src, threads)) dst.copy_(src);
}

void arithmeticLoop(Arithmetic kind, bool bf16, const uint16_t* x, const uint16_t* y, float s, float alpha,
                    uint16_t* out, int64_t n) {
  if (wide()) avx512::arithmetic(kind, bf16, x, y, s, alpha, out, n);
  else avx2::arithmetic(kind, bf16, x, y, s, alpha, out, n);
}

void ternaryLoop(Ternary kind, bool bf16, const uint16_t* self, const uint16_t* t1, const uint16_t* t2, float value,
                 uint16_t* out, int64_t n) {
  if (wide()) avx512::ternary(kind, bf16, self, t1, t2, value, out, n);
  else avx2::ternary(kind, bf16, self, t1, t2, value, out, n);
}

void compareLoop(Comparison kind, bool bf16, const uint16_t* x, const uint16_t* y, float s, bool* out, int64_t n) {
  if (wide()) avx512::compare(kind, bf16, x, y, s, out, n);
  else avx2::compare(kind, bf16, x, y, s, out, n);
}

double sumLoop(bool bf16, const uint16_t* x, int64_t n, bool squares) {
  return wide() ? avx512::sum(bf16, squares, x, n) : avx2::sum(bf16, squares, x, n);
}

double dotLoop(bool bf16, const uint16_t* a, const uint16_t* b, int64_t n) {
  return wide() ? avx512::dot(bf16, a, b, n) : avx2::dot(bf16, a, b, n);
}

double deviationsLoop(bool bf16, const uint16_t* x, float mean, int64_t n) {
  return wide() ? avx512::deviations(bf16, x, mean, n) : avx2::deviations(bf16, x, mean, n);
}

double lossLoop(Loss kind, bool bf16, const uint16_t* x, const uint16_t* y, float beta, int64_t n) {
  return wide() ? avx512::loss(kind, bf16, x, y, beta, n) : avx2::loss(kind, bf16, x, y, beta, n);
}

double nanSumLoop(bool bf16, const uint16_t* x, int64_t n) {
  return wide() ? avx512::nanSum(bf16, x, n) : avx2::nanSum(bf16, x, n);
}

float extremumLoop(bool bf16, bool max, const uint16_t* x, int64_t n) {
  return wide() ? avx512::extremum(bf16, max, x, n) : avx2::extremum(bf16, max, x, n);
}

void layerNormLoop(bool bf16, const uint16_t* x, const float* w, const float* b, double eps, uint16_t* y, int64_t n,
                   float* scratch, float* mean, float* rstd) {
  if (wide()) avx512::layerNorm(bf16, x, w, b, eps, y, n, scratch, mean, rstd);
  else avx2::layerNorm(bf16, x, w, b, eps, y, n, scratch, mean, rstd);
}

void columnsLoop(bool bf16, int kind, const uint16_t* x, int64_t rows, int64_t cols, int64_t c0, int64_t c1, float* out,
                 float* scratch) {
  if (wide()) avx512::columns(bf16, kind, x, rows, cols, c0, c1, out, scratch);
  else avx2::columns(bf16, kind, x, rows, cols, c0, c1, out, scratch);
}

void cumExtremumLoop(bool bf16, bool max, const uint16_t* x, uint16_t* values, int64_t* indices, int64_t rows,
                     int64_t n) {
  if (wide()) avx512::cumExtremumRows(bf16, max, x, values, indices, rows, n);
  else avx2::cumExtremumRows(bf16, max, x, values, indices, rows, n);
}

void prodLoop(bool bf16, const uint16_t* x, int64_t rows, int64_t n, float* out) {
  if (wide()) avx512::prodRows(bf16, x, rows, n, out);
  else avx2::prodRows(bf16, x, rows, n, out);
}

void cumulativeLoop(bool bf16, bool prod, const uint16_t* x, uint16_t* out, int64_t rows, int64_t n, float* scratch) {
  if (wide()) avx512::cumulative(bf16, prod, x, out, rows, n, scratch);
  else avx2::cumulative(bf16, prod, x, out, rows, n, scratch);
}

void rmsNormLoop(bool bf16, const uint16_t* x, const float* w, float eps, uint16_t* y, int64_t n, float* scratch,
                 float* rstd) {
  if (wide()) avx512::rmsNorm(bf16, x, w, eps, y, n, scratch, rstd);
  else avx2::rmsNorm(bf16, x, w, eps, y, n, scratch, rstd);
}

void rmsNormBackwardLoop(bool bf16, const uint16_t* dy, const uint16_t* x, const float* w, float rstd, int64_t n,
                         float* scratch, uint16_t* dx, float* dw) {
  if (wide()) avx512::rmsNormBackward(bf16, dy, x, w, rstd, n, scratch, dx, dw);
  else avx2::rmsNormBackward(bf16, dy, x, w, rstd, n, scratch, dx, dw);
}

void layerNormBackwardLoop(bool bf16, const uint16_t* dy, const uint16_t* x, const float* w, float mean, float rstd,
                           int64_t n, float* scratch, uint16_t* dx, float* dw, float* db) {
  if (wide()) avx512::layerNormBackward(bf16, dy, x, w, mean, rstd, n, scratch, dx, dw, db);
  else avx2::layerNormBackward(bf16, dy, x, w, mean, rstd, n, scratch, dx, dw, db);
}

void softmaxLoop(bool bf16, bool log, const uint16_t* x, uint16_t* out, int64_t n, float* scratch) {
  if (wide()) avx512::softmax(bf16, log, x, out, n, scratch);
  else avx2::softmax(bf16, log, x, out, n, scratch);
}

void softmaxBackwardLoop(bool bf16, bool log, const uint16_t* g, const uint16_t* y, uint16_t* out, int64_t n) {
  if (wide()) avx512::softmaxBackward(bf16, log, g, y, out, n);
  else avx2::softmaxBackward(bf16, log, g, y, out, n);
}

namespace {

// The winner so far of an argmax/argmin over parts taken in order: a later
// part's winner replaces it only if strictly better or the first NaN (the
// loops' rule for their lanes).
struct ArgWinner {
  int64_t index = -1;
  float value = 0;
  void offer(bool max, int64_t i, float v) {
    if (i < 0) return;
    const bool v_nan = v != v, nan = value != value;
    if (index < 0 || (!nan && (v_nan || (max ? v > value : v < value)))) index = i, value = v;
  }
};

float valueAt(bool bf16, const uint16_t* x, int64_t i) {
  return bf16 ? static_cast<float>(c10::BFloat16(x[i], c10::BFloat16::from_bits()))
              : static_cast<float>(c10::Half(x[i], c10::Half::from_bits()));
}

}  // namespace

int64_t argExtremumLoop(bool bf16, bool max, const uint16_t* x, int64_t n, bool threads) {
  // the loops count in int32 lanes: blocks below 2^30 elements
  constexpr int64_t kBlock = int64_t{1} << 30;
  auto range = [&](int64_t begin, int64_t end) {
    ArgWinner w;
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t m = std::min(kBlock, end - b);
      const int64_t i =
          b + (wide() ? avx512::argExtremum(bf16, max, x + b, m) : avx2::argExtremum(bf16, max, x + b, m));
      w.offer(max, i, valueAt(bf16, x, i));
    }
    return w.index;
  };
  if (!threads) return range(0, n);
  const int64_t parts = std::min<int64_t>(n, at::get_num_threads());
  std::vector<int64_t> winners(parts, -1);
  forEachThread(parts, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) winners[t] = range(n * t / parts, n * (t + 1) / parts);
  });
  ArgWinner w;
  for (int64_t i : winners) w.offer(max, i, i < 0 ? 0.0f : valueAt(bf16, x, i));
  return w.index;
}

}  // namespace openmtia
