// bf16/fp16 layer_norm forward and backward (see low_precision/norm.h).
#include "openmtia/runtime.h"
#include "aten/fallback/fallback.h"
#include "aten/low_precision/kernels.h"
#include "aten/low_precision/norm.h"
#include "aten/ops.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/stream.h"

#include <ATen/OpMathType.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_fused_rms_norm_compositeimplicitautograd_dispatch.h>
#include <ATen/TensorOperators.h>
#include <ATen/TensorSubclassLikeUtils.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <mutex>
#include <tuple>
#include <vector>


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

// The sizes of a norm's per-row statistics (mean, rstd): input's, each
// normalized dim kept as 1.
std::vector<int64_t> statSizes(const at::Tensor& input, at::IntArrayRef normalized) {
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end() - normalized.size());
  sizes.resize(input.dim(), 1);
  return sizes;
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


Outputs layerNorm(const at::Tensor& input, c10::SymIntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
                  const std::optional<at::Tensor>& bias, double eps) {
  const auto normalized = C10_AS_INTARRAYREF_SLOW(normalized_shape);
  const int64_t n = loopsTake(input) ? rowLength(input, normalized, weight, bias) : 0;
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_layer_norm", "");
  if (n == 0) return fallback(op, {input, normalized_shape, weight, bias, eps});
  c10::DeviceGuard guard(input.device());
  const std::vector<int64_t> stat_sizes = statSizes(input, normalized);
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
        mp[r] = roundedOne(bf16, m);
        rp[r] = roundedOne(bf16, s);
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
        layerNormBackwardLoop(bf16, gp + r * n, xp + r * n, wf.empty() ? nullptr : wf.data(), widenedOne(bf16, mp[r]),
                              widenedOne(bf16, rp[r]), n, scratch.data(), dxp ? dxp + r * n : nullptr, dwq, dbq);
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

// rms_norm: torch.rms_norm calls _fused_rms_norm, whose CPU kernel is its
// composite (casts and five ops, 2.1-2.5x float32's time in bf16/fp16). On
// mtia the loops run a bf16/fp16 input they take, in one pass each way; the
// rest keeps the composite (forward) and torch's decomposition of
// _fused_rms_norm_backward in ATen ops (backward).
// The row length where the loops take rms_norm of `input` (else 0).
int64_t rmsRow(const at::Tensor& input, at::IntArrayRef normalized, const std::optional<at::Tensor>& weight) {
  return loopsTake(input) ? rowLength(input, normalized, weight, std::nullopt) : 0;
}

std::tuple<at::Tensor, at::Tensor> rmsNorm(const at::Tensor& input, at::IntArrayRef normalized,
                                           const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  const int64_t n = rmsRow(input, normalized, weight);
  if (n == 0) return at::compositeimplicitautograd::_fused_rms_norm(input, normalized, weight, eps);
  c10::DeviceGuard guard(input.device());
  at::Tensor out = emptyDeviceLike(input), rstd = emptyDevice(statSizes(input, normalized), at::kFloat);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = input.scalar_type() == at::kBFloat16;
  const int64_t rows = input.numel() / n;
  const auto e = static_cast<float>(eps.value_or(std::numeric_limits<float>::epsilon()));
  const auto* xp = static_cast<const uint16_t*>(input.const_data_ptr());
  const uint16_t* wp = bits(weight);
  auto* yp = static_cast<uint16_t*>(out.data_ptr());
  auto* rp = rstd.data_ptr<float>();
  launchOnCurrentStream(input.device().index(), "aten::_fused_rms_norm", [=] {
    useKernelThreads(rows * n * 2);
    const std::vector<float> wf = widenedAll(wp, bf16, n);
    forEachThread(rows, [&](int64_t first, int64_t last) {
      std::vector<float> scratch(n);
      for (int64_t r = first; r < last; ++r)
        rmsNormLoop(bf16, xp + r * n, wf.empty() ? nullptr : wf.data(), e, yp + r * n, n, scratch.data(), rp + r);
    });
  });
  return {out, rstd};
}

// torch's decomposition of _fused_rms_norm_backward, in ATen ops.
std::tuple<at::Tensor, at::Tensor> rmsNormBackwardOps(const at::Tensor& grad_out, const at::Tensor& input,
                                                      at::IntArrayRef normalized, const at::Tensor& rstd,
                                                      const std::optional<at::Tensor>& weight, std::array<bool, 2> mask) {
  const bool has_w = weight.has_value() && weight->defined();
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized.size());
  std::vector<int64_t> inner, outer;
  int64_t rows = 1, n = 1;
  for (int64_t d = 0; d < input.dim(); ++d) {
    (d >= axis ? inner : outer).push_back(d);
    (d >= axis ? n : rows) *= input.size(d);
  }
  if (rows == 0 || n == 0)
    return {mask[0] ? at::zeros_like(input, at::MemoryFormat::Contiguous) : at::Tensor(),
            mask[1] ? at::zeros(input.sizes().slice(axis), input.options()) : at::Tensor()};
  const auto compute = at::toOpMathType(input.scalar_type());
  const at::Tensor g = grad_out.to(compute).contiguous(), x = input.to(compute).contiguous();
  at::Tensor r = rstd;
  while (r.dim() < x.dim()) r = r.unsqueeze(-1);
  const at::Tensor gxh = has_w ? g * weight->to(compute) : g;
  const at::Tensor xh = x * r;
  at::Tensor dx, dw;
  if (mask[0]) dx = ((gxh - (xh / n) * (xh * gxh).sum(inner, /*keepdim=*/true)) * r).to(input.scalar_type());
  if (mask[1] && has_w) dw = (outer.empty() ? g * xh : (g * xh).sum(outer)).to(input.scalar_type());
  return {dx, dw};
}

