// Sparse COO tensors on mtia, on the SparseMTIA dispatch key: torch's own
// SparseTensorImpl whose members (indices, values) are strided mtia tensors.
// (Compressed layouts, CSR and the like, cannot exist on mtia with torch 2.13:
// its SparseCsrTensorImpl takes a fixed list of devices; docs/eager.md.)
// The kernels (lists: tools/gen_sparse_ops.py):
//  - shared: CPU's sparse kernel where CUDA uses the same function. Such a
//    kernel works on the members through other ops, which are mtia's strided
//    kernels here, on the current stream (asynchronous as they are);
//  - host: CPU's sparse kernel where it is CPU's alone (coalesce, sparse-dense
//    add and matmul, index_select, softmax, ...): the fallback's synchronous
//    path, over host views of the members (fallback/host_call.h), reported to
//    the profiler as a kernel of the stream;
//  - any other op raises NotImplementedError naming it (CPU has no sparse
//    kernel for it either: its dispatcher raises the same type).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "aten/fallback/host_call.h"
#include "runtime/graphs.h"
#include "sparse_ops.h"

namespace openmtia {
namespace {

// CPU's kernel, which is CUDA's too: device-generic.
void sharedKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::SparseCPU), stack);
}

// CPU's kernel over host views, after the current stream (the sparse
// results' sizes, nnz, come from the data: CUDA's kernels wait as well).
void hostKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  fallback::HostCall call(op, stack);
  const c10::DeviceIndex device = call.device();
  TORCH_CHECK(!isCapturing(device), op.schema().name(),
              " cannot be captured into an MTIAGraph: on sparse mtia tensors it runs synchronously");
  call.run(/*wait=*/true);
}

void unsupported(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "openmtia: ", op.schema().name(),
                              " is not supported on sparse COO mtia tensors (nor on CPU's)");
}

void compressedLayout(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "openmtia: ", op.schema().name(),
                              ": compressed sparse layouts (CSR, CSC, BSR, BSC) cannot be made on mtia with torch 2.13");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparseMTIA, m) {
  for (const char* name : kSparseSharedOps) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&sharedKernel>());
  for (const char* name : kSparseHostOps) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&hostKernel>());
}

TORCH_LIBRARY_IMPL(_, SparseMTIA, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&unsupported>()); }
TORCH_LIBRARY_IMPL(_, SparseCsrMTIA, m) {  // (factories given layout=torch.sparse_csr and an mtia device)
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&compressedLayout>());
}

}  // namespace openmtia
