// Host views: CPU tensors over the bytes of mtia tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/DispatchKey.h>

namespace openmtia {

// A CPU tensor that views the same (host-addressable) memory as an mtia tensor.
// It does not keep a device block allocated (hostStorageOf): stream-ordered
// reuse makes that safe for a task on the stream, but two buffers that one
// task uses together must be held as device tensors until it has run. Only for
// use after the stream that writes it has been waited for, or inside a task on
// that stream.
at::Tensor hostView(const at::Tensor& t);
// A CPU storage over the same bytes as a device storage; resizable through
// `resize_allocator` when given.
c10::Storage hostStorageOf(const c10::Storage& storage, c10::Allocator* resize_allocator);
at::Tensor hostViewOn(c10::Storage host_storage, const at::Tensor& t);
// A tensor of dispatch key `key` with t's metadata over `storage`.
at::Tensor viewOn(c10::Storage storage, const at::Tensor& t, c10::DispatchKey key);
bool isDense(const at::Tensor& t);

}  // namespace openmtia