std::tuple<at::Tensor, at::Tensor> rmsNormBackward(const at::Tensor& grad_out, const at::Tensor& input,
                                                   at::IntArrayRef normalized, const at::Tensor& rstd,
                                                   const std::optional<at::Tensor>& weight, std::array<bool, 2> mask) {
  const bool has_w = weight.has_value() && weight->defined();
  int64_t n = loopsTake(input, grad_out) ? rowLength(input, normalized, weight, std::nullopt) : 0;
  const int64_t rows = n ? input.numel() / n : 0;
  if (rstd.scalar_type() != at::kFloat || rstd.device() != input.device() || !rstd.is_contiguous() ||
      rstd.numel() != rows || (mask[1] && !has_w))
    n = 0;
  if (n == 0) return rmsNormBackwardOps(grad_out, input, normalized, rstd, weight, mask);
  c10::DeviceGuard guard(input.device());
  at::Tensor dx = mask[0] ? emptyDeviceLike(input) : at::Tensor();
  at::Tensor dw = mask[1] ? emptyDeviceLike(*weight) : at::Tensor();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = input.scalar_type() == at::kBFloat16;
  const auto* gp = static_cast<const uint16_t*>(grad_out.const_data_ptr());
  const auto* xp = static_cast<const uint16_t*>(input.const_data_ptr());
  const float* rp = rstd.const_data_ptr<float>();
  const uint16_t* wp = bits(weight);
  auto* dxp = mask[0] ? static_cast<uint16_t*>(dx.data_ptr()) : nullptr;
  auto* dwp = mask[1] ? static_cast<uint16_t*>(dw.data_ptr()) : nullptr;
  launchOnCurrentStream(input.device().index(), "aten::_fused_rms_norm_backward", [=] {
    useKernelThreads(rows * n * 3);
    std::vector<float> dw_sum(dwp ? n : 0, 0.f);  // per range of rows in float32, then added
    std::mutex sums;
    const std::vector<float> wf = widenedAll(wp, bf16, n);
    forEachThread(rows, [&](int64_t first, int64_t last) {
      std::vector<float> dw_part(dw_sum.size(), 0.f), scratch(2 * n);
      float* dwq = dwp ? dw_part.data() : nullptr;
      for (int64_t r = first; r < last; ++r)
        rmsNormBackwardLoop(bf16, gp + r * n, xp + r * n, wf.empty() ? nullptr : wf.data(), rp[r], n,
                            scratch.data(), dxp ? dxp + r * n : nullptr, dwq);
      if (!dwq) return;
      std::lock_guard<std::mutex> lock(sums);
      for (int64_t j = 0; j < n; ++j) dw_sum[j] += dw_part[j];
    });
    if (dwp) narrowLoop(bf16, dw_sum.data(), dwp, n);
  });
  return {dx, dw};
}

