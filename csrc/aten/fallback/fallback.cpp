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
#include "aten/fallback/fallback.h"
#include "aten/fallback/plan_cache.h"
#include "aten/low_precision/low_precision.h"
#include "aten/meta_kernels.h"
#include "aten/ops.h"
#include "aten/per_op.h"
#include "aten/pointwise.h"
#include "aten/prebuilt.h"
#include "aten/threads.h"
#include "python/gil.h"
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
namespace {

// Ops that, like on CUDA, accept CPU index tensors next to device tensors.
bool acceptsCpuIndices(const c10::OperatorName& name) {
  static const std::unordered_set<std::string> ops = {"aten::index", "aten::index_put", "aten::index_put_",
                                                      "aten::_index_put_impl_", "aten::_unsafe_index",
                                                      "aten::_unsafe_index_put"};
  return ops.count(name.name) > 0;
}

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

class HostCall {
 public:
  HostCall(const c10::OperatorHandle& op, torch::jit::Stack* stack) : op_(op), stack_(stack) {}

  // The op's device, after checking that its tensors are on one device.
  c10::DeviceIndex device() {
    if (device_ < 0) {
      const size_t nargs = op_.schema().arguments().size();
      findDevice(stack_->size() - nargs, nargs);
      TORCH_CHECK(device_ >= 0, "openmtia fallback: could not determine the mtia device of ", op_.schema().name());
    }
    return device_;
  }

  // Runs the CPU kernel now, after waiting for the current stream if `wait`.
  void run(bool wait) {
    const auto& schema = op_.schema();
    const size_t nargs = schema.arguments().size();
    const size_t first = stack_->size() - nargs;
    c10::DeviceGuard guard(c10::Device(kMTIA, device()));
    // Device memory the host may not touch: the kernel runs on host copies
    // of the arguments' storages, and the ones it may write go back after it
    // (device_access.h). The copies read the device: after its stream.
    staged_ = !hostAddressable(device_);
    if (staged_) wait = true;
    if (wait) syncCurrentStream(device_);
    waited_ = wait;
    for (size_t i = 0; i < nargs; ++i) {
      const auto& arg = schema.arguments()[i];
      if (staged_ && arg.alias_info() && arg.alias_info()->isWrite())
        forEachTensor((*stack_)[first + i], [this](const at::Tensor& t) {
          if (t.defined() && t.device().type() == kMTIA) written_.insert(t.storage().unsafeGetStorageImpl());
        });
      (*stack_)[first + i] = toHost((*stack_)[first + i], arg.type());
    }
    {
      HostKernelScope host_kernel(kernelWork(op_, workElements(*stack_)));  // (its threads: common.h)
      callCpuKernel(op_, stack_, float32Call(op_, *stack_));  // (bf16/fp16 matrix ops: low_precision.h)
    }
    writeBack();
    const size_t nrets = schema.returns().size();
    for (size_t i = stack_->size() - nrets; i < stack_->size(); ++i) (*stack_)[i] = toDevice((*stack_)[i]);
  }

 private:
  void findDevice(size_t first, size_t nargs) {
    std::optional<c10::Device> mtia, cpu;
    bool cpu_ok = acceptsCpuIndices(op_.schema().operator_name());
    for (size_t i = 0; i < nargs; ++i) {
      const c10::IValue& v = (*stack_)[first + i];
      forEachTensor(v, [&](const at::Tensor& t) {
        if (!t.defined()) return;
        if (t.device().type() == kMTIA) {
          if (!mtia) mtia = t.device();
          TORCH_CHECK(*mtia == t.device(), "Expected all tensors to be on the same device, but found at least two "
                                           "devices, ", *mtia, " and ", t.device(), "!");
        } else if (t.device().type() == c10::kCPU) {
          // 0-dim CPU tensors act as scalars, as on CUDA
          if (t.dim() > 0 && !cpu_ok && !cpu) cpu = t.device();
        } else {
          TORCH_CHECK(false, "Expected all tensors to be on the same device, but found ", t.device(),
                      " in an mtia op (", op_.schema().name(), ")");
        }
      });
      if (!mtia && v.isDevice() && v.toDevice().type() == kMTIA) device_ = deviceIndexOf(v.toDevice());
    }
    if (mtia) {
      TORCH_CHECK(!cpu, "Expected all tensors to be on the same device, but found at least two devices, ", *mtia,
                  " and cpu! (when checking arguments of ", op_.schema().name(), ")");
      device_ = mtia->index();
    }
  }

