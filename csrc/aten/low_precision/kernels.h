// The vector loops of the bf16/fp16 fast paths, once per instruction set.
//
// One source (low_precision/kernels.inc, GCC vector extensions plus the
// bf16/fp16 conversion intrinsics) is compiled for 16 float32 lanes (AVX-512
// F+BW) and for 8 (AVX2+FMA+F16C); kernelIsa() picks one per host, and a host
// with neither keeps CPU's kernels. The loops take contiguous bf16/fp16 data
// (as uint16_t) and compute in float32: the activations
// (low_precision/activations.h), the conversions of the float32 matrix path
// (low_precision.h), the all-element reductions (low_precision/reductions.h),
// the comparisons (low_precision/comparisons.h) and arithmetic
// (low_precision/arithmetic.h). Callers check kernelIsa() != kNone first.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

namespace openmtia {

enum class Activation {
  kGelu,             // gelu(x), approximate="none"
  kGeluTanh,         // gelu(x), approximate="tanh"
  kSilu,             // silu(x)
  kSigmoid,          // sigmoid(x)
  kGeluBackward,     // gelu_backward(grad, x), approximate="none"
  kGeluTanhBackward, // gelu_backward(grad, x), approximate="tanh"
  kSigmoidBackward,  // sigmoid_backward(grad, y): y the forward's result
  kTanhBackward,     // tanh_backward(grad, y): y the forward's result (CPU's bf16 one 1.4x float32's time, AVX2)
  kGlu,              // (g, x): g * sigmoid(x): glu's halves, a = g and b = x (CPU's bf16 glu 1.15-1.2x float32's time)
  kAtan2,            // (g, x): atan2(g, x), Cephes' atanf on the ratio of the smaller magnitude to the larger,
                     // IEEE's zeros and infinities (CPU's bf16/fp16 kernel 1.06-1.12x float32's time)
  kPow,              // (g, x): pow(g, x) = exp(x log|g|) by the loops' exp and log, IEEE's special cases (a sign
                     // for odd integer x, NaN for a negative g and non-integer x, 1 for x = 0 or g = 1, ...);
                     // CPU's float32 pow (Sleef) is 1.4-3.8 ms over 1M elements, its bf16/fp16 one 1.1-1.4x that
  kXlogy,            // (g, x): xlogy(g, x): NaN for NaN x, 0 for g = 0, else g * log(x) (the loops' log; CPU's
                     // bf16/fp16 kernel rounds log first: the float32 stand-in's 1.14x float32's time)
  kSquare,           // pow(x, 2): CPU's fp16 pow runs a scalar loop (20-45x float32's time)
  kRelu,             // relu(x): CPU's bf16 relu converts each vector (1.4-1.5x float32's time)
  kLog,              // log(x): CPU's bf16/fp16 log 1.2-1.4x float32's time on an AVX2 host
  // CPU's formulas (aten/src/ATen/native/cpu/Activation.cpp) in float32, so
  // CPU's bits; on an AVX2 host CPU's bf16/fp16 kernels took 1.15-2.3x
  // float32's time (1024x1024)
  kReciprocal,            // 1 / x
  kHardswish,             // x * min(max(x + 3, 0), 6) / 6, NaN kept
  kHardsigmoid,           // min(max(x + 3, 0), 6) / 6, NaN kept
  kLeakyRelu,             // x * (x > 0 ? 1 : p.a)
  kHardswishBackward,     // (g, x): x <= -3 ? 0 : x >= 3 ? g : g * (x / 3 + 0.5)
  kHardsigmoidBackward,   // (g, x): -3 < x < 3 ? g * (1 / 6) : 0
  kLeakyReluBackward,     // (g, x): g * (x > 0 ? 1 : p.a)
  kThresholdBackward,     // (g, x): x <= p.a ? 0 : g (relu's backward)
  kHardtanhBackward,      // (g, x): p.a < x < p.b ? g : 0 (relu6's)
  // exact in float32 and in the dtype (CPU's bits; its bf16 kernels took
  // 1.2-1.3x float32's time, frac 3.6x)
  kFloor,                 // floor(x)
  kCeil,                  // ceil(x)
  kRound,                 // round half to even (CPU's nearbyint)
  kTrunc,                 // trunc(x)
  kFrac,                  // x - trunc(x)
  kSign,                  // (x > 0) - (x < 0): 0 for +-0 and NaN (on the 16-bit patterns)
  kMaximum,               // (g, x): maximum(x, g), NaN if either is (CPU's bf16 kernel 1.5-1.7x)
  kMinimum,               // (g, x): minimum(x, g), NaN if either is
  kHypot,                 // (g, x): sqrt(g^2 + x^2), scaled where a square would overflow or underflow
                          // float32 (CPU's bf16/fp16 kernel 1.13-1.24x float32's time)
  kNanToNum,              // NaN -> p.a, +inf -> p.b, -inf -> p.c (CPU's bf16 kernel 1.9x)
  kHardshrink,            // -p.a <= x <= p.a ? 0 : x (1.6-1.8x)
  kSoftshrink,            // x > p.a ? x - p.a : x < -p.a ? x + p.a : 0, NaN kept (1.6-2.5x)
  kShrinkBackward,        // (g, x): x < -p.a || x > p.a ? g : 0
  // backward of exp-based activations: CPU's formulas in float32 with the
  // loops' exp (a few float32 ulps: within bf16/fp16 tolerances of CPU's;
  // its bf16 kernels took 1.35-1.5x float32's time, AVX2 host)
  kEluBackward,           // (g, x): x > 0 ? g * p.b : g * p.c * p.a * exp(x * p.c)
  kEluResultBackward,     // (g, y): y > 0 ? g * p.b : g * p.c * (y + p.a) (y the forward's result)
  kSoftplusBackward,      // (g, x): x * p.a > p.b ? g : g * z / (z + 1), z = exp(x * p.a)
  // group_norm's per-channel steps (low_precision/norm.cpp): CPU's formulas
  kAffine,                // x * p.a + p.b
  kAffineBackward,        // (g, x): p.a * g + p.b * x + p.c
  kNumActivations
};

// An activation's numbers (leaky_relu's slope, a threshold, hardtanh's
// bounds), as float32: CPU's kernels of bf16/fp16 convert them so.
struct ActivationParams {
  float a = 0.f, b = 0.f, c = 0.f;
};

// Whether `kind` takes a gradient (the backward kinds: kind(g, x)).
constexpr bool takesGrad(Activation kind) {
  switch (kind) {
    case Activation::kGeluBackward:
    case Activation::kGeluTanhBackward:
    case Activation::kSigmoidBackward:
    case Activation::kTanhBackward:
    case Activation::kHardswishBackward:
    case Activation::kGlu:
    case Activation::kXlogy:
    case Activation::kAtan2:
    case Activation::kPow:
    case Activation::kHypot:
    case Activation::kHardsigmoidBackward:
    case Activation::kLeakyReluBackward:
    case Activation::kThresholdBackward:
    case Activation::kHardtanhBackward:
    case Activation::kMaximum:
    case Activation::kMinimum:
    case Activation::kShrinkBackward:
    case Activation::kAffineBackward:
    case Activation::kEluBackward:
    case Activation::kEluResultBackward:
    case Activation::kSoftplusBackward:
      return true;
    default:
      return false;
  }
}

// The instruction set of the loops: 16 float32 lanes (AVX-512 F+BW) where
// the host has them and ATen's capability is AVX512, else 8 (AVX2, FMA,
// F16C), else none (CPU's kernels). Tests set it to run each.
enum class KernelIsa { kNone, kAvx2, kAvx512 };
KernelIsa kernelIsa();
void setKernelIsa(KernelIsa isa);  // raises if the host cannot run it

// A tensor the loops take: a bf16/fp16 mtia tensor, contiguous, no neg/conj
// bit, of more than loopMinElements() elements (smaller ones are the
// small-op path's, which keeps CPU's bits: pointwise.cpp).
bool loopOperand(const at::Tensor& t);
// GRAIN_SIZE (32768) by default, OPENMTIA_LOOP_MIN_ELEMENTS at start: 0
// sends every such tensor through the loops, so that PyTorch's OpInfo
// samples (all smaller) check them (OPENMTIA_LOOP_MIN_ELEMENTS=0
// conformance/run.py ...).
int64_t loopMinElements();
void setLoopMinElements(int64_t n);
// Whether the loops take `a` (and `b`, if defined: a second operand of a's
// dtype, device and sizes): loop operands, an ISA, activationPath(dtype,
// onednn) kFloat32 (low_precision.h), no graph being captured on a's device.
bool loopsTake(const at::Tensor& a, const at::Tensor& b = at::Tensor(), bool onednn = false);
// v in the dtype (bf16 or fp16), back in float32: an unchecked cast through
// float, as CPU's kernels take a number of the tensor's dtype (1e40 is inf in
// bf16, 70000 in fp16).
float inDtype(double v, bool bf16);
// How many trailing dims of x `dim` names, where it names exactly the last k
// (k >= 1), each once and in range (none: all of them); else -1. (The
// reductions' rows; 1: the last dim, as softmax's and argmax's.)
int64_t trailingDims(const at::Tensor& x, at::IntArrayRef dim);
// How many leading dims of x `dim` names, where it names exactly the first
// k (1 <= k < x.dim()), each once and in range; else -1. (The column
// reductions: a batch's mean over dim 0.)
int64_t leadingDims(const at::Tensor& x, at::IntArrayRef dim);

// out[i] = kind(x[i]) (or kind(g[i], x[i])) for n elements, on the calling
// thread; out may be x.
void activationLoop(Activation kind, bool bf16, const uint16_t* x, const uint16_t* g, uint16_t* out, int64_t n,
                    ActivationParams p = {});

// One bf16/fp16 element (its bits) in float32, exactly; one float32 value
// rounded to nearest even to the dtype's bits.
float widenedOne(bool bf16, uint16_t bits);
uint16_t roundedOne(bool bf16, float v);
// The sum over `n` elements of f(begin, end) for one range of them per
// thread of the calling thread's team (forEachThread), the partials added
// in thread order (the same result for a thread count).
double sumOverThreads(int64_t n, const std::function<double(int64_t, int64_t)>& f);

// out[i] = x[i] for n elements on the calling thread: bf16/fp16 widened to
// float32 exactly (widenLoop), float32 rounded to nearest even (narrowLoop).
void widenLoop(bool bf16, const uint16_t* x, float* out, int64_t n);
void narrowLoop(bool bf16, const float* x, uint16_t* out, int64_t n);
// scatter_add_ along the last dim of `rows` rows (n index/src elements, m
// self elements each): each self row in float32, src[j] added at index[j]
// in order, rounded once (CPU's bf16/fp16 kernel, bit for bit). An index
// outside [0, m) stops it, its row unchanged: the return value is the
// index's position, else -1. scratch: m floats.
int64_t scatterAddLoop(bool bf16, uint16_t* self, const uint16_t* src, const int64_t* index, int64_t rows, int64_t n,
                       int64_t m, float* scratch);
// acc[i] += x[i] (bf16/fp16 widened exactly) for n elements, in float32.
void accumulateLoop(bool bf16, const uint16_t* x, float* acc, int64_t n);

// dst = src for a bf16/fp16 `src` and float32 `dst` (widened exactly) or
// the reverse (rounded to nearest even), on the calling thread, where both
// are dense in memory with the same layout (sameDenseLayout: contiguous, or
// a transposed operand and its float32 stand-in); false (nothing done) for
// other dtypes or layouts, or ISA kNone: the caller copies. (The float32 path's conversions of operands in cache:
// ATen's copy_ costs a few microseconds of set-up a call, and its loops are
// slower there.)
// (threads: in ranges on the calling thread's team, forEachThread.)
bool convertLowPrecision(const at::Tensor& dst, const at::Tensor& src, bool threads = false);
// dst = src: convertLowPrecision where it takes them, else ATen's copy_.
void convertOrCopy(const at::Tensor& dst, const at::Tensor& src, bool threads = false);
// Whether `a` and `b` are non-overlapping and dense with the same sizes and
// strides (those of size-1 dims aside): element i of each is then the i-th
// of its memory, which starts at data_ptr().
bool sameDenseLayout(const at::Tensor& a, const at::Tensor& b);

// add, sub, mul, div; clamp (min(max(x, s), alpha), NaN kept: CPU's vector
// loop; y null); rsub (s - alpha * x, one fused multiply-add; y null);
// lerp (x + alpha * (y - x), CPU's vector form: alpha < 0.5 ? fma(alpha,
// y - x, x) : fma(alpha - 1, y - x, y)).
enum class Arithmetic { kAdd, kSub, kMul, kDiv, kClamp, kRsub, kLerp };
// out[i] = x[i] kind y[i], or x[i] kind s where y is null, in float32 and
// rounded once: add x + alpha * y in one fused multiply-add (CPU's
// vectorized loop), sub x - alpha * y; alpha is ignored by mul and div. out
// may be x or y.
void arithmeticLoop(Arithmetic kind, bool bf16, const uint16_t* x, const uint16_t* y, float s, float alpha,
                    uint16_t* out, int64_t n);

// Elementwise functions of three operands, in float32 and rounded once, as
// CPU's vectorized loops of bf16/fp16: addcmul out = self + value * t1 *
// t2, addcdiv self + value * t1 / t2, lerp self + t2 * (t1 - self) with a
// tensor weight t2 (CPU's form: |t2| < 0.5 ? fma(t2, t1 - self, self) :
// fma(t2 - 1, t1 - self, t1)), clamp min(max(self, t1), t2) (NaN where any
// operand is; value unused by the last two). out may be self.
enum class Ternary { kAddcmul, kAddcdiv, kLerp, kClamp };
void ternaryLoop(Ternary kind, bool bf16, const uint16_t* self, const uint16_t* t1, const uint16_t* t2, float value,
                 uint16_t* out, int64_t n);

// The six comparisons, in ATen's order (lt, le, gt, ge, eq, ne).
enum class Comparison { kLt, kLe, kGt, kGe, kEq, kNe };
// out[i] = x[i] kind y[i], or x[i] kind s where y is null (s a value of the
// dtype), for n elements; NaN compares false except under kNe.
void compareLoop(Comparison kind, bool bf16, const uint16_t* x, const uint16_t* y, float s, bool* out, int64_t n);

// The sum of n elements (squares: of their squares), float32 accumulation,
// blocks added in double.
double sumLoop(bool bf16, const uint16_t* x, int64_t n, bool squares = false);
// The sum of a[i] * b[i] over n elements, each product in float32,
// accumulated as sumLoop's (group_norm's backward).
double dotLoop(bool bf16, const uint16_t* a, const uint16_t* b, int64_t n);
// The sum of (x[i] - mean)^2 over n elements, each deviation and square in
// float32, accumulated as sumLoop's (var and std of every element).
double deviationsLoop(bool bf16, const uint16_t* x, float mean, int64_t n);
// The sum over n elements of a loss of x[i] - y[i], each elementwise loss
// in float32 (CPU's formulas), accumulated as sumLoop's: kSquared (x -
// y)^2 (mse_loss), kSmoothL1 (z = |x - y| < beta ? 0.5 z^2 / beta : z -
// 0.5 beta), kHuber (z < beta ? 0.5 z^2 : beta (z - 0.5 beta)).
enum class Loss { kSquared, kSmoothL1, kHuber };
double lossLoop(Loss kind, bool bf16, const uint16_t* x, const uint16_t* y, float beta, int64_t n);
// The sum of n elements with NaNs as 0 (nansum), accumulated as sumLoop's.
double nanSumLoop(bool bf16, const uint16_t* x, int64_t n);
// The largest (max) or smallest of n >= 1 elements; NaN if any is NaN.
float extremumLoop(bool bf16, bool max, const uint16_t* x, int64_t n);
// One row of n elements of softmax (log: log_softmax): the row's max, the
// sum of exp(x - max) in float32, then exp(x - max) / sum rounded once (log:
// (x - max) - log(sum), the sum and its log rounded to the dtype first, as CPU's); NaN rows as CPU's. scratch: n floats; out may be x.
void softmaxLoop(bool bf16, bool log, const uint16_t* x, uint16_t* out, int64_t n, float* scratch);
// One row of n elements of softmax's backward, out = y * (g - sum(g * y)),
// or (log) log_softmax's, out = g - exp(y) * sum(g): y the forward's
// output, sums in float32, one rounding; out may be g.
void softmaxBackwardLoop(bool bf16, bool log, const uint16_t* g, const uint16_t* y, uint16_t* out, int64_t n);
// One row of layer_norm over n elements: its mean and rstd (1 / sqrt(var +
// eps)) in float32, y = (x - mean) * rstd * w + b rounded once, CPU's
// formula (w, b: float32, null for none); y may be x. scratch: n floats.
void layerNormLoop(bool bf16, const uint16_t* x, const float* w, const float* b, double eps, uint16_t* y, int64_t n,
                   float* scratch, float* mean, float* rstd);
// One row of layer_norm's backward given the forward's mean and rstd: dx
// (null: not wanted) rounded once, CPU's formula; dw += dy * (x - mean) *
// rstd and db += dy in float32 (null: not wanted). w: float32 (null: none).
// scratch: 2n floats.
void layerNormBackwardLoop(bool bf16, const uint16_t* dy, const uint16_t* x, const float* w, float mean, float rstd,
                           int64_t n, float* scratch, uint16_t* dx, float* dw, float* db);
// A reduction over leading dims (kind 0 sum, 1 max, 2 min): columns [c0,
// c1) of `rows` rows of `cols` elements at x, each column's float32 result
// to out[c - c0] (sums: blocks of 64 rows, then their totals; extrema: NaN
// if any element is). scratch: c1 - c0 floats.
void columnsLoop(bool bf16, int kind, const uint16_t* x, int64_t rows, int64_t cols, int64_t c0, int64_t c1, float* out,
                 float* scratch);
// cummax (max) or cummin over `rows` rows of n elements: CPU's scan (a NaN
// or an element >= (<=) the running one, that not NaN, is taken), the taken
// elements' bits into values, their indices into indices.
void cumExtremumLoop(bool bf16, bool max, const uint16_t* x, uint16_t* values, int64_t* indices, int64_t rows,
                     int64_t n);
// The products of `rows` rows of n elements, in CPU's order and roundings
// (its bf16/fp16 prod over the last dim bit for bit: every product rounded
// to the dtype), each into out[r] (a value of the dtype).
void prodLoop(bool bf16, const uint16_t* x, int64_t rows, int64_t n, float* out);
// `rows` rows of n elements of a cumulative sum (prod: product) in CPU's
// order: each row's elements in turn into a float32 accumulator, each
// partial result rounded once (CPU's bf16/fp16 cumsum and cumprod bit for
// bit). out may be x. scratch: 2 * kCumulativeRows * n floats.
constexpr int64_t kCumulativeRows = 4;
void cumulativeLoop(bool bf16, bool prod, const uint16_t* x, uint16_t* out, int64_t rows, int64_t n, float* scratch);
// One row of rms_norm over n elements (the decomposition of torch's
// _fused_rms_norm, in float32): rstd = 1 / sqrt(mean(x^2) + eps), y = x *
// rstd * w rounded once (w: float32, null for none); y may be x. scratch: n
// floats.
void rmsNormLoop(bool bf16, const uint16_t* x, const float* w, float eps, uint16_t* y, int64_t n, float* scratch,
                 float* rstd);
// One row of rms_norm's backward given the forward's rstd: dx (null: not
// wanted) rounded once, dw += dy * x * rstd in float32 (null: not wanted).
// w: float32 (null: none). scratch: 2n floats.
void rmsNormBackwardLoop(bool bf16, const uint16_t* dy, const uint16_t* x, const float* w, float rstd, int64_t n,
                         float* scratch, uint16_t* dx, float* dw);
// The index of the first largest (max) or smallest of n >= 1 elements; the
// first NaN's if any is NaN (CPU's argmax/argmin). threads: in ranges on the
// calling thread's team (forEachThread), their winners taken in order.
int64_t argExtremumLoop(bool bf16, bool max, const uint16_t* x, int64_t n, bool threads = false);

}  // namespace openmtia
