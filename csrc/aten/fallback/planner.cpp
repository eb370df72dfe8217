// Plans from an op's Meta kernel (see planner.h).
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <cstdio>
#include <string>
#include <unordered_map>

#include "aten/fallback/fallback.h"
#include "aten/fallback/meta_functions.h"
#include "aten/fallback/op_traits.h"
#include "aten/fallback/planner.h"
#include "aten/per_op.h"
#include "runtime/gil.h"
#include "runtime/errors.h"
#include "runtime/host_views.h"

namespace openmtia {
namespace fallback {

// The same plan: the same results (inputs or fresh outputs with the same
// metadata) and the same resized inputs.
bool samePlan(const Plan& a, const Plan& b) {
  auto same = [](const Plan::Meta& x, const Plan::Meta& y) {
    return x.sizes == y.sizes && x.strides == y.strides && x.offset == y.offset && x.dtype == y.dtype &&
           x.conj == y.conj && x.neg == y.neg;
  };
  if (a.returns.size() != b.returns.size() || a.is_list != b.is_list || a.resized.size() != b.resized.size())
    return false;
  for (size_t i = 0; i < a.returns.size(); ++i) {
    if (a.returns[i].size() != b.returns[i].size()) return false;
    for (size_t j = 0; j < a.returns[i].size(); ++j) {
      const auto &x = a.returns[i][j], &y = b.returns[i][j];
      if (x.input != y.input || x.undefined != y.undefined) return false;
      if (x.input < 0 && !x.undefined && !same(x.meta, y.meta)) return false;
    }
  }
  for (size_t k = 0; k < a.resized.size(); ++k)
    if (a.resized[k].first != b.resized[k].first || !same(a.resized[k].second, b.resized[k].second)) return false;
  return true;
}

// What a family's entry in the plan cache holds: only that the family is known.
std::shared_ptr<const Plan> familyMark() {
  static const auto mark = std::make_shared<const Plan>();
  return mark;
}

// The global state an op's result metadata may depend on, for plan keys: the
// default dtype (e.g. int / int gives it), deterministic mode (some kernels
// choose another algorithm and output layout), grad mode (some kernels
// return differently when gradients are off, e.g. which statistics they save).
int64_t globalState() {
  const auto& ctx = at::globalContext();
  return static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())) |
         int64_t(ctx.deterministicAlgorithms()) << 8 | int64_t(ctx.deterministicAlgorithmsWarnOnly()) << 9 |
         int64_t(c10::GradMode::is_enabled()) << 10 | int64_t(c10::InferenceMode::is_enabled()) << 11;
}

// Sets what follows from a plan's outputs: whether all are fresh, and then
// the out= overload its task may call (not for results with a conj or neg
// bit: an out= kernel would set the bit on the host view, not on the output).
void finishPlan(Plan& plan, const c10::OperatorHandle& op) {
  plan.fresh = !plan.returns.empty();
  bool bits = false;
  for (size_t i = 0; i < plan.returns.size(); ++i)
    for (const auto& o : plan.returns[i]) {
      plan.fresh = plan.fresh && o.input < 0 && !o.undefined && !plan.is_list[i];
      bits = bits || o.meta.conj || o.meta.neg;
    }
  plan.out_op.reset();
  if (plan.fresh && plan.resized.empty() && !bits) plan.out_op = outOverload(op);
}

// Completes a plan whose returns are set: the tensor arguments the op
// resized (argument k is now after[k]; before the call it had before[k]),
// then what follows from its outputs (finish).
void completePlan(Plan& plan, const std::vector<at::Tensor>& after, const std::vector<Plan::Meta>& before,
              const c10::OperatorHandle& op) {
  for (size_t k = 0; k < after.size(); ++k) {  // out= tensors the op resized (or whose conj/neg bit it set)
    const at::Tensor& t = after[k];
    if (!t.defined() || sameMeta(t, before[k])) continue;
    Plan::Meta m = metaOf(t);
    m.offset -= before[k].offset;  // the plan serves views at any offset
    plan.resized.emplace_back(static_cast<int>(k), std::move(m));
  }
  finishPlan(plan, op);
  plan.async = true;
}

namespace {

c10::Storage metaStorage(const c10::Storage& s) {
  return c10::Storage(c10::Storage::use_byte_size_t(), s.nbytes(), c10::DataPtr(nullptr, c10::Device(c10::kMeta)),
                      c10::GetAllocator(c10::kMeta), /*resizable=*/true);
}

// Works out a plan by running the Meta kernel on meta twins of the arguments.
class Planner {
 public:
  explicit Planner(const c10::OperatorHandle& op, bool scalars_as_meta = false)
      : op_(op), scalars_as_meta_(scalars_as_meta) {}

  std::shared_ptr<const Plan> plan(const std::vector<c10::IValue>& args) {
    auto plan = analyse(args);
    if (!plan->async && cpu_scalars_ > 0) {
      // Some meta kernels (Python references, e.g. copysign's) reject CPU
      // scalars next to other devices, which the CPU kernel accepts: try
      // again with meta twins of them.
      Planner again(op_, /*scalars_as_meta=*/true);
      plan = again.analyse(args);
      why_ = again.why_;
    }
    if (debugFallback() && !plan->async)
      std::fprintf(stderr, "openmtia: %s runs synchronously: %s\n", op_.schema().name().c_str(), why_.c_str());
    return plan;
  }

 private:
  std::shared_ptr<Plan> fail(std::shared_ptr<Plan> plan, std::string why) {
    why_ = std::move(why);
    return plan;
  }

