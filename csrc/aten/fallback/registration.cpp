// What the fallback registers beyond its boxed fallback: CPU's kernels for
// ops whose composite kernel would run on mtia otherwise, and the structured
// ops' (lists for `python -m openmtia.ops`).
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <vector>

#include "aten/convolution.h"
#include "aten/fallback/fallback.h"
#include "aten/pointwise.h"
#include "structured_ops.h"

namespace openmtia {

// Ops with both a CPU kernel and a CompositeExplicitAutograd kernel would get
// the composite one on mtia: for convolution it sends non-CPU/CUDA backends to
// an unimplemented *_overrideable op (convolution.cpp registers those, with
// contiguous operands); for the others it is a different
// decomposition (e.g. math_group_norm) whose low-precision results differ from
// CPU's. Run the CPU kernel instead. (tests/test_ops.py checks this list is
// complete for the installed torch.) Also composite kernels that reject
// devices other than CPU/CUDA/XPU (mode.values), or that call a CPU/CUDA
// DispatchStub directly ("DispatchStub: missing kernel for mtia":
// conj_physical_, which torch.svd(out=) of complex inputs calls), found by
// conformance/.
const char* const kCpuKernelOverComposite[] = {
    "_stack", "_stack.out", "addr", "addr.out",
    "all.dims", "all.dims_out", "any.dims", "any.dims_out", "conj_physical_", "linalg__powsum", "native_group_norm",
    "native_layer_norm", "mode.values", "narrow_copy", "pixel_shuffle", "pixel_unshuffle"};

std::vector<std::string> cpuKernelOverCompositeOps() {
  std::vector<std::string> out;
  for (const char* name : kCpuKernelOverComposite) out.push_back(std::string("aten::") + name);
  for (const char* name : kConvolutionOps) out.push_back(std::string("aten::") + name);
  return out;
}

std::vector<std::string> structuredOps() {
  std::vector<std::string> out;
  for (const auto& op : kStructuredOps)
    out.push_back(std::string(op.name) + (*op.overload ? std::string(".") + op.overload : std::string()));
  return out;
}

// torch._foreach_* (what optimizers call with foreach=True, mtia's default,
// as CUDA's): one task over the whole list running CPU's kernel, instead of
// the composite kernel's launch per tensor (AdamW over 24 parameters: 192
// launches a step). A list spanning devices takes the composite kernel, as
// on CUDA (its slow path: per tensor, each pair on its own device).
namespace {

std::vector<std::string> foreachOps() {
  std::vector<std::string> out;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::_foreach_", 0) != 0) continue;
    out.push_back(name.name + (name.overload_name.empty() ? std::string() : "." + name.overload_name));
  }
  return out;
}

void foreachKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  std::optional<c10::Device> device;
  bool one_device = true;
  auto see = [&](const at::Tensor& t) {
    if (!t.defined() || (t.dim() == 0 && t.is_cpu())) return;  // (a 0-dim CPU scalar goes with any list)
    if (!device) device = t.device();
    else if (t.device() != *device) one_device = false;
  };
  for (size_t i = stack->size() - n; i < stack->size() && one_device; ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor()) see(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList()) see(t);
  }
  if (one_device) return mtiaFallback(op, keys, stack);
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CompositeExplicitAutograd), stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  for (const std::string& name : foreachOps()) {
    m.impl(name.substr(6).c_str(), torch::CppFunction::makeFromBoxedFunction<&foreachKernel>());
  }
  for (const char* name : kCpuKernelOverComposite) {
    if (unboxedOps().count(name)) continue;  // an unboxed kernel's (low_precision_norm.cpp), which falls back here
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&mtiaFallback>());
  }
  // Structured ops: the CPU kernel, not CompositeExplicitAutogradNonFunctional.
  for (const auto& op : kStructuredOps) {
    std::string name = std::string(op.name).substr(6);  // without "aten::"
    if (*op.overload) name += std::string(".") + op.overload;
    if (unboxedOps().count(name)) continue;  // pointwise.cpp's kernel (which falls back here)
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&mtiaFallback>());
  }
}

}  // namespace openmtia
