// Host views: CPU tensors over the bytes of mtia tensors (see host_views.h).
#include <c10/core/TensorImpl.h>

#include "runtime/errors.h"
#include "runtime/graphs.h"
#include "runtime/host_views.h"

namespace openmtia {
namespace {
void releaseStorageRef(void* ctx) { c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx)); }
}  // namespace

c10::Storage hostStorageOf(const c10::Storage& storage, c10::Allocator* resize_allocator) {
  // A host view neither frees nor keeps device memory: the host frees a block
  // when its last tensor goes, and the caching allocator makes that safe for
  // the tasks still queued (stream-ordered reuse, record_stream). It holds
  // the storage only when that is host memory (which tasks read later), or
  // while its device's current stream is captured: the graph keeps what its
  // tasks use for as long as it holds them (replays run at any later time).
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  c10::DataPtr dp(storage.mutable_data(), c10::Device(c10::kCPU));
  if (storage.device_type() != kMTIA || isCapturing(storage.device().index())) {
    c10::raw::intrusive_ptr::incref(impl);
    dp = c10::DataPtr(storage.mutable_data(), impl, &releaseStorageRef, c10::Device(c10::kCPU));
  }
  return c10::Storage(c10::Storage::use_byte_size_t(), storage.nbytes(), std::move(dp), resize_allocator,
                      /*resizable=*/resize_allocator != nullptr);
}

at::Tensor hostViewOn(c10::Storage host_storage, const at::Tensor& t) {
  return viewOn(std::move(host_storage), t, c10::DispatchKey::CPU);
}

at::Tensor viewOn(c10::Storage storage, const at::Tensor& t, c10::DispatchKey key) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  at::Tensor v(std::move(impl));
  v._set_conj(t.is_conj());
  v._set_neg(t.is_neg());
  return v;
}

at::Tensor hostView(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == c10::kStrided, "openmtia supports strided tensors only, got ", t.layout());
  return hostViewOn(hostStorageOf(t.storage(), nullptr), t);
}

bool isDense(const at::Tensor& t) { return t.is_non_overlapping_and_dense() && !t.is_conj() && !t.is_neg(); }

}  // namespace openmtia
