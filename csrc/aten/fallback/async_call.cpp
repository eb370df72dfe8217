// The fallback's asynchronous path (see async_call.h).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/accumulate.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include "openmtia/runtime.h"
#include "aten/convolution.h"
#include "aten/fallback/async_call.h"
#include "aten/fallback/fallback.h"
#include "aten/threads/learned_threads.h"
#include "aten/fallback/op_traits.h"
#include "aten/fallback/planner.h"
#include "aten/fallback/plan_cache.h"
#include "aten/low_precision/low_precision.h"
#include "aten/meta_kernels.h"
#include "aten/ops.h"
#include "aten/per_op.h"
#include "aten/pointwise.h"
#include "aten/prebuilt.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/gil.h"
#include "runtime/device.h"
#include "runtime/device_access.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/generator.h"
#include "runtime/graphs.h"
#include "runtime/host_views.h"
#include "runtime/result_placement.h"
#include "runtime/stream.h"
#include "structured_ops.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <unordered_set>


namespace openmtia {
namespace fallback {

namespace {
std::atomic<int64_t>& stagedResults() {
  static std::atomic<int64_t> n{0};
  return n;
}
}  // namespace

int64_t stagedResultsSoFar() { return stagedResults().load(); }

AsyncCall::Result AsyncCall::run() {
  const auto& schema = op_.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack_->size() - nargs;
  std::vector<c10::IValue> args;
  args.reserve(nargs + schema.returns().size() + 2);  // room for out= outputs and the kernel's results
  args.assign(stack_->begin() + first, stack_->end());

  std::shared_ptr<const Plan> plan = failing_plan_;
  if (!plan) {
    KeyBuilder kb(op_);
    kb.addState(globalState());
    bool cacheable = true;
    for (size_t i = 0; i < nargs && cacheable; ++i) cacheable = kb.add(args[i], schema.arguments()[i].type());
    if (!cacheable) return Result::kSync;  // a signature that cannot be keyed
    key_ = kb.key();
    plan = planCache().get(key_);
  }
  if (!plan && !isCapturing(device_)) plan = newShapePlan(args);
  if (!plan) {
    // A new signature. Its first call runs synchronously on the real data:
    // the CPU kernel makes its argument checks and gives its warnings at the
    // call, computes the result once, with no host copy of the arguments,
    // and shows what the op does (which results are inputs, the dtypes,
    // strides and conj/neg bits of new ones, which inputs it resizes):
    // learn() makes that the signature's plan.
    if (!isCapturing(device_)) {
      flat_args_ = flatTensors(args);
      for (const auto& t : flat_args_) before_.push_back(t.defined() ? metaOf(t) : Plan::Meta{});
      // (a structured op: what its meta function plans, to see in learn()
      // whether it is what the CPU kernel does)
      if (!family_key_.empty() && !meta_plan_ && !inPlaceSampler(op_)) meta_plan_ = metaPlan(op_, args);
      return Result::kLearn;
    }
    // Nothing waits during a capture: this call takes the Meta kernel's
    // plan (its task checks the kernel's results against it).
    plan = metaPlan(op_, args);
  }
  if (!plan->async) return Result::kSync;

  std::vector<at::Tensor> flat = flatTensors(args);
  for (const auto& [k, m] : plan->resized) {  // out= tensors the op resizes
    const at::Tensor& d = flat[k];
    d.unsafeGetTensorImpl()->set_sizes_and_strides(m.sizes, m.strides, d.storage_offset() + m.offset);
    ensureStorageFits(d);
  }
  std::vector<c10::IValue> results;
  std::vector<std::pair<size_t, at::Tensor>> outs;  // (return slot, host view of a fresh output)
  auto make = [&](const Plan::Out& o, size_t slot) {
    if (o.input >= 0) return flat[o.input];
    if (o.undefined) return at::Tensor();
    at::Tensor d = at::detail::empty_strided_generic(o.meta.sizes, o.meta.strides, deviceAllocator(),
                                                     c10::DispatchKeySet(c10::DispatchKey::MTIA), o.meta.dtype);
    d._set_conj(o.meta.conj);  // as the CPU kernel gives it (e.g. a conjugate view)
    d._set_neg(o.meta.neg);
    outs.emplace_back(slot, hostView(d));
    return d;
  };
  for (size_t i = 0; i < plan->returns.size(); ++i) {
    const auto& r = plan->returns[i];
    if (plan->is_list[i]) {
      c10::List<at::Tensor> list;
      for (size_t j = 0; j < r.size(); ++j) list.push_back(make(r[j], (i << 32) | j));
      results.emplace_back(list);
    } else if (r[0].undefined && isOptionalTensorType(schema.returns()[i].type())) {
      results.emplace_back();  // None, as the CPU kernel returns it
    } else {
      results.emplace_back(make(r[0], i << 32));
    }
  }
  std::vector<std::pair<size_t, RandomDraw>> draws;  // random ops: the engine is built by the task
  for (size_t i = 0; i < args.size(); ++i) {
    if (isGeneratorType(schema.arguments()[i].type())) {
      draws.emplace_back(i, drawFor(args[i], device_));
      args[i] = c10::IValue();
    } else {
      toHost(args[i]);
    }
  }
  // a conj or neg bit the kernel sets on an out= tensor: on the device
  // tensor, not on the host view the kernel gets (it sets it there itself)
  for (const auto& [k, m] : plan->resized) {
    flat[k]._set_conj(m.conj);
    flat[k]._set_neg(m.neg);
  }
  const bool float32 = float32Call(op_, *stack_);  // (bf16/fp16 matrix ops: low_precision.h)
  std::vector<ResultPlacement::Slot> scratch;       // its float32 stand-ins, served from device memory
  // (device tensors, all allocated before the launch and freed after it:
  // stream-ordered, a later allocation of their blocks on this stream is
  // for later work. A task that held them until it was destroyed kept
  // one set per queued task: 416 page faults per call until the pool had
  // grown to the queue's depth. A captured task holds them, as a graph's
  // tasks hold all the memory they use.)
  std::vector<at::Tensor> scratch_tensors;
  if (float32) {
    std::vector<at::Tensor> low = flat;
    for (const auto& [slot, out] : outs) low.push_back(out);
    scratch_tensors = float32Scratch(low);
    for (const at::Tensor& v : scratch_tensors) scratch.push_back({v.data_ptr(), v.storage().nbytes()});
  }
  auto heldByTask = [this](const std::vector<at::Tensor>& t) {
    return isCapturing(device_) ? t : std::vector<at::Tensor>();
  };
  int64_t work = workElements(args);
  for (auto& [slot, out] : outs) work += out.numel();
  work = kernelWork(op_, args, work);
  std::shared_ptr<PrebuiltKernel> prebuilt;
  if (draws.empty() && !float32 && isCapturing(device_)) prebuilt = prebuild(*plan, flat, args, outs);
  if (failing_plan_) {  // the kernel's error, raised by the task as a device error
    launchOnCurrentStream(device_, schema.name().c_str(), [message = failure_] { throw std::runtime_error(message); });
  } else if (prebuilt) {  // a graph replay runs only the CPU loop
    launchOnCurrentStream(device_, schema.name().c_str(), [prebuilt, work] {
      useKernelThreads(work);
      prebuilt->run();
    });
  } else if (plan->out_op) {  // the kernel writes into the device outputs themselves
    for (auto& [slot, out] : outs) args.emplace_back(out);
    launchOnCurrentStream(device_, schema.name().c_str(),
                          [op = *plan->out_op, host = std::move(args), draws = std::move(draws), work, plan,
                           float32, scratch, keep = heldByTask(scratch_tensors)]() {
                            std::vector<c10::IValue>& stack = callStack(host, draws);
                            {
                              LearnedThreads threads(op, work);
                              at::AutoDispatchBelowADInplaceOrView below_autograd;
                              ResultPlacement placement(scratch);
                              callCpuKernel(op, &stack, float32, work);
                            }
                            stack.clear();  // the task still holds what it references
                            checkOutputsKept(op, host, *plan);
                          });
  } else {
    auto op = op_;
    launchOnCurrentStream(
        device_, schema.name().c_str(),
        [op, plan, host = std::move(args), outs = std::move(outs), draws = std::move(draws), work, float32,
         scratch = std::move(scratch), keep = heldByTask(scratch_tensors)]() mutable {
          std::vector<c10::IValue>& stack = callStack(host, draws);
          std::vector<ResultPlacement::Slot> slots = scratch;  // first: a float32 stand-in takes its own
          for (auto& [slot, out] : outs)
            if (out.numel() > 0) slots.push_back({out.data_ptr(), out.storage().nbytes()});
          {
            LearnedThreads threads(op, work);  // (learned per op and size: learned_threads.h)
            // as on the host: kernels run below autograd
            at::AutoDispatchBelowADInplaceOrView below_autograd;
            ResultPlacement placement(std::move(slots));  // results allocated in the outputs
            callCpuKernel(op, &stack, float32, work);
          }
          takeResults(op, stack, *plan, outs);
          stack.clear();
        });
  }
  stack_->erase(stack_->begin() + first, stack_->end());
  for (auto& r : results) stack_->push_back(std::move(r));
  return Result::kDone;
}

bool AsyncCall::deferFailure(std::string message) {
  std::vector<c10::IValue> args(stack_->end() - op_.schema().arguments().size(), stack_->end());
  if (!acceptsZeros(args)) return false;
  auto plan = metaPlan(op_, args);
  if (!plan->async) return false;
  failing_plan_ = plan;
  failure_ = std::move(message);
  return run() == Result::kDone;
}

bool AsyncCall::acceptsZeros(std::vector<c10::IValue> stack) {
  constexpr size_t kMaxTwinBytes = size_t(64) << 20;
  const auto& schema = op_.schema();
  size_t bytes = 0;
  bool ok = true;
  std::unordered_map<c10::StorageImpl*, c10::Storage> storages;
  std::unordered_map<c10::TensorImpl*, at::Tensor> twins;
  auto twin = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || t.layout() != c10::kStrided) {
      ok = ok && !t.defined();
      return t;
    }
    auto it = twins.find(t.unsafeGetTensorImpl());
    if (it == twins.end()) {
      c10::StorageImpl* si = t.storage().unsafeGetStorageImpl();
      auto sit = storages.find(si);
      if (sit == storages.end()) {
        size_t n = t.storage().nbytes();
        bytes += n;
        ok = ok && bytes <= kMaxTwinBytes;
        c10::Storage st(c10::Storage::use_byte_size_t(), ok ? n : 0, c10::GetCPUAllocator(), /*resizable=*/true);
        if (ok && n) std::memset(st.mutable_data(), 0, n);
        sit = storages.emplace(si, std::move(st)).first;
      }
      at::Tensor tw = viewOn(sit->second, t, c10::DispatchKey::CPU);
      if (t.unsafeGetTensorImpl()->is_wrapped_number()) tw.unsafeGetTensorImpl()->set_wrapped_number(true);
      it = twins.emplace(t.unsafeGetTensorImpl(), std::move(tw)).first;
    }
    return it->second;
  };
  for (size_t i = 0; i < stack.size(); ++i) {
    c10::IValue& v = stack[i];
    if (isGeneratorType(schema.arguments()[i].type())) v = at::make_generator<at::CPUGeneratorImpl>(0);
    else if (v.isDevice() && v.toDevice().type() == kMTIA) v = c10::Device(c10::kCPU);
    else v = mapTensors(v, twin);
  }
  if (!ok) return false;
  CountingWarningHandler quiet(/*forward=*/false);  // the failed call gave its warnings
  try {
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    HostKernelScope host_kernel(kernelWork(op_, stack, workElements(stack)));
    op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
  } catch (const std::exception& e) {
    if (isInterrupt(e)) throw;
    return false;
  }
  return true;
}

