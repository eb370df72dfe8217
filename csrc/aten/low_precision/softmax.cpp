// bf16/fp16 softmax and log_softmax backward (see low_precision/softmax.h).
#include "openmtia/runtime.h"
#include "aten/fallback/fallback.h"
#include "aten/low_precision/kernels.h"
#include "aten/low_precision/softmax.h"
#include "aten/ops.h"
#include "aten/small_ops.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/stream.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <atomic>
#include <vector>


namespace openmtia {
namespace {

std::atomic<int64_t> g_calls{0};

template <bool kLog>
at::Tensor backward(const at::Tensor& grad, const at::Tensor& out, int64_t dim, at::ScalarType input_dtype) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(
      kLog ? "aten::_log_softmax_backward_data" : "aten::_softmax_backward_data", "");
  if (trailingDims(out, dim) != 1 || input_dtype != out.scalar_type() || !loopsTake(out, grad)) {
    if (auto small = smallSoftmaxBackward(kLog, grad, out, dim, input_dtype)) return *small;
    return boxedFallbackCall(op, {grad, out, dim, input_dtype});
  }
  c10::DeviceGuard guard(out.device());
  at::Tensor result = emptyDeviceLike(out);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* gp = static_cast<const uint16_t*>(grad.data_ptr());
  const auto* yp = static_cast<const uint16_t*>(out.data_ptr());
  auto* rp = static_cast<uint16_t*>(result.data_ptr());
  const int64_t n = out.numel(), cols = out.size(-1), rows = n / cols;
  const bool bf16 = out.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(out.device().index(), kLog ? "aten::_log_softmax_backward_data" : "aten::_softmax_backward_data",
                        [=] {
                          useKernelThreads(n * 3);
                          forEachThread(rows, [&](int64_t first, int64_t last) {
                            for (int64_t r = first; r < last; ++r)
                              softmaxBackwardLoop(bf16, kLog, gp + r * cols, yp + r * cols, rp + r * cols, cols);
                          });
                        });
  return result;
}

// _softmax / _log_softmax over the last dim of a tensor the loops take
// (half_to_float false: CPU's kernel raises for true).
template <bool kLog>
at::Tensor forward(const at::Tensor& x, int64_t dim, bool half_to_float) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(kLog ? "aten::_log_softmax" : "aten::_softmax", "");
  if (half_to_float || trailingDims(x, dim) != 1 || !loopsTake(x)) {
    if (auto small = smallSoftmax(kLog, x, dim, half_to_float)) return *small;
    return boxedFallbackCall(op, {x, dim, half_to_float});
  }
  c10::DeviceGuard guard(x.device());
  at::Tensor result = emptyDeviceLike(x);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  auto* rp = static_cast<uint16_t*>(result.data_ptr());
  const int64_t n = x.numel(), cols = x.size(-1), rows = n / cols;
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  launchOnCurrentStream(x.device().index(), kLog ? "aten::_log_softmax" : "aten::_softmax", [=] {
    useKernelThreads(n * 3);
    forEachThread(rows, [&](int64_t first, int64_t last) {
      std::vector<float> scratch(cols);
      for (int64_t r = first; r < last; ++r) softmaxLoop(bf16, kLog, xp + r * cols, rp + r * cols, cols, scratch.data());
    });
  });
  return result;
}

}  // namespace

const std::unordered_set<std::string>& softmaxOps() {
  static const std::unordered_set<std::string> ops = {"_softmax", "_log_softmax", "_softmax_backward_data",
                                                      "_log_softmax_backward_data"};
  return ops;
}

int64_t fusedSoftmaxCalls() { return g_calls.load(); }

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("_softmax", &forward<false>);
  m.impl("_log_softmax", &forward<true>);
  m.impl("_softmax_backward_data", &backward<false>);
  m.impl("_log_softmax_backward_data", &backward<true>);
}

}  // namespace openmtia
