// Pinned host memory for mtia: PyTorch's caching host allocator over the
// driver's pinned allocations (pin_memory(), non_blocking copies).
#include <ATen/core/CachingHostAllocator.h>

#include <memory>
#include <optional>
#include <vector>

#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/host_allocator.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {

// Pinned host memory: PyTorch's caching host allocator (the one CUDA's builds
// on) over the runtime's pinned allocations. A freed block is reused only
// after every stream that used it (record_event, called by non_blocking
// copies) has passed an event recorded at the free.
struct PinnedEvent {
  std::unique_ptr<omr::Event, void (*)(omr::Event*)> event{nullptr, &omr::eventDestroy};
};

struct MTIAHostAllocatorImpl final : public at::CachingHostAllocatorImpl<c10::Stream, PinnedEvent> {
 private:
  void allocate_host_memory(size_t size, void** ptr) override { *ptr = OMR_CALL(omr::hostMallocPinned(size)); }
  void free_block(at::HostBlock<c10::Stream>* block) override { omr::hostFreePinned(block->ptr_); }
  // (at a free: it must not throw from a tensor's deleter) A stream of a
  // device that broke (lost, or poisoned by a sticky fault) runs nothing
  // more: the block needs no event of it, and one recorded before is passed.
  void record_stream(std::optional<std::vector<PinnedEvent>>& events, c10::Stream stream) override {
    PinnedEvent e;
    e.event.reset(OMR_CALL(omr::eventCreate(false)));
    try {
      omr::eventRecord(e.event.get(), stream.device_index(), streamId(stream));
    } catch (const omr::Error& err) {
      if (deviceBroke(err)) return;
      throwDriverError(err);
    }
    events->push_back(std::move(e));
  }
  bool query_event(PinnedEvent& e) override {
    try {
      return omr::eventQuery(e.event.get());
    } catch (const omr::Error& err) {
      if (deviceBroke(err)) return true;
      throwDriverError(err);
    }
  }
  static bool deviceBroke(const omr::Error& e) {
    return e.code() == omr::ErrorCode::kDeviceLost || e.code() == omr::ErrorCode::kTaskFailed;
  }
  c10::Stream get_current_stream() const override { return currentStream(currentDevice()); }
  bool stream_is_capturing(c10::Stream) const override { return false; }
};

void freePinnedBlock(void* ctx);
struct MTIAHostAllocator final : public at::CachingHostAllocatorInterface<MTIAHostAllocatorImpl, freePinnedBlock> {};
MTIAHostAllocator& pinnedHost() {  // never destroyed: pinned tensors may outlive static destructors
  static auto* a = new MTIAHostAllocator();
  return *a;
}
void freePinnedBlock(void* ctx) { pinnedHost().free(ctx); }

}  // namespace

c10::Allocator* pinnedAllocator() { return &pinnedHost(); }

void recordPinnedUse(const at::Tensor& host, c10::Stream stream) {
  const c10::DataPtr& dp = host.storage().data_ptr();
  pinnedHost().record_event(dp.get(), dp.get_context(), stream);
}

REGISTER_HOST_ALLOCATOR(c10::DeviceType::MTIA, &pinnedHost());

}  // namespace openmtia