void AsyncCall::learn(bool warned) {
  planCache().countFirstCall();
  if (debugFallback()) std::fprintf(stderr, "openmtia: %s: a new signature's first call\n", op_.schema().name().c_str());
  std::string why = warned ? "it warns (every call gives the CPU kernel's warnings)" : std::string();
  std::shared_ptr<Plan> plan;
  const size_t nrets = op_.schema().returns().size();
  if (!warned && stack_->size() >= nrets) plan = derived(&*(stack_->end() - nrets), nrets, &why);
  if (!plan) {
    plan = std::make_shared<Plan>();  // synchronous at every call
    if (debugFallback())
      std::fprintf(stderr, "openmtia: %s runs synchronously: %s\n", op_.schema().name().c_str(), why.c_str());
  }
  if (!warned && learnsFamily(*plan)) planCache().put(family_key_, inPlaceSampler(op_) ? plan : familyMark());
  planCache().put(key_, std::move(plan));
}

std::shared_ptr<const Plan> AsyncCall::newShapePlan(const std::vector<c10::IValue>& args) {
  const bool sampler = inPlaceSampler(op_);
  if (!sampler && !hasMetaKernel(op_)) return nullptr;
  const auto& schema = op_.schema();
  KeyBuilder kb(op_, KeyBuilder::Shapes::kOmitted);
  kb.addState(globalState());
  for (size_t i = 0; i < args.size(); ++i)  // (the real types: SymInt sizes are omitted too)
    if (!kb.add(args[i], schema.arguments()[i].real_type())) return nullptr;
  family_key_ = kb.key();
  std::shared_ptr<const Plan> family = planCache().get(family_key_);
  if (!family) return nullptr;
  std::shared_ptr<const Plan> plan = sampler ? family : metaPlan(op_, args);
  if (!plan->async) {
    meta_plan_ = plan;  // (the first call's: no second meta run)
    return nullptr;
  }
  planCache().countShapeCall();
  if (debugFallback()) std::fprintf(stderr, "openmtia: %s: a new shape of a known family\n", schema.name().c_str());
  planCache().put(key_, plan);
  return plan;
}

