// FBGEMM's ops that gather tensors from several devices onto one
// (merge_pooled_embeddings, all_to_one_device, sum_reduce_to_one): TorchRec's
// sharded inference runs one process over several devices, each looking up
// its shard of the tables, and gathers the pooled embeddings onto the
// device that runs the dense part with these ops. FBGEMM implements them for
// CUDA (peer copies) and for CPU tensors only; on mtia they are the
// stream-ordered device-to-device copies of copy.h, then a cat or sum on
// the target device, so they run asynchronously like the copies.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/cat.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <vector>

namespace openmtia {
namespace {

using torch::jit::Stack;

// The op's arguments, off the stack.
std::vector<c10::IValue> arguments(const c10::OperatorHandle& op, Stack* stack) {
  const size_t n = op.schema().arguments().size();
  std::vector<c10::IValue> args(stack->end() - n, stack->end());
  torch::jit::drop(*stack, n);
  return args;
}

// Each tensor on `target` (a copy from another device; the tensor itself
// when it is there already). Between mtia devices the copy is stream-ordered
// (asynchronous); to CPU it completes before the op returns, as CUDA's.
std::vector<at::Tensor> onTarget(const c10::List<at::Tensor>& tensors, c10::Device target) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(t.to(target, /*non_blocking=*/target.type() == c10::DeviceType::MTIA));
  return out;
}

// The device an op's Device argument names: "mtia" is the current one.
c10::Device targetDevice(const c10::IValue& v) {
  c10::Device d = v.toDevice();
  if (d.type() == c10::DeviceType::MTIA && !d.has_index()) {
    c10::DeviceGuard probe(d);  // (an index-less guard leaves the current device)
    d = c10::Device(d.type(), probe.current_device().index());
  }
  return d;
}

// merge_pooled_embeddings(Tensor[] pooled_embeddings, SymInt uncat_dim_size,
// Device target_device, SymInt cat_dim=1): the 2-D pooled embeddings,
// concatenated along cat_dim on the target device.
void mergePooledEmbeddings(const c10::OperatorHandle& op, Stack* stack) {
  auto args = arguments(op, stack);
  const auto tensors = args[0].toTensorList();
  const int64_t uncat = args[1].toInt(), cat_dim = args[3].toInt();
  TORCH_CHECK(!tensors.empty(), "merge_pooled_embeddings: no tensors to merge");
  TORCH_CHECK(cat_dim == 0 || cat_dim == 1, "merge_pooled_embeddings: cat_dim must be 0 or 1, got ", cat_dim);
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.dim() == 2, "merge_pooled_embeddings: the pooled embeddings must be 2-D, got ", t.dim(), "-D");
    TORCH_CHECK(t.size(1 - cat_dim) == uncat, "merge_pooled_embeddings: a pooled embedding has size ",
                t.size(1 - cat_dim), " in dimension ", 1 - cat_dim, ", expected ", uncat);
  }
  const c10::Device target = targetDevice(args[2]);
  c10::DeviceGuard guard(target);
  stack->emplace_back(at::cat(onTarget(tensors, target), cat_dim));
}

// all_to_one_device(Tensor[] input_tensors, Device target_device) -> Tensor[]
void allToOneDevice(const c10::OperatorHandle& op, Stack* stack) {
  auto args = arguments(op, stack);
  const c10::Device target = targetDevice(args[1]);
  c10::DeviceGuard guard(target);
  stack->emplace_back(c10::List<at::Tensor>(onTarget(args[0].toTensorList(), target)));
}

// sum_reduce_to_one(Tensor[] input_tensors, Device target_device) -> Tensor
void sumReduceToOne(const c10::OperatorHandle& op, Stack* stack) {
  auto args = arguments(op, stack);
  const auto tensors = args[0].toTensorList();
  TORCH_CHECK(!tensors.empty(), "sum_reduce_to_one: no tensors to sum");
  const c10::Device target = targetDevice(args[1]);
  c10::DeviceGuard guard(target);
  auto on = onTarget(tensors, target);
  at::Tensor sum = on[0].clone();
  for (size_t i = 1; i < on.size(); ++i) sum.add_(on[i]);
  stack->emplace_back(std::move(sum));
}

}  // namespace

TORCH_LIBRARY_IMPL(fbgemm, MTIA, m) {
  m.impl("merge_pooled_embeddings", torch::CppFunction::makeFromBoxedFunction<&mergePooledEmbeddings>());
  m.impl("all_to_one_device", torch::CppFunction::makeFromBoxedFunction<&allToOneDevice>());
  m.impl("sum_reduce_to_one", torch::CppFunction::makeFromBoxedFunction<&sumReduceToOne>());
}

}  // namespace openmtia
