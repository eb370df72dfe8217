// Meta functions (aten/fallback/meta_functions.h) for FBGEMM's table-batched
// embedding ops that have no C++ Meta kernel in its CPU build: the pt2
// wrappers that TorchRec's and FBGEMM's TBE modules call. On mtia, FBGEMM
// runs a TBE through these CPU op schemas (ComputeDevice.MTIA), and each
// batch has new shapes (its indices' count changes with every batch): with
// these, a new batch shape is planned here and runs asynchronously, instead
// of a synchronous first call per op and batch.
//
// What each computes is from FBGEMM's CPU wrappers (fbgemm-gpu-cpu 1.8.0):
// the pooled forward calls split_embedding_codegen_forward_cpu, whose own
// Meta kernel this calls; the backward with a fused optimizer updates the
// tables in place and returns no tensor.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "aten/fallback/meta_functions.h"

namespace openmtia {
namespace {

using torch::jit::Stack;

// Replaces the op's arguments on the stack with `results`.
void finish(const c10::OperatorHandle& op, Stack* stack, std::vector<c10::IValue> results) {
  torch::jit::drop(*stack, op.schema().arguments().size());
  for (auto& r : results) stack->push_back(std::move(r));
}

// The argument named `name` (FBGEMM's wrappers differ in which come first).
const c10::IValue& arg(const c10::OperatorHandle& op, const Stack& stack, const char* name) {
  const auto& schema = op.schema();
  auto i = schema.argumentIndexWithName(name);
  TORCH_CHECK(i.has_value(), "openmtia: ", schema.name(), " has no argument ", name);
  return stack[stack.size() - schema.arguments().size() + *i];
}

// split_embedding_codegen_forward_{weighted,unweighted}_pt2_wrapper: the CPU
// wrapper is split_embedding_codegen_forward_cpu over the host tables.
void pooledForward(const c10::OperatorHandle& op, Stack* stack) {
  static const auto forward =
      c10::Dispatcher::singleton().findSchemaOrThrow("fbgemm::split_embedding_codegen_forward_cpu", "");
  Stack call;
  for (const char* name : {"host_weights", "weights_offsets", "D_offsets", "total_D", "hash_size_cumsum", "indices",
                           "offsets", "pooling_mode", "indice_weights", "output_dtype"})
    call.push_back(arg(op, *stack, name));
  forward.callBoxed(&call);
  finish(op, stack, {std::move(call.at(0))});
}

// FBGEMM's SparseType (embedding_common.h) of a float output.
at::ScalarType outputType(int64_t sparse_type) {
  switch (sparse_type) {
    case 0: return at::kFloat;
    case 1: return at::kHalf;
    case 5: return at::kBFloat16;
    default: TORCH_CHECK(false, "openmtia: no meta function for output type ", sparse_type);
  }
}

// split_embedding_nobag_codegen_forward_unweighted_pt2_wrapper: one row of D
// per index.
void unpooledForward(const c10::OperatorHandle& op, Stack* stack) {
  const at::Tensor& indices = arg(op, *stack, "indices").toTensor();
  const int64_t D = arg(op, *stack, "D").toInt();
  at::Tensor out = at::empty({indices.numel(), D}, indices.options().dtype(outputType(
                                                       arg(op, *stack, "output_dtype").toInt())));
  finish(op, stack, {std::move(out)});
}

// split_embedding_codegen_grad_indice_weights_pt2_wrapper: a gradient per
// index, in grad_output's dtype.
void indiceWeightsGrad(const c10::OperatorHandle& op, Stack* stack) {
  const at::Tensor& indices = arg(op, *stack, "indices").toTensor();
  const at::Tensor& grad = arg(op, *stack, "grad_output").toTensor();
  at::Tensor out = at::empty({indices.numel()}, grad.options());
  finish(op, stack, {std::move(out)});
}

// bounds_check_indices (its Meta kernel is Python): it checks, and in its
// warning mode corrects, the indices' values in place; no result.
void boundsCheck(const c10::OperatorHandle& op, Stack* stack) { finish(op, stack, {}); }

// The backward wrappers with a fused optimizer: the tables and optimizer
// states are updated in place, and no gradient is returned.
void fusedBackward(const c10::OperatorHandle& op, Stack* stack) { finish(op, stack, {at::Tensor()}); }

const bool registered = [] {
  using fallback::registerMetaFunction;
  registerMetaFunction("fbgemm::bounds_check_indices", boundsCheck);
  registerMetaFunction("fbgemm::split_embedding_codegen_forward_unweighted_pt2_wrapper", pooledForward);
  registerMetaFunction("fbgemm::split_embedding_codegen_forward_weighted_pt2_wrapper", pooledForward);
  registerMetaFunction("fbgemm::split_embedding_nobag_codegen_forward_unweighted_pt2_wrapper", unpooledForward);
  registerMetaFunction("fbgemm::split_embedding_codegen_grad_indice_weights_pt2_wrapper", indiceWeightsGrad);
  for (const char* optimizer : {"sgd", "adagrad", "rowwise_adagrad", "rowwise_adagrad_with_counter", "rowwise_rmsprop_ar"}) {
    const std::string o = optimizer;
    for (const char* kind : {"unweighted", "weighted", "unweighted_vbe", "weighted_vbe"})
      registerMetaFunction("fbgemm::split_embedding_backward_codegen_" + o + "_" + kind + "_pt2_wrapper", fusedBackward);
    registerMetaFunction("fbgemm::split_embedding_nobag_backward_codegen_" + o + "_unweighted_pt2_wrapper", fusedBackward);
  }
  return true;
}();

}  // namespace
}  // namespace openmtia
