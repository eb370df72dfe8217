// What the fallback knows of an op (see op_traits.h).
#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "aten/fallback/meta_functions.h"
#include "aten/fallback/op_traits.h"
#include "aten/meta_kernels.h"
#include "aten/per_op.h"
#include "runtime/errors.h"
#include "runtime/generator.h"
#include "structured_ops.h"

namespace openmtia {
namespace fallback {

// Ops that, like on CUDA, accept CPU index tensors next to device tensors.
bool acceptsCpuIndices(const c10::OperatorName& name) {
  static const std::unordered_set<std::string> ops = {"aten::index", "aten::index_put", "aten::index_put_",
                                                      "aten::_index_put_impl_", "aten::_unsafe_index",
                                                      "aten::_unsafe_index_put"};
  return ops.count(name.name) > 0;
}



bool isGeneratorType(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::GeneratorType) return true;
  return t->kind() == c10::TypeKind::OptionalType &&
         t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// A random op's draw from its generator argument (or the device's default
// generator): taken when the op is issued, so the values follow program order.
RandomDraw drawFor(const c10::IValue& generator, c10::DeviceIndex device) {
  return drawRandom(generator.isGenerator() ? generator.toGenerator() : defaultGenerator(device));
}

bool isTensorType(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::TensorType) return true;
  if (t->kind() == c10::TypeKind::ListType)
    return t->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType;
  return false;
}

bool isOptionalTensorType(const c10::TypePtr& t) {
  auto opt = t->cast<c10::OptionalType>();
  return opt && opt->getElementType()->kind() == c10::TypeKind::TensorType;
}

// Ops whose output shape depends on the data: the host must wait for it.
// Those torch tags dynamic_output_shape (but aten::index: see
// dataDependentCall), and these.
bool isDataDependent(const c10::OperatorHandle& op) {
  static const std::unordered_set<std::string> ops = {
      "aten::nonzero", "aten::unique", "aten::_unique", "aten::_unique2", "aten::unique_dim",
      "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::masked_select", "aten::bincount",
      "aten::repeat_interleave", "aten::histc", "aten::nonzero_numpy", "aten::argwhere",
      "aten::_pack_padded_sequence",
      // a dense tensor made sparse: its nonzeros decide the members' sizes
      "aten::_to_sparse", "aten::_to_sparse_csr", "aten::_to_sparse_csc", "aten::_to_sparse_bsr",
      "aten::_to_sparse_bsc"};
  const std::string& name = op.schema().name();
  return ops.count(name) > 0 || (name != "aten::index" && op.hasTag(at::Tag::dynamic_output_shape));
}

// Ops whose kernels check their inputs' values on the host and raise at the
// call, on CPU as on CUDA (whose kernels wait for the device to do it, or run
// on the host): they run synchronously, so they raise at the call on mtia too.
bool checksValues(const c10::OperatorName& name) {
  static const std::unordered_set<std::string> ops = {
      "aten::_linalg_check_errors", "aten::linalg_eig", "aten::_linalg_eigvals", "aten::linalg_eigvals"};
  return ops.count(name.name) > 0;
}

// Whether a call takes integer index tensors (index, indices, target, ...)
// on the device: the values a kernel checks there are device data.
bool takesIndexValues(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) {
  static const std::unordered_set<std::string> names = {"index", "indices", "target", "idx", "offsets"};
  const auto& schema = op.schema().arguments();
  bool found = false;
  for (size_t i = 0; i < schema.size() && i < args.size() && !found; ++i) {
    if (!names.count(schema[i].name())) continue;
    forEachTensor(args[i], [&](const at::Tensor& t) {
      found = found || (t.defined() && t.device().type() == kMTIA &&
                        c10::isIntegralType(t.scalar_type(), /*includeBool=*/false));
    });
  }
  return found;
}

// Calls that must run synchronously for their arguments: with
// check_errors=True (linalg's *_ex ops raise at the call for a failed
// factorization, on CPU as on CUDA), and indexing with a boolean mask (its
// result's shape is the mask's count).
bool dataDependentCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  // per op, once: the position of its check_errors argument, of aten::index's indices (or -1)
  const auto& args = op.schema().arguments();
  const auto [check_errors, indices] = perOp(&op.schema(), [&] {
    std::pair<int, int> where{-1, -1};
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].name() == "check_errors") where.first = static_cast<int>(i);
      if (op.schema().name() == "aten::index" && args[i].name() == "indices") where.second = static_cast<int>(i);
    }
    return where;
  });
  const size_t first = stack.size() - args.size();
  if (check_errors >= 0) {
    const c10::IValue& v = stack[first + check_errors];
    if (v.isBool() && v.toBool()) return true;
  }
  if (indices >= 0 && stack[first + indices].isOptionalTensorList())
    for (const std::optional<at::Tensor>& t : stack[first + indices].toOptionalTensorList())
      if (t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte)) return true;
  return false;
}

// Whether the op's CPU kernel is written in Python (torch.library): the
// dispatcher records where each kernel was registered.
bool hasPythonKernel(const c10::OperatorHandle& op, const std::string& key) {
  std::string table = op.dumpComputedTable();
  size_t at = table.rfind(key + ": ", 0) == 0 ? 0 : table.find("\n" + key + ": ");
  if (at == std::string::npos) return false;
  std::string line = table.substr(at, table.find('\n', at + 1) - at);
  return line.find(".py:") != std::string::npos;
}

