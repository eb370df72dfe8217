// Host access to device memory: the one place the host side of openmtia
// reads or writes device memory outside device tasks.
//
// Device memory is host-addressable only where the driver says so
// (OMTIA_DEVICE_HOST_ADDRESSABLE). The emulator's is, unless
// OPENMTIA_STRICT_MEMORY=1; a real device's usually is not. Where it is not,
// the host stages: it copies through the driver (a D2H copy into a host
// buffer, the work on the host, an H2D copy back) and never dereferences a
// device pointer. Device tasks (launchOnCurrentStream) are the device's own
// work and use host views (hostView) of device memory directly.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/Storage.h>

namespace openmtia {

// Whether host threads may dereference device memory of `device` (cached).
bool hostAddressable(c10::DeviceIndex device);

// The value of a one-element mtia tensor, read by the host after the
// caller waited for the stream that writes it.
c10::Scalar readScalar(const at::Tensor& self);

// Staging: a host (CPU) copy of a device storage's bytes, resizable by CPU
// kernels; and its bytes written back to the device storage (into its memory,
// or, when the host copy was resized, into new device memory of that size
// that becomes the storage's). Both after the caller waited for the stream.
c10::Storage stageToHost(const c10::Storage& device_storage);
void stageToDevice(const c10::Storage& host, const c10::Storage& device_storage);

// Writes a host tensor's values into a (fresh, non-overlapping and dense)
// mtia tensor of the same sizes, dtype and conj/neg bits, through the driver.
void writeFromHost(const at::Tensor& device, const at::Tensor& host);

}  // namespace openmtia
