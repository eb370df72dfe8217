// An unboxed launch path for the pointwise ops small-step code is made of.
//
// Tiny ops are bound by the host's launch work. The boxed fallback pays for a
// stack of IValues, a plan key and its lookup, and host views of every tensor
// on the calling thread. Here, when the call is the plain case, the kernel is
// unboxed, the result allocated as the CPU kernel would make it, and the task
// does the rest on the device's worker. The plain case: floating tensors
// (float32, float64, bfloat16, float16; integer and bool tensors where the
// op's dtype rule for them is as simple: see kIntegral below) on one mtia
// device, contiguous,
// without conj/neg bits, 1 to GRAIN_SIZE elements (CPU runs these on one
// thread too), no graph being captured (a capture prebuilds CPU kernels), and
//  - unary ops (exp, sqrt, abs, neg, relu, ...: kUnaryOps): any such tensor;
//    the result has its dtype and shape; the float ops (exp, sin, ...:
//    floatOp) of an integer or bool tensor too, the result of the default
//    dtype;
//  - add, sub, mul, div (.Tensor) and their in-place forms: the other operand
//    is a tensor of the same dtype and sizes, or a Python number (a CPU
//    wrapped number, not complex: the result keeps the tensor's dtype, as type
//    promotion gives it); in-place, the operands do not partly overlap; an
//    integer tensor's true division (by such a tensor or a number) and its
//    add, sub, mul with a Python float make a result of the default dtype;
//    a number minus such a tensor (rsub, `7.5 - x`) too; two tensors of
//    the same sizes and different dtypes (`x * mask`: mixed) make their
//    promoted dtype (in place: where self's dtype can hold it);
//  - clamp with tensor bounds, lerp with a tensor weight, addcmul/addcdiv
//    (functional) of floating tensors all alike; cat of tensors of one
//    dtype, rank and sizes but at dim;
//  - floor_divide (`x // y`) of two such tensors (not bool) or a tensor and
//    a number of its kind (a nonzero int, or a float for a floating one);
//  - maximum, minimum, atan2, ... of two such tensors (kBinaryOps), the six
//    comparisons (a bool result; the other operand such a tensor or a
//    number), pow, clamp, clamp_min/max, fmod, remainder with numbers
//    (kScalarOps, clamp; of integer tensors with Python ints too, where the
//    values raise nothing: integerWithInteger), sum/amax/amin of all
//    elements (a 0-dim result), any() and all() of any such tensor,
//    and an optimizer's in-place addcmul_, addcdiv_ and lerp_ (the other
//    tensors alike, none partly overlapping self);
//  - bitwise_and/or/xor and bitwise_not of integer and bool tensors,
//    logical_not (all of one shape), where(bool condition, two tensors of
//    one dtype: the three broadcast) and masked_fill_ with a number that
//    fits self's dtype as it is (a bool mask that broadcasts to self);
//  - sum and mean over dimensions (the result contiguous, reduced sizes),
//    var/std with a correction and prod over dims or every element, of
//    floating tensors.
// The task runs CPU's own kernel (its out= or in-place overload) over CPU
// tensors on the operands' memory, so results are CPU's bit for bit; for two float32 or
// float64 tensors and alpha 1 it runs one IEEE operation per element itself
// (what CPU's kernel computes: `a + 1 * b` is `a + b` exactly). Every other
// call goes through the boxed fallback unchanged, except bf16/fp16 sigmoid,
// silu, relu, log, reciprocal, the roundings, frac, sign and pow(x, 2) of more than GRAIN_SIZE elements where the fused kernel
// takes them (low_precision/activations.h), sum, mean, amax and amin of
// all the elements of such tensors (low_precision/reductions.h) and their
// comparisons (low_precision/comparisons.h).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/from_blob.h>
#include <ATen/TensorIterator.h>
#include <torch/library.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <unordered_set>
#include <utility>

#include "openmtia/runtime.h"
#include "aten/fallback/fallback.h"
#include "aten/low_precision/activations.h"
#include "aten/low_precision/arithmetic.h"
#include "aten/low_precision/comparisons.h"
#include "aten/low_precision/indexed.h"
#include "aten/low_precision/norm.h"
#include "aten/low_precision/reductions.h"
#include "aten/low_precision/softmax.h"
#include "aten/operand.h"
#include "aten/ops.h"
#include "aten/pointwise.h"
#include "aten/small_ops.h"
#include "runtime/errors.h"
#include "runtime/graphs.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {

const c10::DispatchKeySet kCPUKeys(c10::DispatchKey::CPU);

bool isOne(const c10::Scalar& s) {
  if (s.isIntegral(false)) return s.toLong() == 1;
  return s.isFloatingPoint() && s.toDouble() == 1.0;
}

// The dtypes of the plain case. Floating: every op of this file. Integer
// (uint8, int8, int16, int32, int64) and bool tensors only where the op's
// result and errors for them are as plain (kIntegral):
//  - add, sub, mul of two integer tensors of one dtype, or with a Python int,
//    alpha an integer (the result keeps the dtype; bool keeps the boxed path,
//    whose rules differ: sub raises);
//  - abs, neg, relu and maximum, minimum, amax, amin of integer tensors;
//  - the comparisons of any of these dtypes (a bool result; CPU's kernel
//    promotes a number itself);
//  - sum of all elements of an int64 tensor (other integers sum to int64).
// div (true division), the other unary ops and the rest keep floating only.
// (kLogical: integer and bool, not floating: the bitwise ops)
enum class Dtypes { kFloating, kIntegral, kAny, kLogical };

bool floatingDtype(at::ScalarType d) {
  return d == at::kFloat || d == at::kDouble || d == at::kBFloat16 || d == at::kHalf;
}
bool integralDtype(at::ScalarType d) {  // (not bool)
  return d == at::kByte || d == at::kChar || d == at::kShort || d == at::kInt || d == at::kLong;
}
bool admits(Dtypes which, at::ScalarType d) {
  const bool floating = floatingDtype(d), integral = integralDtype(d), boolean = d == at::kBool;
  switch (which) {
    case Dtypes::kFloating:
      return floating;
    case Dtypes::kIntegral:
      return floating || integral;
    case Dtypes::kAny:
      return floating || integral || boolean;
    case Dtypes::kLogical:
      break;
  }
  return integral || boolean;
}

// The dtype an integer or bool tensor's float result takes (CPU's type
// promotion: the default dtype).
at::ScalarType defaultFloat() { return c10::typeMetaToScalarType(c10::get_default_dtype()); }

// A tensor of the plain case (see above), of the dtypes `which`.
bool small(const at::Tensor& t, Dtypes which = Dtypes::kFloating) {
  if (!t.defined() || t.device().type() != kMTIA) return false;
  if (!admits(which, t.scalar_type())) return false;
  const int64_t n = t.numel();
  if (n == 0 || n > at::internal::GRAIN_SIZE || !t.is_contiguous() || t.is_neg() || t.is_conj()) return false;
  return !isCapturing(t.device().index());
}

// A fresh result like `like` (its sizes and dtype, on its device) that
// `launch(out)` writes: the loops' kernels (low_precision_*.h).
template <typename Launch>
at::Tensor launchedLike(const at::Tensor& like, Launch&& launch) {
  c10::DeviceGuard guard(like.device());
  at::Tensor out = emptyDeviceLike(like);
  launch(out);
  return out;
}

// A Python number next to a tensor: the result keeps the tensor's dtype.
bool number(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.unsafeGetTensorImpl()->is_wrapped_number() &&
         !at::isComplexType(t.scalar_type());
}

// Two tensors of the plain case, alike: one dtype, device and sizes.
bool alike(const at::Tensor& a, const at::Tensor& b, Dtypes which = Dtypes::kFloating) {
  return small(a, which) && small(b, which) && a.device() == b.device() && a.scalar_type() == b.scalar_type() &&
         a.sizes().equals(b.sizes());
}

