// scaled_dot_product_attention on mtia picks its backend as CPU does.
//
// torch's sdpa asks _fused_sdp_choice_stub for a backend where the stub has
// an entry for the query's device type; without one (mtia had none) it runs
// the math backend, which upcasts bf16/fp16 q, k and v to float32 and keeps
// the whole attention matrix: bf16 took 1.11-1.15x float32's time on an
// AVX2 host. mtia's entry is CPU's choice function: flash where the inputs
// allow it (CPU's flash kernel, _scaled_dot_product_flash_attention_for_cpu,
// and its backward, run on mtia through the fallback), math otherwise, and
// what torch.nn.attention.sdpa_kernel allows. So mtia runs the kernel CPU
// runs (CPU's results), without the attention matrix in device memory.
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

namespace at::native {
namespace {

int64_t mtiaSdpChoice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                      const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                      std::optional<double> scale, bool enable_gqa) {
  // (CPU's function reads the tensors' metadata only. Not through the
  // stub's CPU entry: the stub's call path is built with CPU-capability
  // macros this build does not share.)
  return _fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace

REGISTER_MTIA_DISPATCH(_fused_sdp_choice_stub, &mtiaSdpChoice)

}  // namespace at::native
