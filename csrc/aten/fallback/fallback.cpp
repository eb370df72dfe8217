// Boxed fallback for every aten op without an mtia kernel.
//
// openmtia device memory is host-addressable, so the fallback runs the CPU
// kernel on CPU views of the very same memory (no staging copies). It runs
// asynchronously where it can (see AsyncCall below): a call signature's
// first call runs synchronously and what the CPU kernel did becomes the
// signature's plan (plan_cache.h); later calls allocate their outputs on the
// device as planned and enqueue the CPU kernel as a task on the current
// stream. A structured op's new shape of a known family is planned by its C++
// meta function (AsyncCall::newShapePlan) and is asynchronous at once, as is
// an in-place sampler's (normal_, uniform_, ...; inPlaceSampler).
// Otherwise (scalar results, data-dependent shapes, value checks at the call,
// Python CPU kernels) it runs synchronously (HostCall):
//  - it waits for the current stream of the op's device (the host reads and
//    writes device memory directly, so it must be ordered after queued work);
//  - each mtia tensor argument becomes a CPU tensor over the same bytes, one
//    host storage per device storage, so in-place ops, out= ops and views act
//    on the device memory itself; out= tensors resized by the kernel get
//    device memory (a device allocator labelled CPU) and their new storage
//    and sizes are written back to the mtia tensor;
//  - an mtia generator (or, when none is given, the device's default one) is
//    replaced by a host engine for this op's draw (see generator.cpp), mtia
//    devices by cpu;
//  - results: the input itself for in-place/out= returns, an mtia view of the
//    same storage for views, otherwise a new mtia tensor holding the values.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "aten/fallback/async_call.h"
#include "aten/fallback/fallback.h"
#include "aten/fallback/host_call.h"
#include "aten/fallback/op_traits.h"
#include "aten/fallback/planner.h"
#include "runtime/errors.h"
#include "runtime/graphs.h"
#include "runtime/stream.h"

namespace openmtia {

using namespace fallback;  // (the fallback's parts)

bool debugFallback() {
  static const bool on = [] {
    const char* v = std::getenv("OPENMTIA_DEBUG_FALLBACK");
    return v && std::string(v) == "1";
  }();
  return on;
}

namespace {

// Nothing may wait for a stream while it is captured into a graph: an op that
// must run synchronously cannot be recorded. Says which op, and why.
void refuseWhileCapturing(const c10::OperatorHandle& op, c10::DeviceIndex device, const char* why) {
  TORCH_CHECK(!isCapturing(device), op.schema().name(), " cannot be captured into an MTIAGraph: ", why);
}

}  // namespace

void mtiaFallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  HostCall call(op, stack);
  Mode mode = modeOf(op);
  if (debugFallback())
    std::fprintf(stderr, "openmtia: fallback %s (%s)\n", op.schema().name().c_str(),
                 mode == Mode::kSync ? "sync" : mode == Mode::kView ? "view" : "async");
  c10::DeviceIndex device = call.device();
  if (mode == Mode::kSync || dataDependentCall(op, *stack)) {
    refuseWhileCapturing(op, device, "it runs synchronously (the host reads its result, its output's shape depends "
                                     "on the data, it checks its input's values, or its CPU kernel is a Python "
                                     "function)");
    return call.run(/*wait=*/true);
  }
  if (mode == Mode::kView) return call.run(/*wait=*/false);  // views read no data
  c10::DeviceGuard guard(c10::Device(kMTIA, device));
  AsyncCall async(op, stack, device);
  auto result = async.run();
  if (result == AsyncCall::Result::kDone) return;
  if (result == AsyncCall::Result::kLearn) {  // a new signature: this call makes its plan
    CountingWarningHandler warnings(/*forward=*/true);
    const size_t nargs = op.schema().arguments().size();
    const size_t first = stack->size() - nargs;
    std::vector<c10::IValue> args(stack->begin() + first, stack->end());
    syncCurrentStream(device);  // an earlier task's error raises here as it is: it is not this kernel's
    try {
      c10::WarningUtils::WarningHandlerGuard guard(&warnings);
      call.run(/*wait=*/true);
    } catch (const c10::Error& e) {
      // An error over the values of index arguments is a device-data error:
      // as on later calls (and on CUDA), it comes at the next sync.
      if (dynamic_cast<const c10::NotImplementedError*>(&e) || !takesIndexValues(op, args)) throw;
      stack->resize(first);  // whatever the kernel left of the call: the arguments again
      stack->insert(stack->end(), args.begin(), args.end());
      if (!async.deferFailure(e.what_without_backtrace())) throw;  // (the message later calls' tasks give)
      return;
    }
    async.learn(warnings.count > 0);
    return;
  }
  refuseWhileCapturing(op, device, "it runs synchronously for these arguments (it has no asynchronous plan for them)");
  call.run(/*wait=*/true);
}

void boxedFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { mtiaFallback(op, {}, stack); }

at::Tensor boxedFallbackCall(const c10::OperatorHandle& op, std::vector<c10::IValue> args) {
  torch::jit::Stack stack(std::move(args));
  boxedFallback(op, &stack);
  return stack.back().toTensor();
}

TORCH_LIBRARY_IMPL(_, MTIA, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&mtiaFallback>()); }

int64_t stagedResultCount() { return fallback::stagedResultsSoFar(); }

}  // namespace openmtia