c10::OperatorHandle handle(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

// ------------------------------------------------------------- unary ops

// Unary ops whose out= overload is `name.out(Tensor self, *, Tensor(a!) out)`
// and whose result, for a floating tensor, has its dtype and shape. relu has
// no out= overload: CPU's relu is clamp_min(self, 0), whose out= overload the
// task runs.
constexpr const char* kUnaryOps[] = {
    "abs",   "neg",   "exp",   "exp2",   "expm1", "log",   "log2",  "log10",      "log1p",   "sqrt",  "rsqrt",
    "sin",   "cos",   "tan",   "asin",   "acos",  "atan",  "sinh",  "cosh",       "tanh",    "asinh", "acosh",
    "atanh", "sigmoid", "erf", "erfc",   "erfinv", "reciprocal", "floor", "ceil", "round",   "trunc", "frac",
    "sign",  "silu",  "lgamma", "digamma", "i0",   "sinc",  "relu"};
constexpr size_t kNumUnary = sizeof(kUnaryOps) / sizeof(kUnaryOps[0]);

struct Unary {
  std::string name;  // "aten::exp": the task's name
  c10::OperatorHandle functional;
  std::optional<c10::TypedOperatorHandle<at::Tensor&(const at::Tensor&, at::Tensor&)>> out;  // not relu's
};

const Unary& unaryOp(size_t i) {
  static const std::vector<Unary> table = [] {
    std::vector<Unary> t;
    for (const char* n : kUnaryOps) {
      std::string name = std::string("aten::") + n;
      Unary u{name, handle(name.c_str(), ""), std::nullopt};
      if (name != "aten::relu") u.out = handle(name.c_str(), "out").typed<at::Tensor&(const at::Tensor&, at::Tensor&)>();
      t.push_back(std::move(u));
    }
    return t;
  }();
  return table[i];
}

const c10::TypedOperatorHandle<at::Tensor&(const at::Tensor&, const c10::Scalar&, at::Tensor&)>& clampMinOut() {
  static const auto h =
      handle("aten::clamp_min", "out").typed<at::Tensor&(const at::Tensor&, const c10::Scalar&, at::Tensor&)>();
  return h;
}

// abs, neg and relu keep an integer tensor's dtype; the others make floats.
template <size_t I>
constexpr Dtypes unaryDtypes() {
  constexpr std::string_view n = kUnaryOps[I];
  return n == "abs" || n == "neg" || n == "relu" ? Dtypes::kIntegral : Dtypes::kFloating;
}

// The unary float ops (all but abs, neg, relu, the roundings, frac, sign
// and silu): an integer or bool tensor's result is of the default dtype
// (CPU's type promotion), and their out= kernel takes such a tensor with a
// floating out.
template <size_t I>
constexpr bool floatOp() {
  constexpr std::string_view n = kUnaryOps[I];
  for (std::string_view other : {"abs", "neg", "relu", "floor", "ceil", "round", "trunc", "frac", "sign", "silu"})
    if (n == other) return false;
  return true;
}

// sigmoid, silu, relu, log, reciprocal, the roundings, frac and sign of
// bf16/fp16 tensors on the float32 path: the
// fused kernel of low_precision/activations.h (above GRAIN_SIZE elements).
template <size_t I>
constexpr std::optional<Activation> fusedKind() {
  constexpr std::string_view n = kUnaryOps[I];
  if (n == "sigmoid") return Activation::kSigmoid;
  if (n == "silu") return Activation::kSilu;
  if (n == "relu") return Activation::kRelu;
  if (n == "log") return Activation::kLog;
  if (n == "reciprocal") return Activation::kReciprocal;
  if (n == "floor") return Activation::kFloor;
  if (n == "ceil") return Activation::kCeil;
  if (n == "round") return Activation::kRound;
  if (n == "trunc") return Activation::kTrunc;
  if (n == "frac") return Activation::kFrac;
  if (n == "sign") return Activation::kSign;
  return std::nullopt;
}

template <size_t I>
at::Tensor unary(const at::Tensor& x) {
  const Unary& op = unaryOp(I);
  constexpr auto fused = fusedKind<I>();
  if (fused && fusedActivation(*fused, x)) return fusedActivationResult(*fused, x);
  // (an integer or bool tensor of a float op: a result of the default dtype)
  const bool promoted = floatOp<I>() && !floatingDtype(x.scalar_type()) && small(x, Dtypes::kAny);
  if (!promoted && !small(x, unaryDtypes<I>())) return boxedFallbackCall(op.functional, {x});
  c10::DeviceGuard guard(x.device());
  at::Tensor out = promoted ? emptyDevice(x.sizes(), defaultFloat())
                            : emptyDeviceLike(x);
  constexpr bool relu = std::string_view(kUnaryOps[I]) == "relu";
  launchOnCurrentStream(x.device().index(), op.name.c_str(), [&op, in = Operand(x), res = Operand(out)] {
    at::Tensor hx = in.host(), ho = res.host();
    if constexpr (relu) clampMinOut().redispatch(kCPUKeys, hx, 0, ho);
    else op.out->redispatch(kCPUKeys, hx, ho);
  });
  return out;
}

// The in-place form (exp_, ...): CPU's in-place kernel over self's elements
// (relu_: clamp_min_(self, 0), as CPU's).
template <size_t I>
at::Tensor& unaryInplace(at::Tensor& x) {
  static const std::string name = std::string("aten::") + kUnaryOps[I] + "_";
  static const c10::OperatorHandle h = handle(name.c_str(), "");
  constexpr auto fused = fusedKind<I>();
  if (fused && fusedActivation(*fused, x)) {
    launchActivation(*fused, x, at::Tensor(), x);
    return x;
  }
  if (!small(x, unaryDtypes<I>())) {
    boxedFallbackCall(h, {x});
    return x;
  }
  constexpr bool relu = std::string_view(kUnaryOps[I]) == "relu";
  launchOnCurrentStream(x.device().index(), name.c_str(), [self = Operand(x)] {
    at::Tensor hx = self.host();
    if constexpr (relu) {
      static const auto clamp = handle("aten::clamp_min_", "").typed<at::Tensor&(at::Tensor&, const c10::Scalar&)>();
      clamp.redispatch(kCPUKeys, hx, 0);
    } else {
      static const auto op = h.typed<at::Tensor&(at::Tensor&)>();
      op.redispatch(kCPUKeys, hx);
    }
  });
  return x;
}

template <size_t... I>
void registerUnary(torch::Library& m, std::index_sequence<I...>) {
  (m.impl(kUnaryOps[I], &unary<I>), ...);
  (m.impl((std::string(kUnaryOps[I]) + "_").c_str(), &unaryInplace<I>), ...);
}

// ------------------------------------- other binary ops and comparisons

// Binary ops of two alike tensors whose result has their dtype and sizes:
// `name.overload(Tensor self, Tensor other)` with out= overload `out_overload`,
// for tensors of `dtypes`. (The bitwise ops: integer and bool tensors only;
// CPU's kernels raise for floating ones, through the boxed path.)
struct BinarySpec {
  const char* name;
  const char* overload;
  const char* out_overload;
  Dtypes dtypes = Dtypes::kFloating;
};
constexpr BinarySpec kBinaryOps[] = {
    {"maximum", "", "out", Dtypes::kIntegral}, {"minimum", "", "out", Dtypes::kIntegral},
    {"bitwise_and", "Tensor", "Tensor_out", Dtypes::kLogical}, {"bitwise_or", "Tensor", "Tensor_out", Dtypes::kLogical},
    {"bitwise_xor", "Tensor", "Tensor_out", Dtypes::kLogical}, {"fmax", "", "out"},
    {"fmin", "", "out"},             {"atan2", "", "out"},          {"hypot", "", "out"},
    {"copysign", "Tensor", "out"},   {"fmod", "Tensor", "Tensor_out"}, {"remainder", "Tensor", "Tensor_out"},
    {"pow", "Tensor_Tensor", "Tensor_Tensor_out"}, {"nextafter", "", "out"}, {"xlogy", "Tensor", "OutTensor"},
};
constexpr size_t kNumBinary = sizeof(kBinaryOps) / sizeof(kBinaryOps[0]);

// Comparisons: a bool result of the operands' sizes, for two alike tensors
// (.Tensor) or a tensor and a number (.Scalar).
constexpr const char* kCompareOps[] = {"lt", "le", "gt", "ge", "eq", "ne"};
constexpr size_t kNumCompare = sizeof(kCompareOps) / sizeof(kCompareOps[0]);

std::string qualified(const char* name, const char* overload) {
  return std::string(name) + (*overload ? std::string(".") + overload : std::string());
}

// The activation loop's kind of binary op I (kind(g, x) of the backward
// kinds): maximum/minimum take self as x and the other as g (CPU's vmaxps
// order); atan2, pow, xlogy and hypot take self as g and the other as x.
template <size_t I>
constexpr std::optional<Activation> fusedBinaryKind() {
  constexpr std::string_view n = kBinaryOps[I].name;
  if (n == "maximum") return Activation::kMaximum;
  if (n == "minimum") return Activation::kMinimum;
  if (n == "atan2") return Activation::kAtan2;
  if (n == "hypot") return Activation::kHypot;
  if (n == "xlogy") return Activation::kXlogy;
  if (n == "pow") return Activation::kPow;
  return std::nullopt;
}

template <size_t I>
at::Tensor binary(const at::Tensor& a, const at::Tensor& b) {
  constexpr const BinarySpec& spec = kBinaryOps[I];
  static const std::string name = std::string("aten::") + spec.name;
  static const c10::OperatorHandle h = handle(name.c_str(), spec.overload);
  // bf16/fp16 above GRAIN_SIZE: the activation loop (fusedBinaryKind)
  constexpr auto fused = fusedBinaryKind<I>();
  if constexpr (fused.has_value()) {
    constexpr bool self_is_x = *fused == Activation::kMaximum || *fused == Activation::kMinimum;
    const at::Tensor& x = self_is_x ? a : b;
    const at::Tensor& g = self_is_x ? b : a;
    if (fusedActivation(*fused, x, g)) return fusedActivationResult(*fused, x, g);
  }
  if (!alike(a, b, spec.dtypes)) return boxedFallbackCall(h, {a, b});
  c10::DeviceGuard guard(a.device());
  at::Tensor out = emptyDeviceLike(a);
  launchOnCurrentStream(a.device().index(), name.c_str(), [x = Operand(a), y = Operand(b), res = Operand(out)] {
    static const auto op = handle(name.c_str(), spec.out_overload)
                               .typed<at::Tensor&(const at::Tensor&, const at::Tensor&, at::Tensor&)>();
    at::Tensor o = res.host();
    op.redispatch(kCPUKeys, x.host(), y.host(), o);
  });
  return out;
}

at::Tensor emptyBool(const at::Tensor& a) {
  return emptyDevice(a.sizes(), at::kBool);
}

// (the loops' kinds, in kCompareOps's order)
constexpr Comparison kComparisons[] = {Comparison::kLt, Comparison::kLe, Comparison::kGt,
                                       Comparison::kGe, Comparison::kEq, Comparison::kNe};
static_assert(sizeof(kComparisons) / sizeof(kComparisons[0]) == kNumCompare);

template <size_t I>
at::Tensor compareTensor(const at::Tensor& a, const at::Tensor& b) {
  static const std::string name = std::string("aten::") + kCompareOps[I];
  static const c10::OperatorHandle h = handle(name.c_str(), "Tensor");
  if (fusedComparison(a, b)) return fusedComparisonResult(kComparisons[I], a, b);
  if (!alike(a, b, Dtypes::kAny)) return boxedFallbackCall(h, {a, b});
  c10::DeviceGuard guard(a.device());
  at::Tensor out = emptyBool(a);
  launchOnCurrentStream(a.device().index(), name.c_str(), [x = Operand(a), y = Operand(b), res = Operand(out)] {
    static const auto op =
        handle(name.c_str(), "Tensor_out").typed<at::Tensor&(const at::Tensor&, const at::Tensor&, at::Tensor&)>();
    at::Tensor o = res.host();
    op.redispatch(kCPUKeys, x.host(), y.host(), o);
  });
  return out;
}

template <size_t I>
at::Tensor compareScalar(const at::Tensor& a, const c10::Scalar& b) {
  static const std::string name = std::string("aten::") + kCompareOps[I];
  static const c10::OperatorHandle h = handle(name.c_str(), "Scalar");
  if (!b.isComplex() && fusedComparison(a)) return fusedComparisonResult(kComparisons[I], a, b);
  if (!small(a, Dtypes::kAny) || b.isComplex()) return boxedFallbackCall(h, {a, b});
  c10::DeviceGuard guard(a.device());
  at::Tensor out = emptyBool(a);
  launchOnCurrentStream(a.device().index(), name.c_str(), [x = Operand(a), b, res = Operand(out)] {
    static const auto op =
        handle(name.c_str(), "Scalar_out").typed<at::Tensor&(const at::Tensor&, const c10::Scalar&, at::Tensor&)>();
    at::Tensor o = res.host();
    op.redispatch(kCPUKeys, x.host(), b, o);
  });
  return out;
}

// A tensor and a number, the result of the tensor's dtype and sizes (a
// floating tensor and a real number): `name.overload(Tensor self, Scalar)`.
constexpr BinarySpec kScalarOps[] = {
    {"pow", "Tensor_Scalar", "Tensor_Scalar_out"}, {"clamp_min", "", "out"},           {"clamp_max", "", "out"},
    {"fmod", "Scalar", "Scalar_out"},              {"remainder", "Scalar", "Scalar_out"},
};
constexpr size_t kNumScalar = sizeof(kScalarOps) / sizeof(kScalarOps[0]);

// An integer tensor and a Python int whose result keeps the tensor's dtype
// and whose errors are not of the values: clamp_min/max; fmod and remainder
// by a nonzero number; pow by a non-negative one (CPU raises for 0 and
// negatives, at the call: the boxed path).
template <size_t I>
bool integerWithInteger(const at::Tensor& a, const c10::Scalar& b) {
  constexpr std::string_view n = kScalarOps[I].name;
  if (!b.isIntegral(false) || !a.defined() || !integralDtype(a.scalar_type()) || !small(a, Dtypes::kIntegral))
    return false;
  if (n == "fmod" || n == "remainder") return b.toLong() != 0;
  if (n == "pow") return b.toLong() >= 0;
  return true;
}

template <size_t I>
at::Tensor withScalar(const at::Tensor& a, const c10::Scalar& b) {
  constexpr const BinarySpec& spec = kScalarOps[I];
  static const std::string name = std::string("aten::") + spec.name;
  static const c10::OperatorHandle h = handle(name.c_str(), spec.overload);
  if constexpr (std::string_view(spec.name) == "pow") {  // x ** 2 of bf16/fp16: the fused kernel
    const bool two = (b.isIntegral(false) && b.toLong() == 2) || (b.isFloatingPoint() && b.toDouble() == 2.0);
    if (two && fusedActivation(Activation::kSquare, a)) return fusedActivationResult(Activation::kSquare, a);
  }
  if constexpr (std::string_view(spec.name) == "clamp_min" || std::string_view(spec.name) == "clamp_max") {
    constexpr bool kMin = std::string_view(spec.name) == "clamp_min";
    const std::optional<c10::Scalar> lo = kMin ? std::optional<c10::Scalar>(b) : std::nullopt;
    const std::optional<c10::Scalar> hi = kMin ? std::nullopt : std::optional<c10::Scalar>(b);
    if (fusedClamp(a, lo, hi)) return launchedLike(a, [&](const at::Tensor& out) { launchClamp(a, lo, hi, out); });
  }
  if (!(small(a) || integerWithInteger<I>(a, b)) || b.isComplex()) return boxedFallbackCall(h, {a, b});
  c10::DeviceGuard guard(a.device());
  at::Tensor out = emptyDeviceLike(a);
  launchOnCurrentStream(a.device().index(), name.c_str(), [x = Operand(a), b, res = Operand(out)] {
    static const auto op = handle(name.c_str(), spec.out_overload)
                               .typed<at::Tensor&(const at::Tensor&, const c10::Scalar&, at::Tensor&)>();
    at::Tensor o = res.host();
    op.redispatch(kCPUKeys, x.host(), b, o);
  });
  return out;
}

at::Tensor clamp(const at::Tensor& a, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi) {
  static const c10::OperatorHandle h = handle("aten::clamp", "");
  if (fusedClamp(a, lo, hi)) return launchedLike(a, [&](const at::Tensor& out) { launchClamp(a, lo, hi, out); });
  // (neither bound: CPU's argument error, at the call, from the fallback;
  // an integer tensor: integer bounds, the result keeps its dtype)
  auto integer = [](const std::optional<c10::Scalar>& s) { return !s || s->isIntegral(false); };
  const bool plain = small(a) || (a.defined() && integralDtype(a.scalar_type()) && small(a, Dtypes::kIntegral) &&
                                  integer(lo) && integer(hi));
  if (!plain || (!lo && !hi) || (lo && lo->isComplex()) || (hi && hi->isComplex()))
    return boxedFallbackCall(h, {a, lo, hi});
  c10::DeviceGuard guard(a.device());
  at::Tensor out = emptyDeviceLike(a);
  launchOnCurrentStream(a.device().index(), "aten::clamp", [x = Operand(a), lo, hi, res = Operand(out)] {
    static const auto op = handle("aten::clamp", "out")
                               .typed<at::Tensor&(const at::Tensor&, const std::optional<c10::Scalar>&,
                                                  const std::optional<c10::Scalar>&, at::Tensor&)>();
    at::Tensor o = res.host();
    op.redispatch(kCPUKeys, x.host(), lo, hi, o);
  });
  return out;
}

// In-place ops of an optimizer's step on small parameters: self and the
// other tensors alike, none partly overlapping self.
bool inplacePlain(const at::Tensor& self, std::initializer_list<const at::Tensor*> others) {
  for (const at::Tensor* t : others)
    if (!alike(self, *t) || at::get_overlap_status(self, *t) == at::MemOverlapStatus::Partial) return false;
  return true;
}

// addcmul_ and addcdiv_: self += value * t1 (* or /) t2.
template <bool kDiv>
at::Tensor& addcop_(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& value) {
  static constexpr const char* name = kDiv ? "aten::addcdiv_" : "aten::addcmul_";
  static const c10::OperatorHandle h = handle(name, "");
  if (!value.isComplex() && fusedTernary(self, t1, t2)) {  // bf16/fp16 above GRAIN_SIZE elements: the loops
    launchTernary(kDiv ? Ternary::kAddcdiv : Ternary::kAddcmul, self, t1, t2, static_cast<float>(value.toDouble()),
                  self);
    return self;
  }
  if (!inplacePlain(self, {&t1, &t2}) || value.isComplex()) {
    boxedFallbackCall(h, {self, t1, t2, value});
    return self;
  }
  launchOnCurrentStream(self.device().index(), name, [s = Operand(self), a = Operand(t1), b = Operand(t2), value] {
    static const auto op =
        h.typed<at::Tensor&(at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::Scalar&)>();
    at::Tensor hs = s.host();
    op.redispatch(kCPUKeys, hs, a.host(), b.host(), value);
  });
  return self;
}

// An in-place op `name_(self, Tensor other, Scalar)` (lerp_, masked_fill_):
// CPU's in-place kernel over the elements when the call is `plain`, else the
// boxed path. (h: a handle of static lifetime.)
at::Tensor& inplaceWithTensorAndNumber(const c10::OperatorHandle& h, const char* name, at::Tensor& self,
                                       const at::Tensor& other, const c10::Scalar& number, bool plain) {
  if (!plain) {
    boxedFallbackCall(h, {self, other, number});
    return self;
  }
  launchOnCurrentStream(self.device().index(), name, [h = &h, s = Operand(self), o = Operand(other), number] {
    at::Tensor hs = s.host();
    h->typed<at::Tensor&(at::Tensor&, const at::Tensor&, const c10::Scalar&)>().redispatch(kCPUKeys, hs, o.host(),
                                                                                          number);
  });
  return self;
}

// lerp (functional): bf16/fp16 through the loops, else the boxed path.
at::Tensor lerp(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight) {
  static const c10::OperatorHandle h = handle("aten::lerp", "Scalar");
  if (!fusedLerp(self, end, weight)) return boxedFallbackCall(h, {self, end, weight});
  return launchedLike(self, [&](const at::Tensor& out) { launchLerp(self, end, weight, out); });
}

at::Tensor& lerp_(at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight) {
  static const c10::OperatorHandle h = handle("aten::lerp_", "Scalar");
  // bf16/fp16 (an optimizer's state, a mixing of weights): the vector loops
  if (at::get_overlap_status(self, end) != at::MemOverlapStatus::Partial && fusedLerp(self, end, weight)) {
    c10::DeviceGuard guard(self.device());
    launchLerp(self, end, weight, self);
    return self;
  }
  return inplaceWithTensorAndNumber(h, "aten::lerp_", self, end, weight, inplacePlain(self, {&end}) && !weight.isComplex());
}

// ------------------------------------------------ negations and where

// bitwise_not (kNot: of an integer or bool tensor, its dtype) and
// logical_not (of any such tensor, bool).
template <bool kNot>
at::Tensor negation(const at::Tensor& a) {
  static constexpr const char* name = kNot ? "aten::bitwise_not" : "aten::logical_not";
  static const c10::OperatorHandle h = handle(name, "");
  if (!small(a, kNot ? Dtypes::kLogical : Dtypes::kAny)) return boxedFallbackCall(h, {a});
  c10::DeviceGuard guard(a.device());
  at::Tensor out = kNot ? emptyDeviceLike(a) : emptyBool(a);
  launchOnCurrentStream(a.device().index(), name, [x = Operand(a), res = Operand(out)] {
    static const auto op = handle(name, "out").typed<at::Tensor&(const at::Tensor&, at::Tensor&)>();
    at::Tensor o = res.host();
    op.redispatch(kCPUKeys, x.host(), o);
  });
  return out;
}

// where(condition, self, other): a bool condition and two alike tensors of
// its sizes (any dtype of the plain case); the result is like self.
// The sizes all of `ts` broadcast to, or nothing where they do not (CPU's
// error then comes from the boxed path, at the call).
std::optional<std::vector<int64_t>> broadcastSizes(std::initializer_list<const at::Tensor*> ts) {
  std::vector<int64_t> out;
  for (const at::Tensor* t : ts) {
    const auto s = t->sizes();
    if (s.size() > out.size()) out.insert(out.begin(), s.size() - out.size(), 1);
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[out.size() - s.size() + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o != 1) return std::nullopt;
      o = s[i];
    }
  }
  return out;
}

