// The fallback's asynchronous path: a call run by its plan, its outputs
// allocated now and the CPU kernel enqueued as a task (see fallback.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <memory>
#include <string>
#include <vector>

#include "aten/fallback/plan_cache.h"
#include "aten/prebuilt.h"
#include "runtime/generator.h"

namespace openmtia {
namespace fallback {

// Runs an op asynchronously following its plan: outputs allocated on the
// device now, the CPU kernel over host views enqueued on the current stream.
class AsyncCall {
 public:
  AsyncCall(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device)
      : op_(op), stack_(stack), device_(device) {}

  enum class Result {
    kDone,    // enqueued
    kSync,    // must run synchronously (nothing was changed)
    kLearn,   // a new signature: run it synchronously, then learn()
  };

  Result run();

  // A first call whose kernel raised `message` over the values of its index
  // arguments (device data): the call returns outputs shaped by the Meta
  // kernel, and its task raises the error at the next sync, as later calls'
  // tasks would. false if the Meta kernel rejects the arguments too (the
  // error is about them: it raises at the call).
  bool deferFailure(std::string message);


  // After the first call of a signature ran synchronously: checks the plan
  // against what the CPU kernel did and caches it (see checked()).
  void learn(bool warned);

 private:
  // Whether the CPU kernel accepts the call with every tensor's values zero
  // (index values valid): run over zero-filled host twins of the arguments
  // (one per storage: aliasing, and so overlap checks, are kept). Only after
  // a first call failed, so it costs nothing otherwise; not for arguments
  // over 64 MB (then the error raises at the call).
  bool acceptsZeros(std::vector<c10::IValue> stack);

  // New shapes of a known family (the call's signature without its sizes and
  // strides; plan_cache.h) of an op with a Meta kernel (op_traits.h): the CPU
  // kernel has run over these dtypes, devices, ranks, empty tensors, aliasing
  // and number classes without an error or a warning, and the Meta kernel
  // planned exactly what it did. A Meta kernel checks the arguments' shapes
  // (a structured op's meta function is the argument check its CPU kernel runs
  // first): it raises the call's shape errors at the call; the kernel's other
  // checks (dtypes it has no kernel for) passed for this family. So the call
  // is planned by the Meta kernel, without running the op at the call: a loop
  // over never-seen shapes (variable-length batches, generation, a
  // table-batched lookup's indices) pays the op once, asynchronously, and a
  // check the Meta kernel lacks raises from the task, at the next sync, as a
  // device error. nullptr: a first call runs (no Meta kernel, a new family, or
  // the Meta kernel rejects or warns: then the CPU kernel gives the error or
  // warning, at the call). An in-place sampler's family holds its plan (self
  // is its result, at any shape), which serves its new shapes without a meta
  // run.
  std::shared_ptr<const Plan> newShapePlan(const std::vector<c10::IValue>& args);

  // Whether an op's first call, which made `plan`, makes its family known: the
  // Meta kernel planned the same, and no fresh result was empty (a kernel may
  // return before its dtype checks then; empty arguments are in the key).
  // (An in-place sampler's: its result was self, and nothing was resized.)
  bool learnsFamily(const Plan& plan) const;

  // The plan of what the CPU kernel did with the tensor arguments flat_args_
  // (which had the metadata before_), returning `rets`: results that are
  // inputs (in-place, out=), new dense results (their metadata), inputs it
  // resized. nullptr (and *why) if a result is none of those (a view of an
  // input, not dense, not a tensor).
  std::shared_ptr<Plan> derived(const c10::IValue* rets, size_t nrets, std::string* why);

  static std::vector<at::Tensor> flatTensors(const std::vector<c10::IValue>& args);

  // A task's call stack: its arguments, and its engines for random ops. The
  // boxed call consumes the stack; the task keeps its own references, so
  // objects the host made are freed by the host (with the task), not by the
  // worker (memory freed across threads contends for the allocator's locks).
  // The vector is the worker thread's own, reused: no allocation per task.
  static std::vector<c10::IValue>& callStack(const std::vector<c10::IValue>& args, const std::vector<std::pair<size_t,
                                             RandomDraw>>& draws);

  // An out= kernel must leave its outputs' metadata as planned (the device
  // tensors cannot follow a change): never a silently wrong result.
  static void checkOutputsKept(const c10::OperatorHandle& op, const std::vector<c10::IValue>& host, const Plan& plan);

  // The kernel's results (a fresh output lives at return slot << 32 | list
  // index), checked against the outputs. A result the kernel allocated in its
  // output's memory (ResultPlacement) is already there; any other is copied
  // ("staged"), after taking out those that landed in another output's memory.
  // Results the plan has as undefined must be.
  static void takeResults(const c10::OperatorHandle& op, const std::vector<c10::IValue>& host, const Plan& plan,
                          std::vector<std::pair<size_t, at::Tensor>>& outs);

  // During a graph capture: the op's CPU kernel prebuilt over the host
  // arguments (see prebuilt.cpp), if it has one and the plan's outputs are
  // either all fresh (outs) or the single in-place self. `flat` are the
  // tensor arguments as given: the task's copies of CPU ones are constants.
  std::shared_ptr<PrebuiltKernel> prebuild(const Plan& plan, const std::vector<at::Tensor>& flat,
                                           const std::vector<c10::IValue>& host, const std::vector<std::pair<size_t,
                                           at::Tensor>>& outs);

  // The task's view of an argument: a host view of a device tensor, a copy of
  // a CPU one.
  at::Tensor hostTensor(const at::Tensor& t);

  void toHost(c10::IValue& v);

  const c10::OperatorHandle& op_;
  torch::jit::Stack* stack_;
  c10::DeviceIndex device_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> host_storages_;
  // a new plan under verification
  std::string key_;
  std::string family_key_;                  // an op with a Meta kernel's (newShapePlan)
  std::shared_ptr<const Plan> meta_plan_;   // its first call: the Meta kernel's plan
  std::vector<at::Tensor> flat_args_;
  std::vector<Plan::Meta> before_;
  // a first call that failed on device data (deferFailure)
  std::shared_ptr<const Plan> failing_plan_;
  std::string failure_;
};

// How many results tasks have copied into their outputs (stagedResultCount).
int64_t stagedResultsSoFar();

}  // namespace fallback
}  // namespace openmtia
