// openmtia's c10d backend ("openmtia"): collectives of mtia tensors run by a
// transport, a c10d backend of host tensors (Gloo, the engine shipped in the
// torch wheel: openmtia/distributed.py's transport()), over the device memory
// itself.
//
// A collective is issued like an NCCL one: the backend's communication stream
// (a high-priority stream of the device) waits for the work already queued on
// the caller's current stream, then a task on it runs the Gloo collective on
// host views of the tensors (the emulated device memory is host-addressable:
// no staging copy). The returned Work's wait() makes the caller's current
// stream wait for that task; the host goes on. Gloo's own process group is
// held inside and never sees an mtia tensor.
//
// Before the data moves, the collective's task exchanges every rank's
// signature of the call (op, dtype, element count, shapes, root, reduce op)
// over sockets to the other ranks (signature_mesh.h): a mismatch across ranks
// raises a clear error on every rank instead of letting Gloo abort the
// process. Sends and receives tell their sizes on a second, tiny Gloo group.
//
// With checksums on (OPENMTIA_C10D_CHECKSUM=1), a collective whose result is
// the same on every rank (broadcast, all_reduce, all_gather and their
// coalesced forms) exchanges a checksum of its result on the mesh once the
// data moved: a payload damaged in transit (a corrupt fault, faults.h) raises
// on every rank instead of training on silently different parameters.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/utils/pybind.h>

#include <ATen/ATen.h>
#include <c10/util/hash.h>

#include <cxxabi.h>

#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <sstream>

#include "openmtia/runtime.h"
#include "distributed/backend.h"
#include "distributed/local_transport.h"
#include "distributed/signature_mesh.h"
#include "distributed/work.h"
#include "runtime/device.h"
#include "runtime/device_access.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/graphs.h"
#include "runtime/host_views.h"
#include "runtime/stream.h"

namespace openmtia::dist {
namespace {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using Tensors = std::vector<at::Tensor>;

// The signature of one call, exchanged across ranks before its data moves.
// Fields up to kSends must be equal on every rank. An all-to-all's sizes may
// differ across ranks, but what rank r sends to rank j must be what j expects
// from r: each rank adds up a hash of every (sender, receiver, elements) it
// sends and of every one it expects, and the sums over all ranks must agree.
constexpr int kSig = 10;
using Signature = std::array<int64_t, kSig>;
enum SigField { kOp, kDtype, kNumel, kShapes, kRoot, kReduceOp, kCount, kSeq, kSends, kExpects };

uint64_t transferHash(int64_t from, int64_t to, int64_t elements) {
  uint64_t x = static_cast<uint64_t>(from) * 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(to) * 0xC2B2AE3D27D4EB4FULL ^
               static_cast<uint64_t>(elements) * 0x165667B19E3779F9ULL;
  x ^= x >> 33;  // splitmix64's finalizer
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// Adds this rank's all-to-all transfers (elements sent to / expected from each rank) to its signature.
void addTransfers(Signature& sig, int rank, const std::vector<int64_t>& sends, const std::vector<int64_t>& expects) {
  uint64_t s = 0, e = 0;
  for (size_t j = 0; j < sends.size(); ++j) {
    s += transferHash(rank, static_cast<int64_t>(j), sends[j]);
    e += transferHash(static_cast<int64_t>(j), rank, expects[j]);
  }
  sig[kSends] = static_cast<int64_t>(s);
  sig[kExpects] = static_cast<int64_t>(e);
}

// A checksum of a tensor's bytes (Fletcher's two sums over 64-bit words):
// any one flipped bit changes it.
uint64_t checksum(const at::Tensor& t, uint64_t h) {
  at::Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  const size_t n = c.numel() * c.element_size();
  uint64_t a = 0, b = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    a += w;
    b += a;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  a += tail;
  b += a;
  return transferHash(static_cast<int64_t>(h ^ a), static_cast<int64_t>(b), static_cast<int64_t>(n));
}

// The collectives whose result is the same on every rank: their checksums must agree.
bool rankEqualResult(OpType type) {
  switch (type) {
    case OpType::BROADCAST:
    case OpType::ALLREDUCE:
    case OpType::ALLREDUCE_COALESCED:
    case OpType::ALLGATHER:
    case OpType::_ALLGATHER_BASE:
    case OpType::ALLGATHER_COALESCED:
      return true;
    default:
      return false;
  }
}

// The bytes a tensor's elements span in its storage, from its first element.
size_t spanBytes(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * std::max<int64_t>(t.stride(d), 0);
  return static_cast<size_t>(last + 1) * t.element_size();
}

// What Gloo gets for a device tensor where device memory is not
// host-addressable (device_access.h): a host buffer of its layout, filled
// from the device by the collective's task before Gloo runs and, for the
// outputs, written back after it (Gloo's syscalls and threads are the host's).
struct Staged {
  at::Tensor device;  // a host view of the device tensor: only the task (the device) touches it
  at::Tensor host;
  c10::StorageImpl* storage;
};

Tensors flat(const std::vector<Tensors>& lists) {
  Tensors out;
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

// The premultiplier of a PREMUL_SUM, read in the task (a tensor factor may be
// device data written by the work the collective is ordered after).
double premulFactor(const c10d::ReduceOp& op) {
  auto* sup = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(sup, "openmtia: PREMUL_SUM without a factor");
  if (!sup->tensor_factor.defined()) return sup->double_factor;
  const at::Tensor& f = sup->tensor_factor;
  return (f.device().type() == kMTIA ? hostView(f) : f).item<double>();
}

// A PREMUL_SUM is run as a SUM of its inputs scaled by its factor: turns `op`
// into SUM and returns the factor; nothing for the other ops.
std::optional<double> premulToSum(c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return std::nullopt;
  double f = premulFactor(op);
  op = c10d::ReduceOp(c10d::ReduceOp::SUM);
  return f;
}

// An all_reduce of at most this many bytes runs as one exchange (see exchangeRows).
constexpr int64_t kOneExchangeAllreduceBytes = 64 << 10;

bool reducibleInOneExchange(const c10d::ReduceOp& op, c10::ScalarType dtype) {
  bool real = c10::isFloatingType(dtype) || (c10::isIntegralType(dtype, /*includeBool=*/false));
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      return real;
    case c10d::ReduceOp::AVG:
    case c10d::ReduceOp::PREMUL_SUM:
      return c10::isFloatingType(dtype);
    default:
      return false;
  }
}

// Gloo's all_reduce and reduce_scatter take rounds through its threads on
// both ranks; its all-to-all is one. On a 2-core host a 2-rank all_reduce of
// 64 floats took 0.3 ms median on CPU tensors and 4 ms at the 90th
// percentile, an all-to-all 0.1 / 0.15 ms; a reduce_scatter_tensor of 4 KiB
// 0.57 ms, of 512 KiB 1.7 ms. So these run as one all-to-all:
// - reduce_scatter_tensor: rank j's chunk of every rank's input goes to rank
//   j (the input, as it is), which reduces the world's chunks in rank order
//   (each rank sends (n-1)/n of its input, as in a ring);
// - an all_reduce of at most kOneExchangeAllreduceBytes: a copy of the whole
//   tensor to every rank, each reducing them all (above, Gloo's, whose bytes
//   per rank are 2(n-1)/n of the tensor).
// Reductions run in rank order on every rank: every rank gets the same result.
at::Tensor exchangeRows(c10d::Backend& transport, at::Tensor send) {
  at::Tensor all = at::empty_like(send);
  std::vector<int64_t> even;
  transport.alltoall_base(all, send, even, even, c10d::AllToAllOptions())->wait();
  return all;
}

// The reduction of `rows` (one per rank) by `op`, in rank order.
at::Tensor reduceRows(const at::Tensor& rows, const c10d::ReduceOp& op, int world) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return rows.sum(0, /*keepdim=*/false, rows.scalar_type());
    case c10d::ReduceOp::AVG:
      return rows.sum(0).div_(world);
    case c10d::ReduceOp::PRODUCT:
      return rows.prod(0, /*keepdim=*/false, rows.scalar_type());
    case c10d::ReduceOp::MIN:
      return rows.amin(0);
    case c10d::ReduceOp::MAX:
      return rows.amax(0);
    default:
      TORCH_INTERNAL_ASSERT(false, "openmtia: a reduction in one exchange: unexpected op ", static_cast<int>(op.op_));
  }
}

void allreduceInOneExchange(c10d::Backend& transport, at::Tensor& t, const c10d::ReduceOp& op, int world) {
  at::Tensor mine = t.reshape({1, -1});
  at::Tensor all = exchangeRows(transport, mine.expand({world, mine.size(1)}).contiguous());
  t.copy_(reduceRows(all, op, world).view(t.sizes()));
}

void reduceScatterInOneExchange(c10d::Backend& transport, const at::Tensor& in, at::Tensor& out,
                                const c10d::ReduceOp& op, int world) {
  at::Tensor all = exchangeRows(transport, in.reshape({world, -1}).contiguous());
  out.copy_(reduceRows(all, op, world).view(out.sizes()));
}

class MtiaBackend final : public c10d::Backend {
 public:
  MtiaBackend(c10::intrusive_ptr<c10d::Backend> transport, c10::intrusive_ptr<c10d::Backend> check,
              std::shared_ptr<SignatureMesh> mesh, int rank, int size, int device, std::chrono::milliseconds timeout,
              bool checksums)
      : Backend(rank, size),
        transport_(std::move(transport)),
        check_(std::move(check)),
        mesh_(std::move(mesh)),
        checksums_(checksums),
        timeout_ms_(timeout.count()),
        completer_(new Completer()) {
    if (device >= 0) bindDevice(device);
  }

