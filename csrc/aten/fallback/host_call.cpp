// The fallback's synchronous path (see host_call.h).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/accumulate.h>
#include <ATen/EmptyTensor.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors.h>
#include <torch/library.h>

#include "openmtia/runtime.h"
#include "aten/convolution.h"
#include "aten/fallback/fallback.h"
#include "aten/fallback/host_call.h"
#include "aten/fallback/op_traits.h"
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
#include "runtime/tracing.h"
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

at::SparseTensorImpl* coo(const at::Tensor& t) { return static_cast<at::SparseTensorImpl*>(t.unsafeGetTensorImpl()); }

// No compressed sparse (CSR, ...) mtia tensor can exist with torch 2.13
// (docs/eager.md#limits): a kernel that would return one says so.
void checkCoo(c10::Layout layout, const c10::OperatorHandle& op) {
  TORCH_CHECK_NOT_IMPLEMENTED(layout == c10::kSparse, "openmtia: ", op.schema().name(), " on a ", layout,
                              " mtia tensor: compressed sparse layouts cannot be made on mtia with torch 2.13");
}

// A COO tensor's indices (host tensor, sparse_dim x nnz) within its sizes:
// CPU's kernels index with them unchecked (torch checks them only when
// sparse invariant checks are on), which on device memory would write out of
// its block. The same error as torch's check.
void checkIndicesInRange(const at::Tensor& indices, c10::IntArrayRef sizes) {
  if (indices.numel() == 0) return;
  const at::Tensor low = at::amin(indices, 1), high = at::amax(indices, 1);
  for (int64_t d = 0; d < indices.size(0); ++d) {
    const int64_t lo = low[d].item<int64_t>(), hi = high[d].item<int64_t>();
    TORCH_CHECK(lo >= 0, "found negative index ", lo, " for dim ", d);
    TORCH_CHECK(hi < sizes[d], "size is inconsistent with indices: for dim ", d, ", size is ", sizes[d],
                " but found index ", hi);
  }
}

// The strided tensors that hold a tensor's data: itself, or a sparse COO
// tensor's members.
std::vector<at::Tensor> members(const at::Tensor& t) {
  if (t.layout() == c10::kSparse) return {coo(t)->indices(), coo(t)->values()};
  return {t};
}

}  // namespace

c10::DeviceIndex HostCall::device() {
  if (device_ < 0) {
    const size_t nargs = op_.schema().arguments().size();
    findDevice(stack_->size() - nargs, nargs);
    TORCH_CHECK(device_ >= 0, "openmtia fallback: could not determine the mtia device of ", op_.schema().name());
  }
  return device_;
}

void HostCall::run(bool wait) {
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
        if (t.defined() && t.device().type() == kMTIA)
          for (const at::Tensor& m : members(t)) written_.insert(m.storage().unsafeGetStorageImpl());
      });
    (*stack_)[first + i] = toHost((*stack_)[first + i], arg.type());
  }
  {
    HostKernelScope host_kernel(kernelWork(op_, *stack_, workElements(*stack_)));  // (its threads: aten/threads/kernel_threads.h)
    HostWorkTrace trace(device_, op_.schema().name().c_str());  // device work, in the profiler
    // (a fault armed for this work fails it as a launched kernel's: the
    // stream's error at its next synchronization; the kernel still runs, its
    // results are the call's. A broken device raises here.)
    OMR_CALL(omr::hostWorkFaults(device_, currentStreamId(device_), op_.schema().name().c_str()));
    if (sparse_key_)  // CPU's sparse kernel (which runs the dense kernels of its members)
      op_.redispatchBoxed(c10::DispatchKeySet(*sparse_key_), stack_);
    else
      callCpuKernel(op_, stack_, float32Call(op_, *stack_));  // (bf16/fp16 matrix ops: low_precision.h)
  }
  writeBack();
  const size_t nrets = schema.returns().size();
  for (size_t i = stack_->size() - nrets; i < stack_->size(); ++i) (*stack_)[i] = toDevice((*stack_)[i]);
}