at::Tensor where(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b) {
  static const c10::OperatorHandle h = handle("aten::where", "self");
  // (operands of one dtype that broadcast: the result of their sizes, no
  // larger than GRAIN_SIZE; where(mask, x, 0.0) gives a 0-dim device b)
  const auto sizes = broadcastSizes({&cond, &a, &b});
  if (!sizes || !small(cond, Dtypes::kAny) || cond.scalar_type() != at::kBool || !small(a, Dtypes::kAny) ||
      !small(b, Dtypes::kAny) || a.scalar_type() != b.scalar_type() || cond.device() != a.device() ||
      b.device() != a.device() || c10::multiply_integers(*sizes) > at::internal::GRAIN_SIZE)
    return boxedFallbackCall(h, {cond, a, b});
  c10::DeviceGuard guard(a.device());
  at::Tensor out = emptyDevice(*sizes, a.scalar_type());
  static const auto op = handle("aten::where", "self_out")
                             .typed<at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&)>();
  if (cond.sizes().equals(out.sizes()) && a.sizes().equals(out.sizes()) && b.sizes().equals(out.sizes())) {
    launchOnCurrentStream(a.device().index(), "aten::where",
                          [c = Operand(cond), x = Operand(a), y = Operand(b), res = Operand(out)] {
                            at::Tensor o = res.host();
                            op.redispatch(kCPUKeys, c.host(), x.host(), y.host(), o);
                          });
    return out;
  }
  // (operands that broadcast: each in its own sizes, CPU's kernel expands them)
  launchOnCurrentStream(a.device().index(), "aten::where",
                        [c = Operand(cond), x = Operand(a), y = Operand(b), res = Operand(out),
                         cs = cond.sizes().vec(), xs = a.sizes().vec(), ys = b.sizes().vec(), os = *sizes] {
                          at::Tensor o = res.host(os);
                          op.redispatch(kCPUKeys, c.host(cs), x.host(xs), y.host(ys), o);
                        });
  return out;
}

