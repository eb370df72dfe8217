// The current mtia stream of each thread and device (like CUDA's).
#include <array>

#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {
thread_local std::array<int16_t, omr::kMaxDevices> tls_stream{};  // 0 = default stream
}  // namespace

c10::Stream makeStream(c10::DeviceIndex index, omr::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kMTIA, index), static_cast<c10::StreamId>(id));
}

c10::Stream currentStream(c10::DeviceIndex index) {
  if (index < 0) index = currentDevice();
  checkDevice(index);
  return makeStream(index, tls_stream[index]);
}

c10::Stream defaultStream(c10::DeviceIndex index) {
  if (index < 0) index = currentDevice();
  checkDevice(index);
  return makeStream(index, omr::kDefaultStream);
}

void setCurrentStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kMTIA, "expected an mtia stream, got a ", stream.device_type(), " stream");
  OMR_CALL(omr::checkStream(stream.device_index(), streamId(stream)));
  tls_stream[stream.device_index()] = static_cast<int16_t>(stream.id());
}

omr::StreamId currentStreamId(c10::DeviceIndex device) { return tls_stream[device]; }

void syncCurrentStream(c10::DeviceIndex device) { OMR_CALL(omr::streamSynchronize(device, tls_stream[device])); }

}  // namespace openmtia
