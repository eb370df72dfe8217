// An unboxed launch path for the hottest pointwise ops: add, sub, mul and
// div of two tensors.
//
// Tiny ops are bound by the host's launch work. The boxed fallback pays for a
// stack of IValues, a plan key and its lookup, and host views of every tensor.
// Here, when the call is the plain case, the kernel is unboxed and the task a
// loop over raw device pointers. The plain case is: two mtia tensors of one
// device, the same floating dtype, the same sizes, contiguous, at most
// GRAIN_SIZE elements (CPU runs these on one thread too), and alpha 1.
// Its results are CPU's bit for bit: one IEEE operation per element, as CPU's
// kernel computes it (`a + 1 * b` is `a + b` exactly). Every other call,
// including any call while a graph is being captured (which prebuilds CPU
// kernels), goes through the boxed fallback unchanged.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/EmptyTensor.h>
#include <ATen/TensorIterator.h>
#include <torch/library.h>

#include <unordered_set>

#include "common.h"

namespace openmtia {
namespace {

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

bool isOne(const c10::Scalar& s) {
  if (s.isIntegral(false)) return s.toLong() == 1;
  return s.isFloatingPoint() && s.toDouble() == 1.0;
}

bool plain(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || a.device().type() != kMTIA || a.device() != b.device()) return false;
  auto dtype = a.scalar_type();
  if ((dtype != at::kFloat && dtype != at::kDouble) || b.scalar_type() != dtype) return false;
  const int64_t n = a.numel();
  if (n == 0 || n > at::internal::GRAIN_SIZE || !a.sizes().equals(b.sizes())) return false;
  if (!a.is_contiguous() || !b.is_contiguous() || a.is_neg() || b.is_neg())
    return false;
  return !isCapturing(a.device().index());
}

template <Op op>
at::Tensor launch(const at::Tensor& a, const at::Tensor& b, const char* name) {
  c10::DeviceIndex dev = a.device().index();
  c10::DeviceGuard guard(a.device());
  at::Tensor out = at::detail::empty_generic(a.sizes(), deviceAllocator(), c10::DispatchKeySet(c10::DispatchKey::MTIA),
                                             a.scalar_type(), std::nullopt);
  const int64_t n = a.numel();
  if (a.scalar_type() == at::kFloat) {
    launchOnCurrentStream(dev, name, [pa = a.const_data_ptr<float>(), pb = b.const_data_ptr<float>(),
                                      po = out.mutable_data_ptr<float>(), n] { loop<op>(pa, pb, po, n); });
  } else {
    launchOnCurrentStream(dev, name, [pa = a.const_data_ptr<double>(), pb = b.const_data_ptr<double>(),
                                      po = out.mutable_data_ptr<double>(), n] { loop<op>(pa, pb, po, n); });
  }
  return out;
}

c10::OperatorHandle tensorOverload(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "Tensor");
}

// The boxed fallback, for calls that are not the plain case.
at::Tensor boxed(const c10::OperatorHandle& op, std::vector<c10::IValue> args) {
  torch::jit::Stack stack(std::move(args));
  boxedFallback(op, &stack);
  return stack.back().toTensor();
}

at::Tensor add(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  if (isOne(alpha) && plain(a, b)) return launch<Op::kAdd>(a, b, "aten::add");
  static const c10::OperatorHandle op = tensorOverload("aten::add");
  return boxed(op, {a, b, alpha});
}

at::Tensor sub(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  if (isOne(alpha) && plain(a, b)) return launch<Op::kSub>(a, b, "aten::sub");
  static const c10::OperatorHandle op = tensorOverload("aten::sub");
  return boxed(op, {a, b, alpha});
}

at::Tensor mul(const at::Tensor& a, const at::Tensor& b) {
  if (plain(a, b)) return launch<Op::kMul>(a, b, "aten::mul");
  static const c10::OperatorHandle op = tensorOverload("aten::mul");
  return boxed(op, {a, b});
}

at::Tensor div(const at::Tensor& a, const at::Tensor& b) {
  if (plain(a, b)) return launch<Op::kDiv>(a, b, "aten::div");
  static const c10::OperatorHandle op = tensorOverload("aten::div");
  return boxed(op, {a, b});
}

}  // namespace

const std::unordered_set<std::string>& unboxedOps() {
  static const std::unordered_set<std::string> ops = {"add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor"};
  return ops;
}

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("add.Tensor", &add);
  m.impl("sub.Tensor", &sub);
  m.impl("mul.Tensor", &mul);
  m.impl("div.Tensor", &div);
}

}  // namespace openmtia