bool AsyncCall::learnsFamily(const Plan& plan) const {
  if (inPlaceSampler(op_)) {
    if (!plan.async || plan.returns.size() != 1 || plan.returns[0].size() != 1 || plan.returns[0][0].input != 0 ||
        !plan.resized.empty())
      return false;
  } else if (!meta_plan_ || !meta_plan_->async || !plan.async || !samePlan(plan, *meta_plan_)) {
    return false;
  }
  // (a tensor argument's emptiness is part of the family key: a kernel may
  // return before its dtype checks when one is empty)
  for (const auto& r : plan.returns)
    for (const auto& o : r)
      if (o.input < 0 && !o.undefined && c10::multiply_integers(o.meta.sizes) == 0) return false;
  return true;
}

std::shared_ptr<Plan> AsyncCall::derived(const c10::IValue* rets, size_t nrets, std::string* why) {
  auto plan = std::make_shared<Plan>();
  auto add = [&](const at::Tensor& r, std::vector<Plan::Out>& outs) {
    Plan::Out o;
    for (size_t k = 0; k < flat_args_.size() && o.input < 0; ++k)
      if (r.defined() && r.is_same(flat_args_[k])) o.input = static_cast<int>(k);
    if (!r.defined()) {
      o.undefined = true;
    } else if (o.input < 0) {
      if (r.device().type() != kMTIA || r.layout() != c10::kStrided || !r.is_non_overlapping_and_dense()) {
        *why = "a result is not dense or not on the device";
        return false;
      }
      for (const auto& t : flat_args_)
        if (t.defined() && t.has_storage() && t.storage().is_alias_of(r.storage())) {
          *why = "a result is a view of an input";
          return false;
        }
      o.meta = metaOf(r);
    }
    outs.push_back(std::move(o));
    return true;
  };
  for (size_t i = 0; i < nrets; ++i) {
    std::vector<Plan::Out> outs;
    const c10::IValue& v = rets[i];
    plan->is_list.push_back(v.isTensorList());
    if (v.isTensor()) {
      if (!add(v.toTensor(), outs)) return nullptr;
    } else if (v.isNone()) {  // a Tensor? result left out: undefined in the plan, None at each call
      add(at::Tensor(), outs);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList())
        if (!add(t, outs)) return nullptr;
    } else {
      *why = "a result is not a tensor";
      return nullptr;
    }
    plan->returns.push_back(std::move(outs));
  }
  completePlan(*plan, flat_args_, before_, op_);
  return plan;
}