  const std::string getBackendName() const override { return "openmtia"; }

  // The tensors Gloo gets: host views of device tensors, or host buffers
  // staged by the next issue()'s task (Staged).
  Tensors hostViews(const Tensors& ts) {
    Tensors out;
    out.reserve(ts.size());
    for (const auto& t : ts) {
      if (t.device().type() != kMTIA) {
        out.push_back(t);
        continue;
      }
      at::Tensor view = hostView(t);
      if (hostAddressable(t.device().index())) {
        out.push_back(view);
        continue;
      }
      at::Tensor host = at::empty_strided(view.sizes(), view.strides(), view.options());
      staging_.push_back({view, host, t.storage().unsafeGetStorageImpl()});
      out.push_back(host);
    }
    return out;
  }
  std::vector<Tensors> hostViews(const std::vector<Tensors>& lists) {
    std::vector<Tensors> out;
    out.reserve(lists.size());
    for (const auto& l : lists) out.push_back(hostViews(l));
    return out;
  }
  void setTimeout(std::chrono::milliseconds timeout) override {
    transport_->setTimeout(timeout);
    if (check_) check_->setTimeout(timeout);
    timeout_ms_ = timeout.count();
  }

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    checkSame(tensors, "broadcast");
    checkRoot(opts.rootRank, "broadcast");
    TORCH_CHECK(opts.rootTensor >= 0 && opts.rootTensor < (int64_t)tensors.size(), "openmtia: broadcast: invalid root tensor");
    Signature sig = signature(OpType::BROADCAST, tensors, opts.rootRank);
    auto views = hostViews(tensors);
    auto transport = transport_;
    return issue(OpType::BROADCAST, "broadcast", tensors, tensors, sig, [transport, views, opts]() mutable {
      return transport->broadcast(views, opts);
    });
  }

  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    checkSame(tensors, "all_reduce");
    Signature sig = signature(OpType::ALLREDUCE, tensors, -1, opts.reduceOp);
    auto views = hostViews(tensors);
    auto transport = transport_;
    c10d::AllreduceOptions o = opts;
    int world = getSize();
    bool one_exchange = world > 1 && tensors.size() == 1 &&
                        tensors[0].numel() * tensors[0].element_size() <= kOneExchangeAllreduceBytes &&
                        reducibleInOneExchange(opts.reduceOp, tensors[0].scalar_type());
    return issue(OpType::ALLREDUCE, "all_reduce", tensors, tensors, sig,
                 [transport, views, o, one_exchange, world]() mutable -> WorkPtr {
                   if (auto f = premulToSum(o.reduceOp))
                     for (auto& v : views) v.mul_(*f);
                   if (!one_exchange) return transport->allreduce(views, o);
                   allreduceInOneExchange(*transport, views[0], o.reduceOp, world);
                   return {};
                 });
  }

  WorkPtr allreduce_coalesced(Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    checkDevices(tensors, "all_reduce_coalesced");
    checkNoPremul(opts.reduceOp, "all_reduce_coalesced");
    Signature sig = signature(OpType::ALLREDUCE_COALESCED, tensors, -1, opts.reduceOp);
    auto views = hostViews(tensors);
    auto transport = transport_;
    return issue(OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors, tensors, sig,
                 [transport, views, opts]() mutable { return transport->allreduce_coalesced(views, opts); });
  }

  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    checkSame(tensors, "reduce");
    checkRoot(opts.rootRank, "reduce");
    Signature sig = signature(OpType::REDUCE, tensors, opts.rootRank, opts.reduceOp);
    auto views = hostViews(tensors);
    auto transport = transport_;
    c10d::ReduceOptions o = opts;
    bool root = getRank() == opts.rootRank;
    return issue(OpType::REDUCE, "reduce", tensors, tensors, sig, [transport, views, o, root]() mutable {
      // The root's tensor is the output. Another rank's input stays as it was
      // (as with NCCL): Gloo's reduce uses it as scratch space, so a copy goes.
      if (!root)
        for (auto& v : views) v = v.clone();
      if (auto f = premulToSum(o.reduceOp))
        for (auto& v : views) v.mul_(*f);
      return transport->reduce(views, o);
    });
  }

  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) override {
    checkSame(inputs, "all_gather");
    checkRankLists(inputs, outputs, "all_gather", "output");
    Signature sig = signature(OpType::ALLGATHER, inputs);
    auto in = hostViews(inputs);
    auto out = hostViews(outputs);
    auto transport = transport_;
    return issue(OpType::ALLGATHER, "all_gather", concat(inputs, flat(outputs)), flat(outputs), sig,
                 [transport, in, out, opts]() mutable { return transport->allgather(out, in, opts); });
  }

  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override {
    checkDevices({input, output}, "all_gather_into_tensor");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(), "openmtia: all_gather_into_tensor: output dtype ",
                output.scalar_type(), " differs from the input's ", input.scalar_type());
    TORCH_CHECK(output.numel() == input.numel() * getSize(), "openmtia: all_gather_into_tensor: the output has ",
                output.numel(), " elements; expected ", input.numel() * getSize(), " (input x world size)");
    Signature sig = signature(OpType::_ALLGATHER_BASE, {input});
    at::Tensor in = hostViews({input})[0], out = hostViews({output})[0];
    auto transport = transport_;
    return issue(OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {input, output}, {output}, sig,
                 [transport, in, out, opts]() mutable { return transport->_allgather_base(out, in, opts); });
  }

  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    checkWorldSized(outputs, inputs, "all_gather_into_tensor_coalesced");
    Signature sig = signature(OpType::ALLGATHER_COALESCED, inputs);
    auto in = hostViews(inputs), out = hostViews(outputs);
    auto transport = transport_;
    return issue(OpType::ALLGATHER_COALESCED, "all_gather_into_tensor_coalesced", concat(inputs, outputs), outputs,
                 sig, [transport, in, out, opts]() mutable { return transport->allgather_into_tensor_coalesced(out, in, opts); });
  }

  WorkPtr allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                              const c10d::AllgatherOptions& opts) override {
    checkDevices(concat(inputs, flat(outputs)), "all_gather_coalesced");
    Signature sig = signature(OpType::ALLGATHER_COALESCED, inputs);
    auto in = hostViews(inputs);
    auto out = hostViews(outputs);
    auto transport = transport_;
    return issue(OpType::ALLGATHER_COALESCED, "all_gather_coalesced", concat(inputs, flat(outputs)), flat(outputs),
                 sig, [transport, in, out, opts]() mutable { return transport->allgather_coalesced(out, in, opts); });
  }

  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::GatherOptions& opts) override {
    checkRootList(inputs, outputs, opts.rootRank, "gather");
    Signature sig = signature(OpType::GATHER, inputs, opts.rootRank);
    auto in = hostViews(inputs);
    auto out = hostViews(outputs);
    auto transport = transport_;
    return issue(OpType::GATHER, "gather", concat(inputs, flat(outputs)), flat(outputs), sig,
                 [transport, in, out, opts]() mutable { return transport->gather(out, in, opts); });
  }

  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ScatterOptions& opts) override {
    checkRootList(outputs, inputs, opts.rootRank, "scatter");
    Signature sig = signature(OpType::SCATTER, outputs, opts.rootRank);
    auto in = hostViews(inputs);
    auto out = hostViews(outputs);
    auto transport = transport_;
    return issue(OpType::SCATTER, "scatter", concat(outputs, flat(inputs)), outputs, sig,
                 [transport, in, out, opts]() mutable { return transport->scatter(out, in, opts); });
  }

  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    checkSame(outputs, "reduce_scatter");
    checkRankLists(outputs, inputs, "reduce_scatter", "input");
    Signature sig = signature(OpType::REDUCE_SCATTER, outputs, -1, opts.reduceOp);
    auto in = hostViews(inputs);
    auto out = hostViews(outputs);
    auto transport = transport_;
    c10d::ReduceScatterOptions o = opts;
    return issue(OpType::REDUCE_SCATTER, "reduce_scatter", concat(outputs, flat(inputs)), outputs, sig,
                 [transport, in, out, o]() mutable {
                   if (auto f = premulToSum(o.reduceOp))
                     for (auto& l : in)
                       for (auto& t : l) t = t * *f;  // the inputs stay as they were
                   return transport->reduce_scatter(out, in, o);
                 });
  }

  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
    checkDevices({input, output}, "reduce_scatter_tensor");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(), "openmtia: reduce_scatter_tensor: output dtype ",
                output.scalar_type(), " differs from the input's ", input.scalar_type());
    TORCH_CHECK(input.numel() == output.numel() * getSize(), "openmtia: reduce_scatter_tensor: the input has ",
                input.numel(), " elements; expected ", output.numel() * getSize(), " (output x world size)");
    Signature sig = signature(OpType::_REDUCE_SCATTER_BASE, {output}, -1, opts.reduceOp);
    at::Tensor in = hostViews({input})[0], out = hostViews({output})[0];
    auto transport = transport_;
    c10d::ReduceScatterOptions o = opts;
    int world = getSize();
    bool one_exchange = reducibleInOneExchange(opts.reduceOp, input.scalar_type());
    return issue(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {input, output}, {output}, sig,
                 [transport, in, out, o, world, one_exchange]() mutable -> WorkPtr {
                   if (auto f = premulToSum(o.reduceOp)) in = in * *f;  // the input stays as it was
                   if (!one_exchange) return transport->_reduce_scatter_base(out, in, o);
                   reduceScatterInOneExchange(*transport, in, out, o.reduceOp, world);
                   return {};
                 });
  }

  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    checkWorldSized(inputs, outputs, "reduce_scatter_tensor_coalesced");
    checkNoPremul(opts.reduceOp, "reduce_scatter_tensor_coalesced");
    Signature sig = signature(OpType::REDUCE_SCATTER_TENSOR_COALESCED, outputs, -1, opts.reduceOp);
    auto in = hostViews(inputs), out = hostViews(outputs);
    auto transport = transport_;
    return issue(OpType::REDUCE_SCATTER_TENSOR_COALESCED, "reduce_scatter_tensor_coalesced", concat(inputs, outputs),
                 outputs, sig,
                 [transport, in, out, opts]() mutable { return transport->reduce_scatter_tensor_coalesced(out, in, opts); });
  }

  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) override {
    checkDevices({input, output}, "all_to_all_single");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(), "openmtia: all_to_all_single: output dtype ",
                output.scalar_type(), " differs from the input's ", input.scalar_type());
    checkSplits(input, input_splits, "input");
    checkSplits(output, output_splits, "output");
    // Splits may differ across ranks: the op, dtype and row size must agree,
    // and what each rank sends must be what its peer expects.
    Signature sig = signature(OpType::ALLTOALL_BASE, {});
    sig[kDtype] = static_cast<int64_t>(input.scalar_type());
    const int64_t row = c10::multiply_integers(input.sizes().slice(1));
    sig[kShapes] = row;
    auto rows = [&](const at::Tensor& t, const std::vector<int64_t>& splits) {
      std::vector<int64_t> n = splits;
      if (n.empty()) n.assign(getSize(), t.size(0) / getSize());
      for (auto& v : n) v *= row;
      return n;
    };
    auto sends = rows(input, input_splits), expects = rows(output, output_splits);
    addTransfers(sig, getRank(), sends, expects);
    at::Tensor in = hostViews({input})[0], out = hostViews({output})[0];
    auto transport = transport_;
    return issue(
        OpType::ALLTOALL_BASE, "all_to_all_single", {input, output}, {output}, sig,
        [transport, in, out, output_splits, input_splits, opts]() mutable {
          return transport->alltoall_base(out, in, output_splits, input_splits, opts);
        },
        false, Lane::kCollective, c10::str("sends ", c10::IntArrayRef(sends), " elements and expects ", c10::IntArrayRef(expects)));
  }

  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override {
    TORCH_CHECK((int)outputs.size() == getSize() && (int)inputs.size() == getSize(),
                "openmtia: all_to_all: expected ", getSize(), " input and output tensors, got ", inputs.size(), " and ",
                outputs.size());
    checkDevices(concat(inputs, outputs), "all_to_all");
    Signature sig = signature(OpType::ALLTOALL, {});
    sig[kDtype] = static_cast<int64_t>(inputs[0].scalar_type());
    std::vector<int64_t> sends, expects;
    for (int j = 0; j < getSize(); ++j) {
      sends.push_back(inputs[j].numel());
      expects.push_back(outputs[j].numel());
    }
    addTransfers(sig, getRank(), sends, expects);
    auto in = hostViews(inputs), out = hostViews(outputs);
    auto transport = transport_;
    return issue(
        OpType::ALLTOALL, "all_to_all", concat(inputs, outputs), outputs, sig,
        [transport, in, out, opts]() mutable { return transport->alltoall(out, in, opts); }, false, Lane::kCollective,
        c10::str("sends ", c10::IntArrayRef(sends), " elements and expects ", c10::IntArrayRef(expects)));
  }

  // Point-to-point calls are not collective: no signature is exchanged. Sends
  // and receives have communication streams of their own, so that two ranks
  // that both send before they receive (batch_isend_irecv) do not wait on
  // each other; Gloo matches them by peer and tag, apart from collectives.
  // Gloo aborts the process when a message is not the size its receiver
  // posted, so each send first tells its size on the signature group; a
  // receiver of another size takes the bytes into scratch memory, and answers
  // every send with its own size: both ranks raise on a mismatch.
  WorkPtr send(Tensors& tensors, int dst, int tag) override {
    checkSame(tensors, "send");
    checkPeer(dst, "send");
    TORCH_CHECK(tensors.size() == 1, "openmtia: send takes one tensor, got ", tensors.size());
    auto views = hostViews(tensors);
    auto transport = transport_, check = check_;
    int rank = getRank();
    return issue(OpType::SEND, "send", tensors, {}, std::nullopt,
                 [transport, check, views, dst, tag, rank]() mutable {
                   if (!check) return transport->send(views, dst, tag);
                   at::Tensor mine = messageHeader(views[0]), theirs = at::empty({kHeader}, at::kLong);
                   Tensors h{mine}, a{theirs};
                   check->send(h, dst, tag)->wait();
                   transport->send(views, dst, tag)->wait();
                   check->recv(a, dst, tag)->wait();
                   if (!sameSize(mine, theirs))
                     throw std::runtime_error("openmtia: send/recv mismatch: rank " + std::to_string(rank) + " sent " +
                                              describeHeader(mine) + " to rank " + std::to_string(dst) +
                                              ", which receives " + describeHeader(theirs) + " (tag " +
                                              std::to_string(tag) + ")");
                   return WorkPtr();
                 },
                 false, Lane::kSend);
  }

  WorkPtr recv(Tensors& tensors, int src, int tag) override {
    checkSame(tensors, "recv");
    checkPeer(src, "recv");
    TORCH_CHECK(tensors.size() == 1, "openmtia: recv takes one tensor, got ", tensors.size());
    auto views = hostViews(tensors);
    auto transport = transport_, check = check_;
    int rank = getRank();
    return issue(OpType::RECV, "recv", tensors, tensors, std::nullopt,
                 [transport, check, views, src, tag, rank]() mutable {
                   if (!check) return transport->recv(views, src, tag);
                   at::Tensor mine = messageHeader(views[0]), theirs = at::empty({kHeader}, at::kLong);
                   Tensors h{theirs}, a{mine};
                   check->recv(h, src, tag)->wait();
                   bool same = sameSize(mine, theirs);
                   Tensors into = same ? views : Tensors{at::empty({theirs.data_ptr<int64_t>()[0]}, at::kByte)};
                   transport->recv(into, src, tag)->wait();
                   check->send(a, src, tag)->wait();
                   if (!same)
                     throw std::runtime_error("openmtia: send/recv mismatch: rank " + std::to_string(rank) +
                                              " receives " + describeHeader(mine) + " from rank " +
                                              std::to_string(src) + ", which sent " + describeHeader(theirs) +
                                              " (tag " + std::to_string(tag) + ")");
                   return WorkPtr();
                 },
                 false, Lane::kRecv);
  }

  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    // Like NCCL's, a barrier also waits for the device: its task runs after
    // the work queued on the current stream, and wait() blocks the host.
    Signature sig = signature(OpType::BARRIER, {});
    auto transport = transport_;
    return issue(OpType::BARRIER, "barrier", {}, {}, sig, [transport, opts]() mutable { return transport->barrier(opts); },
                 /*host_wait=*/true);
  }

 private:
  static Tensors concat(Tensors a, const Tensors& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  void bindDevice(int device) {
    checkDevice(static_cast<c10::DeviceIndex>(device));
    device_ = device;
    comm_stream_ = OMR_CALL(omr::streamFromPool(device, /*priority=*/-1));
    send_stream_ = OMR_CALL(omr::streamFromPool(device, /*priority=*/-1));
    recv_stream_ = OMR_CALL(omr::streamFromPool(device, /*priority=*/-1));
  }

  // The device this rank uses: init_process_group's device_id if given, else
  // that of its first collective's tensors (or the current device).
  int boundIndex(int otherwise) const {
    auto bound = getBoundDeviceId();
    return bound && bound->type() == kMTIA && bound->has_index() ? bound->index() : otherwise;
  }

  // The tensors' device (-1 for CPU tensors); all must be on the same one.
  int checkDevices(const Tensors& tensors, const char* what, std::optional<c10::Device> like = std::nullopt) {
    std::optional<c10::Device> dev = like;
    for (const auto& t : tensors) {
      TORCH_CHECK(t.defined(), "openmtia: ", what, ": undefined tensor");
      TORCH_CHECK(t.layout() == c10::kStrided, "openmtia: ", what, ": only strided tensors are supported, got ",
                  t.layout());
      TORCH_CHECK(t.device().type() == kMTIA || t.device().is_cpu(), "openmtia: ", what,
                  ": expected mtia (or CPU) tensors, got a tensor on ", t.device());
      TORCH_CHECK(isDense(t), "openmtia: ", what, ": tensors must be non-overlapping and dense (e.g. contiguous)");
      if (!dev) dev = t.device();
      TORCH_CHECK(t.device() == *dev, "openmtia: ", what, ": all tensors must be on the same device, got ", *dev,
                  " and ", t.device());
    }
    if (!dev || dev->is_cpu()) return -1;
    int index = dev->index();
    if (device_ < 0) bindDevice(boundIndex(index));
    TORCH_CHECK(index == device_, "openmtia: ", what, ": rank ", getRank(), " of this process group uses mtia:",
                device_, "; got a tensor on mtia:", index,
                " (one device per rank, as with NCCL: pass device_id or torch.mtia.set_device() before the first "
                "collective)");
    return index;
  }

  void checkSame(const Tensors& tensors, const char* what) {
    TORCH_CHECK(!tensors.empty(), "openmtia: ", what, ": expected at least one tensor");
    checkDevices(tensors, what);
    for (const auto& t : tensors) checkLike(t, tensors[0], what);
  }

  static void checkLike(const at::Tensor& t, const at::Tensor& ref, const char* what) {
    TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "openmtia: ", what, ": tensors of different dtypes (",
                t.scalar_type(), " and ", ref.scalar_type(), ")");
    TORCH_CHECK(t.sizes() == ref.sizes(), "openmtia: ", what, ": tensors of different sizes (", t.sizes(), " and ",
                ref.sizes(), ")");
  }

  // all_gather and reduce_scatter: per tensor of `mine`, a list of world-size
  // tensors like it (`which`: the outputs, or the inputs), on its device.
  void checkRankLists(const Tensors& mine, const std::vector<Tensors>& lists, const char* what, const char* which) {
    TORCH_CHECK(lists.size() == mine.size(), "openmtia: ", what, ": expected ", mine.size(), " ", which,
                " lists, got ", lists.size());
    for (size_t i = 0; i < lists.size(); ++i) {
      TORCH_CHECK((int)lists[i].size() == getSize(), "openmtia: ", what, ": the ", which, " list has ",
                  lists[i].size(), " tensors; the group has ", getSize(), " ranks");
      for (const auto& t : lists[i]) checkLike(t, mine[i], what);
    }
    checkDevices(flat(lists), what, mine[0].device());
  }

  // Coalesced gathers and scatters: each of `whole` has world size times the
  // elements of its partner in `part`, and the same dtype.
  void checkWorldSized(const Tensors& whole, const Tensors& part, const char* what) {
    TORCH_CHECK(whole.size() == part.size(), "openmtia: ", what, ": lists of ", whole.size(), " and ", part.size(),
                " tensors");
    for (size_t i = 0; i < part.size(); ++i)
      TORCH_CHECK(whole[i].numel() == part[i].numel() * getSize() && whole[i].scalar_type() == part[i].scalar_type(),
                  "openmtia: ", what, ": tensor ", i, " of ", whole[i].numel(), " elements of ",
                  whole[i].scalar_type(), " does not hold world size x ", part[i].numel(), " elements of ",
                  part[i].scalar_type());
    checkDevices(concat(part, whole), what);
  }

  // gather and scatter: every rank has one tensor; the root also has one list
  // of world-size tensors like it (gather's outputs, scatter's inputs).
  void checkRootList(const Tensors& mine, const std::vector<Tensors>& lists, int64_t root, const char* what) {
    checkRoot(root, what);
    TORCH_CHECK(mine.size() == 1, "openmtia: ", what, ": expected one tensor, got ", mine.size());
    if (getRank() == root) {
      TORCH_CHECK(lists.size() == 1 && (int)lists[0].size() == getSize(), "openmtia: ", what,
                  ": the root needs one list of ", getSize(), " tensors");
      for (const auto& t : lists[0]) checkLike(t, mine[0], what);
    } else {
      TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "openmtia: ", what,
                  ": only the root rank takes a list of tensors");
    }
    checkDevices(concat(mine, flat(lists)), what);
  }

  void checkRoot(int64_t root, const char* what) const {
    TORCH_CHECK(root >= 0 && root < getSize(), "openmtia: ", what, ": invalid root rank ", root, " for a group of ",
                getSize());
  }

  void checkPeer(int peer, const char* what) const {
    TORCH_CHECK(peer >= 0 && peer < getSize() && peer != getRank(), "openmtia: ", what, ": invalid peer rank ", peer,
                " (rank ", getRank(), " of ", getSize(), ")");
  }

  void checkSplits(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) const {
    if (splits.empty()) {
      TORCH_CHECK(t.dim() > 0 && t.size(0) % getSize() == 0, "openmtia: all_to_all_single: the ", which,
                  "'s first dimension must divide evenly by the world size ", getSize());
      return;
    }
    TORCH_CHECK((int)splits.size() == getSize(), "openmtia: all_to_all_single: ", splits.size(), " ", which,
                " splits for ", getSize(), " ranks");
    int64_t sum = 0;
    for (int64_t s : splits) {
      TORCH_CHECK(s >= 0, "openmtia: all_to_all_single: negative split");
      sum += s;
    }
    TORCH_CHECK(t.dim() > 0 && sum == t.size(0), "openmtia: all_to_all_single: the ", which,
                " splits add up to ", sum, ", its first dimension is ", t.dim() > 0 ? t.size(0) : 0);
  }

  // A point-to-point message's size, sent ahead of it: bytes, elements, dtype.
  static constexpr int64_t kHeader = 3;
  static at::Tensor messageHeader(const at::Tensor& t) {
    at::Tensor h = at::empty({kHeader}, at::kLong);
    int64_t* p = h.data_ptr<int64_t>();
    p[0] = static_cast<int64_t>(t.nbytes());
    p[1] = t.numel();
    p[2] = static_cast<int64_t>(t.scalar_type());
    return h;
  }
  static bool sameSize(const at::Tensor& a, const at::Tensor& b) {
    return a.data_ptr<int64_t>()[0] == b.data_ptr<int64_t>()[0];  // what Gloo requires
  }
  static std::string describeHeader(const at::Tensor& h) {
    const int64_t* p = h.data_ptr<int64_t>();
    std::ostringstream o;
    o << p[1] << " elements of " << static_cast<c10::ScalarType>(p[2]) << " (" << p[0] << " bytes)";
    return o.str();
  }

  static void checkNoPremul(const c10d::ReduceOp& op, const char* what) {
    TORCH_CHECK(op.op_ != c10d::ReduceOp::PREMUL_SUM, "openmtia: ", what, " does not support PREMUL_SUM");
  }

  Signature signature(OpType type, const Tensors& tensors, int64_t root = -1,
                      c10d::ReduceOp op = c10d::ReduceOp::SUM) const {
    Signature s{};
    s[kOp] = static_cast<int64_t>(type);
    s[kDtype] = tensors.empty() ? -1 : static_cast<int64_t>(tensors[0].scalar_type());
    size_t shapes = 0;
    int64_t numel = 0;
    for (const auto& t : tensors) {
      numel += t.numel();
      shapes = c10::hash_combine(shapes, c10::get_hash(t.sizes().vec()));
    }
    s[kNumel] = numel;
    s[kShapes] = static_cast<int64_t>(shapes & 0x7fffffffffffffffULL);
    s[kRoot] = root;
    s[kReduceOp] = static_cast<int64_t>(op.op_);
    s[kCount] = static_cast<int64_t>(tensors.size());
    return s;
  }

  static std::string describeSig(const int64_t* s) {
    std::ostringstream o;
    o << c10d::opTypeToString(static_cast<OpType>(s[kOp]));
    bool all_to_all = s[kOp] == static_cast<int64_t>(OpType::ALLTOALL_BASE) || s[kOp] == static_cast<int64_t>(OpType::ALLTOALL);
    if (s[kDtype] >= 0 && all_to_all) o << " of " << static_cast<c10::ScalarType>(s[kDtype]);
    else if (s[kDtype] >= 0) o << " on " << s[kNumel] << " elements of " << static_cast<c10::ScalarType>(s[kDtype]);
    if (s[kCount] > 1) o << " in " << s[kCount] << " tensors";
    if (s[kRoot] >= 0) o << ", root " << s[kRoot];
    return o.str();
  }

  // Every rank's signature, fetched by the task before the data moves.
  static void compareSignatures(const int64_t* rows, int size, int rank, const std::string& sizes) {
    const int64_t* mine = rows + rank * kSig;
    uint64_t sends = 0, expects = 0;
    for (int r = 0; r < size; ++r) {
      const int64_t* theirs = rows + r * kSig;
      sends += static_cast<uint64_t>(theirs[kSends]);
      expects += static_cast<uint64_t>(theirs[kExpects]);
      if (std::equal(mine, mine + kSends, theirs)) continue;
      std::ostringstream o;
      o << "openmtia: collective mismatch at call " << mine[kSeq] << " of this process group: rank " << rank
        << " called " << describeSig(mine) << ", rank " << r << " called " << describeSig(theirs);
      if (std::equal(mine, mine + kShapes, theirs)) o << " (with other tensor shapes)";
      if (mine[kReduceOp] != theirs[kReduceOp] && std::equal(mine, mine + kReduceOp, theirs))
        o << " (with another reduce op)";
      throw std::runtime_error(o.str());
    }
    if (sends != expects)
      throw std::runtime_error(
          "openmtia: collective mismatch at call " + std::to_string(mine[kSeq]) + " of this process group: " +
          describeSig(mine) + " with sizes that disagree across ranks: what a rank sends to another must be what " +
          "that one expects from it (all_to_all_single's input splits against its peers' output splits); rank " +
          std::to_string(rank) + " " + sizes);
  }

  // Every rank's checksum of a rank-equal result, exchanged once the data moved.
  static void verifyChecksums(SignatureMesh& mesh, const Tensors& received, int64_t seq, const char* name, int size,
                              int rank, std::chrono::milliseconds timeout) {
    uint64_t h = 0;
    for (const at::Tensor& t : received) h = checksum(t, h);
    const int64_t mine[2] = {seq, static_cast<int64_t>(h)};
    std::vector<int64_t> all(static_cast<size_t>(size) * 2);
    mesh.exchange(mine, all.data(), 2, timeout);
    // the ranks whose result differs from the one most ranks hold (rank 0's on a tie)
    std::map<int64_t, int> votes;
    for (int r = 0; r < size; ++r) ++votes[all[2 * r + 1]];
    int64_t common = all[1];
    for (const auto& [sum, n] : votes)
      if (n > votes[common]) common = sum;
    std::vector<int> odd;
    int holder = -1;  // the first rank holding the common result
    for (int r = 0; r < size; ++r)
      if (all[2 * r + 1] != common) odd.push_back(r);
      else if (holder < 0) holder = r;
    if (odd.empty()) return;
    std::ostringstream o;
    o << "openmtia: corrupted payload: the result of " << name << " (call " << seq
      << " of this process group) differs across ranks: rank" << (odd.size() > 1 ? "s" : "");
    for (size_t i = 0; i < odd.size(); ++i) o << (i ? ", " : " ") << odd[i];
    o << " received other data than rank " << holder << "'s (result checksums differ): the data was damaged in transit";
    throw std::runtime_error(o.str());
  }

  enum class Lane { kCollective, kSend, kRecv };

  WorkPtr issue(OpType type, const char* name, const Tensors& tensors, Tensors outputs,
                std::optional<Signature> sig, std::function<WorkPtr()> run, bool host_wait = false,
                Lane lane = Lane::kCollective, std::string sizes = {}) {
    // The op checked its tensors (one device, mtia or CPU) and bound the rank's device.
    int dev = tensors.empty() || tensors[0].is_cpu() ? -1 : tensors[0].device().index();
    if (device_ < 0) bindDevice(boundIndex(currentDevice()));
    int exec = device_;
    omr::StreamId stream = lane == Lane::kSend ? send_stream_ : lane == Lane::kRecv ? recv_stream_ : comm_stream_;
    if (dev >= 0)
      TORCH_CHECK(!isCapturing(static_cast<c10::DeviceIndex>(dev)), "openmtia: ", name,
                  " cannot be captured into an MTIAGraph");

    // The task exchanges the signature on the mesh before the data moves.
    std::shared_ptr<SignatureMesh> mesh;
    if (mesh_ && sig && getSize() > 1) {  // (one rank: nothing to disagree with)
      (*sig)[kSeq] = static_cast<int64_t>(++seq_);
      mesh = mesh_;
    }
    std::chrono::milliseconds timeout(timeout_ms_.load());
    const bool verify = mesh && checksums_ && rankEqualResult(type);
    // what the task received: host views of the outputs (the task, the
    // device, reads and writes them), for a corrupt fault and the checksum
    Tensors received;
    for (const at::Tensor& o : outputs)
      if (o.defined() && o.numel() > 0) received.push_back(o.device().type() == kMTIA ? hostView(o) : o);

    // the staged buffers of this op's tensors (hostViews), and which go back (the outputs')
    std::vector<Staged> stage_in = std::move(staging_), stage_out;
    staging_.clear();
    for (const Staged& s : stage_in)
      for (const at::Tensor& o : outputs)
        if (o.defined() && o.device().type() == kMTIA && o.storage().unsafeGetStorageImpl() == s.storage) {
          stage_out.push_back(s);
          break;
        }
    // A collective of device tensors gets a device-aware future, completed
    // once its task is queued (below); the host's (CPU tensors, a host wait)
    // a host future, completed by the Completer when the task is done.
    WaitMode mode = (dev < 0 || host_wait) ? WaitMode::kHost : WaitMode::kStream;
    std::vector<c10::Device> future_devices;
    if (mode == WaitMode::kStream) future_devices.emplace_back(kMTIA, static_cast<c10::DeviceIndex>(exec));
    auto op = std::make_shared<CommOp>(name, std::move(outputs), std::move(future_devices));
    if (dev >= 0 || host_wait) {
      // the communication stream waits for the caller's stream
      c10::DeviceIndex caller = static_cast<c10::DeviceIndex>(dev >= 0 ? dev : exec);
      omr::Event* ready = omr::eventCreate(false);
      try {
        OMR_CALL(omr::eventRecord(ready, caller, streamId(currentStream(caller))));
        OMR_CALL(omr::streamWaitEvent(caller, stream, ready));
      } catch (...) {
        omr::eventDestroy(ready);
        throw;
      }
      omr::eventDestroy(ready);
      // The tensors' memory was allocated for the caller's stream, and this
      // task uses it on another: none of their blocks is reused before the
      // task is done with it, whenever the caller frees them (NCCL's
      // recordStream). (A temporary input freed right after the call was
      // reused by the caller's next allocation while the task still read it.)
      const c10::Stream comm = makeStream(caller, stream);
      for (const at::Tensor& t : tensors)
        if (t.defined() && t.device().type() == kMTIA && t.storage().data() != nullptr)
          deviceAllocator()->recordStream(t.storage().data_ptr(), comm);
    }
    int size = getSize(), rank = getRank();
    std::string task = std::string("c10d:") + name;  // (its name: a corrupt fault's too)
    OMR_CALL(omr::launch(exec, stream, task.c_str(),
                         [op, run = std::move(run), mesh, sig, timeout, size, rank, sizes = std::move(sizes),
                          stage_in = std::move(stage_in), stage_out = std::move(stage_out), exec, stream, name,
                          task, received = std::move(received), verify] {
                           try {
                             if (mesh) {
                               std::vector<int64_t> all(static_cast<size_t>(size) * kSig);
                               mesh->exchange(sig->data(), all.data(), kSig, timeout);
                               compareSignatures(all.data(), size, rank, sizes);
                             }
                             for (const Staged& s : stage_in) s.host.copy_(s.device);
                             WorkPtr w = run();
                             if (w) w->wait();
                             for (const Staged& s : stage_out) s.device.copy_(s.host);
                             if (!received.empty())
                               OMR_CALL(omr::dataReceived(exec, stream, task.c_str(), received[0].data_ptr(),
                                                          spanBytes(received[0])));
                             if (verify) verifyChecksums(*mesh, received, (*sig)[kSeq], name, size, rank, timeout);
                             op->finish(nullptr);
                           } catch (abi::__forced_unwind&) {
                             throw;  // the thread is being ended (see the stream worker's loop)
                           } catch (...) {
                             // reported through the Work (wait, future), not as the stream's error
                             op->finish(std::current_exception());
                           }
                         },
                         omr::kTaskMayBlock));  // (it waits for the other ranks)
    if (mode == WaitMode::kStream)
      op->completeOnStream(makeStream(static_cast<c10::DeviceIndex>(exec), stream));
    else
      completer_->add(op);
    return c10::make_intrusive<MtiaWork>(getRank(), type, nullptr, op, mode, exec);
  }

  c10::intrusive_ptr<c10d::Backend> transport_, check_;  // check_: the sizes of sends and receives
  std::shared_ptr<SignatureMesh> mesh_;                  // the signatures of collectives
  const bool checksums_;                                 // of rank-equal results, on the mesh
  std::atomic<int64_t> timeout_ms_;
  std::unique_ptr<Completer> completer_;
  int device_ = -1;
  omr::StreamId comm_stream_ = 0, send_stream_ = 0, recv_stream_ = 0;
  uint64_t seq_ = 0;
  std::vector<Staged> staging_;  // hostViews' buffers, taken by the next issue()
};

}  // namespace

