// The device allocator: mtia memory through the client's caching allocator.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include "openmtia/caching_allocator.h"

namespace openmtia {

c10::DeviceAllocator* deviceAllocator();
// An allocator that allocates device memory of `device` but labels the
// DataPtr as CPU: used to let host kernels resize device-backed storages.
c10::Allocator* hostLabelledDeviceAllocator(c10::DeviceIndex device);
// The device's caching allocator (statistics, empty_cache, snapshots).
omr::CachingAllocator& deviceCache(c10::DeviceIndex index);

}  // namespace openmtia
