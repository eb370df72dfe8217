// What the fallback knows of an op: from its schema (how it may run:
// synchronously, asynchronously, as a view), from its registrations (Python
// kernels, structured meta functions, out= overloads), and over its
// arguments (their tensors, its random draw).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include <optional>
#include <string>
#include <vector>

#include "runtime/generator.h"

namespace openmtia {
namespace fallback {

// Ops that, like on CUDA, accept CPU index tensors next to device tensors.
bool acceptsCpuIndices(const c10::OperatorName& name);

// Calls f on every tensor in v (a Tensor, Tensor[] or Tensor?[] argument).
template <typename F>
void forEachTensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isOptionalTensorList()) {
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      if (t.has_value()) f(*t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) forEachTensor(e, f);
  }
}

// v with every tensor in it (a Tensor, Tensor[] or Tensor?[] argument) replaced
// by f(tensor), in order; other values unchanged.
template <typename F>
c10::IValue mapTensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      out.push_back(t.has_value() ? std::optional<at::Tensor>(f(*t)) : std::nullopt);
    return out;
  }
  return v;
}

// Generator and Generator? arguments.
bool isGeneratorType(const c10::TypePtr& t);

// A random op's draw from its generator argument (or the device's default
// generator): taken when the op is issued, so the values follow program order.
RandomDraw drawFor(const c10::IValue& generator, c10::DeviceIndex device);

// Tensor and Tensor[] values.
bool isTensorType(const c10::TypePtr& t);
// Tensor? (a result that may be None: a plan holds it as undefined).
bool isOptionalTensorType(const c10::TypePtr& t);

// Ops whose output shape depends on the data: the host must wait for it.
// Those torch tags dynamic_output_shape (but aten::index: see
// dataDependentCall), and these.
bool isDataDependent(const c10::OperatorHandle& op);

// Ops whose kernels check their inputs' values on the host and raise at the
// call, on CPU as on CUDA (whose kernels wait for the device to do it, or run
// on the host): they run synchronously, so they raise at the call on mtia too.
bool checksValues(const c10::OperatorName& name);

// Whether a call takes integer index tensors (index, indices, target, ...)
// on the device: the values a kernel checks there are device data.
bool takesIndexValues(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args);

// Calls that must run synchronously for their arguments: with
// check_errors=True (linalg's *_ex ops raise at the call for a failed
// factorization, on CPU as on CUDA), and indexing with a boolean mask (its
// result's shape is the mask's count).
bool dataDependentCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack);

// Whether the op's CPU kernel is written in Python (torch.library): the
// dispatcher records where each kernel was registered.
bool hasPythonKernel(const c10::OperatorHandle& op, const std::string& key);

// Whether its CPU kernel is a Python function.
bool hasPythonCpuKernel(const c10::OperatorHandle& op);

// Whether the op's Meta kernel is a Python function (torch._meta_registrations):
// its warnings go to Python's warnings module, not c10's handler.
bool hasPythonMetaKernel(const c10::OperatorHandle& op);

// How a call of an op runs: synchronously (the host reads its results or
// its data decides their shape), asynchronously, or as a view (no data read).
enum class Mode { kSync, kAsync, kView };

// What an op can do, from its schema.
Mode computeMode(const c10::OperatorHandle& op);

// computeMode, once per op.
Mode modeOf(const c10::OperatorHandle& op);

// The structured out= kernel of a functional op (see
// tools/gen_structured_ops.py), if its schema is the op's arguments followed by
// one out argument per return. Only for these is writing into the outputs
// exactly the functional op: other out= kernels may use the out tensor as
// scratch space or leave parts of it unwritten.
std::optional<c10::OperatorHandle> outOverload(const c10::OperatorHandle& op);

// A structured op's C++ meta function (meta_kernels.h), or nullptr.
const c10::KernelFunction* cppMetaKernel(const c10::OperatorHandle& op);

// Whether a new shape's plan can come from a Meta kernel in C++: a
// structured op's meta function, openmtia's meta function for the op
// (meta_functions.h), or a C++ Meta kernel registered with the dispatcher.
// Not a Python one (torch._meta_registrations, torch.library): planning a
// shape must not take the GIL, nor import torch._dynamo as their first call
// does.
bool hasMetaKernel(const c10::OperatorHandle& op);

// An in-place sampler (normal_, uniform_, random_, bernoulli_.float, ...):
// its one tensor is self, which it fills with draws from its Generator. Its
// checks are of its numbers (std >= 0, from < to, to within self's dtype)
// and of self's dtype, all of which a family key holds (plan_cache.h): none
// depends on self's sizes, and its result is self. So, like a structured op,
// a known family's new shape is planned (by its Meta kernel) without a first
// call: `torch.randn(n, ...)` over never-seen n is asynchronous at once.
bool inPlaceSampler(const c10::OperatorHandle& op);

}  // namespace fallback
}  // namespace openmtia