  std::shared_ptr<Plan> analyse(const std::vector<c10::IValue>& args) {
    auto plan = std::make_shared<Plan>();
    std::vector<c10::IValue> meta(args);
    for (auto& v : meta) {
      if (!toMeta(v)) return fail(plan, "an argument has no meta twin");
    }
    CountingWarningHandler warnings(/*forward=*/false);  // the CPU kernel gives the call's warnings
    try {
      c10::WarningUtils::WarningHandlerGuard guard(&warnings);
      if (const c10::KernelFunction* cpp = cppMetaKernel(op_)) {
        cpp->callBoxed(op_, c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
      } else if (MetaFunction fn = metaFunction(op_)) {
        fn(op_, &meta);  // openmtia's, for an op without a C++ Meta kernel
      } else {
        auto run = [&] { op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta); };
        if (hasPythonMetaKernel(op_)) warnings.count += withPythonWarningsRecorded(run);
        else run();
      }
    } catch (const std::exception& e) {
      if (isInterrupt(e)) throw;  // Ctrl-C during a Python meta kernel
      // no meta kernel, or invalid input: the synchronous path decides
      return fail(plan, std::string("meta kernel failed: ") + e.what());
    }
    // A signature that warns runs the CPU kernel synchronously at every call:
    // its warnings come once per call, at the call, as on CPU.
    if (warnings.count > 0) return fail(plan, "it warns (every call gives the CPU kernel's warnings)");
    for (auto& v : meta) {
      plan->is_list.push_back(v.isTensorList());
      std::vector<Plan::Out> outs;
      if (v.isTensor()) {
        if (!output(v.toTensor(), outs)) return fail(plan, "an output is a view or not dense");
      } else if (v.isNone()) {  // a Tensor? result left out
        output(at::Tensor(), outs);
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList())
          if (!output(t, outs)) return fail(plan, "an output is a view or not dense");
      } else {
        return fail(plan, "a result is not a tensor");
      }
      plan->returns.push_back(std::move(outs));
    }
    completePlan(*plan, flat_meta_, original_, op_);
    return plan;
  }

  bool output(const at::Tensor& m, std::vector<Plan::Out>& outs) {
    Plan::Out o;
    if (!m.defined()) {  // no result (it stays undefined at every call of the plan)
      o.undefined = true;
      outs.push_back(o);
      return true;
    }
    auto it = meta_index_.find(m.unsafeGetTensorImpl());
    if (it != meta_index_.end()) {  // an input returned (in-place, out=)
      o.input = it->second;
      outs.push_back(o);
      return true;
    }
    if (m.device().type() != c10::kMeta || m.layout() != c10::kStrided) return false;
    if (meta_storages_.count(m.storage().unsafeGetStorageImpl())) return false;  // a view: not expected here
    if (!m.is_non_overlapping_and_dense()) return false;
    o.meta = metaOf(m);
    outs.push_back(o);
    return true;
  }

  bool metaTensor(at::Tensor& t) {
    int index = static_cast<int>(flat_meta_.size());
    if (!t.defined()) {
      flat_meta_.push_back(t);
      original_.push_back({});
      return true;
    }
    if (t.layout() != c10::kStrided) return false;
    if (t.device().type() == c10::kCPU && t.dim() == 0 && !scalars_as_meta_) {  // a CPU scalar stays one
      ++cpu_scalars_;
      flat_meta_.push_back(t);
      original_.push_back(metaOf(t));
      return true;
    }
    if (t.device().type() != kMTIA && t.device().type() != c10::kCPU) return false;
    auto* impl = t.unsafeGetTensorImpl();
    auto it = by_impl_.find(impl);
    if (it != by_impl_.end()) {  // the same tensor twice: one meta twin
      t = it->second;
    } else {
      c10::StorageImpl* si = t.storage().unsafeGetStorageImpl();
      auto sit = meta_storages_.find(si);
      if (sit == meta_storages_.end()) sit = meta_storages_.emplace(si, metaStorage(t.storage())).first;
      original_.push_back(metaOf(t));
      at::Tensor m = viewOn(sit->second, t, c10::DispatchKey::Meta);
      if (impl->is_wrapped_number()) m.unsafeGetTensorImpl()->set_wrapped_number(true);
      by_impl_.emplace(impl, m);
      meta_index_.emplace(m.unsafeGetTensorImpl(), index);
      t = m;
      flat_meta_.push_back(t);
      return true;
    }
    original_.push_back(metaOf(t));
    flat_meta_.push_back(t);
    return true;
  }

  bool toMeta(c10::IValue& v) {
    if (v.isGenerator()) {  // shapes do not depend on it
      v = c10::IValue();
      return true;
    }
    if (v.isDevice() && v.toDevice().type() == kMTIA) {
      v = c10::Device(c10::kMeta);
      return true;
    }
    bool ok = true;
    v = mapTensors(v, [&](at::Tensor t) {
      ok = ok && metaTensor(t);
      return t;
    });
    return ok;
  }

  const c10::OperatorHandle& op_;
  std::string why_;
  const bool scalars_as_meta_;  // CPU scalar arguments get meta twins too
  int cpu_scalars_ = 0;         // CPU scalar arguments kept as CPU tensors
  std::vector<at::Tensor> flat_meta_;     // meta twin of each tensor argument, in order
  std::vector<Plan::Meta> original_;      // each tensor argument's metadata before the call
  std::unordered_map<c10::TensorImpl*, at::Tensor> by_impl_;
  std::unordered_map<c10::TensorImpl*, int> meta_index_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> meta_storages_;
};

}  // namespace

std::shared_ptr<const Plan> metaPlan(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) {
  return Planner(op).plan(args);
}

}  // namespace fallback
}  // namespace openmtia