// Whether CPU's masked_fill_ takes `value` into a tensor of `dtype` as it is:
// a real number into a floating tensor; an integer in the dtype's range into
// an integer tensor; a bool into a bool tensor. (Other values keep the boxed
// path: CPU's conversion and its errors, at the call.)
bool fillValueFits(at::ScalarType dtype, const c10::Scalar& value) {
  if (floatingDtype(dtype)) return !value.isComplex();
  if (dtype == at::kBool) return value.isBoolean();
  if (!integralDtype(dtype) || !value.isIntegral(false)) return false;
  const int64_t v = value.toLong();
  switch (dtype) {
    case at::kByte:
      return v >= 0 && v <= 255;
    case at::kChar:
      return v >= -128 && v <= 127;
    case at::kShort:
      return v >= -32768 && v <= 32767;
    case at::kInt:
      return v >= INT32_MIN && v <= INT32_MAX;
    default:
      return true;
  }
}

// masked_fill_(self, mask, number): a self of any dtype of the plain case
// with a number that fits it (fillValueFits), a bool mask that broadcasts to
// its sizes (not sharing its memory).
at::Tensor& maskedFill_(at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value) {
  static const c10::OperatorHandle h = handle("aten::masked_fill_", "Scalar");
  // (a mask that broadcasts to self's sizes, as CPU's kernel expands it)
  const auto sizes = broadcastSizes({&self, &mask});
  const bool plain = small(self, Dtypes::kAny) && fillValueFits(self.scalar_type(), value) &&
                     small(mask, Dtypes::kAny) && mask.scalar_type() == at::kBool &&
                     mask.device() == self.device() && sizes && self.sizes().equals(*sizes) &&
                     at::get_overlap_status(self, mask) == at::MemOverlapStatus::No;
  if (plain && !mask.sizes().equals(self.sizes())) {  // a mask that broadcasts: each in its own sizes
    launchOnCurrentStream(self.device().index(), "aten::masked_fill_",
                          [s = Operand(self), m = Operand(mask), value, ss = self.sizes().vec(),
                           ms = mask.sizes().vec()] {
                            static const auto op =
                                handle("aten::masked_fill_", "Scalar")
                                    .typed<at::Tensor&(at::Tensor&, const at::Tensor&, const c10::Scalar&)>();
                            at::Tensor hs = s.host(ss);
                            op.redispatch(kCPUKeys, hs, m.host(ms), value);
                          });
    return self;
  }
  return inplaceWithTensorAndNumber(h, "aten::masked_fill_", self, mask, value, plain);
}

// isnan: x != x (CPU's kernel), bf16/fp16 above GRAIN_SIZE through the
// comparison loop, else the boxed path.
at::Tensor isnan(const at::Tensor& x) {
  static const c10::OperatorHandle h = handle("aten::isnan", "");
  if (fusedComparison(x, x)) return fusedComparisonResult(Comparison::kNe, x, x);
  return boxedFallbackCall(h, {x});
}

// ------------------------------------------------------- small reductions

// dim wrapped into [0, ndim) (a 0-dim tensor takes 0 and -1), or nothing
// where it is out of range (CPU's error: the boxed path).
std::optional<int64_t> wrapDim(int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  if (dim < -n || dim >= n) return std::nullopt;
  return dim < 0 ? dim + n : dim;
}

// The sizes of a reduction of x over `dim` (none or empty: every dim), or
// nothing where a dim is out of range or repeated (CPU's error: the boxed
// path).
std::optional<std::vector<int64_t>> reducedSizes(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
  const int64_t ndim = x.dim();
  std::vector<bool> reduced(std::max<int64_t>(ndim, 1), !dim || dim->empty());
  if (dim && !dim->empty()) {
    for (int64_t d : *dim) {
      const auto w = wrapDim(d, ndim);
      if (!w || reduced[*w]) return std::nullopt;
      reduced[*w] = true;
    }
  }
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < ndim; ++d) {
    if (!reduced[d]) sizes.push_back(x.size(d));
    else if (keepdim) sizes.push_back(1);
  }
  return sizes;
}


// A reduction of every element to a 0-dim result of the tensor's dtype: sum
// (no dtype, or the tensor's), amax and amin (dim=[], keepdim=False). CPU's
// out= kernel over the elements (a contiguous reduction of all dimensions is
// one of all elements: TensorIterator coalesces them).
template <bool kSum, bool kMax>
at::Tensor reduceAll(const c10::OperatorHandle& h, const char* name, const at::Tensor& x,
                     std::vector<c10::IValue> boxed_args, bool plain) {
  // (sum: of integers only int64, whose sum keeps the dtype)
  const bool integral = !kSum || x.scalar_type() == at::kLong;
  if (!plain || !small(x, integral ? Dtypes::kIntegral : Dtypes::kFloating))
    return boxedFallbackCall(h, std::move(boxed_args));
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDevice({}, x.scalar_type());
  launchOnCurrentStream(x.device().index(), name, [in = Operand(x), res = Operand(out)] {
    at::Tensor hx = in.host();
    at::Tensor o = at::from_blob(res.ptr, {}, at::TensorOptions().dtype(res.dtype));
    if constexpr (kSum) {
      static const auto op = handle("aten::sum", "IntList_out")
                                 .typed<at::Tensor&(const at::Tensor&, at::OptionalIntArrayRef, bool,
                                                    std::optional<at::ScalarType>, at::Tensor&)>();
      op.redispatch(kCPUKeys, hx, std::nullopt, false, std::nullopt, o);
    } else {
      static const auto op = handle(kMax ? "aten::amax" : "aten::amin", "out")
                                 .typed<at::Tensor&(const at::Tensor&, at::IntArrayRef, bool, at::Tensor&)>();
      op.redispatch(kCPUKeys, hx, {}, false, o);
    }
  });
  return out;
}

// any() and all() of every element: a 0-dim bool (uint8 for a uint8
// tensor, as CPU's), CPU's all_out kernel in the task.
template <bool kAny>
at::Tensor anyAll(const at::Tensor& x) {
  static constexpr const char* name = kAny ? "aten::any" : "aten::all";
  static const c10::OperatorHandle h = handle(name, "");
  if (!small(x, Dtypes::kAny)) return boxedFallbackCall(h, {x});
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDevice({}, x.scalar_type() == at::kByte ? at::kByte : at::kBool);
  launchOnCurrentStream(x.device().index(), name, [in = Operand(x), res = Operand(out)] {
    static const auto op = handle(name, "all_out").typed<at::Tensor&(const at::Tensor&, at::Tensor&)>();
    at::Tensor o = at::from_blob(res.ptr, {}, at::TensorOptions().dtype(res.dtype));
    op.redispatch(kCPUKeys, in.host(), o);
  });
  return out;
}

at::Tensor sum(const at::Tensor& x, std::optional<at::ScalarType> dtype) {
  static const c10::OperatorHandle h = handle("aten::sum", "");
  const bool same = !dtype || *dtype == x.scalar_type();
  if (same && fusedReduction(x)) return fusedReductionResult(Reduction::kSum, x, x.dim(), false);
  return reduceAll<true, false>(h, "aten::sum", x, {x, dtype}, same);
}

at::Tensor amax(const at::Tensor& x, at::IntArrayRef dim, bool keepdim) {
  static const c10::OperatorHandle h = handle("aten::amax", "");
  if (const int64_t k = trailingDims(x, dim); k >= 0 && fusedReduction(x))
    return fusedReductionResult(Reduction::kMax, x, k, keepdim);
  if (const int64_t k = leadingDims(x, dim); k >= 0 && fusedReduction(x))
    return fusedLeadingReductionResult(Reduction::kMax, x, k, keepdim);
  return reduceAll<false, true>(h, "aten::amax", x, {x, dim, keepdim}, dim.empty() && !keepdim);
}

at::Tensor amin(const at::Tensor& x, at::IntArrayRef dim, bool keepdim) {
  static const c10::OperatorHandle h = handle("aten::amin", "");
  if (const int64_t k = trailingDims(x, dim); k >= 0 && fusedReduction(x))
    return fusedReductionResult(Reduction::kMin, x, k, keepdim);
  if (const int64_t k = leadingDims(x, dim); k >= 0 && fusedReduction(x))
    return fusedLeadingReductionResult(Reduction::kMin, x, k, keepdim);
  return reduceAll<false, false>(h, "aten::amin", x, {x, dim, keepdim}, dim.empty() && !keepdim);
}

// sum and mean over dimensions (sum.dim_IntList, mean.dim) of a floating
// tensor: the dims in range and distinct (else the boxed path raises CPU's
// error at the call), no dtype or the tensor's; the result is contiguous,
// of the reduced sizes, as CPU's kernel makes it.
template <bool kMean>
at::Tensor reduceDims(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                      std::optional<at::ScalarType> dtype) {
  static constexpr const char* name = kMean ? "aten::mean" : "aten::sum";
  static const c10::OperatorHandle h = handle(name, kMean ? "dim" : "dim_IntList");
  if (const int64_t k = dim ? trailingDims(x, *dim) : x.dim();
      (!dtype || *dtype == x.scalar_type()) && k >= 0 && fusedReduction(x))
    return fusedReductionResult(kMean ? Reduction::kMean : Reduction::kSum, x, k, keepdim);
  if (const int64_t k = dim ? leadingDims(x, *dim) : -1; (!dtype || *dtype == x.scalar_type()) && k >= 0 &&
                                                        fusedReduction(x))
    return fusedLeadingReductionResult(kMean ? Reduction::kMean : Reduction::kSum, x, k, keepdim);
  // (an empty dim list: every dim, as CPU's rule for sum and mean has it;
  // Tensor.mean() is mean.dim over [])
  const bool plain = small(x) && (!dtype || *dtype == x.scalar_type()) && x.dim() > 0;
  const auto reduced_sizes = plain ? reducedSizes(x, dim, keepdim) : std::nullopt;
  if (!reduced_sizes) return boxedFallbackCall(h, {x, dim, keepdim, dtype});
  const std::vector<int64_t>& out_sizes = *reduced_sizes;
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDevice(out_sizes, x.scalar_type());
  std::vector<int64_t> dims;  // (empty: every dim)
  if (dim) dims.assign(dim->begin(), dim->end());
  launchOnCurrentStream(x.device().index(), name,
                        [in = Operand(x), sizes = x.sizes().vec(), res = Operand(out), out_sizes, dims, keepdim] {
                          static const auto op = handle(name, kMean ? "out" : "IntList_out")
                                                     .typed<at::Tensor&(const at::Tensor&, at::OptionalIntArrayRef,
                                                                        bool, std::optional<at::ScalarType>,
                                                                        at::Tensor&)>();
                          const auto opts = at::TensorOptions().dtype(in.dtype);
                          at::Tensor hx = at::from_blob(in.ptr, sizes, opts);
                          at::Tensor o = at::from_blob(res.ptr, out_sizes, opts);
                          op.redispatch(kCPUKeys, hx, dims, keepdim, std::nullopt, o);
                        });
  return out;
}