  at::Tensor hostTensor(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kMTIA) {
      if (t.defined()) host_inputs_.insert(t.unsafeGetTensorImpl());
      return t;
    }
    TORCH_CHECK(t.layout() == c10::kStrided, "openmtia supports strided tensors only, got ", t.layout(), " in ",
                op_.schema().name());
    auto* impl = t.unsafeGetTensorImpl();
    auto it = by_impl_.find(impl);
    if (it != by_impl_.end()) return it->second.host;
    c10::StorageImpl* si = t.storage().unsafeGetStorageImpl();
    auto sit = storages_.find(si);
    if (sit == storages_.end())
      sit = storages_.emplace(si, staged_ ? stageToHost(t.storage())
                                          : hostStorageOf(t.storage(), hostLabelledDeviceAllocator(device_)))
                .first;
    at::Tensor h = hostViewOn(sit->second, t);
    by_impl_.emplace(impl, Pair{t, h});
    host_impl_to_device_.emplace(h.unsafeGetTensorImpl(), t);
    host_storage_to_device_.emplace(sit->second.unsafeGetStorageImpl(), t.storage());
    return h;
  }

  c10::IValue toHost(const c10::IValue& v, const c10::TypePtr& type) {
    if (v.isDevice() && v.toDevice().type() == kMTIA) return c10::Device(c10::kCPU);
    if (isGeneratorType(type)) return drawFor(v, device_).engine();
    return mapTensors(v, [this](const at::Tensor& t) { return hostTensor(t); });
  }

  // Storage swaps and metadata changes made by the CPU kernel (out= resizes)
  // go back to the mtia tensors.
  void writeBack() {
    for (auto& [si, host] : storages_) {
      if (staged_) {  // what the kernel may have written goes back (into new device memory if it resized it)
        if (written_.count(si)) stageToDevice(host, c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(si)));
        continue;
      }
      c10::StorageImpl* h = host.unsafeGetStorageImpl();
      if (h->data() == si->data()) continue;  // not reallocated (CPU resizes always reallocate)
      // the kernel grew the storage with device memory (a CPU-labelled device
      // allocation): it becomes the device storage's memory
      c10::DataPtr dp = h->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
      dp.unsafe_set_device(c10::Device(kMTIA, device_));
      si->set_data_ptr_noswap(std::move(dp));
      si->set_nbytes(h->nbytes());
      h->set_data_ptr_noswap(c10::DataPtr(si->mutable_data(), c10::Device(c10::kCPU)));
    }
    for (auto& [impl, p] : by_impl_) {
      const at::Tensor& h = p.host;
      // an out= kernel may also set its output's conj or neg bit (linalg_lu_solve(left=False) does)
      p.device._set_conj(h.is_conj());
      p.device._set_neg(h.is_neg());
      if (h.sizes().equals(p.device.sizes()) && h.strides().equals(p.device.strides()) &&
          h.storage_offset() == p.device.storage_offset())
        continue;
      p.device.unsafeGetTensorImpl()->set_sizes_and_strides(h.sizes(), h.strides(), h.storage_offset());
    }
  }

  at::Tensor deviceTensor(const at::Tensor& h) {
    if (!h.defined() || h.device().type() != c10::kCPU) return h;
    auto* impl = h.unsafeGetTensorImpl();
    if (host_inputs_.count(impl)) return h;  // a genuine CPU input returned as is
    TORCH_CHECK_NOT_IMPLEMENTED(h.layout() == c10::kStrided, "openmtia supports strided tensors only: ",
                                op_.schema().name(), " would return a ", h.layout(), " mtia tensor");
    auto it = host_impl_to_device_.find(impl);
    if (it != host_impl_to_device_.end()) return it->second;
    auto sit = host_storage_to_device_.find(h.storage().unsafeGetStorageImpl());
    if (sit != host_storage_to_device_.end()) {  // a view of an input
      auto view = at::detail::make_tensor<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(sit->second),
                                                           c10::DispatchKeySet(c10::DispatchKey::MTIA), h.dtype());
      view.unsafeGetTensorImpl()->set_sizes_and_strides(h.sizes(), h.strides(), h.storage_offset());
      view._set_conj(h.is_conj());
      view._set_neg(h.is_neg());
      return view;
    }
    TORCH_CHECK(h.numel() == 0 || h.data_ptr() != nullptr, "openmtia: op ", op_.schema().name(),
                " returned a tensor without memory, which the fallback cannot move to mtia");
    // the result as the kernel gave it: its layout, and its conj and neg
    // bits over the same bytes (linalg kernels return conjugate views)
    const at::Tensor& src = h;
    auto opts = src.options().device(kMTIA, device_);
    bool dense = src.is_non_overlapping_and_dense();
    at::Tensor out = dense ? at::empty_strided(src.sizes(), src.strides(), opts) : at::empty(src.sizes(), opts);
    out._set_conj(src.is_conj());
    out._set_neg(src.is_neg());
    if (out.numel() == 0) return out;
    // the host writes it now: a reused block may still be in use by queued work
    if (!waited_) {
      syncCurrentStream(device_);
      waited_ = true;
    }
    if (staged_) {
      writeFromHost(out, src);
    } else if (dense) {
      OMR_CALL(omr::memcpy(out.data_ptr(), src.data_ptr(), static_cast<size_t>(src.numel()) * src.element_size(),
                           omr::CopyKind::kHostToDevice));
    } else {
      at::AutoDispatchBelowADInplaceOrView g;
      hostView(out).copy_(src);
    }
    return out;
  }

  c10::IValue toDevice(const c10::IValue& v) {
    return mapTensors(v, [this](const at::Tensor& t) { return deviceTensor(t); });
  }

  struct Pair {
    at::Tensor device, host;
  };
  const c10::OperatorHandle& op_;
  torch::jit::Stack* stack_;
  c10::DeviceIndex device_ = -1;
  bool waited_ = false;  // for the current stream
  bool staged_ = false;  // host copies of the device storages (device memory not host-addressable)
  std::unordered_set<c10::StorageImpl*> written_;                  // (staged) device storages the op may write
  std::unordered_map<c10::StorageImpl*, c10::Storage> storages_;  // device storage -> host storage
  std::unordered_map<c10::TensorImpl*, Pair> by_impl_;            // device impl -> pair
  std::unordered_map<c10::TensorImpl*, at::Tensor> host_impl_to_device_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> host_storage_to_device_;
  std::unordered_set<c10::TensorImpl*> host_inputs_;
};