void HostCall::findDevice(size_t first, size_t nargs) {
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

at::Tensor HostCall::hostTensor(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kMTIA) {
    if (t.defined()) host_inputs_.insert(t.unsafeGetTensorImpl());
    return t;
  }
  if (t.layout() != c10::kStrided) return hostSparse(t);
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

at::Tensor HostCall::hostSparse(const at::Tensor& t) {
  auto* impl = t.unsafeGetTensorImpl();
  auto it = by_impl_.find(impl);
  if (it != by_impl_.end()) return it->second.host;
  checkCoo(t.layout(), op_);
  at::Tensor indices = hostTensor(coo(t)->indices()), values = hostTensor(coo(t)->values());
  checkIndicesInRange(indices, t.sizes());
  at::Tensor h = at::_sparse_coo_tensor_with_dims_and_tensors(
      t.sparse_dim(), t.dense_dim(), t.sizes(), indices, values, values.options().layout(c10::kSparse),
      t.is_coalesced());
  sparse_key_ = c10::DispatchKey::SparseCPU;
  by_impl_.emplace(impl, Pair{t, h});
  host_impl_to_device_.emplace(h.unsafeGetTensorImpl(), t);
  sparse_.push_back(Pair{t, h});
  return h;
}

c10::IValue HostCall::toHost(const c10::IValue& v, const c10::TypePtr& type) {
  if (v.isDevice() && v.toDevice().type() == kMTIA) return c10::Device(c10::kCPU);
  if (isGeneratorType(type)) return drawFor(v, device_).engine();
  return mapTensors(v, [this](const at::Tensor& t) { return hostTensor(t); });
}

void HostCall::writeBack() {
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
  for (const Pair& p : sparse_) writeBackSparse(p.device, p.host);
  for (auto& [impl, p] : by_impl_) {
    if (p.device.layout() != c10::kStrided) continue;  // (writeBackSparse)
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

void HostCall::writeBackSparse(const at::Tensor& device, const at::Tensor& host) {
  // (a member the kernel left in place maps back to the device tensor itself)
  auto *d = coo(device), *h = coo(host);
  at::Tensor indices = deviceTensor(h->indices()), values = deviceTensor(h->values());
  if (!indices.is_same(d->indices()) || !values.is_same(d->values()) || !host.sizes().equals(device.sizes()) ||
      h->sparse_dim() != d->sparse_dim() || h->dense_dim() != d->dense_dim()) {
    d->raw_resize_(h->sparse_dim(), h->dense_dim(), host.sizes());
    d->set_indices_and_values_unsafe(indices, values);
  }
  d->set_coalesced(h->coalesced());
}

at::Tensor HostCall::deviceSparse(const at::Tensor& h) {
  checkCoo(h.layout(), op_);
  at::Tensor indices = deviceTensor(coo(h)->indices()), values = deviceTensor(coo(h)->values());
  return at::_sparse_coo_tensor_with_dims_and_tensors(h.sparse_dim(), h.dense_dim(), h.sizes(), indices, values,
                                                      values.options().layout(c10::kSparse), h.is_coalesced());
}

at::Tensor HostCall::deviceTensor(const at::Tensor& h) {
  if (!h.defined() || h.device().type() != c10::kCPU) return h;
  auto* impl = h.unsafeGetTensorImpl();
  if (host_inputs_.count(impl)) return h;  // a genuine CPU input returned as is
  auto it = host_impl_to_device_.find(impl);
  if (it != host_impl_to_device_.end()) return it->second;
  if (h.layout() != c10::kStrided) return deviceSparse(h);
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
  if (staged_ || dense) {
    writeFromHost(out, src);  // (a copy by the driver)
  } else {
    at::AutoDispatchBelowADInplaceOrView g;
    hostView(out).copy_(src);
  }
  return out;
}

c10::IValue HostCall::toDevice(const c10::IValue& v) {
  return mapTensors(v, [this](const at::Tensor& t) { return deviceTensor(t); });
}

}  // namespace fallback
}  // namespace openmtia