template <size_t... I>
void registerScalar(torch::Library& m, std::index_sequence<I...>) {
  (m.impl(qualified(kScalarOps[I].name, kScalarOps[I].overload).c_str(), &withScalar<I>), ...);
}

template <size_t... I>
void registerBinary(torch::Library& m, std::index_sequence<I...>) {
  (m.impl(qualified(kBinaryOps[I].name, kBinaryOps[I].overload).c_str(), &binary<I>), ...);
}

template <size_t... I>
void registerCompare(torch::Library& m, std::index_sequence<I...>) {
  (m.impl((std::string(kCompareOps[I]) + ".Tensor").c_str(), &compareTensor<I>), ...);
  (m.impl((std::string(kCompareOps[I]) + ".Scalar").c_str(), &compareScalar<I>), ...);
}

// ------------------------------------------------------------ binary ops

enum class Op { kAdd, kSub, kMul, kDiv };

template <Op op, typename T>
inline T apply(T a, T b) {
  if constexpr (op == Op::kAdd) return a + b;
  if constexpr (op == Op::kSub) return a - b;
  if constexpr (op == Op::kMul) return a * b;
  return a / b;
}

template <Op op, typename T>
void loop(const T* __restrict a, const T* __restrict b, T* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = apply<op>(a[i], b[i]);
}

// Two float32 or float64 tensors, alpha 1: the task's own loop.
template <Op op>
void launchLoop(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, const char* name) {
  const int64_t n = a.numel();
  if (a.scalar_type() == at::kFloat) {
    launchOnCurrentStream(a.device().index(), name, [pa = a.const_data_ptr<float>(), pb = b.const_data_ptr<float>(),
                                                     po = out.mutable_data_ptr<float>(), n] { loop<op>(pa, pb, po, n); });
  } else {
    launchOnCurrentStream(a.device().index(), name, [pa = a.const_data_ptr<double>(), pb = b.const_data_ptr<double>(),
                                                     po = out.mutable_data_ptr<double>(), n] { loop<op>(pa, pb, po, n); });
  }
}

bool ownLoop(const at::Tensor& a, const at::Tensor& b) {
  return b.device().type() == kMTIA && a.scalar_type() == b.scalar_type() &&
         (a.scalar_type() == at::kFloat || a.scalar_type() == at::kDouble);
}

// The overloads of one binary op: functional, out= and in-place (.Tensor).
template <Op op>
struct Binary {
  static constexpr bool kAlpha = op == Op::kAdd || op == Op::kSub;
  static const char* name() {
    return op == Op::kAdd ? "aten::add" : op == Op::kSub ? "aten::sub" : op == Op::kMul ? "aten::mul" : "aten::div";
  }
  static const char* inplaceName() {
    return op == Op::kAdd ? "aten::add_" : op == Op::kSub ? "aten::sub_" : op == Op::kMul ? "aten::mul_" : "aten::div_";
  }
  static const c10::OperatorHandle& functional() {
    static const c10::OperatorHandle h = handle(name(), "Tensor");
    return h;
  }
  static const c10::OperatorHandle& inplace() {
    static const c10::OperatorHandle h = handle(inplaceName(), "Tensor");
    return h;
  }
  // the CPU kernel into `out` (out=) or into `self` (out undefined: in place)
  static void cpu(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha, const at::Tensor& out) {
    if constexpr (kAlpha) {
      if (out.defined()) {
        static const auto h = handle(name(), "out").typed<at::Tensor&(const at::Tensor&, const at::Tensor&,
                                                                         const c10::Scalar&, at::Tensor&)>();
        h.redispatch(kCPUKeys, self, other, alpha, const_cast<at::Tensor&>(out));
      } else {
        static const auto h = inplace().typed<at::Tensor&(at::Tensor&, const at::Tensor&, const c10::Scalar&)>();
        h.redispatch(kCPUKeys, const_cast<at::Tensor&>(self), other, alpha);
      }
    } else {
      if (out.defined()) {
        static const auto h =
            handle(name(), "out").typed<at::Tensor&(const at::Tensor&, const at::Tensor&, at::Tensor&)>();
        h.redispatch(kCPUKeys, self, other, const_cast<at::Tensor&>(out));
      } else {
        static const auto h = inplace().typed<at::Tensor&(at::Tensor&, const at::Tensor&)>();
        h.redispatch(kCPUKeys, const_cast<at::Tensor&>(self), other);
      }
    }
  }

  // Calls whose argument errors CPU's kernel raises (so they must raise at
  // the call, through the boxed path): a bool or complex alpha (CPU: only
  // for bool or complex results), and sub with a bool number.
  static bool rejected(const at::Tensor& b, const c10::Scalar& alpha) {
    return alpha.isBoolean() || alpha.isComplex() || (op == Op::kSub && number(b) && b.scalar_type() == at::kBool);
  }

  // Integer tensors: add, sub, mul; the number a Python int, alpha an integer.
  // Bool tensors: add and mul of two alike, alpha 1 (a bool result: or, and).
  static bool plain(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    if (rejected(b, alpha)) return false;
    if (a.defined() && a.scalar_type() == at::kBool)
      return (op == Op::kAdd || op == Op::kMul) && !number(b) && alpha.isIntegral(false) && isOne(alpha) &&
             alike(a, b, Dtypes::kAny);
    if (a.defined() && integralDtype(a.scalar_type())) {
      if (op == Op::kDiv || !alpha.isIntegral(false)) return false;
      return number(b) ? b.scalar_type() == at::kLong && small(a, Dtypes::kIntegral) : alike(a, b, Dtypes::kIntegral);
    }
    return number(b) ? small(a) : alike(a, b);
  }

  // Integer tensors whose result is of the default dtype (CPU's type
  // promotion; its out= kernel computes it): true division by an integer
  // tensor alike or a Python int or float, and add, sub, mul with a Python
  // float (alpha an integer).
  static bool promotedToFloat(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    if (!a.defined() || !integralDtype(a.scalar_type()) || rejected(b, alpha) || !alpha.isIntegral(false)) return false;
    const bool int_number = number(b) && b.scalar_type() == at::kLong;
    const bool float_number = number(b) && b.scalar_type() == at::kDouble;
    if (op == Op::kDiv) return (int_number || float_number) ? small(a, Dtypes::kIntegral) : alike(a, b, Dtypes::kIntegral);
    return float_number && small(a, Dtypes::kIntegral);
  }

  // Two tensors of the plain case, one device and sizes, of different
  // dtypes (`x * mask`, int32 + int64): the result of their promoted dtype
  // (CPU's type promotion; integer true division: the default dtype), which
  // CPU's out= kernel computes. Not bool with sub (CPU raises), alpha an
  // integer where the result is integral; nothing otherwise.
  static std::optional<at::ScalarType> mixed(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    if (!a.defined() || !b.defined() || number(a) || number(b) || rejected(b, alpha)) return std::nullopt;
    if (a.scalar_type() == b.scalar_type() || !small(a, Dtypes::kAny) || !small(b, Dtypes::kAny) ||
        a.device() != b.device() || !a.sizes().equals(b.sizes()))
      return std::nullopt;
    if (op == Op::kSub && (a.scalar_type() == at::kBool || b.scalar_type() == at::kBool)) return std::nullopt;
    at::ScalarType r = at::result_type(a, b);
    if (op == Op::kDiv && !floatingDtype(r)) r = defaultFloat();
    if (!floatingDtype(r) && !alpha.isIntegral(false)) return std::nullopt;
    return r;
  }

  // bf16/fp16 tensors above GRAIN_SIZE with a tensor alike or a number: the
  // vector loops (low_precision/arithmetic.h); false if not taken
  static constexpr Arithmetic kArithmetic = op == Op::kAdd   ? Arithmetic::kAdd
                                            : op == Op::kSub ? Arithmetic::kSub
                                            : op == Op::kMul ? Arithmetic::kMul
                                                             : Arithmetic::kDiv;
  static bool fused(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    return !rejected(b, alpha) && fusedArithmetic(a, number(b) ? at::Tensor() : b, alpha);
  }
  static void launchFused(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, const at::Tensor& out) {
    const bool num = number(b);
    launchArithmetic(kArithmetic, a, num ? at::Tensor() : b, num ? b.item<double>() : 0.0, alpha, out);
  }

  // number - alpha * tensor (rsub: `7.5 - x`): bf16/fp16 above GRAIN_SIZE
  // through the loops; a floating tensor, or an integer one with a Python
  // int (the result of its dtype) or float (of the default dtype), alpha an
  // integer, through CPU's kernel in the task; else (a bool number, tensor
  // or alpha: CPU's errors) the boxed path.
  static at::Tensor reversed(const at::Tensor& s, const at::Tensor& x, const c10::Scalar& alpha) {
    const bool allowed = s.scalar_type() != at::kBool && !rejected(s, alpha) && x.defined();
    if (allowed && fusedArithmetic(x, at::Tensor(), alpha))
      return launchedLike(x, [&](const at::Tensor& out) {
        launchArithmetic(Arithmetic::kRsub, x, at::Tensor(), s.item<double>(), alpha, out);
      });
    std::optional<at::ScalarType> result;
    if (allowed && floatingDtype(x.scalar_type()) && small(x)) {
      result = x.scalar_type();
    } else if (allowed && integralDtype(x.scalar_type()) && alpha.isIntegral(false) && small(x, Dtypes::kIntegral)) {
      if (s.scalar_type() == at::kLong) result = x.scalar_type();
      else if (s.scalar_type() == at::kDouble) result = defaultFloat();
    }
    if (!result) return boxedFallbackCall(functional(), {s, x, alpha});
    c10::DeviceGuard guard(x.device());
    at::Tensor out = emptyDevice(x.sizes(), *result);
    launchOnCurrentStream(x.device().index(), name(), [y = Operand(s), t = Operand(x), alpha, res = Operand(out)] {
      cpu(y.host(), t.host(), alpha, res.host());
    });
    return out;
  }

