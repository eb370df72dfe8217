// The ops every backend needs: allocation, views, resize, set_, scalar reads,
// fill and zero.
#include <ATen/Dispatch_v2.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "openmtia/runtime.h"
#include "aten/operand.h"
#include "aten/ops.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/device.h"
#include "runtime/device_access.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/host_views.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {

const c10::DispatchKeySet kMTIAKeys(c10::DispatchKey::MTIA);

c10::DeviceIndex targetDevice(std::optional<c10::Device> device) {
  if (!device.has_value()) return currentDevice();
  return deviceIndexOf(*device);
}

void checkFactoryArgs(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided, "openmtia supports strided tensors only");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  checkFactoryArgs(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(kMTIA, targetDevice(device)));
  return at::detail::empty_generic(size, deviceAllocator(), kMTIAKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  checkFactoryArgs(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(kMTIA, targetDevice(device)));
  return at::detail::empty_strided_generic(size, stride, deviceAllocator(), kMTIAKeys, c10::dtype_or_default(dtype));
}

// A zero tensor (autograd's efficient zeros): no memory, the ZeroTensor key
// materializes it where an op needs values.
struct NoMemoryAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t) override { return c10::DataPtr(nullptr, c10::Device(kMTIA, currentDevice())); }
  void copy_data(void*, const void*, std::size_t) const override {}
};

at::Tensor efficientzerotensor(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory) {
  static NoMemoryAllocator allocator;
  c10::DeviceGuard guard(c10::Device(kMTIA, targetDevice(device)));
  return at::detail::empty_generic(size, &allocator, kMTIAKeys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor),
                                   c10::dtype_or_default(dtype), std::nullopt);
}

// Grows a storage to `nbytes`, keeping its contents (ordered on the stream).
void growStorage(const c10::Storage& storage, size_t nbytes) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  auto dev = impl->device().index();
  c10::DeviceGuard guard(c10::Device(kMTIA, dev));
  c10::DataPtr fresh = deviceAllocator()->allocate(nbytes);
  size_t keep = std::min(nbytes, impl->nbytes());
  c10::DataPtr old = impl->set_data_ptr(std::move(fresh));
  if (keep > 0) {
    void* dst = impl->mutable_data();
    const void* src = old.get();
    auto stream = streamId(currentStream(dev));
    OMR_CALL(omr::memcpyAsync(dst, src, keep, omr::CopyKind::kDeviceToDevice, dev, stream));
    // the old block is freed now; it was allocated on another stream maybe
    deviceAllocator()->recordStream(old, currentStream(dev));
  }
  impl->set_nbytes(nbytes);
}

}  // namespace

at::Tensor emptyDevice(at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::detail::empty_generic(sizes, deviceAllocator(), kMTIAKeys, dtype, std::nullopt);
}

at::Tensor emptyDeviceLike(const at::Tensor& a) { return emptyDevice(a.sizes(), a.scalar_type()); }

void ensureStorageFits(const at::Tensor& t) {
  if (t.numel() == 0 && !t.unsafeGetTensorImpl()->has_storage()) return;
  size_t needed = at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.element_size(), t.storage_offset());
  if (needed > t.storage().nbytes()) growStorage(t.storage(), needed);
}

namespace {

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<at::MemoryFormat> format) {
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes().equals(size) && !format.has_value()) return self;
  for (auto s : size) TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  impl->set_sizes_contiguous(size);
  if (format.has_value()) {
    TORCH_CHECK(*format != at::MemoryFormat::Preserve, "Unsupported memory format ", *format);
    impl->empty_tensor_restride(*format);
  }
  ensureStorageFits(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(source.device_type() == kMTIA, "Attempted to set the storage of an mtia tensor to a storage on ",
              source.device());
  TORCH_CHECK(offset >= 0, "Tensor: invalid storage offset ", offset);
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  c10::DimVector strides = stride.empty() ? c10::contiguous_strides(size) : c10::DimVector(stride);
  impl->set_sizes_and_strides(size, strides, offset);
  ensureStorageFits(self);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.element_size());
  return set_storage(self, std::move(source), 0, {n}, {1});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  TORCH_CHECK(self.dtype() == src.dtype(), "Could not set tensor of type ", self.dtype(),
              " to a tensor of type ", src.dtype());
  if (self.is_same(src)) return self;
  return set_storage(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, deviceAllocator()->allocate(0), deviceAllocator(), true);
  return set_storage(self, std::move(empty), 0, {0}, {});
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "_local_scalar_dense: tensor has no elements");
  syncCurrentStream(self.device().index());  // the value may still be being written
  return readScalar(self);
}

