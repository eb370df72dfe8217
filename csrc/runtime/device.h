// The current mtia device of each thread (like CUDA's), and device indices.
#pragma once

#include <c10/core/Device.h>

namespace openmtia {

c10::DeviceIndex currentDevice();
void setCurrentDevice(c10::DeviceIndex index);  // validates the index
// For the guard's uncheckedSetDevice: ignores an index out of range.
void uncheckedSetCurrentDevice(c10::DeviceIndex index) noexcept;
c10::DeviceIndex deviceCount() noexcept;
void checkDevice(c10::DeviceIndex index);
// Resolves a possibly index-less mtia device to a concrete index.
c10::DeviceIndex deviceIndexOf(const c10::Device& device);

}  // namespace openmtia
