#include "distributed/local_transport.h"

#include <ATen/ATen.h>

namespace openmtia::dist {
namespace {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using Tensors = std::vector<at::Tensor>;

// A collective that is done when it returns.
class DoneWork final : public c10d::Work {
 public:
  explicit DoneWork(c10d::OpType type) : c10d::Work(0, type) {}
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /* timeout */) override { return true; }
};

// Each output is its input: copies where they are other tensors (the
// MtiaBackend checked the sizes; a reduction of one rank's data is that data,
// a PREMUL_SUM was made a SUM of the scaled input by the caller).
WorkPtr copied(c10d::OpType type, const Tensors& outputs, const Tensors& inputs) {
  TORCH_CHECK(outputs.size() == inputs.size(), "openmtia: local transport: ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].is_same(inputs[i])) outputs[i].view(inputs[i].sizes()).copy_(inputs[i]);
  return c10::make_intrusive<DoneWork>(type);
}

Tensors firsts(const std::vector<Tensors>& lists) {
  Tensors out;
  for (const auto& l : lists) {
    TORCH_CHECK(l.size() == 1, "openmtia: local transport: expected one tensor per list, got ", l.size());
    out.push_back(l[0]);
  }
  return out;
}

class LocalTransport final : public c10d::Backend {
 public:
  LocalTransport() : c10d::Backend(0, 1) {}
  const std::string getBackendName() const override { return "openmtia-local"; }
  void setTimeout(std::chrono::milliseconds /* timeout */) override {}

  WorkPtr broadcast(Tensors&, const c10d::BroadcastOptions&) override { return done(c10d::OpType::BROADCAST); }
  WorkPtr allreduce(Tensors&, const c10d::AllreduceOptions&) override { return done(c10d::OpType::ALLREDUCE); }
  WorkPtr allreduce_coalesced(Tensors&, const c10d::AllreduceCoalescedOptions&) override {
    return done(c10d::OpType::ALLREDUCE_COALESCED);
  }
  WorkPtr reduce(Tensors&, const c10d::ReduceOptions&) override { return done(c10d::OpType::REDUCE); }
  WorkPtr barrier(const c10d::BarrierOptions&) override { return done(c10d::OpType::BARRIER); }

  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::AllgatherOptions&) override {
    return copied(c10d::OpType::ALLGATHER, firsts(outputs), inputs);
  }
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) override {
    return copied(c10d::OpType::_ALLGATHER_BASE, {output}, {input});
  }
  WorkPtr allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::AllgatherOptions&) override {
    return copied(c10d::OpType::ALLGATHER_COALESCED, firsts(outputs), inputs);
  }
  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions&) override {
    return copied(c10d::OpType::ALLGATHER_COALESCED, outputs, inputs);
  }
  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::GatherOptions&) override {
    return copied(c10d::OpType::GATHER, firsts(outputs), inputs);
  }
  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ScatterOptions&) override {
    return copied(c10d::OpType::SCATTER, outputs, firsts(inputs));
  }
  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ReduceScatterOptions&) override {
    return copied(c10d::OpType::REDUCE_SCATTER, outputs, firsts(inputs));
  }
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions&) override {
    return copied(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, {input});
  }
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::ReduceScatterOptions&) override {
    return copied(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, outputs, inputs);
  }
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>&, std::vector<int64_t>&,
                        const c10d::AllToAllOptions&) override {
    return copied(c10d::OpType::ALLTOALL_BASE, {output}, {input});
  }
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions&) override {
    return copied(c10d::OpType::ALLTOALL, outputs, inputs);
  }

 private:
  static WorkPtr done(c10d::OpType type) { return c10::make_intrusive<DoneWork>(type); }
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> makeLocalTransport() { return c10::make_intrusive<LocalTransport>(); }

}  // namespace openmtia::dist
