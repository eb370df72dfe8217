// bf16/fp16 layer_norm forward and backward (see low_precision_norm.h).
#include "low_precision_norm.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <tuple>
#include <vector>

#include "common.h"
#include "low_precision_kernels.h"

namespace openmtia {
namespace {

std::atomic<int64_t> g_calls{0};

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// CPU's kernel of `op` through the fallback (op: a handle of static lifetime).
Outputs fallback(const c10::OperatorHandle& op, std::vector<c10::IValue> args) {
  torch::jit::Stack stack(std::move(args));
  boxedFallback(op, &stack);
  auto out = [&](size_t i) { return stack[i].isTensor() ? stack[i].toTensor() : at::Tensor(); };
  return {out(0), out(1), out(2)};
}

// The row length: the normalized dims are input's trailing ones, weight and
// bias (where defined) contiguous of input's dtype, device and those sizes.
// 0 where the loops do not take the call.
int64_t rowLength(const at::Tensor& input, at::IntArrayRef normalized, const std::optional<at::Tensor>& weight,
                  const std::optional<at::Tensor>& bias) {
  const int64_t k = static_cast<int64_t>(normalized.size());
  if (k < 1 || k > input.dim() || !input.sizes().slice(input.dim() - k).equals(normalized)) return 0;
  for (const auto* p : {&weight, &bias}) {
    if (!p->has_value() || !(*p)->defined()) continue;
    const at::Tensor& t = **p;
    if (t.scalar_type() != input.scalar_type() || t.device() != input.device() || !t.is_contiguous() ||
        t.is_neg() || !t.sizes().equals(normalized))
      return 0;
  }
  int64_t n = 1;
  for (int64_t d : normalized) n *= d;
  return n;
}

const uint16_t* bits(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? static_cast<const uint16_t*>(t->const_data_ptr()) : nullptr;
}

// n bf16/fp16 elements at p in float32 (p null: none, empty).
std::vector<float> widenedAll(const uint16_t* p, bool bf16, int64_t n) {
  std::vector<float> out;
  if (p) {
    out.resize(n);
    widenLoop(bf16, p, out.data(), n);
  }
  return out;
}

uint16_t rounded(float v, bool bf16) { return bf16 ? c10::BFloat16(v).x : c10::Half(v).x; }
float widened(uint16_t v, bool bf16) {
  return bf16 ? static_cast<float>(c10::BFloat16(v, c10::BFloat16::from_bits()))
              : static_cast<float>(c10::Half(v, c10::Half::from_bits()));
}

Outputs layerNorm(const at::Tensor& input, c10::SymIntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
                  const std::optional<at::Tensor>& bias, double eps) {
  const auto normalized = C10_AS_INTARRAYREF_SLOW(normalized_shape);
  const int64_t n = loopsTake(input) ? rowLength(input, normalized, weight, bias) : 0;
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_layer_norm", "");
  if (n == 0) return fallback(op, {input, normalized_shape, weight, bias, eps});
  c10::DeviceGuard guard(input.device());
  std::vector<int64_t> stat_sizes(input.sizes().begin(), input.sizes().end() - normalized.size());
  stat_sizes.resize(input.dim(), 1);
  at::Tensor out = emptyDeviceLike(input), mean = emptyDevice(stat_sizes, input.scalar_type()),
             rstd = emptyDevice(stat_sizes, input.scalar_type());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = input.scalar_type() == at::kBFloat16;
  const int64_t rows = input.numel() / n;
  const auto* xp = static_cast<const uint16_t*>(input.const_data_ptr());
  const uint16_t *wp = bits(weight), *bp = bits(bias);
  auto* yp = static_cast<uint16_t*>(out.data_ptr());
  auto* mp = static_cast<uint16_t*>(mean.data_ptr());
  auto* rp = static_cast<uint16_t*>(rstd.data_ptr());
  launchOnCurrentStream(input.device().index(), "aten::native_layer_norm", [=] {
    useKernelThreads(rows * n * 2);
    const std::vector<float> wf = widenedAll(wp, bf16, n), bf = widenedAll(bp, bf16, n);
    forEachThread(rows, [&](int64_t first, int64_t last) {
      std::vector<float> scratch(n);
      for (int64_t r = first; r < last; ++r) {
        float m, s;
        layerNormLoop(bf16, xp + r * n, wf.empty() ? nullptr : wf.data(), bf.empty() ? nullptr : bf.data(), eps,
                      yp + r * n, n, scratch.data(), &m, &s);
        mp[r] = rounded(m, bf16);
        rp[r] = rounded(s, bf16);
      }
    });
  });
  return {out, mean, rstd};
}

Outputs layerNormBackward(const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                          const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias, std::array<bool, 3> mask) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_layer_norm_backward", "");
  const auto normalized = C10_AS_INTARRAYREF_SLOW(normalized_shape);
  const bool has_w = weight.has_value() && weight->defined(), has_b = bias.has_value() && bias->defined();
  int64_t n = loopsTake(input, grad_out) ? rowLength(input, normalized, weight, bias) : 0;
  const int64_t rows = n ? input.numel() / n : 0;
  for (const at::Tensor* s : {&mean, &rstd})
    if (s->scalar_type() != input.scalar_type() || s->device() != input.device() || !s->is_contiguous() ||
        s->numel() != rows)
      n = 0;
  if ((mask[1] && !has_w) || (mask[2] && !has_b)) n = 0;
  if (n == 0)
    return fallback(op, {grad_out, input, normalized_shape, mean, rstd, weight, bias, c10::List<bool>({mask[0], mask[1], mask[2]})});
  c10::DeviceGuard guard(input.device());
  at::Tensor dx = mask[0] ? emptyDeviceLike(input) : at::Tensor();
  at::Tensor dw = mask[1] ? emptyDeviceLike(*weight) : at::Tensor();
  at::Tensor db = mask[2] ? emptyDeviceLike(*bias) : at::Tensor();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = input.scalar_type() == at::kBFloat16;
  const auto* gp = static_cast<const uint16_t*>(grad_out.const_data_ptr());
  const auto* xp = static_cast<const uint16_t*>(input.const_data_ptr());
  const auto* mp = static_cast<const uint16_t*>(mean.const_data_ptr());
  const auto* rp = static_cast<const uint16_t*>(rstd.const_data_ptr());
  const uint16_t* wp = bits(weight);
  auto* dxp = mask[0] ? static_cast<uint16_t*>(dx.data_ptr()) : nullptr;
  auto* dwp = mask[1] ? static_cast<uint16_t*>(dw.data_ptr()) : nullptr;
  auto* dbp = mask[2] ? static_cast<uint16_t*>(db.data_ptr()) : nullptr;
  launchOnCurrentStream(input.device().index(), "aten::native_layer_norm_backward", [=] {
    useKernelThreads(rows * n * 3);
    // (the weight and bias gradients: per range of rows in float32, then added)
    std::vector<float> dw_sum(dwp ? n : 0, 0.f), db_sum(dbp ? n : 0, 0.f);
    std::mutex sums;
    const std::vector<float> wf = widenedAll(wp, bf16, n);
    forEachThread(rows, [&](int64_t first, int64_t last) {
      std::vector<float> dw_part(dw_sum.size(), 0.f), db_part(db_sum.size(), 0.f), scratch(2 * n);
      float* dwq = dwp ? dw_part.data() : nullptr;
      float* dbq = dbp ? db_part.data() : nullptr;
      for (int64_t r = first; r < last; ++r)
        layerNormBackwardLoop(bf16, gp + r * n, xp + r * n, wf.empty() ? nullptr : wf.data(), widened(mp[r], bf16),
                              widened(rp[r], bf16), n, scratch.data(), dxp ? dxp + r * n : nullptr, dwq, dbq);
      if (!dwq && !dbq) return;
      std::lock_guard<std::mutex> lock(sums);
      for (int64_t j = 0; j < static_cast<int64_t>(dw_part.size()); ++j) dw_sum[j] += dw_part[j];
      for (int64_t j = 0; j < static_cast<int64_t>(db_part.size()); ++j) db_sum[j] += db_part[j];
    });
    if (dwp) narrowLoop(bf16, dw_sum.data(), dwp, n);
    if (dbp) narrowLoop(bf16, db_sum.data(), dbp, n);
  });
  return {dx, dw, db};
}

}  // namespace

const std::unordered_set<std::string>& normOps() {
  static const std::unordered_set<std::string> ops = {"native_layer_norm", "native_layer_norm_backward"};
  return ops;
}

int64_t fusedNormCalls() { return g_calls.load(); }

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("native_layer_norm", &layerNorm);
  m.impl("native_layer_norm_backward", &layerNormBackward);
}

}  // namespace openmtia