  static at::Tensor call(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    if constexpr (op == Op::kSub) {
      if (number(a) && !number(b)) return reversed(a, b, alpha);
    }
    if (fused(a, b, alpha)) return launchedLike(a, [&](const at::Tensor& out) { launchFused(a, b, alpha, out); });
    const bool promoted = promotedToFloat(a, b, alpha);
    const std::optional<at::ScalarType> mixed_dtype = promoted ? std::nullopt : mixed(a, b, alpha);
    if (!promoted && !mixed_dtype && !plain(a, b, alpha)) {
      if constexpr (kAlpha) return boxedFallbackCall(functional(), {a, b, alpha});
      else return boxedFallbackCall(functional(), {a, b});
    }
    c10::DeviceGuard guard(a.device());
    at::Tensor out = promoted      ? emptyDevice(a.sizes(), defaultFloat())
                     : mixed_dtype ? emptyDevice(a.sizes(), *mixed_dtype)
                                   : emptyDeviceLike(a);
    if (isOne(alpha) && ownLoop(a, b)) {
      launchLoop<op>(a, b, out, name());
    } else {
      launchOnCurrentStream(a.device().index(), name(), [x = Operand(a), y = Operand(b), alpha, res = Operand(out)] {
        cpu(x.host(), y.host(), alpha, res.host());
      });
    }
    return out;
  }

  static at::Tensor& callInplace(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
    // operands that partly overlap raise (CPU's check, at the call): boxed
    const bool partial = !number(other) && at::get_overlap_status(self, other) == at::MemOverlapStatus::Partial;
    if (!partial && fused(self, other, alpha)) {
      c10::DeviceGuard guard(self.device());
      launchFused(self, other, alpha, self);
      return self;
    }
    // (mixed dtypes: a result type self can hold, as CPU's check has it)
    const auto mixed_dtype = mixed(self, other, alpha);
    const bool castable = mixed_dtype && at::canCast(*mixed_dtype, self.scalar_type());
    if ((!plain(self, other, alpha) && !castable) || partial) {
      if constexpr (kAlpha) boxedFallbackCall(inplace(), {self, other, alpha});
      else boxedFallbackCall(inplace(), {self, other});
      return self;
    }
    c10::DeviceGuard guard(self.device());
    if (isOne(alpha) && ownLoop(self, other)) {
      launchLoop<op>(self, other, self, inplaceName());
    } else {
      launchOnCurrentStream(self.device().index(), inplaceName(), [x = Operand(self), y = Operand(other), alpha] {
        cpu(x.host(), y.host(), alpha, at::Tensor());
      });
    }
    return self;
  }
};

at::Tensor add(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  return Binary<Op::kAdd>::call(a, b, alpha);
}
at::Tensor sub(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  return Binary<Op::kSub>::call(a, b, alpha);
}
at::Tensor mul(const at::Tensor& a, const at::Tensor& b) { return Binary<Op::kMul>::call(a, b, 1); }
at::Tensor div(const at::Tensor& a, const at::Tensor& b) { return Binary<Op::kDiv>::call(a, b, 1); }
at::Tensor& add_(at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  return Binary<Op::kAdd>::callInplace(a, b, alpha);
}
at::Tensor& sub_(at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  return Binary<Op::kSub>::callInplace(a, b, alpha);
}
at::Tensor& mul_(at::Tensor& a, const at::Tensor& b) { return Binary<Op::kMul>::callInplace(a, b, 1); }
at::Tensor& div_(at::Tensor& a, const at::Tensor& b) { return Binary<Op::kDiv>::callInplace(a, b, 1); }

// rsub(self, other, alpha) = other - alpha * self (CPU's rsub is that sub):
// a Python number `other` (`7.5 - x`) through sub's unboxed path.
at::Tensor rsub(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  static const c10::OperatorHandle h = handle("aten::rsub", "Tensor");
  if (number(other) && !number(self)) return Binary<Op::kSub>::call(other, self, alpha);
  return boxedFallbackCall(h, {self, other, alpha});
}

// floor_divide (`x // y`): a floating or integer tensor and a tensor alike,
// or a Python number of its kind (a float for a floating tensor, a nonzero
// int for either: the result keeps the tensor's dtype). An integer tensor's
// zero divisor raises in the task (at the next synchronize, as any error of
// the device's data); a zero number keeps the boxed path.
at::Tensor floorDivide(const at::Tensor& a, const at::Tensor& b) {
  static const c10::OperatorHandle h = handle("aten::floor_divide", "");
  bool plain = false;
  if (number(b) && a.defined()) {
    const bool nonzero_int = b.scalar_type() == at::kLong && b.item<int64_t>() != 0;
    if (floatingDtype(a.scalar_type())) plain = small(a) && (nonzero_int || b.scalar_type() == at::kDouble);
    else plain = integralDtype(a.scalar_type()) && nonzero_int && small(a, Dtypes::kIntegral);
  } else {
    plain = alike(a, b, Dtypes::kIntegral);
  }
  if (!plain) return boxedFallbackCall(h, {a, b});
  c10::DeviceGuard guard(a.device());
  at::Tensor out = emptyDeviceLike(a);
  launchOnCurrentStream(a.device().index(), "aten::floor_divide", [x = Operand(a), y = Operand(b), res = Operand(out)] {
    static const auto op =
        handle("aten::floor_divide", "out").typed<at::Tensor&(const at::Tensor&, const at::Tensor&, at::Tensor&)>();
    at::Tensor o = res.host();
    op.redispatch(kCPUKeys, x.host(), y.host(), o);
  });
  return out;
}

// clamp with tensor bounds (one or both), lerp with a tensor weight, and
// the functional addcmul/addcdiv: floating tensors all alike (a number
// value real), CPU's out= kernel in the task; else the boxed path.
at::Tensor clampTensors(const at::Tensor& a, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi) {
  static const c10::OperatorHandle h = handle("aten::clamp", "Tensor");
  const bool has_lo = lo && lo->defined(), has_hi = hi && hi->defined();
  // bf16/fp16 above GRAIN_SIZE: the loops (one bound: CPU's maximum or
  // minimum kernel, the activation loop's kinds)
  if (has_lo && has_hi && fusedTernary(a, *lo, *hi))
    return launchedLike(a, [&](const at::Tensor& out) { launchTernary(Ternary::kClamp, a, *lo, *hi, 0.0f, out); });
  if (has_lo != has_hi) {
    const Activation kind = has_lo ? Activation::kMaximum : Activation::kMinimum;
    const at::Tensor& bound = has_lo ? *lo : *hi;
    if (fusedActivation(kind, a, bound)) return fusedActivationResult(kind, a, bound);
  }
  if (!(has_lo || has_hi) || (has_lo && !alike(a, *lo)) || (has_hi && !alike(a, *hi)) || !small(a))
    return boxedFallbackCall(h, {a, lo, hi});
  c10::DeviceGuard guard(a.device());
  at::Tensor out = emptyDeviceLike(a);
  auto operand = [](bool has, const std::optional<at::Tensor>& t) {
    return has ? std::optional<Operand>(Operand(*t)) : std::nullopt;
  };
  launchOnCurrentStream(a.device().index(), "aten::clamp",
                        [x = Operand(a), l = operand(has_lo, lo), u = operand(has_hi, hi), res = Operand(out)] {
                          static const auto op = handle("aten::clamp", "Tensor_out")
                                                     .typed<at::Tensor&(const at::Tensor&, const std::optional<at::Tensor>&,
                                                                        const std::optional<at::Tensor>&, at::Tensor&)>();
                          auto host = [](const std::optional<Operand>& o) {
                            return o ? std::optional<at::Tensor>(o->host()) : std::nullopt;
                          };
                          at::Tensor r = res.host();
                          op.redispatch(kCPUKeys, x.host(), host(l), host(u), r);
                        });
  return out;
}

at::Tensor lerpTensor(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
  static const c10::OperatorHandle h = handle("aten::lerp", "Tensor");
  if (fusedTernary(self, end, weight))  // bf16/fp16 above GRAIN_SIZE: the loops
    return launchedLike(self, [&](const at::Tensor& out) { launchTernary(Ternary::kLerp, self, end, weight, 0.0f, out); });
  if (!alike(self, end) || !alike(self, weight)) return boxedFallbackCall(h, {self, end, weight});
  c10::DeviceGuard guard(self.device());
  at::Tensor out = emptyDeviceLike(self);
  launchOnCurrentStream(self.device().index(), "aten::lerp",
                        [s = Operand(self), e = Operand(end), w = Operand(weight), res = Operand(out)] {
                          static const auto op =
                              handle("aten::lerp", "Tensor_out")
                                  .typed<at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&)>();
                          at::Tensor r = res.host();
                          op.redispatch(kCPUKeys, s.host(), e.host(), w.host(), r);
                        });
  return out;
}

template <bool kDiv>
at::Tensor addcop(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& value) {
  static constexpr const char* name = kDiv ? "aten::addcdiv" : "aten::addcmul";
  static const c10::OperatorHandle h = handle(name, "");
  if (!value.isComplex() && fusedTernary(self, t1, t2))  // bf16/fp16 above GRAIN_SIZE: the loops
    return launchedLike(self, [&](const at::Tensor& out) {
      launchTernary(kDiv ? Ternary::kAddcdiv : Ternary::kAddcmul, self, t1, t2, static_cast<float>(value.toDouble()), out);
    });
  if (!alike(self, t1) || !alike(self, t2) || value.isComplex()) return boxedFallbackCall(h, {self, t1, t2, value});
  c10::DeviceGuard guard(self.device());
  at::Tensor out = emptyDeviceLike(self);
  launchOnCurrentStream(self.device().index(), name,
                        [s = Operand(self), a = Operand(t1), b = Operand(t2), value, res = Operand(out)] {
                          static const auto op = handle(name, "out")
                                                     .typed<at::Tensor&(const at::Tensor&, const at::Tensor&,
                                                                        const at::Tensor&, const c10::Scalar&, at::Tensor&)>();
                          at::Tensor r = res.host();
                          op.redispatch(kCPUKeys, s.host(), a.host(), b.host(), value, r);
                        });
  return out;
}

// max() and min() of every element: a 0-dim result of the tensor's dtype
// (CPU's max.unary_out in the task).
template <bool kMax>
at::Tensor extremumAll(const at::Tensor& x) {
  static constexpr const char* name = kMax ? "aten::max" : "aten::min";
  static const c10::OperatorHandle h = handle(name, "");
  if (!small(x, Dtypes::kAny)) return boxedFallbackCall(h, {x});
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDevice({}, x.scalar_type());
  launchOnCurrentStream(x.device().index(), name, [in = Operand(x), res = Operand(out)] {
    static const auto op = handle(name, "unary_out").typed<at::Tensor&(const at::Tensor&, at::Tensor&)>();
    at::Tensor o = at::from_blob(res.ptr, {}, at::TensorOptions().dtype(res.dtype));
    op.redispatch(kCPUKeys, in.host(), o);
  });
  return out;
}