// The fill task: CPU's fill kernel over a host view of self. Like CPU's (and
// CUDA's) fill_, it accepts a self whose elements overlap (a stride of 0):
// every element gets the same value.
void launchFill(const at::Tensor& self, const at::Tensor& value) {
  launchOnCurrentStream(self.device().index(), "aten::fill_", [hd = hostView(self), hv = hostView(value)]() mutable {
    useKernelThreads(hd.numel());
    at::AutoDispatchBelowADInplaceOrView guard;
    hd.fill_(hv.item());  // the Scalar overload: CPU's fill kernel (a same-device tensor value would copy_)
  });
}

void launchFill(const at::Tensor& self, const c10::Scalar& value) {
  if (self.is_contiguous()) {  // its elements, taken at the call (no host view made on the host)
    launchOnCurrentStream(self.device().index(), "aten::fill_", [elements = Operand(self), value] {
      useKernelThreads(elements.n);
      at::AutoDispatchBelowADInplaceOrView guard;
      elements.host().fill_(value);
    });
    return;
  }
  launchOnCurrentStream(self.device().index(), "aten::fill_", [hd = hostView(self), value]() mutable {
    useKernelThreads(hd.numel());
    at::AutoDispatchBelowADInplaceOrView guard;
    hd.fill_(value);  // CPU's fill kernel
  });
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  // Convert on the host so that a bad value raises here, not on the stream:
  // CPU's fill kernel converts with Scalar::to (the same check and message).
  AT_DISPATCH_V2(self.scalar_type(), "fill_", AT_WRAP([&] { (void)value.to<scalar_t>(); }), AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX),
                 at::kBool, at::kHalf, at::kBFloat16, at::kComplexHalf, AT_EXPAND(AT_FLOAT8_TYPES),
                 AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  if (self.numel() == 0) return self;
  launchFill(self, value);
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  if (value.device().type() == kMTIA) {
    TORCH_CHECK(value.device() == self.device(), "Expected all tensors to be on the same device, but found ",
                value.device(), " and ", self.device());
    if (self.numel() == 0) return self;
    at::assert_no_internal_overlap(self);  // a value on self's device is copied (as CPU's and CUDA's fill_ do)
    launchFill(self, value);
    return self;
  }
  return fill_scalar(self, value.item());
}

at::Tensor& zero_(at::Tensor& self) {
  if (self.numel() > 0) launchFill(self, c10::Scalar(0));  // 0 converts to every dtype
  return self;
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  deviceAllocator()->recordStream(self.storage().data_ptr(), stream);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("empty_strided", &empty_strided);
  m.impl("_efficientzerotensor", &efficientzerotensor);
  m.impl("as_strided", &at::native::as_strided_tensorimpl);
  m.impl("view", &at::native::view);
  m.impl("_reshape_alias", &at::native::_reshape_alias);
  m.impl("unfold", &at::native::unfold);
  m.impl("view_as_real", &at::native::view_as_real);
  m.impl("view_as_complex", &at::native::view_as_complex);
  m.impl("resize_", &resize_);
  m.impl("set_.source_Storage_storage_offset", &set_storage);
  m.impl("set_.source_Storage", &set_source_storage);
  m.impl("set_.source_Tensor", &set_source_tensor);
  m.impl("set_", &set_empty);
  m.impl("_local_scalar_dense", &local_scalar_dense);
  m.impl("fill_.Scalar", &fill_scalar);
  m.impl("fill_.Tensor", &fill_tensor);
  m.impl("zero_", &zero_);
  m.impl("record_stream", &record_stream);
}

namespace {

// No quantized mtia tensors: every quantized entry point says so instead of
// the dispatcher's "Could not run ..." text. (Sparse ones: sparse/sparse.cpp.)
void unsupportedLayout(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "openmtia supports strided tensors only: ", op.schema().name(),
                              " on quantized mtia tensors is not supported");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, QuantizedMTIA, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&unsupportedLayout>());
}

}  // namespace openmtia
