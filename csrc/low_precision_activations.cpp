// The fused bf16/fp16 activation kernels (see low_precision_activations.h).
#include "low_precision_activations.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

#include <atomic>
#include <string>
#include <unordered_set>

#include "common.h"

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
  if (!kind || !fusedActivation(*kind, x)) return boxedFallbackCall(op, {x, std::string(approximate)});
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
  if (!kind || !fusedActivation(*kind, x, grad)) return boxedFallbackCall(op, {grad, x, std::string(approximate)});
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

}  // namespace

bool fusedActivation(Activation kind, const at::Tensor& x, const at::Tensor& grad) {
  return loopsTake(x, grad, /*onednn=*/kind == Activation::kGelu || kind == Activation::kGeluBackward);
}

void launchActivation(Activation kind, const at::Tensor& x, const at::Tensor& grad, const at::Tensor& out) {
  static const char* const kNames[] = {"aten::gelu",          "aten::gelu",          "aten::silu",
                                       "aten::sigmoid",       "aten::gelu_backward", "aten::gelu_backward",
                                       "aten::sigmoid_backward", "aten::tanh_backward", "aten::pow",
                                       "aten::relu", "aten::log"};
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
    const bool memory_bound = kind == Activation::kSquare || kind == Activation::kRelu;
    const int64_t work = memory_bound ? n : n * (kDenseWorkScale / 4);
    useKernelThreads(work);
    forEachThread(n, [&](int64_t begin, int64_t end) {
      activationLoop(kind, bf16, xp + begin, gp ? gp + begin : nullptr, op + begin, end - begin);
    });
  });
}

at::Tensor fusedActivationResult(Activation kind, const at::Tensor& x, const at::Tensor& grad) {
  c10::DeviceGuard guard(x.device());
  at::Tensor out = emptyDeviceLike(x);
  launchActivation(kind, x, grad, out);
  return out;
}

int64_t fusedActivationCalls() { return g_calls.load(); }

const std::unordered_set<std::string>& activationOps() {
  static const std::unordered_set<std::string> ops = {"gelu", "gelu_", "gelu_backward", "sigmoid_backward",
                                                      "tanh_backward"};
  return ops;
}

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("gelu", &gelu);
  m.impl("gelu_", &gelu_);
  m.impl("gelu_backward", &geluBackward);
  m.impl("sigmoid_backward", &sigmoidBackward);
  m.impl("tanh_backward", &tanhBackward);
}

}  // namespace openmtia