// index_select(self, dim, index): self of any dtype of the plain case, a
// 1-D (or 0-dim) int64/int32 index on its device; the result (self's sizes,
// dim's the index's count) no larger than GRAIN_SIZE.
at::Tensor indexSelect(const at::Tensor& x, int64_t dim, const at::Tensor& index) {
  static const c10::OperatorHandle h = handle("aten::index_select", "");
  const auto d = wrapDim(dim, x.dim());
  const bool plain = d && x.dim() > 0 && small(x, Dtypes::kAny) && small(index, Dtypes::kIntegral) &&
                     (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt) && index.dim() <= 1 &&
                     index.device() == x.device() &&
                     x.numel() / x.size(*d) * index.numel() <= at::internal::GRAIN_SIZE;
  if (!plain) return boxedFallbackCall(h, {x, dim, index});
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes[*d] = index.numel();
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDevice(sizes, x.scalar_type());
  launchOnCurrentStream(x.device().index(), "aten::index_select",
                        [in = Operand(x), xs = x.sizes().vec(), i = Operand(index), d = *d, res = Operand(out), sizes] {
                          static const auto op = handle("aten::index_select", "out")
                                                     .typed<at::Tensor&(const at::Tensor&, int64_t, const at::Tensor&,
                                                                        at::Tensor&)>();
                          at::Tensor o = res.host(sizes);
                          op.redispatch(kCPUKeys, in.host(xs), d, i.host(), o);
                        });
  return out;
}

// var / std (kStd) with a correction over dims (none: every element) of a
// floating tensor: CPU's var.correction_out in the task.
template <bool kStd>
at::Tensor varStd(const at::Tensor& x, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar>& correction,
                  bool keepdim) {
  static constexpr const char* name = kStd ? "aten::std" : "aten::var";
  static const c10::OperatorHandle h = handle(name, "correction");
  // every element of a bf16/fp16 tensor above GRAIN_SIZE (degrees of
  // freedom > 0): the loops (low_precision/reductions.h)
  if (fusedReduction(x) && (!dim || trailingDims(x, *dim) == x.dim()) && (!correction || !correction->isComplex())) {
    const double c = correction ? correction->toDouble() : 1.0;
    if (static_cast<double>(x.numel()) - c > 0) return fusedVarianceResult(x, c, kStd, keepdim);
  }
  auto sizes = small(x) && (!correction || !correction->isComplex()) ? reducedSizes(x, dim, keepdim) : std::nullopt;
  // (degrees of freedom <= 0: CPU's warning, which must reach the caller,
  // and its NaN: the boxed path)
  if (sizes) {
    const int64_t kept = c10::multiply_integers(*sizes);
    const double reduced = static_cast<double>(x.numel()) / static_cast<double>(std::max<int64_t>(kept, 1));
    if (reduced - (correction ? correction->toDouble() : 1.0) <= 0) sizes = std::nullopt;
  }
  if (!sizes) return boxedFallbackCall(h, {x, dim, correction, keepdim});
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDevice(*sizes, x.scalar_type());
  std::optional<std::vector<int64_t>> dims;
  if (dim) dims = dim->vec();
  launchOnCurrentStream(x.device().index(), name,
                        [in = Operand(x), xs = x.sizes().vec(), dims, correction, keepdim, res = Operand(out), sizes = *sizes] {
                          static const auto op = handle(name, "correction_out")
                                                     .typed<at::Tensor&(const at::Tensor&, at::OptionalIntArrayRef,
                                                                        const std::optional<c10::Scalar>&, bool,
                                                                        at::Tensor&)>();
                          at::Tensor o = res.host(sizes);
                          op.redispatch(kCPUKeys, in.host(xs), dims ? at::OptionalIntArrayRef(*dims) : std::nullopt,
                                        correction, keepdim, o);
                        });
  return out;
}

// prod of every element (dim none) or over one dim of a floating tensor,
// dtype none or its own: CPU's prod.int_out in the task (every element:
// over the contiguous elements as one dim, as CPU's reduction coalesces
// them).
at::Tensor prodOf(const at::Tensor& x, std::optional<int64_t> dim, bool keepdim, std::optional<at::ScalarType> dtype,
                  const c10::OperatorHandle& h, std::vector<c10::IValue> boxed) {
  const bool same = !dtype || *dtype == x.scalar_type();
  const auto sizes = same && small(x) ? reducedSizes(x, dim ? at::OptionalIntArrayRef(*dim) : std::nullopt, keepdim)
                                      : std::nullopt;
  if (!sizes) return boxedFallbackCall(h, std::move(boxed));
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDevice(*sizes, x.scalar_type());
  launchOnCurrentStream(x.device().index(), "aten::prod",
                        [in = Operand(x), xs = x.sizes().vec(), dim, keepdim, res = Operand(out), sizes = *sizes] {
                          static const auto op = handle("aten::prod", "int_out")
                                                     .typed<at::Tensor&(const at::Tensor&, int64_t, bool,
                                                                        std::optional<at::ScalarType>, at::Tensor&)>();
                          at::Tensor o = res.host(sizes);
                          if (dim) op.redispatch(kCPUKeys, in.host(xs), *dim, keepdim, std::nullopt, o);
                          else op.redispatch(kCPUKeys, in.host(), 0, false, std::nullopt, o);  // (1-D: every element)
                        });
  return out;
}

at::Tensor prodAll(const at::Tensor& x, std::optional<at::ScalarType> dtype) {
  static const c10::OperatorHandle h = handle("aten::prod", "");
  return prodOf(x, std::nullopt, false, dtype, h, {x, dtype});
}

at::Tensor prodDim(const at::Tensor& x, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype) {
  static const c10::OperatorHandle h = handle("aten::prod", "dim_int");
  if (auto fused = fusedProd(x, dim, keepdim, dtype)) return *fused;  // (bf16/fp16: low_precision/reductions.h)
  return prodOf(x, dim, keepdim, dtype, h, {x, dim, keepdim, dtype});
}

// cat of tensors of the plain case: one dtype and device, one rank (at least
// 1), the same sizes but at dim; the result no larger than GRAIN_SIZE.
at::Tensor catSmall(const at::ITensorListRef& tensors, int64_t dim) {
  static const c10::OperatorHandle h = handle("aten::cat", "");
  std::vector<at::Tensor> ts;
  for (const at::Tensor& t : tensors) ts.push_back(t);
  bool plain = !ts.empty() && ts[0].defined() && ts[0].dim() >= 1;
  const auto d = plain ? wrapDim(dim, ts[0].dim()) : std::nullopt;
  plain = plain && d;
  int64_t total = 0;
  for (size_t k = 0; plain && k < ts.size(); ++k) {
    const at::Tensor& t = ts[k];
    plain = small(t, Dtypes::kAny) && t.scalar_type() == ts[0].scalar_type() && t.device() == ts[0].device() &&
            t.dim() == ts[0].dim();
    for (int64_t i = 0; plain && i < t.dim(); ++i) plain = i == *d || t.size(i) == ts[0].size(i);
    total += plain ? t.size(*d) : 0;
  }
  if (plain) {
    std::vector<int64_t> sizes = ts[0].sizes().vec();
    sizes[*d] = total;
    plain = c10::multiply_integers(sizes) <= at::internal::GRAIN_SIZE;
  }
  if (!plain) return boxedFallbackCall(h, {ts, dim});
  std::vector<int64_t> sizes = ts[0].sizes().vec();
  sizes[*d] = total;
  c10::DeviceGuard guard(ts[0].device());
  at::Tensor out = emptyDevice(sizes, ts[0].scalar_type());
  std::vector<Operand> ins;
  std::vector<std::vector<int64_t>> in_sizes;
  for (const at::Tensor& t : ts) {
    ins.emplace_back(t);
    in_sizes.push_back(t.sizes().vec());
  }
  launchOnCurrentStream(ts[0].device().index(), "aten::cat",
                        [ins = std::move(ins), in_sizes = std::move(in_sizes), d = *d, res = Operand(out), sizes] {
                          static const auto op = handle("aten::cat", "out")
                                                     .typed<at::Tensor&(const at::ITensorListRef&, int64_t, at::Tensor&)>();
                          std::vector<at::Tensor> hosts;
                          for (size_t k = 0; k < ins.size(); ++k) hosts.push_back(ins[k].host(in_sizes[k]));
                          at::Tensor o = res.host(sizes);
                          op.redispatch(kCPUKeys, at::ITensorListRef(hosts), d, o);
                        });
  return out;
}

}  // namespace

std::optional<at::Tensor> smallVectorNorm(const at::Tensor& x, const c10::Scalar& ord, at::OptionalIntArrayRef dim,
                                          bool keepdim, std::optional<at::ScalarType> dtype) {
  if (!small(x) || (dtype && *dtype != x.scalar_type()) || ord.isComplex() || ord.isBoolean()) return std::nullopt;
  const auto sizes = reducedSizes(x, dim, keepdim);
  if (!sizes) return std::nullopt;
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDevice(*sizes, x.scalar_type());
  std::optional<std::vector<int64_t>> dims;
  if (dim) dims = dim->vec();
  launchOnCurrentStream(x.device().index(), "aten::linalg_vector_norm",
                        [in = Operand(x), xs = x.sizes().vec(), ord, dims, keepdim, res = Operand(out), sizes = *sizes] {
                          static const auto op = handle("aten::linalg_vector_norm", "out")
                                                     .typed<at::Tensor&(const at::Tensor&, const c10::Scalar&,
                                                                        at::OptionalIntArrayRef, bool,
                                                                        std::optional<at::ScalarType>, at::Tensor&)>();
                          at::Tensor o = res.host(sizes);
                          op.redispatch(kCPUKeys, in.host(xs), ord, dims ? at::OptionalIntArrayRef(*dims) : std::nullopt,
                                        keepdim, std::nullopt, o);
                        });
  return out;
}