void initDistributedBindings(py::module& m) {
  m.def(
      "_c10d_backend",
      [](py::object transport, py::object check, std::optional<std::vector<int>> mesh_fds, int rank, int size,
         int device, double timeout_s, bool checksums) {
        auto unwrap = [](py::object o) -> c10::intrusive_ptr<c10d::Backend> {
          if (o.is_none()) return {};
          return o.cast<c10::intrusive_ptr<c10d::Backend>>();
        };
        std::shared_ptr<SignatureMesh> mesh;
        if (mesh_fds) mesh = std::make_shared<SignatureMesh>(*mesh_fds, rank);
        c10::intrusive_ptr<c10d::Backend> backend = c10::make_intrusive<MtiaBackend>(
            unwrap(transport), unwrap(check), std::move(mesh), rank, size, device,
            std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), checksums);
        return backend;
      },
      py::arg("transport"), py::arg("check"), py::arg("mesh_fds"), py::arg("rank"), py::arg("size"),
      py::arg("device"), py::arg("timeout_s"), py::arg("checksums") = false,
      "openmtia's c10d backend over a transport (a c10d backend of host tensors: Gloo), a Gloo group for the sizes "
      "of sends and receives and the sockets to every rank for the signatures of collectives (or None: no check); "
      "checksums: rank-equal results are compared across ranks on those sockets");
  m.def("_c10d_local_transport", &makeLocalTransport,
        "the transport of a process group of one rank: collectives run in their task, no Gloo");
}

}  // namespace openmtia::dist
