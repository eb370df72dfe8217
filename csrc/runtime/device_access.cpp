// Host access to device memory (device_access.h).
#include "openmtia/runtime.h"
#include "runtime/device.h"
#include "runtime/device_access.h"
#include "runtime/tracing.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/host_views.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <array>
#include <atomic>
#include <cstring>


namespace openmtia {

bool hostAddressable(c10::DeviceIndex device) {
  static std::array<std::atomic<int8_t>, omr::kMaxDevices> known{};  // 0 unknown, 1 yes, 2 no
  checkDevice(device);
  int8_t v = known[device].load(std::memory_order_relaxed);
  if (v == 0) {
    v = OMR_CALL(omr::deviceProperties(device)).host_addressable ? 1 : 2;
    known[device].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

c10::Scalar readScalar(const at::Tensor& self) {
  if (hostAddressable(self.device().index())) {
    // the host reads the element itself: in traces, the copy a device makes
    HostWorkTrace trace(self.device().index(), "Memcpy DtoH (Device -> Pageable)");
    return at::_local_scalar_dense(hostView(self));
  }
  // one element, copied by the driver
  at::Tensor host = at::empty({}, self.options().device(c10::kCPU));
  host._set_conj(self.is_conj());
  host._set_neg(self.is_neg());
  const char* src = static_cast<const char*>(self.storage().data()) + self.storage_offset() * self.element_size();
  OMR_CALL(omr::memcpy(host.mutable_data_ptr(), src, self.element_size(), omr::CopyKind::kDeviceToHost));
  return at::_local_scalar_dense(host);
}

c10::Storage stageToHost(const c10::Storage& device_storage) {
  c10::Allocator* cpu = c10::GetCPUAllocator();
  const size_t n = device_storage.nbytes();
  c10::Storage host(c10::Storage::use_byte_size_t(), n, cpu->allocate(n), cpu, /*resizable=*/true);
  if (n)
    OMR_CALL(omr::memcpy(host.mutable_data(), device_storage.data(), n, omr::CopyKind::kDeviceToHost));
  return host;
}

void stageToDevice(const c10::Storage& host, const c10::Storage& device_storage) {
  c10::StorageImpl* d = device_storage.unsafeGetStorageImpl();
  const size_t n = host.nbytes();
  if (n != d->nbytes()) {  // the kernel resized it: new device memory of its size
    c10::DataPtr dp = deviceAllocator()->allocate(n);
    d->set_data_ptr_noswap(std::move(dp));
    d->set_nbytes(n);
  }
  if (n) OMR_CALL(omr::memcpy(d->mutable_data(), host.data(), n, omr::CopyKind::kHostToDevice));
}

void writeFromHost(const at::Tensor& device, const at::Tensor& host) {
  if (device.numel() == 0) return;
  at::Tensor src = host;
  if (host.strides() != device.strides() || !host.is_non_overlapping_and_dense()) {
    // the host's values in the device tensor's layout (the bits as they are)
    src = at::empty_strided(device.sizes(), device.strides(), host.options());
    src._set_conj(host.is_conj());
    src._set_neg(host.is_neg());
    src.copy_(host);
  }
  TORCH_INTERNAL_ASSERT(device.is_non_overlapping_and_dense());
  const size_t used = static_cast<size_t>(device.numel()) * device.element_size();  // (same layout on both sides)
  char* dst = static_cast<char*>(device.storage().mutable_data()) + device.storage_offset() * device.element_size();
  const char* s = static_cast<const char*>(src.storage().data()) + src.storage_offset() * src.element_size();
  OMR_CALL(omr::memcpy(dst, s, used, omr::CopyKind::kHostToDevice));
}

}  // namespace openmtia