// The autograd of rms_norm on mtia where the loops take it. The dispatcher
// gives AutogradMTIA the composite (CompositeImplicitAutograd beats the
// derivative formula for a backend outside its short list, even with an
// mtia kernel), which autograd then differentiates op by op. So this kernel
// is registered on AutogradMTIA itself: the loops forward, and backward the
// loops again, as torch's formula for _fused_rms_norm does
// (_fused_rms_norm_backward). Where that formula differentiates its
// backward (create_graph, or a gradient for rstd), the backward recomputes
// the composite and differentiates it. Other calls (a dtype, layout or
// size the loops do not take, forward AD, tracing: fake tensors, dispatch
// modes, subclasses) take the composite, as before.
class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                                                const std::optional<at::Tensor>& weight, std::vector<int64_t> normalized,
                                                std::optional<double> eps) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [out, rstd] = rmsNorm(input, normalized, weight, eps);
    ctx->save_for_backward({input, weight.value_or(at::Tensor()), rstd});
    ctx->set_materialize_grads(false);  // (an unused rstd's gradient stays undefined, not zeros)
    ctx->saved_data["normalized"] = c10::IValue(normalized);
    ctx->saved_data["eps"] = eps.has_value() ? c10::IValue(*eps) : c10::IValue();
    return {out, rstd};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1], &rstd = saved[2];
    const std::vector<int64_t> normalized = ctx->saved_data["normalized"].toIntVector();
    const bool want_w = weight.defined() && ctx->needs_input_grad(1);
    std::array<bool, 2> mask{ctx->needs_input_grad(0), want_w};
    std::optional<at::Tensor> w;
    if (weight.defined()) w = weight;
    if (c10::GradMode::is_enabled() || grads[1].defined()) {
      // the composite again over the saved inputs, differentiated (with
      // create_graph, its graph reaches the inputs': double backward)
      const c10::IValue e = ctx->saved_data["eps"];
      torch::autograd::variable_list outs, ins, gs;
      {
        at::AutoGradMode on(true);
        auto [y, r] = at::compositeimplicitautograd::_fused_rms_norm(
            input, normalized, w, e.isNone() ? std::nullopt : std::optional<double>(e.toDouble()));
        for (auto [o, g] : {std::pair{y, grads[0]}, std::pair{r, grads[1]}})
          if (g.defined() && o.requires_grad()) outs.push_back(o), gs.push_back(g);
      }
      if (mask[0]) ins.push_back(input);
      if (want_w) ins.push_back(weight);
      at::Tensor dx, dw;
      if (!outs.empty() && !ins.empty()) {
        auto r = torch::autograd::grad(outs, ins, gs, /*retain_graph=*/std::nullopt,
                                       /*create_graph=*/c10::GradMode::is_enabled(), /*allow_unused=*/true);
        if (mask[0]) dx = r[0];
        if (want_w) dw = r.back();
      }
      return {dx, dw, at::Tensor(), at::Tensor()};
    }
    if (!grads[0].defined() || (!mask[0] && !mask[1])) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    at::AutoDispatchBelowADInplaceOrView below;
    auto [dx, dw] = rmsNormBackward(grads[0].contiguous(), input, normalized, rstd, w, mask);
    return {dx, dw, at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> rmsNormAutograd(const at::Tensor& input, at::IntArrayRef normalized,
                                                   const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  const at::Tensor w = weight.has_value() ? *weight : at::Tensor();
  auto plain = [](const at::Tensor& t) {
    return !t.defined() || (!at::isTensorSubclassLike(t) && !t._fw_grad(/*level=*/0).defined());
  };
  if (rmsRow(input, normalized, weight) == 0 || !plain(input) || !plain(w) ||
      c10::impl::TorchDispatchModeTLS::any_modes_set())
    return at::compositeimplicitautograd::_fused_rms_norm(input, normalized, weight, eps);
  auto r = RmsNormFunction::apply(input, weight, normalized.vec(), eps);
  return {r[0], r[1]};
}


// ------------------------------------------------------------- group_norm

// The fewest elements per channel (HxW) the loops take: each channel is a
// call of the activation loop.
constexpr int64_t kMinChannelRun = 64;

// Whether the loops take a group_norm of `input` (N, C, *) with `group`
// groups: a loop operand (loopsTake; contiguous), N * C * HxW its elements,
// C a multiple of group, HxW >= kMinChannelRun, weight and bias (where
// defined) contiguous of its dtype and device with C elements.
bool groupNormTaken(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, int64_t N, int64_t C, int64_t HxW, int64_t group) {
  if (!loopsTake(input) || input.dim() < 2 || input.size(0) != N || input.size(1) != C || group <= 0 ||
      C % group != 0 || HxW < kMinChannelRun || N * C * HxW != input.numel())
    return false;
  for (const auto* p : {&weight, &bias}) {
    if (!p->has_value() || !(*p)->defined()) continue;
    const at::Tensor& t = **p;
    if (t.scalar_type() != input.scalar_type() || t.device() != input.device() || !t.is_contiguous() ||
        t.is_neg() || t.numel() != C)
      return false;
  }
  return true;
}

// native_group_norm: each (sample, group) row's mean and variance (float32
// partials added in double), rstd = 1 / sqrt(var + eps) in float32, then
// per channel CPU's y = x * scale + bias (scale = rstd * gamma, bias =
// -scale * mean + beta) in float32, rounded once; mean and rstd of the
// input's dtype, as CPU's. CPU's bf16/fp16 kernel took 1.4x / 2.8x
// float32's time (16x64x32x32, 8 groups, AVX2 host).
Outputs groupNorm(const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                  c10::SymInt N_, c10::SymInt C_, c10::SymInt HxW_, int64_t group, double eps) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_group_norm", "");
  const int64_t N = N_.guard_int(__FILE__, __LINE__), C = C_.guard_int(__FILE__, __LINE__),
                HxW = HxW_.guard_int(__FILE__, __LINE__);
  if (!groupNormTaken(input, weight, bias, N, C, HxW, group))
    return fallback(op, {input, weight, bias, N_, C_, HxW_, group, eps});
  c10::DeviceGuard guard(input.device());
  at::Tensor out = emptyDeviceLike(input), mean = emptyDevice({N, group}, input.scalar_type()),
             rstd = emptyDevice({N, group}, input.scalar_type());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = input.scalar_type() == at::kBFloat16;
  const int64_t D = C / group, len = D * HxW, rows = N * group;
  const auto* xp = static_cast<const uint16_t*>(input.const_data_ptr());
  const uint16_t *wp = bits(weight), *bp = bits(bias);
  auto* yp = static_cast<uint16_t*>(out.data_ptr());
  auto* mp = static_cast<uint16_t*>(mean.data_ptr());
  auto* rp = static_cast<uint16_t*>(rstd.data_ptr());
  launchOnCurrentStream(input.device().index(), "aten::native_group_norm", [=] {
    useKernelThreads(rows * len * 3);
    const std::vector<float> wf = widenedAll(wp, bf16, C), bf = widenedAll(bp, bf16, C);
    forEachThread(rows, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const uint16_t* x = xp + r * len;
        const auto m = static_cast<float>(sumLoop(bf16, x, len) / static_cast<double>(len));
        const auto var = static_cast<float>(deviationsLoop(bf16, x, m, len) / static_cast<double>(len));
        const float rs = 1.0f / std::sqrt(std::max(var, 0.0f) + static_cast<float>(eps));
        const int64_t g = r % group;
        for (int64_t d = 0; d < D; ++d) {
          const int64_t c = g * D + d;
          const float scale = wf.empty() ? rs : rs * wf[c];
          const float shift = -scale * m + (bf.empty() ? 0.0f : bf[c]);
          activationLoop(Activation::kAffine, bf16, x + d * HxW, nullptr, yp + r * len + d * HxW, HxW,
                         ActivationParams{scale, shift, 0.0f});
        }
        mp[r] = roundedOne(bf16, m);
        rp[r] = roundedOne(bf16, rs);
      }
    });
  });
  return {out, mean, rstd};
}

