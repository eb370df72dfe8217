// The MTIA device guard (c10::impl::DeviceGuardImplInterface): what torch's
// device-generic code (guards, streams, events, autograd) calls for mtia.
#include <c10/core/DeviceCapability.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/event_checks.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {

omr::Event* asEvent(void* e) { return static_cast<omr::Event*>(e); }

struct MTIAGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kMTIA; }
  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kMTIA);
    auto old = currentDevice();
    if (d.index() != old) setCurrentDevice(d.index());
    return c10::Device(kMTIA, old);
  }
  c10::Device getDevice() const override { return c10::Device(kMTIA, currentDevice()); }
  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kMTIA);
    setCurrentDevice(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    uncheckedSetCurrentDevice(d.index());
  }
  c10::Stream getStream(c10::Device d) const override { return currentStream(d.index()); }
  c10::Stream getDefaultStream(c10::Device d) const override { return defaultStream(d.index()); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override {
    auto idx = d.has_index() ? d.index() : currentDevice();
    return makeStream(idx, OMR_CALL(omr::streamFromPool(idx, high ? -1 : 0)));
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    auto idx = d.has_index() ? d.index() : currentDevice();
    return makeStream(idx, OMR_CALL(omr::streamFromPool(idx, priority)));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto old = currentStream(s.device_index());
    setCurrentStream(s);
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return openmtia::deviceCount(); }
  // Every dtype of CPU tensors (kernels are the CPU's), not the quantized ones.
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    checkDevice(d.has_index() ? d.index() : currentDevice());
    c10::DeviceCapability cap;
    auto& t = cap.capability_data.supported_scalar_types;
    t.has_QInt8 = t.has_QUInt8 = t.has_QInt32 = t.has_QUInt4x2 = t.has_QUInt2x4 = 0;
    return cap;
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (!event) return;
    forgetEvent(event);
    omr::eventDestroy(asEvent(event));
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    if (!*event) *event = omr::eventCreate(flag == c10::EventFlag::BACKEND_DEFAULT);
    OMR_CALL(omr::eventRecord(asEvent(*event), stream.device_index(), streamId(stream)));
    noteEventRecorded(*event);
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    OMR_CALL(omr::streamWaitEvent(stream.device_index(), streamId(stream), asEvent(event)));
    if (EventCheck check = eventCheck(event)) {
      // the waiting stream runs the event's check after its wait (event_checks.h)
      c10::StreamGuard on(stream);
      launchOnCurrentStream(stream.device_index(), "event_check", [check] { (*check)(); },
                            omr::kTaskMayBlock | omr::kTaskUntraced);  // (it may wait for a collective)
    }
  }
  bool queryEvent(void* event) const override { return !event || OMR_CALL(omr::eventQuery(asEvent(event))); }
  void synchronizeEvent(void* event) const override {
    if (event) OMR_CALL(omr::eventSynchronize(asEvent(event)));
  }
  double elapsedTime(void* e1, void* e2, const c10::DeviceIndex) const override {
    TORCH_CHECK(e1 && e2, "Both events must be recorded before calculating elapsed time.");
    return OMR_CALL(omr::eventElapsedMs(asEvent(e1), asEvent(e2)));
  }
  bool queryStream(const c10::Stream& s) const override {
    return OMR_CALL(omr::streamQuery(s.device_index(), streamId(s)));
  }
  void synchronizeStream(const c10::Stream& s) const override {
    OMR_CALL(omr::streamSynchronize(s.device_index(), streamId(s)));
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    OMR_CALL(omr::deviceSynchronize(index < 0 ? currentDevice() : index));
  }
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    deviceAllocator()->recordStream(data_ptr, stream);
  }
};

C10_REGISTER_GUARD_IMPL(MTIA, MTIAGuardImpl);

}  // namespace
}  // namespace openmtia