std::vector<at::Tensor> AsyncCall::flatTensors(const std::vector<c10::IValue>& args) {
  std::vector<at::Tensor> flat;  // the tensor arguments in the Planner's order
  for (const auto& v : args)
    mapTensors(v, [&](const at::Tensor& t) {
      flat.push_back(t);
      return t;
    });
  return flat;
}

std::vector<c10::IValue>& AsyncCall::callStack(const std::vector<c10::IValue>& args,
                                               const std::vector<std::pair<size_t, RandomDraw>>& draws) {
  thread_local std::vector<c10::IValue> stack;
  stack.clear();
  stack.insert(stack.end(), args.begin(), args.end());
  for (const auto& [i, d] : draws) stack[i] = d.engine();
  return stack;
}

void AsyncCall::checkOutputsKept(const c10::OperatorHandle& op, const std::vector<c10::IValue>& host,
                                 const Plan& plan) {
  // the outputs follow the arguments, one per return (an out= plan's results are all fresh)
  const size_t first = host.size() - plan.returns.size();
  for (size_t j = 0; j < plan.returns.size(); ++j) {
    const at::Tensor& o = host[first + j].toTensor();
    const Plan::Meta& m = plan.returns[j][0].meta;  // allocated with these, at offset 0
    TORCH_CHECK(o.sizes().equals(m.sizes) && o.strides().equals(m.strides) && o.storage_offset() == 0 &&
                    o.is_conj() == m.conj && o.is_neg() == m.neg,
                "openmtia: ", op.schema().name(), " changed the metadata of its output ", j, " (", m.sizes, " ",
                m.strides, " conj ", m.conj, " -> ", o.sizes(), " ", o.strides(), " conj ", o.is_conj(),
                "): the plan of this call is wrong");
  }
}

