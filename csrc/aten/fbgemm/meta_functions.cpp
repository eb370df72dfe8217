// Meta functions (aten/fallback/meta_functions.h) for FBGEMM's ops that have
// no C++ Meta kernel in its CPU build, for the ops TorchRec calls on every
// batch. On mtia, FBGEMM runs a table-batched embedding (TBE) through its CPU
// op schemas (ComputeDevice.MTIA), and each batch has new shapes (its ids'
// count changes with every batch): with these, a new batch shape is planned
// here and runs asynchronously, instead of a synchronous first call per op
// and batch.
//
// What each computes is from FBGEMM's CPU kernels (fbgemm-gpu-cpu 1.8.0):
// the TBE pt2 wrappers (the pooled forward calls
// split_embedding_codegen_forward_cpu, whose own Meta kernel this calls; the
// backward with a fused optimizer updates the tables in place and returns no
// tensor), the bounds check, the KJT ops of a row-wise input
// distribution (block_bucketize_sparse_features, permute_2D_sparse_data),
// whose Meta kernels are Python, and the quantized (IntNBit) lookup of
// inference.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>
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

// An optional result: the tensor `make` gives when `present`, else None.
c10::IValue optional(bool present, const std::function<at::Tensor()>& make) {
  return present ? c10::IValue(make()) : c10::IValue();
}

// block_bucketize_sparse_features: each feature's ids split into my_size
// buckets by row blocks. New lengths per (bucket, feature, sample); the ids
// (and weights, positions, the permutation back) reordered, one per id.
void blockBucketize(const c10::OperatorHandle& op, Stack* stack) {
  const at::Tensor& lengths = arg(op, *stack, "lengths").toTensor();
  const at::Tensor& indices = arg(op, *stack, "indices").toTensor();
  const int64_t my_size = arg(op, *stack, "my_size").toInt();
  const c10::IValue& weights = arg(op, *stack, "weights");
  const bool pos = arg(op, *stack, "bucketize_pos").toBool(), sequence = arg(op, *stack, "sequence").toBool();
  const int64_t n = indices.numel();
  std::vector<c10::IValue> out;
  out.emplace_back(at::empty({lengths.numel() * my_size}, lengths.options()));
  out.emplace_back(at::empty({n}, indices.options()));
  out.push_back(optional(!weights.isNone(), [&] { return at::empty({n}, weights.toTensor().options()); }));
  out.push_back(optional(pos, [&] { return at::empty({n}, indices.options()); }));
  out.push_back(optional(sequence, [&] { return at::empty({n}, indices.options()); }));
  finish(op, stack, std::move(out));
}

// permute_2D_sparse_data: the features (rows of lengths) in `permute`'s
// order, with their values. How many values that is comes from the lengths
// (data), unless the caller gives it (permuted_lengths_sum): without it,
// no plan (the call runs synchronously, reading the lengths).
void permute2D(const c10::OperatorHandle& op, Stack* stack) {
  const at::Tensor& permute = arg(op, *stack, "permute").toTensor();
  const at::Tensor& lengths = arg(op, *stack, "lengths").toTensor();
  const at::Tensor& values = arg(op, *stack, "values").toTensor();
  const c10::IValue& weights = arg(op, *stack, "weights");
  const c10::IValue& sum = arg(op, *stack, "permuted_lengths_sum");
  TORCH_CHECK(!sum.isNone(), "openmtia: permute_2D_sparse_data without permuted_lengths_sum: its size is the data's");
  TORCH_CHECK(lengths.dim() == 2, "openmtia: permute_2D_sparse_data: lengths must be 2-D");
  const int64_t total = sum.toInt();
  std::vector<c10::IValue> out;
  out.emplace_back(at::empty({permute.numel(), lengths.size(1)}, lengths.options()));
  out.emplace_back(at::empty({total}, values.options()));
  out.push_back(optional(!weights.isNone(), [&] { return at::empty({total}, weights.toTensor().options()); }));
  finish(op, stack, std::move(out));
}

// int_nbit_split_embedding_codegen_lookup_function, the quantized (IntNBit)
// lookup of inference: pooled, a row of total_D per sample; unpooled, a row
// of the widest table's D per index. An INT8 output carries each row's
// quantization parameters after it (8 bytes per table pooled, 4 unpooled).
void intNBitLookup(const c10::OperatorHandle& op, Stack* stack) {
  const int64_t out_type = arg(op, *stack, "output_dtype").toInt();
  const bool int8 = out_type == 2;
  const at::Tensor& weights = arg(op, *stack, "dev_weights").toTensor();
  const auto options = weights.options().dtype(int8 ? at::kByte : outputType(out_type));
  if (arg(op, *stack, "pooling_mode").toInt() == 2) {  // PoolingMode.NONE
    int64_t D = 0;
    for (const char* name : {"max_int2_D", "max_int4_D", "max_int8_D", "max_float16_D", "max_float32_D"})
      D = std::max(D, arg(op, *stack, name).toInt());
    const c10::IValue& fp8 = arg(op, *stack, "max_float8_D");
    if (!fp8.isNone()) D = std::max(D, fp8.toInt());
    TORCH_CHECK(D > 0, "openmtia: an unpooled IntNBit lookup without tables");
    const int64_t rows = arg(op, *stack, "indices").toTensor().numel();
    finish(op, stack, {at::empty({rows, D + (int8 ? 4 : 0)}, options)});
    return;
  }
  const int64_t T = arg(op, *stack, "D_offsets").toTensor().numel() - 1;
  const int64_t total_D = arg(op, *stack, "total_D").toInt();
  TORCH_CHECK(T > 0 && total_D > 0, "openmtia: a pooled IntNBit lookup without tables");
  const int64_t B = (arg(op, *stack, "offsets").toTensor().size(0) - 1) / T;
  finish(op, stack, {at::empty({B, total_D + (int8 ? 8 * T : 0)}, options)});
}

// The backward wrappers with a fused optimizer: the tables and optimizer
// states are updated in place, and no gradient is returned.
void fusedBackward(const c10::OperatorHandle& op, Stack* stack) { finish(op, stack, {at::Tensor()}); }

const bool registered = [] {
  using fallback::registerMetaFunction;
  registerMetaFunction("fbgemm::bounds_check_indices", boundsCheck);
  registerMetaFunction("fbgemm::block_bucketize_sparse_features", blockBucketize);
  registerMetaFunction("fbgemm::permute_2D_sparse_data", permute2D);
  registerMetaFunction("fbgemm::split_embedding_codegen_forward_unweighted_pt2_wrapper", pooledForward);
  registerMetaFunction("fbgemm::split_embedding_codegen_forward_weighted_pt2_wrapper", pooledForward);
  registerMetaFunction("fbgemm::split_embedding_nobag_codegen_forward_unweighted_pt2_wrapper", unpooledForward);
  registerMetaFunction("fbgemm::split_embedding_codegen_grad_indice_weights_pt2_wrapper", indiceWeightsGrad);
  registerMetaFunction("fbgemm::int_nbit_split_embedding_codegen_lookup_function", intNBitLookup);
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
