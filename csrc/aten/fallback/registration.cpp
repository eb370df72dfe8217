// What the fallback registers beyond its boxed fallback: CPU's kernels for
// ops whose composite kernel would run on mtia otherwise, and the structured
// ops' (lists for `python -m openmtia.ops`).
#include <torch/library.h>

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

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
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