void AsyncCall::takeResults(const c10::OperatorHandle& op, const std::vector<c10::IValue>& host, const Plan& plan,
                            std::vector<std::pair<size_t, at::Tensor>>& outs) {
  auto result = [&](size_t ret, size_t idx) {
    const c10::IValue& v = host[ret];
    return v.isNone() ? at::Tensor() : v.isTensor() ? v.toTensor() : v.toTensorList().get(idx);
  };
  for (size_t i = 0; i < plan.returns.size(); ++i)  // no result where the plan has none
    for (size_t j = 0; j < plan.returns[i].size(); ++j)
      TORCH_CHECK(!plan.returns[i][j].undefined || !result(i, j).defined(), "openmtia: ", op.schema().name(),
                  " returned a tensor (result ", i, ") where its plan has none: the plan of this call is wrong");
  std::vector<std::pair<at::Tensor, at::Tensor*>> copies;
  for (auto& [slot, out] : outs) {
    at::Tensor r = result(slot >> 32, slot & 0xffffffff);
    // The output was shaped from the Meta kernel; never convert silently.
    TORCH_CHECK(r.defined(), "openmtia: the meta kernel predicted ", out.sizes(), " ", out.dtype(), " but ",
                op.schema().name(), " returned no tensor");
    TORCH_CHECK(r.sizes().equals(out.sizes()) && r.dtype() == out.dtype(), "openmtia: the meta kernel predicted ",
                out.sizes(), " ", out.dtype(), " but the kernel returned ", r.sizes(), " ", r.dtype());
    if (out.numel() == 0) continue;
    bool placed = r.data_ptr() == out.data_ptr() && r.strides().equals(out.strides()) &&
                  r.is_conj() == out.is_conj() && r.is_neg() == out.is_neg();
    if (!placed) copies.emplace_back(r, &out);
  }
  if (copies.empty()) return;
  stagedResults().fetch_add(copies.size());
  if (debugFallback()) std::fprintf(stderr, "openmtia: %s: result copied into its output\n", op.schema().name().c_str());
  for (auto& [r, out] : copies) {
    const char* base = static_cast<const char*>(r.storage().data());
    for (auto& [slot, o] : outs) {
      const char* p = static_cast<const char*>(o.data_ptr());
      if (base >= p && base < p + o.storage().nbytes()) r = r.clone();
    }
  }
  for (auto& [r, out] : copies) out->copy_(r);
}