// ---------------------------------------------------------------- async path

bool isTensorType(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::TensorType) return true;
  if (t->kind() == c10::TypeKind::ListType)
    return t->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType;
  return false;
}

// Ops whose output shape depends on the data: the host must wait for it.
// Those torch tags dynamic_output_shape (but aten::index: see
// dataDependentCall), and these.
bool isDataDependent(const c10::OperatorHandle& op) {
  static const std::unordered_set<std::string> ops = {
      "aten::nonzero", "aten::unique", "aten::_unique", "aten::_unique2", "aten::unique_dim",
      "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::masked_select", "aten::bincount",
      "aten::repeat_interleave", "aten::histc", "aten::nonzero_numpy", "aten::argwhere",
      "aten::_pack_padded_sequence"};
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

bool hasPythonCpuKernel(const c10::OperatorHandle& op) { return hasPythonKernel(op, "CPU"); }

// Whether the op's Meta kernel is a Python function (torch._meta_registrations):
// its warnings go to Python's warnings module, not c10's handler.
bool hasPythonMetaKernel(const c10::OperatorHandle& op) {
  return perOp(&op.schema(), [&] { return hasPythonKernel(op, "Meta"); });
}

enum class Mode { kSync, kAsync, kView };

// What an op can do, from its schema.
Mode computeMode(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  Mode mode = Mode::kAsync;
  for (const auto& r : schema.returns()) {
    if (!isTensorType(r.type())) mode = Mode::kSync;  // scalar results are read by the host
  }
  if (mode == Mode::kAsync) {
    for (const auto& r : schema.returns())
      if (r.alias_info() && !r.alias_info()->isWrite()) mode = Mode::kView;  // computes nothing
  }
  if (isDataDependent(op) || checksValues(schema.operator_name())) mode = Mode::kSync;
  if (hasPythonCpuKernel(op)) mode = Mode::kSync;  // it needs the GIL: it runs on the calling thread
  return mode;
}

Mode modeOf(const c10::OperatorHandle& op) {  // (once per op)
  return perOp(&op.schema(), [&] { return computeMode(op); });
}

c10::Storage metaStorage(const c10::Storage& s) {
  return c10::Storage(c10::Storage::use_byte_size_t(), s.nbytes(), c10::DataPtr(nullptr, c10::Device(c10::kMeta)),
                      c10::GetAllocator(c10::kMeta), /*resizable=*/true);
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
      if (x.input != y.input || (x.input < 0 && !same(x.meta, y.meta))) return false;
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

std::atomic<int64_t>& stagedResults() {
  static std::atomic<int64_t> n{0};
  return n;
}

bool debugFallback() {
  static const bool on = [] {
    const char* v = std::getenv("OPENMTIA_DEBUG_FALLBACK");
    return v && std::string(v) == "1";
  }();
  return on;
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
void finish(Plan& plan, const c10::OperatorHandle& op) {
  plan.fresh = !plan.returns.empty();
  bool bits = false;
  for (size_t i = 0; i < plan.returns.size(); ++i)
    for (const auto& o : plan.returns[i]) {
      plan.fresh = plan.fresh && o.input < 0 && !plan.is_list[i];
      bits = bits || o.meta.conj || o.meta.neg;
    }
  plan.out_op.reset();
  if (plan.fresh && plan.resized.empty() && !bits) plan.out_op = outOverload(op);
}

// Completes a plan whose returns are set: the tensor arguments the op
// resized (argument k is now after[k]; before the call it had before[k]),
// then what follows from its outputs (finish).
void complete(Plan& plan, const std::vector<at::Tensor>& after, const std::vector<Plan::Meta>& before,
              const c10::OperatorHandle& op) {
  for (size_t k = 0; k < after.size(); ++k) {  // out= tensors the op resized (or whose conj/neg bit it set)
    const at::Tensor& t = after[k];
    if (!t.defined() || sameMeta(t, before[k])) continue;
    Plan::Meta m = metaOf(t);
    m.offset -= before[k].offset;  // the plan serves views at any offset
    plan.resized.emplace_back(static_cast<int>(k), std::move(m));
  }
  finish(plan, op);
  plan.async = true;
}

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
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList())
          if (!output(t, outs)) return fail(plan, "an output is a view or not dense");
      } else {
        return fail(plan, "a result is not a tensor");
      }
      plan->returns.push_back(std::move(outs));
    }
    complete(*plan, flat_meta_, original_, op_);
    return plan;
  }

  bool output(const at::Tensor& m, std::vector<Plan::Out>& outs) {
    Plan::Out o;
    if (!m.defined()) return false;
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

  Result run() {
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
        if (!family_key_.empty() && !meta_plan_ && !inPlaceSampler(op_)) meta_plan_ = Planner(op_).plan(args);
        return Result::kLearn;
      }
      // Nothing waits during a capture: this call takes the Meta kernel's
      // plan (its task checks the kernel's results against it).
      plan = Planner(op_).plan(args);
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
    work = kernelWork(op_, work);
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
                              useKernelThreads(work);
                              {
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
          [op, host = std::move(args), outs = std::move(outs), draws = std::move(draws), work, float32,
           scratch = std::move(scratch), keep = heldByTask(scratch_tensors)]() mutable {
            std::vector<c10::IValue>& stack = callStack(host, draws);
            useKernelThreads(work);
            std::vector<ResultPlacement::Slot> slots = scratch;  // first: a float32 stand-in takes its own
            for (auto& [slot, out] : outs)
              if (out.numel() > 0) slots.push_back({out.data_ptr(), out.storage().nbytes()});
            {
              // as on the host: kernels run below autograd
              at::AutoDispatchBelowADInplaceOrView below_autograd;
              ResultPlacement placement(std::move(slots));  // results allocated in the outputs
              callCpuKernel(op, &stack, float32, work);
            }
            takeResults(op, stack, outs);
            stack.clear();
          });
    }
    stack_->erase(stack_->begin() + first, stack_->end());
    for (auto& r : results) stack_->push_back(std::move(r));
    return Result::kDone;
  }

  // After the first call of a signature ran synchronously: checks the plan
  // against what the CPU kernel did and caches it (see checked()).
  // A first call whose kernel raised `message` over the values of its index
  // arguments (device data): the call returns outputs shaped by the Meta
  // kernel, and its task raises the error at the next sync, as later calls'
  // tasks would. false if the Meta kernel rejects the arguments too (the
  // error is about them: it raises at the call).
  bool deferFailure(std::string message) {
    std::vector<c10::IValue> args(stack_->end() - op_.schema().arguments().size(), stack_->end());
    if (!acceptsZeros(args)) return false;
    auto plan = Planner(op_).plan(args);
    if (!plan->async) return false;
    failing_plan_ = plan;
    failure_ = std::move(message);
    return run() == Result::kDone;
  }

  // Whether the CPU kernel accepts the call with every tensor's values zero
  // (index values valid): run over zero-filled host twins of the arguments
  // (one per storage: aliasing, and so overlap checks, are kept). Only after
  // a first call failed, so it costs nothing otherwise; not for arguments
  // over 64 MB (then the error raises at the call).
  bool acceptsZeros(std::vector<c10::IValue> stack) {
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
      HostKernelScope host_kernel(kernelWork(op_, workElements(stack)));
      op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
    } catch (const std::exception& e) {
      if (isInterrupt(e)) throw;
      return false;
    }
    return true;
  }

  void learn(bool warned) {
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

 private:
  // New shapes of a known family (the call's signature without its sizes and
  // strides; plan_cache.h) of a structured op: the CPU kernel has run over
  // these dtypes, devices, ranks, aliasing and number classes without an
  // error or a warning, and its meta function planned exactly what it did.
  // A structured kernel's meta function is its argument check (the CPU kernel
  // runs it first): it raises the call's argument errors (shapes) at the call;
  // the checks of the impl (dtypes it has no kernel for) passed for this
  // family. So the call is planned by the meta function, without running the
  // op at the call: a loop over never-seen shapes (variable-length batches,
  // generation) pays the op once, asynchronously. nullptr: a first call runs
  // (not structured, a new family, or the meta function rejects or warns:
  // then the CPU kernel gives the error or warning, at the call). An in-place
  // sampler's family holds its plan (self is its result, at any shape), which
  // serves its new shapes without a meta run.
  std::shared_ptr<const Plan> newShapePlan(const std::vector<c10::IValue>& args) {
    const bool sampler = inPlaceSampler(op_);
    if (!cppMetaKernel(op_) && !sampler) return nullptr;  // not structured, not a sampler
    const auto& schema = op_.schema();
    KeyBuilder kb(op_, KeyBuilder::Shapes::kOmitted);
    kb.addState(globalState());
    for (size_t i = 0; i < args.size(); ++i)
      if (!kb.add(args[i], schema.arguments()[i].type())) return nullptr;
    family_key_ = kb.key();
    std::shared_ptr<const Plan> family = planCache().get(family_key_);
    if (!family) return nullptr;
    std::shared_ptr<const Plan> plan = sampler ? family : Planner(op_).plan(args);
    if (!plan->async) {
      meta_plan_ = plan;  // (the first call's: no second meta run)
      return nullptr;
    }
    planCache().countShapeCall();
    if (debugFallback()) std::fprintf(stderr, "openmtia: %s: a new shape of a known family\n", schema.name().c_str());
    planCache().put(key_, plan);
    return plan;
  }

  // Whether a structured op's first call, which made `plan`, makes its family
  // known: the meta function planned the same, and no tensor (argument or
  // result) was empty (a kernel may return before its dtype checks then).
  // (An in-place sampler's: its result was self, and nothing was resized.)
  bool learnsFamily(const Plan& plan) const {
    if (inPlaceSampler(op_)) {
      if (!plan.async || plan.returns.size() != 1 || plan.returns[0].size() != 1 || plan.returns[0][0].input != 0 ||
          !plan.resized.empty())
        return false;
    } else if (!meta_plan_ || !meta_plan_->async || !plan.async || !samePlan(plan, *meta_plan_)) {
      return false;
    }
    for (const auto& t : flat_args_)
      if (t.defined() && t.numel() == 0) return false;
    for (const auto& r : plan.returns)
      for (const auto& o : r)
        if (o.input < 0 && c10::multiply_integers(o.meta.sizes) == 0) return false;
    return true;
  }

  // The plan of what the CPU kernel did with the tensor arguments flat_args_
  // (which had the metadata before_), returning `rets`: results that are
  // inputs (in-place, out=), new dense results (their metadata), inputs it
  // resized. nullptr (and *why) if a result is none of those (a view of an
  // input, not dense, undefined, not a tensor).
  std::shared_ptr<Plan> derived(const c10::IValue* rets, size_t nrets, std::string* why) {
    auto plan = std::make_shared<Plan>();
    auto add = [&](const at::Tensor& r, std::vector<Plan::Out>& outs) {
      Plan::Out o;
      for (size_t k = 0; k < flat_args_.size() && o.input < 0; ++k)
        if (r.defined() && r.is_same(flat_args_[k])) o.input = static_cast<int>(k);
      if (o.input < 0) {
        if (!r.defined() || r.device().type() != kMTIA || r.layout() != c10::kStrided ||
            !r.is_non_overlapping_and_dense()) {
          *why = "a result is undefined, not dense or not on the device";
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
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList())
          if (!add(t, outs)) return nullptr;
      } else {
        *why = "a result is not a tensor";
        return nullptr;
      }
      plan->returns.push_back(std::move(outs));
    }
    complete(*plan, flat_args_, before_, op_);
    return plan;
  }

  static std::vector<at::Tensor> flatTensors(const std::vector<c10::IValue>& args) {
    std::vector<at::Tensor> flat;  // the tensor arguments in the Planner's order
    for (const auto& v : args)
      mapTensors(v, [&](const at::Tensor& t) {
        flat.push_back(t);
        return t;
      });
    return flat;
  }

  // A task's call stack: its arguments, and its engines for random ops. The
  // boxed call consumes the stack; the task keeps its own references, so
  // objects the host made are freed by the host (with the task), not by the
  // worker (memory freed across threads contends for the allocator's locks).
  // The vector is the worker thread's own, reused: no allocation per task.
  static std::vector<c10::IValue>& callStack(const std::vector<c10::IValue>& args,
                                             const std::vector<std::pair<size_t, RandomDraw>>& draws) {
    thread_local std::vector<c10::IValue> stack;
    stack.clear();
    stack.insert(stack.end(), args.begin(), args.end());
    for (const auto& [i, d] : draws) stack[i] = d.engine();
    return stack;
  }

  // An out= kernel must leave its outputs' metadata as planned (the device
  // tensors cannot follow a change): never a silently wrong result.
  static void checkOutputsKept(const c10::OperatorHandle& op, const std::vector<c10::IValue>& host,
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

  // The kernel's results (a fresh output lives at return slot << 32 | list
  // index), checked against the outputs. A result the kernel allocated in its
  // output's memory (ResultPlacement) is already there; any other is copied
  // ("staged"), after taking out those that landed in another output's memory.
  static void takeResults(const c10::OperatorHandle& op, const std::vector<c10::IValue>& host,
                          std::vector<std::pair<size_t, at::Tensor>>& outs) {
    std::vector<std::pair<at::Tensor, at::Tensor*>> copies;
    for (auto& [slot, out] : outs) {
      size_t ret = slot >> 32, idx = slot & 0xffffffff;
      const c10::IValue& v = host[ret];
      at::Tensor r = v.isTensor() ? v.toTensor() : v.toTensorList().get(idx);
      // The output was shaped from the Meta kernel; never convert silently.
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

  // During a graph capture: the op's CPU kernel prebuilt over the host
  // arguments (see prebuilt.cpp), if it has one and the plan's outputs are
  // either all fresh (outs) or the single in-place self. `flat` are the
  // tensor arguments as given: the task's copies of CPU ones are constants.
  std::shared_ptr<PrebuiltKernel> prebuild(const Plan& plan, const std::vector<at::Tensor>& flat,
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

  // The task's view of an argument: a host view of a device tensor, a copy of
  // a CPU one.
  at::Tensor hostTensor(const at::Tensor& t) {
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

  void toHost(c10::IValue& v) {
    if (v.isDevice() && v.toDevice().type() == kMTIA) v = c10::Device(c10::kCPU);
    else v = mapTensors(v, [this](const at::Tensor& t) { return hostTensor(t); });
  }

  const c10::OperatorHandle& op_;
  torch::jit::Stack* stack_;
  c10::DeviceIndex device_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> host_storages_;
  // a new plan under verification
  std::string key_;
  std::string family_key_;                  // a structured op's (newShapePlan)
  std::shared_ptr<const Plan> meta_plan_;   // a structured op's first call: its meta function's plan
  std::vector<at::Tensor> flat_args_;
  std::vector<Plan::Meta> before_;
  // a first call that failed on device data (deferFailure)
  std::shared_ptr<const Plan> failing_plan_;
  std::string failure_;
};

// Nothing may wait for a stream while it is captured into a graph: an op that
// must run synchronously cannot be recorded. Says which op, and why.
void refuseWhileCapturing(const c10::OperatorHandle& op, c10::DeviceIndex device, const char* why) {
  TORCH_CHECK(!isCapturing(device), op.schema().name(), " cannot be captured into an MTIAGraph: ", why);
}

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
    try {
      c10::WarningUtils::WarningHandlerGuard guard(&warnings);
      call.run(/*wait=*/true);
    } catch (const c10::Error& e) {
      // An error over the values of index arguments is a device-data error:
      // as on later calls (and on CUDA), it comes at the next sync.
      if (dynamic_cast<const c10::NotImplementedError*>(&e) || !takesIndexValues(op, args)) throw;
      stack->resize(first);  // whatever the kernel left of the call: the arguments again
      stack->insert(stack->end(), args.begin(), args.end());
      if (!async.deferFailure(std::string("openmtia: ") + e.what_without_backtrace())) throw;
      return;
    }
    async.learn(warnings.count > 0);
    return;
  }
  refuseWhileCapturing(op, device, "it runs synchronously for these arguments (it has no asynchronous plan for them)");
  call.run(/*wait=*/true);
}

}  // namespace

void boxedFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { mtiaFallback(op, {}, stack); }

at::Tensor boxedFallbackCall(const c10::OperatorHandle& op, std::vector<c10::IValue> args) {
  torch::jit::Stack stack(std::move(args));
  boxedFallback(op, &stack);
  return stack.back().toTensor();
}

TORCH_LIBRARY_IMPL(_, MTIA, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&mtiaFallback>()); }

// Ops with both a CPU kernel and a CompositeExplicitAutograd kernel would get
// the composite one on mtia: for convolution it sends non-CPU/CUDA backends to
// an unimplemented *_overrideable op (convolution.cpp registers those, with
// contiguous operands); for the others it is a different
// decomposition (e.g. math_group_norm) whose low-precision results differ from
// CPU's. Run the CPU kernel instead. (tests/test_ops.py checks this list is
// complete for the installed torch.) Also composite kernels that reject
// devices other than CPU/CUDA/XPU (mode.values), or that call a CPU/CUDA
// DispatchStub directly ("DispatchStub: missing kernel for mtia":
// conj_physical_, which torch.svd(out=) of complex inputs calls), found by
// conformance/.
const char* const kCpuKernelOverComposite[] = {
    "_stack", "_stack.out", "addr", "addr.out",
    "all.dims", "all.dims_out", "any.dims", "any.dims_out", "conj_physical_", "linalg__powsum", "native_group_norm",
    "native_layer_norm", "mode.values", "narrow_copy", "pixel_shuffle", "pixel_unshuffle"};

int64_t stagedResultCount() { return stagedResults().load(); }

std::vector<std::string> cpuKernelOverCompositeOps() {
  std::vector<std::string> out;
  for (const char* name : kCpuKernelOverComposite) out.push_back(std::string("aten::") + name);
  for (const char* name : kConvolutionOps) out.push_back(std::string("aten::") + name);
  return out;
}

std::vector<std::string> structuredOps() {
  std::vector<std::string> out;
  for (const auto& op : kStructuredOps)
    out.push_back(std::string(op.name) + (*op.overload ? std::string(".") + op.overload : std::string()));
  return out;
}

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  for (const char* name : kCpuKernelOverComposite) {
    if (unboxedOps().count(name)) continue;  // an unboxed kernel's (low_precision_norm.cpp), which falls back here
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&mtiaFallback>());
  }
  // Structured ops: the CPU kernel, not CompositeExplicitAutogradNonFunctional.
  for (const auto& op : kStructuredOps) {
    std::string name = std::string(op.name).substr(6);  // without "aten::"
    if (*op.overload) name += std::string(".") + op.overload;
    if (unboxedOps().count(name)) continue;  // pointwise.cpp's kernel (which falls back here)
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&mtiaFallback>());
  }
}

}  // namespace openmtia