// Whether its CPU kernel is a Python function.
bool hasPythonCpuKernel(const c10::OperatorHandle& op) { return hasPythonKernel(op, "CPU"); }

// Whether the op's Meta kernel is a Python function (torch._meta_registrations):
// its warnings go to Python's warnings module, not c10's handler.
bool hasPythonMetaKernel(const c10::OperatorHandle& op) {
  return perOp(&op.schema(), [&] { return hasPythonKernel(op, "Meta"); });
}


// What an op can do, from its schema.
Mode computeMode(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  Mode mode = Mode::kAsync;
  for (const auto& r : schema.returns()) {
    if (!isTensorType(r.type()) && !isOptionalTensorType(r.type()))
      mode = Mode::kSync;  // scalar results are read by the host
  }
  if (mode == Mode::kAsync) {
    for (const auto& r : schema.returns())
      if (r.alias_info() && !r.alias_info()->isWrite()) mode = Mode::kView;  // computes nothing
  }
  if (isDataDependent(op) || checksValues(schema.operator_name())) mode = Mode::kSync;
  if (hasPythonCpuKernel(op)) mode = Mode::kSync;  // it needs the GIL: it runs on the calling thread
  return mode;
}

// computeMode, once per op.
Mode modeOf(const c10::OperatorHandle& op) {
  return perOp(&op.schema(), [&] { return computeMode(op); });
}

// The structured out= kernel of a functional op (see
// tools/gen_structured_ops.py), if its schema is the op's arguments followed by
// one out argument per return. Only for these is writing into the outputs
// exactly the functional op: other out= kernels may use the out tensor as
// scratch space or leave parts of it unwritten.
std::optional<c10::OperatorHandle> outOverload(const c10::OperatorHandle& op) {
  const auto& schema = op.schema();
  static const std::unordered_map<std::string, std::string> delegates = [] {
    std::unordered_map<std::string, std::string> m;
    for (const auto& e : kStructuredOps)
      if (e.direct) m.emplace(std::string(e.name) + "." + e.overload, e.out_overload);
    return m;
  }();
  auto it = delegates.find(schema.name() + "." + schema.overload_name());
  if (it == delegates.end()) return std::nullopt;
  auto h = c10::Dispatcher::singleton().findOp({schema.name(), it->second});
  if (!h) return std::nullopt;
  const auto& a = schema.arguments();
  const auto& oa = h->schema().arguments();
  if (oa.size() != a.size() + schema.returns().size() || h->schema().returns().size() != schema.returns().size())
    return std::nullopt;
  for (size_t i = 0; i < a.size(); ++i)
    if (oa[i].name() != a[i].name() || !(*oa[i].type() == *a[i].type())) return std::nullopt;
  for (size_t i = a.size(); i < oa.size(); ++i)
    if (!oa[i].is_out() || oa[i].type()->kind() != c10::TypeKind::TensorType) return std::nullopt;
  return h;
}

// A structured op's C++ meta function (meta_kernels.h), or nullptr.
const c10::KernelFunction* cppMetaKernel(const c10::OperatorHandle& op) {
  return perOp(&op.schema(),
               [&] { return structuredMetaKernel(op.schema().name() + "." + op.schema().overload_name()); });
}

bool hasMetaKernel(const c10::OperatorHandle& op) {
  return perOp(&op.schema(), [&] {
    return cppMetaKernel(op) || metaFunction(op) ||
           (op.hasComputedKernelForDispatchKey(c10::DispatchKey::Meta) && !hasPythonMetaKernel(op));
  });
}

// An in-place sampler (normal_, uniform_, random_, bernoulli_.float, ...):
// its one tensor is self, which it fills with draws from its Generator. Its
// checks are of its numbers (std >= 0, from < to, to within self's dtype)
// and of self's dtype, all of which a family key holds (plan_cache.h): none
// depends on self's sizes, and its result is self. So, like a structured op,
// a known family's new shape is planned (by its Meta kernel) without a first
// call: `torch.randn(n, ...)` over never-seen n is asynchronous at once.
bool inPlaceSampler(const c10::OperatorHandle& op) {
  return perOp(&op.schema(), [&] {
    const auto& schema = op.schema();
    const auto& args = schema.arguments();
    if (args.empty() || args[0].name() != "self" || !args[0].alias_info() || !args[0].alias_info()->isWrite() ||
        schema.returns().size() != 1 || !schema.returns()[0].alias_info())
      return false;
    bool generator = false;
    for (size_t i = 1; i < args.size(); ++i) {
      const auto kind = args[i].type()->kind();
      if (kind == c10::TypeKind::TensorType || kind == c10::TypeKind::ListType) return false;
      if (auto opt = args[i].type()->cast<c10::OptionalType>()) {
        const auto inner = opt->getElementType()->kind();
        if (inner == c10::TypeKind::TensorType || inner == c10::TypeKind::ListType) return false;
        generator = generator || inner == c10::TypeKind::GeneratorType;
      }
    }
    return generator;
  });
}

}  // namespace fallback
}  // namespace openmtia
