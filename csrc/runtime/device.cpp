// The current mtia device of each thread (like CUDA's), and device indices.
#include "runtime/device.h"
#include "runtime/errors.h"

namespace openmtia {
namespace {
thread_local c10::DeviceIndex tls_device = 0;
}  // namespace

c10::DeviceIndex deviceCount() noexcept { return static_cast<c10::DeviceIndex>(omr::deviceCount()); }

void checkDevice(c10::DeviceIndex index) { OMR_CALL(omr::checkDevice(index)); }

c10::DeviceIndex currentDevice() { return tls_device; }

void setCurrentDevice(c10::DeviceIndex index) {
  checkDevice(index);
  tls_device = index;
}

void uncheckedSetCurrentDevice(c10::DeviceIndex index) noexcept {
  if (index >= 0 && index < deviceCount()) tls_device = index;
}

c10::DeviceIndex deviceIndexOf(const c10::Device& device) {
  TORCH_CHECK(device.type() == kMTIA, "expected an mtia device, got ", device);
  c10::DeviceIndex idx = device.has_index() ? device.index() : currentDevice();
  checkDevice(idx);
  return idx;
}

}  // namespace openmtia
