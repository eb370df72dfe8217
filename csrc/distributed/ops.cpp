// The c10d operators for mtia tensors. ProcessGroup methods and the
// functional collectives reach a backend through these dispatcher ops
// (c10d::allreduce_, ...); torch registers them for CPU, CUDA and
// PrivateUse1 only, so without these mtia tensors would take openmtia's CPU
// fallback: staged to the host and handed to the CPU backend.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/library.h>

namespace openmtia::dist {
namespace {

using c10d::ProcessGroup;
using c10d::ReduceOp;
using c10d::Work;
using PG = c10::intrusive_ptr<ProcessGroup>;
using WorkPtr = c10::intrusive_ptr<Work>;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<Tensors>;

c10::intrusive_ptr<c10d::Backend> backendOf(const PG& pg) { return pg->getBackend(c10::DeviceType::MTIA); }
std::chrono::milliseconds ms(int64_t timeout) { return std::chrono::milliseconds(timeout); }

WorkPtr send(at::TensorList tensors, const PG& pg, int64_t dst, int64_t tag) {
  auto v = tensors.vec();
  return backendOf(pg)->send(v, static_cast<int>(dst), static_cast<int>(tag));
}

WorkPtr recv(at::TensorList tensors, const PG& pg, int64_t src, int64_t tag) {
  auto v = tensors.vec();
  return backendOf(pg)->recv(v, static_cast<int>(src), static_cast<int>(tag));
}

WorkPtr recvAnySource(at::TensorList tensors, const PG& pg, int64_t tag) {
  auto v = tensors.vec();
  return backendOf(pg)->recvAnysource(v, static_cast<int>(tag));
}

WorkPtr reduce(at::TensorList tensors, const PG& pg, const c10::intrusive_ptr<ReduceOp>& op, int64_t root_rank,
               int64_t root_tensor, bool async_op, int64_t timeout) {
  auto v = tensors.vec();
  return backendOf(pg)->reduce(v, c10d::ReduceOptions{*op, root_rank, root_tensor, ms(timeout), async_op});
}

std::tuple<Tensors, WorkPtr> broadcast(at::TensorList tensors, const PG& pg, int64_t root_rank, int64_t root_tensor,
                                       bool async_op, int64_t timeout) {
  auto v = tensors.vec();
  auto work = backendOf(pg)->broadcast(v, c10d::BroadcastOptions{root_rank, root_tensor, ms(timeout), async_op});
  return {std::move(v), work};
}

std::tuple<Tensors, WorkPtr> allreduce(at::TensorList tensors, const PG& pg, const c10::intrusive_ptr<ReduceOp>& op,
                                       const std::optional<at::Tensor>& sparse_indices, bool async_op,
                                       int64_t timeout) {
  auto v = tensors.vec();
  auto work = backendOf(pg)->allreduce(v, c10d::AllreduceOptions{*op, ms(timeout), async_op});
  return {std::move(v), work};
}

WorkPtr allreduceCoalesced(at::TensorList tensors, const PG& pg, const c10::intrusive_ptr<ReduceOp>& op, bool async_op,
                           int64_t timeout) {
  auto v = tensors.vec();
  c10d::AllreduceCoalescedOptions opts;
  opts.reduceOp = *op;
  opts.timeout = ms(timeout);
  opts.asyncOp = async_op;
  return backendOf(pg)->allreduce_coalesced(v, opts);
}

std::tuple<TensorLists, WorkPtr> allgather(const TensorLists& outputs, at::TensorList inputs, const PG& pg,
                                           bool async_op, int64_t timeout) {
  auto in = inputs.vec();
  TensorLists out = outputs;
  auto work = backendOf(pg)->allgather(out, in, c10d::AllgatherOptions{ms(timeout), async_op});
  return {outputs, work};
}

std::tuple<at::Tensor, WorkPtr> allgatherBase(at::Tensor& output, at::Tensor& input, const PG& pg, bool async_op,
                                              int64_t timeout) {
  auto work = backendOf(pg)->_allgather_base(output, input, c10d::AllgatherOptions{ms(timeout), async_op});
  return {output, work};
}

WorkPtr allgatherCoalesced(const TensorLists& outputs, const at::TensorList& inputs, const PG& pg, bool async_op) {
  auto in = inputs.vec();
  TensorLists out = outputs;
  c10d::AllgatherOptions opts;
  opts.asyncOp = async_op;
  return backendOf(pg)->allgather_coalesced(out, in, opts);
}

WorkPtr allgatherIntoTensorCoalesced(at::TensorList outputs, at::TensorList inputs, const PG& pg, bool async_op) {
  auto out = outputs.vec(), in = inputs.vec();
  c10d::AllgatherOptions opts;
  opts.asyncOp = async_op;
  return backendOf(pg)->allgather_into_tensor_coalesced(out, in, opts);
}

std::tuple<Tensors, WorkPtr> reduceScatter(const at::TensorList& outputs, const TensorLists& inputs, const PG& pg,
                                           const c10::intrusive_ptr<ReduceOp>& op, bool async_op, int64_t timeout) {
  auto out = outputs.vec();
  TensorLists in = inputs;
  auto work = backendOf(pg)->reduce_scatter(out, in, c10d::ReduceScatterOptions{*op, ms(timeout), async_op});
  return {std::move(out), work};
}

std::tuple<at::Tensor, WorkPtr> reduceScatterBase(at::Tensor& output, at::Tensor& input, const PG& pg,
                                                  const c10::intrusive_ptr<ReduceOp>& op, bool async_op,
                                                  int64_t timeout) {
  auto work =
      backendOf(pg)->_reduce_scatter_base(output, input, c10d::ReduceScatterOptions{*op, ms(timeout), async_op});
  return {output, work};
}

WorkPtr reduceScatterTensorCoalesced(at::TensorList outputs, at::TensorList inputs, const PG& pg,
                                     const c10::intrusive_ptr<ReduceOp>& op, bool async_op, int64_t timeout) {
  auto out = outputs.vec(), in = inputs.vec();
  return backendOf(pg)->reduce_scatter_tensor_coalesced(out, in,
                                                        c10d::ReduceScatterOptions{*op, ms(timeout), async_op});
}

WorkPtr gather(const TensorLists& outputs, const at::TensorList& inputs, const PG& pg, int64_t root_rank,
               bool async_op, int64_t timeout) {
  auto in = inputs.vec();
  TensorLists out = outputs;
  return backendOf(pg)->gather(out, in, c10d::GatherOptions{root_rank, ms(timeout), async_op});
}

std::tuple<Tensors, WorkPtr> scatter(const at::TensorList& outputs, const TensorLists& inputs, const PG& pg,
                                     int64_t root_rank, bool async_op, int64_t timeout) {
  auto out = outputs.vec();
  TensorLists in = inputs;
  auto work = backendOf(pg)->scatter(out, in, c10d::ScatterOptions{root_rank, ms(timeout), async_op});
  return {std::move(out), work};
}

std::tuple<Tensors, WorkPtr> alltoall(const at::TensorList& outputs, const at::TensorList& inputs, const PG& pg, bool async_op,
                                      int64_t timeout) {
  auto out = outputs.vec(), in = inputs.vec();
  auto work = backendOf(pg)->alltoall(out, in, c10d::AllToAllOptions{ms(timeout), async_op});
  return {std::move(out), work};
}

WorkPtr alltoallBase(at::Tensor& output, at::Tensor& input, const PG& pg, std::vector<int64_t> output_splits,
                     std::vector<int64_t> input_splits, bool async_op, int64_t timeout) {
  return backendOf(pg)->alltoall_base(output, input, output_splits, input_splits,
                                      c10d::AllToAllOptions{ms(timeout), async_op});
}

WorkPtr barrier(at::Tensor /* tensor */, const PG& pg, const std::vector<int64_t>& device_ids, bool async_op,
                int64_t timeout) {
  c10d::BarrierOptions opts;
  opts.device_ids = device_ids;
  opts.timeout = ms(timeout);
  opts.asyncOp = async_op;
  return backendOf(pg)->barrier(opts);
}

TORCH_LIBRARY_IMPL(c10d, MTIA, m) {
  m.impl("send", send);
  m.impl("recv_", recv);
  m.impl("recv_any_source_", recvAnySource);
  m.impl("reduce_", reduce);
  m.impl("broadcast_", broadcast);
  m.impl("allreduce_", allreduce);
  m.impl("allreduce_coalesced_", allreduceCoalesced);
  m.impl("allgather_", allgather);
  m.impl("_allgather_base_", allgatherBase);
  m.impl("allgather_coalesced_", allgatherCoalesced);
  m.impl("allgather_into_tensor_coalesced_", allgatherIntoTensorCoalesced);
  m.impl("reduce_scatter_", reduceScatter);
  m.impl("_reduce_scatter_base_", reduceScatterBase);
  m.impl("reduce_scatter_tensor_coalesced_", reduceScatterTensorCoalesced);
  m.impl("gather_", gather);
  m.impl("scatter_", scatter);
  m.impl("alltoall_", alltoall);
  m.impl("alltoall_base_", alltoallBase);
  m.impl("barrier", barrier);
}

}  // namespace
}  // namespace openmtia::dist
