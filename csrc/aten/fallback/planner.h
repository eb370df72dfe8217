// Plans of the fallback's asynchronous calls (plan_cache.h) from an op's
// Meta kernel: the outputs' metadata without running the op.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <memory>
#include <vector>

#include "aten/fallback/plan_cache.h"

namespace openmtia {
namespace fallback {

// The same plan: the same results (inputs or fresh outputs with the same
// metadata) and the same resized inputs.
bool samePlan(const Plan& a, const Plan& b);

// What a family's entry in the plan cache holds: only that the family is known.
std::shared_ptr<const Plan> familyMark();

// The global state an op's result metadata may depend on, for plan keys: the
// default dtype (e.g. int / int gives it), deterministic mode (some kernels
// choose another algorithm and output layout), grad mode (some kernels
// return differently when gradients are off, e.g. which statistics they save).
int64_t globalState();

// Sets what follows from a plan's outputs: whether all are fresh, and then
// the out= overload its task may call (not for results with a conj or neg
// bit: an out= kernel would set the bit on the host view, not on the output).
void finishPlan(Plan& plan, const c10::OperatorHandle& op);

// Completes a plan whose returns are set: the tensor arguments the op
// resized (argument k is now after[k]; before the call it had before[k]),
// then what follows from its outputs (finish).
void completePlan(Plan& plan, const std::vector<at::Tensor>& after, const std::vector<Plan::Meta>& before,
              const c10::OperatorHandle& op);

// Counts warnings, passing them on to the thread's handler (Python's, at a
// Python call) if `forward`.
struct CountingWarningHandler final : public c10::WarningHandler {
  explicit CountingWarningHandler(bool forward) : forward(forward) {}
  c10::WarningHandler* next = c10::WarningUtils::get_warning_handler();
  bool forward;
  int count = 0;
  void process(const c10::Warning& warning) override {
    ++count;
    if (forward) next->process(warning);
  }
};

// The plan of a call over `args` (the op's arguments), worked out by running
// the Meta kernel on meta twins of them (a plan that is not async says why
// the call cannot run asynchronously).
std::shared_ptr<const Plan> metaPlan(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args);

}  // namespace fallback
}  // namespace openmtia
