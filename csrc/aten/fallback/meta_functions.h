// Meta kernels openmtia supplies for ops whose library registers none in C++
// (e.g. FBGEMM's CPU-only pt2 wrappers), for the fallback's planner only
// (which takes them over the library's own, and over a Python Meta kernel
// (op_traits.h: hasMetaKernel)): they are
// not registered with the dispatcher, so the op on CPU or meta tensors is the
// library's own. Like a Meta kernel, a function takes the op's arguments on
// the stack, as meta tensors, and leaves its results' metadata there.
//
// The planner treats them like any Meta kernel: the first call of a family
// (plan_cache.h) checks the function's plan against what the CPU kernel did,
// and each later task checks its results against the plan, so a function
// that is wrong costs speed (every call synchronous), never a wrong result.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>

namespace openmtia {
namespace fallback {

using MetaFunction = void (*)(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// `name`: the op's qualified name, "ns::op" or "ns::op.overload".
void registerMetaFunction(const std::string& name, MetaFunction fn);

// The function registered for this op, or nullptr.
MetaFunction metaFunction(const c10::OperatorHandle& op);

}  // namespace fallback
}  // namespace openmtia