std::shared_ptr<PrebuiltKernel> AsyncCall::prebuild(const Plan& plan, const std::vector<at::Tensor>& flat,
                                                    const std::vector<c10::IValue>& host,
                                                    const std::vector<std::pair<size_t, at::Tensor>>& outs) {
  if (!plan.resized.empty()) return nullptr;
  // Building the kernel's iterator converts an input of another dtype on
  // this (host) thread (prebuilt.cpp then declines the snapshot): where
  // the host may not read device memory, captured ops keep their task.
  if (!hostAddressable(device_)) return nullptr;
  std::vector<at::Tensor> targets;
  if (plan.fresh) {
    for (const auto& [slot, out] : outs) targets.push_back(out);
  } else if (plan.returns.size() == 1 && plan.returns[0].size() == 1 && plan.returns[0][0].input == 0 &&
             !plan.is_list[0] && !host.empty() && host[0].isTensor()) {
    targets.push_back(host[0].toTensor());  // in place
  } else {
    return nullptr;
  }
  std::vector<at::Tensor> constants, host_flat = flatTensors(host);
  for (size_t k = 0; k < flat.size() && k < host_flat.size(); ++k)
    if (flat[k].defined() && flat[k].device().type() == c10::kCPU) constants.push_back(host_flat[k]);
  return prebuildKernel(op_.schema(), host, std::move(targets), constants);
}

at::Tensor AsyncCall::hostTensor(const at::Tensor& t) {
  if (!t.defined()) return t;
  if (t.device().type() == c10::kCPU) {  // the host may change it before the task runs
    at::Tensor c;
    if (t.dim() == 0 && !t.is_conj() && !t.is_neg()) {  // a scalar: copy its bytes, without a copy kernel
      c = at::detail::empty_cpu({}, t.scalar_type());
      std::memcpy(c.mutable_data_ptr(), t.const_data_ptr(), t.element_size());
    } else {
      c = t.clone();
    }
    // a Python number stays one: it does not take part in type promotion
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) c.unsafeGetTensorImpl()->set_wrapped_number(true);
    return c;
  }
  c10::StorageImpl* si = t.storage().unsafeGetStorageImpl();
  auto it = host_storages_.find(si);
  if (it == host_storages_.end()) it = host_storages_.emplace(si, hostStorageOf(t.storage(), nullptr)).first;
  return hostViewOn(it->second, t);
}

void AsyncCall::toHost(c10::IValue& v) {
  if (v.isDevice() && v.toDevice().type() == kMTIA) v = c10::Device(c10::kCPU);
  else v = mapTensors(v, [this](const at::Tensor& t) { return hostTensor(t); });
}

}  // namespace fallback
}  // namespace openmtia