std::optional<std::tuple<at::Tensor, at::Tensor>> smallExtremumDim(bool max, const at::Tensor& x, int64_t dim,
                                                                  bool keepdim) {
  if (!x.defined() || !small(x, Dtypes::kIntegral)) return std::nullopt;
  const auto sizes = reducedSizes(x, at::IntArrayRef(dim), keepdim);
  if (!sizes) return std::nullopt;
  c10::DeviceGuard guard(x.device());
  at::Tensor values = emptyDevice(*sizes, x.scalar_type()), indices = emptyDevice(*sizes, at::kLong);
  launchOnCurrentStream(x.device().index(), max ? "aten::max" : "aten::min",
                        [max, in = Operand(x), xs = x.sizes().vec(), dim, keepdim, v = Operand(values),
                         i = Operand(indices), sizes = *sizes] {
                          using Out = std::tuple<at::Tensor&, at::Tensor&>(const at::Tensor&, int64_t, bool, at::Tensor&,
                                                                           at::Tensor&);
                          static const auto maxOut = handle("aten::max", "dim_max").typed<Out>();
                          static const auto minOut = handle("aten::min", "dim_min").typed<Out>();
                          at::Tensor hv = v.host(sizes), hi = i.host(sizes);
                          (max ? maxOut : minOut).redispatch(kCPUKeys, in.host(xs), dim, keepdim, hv, hi);
                        });
  return std::make_tuple(values, indices);
}

std::optional<at::Tensor> smallSoftmax(bool log, const at::Tensor& x, int64_t dim, bool half_to_float) {
  if (half_to_float || !small(x) || !wrapDim(dim, x.dim())) return std::nullopt;
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDeviceLike(x);
  launchOnCurrentStream(x.device().index(), log ? "aten::_log_softmax" : "aten::_softmax",
                        [log, in = Operand(x), sizes = x.sizes().vec(), dim, res = Operand(out)] {
                          using Out = at::Tensor&(const at::Tensor&, int64_t, bool, at::Tensor&);
                          static const auto softmax = handle("aten::_softmax", "out").typed<Out>();
                          static const auto log_softmax = handle("aten::_log_softmax", "out").typed<Out>();
                          at::Tensor o = res.host(sizes);
                          (log ? log_softmax : softmax).redispatch(kCPUKeys, in.host(sizes), dim, false, o);
                        });
  return out;
}

std::optional<at::Tensor> smallSoftmaxBackward(bool log, const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                               at::ScalarType input_dtype) {
  if (!alike(grad, output) || input_dtype != output.scalar_type() || !wrapDim(dim, output.dim())) return std::nullopt;
  c10::DeviceGuard guard(output.device());
  at::Tensor out = emptyDeviceLike(output);
  launchOnCurrentStream(
      output.device().index(), log ? "aten::_log_softmax_backward_data" : "aten::_softmax_backward_data",
      [log, g = Operand(grad), y = Operand(output), sizes = output.sizes().vec(), dim, input_dtype, res = Operand(out)] {
        using Out = at::Tensor&(const at::Tensor&, const at::Tensor&, int64_t, at::ScalarType, at::Tensor&);
        static const auto softmax = handle("aten::_softmax_backward_data", "out").typed<Out>();
        static const auto log_softmax = handle("aten::_log_softmax_backward_data", "out").typed<Out>();
        at::Tensor o = res.host(sizes);
        (log ? log_softmax : softmax).redispatch(kCPUKeys, g.host(sizes), y.host(sizes), dim, input_dtype, o);
      });
  return out;
}

std::optional<at::Tensor> smallCumulative(bool prod, const at::Tensor& x, int64_t dim,
                                          std::optional<at::ScalarType> dtype) {
  if (!x.defined() || !wrapDim(dim, x.dim())) return std::nullopt;
  std::optional<at::ScalarType> result;
  if (floatingDtype(x.scalar_type()) && small(x) && (!dtype || *dtype == x.scalar_type())) result = x.scalar_type();
  else if (!floatingDtype(x.scalar_type()) && small(x, Dtypes::kAny) && (!dtype || *dtype == at::kLong)) result = at::kLong;
  if (!result) return std::nullopt;
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDevice(x.sizes(), *result);
  launchOnCurrentStream(x.device().index(), prod ? "aten::cumprod" : "aten::cumsum",
                        [prod, in = Operand(x), sizes = x.sizes().vec(), dim, res = Operand(out)] {
                          using Out = at::Tensor&(const at::Tensor&, int64_t, std::optional<at::ScalarType>, at::Tensor&);
                          static const auto cumsum = handle("aten::cumsum", "out").typed<Out>();
                          static const auto cumprod = handle("aten::cumprod", "out").typed<Out>();
                          at::Tensor o = res.host(sizes);
                          (prod ? cumprod : cumsum).redispatch(kCPUKeys, in.host(sizes), dim, std::nullopt, o);
                        });
  return out;
}

std::optional<at::Tensor> smallGelu(const at::Tensor& x, c10::string_view approximate) {
  if (!small(x) || (approximate != "none" && approximate != "tanh")) return std::nullopt;
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDeviceLike(x);
  launchOnCurrentStream(x.device().index(), "aten::gelu",
                        [in = Operand(x), tanh = approximate == "tanh", res = Operand(out)] {
                          static const auto op = handle("aten::gelu", "out")
                                                     .typed<at::Tensor&(const at::Tensor&, c10::string_view, at::Tensor&)>();
                          at::Tensor o = res.host();
                          op.redispatch(kCPUKeys, in.host(), tanh ? "tanh" : "none", o);
                        });
  return out;
}

std::optional<at::Tensor> smallGeluBackward(const at::Tensor& grad, const at::Tensor& x, c10::string_view approximate) {
  if (!alike(grad, x) || (approximate != "none" && approximate != "tanh")) return std::nullopt;
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDeviceLike(x);
  launchOnCurrentStream(x.device().index(), "aten::gelu_backward",
                        [g = Operand(grad), in = Operand(x), tanh = approximate == "tanh", res = Operand(out)] {
                          static const auto op =
                              handle("aten::gelu_backward", "grad_input")
                                  .typed<at::Tensor&(const at::Tensor&, const at::Tensor&, c10::string_view, at::Tensor&)>();
                          at::Tensor o = res.host();
                          op.redispatch(kCPUKeys, g.host(), in.host(), tanh ? "tanh" : "none", o);
                        });
  return out;
}

std::optional<at::Tensor> smallArgExtremum(bool max, const at::Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (!x.defined() || !small(x, Dtypes::kIntegral)) return std::nullopt;
  const auto reduced_sizes = reducedSizes(x, dim ? at::OptionalIntArrayRef(*dim) : std::nullopt, keepdim);
  if (!reduced_sizes) return std::nullopt;
  const std::vector<int64_t>& sizes = *reduced_sizes;
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDevice(sizes, at::kLong);
  launchOnCurrentStream(x.device().index(), max ? "aten::argmax" : "aten::argmin",
                        [max, in = Operand(x), xs = x.sizes().vec(), dim, keepdim, res = Operand(out), sizes] {
                          using Out = at::Tensor&(const at::Tensor&, std::optional<int64_t>, bool, at::Tensor&);
                          static const auto argmax = handle("aten::argmax", "out").typed<Out>();
                          static const auto argmin = handle("aten::argmin", "out").typed<Out>();
                          at::Tensor o = res.host(sizes);
                          (max ? argmax : argmin).redispatch(kCPUKeys, in.host(xs), dim, keepdim, o);
                        });
  return out;
}

const std::unordered_set<std::string>& unboxedOps() {
  static const std::unordered_set<std::string> ops = [] {
    std::unordered_set<std::string> s = {"add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor",
                                         "add_.Tensor", "sub_.Tensor", "mul_.Tensor", "div_.Tensor"};
    for (const char* n : kUnaryOps) {
      s.insert(n);
      s.insert(std::string(n) + "_");
    }
    for (const auto& b : kBinaryOps) s.insert(qualified(b.name, b.overload));
    for (const auto& b : kScalarOps) s.insert(qualified(b.name, b.overload));
    for (const char* n : {"sum", "any", "all", "amax", "amin", "clamp", "addcmul_", "addcdiv_", "lerp_.Scalar", "lerp.Scalar",
                          "bitwise_not", "logical_not", "where.self", "masked_fill_.Scalar", "sum.dim_IntList",
                          "mean.dim", "isnan", "rsub.Tensor", "floor_divide", "max", "min", "index_select",
                          "clamp.Tensor", "lerp.Tensor", "addcmul", "addcdiv", "var.correction",
                          "std.correction", "prod", "prod.dim_int", "cat"})
      s.insert(n);
    s.insert(activationOps().begin(), activationOps().end());
    s.insert(reductionOps().begin(), reductionOps().end());
    s.insert(softmaxOps().begin(), softmaxOps().end());
    s.insert(normOps().begin(), normOps().end());
    s.insert(indexedOps().begin(), indexedOps().end());
    for (const char* n : kCompareOps) {
      s.insert(std::string(n) + ".Tensor");
      s.insert(std::string(n) + ".Scalar");
    }
    return s;
  }();
  return ops;
}

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("add.Tensor", &add);
  m.impl("sub.Tensor", &sub);
  m.impl("mul.Tensor", &mul);
  m.impl("div.Tensor", &div);
  m.impl("add_.Tensor", &add_);
  m.impl("sub_.Tensor", &sub_);
  m.impl("mul_.Tensor", &mul_);
  m.impl("div_.Tensor", &div_);
  registerUnary(m, std::make_index_sequence<kNumUnary>());
  registerBinary(m, std::make_index_sequence<kNumBinary>());
  registerCompare(m, std::make_index_sequence<kNumCompare>());
  registerScalar(m, std::make_index_sequence<kNumScalar>());
  m.impl("sum", &sum);
  m.impl("any", &anyAll<true>);
  m.impl("all", &anyAll<false>);
  m.impl("amax", &amax);
  m.impl("amin", &amin);
  m.impl("clamp", &clamp);
  m.impl("addcmul_", &addcop_<false>);
  m.impl("addcdiv_", &addcop_<true>);
  m.impl("lerp_.Scalar", &lerp_);
  m.impl("lerp.Scalar", &lerp);
  m.impl("bitwise_not", &negation<true>);
  m.impl("logical_not", &negation<false>);
  m.impl("where.self", &where);
  m.impl("masked_fill_.Scalar", &maskedFill_);
  m.impl("sum.dim_IntList", &reduceDims<false>);
  m.impl("mean.dim", &reduceDims<true>);
  m.impl("isnan", &isnan);
  m.impl("rsub.Tensor", &rsub);
  m.impl("floor_divide", &floorDivide);
  m.impl("max", &extremumAll<true>);
  m.impl("min", &extremumAll<false>);
  m.impl("index_select", &indexSelect);
  m.impl("clamp.Tensor", &clampTensors);
  m.impl("lerp.Tensor", &lerpTensor);
  m.impl("addcmul", &addcop<false>);
  m.impl("addcdiv", &addcop<true>);
  m.impl("var.correction", &varStd<false>);
  m.impl("std.correction", &varStd<true>);
  m.impl("prod", &prodAll);
  m.impl("prod.dim_int", &prodDim);
  m.impl("cat", &catSmall);
}

}  // namespace openmtia
