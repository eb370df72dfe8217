// Boxed fallback for every aten op without an mtia kernel.
//
// openmtia device memory is host-addressable, so the fallback runs the CPU
// kernel on CPU views of the very same memory (no staging copies):
//  - it waits for the current stream of the op's device (the host reads and
//    writes device memory directly, so it must be ordered after queued work);
//  - each mtia tensor argument becomes a CPU tensor over the same bytes, one
//    host storage per device storage, so in-place ops, out= ops and views act
//    on the device memory itself; out= tensors resized by the kernel get
//    device memory (a device allocator labelled CPU) and their new storage
//    and sizes are written back to the mtia tensor;
//  - mtia generators are replaced by their host engine (and a missing
//    generator by the device's default one), mtia devices by cpu;
//  - results: the input itself for in-place/out= returns, an mtia view of the
//    same storage for views, otherwise a new mtia tensor holding the values.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <unordered_map>
#include <unordered_set>

#include "common.h"

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

class HostCall {
 public:
  HostCall(const c10::OperatorHandle& op, torch::jit::Stack* stack) : op_(op), stack_(stack) {}

  void run() {
    const auto& schema = op_.schema();
    const size_t nargs = schema.arguments().size();
    const size_t first = stack_->size() - nargs;
    findDevice(first, nargs);
    TORCH_CHECK(device_ >= 0, "openmtia fallback: could not determine the mtia device of ", schema.name());
    c10::DeviceGuard guard(c10::Device(kMTIA, device_));
    syncCurrentStream(device_);
    for (size_t i = 0; i < nargs; ++i) {
      const auto& type = schema.arguments()[i].type();
      (*stack_)[first + i] = toHost((*stack_)[first + i], type);
    }
    op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack_);
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
      sit = storages_.emplace(si, hostStorageOf(t.storage(), hostLabelledDeviceAllocator(device_))).first;
    at::Tensor h = hostViewOn(sit->second, t);
    by_impl_.emplace(impl, Pair{t, h});
    host_impl_to_device_.emplace(h.unsafeGetTensorImpl(), t);
    host_storage_to_device_.emplace(sit->second.unsafeGetStorageImpl(), t.storage());
    return h;
  }

  c10::IValue toHost(const c10::IValue& v, const c10::TypePtr& type) {
    if (v.isTensor()) return hostTensor(v.toTensor());
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) out.push_back(hostTensor(t));
      return out;
    }
    if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> out;
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
        out.push_back(t.has_value() ? std::optional<at::Tensor>(hostTensor(*t)) : std::nullopt);
      return out;
    }
    if (v.isDevice() && v.toDevice().type() == kMTIA) return c10::Device(c10::kCPU);
    if (v.isGenerator()) {
      const at::Generator& g = v.toGenerator();
      return g.device().type() == kMTIA ? hostGeneratorOf(g) : g;
    }
    if (v.isNone() && type->kind() == c10::TypeKind::OptionalType &&
        type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType)
      return hostGeneratorOf(defaultGenerator(device_));
    return v;
  }

  // Storage swaps and metadata changes made by the CPU kernel (out= resizes)
  // go back to the mtia tensors.
  void writeBack() {
    for (auto& [si, host] : storages_) {
      c10::StorageImpl* h = host.unsafeGetStorageImpl();
      if (h->data() == si->data() && h->nbytes() == si->nbytes()) continue;
      c10::DataPtr dp = h->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
      if (dp.get() == si->data()) {  // same memory, only the size changed (shrink)
        si->set_nbytes(h->nbytes());
        h->set_data_ptr_noswap(std::move(dp));
        continue;
      }
      dp.unsafe_set_device(c10::Device(kMTIA, device_));
      si->set_data_ptr_noswap(std::move(dp));
      si->set_nbytes(h->nbytes());
      h->set_data_ptr_noswap(c10::DataPtr(si->mutable_data(), c10::Device(c10::kCPU)));
    }
    for (auto& [impl, p] : by_impl_) {
      const at::Tensor& h = p.host;
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
    TORCH_CHECK(h.layout() == c10::kStrided, "openmtia: op ", op_.schema().name(), " returned a ", h.layout(),
                " tensor; mtia supports strided tensors only");
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
    at::Tensor src = h.resolve_conj().resolve_neg();
    auto opts = src.options().device(kMTIA, device_);
    bool dense = src.is_non_overlapping_and_dense();
    at::Tensor out = dense ? at::empty_strided(src.sizes(), src.strides(), opts) : at::empty(src.sizes(), opts);
    if (out.numel() == 0) return out;
    if (dense) {
      OMR_CALL(omr::memcpy(out.data_ptr(), src.data_ptr(), static_cast<size_t>(src.numel()) * src.element_size(),
                           omr::CopyKind::kHostToDevice));
    } else {
      at::AutoDispatchBelowADInplaceOrView g;
      hostView(out).copy_(src);  // fresh memory no stream has touched yet
    }
    return out;
  }

  c10::IValue toDevice(const c10::IValue& v) {
    if (v.isTensor()) return deviceTensor(v.toTensor());
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) out.push_back(deviceTensor(t));
      return out;
    }
    return v;
  }

  struct Pair {
    at::Tensor device, host;
  };
  const c10::OperatorHandle& op_;
  torch::jit::Stack* stack_;
  c10::DeviceIndex device_ = -1;
  std::unordered_map<c10::StorageImpl*, c10::Storage> storages_;  // device storage -> host storage
  std::unordered_map<c10::TensorImpl*, Pair> by_impl_;            // device impl -> pair
  std::unordered_map<c10::TensorImpl*, at::Tensor> host_impl_to_device_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> host_storage_to_device_;
  std::unordered_set<c10::TensorImpl*> host_inputs_;
};

void mtiaFallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  HostCall(op, stack).run();
}

}  // namespace

TORCH_LIBRARY_IMPL(_, MTIA, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&mtiaFallback>()); }

// Ops with both a CPU kernel and a CompositeExplicitAutograd kernel would get
// the composite one on mtia: for convolution it sends non-CPU/CUDA backends to
// an unimplemented *_overrideable op; for the others it is a different
// decomposition (e.g. math_group_norm) whose low-precision results differ from
// CPU's. Run the CPU kernel instead. (tests/test_ops.py checks this list is
// complete for the installed torch.)
const char* const kCpuKernelOverComposite[] = {
    "convolution", "_convolution", "convolution_backward", "_stack", "_stack.out", "addr", "addr.out",
    "all.dims", "all.dims_out", "any.dims", "any.dims_out", "linalg__powsum", "native_group_norm",
    "native_layer_norm"};

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  for (const char* name : kCpuKernelOverComposite)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&mtiaFallback>());
}

}  // namespace openmtia