// native_group_norm_backward with CPU's formulas (GroupNormKernel.cpp), in
// float32: per (sample, channel) ds = sum(dy * x) and db = sum(dy) (float32
// partials added in double); per (sample, group) c2 = (db' * mean - ds') *
// rstd^3 / (D * HxW), c3 = -c2 * mean - db' * rstd / (D * HxW) (ds', db':
// the group's ds, db weighted by gamma); dx = rstd * gamma * dy + c2 * x +
// c3 rounded once; dgamma = sum over samples of (ds - db * mean) * rstd,
// dbeta = sum of db. mean and rstd: the forward's (of the input's dtype).
Outputs groupNormBackward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                          const at::Tensor& rstd, const std::optional<at::Tensor>& weight, c10::SymInt N_,
                          c10::SymInt C_, c10::SymInt HxW_, int64_t group, std::array<bool, 3> mask) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_group_norm_backward", "");
  const int64_t N = N_.guard_int(__FILE__, __LINE__), C = C_.guard_int(__FILE__, __LINE__),
                HxW = HxW_.guard_int(__FILE__, __LINE__);
  const bool has_w = weight.has_value() && weight->defined();
  bool taken = groupNormTaken(input, weight, std::nullopt, N, C, HxW, group) && loopsTake(input, grad_out) &&
               (has_w || !(mask[1] || mask[2]));
  for (const at::Tensor* t : {&mean, &rstd})
    taken = taken && t->scalar_type() == input.scalar_type() && t->device() == input.device() &&
            t->is_contiguous() && t->numel() == N * group;
  if (!taken)
    return fallback(op, {grad_out, input, mean, rstd, weight, N_, C_, HxW_, group,
                         c10::List<bool>({mask[0], mask[1], mask[2]})});
  c10::DeviceGuard guard(input.device());
  at::Tensor dx, dw, db;
  if (mask[0]) dx = emptyDeviceLike(input);
  if (mask[1]) dw = emptyDevice({C}, input.scalar_type());
  if (mask[2]) db = emptyDevice({C}, input.scalar_type());
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const bool bf16 = input.scalar_type() == at::kBFloat16;
  const int64_t D = C / group, len = D * HxW, rows = N * group;
  const auto* xp = static_cast<const uint16_t*>(input.const_data_ptr());
  const auto* gp = static_cast<const uint16_t*>(grad_out.const_data_ptr());
  const auto* mp = static_cast<const uint16_t*>(mean.const_data_ptr());
  const auto* rp = static_cast<const uint16_t*>(rstd.const_data_ptr());
  const uint16_t* wp = bits(weight);
  auto* dxp = dx.defined() ? static_cast<uint16_t*>(dx.data_ptr()) : nullptr;
  auto* dwp = dw.defined() ? static_cast<uint16_t*>(dw.data_ptr()) : nullptr;
  auto* dbp = db.defined() ? static_cast<uint16_t*>(db.data_ptr()) : nullptr;
  launchOnCurrentStream(input.device().index(), "aten::native_group_norm_backward", [=] {
    useKernelThreads(rows * len * 4);
    const std::vector<float> wf = widenedAll(wp, bf16, C);
    std::vector<float> ds(N * C), dbs(N * C);  // per (sample, channel)
    const float s = 1.0f / static_cast<float>(len);
    forEachThread(rows, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const int64_t n = r / group, g = r % group;
        const uint16_t *x = xp + r * len, *dy = gp + r * len;
        float ds_val = 0, db_val = 0;
        for (int64_t d = 0; d < D; ++d) {
          const int64_t c = g * D + d;
          ds[n * C + c] = static_cast<float>(dotLoop(bf16, dy + d * HxW, x + d * HxW, HxW));
          dbs[n * C + c] = static_cast<float>(sumLoop(bf16, dy + d * HxW, HxW));
          const float w = wf.empty() ? 1.0f : wf[c];
          ds_val += ds[n * C + c] * w;
          db_val += dbs[n * C + c] * w;
        }
        if (!dxp) continue;
        const float m = widenedOne(bf16, mp[r]), rs = widenedOne(bf16, rp[r]);
        const float c2 = (db_val * m - ds_val) * rs * rs * rs * s;
        const float c3 = -c2 * m - db_val * rs * s;
        for (int64_t d = 0; d < D; ++d) {
          const float c1 = rs * (wf.empty() ? 1.0f : wf[g * D + d]);
          activationLoop(Activation::kAffineBackward, bf16, x + d * HxW, dy + d * HxW, dxp + r * len + d * HxW, HxW,
                         ActivationParams{c1, c2, c3});
        }
      }
    });
    for (int64_t c = 0; c < C && (dwp || dbp); ++c) {
      float gw = 0, gb = 0;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t r = n * group + c / D;
        gw += (ds[n * C + c] - dbs[n * C + c] * widenedOne(bf16, mp[r])) * widenedOne(bf16, rp[r]);
        gb += dbs[n * C + c];
      }
      if (dwp) dwp[c] = roundedOne(bf16, gw);
      if (dbp) dbp[c] = roundedOne(bf16, gb);
    }
  });
  return {dx, dw, db};
}

}  // namespace

const std::unordered_set<std::string>& normOps() {
  static const std::unordered_set<std::string> ops = {"native_layer_norm", "native_layer_norm_backward",
                                                      "_fused_rms_norm", "_fused_rms_norm_backward",
                                                      "native_group_norm", "native_group_norm_backward"};
  return ops;
}

int64_t fusedNormCalls() { return g_calls.load(); }

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("native_layer_norm", &layerNorm);
  m.impl("native_layer_norm_backward", &layerNormBackward);
  m.impl("_fused_rms_norm", &rmsNorm);
  m.impl("_fused_rms_norm_backward", &rmsNormBackward);
  m.impl("native_group_norm", &groupNorm);
  m.impl("native_group_norm_backward", &groupNormBackward);
}

TORCH_LIBRARY_IMPL(aten, AutogradMTIA, m) { m.impl("_fused_rms_norm", &rmsNormAutograd); }

}  // namespace openmtia
